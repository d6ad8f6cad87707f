"""ComplexConv2D and ComplexConv2DTranspose: complex 2-D convolutions on
stacked, channels-last images `(B, H, W, 2C)`.

Both are Keras' real layers (`keras.layers.Conv2D`, `Conv2DTranspose`)
with complex kernels and biases: the same windows, strides, padding,
dilation and output sizes. Three forms compute the complex product, the
same numbers up to rounding:

- the block form (training and inference): one real convolution of the
  stacked image `[x_r | x_i]` against the real block kernel `[[W_r, W_i],
  [-W_i, W_r]]` (four real multiplications per complex one);
- Gauss's form (`complex_matmul="gauss"`): three real convolutions of
  half the width (`complex.gauss_product`);
- the weights-once form, traced for a TFLite file
  (`_tracing.weights_once`): the rows `[-x_i | x_r]` and `[x_r | x_i]`
  stacked on the batch axis, one real convolution of those `2B` images
  against `[W_i; W_r]` (the parts concatenated on the input-channel
  axis), whose two halves of the batch are the real and the imaginary
  parts. The file stores each real weight once, has one `CONV_2D` (or
  `TRANSPOSE_CONV`) per layer, and each output pixel sums all its products
  in one accumulation: in an int8 file one int32 sum, rounded once.
  (`ComplexConv1D` gets the same by a 2-D convolution over columns; here
  that would take a 3-D convolution, which TFLite runs in float only.)

Measured on a three-layer encoder-decoder (a strided `ComplexConv2D`, a
`ComplexConv2D`, a strided `ComplexConv2DTranspose`; 16 x 16 images of 2
complex channels, 2,056 parameters; TensorFlow 2.21's converter, LiteRT
on a 2-core CPU), against the block kernel (`export_tflite(...,
weights_once=False)`) and against the other weights-once form (`x_r` and
`x_i` stacked on the batch axis, one convolution against `[W_r | W_i]`
`(kh, kw, C, 2F)`, its four products combined by a SUB and an ADD):

    form           float32 weights   int8 weights   int8 RMS error   int8 ms
    this one           8,180 B          2,129 B         2.4%           0.25
    [W_r | W_i]        8,224 B          2,176 B         3.3%           0.31
    block kernel      16,208 B          4,112 B         2.4%           0.11

(RMS error of full_int8 against Keras relative to the output's RMS, on
inputs within the calibration range; ms: LiteRT's median time for a batch
of 8; the float32 files match Keras to 3e-7 in every form.) This form
stores the weights once at the block kernel's int8 error; the other one
rounds its four products to int8 before combining them. The block
kernel's one op per layer runs faster on a model this small, which is
why the calibrated modes keep it by default (`export_tflite`'s
`weights_once`).
"""

import keras
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import complex as cx
from cvattn_keras.layers import _image
from cvattn_keras.layers._weights import add_bias
from cvattn_keras.layers._weights import add_complex_weights
from cvattn_keras.layers._weights import set_weight_options
from cvattn_keras.layers._weights import weight_options_config


def _spans(kernel_size, dilation_rate):
    """The pixels each output reads per axis: `dilation_rate *
    (kernel_size - 1) + 1`."""
    return tuple(d * (k - 1) + 1 for k, d in zip(kernel_size, dilation_rate))


def _output_padding(value, kernel_size, strides, padding, dilation_rate):
    """`ComplexConv2DTranspose`'s `output_padding` validated: `None` or
    `(p_h, p_w)`, each `>= 0` and less than its stride (as Keras), and at
    least 1 with `"same"` padding on an axis whose dilated kernel is even
    (see the class)."""
    if value is None:
        return None
    output_padding = _image.pair(value, "output_padding", 0)
    strides = _image.pair(strides, "strides")
    if any(p >= s for p, s in zip(output_padding, strides)):
        # As Keras: more would add rows no input reaches.
        raise ValueError(
            "`output_padding` must be less than `strides` on each "
            f"axis. Received: output_padding={output_padding}, "
            f"strides={strides}"
        )
    kernel_size = _image.pair(kernel_size, "kernel_size")
    spans = _spans(kernel_size, _image.pair(dilation_rate, "dilation_rate"))
    if padding == "same" and any(
        p == 0 and span % 2 == 0 for p, span in zip(output_padding, spans)
    ):
        # Then H' = (H - 1) s: no "same" convolution maps H' back to H
        # (ceil(H' / s) = H - 1), and TensorFlow's kernel fails where
        # Keras' Conv2DTranspose is silent.
        raise ValueError(
            "With padding='same', `output_padding` must be at least 1 on "
            "an axis whose dilated kernel size (dilation_rate * "
            "(kernel_size - 1) + 1) is even. Received: output_padding="
            f"{output_padding}, kernel_size={kernel_size}, dilation_rate="
            f"{_image.pair(dilation_rate, 'dilation_rate')}"
        )
    return output_padding


class _ComplexConv2DBase(keras.layers.Layer):
    """What the two layers share: arguments (the constructor is
    `ComplexConv2D`'s, defaults included), weights, forms and config.
    Subclasses set `_transposed` and define `_kernel_shape`, `_product`,
    `_block_kernel`, `_kernel_once` and `compute_output_shape`."""

    _transposed = False

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
        self.kernel_size = _image.pair(kernel_size, "kernel_size")
        self.strides = _image.pair(strides, "strides")
        self.dilation_rate = _image.pair(dilation_rate, "dilation_rate")
        padding = _image.padding(padding)  # any case, as Keras' Conv2D
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            # As Keras' Conv2D and Conv2DTranspose: TensorFlow's
            # convolutions cannot.
            raise ValueError(
                "`strides > 1` cannot be combined with `dilation_rate > 1`. "
                f"Received: strides={strides!r}, "
                f"dilation_rate={dilation_rate!r}"
            )
        self.complex_matmul = cx.resolve_complex_matmul(complex_matmul)
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
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 4 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects images (batch, height, "
                "width, 2 * channels) with a known last axis. Received: "
                f"input_shape={input_shape}"
            )
        channels = (
            cx.check_even(input_shape[-1], "input_shape[-1]", input_shape) // 2
        )
        self._check_size(input_shape)
        add_complex_weights(self, self._kernel_shape(channels), (self.filters,))
        self.input_spec = keras.layers.InputSpec(
            ndim=4, axes={-1: 2 * channels}
        )

    def _check_size(self, input_shape):
        """Raises where the image is too small for the layer (see
        `ComplexConv2D`); nothing to check by default."""

    def call(self, inputs):
        self._check_size(tuple(inputs.shape))
        dtype = self.compute_dtype
        # Explicit casts: some backends' concatenations take no variables.
        kernel_real = ops.cast(self.kernel_real, dtype)
        kernel_imag = ops.cast(self.kernel_imag, dtype)
        # On the file's int8 grid in quantization-aware training: one
        # scale per output channel (axis 2 of a transposed kernel).
        kernel_real, kernel_imag = _tracing.quantize_kernel(
            kernel_real, kernel_imag, axis=2 if self._transposed else -1
        )
        kh, kw = self.kernel_size
        channels = kernel_real.shape[3 if self._transposed else 2]
        if _tracing.weights_once():
            outputs = self._product_once(inputs, kernel_real, kernel_imag)
        elif cx.use_gauss(
            self.complex_matmul, kh * kw * channels, self.filters, dtype=dtype
        ):
            outputs = cx.gauss_product_stacked(
                inputs, kernel_real, kernel_imag, self._product
            )
        else:
            kernel = self._block_kernel(kernel_real, kernel_imag)
            outputs = self._product(inputs, kernel)  # (B, H', W', 2F)
        return add_bias(self, outputs)

    def _product_once(self, inputs, kernel_real, kernel_imag):
        """The complex convolution with each real weight once: the rows
        `[-x_i | x_r]` (giving the real part) and `[x_r | x_i]` (the
        imaginary part) stacked on the batch axis, `(2B, H, W, 2C)`, one
        real convolution against `[W_i; W_r]` (`_kernel_once`), `(2B, H',
        W', F)`, its halves concatenated on the channels: `(B, H', W',
        2F)`. The negation is a product with -1 (TFLite's integer kernels
        have no NEG)."""
        real, imag = cx.split(inputs)  # (B, H, W, C) each
        rows = ops.concatenate(
            [ops.concatenate([imag * -1.0, real], axis=-1), inputs], axis=0
        )  # (2B, H, W, 2C)
        outputs = self._product(
            rows, self._kernel_once(kernel_real, kernel_imag)
        )  # (2B, H', W', F)
        real, imag = ops.split(outputs, 2, axis=0)  # (B, H', W', F) each
        return ops.concatenate([real, imag], axis=-1)

    def get_config(self):
        config = {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
        }
        if self._transposed:
            config["output_padding"] = self.output_padding
        return {
            **config,
            "dilation_rate": self.dilation_rate,
            "use_bias": self.use_bias,
            **weight_options_config(self),
            "complex_matmul": self.complex_matmul,
        }


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexConv2D(_ComplexConv2DBase):
    """A complex 2-D convolution on stacked, channels-last images.

    `y[p, q] = sum_{a, b} x[p * s_h + a * d_h, q * s_w + b * d_w] W[a, b]
    + b` (a cross-correlation, as `keras.layers.Conv2D`), with the complex
    kernel `W = kernel_real + i kernel_imag` `(kh, kw, C, F)` and the
    complex bias `b = bias_real + i bias_imag` `(F,)`: each output pixel is
    the complex product of the `C` complex channels of each pixel of its
    window with `W` at that tap, summed over the window. Strides, padding
    (`"valid"`, `"same"`, with `Conv2D`'s split of the padding: the extra
    pixel at the bottom and right) and dilation are `Conv2D`'s.

    The layer computes one real convolution of the stacked image against
    the block kernel `[[W_r, W_i], [-W_i, W_r]]` `(kh, kw, 2C, 2F)` (the
    same FLOPs as a real `Conv2D(2F)` on `2C` channels), or Gauss's three
    real convolutions (`complex_matmul`). Traced for a TFLite file
    (`cvattn_keras.export`) it is one `CONV_2D` of the rows `[-x_i | x_r]`
    and `[x_r | x_i]` stacked on the batch axis `(2B, H, W, 2C)` against
    `[W_i; W_r]` `(kh, kw, 2C, F)`: each real weight stored once, builtin
    ops only, int8-quantizable, each output summed in one accumulation.
    (The module's docstring compares it with the alternatives.)

    Args:
        filters: positive int, `F`, the complex output channels (`2F`
            real channels).
        kernel_size: positive int or `(kh, kw)`.
        strides: positive int or `(s_h, s_w)`. Defaults to 1.
        padding: `"valid"` (default) or `"same"`.
        dilation_rate: positive int or `(d_h, d_w)`. Defaults to 1;
            cannot exceed 1 where a stride does (as in Keras).
        use_bias: whether to add the complex bias. Defaults to `True`.
        kernel_initializer: as in `ComplexDense` (each part initialised
            independently; default `"complex_glorot_uniform"`, whose fans
            count the window's taps as Keras' do).
        bias_initializer: as in `ComplexDense` (default `"zeros"`).
        kernel_regularizer: applied to each part of the kernel.
        bias_regularizer: applied to each part of the bias.
        activity_regularizer: applied to the stacked output.
        kernel_constraint: applied to each part of the kernel.
        bias_constraint: applied to each part of the bias.
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`, as in
            `ComplexDense`: Gauss's form is three real convolutions
            against `W_r`, `W_i - W_r` and `W_r + W_i` (25% fewer FLOPs);
            `"auto"` takes it when `kh * kw * C` and `F` are both at least
            `complex.GAUSS_MIN_SIZE` (and the compute dtype is not
            float16). See benchmarks/conv2d_speed.py for the speeds.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Input shape:
        `(B, H, W, 2C)`: `C` real parts, then `C` imaginary parts, on the
        last axis. With `padding="valid"`, `H` and `W` must be at least the
        dilated kernel's `d * (k - 1) + 1` on their axis (a `ValueError`
        naming the image and the kernel otherwise, wherever a size is
        known; `H` and `W` may be `None`).

    Output shape:
        `(B, H', W', 2F)`: `H' = (H - d_h (kh - 1) - 1) // s_h + 1` for
        `"valid"`, `ceil(H / s_h)` for `"same"`; `W'` likewise.

    Examples:
        A 1 x 1 kernel multiplies every pixel by `W`; here `W = i`, so
        `1 + 2i` becomes `(1 + 2i) i = -2 + i`:

        >>> layer = ComplexConv2D(1, 1, use_bias=False)
        >>> layer.build((1, 1, 1, 2))
        >>> _ = layer.kernel_real.assign(keras.ops.zeros((1, 1, 1, 1)))
        >>> _ = layer.kernel_imag.assign(keras.ops.ones((1, 1, 1, 1)))
        >>> x = keras.ops.convert_to_tensor([[[[1.0, 2.0]]]])  # 1 + 2i
        >>> keras.ops.convert_to_numpy(layer(x)).tolist()  # [Re | Im]
        [[[[-2.0, 1.0]]]]
        >>> layer = ComplexConv2D(4, (3, 5), strides=2, padding="same")
        >>> tuple(layer(keras.ops.ones((2, 8, 9, 6))).shape)  # C=3 -> F=4
        (2, 4, 5, 8)
    """

    # The constructor is the base's (this layer's arguments and defaults).

    def _kernel_shape(self, channels):
        return self.kernel_size + (channels, self.filters)  # (kh, kw, C, F)

    def _product(self, inputs, kernel):
        """The real convolution, kernel `(kh, kw, in, out)`."""
        return ops.conv(
            inputs,
            kernel,
            strides=self.strides,
            padding=self.padding,
            data_format="channels_last",
            dilation_rate=self.dilation_rate,
        )

    def _block_kernel(self, kernel_real, kernel_imag):
        # (kh, kw, 2C, 2F): the inputs' channels on axis 2.
        return cx.block_kernel(kernel_real, kernel_imag, in_axis=2)

    def _kernel_once(self, kernel_real, kernel_imag):
        # (kh, kw, 2C, F): [W_i; W_r] on the input channels.
        return cx.kernel_once(kernel_real, kernel_imag, axis=2)

    def _check_size(self, input_shape):
        """Raises when a `"valid"` convolution gets a static height or
        width smaller than its dilated kernel (no output; the backends
        fail obscurely, with a negative size or a kernel error). A size
        known only at run time in a traced graph is not checked."""
        if self.padding != "valid" or len(input_shape) != 4:
            return
        sizes = check.static_shape(input_shape[1:3])
        spans = _spans(self.kernel_size, self.dilation_rate)
        if any(n is not None and n < s for n, s in zip(sizes, spans)):
            image = " x ".join("?" if n is None else str(n) for n in sizes)
            raise ValueError(
                f"{type(self).__name__} with padding='valid' needs images "
                f"of at least {spans[0]} x {spans[1]} pixels (height x "
                "width: dilation_rate * (kernel_size - 1) + 1 with "
                f"kernel_size={self.kernel_size}, dilation_rate="
                f"{self.dilation_rate}); use padding='same' for smaller "
                f"ones. Received: an image of {image} pixels (input_shape="
                f"{tuple(input_shape)})"
            )

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        self._check_size(input_shape)
        sizes = []
        spans = _spans(self.kernel_size, self.dilation_rate)
        for size, span, stride in zip(input_shape[1:3], spans, self.strides):
            if size is None:
                sizes.append(None)
            elif self.padding == "valid":
                sizes.append((size - span) // stride + 1)
            else:  # "same" keeps ceil(size / stride)
                sizes.append(-(-size // stride))
        return (input_shape[0], *sizes, 2 * self.filters)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexConv2DTranspose(_ComplexConv2DBase):
    """A complex transposed 2-D convolution on stacked, channels-last
    images: the decoder's upsampling of a U-Net.

    The adjoint of `ComplexConv2D`'s windows, as `keras.layers.
    Conv2DTranspose`: every input pixel `x[i, j]` (`C` complex channels)
    adds `x[i, j] W[a, b]` (its complex product with the kernel's tap)
    to the output pixel `(i * s_h + a * d_h, j * s_w + b * d_w)` of the
    uncropped output, which `padding` and `output_padding` then crop or
    extend exactly as in `Conv2DTranspose`; the complex bias `b` is added
    to every output pixel.

    The kernel keeps `Conv2DTranspose`'s layout: `kernel_real` and
    `kernel_imag` are `(kh, kw, F, C)`, the output channels before the
    input channels (the transpose of `ComplexConv2D`'s `(kh, kw, C, F)`),
    so a `Conv2DTranspose` kernel of a real model ports as it is.
    `bias_real`, `bias_imag` are `(F,)`.

    The layer computes one real transposed convolution of the stacked
    image against the block kernel `[[W_r, -W_i], [W_i, W_r]]` `(kh, kw,
    2F, 2C)` (the same FLOPs as a real `Conv2DTranspose(2F)` on `2C`
    channels), or Gauss's three (`complex_matmul`). Traced for a TFLite
    file it is one `TRANSPOSE_CONV` of the rows `[-x_i | x_r]` and `[x_r |
    x_i]` stacked on the batch axis against `[W_i | W_r]` `(kh, kw, F,
    2C)`: each real weight stored once, builtin ops only,
    int8-quantizable. (`dilation_rate > 1` computes on every backend, but
    TFLite's TRANSPOSE_CONV has no dilation: such a layer does not convert
    to builtin ops.)

    Args:
        filters: positive int, `F`, the complex output channels.
        kernel_size: positive int or `(kh, kw)`.
        strides: positive int or `(s_h, s_w)`, the upsampling factors.
            Defaults to 1.
        padding: `"valid"` (default) or `"same"`.
        output_padding: `None` (default) or an int or `(p_h, p_w)` of ints
            `>= 0`, each less than its stride: the output's extra rows and
            columns, as in `Conv2DTranspose`. With `padding="same"`, at
            least 1 on an axis whose dilated kernel size is even (0 gives
            a size that TensorFlow's kernel rejects; a `ValueError` here).
        dilation_rate: positive int or `(d_h, d_w)`. Defaults to 1;
            cannot exceed 1 where a stride does (as in Keras).
        use_bias: whether to add the complex bias. Defaults to `True`.
        kernel_initializer: as in `ComplexConv2D`.
        bias_initializer: as in `ComplexConv2D`.
        kernel_regularizer: as in `ComplexConv2D`.
        bias_regularizer: as in `ComplexConv2D`.
        activity_regularizer: as in `ComplexConv2D`.
        kernel_constraint: as in `ComplexConv2D`.
        bias_constraint: as in `ComplexConv2D`.
        complex_matmul: as in `ComplexConv2D` (`"auto"` compares `kh * kw
            * C` and `F` with `complex.GAUSS_MIN_SIZE`).
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Input shape:
        `(B, H, W, 2C)`; `H` and `W` may be `None`.

    Output shape:
        `(B, H', W', 2F)`, `Conv2DTranspose`'s sizes: with the dilated
        kernel `k' = d (k - 1) + 1`, `H' = (H - 1) s_h + k' + p_h` for
        `"valid"` (`p_h = max(k', s_h) - k'` without `output_padding`),
        and for `"same"` `H' = H s_h` without `output_padding`, `(H - 1)
        s_h + k' % 2 + p_h` with it; `W'` likewise.

    Examples:
        A 1 x 1 kernel with strides `(1, 2)` spreads the pixels out,
        zeros between: here `W = i`, so `1 + 2i` becomes `-2 + i` and `3i`
        becomes `-3`:

        >>> layer = ComplexConv2DTranspose(1, 1, strides=(1, 2))
        >>> layer.build((1, 1, 2, 2))
        >>> _ = layer.kernel_real.assign(keras.ops.zeros((1, 1, 1, 1)))
        >>> _ = layer.kernel_imag.assign(keras.ops.ones((1, 1, 1, 1)))
        >>> x = keras.ops.convert_to_tensor([[[[1.0, 2.0], [0.0, 3.0]]]])
        >>> y = keras.ops.convert_to_numpy(layer(x))  # (1, 1, 4, 2)
        >>> y[0, 0, :, 0].tolist(), y[0, 0, :, 1].tolist()  # Re, Im
        ([-2.0, 0.0, -3.0, 0.0], [1.0, 0.0, 0.0, 0.0])
        >>> layer = ComplexConv2DTranspose(4, 3, strides=2, padding="same")
        >>> tuple(layer(keras.ops.ones((2, 8, 9, 6))).shape)  # C=3 -> F=4
        (2, 16, 18, 8)
    """

    _transposed = True

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="valid",
        output_padding=None,
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
        self.output_padding = _output_padding(
            output_padding, kernel_size, strides, padding, dilation_rate
        )
        super().__init__(
            filters,
            kernel_size,
            strides,
            padding,
            dilation_rate,
            use_bias,
            kernel_initializer,
            bias_initializer,
            kernel_regularizer,
            bias_regularizer,
            activity_regularizer,
            kernel_constraint,
            bias_constraint,
            complex_matmul,
            **kwargs,
        )

    def _kernel_shape(self, channels):
        return self.kernel_size + (self.filters, channels)  # (kh, kw, F, C)

    def _product(self, inputs, kernel):
        """The real transposed convolution, kernel `(kh, kw, out, in)`."""
        return ops.conv_transpose(
            inputs,
            kernel,
            strides=self.strides,
            padding=self.padding,
            output_padding=self.output_padding,
            data_format="channels_last",
            dilation_rate=self.dilation_rate,
        )

    def _block_kernel(self, kernel_real, kernel_imag):
        # (kh, kw, 2F, 2C), outputs on axis 2: the transpose of the
        # convolution's block, [[W_r, -W_i], [W_i, W_r]] (rows: outputs).
        return cx.block_kernel(kernel_real, -kernel_imag, in_axis=2)

    def _kernel_once(self, kernel_real, kernel_imag):
        # (kh, kw, F, 2C): [W_i | W_r] on the input channels (last axis).
        return cx.kernel_once(kernel_real, kernel_imag, axis=3)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        spans = _spans(self.kernel_size, self.dilation_rate)
        extras = self.output_padding or (None, None)
        sizes = []
        for size, span, stride, extra in zip(
            input_shape[1:3], spans, self.strides, extras
        ):
            if size is None:
                sizes.append(None)
            elif self.padding == "valid":
                extra = max(span, stride) - span if extra is None else extra
                sizes.append((size - 1) * stride + span + extra)
            elif extra is None:
                sizes.append(size * stride)
            else:
                sizes.append((size - 1) * stride + span % 2 + extra)
        return (input_shape[0], *sizes, 2 * self.filters)
