"""ComplexConv1D: a complex 1-D convolution as one real convolution."""

import keras
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import complex as cx
from cvattn_keras.layers._weights import add_bias
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
    Keras `Conv1D`'s. Traced for a TFLite file (`cvattn_keras.export`), it
    is instead one 2-D `conv` of the columns `-x_i, x_r, x_i` against the
    kernel `[W_i, W_r]` `(kernel_size, 2, in, filters)` (see
    `_conv_once`): the file stores each real weight once.

    Args:
        filters: positive int, complex output channels.
        kernel_size: positive int.
        strides: positive int. Defaults to 1.
        padding: `"valid"` (default), `"same"` or `"causal"`.
        dilation_rate: positive int. Defaults to 1.
        use_bias: whether to add the complex bias. Defaults to `True`.
        kernel_initializer: as in `ComplexDense` (each part initialised
            independently).
        bias_initializer: as in `ComplexDense`.
        kernel_regularizer: as in `ComplexDense`.
        bias_regularizer: as in `ComplexDense`.
        kernel_constraint: as in `ComplexDense`.
        bias_constraint: as in `ComplexDense`.
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`, as in
            `ComplexDense`: Gauss's form is three real convolutions
            against `W_r`, `W_i - W_r` and `W_r + W_i`; `"auto"` takes it
            when `kernel_size * in` and `filters` are both at least
            `complex.GAUSS_MIN_SIZE` (and the compute dtype is not
            float16).
        **kwargs: base `Layer` arguments.

    Input shape:
        `(B, L, 2 * in)`. Output: `(B, L', 2 * filters)`. With
        `padding="valid"`, `L` must be at least `dilation_rate *
        (kernel_size - 1) + 1` (a `ValueError` naming the length, the
        kernel size and the dilation otherwise, wherever `L` is known).
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
        complex_matmul="auto",
        **kwargs,
    ):
        self.filters = check.positive_int(filters, "filters")
        self.complex_matmul = cx.resolve_complex_matmul(complex_matmul)
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
        self._check_length(input_shape)
        add_complex_weights(
            self, (self.kernel_size, channels, self.filters), (self.filters,)
        )
        self.input_spec = keras.layers.InputSpec(
            ndim=3, axes={-1: 2 * channels}
        )

    def call(self, inputs):
        self._check_length(tuple(inputs.shape))
        padding = self.padding
        if padding == "causal":
            inputs = ops.pad(inputs, ((0, 0), (self._causal_pad(), 0), (0, 0)))
            padding = "valid"
        kernel_shape = self.kernel_real.shape  # (k, in, filters)
        kernel_real, kernel_imag = _tracing.quantize_kernel(
            self.kernel_real, self.kernel_imag
        )
        if _tracing.weights_once():
            outputs = self._conv_once(
                cx.columns_once(inputs), kernel_real, kernel_imag, padding
            )
        elif cx.use_gauss(
            self.complex_matmul,
            kernel_shape[0] * kernel_shape[1],
            kernel_shape[2],
            dtype=self.compute_dtype,
        ):
            outputs = cx.gauss_product_stacked(
                inputs,
                kernel_real,
                kernel_imag,
                lambda x, w: self._conv(x, w, padding),
            )
        else:
            # (k, 2 in, 2 filters): the inputs' channels on axis 1.
            kernel = cx.block_kernel(kernel_real, kernel_imag, in_axis=1)
            outputs = self._conv(inputs, kernel, padding)
        return add_bias(self, outputs)

    def _conv(self, inputs, kernel, padding):
        return ops.conv(
            inputs,
            kernel,
            strides=self.strides,
            padding=padding,
            data_format="channels_last",
            dilation_rate=self.dilation_rate,
        )

    def _causal_pad(self):
        return self.dilation_rate * (self.kernel_size - 1)

    def _span(self):
        """The input samples one output reads: `dilation_rate *
        (kernel_size - 1) + 1`."""
        return self.dilation_rate * (self.kernel_size - 1) + 1

    def _check_length(self, input_shape):
        """Raises when a `"valid"` convolution gets a static length shorter
        than its span (no output; the backends fail obscurely, with a
        negative output length or a kernel error). A length known only at
        run time in a traced graph is not checked."""
        length = (
            check.static_size(input_shape[1]) if len(input_shape) > 1 else None
        )
        if self.padding != "valid" or length is None:
            return
        if length < self._span():
            raise ValueError(
                f"{type(self).__name__} with padding='valid' needs inputs "
                f"at least dilation_rate * (kernel_size - 1) + 1 = "
                f"{self._span()} samples long (kernel_size="
                f"{self.kernel_size}, dilation_rate={self.dilation_rate}); "
                "use padding='same' or 'causal' for shorter ones. "
                f"Received: input length {length} (input_shape="
                f"{tuple(input_shape)})"
            )

    def call_columns(self, image):
        """The layer's output, traced for export, from the input already
        made the image `complex.columns_once(inputs)` `(B, L, 3, C)` (a
        caller that has the real and imaginary parts apart builds it more
        cheaply than from the stacked input)."""
        padding = self.padding
        if padding == "causal":
            image = ops.pad(
                image, ((0, 0), (self._causal_pad(), 0), (0, 0), (0, 0))
            )
            padding = "valid"
        kernels = _tracing.quantize_kernel(self.kernel_real, self.kernel_imag)
        return add_bias(self, self._conv_once(image, *kernels, padding))

    def _conv_once(self, image, kernel_real, kernel_imag, padding):
        """The convolution with each real weight once: the input `(B, L,
        2C)` made an image `(B, L, 3, C)` whose columns are `-x_i`, `x_r`
        and `x_i` (`complex.columns_once`), one 2-D `conv` against the
        kernel `[W_i, W_r]` `(k, 2, C, F)` (two columns wide, each real
        weight once), whose two output columns are `x_r W_r - x_i W_i`
        and `x_i W_r + x_r W_i`: `(B, L', 2, F)`, the stacked `(B, L',
        2F)` after a reshape."""
        batch = ops.shape(image)[0]
        length = image.shape[1]
        columns = 2  # the output columns to keep
        if padding == "same" and length is not None:
            # Pad the length only (a "same" conv would pad the columns).
            span = self._span()
            steps = -(-length // self.strides)
            total = max((steps - 1) * self.strides + span - length, 0)
            image = ops.pad(
                image,
                ((0, 0), (total // 2, total - total // 2), (0, 0), (0, 0)),
            )
            padding = "valid"
        elif padding == "same":
            # A dynamic length: "same" also pads the columns on the right
            # (a third output column, dropped below).
            columns = 3
        kernel = ops.stack([kernel_imag, kernel_real], axis=1)
        outputs = ops.conv(
            image,
            kernel,  # (k, 2, C, F)
            strides=(self.strides, 1),
            padding=padding,
            data_format="channels_last",
            dilation_rate=(self.dilation_rate, 1),
        )  # (B, L', 2, F)
        if columns == 3:
            outputs = outputs[:, :, :2]
        steps = ops.shape(outputs)[1]
        return cx.reshape(outputs, (batch, steps, 2 * self.filters))

    def compute_output_shape(self, input_shape):
        self._check_length(tuple(input_shape))
        batch, length = input_shape[0], input_shape[1]
        if length is not None:
            span = self._span()
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
            "complex_matmul": self.complex_matmul,
        }
