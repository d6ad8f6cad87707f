"""The stacked complex layout and complex arithmetic on stacked tensors.

This module is the only place that knows how complex numbers are stored.

**The stacked layout.** A tensor holding `n` complex features has `2n` real
channels on its last axis: the `n` real parts first, then the `n` imaginary
parts, written `(real, imag)` as `keras.ops.fft` does:

    z = [z0, ..., z(n-1)]  ->  x = [Re z0 ... Re z(n-1) | Im z0 ... Im z(n-1)]

Two other layouts exist in the wild and have converters here:

- *interleaved*: `[Re z0, Im z0, Re z1, Im z1, ...]` on the last axis;
- *pairs*: a new trailing axis of size 2, `(..., n, 2)`, as
  `torch.view_as_real` and ONNX exporters produce.

`to_stacked` / `from_stacked` convert between native complex arrays and the
stacked layout at the edges of a model; inside a model, everything is real.

The arithmetic helpers (`multiply`, `conjugate`, `times_i`, `modulus`,
`sign`, `block_kernel`) take and return stacked tensors and use `keras.ops`
only, so they run on every Keras backend and inside XLA.

**Applying a complex kernel.** Training applies a complex kernel `W = W_r +
i W_i` as a real product against the block kernel `block_kernel(W_r, W_i)`.
A TFLite converter folds that block into one constant that holds every
real weight twice, so the layers trace for export (`_tracing.weights_once`)
a product against `kernel_once(W_r, W_i) = [W_i; W_r]` instead (the parts
stacked on the input axis), applied to the rows `[-x_i | x_r]` (giving the
real part) and `x` (the imaginary part) by `matmul_once`, or as a
convolution two columns wide over `columns_once(x)`: each output sums all
its products in one op.
"""

import keras
import numpy as np
from keras import ops
from keras import random

from cvattn_keras import _tracing
from cvattn_keras import _validation as check

__all__ = [
    "block_kernel",
    "check_even",
    "columns_once",
    "conjugate",
    "dropout",
    "from_stacked",
    "gauss_product",
    "gauss_product_stacked",
    "interleaved_to_stacked",
    "kernel_once",
    "merge",
    "matmul_once",
    "merge_planes",
    "modulus",
    "reshape",
    "reshape_tail",
    "modulus_and_sign",
    "resolve_complex_matmul",
    "multiply",
    "pairs_to_stacked",
    "sign",
    "split",
    "split_planes",
    "stacked_to_interleaved",
    "stacked_to_pairs",
    "times_i",
    "to_stacked",
    "use_gauss",
]


def _is_numpy(x):
    return isinstance(x, (np.ndarray, np.generic, list, tuple))


def _as_array(x):
    """NumPy-like input as a NumPy array; tensors unchanged."""
    return np.asarray(x) if _is_numpy(x) else x


def _half_last_dim(x, name):
    """Half the size of the last axis of `x`: its number of complex features.

    The size is checked to be even when it is static; a tensor whose last
    axis is dynamic (a traced, variable-length axis) gets a scalar tensor.
    """
    shape = tuple(x.shape)
    if len(shape) == 0:
        raise ValueError(
            f"`{name}` must have at least one axis holding "
            f"[real | imag] channels. Received a scalar."
        )
    if shape[-1] is None:
        return ops.shape(x)[-1] // 2
    return check_even(shape[-1], f"{name}.shape[-1]", shape) // 2


def check_even(size, what="last axis", shape=None):
    """Returns `size` if it is an even channel count, else raises.

    Args:
        size: the number of real channels, `2n` for `n` complex features.
        what: how to name the quantity in the error message.
        shape: optional full shape to echo in the message.

    Raises:
        ValueError: if `size` is odd.
    """
    if size is not None and size % 2 != 0:
        detail = f" (shape {tuple(shape)})" if shape is not None else ""
        raise ValueError(
            f"A stacked complex tensor has an even number of channels on its "
            f"last axis: n real parts, then n imaginary parts. Received: "
            f"{what}={size}{detail}."
        )
    return size


# --------------------------------------------------------------------------
# Native complex <-> stacked.
# --------------------------------------------------------------------------


def to_stacked(z, dtype="float32"):
    """Converts a complex array `(..., n)` to the stacked layout `(..., 2n)`.

    Args:
        z: a complex NumPy array (or anything `np.asarray` accepts), or a
            complex backend tensor. A real array is taken as complex numbers
            with zero imaginary part.
        dtype: the float dtype of the result. Defaults to `"float32"`.

    Returns:
        `[Re z | Im z]` on the last axis: a NumPy array for NumPy input, a
        backend tensor for tensor input.

    Examples:
        >>> import numpy as np
        >>> to_stacked(np.array([1 + 2j, 3 - 4j]))
        array([ 1.,  3.,  2., -4.], dtype=float32)
    """
    if _is_numpy(z):
        z = np.asarray(z)
        if not (np.issubdtype(z.dtype, np.number) and z.ndim >= 1):
            raise ValueError(
                "`z` must be a numeric array with at least one axis. "
                f"Received: dtype={z.dtype}, shape={z.shape}"
            )
        return np.concatenate([z.real, z.imag], axis=-1).astype(dtype)
    z = ops.convert_to_tensor(z)
    if len(z.shape) == 0:
        raise ValueError("`z` must have at least one axis. Received a scalar.")
    re = ops.cast(ops.real(z), dtype)
    im = ops.cast(ops.imag(z), dtype)
    return ops.concatenate([re, im], axis=-1)


def from_stacked(x, dtype="complex64"):
    """Converts a stacked float tensor `(..., 2n)` to a complex NumPy array.

    Args:
        x: a float array or tensor in the stacked layout.
        dtype: `"complex64"` (default) or `"complex128"`.

    Returns:
        A complex NumPy array of shape `(..., n)`.

    Examples:
        >>> import numpy as np
        >>> from_stacked(np.array([1.0, 3.0, 2.0, -4.0]))
        array([1.+2.j, 3.-4.j], dtype=complex64)
    """
    if dtype not in ("complex64", "complex128", np.complex64, np.complex128):
        raise ValueError(
            "`dtype` must be 'complex64' or 'complex128'. "
            f"Received: dtype={dtype}"
        )
    x = np.asarray(x if _is_numpy(x) else ops.convert_to_numpy(x))
    n = _half_last_dim(x, "x")
    return (x[..., :n] + 1j * x[..., n:]).astype(dtype)


# --------------------------------------------------------------------------
# Splitting, merging and the other two layouts.
# --------------------------------------------------------------------------


def split(x):
    """Splits a stacked tensor `(..., 2n)` into `(real, imag)`, each `(..., n)`.

    Raises:
        ValueError: if the last axis is odd or of unknown size.
    """
    x = _as_array(x)
    n = _half_last_dim(x, "x")
    return x[..., :n], x[..., n:]


def split_planes(x):
    """Views a stacked tensor `(..., 2n)` as `(..., 2, n)`: index 0 of the
    new axis holds the real parts, index 1 the imaginary parts.

    A reshape, so it costs no copy (unlike `split`, whose slices do). Real
    factors of shape `(..., 1, n)` then broadcast over both parts, and a
    reduction over axis -2 combines the two parts of each feature.

    Raises:
        ValueError: if the last axis is odd.
    """
    n = _half_last_dim(x, "x")
    return ops.reshape(x, _leading_shape(x) + (2, n))


def merge_planes(planes):
    """The inverse of `split_planes`: `(..., 2, n)` -> stacked `(..., 2n)`."""
    shape = tuple(planes.shape)
    if len(shape) < 2 or shape[-2] != 2:
        raise ValueError(
            "Planes have an axis of size 2 (real, imag) before the last. "
            f"Received: planes.shape={shape}"
        )
    # The static size of the merged axis where known: TensorFlow cannot
    # infer a -1 beside dynamic leading sizes, and the layers after need it.
    last = -1 if shape[-1] is None else 2 * shape[-1]
    return ops.reshape(planes, tuple(ops.shape(planes)[:-2]) + (last,))


def merge(real, imag):
    """Merges `real` and `imag`, each `(..., n)`, into a stacked `(..., 2n)`."""
    real, imag = _as_array(real), _as_array(imag)
    shapes = check.static_shape(real.shape), check.static_shape(imag.shape)
    if None not in shapes[0] + shapes[1]:
        if shapes[0] != shapes[1]:
            raise ValueError(
                "`real` and `imag` must have the same shape. Received: "
                f"real.shape={tuple(real.shape)}, "
                f"imag.shape={tuple(imag.shape)}"
            )
    if _is_numpy(real) and _is_numpy(imag):
        return np.concatenate([real, imag], axis=-1)
    return ops.concatenate([real, imag], axis=-1)


def _leading_shape(x):
    return tuple(ops.shape(x)[:-1])


def stacked_to_pairs(x):
    """Stacked `(..., 2n)` -> pairs `(..., n, 2)`, as `torch.view_as_real`."""
    x = _as_array(x)
    re, im = split(x)
    if _is_numpy(x):
        return np.stack([re, im], axis=-1)
    return ops.stack([re, im], axis=-1)


def pairs_to_stacked(x):
    """Pairs `(..., n, 2)`, as `torch.view_as_real` -> stacked `(..., 2n)`."""
    x = _as_array(x)
    shape = tuple(x.shape)
    if len(shape) < 2 or shape[-1] != 2:
        raise ValueError(
            "The pairs layout has a trailing axis of size 2 holding "
            f"(real, imag). Received: x.shape={shape}"
        )
    if _is_numpy(x):
        return np.concatenate([x[..., 0], x[..., 1]], axis=-1)
    return ops.concatenate([x[..., 0], x[..., 1]], axis=-1)


def stacked_to_interleaved(x):
    """Stacked `(..., 2n)` -> interleaved `[re0, im0, re1, im1, ...]`."""
    x = _as_array(x)
    pairs = stacked_to_pairs(x)
    if _is_numpy(x):
        return pairs.reshape(pairs.shape[:-2] + (-1,))
    return ops.reshape(pairs, _leading_shape(x) + (-1,))


def interleaved_to_stacked(x):
    """Interleaved `[re0, im0, re1, im1, ...]` -> stacked `(..., 2n)`."""
    x = _as_array(x)
    n = _half_last_dim(x, "x")
    if _is_numpy(x):
        return pairs_to_stacked(x.reshape(x.shape[:-1] + (n, 2)))
    pairs = ops.reshape(x, _leading_shape(x) + (n, 2))
    return pairs_to_stacked(pairs)


# --------------------------------------------------------------------------
# Complex arithmetic on stacked tensors.
# --------------------------------------------------------------------------


def _as_operand(x):
    """A Python list or tuple as a float NumPy array (`keras.config.floatx()`
    unless already floating), NumPy arrays and tensors unchanged: the
    arithmetic helpers accept what `split` accepts."""
    if isinstance(x, (list, tuple)):
        x = np.asarray(x)
        if not np.issubdtype(x.dtype, np.floating):
            x = x.astype(keras.config.floatx())
    return x


def multiply(x, y):
    """The elementwise complex product `x * y` of two stacked tensors."""
    xr, xi = split(_as_operand(x))
    yr, yi = split(_as_operand(y))
    return ops.concatenate([xr * yr - xi * yi, xr * yi + xi * yr], axis=-1)


def negative(x):
    """`-x`: `keras.ops.negative`; within
    `cvattn_keras.attention.portable_masking` (the exporter's forms) a
    product with -1, since TFLite's NEG has no integer kernel (a float op
    in a full-integer file) while MUL has."""
    if _tracing.portable():
        x = ops.convert_to_tensor(x)  # NumPy input: ops, not operators
        return ops.multiply(x, ops.cast(-1.0, x.dtype))
    return ops.negative(x)


def conjugate(x):
    """The complex conjugate of a stacked tensor: `[re | -im]`."""
    re, im = split(_as_operand(x))
    return ops.concatenate([re, negative(im)], axis=-1)


def times_i(x):
    """Multiplies a stacked tensor by the imaginary unit: `[-im | re]`.

    It costs no arithmetic, only a permutation and a sign. The attention core
    uses it to turn imaginary parts of complex products into real dot
    products: `Im(a conj(b)) = Re(a conj(i b))`.
    """
    re, im = split(_as_operand(x))
    return ops.concatenate([negative(im), re], axis=-1)


_HALF = ("float16", "bfloat16")


def _divide(x, y):
    """`x / y` for a positive `y` broadcast over `x`. XLA divides by a
    broadcast divisor through its reciprocal, which flushes to 0 above
    8.5e37 in float32: above 1, divide a quarter by a quarter (exact powers
    of two) instead."""
    one = ops.ones_like(y)  # in y's dtype (Python floats would be float32)
    quarter = ops.where(y > 1.0, 0.25 * one, one)
    return (x * quarter) / (y * quarter)


def modulus_and_sign(x, scaled=True, dtype=None):
    """The modulus `|z|` `(..., n)` and the sign `z / |z|` (stacked
    `(..., 2n)`) of a stacked tensor, sharing one square root.

    At 0 both are 0 with a zero gradient, never NaN (PyTorch's convention
    for `abs` and `sgn`); a plain `sqrt(re**2 + im**2)` has an infinite
    derivative there.

    Half-precision input (float16, bfloat16) is computed in float32 (a
    squared modulus overflows float16 above 256 and underflows below 2e-4)
    and the results cast back to `dtype`.

    Args:
        x: stacked `(..., 2n)`: a tensor, a NumPy array or a Python list.
        scaled: `True` (default) computes `|z| = m sqrt(1 + (s/m)^2)` with
            `m = max(|re|, |im|)`, `s = min(...)`: no intermediate leaves the
            data's range (no squares of it), so the result is correct over
            the whole float range (`|2e19| = 2e19`, `|1e-19| = 1e-19` in
            float32) and int8 quantization (calibrated ranges) sees no
            squared range. `False` computes `sqrt(re^2 + im^2)`: fewer
            elementwise ops (jitted on a 2-core CPU, about 2x faster
            forward and 1.5-2x forward and backward), but inf above about
            1.8e19 and 0 below about 1e-19 in float32; for internal uses
            whose range is known.
        dtype: the dtype of both results. Defaults to `x`'s.
    """
    x = _as_operand(x)
    out_dtype = dtype or keras.backend.standardize_dtype(x.dtype)
    if keras.backend.standardize_dtype(x.dtype) in _HALF:
        x = ops.cast(x, "float32")
    planes = split_planes(x)  # (..., 2, n)
    if scaled:
        # Divide by m = max(|re|, |im|) first: the unit vector has parts
        # in [-1, 1] and a squared norm in [1, 2]. m is a constant for
        # differentiation (`m sqrt(sum (x / m)^2)` does not depend on it),
        # so no gradient squares it either.
        largest = ops.stop_gradient(
            ops.max(ops.abs(planes), axis=-2, keepdims=True)
        )  # (..., 1, n)
        nonzero = largest > 0
        safe = ops.where(nonzero, largest, ops.ones_like(largest))
        unit = _divide(planes, safe)
        squared = ops.sum(unit * unit, axis=-2, keepdims=True)
        root = ops.sqrt(ops.where(nonzero, squared, ops.ones_like(squared)))
        magnitude = ops.where(nonzero, safe * root, ops.zeros_like(root))
        magnitude = ops.squeeze(magnitude, -2)
        # Dividing the parts by the root (rather than multiplying by
        # 1/|z|) keeps the phase within [-1, 1].
        phase = ops.where(nonzero, unit / root, ops.zeros_like(planes))
    else:
        squared = ops.sum(planes * planes, axis=-2, keepdims=True)
        nonzero = squared > 0
        # Where z = 0, take the root of 1 instead: the branch that `where`
        # discards must have a finite value and gradient too, or its NaN
        # leaks into the gradient.
        root = ops.sqrt(ops.where(nonzero, squared, ops.ones_like(squared)))
        magnitude = ops.where(nonzero, root, ops.zeros_like(root))
        magnitude = ops.squeeze(magnitude, -2)
        phase = ops.where(
            nonzero, _divide(planes, root), ops.zeros_like(planes)
        )
    phase = merge_planes(phase)
    if keras.backend.standardize_dtype(magnitude.dtype) != out_dtype:
        magnitude = ops.cast(magnitude, out_dtype)
        phase = ops.cast(phase, out_dtype)
    return magnitude, phase


def modulus(x):
    """The modulus `|z|`, shape `(..., n)`, of a stacked tensor `(..., 2n)`.

    Correct over the whole float range (the scaled form of
    `modulus_and_sign`), in float32 for half-precision input; `|0| = 0` with
    gradient 0 there. Accepts tensors, NumPy arrays and Python lists.
    """
    return modulus_and_sign(x)[0]


def sign(x):
    """The complex sign `sgn(z) = z / |z|` of a stacked tensor, stacked.

    Correct over the whole float range, in float32 for half-precision input;
    `sgn(0) = 0` with gradient 0 there (see `modulus_and_sign`).
    """
    return modulus_and_sign(x)[1]


def dropout(x, rate, seed=None):
    """Dropout of whole complex features of a stacked tensor: one Bernoulli
    draw per feature keeps or zeroes its real and imaginary parts together,
    scaled by `1 / (1 - rate)`. (A real dropout on the stacked channels
    would drop the parts independently and change the phase.)

    Args:
        x: stacked `(..., 2n)`.
        rate: float in [0, 1).
        seed: int or `keras.random.SeedGenerator`.
    """
    re, im = split(x)
    keep = random.dropout(ops.ones_like(re), rate, seed=seed)  # 0 or 1/(1-p)
    return ops.concatenate([re * keep, im * keep], axis=-1)


def block_kernel(kernel_real, kernel_imag, in_axis=0):
    """The real block kernel of the complex kernel `W = W_r + i W_i`.

    For a row vector `x = [x_r | x_i]`, `x @ K` with

        K = [[ W_r, W_i],
             [-W_i, W_r]]

    is the stacked form of the complex product `(x_r + i x_i) W`. The
    real/imaginary blocks are concatenated on the last axis (outputs) and on
    `in_axis` (inputs), so a kernel reshaped to `(in, heads, head_dim)` gives
    `(2 in, heads, 2 head_dim)`: each head's outputs laid out `[re | im]`.

    Args:
        kernel_real: `W_r`, the output features on the last axis.
        kernel_imag: `W_i`, of the same shape.
        in_axis: the axis of the input features. Defaults to 0.

    Returns:
        The block kernel, twice as large on `in_axis` and on the last axis.
    """
    top = ops.concatenate([kernel_real, kernel_imag], axis=-1)
    bottom = ops.concatenate([-kernel_imag, kernel_real], axis=-1)
    return ops.concatenate([top, bottom], axis=in_axis)


# --------------------------------------------------------------------------
# Gauss's three-multiplication product.
# --------------------------------------------------------------------------

COMPLEX_MATMUL_FORMS = ("auto", "gauss", "block")

# "auto" picks Gauss's form for a product whose contracted and output
# sizes both reach this (in complex features). Measured on a 2-core CPU
# (`python benchmarks/complex_matmul_speed.py`: ComplexDense, 2,048 rows,
# TensorFlow, XLA on and off, forward and forward+backward), Gauss / block
# is 0.96-1.17 at 320 features and 0.87-0.99 at 512 (two runs): the three
# matmuls of half the width run slower per FLOP than the block form's one (a
# 320-wide matmul takes 0.34 of a 640-wide one's time, not 0.25), and the
# sums and differences add passes over the data.
GAUSS_MIN_SIZE = 512
# The same for the projections of `ComplexMultiHeadAttention`: there the
# query, key and value projections of one input share its slices and sums
# (and the graph computes them once), and Gauss's form was measured faster
# from 256 features on (the whole layer, batch 35, T = 64, 8 heads,
# TensorFlow, XLA on and off, forward and forward+backward: Gauss / block
# 0.75-0.985 at 320 features, 0.89-1.01 at 256, 0.96-1.06 at 192).
GAUSS_MIN_SIZE_PROJECTIONS = 256


def resolve_complex_matmul(value, name="complex_matmul"):
    """Validates a `complex_matmul` argument: `"auto"`, `"gauss"` or
    `"block"` (any case); returns it lower-cased."""
    if isinstance(value, str) and value.lower() in COMPLEX_MATMUL_FORMS:
        return value.lower()
    raise ValueError(
        f"`{name}` must be one of {COMPLEX_MATMUL_FORMS}. "
        f"Received: {name}={value!r}"
    )


def use_gauss(form, inner, outer, minimum=GAUSS_MIN_SIZE, dtype=None):
    """Whether a complex product contracting `inner` complex features into
    `outer` ones takes Gauss's form: always for `"gauss"`, never for
    `"block"` or while tracing for export (`cvattn_keras.export` keeps
    its own forms), and for `"auto"` when both sizes are static and at
    least `minimum` (`GAUSS_MIN_SIZE`), except

    - under a float16 compute `dtype` (the product's operands): there
      `gauss_product` computes in float32 (float16's range is too narrow
      for its sums, see there), which is slower than the block form's
      float16 product, so `"auto"` keeps the block form and `"gauss"`
      pays that; and
    - under a `keras.distribution.ModelParallel` distribution: there a
      sharded kernel's sums `W_i - W_r`, `W_r + W_i` and the three
      products need more communication than the block form's one
      all-reduce or all-gather (measured in the compiled HLO: 1.5x the
      all-reduce bytes, all-to-alls for an output-axis shard), so
      `"auto"` keeps the block form and `"gauss"` pays that.

    `dtype=None` (unknown) is taken as a wide-range dtype."""
    if form == "block" or _tracing.exporting():
        return False
    if form == "gauss":
        return True
    if dtype is not None and _is_narrow(dtype):
        return False
    if isinstance(
        keras.distribution.distribution(), keras.distribution.ModelParallel
    ):
        return False
    return all(
        isinstance(size, (int, np.integer)) and size >= minimum
        for size in (inner, outer)
    )


# Compute dtypes whose range Gauss's sums can leave where the block form's
# products do not (float16's largest value is 65504); `gauss_product`
# computes in float32 under them. bfloat16 has float32's range.
_NARROW = ("float16",)


def _is_narrow(dtype):
    return keras.backend.standardize_dtype(dtype) in _NARROW


def gauss_product(x_real, x_imag, w_real, w_imag, product):
    """`(Re, Im)` of the complex product of `x = x_real + i x_imag` and
    `w = w_real + i w_imag` by Gauss's three real products instead of
    four:

        k1 = product(x_r + x_i, w_r)
        k2 = product(x_r, w_i - w_r)
        k3 = product(x_i, w_r + w_i)
        Re = k1 - k3,  Im = k1 + k2

    Args:
        x_real: the real part of the first operand.
        x_imag: the imaginary part of the first operand.
        w_real: the real part of the second operand (the weights: their
            sums and differences are taken, which is cheap when they are
            the smaller operand).
        w_imag: the imaginary part of the second operand, as `w_real`.
        product: a real bilinear map `product(x, w)` (a matmul, an
            `einsum`, a convolution).

    Returns:
        `(Re, Im)`, each `product`'s output shape and dtype (`x_real`'s
        when an operand is float16, see below).

    Range: the sums `x_r + x_i`, `w_r + w_i` and the products `k1`, `k3`
    can be up to twice the block form's terms, and `k1`, `k3` much larger
    than `Re` when they cancel, so in float16 (largest value 65504) they
    overflow where the block form's results are finite (`x_r = x_i =
    4e4`). When any operand is float16, the sums and the three products
    are therefore computed in float32 (no float16 operand can overflow
    them there) and `Re`, `Im` cast back to float16: finite wherever the
    block form's are (to float32 rounding of a result at 65504). float32
    and bfloat16 (largest value 3.4e38) are computed as they come: the
    same factor of two matters there only for data whose products with
    the weights approach 1e38.

    Rounding: `Re` and `Im` are differences of products of sums, so their
    absolute error is about the block form's (float32: a few ulps of
    `|x| |w|`; measured 0.9-1.3x the block form's on inputs of modulus
    1e3), but where `|Re|` or `|Im|` is much smaller than `|x| |w|` their
    relative error is larger. In bfloat16 the sums are rounded too:
    measured 1.5-2.7x the block form's error (mixed_bfloat16 attention
    7e-3 against 5e-3 of the output's scale). Under float16 (computed in
    float32, above) the error is the final rounding to float16.
    """
    operands = (x_real, x_imag, w_real, w_imag)
    narrow = any(_is_narrow(operand.dtype) for operand in operands)
    if narrow:
        out_dtype = keras.backend.standardize_dtype(x_real.dtype)
        x_real, x_imag, w_real, w_imag = (
            ops.cast(operand, "float32") for operand in operands
        )
    k1 = product(x_real + x_imag, w_real)
    k2 = product(x_real, w_imag - w_real)
    k3 = product(x_imag, w_real + w_imag)
    real, imag = k1 - k3, k1 + k2
    if narrow:
        real, imag = ops.cast(real, out_dtype), ops.cast(imag, out_dtype)
    return real, imag


def gauss_product_stacked(x, w_real, w_imag, product):
    """`gauss_product` of a stacked `x` (split into its parts on the last
    axis) and `w = w_real + i w_imag`: the result stacked, `[Re | Im]`
    concatenated on the last axis."""
    real, imag = gauss_product(*split(x), w_real, w_imag, product)
    return ops.concatenate([real, imag], axis=-1)


def reshape(x, sizes):
    """`ops.reshape(x, sizes)` where `sizes` mixes static ints and run-time
    sizes (scalar tensors, as `ops.shape` gives for unknown axes): a single
    run-time size is written -1, so that a converted graph computes no
    shape for it (a dynamic batch alone costs no shape arithmetic)."""
    sizes = tuple(sizes)
    dynamic = [not isinstance(size, (int, np.integer)) for size in sizes]
    if sum(dynamic) == 1:
        sizes = tuple(-1 if d else size for d, size in zip(dynamic, sizes))
    return ops.reshape(x, sizes)


def reshape_tail(x, keep, tail):
    """`x` reshaped to its first `keep` axes followed by the static sizes
    `tail` (see `reshape`)."""
    return reshape(x, tuple(ops.shape(x)[:keep]) + tuple(tail))


def kernel_once(kernel_real, kernel_imag, axis=0):
    """`[W_i; W_r]`: the parts of a complex kernel concatenated on its
    input axis `axis`, each real weight once.

    It multiplies rows laid out as the stacked input: `x = [x_r | x_i]`
    gives the imaginary part of `x W`, `[-x_i | x_r]` its real part (see
    `matmul_once`).
    """
    return ops.concatenate([kernel_imag, kernel_real], axis=axis)


def columns_once(x):
    """`x` stacked `(..., 2I)` as the columns `(-x_i, x_r, x_i)`, `(..., 3,
    I)`: a 2-D convolution two columns wide with the kernel `[W_i, W_r]`
    (each real weight once) gives `x_r W_r - x_i W_i` at column 0 and
    `x_i W_r + x_r W_i` at column 1, the stacked `x W` after a reshape.

    One slice, one multiplication by -1 (TFLite's integer kernels have no
    negation) and one concatenation.
    """
    _, imag = split(x)
    columns = ops.concatenate([imag * -1.0, x], axis=-1)
    return reshape_tail(columns, len(x.shape) - 1, (3, imag.shape[-1]))


def matmul_once(x, kernel, in_rank=1, out_shape=None):
    """The complex product `x W` with each real weight of `W` once.

    Args:
        x: the input, its last axis stacked `[real | imag]`; its last
            `in_rank` axes are the input features (with `in_rank=2`, a
            per-head layout `(..., heads, 2 head_dim)`, each head
            stacked).
        kernel: `(2 I, U)` with `2 I` the size of those axes: the rows of
            `W_i` and `W_r` in the order of `x`'s input features, `W_i`
            where `x` holds real parts (`kernel_once(W_r, W_i)` for
            `in_rank=1`).
        out_shape: the static shape of `U` outputs, `(U,)` by default;
            e.g. `(heads, head_dim)` for a per-head layout.

    Returns:
        `x W` stacked on the last axis of `out_shape`: `(..., 2U)` by
        default; `(..., heads, 2 head_dim)`, each head `[real | imag]`, for
        `out_shape=(heads, head_dim)`.

    Two matmuls share the kernel: `[-x_i | x_r]` gives the real part and
    `x` itself the imaginary part, each summing all its real products in
    one op (one int32 accumulation in an integer file; a negation is a
    multiplication by -1, which TFLite's integer kernels have). Written
    with -1 for the rows, a dynamic batch costs no shape arithmetic.
    """
    width = kernel.shape[0]
    out_shape = tuple(out_shape or (kernel.shape[-1],))
    leading = tuple(ops.shape(x)[: len(x.shape) - in_rank])
    real, imag = split(x)
    rows = (ops.concatenate([imag * -1.0, real], axis=-1), x)
    parts = [
        ops.reshape(
            ops.matmul(ops.reshape(row, (-1, width)), kernel),
            (-1,) + out_shape,
        )
        for row in rows
    ]
    outputs = ops.concatenate(parts, axis=-1)
    return reshape(outputs, leading + out_shape[:-1] + (2 * out_shape[-1],))
