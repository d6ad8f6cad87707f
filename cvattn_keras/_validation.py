"""Argument checks shared by the layers: each returns the value as a plain
Python number (NumPy scalars accepted) or raises a `ValueError` naming the
argument and echoing what was received. Real-valued checks reject inf and
NaN."""

import argparse
import math
import numbers


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value):
    """A finite real number (not a bool, inf or NaN)."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def static_size(size):
    """`size` as an int where it is known while tracing (a Python or NumPy
    int), else `None`: an unknown size (`None`) or a symbolic one, whose
    value only the run knows: a `SymInt` under `torch.export`, a dimension
    expression under `jax.export`, a tensor under TorchScript's tracer.
    Shape checks skip such sizes: comparing them as values would fail, or
    tie the traced graph to one value of the size."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        return int(size)
    return None


def static_shape(shape):
    """The tuple of `static_size` of each axis of `shape` (`None` for an
    unknown or symbolic size)."""
    return tuple(static_size(size) for size in shape)


def positive_int(value, name, allow_none=False):
    if value is None and allow_none:
        return None
    if not _is_int(value) or value < 1:
        kind = "a positive integer" + (" or None" if allow_none else "")
        raise ValueError(f"`{name}` must be {kind}. Received: {name}={value!r}")
    return int(value)


def non_negative_int(value, name):
    """An int >= 0 (bools refused)."""
    if not _is_int(value) or value < 0:
        raise ValueError(
            f"`{name}` must be an int >= 0. Received: {name}={value!r}"
        )
    return int(value)


def non_negative_float(value, name):
    """A finite float >= 0 (NaN, inf and bools refused)."""
    if not _is_real(value) or value < 0:
        raise ValueError(
            f"`{name}` must be a finite number >= 0. Received: {name}={value!r}"
        )
    return float(value)


def boolean(value, name):
    """A bool (NumPy's `bool_` too): not an int, a string or None."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise ValueError(
            f"`{name}` must be True or False. Received: {name}={value!r}"
        )
    return bool(value)


def seed(value, name="seed"):
    if value is None:
        return None
    if not _is_int(value):
        raise ValueError(
            f"`{name}` must be an int or None. Received: {name}={value!r}"
        )
    return int(value)


def rate(value, name):
    """A probability-like float in [0, 1) (NaN rejected)."""
    if not _is_real(value) or not 0 <= value < 1:
        raise ValueError(
            f"`{name}` must be a float in [0, 1). Received: {name}={value!r}"
        )
    return float(value)


def greater_than(value, name, bound=0.0, allow_none=False):
    """A finite float strictly greater than `bound` (inf and NaN rejected)."""
    if value is None and allow_none:
        return None
    if not _is_real(value) or not value > bound:
        raise ValueError(
            f"`{name}` must be a finite number > {bound:g}"
            f"{' or None' if allow_none else ''}. Received: {name}={value!r}"
        )
    return float(value)


def positive_ints(value, name, count=None):
    """A tuple of positive ints from a non-empty sequence (a list, tuple or
    1-D array); with `count`, one int is repeated `count` times and a
    sequence must have exactly `count` entries."""
    if count is not None and _is_int(value):
        value = (value,) * count
    try:
        items = [
            item.item() if hasattr(item, "item") else item for item in value
        ]
    except TypeError:
        items = None
    if not items or isinstance(value, (str, bytes)):
        raise ValueError(
            f"`{name}` must be a non-empty sequence of positive integers"
            f"{' or one positive integer' if count is not None else ''}. "
            f"Received: {name}={value!r}"
        )
    for item in items:
        if not _is_int(item) or item < 1:
            raise ValueError(
                f"`{name}` must hold positive integers. "
                f"Received: {name}={value!r}"
            )
    if count is not None and len(items) != count:
        raise ValueError(
            f"`{name}` must have {count} entries, one per block. "
            f"Received: {name}={value!r}"
        )
    return tuple(int(item) for item in items)


def positive_int_argument(text):
    """An `argparse` type for the command lines: a positive int, or the
    parser's one-line error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer, got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be a positive integer, got {value}"
        )
    return value
