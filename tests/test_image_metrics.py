"""Tests of the image-quality metrics (`metrics.nmse`, `psnr`, `ssim`,
`phase_error`; NumPy, any backend) against straightforward
implementations written here: SSIM window by window, as scikit-image's
`structural_similarity` defines it."""

import cmath

import numpy as np
import pytest

from cvattn_keras import datasets
from cvattn_keras import metrics

# Both sides compute in float64 from the same inputs, by different sums:
# their difference is rounding, ~1e-15 relative.
TIGHT = 1e-12


def _ssim_reference(x, y, data_range, win=7):
    """SSIM of two 2-D images, one window at a time (scikit-image's
    defaults: uniform window, K1 = 0.01, K2 = 0.03, sample covariance,
    the windows that fit inside the image)."""
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    values = []
    for i in range(x.shape[0] - win + 1):
        for j in range(x.shape[1] - win + 1):
            a = x[i : i + win, j : j + win].ravel()
            b = y[i : i + win, j : j + win].ravel()
            cov = np.cov(a, b)  # ddof=1: N / (N - 1) times the population
            values.append(
                (2 * a.mean() * b.mean() + c1)
                * (2 * cov[0, 1] + c2)
                / (
                    (a.mean() ** 2 + b.mean() ** 2 + c1)
                    * (cov[0, 0] + cov[1, 1] + c2)
                )
            )
    return np.mean(values)


def _images(rng, shape=(3, 12, 15)):
    target = rng.uniform(0, 1, shape)
    prediction = target + rng.normal(0, 0.1, shape)
    return target, np.abs(prediction)


@pytest.mark.parametrize("win_size", [7, 5, 3])
@pytest.mark.parametrize("data_range", [None, 2.0])
def test_ssim_equals_window_by_window(rng, win_size, data_range):
    target, prediction = _images(rng)
    got = metrics.ssim(target, prediction, data_range, win_size=win_size)
    want = [
        _ssim_reference(
            t, p, t.max() if data_range is None else data_range, win_size
        )
        for t, p in zip(target, prediction)
    ]
    assert got.shape == (3,) and got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=TIGHT, atol=TIGHT)


def test_ssim_per_image_data_range(rng):
    target, prediction = _images(rng)
    ranges = np.array([1.0, 2.0, 0.5])
    got = metrics.ssim(target, prediction, data_range=ranges)
    want = [
        _ssim_reference(t, p, r) for t, p, r in zip(target, prediction, ranges)
    ]
    np.testing.assert_allclose(got, want, rtol=TIGHT, atol=TIGHT)


def test_ssim_of_large_offsets_keeps_its_precision(rng):
    # Running sums over a 64 x 64 image of values near 1000: the
    # variances are differences of large means; still close to the
    # window-by-window computation (1e-9: the sums' rounding, ~1e-16 x
    # 64 x 1000^2, against variances ~1).
    target = 1000 + rng.normal(0, 1, (1, 64, 64))
    prediction = target + rng.normal(0, 0.5, target.shape)
    got = metrics.ssim(target, prediction, data_range=10.0)
    want = _ssim_reference(target[0], prediction[0], 10.0)
    np.testing.assert_allclose(got, [want], rtol=1e-9)


def test_values_scikit_image_gives():
    # scikit-image 0.26.0 (not a dependency), on these images:
    #   structural_similarity(target, prediction, data_range=target.max())
    #   peak_signal_noise_ratio(target, prediction, data_range=target.max())
    i, j = np.mgrid[:10, :12]
    target = np.sin(i / 3.0) * np.cos(j / 4.0) + 1.0
    prediction = target + 0.1 * np.cos(i * j / 5.0)
    ssim = metrics.ssim(target[None], prediction[None])
    psnr = metrics.psnr(target[None], prediction[None])
    assert ssim[0] == pytest.approx(0.9793789257568862, rel=TIGHT)
    assert psnr[0] == pytest.approx(28.520546361927156, rel=TIGHT)


def test_psnr_and_nmse_equal_their_definitions(rng):
    target, prediction = _images(rng)
    for t, p, got_psnr, got_nmse in zip(
        target,
        prediction,
        metrics.psnr(target, prediction),
        metrics.nmse(target, prediction),
    ):
        mse = np.mean((t - p) ** 2)
        assert got_psnr == pytest.approx(
            10 * np.log10(t.max() ** 2 / mse), rel=TIGHT
        )
        want = np.linalg.norm(t - p) ** 2 / np.linalg.norm(t) ** 2
        assert got_nmse == pytest.approx(want, rel=TIGHT)
    got = metrics.psnr(target, prediction, data_range=[1.0, 2.0, 3.0])
    mse = np.mean((target - prediction) ** 2, axis=(1, 2))
    np.testing.assert_allclose(
        got, 10 * np.log10(np.array([1.0, 4.0, 9.0]) / mse), rtol=TIGHT
    )


def test_phase_error_equals_pixel_by_pixel(rng):
    shape = (2, 5, 6)
    target = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    prediction = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    prediction[0, 0, 0] = 0  # phase 0 by numpy's convention
    support = rng.uniform(size=shape) < 0.6
    got = metrics.phase_error(target, prediction, support)
    for t, p, s, value in zip(target, prediction, support, got):
        errors = []
        for a, b in zip(t[s], p[s]):
            d = cmath.phase(b) - cmath.phase(a)
            errors.append(abs((d + np.pi) % (2 * np.pi) - np.pi))
        assert value == pytest.approx(np.mean(errors), rel=TIGHT)
    # One (H, W) support for all; None for every pixel.
    np.testing.assert_allclose(
        metrics.phase_error(target, prediction, support[0]),
        metrics.phase_error(target, prediction, np.stack([support[0]] * 2)),
        rtol=TIGHT,
    )
    everywhere = metrics.phase_error(target, prediction)
    want = np.mean(np.abs(np.angle(prediction / target)), axis=(1, 2))
    np.testing.assert_allclose(everywhere, want, rtol=1e-9)


def test_known_values():
    image = np.linspace(0.1, 1, 120).reshape(1, 10, 12)
    assert metrics.ssim(image, image)[0] == pytest.approx(1.0, abs=TIGHT)
    assert metrics.nmse(image, image)[0] == 0.0
    assert metrics.psnr(image, image)[0] == np.inf
    # Zeros predicted: NMSE 1.
    assert metrics.nmse(image, 0 * image)[0] == pytest.approx(1.0)
    # A constant 0.9 for 1: MSE 0.01, PSNR 20 dB.
    ones = np.ones((1, 8, 8))
    assert metrics.psnr(ones, 0.9 * ones)[0] == pytest.approx(20.0)
    # Constant images: finite, no NaN. No variance, so the structure
    # factor is C2 / C2 and SSIM = (2ab + C1) / (a^2 + b^2 + C1).
    c1 = (0.01 * 1.0) ** 2
    want = (2 * 0.9 + c1) / (1 + 0.81 + c1)
    assert metrics.ssim(ones, 0.9 * ones)[0] == pytest.approx(want, rel=TIGHT)
    # Identical phases: 0; opposite: pi.
    z = np.exp(1j * np.linspace(0, 3, 16)).reshape(1, 4, 4)
    assert metrics.phase_error(z, 2 * z)[0] == pytest.approx(0, abs=TIGHT)
    assert metrics.phase_error(z, -z)[0] == pytest.approx(np.pi)


def test_all_zero_target():
    zeros = np.zeros((2, 8, 8))
    nmse = metrics.nmse(zeros, np.stack([zeros[0], zeros[0] + 0.1]))
    np.testing.assert_array_equal(nmse, [0.0, np.inf])
    # No range to take by default: say so; with one, finite or inf.
    with pytest.raises(ValueError, match="target's maximum"):
        metrics.psnr(zeros, zeros)
    with pytest.raises(ValueError, match="target's maximum"):
        metrics.ssim(zeros, zeros)
    assert metrics.ssim(zeros, zeros, data_range=1.0)[0] == 1.0
    assert np.all(metrics.psnr(zeros, zeros + 0.1, data_range=1.0) == 20.0)


def test_complex_and_stacked_inputs_are_scored_by_modulus(rng):
    shape = (2, 9, 9)
    target = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    prediction = target + 0.1 * (rng.normal(size=shape) + 1j)
    stacked = np.stack([prediction.real, prediction.imag], -1).astype("float32")
    for metric in (metrics.nmse, metrics.psnr, metrics.ssim):
        want = metric(np.abs(target), np.abs(prediction))
        np.testing.assert_allclose(metric(target, prediction), want, rtol=TIGHT)
        # float32 storage: 1e-6 relative.
        np.testing.assert_allclose(metric(target, stacked), want, rtol=1e-5)
    np.testing.assert_allclose(
        metrics.phase_error(target, stacked),
        metrics.phase_error(target, prediction),
        atol=1e-6,
    )


def test_zero_filled_scores_below_the_target():
    data = datasets.synthetic_mri("test", num_samples=4, image_size=32)
    for metric, perfect in (
        (metrics.psnr, np.inf),
        (metrics.ssim, 1.0),
        (metrics.nmse, 0.0),
    ):
        np.testing.assert_allclose(metric(data.image, data.image), perfect)
        worse = metric(data.image, data.zero_filled)
        assert np.all(np.isfinite(worse))
        assert (
            np.all(worse > perfect) if perfect == 0 else np.all(worse < perfect)
        )
    error = metrics.phase_error(data.image, data.zero_filled, data.support)
    assert np.all((error > 0) & (error < np.pi / 2))


BAD = [
    ((np.ones((2, 8, 8)), np.ones((2, 8, 9))), {}, "same"),
    ((np.ones((8, 8)), np.ones((8, 8))), {}, r"shape \(8, 8\)"),
    ((np.ones((1, 8, 8, 3)), np.ones((1, 8, 8, 3))), {}, r"\(1, 8, 8, 3\)"),
    ((np.full((1, 8, 8), "a"), np.ones((1, 8, 8))), {}, "dtype <U1"),
    ((np.zeros((0, 8, 8)), np.zeros((0, 8, 8))), {}, "non-empty"),
    ((np.full((1, 8, 8), np.nan), np.ones((1, 8, 8))), {}, "finite"),
    ((np.ones((1, 8, 8)), np.full((1, 8, 8), np.inf)), {}, "finite"),
]


@pytest.mark.parametrize("args, kwargs, match", BAD)
@pytest.mark.parametrize("metric", ["nmse", "psnr", "ssim"])
def test_bad_images(metric, args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        getattr(metrics, metric)(*args, **kwargs)


@pytest.mark.parametrize("metric", ["psnr", "ssim"])
@pytest.mark.parametrize(
    "data_range, match",
    [
        (0, "data_range=0"),
        (-1.0, r"data_range=-1.0"),
        (np.nan, "data_range=nan"),
        (np.inf, "data_range=inf"),
        ([1.0, 0.0], r"> 0. Received: data_range=\[1.0, 0.0\]"),
        ([1.0, 2.0, 3.0], r"shape \(2,\)"),
        (np.ones((2, 1)), r"shape \(2,\)"),
        ("1", r"shape \(2,\)"),
    ],
)
def test_bad_data_range(metric, data_range, match):
    images = np.ones((2, 8, 8))
    with pytest.raises(ValueError, match=match):
        getattr(metrics, metric)(images, images, data_range=data_range)


@pytest.mark.parametrize(
    "win_size, match",
    [
        (4, "win_size=4"),
        (1, "win_size=1"),
        (7.0, "win_size=7.0"),
        (True, "win_size=True"),
        (9, "at least win_size=9"),
    ],
)
def test_bad_win_size(win_size, match):
    images = np.ones((1, 8, 10))
    with pytest.raises(ValueError, match=match):
        metrics.ssim(images, images, win_size=win_size)


@pytest.mark.parametrize(
    "args, match",
    [
        # Magnitudes carry no phase.
        ((np.ones((1, 4, 4)), np.ones((1, 4, 4), complex)), "complex images"),
        ((np.ones((1, 4, 4), complex), np.ones((1, 4, 5), complex)), "same"),
        ((np.ones((1, 4, 4, 2)), np.full((1, 4, 4, 2), np.nan)), "finite"),
        (
            (
                np.ones((1, 4, 4), complex),
                np.ones((1, 4, 4), complex),
                np.ones((4, 5)),
            ),
            r"`support`.*shape \(4, 5\)",
        ),
        (
            (np.ones((1, 4, 4), complex),) * 2 + (np.full((4, 4), 2),),
            "bool or 0/1",
        ),
        (
            (np.ones((2, 4, 4), complex),) * 2
            + (np.stack([np.ones((4, 4)), np.zeros((4, 4))]),),
            r"none in image\(s\) \[1\]",
        ),
    ],
)
def test_bad_phase_error_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        metrics.phase_error(*args)
