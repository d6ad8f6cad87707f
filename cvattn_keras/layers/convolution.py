"""ComplexConv1D: a complex 1-D convolution as one real convolution."""

import keras
from keras import ops

from cvattn_keras import _validation as check
from cvattn_keras import complex as cx
from cvattn_keras.layers._weights import add_complex_weights
from cvattn_keras.layers._weights import set_weight_options
from cvattn_keras.layers._weights import weight_options_config


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexConv1D(keras.layers.Layer):
    """A complex 1-D convolution on stacked, channels-last sequences.

    `y[t] = sum_k x[t * strides + k * dilation_rate] W[k] + b` with the
    complex kernel `W = kernel_real + i kernel_imag` `(kernel_size, in,
    filters)` and complex bias `b`, computed as one real `conv` against the
    block kernel `[[W_r, W_i], [-W_i, W_r]]` `(kernel_size, 2 in, 2 filters)`.
    Strides, padding (`"valid"`, `"same"`, `"causal"`) and dilation are
    Keras `Conv1D`'s.

    Args:
        filters: positive int, complex output channels.
        kernel_size: positive int.
        strides: positive int. Defaults to 1.
        padding: `"valid"` (default), `"same"` or `"causal"`.
        dilation_rate: positive int. Defaults to 1.
        use_bias: whether to add the complex bias. Defaults to `True`.
        kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, kernel_constraint, bias_constraint: as in
            `ComplexDense` (each part initialised independently).
        **kwargs: base `Layer` arguments.

    Input shape:
        `(B, L, 2 * in)`. Output: `(B, L', 2 * filters)`.
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="valid",
        dilation_rate=1,
        use_bias=True,
        kernel_initializer="complex_glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        self.filters = check.positive_int(filters, "filters")
        self.kernel_size = check.positive_int(kernel_size, "kernel_size")
        self.strides = check.positive_int(strides, "strides")
        self.dilation_rate = check.positive_int(dilation_rate, "dilation_rate")
        if padding not in ("valid", "same", "causal"):
            raise ValueError(
                "`padding` must be 'valid', 'same' or 'causal'. "
                f"Received: padding={padding!r}"
            )
        if self.strides > 1 and self.dilation_rate > 1:
            # As keras.layers.Conv1D: TensorFlow's convolution cannot.
            raise ValueError(
                "`strides > 1` cannot be combined with `dilation_rate > 1`. "
                f"Received: strides={strides}, dilation_rate={dilation_rate}"
            )
        if padding == "causal" and self.strides != 1:
            raise ValueError(
                "`padding='causal'` needs `strides=1`. "
                f"Received: strides={strides}"
            )
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.padding = padding
        self.use_bias = bool(use_bias)
        set_weight_options(
            self,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "ComplexConv1D expects (batch, length, 2 * channels) with a "
                f"known last axis. Received: input_shape={input_shape}"
            )
        channels = (
            cx.check_even(input_shape[-1], "input_shape[-1]", input_shape) // 2
        )
        add_complex_weights(
            self, (self.kernel_size, channels, self.filters), (self.filters,)
        )
        self.input_spec = keras.layers.InputSpec(
            ndim=3, axes={-1: 2 * channels}
        )

    def call(self, inputs):
        # (k, 2 in, 2 filters): the inputs' channels on axis 1.
        kernel = cx.block_kernel(self.kernel_real, self.kernel_imag, in_axis=1)
        padding = self.padding
        if padding == "causal":
            left = self.dilation_rate * (self.kernel_size - 1)
            inputs = ops.pad(inputs, ((0, 0), (left, 0), (0, 0)))
            padding = "valid"
        outputs = ops.conv(
            inputs,
            kernel,
            strides=self.strides,
            padding=padding,
            data_format="channels_last",
            dilation_rate=self.dilation_rate,
        )
        if self.use_bias:
            outputs = outputs + ops.concatenate(
                [self.bias_real, self.bias_imag], axis=0
            )
        return outputs

    def compute_output_shape(self, input_shape):
        batch, length = input_shape[0], input_shape[1]
        if length is not None:
            span = self.dilation_rate * (self.kernel_size - 1) + 1
            if self.padding == "valid":
                length = (length - span) // self.strides + 1
            else:  # "same" and "causal" keep ceil(length / strides)
                length = -(-length // self.strides)
        return (batch, length, 2 * self.filters)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "dilation_rate": self.dilation_rate,
            "use_bias": self.use_bias,
            **weight_options_config(self),
        }
