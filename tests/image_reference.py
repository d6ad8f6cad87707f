"""NumPy complex128 references of the image layers (pooling, upsampling,
patches), written with loops over windows and patches and none of the
library's code: the layers are tested against them.

Images are complex `(B, H, W, C)`; tokens complex `(B, N, E)`.
"""

import numpy as np


def _same_pads(size, pool, stride):
    """Keras' (TensorFlow's) "same" padding: `ceil(size / stride)` windows,
    the odd sample after."""
    steps = -(-size // stride)
    total = max((steps - 1) * stride + pool - size, 0)
    return total // 2, total - total // 2


def _windows(x, pool, strides, padding):
    """Yields `(a, b, window, valid)` for each output pixel: the window's
    values `(B, ph, pw, C)` (zero outside the image) and a boolean
    `(ph, pw)` that is True inside the image."""
    (ph, pw), (sh, sw) = pool, strides
    height, width = x.shape[1:3]
    valid = np.ones((height, width), bool)
    if padding == "same":
        pads = (_same_pads(height, ph, sh), _same_pads(width, pw, sw))
        x = np.pad(x, ((0, 0),) + pads + ((0, 0),))
        valid = np.pad(valid, pads)
    rows = (x.shape[1] - ph) // sh + 1
    columns = (x.shape[2] - pw) // sw + 1
    for a in range(rows):
        for b in range(columns):
            rows_ = slice(a * sh, a * sh + ph)
            columns_ = slice(b * sw, b * sw + pw)
            yield a, b, x[:, rows_, columns_], valid[rows_, columns_]


def _pooled(x, pool, strides, padding, reduce):
    out = {}
    for a, b, window, valid in _windows(x, pool, strides, padding):
        out[a, b] = reduce(window, valid)
    rows = 1 + max(a for a, _ in out)
    columns = 1 + max(b for _, b in out)
    y = np.zeros((x.shape[0], rows, columns, x.shape[-1]), np.complex128)
    for (a, b), value in out.items():
        y[:, a, b] = value
    return y


def average_pool(x, pool, strides, padding):
    """The complex mean of each window's pixels inside the image."""

    def mean(window, valid):
        return window[:, valid].mean(axis=1)  # (B, C)

    return _pooled(x, pool, strides, padding, mean)


def max_pool(x, pool, strides, padding):
    """Each window's value of largest modulus among its pixels inside the
    image; ties to the first in row-major order (`np.argmax`)."""

    def largest(window, valid):
        values = window[:, valid]  # (B, n, C), row-major
        index = np.argmax(np.abs(values), axis=1)  # (B, C): the first max
        return np.take_along_axis(values, index[:, None], axis=1)[:, 0]

    return _pooled(x, pool, strides, padding, largest)


def max_pool_selection(x, pool, strides):
    """A 0/1 array of `x`'s shape: 1 where `max_pool` ("valid") takes the
    pixel (once per window that takes it)."""
    (ph, pw), (sh, sw) = pool, strides
    selected = np.zeros(x.shape)
    for a, b, window, _ in _windows(x, pool, strides, "valid"):
        flat = np.abs(window).reshape(x.shape[0], ph * pw, -1)
        index = np.argmax(flat, axis=1)  # (B, C)
        for n in range(x.shape[0]):
            for c in range(x.shape[-1]):
                i, j = divmod(index[n, c], pw)
                selected[n, a * sh + i, b * sw + j, c] += 1
    return selected


def upsample_nearest(x, size):
    return np.repeat(np.repeat(x, size[0], axis=1), size[1], axis=2)


def _linear_weights(length, factor):
    """`(length * factor, length)` interpolation matrix with half-pixel
    centres, the sample clamped to the image (TensorFlow's bilinear
    resize)."""
    matrix = np.zeros((length * factor, length))
    for out in range(length * factor):
        source = min(max((out + 0.5) / factor - 0.5, 0.0), length - 1.0)
        low = int(np.floor(source))
        high = min(low + 1, length - 1)
        frac = source - low
        matrix[out, low] += 1 - frac
        matrix[out, high] += frac
    return matrix


def upsample_bilinear(x, size):
    rows = _linear_weights(x.shape[1], size[0])
    columns = _linear_weights(x.shape[2], size[1])
    return np.einsum("ah,bw,nhwc->nabc", rows, columns, x)


def patch_embedding(x, kernel, bias=0.0, positions=0.0):
    """x (B, H, W, C), kernel (ph, pw, C, E): one token per patch, the
    patches row-major."""
    ph, pw = kernel.shape[:2]
    rows, columns = x.shape[1] // ph, x.shape[2] // pw
    tokens = np.zeros((x.shape[0], rows * columns, kernel.shape[-1]), complex)
    for a in range(rows):
        for b in range(columns):
            patch = x[:, a * ph : (a + 1) * ph, b * pw : (b + 1) * pw]
            token = np.einsum("nijc,ijce->ne", patch, kernel)
            tokens[:, a * columns + b] = token
    return tokens + bias + positions


def sinusoidal_2d(rows, columns, features, max_wavelength=10000.0):
    """(rows * columns, features) complex: `exp(i r theta_j)` on the first
    `features - features // 2` features, `exp(i c theta_j)` on the rest."""
    row_features = features - features // 2
    column_features = features // 2
    table = np.zeros((rows * columns, features), complex)
    for r in range(rows):
        for c in range(columns):
            for j in range(row_features):
                theta = max_wavelength ** (-j / row_features)
                table[r * columns + c, j] = np.exp(1j * r * theta)
            for j in range(column_features):
                theta = max_wavelength ** (-j / column_features)
                value = np.exp(1j * c * theta)
                table[r * columns + c, row_features + j] = value
    return table


def patch_unembedding(tokens, kernel, grid, bias=0.0):
    """tokens (B, N, E), kernel (ph, pw, F, E): each token's patch placed
    on the row-major grid `(rows, columns)`."""
    ph, pw, filters = kernel.shape[:3]
    rows, columns = grid
    y = np.zeros((tokens.shape[0], rows * ph, columns * pw, filters), complex)
    for a in range(rows):
        for b in range(columns):
            token = tokens[:, a * columns + b]
            patch = np.einsum("ne,ijfe->nijf", token, kernel)
            y[:, a * ph : (a + 1) * ph, b * pw : (b + 1) * pw] = patch
    return y + bias
