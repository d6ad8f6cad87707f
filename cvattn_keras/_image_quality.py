"""Argument checks and the windowed statistics of the image-quality
metrics in `cvattn_keras.metrics` (`nmse`, `psnr`, `ssim`,
`phase_error`): NumPy, float64."""

import numpy as np


def _is_stacked(images):
    return (
        images.dtype.kind in "iuf"
        and images.ndim == 4
        and (images.shape[-1] == 2)
    )


def _finite(images, name):
    if not np.all(np.isfinite(images)):
        raise ValueError(f"`{name}` must be finite. Received: NaN or inf")
    return images


def magnitudes(images, name):
    """Real `(N, H, W)` float64 from magnitudes `(N, H, W)`, or the
    modulus of complex `(N, H, W)` or stacked `(N, H, W, 2)` images."""
    images = np.asarray(images)
    if images.dtype.kind == "c" and images.ndim == 3:
        images = np.abs(images)
    elif _is_stacked(images):
        images = np.hypot(images[..., 0], images[..., 1], dtype=np.float64)
    elif images.dtype.kind not in "iuf" or images.ndim != 3:
        raise ValueError(
            f"`{name}` must be real images (N, H, W), or complex ones: a "
            "complex array (N, H, W) or stacked floats (N, H, W, 2), whose "
            f"modulus is taken. Received: {name} of shape {images.shape}, "
            f"dtype {images.dtype}"
        )
    return _finite(images.astype(np.float64), name)


def complex_images(images, name):
    """Complex128 `(N, H, W)` from a complex array or stacked floats."""
    images = np.asarray(images)
    if _is_stacked(images):
        images = images[..., 0] + 1j * images[..., 1]
    elif images.dtype.kind != "c" or images.ndim != 3:
        raise ValueError(
            f"`{name}` must be complex images: a complex array (N, H, W) or "
            f"stacked floats (N, H, W, 2). Received: {name} of shape "
            f"{images.shape}, dtype {images.dtype}"
        )
    return _finite(images.astype(np.complex128), name)


def same_shape(target, prediction):
    if target.shape != prediction.shape or not target.size:
        raise ValueError(
            "`target` and `prediction` must be non-empty images of the same "
            f"(N, H, W). Received: {target.shape} and {prediction.shape}"
        )
    return target, prediction


def data_range(value, target):
    """Per image `(N,)`: `value` (a number or `(N,)`), or each target's
    maximum when `value` is None; each finite and > 0."""
    given = value
    if value is None:
        value = np.max(target, axis=(1, 2))
    else:
        value = np.asarray(value)
        if (
            value.dtype.kind not in "iuf"
            or value.ndim > 1
            or value.size not in (1, len(target))
        ):
            raise ValueError(
                "`data_range` must be a number or one per image, shape "
                f"({len(target)},). Received: data_range={given!r}"
            )
    value = np.broadcast_to(np.asarray(value, np.float64), (len(target),))
    bad = np.flatnonzero(~(np.isfinite(value) & (value > 0)))
    if bad.size and given is None:
        raise ValueError(
            "The default `data_range` is each target's maximum, which must "
            "be > 0 (an all-zero target has no range: pass `data_range`). "
            f"Received: a maximum of {value[bad[0]]!r} in image(s) "
            f"{bad[:5].tolist()}"
        )
    if bad.size:
        raise ValueError(
            "`data_range` must be finite and > 0. Received: "
            f"data_range={given!r}"
        )
    return value


def win_size(value, shape):
    """An odd int >= 3, at most the images' sides."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or value < 3
        or value % 2 == 0
    ):
        raise ValueError(
            f"`win_size` must be an odd int >= 3. Received: win_size={value!r}"
        )
    if min(shape[1:]) < value:
        raise ValueError(
            f"The images must be at least win_size={value} pixels on each "
            f"side. Received: images of shape {shape}"
        )
    return int(value)


def support_mask(support, shape):
    """Bool `shape` from None (every pixel), or bool or 0/1 `(N, H, W)`
    or `(H, W)`, with a pixel in each image."""
    if support is None:
        return np.ones(shape, bool)
    support = np.asarray(support)
    if (
        support.shape not in (shape, shape[1:])
        or support.dtype.kind not in "biuf"
        or np.any((support != 0) & (support != 1))
    ):
        raise ValueError(
            f"`support` must be bool or 0/1, shape {shape} or {shape[1:]}. "
            f"Received: shape {support.shape}, dtype {support.dtype}"
        )
    support = np.broadcast_to(support.astype(bool), shape)
    empty = np.flatnonzero(~np.any(support, axis=(1, 2)))
    if empty.size:
        raise ValueError(
            "`support` must hold at least one pixel of each image. "
            f"Received: none in image(s) {empty[:5].tolist()}"
        )
    return support


def box_means(x, size):
    """The mean of every `size x size` window lying inside `(N, H, W)`:
    `(N, H - size + 1, W - size + 1)` (differences of running sums, one
    axis at a time; float64, so the rounding stays far below the SSIM's
    constants)."""
    for axis in (1, 2):
        sums = np.cumsum(x, axis=axis)
        pad = [(0, 0)] * 3
        pad[axis] = (1, 0)
        sums = np.pad(sums, pad)
        n = sums.shape[axis]
        x = np.take(sums, np.arange(size, n), axis) - np.take(
            sums, np.arange(n - size), axis
        )
    return x / size**2
