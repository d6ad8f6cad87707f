"""Micro-averaged average precision, the paper's MusicNet metric."""

import keras
import numpy as np
from keras import ops

__all__ = ["MicroAveragedPrecision"]

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
        name, dtype: as for any Keras metric.

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
