"""The music data: `synthetic_music` (a MusicNet-like transcription task:
polyphonic harmonic notes, complex STFT frames or the audio itself, with
multi-hot note labels per frame), `synthetic_music_stft` (the
`ComplexSTFT` that reproduces its spectra), `highest_audible_note` and
`load_musicnet` (MusicNet features as preprocessed by the Complex
Transformer pipeline)."""

import os
import zipfile
import zlib

import numpy as np

from cvattn_keras import _validation as check
from cvattn_keras.datasets._checks import _check_positive
from cvattn_keras.datasets._checks import _non_negative_finite
from cvattn_keras.datasets._checks import _non_negative_int

__all__ = [
    "highest_audible_note",
    "load_musicnet",
    "synthetic_music",
    "synthetic_music_stft",
]


def _midi_frequency(midi):
    return 440.0 * 2.0 ** ((midi - 69) / 12.0)


def highest_audible_note(bins, sample_rate):
    """The highest MIDI note whose fundamental lies in the first `bins` bins
    of `synthetic_music`'s spectra (bins of `sample_rate / (2 * bins)` Hz):
    `f0 < (bins - 1/2) * sample_rate / (2 * bins)`, below the Nyquist
    frequency."""
    bins = check.positive_int(bins, "bins")
    sample_rate = check.positive_int(sample_rate, "sample_rate")
    top = (bins - 0.5) * sample_rate / (2 * bins)
    midi = int(np.floor(69 + 12 * np.log2(top / 440.0)))
    while _midi_frequency(midi) >= top:  # the floor's rounding, if any
        midi -= 1
    while _midi_frequency(midi + 1) < top:
        midi += 1
    return midi


# ----------------------------------------------------------------------
# Synthetic music.
# ----------------------------------------------------------------------

_MUSIC_OUTPUTS = ("spectra", "waveform")


def synthetic_music_stft(bins=128):
    """A new `layers.ComplexSTFT` that turns `synthetic_music`'s waveform
    into exactly its spectra.

    `ComplexSTFT(2 * bins, 2 * bins, center=False, bins=(0, bins),
    normalized=True, window=np.hanning(2 * bins), name="stft")`: frames of
    `2 * bins` samples without overlap or centring, the symmetric Hann
    window (`np.hanning`, as the spectra's; the layer's `"hann"` is the
    periodic one), the first `bins` bins, scaled by `1 / sqrt(2 * bins)`.
    So `synthetic_music_stft(bins)(audio)` of `synthetic_music(...,
    bins=bins, output="waveform")` is `synthetic_music(..., bins=bins)`'s
    spectra to float32 rounding, frame for frame with the same labels.

    Any `ComplexSTFT(frame_length, frame_step, ...)` of one's own choice
    works too: pass it as `synthetic_music(..., output="waveform",
    stft=...)` and the labels follow its frames.

    Args:
        bins: positive int, `synthetic_music`'s `bins`.

    Returns:
        A new, unbuilt `ComplexSTFT` named `"stft"`.

    Raises:
        ValueError: `bins` not a positive int.

    Examples:
        >>> stft = synthetic_music_stft(bins=32)
        >>> audio, y = synthetic_music(
        ...     num_samples=2, frames=4, bins=32, output="waveform"
        ... )
        >>> audio.shape, y.shape, tuple(stft(audio).shape)
        ((2, 256), (2, 4, 24), (2, 4, 64))
    """
    from cvattn_keras.layers import ComplexSTFT

    bins = check.positive_int(bins, "bins")
    return ComplexSTFT(
        2 * bins,
        2 * bins,
        center=False,
        bins=(0, bins),
        normalized=True,
        window=np.hanning(2 * bins),
        name="stft",
    )


def _short_repr(value, limit=200):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _music_stft(stft, bins):
    """`synthetic_music`'s `stft` as a `ComplexSTFT` (`None`: the
    spectra's)."""
    from cvattn_keras.layers.stft import as_stft

    return synthetic_music_stft(bins) if stft is None else as_stft(stft)


def _frame_centres(stft, length, frames, bins):
    """The centre sample of each frame `stft` gives of `length` samples,
    the last sample for a centre past the end."""
    from cvattn_keras.stft import frame_centres

    centres = frame_centres(
        length, stft.frame_step, stft.fft_length, stft.center, stft.pad_mode
    )
    if centres is None:
        reflect = stft.center and stft.pad_mode == "reflect"
        need = (
            f"more than fft_length // 2 = {stft.fft_length // 2} samples "
            "(pad_mode='reflect')"
            if reflect
            else f"at least fft_length={stft.fft_length} samples"
        )
        raise ValueError(
            f"`stft` gives no frame of the audio: it needs {need}, and the "
            f"audio has frames * 2 * bins = {length}. Received: stft="
            f"ComplexSTFT(frame_length={stft.frame_length}, frame_step="
            f"{stft.frame_step}, fft_length={stft.fft_length}, center="
            f"{stft.center}, pad_mode={stft.pad_mode!r}), frames={frames}, "
            f"bins={bins}"
        )
    return centres


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
    output="spectra",
    stft=None,
):
    """Polyphonic harmonic notes as complex STFT frames (or as audio) with
    note labels.

    Each sample is `frames` non-overlapping frames of `2 * bins` audio
    samples at `sample_rate`. About `notes_per_sample` notes (Poisson) start
    at random frames and last 2-12 frames; note `m` (MIDI `lowest_note + m`)
    sounds at `440 * 2**((midi - 69) / 12)` Hz with `harmonics` partials of
    amplitude `a / k`, random phases, a random amplitude `a` and an
    exponential decay. The frames are windowed (the symmetric Hann window,
    `np.hanning`) and Fourier transformed, scaled by `1 / sqrt(2 * bins)`;
    the first `bins` bins of each are the features. The label of a frame is
    1 for every note sounding in it. A note stops (sound and label) at the
    first frame that starts after it has decayed by 60 dB, and every note's
    fundamental lies inside the returned bins (see `highest_audible_note`),
    so every label is audible in the spectra.

    With the defaults (4 kHz, 256-sample frames, 15.6 Hz bins, notes C4 to
    B5) a sample is 2 seconds; 256 samples take about a second to make.

    `output="waveform"` returns the audio instead: the time-domain signal
    (noise included) the spectra are computed from, for a model whose
    first layer is a `layers.ComplexSTFT` (e.g. `models.music_classifier(
    ..., stft=...)`), with the labels aligned to the frames of `stft`. A
    note sounds on the samples `[onset * 2 * bins, offset * 2 * bins)` it
    is rendered on; the label of STFT frame `t` is 1 for every note
    sounding at the frame's centre sample, `c_t = t * frame_step` when
    `stft.center`, `t * frame_step + fft_length // 2` otherwise (a centre
    past the end of the audio counts as the last sample). The random draws
    do not depend on `output`: the same seed gives the same music either
    way. With the default `stft`, `synthetic_music_stft(bins)`, the labels
    are the spectra's and `stft(audio)` is the spectra to float32
    rounding.

    Args:
        num_samples: the number of samples (an array size).
        frames: the frames per sample (an array size).
        bins: the frequency bins per frame (an array size).
        notes: the number of notes, the labels per frame (an array size).
        lowest_note: MIDI number (int >= 0) of note 0.
        sample_rate: Hz.
        notes_per_sample: mean number of notes per sample (finite, >= 0;
            every sample has at least one note).
        harmonics: partials per note (those at or above the Nyquist
            frequency are left out).
        noise: standard deviation of white noise added to the audio
            (finite, >= 0).
        seed: the random seed, an int >= 0: the same seed gives the same
            data.
        output: `"spectra"` (default) or `"waveform"`, as above.
        stft: with `output="waveform"` only, the `layers.ComplexSTFT` the
            labels are aligned to: a layer or a dict of its `get_config()`.
            `None` (default): `synthetic_music_stft(bins)`, the spectra's
            own frames. It must give at least one frame of the `frames * 2
            * bins` samples.

    Returns:
        With `output="spectra"`, `(x, y)`: `x` float32 `(num_samples,
        frames, 2 * bins)` stacked spectra, `y` float32 `(num_samples,
        frames, notes)` multi-hot.
        With `output="waveform"`, `(audio, y)`: `audio` float32
        `(num_samples, frames * 2 * bins)`, `y` float32 `(num_samples,
        stft_frames, notes)` multi-hot: `stft_frames`, the layer's output
        frames, is `cvattn_keras.stft.frame_count(frames * 2 * bins,
        stft.frame_step, stft.fft_length, stft.center)`.

    Raises:
        ValueError: an argument out of its range; a highest note
            `lowest_note + notes - 1` above `highest_audible_note(bins,
            sample_rate)`; `output` not `"spectra"` or `"waveform"`; `stft`
            given with `output="spectra"`, neither a `ComplexSTFT` nor a
            dict, a config `ComplexSTFT.from_config` rejects, or giving no
            frame of the audio.
    """
    _check_positive(
        num_samples=num_samples,
        frames=frames,
        bins=bins,
        notes=notes,
        sample_rate=sample_rate,
        harmonics=harmonics,
    )
    _non_negative_int(lowest_note, "lowest_note")
    _non_negative_finite(notes_per_sample, "notes_per_sample")
    _non_negative_finite(noise, "noise")
    _non_negative_int(seed, "seed")
    top = highest_audible_note(bins, sample_rate)
    if lowest_note + notes - 1 > top:
        raise ValueError(
            "The highest note, `lowest_note + notes - 1` = "
            f"{lowest_note + notes - 1} (fundamental "
            f"{_midi_frequency(lowest_note + notes - 1):.0f} Hz), must be at "
            f"most MIDI {top} ({_midi_frequency(top):.0f} Hz), the highest "
            f"note the spectra can show: `bins` bins of "
            f"{sample_rate / (2 * bins):.3g} Hz at `sample_rate` reach "
            f"{(bins - 1) * sample_rate / (2 * bins):.0f} Hz. Lower `notes` "
            "or `lowest_note`, or raise `sample_rate`. Received: "
            f"lowest_note={lowest_note}, notes={notes}, bins={bins}, "
            f"sample_rate={sample_rate}"
        )
    if not isinstance(output, str) or output not in _MUSIC_OUTPUTS:
        raise ValueError(
            f"`output` must be one of {_MUSIC_OUTPUTS}. Received: "
            f"output={output!r}"
        )
    if output == "spectra" and stft is not None:
        raise ValueError(
            "`stft` aligns the labels of output='waveform'; the spectra's "
            "frames are fixed. Pass output='waveform' or stft=None. "
            f"Received: stft={_short_repr(stft)}, output={output!r}"
        )
    if output == "waveform":
        stft = _music_stft(stft, bins)
        centres = _frame_centres(stft, frames * 2 * bins, frames, bins)
    rng = np.random.default_rng(seed)
    frame_length = 2 * bins
    frame_seconds = frame_length / sample_rate
    t = np.arange(frames * frame_length) / sample_rate  # (L,)
    audio = noise * rng.standard_normal((num_samples, t.size))
    labels = np.zeros((num_samples, frames, notes), np.float32)
    sounding = []  # (sample, note, first audio sample, end), per note
    for i in range(num_samples):
        for _ in range(max(1, rng.poisson(notes_per_sample))):
            note = rng.integers(notes)
            onset = rng.integers(frames)
            offset = min(frames, onset + rng.integers(2, 13))
            f0 = _midi_frequency(lowest_note + note)
            amplitude = rng.uniform(0.3, 1.0)
            decay = rng.uniform(0.2, 1.0)
            # The note ends (label and sound) once it has decayed by 60 dB
            # at the start of a frame, so that every labelled frame hears
            # it. Never earlier than the drawn length with the defaults.
            audible = int(np.ceil(decay * np.log(1000.0) / frame_seconds))
            offset = min(offset, onset + max(1, audible))
            labels[i, onset:offset, note] = 1.0
            start, stop = onset * frame_length, offset * frame_length
            sounding.append((i, note, start, stop))
            local = t[start:stop] - t[start]
            envelope = amplitude * np.exp(-local / decay)
            for k in range(1, harmonics + 1):
                if k * f0 >= sample_rate / 2:
                    break
                phase = rng.uniform(0, 2 * np.pi)
                audio[i, start:stop] += (
                    envelope / k * np.sin(2 * np.pi * k * f0 * local + phase)
                )
    if output == "waveform":
        labels = np.zeros((num_samples, centres.size, notes), np.float32)
        for i, note, start, stop in sounding:
            labels[i, (centres >= start) & (centres < stop), note] = 1.0
        return audio.astype(np.float32), labels
    window = np.hanning(frame_length)
    spectra = np.fft.rfft(
        audio.reshape(num_samples, frames, frame_length) * window, axis=-1
    )[..., :bins] / np.sqrt(frame_length)
    x = np.concatenate([spectra.real, spectra.imag], axis=-1)
    return x.astype(np.float32), labels


# ----------------------------------------------------------------------
# MusicNet.
# ----------------------------------------------------------------------


def load_musicnet(path, frames=64, bins=2048, notes=128, mmap=True):
    """Loads MusicNet features preprocessed by the Complex Transformer
    pipeline.

    Each sample is `frames` STFT frames stored as `[Re(bins) | Im(bins)]`
    float32 (already this library's stacked layout, so no conversion) with
    `notes` multi-hot labels per frame: by default the pipeline's 11-kHz
    audio, unwindowed 4096-point FFTs 512 samples apart, their first 2048
    bins, 64 frames per sample (the documentation's "Real MusicNet" has
    the whole preprocessing and the `ComplexSTFT` that reproduces it).
    Accepted files:

    - a `.npz` archive with arrays `x` `(N, frames, 2 * bins)` and `y`
      `(N, frames, notes)`;
    - a directory holding `x.npy` and `y.npy` of those shapes (memory-mapped
      when `mmap=True`, so the full data set need not fit in memory).

    Returns:
        `(x, y)` float32 NumPy arrays. For a `tf.data` pipeline:
        `tf.data.Dataset.from_tensor_slices((x, y))`.

    Raises:
        ValueError: a missing file or array; a file that NumPy cannot read
            (not an `.npy`/`.npz` file, pickled data, truncated or corrupt),
            named in the message; arrays that are not numbers; shapes that
            do not match.
    """
    _check_positive(frames=frames, bins=bins, notes=notes)
    try:
        path = os.fspath(path)
    except TypeError:
        raise ValueError(
            "`path` must be a .npz file or a directory with x.npy and y.npy. "
            f"Received: path={path!r}"
        ) from None
    if os.path.isdir(path):
        names = [os.path.join(path, f"{k}.npy") for k in ("x", "y")]
        missing = [n for n in names if not os.path.exists(n)]
        if missing:
            raise ValueError(
                f"A MusicNet directory holds x.npy and y.npy; missing: "
                f"{missing}"
            )
        x, y = (
            _read(n, lambda n=n: np.load(n, mmap_mode="r" if mmap else None))
            for n in names
        )
    elif path.endswith(".npz") and os.path.isfile(path):
        x, y = _read(path, lambda: _read_archive(path))
    else:
        raise ValueError(
            "`path` must be a .npz file or a directory with x.npy and y.npy. "
            f"Received: path={path!r}"
        )
    for name, array in (("features 'x'", x), ("labels 'y'", y)):
        if array.dtype.kind not in "biuf":
            raise ValueError(
                f"MusicNet {name} must be numbers; {path} holds dtype "
                f"{array.dtype}"
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


def _read_archive(path):
    # Opened here, so that the file is closed when NumPy fails part-way.
    with open(path, "rb") as file:
        archive = np.load(file)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ValueError("it holds one array, not an .npz archive")
        with archive:
            if not {"x", "y"} <= set(archive.files):
                raise _MissingArrays(
                    f"{path} must hold arrays 'x' and 'y'; it holds "
                    f"{archive.files}"
                )
            return archive["x"], archive["y"]


class _MissingArrays(ValueError):
    pass


# What NumPy raises on a damaged file: BadZipFile (a truncated or corrupt
# archive), ValueError (pickled data, a truncated array, a bad header),
# OSError/EOFError (short reads), zlib.error (a damaged compressed member).
_READ_ERRORS = (zipfile.BadZipFile, ValueError, OSError, EOFError, zlib.error)


def _read(path, load):
    try:
        return load()
    except _MissingArrays:
        raise
    except _READ_ERRORS as error:
        raise ValueError(
            f"Cannot read the MusicNet file {path}: it is not a valid NumPy "
            f"{os.path.splitext(path)[1]} file or it is truncated or "
            f"corrupt ({type(error).__name__}: {error})"
        ) from error
