"""Argument checks shared by the dataset generators."""

from cvattn_keras import _validation as check


def _check_positive(**values):
    for name, value in values.items():
        check.positive_int(value, name)


_non_negative_int = check.non_negative_int
_non_negative_finite = check.non_negative_float


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
