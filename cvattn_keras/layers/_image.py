"""Argument and shape checks shared by the image layers (pooling,
upsampling, patches) on stacked, channels-last images `(B, H, W, 2C)`."""

import numbers

from cvattn_keras import _validation as check
from cvattn_keras import complex as cx


def pair(value, name, minimum=1):
    """`value` as a pair of ints `(height, width)`, each at least `minimum`
    (1: positive): one int is used for both; a sequence must hold exactly
    two. Anything else is a `ValueError` naming the argument and echoing
    the value."""
    items = value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        items = (value, value)
    try:
        items = tuple(
            item.item() if hasattr(item, "item") else item for item in items
        )
    except TypeError:
        items = ()
    if (
        isinstance(value, (str, bytes))
        or len(items) != 2
        or not all(
            isinstance(item, numbers.Integral)
            and not isinstance(item, bool)
            and item >= minimum
            for item in items
        )
    ):
        kind = "positive int" if minimum == 1 else f"int >= {minimum}"
        raise ValueError(
            f"`{name}` must be a {kind} or a pair of {kind}s "
            f"(height, width). Received: {name}={value!r}"
        )
    return tuple(int(item) for item in items)


def padding(value):
    """`"valid"` or `"same"` (any case), lower-cased."""
    if isinstance(value, str) and value.lower() in ("valid", "same"):
        return value.lower()
    raise ValueError(
        f"`padding` must be 'valid' or 'same'. Received: padding={value!r}"
    )


def check_image(layer, input_shape, what="2 * channels"):
    """Checks that `input_shape` is a stacked image `(B, H, W, 2C)` with a
    known, even last axis; returns `C`, the complex channels."""
    input_shape = tuple(input_shape)
    if len(input_shape) != 4 or input_shape[-1] is None:
        raise ValueError(
            f"{type(layer).__name__} expects stacked channels-last images "
            f"(batch, height, width, {what}) with a known last axis. "
            f"Received: input_shape={input_shape}"
        )
    return cx.check_even(input_shape[-1], "input_shape[-1]", input_shape) // 2


def spatial(input_shape):
    """The static `(H, W)` of an image shape (`None` where unknown or
    symbolic)."""
    return check.static_size(input_shape[1]), check.static_size(input_shape[2])


def pooled_size(size, pool, stride, padding):
    """The output size of a pooling window `pool` with `stride` over
    `size` samples (Keras' arithmetic); `None` for an unknown size."""
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    return (size - pool) // stride + 1
