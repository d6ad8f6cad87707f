"""The attention layer's projections onto and from the heads: a
`ComplexDense`'s weights applied through `einsum` (the block kernel, or
Gauss's three products), or each real weight once (`complex.matmul_once`,
the export's form). In quantization-aware training the kernels are on
the file's int8 grid (`_tracing.quantize_kernel`)."""

import numpy as np
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import complex as cx


def stacked_bias(dense, bias_shape):
    """A `ComplexDense`'s complex bias, each part reshaped to `bias_shape`,
    concatenated `[real | imag]` on the last axis."""
    return ops.concatenate(
        [
            ops.reshape(dense.bias_real, bias_shape),
            ops.reshape(dense.bias_imag, bias_shape),
        ],
        axis=-1,
    )


def block_einsum(dense, inputs, equation, kernel_shape, in_axis, bias_shape):
    """Applies a `ComplexDense`'s weights through `einsum`, its complex
    kernel reshaped to `kernel_shape` and made a block kernel whose input
    features lie on `in_axis`; the complex bias reshaped to `bias_shape`."""
    real, imag = _kernel(dense)
    kernel = cx.block_kernel(
        ops.reshape(real, kernel_shape),
        ops.reshape(imag, kernel_shape),
        in_axis=in_axis,
    )
    outputs = ops.einsum(equation, inputs, kernel)
    if dense.use_bias:
        outputs = outputs + stacked_bias(dense, bias_shape)
    return outputs


def _kernel(dense, dtype=None):
    """A `ComplexDense`'s kernel parts (cast to `dtype`), on the file's
    int8 grid in quantization-aware training (one scale per output
    channel: the last axis, before the heads' reshape)."""
    real, imag = dense.kernel_real, dense.kernel_imag
    if dtype is not None:
        real, imag = ops.cast(real, dtype), ops.cast(imag, dtype)
    return _tracing.quantize_kernel(real, imag)


def gauss_einsum(dense, inputs, equation, kernel_shape, bias_shape):
    """`block_einsum` by Gauss's three products
    (`complex.gauss_product`): the stacked `inputs` split into their real
    and imaginary halves on the last axis, each contracted by `equation`
    against the kernel's parts (and sums) reshaped to `kernel_shape`; the
    parts of the result concatenated `[re | im]` on the last axis."""
    real, imag = _kernel(dense, dense.compute_dtype)
    outputs = cx.gauss_product_stacked(
        inputs,
        ops.reshape(real, kernel_shape),
        ops.reshape(imag, kernel_shape),
        lambda x, w: ops.einsum(equation, x, w),
    )
    if dense.use_bias:
        outputs = outputs + stacked_bias(dense, bias_shape)
    return outputs


def matmul_once(dense, inputs, kernel_shape, in_rank=1, out_shape=None):
    """A `ComplexDense`'s kernel, its parts reshaped to `kernel_shape` and
    concatenated on axis `in_rank - 1` (`complex.kernel_once`), then
    flattened to `(2 in, out)`, applied by `complex.matmul_once` (with
    `out_shape`): `x W` stacked, each real weight once."""
    real, imag = _kernel(dense, dense.compute_dtype)
    kernel = cx.kernel_once(
        ops.reshape(real, kernel_shape),
        ops.reshape(imag, kernel_shape),
        axis=in_rank - 1,
    )
    width = int(np.prod(kernel.shape[:in_rank]))
    kernel = ops.reshape(kernel, (width, -1))
    return cx.matmul_once(inputs, kernel, in_rank, out_shape)
