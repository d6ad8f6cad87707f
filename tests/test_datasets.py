"""Tests of the built-in datasets and the MusicNet loader."""

import numpy as np
import pytest

from cvattn_keras import datasets


def test_synthetic_music_is_deterministic_and_stacked():
    x, y = datasets.synthetic_music(num_samples=6, frames=8, bins=32, notes=5)
    x2, y2 = datasets.synthetic_music(num_samples=6, frames=8, bins=32, notes=5)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert x.shape == (6, 8, 64) and x.dtype == np.float32
    assert y.shape == (6, 8, 5) and set(np.unique(y)) <= {0.0, 1.0}
    other, _ = datasets.synthetic_music(
        num_samples=6, frames=8, bins=32, notes=5, seed=1
    )
    assert not np.allclose(other, x)


def test_synthetic_music_spectrum_peaks_at_the_note():
    """One note, one harmonic, no noise: the frames it is labelled in have
    their spectral peak at its frequency; silent frames are silent."""
    x, y = datasets.synthetic_music(
        num_samples=4,
        frames=16,
        bins=128,
        notes=1,
        lowest_note=69,
        notes_per_sample=1,
        harmonics=1,
        noise=0.0,
        sample_rate=4000,
    )
    spectra = x[..., :128] + 1j * x[..., 128:]  # [real | imag] halves
    on = y[..., 0] > 0
    assert on.any() and (~on).any()
    peak = np.abs(spectra[on]).argmax(axis=-1)
    np.testing.assert_array_equal(peak, round(440 / (4000 / 256)))
    assert np.abs(spectra[~on]).max() < 1e-6


def test_synthetic_modulation_layout_and_labels():
    x, y = datasets.synthetic_modulation(
        num_samples=600, length=64, token_length=8
    )
    assert x.shape == (600, 8, 16) and x.dtype == np.float32
    assert y.dtype == np.int32 and set(y) == set(
        range(len(datasets.MODULATIONS))
    )
    z = x[..., :8] + 1j * x[..., 8:]
    power = np.mean(np.abs(z) ** 2)
    assert 1.0 < power < 1.4  # unit signal power plus noise at 5-20 dB
    x2, y2 = datasets.synthetic_modulation(
        num_samples=600, length=64, token_length=8
    )
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)


def test_carrier_phase_range_is_respected():
    """Noise-free BPSK without frequency offset: every sample is +-e^{i phi}
    with phi in the range, so its squared phase 2 phi lies in twice it."""
    x, _ = datasets.synthetic_modulation(
        num_samples=50,
        length=16,
        token_length=4,
        modulations=("bpsk",),
        snr_db=(200, 200),
        max_frequency_offset=0.0,
        phase_range=(0.2, 0.7),
    )
    z = (x[..., :4] + 1j * x[..., 4:]).reshape(50, -1)
    angle = np.angle(z**2) / 2  # removes the +-1 symbol
    assert np.all(angle.max(axis=1) - angle.min(axis=1) < 1e-4)
    assert np.all((angle >= 0.2 - 1e-4) & (angle <= 0.7 + 1e-4))


def test_constellations_have_unit_power():
    for name in datasets.MODULATIONS:
        x, _ = datasets.synthetic_modulation(
            num_samples=40,
            length=64,
            token_length=8,
            modulations=(name,),
            snr_db=(200, 200),
        )
        z = x[..., :8] + 1j * x[..., 8:]
        np.testing.assert_allclose(np.mean(np.abs(z) ** 2), 1.0, rtol=0.15)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: datasets.synthetic_music(num_samples=0), "num_samples=0"),
        (
            lambda: datasets.synthetic_modulation(length=10, token_length=4),
            "multiple",
        ),
        (
            lambda: datasets.synthetic_modulation(modulations=("am",)),
            "modulations",
        ),
    ],
)
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_load_musicnet_from_tiny_files(tmp_path, rng):
    x = rng.standard_normal((3, 4, 10)).astype(np.float32)
    y = (rng.random((3, 4, 6)) > 0.8).astype(np.float32)
    np.savez(tmp_path / "tiny.npz", x=x, y=y)
    got_x, got_y = datasets.load_musicnet(
        tmp_path / "tiny.npz", frames=4, bins=5, notes=6
    )
    np.testing.assert_array_equal(got_x, x)
    np.testing.assert_array_equal(got_y, y)
    folder = tmp_path / "folder"
    folder.mkdir()
    np.save(folder / "x.npy", x)
    np.save(folder / "y.npy", y)
    got_x, got_y = datasets.load_musicnet(folder, frames=4, bins=5, notes=6)
    np.testing.assert_array_equal(got_x, x)
    with pytest.raises(ValueError, match="\\(N, 4, 12\\)"):
        datasets.load_musicnet(folder, frames=4, bins=6, notes=6)
    with pytest.raises(ValueError, match="labels"):
        datasets.load_musicnet(folder, frames=4, bins=5, notes=7)
    with pytest.raises(ValueError, match="x.npy and y.npy"):
        datasets.load_musicnet(tmp_path, frames=4, bins=5, notes=6)
    np.savez(tmp_path / "bad.npz", features=x)
    with pytest.raises(ValueError, match="'x' and 'y'"):
        datasets.load_musicnet(tmp_path / "bad.npz")
