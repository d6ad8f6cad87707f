"""Tests of `datasets.synthetic_mri` (NumPy only, any backend): the
k-space relation, fastMRI's masks in numpy's order, determinism and
disjoint splits, the phantoms, phase maps and noise, and bad arguments."""

import numpy as np
import pytest

from cvattn_keras import datasets

FLOAT32_EPS = 2.0**-24  # float32's unit roundoff


def _complex(stacked):
    return stacked[..., 0].astype(np.float64) + 1j * stacked[..., 1]


def _fft2(z):
    return np.fft.fft2(z, norm="ortho")


def _ifft2(z):
    return np.fft.ifft2(z, norm="ortho")


def _norm(z):
    return np.sqrt(np.sum(np.abs(z) ** 2, axis=(1, 2)))


def test_fields_relation_holds_to_float32_precision():
    data = datasets.synthetic_mri("train", num_samples=4, image_size=(24, 32))
    image, noise = _complex(data.image), _complex(data.noise)
    kspace = _fft2(image) + noise
    zero_filled = _ifft2(data.mask * (_fft2(image) + noise))
    # The transforms are orthonormal, so an error's L2 norm is that of the
    # float32 roundings of the inputs and of the stored field (each at most
    # 2**-24 relative per component); 4x that bound per image.
    for field, want, inputs in (
        (data.kspace, kspace, _norm(image) + _norm(noise)),
        (data.masked_kspace, data.mask * kspace, _norm(kspace)),
        (data.zero_filled, zero_filled, _norm(image) + _norm(noise)),
    ):
        got = _complex(field)
        bound = 4 * FLOAT32_EPS * (inputs + _norm(want))
        assert np.all(_norm(got - want) <= bound)


def test_fields_shapes_and_dtypes():
    data = datasets.synthetic_mri(
        "validation", num_samples=3, image_size=(16, 20), seed=5
    )
    for name in ("image", "kspace", "noise", "masked_kspace", "zero_filled"):
        field = getattr(data, name)
        assert field.shape == (3, 16, 20, 2) and field.dtype == np.float32
    assert data.mask.shape == (3, 16, 20) and data.mask.dtype == np.float32
    assert set(np.unique(data.mask)) <= {0.0, 1.0}
    # Whole columns: every row of a mask is the same.
    assert np.all(data.mask == data.mask[:, :1])
    assert data.support.shape == (3, 16, 20) and data.support.dtype == bool
    assert (data.split, data.seed, data.mask_type) == (
        "validation",
        5,
        "random",
    )
    assert data.acceleration == 4.0 and data.noise_std == 0.02
    assert data.center_fraction == 0.08 and not data.fixed_mask
    assert data.num_low_frequencies == round(20 * 0.08)


@pytest.mark.parametrize("acceleration, fraction", [(4, 0.08), (8, 0.04)])
def test_default_centre_fraction_is_fastmri_pair(acceleration, fraction):
    data = datasets.synthetic_mri(num_samples=1, acceleration=acceleration)
    assert data.center_fraction == pytest.approx(fraction, abs=1e-15)
    assert data.num_low_frequencies == round(64 * fraction)


@pytest.mark.parametrize("mask_type", ["random", "equispaced"])
@pytest.mark.parametrize(
    "width, acceleration, fraction",
    [(64, 4, None), (64, 8, None), (33, 3.5, 0.1), (40, 1, 0.5)],
)
def test_mask_centre_is_sampled_around_index_0(
    mask_type, width, acceleration, fraction
):
    data = datasets.synthetic_mri(
        num_samples=6,
        image_size=(16, width),
        acceleration=acceleration,
        center_fraction=fraction,
        mask_type=mask_type,
    )
    low = data.num_low_frequencies
    assert low == round(width * data.center_fraction)
    columns = data.mask[:, 0]
    # fastMRI's centre block in the centred view ...
    centred = np.fft.fftshift(columns, axes=-1)
    start = (width - low + 1) // 2
    assert np.all(centred[:, start : start + low] == 1)
    # ... is the columns around index 0 (the zero frequency) in numpy's
    # order, wrapping round.
    around_0 = (np.arange(start, start + low) - width // 2) % width
    assert 0 in around_0
    assert np.all(columns[:, around_0] == 1)
    if acceleration == 1:
        assert np.all(columns == 1)


@pytest.mark.parametrize("acceleration", [4, 8])
def test_random_mask_probability_and_acceleration(acceleration):
    width, n = 64, 256
    data = datasets.synthetic_mri(
        "test", num_samples=n, image_size=(16, width), acceleration=acceleration
    )
    low = data.num_low_frequencies
    centred = np.fft.fftshift(data.mask[:, 0], axes=-1)
    start = (width - low + 1) // 2
    outside = np.delete(centred, np.s_[start : start + low], axis=-1)
    p = (width / acceleration - low) / (width - low)
    # 256 x (64 - n) Bernoulli(p) draws: 4 standard errors.
    trials = outside.size
    assert abs(outside.mean() - p) <= 4 * np.sqrt(p * (1 - p) / trials)
    # The measured acceleration (columns in all / columns sampled) within
    # 5% of the request: about 4 standard errors of the mean count.
    measured = width / data.mask[:, 0].sum(-1).mean()
    assert measured == pytest.approx(acceleration, rel=0.05)
    # A new mask per example.
    assert len({row.tobytes() for row in data.mask[:, 0]}) > n // 2


@pytest.mark.parametrize("acceleration", [4, 8, 3.3])
def test_equispaced_mask_spacing_and_acceleration(acceleration):
    width, n = 64, 64
    data = datasets.synthetic_mri(
        num_samples=n,
        image_size=(16, width),
        acceleration=acceleration,
        mask_type="equispaced",
    )
    low = data.num_low_frequencies
    spacing = (width - low) / (width / acceleration - low)
    start = (width - low + 1) // 2
    centred = np.fft.fftshift(data.mask[:, 0], axes=-1)
    for row in centred:
        row = row.copy()
        row[start : start + low] = 0
        picked = np.flatnonzero(row)
        gaps = np.diff(picked)
        # Consecutive columns on one side of the centre are one rounded
        # spacing apart; the gap across the centre is wider.
        left, right = picked < start, picked >= start + low
        for side in (left, right):
            steps = np.diff(picked[side])
            assert np.all(np.abs(steps - spacing) <= 1), (steps, spacing)
        assert gaps.size == 0 or gaps.min() >= np.floor(spacing)
    counts = data.mask[:, 0].sum(-1)
    # Each example: the centre plus about (W - n) / spacing columns (the
    # rounding and the random offset move one or two).
    assert np.all(np.abs(counts - width / acceleration) <= 2)
    assert abs(counts.mean() - width / acceleration) <= 0.5


def test_fixed_mask_and_masks_leave_images_alone():
    kwargs = dict(num_samples=5, image_size=24, seed=3)
    fixed = datasets.synthetic_mri(fixed_mask=True, **kwargs)
    assert fixed.fixed_mask
    assert np.all(fixed.mask == fixed.mask[:1])
    # The images and noise do not depend on the mask's arguments.
    for other in (
        datasets.synthetic_mri(**kwargs),
        datasets.synthetic_mri(
            acceleration=8, mask_type="equispaced", **kwargs
        ),
    ):
        np.testing.assert_array_equal(other.image, fixed.image)
        np.testing.assert_array_equal(other.noise, fixed.noise)
        assert np.any(other.mask != fixed.mask)


def test_deterministic_and_prefix_stable():
    a = datasets.synthetic_mri("test", num_samples=5, image_size=20, seed=7)
    b = datasets.synthetic_mri("test", num_samples=5, image_size=20, seed=7)
    c = datasets.synthetic_mri("test", num_samples=2, image_size=20, seed=7)
    for name in ("image", "kspace", "noise", "mask", "zero_filled", "support"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        np.testing.assert_array_equal(getattr(a, name)[:2], getattr(c, name))
    d = datasets.synthetic_mri("test", num_samples=5, image_size=20, seed=8)
    assert np.all(np.any(a.image != d.image, axis=(1, 2, 3)))


def test_splits_are_disjoint():
    images = [
        datasets.synthetic_mri(split, num_samples=16, image_size=16).image
        for split in ("train", "validation", "test")
    ]
    flat = np.concatenate(images).reshape(48, -1)
    distances = np.linalg.norm(flat[:, None] - flat[None], axis=-1)
    np.fill_diagonal(distances, np.inf)
    # No two images alike, within or across splits (an image's norm is
    # about 10 at this size; the closest pairs are several apart).
    assert distances.min() > 1.0


def test_default_sizes():
    data = datasets.synthetic_mri("validation", image_size=16)
    assert len(data.image) == 128


def test_phantoms_and_support():
    data = datasets.synthetic_mri(num_samples=16, image_size=(48, 64))
    magnitude = np.abs(_complex(data.image))
    support = data.support
    # Normalised to a maximum of 1 (float32), zero outside the object,
    # at least 0.05 inside it (so the phase is defined there).
    np.testing.assert_allclose(magnitude.max(axis=(1, 2)), 1.0, rtol=1e-6)
    assert np.all(magnitude[~support] == 0)
    assert magnitude[support].min() >= 0.05 * (1 - 1e-6)
    # The head outline: an ellipse inside the image (convex: each row and
    # column of the support is one run), covering 30% to 65% of the
    # 48 x 48 square it is scaled to.
    assert not support[:, [0, -1]].any() and not support[:, :, [0, -1]].any()
    for mask in support:
        for line in list(mask) + list(mask.T):
            picked = np.flatnonzero(line)
            assert picked.size == 0 or np.all(np.diff(picked) == 1)
    area = support.sum(axis=(1, 2)) / 48**2
    assert np.all((area > 0.3) & (area < 0.65))
    # Features: more than the skull and the brain's two levels.
    levels = [
        np.unique(np.round(m[s], 3)).size for m, s in zip(magnitude, support)
    ]
    assert min(levels) > 3


def test_phase_is_smooth_and_varied():
    data = datasets.synthetic_mri(num_samples=16, image_size=64)
    z = _complex(data.image)
    support = data.support
    steps = []
    for axis in (1, 2):
        # Wrapped phase differences of neighbours both inside the object.
        step = np.angle(
            np.take(z, np.arange(1, 64), axis)
            * np.conj(np.take(z, np.arange(63), axis))
        )
        both = np.take(support, np.arange(1, 64), axis) & np.take(
            support, np.arange(63), axis
        )
        steps.append(np.abs(step[both]))
    steps = np.concatenate(steps)
    # By construction: a degree-2 polynomial (<= 5 pi / 4 rad per
    # half-width, 0.12 rad per pixel here) plus low-pass noise (spatial
    # frequencies <= 2 half-cycles per half-width, 0.75 rad std, a
    # gradient of about 3 rad per half-width at 1 std: 0.1 rad per pixel
    # here). So neighbours
    # differ by far less than pi (measured here: max 0.42, 99th
    # percentile 0.28, median 0.07), yet not by nothing.
    assert steps.max() < np.pi / 4
    assert np.percentile(steps, 99) < 0.4
    assert np.median(steps) > 0.005
    # The phase varies across an image by radians, not a constant.
    spread = [
        np.std(np.angle(zi[si] / zi[si][0])) for zi, si in zip(z, support)
    ]
    assert min(spread) > 0.2


def test_without_phase_images_are_real_and_non_negative():
    data = datasets.synthetic_mri(num_samples=3, image_size=16, phase=False)
    assert np.all(data.image[..., 1] == 0) and np.all(data.image[..., 0] >= 0)
    with_phase = datasets.synthetic_mri(num_samples=3, image_size=16)
    np.testing.assert_allclose(
        data.image[..., 0], np.abs(_complex(with_phase.image)), atol=1e-6
    )


def test_noise_std_is_per_real_component():
    data = datasets.synthetic_mri(num_samples=8, image_size=32, noise_std=0.1)
    noise = _complex(data.noise)
    # 8 x 32 x 32 = 8192 draws per part: the sample std is within 3% (4
    # standard errors of 0.8%), the means and correlation near 0.
    for part in (noise.real, noise.imag):
        assert np.std(part) == pytest.approx(0.1, rel=0.03)
        assert abs(np.mean(part)) < 4 * 0.1 / np.sqrt(part.size)
    assert abs(np.corrcoef(noise.real.ravel(), noise.imag.ravel())[0, 1]) < 0.05
    # The orthonormal transform: the same statistics in the image.
    in_image = _ifft2(noise)
    for part in (in_image.real, in_image.imag):
        assert np.std(part) == pytest.approx(0.1, rel=0.03)
    # The same draws at every level; none at 0.
    half = datasets.synthetic_mri(num_samples=8, image_size=32, noise_std=0.05)
    np.testing.assert_allclose(half.noise, data.noise / 2, rtol=1e-6)
    clean = datasets.synthetic_mri(num_samples=2, image_size=32, noise_std=0)
    assert np.all(clean.noise == 0)
    np.testing.assert_allclose(
        _complex(clean.kspace), _fft2(_complex(clean.image)), atol=1e-5
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"split": "val"}, "split='val'"),
        ({"split": 0}, "split=0"),
        ({"num_samples": 0}, "num_samples=0"),
        ({"num_samples": 2.5}, "num_samples=2.5"),
        ({"image_size": 15}, "image_size=15"),
        ({"image_size": (16,)}, r"image_size=\(16,\)"),
        ({"image_size": (16, 15)}, r"image_size=\(16, 15\)"),
        ({"image_size": 16.0}, "image_size=16.0"),
        ({"image_size": "64"}, "image_size='64'"),
        ({"acceleration": 0.5}, "acceleration=0.5"),
        ({"acceleration": float("nan")}, "acceleration=nan"),
        ({"acceleration": float("inf")}, "acceleration=inf"),
        ({"acceleration": True}, "acceleration=True"),
        ({"acceleration": "4"}, "acceleration='4'"),
        ({"center_fraction": 0}, "center_fraction=0"),
        ({"center_fraction": 1}, "center_fraction=1"),
        ({"center_fraction": -0.1}, r"center_fraction=-0.1"),
        ({"center_fraction": float("nan")}, "center_fraction=nan"),
        # 32 centre columns > 64 / 4 = 16 columns in all.
        ({"center_fraction": 0.5}, "too big for `acceleration`"),
        # round(64 * 0.005) = 0 centre columns.
        ({"center_fraction": 0.005}, "keeps no centre column"),
        # The default 0.32 / 50 keeps round(64 * 0.0064) = 0 columns.
        ({"acceleration": 50}, r"\(the default, 0.32 / acceleration\)"),
        ({"mask_type": "Random"}, "mask_type='Random'"),
        ({"mask_type": None}, "mask_type=None"),
        ({"fixed_mask": 1}, "fixed_mask=1"),
        ({"noise_std": -0.1}, r"noise_std=-0.1"),
        ({"noise_std": float("inf")}, "noise_std=inf"),
        ({"noise_std": float("nan")}, "noise_std=nan"),
        ({"phase": "yes"}, "phase='yes'"),
        ({"intensity_bias": 1}, "intensity_bias=1"),
        ({"intensity_bias": -0.1}, r"intensity_bias=-0.1"),
        ({"seed": -1}, "seed=-1"),
        ({"seed": 1.5}, "seed=1.5"),
        ({"seed": None}, "seed=None"),
        ({"seed": True}, "seed=True"),
    ],
)
def test_bad_arguments(kwargs, match):
    kwargs = {"num_samples": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        datasets.synthetic_mri(**kwargs)
