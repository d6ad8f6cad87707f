"""ComplexDense: a complex affine map computed as one real contraction."""

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
class ComplexDense(keras.layers.Layer):
    """A densely connected complex layer on stacked `[real | imag]` tensors.

    Computes `y = x W + b` with the complex kernel `W = kernel_real + i
    kernel_imag` and complex bias `b = bias_real + i bias_imag`. Inputs and
    outputs are stacked: `in_features` complex features are `2 * in_features`
    real channels on the last axis, the real parts first. The product is the
    real matmul against the block kernel `[[W_r, W_i], [-W_i, W_r]]`, done as
    one contraction of the input planes `(..., 2, in)` with the kernel
    stacked `(2, in, 2, units)` (the same FLOPs; shardable by
    `cvattn_keras.distribution.get_layout_map`). Traced for a TFLite file
    (`cvattn_keras.export`), it is instead two matmuls of the rows `[-x_i |
    x_r]` (the real part) and `x` (the imaginary part) against one kernel
    `[W_i; W_r]` `(2 in, units)` (`complex.matmul_once`), so that the file
    stores each real weight once.

    Porting the reference PyTorch `ComplexLinear` (two `nn.Linear`, weights
    `W_r`, `W_i` stored `[out, in]`, biases `b_r`, `b_i`): set
    `kernel_real = W_r.T`, `kernel_imag = W_i.T`, `bias_real = b_r - b_i`,
    `bias_imag = b_r + b_i` (its effective complex bias).

    Args:
        units: positive int, the number of complex output features. The
            output has `2 * units` real channels.
        use_bias: whether to add the complex bias. Defaults to `True`.
        kernel_initializer: initializer for each of `kernel_real` and
            `kernel_imag`, cloned so the two parts are drawn independently.
            Defaults to `"complex_glorot_uniform"` (real Glorot scaled by
            `1/sqrt(2)` per part, so the complex variance is Glorot's);
            `None` means this default.
        bias_initializer: initializer for `bias_real` and `bias_imag`.
            Defaults to `"zeros"`; `None` means this default.
        kernel_regularizer: applied to each part of the kernel.
        bias_regularizer: applied to each part of the bias.
        activity_regularizer: applied to the stacked output.
        kernel_constraint: applied to each part of the kernel.
        bias_constraint: applied to each part of the bias.
        complex_matmul: how the complex product is computed: `"block"`,
            the contraction above (four real multiplications per complex
            one); `"gauss"`, Gauss's three real matmuls (`k1 = (x_r + x_i)
            W_r`, `k2 = x_r (W_i - W_r)`, `k3 = x_i (W_r + W_i)`; `Re = k1
            - k3`, `Im = k1 + k2`: 25% fewer FLOPs, the same results
            within float32 rounding, see `complex.gauss_product`); or
            `"auto"` (default): Gauss's form when `in_features` and
            `units` are both at least `complex.GAUSS_MIN_SIZE` (512), where
            it was measured faster, the block form otherwise. Under a
            float16 compute dtype Gauss's form computes in float32 (its
            sums overflow float16 where the block form's results do not)
            and `"auto"` takes the block form. A TFLite export always uses
            its own forms.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Input shape:
        `(..., 2 * in_features)`, rank >= 2.

    Output shape:
        `(..., 2 * units)`.

    Examples:
        >>> layer = ComplexDense(4)
        >>> tuple(layer(keras.ops.ones((2, 3, 6))).shape)  # 3 -> 4 complex
        (2, 3, 8)
    """

    def __init__(
        self,
        units,
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
        units = check.positive_int(units, "units")
        complex_matmul = cx.resolve_complex_matmul(complex_matmul)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.units = units
        self.use_bias = bool(use_bias)
        self.complex_matmul = complex_matmul
        set_weight_options(
            self,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) < 2:
            raise ValueError(
                "ComplexDense expects inputs of rank >= 2, (batch, ..., "
                f"2 * in_features). Received: input_shape={input_shape}"
            )
        if input_shape[-1] is None:
            raise ValueError(
                "The last axis of the input to ComplexDense must be known. "
                f"Received: input_shape={input_shape}"
            )
        cx.check_even(input_shape[-1], "input_shape[-1]", input_shape)
        in_features = input_shape[-1] // 2
        add_complex_weights(self, (in_features, self.units), (self.units,))
        self.input_spec = keras.layers.InputSpec(
            min_ndim=2, axes={-1: 2 * in_features}
        )

    @property
    def in_features(self):
        """The number of complex input features (known once built)."""
        return None if not self.built else self.kernel_real.shape[0]

    def call(self, inputs):
        # The block matmul [x_r | x_i] @ [[W_r, W_i], [-W_i, W_r]] written as
        # one contraction of the input planes (..., 2, I) against the kernel
        # stacked on new axes (2, I, 2, U): the same FLOPs and speed (measured
        # on TF and JAX, jit, forward and backward), but W_r and W_i keep
        # their own axes, so a shard of their input or units axis is a
        # contiguous block of the contraction. Under keras.distribution's
        # ModelParallel an input-axis shard then needs the one all-reduce of
        # a real Dense, where the concatenated block kernel needed
        # all-to-alls. (Gauss's form, below, needs more communication under
        # ModelParallel, where "auto" keeps this one: complex.use_gauss.)
        # Explicit casts: tf.stack does not take Keras variables.
        dtype = self.compute_dtype
        kernel_real, kernel_imag = _tracing.quantize_kernel(
            ops.cast(self.kernel_real, dtype), ops.cast(self.kernel_imag, dtype)
        )
        if _tracing.weights_once():
            kernel = cx.kernel_once(kernel_real, kernel_imag)  # (2I, U)
            outputs = cx.matmul_once(inputs, kernel)  # (..., 2U)
        elif cx.use_gauss(self.complex_matmul, *kernel_real.shape, dtype=dtype):
            outputs = cx.gauss_product_stacked(
                inputs, kernel_real, kernel_imag, ops.matmul
            )
        else:
            planes = self._apply_block(inputs, kernel_real, kernel_imag)
            if self.use_bias:  # on the planes, as the block form always did
                bias = [self.bias_real, self.bias_imag]
                planes = planes + ops.stack([ops.cast(b, dtype) for b in bias])
            return cx.merge_planes(planes)
        return add_bias(self, outputs)

    def _apply_block(self, inputs, kernel_real, kernel_imag):
        """`(..., 2I)` -> planes `(..., 2, U)` by the block kernel."""
        kernel = ops.stack(
            [
                ops.stack([kernel_real, kernel_imag], axis=1),
                ops.stack([-kernel_imag, kernel_real], axis=1),
            ]
        )
        planes = cx.split_planes(inputs)  # (..., 2, I)
        rank = len(planes.shape)
        return ops.tensordot(
            planes, kernel, axes=[[rank - 2, rank - 1], [0, 1]]
        )  # (..., 2, U)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        cx.check_even(input_shape[-1], "input_shape[-1]", input_shape)
        return input_shape[:-1] + (2 * self.units,)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "use_bias": self.use_bias,
                **weight_options_config(self),
                "complex_matmul": self.complex_matmul,
            }
        )
        return config
