"""Tokens from stacked complex images and back: `ComplexPatchEmbedding`
(`(B, H, W, 2C)` -> `(B, N, 2E)`, with 2-D positions) and
`ComplexPatchUnembedding` (`(B, N, 2E)` -> `(B, H, W, 2F)`), so that
`ComplexMultiHeadAttention` and the transformer blocks run over the
patches of an image unchanged (a complex vision transformer)."""

import math

import keras
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import complex as cx
from cvattn_keras import initializers as cinit
from cvattn_keras.layers import _image
from cvattn_keras.layers._weights import add_bias
from cvattn_keras.layers._weights import add_complex_weights
from cvattn_keras.layers._weights import set_weight_options
from cvattn_keras.layers._weights import weight_options_config

__all__ = [
    "ComplexPatchEmbedding",
    "ComplexPatchUnembedding",
    "sinusoidal_encoding_2d",
]

POSITIONS = ("learned", "sinusoidal")


def sinusoidal_encoding_2d(rows, columns, features, max_wavelength=10000.0):
    """The fixed 2-D complex position encoding of a grid of `rows x
    columns` patches, stacked `(rows * columns, 2 * features)`, float32.

    Patch `n = r * columns + c` (row-major) gets, on its first `Er =
    features - features // 2` complex features, `exp(i r theta_j)` with
    `theta_j = max_wavelength^(-j / Er)`, and on the other `Ec = features
    // 2`, `exp(i c theta_j)` with `theta_j = max_wavelength^(-j / Ec)`:
    ViT's 2-D sin-cos encoding (half the features for each axis), each
    sin-cos pair one unit complex number (its real part the cosine, its
    imaginary part the sine), as in `ComplexRotaryEmbedding`.

    Args:
        rows: the grid's rows (an int, or a scalar tensor).
        columns: the grid's columns (likewise).
        features: int >= 2, the complex features `E`.
        max_wavelength: the base of the frequencies. Defaults to 10000.

    Example:
        >>> import numpy as np
        >>> table = sinusoidal_encoding_2d(2, 3, 2)  # row, column
        >>> z = np.asarray(table[:, :2]) + 1j * np.asarray(table[:, 2:])
        >>> bool(np.allclose(z[5], [np.exp(1j * 1), np.exp(1j * 2)]))
        True
    """
    if not check.static_size(features) or features < 2:
        raise ValueError(
            "`features` must be an int >= 2 (half for the row, half for the "
            f"column). Received: features={features!r}"
        )
    row_features = features - features // 2
    column_features = features // 2

    def angles(count, width):
        positions = ops.cast(ops.arange(count, dtype="int32"), "float32")
        exponent = ops.cast(ops.arange(width), "float32") / width
        theta = ops.power(float(max_wavelength), -exponent)  # (width,)
        return positions[:, None] * theta[None, :]  # (count, width)

    row = angles(rows, row_features)[:, None, :]  # (rows, 1, Er)
    column = angles(columns, column_features)[None, :, :]  # (1, columns, Ec)
    grid = ops.concatenate(
        [
            row * ops.ones_like(column[..., :1]),
            column * ops.ones_like(row[..., :1]),
        ],
        axis=-1,
    )  # (rows, columns, E)
    grid = cx.reshape(grid, (-1, features))  # (N, E)
    return ops.concatenate([ops.cos(grid), ops.sin(grid)], axis=-1)


def _extract(inputs, patch_size):
    """`(B, H, W, 2C)` -> `(B, N, ph * pw, 2C)`: the patches, row-major,
    each its pixels row-major, each pixel stacked. Reshapes and one 4-D
    transpose (TFLite's TRANSPOSE, with int8 kernels)."""
    (ph, pw), channels = patch_size, inputs.shape[-1]
    batch, height, width = ops.shape(inputs)[:3]
    rows, columns = height // ph, width // pw
    # (B, H, W, 2C) = (B, rows, ph, columns, pw, 2C) in memory.
    x = cx.reshape(inputs, (batch * rows, ph, columns, pw * channels))
    x = ops.transpose(x, (0, 2, 1, 3))  # (B rows, columns, ph, pw 2C)
    return cx.reshape(x, (batch, rows * columns, ph * pw, channels))


def _place(pixels, patch_size, grid):
    """The inverse of `_extract`: `(B, N, ph * pw, 2F)` -> `(B, rows ph,
    columns pw, 2F)`."""
    (ph, pw), (rows, columns) = patch_size, grid
    channels = pixels.shape[-1]
    batch = ops.shape(pixels)[0]
    x = cx.reshape(pixels, (batch * rows, columns, ph, pw * channels))
    x = ops.transpose(x, (0, 2, 1, 3))  # (B rows, ph, columns, pw 2F)
    return cx.reshape(x, (batch, rows * ph, columns * pw, channels))


def _check_grid_size(layer, input_shape):
    """Raises unless the static height and width of `input_shape` are
    multiples of the patch's."""
    for size, patch, axis in zip(
        _image.spatial(input_shape), layer.patch_size, ("height", "width")
    ):
        if size is not None and size % patch:
            raise ValueError(
                f"{type(layer).__name__} needs the image's height and width "
                f"to be multiples of patch_size={layer.patch_size}. "
                f"Received: {axis} {size} (input_shape="
                f"{tuple(input_shape)})"
            )


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexPatchEmbedding(keras.layers.Layer):
    """Complex tokens from a stacked complex image: each `ph x pw` patch
    times one complex matrix, plus a complex bias and 2-D positions.

    The image `(B, H, W, 2C)` is cut into `N = (H / ph) (W / pw)` patches,
    numbered row-major (`n = a (W / pw) + b` for the patch of rows `a ph
    ...`, columns `b pw ...`); token `n` is

        t[n] = sum_{i, j, c} x[a ph + i, b pw + j, c] W[i, j, c, :] + b + P[n]

    with the complex kernel `W = kernel_real + i kernel_imag` `(ph, pw, C,
    E)` (the layout of a convolution kernel: the layer equals a complex
    convolution of kernel size and stride `patch_size` followed by a
    reshape), the complex bias `b = bias_real + i bias_imag` `(E,)` and
    the position term `P` (below). Flattened, a patch is its pixels
    row-major, each pixel's `C` channels last: `W` reshaped `(ph pw C, E)`
    is the matrix that multiplies it.

    **Positions.** `"learned"` (default, ViT's and keras-hub's): one
    complex vector per patch, `position_real + i position_imag` `(N, E)`,
    added to the tokens; the grid (so `H` and `W`) is then fixed at
    build. `"sinusoidal"`: the fixed 2-D complex encoding
    `sinusoidal_encoding_2d` added (unit phasors, half the features for
    the row and half for the column; any image size). `None`: no
    positions (the layer is then linear, and `ComplexPatchUnembedding`
    can invert it). Positions are added to the tokens, so
    `ComplexMultiHeadAttention` and `ComplexTransformerEncoder` run over
    them unchanged. (A 2-D rotary encoding would need changing the
    attention's queries and keys per head.)

    The product is one real matmul of the patches against the block
    kernel (`complex_matmul="block"`), Gauss's three real matmuls
    (`"gauss"`), or as `"auto"` chooses (see `ComplexDense`). Traced for
    a TFLite file (`cvattn_keras.export`), it is `ComplexDense`'s
    weights-once product (`complex.matmul_once`): the file stores each
    real weight once. The patches are cut with reshapes and one 4-D
    transpose: builtin ops with float and int8 kernels.

    Args:
        patch_size: a positive int or a pair `(ph, pw)`.
        embed_dim: positive int, the complex features `E` of a token.
        use_bias: whether to add the complex bias. Defaults to `True`.
        positions: `"learned"` (default), `"sinusoidal"` or `None`.
        max_wavelength: the base of the sinusoidal frequencies (used by
            `positions="sinusoidal"`). Defaults to 10000.
        kernel_initializer: as in `ComplexDense` (each part initialised
            independently; fans of a convolution kernel).
        bias_initializer: as in `ComplexDense`.
        position_initializer: the initializer of each part of the learned
            positions (cloned, so the parts differ). Defaults to a normal
            distribution of standard deviation 0.02 (ViT's).
        kernel_regularizer: as in `ComplexDense`.
        bias_regularizer: as in `ComplexDense`.
        activity_regularizer: applied to the stacked output.
        kernel_constraint: as in `ComplexDense`.
        bias_constraint: as in `ComplexDense`.
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`, as in
            `ComplexDense` (sizes `ph pw C` and `E`).
        **kwargs: base `Layer` arguments.

    Input shape:
        `(B, H, W, 2C)`, channels last, stacked (the `C` real parts, then
        the `C` imaginary parts); `H` and `W` multiples of `ph` and `pw`
        (a `ValueError` naming both otherwise), static for learned
        positions.

    Output shape:
        `(B, N, 2E)`, `N = (H / ph) (W / pw)`, stacked.

    Example:
        A 2 x 2 patch of one channel holding `1, 2, 3, 4j`, with the
        kernel `1` at the first pixel and `i` at the last, gives `1 + i
        4j = -3`:

        >>> import numpy as np
        >>> import cvattn_keras as cvk
        >>> layer = ComplexPatchEmbedding(
        ...     2, 1, use_bias=False, positions=None
        ... )
        >>> z = np.array([1, 2, 3, 4j]).reshape(1, 2, 2, 1)
        >>> _ = layer(cvk.to_stacked(z))
        >>> kernel = np.array([1, 0, 0, 1j]).reshape(2, 2, 1, 1)
        >>> layer.set_weights([kernel.real, kernel.imag])
        >>> cvk.from_stacked(layer(cvk.to_stacked(z))).ravel()
        array([-3.+0.j], dtype=complex64)
    """

    def __init__(
        self,
        patch_size,
        embed_dim,
        use_bias=True,
        positions="learned",
        max_wavelength=10000,
        kernel_initializer="complex_glorot_uniform",
        bias_initializer="zeros",
        position_initializer=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        complex_matmul="auto",
        **kwargs,
    ):
        patch_size = _image.pair(patch_size, "patch_size")
        embed_dim = check.positive_int(embed_dim, "embed_dim")
        if positions is not None and positions not in POSITIONS:
            raise ValueError(
                f"`positions` must be one of {POSITIONS} or None. "
                f"Received: positions={positions!r}"
            )
        if positions == "sinusoidal" and embed_dim < 2:
            raise ValueError(
                "`positions='sinusoidal'` encodes the row and the column "
                "on features of their own and needs `embed_dim >= 2`. "
                f"Received: embed_dim={embed_dim}"
            )
        max_wavelength = check.greater_than(
            max_wavelength, "max_wavelength", bound=1.0
        )
        if position_initializer is None:
            position_initializer = keras.initializers.RandomNormal(stddev=0.02)
        try:
            position_initializer = cinit.get(position_initializer)
        except (ValueError, TypeError) as error:
            raise ValueError(
                "`position_initializer` must be a Keras initializer (an "
                f"instance, a name or a config dict) or None. {error} "
                f"Received: position_initializer={position_initializer!r}"
            ) from None
        complex_matmul = cx.resolve_complex_matmul(complex_matmul)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.patch_size = patch_size
        self.embed_dim = embed_dim
        self.use_bias = bool(use_bias)
        self.positions = positions
        self.max_wavelength = max_wavelength
        self.position_initializer = position_initializer
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

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        channels = _image.check_image(self, input_shape)
        _check_grid_size(self, input_shape)
        height, width = _image.spatial(input_shape)
        spec_shape = (None, None, None, 2 * channels)
        self.position_real = self.position_imag = None
        if self.positions == "learned":
            if height is None or width is None:
                raise ValueError(
                    "ComplexPatchEmbedding with positions='learned' holds "
                    "one position per patch and needs the image's height "
                    "and width at build; use positions='sinusoidal' or "
                    "None for images of any size. Received: "
                    f"input_shape={input_shape}"
                )
            count = (height // self.patch_size[0]) * (
                width // self.patch_size[1]
            )
            for offset, part in enumerate(("real", "imag")):
                weight = self.add_weight(
                    name=f"position_{part}",
                    shape=(count, self.embed_dim),
                    initializer=cinit.clone(self.position_initializer, offset),
                )
                setattr(self, f"position_{part}", weight)
            spec_shape = (None, height, width, 2 * channels)
        kernel_shape = self.patch_size + (channels, self.embed_dim)
        add_complex_weights(self, kernel_shape, (self.embed_dim,))
        self.input_spec = keras.layers.InputSpec(shape=spec_shape)

    def call(self, inputs):
        _check_grid_size(self, tuple(inputs.shape))
        (ph, pw), channels = self.patch_size, inputs.shape[-1] // 2
        dtype = self.compute_dtype
        kernel_real = ops.cast(self.kernel_real, dtype)  # (ph, pw, C, E)
        kernel_imag = ops.cast(self.kernel_imag, dtype)
        patches = _extract(inputs, self.patch_size)  # (B, N, ph pw, 2C)
        batch, count = ops.shape(patches)[:2]
        inner = ph * pw * channels
        if _tracing.weights_once():
            # [W_i; W_r] per pixel: (ph pw 2C, E), the rows in the order of
            # the patches' channels, each pixel a "head" of matmul_once.
            kernel = cx.kernel_once(kernel_real, kernel_imag, axis=2)
            kernel = ops.reshape(kernel, (2 * inner, self.embed_dim))
            tokens = cx.matmul_once(patches, kernel, in_rank=2)  # (B, N, 2E)
        elif cx.use_gauss(
            self.complex_matmul, inner, self.embed_dim, dtype=dtype
        ):
            real, imag = cx.split(patches)  # (B, N, ph pw, C) each
            real, imag = (
                cx.reshape(part, (batch, count, inner)) for part in (real, imag)
            )
            real, imag = cx.gauss_product(
                real,
                imag,
                ops.reshape(kernel_real, (inner, self.embed_dim)),
                ops.reshape(kernel_imag, (inner, self.embed_dim)),
                ops.matmul,
            )
            tokens = ops.concatenate([real, imag], axis=-1)  # (B, N, 2E)
        else:
            # (ph pw, 2C, 2E): each pixel's block kernel.
            kernel = cx.block_kernel(
                ops.reshape(kernel_real, (ph * pw, channels, -1)),
                ops.reshape(kernel_imag, (ph * pw, channels, -1)),
                in_axis=1,
            )
            kernel = ops.reshape(kernel, (2 * inner, 2 * self.embed_dim))
            rows = cx.reshape(patches, (batch, count, 2 * inner))
            tokens = ops.matmul(rows, kernel)  # (B, N, 2E)
        tokens = add_bias(self, tokens)
        if self.positions == "learned":
            tokens = tokens + ops.cast(
                ops.concatenate([self.position_real, self.position_imag], -1),
                dtype,
            )  # (N, 2E) over the batch
        elif self.positions == "sinusoidal":
            height, width = ops.shape(inputs)[1:3]
            table = sinusoidal_encoding_2d(
                height // ph, width // pw, self.embed_dim, self.max_wavelength
            )
            tokens = tokens + ops.cast(table, dtype)
        return tokens

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        _image.check_image(self, input_shape)
        _check_grid_size(self, input_shape)
        height, width = _image.spatial(input_shape)
        count = None
        if height is not None and width is not None:
            count = (height // self.patch_size[0]) * (
                width // self.patch_size[1]
            )
        return (input_shape[0], count, 2 * self.embed_dim)

    def get_config(self):
        return {
            **super().get_config(),
            "patch_size": self.patch_size,
            "embed_dim": self.embed_dim,
            "use_bias": self.use_bias,
            "positions": self.positions,
            "max_wavelength": self.max_wavelength,
            **weight_options_config(self),
            "position_initializer": keras.initializers.serialize(
                self.position_initializer
            ),
            "complex_matmul": self.complex_matmul,
        }


def _grid(value):
    if value is None:
        return None
    return _image.pair(value, "grid")


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexPatchUnembedding(keras.layers.Layer):
    """A stacked complex image from complex tokens: each token times one
    complex matrix gives its `ph x pw` patch, placed back on the grid.

    The inverse layout of `ComplexPatchEmbedding`, for image-to-image
    models: tokens `(B, N, 2E)`, numbered row-major over a grid of `rows x
    columns` patches, give the image `(B, rows ph, columns pw, 2F)` with

        y[a ph + i, b pw + j, f]
            = sum_e t[a columns + b, e] W[i, j, f, e] + b[f]

    for the complex kernel `W = kernel_real + i kernel_imag` `(ph, pw, F,
    E)` (Keras' `Conv2DTranspose` kernel layout: the layer equals a
    complex transposed convolution of kernel size and stride
    `patch_size` on the tokens' grid) and the complex bias `b = bias_real
    + i bias_imag` `(F,)`, the same at every pixel. For `E = ph pw C` and
    `F = C`, the kernel whose matrix `(E, ph pw F)` (`W` transposed to
    `(E, ph, pw, F)`) is the inverse of an embedding's `(ph pw C, E)`
    recovers the image from `ComplexPatchEmbedding(positions=None,
    use_bias=False)`'s tokens.

    **The grid.** `grid=(rows, columns)` gives it (`N` must be `rows
    columns`; a `ValueError` otherwise, wherever `N` is known); `grid=None`
    (default) takes the square grid `sqrt(N) x sqrt(N)`, which needs a
    static `N` that is a perfect square (a `ValueError` asking for `grid`
    otherwise). A square grid is the usual vision transformer's; a
    non-square image must say its grid.

    The product is as in `ComplexPatchEmbedding` (block, Gauss or, traced
    for a TFLite file, weights once); the patches are placed with
    reshapes and one 4-D transpose.

    Args:
        patch_size: a positive int or a pair `(ph, pw)`.
        filters: positive int, the complex channels `F` of the image.
        grid: `None` (default: square), a positive int (a square grid) or
            a pair `(rows, columns)`.
        use_bias: whether to add the complex bias. Defaults to `True`.
        kernel_initializer: as in `ComplexDense`.
        bias_initializer: as in `ComplexDense`.
        kernel_regularizer: as in `ComplexDense`.
        bias_regularizer: as in `ComplexDense`.
        activity_regularizer: applied to the stacked output.
        kernel_constraint: as in `ComplexDense`.
        bias_constraint: as in `ComplexDense`.
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`, as in
            `ComplexDense` (sizes `E` and `ph pw F`).
        **kwargs: base `Layer` arguments.

    Input shape:
        `(B, N, 2E)`, stacked.

    Output shape:
        `(B, rows ph, columns pw, 2F)`, channels last, stacked.

    Example:
        One token `1 + 1j` and the kernel `1, 1j, -1, -1j` (one complex
        channel) give the patch `1 + 1j, -1 + 1j, -1 - 1j, 1 - 1j`:

        >>> import numpy as np
        >>> import cvattn_keras as cvk
        >>> layer = ComplexPatchUnembedding(2, 1, use_bias=False)
        >>> t = cvk.to_stacked(np.array([1 + 1j]).reshape(1, 1, 1))
        >>> _ = layer(t)
        >>> kernel = np.array([1, 1j, -1, -1j]).reshape(2, 2, 1, 1)
        >>> layer.set_weights([kernel.real, kernel.imag])
        >>> cvk.from_stacked(layer(t)).ravel()
        array([ 1.+1.j, -1.+1.j, -1.-1.j,  1.-1.j], dtype=complex64)
    """

    def __init__(
        self,
        patch_size,
        filters,
        grid=None,
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
        patch_size = _image.pair(patch_size, "patch_size")
        filters = check.positive_int(filters, "filters")
        grid = _grid(grid)
        complex_matmul = cx.resolve_complex_matmul(complex_matmul)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.patch_size = patch_size
        self.filters = filters
        self.grid = grid
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

    def _resolve_grid(self, input_shape):
        """The grid `(rows, columns)` for tokens of `input_shape`."""
        count = check.static_size(input_shape[1])
        if self.grid is not None:
            if count is not None and count != self.grid[0] * self.grid[1]:
                raise ValueError(
                    "ComplexPatchUnembedding needs grid[0] * grid[1] tokens "
                    f"(grid={self.grid}). Received: {count} tokens "
                    f"(input_shape={tuple(input_shape)})"
                )
            return self.grid
        side = None if count is None else math.isqrt(count)
        if side is None or side * side != count:
            raise ValueError(
                "ComplexPatchUnembedding with grid=None places the tokens "
                "on a square grid and needs a static number of tokens that "
                "is a perfect square; give grid=(rows, columns) otherwise. "
                f"Received: {count} tokens (input_shape="
                f"{tuple(input_shape)})"
            )
        return (side, side)

    def build(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "ComplexPatchUnembedding expects stacked tokens (batch, "
                f"tokens, 2 * embed_dim) with a known last axis. Received: "
                f"input_shape={input_shape}"
            )
        features = (
            cx.check_even(input_shape[-1], "input_shape[-1]", input_shape) // 2
        )
        self._resolve_grid(input_shape)
        add_complex_weights(
            self, self.patch_size + (self.filters, features), (self.filters,)
        )
        self.input_spec = keras.layers.InputSpec(
            ndim=3, axes={-1: 2 * features}
        )

    def call(self, inputs):
        grid = self._resolve_grid(tuple(inputs.shape))
        (ph, pw), filters = self.patch_size, self.filters
        dtype = self.compute_dtype
        features = inputs.shape[-1] // 2
        outer = ph * pw * filters
        # (ph, pw, F, E) -> (E, ph pw F): the matrix of one token.
        kernel_real, kernel_imag = (
            ops.reshape(
                ops.transpose(ops.cast(weight, dtype), (3, 0, 1, 2)),
                (features, outer),
            )
            for weight in (self.kernel_real, self.kernel_imag)
        )
        batch, count = ops.shape(inputs)[:2]
        if _tracing.weights_once():
            kernel = cx.kernel_once(kernel_real, kernel_imag)  # (2E, ph pw F)
            pixels = cx.matmul_once(
                inputs, kernel, out_shape=(ph * pw, filters)
            )  # (B, N, ph pw, 2F)
        elif cx.use_gauss(self.complex_matmul, features, outer, dtype=dtype):
            real, imag = cx.gauss_product(
                *cx.split(inputs), kernel_real, kernel_imag, ops.matmul
            )  # (B, N, ph pw F) each
            pixels = ops.concatenate(
                [
                    cx.reshape(part, (batch, count, ph * pw, filters))
                    for part in (real, imag)
                ],
                axis=-1,
            )
        else:
            # (2E, ph pw, 2F): each pixel's outputs stacked.
            kernel = cx.block_kernel(
                ops.reshape(kernel_real, (features, ph * pw, filters)),
                ops.reshape(kernel_imag, (features, ph * pw, filters)),
            )
            kernel = ops.reshape(kernel, (2 * features, 2 * outer))
            pixels = cx.reshape(
                ops.matmul(inputs, kernel), (batch, count, ph * pw, 2 * filters)
            )
        pixels = add_bias(self, pixels)
        return _place(pixels, self.patch_size, grid)

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        rows, columns = self._resolve_grid(input_shape)
        cx.check_even(input_shape[-1], "input_shape[-1]", input_shape)
        return (
            input_shape[0],
            rows * self.patch_size[0],
            columns * self.patch_size[1],
            2 * self.filters,
        )

    def get_config(self):
        return {
            **super().get_config(),
            "patch_size": self.patch_size,
            "filters": self.filters,
            "grid": self.grid,
            "use_bias": self.use_bias,
            **weight_options_config(self),
            "complex_matmul": self.complex_matmul,
        }
