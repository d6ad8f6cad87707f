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

`ComplexLayerNormalization` and `ComplexRMSNormalization` are defined
here; `ComplexBatchNormalization` in `batch_normalization` (importable
from here too). The whitening mathematics (the scale-invariant, NaN-safe
statistics and the plain statistics of integer TFLite files) is in
`_whitening`.
"""

import keras
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import complex as cx
from cvattn_keras.layers._whitening import _EPSILON_FLOOR
from cvattn_keras.layers._whitening import _PLAIN_ZERO_EPSILON
from cvattn_keras.layers._whitening import _check_choice
from cvattn_keras.layers._whitening import _check_epsilon
from cvattn_keras.layers._whitening import _epsilon_exponent
from cvattn_keras.layers._whitening import _exponent
from cvattn_keras.layers._whitening import _features
from cvattn_keras.layers._whitening import _largest
from cvattn_keras.layers._whitening import _plain_standardize
from cvattn_keras.layers._whitening import _plain_whitening
from cvattn_keras.layers._whitening import _pow2
from cvattn_keras.layers._whitening import _scale_sqrt
from cvattn_keras.layers._whitening import _stat_dtype
from cvattn_keras.layers._whitening import _whitening_statistics
from cvattn_keras.layers._whitening import _zero_epsilon_exponent
from cvattn_keras.layers.batch_normalization import ComplexBatchNormalization

__all__ = [
    "ComplexBatchNormalization",
    "ComplexLayerNormalization",
    "ComplexRMSNormalization",
]


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
    to train. The plain statistics of integer TFLite files use the
    default 1e-5 in place of 0 (a smaller one would stretch the
    calibrated range at silent tokens; the file's error dwarfs it).

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

    Examples:
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
        _check_choice(method, self.METHODS, "method")
        _check_choice(estimator, self.ESTIMATORS, "estimator")
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
