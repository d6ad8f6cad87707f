"""Tests of `datasets.noisy_speech` (NumPy only, any backend): the
layouts, the mixture identity and its SNR recomputed from the parts,
determinism, splits disjoint by utterance and by music track, each noise
kind, the room, the argument checks and the missing-data messages, and
the 8 -> 16 kHz upsampler against analytic sines.

The tests that read audio need Debian's packages (`apt-get install
asterisk-core-sounds-en-g722 asterisk-core-sounds-es-g722
asterisk-core-sounds-fr-g722 codec2-examples asterisk-moh-opsound-wav`)
and the `g722` package (`pip install "cvattn-keras[speech]"`); without
them they skip, naming what is missing."""

import functools
import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from cvattn_keras import datasets
from cvattn_keras.datasets import speech

LENGTH_S = 1.0
L = int(LENGTH_S * 16000)


def _missing():
    """What the audio tests need and this machine lacks, in words."""
    needs = []
    if importlib.util.find_spec("G722") is None:
        needs.append('the g722 module (pip install "cvattn-keras[speech]")')
    folders = {
        "asterisk-core-sounds-en-g722": pathlib.Path(speech.SPEECH_DIR)
        / "en_US_f_Allison",
        "asterisk-core-sounds-es-g722": pathlib.Path(speech.SPEECH_DIR)
        / "es_MX_f_Allison",
        "asterisk-core-sounds-fr-g722": pathlib.Path(speech.SPEECH_DIR)
        / "fr_CA_f_June",
        "codec2-examples": pathlib.Path(speech.CODEC2_DIR) / "wav",
        "asterisk-moh-opsound-wav": pathlib.Path(speech.MUSIC_DIR),
    }
    absent = [name for name, path in folders.items() if not path.is_dir()]
    if absent:
        needs.append(f"the Debian packages {' '.join(absent)}")
    return "; ".join(needs)


MISSING = _missing()
needs_audio = pytest.mark.skipif(
    bool(MISSING), reason=f"needs {MISSING or 'nothing'}"
)


@functools.lru_cache(maxsize=None)
def _data(split="train", seed=0, num_examples=40, **kwargs):
    kwargs = {key: value for key, value in kwargs.items()}
    return speech.noisy_speech(
        split, num_examples=num_examples, seconds=LENGTH_S, seed=seed, **kwargs
    )


def _key(utterance):
    """A prompt's name without its language (`digits/1`), or the codec2
    file's."""
    return utterance.split("/", 1)[1]


def _recomputed_snr(data):
    out = []
    for c, n, a, b in zip(data.clean, data.noise, data.start, data.stop):
        c = c[a:b].astype(np.float64)
        n = n[a:b].astype(np.float64)
        out.append(10 * np.log10(np.mean(c**2) / np.mean(n**2)))
    return np.array(out)


# ----------------------------------------------------------------------
# Without audio: the public surface, the checks, the upsampler.
# ----------------------------------------------------------------------


def test_public_surface():
    assert datasets.noisy_speech is speech.noisy_speech
    assert datasets.NoisySpeech is speech.NoisySpeech
    assert datasets.SPEECH_NOISES == (
        "music",
        "babble",
        "colored",
        "hum",
        "bursts",
    )
    # The music tracks: 3 / 1 / 1, no track in two splits.
    tracks = [t for names in speech.MUSIC_SPLITS.values() for t in names]
    assert len(tracks) == len(set(tracks)) == 5
    files = [f for names in speech.CODEC2_FILES.values() for f in names]
    assert len(files) == len(set(files))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(split="dev"), "split"),
        (dict(split=None), "split"),
        (dict(num_examples=0), "num_examples"),
        (dict(num_examples=-3), "num_examples"),
        (dict(num_examples=2.0), "num_examples"),
        (dict(seconds=0.0), "seconds"),
        (dict(seconds=-1.0), "seconds"),
        (dict(seconds=float("nan")), "seconds"),
        (dict(seconds=float("inf")), "seconds"),
        (dict(seconds=1e-6), "seconds"),
        (dict(seconds=31.0), "seconds"),
        (dict(snr_range=(20.0, -5.0)), "snr_range"),
        (dict(snr_range=(-5.0, float("nan"))), "snr_range"),
        (dict(snr_range=(-float("inf"), 0.0)), "snr_range"),
        (dict(snr_range=(-30.0, 0.0)), "snr_range"),
        (dict(snr_range=(0.0, 50.0)), "snr_range"),
        (dict(snr_range=5.0), "snr_range"),
        (dict(sample_rate=8000), "sample_rate"),
        (dict(sample_rate=True), "sample_rate"),
        (dict(seed=1.5), "seed"),
        (dict(seed=None), "seed"),
        (dict(seed=-1), "seed"),
        (dict(sample_rate=16000.0), "sample_rate"),
        (dict(noises=("music", "traffic")), "noises"),
        (dict(noises=()), "noises"),
        (dict(noises="music"), "noises"),
        (dict(noises=("hum", "hum")), "noises"),
        (dict(room_probability=-0.1), "room_probability"),
        (dict(room_probability=1.5), "room_probability"),
        (dict(room_probability=float("nan")), "room_probability"),
        (dict(sources=("prompts", "radio")), "sources"),
        (dict(sources=()), "sources"),
        (dict(speech_dir=3), "speech_dir"),
        (dict(codec2_dir=[]), "codec2_dir"),
        (dict(music_dir=b"/tmp"), "music_dir"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=f"`{name}`") as info:
        speech.noisy_speech(**kwargs)
    received = next(iter(kwargs.values()))
    assert f"{name}={received!r}" in str(info.value)


@pytest.mark.parametrize(
    "noises, sources, argument, package",
    [
        (("hum",), ("prompts",), "speech_dir", "asterisk-core-sounds-en-g722"),
        (
            ("babble",),
            ("codec2",),
            "speech_dir",
            "asterisk-core-sounds-fr-g722",
        ),
        (("hum",), ("codec2",), "codec2_dir", "codec2-examples"),
        (("music",), ("prompts",), "music_dir", "asterisk-moh-opsound-wav"),
    ],
)
def test_a_folder_without_the_files_names_apt_get(
    tmp_path, noises, sources, argument, package
):
    empty = tmp_path / "empty"
    empty.mkdir()
    folders = dict(speech_dir=empty, codec2_dir=empty, music_dir=empty)
    if argument != "speech_dir":  # a prompt found: the next folder fails
        voice = tmp_path / "voices" / "en_US_f_Allison"
        voice.mkdir(parents=True)
        (voice / "hello.g722").write_bytes(bytes(64))
        folders["speech_dir"] = voice.parent
    with pytest.raises(FileNotFoundError) as info:
        speech.noisy_speech(noises=noises, sources=sources, **folders)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert f"`{argument}`" in message and "apt-get install" in message
    assert package in message and str(empty) in message


def test_every_missing_package_in_one_message(tmp_path):
    folders = dict(speech_dir=tmp_path, codec2_dir=tmp_path, music_dir=tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        speech.noisy_speech(**folders)
    message = str(info.value)
    assert "apt-get install asterisk-core-sounds-en-g722" in message
    for name in ("speech_dir", "codec2_dir", "music_dir"):
        assert f"`{name}`" in message and f"{name}=" in message
    for package in ("-es-g722", "-fr-g722", "codec2-examples", "opsound"):
        assert package in message


def test_without_g722_the_message_names_the_extra(tmp_path, monkeypatch):
    voice = tmp_path / "en_US_f_Allison"
    voice.mkdir()
    (voice / "hello.g722").write_bytes(bytes(range(256)) * 8)
    monkeypatch.setitem(sys.modules, "G722", None)
    with pytest.raises(ImportError, match=r"cvattn-keras\[speech\]"):
        speech.noisy_speech(
            noises=("hum",), sources=("prompts",), speech_dir=tmp_path
        )


def test_prompt_splits_come_from_a_stable_hash():
    # The same name, any language, one split; the shares near 80/10/10.
    keys = [f"prompt-{i}" for i in range(2000)]
    splits = [speech._prompt_split(key) for key in keys]
    assert splits == [speech._prompt_split(key) for key in keys]
    shares = [splits.count(s) / len(keys) for s in speech.SPLITS]
    np.testing.assert_allclose(shares, [0.8, 0.1, 0.1], atol=0.03)


@pytest.mark.parametrize("frequency", [50.0, 1000.0, 3000.0, 3600.0])
def test_upsampler_matches_the_analytic_sine(frequency):
    # A sine sampled at 8 kHz, upsampled, equals the same sine sampled at
    # 16 kHz within 2e-4 (up to 0.45 of 8 kHz), away from the ends (the
    # signal is taken as zero outside); its even samples are the input.
    phase = 0.3
    x = np.sin(2 * np.pi * frequency * np.arange(4000) / 8000 + phase)
    y = speech._upsample2(x)
    reference = np.sin(2 * np.pi * frequency * np.arange(8000) / 16000 + phase)
    assert y.shape == (8000,)
    np.testing.assert_array_equal(y[0::2], x)
    margin = 4 * speech._HALF_TAPS
    np.testing.assert_allclose(
        y[margin:-margin], reference[margin:-margin], atol=2e-4, rtol=0
    )


def test_upsampler_adds_nothing_above_4_khz():
    x = np.random.default_rng(0).standard_normal(2**15)
    y = speech._upsample2(x)
    power = np.abs(np.fft.rfft(y * np.hanning(len(y)))) ** 2
    frequency = np.fft.rfftfreq(len(y), 1 / 16000)
    passband = power[(frequency > 100) & (frequency < 3500)].mean()
    stopband = power[frequency > 4400].mean()
    assert 10 * np.log10(stopband / passband) < -80


def test_generated_noises_have_their_shape():
    rng = np.random.default_rng(0)
    # Hum: only multiples of the fundamental (50 or 60 Hz +-0.5%).
    hum = speech._hum(rng, 16000 * 4)
    power = np.abs(np.fft.rfft(hum * np.hanning(len(hum)))) ** 2
    frequency = np.fft.rfftfreq(len(hum), 1 / 16000)
    peak = frequency[np.argmax(power * (frequency < 70))]
    assert 49 < peak < 51 or 59 < peak < 61
    # Brown noise (slope 2) falls 6 dB per octave, white is flat.
    for slope, drop in ((0.0, 0.0), (2.0, 6.02)):
        noise = speech._colored(rng, 2**16, slope)
        p = np.abs(np.fft.rfft(noise)) ** 2
        f = np.fft.rfftfreq(len(noise), 1 / 16000)
        low = p[(f > 500) & (f < 1000)].mean()
        high = p[(f > 1000) & (f < 2000)].mean()
        assert abs(10 * np.log10(low / high) - drop) < 1.0
        np.testing.assert_allclose(np.mean(noise**2), 1.0, rtol=1e-9)
    # Bursts: off somewhere, on at the utterance.
    bursts = speech._bursts(rng, 32000, 10000, 10001)
    assert np.any(bursts == 0) and bursts[10000] != 0
    # A room: unit energy, its direct path first.
    response = speech._room(rng, 0.5)
    assert len(response) == 8000 and np.argmax(np.abs(response)) == 0
    np.testing.assert_allclose(np.sum(response**2), 1.0, rtol=1e-12)


# ----------------------------------------------------------------------
# With Debian's audio.
# ----------------------------------------------------------------------


@needs_audio
def test_layout_and_the_mixture_identity():
    data = _data()
    n = len(data)
    assert n == 40 and data.sample_rate == 16000 and data.split == "train"
    for array in (data.clean, data.noise, data.noisy):
        assert array.shape == (n, L) and array.dtype == np.float32
    assert data.snr.shape == (n,) and data.snr.dtype == np.float32
    assert data.start.dtype == data.stop.dtype == np.int64
    assert np.all((0 <= data.start) & (data.start < data.stop))
    assert np.all(data.stop <= L)
    for names in (data.noise_kind, data.utterance, data.language):
        assert isinstance(names, tuple) and len(names) == n
    assert set(data.noise_kind) <= set(speech.SPEECH_NOISES)
    assert set(data.language) <= {"en", "es", "fr"}
    assert set(data.source) <= {"prompts", "codec2"}
    np.testing.assert_array_equal(data.noisy, data.clean + data.noise)
    assert np.max(np.abs(data.noisy)) <= 0.99 + 1e-6
    assert np.max(np.abs(data.clean)) <= 0.99 + 1e-6
    # The speech is silent outside the utterance (zero padding).
    for c, a, b in zip(data.clean, data.start, data.stop):
        assert not np.any(c[:a]) and not np.any(c[b:])


@needs_audio
@pytest.mark.parametrize("snr_range", [(-5.0, 20.0), (7.5, 7.5)])
def test_snr_recomputed_from_the_parts(snr_range):
    data = _data(
        num_examples=40 if snr_range[0] < 0 else 8, snr_range=snr_range
    )
    np.testing.assert_allclose(_recomputed_snr(data), data.snr, atol=1e-3)
    assert np.all((snr_range[0] <= data.snr) & (data.snr <= snr_range[1]))
    if snr_range[0] < snr_range[1]:
        assert np.ptp(data.snr) > 10


@needs_audio
def test_deterministic_and_seeds_differ():
    first = _data(seed=3, num_examples=6)
    again = speech.noisy_speech(
        "train", num_examples=6, seconds=LENGTH_S, seed=3
    )
    for name in ("clean", "noise", "noisy", "snr", "start", "rt60"):
        np.testing.assert_array_equal(
            getattr(first, name), getattr(again, name)
        )
    assert first.utterance == again.utterance
    assert first.noise_source == again.noise_source
    # Example i does not depend on num_examples.
    np.testing.assert_array_equal(
        _data(seed=3, num_examples=3).noisy, first.noisy[:3]
    )
    other = _data(seed=4, num_examples=6)
    assert not np.array_equal(first.noisy, other.noisy)
    assert not np.array_equal(first.snr, other.snr)


@needs_audio
def test_splits_are_disjoint_by_utterance_and_by_music_track():
    root = pathlib.Path(speech.SPEECH_DIR)
    pools = {
        s: {key for _, key, _ in speech._prompts(root, None, s)}
        for s in speech.SPLITS
    }
    assert all(pools.values())
    assert not pools["train"] & pools["validation"]
    assert not pools["train"] & pools["test"]
    assert not pools["validation"] & pools["test"]
    seen, tracks = {}, {}
    for split in speech.SPLITS:
        data = _data(split, num_examples=24, noises=("music", "babble"))
        seen[split] = {_key(u) for u in data.utterance}
        tracks[split] = {
            s[0]
            for k, s in zip(data.noise_kind, data.noise_source)
            if k == "music"
        }
        assert tracks[split] <= set(speech.MUSIC_SPLITS[split])
        for kind, recordings in zip(data.noise_kind, data.noise_source):
            if kind == "babble":
                assert {_key(r) for r in recordings} <= pools[split]
        prompts = {
            _key(u)
            for u, s in zip(data.utterance, data.source)
            if s == "prompts"
        }
        assert prompts <= pools[split]
    assert not seen["train"] & seen["validation"]
    assert not seen["train"] & seen["test"]
    assert not seen["validation"] & seen["test"]
    assert all(tracks.values())


@needs_audio
def test_babble_never_contains_the_utterance():
    data = _data(num_examples=24, noises=("babble",))
    assert set(data.noise_kind) == {"babble"}
    for utterance, recordings in zip(data.utterance, data.noise_source):
        keys = [_key(r) for r in recordings]
        assert len(keys) >= 3 and _key(utterance) not in keys


@needs_audio
@pytest.mark.parametrize("kind", speech.SPEECH_NOISES)
def test_each_noise_kind_alone(kind):
    data = _data("validation", num_examples=4, noises=(kind,))
    assert set(data.noise_kind) == {kind}
    np.testing.assert_array_equal(data.noisy, data.clean + data.noise)
    np.testing.assert_allclose(_recomputed_snr(data), data.snr, atol=1e-3)
    assert np.all(np.isfinite(data.noisy))
    if kind in ("music", "babble"):
        assert all(data.noise_source)
    else:
        assert not any(data.noise_source)


@needs_audio
def test_room_on_and_off():
    off = _data(num_examples=8, room_probability=0.0)
    assert not off.room.any() and not off.rt60.any()
    on = _data(num_examples=8, room_probability=1.0)
    assert on.room.all()
    assert np.all((0.2 <= on.rt60) & (on.rt60 <= 1.0))
    np.testing.assert_allclose(_recomputed_snr(on), on.snr, atol=1e-3)


@needs_audio
def test_codec2_speech_alone():
    data = _data("test", num_examples=6, sources=("codec2",), noises=("hum",))
    assert set(data.source) == {"codec2"} and set(data.language) == {"en"}
    names = {
        f"codec2/{pathlib.PurePosixPath(f).stem}"
        for f in speech.CODEC2_FILES["test"]
    }
    assert set(data.utterance) <= names
    np.testing.assert_allclose(_recomputed_snr(data), data.snr, atol=1e-3)
