"""The mathematics of the complex normalization layers: 2x2 whitening.

A complex feature is a sample of the 2-D real vector (Re, Im). Whitening
normalizes it by the inverse square root of its 2x2 covariance

    C = [[V_rr, V_ri],
         [V_ri, V_ii]]

so that real and imaginary parts come out decorrelated with equal variance.
This module holds the functional part (`keras.ops` only, no layers) of
`ComplexLayerNormalization`, `ComplexRMSNormalization` (in
`normalization`) and `ComplexBatchNormalization` (in
`batch_normalization`), and the argument checks they share.

For a symmetric positive definite 2x2 matrix M, with s = sqrt(det M) and
t = sqrt(tr M + 2 s):

    sqrtm(M) = (M + s I) / t,      sqrtm(M)^-1 = adj(M + s I) / (s t),

so no eigendecomposition is needed and every operation is elementwise.

Numerics. Statistics are computed in float32 (float64 under a float64
policy), also under mixed precision. The data are rescaled by powers of two
before any square, so every norm here is scale-invariant over the whole
float range where the token's spread is well above epsilon (or, with
`epsilon=0`, above about 1e-19, the floor's absolute part): inputs from
about 1e-15 to 1e30 and beyond give the same outputs, and every input
finite outputs and finite gradients (an all-zero one too). The
whitening determinant is computed as `v_pp * var(q - beta p)` (a product
of positive numbers, see `_whitening_statistics`) rather than `v_rr v_ii -
v_ri^2`, which cancels for improper features (Im close to c Re): the
output's error grows like `eps_mach * sqrt(cond(C))` instead of
`eps_mach * cond(C)`.

Integer TFLite files (`_tracing.plain_statistics()`, set by the export's
calibrated modes): the layer norms skip the power-of-two rescaling (its
CEIL / FLOOR / POW have no integer kernels) and compute with MUL, MEAN,
MAXIMUM and RSQRT only, every intermediate of order 1 (see
`_plain_whitening`); batch normalization at inference needs nothing
different (its statistics are constants the converter folds).
"""

import math

import keras
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import complex as cx


def _check_epsilon(epsilon, allow_zero=False):
    """A finite `epsilon > 0`, or also 0 with `allow_zero`."""
    if allow_zero:
        if not check._is_real(epsilon) or epsilon < 0:
            raise ValueError(
                "`epsilon` must be a finite number >= 0. "
                f"Received: epsilon={epsilon!r}"
            )
        return float(epsilon)
    return check.greater_than(epsilon, "epsilon")


def _check_choice(value, choices, name):
    """`value` if it is one of the strings `choices`, else a `ValueError`."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"`{name}` must be one of {list(choices)}. "
            f"Received: {name}={value!r}"
        )
    return value


def _features(input_shape, layer):
    """The number of complex features of a stacked input shape."""
    input_shape = tuple(input_shape)
    if len(input_shape) < 2 or input_shape[-1] is None:
        raise ValueError(
            f"{layer} expects inputs (batch, ..., 2 * features) with a known "
            f"last axis. Received: input_shape={input_shape}"
        )
    return cx.check_even(input_shape[-1], "input_shape[-1]", input_shape) // 2


def _sqrt_2x2(a, d, b):
    """Entries `(p, q, r)` of `sqrtm([[a, b], [b, d]])` for symmetric positive
    semi-definite input (elementwise)."""
    # The floor keeps s and t (and their gradients) finite when M is
    # singular; it shifts the result by about 1e-6 / t.
    s = ops.sqrt(ops.maximum(a * d - b * b, 0.0) + 1e-12)
    t = ops.sqrt(a + d + 2.0 * s)
    return (a + s) / t, (d + s) / t, b / t


def _scale_sqrt(w0, w1, w2):
    """Entries `(p, q, r)` of `sqrtm(Gamma)`, the learnable scale of the
    reference's norms: `Gamma = [[w0^2, rho], [rho, w1^2]]` with
    `rho = (2 sigmoid(w2) - 1) |w0 w1|`, positive semi-definite for any
    `(w0, w1, w2)`."""
    rho = (2.0 * ops.sigmoid(w2) - 1.0) * ops.abs(w0 * w1)
    return _sqrt_2x2(w0 * w0, w1 * w1, rho)


# --------------------------------------------------------------------------
# Scale-invariant statistics.
#
# Every statistic is computed on data rescaled by powers of two (exact in
# binary floating point), chosen so that the rescaled, centred data lie in
# [-1, 1]: squares can neither overflow (inputs up to the float maximum)
# nor lose the data to underflow (inputs down to the smallest normal). The
# scales are constants for differentiation (`stop_gradient`): the whitened
# output is exactly invariant to them, so the gradient is exact.
# --------------------------------------------------------------------------

# Exponent range of the power-of-two scales per statistics dtype: wide
# enough for the whole range of normal numbers, narrow enough that 2^-k and
# 2^(2k) stay finite where they are used.
_EXPONENTS = {"float32": (-120, 120), "float64": (-1000, 1000)}

# A relative floor on epsilon after rescaling, so that a singular 2x2
# covariance (perfectly improper features) at a scale where epsilon is
# below the float resolution still has a positive determinant: it only
# acts where epsilon / variance < 2^-60, far below float32 and float64
# resolution of the result.
_EPSILON_FLOOR = 2.0**-60

# The layer norms with epsilon = 0 (the reference's arithmetic) put a
# floor on the variances instead: `max((eps_mach 2^k0)^2, tiny)`, 2^k0 the
# token's scale (the power of two at or above its largest |x|), `eps_mach`
# the dtype's machine epsilon and `tiny` about its smallest normal number.
# A token whose spread is below the resolution of its own values counts as
# constant: without the floor its whitening would divide by zero (NaN in
# the reference). `tiny` bounds the derivatives at an all-zero token
# (about 1 / sqrt(tiny)). The floor changes the output of any other token
# by about `floor / (2 variance) = 2 r^2` relative, where `r = eps_mach
# 2^k0 / (2 std)` is about the relative error that rounding the token's
# values costs anyway: 7e-13 in float32 for a spread (std) of a tenth of
# the scale, and never more than that rounding. The exponents (base 2) of
# `eps_mach` and `sqrt(tiny)`:
_ZERO_EPSILON_EXPONENTS = {
    "float32": (-23.0, -63.0),
    "float64": (-52.0, -511.0),
}


def _zero_epsilon_exponent(k0, dtype):
    """The exponent `k` (a tensor) of the floor `(2^k 2^k0)^2` of the
    layer norms with epsilon = 0, in the data's units scaled by 2^-k0."""
    relative, tiny = _ZERO_EPSILON_EXPONENTS[dtype]
    return ops.maximum(relative, tiny - k0)


# The plain statistics of integer files (no rescaling, so no relative
# floor) use the layers' default epsilon in place of 0: an integer file's
# error (1e-2) dwarfs the difference, while a tiny epsilon would stretch
# the calibrated range of `rsqrt(variance + epsilon)` at silent or padded
# tokens (to about 7e5 at 1e-12, against 224 at 1e-5), costing every other
# token its resolution.
_PLAIN_ZERO_EPSILON = 1e-5


def _exponent(largest, dtype):
    """The smallest integer `k` (as a float tensor) with `2^k >= largest`,
    clipped to the dtype's range; `largest = 0` gives the lowest. No
    gradient flows through it."""
    low, high = _EXPONENTS[dtype]
    largest = ops.stop_gradient(largest)
    positive = largest > 0
    safe = ops.where(positive, largest, ops.ones_like(largest))
    k = ops.where(positive, ops.ceil(ops.log2(safe)), low)
    return ops.clip(k, low, high)


def _pow2(k, dtype):
    return ops.power(ops.cast(2.0, dtype), k)


def _epsilon_exponent(epsilon):
    """The smallest integer `k` with `2^(2k) >= epsilon`."""
    return float(math.ceil(0.5 * math.log2(epsilon)))


def _largest(real, imag):
    return ops.maximum(ops.abs(real), ops.abs(imag))


def _safe_ratio(numerator, divisor, dtype):
    """`numerator / divisor` where `divisor > 0`, else 0. The divisor is
    brought into [1, 2) by a power of two (exact) first: the derivative of
    `a / b` squares `b`, which underflows for the tiny variances of data
    far below sqrt(epsilon) (a NaN gradient on JAX)."""
    nonzero = divisor > 0
    safe = ops.where(nonzero, divisor, ops.ones_like(divisor))
    exponent = ops.floor(ops.log2(ops.stop_gradient(safe)))
    unit = _pow2(-ops.clip(exponent, *_EXPONENTS[dtype]), dtype)
    return ops.where(nonzero, (numerator * unit) / (safe * unit), 0.0)


def _whitening_statistics(
    real,
    imag,
    mean,
    k0,
    epsilon,
    inflation=0.0,
    scale=None,
    inverse=False,
    shift=False,
):
    """Whitens `(real, imag)` by its own covariance, scale-invariantly.

    Args:
        real, imag: the data (the statistics dtype).
        mean: `mean(*tensors) -> list`, the (weighted) means over the
            statistics' axes, each shaped to broadcast against the data.
        k0: the smallest integer `k` (a float tensor, see `_exponent`)
            with `2^k` at least the (unmasked) maximum of `|real|` and
            `|imag|` over the statistics' axes, broadcastable likewise; the
            same on every replica when the statistics are global.
        epsilon: added to both variances (in the data's units). 0 (a
            Python number) for none: the variances then have a floor of
            `max((eps_mach 2^k0)^2, tiny)` instead (see
            `_ZERO_EPSILON_EXPONENTS`).
        inflation: each variance is also inflated by `inflation` times
            itself (`1 / (E - 1)` turns a biased variance into the
            unbiased one of the reference estimator); a float or a tensor
            broadcastable against the statistics.
        scale: optional entries `(p, q, r)` of a symmetric 2x2 matrix
            `S = [[p, r], [r, q]]` (per feature) applied to the centred
            data before the whitening: the result is then
            `C^-1/2 S (x - mean)`, the order of the reference's batch norm
            (one 2x2 product `C^-1/2 S` per feature, then one pass over the
            data).
        inverse: whether to also return the entries of `C^-1/2`.
        shift: subtract the first entry of the last axis (the statistics'
            axis: layer norms only) before taking the mean, so that a
            constant token centres to exactly 0 (the mean of `n` equal
            floats is often off by an ulp or two), and its whitening is
            exactly 0.

    Returns:
        `(real, imag)` whitened, and the statistics in the data's units
        `(mean_r, mean_i, v_rr, v_ii, v_ri)` (biased), followed, with
        `inverse=True`, by `(w_rr, w_ii, w_ri)`, the entries of the inverse
        square root `(C + diag(e_r, e_i))^-1/2` (with the inflation and
        epsilon) in the data's units.

    One power-of-two scale `2^k0`, from the largest |x|, brings the data
    into [-1, 1] before any square. A second one, `2^k1`, from the larger
    variance (and sqrt(epsilon)), brings the statistics near 1 so that the
    2x2 algebra and its derivatives stay in range; it only touches
    per-token (per-feature) numbers, not the data.

    Three data passes: the mean; the second moments of the centred data;
    and the variance of `u = q - beta p`, the part of the non-pivot
    component `q` uncorrelated with the pivot `p` (the part with the larger
    variance, so `|beta| <= 1`). `det = v_pp var(u)` is then a product of
    two accurately computed positive numbers: its relative error is about
    `eps_mach sqrt(v_qq / var(u))` (a square root of the condition number),
    where `v_rr v_ii - v_ri^2` loses `eps_mach v_rr v_ii / det` (the
    condition number itself).

    Derivatives: the scales are constants (`stop_gradient`), as the
    whitened output is exactly invariant to them. The accurate determinant
    carries the derivative of `v_rr v_ii - v_ri^2`, the same function
    (`_with_derivative_of`), so the backward pass has no pass over `u` and
    a shorter chain of per-token operations (XLA fuses such chains into
    the loops over the data and repeats them for every element).
    """
    dtype = keras.backend.standardize_dtype(real.dtype)
    low, high = _EXPONENTS[dtype]
    unit = _pow2(-k0, dtype)
    real, imag = real * unit, imag * unit
    if shift:
        # Exact for a constant token (x - x0 = 0); the centred data and
        # their derivatives do not depend on the shift.
        first_r, first_i = (
            ops.stop_gradient(part[..., :1]) for part in (real, imag)
        )
        real, imag = real - first_r, imag - first_i
    mean_r, mean_i = mean(real, imag)
    real, imag = real - mean_r, imag - mean_i
    if shift:
        mean_r, mean_i = mean_r + first_r, mean_i + first_i
    v_rr, v_ii, v_ri = mean(real * real, imag * imag, real * imag)
    # k1: the larger variance to (1/4, 1], and in total (k0 + k1) at
    # least sqrt(epsilon), so that the rescaled epsilon is at most 1 (with
    # epsilon = 0, k1 at least the floor's exponent, likewise). The
    # factor 2^-2k1 is applied as two factors 2^-k1, each representable.
    top = ops.stop_gradient(ops.maximum(v_rr, v_ii))
    least = (
        _epsilon_exponent(epsilon) - k0
        if epsilon
        else _zero_epsilon_exponent(k0, dtype)
    )
    k1 = ops.maximum(ops.ceil(0.5 * ops.log2(top)), least)
    k1 = ops.clip(k1, low, high)
    half = _pow2(-k1, dtype)
    v_rr, v_ii, v_ri = (v * half * half for v in (v_rr, v_ii, v_ri))
    total = k0 + k1
    if epsilon:
        eps = epsilon * _pow2(-2.0 * total, dtype)
    else:
        # The floor (2^least 2^k0)^2, in the rescaled units: at most 1.
        eps = _pow2(2.0 * (least - k1), dtype)
    eps = ops.maximum(eps, _EPSILON_FLOOR)
    # det = v_pp var(u), u = q - beta p as a combination of (real, imag).
    pivot = v_rr >= v_ii
    v_pp = ops.stop_gradient(ops.where(pivot, v_rr, v_ii))
    beta = ops.stop_gradient(_safe_ratio(v_ri, v_pp, dtype))
    a, b = ops.where(pivot, -beta, 1.0), ops.where(pivot, 1.0, -beta)
    u = ops.stop_gradient(a * real + b * imag)
    (v_perp,) = mean(u * u)
    det = v_pp * (v_perp * half * half)
    det = _with_derivative_of(det, v_rr * v_ii - v_ri * v_ri)
    w_rr, w_ii, w_ri = (
        w * half
        for w in _inverse_sqrt(
            v_rr,
            v_ii,
            v_ri,
            det,
            eps + inflation * v_rr,
            eps + inflation * v_ii,
        )
    )
    if scale is None:
        whitened = (w_rr * real + w_ri * imag, w_ri * real + w_ii * imag)
    else:
        # M = C^-1/2 S per feature, then M (x - mean).
        p, q, r = scale
        m_rr, m_ri = w_rr * p + w_ri * r, w_rr * r + w_ri * q
        m_ir, m_ii = w_ri * p + w_ii * r, w_ri * r + w_ii * q
        whitened = (m_rr * real + m_ri * imag, m_ir * real + m_ii * imag)
    # In the data's units; a variance beyond the float range is inf (never
    # 0 * inf = NaN: the factor 2^(2 total) is applied as two).
    unit, root = _pow2(k0, dtype), _pow2(total, dtype)
    stats = (mean_r * unit, mean_i * unit)
    stats += tuple(v * root * root for v in (v_rr, v_ii, v_ri))
    if inverse:
        # w maps data scaled by 2^-k0: in the data's units, w 2^-k0 (at
        # most 1 / sqrt(epsilon), so representable for any epsilon above
        # about 1e-76 in float32).
        down = _pow2(-k0, dtype)
        stats += tuple(w * down for w in (w_rr, w_ii, w_ri))
    return whitened, stats


def _with_derivative_of(value, proxy):
    """`value` in the forward pass, with the derivative of `proxy`, an
    expression mathematically equal to it: `proxy - stop_gradient(proxy)`
    is exactly 0 and carries the derivative."""
    return ops.stop_gradient(value) + (proxy - ops.stop_gradient(proxy))


def _inverse_sqrt(v_rr, v_ii, v_ri, det, e_r, e_i):
    """Entries `(w_rr, w_ii, w_ri)` of `(C + diag(e_r, e_i))^-1/2`
    for `C = [[v_rr, v_ri], [v_ri, v_ii]]` of determinant `det` (given, so
    that it can be computed accurately) and non-negative `e_r, e_i`.

    With `s = sqrt(det')`, `t = sqrt(tr' + 2 s)` of the regularised matrix,
    the inverse square root is `[[d + s, -b], [-b, a + s]] / (s t)`. Its
    determinant `det' = det + v_rr e_i + e_r v_ii + e_r e_i` is a sum of
    non-negative terms: nothing cancels, whatever the correlation.
    """
    s = ops.sqrt(det + v_rr * e_i + e_r * v_ii + e_r * e_i)
    t = ops.sqrt(v_rr + v_ii + e_r + e_i + 2.0 * s)
    st = s * t
    return (v_ii + e_i + s) / st, (v_rr + e_r + s) / st, -v_ri / st


# --------------------------------------------------------------------------
# Plain statistics, for integer TFLite files.
#
# Under `_tracing.plain_statistics()` (the export's calibrated modes) the
# layer norms compute their statistics without the power-of-two rescaling:
# its CEIL / FLOOR / POW ops have no integer kernels, and calibration
# bounds the ranges anyway. Only MUL, ADD, SUB, MEAN, MAXIMUM and RSQRT
# remain (TFLite's 16-bit activation mode has RSQRT but neither DIV nor
# SQRT, nor SQUARE: squares are written as products). The numbers are the
# default path's for inputs well inside the float range; the determinant
# is the direct `(v_rr + e_r)(v_ii + e_i) - v_ri^2`, which loses
# `eps_mach * cond(C)` relative for improper features.
# --------------------------------------------------------------------------


def _plain_whitening(real, imag, epsilon, inflation):
    """`(real, imag)` whitened by their own covariance over the last axis
    (the plain statistics of `_whitening_statistics`, no scale).

    `epsilon` is added to both variances, each also inflated by
    `inflation` times itself (as in `_whitening_statistics`).

    Every intermediate is kept of order 1, whatever the token's scale, as
    int8 needs (a tensor's range is calibrated once for all tokens, so a
    per-token statistic like `det^-1/2 ~ scale^-2` would leave the tokens
    of large scale no resolution): the centred data are divided by the
    square root of the (regularized) trace `tau = a + d`, and the 2x2
    algebra runs on the covariance of the result, whose entries lie in
    [0, 1] (trace 1).
    """
    real = real - ops.mean(real, axis=-1, keepdims=True)
    imag = imag - ops.mean(imag, axis=-1, keepdims=True)
    grow = 1.0 + inflation

    def variances(real, imag):
        return [
            ops.mean(p * q, axis=-1, keepdims=True)
            for p, q in ((real, real), (imag, imag), (real, imag))
        ]

    v_rr, v_ii, _ = variances(real, imag)
    unit = ops.rsqrt((v_rr + v_ii) * grow + 2.0 * epsilon)  # tau^-1/2
    real, imag = real * unit, imag * unit
    v_rr, v_ii, v_ri = variances(real, imag)
    eps = epsilon * (unit * unit)  # epsilon / tau, at most 1/2
    a, d = v_rr * grow + eps, v_ii * grow + eps  # a + d = 1
    # det = (v_rr + eps)(v_ii + eps) - v_ri^2 >= eps^2 in exact
    # arithmetic (C is positive semi-definite); the floor keeps rounding
    # from taking it lower, and adds nothing otherwise.
    det = ops.maximum(a * d - v_ri * v_ri, eps * eps)
    # (C + e)^-1/2 = [[d + s, -b], [-b, a + s]] / (s t), s = sqrt(det),
    # t = sqrt(a + d + 2 s), with 1 / s = rsqrt(det).
    root = ops.rsqrt(det)
    s = det * root
    inverse = root * ops.rsqrt(a + d + 2.0 * s)
    w_rr, w_ii, w_ri = (d + s) * inverse, (a + s) * inverse, v_ri * inverse
    return w_rr * real - w_ri * imag, w_ii * imag - w_ri * real


def _plain_standardize(part, epsilon):
    """`(part - mean) / sqrt(var + epsilon)` over the last axis."""
    part = part - ops.mean(part, axis=-1, keepdims=True)
    variance = ops.mean(part * part, axis=-1, keepdims=True)
    return part * ops.rsqrt(variance + epsilon)


def _mix(real, imag, rr, ri, ir, ii):
    """`(rr real + ri imag, ir real + ii imag)` for quantized `real, imag`,
    each product a point where an integer file rounds
    (`_tracing.quantize`); the sums are the caller's to quantize (the last
    ones feed a concatenation: see `_tracing.quantize_concatenated`)."""
    q = _tracing.quantize
    return q(rr * real) + q(ri * imag), q(ir * real) + q(ii * imag)


def whitening(v_rr, v_ii, v_ri, epsilon):
    """The entries `(w_rr, w_ii, w_ri)` of `(C + epsilon I)^-1/2` for given
    covariance entries `v_rr, v_ii, v_ri` (the moving statistics of batch
    normalization at inference). All arguments broadcast.

    The statistics are rescaled by a power of two so that the larger
    variance (or epsilon) is at most 1. With no data pass available, the
    determinant is `v_pp (v_qq - beta v_pq)` with `p` the part of the
    larger variance and `beta = v_pq / v_pp`: the difference has a relative
    error of about `eps_mach` times the condition number of the covariance.
    """
    dtype = keras.backend.standardize_dtype(v_rr.dtype)
    top = ops.maximum(ops.maximum(v_rr, v_ii), epsilon)
    k = ops.ceil(0.5 * ops.log2(ops.stop_gradient(top)))
    k = ops.clip(k, *_EXPONENTS[dtype])
    square = _pow2(-2.0 * k, dtype)
    v_rr, v_ii, v_ri = v_rr * square, v_ii * square, v_ri * square
    eps = ops.maximum(epsilon * square, _EPSILON_FLOOR)
    pivot = v_rr >= v_ii
    v_pp = ops.where(pivot, v_rr, v_ii)
    v_qq = ops.where(pivot, v_ii, v_rr)
    beta = _safe_ratio(v_ri, v_pp, dtype)
    v_perp = ops.maximum(v_qq - beta * v_ri, 0.0)
    return tuple(
        w * _pow2(-k, dtype)
        for w in _inverse_sqrt(v_rr, v_ii, v_ri, v_pp * v_perp, eps, eps)
    )


def _stat_dtype(layer):
    """Statistics in float32, or float64 under a float64 policy."""
    return "float64" if layer.compute_dtype == "float64" else "float32"


def _global_max(k, dtype):
    """The maximum of the exponents `k` `(E,)` over all replicas, with
    `keras.ops` only: `ops.moments(..., synchronized=True)` all-reduces a
    one-hot encoding of each replica's exponent (a few hundred numbers per
    feature), and the highest exponent present anywhere is taken."""
    low, high = _EXPONENTS[dtype]
    size = int(high - low) + 1
    onehot = ops.one_hot(ops.cast(k - low, "int32"), size, dtype=dtype)
    present, _ = ops.moments(
        ops.expand_dims(onehot, 0), axes=(0,), synchronized=True
    )
    index = ops.where(present > 0, ops.arange(size, dtype=dtype), -1.0)
    return ops.max(index, axis=-1) + low
