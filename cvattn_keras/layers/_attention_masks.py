"""The static checks of attention masks that the attention layer and the
transformer blocks share."""

import numpy as np

from cvattn_keras import attention as core


def check_attention_mask_shape(
    mask_shape, query_shape, value_shape, num_heads, name
):
    """Raises a `ValueError` naming `name` unless the static `mask_shape`
    of an attention mask broadcasts to `(T, S)`, `(B, T, S)` or
    `(B, num_heads, T, S)` (by its rank), for a query `(B, T, ...)` and a
    value `(B, S, ...)`."""
    shape = tuple(mask_shape)
    batch, length = tuple(query_shape)[:2]
    keys = tuple(value_shape)[1]
    targets = {
        2: ((length, keys), "(T, S)"),
        3: ((batch, length, keys), "(B, T, S)"),
        4: ((batch, num_heads, length, keys), "(B, num_heads, T, S)"),
    }
    if len(shape) not in targets:
        raise ValueError(
            f"`{name}` must have rank 2 (T, S), 3 (B, T, S) or 4 "
            f"(B, num_heads, T, S) and broadcast to (B, T, S) = "
            f"{targets[3][0]}. Received: {name}.shape={shape}"
        )
    target, layout = targets[len(shape)]
    core.check_mask_shape(shape, target, name, layout)


def mask_shape(mask):
    """The static shape of a mask given as a tensor, array or nested
    list."""
    shape = getattr(mask, "shape", None)
    return tuple(shape) if shape is not None else np.shape(mask)
