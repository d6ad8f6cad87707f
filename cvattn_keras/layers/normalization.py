"""Complex normalization layers: 2x2 whitening (layer and batch) and RMS.

A complex feature is a sample of the 2-D real vector (Re, Im). Whitening
normalizes it by the inverse square root of its 2x2 covariance

    C = [[V_rr, V_ri],
         [V_ri, V_ii]]

so that real and imaginary parts come out decorrelated with equal variance,
then applies a learnable 2x2 scale and a complex bias (Trabelsi et al., "Deep
Complex Networks", 2018; Eilers & Jiang, 2023, §3.3).
`ComplexBatchNormalization(convention="reference")` follows the reference
code's batch norm instead: the scale is applied before the whitening, and
the moving statistic is the inverse square root itself.

For a symmetric positive definite 2x2 matrix M, with s = sqrt(det M) and
t = sqrt(tr M + 2 s):

    sqrtm(M) = (M + s I) / t,      sqrtm(M)^-1 = adj(M + s I) / (s t),

so no eigendecomposition is needed and every operation is elementwise.

Numerics. Statistics are computed in float32 (float64 under a float64
policy), also under mixed precision. The data are rescaled by powers of two
before any square, so every norm here is scale-invariant over the whole
float range (inputs from about 1e-30 to 1e30 and beyond give the same
outputs and finite gradients; an all-zero input gives finite outputs). The
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
# floor) use this in place of epsilon = 0.
_PLAIN_ZERO_EPSILON = 1e-12


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


def whiten(real, imag, v_rr, v_ii, v_ri, epsilon):
    """`(C + epsilon I)^-1/2 [real; imag]` for given covariance entries
    `v_rr, v_ii, v_ri` (the moving statistics of batch normalization at
    inference). All arguments broadcast; returns `(real, imag)`.

    The statistics are rescaled by a power of two so that the larger
    variance (or epsilon) is at most 1. With no data pass available, the
    determinant is `v_pp (v_qq - beta v_pq)` with `p` the part of the
    larger variance and `beta = v_pq / v_pp`: the difference has a relative
    error of about `eps_mach` times the condition number of the covariance.
    """
    dtype = keras.backend.standardize_dtype(real.dtype)
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
    w_rr, w_ii, w_ri = (
        w * _pow2(-k, dtype)
        for w in _inverse_sqrt(v_rr, v_ii, v_ri, v_pp * v_perp, eps, eps)
    )
    return w_rr * real + w_ri * imag, w_ri * real + w_ii * imag


def _stat_dtype(layer):
    """Statistics in float32, or float64 under a float64 policy."""
    return "float64" if layer.compute_dtype == "float64" else "float32"


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexLayerNormalization(keras.layers.Layer):
    """The paper's complex layer normalization on stacked tensors.

    Per token, over the `E` complex features on the last axis: subtract the
    complex mean, whiten with the inverse square root of the 2x2 covariance
    of (Re, Im), then scale by `sqrtm(Gamma)` and add a complex bias, where

        Gamma = [[w0^2, rho], [rho, w1^2]],  rho = (2 sigmoid(w2) - 1) |w0 w1|

    is positive semi-definite for any learnable `(w0, w1, w2)` (initialised
    `(1, 1, 0)`: Gamma = I), one triple per feature.

    `estimator="reference"` (default) reproduces the reference
    implementation: variances unbiased (divisor E - 1), covariance biased
    (divisor E), so ported weights behave the same. `"biased"` uses divisor E
    throughout (a consistent covariance estimate).

    `epsilon` is added to both variances. The reference stores an epsilon
    but never uses it, so a constant, purely real or all-zero token gives NaN
    there; here it gives the bias (constant tokens) or a finite whitening,
    with finite gradients. It changes outputs by about `epsilon / variance`
    relative.

    `epsilon=0` is the reference's arithmetic, for exact ports (e.g.
    `cvattn_keras.interop`), and stays NaN-safe: each variance has a floor
    of `max((eps_mach * s)^2, tiny)` instead, `s` the token's scale (the
    power of two at or above its largest |x|), `eps_mach` the statistics
    dtype's machine epsilon (2^-23 in float32) and `tiny` about its
    smallest normal number (2^-126), so a spread below the resolution of
    the token's own values (or below about 1e-19) counts as none. That
    changes other tokens' outputs by about `floor / (2 variance)`
    relative (7e-13 in float32 for a spread of a tenth of the scale),
    always less than what rounding the token's values to float32 costs.
    A constant token (centred exactly: the first feature is
    subtracted before the mean) gives exactly the bias, and finite
    gradients, but large ones near constant tokens (about
    `1 / sqrt(floor)`, up to 2^63 at an all-zero token): keep an epsilon
    to train. The plain statistics of integer TFLite files use 1e-12 in
    place of 0.

    `method="naive"` instead normalizes the real and imaginary parts
    independently (a real LayerNorm on each, with learnable `gamma_real`,
    `gamma_imag`, `beta_real`, `beta_imag`), as in the reference's naive
    variant.

    Args:
        epsilon: float >= 0 added to the variances. Defaults to `1e-5`;
            0 for the reference's arithmetic (see above).
        method: `"whitening"` (default) or `"naive"`.
        estimator: `"reference"` (default) or `"biased"`; whitening only.
        center: whether to add the complex bias. Defaults to `True`.
        scale: whether to apply the learnable scale. Defaults to `True`.
        **kwargs: base `Layer` arguments.

    Input shape:
        `(..., 2 * E)`, stacked. Output: the same shape.

    Example:

    >>> x = cvattn_keras.to_stacked([[1, 1j, -1, -1j]])
    >>> y = ComplexLayerNormalization()(x)
    >>> bool(abs(float(y[0, 0]) - 1.224745) < 1e-4)
    True

    References:
        Eilers & Jiang, "Building Blocks for a Complex-Valued Transformer
        Architecture", ICASSP 2023, §3.3.
    """

    METHODS = ("whitening", "naive")
    ESTIMATORS = ("reference", "biased")

    def __init__(
        self,
        epsilon=1e-5,
        method="whitening",
        estimator="reference",
        center=True,
        scale=True,
        **kwargs,
    ):
        epsilon = _check_epsilon(epsilon, allow_zero=True)
        if method not in self.METHODS:
            raise ValueError(
                f"`method` must be one of {list(self.METHODS)}. "
                f"Received: method={method!r}"
            )
        if estimator not in self.ESTIMATORS:
            raise ValueError(
                f"`estimator` must be one of {list(self.ESTIMATORS)}. "
                f"Received: estimator={estimator!r}"
            )
        super().__init__(**kwargs)
        self.supports_masking = True
        # Statistics and parameters stay float32 under mixed precision.
        self.autocast = False
        self.epsilon = epsilon
        self.method = method
        self.estimator = estimator
        self.center = bool(center)
        self.scale = bool(scale)

    def build(self, input_shape):
        features = _features(input_shape, "ComplexLayerNormalization")
        if self.method == "whitening" and features < 2:
            raise ValueError(
                "Whitening estimates a 2x2 covariance over the features and "
                "needs at least 2 complex features. Received: "
                f"input_shape={tuple(input_shape)}"
            )
        shape = (features,)
        if self.scale:
            names = (
                (("w0", "ones"), ("w1", "ones"), ("w2", "zeros"))
                if self.method == "whitening"
                else (("gamma_real", "ones"), ("gamma_imag", "ones"))
            )
            for name, init in names:
                weight = self.add_weight(
                    name=name, shape=shape, initializer=init, autocast=False
                )
                setattr(self, name, weight)
        if self.center:
            names = (
                ("bias_real", "bias_imag")
                if self.method == "whitening"
                else ("beta_real", "beta_imag")
            )
            for name in names:
                weight = self.add_weight(
                    name=name, shape=shape, initializer="zeros", autocast=False
                )
                setattr(self, name, weight)
        self.input_spec = keras.layers.InputSpec(
            min_ndim=2, axes={-1: 2 * features}
        )

    def call(self, inputs):
        # In float32 (float64 under a float64 policy).
        x = ops.cast(inputs, _stat_dtype(self))
        if self.method == "naive":
            real, imag = self._naive(*cx.split(x))
        else:
            real, imag = self._whitening(x)
        return ops.cast(
            ops.concatenate([real, imag], axis=-1), self.compute_dtype
        )

    def _token_exponent(self, x):
        """Per token: the power-of-two exponent of max |x| over the last
        axis, at least that of sqrt(epsilon) (with epsilon > 0)."""
        dtype = keras.backend.standardize_dtype(x.dtype)
        k = _exponent(ops.max(x, axis=-1, keepdims=True), dtype)
        if not self.epsilon:
            return k
        return ops.maximum(k, _epsilon_exponent(self.epsilon))

    def _plain_epsilon(self):
        """The epsilon of the plain statistics (no relative floor there)."""
        return self.epsilon or _PLAIN_ZERO_EPSILON

    def _naive(self, real, imag):
        if _tracing.plain_statistics():
            # For integer files (see `_plain_whitening`).
            real = _plain_standardize(real, self._plain_epsilon())
            imag = _plain_standardize(imag, self._plain_epsilon())
            return self._naive_affine(real, imag)
        # Rescale by a power of two so that |x| <= 1 and epsilon <= 1:
        # scale-invariant up to the float range.
        dtype = keras.backend.standardize_dtype(real.dtype)
        k = self._token_exponent(_largest(real, imag))
        real, imag = real * _pow2(-k, dtype), imag * _pow2(-k, dtype)
        if self.epsilon:
            eps = self.epsilon * _pow2(-2.0 * k, dtype)
            eps = ops.maximum(eps, _EPSILON_FLOOR)
        else:
            # The floor (see `_ZERO_EPSILON_EXPONENTS`), and a constant
            # token centred exactly (x - x0 = 0).
            eps = _pow2(2.0 * _zero_epsilon_exponent(k, dtype), dtype)
            real = real - ops.stop_gradient(real[..., :1])
            imag = imag - ops.stop_gradient(imag[..., :1])
        parts = []
        for part in (real, imag):
            mean = ops.mean(part, axis=-1, keepdims=True)
            variance = ops.var(part, axis=-1, keepdims=True)
            parts.append((part - mean) * ops.rsqrt(variance + eps))
        return self._naive_affine(*parts)

    def _naive_affine(self, real, imag):
        """The naive method's per-part scale and bias."""
        parts = []
        for part, suffix in ((real, "real"), (imag, "imag")):
            if self.scale:
                part = part * ops.cast(
                    getattr(self, f"gamma_{suffix}"), part.dtype
                )
            if self.center:
                part = part + ops.cast(
                    getattr(self, f"beta_{suffix}"), part.dtype
                )
            parts.append(part)
        return parts

    def _whitening(self, x):
        dtype = keras.backend.standardize_dtype(x.dtype)
        # The reference estimator's variances divide by E - 1: the biased
        # variance inflated by 1 / (E - 1).
        features = x.shape[-1] // 2
        inflation = 1.0 / (features - 1) if self.estimator == "reference" else 0
        if _tracing.plain_statistics():
            # For integer files (see `_plain_whitening`).
            real, imag = _plain_whitening(
                *cx.split(x), self._plain_epsilon(), inflation
            )
            return self._whitening_affine(real, imag, dtype)
        # The scale from the stacked input: one contiguous pass (and not
        # keepdims: XLA's CPU reductions are slower into an axis of size 1).
        # expand_dims, not [..., None]: TFLite cannot lower a strided slice
        # that inserts an axis beside two unknown dimensions.
        k0 = _exponent(ops.expand_dims(ops.max(ops.abs(x), axis=-1), -1), dtype)
        real, imag = cx.split(x)

        def mean(*tensors):
            return [ops.mean(t, axis=-1, keepdims=True) for t in tensors]

        (real, imag), _ = _whitening_statistics(
            real,
            imag,
            mean,
            k0,
            self.epsilon,
            inflation,
            shift=not self.epsilon,
        )
        return self._whitening_affine(real, imag, dtype)

    def _whitening_affine(self, real, imag, dtype):
        """The whitening method's scale `sqrtm(Gamma)` and bias."""
        if self.scale:
            w0, w1, w2 = (
                ops.cast(w, dtype) for w in (self.w0, self.w1, self.w2)
            )
            p, q, r = _scale_sqrt(w0, w1, w2)
            real, imag = p * real + r * imag, r * real + q * imag
        if self.center:
            real = real + ops.cast(self.bias_real, dtype)
            imag = imag + ops.cast(self.bias_imag, dtype)
        return real, imag

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "epsilon": self.epsilon,
                "method": self.method,
                "estimator": self.estimator,
                "center": self.center,
                "scale": self.scale,
            }
        )
        return config


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexRMSNormalization(keras.layers.Layer):
    """RMS normalization by the modulus: `y = z / sqrt(mean_j |z_j|^2 + eps)
    * g` per token, over the E complex features.

    The phase of every feature is kept (no centering, no whitening). The
    learnable scale `g` is real per feature (`scale_real`, initialised 1),
    or complex with `complex_scale=True` (adds `scale_imag`, initialised 0),
    which can also rotate each feature.

    Args:
        epsilon: positive float. Defaults to `1e-6`.
        complex_scale: whether the scale is complex. Defaults to `False`.
        **kwargs: base `Layer` arguments.
    """

    def __init__(self, epsilon=1e-6, complex_scale=False, **kwargs):
        epsilon = _check_epsilon(epsilon)
        super().__init__(**kwargs)
        self.supports_masking = True
        self.autocast = False
        self.epsilon = epsilon
        self.complex_scale = bool(complex_scale)

    def build(self, input_shape):
        features = _features(input_shape, "ComplexRMSNormalization")
        self.scale_real = self.add_weight(
            name="scale_real",
            shape=(features,),
            initializer="ones",
            autocast=False,
        )
        self.scale_imag = None
        if self.complex_scale:
            self.scale_imag = self.add_weight(
                name="scale_imag",
                shape=(features,),
                initializer="zeros",
                autocast=False,
            )

    def call(self, inputs):
        dtype = _stat_dtype(self)
        x = ops.cast(inputs, dtype)
        if _tracing.plain_statistics():
            # For integer files (see `_plain_whitening`); mean |z|^2 =
            # 2 mean(x^2).
            power = ops.mean(x * x, axis=-1, keepdims=True) * 2.0
            return self._scaled(x * ops.rsqrt(power + self.epsilon))
        # Rescale by a power of two (exact) so that |x| <= 1 and epsilon
        # <= 1 before squaring: scale-invariant up to the float range.
        k = _exponent(ops.max(ops.abs(x), axis=-1, keepdims=True), dtype)
        k = ops.maximum(k, _epsilon_exponent(self.epsilon))
        x = x * _pow2(-k, dtype)
        eps = self.epsilon * _pow2(-2.0 * k, dtype)
        power = ops.mean(ops.square(x), axis=-1, keepdims=True) * 2.0
        x = x * ops.rsqrt(power + eps)  # mean |z|^2 = 2 mean(x^2)
        return self._scaled(x)

    def _scaled(self, x):
        """`x` times the learnable scale, in the compute dtype."""
        scale_real = ops.cast(self.scale_real, x.dtype)
        if self.complex_scale:
            scale_imag = ops.cast(self.scale_imag, x.dtype)
            x = cx.multiply(x, ops.concatenate([scale_real, scale_imag], -1))
        else:
            x = x * ops.concatenate([scale_real, scale_real], -1)
        return ops.cast(x, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "epsilon": self.epsilon,
            "complex_scale": self.complex_scale,
        }


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


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexBatchNormalization(keras.layers.Layer):
    """Complex batch normalization by 2x2 whitening, in two conventions.

    Statistics per complex feature over every axis but the last (batch and
    length). In training the batch statistics whiten the batch and update
    moving averages in Keras' sense
    (`moving = momentum * moving + (1 - momentum) * batch`); at inference
    the moving statistics are used, so the layer works before any training
    step.

    `convention="trabelsi"` (default; Trabelsi et al., "Deep Complex
    Networks", 2018): `y = G C^-1/2 (z - mean) + beta` with the biased
    covariance `C` of (Re, Im) plus `epsilon` on both variances. Variables:
    `moving_mean_real`, `moving_mean_imag`, and the moving covariance
    `moving_var_rr`, `moving_var_ii`, `moving_cov_ri` (initially `I / 2`,
    the covariance of a standard complex normal), non-trainable; the scale
    `G = [[gamma_rr, gamma_ri], [gamma_ri, gamma_ii]]` initialised
    `I / sqrt(2)` (output complex variance 1) and the complex
    `beta_real`, `beta_imag`. Inference whitens by
    `(C_moving + epsilon I)^-1/2`.

    `convention="reference"`: the reference implementation's
    `Complex_BatchNorm1d` (Eilers & Jiang's code), so that its checkpoints
    load and behave the same. Variances unbiased (divisor `N - 1`, `N` the
    number of unmasked samples) plus `epsilon` (the reference adds 1e-9:
    pass `epsilon=1e-9`), the covariance biased (divisor `N`);
    `R = C^-1/2`, and

        y = R sqrtm(Gamma) (z - mean) + bias,

    in this order (the 2x2 product `R sqrtm(Gamma)` is applied to the
    centred data), with `Gamma = [[w0^2, rho], [rho, w1^2]]`,
    `rho = (2 sigmoid(w2) - 1) |w0 w1|` as in `ComplexLayerNormalization`.
    The moving statistics are the mean and `R` itself, the inverse square
    root (as the reference stores them), a full 2x2 per feature; inference
    computes `y = R_moving sqrtm(Gamma) (z - moving_mean) + bias` with no
    epsilon (R is already inverted). Variables: trainable `w0`, `w1`, `w2`
    (initialised 1, 1, 0: Gamma = I), `bias_real`, `bias_imag` (zeros);
    non-trainable `moving_mean_real`, `moving_mean_imag` (zeros) and
    `moving_whitening_rr`, `moving_whitening_ri`, `moving_whitening_ir`,
    `moving_whitening_ii` (initially the identity, the reference's
    placeholder), meaning `R = [[rr, ri], [ir, ii]]`:
    `y_r = rr a + ri b`, `y_i = ir a + ii b` for `(a, b)` the real and
    imaginary parts it is applied to. The reference's momentum 0.5 is the
    same in either sense: pass `momentum=0.5`. Known differences from the
    reference, on purpose: (1) it skips the layer in training when the batch
    size is 1 (returns its input); here a batch of one sample is normalized
    over its length like any other; (2) its first training step stores the
    batch statistics without averaging; here every step averages with the
    moving statistics (initially zero mean and identity `R`); (3) a batch
    with fewer than 2 unmasked samples has no unbiased variance (the
    reference never gets one: it skips batches of one sample): here its
    variances are the biased ones (0) plus epsilon, its output is the bias
    (its centred data are 0), and the moving statistics stay unchanged;
    (4) the statistics are computed scale-invariantly (below), where the
    reference's overflow or lose precision for improper features; (5)
    `sqrtm(Gamma)` of a singular Gamma (`|w2|` large) uses a floor of 1e-12
    on its determinant, as in `ComplexLayerNormalization`.

    `epsilon` is added to both variances; the reference uses 1e-9. Steps
    masked by Keras masking (or `mask`) are left out of the statistics; a
    training batch with no unmasked step (or an empty batch, B = 0) leaves
    the moving statistics unchanged. The training statistics are computed on
    data rescaled by powers of two, with an accurate (pivoted) determinant:
    the training outputs are scale-invariant over the whole float range.

    The moving statistics are stored in the variables' dtype (float32), so
    at inference the Trabelsi covariance of inputs above about 1e19 is not
    representable; the reference convention's `R`, about 1 / scale, is
    (down to about 1e-38, inputs up to about 1e38).

    `synchronized=True`, as in `keras.layers.BatchNormalization`: under a
    `tf.distribute` strategy the batch mean and 2x2 covariance (and the
    counts of unmasked steps) are all-reduced over the replicas, so every
    replica whitens with the statistics of the global batch, as one device
    would. It uses `keras.ops.moments(..., synchronized=True)` and keeps the
    two-pass accuracy (center, then second moments). It is a no-op outside
    a strategy, and on JAX and PyTorch: under `keras.distribution` (JAX)
    arrays are global, so the statistics already are (Keras' own batch
    norm says the same); a model saved with it loads on every backend.
    With the reference convention, the `N` of the unbiased correction is
    then the mean over replicas of their numbers of unmasked samples (the
    number of replicas is not visible to `keras.ops`): with `K` replicas of
    equal batches the variances are `n / (n - 1)` times the biased ones,
    `n = N_global / K`, instead of `N_global / (N_global - 1)`, a relative
    difference of about `(K - 1) / N_global`.

    Args:
        momentum: float in [0, 1). Defaults to `0.99`.
        epsilon: positive float. Defaults to `1e-5`.
        center, scale: whether to use the bias (`beta` / `bias`) and the
            scale (`G` / `Gamma`). Default `True`.
        synchronized: whether to reduce the batch statistics over the
            replicas of a `tf.distribute` strategy. Defaults to `False`.
        convention: `"trabelsi"` (default) or `"reference"`, above.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(B, ..., 2E)` stacked.
        training: batch statistics (and updates) when `True`.
        mask: optional boolean `(B, ...)`, False for padded steps.
    """

    CONVENTIONS = ("trabelsi", "reference")

    def __init__(
        self,
        momentum=0.99,
        epsilon=1e-5,
        center=True,
        scale=True,
        synchronized=False,
        convention="trabelsi",
        **kwargs,
    ):
        momentum = check.rate(momentum, "momentum")
        epsilon = _check_epsilon(epsilon)
        if not isinstance(synchronized, bool):
            raise ValueError(
                "`synchronized` must be True or False. "
                f"Received: synchronized={synchronized!r}"
            )
        if not isinstance(convention, str) or (
            convention not in self.CONVENTIONS
        ):
            raise ValueError(
                f"`convention` must be one of {list(self.CONVENTIONS)}. "
                f"Received: convention={convention!r}"
            )
        super().__init__(**kwargs)
        self.synchronized = synchronized
        self.convention = convention
        self.supports_masking = True
        self.autocast = False
        self.momentum = float(momentum)
        self.epsilon = epsilon
        self.center = bool(center)
        self.scale = bool(scale)

    def build(self, input_shape):
        features = _features(input_shape, "ComplexBatchNormalization")
        shape = (features,)

        def weight(name, init, trainable=True):
            return self.add_weight(
                name=name,
                shape=shape,
                initializer=init,
                trainable=trainable,
                autocast=False,
            )

        if self.convention == "reference":
            self._build_reference(weight)
            return
        half = keras.initializers.Constant(0.5)
        self.moving_mean_real = weight("moving_mean_real", "zeros", False)
        self.moving_mean_imag = weight("moving_mean_imag", "zeros", False)
        self.moving_var_rr = weight("moving_var_rr", half, False)
        self.moving_var_ii = weight("moving_var_ii", half, False)
        self.moving_cov_ri = weight("moving_cov_ri", "zeros", False)
        if self.scale:
            gain = keras.initializers.Constant(2**-0.5)
            self.gamma_rr = weight("gamma_rr", gain)
            self.gamma_ii = weight("gamma_ii", gain)
            self.gamma_ri = weight("gamma_ri", "zeros")
        if self.center:
            self.beta_real = weight("beta_real", "zeros")
            self.beta_imag = weight("beta_imag", "zeros")

    def _build_reference(self, weight):
        self.moving_mean_real = weight("moving_mean_real", "zeros", False)
        self.moving_mean_imag = weight("moving_mean_imag", "zeros", False)
        for name, init in (
            ("rr", "ones"),
            ("ri", "zeros"),
            ("ir", "zeros"),
            ("ii", "ones"),
        ):
            name = f"moving_whitening_{name}"
            setattr(self, name, weight(name, init, False))
        if self.scale:
            self.w0 = weight("w0", "ones")
            self.w1 = weight("w1", "ones")
            self.w2 = weight("w2", "zeros")
        if self.center:
            self.bias_real = weight("bias_real", "zeros")
            self.bias_imag = weight("bias_imag", "zeros")

    def call(self, inputs, training=False, mask=None):
        dtype = _stat_dtype(self)
        x = ops.cast(inputs, dtype)

        def weight(variable):
            return ops.cast(variable, dtype)

        if self.convention == "reference":
            real, imag = self._reference(x, training, mask)
            return ops.cast(
                ops.concatenate([real, imag], axis=-1), self.compute_dtype
            )
        if training:
            (real, imag), stats, count = self._batch_whitening(x, mask)
            moving = (
                self.moving_mean_real,
                self.moving_mean_imag,
                self.moving_var_rr,
                self.moving_var_ii,
                self.moving_cov_ri,
            )
            # A batch with no unmasked step (or B = 0) has no statistics:
            # the moving ones stay as they are.
            self._update_moving(moving, stats, count > 0, dtype)
        else:
            real, imag = cx.split(x)  # (B, ..., E) each
            real = real - weight(self.moving_mean_real)
            imag = imag - weight(self.moving_mean_imag)
            v_rr, v_ii = weight(self.moving_var_rr), weight(self.moving_var_ii)
            v_ri = weight(self.moving_cov_ri)
            real, imag = whiten(real, imag, v_rr, v_ii, v_ri, self.epsilon)
        if self.scale:
            g_rr, g_ii, g_ri = (
                weight(g) for g in (self.gamma_rr, self.gamma_ii, self.gamma_ri)
            )
            real, imag = g_rr * real + g_ri * imag, g_ri * real + g_ii * imag
        if self.center:
            real = real + weight(self.beta_real)
            imag = imag + weight(self.beta_imag)
        return ops.cast(
            ops.concatenate([real, imag], axis=-1), self.compute_dtype
        )

    def _update_moving(self, variables, values, keep, dtype):
        """`moving = momentum * moving + (1 - momentum) * value` for each
        pair, computed in `dtype`, where `keep` holds; elsewhere the
        moving statistics stay as they are."""
        for variable, value in zip(variables, values):
            old = ops.cast(variable, dtype)
            updated = self.momentum * old + (1.0 - self.momentum) * value
            updated = ops.where(keep, updated, old)
            variable.assign(ops.cast(updated, variable.dtype))

    def _scale_matrix(self, dtype):
        """`sqrtm(Gamma)` entries `(p, q, r)` (reference convention)."""
        w0, w1, w2 = (ops.cast(w, dtype) for w in (self.w0, self.w1, self.w2))
        return _scale_sqrt(w0, w1, w2)

    def _reference(self, x, training, mask):
        """The reference convention: `(real, imag)` of the output."""
        dtype = keras.backend.standardize_dtype(x.dtype)

        def weight(variable):
            return ops.cast(variable, dtype)

        moving = (
            self.moving_mean_real,
            self.moving_mean_imag,
            self.moving_whitening_rr,
            self.moving_whitening_ri,
            self.moving_whitening_ir,
            self.moving_whitening_ii,
        )
        if training:
            (real, imag), stats, number = self._batch_whitening(x, mask)
            mean_r, mean_i, _, _, _, w_rr, w_ii, w_ri = stats
            # The batch's R is symmetric: ri = ir.
            batch = (mean_r, mean_i, w_rr, w_ri, w_ri, w_ii)
            # Fewer than 2 unmasked samples: no unbiased variance, the
            # moving statistics stay as they are.
            self._update_moving(moving, batch, number > 1, dtype)
        else:
            real, imag = cx.split(x)  # (B, ..., E) each
            real = real - weight(self.moving_mean_real)
            imag = imag - weight(self.moving_mean_imag)
            rr, ri, ir, ii = (weight(v) for v in moving[2:])
            if self.scale:
                # The reference's product R sqrtm(Gamma) per feature, then
                # one 2x2 product over the data.
                p, q, r = self._scale_matrix(dtype)
                rr, ri, ir, ii = (
                    rr * p + ri * r,
                    rr * r + ri * q,
                    ir * p + ii * r,
                    ir * r + ii * q,
                )
            real, imag = rr * real + ri * imag, ir * real + ii * imag
        if self.center:
            real = real + weight(self.bias_real)
            imag = imag + weight(self.bias_imag)
        return real, imag

    def _batch_whitening(self, x, mask):
        """Whitens the stacked `x` by the batch statistics. Returns the
        whitened `(real, imag)`, the statistics `(mean_r, mean_i, v_rr,
        v_ii, v_ri)` in the data's units and the number of unmasked steps
        (with sync, their fraction of the global batch): 0 when there are
        none.

        With the reference convention, the output is `R sqrtm(Gamma) (x -
        mean)`, the statistics are followed by the entries `(w_rr, w_ii,
        w_ri)` of `R` in the data's units, and the number is `N`, the
        number of unmasked samples (with sync, its mean over the
        replicas)."""
        dtype = keras.backend.standardize_dtype(x.dtype)
        axes = tuple(range(len(x.shape) - 1))
        sync = self.synchronized and keras.backend.backend() == "tensorflow"
        if mask is None:
            keep = None
            weights = ops.ones_like(x[..., :1])
        else:
            keep = ops.expand_dims(ops.cast(mask, "bool"), -1)
            weights = ops.cast(keep, dtype)

        def kept(x):
            # `where`, not a product: padding may hold inf or NaN.
            return x if keep is None else ops.where(keep, x, 0.0)

        def reduce_sum(x):
            # With sync, means over the global batch: mean(w x) / mean(w).
            if sync:
                return ops.moments(x, axes, synchronized=True)[0]
            return ops.sum(x, axis=axes)

        count = reduce_sum(weights)  # (1,)
        safe = ops.where(count > 0, count, ops.ones_like(count))

        def mean(*tensors):
            if not sync:
                return [reduce_sum(kept(t)) / safe for t in tensors]
            # One all-reduce for all of them.
            joined = ops.concatenate([kept(t) for t in tensors], axis=-1)
            return ops.split(reduce_sum(joined) / safe, len(tensors), -1)

        # The scale from the stacked input (one pass), then per feature.
        top = ops.max(kept(ops.abs(x)), axis=axes, initial=0.0)
        # (2E,); Keras' torch backend returns a scalar for an empty batch.
        top = ops.broadcast_to(top, (x.shape[-1],))
        k0 = _exponent(ops.maximum(*cx.split(top)), dtype)
        if sync:
            k0 = _global_max(k0, dtype)
        real, imag = cx.split(x)  # (B, ..., E) each
        if self.convention != "reference":
            whitened, stats = _whitening_statistics(
                real, imag, mean, k0, self.epsilon
            )
            return whitened, stats, count
        number = count
        if sync:
            # The mean over replicas of their numbers of unmasked samples:
            # one number per replica, all-reduced.
            local = ops.expand_dims(ops.sum(weights, axis=axes), 0)
            number = ops.moments(local, (0,), synchronized=True)[0]
        # Unbiased variances: the biased ones inflated by 1 / (N - 1);
        # N < 2 has none (the centred data are 0): no inflation.
        several = number > 1
        inflation = ops.where(
            several, 1.0 / ops.where(several, number - 1.0, 1.0), 0.0
        )
        scale = self._scale_matrix(dtype) if self.scale else None
        whitened, stats = _whitening_statistics(
            real,
            imag,
            mean,
            k0,
            self.epsilon,
            inflation,
            scale=scale,
            inverse=True,
        )
        return whitened, stats, number

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "synchronized": self.synchronized,
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
            "convention": self.convention,
        }
