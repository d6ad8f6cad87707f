"""The short-time Fourier transform on stacked tensors: the mathematics
behind `layers.ComplexSTFT` and `layers.ComplexISTFT`.

Conventions (numpy's and librosa's; `docs`: audio.md):

- `X[t, k] = sum_n x_pad[t * frame_step + n] w_N[n] exp(-2 pi i k n / N)`
  with `N = fft_length`; the window `w` (`frame_length` samples, periodic
  Hann by default) is centred in `N` samples (`w_N`, zeros either side,
  `(N - frame_length) // 2` on the left, as librosa's `pad_center` and
  `keras.ops.stft`).
- Centred (`center=True`): `x_pad` is `x` padded by `N // 2` samples on
  each side (zeros or a reflection); `1 + (L + 2 (N // 2) - N) //
  frame_step` frames, which is `1 + L // frame_step` for an even `N`.
  Otherwise `x_pad = x` and `1 + (L - N) // frame_step` frames.
- Stacked output: `(B, frames, 2F)`, the real parts of the bins `[low,
  high)` then their imaginary parts (`F = high - low`).

The NumPy helpers build the kernels in float64; the `keras.ops` functions
take and return tensors of any backend.
"""

import numbers

import numpy as np
from keras import ops

from cvattn_keras import _validation as check

WINDOWS = ("hann", "hamming", "rectangular")
"""The window names (`window=`); an array of `frame_length` numbers is
also accepted.
"""
PAD_MODES = ("constant", "reflect")
"""The `pad_mode` choices."""
IMPLEMENTATIONS = ("auto", "conv", "fft")
"""The `implementation` choices."""

AUTO_FFT_MIN_LENGTH = 256
"""`implementation="auto"` takes the FFT route from this `fft_length`
on (the convolution below it): see `layers.ComplexSTFT` for the
figures.
"""
AUTO_RFFT2D_MIN_LENGTH = 512
"""In a float TFLite file, `implementation="auto"` takes the builtin
RFFT2D from this power-of-two `fft_length` on (LiteRT's crossover;
the figures are in `layers.ComplexSTFT`).
"""

NOLA_TOLERANCE = 1e-10
"""The envelope of the squared window below this fraction of its peak
counts as zero (`check_nola`; scipy.signal.check_NOLA's tolerance is
1e-10, absolute).
"""


# --------------------------------------------------------------------------
# Arguments.
# --------------------------------------------------------------------------


def window_array(window, frame_length):
    """The analysis window as a float64 NumPy array of `frame_length`.

    `window` is `"hann"` or `"hamming"` (periodic, as `scipy.signal.
    get_window` and `keras.ops.stft`), `"rectangular"` (ones), or a 1-D
    array (or list) of `frame_length` finite numbers.
    """
    n = np.arange(frame_length)
    if isinstance(window, str):
        if window == "hann" and frame_length == 1:
            # The periodic Hann window of one sample is 0: no transform.
            raise ValueError(
                "window='hann' of frame_length 1 is all zero; use "
                "window='rectangular' or a longer frame. Received: "
                f"window={window!r}, frame_length={frame_length}"
            )
        if window == "hann":
            return 0.5 - 0.5 * np.cos(2 * np.pi * n / frame_length)
        if window == "hamming":
            return 0.54 - 0.46 * np.cos(2 * np.pi * n / frame_length)
        if window == "rectangular":
            return np.ones(frame_length)
        raise ValueError(
            f"`window` must be one of {WINDOWS} or an array of frame_length "
            f"({frame_length}) numbers. Received: window={window!r}"
        )
    try:
        array = np.asarray(window, dtype="float64")
    except (TypeError, ValueError):
        array = None
    if array is None or array.shape != (frame_length,):
        shape = None if array is None else array.shape
        raise ValueError(
            f"`window` must be one of {WINDOWS} or a 1-D array of "
            f"frame_length ({frame_length}) numbers. Received: window of "
            f"shape {shape}"
        )
    if not np.all(np.isfinite(array)) or not np.any(array):
        raise ValueError(
            "`window` must hold finite numbers, not all zero. Received: "
            f"window={window!r}"
        )
    return array


def resolve_bins(bins, fft_length):
    """`(low, high)` from `bins` (`None`: all `fft_length // 2 + 1`)."""
    count = fft_length // 2 + 1
    if bins is None:
        return 0, count
    try:
        low, high = bins
    except (TypeError, ValueError):
        low = high = None
    ok = all(
        isinstance(b, numbers.Integral) and not isinstance(b, bool)
        for b in (low, high)
    )
    if not ok or not 0 <= low < high <= count:
        raise ValueError(
            "`bins` must be a pair (low, high) of ints with 0 <= low < high "
            f"<= fft_length // 2 + 1 = {count} (fft_length={fft_length}). "
            f"Received: bins={bins!r}"
        )
    return int(low), int(high)


def check_sizes(frame_length, frame_step, fft_length, allow_gaps):
    """Validates the sizes; returns `(frame_length, frame_step,
    fft_length)` with `fft_length` defaulting to `frame_length`."""
    frame_length = check.positive_int(frame_length, "frame_length")
    frame_step = check.positive_int(frame_step, "frame_step")
    fft_length = check.positive_int(fft_length, "fft_length", allow_none=True)
    fft_length = frame_length if fft_length is None else fft_length
    if fft_length < frame_length:
        raise ValueError(
            "`fft_length` must be at least `frame_length`. Received: "
            f"fft_length={fft_length}, frame_length={frame_length}"
        )
    if frame_step > frame_length and not allow_gaps:
        raise ValueError(
            "`frame_step` larger than `frame_length` skips samples between "
            "frames; pass `allow_gaps=True` if that is meant. Received: "
            f"frame_step={frame_step}, frame_length={frame_length}"
        )
    return frame_length, frame_step, fft_length


def frame_count(length, frame_step, fft_length, center):
    """The number of frames of a waveform of `length` samples (`None` when
    `length` is `None`; 0 or less when too short without centring)."""
    if length is None:
        return None
    if center:
        length = length + 2 * (fft_length // 2)
    return 1 + (length - fft_length) // frame_step


def frame_centres(length, frame_step, fft_length, center, pad_mode):
    """The centre sample of each frame of a waveform of `length` samples
    (`t * frame_step` centred, `t * frame_step + fft_length // 2`
    otherwise; a centre past the end counts as the last sample, as
    `ComplexSTFT`'s frame mask counts it), an int array; `None` when the
    waveform gives no frame (too short, or at most `fft_length // 2`
    samples with `pad_mode="reflect"`). For labels aligned to frames."""
    count = frame_count(length, frame_step, fft_length, center)
    reflect = center and pad_mode == "reflect"
    if count < 1 or (reflect and length <= fft_length // 2):
        return None
    offset = 0 if center else fft_length // 2
    return np.minimum(np.arange(count) * frame_step + offset, length - 1)


def window_offset(frame_length, fft_length):
    """Where the window starts in its `fft_length` frame."""
    return (fft_length - frame_length) // 2


# --------------------------------------------------------------------------
# Kernels (NumPy, float64).
# --------------------------------------------------------------------------


def dft_kernels(window, fft_length, bins, normalized=False):
    """The forward kernels `(kernel_real, kernel_imag)`, each `(frame_length,
    F)`: `w[n] cos(2 pi k (n + o) / N)` and `-w[n] sin(...)` for the bins
    `k` in `[low, high)`, `o` the window's offset in its frame (so the
    phase is that of the frame's start, as numpy's). Times `1 / sqrt(N)`
    when `normalized`."""
    window = np.asarray(window, "float64")
    n = np.arange(window.shape[0]) + window_offset(window.shape[0], fft_length)
    k = np.arange(*bins)
    # Exact integer phases, reduced mod N before the float product.
    angle = 2 * np.pi * (np.outer(n, k) % fft_length) / fft_length
    scale = fft_length**-0.5 if normalized else 1.0
    return (
        scale * window[:, None] * np.cos(angle),
        -scale * window[:, None] * np.sin(angle),
    )


def inverse_dft_kernels(window, fft_length, bins, normalized=False):
    """The inverse kernels `(kernel_real, kernel_imag)`, each `(frame_length,
    F)`: one frame `y[n] = w[n] irfft(X)[n + o]` (the synthesis window
    applied) is `sum_k Re X[k] kernel_real[n, k] + Im X[k] kernel_imag[n,
    k]`. The weight of bin `k` is `c_k / N` (`c_k = 1` for bin 0 and,
    for an even `N`, bin `N / 2`; 2 for the others: each stands for
    itself and its conjugate). As `numpy.fft.irfft`, the imaginary parts
    of bins 0 and `N / 2` are ignored. Bins outside `bins` count as zero."""
    window = np.asarray(window, "float64")
    n = np.arange(window.shape[0]) + window_offset(window.shape[0], fft_length)
    k = np.arange(*bins)
    weight = np.where((k == 0) | (2 * k == fft_length), 1.0, 2.0) / fft_length
    if normalized:
        weight = weight * fft_length**0.5
    angle = 2 * np.pi * (np.outer(n, k) % fft_length) / fft_length
    return (
        window[:, None] * weight * np.cos(angle),
        -window[:, None] * weight * np.sin(angle),
    )


def overlap_envelope(window, frame_step, frames):
    """The squared window overlap-added over `frames` frames: `(frames - 1)
    * frame_step + frame_length` samples, float64."""
    window = np.asarray(window, "float64")
    size = window.shape[0]
    envelope = np.zeros((frames - 1) * frame_step + size)
    for t in range(frames):
        envelope[t * frame_step : t * frame_step + size] += window**2
    return envelope


def check_nola(window, frame_step, names):
    """Raises when the squared window overlap-added at `frame_step` has
    zeros in its steady state (the NOLA condition fails): those samples
    cannot be recovered. `names` echoes the arguments in the message."""
    window = np.asarray(window, "float64")
    squares = window**2
    periodic = np.zeros(frame_step)
    for start in range(0, squares.shape[0], frame_step):
        part = squares[start : start + frame_step]
        periodic[: part.shape[0]] += part
    if periodic.min() <= NOLA_TOLERANCE * squares.max():
        raise ValueError(
            "The window overlap-added at this frame_step has zeros, so the "
            "samples there cannot be recovered (the NOLA condition fails: "
            "use a smaller frame_step, e.g. frame_length // 2 or less for "
            f"a Hann window, or another window). Received: {names}"
        )


# --------------------------------------------------------------------------
# The transforms (keras.ops).
# --------------------------------------------------------------------------


def pad_waveform(x, fft_length, pad_mode):
    """Centring: `(B, L, 1)` -> `(B, L + 2 (N // 2), 1)`, zeros or a
    reflection (without the edge sample, numpy's and librosa's
    `"reflect"`). Rank 3: TFLite's GPU delegate pads rank 3 and 4 only."""
    half = fft_length // 2
    return ops.pad(x, ((0, 0), (half, half), (0, 0)), mode=pad_mode)


def stft_conv(x, kernel_real, kernel_imag, frame_step, fft_length):
    """The STFT as one strided convolution: `x` `(B, L_pad, 1)` (already
    centred when meant) -> stacked `(B, frames, 2F)`.

    The kernels `(frame_length, F)` cover only the window's nonzero span
    of each frame, which starts `o = (N - frame_length) // 2` samples into
    it: the waveform is cut by `o` on the left and by the frame's rest on
    the right (no slice when both are 0; rank 3, which the GPU delegate
    slices), so the convolution counts `1 + (L_pad - N) // frame_step`
    frames, as the FFT route does."""
    frame_length = kernel_real.shape[0]
    offset = window_offset(frame_length, fft_length)
    rest = fft_length - offset - frame_length
    if offset or rest:
        x = x[:, offset : (-rest if rest else None)]  # (B, L_pad - N + fl, 1)
    kernel = ops.concatenate([kernel_real, kernel_imag], axis=1)  # (fl, 2F)
    return ops.conv(
        x,
        ops.expand_dims(kernel, 1),  # (fl, 1, 2F)
        strides=frame_step,
        padding="valid",
        data_format="channels_last",
    )  # (B, frames, 2F)


def stft_fft(x, window, frame_step, fft_length, bins, normalized=False):
    """The STFT by the FFT: `x` `(B, L_pad, 1)` (already centred when meant)
    -> stacked `(B, frames, 2F)`. `keras.ops.stft` without its own
    centring frames the waveform and takes `rfft` of each windowed frame
    (the window centred in `fft_length`, as here)."""
    frame_length = int(window.shape[0])
    real, imag = ops.stft(
        x[..., 0],
        sequence_length=frame_length,
        sequence_stride=frame_step,
        fft_length=fft_length,
        window=window,
        center=False,
    )  # each (B, frames, N // 2 + 1)
    low, high = bins
    outputs = ops.concatenate(
        [real[..., low:high], imag[..., low:high]], axis=-1
    )
    if normalized:
        outputs = outputs * (fft_length**-0.5)
    return outputs


def split_window(window, fft_length):
    """The window centred in its `fft_length` frame (`w_N`, float64) as
    two float16-exact parts `(high, low)`, `high + low = w_N` to about
    2^-23 of each value: a float16 TFLite file stores every float
    constant in float16, which would round the window itself to 2^-11
    (76 dB of the STFT); stored in two parts, each exact in float16, it
    keeps float32's precision (`stft_fft_for_export`)."""
    window = np.asarray(window, "float64")
    frame = np.zeros(fft_length)
    offset = window_offset(window.shape[0], fft_length)
    frame[offset : offset + window.shape[0]] = window
    high = frame.astype("float16").astype("float64")
    low = (frame - high).astype("float16").astype("float64")
    return high, low


def stft_fft_for_export(x, window, frame_step, fft_length, bins, normalized):
    """As `stft_fft`, for a float16 TFLite file (the builtin RFFT2D): the
    frames gathered, times the two float16-exact parts of the window
    (`split_window`, NumPy) added in float32, then `rfft`. The file then
    computes the STFT in float32 (measured 144 dB against a float64
    NumPy STFT, as a float32 file's 146; 76 dB with the window stored in
    float16), at about 0.15 ms more on LiteRT (one thread, 16,000
    samples, 512 points: 0.92 ms against 0.79 ms)."""
    signal = x[..., 0]  # (B, L_pad)
    length = signal.shape[1]
    if length is None:
        length = ops.shape(signal)[1]
    count = (length - fft_length) // frame_step + 1
    starts = ops.expand_dims(ops.arange(count) * frame_step, 1)  # (T, 1)
    index = starts + ops.expand_dims(ops.arange(fft_length), 0)  # (T, N)
    frames = ops.take(signal, index, axis=1)  # (B, T, N)
    high, low = split_window(window, fft_length)
    high = ops.convert_to_tensor(high, "float32")
    low = ops.convert_to_tensor(low, "float32")
    real, imag = ops.rfft(frames * high + frames * low)  # (B, T, N // 2 + 1)
    low_bin, high_bin = bins
    outputs = ops.concatenate(
        [real[..., low_bin:high_bin], imag[..., low_bin:high_bin]], axis=-1
    )
    if normalized:
        outputs = outputs * (fft_length**-0.5)
    return outputs


def istft_conv(inputs, kernel_real, kernel_imag, frame_step):
    """The windowed inverse DFTs of stacked frames `(B, T, 2F)`,
    overlap-added: `(B, (T - 1) * frame_step + frame_length)`, from the
    window's start in the first frame. One transposed convolution with the
    inverse kernels `(frame_length, 2F)` (a builtin TRANSPOSE_CONV in
    TFLite, which has no IRFFT)."""
    kernel = ops.concatenate([kernel_real, kernel_imag], axis=1)  # (fl, 2F)
    return ops.conv_transpose(
        inputs,  # (B, T, 2F)
        ops.expand_dims(kernel, 1),  # (fl, 1, 2F)
        strides=frame_step,
        padding="valid",
        data_format="channels_last",
    )[..., 0]  # (B, (T - 1) * step + fl)


def istft_fft(inputs, window, frame_step, fft_length, bins, normalized):
    """As `istft_conv`, by `keras.ops.irfft` of each frame (the bins
    outside `bins` zero), the window, and `overlap_add`."""
    frame_length = int(window.shape[0])
    low, high = bins
    count = fft_length // 2 + 1
    real, imag = ops.split(inputs, 2, axis=-1)  # each (B, T, F)
    if (low, high) != (0, count):
        widths = ((0, 0), (0, 0), (low, count - high))
        real, imag = ops.pad(real, widths), ops.pad(imag, widths)
    frames = ops.irfft((real, imag), fft_length)  # (B, T, N)
    if normalized:
        frames = frames * (fft_length**0.5)
    offset = window_offset(frame_length, fft_length)
    frames = frames[..., offset : offset + frame_length] * window  # (B, T, fl)
    return overlap_add(frames, frame_step)


def overlap_add(frames, frame_step):
    """`(B, T, S)` frames summed at `frame_step`: `(B, (T - 1) *
    frame_step + S)`. Each frame is cut into `R = ceil(S / frame_step)`
    chunks of `frame_step` samples; chunk `r` of frame `t` lands in block
    `t + r`, so the output blocks are the sum of `R` shifted copies
    (pads and adds only: no scatter)."""
    size = frames.shape[-1]
    parts = -(-size // frame_step)
    extra = parts * frame_step - size
    if extra:
        frames = ops.pad(frames, ((0, 0), (0, 0), (0, extra)))
    batch, count = ops.shape(frames)[0], ops.shape(frames)[1]
    chunks = ops.reshape(frames, (batch, count, parts, frame_step))
    blocks = 0
    for r in range(parts):
        blocks = blocks + ops.pad(
            chunks[:, :, r], ((0, 0), (r, parts - 1 - r), (0, 0))
        )  # (B, T + R - 1, step)
    signal = ops.reshape(blocks, (batch, -1))  # (B, (T + R - 1) * step)
    return signal[:, : (-extra if extra else None)]


def normalize_and_trim(
    signal, window, frame_step, fft_length, center, length=None
):
    """The overlap-added frames `(B, (T - 1) * frame_step + frame_length)`
    divided by the overlap-added squared window and cut to the waveform:
    `(B, L)`, `L = length` (cut, or padded with zeros at the end) or by
    default `(T - 1) * frame_step + N - 2 (N // 2)` centred, `(T - 1) *
    frame_step + N` otherwise. Samples no window reaches (the first and
    last few without centring) are 0. `window` is the NumPy window.

    With a static `T` (always in a TFLite file) the division is a product
    with the reciprocal envelope, a NumPy constant cut as the signal is:
    integer kernels have no usable DIV (int8 fails at run time, int16x8
    has none), and a constant MUL operand quantizes."""
    frame_length = window.shape[0]
    static = signal.shape[1]
    if static is not None:
        count = (static - frame_length) // frame_step + 1
        envelope = overlap_envelope(window, frame_step, count)
        reached = envelope > NOLA_TOLERANCE * envelope.max()
        inverse = np.where(reached, 1 / np.where(reached, envelope, 1), 0)
        inverse = ops.convert_to_tensor(inverse[None], "float32")
        trim = _trimmer(frame_length, fft_length, center, length)
        return trim(signal) * trim(inverse)
    # A length known at run time only: the envelope in the graph, by the
    # same overlap-add, of the squared window.
    window = ops.convert_to_tensor(window, signal.dtype)
    # (1, 1, fl), by reshape: a new-axis slice (`[..., None]`) of a tensor
    # with two unknown dimensions has no TFLite builtin.
    squares = ops.reshape(window**2, (1, 1, frame_length))
    count = (ops.shape(signal)[1] - frame_length) // frame_step + 1
    envelope = overlap_add(ops.repeat(squares, count, axis=1), frame_step)
    # As the static path: samples the windows barely reach (the envelope
    # below NOLA_TOLERANCE of its peak, the edges without centring) are
    # 0, not a division by almost nothing; the double `where` keeps the
    # gradient finite there.
    reached = envelope > NOLA_TOLERANCE * ops.max(envelope)
    inverse = ops.where(reached, 1 / ops.where(reached, envelope, 1), 0)
    signal = signal * inverse
    return _trimmer(frame_length, fft_length, center, length)(signal)


def _trimmer(frame_length, fft_length, center, length):
    """The cut from the overlap-added frames (from the window's start in
    the first frame) to the waveform, as a function of `(B, S)`."""
    offset = window_offset(frame_length, fft_length)
    rest = fft_length - offset - frame_length

    def trim(signal):
        if center:
            # Drop the N // 2 samples of padding on the left (and on the
            # right by default; a `length` may reach into them).
            signal = signal[:, fft_length // 2 - offset :]
            right = fft_length // 2 - rest
            if length is None:
                return signal[:, : (-right if right else None)]
        else:
            signal = ops.pad(signal, ((0, 0), (offset, rest)))
            if length is None:
                return signal
        return fit_length(signal, length)

    return trim


def fit_length(signal, length):
    """`(B, L)` cut or padded with zeros at the end to `length` samples."""
    static = signal.shape[1]
    if static is not None:
        if static < length:
            signal = ops.pad(signal, ((0, 0), (0, length - static)))
        return signal[:, :length]
    return ops.pad(signal, ((0, 0), (0, length)))[:, :length]
