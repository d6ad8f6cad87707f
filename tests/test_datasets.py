"""Tests of the built-in datasets and the MusicNet loader."""

import hashlib

import keras
import numpy as np
import pytest

from cvattn_keras import datasets
from cvattn_keras import layers
from cvattn_keras.stft import frame_count


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
    "function, kwargs, match",
    [
        ("synthetic_music", dict(num_samples=0), "num_samples=0"),
        ("synthetic_music", dict(seed=-1), "`seed` .* seed=-1"),
        ("synthetic_music", dict(seed=1.5), "seed=1.5"),
        ("synthetic_music", dict(notes_per_sample=-1), "notes_per_sample=-1"),
        ("synthetic_music", dict(noise=float("nan")), "`noise` .* noise=nan"),
        ("synthetic_music", dict(noise=float("inf")), "noise=inf"),
        ("synthetic_music", dict(noise=-0.1), "noise=-0.1"),
        ("synthetic_music", dict(lowest_note=-1), "lowest_note=-1"),
        ("synthetic_music", dict(harmonics=0), "harmonics=0"),
        ("synthetic_music", dict(sample_rate=4000.5), "sample_rate=4000.5"),
        (
            "synthetic_music",
            dict(notes=48, noise=0),
            r"`lowest_note \+ notes - 1` = 107 .* at most MIDI 95 .*"
            r"lowest_note=60, notes=48, bins=128, sample_rate=4000",
        ),
        ("synthetic_modulation", dict(length=10, token_length=4), "multiple"),
        ("synthetic_modulation", dict(modulations=("am",)), "modulations"),
        ("synthetic_modulation", dict(modulations="bpsk"), "modulations"),
        ("synthetic_modulation", dict(modulations=()), "modulations"),
        (
            "synthetic_modulation",
            dict(modulations=("bpsk", "bpsk")),
            "distinct",
        ),
        ("synthetic_modulation", dict(seed=-1), "seed=-1"),
        ("synthetic_modulation", dict(samples_per_symbol=0), "per_symbol=0"),
        (
            "synthetic_modulation",
            dict(snr_db=(5.0, float("nan"))),
            "`snr_db` .* snr_db=\\(5.0, nan\\)",
        ),
        ("synthetic_modulation", dict(snr_db=(20, 5)), "low <= high"),
        ("synthetic_modulation", dict(snr_db=5), "snr_db=5"),
        (
            "synthetic_modulation",
            dict(phase_range=(0.0, float("inf"))),
            "phase_range",
        ),
        (
            "synthetic_modulation",
            dict(max_frequency_offset=float("nan")),
            "max_frequency_offset=nan",
        ),
        (
            "synthetic_modulation",
            dict(max_frequency_offset=-0.1),
            "max_frequency_offset=-0.1",
        ),
        ("load_musicnet", dict(path="x.npz", frames=0), "frames=0"),
        ("load_musicnet", dict(path=3), "path=3"),
    ],
)
def test_bad_arguments(function, kwargs, match):
    with pytest.raises(ValueError, match=match):
        getattr(datasets, function)(**kwargs)


def test_the_highest_audible_note_is_accepted():
    """The issue's case (48 notes from C4 at 4 kHz) reaches MIDI 107; the
    36 notes up to MIDI 95 are all within the spectra."""
    top = datasets.highest_audible_note(128, 4000)
    assert top == 95
    x, y = datasets.synthetic_music(
        num_samples=8, notes=top - 60 + 1, noise=0.0, frames=8
    )
    assert y.shape == (8, 8, 36)
    with pytest.raises(ValueError, match="= 96 .* at most MIDI 95"):
        datasets.synthetic_music(notes=37)


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


def test_load_musicnet_names_a_damaged_file(tmp_path, rng):
    x = rng.standard_normal((3, 4, 10)).astype(np.float32)
    y = (rng.random((3, 4, 6)) > 0.8).astype(np.float32)
    np.savez(tmp_path / "good.npz", x=x, y=y)
    data = (tmp_path / "good.npz").read_bytes()
    cases = {
        "truncated.npz": data[: len(data) // 2],
        "corrupt.npz": data[:100] + bytes(len(data) - 100),
        "text.npz": b"MusicNet features, not an archive\n",
        "empty.npz": b"",
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(ValueError, match=f"Cannot read .*{name}"):
            datasets.load_musicnet(tmp_path / name, frames=4, bins=5, notes=6)
    np.save(tmp_path / "one.npy", x)
    (tmp_path / "one.npz").write_bytes((tmp_path / "one.npy").read_bytes())
    with pytest.raises(ValueError, match="one.npz.*not an .npz archive"):
        datasets.load_musicnet(tmp_path / "one.npz", frames=4, bins=5, notes=6)
    for mmap in (True, False):
        folder = tmp_path / f"truncated_{mmap}"
        folder.mkdir()
        np.save(folder / "x.npy", x)
        np.save(folder / "y.npy", y)
        content = (folder / "x.npy").read_bytes()
        (folder / "x.npy").write_bytes(content[:-20])
        with pytest.raises(ValueError, match="Cannot read .*x.npy"):
            datasets.load_musicnet(folder, frames=4, bins=5, notes=6, mmap=mmap)
    words = tmp_path / "words"
    words.mkdir()
    np.save(words / "x.npy", np.full((3, 4, 10), "a"))
    np.save(words / "y.npy", y)
    with pytest.raises(ValueError, match="features 'x' must be numbers"):
        datasets.load_musicnet(words, frames=4, bins=5, notes=6)


# ----------------------------------------------------------------------
# synthetic_music(output="waveform").
# ----------------------------------------------------------------------

MUSIC = dict(num_samples=6, frames=8, notes=5)


def _waveform(stft=None, bins=32, **kwargs):
    kwargs = {**MUSIC, "bins": bins, **kwargs}
    return datasets.synthetic_music(output="waveform", stft=stft, **kwargs)


@pytest.mark.parametrize("bins", [32, 128])  # the conv and FFT routes
def test_waveform_with_the_default_stft_gives_the_spectra(bins):
    """The same seed, the same music: the default STFT of the waveform is
    the spectra to float32 rounding (1e-5 of the largest |x|), with the
    same labels exactly."""
    x, y = datasets.synthetic_music(bins=bins, seed=3, **MUSIC)
    audio, labels = _waveform(bins=bins, seed=3)
    assert audio.shape == (6, 8 * 2 * bins) and audio.dtype == np.float32
    assert labels.dtype == np.float32
    np.testing.assert_array_equal(labels, y)
    stft = datasets.synthetic_music_stft(bins)
    assert stft.name == "stft" and not stft.center
    spectra = keras.ops.convert_to_numpy(stft(audio))
    assert spectra.shape == x.shape
    error = np.max(np.abs(spectra - x)) / np.max(np.abs(x))
    assert error < 1e-5


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(frame_length=64, frame_step=32),  # centred, hop = bins
        dict(frame_length=64, frame_step=32, center=False),
        dict(frame_length=32, frame_step=16, fft_length=64, center=False),
        dict(frame_length=64, frame_step=24, pad_mode="reflect"),
    ],
)
def test_waveform_labels_follow_the_frame_centres(kwargs):
    """The label of frame `t` is the note activity at its centre sample,
    derived here from the spectra's labels: sample `s` lies in native
    frame `s // (2 bins)`."""
    bins, length = 32, 8 * 64
    stft = layers.ComplexSTFT(**kwargs)
    audio, labels = _waveform(stft, bins=bins, seed=5)
    _, native = datasets.synthetic_music(bins=bins, seed=5, **MUSIC)
    count = frame_count(length, stft.frame_step, stft.fft_length, stft.center)
    assert labels.shape == (6, count, 5)
    assert keras.ops.convert_to_numpy(stft(audio)).shape[1] == count
    half = 0 if stft.center else stft.fft_length // 2
    centres = np.arange(count) * stft.frame_step + half
    centres = np.minimum(centres, length - 1)  # past the end: the last
    np.testing.assert_array_equal(labels, native[:, centres // (2 * bins)])
    assert labels.any() and not labels.all()


def test_waveform_takes_an_stft_config():
    stft = layers.ComplexSTFT(64, 32, fft_length=128, bins=(0, 40))
    audio, labels = _waveform(stft, seed=2)
    audio2, labels2 = _waveform(stft.get_config(), seed=2)
    np.testing.assert_array_equal(audio, audio2)
    np.testing.assert_array_equal(labels, labels2)
    assert labels.shape == (6, 1 + 8 * 64 // 32, 5)


def test_waveform_is_deterministic():
    def digest(*arrays):
        return [hashlib.sha256(a.tobytes()).hexdigest() for a in arrays]

    first = digest(*_waveform(seed=7))
    assert digest(*_waveform(seed=7)) == first
    other = digest(*_waveform(seed=8))
    assert other[0] != first[0]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(output="wave"), "`output` .* output='wave'"),
        (dict(output=None), "output=None"),
        (
            dict(stft=lambda: layers.ComplexSTFT(64, 64)),
            "`stft` .* stft=<ComplexSTFT.* output='spectra'",
        ),
        (dict(stft=lambda: {"frame_length": 64}), "stft=.*output='spectra'"),
        (
            dict(output="waveform", stft=lambda: layers.ComplexISTFT(64, 32)),
            "`stft` .* stft=<ComplexISTFT",
        ),
        (dict(output="waveform", stft="hann"), "`stft` .* stft='hann'"),
        (
            dict(output="waveform", stft=lambda: {"frame_length": 64}),
            "`stft` .*'frame_step'.* stft=\\{'frame_length': 64\\}",
        ),
        (
            dict(
                output="waveform",
                stft=lambda: {"frame_length": 0, "frame_step": 1},
            ),
            "`stft` .* frame_length=0",
        ),
        (
            dict(
                output="waveform",
                stft=lambda: layers.ComplexSTFT(1024, 256, center=False),
            ),
            "`stft` gives no frame.* fft_length=1024 .* = 512",
        ),
        (
            dict(
                output="waveform",
                stft=lambda: layers.ComplexSTFT(1024, 256, pad_mode="reflect"),
            ),
            "`stft` gives no frame.*reflect",
        ),
    ],
)
def test_bad_waveform_arguments(kwargs, match):
    if callable(kwargs.get("stft")):  # layers made in the test, not at import
        kwargs = {**kwargs, "stft": kwargs["stft"]()}
    with pytest.raises(ValueError, match=match):
        datasets.synthetic_music(bins=32, **{**MUSIC, **kwargs})
