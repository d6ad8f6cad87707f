"""Complex activation layers (see `cvattn_keras.activations`)."""

import keras
from keras import ops

from cvattn_keras import activations
from cvattn_keras import complex as cx


def _check_stacked(input_shape, layer):
    """The even size of the last axis of a stacked input shape (None when
    unknown); a scalar input or an odd size is a `ValueError`."""
    input_shape = tuple(input_shape)
    if len(input_shape) == 0:
        raise ValueError(
            f"{layer} expects stacked complex inputs (..., 2 * features) "
            f"with at least one axis. Received a scalar: "
            f"input_shape={input_shape}"
        )
    return cx.check_even(input_shape[-1], "input_shape[-1]", input_shape)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexActivation(keras.layers.Layer):
    """Applies a parameter-free complex activation to a stacked tensor.

    Args:
        activation: `"split_leaky_relu"` (the reference's "CReLU"),
            `"crelu"`, `"zrelu"` or `"cardioid"`.
        **kwargs: base `Layer` arguments.

    Examples:
        >>> x = cvattn_keras.to_stacked([[-1 - 2j]])
        >>> y = ComplexActivation("split_leaky_relu")(x)
        >>> [round(float(v), 4) for v in y[0]]
        [-0.01, -0.02]
    """

    def __init__(self, activation, **kwargs):
        if not isinstance(activation, str):
            raise ValueError(
                "`activation` must be the name of a complex activation. "
                f"Received: activation={activation!r}"
            )
        self.fn = activations.get(activation)
        super().__init__(**kwargs)
        self.supports_masking = True
        self.activation = activation.lower()

    def build(self, input_shape):
        _check_stacked(input_shape, "ComplexActivation")

    def call(self, inputs):
        return self.fn(inputs)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "activation": self.activation}


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ModReLU(keras.layers.Layer):
    """modReLU: `ReLU(|z| + b) * z / |z|` with a learnable real bias per
    complex feature (Arjovsky et al., "Unitary Evolution Recurrent Neural
    Networks", 2016).

    Args:
        bias_initializer: initializer of `bias` `(E,)`. Defaults to
            `"zeros"` (the identity on every z); `None` means the default.
        **kwargs: base `Layer` arguments.
    """

    def __init__(self, bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True
        # None means the default, zeros (add_weight's fallback would be
        # Glorot), as in the library's other layers.
        if bias_initializer is None:
            bias_initializer = "zeros"
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        size = _check_stacked(input_shape, "ModReLU")
        if size is None:
            raise ValueError(
                "The last axis of the input to ModReLU must be known. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        self.bias = self.add_weight(
            name="bias", shape=(size // 2,), initializer=self.bias_initializer
        )

    def call(self, inputs):
        # Under a half-precision policy modrelu computes in float32: keep
        # the bias in float32 rather than round it to the input's dtype.
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if dtype in ("float16", "bfloat16"):
            dtype = "float32"
        return activations.modrelu(inputs, ops.cast(self.bias, dtype))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "bias_initializer": keras.initializers.serialize(
                self.bias_initializer
            ),
        }
