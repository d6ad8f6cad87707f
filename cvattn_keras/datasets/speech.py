"""`noisy_speech`: a speech-enhancement data set built only from audio
that Debian ships: clean speech plus noise at a drawn SNR, 16 kHz.

Speech (the clean targets):

- `"prompts"`: Asterisk's studio prompts, 16 kHz G.722 (wide-band), from
  `asterisk-core-sounds-en-g722` (en-US, Allison Smith),
  `asterisk-core-sounds-es-g722` (es-MX, the same speaker) and
  `asterisk-core-sounds-fr-g722` (fr-CA, June Wallack); CC-BY-SA-3.0.
  Decoded with the `g722` package (the `speech` extra). The tones and
  silences among them (`beep`, `beeperr`, `ascending-2tone`,
  `descending-2tone`, `confbridge-join`, `confbridge-leave`,
  `silence/*`) are left out.
- `"codec2"`: the speech files of `codec2-examples` (LGPL-2.1), several
  speakers: `CODEC2_FILES`. Most are 8 kHz, upsampled here by a
  windowed-sinc half-band filter: they are NARROW-BAND (nothing above
  4 kHz). Left out: `wav/all.wav` (the other files concatenated),
  `wav/m2400.wav` and `wav/f2400.wav` (codec-processed copies of
  `morig` and `forig`), `wav/cross.wav` (mu-law, which `wave` does not
  read), `wav/david4.wav` and `wav/vk2tpm_004.wav` (noisy recordings).

Noises (`SPEECH_NOISES`):

- `"music"`: the five tracks of `asterisk-moh-opsound-wav` (8 kHz,
  upsampled: narrow-band), a random excerpt of one of the split's tracks
  (`MUSIC_SPLITS`).
- `"babble"`: 3 to 5 talkers, each a random run of prompts of the same
  split (any language), never the utterance's own prompt (in any
  language), each at the same level, summed.
- `"colored"`: stationary Gaussian noise with a power spectrum
  `f ** -slope`, `slope` uniform in [0, 2] (white 0, pink 1, brown 2).
- `"hum"`: mains hum: a 50 or 60 Hz fundamental (+-0.5%) and its
  harmonics below 8 kHz, random amplitudes (a random decay) and phases.
- `"bursts"`: coloured noise switched on and off: bursts and gaps of
  random (exponential) lengths, random levels, 5-ms raised-cosine ramps;
  at least one burst falls on the utterance.

With probability `room_probability` the noise goes through a simulated
room: a synthetic impulse response (a direct path and an exponentially
decaying Gaussian tail, RT60 uniform in [0.2, 1.0] s).

Install the audio with `apt-get install asterisk-core-sounds-en-g722
asterisk-core-sounds-es-g722 asterisk-core-sounds-fr-g722 codec2-examples
asterisk-moh-opsound-wav`, and `pip install "cvattn-keras[speech]"`. The
audio stays in those packages (share-alike, attribution); nothing is
downloaded.
"""

import dataclasses
import functools
import hashlib
import math
import pathlib
import wave

import numpy as np

from cvattn_keras import _validation as check
from cvattn_keras.datasets._checks import _finite_range
from cvattn_keras.datasets._checks import _non_negative_int

__all__ = ["SPEECH_NOISES", "NoisySpeech", "noisy_speech"]

SPEECH_NOISES = ("music", "babble", "colored", "hum", "bursts")
"""The noise kinds of `noisy_speech`, its default `noises`."""

SAMPLE_RATE = 16_000
SPLITS = ("train", "validation", "test")
SOURCES = ("prompts", "codec2")
DEFAULT_EXAMPLES = {"train": 400, "validation": 100, "test": 100}
MIN_SNR_DB, MAX_SNR_DB = -20.0, 40.0
MAX_SECONDS = 30.0
SPEECH_LEVEL_DB = -25.0  # the clean speech's RMS over the utterance, dBFS
PEAK = 0.99  # a shared scale brings every peak of clean, noise, noisy below
RT60_RANGE = (0.2, 1.0)  # seconds
BABBLE_TALKERS = (3, 5)

SPEECH_DIR = "/usr/share/asterisk/sounds"
CODEC2_DIR = "/usr/share/codec2"
MUSIC_DIR = "/usr/share/asterisk/moh"

VOICES = {
    "en": ("en_US_f_Allison", "asterisk-core-sounds-en-g722"),
    "es": ("es_MX_f_Allison", "asterisk-core-sounds-es-g722"),
    "fr": ("fr_CA_f_June", "asterisk-core-sounds-fr-g722"),
}
NOT_SPEECH = frozenset(
    [
        "beep",
        "beeperr",
        "ascending-2tone",
        "descending-2tone",
        "confbridge-join",
        "confbridge-leave",
    ]
)

CODEC2_FILES = {
    "train": (
        "wav/hts1a.wav",
        "wav/morig.wav",
        "wav/big_dog.wav",
        "wav/mmt1.wav",
        "wav/ve9qrp.wav",
        "wav/vk5qi.wav",
    ),
    "validation": ("wav/hts2a.wav", "wav/wia_16kHz.wav"),
    "test": ("wav/forig.wav", "raw/speech_orig_16k.wav"),
}
"""The speech files of `codec2-examples` per split (paths under
`/usr/share/codec2`), one file per recording, each in one split."""

MUSIC_SPLITS = {
    "train": (
        "macroform-cold_day",
        "macroform-the_simplicity",
        "reno_project-system",
    ),
    "validation": ("manolo_camp-morning_coffee",),
    "test": ("macroform-robot_dity",),
}
"""The music tracks (`.wav` under `/usr/share/asterisk/moh`) per split:
845 s for training, 73 s for validation, 189 s for testing."""

PROMPT_SPLIT_PERCENT = (80, 10, 10)  # train, validation, test

_HALF_TAPS = 32  # the half-band filter: 2 * 32 taps at the odd outputs
_KAISER_BETA = 8.0


@dataclasses.dataclass(frozen=True, eq=False)
class NoisySpeech:
    """What `noisy_speech` returns: `N` clips of `L` samples at 16 kHz.

    `noisy == clean + noise` exactly (float32). The clean speech of
    example `i` occupies `clean[i, start[i]:stop[i]]` (the utterance,
    cropped or zero-padded); its RMS there is -25 dBFS before the shared
    scale, and `snr[i]` is the power of `clean` over those samples divided
    by the power of `noise` over the same samples, in dB. If any peak of
    `clean`, `noise` or `noisy` exceeded 0.99, both `clean` and `noise`
    were scaled by one factor (`scale[i]`) to bring it to 0.99.

    Attributes:
        clean: float32 `(N, L)`, the speech.
        noise: float32 `(N, L)`, the noise.
        noisy: float32 `(N, L)`, `clean + noise`.
        snr: float32 `(N,)`, the SNR, dB.
        start: int64 `(N,)`, where the utterance starts in the clip.
        stop: int64 `(N,)`, where it ends (exclusive).
        scale: float32 `(N,)`, the shared scale (1 where none was needed).
        noise_kind: a tuple of `N` names from `SPEECH_NOISES`.
        noise_source: a tuple of `N` tuples of the recordings the noise
            came from (the music track; the babble's utterances; empty
            for the generated noises).
        room: bool `(N,)`, whether the noise went through a room.
        rt60: float32 `(N,)`, the room's RT60, seconds (0 without one).
        utterance: a tuple of `N` names: `"en/digits/1"` (a prompt, by
            language and path without the suffix) or `"codec2/hts1a"`.
        source: a tuple of `N` names, `"prompts"` or `"codec2"`.
        language: a tuple of `N` names, `"en"`, `"es"` or `"fr"`.
        split: `"train"`, `"validation"` or `"test"`.
        seed: the seed.
        sample_rate: 16000.
    """

    clean: np.ndarray
    noise: np.ndarray
    noisy: np.ndarray
    snr: np.ndarray
    start: np.ndarray
    stop: np.ndarray
    scale: np.ndarray
    noise_kind: tuple
    noise_source: tuple
    room: np.ndarray
    rt60: np.ndarray
    utterance: tuple
    source: tuple
    language: tuple
    split: str
    seed: int
    sample_rate: int = SAMPLE_RATE

    def __len__(self):
        return len(self.snr)


# ----------------------------------------------------------------------
# Files.
# ----------------------------------------------------------------------


class _MissingAudio(FileNotFoundError, ValueError):
    """Audio files not found: a `FileNotFoundError` and a `ValueError`;
    `parts` holds `(argument, value, folder, packages)` per folder."""

    def __init__(self, parts):
        packages = [p for *_, names in parts for p in names]
        where = "; ".join(
            f"`{name}`: none in {folder}" for name, _, folder, _ in parts
        )
        received = ", ".join(f"{name}={value!r}" for name, value, *_ in parts)
        super().__init__(
            f"No audio found ({where}). Install it with `apt-get install "
            f"{' '.join(dict.fromkeys(packages))}` (Debian, Ubuntu), or "
            f"pass the folder holding the files. Received: {received}"
        )
        self.parts = parts


def _missing(name, value, searched, packages):
    return _MissingAudio([(name, value, searched, tuple(packages))])


def _folder(value, name, default):
    if value is None:
        return pathlib.Path(default)
    if not isinstance(value, (str, pathlib.PurePath)):
        raise ValueError(
            f"`{name}` must be a path (str or pathlib.Path) or None. "
            f"Received: {name}={value!r}"
        )
    return pathlib.Path(value)


def _prompt_split(key):
    """The split of a prompt from a stable hash of its path (the same in
    every language): SHA-256's first 8 bytes modulo 100."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    bucket = int.from_bytes(digest[:8], "big") % 100
    train, validation, _ = PROMPT_SPLIT_PERCENT
    if bucket < train:
        return "train"
    return "validation" if bucket < train + validation else "test"


@functools.lru_cache(maxsize=8)
def _prompt_index(root):
    """Every speech prompt under `root`: a tuple of `(language, key,
    path)`, sorted, `key` the path under the voice's folder without the
    suffix (`"digits/1"`)."""
    found = []
    for language, (folder, _) in VOICES.items():
        base = pathlib.Path(root) / folder
        if not base.is_dir():
            continue
        for path in base.rglob("*.g722"):
            key = path.relative_to(base).with_suffix("").as_posix()
            if key.split("/")[0] == "silence" or key in NOT_SPEECH:
                continue
            found.append((language, key, str(path)))
    return tuple(sorted(found))


def _prompts(root, value, split):
    index = _prompt_index(str(root))
    if not index:
        _prompt_index.cache_clear()  # not cached: found once installed
        packages = [package for _, package in VOICES.values()]
        raise _missing("speech_dir", value, root, packages)
    return tuple(item for item in index if _prompt_split(item[1]) == split)


def _g722():
    try:
        import G722
    except ImportError as error:
        raise ImportError(
            "Decoding the G.722 prompts needs the `g722` package: "
            'pip install "cvattn-keras[speech]" (or pip install g722).'
        ) from error
    return G722


@functools.lru_cache(maxsize=4096)
def _decode(path):
    """A G.722 file (16 kHz, no header) as float32 in [-1, 1)."""
    decoder = _g722().G722(SAMPLE_RATE, 64000)
    samples = decoder.decode(pathlib.Path(path).read_bytes())
    return np.asarray(samples, dtype=np.int16).astype(np.float32) / 32768.0


def _read_wav(path):
    """A 16-bit mono (or first channel) WAV: `(int16 samples, rate)`."""
    with wave.open(str(path), "rb") as file:
        if file.getsampwidth() != 2:
            raise ValueError(f"{path}: not 16-bit PCM")
        channels = file.getnchannels()
        rate = file.getframerate()
        data = np.frombuffer(file.readframes(file.getnframes()), "<i2")
    return data[::channels].copy(), rate


def _codec2_path(root, relative):
    path = pathlib.Path(root) / relative
    if path.is_file():
        return path
    flat = pathlib.Path(root) / pathlib.PurePosixPath(relative).name
    return flat if flat.is_file() else None


def _codec2_files(root, value, split):
    present = {
        relative: _codec2_path(root, relative)
        for files in CODEC2_FILES.values()
        for relative in files
    }
    if not any(present.values()):
        raise _missing("codec2_dir", value, root, ["codec2-examples"])
    return tuple(
        ("en", pathlib.PurePosixPath(relative).stem, str(present[relative]))
        for relative in CODEC2_FILES[split]
        if present[relative] is not None
    )


@functools.lru_cache(maxsize=32)
def _codec2_audio(path):
    """A codec2 file at 16 kHz, float32 (8 kHz files upsampled)."""
    samples, rate = _read_wav(path)
    audio = samples.astype(np.float64) / 32768.0
    if rate == SAMPLE_RATE // 2:
        audio = _upsample2(audio)
    elif rate != SAMPLE_RATE:
        raise ValueError(f"{path}: sample rate {rate}, not 8 or 16 kHz")
    return audio.astype(np.float32)


@functools.lru_cache(maxsize=8)
def _music_track(path):
    """A music track's 8-kHz samples, float64 in [-1, 1)."""
    samples, rate = _read_wav(path)
    if rate != SAMPLE_RATE // 2:
        raise ValueError(f"{path}: sample rate {rate}, not 8 kHz")
    return samples.astype(np.float64) / 32768.0


def _music_files(root, value, split):
    paths = {
        name: pathlib.Path(root) / f"{name}.wav"
        for names in MUSIC_SPLITS.values()
        for name in names
    }
    if not any(path.is_file() for path in paths.values()):
        raise _missing("music_dir", value, root, ["asterisk-moh-opsound-wav"])
    files = tuple(
        (name, str(paths[name]))
        for name in MUSIC_SPLITS[split]
        if paths[name].is_file()
    )
    if not files:
        raise _missing("music_dir", value, root, ["asterisk-moh-opsound-wav"])
    return files


# ----------------------------------------------------------------------
# Signal processing.
# ----------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _half_band():
    """The taps giving the odd outputs of a 2x upsampler: a Kaiser-windowed
    sinc at the half-integer offsets -31.5 ... 31.5, normalised to a DC
    gain of 1."""
    offsets = np.arange(-_HALF_TAPS, _HALF_TAPS) + 0.5
    window = np.kaiser(2 * _HALF_TAPS + 2, _KAISER_BETA)[1:-1]
    taps = np.sinc(offsets) * window
    return taps / taps.sum()


def _upsample2(x):
    """`x` (1-D, sample rate r) at 2r: the even outputs are `x` itself,
    the odd ones a windowed-sinc interpolation half way (the signal taken
    as zero outside `x`). Band-limited: passes up to about 0.45 r with
    an error below 1e-3, nothing above r / 2 is added."""
    x = np.asarray(x, dtype=np.float64)
    taps = _half_band()
    padded = np.concatenate([np.zeros(_HALF_TAPS), x, np.zeros(_HALF_TAPS)])
    # odd output n + 1/2 = sum_k taps[k] x[n - HALF + 1 + k].
    odd = np.convolve(padded, taps[::-1], mode="valid")[1 : len(x) + 1]
    out = np.empty(2 * len(x))
    out[0::2] = x
    out[1::2] = odd
    return out


def _fft_convolve(x, h):
    """The full linear convolution of two 1-D arrays, via the FFT."""
    size = len(x) + len(h) - 1
    n = 1 << max(0, (size - 1).bit_length())
    y = np.fft.irfft(np.fft.rfft(x, n) * np.fft.rfft(h, n), n)
    return y[:size]


def _room(rng, rt60):
    """A synthetic room impulse response: a unit direct path and a Gaussian
    tail decaying by 60 dB in `rt60` seconds (after a 1-ms gap), unit
    energy."""
    length = int(rt60 * SAMPLE_RATE)
    n = np.arange(length)
    tail = rng.standard_normal(length) * 10.0 ** (-3.0 * n / length)
    tail[: SAMPLE_RATE // 1000] = 0.0
    # The tail's energy relative to the direct path's: reverberant.
    tail *= math.sqrt(rng.uniform(0.5, 4.0) / max(np.sum(tail**2), 1e-12))
    tail[0] = 1.0
    return tail / np.sqrt(np.sum(tail**2))


def _colored(rng, length, slope):
    """Gaussian noise with a power spectrum `f ** -slope` (flat below
    20 Hz), unit power."""
    n = max(length, 2)
    spectrum = rng.standard_normal(n // 2 + 1) + 1j * rng.standard_normal(
        n // 2 + 1
    )
    frequencies = np.maximum(np.fft.rfftfreq(n, 1.0 / SAMPLE_RATE), 20.0)
    spectrum *= frequencies ** (-slope / 2.0)
    spectrum[0] = 0.0
    noise = np.fft.irfft(spectrum, n)[:length]
    return noise / max(np.sqrt(np.mean(noise**2)), 1e-12)


def _hum(rng, length):
    fundamental = rng.choice([50.0, 60.0]) * (1 + rng.uniform(-0.005, 0.005))
    count = int((SAMPLE_RATE / 2 - 1) // fundamental)
    order = np.arange(1, count + 1)
    amplitudes = rng.uniform(0.0, 1.0, count) * order ** -rng.uniform(0.5, 2)
    amplitudes[0] = max(amplitudes[0], 0.5)
    phases = rng.uniform(0.0, 2 * np.pi, count)
    # One period on a fine grid (the harmonics placed in an inverse FFT),
    # read at each sample's phase by linear interpolation (error < 1e-3 of
    # the highest harmonic's amplitude).
    grid = 16384
    spectrum = np.zeros(grid // 2 + 1, complex)
    spectrum[1 : count + 1] = amplitudes * np.exp(1j * (phases - np.pi / 2))
    period = np.fft.irfft(spectrum, grid) * (grid / 2)
    phase = (fundamental * np.arange(length) / SAMPLE_RATE) % 1.0
    hum = np.interp(
        phase * grid, np.arange(grid + 1), np.append(period, period[0])
    )
    return hum


def _bursts(rng, length, start, stop):
    """Coloured noise under an on/off envelope; one burst is at full level
    at a sample of `[start, stop)` (where the utterance is, in the clip's
    coordinates)."""
    ramp = SAMPLE_RATE // 200
    envelope = np.zeros(length)

    def burst(at):
        size = max(int(rng.exponential(0.15) * SAMPLE_RATE), 2 * ramp + 1)
        piece = np.full(size, rng.uniform(0.3, 1.0))
        window = 0.5 - 0.5 * np.cos(np.pi * np.arange(ramp) / ramp)
        piece[:ramp] *= window
        piece[-ramp:] *= window[::-1]
        first, end = max(at, 0), min(at + size, length)
        if first < end:
            envelope[first:end] = np.maximum(
                envelope[first:end], piece[first - at : end - at]
            )

    burst(int(rng.integers(start, max(stop, start + 1))) - ramp)
    at = int(rng.exponential(0.3) * SAMPLE_RATE)
    while at < length:
        burst(at)
        at += int(rng.exponential(0.45) * SAMPLE_RATE) + 1
    return _colored(rng, length, rng.uniform(0.0, 2.0)) * envelope


def _excerpt(rng, audio, length):
    """A random excerpt of `length` samples (the audio tiled if short)."""
    if len(audio) < length:
        audio = np.tile(audio, -(-length // len(audio)))
    begin = int(rng.integers(0, len(audio) - length + 1))
    return audio[begin : begin + length]


def _music(rng, tracks, length):
    name, path = tracks[int(rng.integers(len(tracks)))]
    track = _music_track(path)
    half = -(-length // 2) + 2 * _HALF_TAPS
    for _ in range(10):  # past silences (below -60 dBFS)
        piece = _excerpt(rng, track, half)
        if np.mean(piece**2) > 1e-6:
            break
    audio = _upsample2(piece)[2 * _HALF_TAPS : 2 * _HALF_TAPS + length]
    return audio, (name,)


def _babble(rng, prompts, key, length):
    pool = [item for item in prompts if item[1] != key]
    talkers = int(rng.integers(BABBLE_TALKERS[0], BABBLE_TALKERS[1] + 1))
    total = np.zeros(length)
    names = []
    for _ in range(talkers):
        pieces, filled = [], 0
        while filled < length:
            language, name, path = pool[int(rng.integers(len(pool)))]
            audio = _decode(path).astype(np.float64)
            pieces.append(audio)
            names.append(f"{language}/{name}")
            filled += len(audio)
        stream = _excerpt(rng, np.concatenate(pieces), length)
        total += stream / max(np.sqrt(np.mean(stream**2)), 1e-12)
    return total, tuple(names)


def _speech(rng, item, source, length):
    """The utterance placed in a clip of `length` samples: `(clip, start,
    stop)`. A longer utterance is cropped at a random offset (an excerpt
    with at least 1% of the utterance's mean power, of up to 10 draws); a
    shorter one zero-padded at a random offset."""
    language, name, path = item
    if source == "prompts":
        audio = _decode(path).astype(np.float64)
    else:
        audio = _codec2_audio(path).astype(np.float64)
    clip = np.zeros(length)
    if len(audio) <= length:
        start = int(rng.integers(0, length - len(audio) + 1))
        clip[start : start + len(audio)] = audio
        return clip, start, start + len(audio)
    floor = 0.01 * np.mean(audio**2)
    best, best_power = None, -1.0
    for _ in range(10):
        begin = int(rng.integers(0, len(audio) - length + 1))
        power = np.mean(audio[begin : begin + length] ** 2)
        if power > best_power:
            best, best_power = begin, power
        if power >= floor:
            break
    return audio[best : best + length].copy(), 0, length


# ----------------------------------------------------------------------
# Arguments.
# ----------------------------------------------------------------------


def _names(value, name, allowed):
    items = None
    if not isinstance(value, (str, bytes)):
        try:
            items = tuple(value)
        except TypeError:
            items = None
    if (
        not items
        or any(
            not isinstance(item, str) or item not in allowed for item in items
        )
        or len(set(items)) < len(items)
    ):
        raise ValueError(
            f"`{name}` must be a non-empty sequence of distinct names from "
            f"{list(allowed)}. Received: {name}={value!r}"
        )
    return items


def _arguments(split, num_examples, seconds, snr_range, sample_rate, seed):
    if split not in SPLITS:
        raise ValueError(
            f"`split` must be one of {list(SPLITS)}. Received: split={split!r}"
        )
    if num_examples is None:
        num_examples = DEFAULT_EXAMPLES[split]
    check.positive_int(num_examples, "num_examples")
    if not check._is_real(seconds) or not 0 < seconds <= MAX_SECONDS:
        raise ValueError(
            f"`seconds` must be a finite number in (0, {MAX_SECONDS:g}]. "
            f"Received: seconds={seconds!r}"
        )
    length = int(round(seconds * SAMPLE_RATE))
    if length < 1:
        raise ValueError(
            "`seconds` must give at least one sample at 16 kHz. "
            f"Received: seconds={seconds!r}"
        )
    low, high = _finite_range(snr_range, "snr_range")
    if low < MIN_SNR_DB or high > MAX_SNR_DB:
        raise ValueError(
            f"`snr_range` must lie within [{MIN_SNR_DB:g}, {MAX_SNR_DB:g}] "
            f"dB. Received: snr_range={snr_range!r}"
        )
    if not check._is_int(sample_rate) or sample_rate != SAMPLE_RATE:
        raise ValueError(
            "`sample_rate` must be 16000 (the data set is 16 kHz only). "
            f"Received: sample_rate={sample_rate!r}"
        )
    seed = _non_negative_int(seed, "seed")
    return int(num_examples), length, (low, high), seed


# ----------------------------------------------------------------------
# The data set.
# ----------------------------------------------------------------------


def noisy_speech(
    split="train",
    num_examples=None,
    seconds=2.0,
    snr_range=(-5.0, 20.0),
    sample_rate=SAMPLE_RATE,
    seed=0,
    noises=SPEECH_NOISES,
    room_probability=0.25,
    speech_dir=None,
    codec2_dir=None,
    music_dir=None,
    sources=SOURCES,
):
    """A speech-enhancement data set: fixed-length 16-kHz clips of clean
    speech, noise and their sum at a drawn SNR, from Debian's audio (see
    the module's docstring for the sources, licences and packages).

    Each example draws, from its own random stream (so example `i` does
    not depend on `num_examples`): an utterance of the split (uniformly
    over the files of `sources`), placed in the clip (cropped at a random
    offset, or zero-padded at a random offset), scaled to an RMS of
    -25 dBFS over its samples; a noise kind (uniformly over `noises`), a
    noise of that kind, through a simulated room with probability
    `room_probability`; an SNR uniform in `snr_range`, to which the noise
    is scaled (the powers taken over the utterance's samples). A shared
    scale then brings the peaks below 0.99 where needed.

    Splits are disjoint by utterance and by noise recording: a prompt's
    split comes from the SHA-256 of its path without the suffix
    (`"digits/1"`), the same in every language (80% train, 10%
    validation, 10% test); the codec2 files are split by file
    (`CODEC2_FILES`) and the music tracks by track (`MUSIC_SPLITS`: 3
    train, 1 validation, 1 test); babble takes only prompts of the split.
    Deterministic from `(seed, split)`.

    Decoded audio is cached in-process (`functools.lru_cache`); only the
    files drawn are decoded. The default train split (400 clips of 2 s,
    150 MB) builds in about 3 s in a fresh process (decoding included),
    under 1 s once the files are cached.

    Args:
        split: `"train"`, `"validation"` or `"test"`.
        num_examples: the number of clips, a positive int; `None`: 400
            for train, 100 for validation and test.
        seconds: the clip length, in (0, 30] s (rounded to samples).
        snr_range: `(low, high)` dB, finite, low <= high, within
            [-20, 40]; the SNR is uniform in it.
        sample_rate: 16000 (the only rate).
        seed: an int >= 0.
        noises: a non-empty sequence of distinct names from
            `SPEECH_NOISES`.
        room_probability: the probability in [0, 1] that a noise goes
            through a simulated room.
        speech_dir: the folder holding Asterisk's voice folders
            (`en_US_f_Allison`, `es_MX_f_Allison`, `fr_CA_f_June`);
            `None`: `/usr/share/asterisk/sounds`. Needed for the source
            `"prompts"` and for babble.
        codec2_dir: the folder of `codec2-examples`' audio (with `wav/`
            and `raw/`); `None`: `/usr/share/codec2`. Needed for the
            source `"codec2"`.
        music_dir: the folder of `asterisk-moh-opsound-wav`'s tracks;
            `None`: `/usr/share/asterisk/moh`. Needed for `"music"`.
        sources: the speech: a non-empty sequence of distinct names from
            `("prompts", "codec2")`.

    Returns:
        A `NoisySpeech`.

    Raises:
        ValueError: an argument out of its domain (the message names it
            and echoes the value).
        FileNotFoundError: the audio of a needed Debian package not found
            (also a `ValueError`; the message names the folder searched
            and the `apt-get install` command).
        ImportError: the prompts needed without the `g722` package
            (`pip install "cvattn-keras[speech]"`).
    """
    num_examples, length, (low, high), seed = _arguments(
        split, num_examples, seconds, snr_range, sample_rate, seed
    )
    noises = _names(noises, "noises", SPEECH_NOISES)
    sources = _names(sources, "sources", SOURCES)
    if not check._is_real(room_probability) or not 0 <= room_probability <= 1:
        raise ValueError(
            "`room_probability` must be a number in [0, 1]. "
            f"Received: room_probability={room_probability!r}"
        )
    speech_root = _folder(speech_dir, "speech_dir", SPEECH_DIR)
    codec2_root = _folder(codec2_dir, "codec2_dir", CODEC2_DIR)
    music_root = _folder(music_dir, "music_dir", MUSIC_DIR)

    missing = []

    def look_up(function, *args):
        try:
            return function(*args, split)
        except _MissingAudio as error:
            missing.extend(error.parts)
            return ()

    prompts = files = tracks = ()
    if "prompts" in sources or "babble" in noises:
        prompts = look_up(_prompts, speech_root, speech_dir)
    if "codec2" in sources:
        files = look_up(_codec2_files, codec2_root, codec2_dir)
    if "music" in noises:
        tracks = look_up(_music_files, music_root, music_dir)
    if missing:  # one message naming every package missing
        raise _MissingAudio(missing)
    pool = [("prompts", item) for item in prompts if "prompts" in sources]
    pool += [("codec2", item) for item in files]
    if "prompts" in sources or "babble" in noises:
        _g722()  # the ImportError naming the extra, before any work
    if not pool:
        raise ValueError(
            f"`sources`: no utterance of split {split!r} found. "
            f"Received: sources={sources!r}"
        )
    if "babble" in noises and len({item[1] for item in prompts}) < 2:
        raise ValueError(
            f"`noises`: babble needs prompts of split {split!r} other than "
            f"the utterance's; found {len(prompts)} in {speech_root}. "
            f"Received: noises={noises!r}"
        )

    split_index = SPLITS.index(split)
    clean = np.empty((num_examples, length), np.float32)
    noise = np.empty((num_examples, length), np.float32)
    noisy = np.empty((num_examples, length), np.float32)
    snr = np.empty(num_examples, np.float32)
    start = np.empty(num_examples, np.int64)
    stop = np.empty(num_examples, np.int64)
    scale = np.empty(num_examples, np.float32)
    room = np.zeros(num_examples, bool)
    rt60 = np.zeros(num_examples, np.float32)
    kinds, noise_sources, utterances = [], [], []
    source_names, languages = [], []
    for i in range(num_examples):
        rng = np.random.default_rng(
            np.random.SeedSequence(seed, spawn_key=(split_index, i))
        )
        source, item = pool[int(rng.integers(len(pool)))]
        speech, begin, end = _speech(rng, item, source, length)
        kind = noises[int(rng.integers(len(noises)))]
        room[i] = rng.uniform() < room_probability
        rt60[i] = rng.uniform(*RT60_RANGE) if room[i] else 0.0
        response = _room(rng, float(rt60[i])) if room[i] else np.ones(1)
        extra = len(response) - 1  # samples lost to the room's onset
        total = length + extra
        origin = "codec2" if source == "codec2" else item[0]
        if kind == "music":
            sound, recordings = _music(rng, tracks, total)
        elif kind == "babble":
            sound, recordings = _babble(rng, prompts, item[1], total)
        elif kind == "colored":
            sound, recordings = _colored(rng, total, rng.uniform(0, 2)), ()
        elif kind == "hum":
            sound, recordings = _hum(rng, total), ()
        else:
            sound = _bursts(rng, total, begin + extra, end + extra)
            recordings = ()
        if room[i]:
            sound = _fft_convolve(sound, response)[extra:total]
        value = rng.uniform(low, high)
        speech_power = np.mean(speech[begin:end] ** 2)
        speech *= 10.0 ** (SPEECH_LEVEL_DB / 20) / math.sqrt(
            max(speech_power, 1e-20)
        )
        noise_power = max(np.mean(sound[begin:end] ** 2), 1e-20)
        sound *= math.sqrt(
            np.mean(speech[begin:end] ** 2) / noise_power / 10.0 ** (value / 10)
        )
        peak = max(
            np.max(np.abs(speech)),
            np.max(np.abs(sound)),
            np.max(np.abs(speech + sound)),
        )
        gain = min(1.0, PEAK / peak) if peak > 0 else 1.0
        clean[i] = speech * gain
        noise[i] = sound * gain
        np.add(clean[i], noise[i], out=noisy[i])
        snr[i] = value
        start[i], stop[i], scale[i] = begin, end, gain
        kinds.append(kind)
        noise_sources.append(recordings)
        utterances.append(f"{origin}/{item[1]}")
        source_names.append(source)
        languages.append(item[0])
    return NoisySpeech(
        clean=clean,
        noise=noise,
        noisy=noisy,
        snr=snr,
        start=start,
        stop=stop,
        scale=scale,
        noise_kind=tuple(kinds),
        noise_source=tuple(noise_sources),
        room=room,
        rt60=rt60,
        utterance=tuple(utterances),
        source=tuple(source_names),
        language=tuple(languages),
        split=split,
        seed=int(seed),
    )
