"""Argument checks shared by the dataset generators."""

from cvattn_keras import _validation as check


def _check_positive(**values):
    for name, value in values.items():
        check.positive_int(value, name)


def _non_negative_int(value, name):
    if not check._is_int(value) or value < 0:
        raise ValueError(
            f"`{name}` must be an int >= 0. Received: {name}={value!r}"
        )
    return int(value)


def _non_negative_finite(value, name):
    """A finite float >= 0 (NaN and inf refused). Could move to
    `_validation`."""
    if not check._is_real(value) or not 0 <= value < float("inf"):
        raise ValueError(
            f"`{name}` must be a finite number >= 0. Received: {name}={value!r}"
        )
    return float(value)


def _finite_range(value, name):
    """A `(low, high)` pair of finite floats with low <= high."""
    try:
        low, high = value
    except (TypeError, ValueError):
        low = high = None
    if not (
        check._is_real(low)
        and check._is_real(high)
        and -float("inf") < low <= high < float("inf")
    ):
        raise ValueError(
            f"`{name}` must be a pair (low, high) of finite numbers with "
            f"low <= high. Received: {name}={value!r}"
        )
    return float(low), float(high)
