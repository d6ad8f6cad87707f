"""`synthetic_mri`: simulated accelerated MRI, complex images of random
phantoms with their noisy k-space, fastMRI-like Cartesian undersampling
masks and zero-filled reconstructions (stacked `[real | imag]`, float32).

The conventions are fastMRI's (`fastmri/data/subsample.py`,
`fastmri/fftc.py`) except one: k-space and masks are stored in NUMPY'S
ORDER (the zero frequency at index `[0, 0]`), not centred. The centred
view is `np.fft.fftshift(kspace, axes=(1, 2))`.
"""

import dataclasses

import numpy as np

from cvattn_keras import _validation as check
from cvattn_keras.datasets._checks import _non_negative_finite
from cvattn_keras.datasets._checks import _non_negative_int

__all__ = ["SyntheticMRI", "synthetic_mri"]

SPLITS = ("train", "validation", "test")
DEFAULT_NUM_SAMPLES = {"train": 1024, "validation": 128, "test": 256}
MASK_TYPES = ("random", "equispaced")
MIN_IMAGE_SIZE = 16
"""The smallest height and width `synthetic_mri` draws (the phantom's
smallest features are about a pixel wide at 16)."""

# The phantom, in units of half the image's shorter side (the image spans
# [-1, 1] along it). Ellipses: the head outline (the skull, intensity 1),
# the brain inside it, and up to `_MAX_FEATURES` features inside the
# brain, added to it (as in the Shepp-Logan phantom).
_MIN_FEATURES, _MAX_FEATURES = 3, 10
_MIN_INTENSITY = 0.05  # inside the support, after normalisation
# Uniform draws per example, in this order: the head and brain (6 + 1),
# the feature count (1), 6 per feature, the bias (5), the phase (1 + 5 +
# 2 per low-pass mode).
_PHASE_MODES = 2  # low-pass phase noise: spatial frequencies -2..2
_NUM_MODES = (2 * _PHASE_MODES + 1) ** 2
_FEATURES_AT = 8
_BIAS_AT = _FEATURES_AT + 6 * _MAX_FEATURES
_PHASE_AT = _BIAS_AT + 5
_NUM_UNIFORMS = _PHASE_AT + 6 + 2 * _NUM_MODES


@dataclasses.dataclass(frozen=True, eq=False)
class SyntheticMRI:
    """What `synthetic_mri` returns: `N` examples of `H x W` complex
    images, one coil, stacked `[real | imag]` on the last axis (float32),
    channels last.

    k-space and masks are in NUMPY'S ORDER, NOT fftshifted: the zero
    frequency is at `[:, 0, 0]`, and the fully sampled centre of the mask
    is the columns around index 0, wrapping round to the last ones. The
    centred view (fastMRI's) is `np.fft.fftshift(kspace, axes=(1, 2))`
    and `np.fft.fftshift(mask, axes=(1, 2))`.

    With `z = from_stacked` (complex `(N, H, W)` arrays), `fft2 =
    np.fft.fft2(..., norm="ortho")` and `ifft2` likewise (over axes 1, 2),
    the fields satisfy, to float32 rounding:

        kspace        = fft2(image) + noise
        masked_kspace = mask * kspace
        zero_filled   = ifft2(mask * (fft2(image) + noise))

    Attributes:
        image: float32 `(N, H, W, 2)`, the clean complex image (the
            target): a phantom of magnitude at most 1 (exactly 1 at its
            maximum) times a smooth phase map.
        kspace: float32 `(N, H, W, 2)`, the full noisy k-space,
            `fft2(image) + noise`, numpy's order.
        noise: float32 `(N, H, W, 2)`, the complex Gaussian measurement
            noise added to k-space: real and imaginary parts independent,
            each of standard deviation `noise_std` (so `E|n|^2 = 2
            noise_std^2`); the orthonormal transform gives the image
            domain noise `ifft2(noise)` the same statistics.
        mask: float32 0/1 `(N, H, W)`, the sampled k-space columns (the
            same for every row; `mask[:, :1]` is the `(N, 1, W)` column
            mask), numpy's order. Multiply stacked arrays by
            `mask[..., None]`.
        masked_kspace: float32 `(N, H, W, 2)`, `mask * kspace`.
        zero_filled: float32 `(N, H, W, 2)`, `ifft2(masked_kspace)`.
        support: bool `(N, H, W)`, the object: the head outline (inside
            it every pixel of `image` has magnitude >= 0.05, so its phase
            is defined). Phase errors are measured inside it
            (`metrics.phase_error`).
        acceleration: the requested acceleration (the measured one is
            `W / mask[:, 0].sum(-1)`, close to it on average).
        center_fraction: the fraction of columns sampled at the centre.
        num_low_frequencies: the number of centre columns,
            `round(W * center_fraction)`.
        mask_type: `"random"` or `"equispaced"`.
        fixed_mask: `True` when every example has the same mask.
        noise_std: the noise's standard deviation per real component.
        split: `"train"`, `"validation"` or `"test"`.
        seed: the seed.
    """

    image: np.ndarray
    kspace: np.ndarray
    noise: np.ndarray
    mask: np.ndarray
    masked_kspace: np.ndarray
    zero_filled: np.ndarray
    support: np.ndarray
    acceleration: float
    center_fraction: float
    num_low_frequencies: int
    mask_type: str
    fixed_mask: bool
    noise_std: float
    split: str
    seed: int


# ----------------------------------------------------------------------
# Arguments.
# ----------------------------------------------------------------------


def _image_size(image_size):
    """`(H, W)` from an int or a pair, each an int >= MIN_IMAGE_SIZE."""
    sizes = (image_size, image_size) if check._is_int(image_size) else None
    if sizes is None and not isinstance(image_size, (str, bytes)):
        try:
            sizes = tuple(image_size)
        except TypeError:
            sizes = None
    if (
        sizes is None
        or len(sizes) != 2
        or not all(check._is_int(s) and s >= MIN_IMAGE_SIZE for s in sizes)
    ):
        raise ValueError(
            f"`image_size` must be an int >= {MIN_IMAGE_SIZE} or a pair "
            f"(height, width) of them. Received: image_size={image_size!r}"
        )
    return int(sizes[0]), int(sizes[1])


def _columns(width, acceleration, center_fraction):
    """The centre's column count, checked against the budget of
    `width / acceleration` columns."""
    given = center_fraction is not None
    if not given:
        center_fraction = 0.32 / acceleration
    elif not check._is_real(center_fraction) or not 0 < center_fraction < 1:
        raise ValueError(
            "`center_fraction` must be a number in (0, 1) or None. "
            f"Received: center_fraction={center_fraction!r}"
        )
    center_fraction = float(center_fraction)
    low = round(width * center_fraction)  # fastMRI's (Python's) round
    default = "" if given else " (the default, 0.32 / acceleration)"
    if low < 1:
        raise ValueError(
            f"`center_fraction`{default} keeps no centre column of a width "
            f"of {width}: round(width * center_fraction) must be >= 1. "
            f"Received: center_fraction={center_fraction!r}, "
            f"image width={width}"
        )
    if low > width / acceleration:
        raise ValueError(
            f"`center_fraction`{default} is too big for `acceleration`: "
            f"its {low} centre columns exceed the width / acceleration = "
            f"{width / acceleration:g} columns sampled in all. Received: "
            f"center_fraction={center_fraction!r}, "
            f"acceleration={acceleration!r}, image width={width}"
        )
    return center_fraction, low


# ----------------------------------------------------------------------
# The masks (fastMRI's RandomMaskFunc and equispaced fraction masks,
# drawn in the centred order and then shifted to numpy's).
# ----------------------------------------------------------------------


def _centre_columns(width, low):
    """Bool `(W,)`, centred order: fastMRI's block of `low` columns."""
    centre = np.zeros(width, bool)
    start = (width - low + 1) // 2
    centre[start : start + low] = True
    return centre


def _mask_columns(draws, width, acceleration, low, mask_type):
    """Bool `(N, W)` column masks in numpy's order from `draws`: `(N, W)`
    uniforms ("random") or `(N,)` uniforms, the offsets ("equispaced")."""
    centre = _centre_columns(width, low)
    budget = width / acceleration - low  # the columns outside the centre
    if mask_type == "random":
        # P(column) = (W / R - n) / (W - n): W / R columns on average.
        probability = budget / (width - low) if width > low else 1.0
        mask = draws < probability
    else:
        # One column every `spacing` (floored) from a random offset in
        # [0, spacing), over all W columns: those that fall outside the
        # centre number (W - n) / spacing = W / R - n on average.
        mask = np.zeros((len(draws), width), bool)
        if budget > 0:
            spacing = (width - low) / budget
            steps = np.arange(int(np.ceil(width / spacing)) + 1)
            # floor, not round: numpy rounds halves to even, which would
            # space a half offset unevenly.
            where = np.floor((draws[:, None] + steps) * spacing)
            rows = np.broadcast_to(np.arange(len(draws))[:, None], where.shape)
            inside = where < width
            mask[rows[inside], where[inside].astype(int)] = True
    return np.fft.ifftshift(mask | centre, axes=-1)


# ----------------------------------------------------------------------
# The phantoms and phase maps.
# ----------------------------------------------------------------------


def _grid(height, width):
    """Pixel centres `(y (H, 1), x (1, W))` in units of half the shorter
    side, 0 at the image's centre."""
    half = min(height, width) / 2
    y = (np.arange(height) - (height - 1) / 2) / half
    x = (np.arange(width) - (width - 1) / 2) / half
    return y[:, None], x[None, :]


def _inside(y, x, cy, cx, ay, ax, angle):
    """Bool `(N, E, H, W)`: inside the ellipses of `(N, E)` parameters
    (float32: a pixel's membership, not a sum, is computed)."""
    cy, cx, ay, ax, angle = (
        np.asarray(p, np.float32)[..., None, None]
        for p in (cy, cx, ay, ax, angle)
    )
    dy = y.astype(np.float32) - cy  # (N, E, H, 1)
    dx = x.astype(np.float32) - cx  # (N, E, 1, W)
    cos, sin = np.cos(angle), np.sin(angle)
    # The rotated, scaled coordinates; one full-size sum each.
    u = dx * (cos / ax) + dy * (sin / ax)
    v = dy * (cos / ay) - dx * (sin / ay)
    u *= u
    v *= v
    u += v
    return u <= 1.0


def _phantoms(u, y, x, bias):
    """Magnitudes `(N, H, W)` (max 1) and supports from `(N, P)`
    uniforms."""
    n = len(u)
    head_y, head_x = 0.78 + 0.14 * u[:, 0], 0.62 + 0.16 * u[:, 1]
    centre_y, centre_x = 0.08 * u[:, 2] - 0.04, 0.08 * u[:, 3] - 0.04
    tilt = (u[:, 4] - 0.5) * np.pi / 6  # +-15 degrees
    skull = 0.86 + 0.07 * u[:, 5]  # the brain's axes / the head's
    brain_level = 0.2 + 0.25 * u[:, 6]
    count = _MIN_FEATURES + np.floor(
        u[:, 7] * (_MAX_FEATURES - _MIN_FEATURES + 1)
    )
    f = u[:, _FEATURES_AT:_BIAS_AT].reshape(n, _MAX_FEATURES, 6)
    # Feature centres: uniform in a disc of 0.75 in the brain's frame.
    radius, theta = 0.75 * np.sqrt(f[..., 0]), 2 * np.pi * f[..., 1]
    along_y = radius * np.sin(theta) * (skull * head_y)[:, None]
    along_x = radius * np.cos(theta) * (skull * head_x)[:, None]
    cos, sin = np.cos(tilt)[:, None], np.sin(tilt)[:, None]
    feature = (
        centre_y[:, None] + along_y * cos + along_x * sin,
        centre_x[:, None] + along_x * cos - along_y * sin,
        0.02 + 0.23 * f[..., 2],
        0.02 + 0.23 * f[..., 3],
        np.pi * f[..., 4],
    )
    level = (-0.15 + 0.45 * f[..., 5]) * (
        np.arange(_MAX_FEATURES) < count[:, None]
    )
    outline = np.stack(
        [
            (centre_y, centre_x, head_y, head_x, tilt),
            (centre_y, centre_x, skull * head_y, skull * head_x, tilt),
        ],
        axis=-1,
    )  # (5, N, 2): the head, then the brain
    head, brain = np.moveaxis(_inside(y, x, *outline), 1, 0)
    inside = _inside(y, x, *feature)  # (N, E, H, W)
    magnitude = head + (brain_level - 1)[:, None, None] * brain
    # The features' sum, (N, 1, E) @ (N, E, H * W): one matmul.
    added = np.matmul(
        level[:, None, :].astype(np.float32),
        inside.reshape(n, _MAX_FEATURES, -1).astype(np.float32),
    ).reshape(brain.shape)
    magnitude = magnitude + brain * added
    magnitude *= bias
    peak = np.max(magnitude, axis=(1, 2), keepdims=True)
    magnitude = np.where(head, np.maximum(magnitude / peak, _MIN_INTENSITY), 0)
    return magnitude, head


def _smooth_maps(u, y, x, intensity_bias, phase):
    """The phase maps and intensity bias fields `(N, H, W)`: low-order
    polynomials, plus low-pass noise for the phase."""
    n = len(u)
    # x, y, x^2, xy, y^2 over [-1, 1]^2 (|each| <= 1).
    terms = np.stack(
        np.broadcast_arrays(x, y, x * x, x * y, y * y)
    )  # (5, H, W)
    bias = 1 + intensity_bias * _combine(
        (2 * u[:, _BIAS_AT:_PHASE_AT] - 1) / 5, terms
    )
    if not phase:
        return bias, np.zeros_like(bias)
    k = _PHASE_AT
    offset = np.pi * (2 * u[:, k] - 1)
    # Linear terms up to pi / 2, quadratic up to pi / 4 per unit.
    scale = np.array([np.pi / 2] * 2 + [np.pi / 4] * 3)
    coefficients = (2 * u[:, k + 1 : k + 6] - 1) * scale
    polynomial = _combine(coefficients, terms)
    # Low-pass noise: spatial frequencies -2..2 (half-cycles per unit) on
    # each axis, random complex amplitudes (std 0.15 per part).
    draws = u[:, k + 6 : k + 6 + 2 * _NUM_MODES]
    shape = (n, 2 * _PHASE_MODES + 1, 2 * _PHASE_MODES + 1)
    gauss = _normal(draws).reshape((n, 2) + shape[1:])
    amplitudes = 0.15 * (gauss[:, 0] + 1j * gauss[:, 1])
    freqs = np.arange(-_PHASE_MODES, _PHASE_MODES + 1)
    wave_y = np.exp(1j * np.pi * freqs[:, None] * y[:, 0])  # (F, H)
    wave_x = np.exp(1j * np.pi * freqs[:, None] * x[0])  # (F, W)
    noise = (wave_y.T @ (amplitudes @ wave_x)).real  # (N, H, W)
    return bias, offset[:, None, None] + polynomial + noise


def _combine(coefficients, terms):
    """`(N, T) x (T, H, W) -> (N, H, W)`, one matmul."""
    flat = coefficients @ terms.reshape(len(terms), -1)
    return flat.reshape((len(coefficients),) + terms.shape[1:])


def _normal(u):
    """Standard normal draws from uniforms in [0, 1) (Box-Muller on
    consecutive pairs), so that every example draws a fixed number of
    uniforms."""
    a, b = u[..., 0::2], u[..., 1::2]
    r = np.sqrt(-2 * np.log1p(-a))
    return np.stack(
        [r * np.cos(2 * np.pi * b), r * np.sin(2 * np.pi * b)], -1
    ).reshape(u.shape)


def _stack(z):
    """Complex `(...)` -> float32 stacked `(..., 2)`."""
    # complex128 is (real, imag) float64 pairs in memory.
    pairs = np.ascontiguousarray(z, np.complex128).view(np.float64)
    return pairs.reshape(z.shape + (2,)).astype(np.float32)


def synthetic_mri(
    split="train",
    num_samples=None,
    image_size=64,
    acceleration=4,
    center_fraction=None,
    mask_type="random",
    fixed_mask=False,
    noise_std=0.02,
    phase=True,
    intensity_bias=0.2,
    seed=0,
):
    """Simulated accelerated MRI: complex phantoms, their noisy k-space,
    fastMRI-like column masks and the zero-filled reconstructions.

    k-space and masks are in NUMPY'S ORDER (the zero frequency at `[0,
    0]`), NOT fftshifted as fastMRI stores them: the centred view is
    `np.fft.fftshift(kspace, axes=(1, 2))` (fastMRI's centred transform
    is `fftshift(fft2(ifftshift(x)))`). Both transforms are orthonormal,
    `np.fft.fft2(..., norm="ortho")`, as fastMRI's; the layers to use are
    `layers.ComplexFFT2D(norm="ortho")` and
    `layers.ComplexDataConsistency()` (their defaults, `centered=False`).

    Each image is a random phantom of the Shepp-Logan family: an
    elliptical head outline (intensity 1, the "skull"), a brain ellipse
    inside it (a level of 0.2 to 0.45), and 3 to 10 random ellipses inside
    the brain (random centres, axes, rotations and intensities from -0.15
    to 0.3, added up and clipped to the brain); times a mild smooth
    intensity bias; normalised to a maximum magnitude of 1, with at least
    0.05 inside the head (so every phase there is defined); times a
    smooth phase map (a random global phase, a random polynomial of degree
    2 and low-pass noise: as field inhomogeneity gives real MR images).
    The object is scaled to the shorter side of the image; the same seed
    gives the same continuous phantoms at every `image_size`, and the same
    images and noise whatever the mask's arguments.

    The mask samples whole columns (the W axis, phase encoding; every row
    the same), as fastMRI's: a fully sampled centre of `n =
    round(W * center_fraction)` columns, plus, with `mask_type="random"`,
    each other column with probability `(W / acceleration - n) / (W - n)`
    (`RandomMaskFunc`), or with `"equispaced"` columns at a spacing of
    `(W - n) / (W / acceleration - n)` (floored) from a random offset, so
    that either samples `W / acceleration` columns on average (fastMRI's
    `EquispacedMaskFractionFunc`). Each example has its own mask unless
    `fixed_mask=True`.

    Deterministic from `seed`: example `i` of a split comes from its own
    stream (`np.random.SeedSequence(seed, spawn_key=(split_index, 0,
    i))`), so the splits are disjoint and the first examples of a split do
    not depend on `num_samples`. The default train split (1024 images of 64
    x 64) takes 1.2 to 1.8 s on one CPU core.

    Args:
        split: `"train"`, `"validation"` or `"test"`.
        num_samples: the number of examples, a positive int, or `None`:
            the split's default, 1024, 128 and 256.
        image_size: `(height, width)` or one int for both, each at least
            16 (`MIN_IMAGE_SIZE`). Defaults to 64.
        acceleration: the undersampling factor, a finite number >= 1 (1:
            every column); at most as many columns as `W / acceleration`
            are sampled on average. Defaults to 4.
        center_fraction: the fraction of columns fully sampled at the
            centre, in (0, 1), or `None`: `0.32 / acceleration` (fastMRI's
            pairs: 0.08 at 4, 0.04 at 8). The `round(W * center_fraction)`
            centre columns must number at least 1 and at most `W /
            acceleration`.
        mask_type: `"random"` (default) or `"equispaced"`.
        fixed_mask: if `True`, one mask (drawn from the split's own
            stream) for every example. Defaults to `False`.
        noise_std: the standard deviation of the k-space noise per real
            component (real and imaginary parts each), a finite number
            >= 0; the image-domain noise has the same (the transform is
            orthonormal), against a magnitude of at most 1. Defaults to
            0.02.
        phase: if `False`, the images are real and non-negative (no phase
            map): a control for what the phase adds. Defaults to `True`.
        intensity_bias: the amplitude of the smooth multiplicative bias
            field `1 + intensity_bias * p(x, y)`, `|p| <= 1`, in [0, 1).
            Defaults to 0.2.
        seed: an int >= 0.

    Returns:
        A `SyntheticMRI`: `image`, `kspace`, `noise`, `masked_kspace`,
        `zero_filled` float32 `(N, H, W, 2)` stacked, `mask` float32 0/1
        `(N, H, W)`, `support` bool `(N, H, W)`, and the arguments used.

    Raises:
        ValueError: an argument out of the ranges above, naming it.

    Example:

    >>> data = synthetic_mri("test", num_samples=2, image_size=32)
    >>> data.image.shape, data.mask.shape
    ((2, 32, 32, 2), (2, 32, 32))
    >>> z = cvattn_keras.from_stacked(data.image)[..., 0]
    >>> noise = cvattn_keras.from_stacked(data.noise)[..., 0]
    >>> kspace = np.fft.fft2(z, norm="ortho") + noise
    >>> zero_filled = np.fft.ifft2(data.mask * kspace, norm="ortho")
    >>> got = cvattn_keras.from_stacked(data.zero_filled)[..., 0]
    >>> bool(np.allclose(got, zero_filled, atol=1e-5))
    True
    """
    if not isinstance(split, str) or split not in SPLITS:
        raise ValueError(
            f"`split` must be one of {SPLITS}. Received: split={split!r}"
        )
    num_samples = check.positive_int(num_samples, "num_samples", True)
    if num_samples is None:
        num_samples = DEFAULT_NUM_SAMPLES[split]
    height, width = _image_size(image_size)
    if not check._is_real(acceleration) or acceleration < 1:
        raise ValueError(
            "`acceleration` must be a finite number >= 1. Received: "
            f"acceleration={acceleration!r}"
        )
    acceleration = float(acceleration)
    center_fraction, low = _columns(width, acceleration, center_fraction)
    if not isinstance(mask_type, str) or mask_type not in MASK_TYPES:
        raise ValueError(
            f"`mask_type` must be one of {MASK_TYPES}. Received: "
            f"mask_type={mask_type!r}"
        )
    fixed_mask = check.boolean(fixed_mask, "fixed_mask")
    noise_std = _non_negative_finite(noise_std, "noise_std")
    phase = check.boolean(phase, "phase")
    if not check._is_real(intensity_bias) or not 0 <= intensity_bias < 1:
        raise ValueError(
            "`intensity_bias` must be a number in [0, 1). Received: "
            f"intensity_bias={intensity_bias!r}"
        )
    seed = _non_negative_int(seed, "seed")

    # Every example draws from its own stream, in a fixed layout: the
    # phantom's, phase's and bias's uniforms, the noise, then its mask.
    split_index = SPLITS.index(split)
    uniforms = np.empty((num_samples, _NUM_UNIFORMS))
    noise = np.empty((num_samples, 2, height, width))
    draws = np.empty((num_samples, width))
    for i in range(num_samples):
        sequence = np.random.SeedSequence(seed, spawn_key=(split_index, 0, i))
        rng = np.random.default_rng(sequence)
        uniforms[i] = rng.random(_NUM_UNIFORMS)
        noise[i] = rng.standard_normal((2, height, width))
        if not fixed_mask:
            draws[i] = rng.random(width)
    if fixed_mask:
        sequence = np.random.SeedSequence(seed, spawn_key=(split_index, 1, 0))
        draws[:] = np.random.default_rng(sequence).random(width)
    if mask_type == "equispaced":
        draws = draws[:, 0]
    columns = _mask_columns(draws, width, acceleration, low, mask_type)
    mask = np.broadcast_to(columns[:, None, :], (num_samples, height, width))

    y, x = _grid(height, width)
    image = np.empty((num_samples, height, width), np.complex128)
    support = np.empty((num_samples, height, width), bool)
    for start in range(0, num_samples, 64):  # (64, E, H, W) at a time
        part = slice(start, start + 64)
        bias, phase_map = _smooth_maps(
            uniforms[part], y, x, intensity_bias, phase
        )
        magnitude, support[part] = _phantoms(uniforms[part], y, x, bias)
        image[part] = magnitude * np.exp(1j * phase_map) if phase else magnitude
    noise = noise_std * (noise[:, 0] + 1j * noise[:, 1])
    kspace = np.fft.fft2(image, norm="ortho") + noise
    masked = mask * kspace
    zero_filled = np.fft.ifft2(masked, norm="ortho")
    return SyntheticMRI(
        image=_stack(image),
        kspace=_stack(kspace),
        noise=_stack(noise),
        mask=mask.astype(np.float32),
        masked_kspace=_stack(masked),
        zero_filled=_stack(zero_filled),
        support=support,
        acceleration=acceleration,
        center_fraction=center_fraction,
        num_low_frequencies=low,
        mask_type=mask_type,
        fixed_mask=fixed_mask,
        noise_std=noise_std,
        split=split,
        seed=seed,
    )
