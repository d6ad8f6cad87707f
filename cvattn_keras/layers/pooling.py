"""Pooling that keeps the phase, and upsampling, on stacked complex images.

The layers of a complex encoder-decoder (a U-Net) between its
convolutions: `ComplexAveragePooling2D` and `ComplexMaxPooling2D` halve
the image on the way down, `ComplexUpSampling2D` doubles it on the way up
(or `ComplexConv2DTranspose`, which learns its upsampling). Images are
channels last and stacked, `(B, H, W, 2C)`: the `C` real parts, then the
`C` imaginary parts, on the last axis.

Averaging and interpolation are linear and act on each real channel
alike, so Keras' own `AveragePooling2D` and `UpSampling2D` already compute
the right complex values on stacked channels; the complex layers add the
layout check (an odd channel axis is a `ValueError`) and a name that says
the model is complex. A real `MaxPooling2D` is *not* correct: it takes the
largest real part and the largest imaginary part separately, a value that
may not be in the window, with neither its modulus nor its phase;
`ComplexMaxPooling2D` takes the value of largest modulus.
"""

import keras
import numpy as np
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import complex as cx
from cvattn_keras.layers import _image


class _ComplexPooling2D(keras.layers.Layer):
    """What the two poolings share: arguments, checks, shapes, config."""

    def __init__(self, pool_size=2, strides=None, padding="valid", **kwargs):
        pool_size = _image.pair(pool_size, "pool_size")
        strides = pool_size if strides is None else strides
        strides = _image.pair(strides, "strides")
        padding = _image.padding(padding)
        super().__init__(**kwargs)
        self.pool_size = pool_size
        self.strides = strides
        self.padding = padding

    def build(self, input_shape):
        channels = _image.check_image(self, input_shape)
        self._check_size(input_shape)
        self.input_spec = keras.layers.InputSpec(
            ndim=4, axes={-1: 2 * channels}
        )

    def _check_size(self, input_shape):
        """A `"valid"` pooling of an image smaller than its window has no
        output: a `ValueError` naming both, where the size is static."""
        if self.padding != "valid":
            return
        for size, pool, axis in zip(
            _image.spatial(input_shape), self.pool_size, ("height", "width")
        ):
            if size is not None and size < pool:
                raise ValueError(
                    f"{type(self).__name__} with padding='valid' needs "
                    f"images at least pool_size={self.pool_size} large; "
                    "use padding='same' for smaller ones. Received: "
                    f"{axis} {size} (input_shape={tuple(input_shape)})"
                )

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        _image.check_image(self, input_shape)
        self._check_size(input_shape)
        height, width = (
            _image.pooled_size(size, pool, stride, self.padding)
            for size, pool, stride in zip(
                input_shape[1:3], self.pool_size, self.strides
            )
        )
        return (input_shape[0], height, width, input_shape[3])

    def get_config(self):
        return {
            **super().get_config(),
            "pool_size": self.pool_size,
            "strides": self.strides,
            "padding": self.padding,
        }


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexAveragePooling2D(_ComplexPooling2D):
    """The complex average of each window of a stacked complex image.

    `y[a, b] = mean of x[a * sh + i, b * sw + j]` over the window `0 <= i <
    ph`, `0 <= j < pw`: the average of complex numbers, whose phase is
    that of their sum (a window of equal phases keeps it). Computed as
    Keras' `average_pool` on the stacked channels (the average is linear
    and takes each real channel alike), so it is exactly what
    `keras.layers.AveragePooling2D` computes on stacked images; this layer
    adds the layout check (an odd channel axis is a `ValueError`) and a
    name that says the model is complex (and the same `"same"` windows
    on every backend: Keras' torch backend pads its own otherwise). In a
    TFLite file it is one AVERAGE_POOL_2D (float and int8 kernels), after
    a PAD and before a MUL by a constant for `"same"`.

    Args:
        pool_size: a positive int or a pair `(ph, pw)`: the window.
            Defaults to 2.
        strides: a positive int, a pair, or `None` (default): the window's
            step, `pool_size` when `None`.
        padding: `"valid"` (default: only whole windows) or `"same"`
            (`ceil(H / sh)` rows: windows that cross the edge average the
            pixels inside the image only, as Keras' `"same"` average
            pooling does).
        **kwargs: base `Layer` arguments.

    Input shape:
        `(B, H, W, 2C)`, channels last, stacked: the `C` real parts, then
        the `C` imaginary parts.

    Output shape:
        `(B, H', W', 2C)`: `H' = (H - ph) // sh + 1` for `"valid"`,
        `ceil(H / sh)` for `"same"` (and `W'` alike).

    Example:
        One 2 x 2 window of one channel holding `1, 1j, -1, 1 + 1j`
        averages to `0.25 + 0.5j`:

        >>> import numpy as np
        >>> import cvattn_keras as cvk
        >>> z = np.array([1, 1j, -1, 1 + 1j]).reshape(1, 2, 2, 1)
        >>> y = ComplexAveragePooling2D(2)(cvk.to_stacked(z))
        >>> cvk.from_stacked(y).ravel()
        array([0.25+0.5j], dtype=complex64)
    """

    def call(self, inputs):
        # (B, H, W, 2C) -> (B, H', W', 2C): each real channel averaged
        # alike, so each complex channel is averaged.
        if self.padding == "valid":
            return ops.average_pool(
                inputs,
                self.pool_size,
                strides=self.strides,
                padding="valid",
                data_format="channels_last",
            )
        # "same", written out: Keras' torch backend pads its "same"
        # average pooling otherwise than TensorFlow and JAX (measured:
        # the edge windows differ). Zeros padded as TensorFlow pads, the
        # whole windows averaged, then scaled by the inverse of the
        # fraction of each window inside the image (a constant for a
        # static image size: one MUL in a TFLite file).
        shape = ops.shape(inputs)
        pads = [(0, 0)] + [
            _same_pads(shape[axis], pool, stride)
            for axis, pool, stride in zip((1, 2), self.pool_size, self.strides)
        ]
        means = ops.average_pool(
            ops.pad(inputs, pads + [(0, 0)]),
            self.pool_size,
            strides=self.strides,
            padding="valid",
            data_format="channels_last",
        )
        height, width = _image.spatial(inputs.shape)
        if height is not None and width is not None:
            rows, columns = (
                _inside(size, pool, stride, before)
                for size, pool, stride, (before, _) in zip(
                    (height, width), self.pool_size, self.strides, pads[1:]
                )
            )
            scale = 1.0 / (rows[:, None] * columns[None, :])  # (H', W')
            scale = ops.convert_to_tensor(scale[None, :, :, None], means.dtype)
        else:
            ones = ops.ones((1, shape[1], shape[2], 1))
            inside = ops.pad(ones, pads + [(0, 0)])
            fraction = ops.average_pool(
                inside,
                self.pool_size,
                strides=self.strides,
                padding="valid",
                data_format="channels_last",
            )  # (1, H', W', 1)
            scale = ops.cast(1.0 / fraction, means.dtype)
        return means * scale


def _inside(size, pool, stride, before):
    """The fraction of each of the `ceil(size / stride)` windows of a
    `"same"` pooling (`before` samples padded first) inside `size`
    samples, a NumPy array."""
    starts = np.arange(-(-size // stride)) * stride - before
    ends = np.minimum(starts + pool, size)
    return (ends - np.maximum(starts, 0)) / pool


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexMaxPooling2D(_ComplexPooling2D):
    """Max pooling by modulus: each window's complex value of largest
    modulus, its phase kept.

    `y[a, b] = x[a * sh + i*, b * sw + j*]` with `(i*, j*)` the element of
    the window of largest modulus `|x|`. **Ties** (equal moduli, an
    all-zero window among them) go to the first such element in row-major
    order within the window (smallest `i`, then smallest `j`), as an
    argmax does. The **gradient** flows to the selected element only (one
    per window, so a zero window passes its gradient to its first
    element; finite everywhere: the moduli only compare, they are not
    differentiated).

    A real `keras.layers.MaxPooling2D` on stacked channels is not this: it
    takes the largest real part and the largest imaginary part apart, a
    complex value that need not be in the window.

    The moduli are computed in float32 (under mixed precision too) and
    correct over the whole float range (`complex.modulus`). Traced for a
    TFLite file (`cvattn_keras.export`), the squared modulus `re^2 +
    im^2` selects instead (MUL and ADD, which have int8 kernels; it
    orders as the modulus does except above about 1.8e19, where the
    squares overflow float32, and below about 1e-19). The window is
    walked as `ph * pw` strided slices of the image, each compared with
    the best so far (GREATER, SELECT_V2, MAXIMUM): builtin ops with
    float and int8 kernels, for any `pool_size`, `strides` and
    `padding`. In an int8 file the moduli are quantized: two elements of
    a window whose moduli lie within one quantization step may swap.

    Args:
        pool_size: a positive int or a pair `(ph, pw)`: the window.
            Defaults to 2.
        strides: a positive int, a pair, or `None` (default): the window's
            step, `pool_size` when `None`.
        padding: `"valid"` (default: only whole windows) or `"same"`
            (`ceil(H / sh)` rows, as Keras' `"same"` pooling pads; the
            padding is never selected: a window that crosses the edge
            takes the largest of its pixels inside the image).
        **kwargs: base `Layer` arguments.

    Input shape:
        `(B, H, W, 2C)`, channels last, stacked: the `C` real parts, then
        the `C` imaginary parts.

    Output shape:
        `(B, H', W', 2C)`: `H' = (H - ph) // sh + 1` for `"valid"`,
        `ceil(H / sh)` for `"same"` (and `W'` alike); an empty batch for
        a batch of 0.

    Example:
        One 2 x 2 window of one channel holding `1, 3 - 4j, 1 + 1j, 0.5`
        gives `3 - 4j` (modulus 5), where a real max pooling of the
        stacked channels would give `3 + 1j`:

        >>> import numpy as np
        >>> import cvattn_keras as cvk
        >>> z = np.array([1, 3 - 4j, 1 + 1j, 0.5]).reshape(1, 2, 2, 1)
        >>> y = ComplexMaxPooling2D(2)(cvk.to_stacked(z))
        >>> cvk.from_stacked(y).ravel()
        array([3.-4.j], dtype=complex64)
    """

    def call(self, inputs):
        if inputs.shape[0] == 0 and None not in inputs.shape:
            # An empty batch (eager, where Keras' max refuses empty
            # tensors): the empty output, an empty slice of the input
            # (`H' <= H`, `W' <= W`), so it stays connected to it.
            _, height, width, _ = self.compute_output_shape(inputs.shape)
            return inputs[:, :height, :width, :]
        keys = ops.stop_gradient(_selection_keys(inputs))  # (B, H, W, C)
        # The parts as planes (B, H, W, 2, C) and the keys (B, H, W, 1, C):
        # one selection takes both parts of a complex value.
        planes = cx.split_planes(inputs)
        keys = ops.expand_dims(keys, axis=-2)
        (ph, pw), (sh, sw) = self.pool_size, self.strides
        if self.padding == "same":
            pads = [
                _same_pads(ops.shape(inputs)[axis], pool, stride)
                for axis, pool, stride in ((1, ph, sh), (2, pw, sw))
            ]
            pads = [(0, 0)] + pads + [(0, 0), (0, 0)]
            planes = ops.pad(planes, pads)
            # Moduli are >= 0: a key of -1 is never the largest, so the
            # padding is never selected.
            keys = ops.pad(keys, pads, constant_values=-1.0)
        shape = ops.shape(planes)
        # The number of windows down and across (H', W').
        rows = (shape[1] - ph) // sh + 1
        columns = (shape[2] - pw) // sw + 1
        best = best_key = None
        for i in range(ph):
            for j in range(pw):
                # The (i, j)-th element of every window: (B, H', W', 2, C).
                window = (
                    slice(None),
                    slice(i, i + sh * (rows - 1) + 1, sh),
                    slice(j, j + sw * (columns - 1) + 1, sw),
                )
                value, key = planes[window], keys[window]
                if best is None:
                    best, best_key = value, key
                    continue
                # Strictly larger: ties keep the earlier element.
                best = ops.where(ops.greater(key, best_key), value, best)
                best_key = ops.maximum(key, best_key)
        return cx.merge_planes(best)  # (B, H', W', 2C)


def _selection_keys(inputs):
    """What `ComplexMaxPooling2D` compares, `(B, H, W, C)` float32: the
    modulus (`complex.modulus`, safe over the whole float range), or the
    squared modulus in a graph traced for a TFLite file (its int8 kernels;
    the same order within float32's range)."""
    inputs = ops.cast(inputs, "float32")
    if _tracing.exporting():
        real, imag = cx.split(inputs)
        return real * real + imag * imag
    return cx.modulus(inputs)


def _same_pads(size, pool, stride):
    """`(before, after)`: Keras' (TensorFlow's) `"same"` padding of `size`
    samples (a static int or a run-time scalar) for a window `pool` with
    `stride`: `ceil(size / stride)` windows, the extra sample after."""
    steps = -(-size // stride)
    total = (steps - 1) * stride + pool - size
    if isinstance(total, int):
        total = max(total, 0)
    else:
        total = ops.maximum(total, 0)
    return total // 2, total - total // 2


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexUpSampling2D(keras.layers.Layer):
    """Upsampling of a stacked complex image: each complex pixel repeated
    (`"nearest"`) or interpolated (`"bilinear"`).

    `"nearest"`: `y[a, b] = x[a // sh, b // sw]`. `"bilinear"`: Keras'
    (TensorFlow's `tf.image.resize`) bilinear interpolation with half-pixel
    centres: output row `a` samples the input at `(a + 0.5) / sh - 0.5`,
    clamped to the image, and its complex value is the weighted sum of
    the two (by two) nearest pixels, with real weights. Both are linear
    and act on each real channel alike, so they are exactly what
    `keras.layers.UpSampling2D` computes on stacked images; this layer
    adds the layout check (an odd channel axis is a `ValueError`) and a
    name that says the model is complex (and, for `"bilinear"`, images
    whose size is known only at run time, which Keras' resize does not
    take: each axis is then interpolated by slices and weighted sums).
    In a TFLite file: reshapes and broadcasts (`"nearest"`) or
    RESIZE_BILINEAR, builtin ops with float and int8 kernels.

    Args:
        size: a positive int or a pair `(sh, sw)`: the upsampling factors.
            Defaults to 2.
        interpolation: `"nearest"` (default) or `"bilinear"`.
        **kwargs: base `Layer` arguments.

    Input shape:
        `(B, H, W, 2C)`, channels last, stacked.

    Output shape:
        `(B, sh * H, sw * W, 2C)`.

    Example:
        A row `1, 1j` upsampled by 2 across, bilinear: `1, 0.75 + 0.25j,
        0.25 + 0.75j, 1j` (the edges clamped):

        >>> import numpy as np
        >>> import cvattn_keras as cvk
        >>> z = np.array([1, 1j]).reshape(1, 1, 2, 1)
        >>> layer = ComplexUpSampling2D((1, 2), interpolation="bilinear")
        >>> cvk.from_stacked(layer(cvk.to_stacked(z))).ravel()
        array([1.  +0.j  , 0.75+0.25j, 0.25+0.75j, 0.  +1.j  ], dtype=complex64)
    """

    def __init__(self, size=2, interpolation="nearest", **kwargs):
        size = _image.pair(size, "size")
        if interpolation not in ("nearest", "bilinear"):
            raise ValueError(
                "`interpolation` must be 'nearest' or 'bilinear'. "
                f"Received: interpolation={interpolation!r}"
            )
        super().__init__(**kwargs)
        self.size = size
        self.interpolation = interpolation

    def build(self, input_shape):
        channels = _image.check_image(self, input_shape)
        self.input_spec = keras.layers.InputSpec(
            ndim=4, axes={-1: 2 * channels}
        )

    def call(self, inputs):
        rows, columns = self.size
        if self.interpolation == "nearest":
            # (B, H, W, 2C) -> (B, sh H, sw W, 2C), each pixel repeated.
            outputs = ops.repeat(inputs, rows, axis=1)
            return ops.repeat(outputs, columns, axis=2)
        height, width = _image.spatial(inputs.shape)
        if height is None or width is None:
            # Keras' resize needs static sizes: each axis interpolated
            # between neighbours (the same arithmetic, in more ops).
            outputs = _upsample_linear(inputs, rows, axis=1)
            return _upsample_linear(outputs, columns, axis=2)
        outputs = ops.image.resize(
            inputs,
            (height * rows, width * columns),
            interpolation="bilinear",
            data_format="channels_last",
        )
        return ops.cast(outputs, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        _image.check_image(self, input_shape)
        height, width = (
            None if size is None else size * factor
            for size, factor in zip(input_shape[1:3], self.size)
        )
        return (input_shape[0], height, width, input_shape[3])

    def get_config(self):
        return {
            **super().get_config(),
            "size": self.size,
            "interpolation": self.interpolation,
        }


def _upsample_linear(x, factor, axis):
    """`x` `(B, H, W, 2C)` upsampled `factor` times on `axis` (1 or 2)
    by linear interpolation with half-pixel centres, the edges clamped:
    output sample `a factor + k` lies `d = (k + 0.5) / factor - 0.5` from
    input sample `a`, between it and its neighbour on `d`'s side."""
    if factor == 1:
        return x
    before = (slice(None),) * axis
    first = x[before + (slice(0, 1),)]
    last = x[before + (slice(-1, None),)]
    previous = ops.concatenate([first, x[before + (slice(0, -1),)]], axis)
    following = ops.concatenate([x[before + (slice(1, None),)], last], axis)
    parts = []
    for k in range(factor):
        d = (k + 0.5) / factor - 0.5
        neighbour = previous if d < 0 else following
        parts.append((1.0 - abs(d)) * x + abs(d) * neighbour)
    outputs = ops.stack(parts, axis=axis + 1)  # (..., n, factor, ...)
    shape = list(ops.shape(x))
    shape[axis] = shape[axis] * factor
    return cx.reshape(outputs, shape)
