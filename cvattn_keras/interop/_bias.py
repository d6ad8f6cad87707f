"""The redundant bias pair of the reference's `ComplexLinear` and
`Complex_Conv1d`.

The reference adds two biases, `b_r` and `b_i`, so that the effective
complex bias is `(b_r - b_i) + i (b_r + b_i)`: `_pair_to_bias` computes it
(in float64, for the loader to round once), and `bias_to_pair` searches a
float32 pair that loads back bit-exactly where one exists (see "The
redundant bias pair" in the docstring of `cvattn_keras.interop`).
"""

import numpy as np

# The float32 neighbours searched per part of a bias pair: -2 ... +2 units
# in the last place (every loader-produced bias needed at most 1).
_BIAS_SEARCH_ULPS = 2


def _pair_to_bias(b_r, b_i):
    """The loader's effective bias `(b_r - b_i, b_r + b_i)`, in float64 (the
    caller rounds once to the variables' dtype)."""
    b_r = np.asarray(b_r, np.float64)
    b_i = np.asarray(b_i, np.float64)
    return b_r - b_i, b_r + b_i


def _loads_to(b_r, b_i, dtype):
    real, imag = _pair_to_bias(b_r, b_i)
    return real.astype(dtype), imag.astype(dtype)


def _step(values, count):
    """`values` moved by `count` float32 units in the last place."""
    direction = np.float32(np.inf if count > 0 else -np.inf)
    for _ in range(abs(count)):
        values = np.nextafter(values, direction).astype(np.float32)
    return values


def bias_to_pair(bias_real, bias_imag):
    """A float32 pair `(b_r, b_i)` for the reference's `Linear_real.bias`
    and `Linear_img.bias` whose effective bias `(b_r - b_i, b_r + b_i)`,
    computed in float64 and rounded to float32, is `(bias_real,
    bias_imag)` bit for bit wherever such a pair exists (see the
    docstring of `cvattn_keras.interop`); elsewhere the searched pair that
    loads nearest to it (within one unit in the last place of the larger
    part).

    Returns `(b_r, b_i, exact)`, `exact` a boolean array: where the pair
    loads back bit-exactly.
    """
    x = np.asarray(bias_real, np.float32)
    y = np.asarray(bias_imag, np.float32)
    wide_x, wide_y = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        base_r = ((wide_x + wide_y) / 2).astype(np.float32)
        base_i = ((wide_y - wide_x) / 2).astype(np.float32)
    b_r, b_i = base_r.copy(), base_i.copy()
    exact = np.zeros(x.shape, bool)
    # Elsewhere the candidate with the smallest error, in units in the last
    # place of each part (the larger of the two).
    unit_x = np.spacing(np.abs(x)).astype(np.float64)
    unit_y = np.spacing(np.abs(y)).astype(np.float64)
    best = np.full(x.shape, np.inf)
    span = range(-_BIAS_SEARCH_ULPS, _BIAS_SEARCH_ULPS + 1)
    # Nearest candidates first.
    offsets = sorted(
        ((a, b) for a in span for b in span),
        key=lambda p: abs(p[0]) + abs(p[1]),
    )
    with np.errstate(over="ignore", invalid="ignore"):
        for a, b in offsets:
            if exact.all():
                break
            cand_r, cand_i = _step(base_r, a), _step(base_i, b)
            got_x, got_y = _loads_to(cand_r, cand_i, np.float32)
            error = np.maximum(
                np.abs(got_x.astype(np.float64) - x) / unit_x,
                np.abs(got_y.astype(np.float64) - y) / unit_y,
            )
            hit = (
                ~exact
                & (got_x.view(np.uint32) == x.view(np.uint32))
                & (got_y.view(np.uint32) == y.view(np.uint32))
            )
            better = ~exact & (hit | (error < best))
            b_r[better], b_i[better] = cand_r[better], cand_i[better]
            best = np.where(better, error, best)
            exact |= hit
    return b_r, b_i, exact
