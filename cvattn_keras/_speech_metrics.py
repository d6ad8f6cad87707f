"""The speech-enhancement scores of `cvattn_keras.metrics`, one value per
clip: SI-SDR and SNR in NumPy (float64), and PESQ, STOI and DNSMOS through
the `speech` extra's packages (`pesq`, `pystoi`, `speechmos`), imported
only when called.

Every function takes one clip `(L,)`, which gives Python floats, or a
batch of clips `(N, L)`, which gives float64 arrays `(N,)`, one value per
row. A bad argument raises a `ValueError` naming it and showing what was
received (for a batch, the rows at fault).
"""

import importlib
import numbers
import warnings

import numpy as np

from cvattn_keras import _validation

_INSTALL = 'pip install "cvattn-keras[speech]"'

# What pystoi warns (and returns 1e-5 for) when the reference keeps fewer
# than 30 frames after its silent frames are dropped.
_STOI_TOO_SHORT = "Not enough STFT frames"
_STOI_MIN_10K = 4097
# Our names of speechmos' DNSMOS scores, in the order returned.
_DNSMOS_KEYS = {
    "sig": "sig_mos",
    "bak": "bak_mos",
    "ovrl": "ovrl_mos",
    "p808": "p808_mos",
}


def si_sdr(reference, estimate):
    """Scale-invariant signal-to-distortion ratio in dB (Le Roux et al.,
    2019, "SDR - half-baked or well done?"), the SI-SNR of the
    speech-enhancement tables.

    Both signals are made zero-mean; the estimate is projected on the
    reference, `target = (<estimate, reference> / ||reference||^2)
    reference`, and `SI-SDR = 10 log10(||target||^2 / ||residual||^2)`
    with `residual = estimate - target`. So it ignores the estimate's
    gain and DC offset (and the reference's). In float64, each clip
    scaled by its peak first (no overflow or underflow).

    Edge values, as the formula gives them (never NaN):

    - `inf` for an estimate that is the reference up to gain and offset
      with no residual at all (exactly equal clips); a scaled copy
      typically scores about 300 dB, the float64 rounding floor;
    - `-inf` for an estimate with nothing along the reference (orthogonal
      to it), a silent or constant estimate included (its projection and
      residual are both 0: no part of the reference was recovered).

    Args:
        reference: the clean clip `(L,)` or clips `(N, L)`, real and
            finite, not constant (a constant clip is silent once its mean
            is removed: SI-SDR is undefined there).
        estimate: the enhanced clip(s), the same shape.

    Returns:
        a float for `(L,)`, float64 `(N,)` for `(N, L)`.

    Example:

    >>> reference = np.array([1.0, -1.0, 1.0, -1.0])
    >>> noise = 0.1 * np.array([1.0, 1.0, -1.0, -1.0])  # orthogonal
    >>> round(si_sdr(reference, reference + noise), 6)
    20.0
    >>> round(si_sdr(reference, 3 * (reference + noise) + 5), 6)
    20.0
    """
    reference, estimate, single = _pair(reference, estimate)
    _not_silent(reference, "SI-SDR", single, constant=True)
    reference, estimate = _zero_mean(reference), _zero_mean(estimate)
    reference = _unit_peak(reference)
    estimate = _unit_peak(estimate)
    scale = np.sum(estimate * reference, axis=1) / np.sum(reference**2, 1)
    target = scale[:, None] * reference
    residual = estimate - target
    with np.errstate(divide="ignore", invalid="ignore"):
        value = 10 * np.log10(
            np.sum(target**2, axis=1) / np.sum(residual**2, axis=1)
        )
    # A silent estimate: 0 / 0; nothing of the reference recovered.
    value = np.where(np.any(estimate != 0, axis=1), value, -np.inf)
    return _result(value, single)


def snr(reference, estimate):
    """Signal-to-noise ratio in dB, `10 log10(||reference||^2 / ||estimate
    - reference||^2)`: not scale-invariant (a gain error counts as noise).
    In float64, both clips scaled by their common peak first.

    `inf` for an estimate equal to the reference; 0 dB for a silent one.

    Args:
        reference: the clean clip `(L,)` or clips `(N, L)`, real and
            finite, not all zero.
        estimate: the enhanced clip(s), the same shape.

    Returns:
        a float for `(L,)`, float64 `(N,)` for `(N, L)`.

    Example:

    >>> reference = np.array([1.0, -1.0, 1.0, -1.0])
    >>> round(snr(reference, 0.9 * reference), 6)  # 10 log10(4 / 0.04)
    20.0
    """
    reference, estimate, single = _pair(reference, estimate)
    _not_silent(reference, "SNR", single)
    peak = np.maximum(_peak(reference), _peak(estimate))[:, None]
    reference, estimate = reference / peak, estimate / peak
    with np.errstate(divide="ignore"):
        value = 10 * np.log10(
            np.sum(reference**2, axis=1)
            / np.sum((estimate - reference) ** 2, axis=1)
        )
    return _result(value, single)


def pesq(reference, estimate, sample_rate=16000, mode="wb"):
    """PESQ, ITU-T P.862 MOS-LQO, from the `pesq` package (the ITU code):
    wide-band P.862.2 (`mode="wb"`, at 16 kHz) or narrow-band P.862.1
    (`mode="nb"`, at 8 or 16 kHz). From about 1.0 to 4.64 (wide-band) or
    4.55 (narrow-band), higher is better. The clips are scored one by one
    in this process (not `pesq_batch`'s process pool).

    PESQ levels and aligns the clips itself (it divides both by their
    common peak), so the overall gain does not matter.

    Args:
        reference: the clean clip `(L,)` or clips `(N, L)`, real and
            finite, at least a quarter second long (`sample_rate // 4`
            samples), with speech in it.
        estimate: the enhanced clip(s), the same shape.
        sample_rate: 16000 (the default) or, with `mode="nb"`, 8000.
        mode: `"wb"` (the default) or `"nb"`.

    Returns:
        a float for `(L,)`, float64 `(N,)` for `(N, L)`.

    Raises:
        ValueError: for the bad inputs above; where PESQ finds no
            utterance in `reference` (its `NoUtterancesError`: silent, or
            far quieter than the estimate); where it gives NaN, as it does
            for a silent `estimate` (or one many orders of magnitude
            quieter than the reference).
        ImportError: without the `pesq` package (`speech` extra).
    """
    if not isinstance(mode, str) or mode not in ("wb", "nb"):
        raise ValueError(
            "`mode` must be 'wb' (wide-band, P.862.2) or 'nb' (narrow-band). "
            f"Received: mode={mode!r}"
        )
    rates = (16000,) if mode == "wb" else (8000, 16000)
    sample_rate = _sample_rate(sample_rate, rates, f"PESQ (mode={mode!r})")
    reference, estimate, single = _pair(reference, estimate)
    _not_silent(reference, "PESQ", single)
    if reference.shape[1] < sample_rate // 4:
        raise ValueError(
            "`reference` and `estimate` must be at least a quarter second "
            f"long for PESQ: {sample_rate // 4} samples at "
            f"sample_rate={sample_rate}. Received: length "
            f"{reference.shape[1]}"
        )
    pesq_package = _import("pesq", "pesq")
    values = []
    for row, (clean, enhanced) in enumerate(zip(reference, estimate)):
        value = pesq_package.pesq(
            sample_rate,
            clean,
            enhanced,
            mode,
            on_error=pesq_package.PesqError.RETURN_VALUES,
        )
        at = "" if single else f" in row {row}"
        if value == pesq_package.PesqError.NO_UTTERANCES_DETECTED:
            raise ValueError(
                f"PESQ detected no utterance in `reference`{at}: it is "
                "silent, or far quieter than `estimate`. Received: "
                f"reference peak {_peak(clean[None])[0]:.3g}, estimate "
                f"peak {_peak(enhanced[None])[0]:.3g}"
            )
        if np.isnan(value):
            raise ValueError(
                f"PESQ is undefined (NaN) for `estimate`{at}: it is silent, "
                "or many orders of magnitude quieter than `reference`. "
                f"Received: estimate peak {_peak(enhanced[None])[0]:.3g}, "
                f"reference peak {_peak(clean[None])[0]:.3g}"
            )
        if isinstance(value, numbers.Integral) and value < 0:
            raise RuntimeError(f"PESQ failed{at} with error code {value}")
        values.append(float(value))
    return _result(np.array(values), single)


def stoi(reference, estimate, sample_rate=16000, extended=False):
    """Short-time objective intelligibility from `pystoi.stoi` (Taal et
    al., 2011), or extended STOI (Jensen and Taal, 2016) with
    `extended=True`. The clips are resampled to 10 kHz and the frames
    more than 40 dB below the reference's loudest are dropped; higher is
    better (STOI up to 1). Extended STOI draws a tiny dither from NumPy's
    global random generator (pystoi's), so it advances that generator and
    varies in the last digits.

    Args:
        reference: the clean clip `(L,)` or clips `(N, L)`, real and
            finite, not all zero, with at least 30 frames (about 0.4 s)
            of sound once its silent frames are dropped.
        estimate: the enhanced clip(s), the same shape.
        sample_rate: the clips' rate in Hz, a positive int. Defaults to
            16000.
        extended: whether to compute extended STOI. Defaults to False.

    Returns:
        a float for `(L,)`, float64 `(N,)` for `(N, L)`.

    Raises:
        ValueError: for the bad inputs above (where pystoi would warn and
            return 1e-5 for too short a reference, this raises).
        ImportError: without the `pystoi` package (`speech` extra).
    """
    sample_rate = _sample_rate(sample_rate, None, "STOI")
    extended = _validation.boolean(extended, "extended")
    reference, estimate, single = _pair(reference, estimate)
    _not_silent(reference, "STOI", single)
    length = reference.shape[1]
    # 30 frames need 4097 samples at 10 kHz (shorter clips crash pystoi).
    if -(-length * 10000 // sample_rate) < _STOI_MIN_10K:
        _stoi_too_short(length, sample_rate, "")
    pystoi = _import("pystoi", "pystoi")
    values = []
    for row, (clean, enhanced) in enumerate(zip(reference, estimate)):
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "error", _STOI_TOO_SHORT, category=RuntimeWarning
            )
            try:
                value = pystoi.stoi(clean, enhanced, sample_rate, extended)
            except RuntimeWarning:
                at = "" if single else f" in row {row}"
                _stoi_too_short(length, sample_rate, at)
        values.append(float(value))
    return _result(np.array(values), single)


def dnsmos(estimate, sample_rate=16000):
    """DNSMOS P.835 (Reddy et al., 2022) from `speechmos`: non-intrusive
    (no reference) mean opinion scores, 1 to 5, of the speech (`sig`),
    the background (`bak`) and overall (`ovrl`), and DNSMOS P.808's
    overall score (`p808`). The ONNX models ship in speechmos' wheel and
    run on ONNX Runtime (nothing is downloaded); they score 9.01-s windows
    a second apart, averaged (a shorter clip is repeated to 9.01 s).

    The scores depend on the level, so the clip is not rescaled: pass it
    as a WAV file would hold it, in [-1, 1] (full scale 1); a peak above 1
    raises (scale or clip it yourself). A silent estimate is scored.

    Args:
        estimate: the enhanced clip `(L,)` or clips `(N, L)`, real and
            finite, within [-1, 1].
        sample_rate: 16000 (the default), the only rate of the models.

    Returns:
        a dict `{"sig", "bak", "ovrl", "p808"}` of floats for `(L,)`, of
        float64 `(N,)` for `(N, L)`.

    Raises:
        ValueError: for the bad inputs above.
        ImportError: without speechmos, librosa or onnxruntime (`speech`
            extra).
    """
    sample_rate = _sample_rate(sample_rate, (16000,), "DNSMOS")
    estimate = _signals(estimate, "estimate")
    single = estimate.ndim == 1
    estimate = np.atleast_2d(estimate)
    loud = np.flatnonzero(_peak(estimate) > 1)
    if loud.size:
        raise ValueError(
            "`estimate` must lie in [-1, 1] for DNSMOS, whose scores depend "
            "on the level (it is not rescaled here). Received: a peak of "
            f"{_peak(estimate)[loud[0]]:.6g}"
            + ("" if single else f" in row(s) {loud[:5].tolist()}")
        )
    speechmos = _import(
        "speechmos.dnsmos", "speechmos (with librosa and onnxruntime)"
    )
    scores = {key: [] for key in _DNSMOS_KEYS}
    for clip in estimate:
        found = speechmos.run(clip, sample_rate)
        for key, theirs in _DNSMOS_KEYS.items():
            scores[key].append(float(found[theirs]))
    return {key: _result(np.array(v), single) for key, v in scores.items()}


def _stoi_too_short(length, sample_rate, at):
    raise ValueError(
        f"`reference`{at} is too short for STOI: it needs 30 frames (25.6 "
        "ms at 10 kHz, half overlapping; 4097 samples at 10 kHz, about "
        "0.41 s) once the frames more than 40 dB below its loudest are "
        f"dropped. Received: length {length} at sample_rate={sample_rate}"
    ) from None


def _import(module, package):
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"this metric needs {package}, in the `speech` extra: {_INSTALL}"
        ) from error


def _signals(value, name):
    """`value` as a float64 array `(L,)` or `(N, L)`, checked."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError):
        array = None
    if array is None or array.dtype.kind not in "iuf":
        kind = (
            "ragged nested sequences"
            if array is None
            else f"{name} of dtype {array.dtype}"
        )
        raise ValueError(
            f"`{name}` must be real samples, a 1-D (L,) or 2-D (N, L) "
            f"array. Received: {kind}"
        )
    if array.ndim not in (1, 2):
        raise ValueError(
            f"`{name}` must be a clip (L,) or a batch of clips (N, L). "
            f"Received: {name} of shape {array.shape}"
        )
    if array.size == 0:
        raise ValueError(
            f"`{name}` must not be empty. Received: {name} of shape "
            f"{array.shape}"
        )
    array = np.asarray(array, dtype=np.float64)
    bad = ~np.isfinite(array)
    if np.any(bad):
        where = np.argwhere(bad)[0].tolist()
        raise ValueError(
            f"`{name}` must be finite. Received: {int(np.sum(bad))} NaN or "
            f"inf value(s), the first {float(array[tuple(where)])} at index "
            f"{where[0] if array.ndim == 1 else tuple(where)}"
        )
    return array


def _pair(reference, estimate):
    reference = _signals(reference, "reference")
    estimate = _signals(estimate, "estimate")
    if reference.shape != estimate.shape:
        raise ValueError(
            "`reference` and `estimate` must have the same shape (as many "
            f"clips, of the same length). Received: reference of shape "
            f"{reference.shape}, estimate of shape {estimate.shape}"
        )
    single = reference.ndim == 1
    return np.atleast_2d(reference), np.atleast_2d(estimate), single


def _not_silent(reference, metric, single, constant=False):
    """Raise unless every row of `reference` has a nonzero sample (with
    `constant`, two different samples)."""
    if constant:
        silent = np.ptp(reference, axis=1) == 0
        what = "silent (all zero) or constant (its mean is removed)"
    else:
        silent = ~np.any(reference != 0, axis=1)
        what = "silent (all zero)"
    silent = np.flatnonzero(silent)
    if silent.size:
        raise ValueError(
            f"`reference` must not be {what}: {metric} is undefined there. "
            f"Received: a {'silent or constant' if constant else 'silent'} "
            "reference"
            + ("" if single else f" in row(s) {silent[:5].tolist()}")
        )


def _zero_mean(clips):
    """Each row less its mean; a constant row exactly 0 (its mean may
    round)."""
    constant = np.ptp(clips, axis=1, keepdims=True) == 0
    return np.where(constant, 0.0, clips - np.mean(clips, 1, keepdims=True))


def _sample_rate(value, rates, metric):
    if (
        not _validation._is_int(value)
        or value < 1
        or (rates is not None and value not in rates)
    ):
        wanted = (
            "a positive int (Hz)"
            if rates is None
            else " or ".join(str(rate) for rate in rates)
        )
        raise ValueError(
            f"`sample_rate` must be {wanted} for {metric}. Received: "
            f"sample_rate={value!r}"
        )
    return int(value)


def _peak(clips):
    return np.max(np.abs(clips), axis=1)


def _unit_peak(clips):
    """Each row divided by its peak (all-zero rows kept)."""
    peak = _peak(clips)
    return clips / np.where(peak > 0, peak, 1.0)[:, None]


def _result(values, single):
    values = np.asarray(values, dtype=np.float64)
    return float(values[0]) if single else values
