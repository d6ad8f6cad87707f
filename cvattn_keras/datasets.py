"""Built-in complex datasets (deterministic from a seed) and the MusicNet
loader. Every complex array is returned in the stacked layout
`[real | imag]` on the last axis, float32.

- `synthetic_music`: a MusicNet-like transcription task: polyphonic
  harmonic notes, complex STFT frames, multi-hot note labels per frame.
- `synthetic_modulation`: radio IQ sequences of standard digital
  modulations with random carrier phase, frequency offset and noise,
  labelled by modulation.
- `load_musicnet`: MusicNet features as preprocessed by the Complex
  Transformer pipeline (64 frames x [Re(2048) | Im(2048)], 128 notes).
"""

import os

import numpy as np

from cvattn_keras import _validation as check

__all__ = [
    "MODULATIONS",
    "load_musicnet",
    "synthetic_modulation",
    "synthetic_music",
]


def _check_positive(**values):
    for name, value in values.items():
        check.positive_int(value, name)


# ----------------------------------------------------------------------
# Synthetic music.
# ----------------------------------------------------------------------


def synthetic_music(
    num_samples=256,
    frames=32,
    bins=128,
    notes=24,
    lowest_note=60,
    sample_rate=4000,
    notes_per_sample=6,
    harmonics=6,
    noise=0.01,
    seed=0,
):
    """Polyphonic harmonic notes as complex STFT frames with note labels.

    Each sample is `frames` non-overlapping frames of `2 * bins` audio
    samples at `sample_rate`. About `notes_per_sample` notes (Poisson) start
    at random frames and last 2-12 frames; note `m` (MIDI `lowest_note + m`)
    sounds at `440 * 2**((midi - 69) / 12)` Hz with `harmonics` partials of
    amplitude `a / k`, random phases, a random amplitude `a` and an
    exponential decay. The frames are Hann-windowed and Fourier transformed;
    the first `bins` bins of each are the features. The label of a frame is
    1 for every note sounding in it.

    With the defaults (4 kHz, 256-sample frames, 15.6 Hz bins, notes C4 to
    B5) a sample is 2 seconds; 256 samples take about a second to make.

    Args:
        num_samples, frames, bins, notes: the array sizes.
        lowest_note: MIDI number of note 0.
        sample_rate: Hz.
        notes_per_sample: mean number of notes per sample.
        harmonics: partials per note.
        noise: standard deviation of white noise added to the audio.
        seed: the random seed: the same seed gives the same data.

    Returns:
        `(x, y)`: `x` float32 `(num_samples, frames, 2 * bins)` stacked
        spectra, `y` float32 `(num_samples, frames, notes)` multi-hot.
    """
    _check_positive(
        num_samples=num_samples,
        frames=frames,
        bins=bins,
        notes=notes,
        sample_rate=sample_rate,
        harmonics=harmonics,
    )
    rng = np.random.default_rng(seed)
    frame_length = 2 * bins
    t = np.arange(frames * frame_length) / sample_rate  # (L,)
    audio = noise * rng.standard_normal((num_samples, t.size))
    labels = np.zeros((num_samples, frames, notes), np.float32)
    for i in range(num_samples):
        for _ in range(max(1, rng.poisson(notes_per_sample))):
            note = rng.integers(notes)
            onset = rng.integers(frames)
            offset = min(frames, onset + rng.integers(2, 13))
            labels[i, onset:offset, note] = 1.0
            start, stop = onset * frame_length, offset * frame_length
            local = t[start:stop] - t[start]
            f0 = 440.0 * 2.0 ** ((lowest_note + note - 69) / 12.0)
            amplitude = rng.uniform(0.3, 1.0)
            envelope = amplitude * np.exp(-local / rng.uniform(0.2, 1.0))
            for k in range(1, harmonics + 1):
                if k * f0 >= sample_rate / 2:
                    break
                phase = rng.uniform(0, 2 * np.pi)
                audio[i, start:stop] += (
                    envelope / k * np.sin(2 * np.pi * k * f0 * local + phase)
                )
    window = np.hanning(frame_length)
    spectra = np.fft.rfft(
        audio.reshape(num_samples, frames, frame_length) * window, axis=-1
    )[..., :bins] / np.sqrt(frame_length)
    x = np.concatenate([spectra.real, spectra.imag], axis=-1)
    return x.astype(np.float32), labels


# ----------------------------------------------------------------------
# Synthetic modulation.
# ----------------------------------------------------------------------

MODULATIONS = ("bpsk", "qpsk", "8psk", "16qam", "64qam", "gfsk")


def _psk(order, symbols, offset=0.0):
    return np.exp(1j * (2 * np.pi * symbols / order + offset))


def _qam(order, symbols):
    side = int(round(np.sqrt(order)))
    levels = 2 * np.arange(side) - (side - 1)  # ..., -3, -1, 1, 3, ...
    points = levels[symbols % side] + 1j * levels[symbols // side]
    return points / np.sqrt(2 * (side**2 - 1) / 3)  # unit mean power


def _gfsk(bits, samples_per_symbol, bt=0.5, index=0.5):
    """Gaussian-filtered FSK: frequency pulses of +-1, Gaussian filter of
    bandwidth-time `bt`, modulation index `index`."""
    pulses = np.repeat(2.0 * bits - 1.0, samples_per_symbol, axis=-1)
    span = np.arange(-2 * samples_per_symbol, 2 * samples_per_symbol + 1)
    sigma = np.sqrt(np.log(2)) / (2 * np.pi * bt) * samples_per_symbol
    taps = np.exp(-0.5 * (span / sigma) ** 2)
    taps /= taps.sum()
    smooth = np.stack([np.convolve(p, taps, mode="same") for p in pulses])
    phase = np.pi * index * np.cumsum(smooth, axis=-1) / samples_per_symbol
    return np.exp(1j * phase)


def synthetic_modulation(
    num_samples=1200,
    length=128,
    token_length=8,
    modulations=MODULATIONS,
    samples_per_symbol=4,
    snr_db=(5.0, 20.0),
    phase_range=(0.0, 2 * np.pi),
    max_frequency_offset=0.002,
    seed=0,
):
    """Complex baseband IQ sequences of digital modulations.

    Each sample draws a modulation uniformly, random symbols (rectangular
    pulses of `samples_per_symbol`; GFSK is filtered in frequency), a carrier
    phase uniform in `phase_range`, a frequency offset uniform in
    `+-max_frequency_offset` cycles per sample, and white complex Gaussian
    noise at an SNR uniform in `snr_db`. Signals have unit mean power. The
    `length` samples are cut into `length / token_length` tokens of
    `token_length` complex samples: the sequence an attention model reads.

    Args:
        num_samples, length, token_length: sizes (`length` a multiple of
            `token_length`).
        modulations: names from `MODULATIONS`; the label is the index.
        samples_per_symbol: positive int.
        snr_db: `(low, high)` in dB.
        phase_range: `(low, high)` carrier phases in radians.
        max_frequency_offset: cycles per sample.
        seed: the random seed.

    Returns:
        `(x, y)`: `x` float32 `(num_samples, length // token_length,
        2 * token_length)` stacked, `y` int32 `(num_samples,)`.
    """
    _check_positive(
        num_samples=num_samples,
        length=length,
        token_length=token_length,
        samples_per_symbol=samples_per_symbol,
    )
    if length % token_length:
        raise ValueError(
            "`length` must be a multiple of `token_length`. Received: "
            f"length={length}, token_length={token_length}"
        )
    unknown = [m for m in modulations if m not in MODULATIONS]
    if unknown or not modulations:
        raise ValueError(
            f"`modulations` must name some of {list(MODULATIONS)}. "
            f"Received: modulations={modulations!r}"
        )
    rng = np.random.default_rng(seed)
    symbols_per_sample = -(-length // samples_per_symbol)
    labels = rng.integers(len(modulations), size=num_samples)
    signals = np.zeros((num_samples, length), np.complex128)
    for index, name in enumerate(modulations):
        rows = np.flatnonzero(labels == index)
        if rows.size == 0:
            continue
        shape = (rows.size, symbols_per_sample)
        if name == "gfsk":
            bits = rng.integers(2, size=shape)
            wave = _gfsk(bits, samples_per_symbol)
        else:
            order = {"bpsk": 2, "qpsk": 4, "8psk": 8, "16qam": 16, "64qam": 64}
            symbols = rng.integers(order[name], size=shape)
            if name.endswith("qam"):
                points = _qam(order[name], symbols)
            else:
                points = _psk(
                    order[name], symbols, np.pi / 4 * (name == "qpsk")
                )
            wave = np.repeat(points, samples_per_symbol, axis=-1)
        signals[rows] = wave[:, :length]
    n = np.arange(length)
    phase = rng.uniform(*phase_range, size=(num_samples, 1))
    offset = rng.uniform(-1, 1, size=(num_samples, 1)) * max_frequency_offset
    signals *= np.exp(1j * (2 * np.pi * offset * n + phase))
    snr = 10.0 ** (rng.uniform(*snr_db, size=(num_samples, 1)) / 10.0)
    noise = rng.standard_normal((2, num_samples, length))
    signals += (noise[0] + 1j * noise[1]) / np.sqrt(2 * snr)
    tokens = signals.reshape(num_samples, length // token_length, token_length)
    x = np.concatenate([tokens.real, tokens.imag], axis=-1)
    return x.astype(np.float32), labels.astype(np.int32)


# ----------------------------------------------------------------------
# MusicNet.
# ----------------------------------------------------------------------


def load_musicnet(path, frames=64, bins=2048, notes=128, mmap=True):
    """Loads MusicNet features preprocessed by the Complex Transformer
    pipeline.

    Each sample is `frames` STFT frames stored as `[Re(bins) | Im(bins)]`
    float32 (already this library's stacked layout, so no conversion) with
    `notes` multi-hot labels per frame. Accepted files:

    - a `.npz` archive with arrays `x` `(N, frames, 2 * bins)` and `y`
      `(N, frames, notes)`;
    - a directory holding `x.npy` and `y.npy` of those shapes (memory-mapped
      when `mmap=True`, so the full data set need not fit in memory).

    Returns:
        `(x, y)` float32 NumPy arrays. For a `tf.data` pipeline:
        `tf.data.Dataset.from_tensor_slices((x, y))`.

    Raises:
        ValueError: a missing file or array, or shapes that do not match.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        names = [os.path.join(path, f"{k}.npy") for k in ("x", "y")]
        missing = [n for n in names if not os.path.exists(n)]
        if missing:
            raise ValueError(
                f"A MusicNet directory holds x.npy and y.npy; missing: "
                f"{missing}"
            )
        x, y = (np.load(n, mmap_mode="r" if mmap else None) for n in names)
    elif path.endswith(".npz") and os.path.exists(path):
        with np.load(path) as archive:
            if not {"x", "y"} <= set(archive.files):
                raise ValueError(
                    f"{path} must hold arrays 'x' and 'y'; it holds "
                    f"{archive.files}"
                )
            x, y = archive["x"], archive["y"]
    else:
        raise ValueError(
            "`path` must be a .npz file or a directory with x.npy and y.npy. "
            f"Received: path={path!r}"
        )
    expected_x = (frames, 2 * bins)
    if x.ndim != 3 or tuple(x.shape[1:]) != expected_x:
        raise ValueError(
            f"MusicNet features must have shape (N, {frames}, {2 * bins}) "
            f"([Re({bins}) | Im({bins})] per frame). Received: {x.shape}"
        )
    if tuple(y.shape) != (x.shape[0], frames, notes):
        raise ValueError(
            f"MusicNet labels must have shape ({x.shape[0]}, {frames}, "
            f"{notes}). Received: {y.shape}"
        )
    return np.asarray(x, np.float32), np.asarray(y, np.float32)
