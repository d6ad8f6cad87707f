"""The paper's front end: complex convolutions over the frequency bins of
each frame."""

import keras
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import activations
from cvattn_keras import complex as cx
from cvattn_keras import initializers as cinit
from cvattn_keras.layers._weights import resolve_option
from cvattn_keras.layers.convolution import ComplexConv1D
from cvattn_keras.layers.normalization import ComplexBatchNormalization


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexFrequencyFrontEnd(keras.layers.Layer):
    """Complex convolutions over the frequency bins of every frame, flattened
    into one complex feature vector per frame (Eilers & Jiang's front end).

    Each frame's `F` complex bins are read as a one-channel signal of
    length `F`, and every block applies a `ComplexConv1D` (`"valid"`
    padding) over that frequency axis, a `ComplexBatchNormalization`
    (statistics over frames and bins, per channel) and the split leaky
    ReLU. The last block's `(L, C)` complex map is flattened channel-major
    (feature `c * L + l`), as PyTorch's `Flatten` of `(C, L)` does, so a
    frame of the paper's 2048 bins becomes `62 * 128 = 7936` complex
    features.

    The defaults are the reference's (`Transformer_Pred.conv`): channels
    16, 32, 64, 64, 128, kernels 6, 3, 3, 3, 3, stride 2, and its batch
    norm (`convention="reference"`, momentum 0.5, epsilon 1e-9; see
    `ComplexBatchNormalization`). Bins after block `i`:
    `L_{i+1} = (L_i - kernel_sizes[i]) // strides[i] + 1`; 2048 -> 1022 ->
    510 -> 254 -> 126 -> 62.

    Args:
        filters: complex output channels of each block.
        kernel_sizes: kernel width (in bins) of each block; one per block
            or one int for all.
        strides: stride of each block, or one int for all. Defaults to 2.
        activation: the complex activation after each norm. Defaults to
            `"split_leaky_relu"`, the reference's.
        batch_norm_convention: `"reference"` (default) or `"trabelsi"`,
            passed to every `ComplexBatchNormalization`.
        batch_norm_momentum: the momentum of every batch norm (Keras'
            sense of momentum). Defaults to `0.5`.
        batch_norm_epsilon: the epsilon of every batch norm. Defaults to
            `1e-9`.
        synchronized: the batch norms' `synchronized`.
        kernel_initializer: the kernel initializer of every convolution.
        bias_initializer: the bias initializer of every convolution.
        **kwargs: base `Layer` arguments.

    Input shape:
        `(B, T, 2 * F)`: `T` frames of `F` complex bins, stacked
        `[Re(F) | Im(F)]` per frame (the layout of the MusicNet feature
        files). Output: `(B, T, 2 * filters[-1] * L)`, stacked.

    Call arguments:
        inputs: the spectra.

        training: batch statistics in the norms when `True`.

        mask: optional boolean `(B, T)`: masked frames are left out of the
            batch statistics.

    Sublayers, as attributes: `convolutions` and `norms`, lists of the
    blocks' `ComplexConv1D` and `ComplexBatchNormalization`.
    """

    # Calls `_tracing.quantize` in quantization-aware training (counted by
    # `quantization.quantize_model`).
    _quantization_points = True

    def __init__(
        self,
        filters=(16, 32, 64, 64, 128),
        kernel_sizes=(6, 3, 3, 3, 3),
        strides=2,
        activation="split_leaky_relu",
        batch_norm_convention="reference",
        batch_norm_momentum=0.5,
        batch_norm_epsilon=1e-9,
        synchronized=False,
        kernel_initializer="complex_glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        filters = check.positive_ints(filters, "filters")
        blocks = len(filters)
        kernel_sizes = check.positive_ints(kernel_sizes, "kernel_sizes", blocks)
        strides = check.positive_ints(strides, "strides", blocks)
        # Checked here, so that errors name this layer's arguments.
        batch_norm_momentum = check.rate(
            batch_norm_momentum, "batch_norm_momentum"
        )
        batch_norm_epsilon = check.greater_than(
            batch_norm_epsilon, "batch_norm_epsilon"
        )
        if batch_norm_convention not in ComplexBatchNormalization.CONVENTIONS:
            raise ValueError(
                "`batch_norm_convention` must be one of "
                f"{list(ComplexBatchNormalization.CONVENTIONS)}. Received: "
                f"batch_norm_convention={batch_norm_convention!r}"
            )
        if not isinstance(synchronized, bool):
            raise ValueError(
                "`synchronized` must be True or False. "
                f"Received: synchronized={synchronized!r}"
            )
        if not isinstance(activation, str):
            raise ValueError(
                "`activation` must be the name of a complex activation. "
                f"Received: activation={activation!r}"
            )
        activation_fn = activations.get(activation)
        super().__init__(**kwargs)
        # A function, not a layer: its output carries no Keras mask, which
        # the next convolution could not take (the norms get the frames'
        # mask explicitly).
        self._activation = activation_fn
        self.supports_masking = True
        self.filters = filters
        self.kernel_sizes = kernel_sizes
        self.strides = strides
        self.activation = activation
        self.batch_norm_convention = batch_norm_convention
        self.batch_norm_momentum = batch_norm_momentum
        self.batch_norm_epsilon = batch_norm_epsilon
        self.synchronized = synchronized
        self.kernel_initializer = resolve_option(
            "kernel_initializer", kernel_initializer
        )
        self.bias_initializer = resolve_option(
            "bias_initializer", bias_initializer
        )
        common = dict(dtype=self.dtype_policy)
        # Created here, so that bad arguments fail at construction.
        self.convolutions = [
            ComplexConv1D(
                channels,
                kernel,
                strides=stride,
                # Distinct seeds per block when the initializer is seeded.
                kernel_initializer=cinit.clone(self.kernel_initializer, i),
                bias_initializer=cinit.clone(self.bias_initializer, i),
                name=f"conv_{i}",
                **common,
            )
            for i, (channels, kernel, stride) in enumerate(
                zip(filters, kernel_sizes, strides)
            )
        ]
        self.norms = [
            ComplexBatchNormalization(
                momentum=batch_norm_momentum,
                epsilon=batch_norm_epsilon,
                convention=batch_norm_convention,
                synchronized=synchronized,
                name=f"norm_{i}",
                **common,
            )
            for i in range(blocks)
        ]

    def lengths(self, bins):
        """The number of bins after each block, for `bins` input bins (a
        `ValueError` when a block would get fewer bins than its kernel)."""
        lengths = [bins]
        for i, (kernel, stride) in enumerate(
            zip(self.kernel_sizes, self.strides)
        ):
            if lengths[-1] < kernel:
                raise ValueError(
                    f"{type(self).__name__} block {i} (kernel {kernel}) gets "
                    f"{lengths[-1]} bins: {bins} input bins are too few for "
                    f"kernel_sizes={self.kernel_sizes}, strides="
                    f"{self.strides}. Received: bins={bins}"
                )
            lengths.append((lengths[-1] - kernel) // stride + 1)
        return lengths

    def _bins(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects (batch, frames, 2 * bins) "
                f"with a known last axis. Received: input_shape={input_shape}"
            )
        size = cx.check_even(input_shape[-1], "input_shape[-1]", input_shape)
        return size // 2

    def build(self, input_shape):
        lengths = self.lengths(self._bins(input_shape))
        channels = (1,) + self.filters
        for i, layer in enumerate(self.convolutions):
            layer.build((None, lengths[i], 2 * channels[i]))
            shape = (None, lengths[i + 1], 2 * channels[i + 1])
            self.norms[i].build(shape)
        self.input_spec = keras.layers.InputSpec(
            ndim=3, axes={-1: input_shape[-1]}
        )

    def call(self, inputs, training=None, mask=None):
        bins = inputs.shape[-1] // 2
        frames = inputs.shape[1]
        if frames is None:
            frames = ops.shape(inputs)[1]
        # (B, T, [Re | Im]) -> (B T, F, 2): one complex channel per frame.
        planes = ops.reshape(inputs, (-1, 2, bins))
        x = ops.transpose(planes, (0, 2, 1))
        keep = None if mask is None else ops.reshape(mask, (-1, 1))
        for i, (conv, norm) in enumerate(zip(self.convolutions, self.norms)):
            if i == 0 and _tracing.weights_once():
                # The first convolution's image (-x_i, x_r, x_i) from the
                # planes: slices of whole rows (complex.columns_once would
                # slice one channel of two).
                columns = ops.concatenate([planes[:, 1:] * -1.0, planes], 1)
                image = ops.transpose(columns, (0, 2, 1))  # (B T, F, 3)
                x = conv.call_columns(cx.reshape_tail(image, 2, (3, 1)))
            else:
                x = conv(x)
            # Quantization-aware training rounds the tensors an integer
            # file quantizes here: each convolution's output and each
            # activation's but the last (whose range is the layer's
            # output's: a transpose, reshape and concatenation follow).
            x = _tracing.quantize(x)
            step_mask = None
            if keep is not None:
                step_mask = ops.repeat(keep, x.shape[1], axis=1)
            x = self._activation(norm(x, training=training, mask=step_mask))
            if i < len(self.convolutions) - 1:
                x = _tracing.quantize(x)
        # (B T, L, 2C) -> channel-major (B T, C L) per part -> (B, T, 2CL).
        length, channels = x.shape[1], self.filters[-1]
        parts = [
            ops.reshape(ops.transpose(part, (0, 2, 1)), (-1, channels * length))
            for part in cx.split(x)
        ]
        x = ops.concatenate(parts, axis=-1)
        return ops.reshape(x, (-1, frames, 2 * channels * length))

    def compute_output_shape(self, input_shape):
        length = self.lengths(self._bins(input_shape))[-1]
        return (
            input_shape[0],
            input_shape[1],
            2 * self.filters[-1] * length,
        )

    def get_config(self):
        return {
            **super().get_config(),
            "filters": list(self.filters),
            "kernel_sizes": list(self.kernel_sizes),
            "strides": list(self.strides),
            "activation": self.activation,
            "batch_norm_convention": self.batch_norm_convention,
            "batch_norm_momentum": self.batch_norm_momentum,
            "batch_norm_epsilon": self.batch_norm_epsilon,
            "synchronized": self.synchronized,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
            "bias_initializer": keras.initializers.serialize(
                self.bias_initializer
            ),
        }
