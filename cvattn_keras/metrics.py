"""Micro-averaged average precision, the paper's MusicNet metric, as a
streaming Keras metric; the transcription field's scores on whole
arrays (`transcription_scores`, with `frames_to_notes`'s decoding); the
image-quality scores of MRI reconstruction (`nmse`, `psnr`, `ssim` on
magnitudes, as fastMRI's, and `phase_error`), NumPy, per image; and the
speech-enhancement scores, per clip (`si_sdr` and `snr` in NumPy; `pesq`,
`stoi` and `dnsmos` through the `speech` extra's packages).
"""

import warnings

import keras
import numpy as np
from keras import ops

from cvattn_keras import _image_quality
from cvattn_keras._speech_metrics import dnsmos
from cvattn_keras._speech_metrics import pesq
from cvattn_keras._speech_metrics import si_sdr
from cvattn_keras._speech_metrics import snr
from cvattn_keras._speech_metrics import stoi

__all__ = [
    "MicroAveragedPrecision",
    "average_precision",
    "dnsmos",
    "frames_to_notes",
    "nmse",
    "pesq",
    "phase_error",
    "psnr",
    "si_sdr",
    "snr",
    "ssim",
    "stoi",
    "transcription_scores",
]

# What `ops.convert_to_numpy` raises on a traced tensor: TensorFlow's
# NotImplementedError (a RuntimeError) inside a `tf.function`, JAX's
# TracerArrayConversionError (a TypeError) inside `jax.jit`.
_TRACED_ERRORS = (RuntimeError, TypeError)
_WHERE_COUNTED = "%s wherever `sample_weight` is nonzero"


# The layout of the bins, in logits (`from_logits=False` takes the logit of
# the probability first); see the class docstring. With `N` the number of
# thresholds, each sign has, from 0 outwards:
# - `8 N` bins `4 / N` wide for |logit| < 32 (`_CORE`);
# - `ceil(N / 4)` bins per octave for 32 <= |logit| < 2**20 (15 octaves);
# - 16 bins per octave for |logit| >= 2**20, up to the largest float32
#   (108 octaves).
# The octaves come from the float32 bit pattern, which grows by 2**23 an
# octave. Each step is an int32 subtraction or a float32 conversion,
# product or floor, rounded as IEEE 754 says (no transcendental function,
# no product followed by a sum that a compiler could fuse), so every
# backend, eager or compiled, bins a logit alike; and each is monotone, so
# the bins never reorder scores. As few ops as that allows: called eagerly,
# JAX compiles each op once per new shape.
_CORE = 32.0
_FINE_END = 2.0**20
_FINE_OCTAVES = 15
_COARSE_BINS = 108 * 16
_OCTAVE = 2.0**23  # float32 bit patterns per octave
_TINY = 2.0**-126  # the smallest normal float32
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_BITS_CORE = int(np.float32(_CORE).view(np.int32))
_BITS_FINE_END = int(np.float32(_FINE_END).view(np.int32))


def _bins_per_side(num_thresholds):
    """The bins of one sign: core, per octave in the fine tail, and all."""
    core = 8 * num_thresholds
    per_octave = -(-num_thresholds // 4)
    return core, per_octave, core + _FINE_OCTAVES * per_octave + _COARSE_BINS


def _bin_index(logits, num_thresholds):
    """The bin of each finite float32 logit: an int32 in [0, 2 * half),
    increasing with the logit (ties only within a bin)."""
    core_bins, per_octave, half = _bins_per_side(num_thresholds)
    magnitude = ops.abs(logits)
    # `ops.view` on TensorFlow needs a static last axis (the batch is None
    # in a step traced for a partial batch): view a (M, 1) column.
    bits = ops.view(ops.reshape(magnitude, (-1, 1)), "int32")
    bits = ops.reshape(bits, (-1,))
    # Each branch is a whole number, exact in float32 (below 2**24 for N
    # below 1.4 million); subnormals fall in the first core bin.
    core = ops.floor(magnitude * np.float32(num_thresholds / 4))  # inf: unused
    fine = ops.cast(bits - _BITS_CORE, "float32")  # < 0 below 32: unused
    fine = ops.floor(fine * np.float32(per_octave / _OCTAVE)) + core_bins
    coarse = ops.cast(bits - _BITS_FINE_END, "float32")
    coarse = ops.floor(coarse * np.float32(16 / _OCTAVE)) + (
        core_bins + _FINE_OCTAVES * per_octave
    )
    step = ops.where(
        ops.less(magnitude, _CORE),
        core,
        ops.where(ops.less(magnitude, _FINE_END), fine, coarse),
    )
    # The largest floats round up to the next octave's first pattern.
    step = ops.cast(ops.minimum(step, half - 1), "int32")
    # A subnormal counts as 0 (XLA flushes it): the sign alike everywhere.
    negative = ops.less_equal(logits, -_TINY)
    return ops.where(negative, half - 1 - step, half + step)


def _logit(probabilities):
    """log(p) - log1p(-p): monotone, exact enough near 0 and 1 (1 - 1e-7
    and 1 - 1e-6 give 15.9 and 13.8). Values outside [0, 1] are clipped to
    it, subnormals count as 0 (XLA flushes them, and `log` rounds them
    differently on each backend), and 0 and 1 give the largest float32
    logits, which share the end bins."""
    p = ops.clip(probabilities, 0.0, 1.0)
    p = ops.where(ops.less(p, _TINY), 0.0, p)
    logits = ops.log(p) - ops.log1p(-p)
    return ops.clip(logits, -_FLOAT32_MAX, _FLOAT32_MAX)


def _concrete(x):
    """`x` as NumPy when it has a value now (eager), `None` when traced."""
    try:
        return ops.convert_to_numpy(x)
    except _TRACED_ERRORS:
        return None


@keras.saving.register_keras_serializable(package="cvattn_keras")
class MicroAveragedPrecision(keras.metrics.Metric):
    """Average precision over all (sample, frame, note) decisions pooled.

    `AP = sum_k (R_k - R_k+1) P_k`: precision weighted by the recall gained
    at each threshold, from the highest score down (as
    `sklearn.metrics.average_precision_score(y.ravel(), p.ravel())`, the
    micro average the MusicNet papers report). Scores are binned and
    accumulated as histograms of positives and negatives (one
    `segment_sum` with a fixed number of segments: static shapes, so it
    compiles under XLA, `jit_compile=True` and inside JAX `fit`; memory
    linear in the batch). The state is sums, so replicas are summed
    (`aggregation="sum"`) under a distribution strategy.

    Bins. Scores are binned by their logit (with `from_logits=False`,
    `log(p) - log1p(-p)` of the probability, so that `1 - 1e-7` and
    `1 - 1e-6`, logits 15.9 and 13.8, stay 535 bins apart at `N = 1000`),
    on one fixed layout over the whole float32 range. With
    `N = num_thresholds`, on each side of 0:

    - |logit| < 32: bins `4 / N` wide, never wider than `N` equal bins of
      probability would be there (every float32 probability above 1.3e-14
      lands here, as do a confident model's logits);
    - 32 <= |logit| < 2**20: `ceil(N / 4)` equal bins per octave, each at
      most `4 / N` of the logit wide;
    - |logit| >= 2**20: 16 equal bins per octave up to the largest
      float32. Probabilities 0 and 1 (and values outside [0, 1], clipped)
      have infinite logits, which share the end bins with the largest
      floats; subnormal numbers count as 0 (XLA flushes them).

    So two logits are never tied when they differ by more than `4 / N`
    times the larger of 1 and their magnitudes, below 2**20 (by more than
    a sixteenth of the larger magnitude beyond), up to the float32
    rounding of the bin edges.

    That is `2 (8 N + 15 ceil(N / 4) + 1728)` bins (`num_bins`): 26,956 at
    the default `N = 1000`, 238,456 at `N = 10000`; the state is twice that
    plus one float (216 kB and 1.9 MB). A bin is found from a product and
    the float32 bit pattern, so eager, compiled and every backend bin a
    logit alike (probabilities go through the backend's `log`, which may
    differ in the last bit).

    Accuracy: scores in the same bin are tied, which is the only
    difference from the exact AP (when no bin holds two different scores
    the metric is the exact AP). Write `n_b` for the number of scores in
    bin `b`, `tp_b` for its positives, `S_b` for the number of scores in
    bin `b` and above, `P` for all positives, `M` for all scores. Within
    one bin precision moves by at most `(n_b - 1) / S_b`, so, for any
    scores (unit weights),

        |AP - AP_exact| <= sum_b tp_b (n_b - 1) / (P S_b)
                        <= s / pi * (1 + ln(1 / s)),

    with `pi = P / M` the fraction of positives and `s = max_b n_b / M` the
    largest bin's share of the scores: below 32 about `4 / N` times the
    peak fraction of the scores per unit of logit. How close that comes to
    the exact AP therefore depends on how widely the scores spread over
    the bins. Measured with 5% positives on (64, 64, 128) decisions (AP
    too low by, at `N = 1000` and `N = 10000` alike):

    - logits `2 y + N(0, 1)` (MusicNet-like): `0.55 / N`;
    - a confident model, positives at logits N(10, 1.5), 1% negatives at
      N(8, 1.5), the rest at N(-5, 1.5): `0.04 / N`; shifted by +30 (into
      the octave bins) `1.4 / N`; `10 (2 y + N(0, 1)) + 50`: `3 / N`;
    - positives at logits 30 to 31, negatives at 17 to 18: exact (1.0);
    - logits squeezed into a tenth of a unit, `0.1 (2 y + N(0, 1))`:
      `5.3 / N`.

    Beyond 2**20 the bins are up to 6% of the logit wide whatever `N`.

    Bad values. Elements whose `sample_weight` is 0 are left out and not
    checked. Among the others, a label that is not exactly 0 or 1, a
    non-finite prediction (NaN or +-inf, logits included) and a negative or
    non-finite weight are invalid:

    - called eagerly (NumPy or eager tensors, `run_eagerly=True`),
      `update_state` raises a `ValueError` naming `y_true`, `y_pred` or
      `sample_weight` and showing the bad values, and leaves the state
      unchanged;
    - traced (inside `fit`/`evaluate` compiled by `tf.function`, XLA or
      `jax.jit`, where a value cannot raise), the invalid elements are left
      out of the histograms and counted in the `invalid` state variable,
      and `result()` is NaN until `reset_state()`: a bad batch never gives a
      plausible-looking AP.

    With no positive at all, `result()` is 0.

    Args:
        num_thresholds: int >= 2, the resolution `N` of the bins (above).
            Defaults to 1000.
        from_logits: whether predictions are logits (else probabilities).
            Defaults to `True`, as the models here output logits.
        name: the metric's name, as for any Keras metric.
        dtype: the metric's dtype, as for any Keras metric.

    `update_state(y_true, y_pred, sample_weight=None)`: `y_true` and
    `y_pred` of the same shape; `sample_weight` broadcast against them
    after trailing axes of size 1 are added (so a `(batch,)` weight weights
    whole samples).
    """

    def __init__(
        self,
        num_thresholds=1000,
        from_logits=True,
        name="micro_average_precision",
        dtype=None,
    ):
        if (
            isinstance(num_thresholds, bool)
            or not isinstance(num_thresholds, int)
            or num_thresholds < 2
        ):
            raise ValueError(
                "`num_thresholds` must be an int >= 2. "
                f"Received: num_thresholds={num_thresholds!r}"
            )
        super().__init__(name=name, dtype=dtype)
        self.num_thresholds = num_thresholds
        self.from_logits = bool(from_logits)
        self.num_bins = 2 * _bins_per_side(num_thresholds)[2]
        self.positives = self.add_variable(
            shape=(self.num_bins,),
            initializer="zeros",
            aggregation="sum",
            name="positives",
        )
        self.negatives = self.add_variable(
            shape=(self.num_bins,),
            initializer="zeros",
            aggregation="sum",
            name="negatives",
        )
        self.invalid = self.add_variable(
            shape=(), initializer="zeros", aggregation="sum", name="invalid"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = ops.convert_to_tensor(y_true)
        y_pred = ops.convert_to_tensor(y_pred)
        _check_same_shape(y_true, y_pred)
        labels = ops.reshape(ops.cast(y_true, "float32"), (-1,))
        scores = ops.reshape(ops.cast(y_pred, "float32"), (-1,))
        if sample_weight is None:
            weight = ops.ones_like(labels)
        else:
            weight = ops.cast(ops.convert_to_tensor(sample_weight), "float32")
            while len(weight.shape) < len(y_true.shape):
                weight = ops.expand_dims(weight, -1)
            weight = ops.reshape(
                ops.broadcast_to(weight, ops.shape(y_true)), (-1,)
            )
        counted = ops.not_equal(weight, 0.0)  # NaN weights are counted
        bad_label = ops.logical_and(
            counted,
            ops.logical_and(
                ops.not_equal(labels, 0.0), ops.not_equal(labels, 1.0)
            ),
        )
        bad_score = ops.logical_and(
            counted, ops.logical_not(ops.isfinite(scores))
        )
        bad_weight = ops.logical_or(
            ops.logical_not(ops.isfinite(weight)), ops.less(weight, 0.0)
        )
        invalid = ops.logical_or(
            bad_label, ops.logical_or(bad_score, bad_weight)
        )
        num_invalid = ops.sum(ops.cast(invalid, "float32"))
        count = _concrete(num_invalid)
        if count is not None and count > 0:
            _raise_invalid(
                ("y_true", labels, bad_label, _WHERE_COUNTED % "0 or 1"),
                ("y_pred", scores, bad_score, _WHERE_COUNTED % "finite"),
                ("sample_weight", weight, bad_weight, "finite and >= 0"),
            )
        keep = ops.logical_and(counted, ops.logical_not(invalid))
        weight = ops.where(keep, weight, 0.0)
        scores = ops.where(keep, scores, 0.0)
        if not self.from_logits:
            scores = _logit(scores)
        n = self.num_bins
        bins = _bin_index(scores, self.num_thresholds)
        # Positives go to segments [0, n), negatives (and the left-out
        # elements, with weight 0) to [n, 2n).
        positive = ops.logical_and(keep, ops.equal(labels, 1.0))
        segments = bins + n * ops.cast(ops.logical_not(positive), "int32")
        histogram = ops.segment_sum(weight, segments, num_segments=2 * n)
        histogram = ops.cast(histogram, self.positives.dtype)
        self.positives.assign_add(histogram[:n])
        self.negatives.assign_add(histogram[n:])
        self.invalid.assign_add(ops.cast(num_invalid, self.invalid.dtype))

    def result(self):
        # Cumulative counts from the highest bin down: at threshold k, the
        # true and false positives of every score in bins >= k.
        tp = ops.flip(ops.cumsum(ops.flip(self.positives, 0)), 0)
        fp = ops.flip(ops.cumsum(ops.flip(self.negatives, 0)), 0)
        precision = ops.divide_no_nan(tp, tp + fp)
        gained = ops.divide_no_nan(self.positives, tp[0])  # R_k - R_k+1
        average_precision = ops.sum(gained * precision)
        return ops.where(
            ops.greater(self.invalid, 0),
            ops.cast(float("nan"), average_precision.dtype),
            average_precision,
        )

    def get_config(self):
        return {
            "num_thresholds": self.num_thresholds,
            "from_logits": self.from_logits,
            "name": self.name,
            "dtype": self.dtype,
        }


def _check_same_shape(y_true, y_pred):
    a, b = tuple(y_true.shape), tuple(y_pred.shape)
    if len(a) != len(b) or any(
        i is not None and j is not None and i != j for i, j in zip(a, b)
    ):
        raise ValueError(
            "`y_true` and `y_pred` must have the same shape. Received: "
            f"y_true.shape={a}, y_pred.shape={b}"
        )


def _raise_invalid(*checks):
    """Raises for the first argument with bad values (eager calls only)."""
    for name, values, bad, requirement in checks:
        found = np.asarray(_concrete(values))[np.asarray(_concrete(bad))]
        if found.size:
            shown = ", ".join(repr(float(v)) for v in found[:5])
            more = ", ..." if found.size > 5 else ""
            raise ValueError(
                f"`{name}` must be {requirement}. Received: {name} with "
                f"{found.size} such value(s): [{shown}{more}]"
            )


# ----------------------------------------------------------------------
# Transcription scores on whole arrays (NumPy; mir_eval for the field's
# frame and note metrics).
# ----------------------------------------------------------------------


def average_precision(labels, scores):
    """The exact micro-averaged average precision of `scores` against 0/1
    `labels` (any equal shapes, flattened): `sum_k (R_k - R_{k-1}) P_k`
    over the distinct scores from the highest down, ties counted together
    (scikit-learn's `average_precision_score` of the flattened arrays,
    MusicNet's metric). NaN when no label is 1 (or none is given); a
    `ValueError` for shapes that differ, labels other than 0 and 1, or
    scores that are not finite. Scores may be probabilities or logits:
    only their order counts."""
    labels, scores = np.asarray(labels), np.asarray(scores)
    if labels.shape != scores.shape:
        raise ValueError(
            "`labels` and `scores` must have the same shape. Received: "
            f"{labels.shape} and {scores.shape}"
        )
    labels = _check_labels(labels).ravel()
    scores = scores.astype(np.float64).ravel()
    if not labels.size:
        return float("nan")
    if not np.all(np.isfinite(scores)):
        raise ValueError("`scores` must be finite. Received: NaN or inf")
    order = np.argsort(-scores, kind="stable")
    labels, scores = labels[order], scores[order]
    last = np.r_[np.flatnonzero(np.diff(scores)), scores.size - 1]
    hits = np.cumsum(labels)[last]
    positives = hits[-1] if hits.size else 0.0
    if not positives:
        return float("nan")
    precision = hits / (last + 1)
    recall = hits / positives
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def _check_labels(labels, name="labels"):
    """`labels` as float64, or a `ValueError` unless each is 0 or 1 (as
    scikit-learn's `average_precision_score` requires: a label of 2 would
    count twice)."""
    labels = np.asarray(labels)
    if labels.dtype.kind not in "biuf":
        raise ValueError(
            f"`{name}` must be 0/1 numbers. Received: dtype {labels.dtype}"
        )
    labels = labels.astype(np.float64)
    bad = labels[(labels != 0) & (labels != 1)]
    if bad.size:
        shown = ", ".join(repr(float(v)) for v in np.unique(bad)[:5])
        raise ValueError(
            f"`{name}` must hold only 0 and 1. Received: {bad.size} other "
            f"value(s): [{shown}{', ...' if np.unique(bad).size > 5 else ''}]"
        )
    return labels


def _check_frame_rate(frame_rate):
    if (
        isinstance(frame_rate, bool)
        or not isinstance(frame_rate, (int, float, np.integer, np.floating))
        or not 0 < frame_rate < float("inf")
    ):
        raise ValueError(
            "`frame_rate` must be a positive finite number of frames per "
            f"second. Received: frame_rate={frame_rate!r}"
        )
    return float(frame_rate)


def _check_roll(array, name, ndim=(2,)):
    shapes = " or ".join(
        {2: "(frames, notes)", 3: "(clips, frames, notes)"}[n] for n in ndim
    )
    array = np.asarray(array)
    if array.ndim not in ndim or array.dtype.kind not in "biuf":
        raise ValueError(
            f"`{name}` must be a real array {shapes}. Received: {name} of "
            f"shape {array.shape}, dtype {array.dtype}"
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(f"`{name}` must be finite. Received: NaN or inf")
    return array.astype(np.float64)


def _check_lowest_note(lowest_note):
    if isinstance(lowest_note, bool) or not isinstance(
        lowest_note, (int, np.integer)
    ):
        raise ValueError(
            "`lowest_note` must be an int, the MIDI number of note 0. "
            f"Received: lowest_note={lowest_note!r}"
        )
    return int(lowest_note)


def _check_threshold(threshold):
    number = not isinstance(threshold, bool) and isinstance(
        threshold, (int, float, np.integer, np.floating)
    )
    if not number or not 0 < threshold < 1:
        raise ValueError(
            "`threshold` must be a probability in (0, 1). Received: "
            f"threshold={threshold!r}"
        )
    return float(threshold)


def frames_to_notes(
    probabilities,
    frame_rate,
    threshold=0.5,
    min_frames=1,
    lowest_note=0,
    start_time=0.0,
):
    """Notes from frame-wise note probabilities: each run of at least
    `min_frames` consecutive frames above `threshold` is one note, from the
    start of its first frame to the end of its last.

    Frame `t` spans `[start_time + t / frame_rate, start_time + (t + 1) /
    frame_rate)` seconds (the frames of an STFT of hop `frame_step` at
    `sample_rate`: `frame_rate = sample_rate / frame_step`, and
    `start_time` the first frame's centre less half a hop). Two runs of
    one pitch separated by a frame below the threshold are two notes.

    Args:
        probabilities: `(frames, notes)` probabilities (or 0/1 labels).
        frame_rate: frames per second.
        threshold: a note is on in a frame where its probability exceeds
            this.
        min_frames: shorter runs are dropped.
        lowest_note: the MIDI number of note 0, an int.
        start_time: seconds, the start of frame 0.

    Returns:
        A list of `(onset_seconds, offset_seconds, midi_pitch)`, sorted by
        onset then pitch.
    """
    p = _check_roll(probabilities, "probabilities")
    frame_rate = _check_frame_rate(frame_rate)
    threshold = _check_threshold(threshold)
    if (
        isinstance(min_frames, bool)
        or not isinstance(min_frames, (int, np.integer))
        or min_frames < 1
    ):
        raise ValueError(
            "`min_frames` must be an int >= 1. Received: "
            f"min_frames={min_frames!r}"
        )
    lowest_note = _check_lowest_note(lowest_note)
    active = (p > threshold).astype(np.int8)
    edges = np.diff(np.pad(active, ((1, 1), (0, 0))), axis=0)
    notes = []
    for note in range(p.shape[1]):
        starts = np.flatnonzero(edges[:, note] == 1)
        stops = np.flatnonzero(edges[:, note] == -1)
        for start, stop in zip(starts, stops):
            if stop - start >= min_frames:
                notes.append(
                    (
                        float(start_time + start / frame_rate),
                        float(start_time + stop / frame_rate),
                        int(lowest_note + note),
                    )
                )
    return sorted(notes, key=lambda n: (n[0], n[2]))


def _mir_eval():
    try:
        import mir_eval.multipitch
        import mir_eval.transcription
    except ImportError as error:
        raise ImportError(
            "transcription_scores needs mir_eval, in the `music` extra: "
            'pip install "cvattn_keras[music]"'
        ) from error
    return mir_eval


_MIN_HERTZ, _MAX_HERTZ = 20.0, 5000.0


def _hertz(midi):
    return 440.0 * 2.0 ** ((np.asarray(midi, np.float64) - 69) / 12)


def transcription_scores(
    labels,
    probabilities,
    frame_rate,
    threshold=0.5,
    min_frames=1,
    lowest_note=0,
    onset_tolerance=0.05,
):
    """The transcription field's scores of frame-wise note probabilities.

    - `"ap"`: the exact micro-averaged average precision over every frame
      and note (MusicNet's metric; `average_precision`).
    - `"frame_precision"`, `"frame_recall"`, `"frame_accuracy"`:
      `mir_eval.multipitch.evaluate` of the notes above `threshold` in
      each frame against the labels' (as frequencies, frame times at the
      frames' starts; clips laid end to end), over the notes mir_eval
      admits: 20 Hz to 5 kHz (MIDI 16 to 111). A note outside that is on
      in the labels or above `threshold` is left out of these three, with
      a warning.
    - `"note_precision"`, `"note_recall"`, `"note_f1"`: onset-only note
      transcription (`mir_eval.transcription.precision_recall_f1_overlap`
      with `offset_ratio=None`: an estimated note matches a reference note
      of the same pitch, within 50 cents, whose onset is within
      `onset_tolerance` seconds), after `frames_to_notes` decodes the
      probabilities (with `threshold` and `min_frames`) and the labels
      (every run of 1s is a note).

    The ground truth scores 1.0 on each; a constant predictor scores an AP
    equal to the density of the labels.

    Args:
        labels: 0/1, `(frames, notes)` or `(clips, frames, notes)`, at
            least one frame and one note.
        probabilities: the same shape, in [0, 1] (sigmoid of the logits;
            logits are refused, as the threshold is a probability).
        frame_rate: frames per second.
        threshold: the decoding of the probabilities, as in
            `frames_to_notes`.
        min_frames: the decoding of the probabilities, as in
            `frames_to_notes`.
        lowest_note: the MIDI number of note 0 (for the frequencies), an
            int that keeps every note within MIDI 0 to 127.
        onset_tolerance: seconds >= 0, for the note scores (mir_eval's
            default 0.05).

    Returns:
        A dict of floats with the keys above.

    Raises:
        ValueError: arrays of other shapes or ranks, or empty; labels
            other than 0 and 1; probabilities outside [0, 1]; non-finite
            values; a bad `frame_rate`, `threshold`, `min_frames`,
            `lowest_note` or `onset_tolerance`.
        ImportError: without mir_eval (`pip install "cvattn_keras[music]"`).
    """
    labels = _check_roll(labels, "labels", (2, 3))
    probabilities = _check_roll(probabilities, "probabilities", (2, 3))
    if labels.shape != probabilities.shape:
        raise ValueError(
            "`labels` and `probabilities` must have the same shape. "
            f"Received: {labels.shape} and {probabilities.shape}"
        )
    if not labels.size:
        raise ValueError(
            "`labels` and `probabilities` must hold at least one frame and "
            f"one note. Received: shape {labels.shape}"
        )
    labels = _check_labels(labels)
    outside = probabilities[(probabilities < 0) | (probabilities > 1)]
    if outside.size:
        raise ValueError(
            "`probabilities` must be in [0, 1] (for logits, pass "
            f"`1 / (1 + exp(-logits))`). Received: {outside.size} value(s) "
            f"outside, from {outside.min()!r} to {outside.max()!r}"
        )
    frame_rate = _check_frame_rate(frame_rate)
    threshold = _check_threshold(threshold)
    lowest_note = _check_lowest_note(lowest_note)
    frames, notes = labels.shape[-2:]
    if not 0 <= lowest_note <= 128 - notes:
        raise ValueError(
            f"`lowest_note` must put the {notes} notes within MIDI 0 to "
            f"127: 0 <= lowest_note <= {128 - notes}. Received: "
            f"lowest_note={lowest_note}"
        )
    number = not isinstance(onset_tolerance, bool) and isinstance(
        onset_tolerance, (int, float, np.integer, np.floating)
    )
    if not number or not 0 <= onset_tolerance < float("inf"):
        raise ValueError(
            "`onset_tolerance` must be a finite number of seconds >= 0. "
            f"Received: onset_tolerance={onset_tolerance!r}"
        )
    mir_eval = _mir_eval()
    clips = labels.reshape((-1, frames, notes))
    guesses = probabilities.reshape(clips.shape)
    hertz = _hertz(lowest_note + np.arange(notes))
    # mir_eval's multipitch takes 20 Hz to 5 kHz (MIDI 16 to 111) only:
    # say so when a note outside is on in the labels or the estimate.
    audible = (hertz >= _MIN_HERTZ) & (hertz <= _MAX_HERTZ)
    left_out = np.sum((clips > 0.5) | (guesses > threshold), axis=(0, 1))
    left_out = np.flatnonzero(left_out * ~audible) + lowest_note
    if left_out.size:
        warnings.warn(
            f"transcription_scores: MIDI note(s) {left_out.tolist()} (with "
            f"lowest_note={lowest_note}) are outside mir_eval's 20 Hz to "
            "5 kHz (MIDI 16 to 111) and left out of the frame scores "
            "(the AP and the note scores count them); is `lowest_note` "
            "right?",
            stacklevel=2,
        )
    duration = frames / frame_rate
    times = np.arange(clips.shape[0] * frames) / frame_rate
    reference = [
        hertz[(row > 0.5) & audible] for row in clips.reshape(-1, notes)
    ]
    estimate = [
        hertz[(row > threshold) & audible] for row in guesses.reshape(-1, notes)
    ]
    intervals = {"ref": [], "est": []}
    pitches = {"ref": [], "est": []}
    for i, (truth, guess) in enumerate(zip(clips, guesses)):
        # The reference's notes are every run of 1s (`min_frames` filters
        # the estimate only: a short note missed still counts).
        for key, roll, cut, shortest in (
            ("ref", truth, 0.5, 1),
            ("est", guess, threshold, min_frames),
        ):
            for onset, offset, pitch in frames_to_notes(
                roll, frame_rate, cut, shortest, lowest_note, i * duration
            ):
                intervals[key].append((onset, offset))
                pitches[key].append(pitch)
    with warnings.catch_warnings():
        # mir_eval warns on empty references or estimates (scored 0).
        warnings.simplefilter("ignore")
        frame = mir_eval.multipitch.evaluate(times, reference, times, estimate)
        precision, recall, f1, _ = (
            mir_eval.transcription.precision_recall_f1_overlap(
                np.reshape(intervals["ref"], (-1, 2)),
                _hertz(pitches["ref"]),
                np.reshape(intervals["est"], (-1, 2)),
                _hertz(pitches["est"]),
                onset_tolerance=onset_tolerance,
                offset_ratio=None,
            )
        )
    return {
        "ap": average_precision(clips, guesses),
        "frame_precision": float(frame["Precision"]),
        "frame_recall": float(frame["Recall"]),
        "frame_accuracy": float(frame["Accuracy"]),
        "note_precision": float(precision),
        "note_recall": float(recall),
        "note_f1": float(f1),
    }


# ----------------------------------------------------------------------
# Image quality (NumPy), as fastMRI's `evaluate.py` scores reconstructions:
# on magnitude images, one value per image of a batch (the checks and
# window sums in `_image_quality`).
# ----------------------------------------------------------------------


def nmse(target, prediction):
    """Normalised mean squared error per image, `||target - prediction||^2
    / ||target||^2` over its pixels (fastMRI's NMSE, per image rather
    than per volume): 0 for a perfect prediction, 1 for zeros. An
    all-zero target gives 0 against zeros, `inf` against anything else.

    Args:
        target: the ground truth: magnitudes `(N, H, W)`, or complex
            images (a complex `(N, H, W)` array or stacked `(N, H, W, 2)`
            floats), whose modulus is scored.
        prediction: the same shape, either kind.

    Returns:
        float64 `(N,)`.

    Example:

    >>> nmse(np.ones((1, 4, 4)), np.full((1, 4, 4), 0.5))
    array([0.25])
    """
    target, prediction = _image_pair(target, prediction)
    error = np.sum((target - prediction) ** 2, axis=(1, 2))
    energy = np.sum(target**2, axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(error == 0, 0.0, error / energy)


def psnr(target, prediction, data_range=None):
    """Peak signal-to-noise ratio per image in dB, `10 log10(data_range^2
    / MSE)` (scikit-image's `peak_signal_noise_ratio`; fastMRI's PSNR with
    `data_range` the target's maximum). `inf` where the prediction is
    exact.

    Args:
        target: magnitudes `(N, H, W)` or complex images, as in `nmse`.
        prediction: the same shape, either kind.
        data_range: a number > 0, one per image `(N,)`, or `None` (the
            default): each target image's maximum, which must then be > 0.

    Returns:
        float64 `(N,)`.

    Example:

    >>> psnr(np.ones((1, 4, 4)), np.full((1, 4, 4), 0.9))
    array([20.])
    """
    target, prediction = _image_pair(target, prediction)
    peak = _image_quality.data_range(data_range, target)
    mse = np.mean((target - prediction) ** 2, axis=(1, 2))
    with np.errstate(divide="ignore"):
        return 10 * np.log10(peak**2 / mse)


def ssim(target, prediction, data_range=None, win_size=7):
    """Structural similarity per image: scikit-image's
    `structural_similarity` with its defaults (fastMRI's SSIM).

    Over each `win_size x win_size` window inside the image (a border of
    `(win_size - 1) // 2` pixels is left out, as scikit-image crops it),
    with the window's means `m`, sample variances `v` and covariance `c`
    (`win_size^2 / (win_size^2 - 1)` times the population ones), `C1 =
    (0.01 data_range)^2` and `C2 = (0.03 data_range)^2`: `(2 m_t m_p +
    C1)(2 c + C2) / ((m_t^2 + m_p^2 + C1)(v_t + v_p + C2))`, averaged over
    the windows. In float64 (scikit-image computes float32 in float32).

    Args:
        target: magnitudes `(N, H, W)` or complex images, as in `nmse`; H
            and W at least `win_size`.
        prediction: the same shape, either kind.
        data_range: a number > 0, one per image `(N,)`, or `None` (the
            default): each target image's maximum, which must then be > 0
            (fastMRI takes its volume's maximum: pass that to match).
        win_size: the window's side, an odd int >= 3. Defaults to 7.

    Returns:
        float64 `(N,)`, 1 for identical images.

    Example:

    >>> image = np.linspace(0, 1, 100).reshape(1, 10, 10)
    >>> ssim(image, image)
    array([1.])
    """
    target, prediction = _image_pair(target, prediction)
    size = _image_quality.win_size(win_size, target.shape)
    peak = _image_quality.data_range(data_range, target)[:, None, None]
    c1, c2 = (0.01 * peak) ** 2, (0.03 * peak) ** 2
    mean_t, mean_p, tt, pp, tp = (
        _image_quality.box_means(x, size)
        for x in (target, prediction, target**2, prediction**2)
        + (target * prediction,)
    )
    sample = size**2 / (size**2 - 1)
    var_t, var_p = sample * (tt - mean_t**2), sample * (pp - mean_p**2)
    cov = sample * (tp - mean_t * mean_p)
    similarity = ((2 * mean_t * mean_p + c1) * (2 * cov + c2)) / (
        (mean_t**2 + mean_p**2 + c1) * (var_t + var_p + c2)
    )
    return np.mean(similarity, axis=(1, 2))


def phase_error(target, prediction, support=None):
    """Mean absolute phase error per image, in radians: the mean over the
    pixels of `support` of `|angle(prediction conj(target))|`, the phase
    difference wrapped to [-pi, pi] (so in [0, pi]). A zero pixel has
    phase 0 (numpy's `angle`).

    Args:
        target: complex images, a complex `(N, H, W)` array or stacked
            `(N, H, W, 2)` floats.
        prediction: the same shape, either kind.
        support: where to measure (the object: `synthetic_mri`'s
            `support`), bool or 0/1, `(N, H, W)` or `(H, W)` for all, at
            least one pixel per image; `None` (the default): every pixel.

    Returns:
        float64 `(N,)`.

    Example:

    >>> target = np.ones((1, 2, 2), complex)
    >>> phase_error(target, 1j * target)
    array([1.57079633])
    """
    target, prediction = _image_quality.same_shape(
        _image_quality.complex_images(target, "target"),
        _image_quality.complex_images(prediction, "prediction"),
    )
    support = _image_quality.support_mask(support, target.shape)
    difference = np.abs(np.angle(prediction * np.conj(target)))
    return np.sum(difference * support, axis=(1, 2)) / np.sum(
        support, axis=(1, 2)
    )


def _image_pair(target, prediction):
    return _image_quality.same_shape(
        _image_quality.magnitudes(target, "target"),
        _image_quality.magnitudes(prediction, "prediction"),
    )
