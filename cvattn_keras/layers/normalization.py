"""Complex normalization layers: 2x2 whitening (layer and batch) and RMS.

A complex feature is a sample of the 2-D real vector (Re, Im). Whitening
normalizes it by the inverse square root of its 2x2 covariance

    C = [[V_rr, V_ri],
         [V_ri, V_ii]]

so that real and imaginary parts come out decorrelated with equal variance,
then applies a learnable 2x2 scale and a complex bias (Trabelsi et al., "Deep
Complex Networks", 2018; Eilers & Jiang, 2023, §3.3).

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
"""

import math

import keras
from keras import ops

from cvattn_keras import _validation as check
from cvattn_keras import complex as cx


def _check_epsilon(epsilon):
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


def _whiten_scaled(p, q_perp, v_pp, v_qq, v_pq, beta, v_perp, e_p, e_q):
    """`(C + diag(e_p, e_q))^-1/2 [p; q]` with `C = [[v_pp, v_pq], [v_pq,
    v_qq]]`, written in the coordinates `(p, q_perp)`, `q = beta p + q_perp`,
    `beta = v_pq / v_pp`, `v_perp = var(q_perp) = v_qq - beta v_pq`.

    With `s = sqrt(det)`, `t = sqrt(tr + 2 s)`, the inverse square root is
    `[[d + s, -b], [-b, a + s]] / (s t)` (a, d, b the regularised entries).
    Multiplying out with `q = beta p + q_perp` gives the coefficients below,
    in which every term is non-negative or a product: no difference of
    nearly equal numbers, whatever the correlation. The determinant is
    `v_pp v_perp + v_pp e_q + e_p v_qq + e_p e_q` (a sum of non-negative
    terms) instead of `a d - b^2`, which cancels for improper features.
    """
    det = v_pp * v_perp + v_pp * e_q + e_p * v_qq + e_p * e_q
    s = ops.sqrt(det)
    t = ops.sqrt(v_pp + v_qq + e_p + e_q + 2.0 * s)
    st = s * t
    out_p = ((v_perp + e_q + s) * p - v_pq * q_perp) / st
    out_q = (beta * (e_p + s) * p + (v_pp + e_p + s) * q_perp) / st
    return out_p, out_q


def _pivot(real, imag, v_rr, v_ii, v_ri):
    """Takes the part with the larger variance as the pivot `p` (so that
    `|beta| <= 1` and no division by a small variance). Returns
    `(pivot, p, q, v_pp, v_qq, beta)`, `pivot` True where Re is the
    pivot."""
    pivot = v_rr >= v_ii
    p = ops.where(pivot, real, imag)
    q = ops.where(pivot, imag, real)
    v_pp = ops.where(pivot, v_rr, v_ii)
    v_qq = ops.where(pivot, v_ii, v_rr)
    nonzero = v_pp > 0
    safe = ops.where(nonzero, v_pp, ops.ones_like(v_pp))
    # Divide by a divisor brought into [1, 2) by a power of two (exact):
    # the derivative of a / b squares b, which underflows for the tiny
    # variances of data far below sqrt(epsilon) (a NaN gradient on JAX).
    dtype = keras.backend.standardize_dtype(safe.dtype)
    exponent = ops.floor(ops.log2(ops.stop_gradient(safe)))
    unit = _pow2(-ops.clip(exponent, *_EXPONENTS[dtype]), dtype)
    beta = ops.where(nonzero, (v_ri * unit) / (safe * unit), 0.0)
    return pivot, p, q, v_pp, v_qq, beta


def _unpivot(pivot, out_p, out_q):
    return ops.where(pivot, out_p, out_q), ops.where(pivot, out_q, out_p)


def _whitening_statistics(real, imag, mean, exponent, epsilon, inflation=0.0):
    """Whitens `(real, imag)` by its own covariance, scale-invariantly.

    Args:
        real, imag: the data (the statistics dtype).
        mean: `mean(tensors) -> list` of (weighted) means over the
            statistics' axes, shaped to broadcast against the data.
        exponent: `exponent(tensor) -> k`, the smallest `k` with `2^k` at
            least the (unmasked) maximum of the non-negative tensor over the
            same axes (see `_exponent`), broadcastable; the same on every
            replica when the statistics are global.
        epsilon: added to both variances (in the data's units).
        inflation: each variance is also inflated by `inflation` times
            itself (`1 / (E - 1)` turns a biased variance into the
            unbiased one of the reference estimator).

    Returns:
        `(real, imag)` whitened, and the statistics in the data's units
        `(mean_r, mean_i, v_rr, v_ii, v_ri)` (biased).

    Three passes: the mean of data rescaled to [-1, 1]; the second moments
    of the centred data rescaled again to [-1, 1]; and the variance of
    `q_perp = q - beta p`, the part of the non-pivot component uncorrelated
    with the pivot. `det = v_pp var(q_perp)` is then a product of two
    accurately computed positive numbers: its relative error is about
    `eps_mach sqrt(v_qq / v_perp)` (a square root of the condition number),
    where `v_rr v_ii - v_ri^2` loses `eps_mach v_rr v_ii / det` (the
    condition number itself).
    """
    dtype = keras.backend.standardize_dtype(real.dtype)
    k0 = exponent(_largest(real, imag))
    real, imag = real * _pow2(-k0, dtype), imag * _pow2(-k0, dtype)
    mean_r, mean_i = mean([real, imag])
    real, imag = real - mean_r, imag - mean_i
    # Second scale: the centred data in [-1, 1], and in total at least
    # sqrt(epsilon) (so the rescaled epsilon is at most 1).
    k1 = exponent(_largest(real, imag))
    k1 = ops.maximum(k1, _epsilon_exponent(epsilon) - k0)
    real, imag = real * _pow2(-k1, dtype), imag * _pow2(-k1, dtype)
    total = k0 + k1
    eps = ops.maximum(epsilon * _pow2(-2.0 * total, dtype), _EPSILON_FLOOR)
    v_rr, v_ii, v_ri = mean([real * real, imag * imag, real * imag])
    pivot, p, q, v_pp, v_qq, beta = _pivot(real, imag, v_rr, v_ii, v_ri)
    q_perp = q - beta * p
    (v_perp,) = mean([q_perp * q_perp])
    out_p, out_q = _whiten_scaled(
        p,
        q_perp,
        v_pp,
        v_qq,
        v_ri,
        beta,
        v_perp,
        eps + inflation * v_pp,
        eps + inflation * v_qq,
    )
    out_r, out_i = _unpivot(pivot, out_p, out_q)
    unit, square = _pow2(k0, dtype), _pow2(2.0 * total, dtype)
    stats = (mean_r * unit, mean_i * unit, v_rr * square, v_ii * square)
    return (out_r, out_i), stats + (v_ri * square,)


def whiten(real, imag, v_rr, v_ii, v_ri, epsilon):
    """`(C + epsilon I)^-1/2 [real; imag]` for given covariance entries
    `v_rr, v_ii, v_ri` (the moving statistics of batch normalization at
    inference). All arguments broadcast; returns `(real, imag)`.

    The statistics and the data are rescaled by a power of two so that the
    larger variance (or epsilon) is at most 1, then whitened in the
    coordinates of `_whiten_scaled`. With no data pass available,
    `v_perp = v_qq - beta v_ri` is a difference: its relative error is about
    `eps_mach` times the condition number of the covariance.
    """
    dtype = keras.backend.standardize_dtype(real.dtype)
    top = ops.maximum(ops.maximum(v_rr, v_ii), epsilon)
    k = ops.ceil(0.5 * ops.log2(ops.stop_gradient(top)))
    k = ops.clip(k, *_EXPONENTS[dtype])
    unit, square = _pow2(-k, dtype), _pow2(-2.0 * k, dtype)
    real, imag = real * unit, imag * unit
    v_rr, v_ii, v_ri = v_rr * square, v_ii * square, v_ri * square
    eps = ops.maximum(epsilon * square, _EPSILON_FLOOR)
    pivot, p, q, v_pp, v_qq, beta = _pivot(real, imag, v_rr, v_ii, v_ri)
    v_perp = ops.maximum(v_qq - beta * v_ri, 0.0)
    out_p, out_q = _whiten_scaled(
        p, q - beta * p, v_pp, v_qq, v_ri, beta, v_perp, eps, eps
    )
    return _unpivot(pivot, out_p, out_q)


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

    `method="naive"` instead normalizes the real and imaginary parts
    independently (a real LayerNorm on each, with learnable `gamma_real`,
    `gamma_imag`, `beta_real`, `beta_imag`), as in the reference's naive
    variant.

    Args:
        epsilon: positive float added to the variances. Defaults to `1e-5`.
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
        epsilon = _check_epsilon(epsilon)
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
        # (..., E) each, in float32 (float64 under a float64 policy).
        real, imag = cx.split(ops.cast(inputs, _stat_dtype(self)))
        if self.method == "naive":
            real, imag = self._naive(real, imag)
        else:
            real, imag = self._whitening(real, imag)
        return ops.cast(
            ops.concatenate([real, imag], axis=-1), self.compute_dtype
        )

    def _token_exponent(self, x):
        """Per token: the power-of-two exponent of max |x| over the last
        axis, at least that of sqrt(epsilon)."""
        dtype = keras.backend.standardize_dtype(x.dtype)
        k = _exponent(ops.max(x, axis=-1, keepdims=True), dtype)
        return ops.maximum(k, _epsilon_exponent(self.epsilon))

    def _naive(self, real, imag):
        # Rescale by a power of two so that |x| <= 1 and epsilon <= 1:
        # scale-invariant up to the float range.
        dtype = keras.backend.standardize_dtype(real.dtype)
        k = self._token_exponent(_largest(real, imag))
        real, imag = real * _pow2(-k, dtype), imag * _pow2(-k, dtype)
        eps = ops.maximum(self.epsilon * _pow2(-2.0 * k, dtype), _EPSILON_FLOOR)
        parts = []
        for part, suffix in ((real, "real"), (imag, "imag")):
            mean = ops.mean(part, axis=-1, keepdims=True)
            variance = ops.var(part, axis=-1, keepdims=True)
            part = (part - mean) * ops.rsqrt(variance + eps)
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

    def _whitening(self, real, imag):
        features = real.shape[-1]
        dtype = keras.backend.standardize_dtype(real.dtype)

        def mean(tensors):
            return [ops.mean(t, axis=-1, keepdims=True) for t in tensors]

        def exponent(x):
            return _exponent(ops.max(x, axis=-1, keepdims=True), dtype)

        # The reference estimator's variances divide by E - 1: the biased
        # variance inflated by 1 / (E - 1).
        inflation = 1.0 / (features - 1) if self.estimator == "reference" else 0
        (real, imag), _ = _whitening_statistics(
            real, imag, mean, exponent, self.epsilon, inflation
        )
        if self.scale:
            w0, w1, w2 = (
                ops.cast(w, real.dtype) for w in (self.w0, self.w1, self.w2)
            )
            rho = (2.0 * ops.sigmoid(w2) - 1.0) * ops.abs(w0 * w1)
            p, q, r = _sqrt_2x2(w0 * w0, w1 * w1, rho)
            real, imag = p * real + r * imag, r * real + q * imag
        if self.center:
            real = real + ops.cast(self.bias_real, real.dtype)
            imag = imag + ops.cast(self.bias_imag, imag.dtype)
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
        # Rescale by a power of two (exact) so that |x| <= 1 and epsilon
        # <= 1 before squaring: scale-invariant up to the float range.
        k = _exponent(ops.max(ops.abs(x), axis=-1, keepdims=True), dtype)
        k = ops.maximum(k, _epsilon_exponent(self.epsilon))
        x = x * _pow2(-k, dtype)
        eps = self.epsilon * _pow2(-2.0 * k, dtype)
        power = ops.mean(ops.square(x), axis=-1, keepdims=True) * 2.0
        x = x * ops.rsqrt(power + eps)  # mean |z|^2 = 2 mean(x^2)
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
    present, _ = ops.moments(onehot[None], axes=(0,), synchronized=True)
    index = ops.where(present > 0, ops.arange(size, dtype=dtype), -1.0)
    return ops.max(index, axis=-1) + low


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexBatchNormalization(keras.layers.Layer):
    """Complex batch normalization by 2x2 whitening (Trabelsi et al., 2018).

    Statistics per complex feature over every axis but the last (batch and
    length): the complex mean and the covariance of (Re, Im), biased. In
    training they whiten the batch and update moving averages
    (`moving = momentum * moving + (1 - momentum) * batch`); at inference
    the moving statistics are used, so the layer works before any training
    step (initial moving covariance `I / 2`, the covariance of a standard
    complex normal). Then `y = G C^-1/2 (z - mean) + beta` with
    `G = [[gamma_rr, gamma_ri], [gamma_ri, gamma_ii]]` initialised
    `I / sqrt(2)` (output complex variance 1) and a complex `beta`.

    `epsilon` is added to both variances; the reference uses 1e-9. Steps
    masked by Keras masking (or `mask`) are left out of the statistics; a
    training batch with no unmasked step (or an empty batch, B = 0) leaves
    the moving statistics unchanged.

    The moving statistics are stored in the variables' dtype (float32), so
    at inference the covariance of inputs above about 1e19 is not
    representable; the training outputs are scale-invariant over the whole
    float range.

    `synchronized=True`, as in `keras.layers.BatchNormalization`: under a
    `tf.distribute` strategy the batch mean and 2x2 covariance (and the
    counts of unmasked steps) are all-reduced over the replicas, so every
    replica whitens with the statistics of the global batch, as one device
    would. It uses `keras.ops.moments(..., synchronized=True)` and keeps the
    two-pass accuracy (center, then second moments). It is a no-op outside
    a strategy, and on JAX and PyTorch: under `keras.distribution` (JAX)
    arrays are global, so the statistics already are (Keras' own batch
    norm says the same); a model saved with it loads on every backend.

    Args:
        momentum: float in [0, 1). Defaults to `0.99`.
        epsilon: positive float. Defaults to `1e-5`.
        center, scale: whether to use `beta` and `G`. Default `True`.
        synchronized: whether to reduce the batch statistics over the
            replicas of a `tf.distribute` strategy. Defaults to `False`.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(B, ..., 2E)` stacked.
        training: batch statistics (and updates) when `True`.
        mask: optional boolean `(B, ...)`, False for padded steps.
    """

    def __init__(
        self,
        momentum=0.99,
        epsilon=1e-5,
        center=True,
        scale=True,
        synchronized=False,
        **kwargs,
    ):
        momentum = check.rate(momentum, "momentum")
        epsilon = _check_epsilon(epsilon)
        if not isinstance(synchronized, bool):
            raise ValueError(
                "`synchronized` must be True or False. "
                f"Received: synchronized={synchronized!r}"
            )
        super().__init__(**kwargs)
        self.synchronized = synchronized
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

    def call(self, inputs, training=False, mask=None):
        dtype = _stat_dtype(self)
        real, imag = cx.split(ops.cast(inputs, dtype))  # (B, ..., E) each

        def weight(variable):
            return ops.cast(variable, dtype)

        if training:
            (real, imag), stats, count = self._batch_whitening(real, imag, mask)
            moving = (
                self.moving_mean_real,
                self.moving_mean_imag,
                self.moving_var_rr,
                self.moving_var_ii,
                self.moving_cov_ri,
            )
            for variable, batch in zip(moving, stats):
                old = weight(variable)
                updated = self.momentum * old + (1.0 - self.momentum) * batch
                # A batch with no unmasked step (or B = 0) has no
                # statistics: the moving ones stay as they are.
                updated = ops.where(count > 0, updated, old)
                variable.assign(ops.cast(updated, variable.dtype))
        else:
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

    def _batch_whitening(self, real, imag, mask):
        """Whitens by the batch statistics. Returns the whitened `(real,
        imag)`, the statistics `(mean_r, mean_i, v_rr, v_ii, v_ri)` in the
        data's units and the (global) fraction of unmasked steps."""
        dtype = keras.backend.standardize_dtype(real.dtype)
        axes = tuple(range(len(real.shape) - 1))
        sync = self.synchronized and keras.backend.backend() == "tensorflow"
        if mask is None:
            keep = None
            weights = ops.ones_like(real[..., :1])
        else:
            keep = ops.expand_dims(ops.cast(mask, "bool"), -1)
            weights = ops.cast(keep, dtype)

        def kept(x):
            # `where`, not a product: padding may hold inf or NaN.
            return x if keep is None else ops.where(keep, x, 0.0)

        def reduce_mean(x):
            if sync:
                return ops.moments(x, axes, synchronized=True)[0]
            return ops.sum(x, axis=axes)

        # With sync, means over the global batch: mean(w x) / mean(w).
        count = reduce_mean(weights)  # (1,)
        safe = ops.where(count > 0, count, ops.ones_like(count))

        def mean(tensors):
            joined = ops.concatenate([kept(t) for t in tensors], axis=-1)
            return ops.split(reduce_mean(joined) / safe, len(tensors), -1)

        def exponent(x):
            largest = ops.max(kept(x), axis=axes, initial=0.0)
            k = _exponent(largest, dtype)
            return _global_max(k, dtype) if sync else k

        whitened, stats = _whitening_statistics(
            real, imag, mean, exponent, self.epsilon
        )
        return whitened, stats, count

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
        }
