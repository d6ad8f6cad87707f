"""Layers of a spectral-mask enhancer: the compressed spectra a network
reads, and the bounded mask that it writes onto the noisy spectra."""

import math

import keras
from keras import ops

from cvattn_keras import complex as cx
from cvattn_keras.layers.activations import _check_stacked

MASKS = ("complex", "magnitude")
"""The masks of `ComplexMask`: a complex ratio mask, or its modulus alone
(the noisy phase kept)."""


def _exponent(exponent):
    if (
        isinstance(exponent, bool)
        or not isinstance(exponent, (int, float))
        or not math.isfinite(exponent)
        or not 0 < exponent <= 1
    ):
        raise ValueError(
            "`exponent` must be a number in (0, 1] (0.3 compresses a "
            "spectrum's modulus as speech enhancers do; 1 leaves it "
            f"unchanged). Received: exponent={exponent!r}"
        )
    return float(exponent)


_TINY = 1e-9


def _float32(x):
    return ops.cast(x, "float32")


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexCompression(keras.layers.Layer):
    """Power-law compression of the modulus, the phase kept:
    `z -> |z|**exponent * z / |z|` (0 at 0), elementwise on stacked
    complex tensors.

    Spectra of audio span several orders of magnitude; speech enhancers
    (DCCRN, GTCRN, DeepFilterNet) read and score them compressed, usually
    with `exponent=0.3`. The phase is untouched, so a network reading
    compressed spectra keeps CAtt's invariance to a common phase.

    Computed in float32 (under a mixed policy too), then cast to the
    compute dtype. At `z = 0` the output is 0 and so is its gradient (the
    derivative of `|z|**c` is infinite there for `c < 1`; the modulus' own
    convention, `cvattn_keras.complex.modulus_and_sign`, is kept).

    Args:
        exponent: in (0, 1]. Defaults to 0.3.
        **kwargs: base `Layer` arguments.

    Examples:
        >>> x = cvattn_keras.to_stacked([[-8.0, 0.0]])
        >>> y = cvattn_keras.from_stacked(ComplexCompression(1 / 3)(x))
        >>> [complex(round(v.real, 4), round(v.imag, 4)) for v in y[0]]
        [(-2+0j), 0j]
    """

    def __init__(self, exponent=0.3, **kwargs):
        self.exponent = _exponent(exponent)
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        _check_stacked(input_shape, "ComplexCompression")

    def call(self, inputs):
        modulus, sign = cx.modulus_and_sign(_float32(inputs))
        # exp(c log(|z| + tiny)): finite with a finite gradient at 0
        # (where the sign is 0), and made of ops that have integer kernels
        # in TFLite (POW has none). `tiny` moves |z|**c by a relative
        # c * tiny / |z|: nothing, for |z| > 1e-3 of a spectrum of
        # samples in [-1, 1].
        scale = ops.exp(self.exponent * ops.log(modulus + _TINY))
        out = sign * ops.concatenate([scale, scale], axis=-1)
        return ops.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "exponent": self.exponent}


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexScale(keras.layers.Layer):
    """A learned complex weight per feature: `z_f -> w_f * z_f`,
    elementwise on the last axis (`w` initialised to 1).

    `speech_enhancer` adds it to its mask features: each bin's mask then
    sees that bin's own (compressed) noisy value, at the spectrum's full
    resolution, beside what the encoder makes of the whole frame.

    Weights `scale_real`, `scale_imag`, shape `(features,)`.

    Examples:
        >>> layer = ComplexScale()
        >>> y = layer(cvattn_keras.to_stacked([[1 + 2j, 3j]]))
        >>> [float(v) for v in y[0]]
        [1.0, 0.0, 2.0, 3.0]
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        size = _check_stacked(input_shape, "ComplexScale")
        if size is None:
            raise ValueError(
                "ComplexScale needs a known feature axis. Received: "
                f"input_shape={tuple(input_shape)}"
            )
        self.scale_real = self.add_weight(
            name="scale_real", shape=(size // 2,), initializer="ones"
        )
        self.scale_imag = self.add_weight(
            name="scale_imag", shape=(size // 2,), initializer="zeros"
        )

    def call(self, inputs):
        real, imag = cx.split(inputs)
        wr = ops.cast(self.scale_real, real.dtype)
        wi = ops.cast(self.scale_imag, real.dtype)
        return ops.concatenate(
            [real * wr - imag * wi, real * wi + imag * wr], axis=-1
        )

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexMask(keras.layers.Layer):
    """A bounded spectral mask applied to spectra: `[m, x] -> M(m) * x`.

    Called on a list `[mask_features, spectra]`, both stacked `(..., 2F)`
    of the same shape:

    - `mask="complex"` (a complex ratio mask, DCCRN's bounded "E" form):
      `M(m) = tanh(|m|) * m / |m|`, a modulus below 1 and the phase of
      `m`: it scales each bin and turns its phase;
    - `mask="magnitude"`: `M(m) = tanh(|m|)`, real: the same modulus, the
      noisy phase kept (the magnitude mask a complex mask is measured
      against; the same weights and parameter count).

    `M(0) = 0` with a zero gradient there (see
    `cvattn_keras.complex.modulus_and_sign`). Computed in float32, cast to
    the compute dtype.

    Args:
        mask: `"complex"` (default) or `"magnitude"`.
        **kwargs: base `Layer` arguments.

    Examples:
        >>> m = cvattn_keras.to_stacked([[100j]])  # |M| = tanh(100) ~ 1
        >>> x = cvattn_keras.to_stacked([[2.0 + 0j]])
        >>> y = cvattn_keras.from_stacked(ComplexMask()([m, x]))
        >>> complex(round(y[0, 0].real, 4), round(y[0, 0].imag, 4))
        2j
        >>> y = cvattn_keras.from_stacked(ComplexMask("magnitude")([m, x]))
        >>> complex(round(y[0, 0].real, 4), round(y[0, 0].imag, 4))
        (2+0j)
    """

    def __init__(self, mask="complex", **kwargs):
        if mask not in MASKS:
            raise ValueError(
                f"`mask` must be one of {MASKS}. Received: mask={mask!r}"
            )
        self.mask = mask
        super().__init__(**kwargs)

    def _shapes(self, input_shape):
        if (
            not isinstance(input_shape, (list, tuple))
            or len(input_shape) != 2
            or not all(isinstance(s, (list, tuple)) for s in input_shape)
        ):
            raise ValueError(
                "ComplexMask is called on a list [mask_features, spectra]. "
                f"Received: input_shape={input_shape!r}"
            )
        first, second = (tuple(s) for s in input_shape)
        for shape, what in ((first, "mask_features"), (second, "spectra")):
            _check_stacked(shape, f"ComplexMask's {what}")
        if len(first) != len(second) or any(
            a is not None and b is not None and a != b
            for a, b in zip(first, second)
        ):
            raise ValueError(
                "ComplexMask's mask_features and spectra must have the "
                f"same shape. Received: shapes {first} and {second}"
            )
        return first, second

    def build(self, input_shape):
        self._shapes(input_shape)

    def call(self, inputs):
        features, spectra = (_float32(x) for x in inputs)
        modulus, sign = cx.modulus_and_sign(features)
        gain = ops.tanh(modulus)
        if self.mask == "complex":
            both = ops.concatenate([gain, gain], axis=-1)
            out = cx.multiply(sign * both, spectra)
        else:
            out = spectra * ops.concatenate([gain, gain], axis=-1)
        return ops.cast(out, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return self._shapes(input_shape)[1]

    def get_config(self):
        return {**super().get_config(), "mask": self.mask}
