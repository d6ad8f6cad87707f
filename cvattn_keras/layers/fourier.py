"""The 2-D discrete Fourier transform of stacked images, and k-space data
consistency: `ComplexFFT2D`, `ComplexDataConsistency` and the functions
behind them (`fft2`, `ifft2`, `data_consistency`, `dft_matrix`).

Conventions are numpy's: `fft2(z)[k, l] = sum_{h, w} z[h, w] exp(-2 pi i
(k h / H + l w / W))`, over axes 1 and 2 (height, width) of a stacked
channels-last image `(B, H, W, 2C)` (`[Re | Im]` of `C` complex channels on
the last axis), each channel on its own; the frequencies in numpy's order
(0 first, no `fftshift`); `norm` one of numpy's three:

    norm        fft2 scaled by   ifft2 scaled by
    "backward"  1                1 / (H W)
    "ortho"     1 / sqrt(H W)    1 / sqrt(H W)
    "forward"   1 / (H W)        1

`centered=True` gives fastMRI's centred transforms, `fftshift(fft2(
ifftshift(z)))` and `fftshift(ifft2(ifftshift(z)))` over H and W: k-space
with the zero frequency at `(H // 2, W // 2)`, images with the origin
there too.

**How it is computed.** As two real matrix products, one per axis, with
the DFT matrices (built in float64 for the static `H` and `W`, cast to
the compute dtype, centred by permuting their rows and columns, the norm
folded in: all free at run time). Each side multiplies rows `[z_r | z_i]`
of the transformed axis by the real block matrix `[[M_r, M_i], [-M_i,
M_r]]` (`M = F^T`, `2N x 2N`): one real matmul doing the four real
products of the complex one, between transposes that bring each axis
last. Traced for a file that stores weights once (`cvattn_keras.export`,
`weights_once=True`, the float modes' default) each side is instead two
products with `[M_i; M_r]` (`complex.matmul_once`): half the constants.

**In TFLite files** that is FULLY_CONNECTED, TRANSPOSE and RESHAPE (and
MUL, ADD, SUB, with ABS, GREATER and SELECT_V2 but in int16x8 files,
for the data consistency): builtin ops that every quantization mode has,
where TFLite has no complex FFT (RFFT2D is real input, float only).
Against NumPy complex128, on LiteRT (16 x 16 phantoms through data
consistency and a transform, SNR in dB): float32 137, float16 73 (its
DFT matrices stored in float16), int16x8 48 (42 at 32 x 32; its int8 DFT
matrices bound it): usable, full_int8 and int8 24 (23 at 32 x 32; int8
activations cannot hold a k-space whose zero frequency dwarfs the rest):
marginal (`tests/test_export_fourier.py`). Each transform starts with a
transpose of its input: TensorFlow 2.21's converter folded a transpose,
two reshapes and a transpose (one transform's end and the next one's
start, when the reshape came first) into one reshape, a wrong file for
square images.

Gauss's three-product form was measured against it
(`benchmarks/fft2d_forms.py`: TensorFlow, a shared 2-core CPU, two runs;
Gauss's time over the block form's, with XLA / without): 64 x 64 (batch
8) forward 0.79-0.85 / 1.38-1.45, forward + backward 1.09-1.21 /
2.6-4.8; 256 x 256 (batch 2) forward 0.95-1.63 / 1.00-1.19, forward +
backward 1.09-1.11 / 1.45-1.64. Under `jax.jit` within 15% either way,
under torch 3-9x slower (the slices of the transposed parts are
copied); its sums add rounding error (2.6e-6 against 1.8e-6 on a 6 x 5
image). It wins only XLA's forward pass at 64 x 64: the block form is
kept. (A left product of the image by `[C; S]`, without transposes, was
1-4x slower.) TensorFlow's complex64 FFT (`tf.signal.fft2d`, `O(H W
log(H W))`) takes 0.6-0.9 of the block form's time at 64 x 64 and
0.2-0.3 at 256 x 256 (with XLA), but has no TFLite builtin, no half
precision and no integer kernel.

**Precision.** The transform runs in float32 whatever the dtype policy
(float64 for float64 input to the functions, and in the layers under a
float64 policy; Keras 3.15's PyTorch backend multiplies float64 matrices
in float32). Measured on a 64 x 64 image (a disc
of ones with a smooth phase; NumPy complex128 reference): float32 error
2e-7 of the k-space's norm (134 dB), float16 3.8e-4 (68 dB; 1.7e-3 in
the upper half of the frequencies, where a phantom's k-space is small),
bfloat16 3.3e-3 (50 dB; 1.4e-2 at high frequencies). A DFT's sums are
long (`H` and `W` terms) and its outputs span decades, and with
`norm="backward"` the zero frequency is `H W` times the image's mean
(65,536 times at 256 x 256: over float16's largest value). Under mixed
precision the layers cast their inputs to float32 (`autocast=False`) and
their results to the compute dtype: under `mixed_float16` prefer
`norm="ortho"`, whose k-space keeps the image's scale. On GPUs,
TensorFlow and JAX run float32 matmuls in TF32 by default (a 10-bit
mantissa, errors near float16's); for float32 accuracy there turn it off
(`tf.config.experimental.enable_tensor_float_32_execution(False)`,
`jax.config.update("jax_default_matmul_precision", "highest")`). Not
measured here (no GPU).
"""

import functools

import keras
import numpy as np
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import complex as cx

__all__ = [
    "ComplexDataConsistency",
    "ComplexFFT2D",
    "NORMS",
    "data_consistency",
    "dft_matrix",
    "fft2",
    "ifft2",
]

NORMS = ("backward", "ortho", "forward")
"""numpy's `norm` choices (`None` means `"backward"`, as in numpy)."""

_HALF = ("float16", "bfloat16")


# --------------------------------------------------------------------------
# Arguments.
# --------------------------------------------------------------------------


def _resolve_norm(norm):
    """`norm` as one of `NORMS` (`None`: `"backward"`), else a
    `ValueError` listing them."""
    if norm is None:
        return "backward"
    if isinstance(norm, str) and norm in NORMS:
        return norm
    raise ValueError(
        f"`norm` must be one of {NORMS} (or None, numpy's 'backward'). "
        f"Received: norm={norm!r}"
    )


def _image_sizes(shape, name):
    """`(H, W, 2C)` of a stacked image shape `(..., H, W, 2C)`: static,
    the channels even; a `ValueError` naming `name` and the shape
    otherwise."""
    shape = tuple(shape)
    if len(shape) < 3:
        raise ValueError(
            "The 2-D DFT takes stacked images (..., height, width, 2 * "
            f"channels). Received: {name}={shape}"
        )
    height, width, channels = check.static_shape(shape[-3:])
    if height is None or width is None or channels is None:
        raise ValueError(
            "The 2-D DFT needs the height, width and channels known when "
            "it is built (its DFT matrices are constants of that size): "
            f"give the model's input a static shape. Received: {name}="
            f"{shape}"
        )
    cx.check_even(channels, f"{name}[-1]", shape)
    return height, width, channels


# --------------------------------------------------------------------------
# DFT matrices (NumPy, float64).
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def _dft_parts(n, inverse, norm, centered):
    """`(real, imag)` of `dft_matrix(n, ...)`, float64, read-only."""
    k = np.arange(n)
    # Exact integer phases, reduced mod n before the float product.
    angle = 2 * np.pi * (np.outer(k, k) % n) / n
    sign = 1.0 if inverse else -1.0
    if norm == "ortho":
        scale = n**-0.5
    elif (norm == "backward") == inverse:  # ifft2 "backward", fft2 "forward"
        scale = 1.0 / n
    else:
        scale = 1.0
    cos, sin = np.cos(angle), np.sin(angle)
    # Quarter turns exactly: sin(pi) is 1.2e-16 in float64, an exact 0
    # here (no other entry is that small: |sin(2 pi / n)| > 6 / n). The
    # + 0.0 turns -0.0 into 0.0.
    cos[np.abs(cos) < 1e-12] = 0.0
    sin[np.abs(sin) < 1e-12] = 0.0
    real, imag = scale * cos + 0.0, sign * scale * sin + 0.0
    if centered:
        # fftshift(F @ ifftshift(z)): rows and columns permuted alike.
        order = (k - n // 2) % n
        real, imag = real[order][:, order], imag[order][:, order]
    real.setflags(write=False)
    imag.setflags(write=False)
    return real, imag


def dft_matrix(n, inverse=False, norm="backward", centered=False):
    """The `(n, n)` complex128 matrix `F` of numpy's 1-D transform along
    one axis of `n` points: `F @ z == np.fft.fft(z, norm=norm)` (`ifft`
    when `inverse`), with `centered`, `fftshift(fft(ifftshift(z)))`. Each
    axis of `fft2` gets its own, with the norm's factor of that axis
    (`1 / sqrt(n)` for `"ortho"`).

    Examples:
        >>> dft_matrix(2)
        array([[ 1.+0.j,  1.+0.j],
               [ 1.+0.j, -1.+0.j]])
    """
    n = check.positive_int(n, "n")
    inverse = check.boolean(inverse, "inverse")
    centered = check.boolean(centered, "centered")
    real, imag = _dft_parts(n, inverse, _resolve_norm(norm), centered)
    return real + 1j * imag


def _side(rows, n, key, dtype):
    """The 1-D transform of each row: `rows` `(P, ..., 2, n)` (the real
    parts, then the imaginary parts, of `n` points) -> the same shape."""
    real, imag = _dft_parts(n, *key)
    # y = z M with M = F^T: rows [z_r | z_i] times a real matrix.
    real, imag = real.T, imag.T
    flat = ops.reshape(rows, (-1, 2 * n))
    if _tracing.weights_once():
        once = np.concatenate([imag, real], axis=0)  # [M_i; M_r] (2n, n)
        out = cx.matmul_once(flat, ops.convert_to_tensor(once, dtype))
    else:
        block = np.block([[real, imag], [-imag, real]])  # (2n, 2n)
        out = ops.matmul(flat, ops.convert_to_tensor(block, dtype))
    return cx.reshape(out, tuple(ops.shape(rows)[:-1]) + (n,))


def _fft2(x, inverse, norm, centered):
    """The transform over axes -3, -2 of a stacked `(..., H, W, 2C)`; see
    `fft2`."""
    x = ops.convert_to_tensor(x)
    height, width, channels = _image_sizes(x.shape, "x.shape")
    dtype = keras.backend.standardize_dtype(x.dtype)
    if "float" not in dtype:
        raise ValueError(
            "The 2-D DFT takes float tensors (stacked [Re | Im]). "
            f"Received: x.dtype={dtype}"
        )
    work = "float32" if dtype in _HALF else dtype
    key = (bool(inverse), _resolve_norm(norm), bool(centered))
    c = channels // 2
    leading = tuple(ops.shape(x)[:-3])
    t = ops.cast(x, work) if work != dtype else x
    if len(x.shape) != 4:
        t = cx.reshape(t, (-1, height, width, channels))  # (P, H, W, 2C)
    # A transpose first, then a reshape: TensorFlow 2.21's TFLite
    # converter folds transpose -> reshape -> reshape -> transpose wrongly
    # (into one reshape, for square images), which is what one transform's
    # end and the next one's start made when the reshape came first.
    t = ops.transpose(t, (0, 1, 3, 2))  # (P, H, 2C, W)
    t = cx.reshape(t, (-1, height, 2, c, width))
    t = ops.transpose(t, (0, 1, 3, 2, 4))  # (P, H, C, 2, W)
    t = _side(t, width, key, work)  # (P, H, C, 2, L): along W
    t = ops.transpose(t, (0, 4, 2, 3, 1))  # (P, L, C, 2, H)
    t = _side(t, height, key, work)  # (P, L, C, 2, K): along H
    t = ops.transpose(t, (0, 4, 1, 3, 2))  # (P, K, L, 2, C)
    y = cx.reshape(t, leading + (height, width, channels))
    return ops.cast(y, dtype) if work != dtype else y


def fft2(x, norm="backward", centered=False):
    """numpy's `fft2` over the height and width of stacked images.

    Args:
        x: stacked `(..., H, W, 2C)` float tensor or array (`[Re | Im]` of
            `C` complex channels); `H`, `W` and `C` static.
        norm: one of `NORMS` (`None`: `"backward"`), as numpy's.
        centered: `True` for `fftshift(fft2(ifftshift(z)))` over H and W
            (fastMRI's `fft2c`). Defaults to `False`.

    Returns:
        The stacked k-space `(..., H, W, 2C)`, in `x`'s dtype (computed in
        float32 for float16 and bfloat16 input).

    Examples:
        >>> z = np.zeros((1, 2, 2, 1), "complex64")
        >>> z[0, 0, 0, 0] = 1  # an impulse at the origin: flat k-space
        >>> y = fft2(cvattn_keras.to_stacked(z))
        >>> cvattn_keras.from_stacked(y)[0, :, :, 0]
        array([[1.+0.j, 1.+0.j],
               [1.+0.j, 1.+0.j]], dtype=complex64)
    """
    return _fft2(x, False, norm, check.boolean(centered, "centered"))


def ifft2(x, norm="backward", centered=False):
    """numpy's `ifft2` over the height and width of stacked k-space (as
    `fft2`, with `fftshift(ifft2(ifftshift(k)))` when `centered`):
    `ifft2(fft2(x, norm), norm) == x` for every norm, to rounding.

    Examples:
        >>> k = np.ones((1, 2, 2, 2), "float32")  # 1 + 1j everywhere
        >>> y = ifft2(k)  # an impulse at the origin
        >>> cvattn_keras.from_stacked(y)[0, :, :, 0]
        array([[1.+1.j, 0.+0.j],
               [0.+0.j, 0.+0.j]], dtype=complex64)
    """
    return _fft2(x, True, norm, check.boolean(centered, "centered"))


# --------------------------------------------------------------------------
# Data consistency.
# --------------------------------------------------------------------------


def _mask_error(mask_shape, image_shape, why):
    return ValueError(
        "`sampling_mask` must broadcast to the images' (batch, height, "
        "width): (B, H, W), (B, 1, W), (H, W), (1, W), ... or the same "
        f"with a trailing axis of 1 ({why}). Received: sampling_mask.shape="
        f"{tuple(mask_shape)}, image.shape={tuple(image_shape)}"
    )


def _check_mask_shape(mask_shape, image_shape):
    """Raises unless a sampling mask of `mask_shape` broadcasts to the
    `(B, H, W)` of stacked images of `image_shape` `(B, H, W, 2C)`
    without enlarging it (each of its axes, right-aligned, 1 or the
    image's; a trailing axis of 1 is dropped first: at rank 4, and at
    rank 3 when the images are more than one pixel wide). Sizes
    not known statically are not compared. Returns the mask's rank
    without a trailing axis of 1."""
    mask_shape, image_shape = tuple(mask_shape), tuple(image_shape)
    sizes = check.static_shape(mask_shape)
    image_width = check.static_shape(image_shape)[-2]
    if len(sizes) == 4:
        if sizes[-1] not in (1, None):
            raise _mask_error(mask_shape, image_shape, "rank 4: last axis 1")
        sizes = sizes[:-1]
    elif len(sizes) == 3 and sizes[-1] == 1 and image_width != 1:
        # (H, W, 1) or (1, W, 1): a trailing axis of 1, not a width of 1
        # (read as (B, H, W), it would broadcast one column over the rows).
        sizes = sizes[:-1]
    if not 1 <= len(sizes) <= 3:
        raise _mask_error(mask_shape, image_shape, f"rank {len(mask_shape)}")
    target = check.static_shape(image_shape[:-1])[-len(sizes) :]
    for size, want in zip(sizes, target):
        if size not in (None, 1) and want is not None and size != want:
            raise _mask_error(mask_shape, image_shape, "sizes differ")
    return len(sizes)


def _as_mask(mask, rank, dtype):
    """The mask as `dtype` 0/1 factors `(..., H, W, 1)`, broadcasting
    over the stacked channels."""
    mask = ops.cast(mask, dtype)
    if len(mask.shape) == rank:  # no trailing axis of 1 yet
        mask = ops.expand_dims(mask, -1)
    return mask


def data_consistency(
    image,
    kspace,
    sampling_mask,
    norm="ortho",
    centered=False,
    data_weight=None,
):
    """The image whose k-space keeps the measured samples:
    `ifft2((1 - a) fft2(image) + a kspace)` with `a = m` (hard data
    consistency, `data_weight=None`) or `a = m λ / (1 + λ)` (`λ =
    data_weight`: the noisy-data consistency of Schlemper et al., the
    sampled entries `(k_pred + λ k0) / (1 + λ)`), `m` the sampling mask.

    Args:
        image: stacked `(B, H, W, 2C)` float tensor.
        kspace: the measured k-space, stacked `(B, H, W, 2C)`, in numpy's
            order (centred if `centered`), zero or anything where not
            sampled, NaN and inf included (selected away where the mask
            is 0, before any product: they reach neither the result nor
            the gradients).
        sampling_mask: real 0/1 (or bool) `(B, H, W)`, `(B, 1, W)`, `(H,
            W)`, `(1, W)`, ... or the same with a trailing axis of 1:
            any shape that broadcasts to `(B, H, W)` without enlarging it
            (a `ValueError` naming both shapes otherwise). Values between
            0 and 1 blend linearly.
        norm: the transforms' `norm` (`NORMS`). Defaults to `"ortho"`.
        centered: whether `kspace` and `sampling_mask` are centred
            (fastMRI's `fftshift` order). Defaults to `False`.
        data_weight: `None` (default) or `λ >= 0`, a float or a scalar
            tensor (a learned weight).

    Returns:
        The stacked image `(B, H, W, 2C)`, in `image`'s dtype (computed
        in float32 for float16 and bfloat16 input).
    """
    image = ops.convert_to_tensor(image)
    kspace = ops.convert_to_tensor(kspace)
    sampling_mask = ops.convert_to_tensor(sampling_mask)
    rank = _check_mask_shape(sampling_mask.shape, image.shape)
    dtype = keras.backend.standardize_dtype(image.dtype)
    work = "float32" if dtype in _HALF else dtype
    centered = check.boolean(centered, "centered")
    predicted = _fft2(ops.cast(image, work), False, norm, centered)
    weight = _as_mask(sampling_mask, rank, work)  # (B, H, W, 1)
    measured = ops.cast(kspace, work)
    if not _tracing.lookup_masks():
        # k-space where the mask is 0 is selected away before any product
        # (0 * NaN is NaN): what it holds there (NaN, inf) reaches neither
        # the image nor the gradients (the select's gradient into the
        # branch not taken is zero, and the branch taken is finite). Not
        # in int16x8 files, which have no SELECT_V2 and whose int16
        # inputs hold no NaN or inf: the products alone are the same.
        # `|m| > 0` is `m != 0`: ABS and GREATER have int8 kernels,
        # NOT_EQUAL has none in full_int8 files.
        sampled = ops.greater(ops.abs(weight), 0.0)
        measured = ops.where(sampled, measured, 0.0)
    if data_weight is not None:
        lam = ops.cast(data_weight, work)
        weight = weight * (lam / (1.0 + lam))
    # (1 - a) k + a k0 rather than k + a (k0 - k): exactly k0 where a = 1
    # and k where a = 0.
    mixed = (1.0 - weight) * predicted + weight * measured
    out = _fft2(mixed, True, norm, centered)
    return ops.cast(out, dtype) if work != dtype else out


# --------------------------------------------------------------------------
# Layers.
# --------------------------------------------------------------------------


def _non_negative(value, name):
    """A finite float >= 0 (not a bool, inf or NaN)."""
    ok = isinstance(value, (int, float, np.integer, np.floating))
    if not ok or isinstance(value, bool) or not 0 <= value < np.inf:
        raise ValueError(
            f"`{name}` must be None or a finite number >= 0. "
            f"Received: {name}={value!r}"
        )
    return float(value)


def _transform_dtype(compute_dtype):
    """The layers' transform dtype: float64 under a float64 policy,
    float32 under every other (float16 and bfloat16 included)."""
    return "float64" if compute_dtype == "float64" else "float32"


def _check_float(tensor, name, layer):
    dtype = keras.backend.standardize_dtype(tensor.dtype)
    if "float" not in dtype:
        raise ValueError(
            f"{type(layer).__name__} takes float {name} (stacked [Re | "
            f"Im]). Received: {name}.dtype={dtype}"
        )


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexFFT2D(keras.layers.Layer):
    """numpy's `fft2` (or `ifft2`) over the height and width of stacked
    complex images, as real matrix products.

    `Y[b, k, l, c] = s sum_{h, w} Z[b, h, w, c] exp(-/+ 2 pi i (k h / H +
    l w / W))`, `-` for the transform, `+` for its inverse, each complex
    channel `c` on its own, `s` numpy's factor for `norm` (the table in
    `cvattn_keras.layers.fourier`): `np.fft.fft2(z, axes=(1, 2),
    norm=norm)` or `np.fft.ifft2(...)`. The frequencies are in numpy's
    order (0 first); `centered=True` gives fastMRI's `fftshift(fft2(
    ifftshift(z)))` (and the same for `ifft2`) over H and W, at no extra
    cost: the shifts are permutations folded into the DFT matrices.

    Computed as one real matmul per axis against the block DFT matrix
    `[[M_r, M_i], [-M_i, M_r]]` (`2N x 2N` float32 constants built for the
    static `H`, `W`; no weights), so a TFLite file holding it has builtin
    ops only (FULLY_CONNECTED, TRANSPOSE, RESHAPE) and quantizes (int16x8
    keeps an SNR of 48 dB against NumPy, int8 24 dB). Why this form
    rather than Gauss's, and the measured precision, are in the module's
    docstring: the transform runs in float32 whatever the dtype policy (in
    float16 the k-space of a 64 x 64 image has an SNR of 68 dB, against
    134 in float32, and with `norm="backward"` its zero frequency
    overflows from 256 x 256), and the result is cast to the compute
    dtype. `H W (H + W)` complex multiply-adds per channel (an FFT's `H W
    log2(H W)`): about 1 ms for 8 images of 64 x 64 on a 2-core CPU; meant
    for images up to a few hundred pixels a side.

    Args:
        inverse: `False` (default) for `fft2`, `True` for `ifft2`.
        norm: `"backward"` (default), `"ortho"` or `"forward"`, as numpy's
            (`None` is `"backward"`).
        centered: `True` for the centred transform (k-space and image
            with their origin at `(H // 2, W // 2)`, fastMRI's `fft2c` /
            `ifft2c`). Defaults to `False`.
        **kwargs: base `Layer` arguments.

    Input shape:
        `(B, H, W, 2C)`, `[Re | Im]` of `C` complex channels on the last
        axis, `H`, `W` and `C` known when built (a `ValueError` naming the
        shape otherwise).

    Output shape:
        `(B, H, W, 2C)`.

    Examples:
        >>> z = np.zeros((1, 2, 4, 1), "complex64")
        >>> z[0, 0, 1, 0] = 1j  # i at (h, w) = (0, 1)
        >>> y = ComplexFFT2D()(cvattn_keras.to_stacked(z))
        >>> # Row k = 0: i exp(-2 pi i l / 4) = i, 1, -i, -1.
        >>> np.round(cvattn_keras.from_stacked(y)[0, 0, :, 0], 6) + 0
        array([ 0.+1.j,  1.+0.j,  0.-1.j, -1.+0.j], dtype=complex64)
        >>> layer = ComplexFFT2D(inverse=True, norm="ortho", centered=True)
        >>> tuple(layer(np.zeros((2, 8, 6, 4), "float32")).shape)
        (2, 8, 6, 4)
    """

    def __init__(
        self, inverse=False, norm="backward", centered=False, **kwargs
    ):
        self.inverse = check.boolean(inverse, "inverse")
        self.norm = _resolve_norm(norm)
        self.centered = check.boolean(centered, "centered")
        # autocast=False: under mixed precision the images stay float32
        # (Keras would round them to float16 before `call`).
        super().__init__(autocast=False, **kwargs)

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 4:
            raise ValueError(
                "ComplexFFT2D takes stacked images (batch, height, width, "
                f"2 * channels). Received: input_shape={input_shape}"
            )
        height, width, channels = _image_sizes(input_shape, "input_shape")
        self.input_spec = keras.layers.InputSpec(
            ndim=4, axes={1: height, 2: width, 3: channels}
        )

    def call(self, inputs):
        _check_float(inputs, "inputs", self)
        x = ops.cast(inputs, _transform_dtype(self.compute_dtype))
        y = _fft2(x, self.inverse, self.norm, self.centered)
        return ops.cast(y, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        _image_sizes(input_shape, "input_shape")
        return tuple(input_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "inverse": self.inverse,
            "norm": self.norm,
            "centered": self.centered,
        }


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexDataConsistency(keras.layers.Layer):
    """k-space data consistency: the image whose k-space keeps the
    measured samples.

    `ifft2((1 - a) fft2(image) + a kspace)`, the transforms those of
    `ComplexFFT2D(norm=norm, centered=centered)`, with `a = m` the sampling
    mask (hard data consistency: sampled entries replaced by the measured
    ones, `ifft2(where(m, kspace, fft2(image)))`) or, with a `data_weight`
    `λ`, `a = m λ / (1 + λ)`: sampled entries `(k_pred + λ k0) / (1 +
    λ)`, the noisy-data consistency of Schlemper et al. (2017, eq. 9; `λ`
    grows as the noise shrinks, `λ = ∞` is the hard form; their code
    names it `noise_lvl`). The last step of each cascade of an unrolled
    reconstruction network. Named as the library's other layers on
    stacked complex tensors (`Complex...`), after the field's "data
    consistency layer".

    The default `norm="ortho"` is fastMRI's (and
    `cvattn_keras.datasets.synthetic_mri`'s, whose k-space and masks are
    in numpy's order with `zero_filled = ifft2(mask * (fft2(image) +
    noise))`); any norm gives the same image when `kspace` was measured
    with it. Computed in float32 whatever the dtype policy (see
    `ComplexFFT2D`), the result cast to the compute dtype; a blend by
    products, with `kspace` where the mask is 0 selected away first (a
    select: SELECT_V2, which int16x8 TFLite files lack, so these files
    keep the products alone, the same numbers for their int16 inputs,
    which hold no NaN or inf).

    Args:
        norm: `"ortho"` (default), `"backward"` or `"forward"`: the norm
            `kspace` was measured with.
        centered: `True` when `kspace` and `sampling_mask` are centred
            (fastMRI's `fftshift` order). Defaults to `False` (numpy's).
        data_weight: `None` (default: hard data consistency) or `λ >= 0`.
        learn_data_weight: if `True`, `λ` is a trainable scalar weight
            `data_weight` (kept `>= 0` by a `NonNeg` constraint),
            initialised to `data_weight` (which must then be given).
            Defaults to `False`.
        **kwargs: base `Layer` arguments.

    Call arguments:
        image: the predicted image, stacked `(B, H, W, 2C)`.
        kspace: the measured k-space, stacked `(B, H, W, 2C)`; its values
            where the mask is 0 do not matter, NaN and inf included
            (they reach neither the image nor the gradients).
        sampling_mask: real 0/1 or bool, broadcastable to `(B, H, W)`:
            `(B, H, W)`, `(B, 1, W)` (a mask of columns per image), `(H,
            W)`, `(1, W)`, or any of these with a trailing axis of 1
            (`(B, H, W, 1)`); shared by the `C` channels (coils). A shape
            that does not broadcast is a `ValueError` naming both shapes
            when built.

    Output shape:
        `(B, H, W, 2C)`, the image.

    Examples:
        A fully sampled k-space gives back its image, whatever the
        prediction:

        >>> z = np.arange(12).reshape(1, 3, 4, 1) * (1 + 2j)
        >>> kspace = np.fft.fft2(z, axes=(1, 2), norm="ortho")
        >>> out = ComplexDataConsistency()(
        ...     np.zeros((1, 3, 4, 2), "float32"),
        ...     cvattn_keras.to_stacked(kspace),
        ...     np.ones((3, 4), "float32"),
        ... )
        >>> bool(np.allclose(cvattn_keras.from_stacked(out), z, atol=1e-4))
        True

    References:
        J. Schlemper, J. Caballero, J. V. Hajnal, A. Price, D. Rueckert, "A
        Deep Cascade of Convolutional Neural Networks for MR Image
        Reconstruction", IPMI 2017 (arXiv 1703.00555), section 2.2.
    """

    def __init__(
        self,
        norm="ortho",
        centered=False,
        data_weight=None,
        learn_data_weight=False,
        **kwargs,
    ):
        self.norm = _resolve_norm(norm)
        self.centered = check.boolean(centered, "centered")
        self.learn_data_weight = check.boolean(
            learn_data_weight, "learn_data_weight"
        )
        if data_weight is not None:
            data_weight = _non_negative(data_weight, "data_weight")
        elif self.learn_data_weight:
            raise ValueError(
                "`learn_data_weight=True` needs an initial `data_weight` "
                "(a finite number >= 0). Received: data_weight=None"
            )
        self.data_weight = data_weight
        super().__init__(autocast=False, **kwargs)

    def build(self, image_shape, kspace_shape, sampling_mask_shape):
        image_shape = tuple(image_shape)
        kspace_shape = tuple(kspace_shape)
        if len(image_shape) != 4:
            raise ValueError(
                "ComplexDataConsistency takes stacked images (batch, "
                f"height, width, 2 * channels). Received: image.shape="
                f"{image_shape}"
            )
        _image_sizes(image_shape, "image.shape")
        self._check_shapes(image_shape, kspace_shape, sampling_mask_shape)
        self.data_weight_variable = None
        if self.learn_data_weight:
            self.data_weight_variable = self.add_weight(
                name="data_weight",
                shape=(),
                initializer=keras.initializers.Constant(self.data_weight),
                constraint=keras.constraints.NonNeg(),
                dtype="float32",  # computed in float32 (see call)
            )

    @staticmethod
    def _check_shapes(image_shape, kspace_shape, sampling_mask_shape):
        image, kspace = tuple(image_shape), tuple(kspace_shape)
        known = zip(check.static_shape(image), check.static_shape(kspace))
        if len(image) != len(kspace) or any(
            a is not None and b is not None and a != b for a, b in known
        ):
            raise ValueError(
                "`kspace` must have the image's shape (batch, height, "
                f"width, 2 * channels). Received: kspace.shape={kspace}, "
                f"image.shape={image}"
            )
        _check_mask_shape(sampling_mask_shape, image)

    def call(self, image, kspace, sampling_mask):
        _check_float(image, "image", self)
        _check_float(kspace, "kspace", self)
        self._check_shapes(image.shape, kspace.shape, sampling_mask.shape)
        if self.data_weight_variable is not None:
            weight = self.data_weight_variable
        else:
            weight = self.data_weight
        dtype = _transform_dtype(self.compute_dtype)
        out = data_consistency(
            ops.cast(image, dtype),
            ops.cast(kspace, dtype),
            sampling_mask,
            norm=self.norm,
            centered=self.centered,
            data_weight=weight,
        )
        return ops.cast(out, self.compute_dtype)

    def compute_output_shape(
        self, image_shape, kspace_shape, sampling_mask_shape
    ):
        self._check_shapes(image_shape, kspace_shape, sampling_mask_shape)
        return tuple(image_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "norm": self.norm,
            "centered": self.centered,
            "data_weight": self.data_weight,
            "learn_data_weight": self.learn_data_weight,
        }
