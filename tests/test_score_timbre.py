"""`datasets.score_music`'s timbre: `programs`, `timbre_augmentation`,
`soundfonts` (issue 33), and the player and effects behind them.

Small renders (a few clips of a few seconds) in a temporary cache; the
SoundFont of the tests is written here (`_write_sf2`: one preset, one
instrument, one looped sine sample)."""

import os
import struct

import numpy as np
import pytest

pytest.importorskip("music21")
pytest.importorskip("pretty_midi")

from cvattn_keras import datasets  # noqa: E402
from cvattn_keras.datasets import _timbre  # noqa: E402
from cvattn_keras.datasets import scores  # noqa: E402
from cvattn_keras.datasets._soundfont import _SoundFont  # noqa: E402

SMALL = {"minutes": 0.2, "clip_seconds": 4.0}  # 3 clips of 4 s
# The sine sample: 440 Hz stored at 44 kHz, 100 samples a period, a loop
# of 10 whole periods (so the loop is seamless).
SINE_RATE, SINE_HZ, SINE_ROOT = 44000, 440.0, 69
OLD_PROGRAMS = (0, 1, 6, 19, 40, 41, 42, 48)


def _chunk(name, body):
    pad = b"\0" if len(body) % 2 else b""
    return name + struct.pack("<I", len(body)) + body + pad


def _list(kind, *chunks):
    return _chunk(b"LIST", kind + b"".join(chunks))


def _write_sf2(path, program=0, bank=0, sample_type=1):
    """A minimal SoundFont 2: preset `program` of `bank` -> one instrument
    -> one zone playing a looped 440 Hz sine (root key A4), sustained at
    full level (the generators' defaults: no decay, no attenuation)."""
    periods, period = 20, SINE_RATE // int(SINE_HZ)
    n = periods * period
    sine = np.sin(2 * np.pi * SINE_HZ * np.arange(n + 1) / SINE_RATE)
    data = np.round(sine * 32767).astype("<i2").tobytes()
    data += b"\0" * (2 * 46)  # the 46 zero points SF2 puts after a sample
    loop_start, loop_end = 10 * period, n  # sample n repeats sample 10 * p
    info = _list(
        b"INFO",
        _chunk(b"ifil", struct.pack("<HH", 2, 1)),
        _chunk(b"isng", b"EMU8000\0"),
        _chunk(b"INAM", b"sine test\0"),
    )
    sdta = _list(b"sdta", _chunk(b"smpl", data))
    pdta = _list(
        b"pdta",
        _chunk(
            b"phdr",
            struct.pack("<20sHHHIII", b"Sine", program, bank, 0, 0, 0, 0)
            + struct.pack("<20sHHHIII", b"EOP", 0, 0, 1, 0, 0, 0),
        ),
        _chunk(b"pbag", struct.pack("<HHHH", 0, 0, 1, 0)),
        _chunk(b"pmod", b"\0" * 10),
        # The preset's zone: instrument 0; then the terminal record.
        _chunk(b"pgen", struct.pack("<HhHh", 41, 0, 0, 0)),
        _chunk(
            b"inst",
            struct.pack("<20sH", b"Sine", 0) + struct.pack("<20sH", b"EOI", 1),
        ),
        _chunk(b"ibag", struct.pack("<HHHH", 0, 0, 2, 0)),
        _chunk(b"imod", b"\0" * 10),
        # The instrument's zone: sampleModes 1 (loop), sampleID 0 (last).
        _chunk(b"igen", struct.pack("<HhHhHh", 54, 1, 53, 0, 0, 0)),
        _chunk(
            b"shdr",
            struct.pack(
                "<20sIIIIIBbHH",
                b"sine",
                0,
                n,
                loop_start,
                loop_end,
                SINE_RATE,
                SINE_ROOT,
                0,
                0,
                sample_type,
            )
            + struct.pack("<20sIIIIIBbHH", b"EOS", 0, 0, 0, 0, 0, 0, 0, 0, 0),
        ),
    )
    body = b"sfbk" + info + sdta + pdta
    with open(path, "wb") as file:
        file.write(b"RIFF" + struct.pack("<I", len(body)) + body)
    return str(path)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("score_timbre_cache"))


@pytest.fixture(scope="module")
def sine_sf2(tmp_path_factory):
    return _write_sf2(tmp_path_factory.mktemp("sf2") / "sine.sf2")


@pytest.fixture(scope="module")
def default(cache):
    """The test split with the defaults (38 programs, augmentation 0.5)."""
    return datasets.score_music("test", cache_dir=cache, **SMALL)


def _renders(cache):
    return sorted(os.listdir(os.path.join(cache, "score_music")))


def test_the_player_plays_the_written_sine(sine_sf2):
    """The sine SoundFont's note at key k is a sine of 440 * 2^((k - 69) /
    12) Hz at amplitude (velocity / 127)^2 (the player's velocity curve)
    once the attack (1 ms by default) is over and before the release."""
    soundfont = _SoundFont(sine_sf2)
    rate = 16000
    for program, key, velocity in ((0, 69, 127), (40, 57, 100), (71, 76, 64)):
        # Program 40 and 71 are not in the file: preset 0 plays them.
        wave = soundfont.note(program, key, velocity, 0.5, rate)
        t = np.arange(wave.size) / rate
        hz = SINE_HZ * 2.0 ** ((key - SINE_ROOT) / 12)
        want = (velocity / 127) ** 2 * np.sin(2 * np.pi * hz * t)
        steady = (t > 0.01) & (t < 0.5)
        # 16-bit samples (3e-5) and linear interpolation of a sine of 100
        # samples a period (|error| <= (2 pi / 100)^2 / 8 = 4.9e-4).
        np.testing.assert_allclose(wave[steady], want[steady], atol=1e-3)
        # Note off at 0.5 s, then SF2's default release (-12000 timecents,
        # 2^-10 s), fading: the wave ends there.
        assert wave.size == int(np.ceil((0.5 + 2.0**-10) * rate))
        tail = np.abs(wave[t > 0.5 + 2.0**-11])
        assert 0 < tail.max() < 0.5 * (velocity / 127) ** 2


def test_score_music_plays_a_given_soundfont(default, cache, sine_sf2):
    """With the sine SoundFont (and no augmentation, little noise) the
    audio's power is at the labelled notes' fundamentals; TimGM6mb's
    instruments put much of it in their harmonics. The labels are the
    same: the timbre is drawn apart from the notes."""
    kwargs = dict(cache_dir=cache, timbre_augmentation=0, snr_db=90, **SMALL)
    sine = datasets.score_music("test", soundfonts=sine_sf2, **kwargs)
    plain = datasets.score_music("test", **kwargs)
    np.testing.assert_array_equal(sine.labels, default.labels)
    np.testing.assert_array_equal(plain.labels, default.labels)
    assert sine.notes == default.notes and sine.works == default.works
    assert np.abs(sine.audio - plain.audio).max() > 0.1

    def shares(data):
        """Per clip, the share of the power within a quarter tone of a
        fundamental of its notes, and of their harmonics 2-6 (those not
        near a fundamental). The parts are detuned by up to 10 cents; a
        quarter tone is 50."""
        found = []
        for audio, notes in zip(data.audio, data.notes):
            power = np.abs(np.fft.rfft(audio * np.hanning(audio.size))) ** 2
            hz = np.maximum(
                np.fft.rfftfreq(audio.size, 1 / data.sample_rate), 1
            )
            fundamental = np.zeros(hz.size, bool)
            harmonic = np.zeros(hz.size, bool)
            for pitch in {pitch for _, _, pitch in notes}:
                f0 = 440.0 * 2.0 ** ((pitch - 69) / 12)
                fundamental |= np.abs(1200 * np.log2(hz / f0)) < 50
                for k in range(2, 7):
                    harmonic |= np.abs(1200 * np.log2(hz / (k * f0))) < 50
            harmonic &= ~fundamental
            total = power.sum()
            found.append(
                (
                    power[fundamental].sum() / total,
                    power[harmonic].sum() / total,
                )
            )
        return np.array(found).T

    (sine_f0, sine_harmonics), (_, plain_harmonics) = (
        shares(sine),
        shares(plain),
    )
    # The sines' power is at their fundamentals: it leaks only through
    # the notes' onsets and offsets and the noise (90 dB down). Measured:
    # 0.98-0.99 at the fundamentals; 0.0006-0.008 at the harmonics, where
    # TimGM6mb's instruments put 0.08-0.28 (a tenth is a wide margin).
    assert np.all(sine_f0 > 0.95), sine_f0
    assert np.all(sine_harmonics < 0.02), sine_harmonics
    assert np.all(plain_harmonics > 10 * sine_harmonics), plain_harmonics


def test_deterministic_and_keyed_by_the_timbre(
    default, cache, sine_sf2, tmp_path
):
    """The same arguments give the same bytes, fresh or cached; every
    timbre argument has its own cache file; the labels never change."""
    fresh = datasets.score_music("test", cache_dir=str(tmp_path), **SMALL)
    np.testing.assert_array_equal(fresh.audio, default.audio)
    np.testing.assert_array_equal(fresh.labels, default.labels)
    before = _renders(cache)
    # Equal to the defaults: no new render.
    for kwargs in (
        {"timbre_augmentation": 0.5},
        {"programs": sorted(scores.PROGRAMS, reverse=True)},
        {"soundfonts": [scores.default_soundfont()]},
    ):
        again = datasets.score_music("test", cache_dir=cache, **SMALL, **kwargs)
        np.testing.assert_array_equal(again.audio, default.audio)
        assert _renders(cache) == before, kwargs
    # Each different: a new file, other audio, the same labels.
    for kwargs in (
        {"timbre_augmentation": True},
        {"programs": OLD_PROGRAMS},
        {"soundfonts": [scores.default_soundfont(), sine_sf2]},
    ):
        other = datasets.score_music("test", cache_dir=cache, **SMALL, **kwargs)
        assert len(_renders(cache)) == len(before) + 1, kwargs
        before = _renders(cache)
        assert np.abs(other.audio - default.audio).max() > 0.01, kwargs
        np.testing.assert_array_equal(other.labels, default.labels)


def _parts_notes(parts):
    """Rows `(onset, offset, pitch, part)` of parts given by pitches."""
    return np.concatenate(
        [
            np.stack([np.zeros(len(p)), np.ones(len(p)), p, np.full(len(p), i)])
            for i, p in enumerate(parts)
        ],
        axis=1,
    ).T.astype(np.float64)


def _drawn(notes, programs, ranges, draws=400):
    """The programs each part was given over `draws` seeds."""
    seen = None
    for seed in range(draws):
        chosen = _timbre._choose_programs(
            np.random.default_rng(seed), notes, programs, ranges
        )
        seen = seen or [set() for _ in chosen]
        for found, program in zip(seen, chosen):
            found.add(int(program))
    return seen


def test_programs_suit_the_parts_range():
    """Each part's program holds the part's 10th-90th percentile of pitch
    (recomputed here); every program that fits is drawn (400 draws of at
    most a dozen candidates)."""
    ranges = scores.PROGRAM_RANGES
    programs = sorted(scores.PROGRAMS)
    rng = np.random.default_rng(0)
    # A bass line, a soprano line, a piccolo's.
    parts = [
        rng.integers(36, 56, 50),
        rng.integers(64, 80, 50),
        rng.integers(86, 100, 50),
    ]
    seen = _drawn(_parts_notes(parts), programs, ranges)
    for i, pitches in enumerate(parts):
        low, high = np.percentile(pitches, [10, 90])
        fit = {
            p for p in programs if ranges[p][0] <= low and high <= ranges[p][1]
        }
        assert fit and seen[i] == fit, (i, sorted(seen[i]), sorted(fit))
    assert 58 not in seen[1] and 40 not in seen[0]  # no tuba soprano
    assert 58 in seen[0] and 40 in seen[1]


def test_programs_fall_back_to_the_median_then_all():
    """np.arange(50, 91): 10th-90th percentile 54-86, median 70; the
    soprano np.arange(64, 81): 65.6-78.4; the bass np.arange(36, 57)."""
    ranges = scores.PROGRAM_RANGES
    assert ranges[56] == (54, 82) and ranges[58] == (28, 58)
    assert ranges[72] == (74, 108)
    notes = _parts_notes(
        [np.arange(50, 91), np.arange(64, 81), np.arange(36, 57)]
    )
    # The wide part: no trumpet (54-82) holds 86, its median 70 does.
    assert _drawn(notes, [56, 58], ranges) == [{56}, {56}, {58}]
    # The soprano: neither the tuba nor the piccolo, not even its median:
    # either.
    assert _drawn(notes, [58, 72], ranges)[1] == {58, 72}
    # A program without a range (100, not in PROGRAM_RANGES) fits all.
    assert _drawn(notes, [58, 100], ranges)[1:] == [{100}, {58, 100}]


def test_equaliser_is_the_documented_gain():
    """A sine through `_equalise` comes out scaled by the equaliser's gain
    at its frequency (zero phase), the gain written out here: tilt dB per
    octave about 1 kHz (clipped to +-12 dB), a Gaussian bell in octaves,
    second-order Butterworth low- and high-pass magnitudes."""
    rate, seconds = 16000, 1.0
    t = np.arange(int(rate * seconds)) / rate
    settings = dict(
        tilt=2.5,
        bell_hz=700.0,
        bell_db=-6.0,
        bell_octaves=1.0,
        lowpass_hz=3000.0,
        highpass_hz=100.0,
    )
    for hz in (60.0, 250.0, 700.0, 1000.0, 2500.0, 5000.0):
        x = np.sin(2 * np.pi * hz * t)
        y = _timbre._equalise(x, rate, settings)
        db = np.clip(2.5 * np.log2(max(hz, 50) / 1000), -12, 12)
        db += -6.0 * np.exp(-0.5 * (np.log2(hz / 700.0) / 0.5) ** 2)
        gain = 10 ** (db / 20) / np.sqrt(1 + (hz / 3000.0) ** 4)
        gain *= (hz / 100.0) ** 2 / np.sqrt(1 + (hz / 100.0) ** 4)
        middle = slice(rate // 4, -rate // 4)  # away from the edges
        # The filter's response is short beside a quarter second; the
        # sine's spectrum leaks (its whole periods end at the edge) by
        # less than 1% at the middle.
        np.testing.assert_allclose(
            y[middle], gain * x[middle], atol=0.01 * max(gain, 0.05)
        )


def test_vibrato_is_a_pitch_bend_of_the_asked_cents():
    """`_delayed` with `_modulated_delay` reads x(t - d(t)): for a sine,
    sin(2 pi f (t - d(t))) (written out here); the pitch bends by
    1 - d'(t), at most 2^(cents / 1200) - 1."""
    rate, hz, cents = 16000, 330.0, 20.0
    t = np.arange(rate) / rate
    delay = _timbre._modulated_delay(rate, rate, 0.004, cents, 5.0, 1.0)
    y = _timbre._delayed(np.sin(2 * np.pi * hz * t), delay)
    want = np.sin(2 * np.pi * hz * (t - delay / rate))
    valid = t > delay.max() / rate  # zero before the signal starts
    # Linear interpolation of a sine of 48 samples a period:
    # (2 pi / 48)^2 / 8 = 2.1e-3.
    np.testing.assert_allclose(y[valid], want[valid], atol=2.5e-3)
    bend = np.abs(np.diff(delay)).max()  # samples per sample: |d'|
    # The largest slope of a sampled sine of 3200 samples a period is
    # within 2e-6 of its derivative's peak.
    np.testing.assert_allclose(bend, 2 ** (cents / 1200) - 1, rtol=1e-5)
    assert delay.min() >= 0.004 * rate - 1e-9


def test_strength_scales_the_same_draws():
    """The draws do not depend on the strength: 0 is no effect (the
    envelope unscaled, no vibrato, tremolo or chorus), and the effects
    at 0.5 are those at 1 halved (in dB, cents, mix; in octaves for the
    filters' corners and log-scales)."""
    rate = 16000
    full = _timbre._part_effects(np.random.default_rng(3), 4, 1.0)
    half = _timbre._part_effects(np.random.default_rng(3), 4, 0.5)
    none = _timbre._part_effects(np.random.default_rng(3), 4, 0.0)
    for a, b, c in zip(full, half, none):
        for key in ("vibrato_cents", "tremolo", "chorus", "attack_added"):
            np.testing.assert_allclose(b[key], a[key] / 2, rtol=1e-12)
            assert c[key] == 0
        for key in ("attack_scale", "release_scale"):
            np.testing.assert_allclose(np.log2(b[key]), np.log2(a[key]) / 2)
            assert c[key] == 1
        eq = a["equaliser"], b["equaliser"]
        np.testing.assert_allclose(eq[1]["tilt"], eq[0]["tilt"] / 2)
        np.testing.assert_allclose(
            np.log2(eq[1]["lowpass_hz"] / 10000),
            np.log2(eq[0]["lowpass_hz"] / 10000) / 2,
        )
        assert c["equaliser"]["tilt"] == c["equaliser"]["bell_db"] == 0
    # Documented ranges, at full strength over many draws.
    many = _timbre._part_effects(np.random.default_rng(4), 500, 1.0)
    for key, low, high in (
        ("vibrato_cents", 0, 20),
        ("tremolo", 0, 0.25),
        ("chorus", 0, 0.5),
        ("attack_scale", 0.5, 4),
        ("release_scale", 0.5, 2**1.5),
    ):
        values = np.array([m[key] for m in many])
        assert low <= values.min() and values.max() <= high, key
    lows = np.array([m["equaliser"]["lowpass_hz"] for m in many])
    assert 1000 <= lows.min() and lows.max() <= 10000
    x = np.random.default_rng(5).standard_normal(rate)
    assert np.all(np.isfinite(_timbre._apply_part(x, rate, full[0])))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"programs": []}, "programs"),
        ({"programs": [128]}, "programs"),
        ({"programs": [-1, 0]}, "programs"),
        ({"programs": [0, 0]}, "programs"),
        ({"programs": [1.0]}, "programs"),
        ({"programs": [True]}, "programs"),
        ({"programs": "0"}, "programs"),
        ({"programs": 5}, "programs"),
        ({"timbre_augmentation": -0.1}, "timbre_augmentation"),
        ({"timbre_augmentation": 1.5}, "timbre_augmentation"),
        ({"timbre_augmentation": float("nan")}, "timbre_augmentation"),
        ({"timbre_augmentation": "full"}, "timbre_augmentation"),
        ({"soundfonts": []}, "soundfonts"),
        ({"soundfonts": 3}, "soundfonts"),
        ({"soundfonts": [None]}, "soundfonts"),
    ],
)
def test_bad_timbre_arguments(kwargs, name, tmp_path):
    with pytest.raises(ValueError, match=f"`{name}`"):
        datasets.score_music(
            "validation", cache_dir=str(tmp_path), **SMALL, **kwargs
        )


def test_bad_soundfonts_are_named(tmp_path, sine_sf2):
    """A missing file, a file that is not an SF2, one named twice, an SF3
    (compressed samples), one without General MIDI presets and a
    truncated one: each a ValueError naming `soundfonts` and the file."""
    kwargs = dict(cache_dir=str(tmp_path / "cache"), **SMALL)
    text = tmp_path / "notes.sf2"
    text.write_text("not a SoundFont")
    truncated = tmp_path / "truncated.sf2"
    with open(sine_sf2, "rb") as file:
        truncated.write_bytes(file.read()[:200])
    compressed = _write_sf2(tmp_path / "sf3.sf2", sample_type=1 | 0x10)
    bank = _write_sf2(tmp_path / "bank1.sf2", bank=1)
    for paths, path, why in (
        ([str(tmp_path / "missing.sf2")], tmp_path / "missing.sf2", "no such"),
        ([str(text)], text, "not a SoundFont 2"),
        ([sine_sf2, sine_sf2], sine_sf2, "twice"),
        ([compressed], compressed, "compressed"),
        ([bank], bank, "no preset in bank 0"),
        ([truncated], truncated, "not a readable SoundFont 2"),
    ):
        with pytest.raises(ValueError, match="`soundfonts`") as error:
            datasets.score_music("validation", soundfonts=paths, **kwargs)
        assert str(path) in str(error.value) and why in str(error.value)
