"""Layers between real and stacked complex tensors."""

import keras
from keras import ops

from cvattn_keras import complex as cx
from cvattn_keras.layers.activations import _check_stacked


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexFromReal(keras.layers.Layer):
    """Real features `(..., U)` -> stacked complex `(..., 2U)` with zero
    imaginary parts: `[x | 0]`."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs):
        # A zero imaginary half padded on, not a concatenated zeros_like:
        # the same numbers, and an op with integer kernels (full_int8).
        size = inputs.shape[-1]
        if size is None:  # a feature axis known only at run time
            return ops.concatenate([inputs, ops.zeros_like(inputs)], axis=-1)
        widths = [(0, 0)] * (len(inputs.shape) - 1) + [(0, size)]
        return ops.pad(inputs, widths)

    def compute_output_shape(self, input_shape):
        size = input_shape[-1]
        return tuple(input_shape)[:-1] + (None if size is None else 2 * size,)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class RealReadout(keras.layers.Layer):
    """Stacked complex `(..., 2U)` -> real `(..., U)` by one real affine map
    of (Re, Im) shared by all features: `y = w_re Re z + w_im Im z + b`.

    This is the reference's final `Linear(2 -> 1)` over (Re, Im), which
    turns complex note features into real logits.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        _check_stacked(input_shape, "RealReadout")
        self.kernel = self.add_weight(
            name="kernel", shape=(2,), initializer="glorot_uniform"
        )
        self.bias = self.add_weight(name="bias", shape=(), initializer="zeros")

    def call(self, inputs):
        real, imag = cx.split(inputs)
        return real * self.kernel[0] + imag * self.kernel[1] + self.bias

    def compute_output_shape(self, input_shape):
        size = input_shape[-1]
        return tuple(input_shape)[:-1] + (None if size is None else size // 2,)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexModulus(keras.layers.Layer):
    """Stacked complex `(..., 2U)` -> real moduli `(..., U)`: `abs(z)`, 0
    with a zero gradient at z = 0. A phase-invariant read-out.

    The modulus is computed in float32 under a half-precision policy (and
    without squaring the data, so it is correct over the whole float range),
    then cast to the compute dtype: under `mixed_float16`, `|300| = 300` and
    `|1e-4| = 1e-4`."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        _check_stacked(input_shape, "ComplexModulus")

    def call(self, inputs):
        return cx.modulus_and_sign(inputs, dtype=self.compute_dtype)[0]

    def compute_output_shape(self, input_shape):
        size = input_shape[-1]
        return tuple(input_shape)[:-1] + (None if size is None else size // 2,)
