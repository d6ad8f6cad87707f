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
"""

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


def _inverse_sqrt_2x2(a, d, b, det):
    """Entries `(p, q, r)` of `[[p, r], [r, q]] = sqrtm([[a, b], [b, d]])^-1`
    for symmetric positive definite input with determinant `det`
    (elementwise over tensors)."""
    s = ops.sqrt(det)
    t = ops.sqrt(a + d + 2.0 * s)
    st = s * t
    return (d + s) / st, (a + s) / st, -b / st


def _sqrt_2x2(a, d, b):
    """Entries `(p, q, r)` of `sqrtm([[a, b], [b, d]])` for symmetric positive
    semi-definite input (elementwise)."""
    # The floor keeps s and t (and their gradients) finite when M is
    # singular; it shifts the result by about 1e-6 / t.
    s = ops.sqrt(ops.maximum(a * d - b * b, 0.0) + 1e-12)
    t = ops.sqrt(a + d + 2.0 * s)
    return (a + s) / t, (d + s) / t, b / t


def whiten(real, imag, v_rr, v_ii, v_ri, epsilon):
    """`(C + epsilon I)^-1/2 [real; imag]` for the covariance entries
    `v_rr, v_ii, v_ri`. All arguments broadcast; returns `(real, imag)`.

    The determinant is expanded as `(v_rr v_ii - v_ri^2) + epsilon (v_rr +
    v_ii) + epsilon^2` rather than computed from `v + epsilon`: for strongly
    correlated (improper) features at large scale, `v + epsilon` rounds to
    `v` in float32 and the determinant would cancel to 0 or below (NaN).
    """
    det = (
        ops.maximum(v_rr * v_ii - v_ri * v_ri, 0.0)
        + epsilon * (v_rr + v_ii)
        + epsilon * epsilon
    )
    p, q, r = _inverse_sqrt_2x2(v_rr + epsilon, v_ii + epsilon, v_ri, det)
    return p * real + r * imag, r * real + q * imag


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

    def _naive(self, real, imag):
        parts = []
        for part, suffix in ((real, "real"), (imag, "imag")):
            mean = ops.mean(part, axis=-1, keepdims=True)
            variance = ops.var(part, axis=-1, keepdims=True)
            part = (part - mean) * ops.rsqrt(variance + self.epsilon)
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
        real = real - ops.mean(real, axis=-1, keepdims=True)
        imag = imag - ops.mean(imag, axis=-1, keepdims=True)
        divisor = features - 1 if self.estimator == "reference" else features
        v_rr = ops.sum(real * real, axis=-1, keepdims=True) / divisor
        v_ii = ops.sum(imag * imag, axis=-1, keepdims=True) / divisor
        v_ri = ops.mean(real * imag, axis=-1, keepdims=True)
        real, imag = whiten(real, imag, v_rr, v_ii, v_ri, self.epsilon)
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
        x = ops.cast(inputs, _stat_dtype(self))
        power = ops.mean(ops.square(x), axis=-1, keepdims=True) * 2.0
        x = x * ops.rsqrt(power + self.epsilon)  # mean |z|^2 = 2 mean(x^2)
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


def _moments(real, imag, mask=None):
    """Biased covariance entries and means per feature over every axis but
    the last; steps where `mask` (the input's shape without the last axis)
    is False are left out. Returns `(v_rr, v_ii, v_ri, mean_r, mean_i)`."""
    axes = tuple(range(len(real.shape) - 1))
    if mask is None:
        weights = ops.ones_like(real[..., :1])
    else:
        weights = ops.cast(mask, real.dtype)[..., None]
    count = ops.maximum(ops.sum(weights, axis=axes), 1.0)

    def average(x):
        return ops.sum(x * weights, axis=axes) / count

    mean_r, mean_i = average(real), average(imag)
    real, imag = real - mean_r, imag - mean_i
    return (
        average(real * real),
        average(imag * imag),
        average(real * imag),
        mean_r,
        mean_i,
    )


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
    masked by Keras masking (or `mask`) are left out of the statistics.

    Args:
        momentum: float in [0, 1). Defaults to `0.99`.
        epsilon: positive float. Defaults to `1e-5`.
        center, scale: whether to use `beta` and `G`. Default `True`.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(B, ..., 2E)` stacked.
        training: batch statistics (and updates) when `True`.
        mask: optional boolean `(B, ...)`, False for padded steps.
    """

    def __init__(
        self, momentum=0.99, epsilon=1e-5, center=True, scale=True, **kwargs
    ):
        momentum = check.rate(momentum, "momentum")
        epsilon = _check_epsilon(epsilon)
        super().__init__(**kwargs)
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
            v_rr, v_ii, v_ri, mean_r, mean_i = _moments(real, imag, mask)
            real, imag = real - mean_r, imag - mean_i
            for moving, batch in (
                (self.moving_mean_real, mean_r),
                (self.moving_mean_imag, mean_i),
                (self.moving_var_rr, v_rr),
                (self.moving_var_ii, v_ii),
                (self.moving_cov_ri, v_ri),
            ):
                updated = (
                    self.momentum * weight(moving)
                    + (1.0 - self.momentum) * batch
                )
                moving.assign(ops.cast(updated, moving.dtype))
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

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "momentum": self.momentum,
            "epsilon": self.epsilon,
            "center": self.center,
            "scale": self.scale,
        }
