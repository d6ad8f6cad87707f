"""Argument checks shared by the layers: each returns the value as a plain
Python number (NumPy scalars accepted) or raises a `ValueError` naming the
argument and echoing what was received. Real-valued checks reject inf and
NaN."""

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


def positive_int(value, name, allow_none=False):
    if value is None and allow_none:
        return None
    if not _is_int(value) or value < 1:
        kind = "a positive integer" + (" or None" if allow_none else "")
        raise ValueError(f"`{name}` must be {kind}. Received: {name}={value!r}")
    return int(value)


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
