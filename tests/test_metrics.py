"""Tests of MicroAveragedPrecision against an exact NumPy average precision
(over the whole float range, confident models included), under XLA, across
replicas, and on bad values."""

import contextlib
import os
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from keras import ops

from cvattn_keras.metrics import MicroAveragedPrecision


def exact_average_precision(labels, scores):
    """sklearn's definition: sum over distinct thresholds, from the top, of
    (recall gained) x precision."""
    labels = labels.ravel().astype(np.float64)
    scores = scores.ravel().astype(np.float64)
    order = np.argsort(-scores, kind="stable")
    labels, scores = labels[order], scores[order]
    last_of_tie = np.r_[scores[1:] != scores[:-1], True]
    tp = np.cumsum(labels)[last_of_tie]
    predicted = (np.arange(labels.size) + 1)[last_of_tie]
    recall = tp / labels.sum()
    precision = tp / predicted
    return np.sum(np.diff(np.r_[0.0, recall]) * precision)


def logit(probabilities):
    """The metric's logit of a probability: clipped to [0, 1], subnormals
    as 0, log(p) - log1p(-p) in float32, clipped to the finite floats."""
    f32 = np.float32
    p = np.clip(np.asarray(probabilities, f32), 0, 1)
    p = np.where(p < f32(2.0**-126), f32(0), p)
    with np.errstate(divide="ignore"):
        z = (np.log(p) - np.log1p(-p)).astype(f32)
    return np.clip(z, -np.finfo(f32).max, np.finfo(f32).max)


def metric_bins(scores, num_thresholds, from_logits=True):
    """The layout of the metric's docstring, in NumPy: the bin of each
    score (increasing with it) and the number of bins. Per side: 8 N bins
    4 / N wide below 32, ceil(N / 4) per octave up to 2**20, 16 per octave
    to the largest float32, the octaves from the float32 bit pattern; the
    same float32 operations as the metric's, so the same bins."""
    n, f32 = num_thresholds, np.float32
    z = np.asarray(scores, f32).ravel()
    if not from_logits:
        z = logit(z)
    core_bins, per_octave = 8 * n, -(-n // 4)
    half = core_bins + 15 * per_octave + 108 * 16
    a = np.abs(z)
    bits = a.view(np.int32).astype(np.int64)
    core = np.floor(np.minimum(a, f32(32)) * f32(n / 4))
    fine = (bits - 0x42000000).astype(f32)  # from 32
    fine = np.floor(fine * f32(per_octave / 2**23)) + core_bins
    coarse = (bits - 0x49800000).astype(f32)  # from 2**20
    coarse = np.floor(coarse * f32(16 / 2**23)) + core_bins + 15 * per_octave
    step = np.where(a < 32, core, np.where(a < 2.0**20, fine, coarse))
    step = np.minimum(step, half - 1).astype(np.int64)
    bins = np.where(z <= -f32(2.0**-126), half - 1 - step, half + step)
    return bins, 2 * half


def stated_bounds(labels, scores, num_thresholds, from_logits=True):
    """The two bounds of the metric's docstring (unit weights): from the
    histograms, sum_b tp_b (n_b - 1) / (P S_b), and from the largest bin's
    share s of the scores, s / pi (1 + ln(1 / s))."""
    labels = labels.ravel().astype(np.float64)
    bins, size = metric_bins(scores, num_thresholds, from_logits)
    count = np.bincount(bins, minlength=size)[::-1].astype(np.float64)
    positives = np.bincount(bins, labels, minlength=size)[::-1]
    above = np.cumsum(count)  # S_b: scores in bin b and above
    from_histogram = (
        np.sum(positives * np.maximum(count - 1, 0) / np.maximum(above, 1))
        / labels.sum()
    )
    share = count.max() / labels.size
    from_share = share / labels.mean() * (1 + np.log(1 / share))
    return from_histogram, from_share


def average_precision(labels, predictions, **kwargs):
    sample_weight = kwargs.pop("sample_weight", None)
    metric = MicroAveragedPrecision(**kwargs)
    metric.update_state(labels, predictions, sample_weight=sample_weight)
    return float(ops.convert_to_numpy(metric.result()))


def sigmoid(logits):
    """The float32 probabilities the metric bins (the backend's sigmoid)."""
    return ops.convert_to_numpy(ops.sigmoid(ops.convert_to_tensor(logits)))


def test_matches_the_exact_definition_streaming(rng):
    labels = (rng.random((6, 10, 12)) < 0.2).astype(np.float32)
    logits = 2.0 * labels + rng.standard_normal(labels.shape)
    metric = MicroAveragedPrecision()
    for batch in range(3):  # streaming over batches
        part = slice(2 * batch, 2 * batch + 2)
        metric.update_state(labels[part], logits[part])
    expected = exact_average_precision(labels, 1 / (1 + np.exp(-logits)))
    # Ties of scores in one bin move AP by about 0.55 / num_thresholds
    # (see test_error_against_exact_for_several_num_thresholds).
    assert abs(float(ops.convert_to_numpy(metric.result())) - expected) < 2e-3
    assert 0.5 < expected < 0.95
    metric.reset_state()
    metric.update_state(labels, logits)
    assert abs(float(ops.convert_to_numpy(metric.result())) - expected) < 2e-3


def test_error_against_exact_for_several_num_thresholds(rng):
    """MusicNet-like decisions (5% positives, (16, 64, 128)): the error
    stays within both stated bounds and falls as 1/N (measured 0.55/N on
    these data, 1.5/N with N equal bins of probability)."""
    labels = (rng.random((16, 64, 128)) < 0.05).astype(np.float32)
    probabilities = sigmoid(2.0 * labels + rng.standard_normal(labels.shape))
    exact = exact_average_precision(labels, probabilities)
    for n in (10, 100, 1000, 10000):
        got = average_precision(
            labels, probabilities, num_thresholds=n, from_logits=False
        )
        from_histogram, from_share = stated_bounds(
            labels, probabilities, n, from_logits=False
        )
        error = abs(got - exact)
        # 1e-5: float32 accumulation of ~1e5 counts and of the AP sum.
        assert error <= from_histogram + 1e-5, n
        assert from_histogram <= from_share, n
        assert error < 0.7 / n, n  # measured 0.548, 0.526, 0.547, 0.549 / n


def any_float32(rng, size, tied=0.2):
    """Finite floats over the whole float32 range, every binade alike (from
    random bit patterns; subnormals too), both signs, a share `tied` of
    them equal."""
    bits = rng.integers(0, 0x7F800000, size).astype(np.int32)
    values = bits.view(np.float32) * rng.choice([-1, 1], size)
    values = values.astype(np.float32)
    values[rng.random(size) < tied] = values.flat[0]
    return values


def test_scores_on_the_bins_give_the_exact_value(rng):
    """When no bin holds two different scores, binning changes nothing:
    with one score per occupied bin, anywhere in the float range, the
    metric is the exact AP."""
    n = 64
    labels = (rng.random(500) < 0.3).astype(np.float32)
    logits = any_float32(rng, 500) + 30 * labels
    bins, _ = metric_bins(logits, n)
    first = {}  # one representative logit per bin
    for b, z in zip(bins, logits):
        first.setdefault(b, z)
    scores = np.array([first[b] for b in bins], np.float32)
    got = average_precision(labels, scores, num_thresholds=n)
    # float32 sums of counts < 2**24 are exact; 1e-6 covers the AP sum.
    assert got == pytest.approx(exact_average_precision(labels, scores), 1e-6)


def histogram(metric):
    return ops.convert_to_numpy(metric.positives + metric.negatives)


def test_the_layout_of_the_docstring():
    """The metric bins as `metric_bins` (its docstring in NumPy) does:
    logits and probabilities, over the whole float range."""
    for n, size in [(2, 3518), (1000, 26956), (10000, 238456)]:
        metric = MicroAveragedPrecision(num_thresholds=n)
        assert metric.num_bins == size == metric_bins([0.0], n)[1]
        assert metric.positives.shape == (size,)
    n = 1000
    logits = np.array(
        [-3.4e38, -3e38, -1e6, -32, -31.999, -4 / n, -1e-30, -1e-40, 0.0]
        + [1e-40, 1e-30, 4 / n, 0.005, 31.999, 32, 32.1, 1e6, 3e38, 3.4e38],
        np.float32,
    )
    bins, size = metric_bins(logits, n)
    assert bins.min() == 0 and bins.max() == size - 1  # the end bins
    assert np.all(np.diff(bins) >= 0)
    # 4 / n wide below 32 (on each side of 0, subnormals counting as 0)
    assert list(bins[5:12] - size // 2) == [-2, -1, 0, 0, 0, 0, 1]
    assert bins[12] == bins[11] and bins[14] == bins[13] + 1
    # The octave bins: 32 starts the first, 2**20 the first of 16 an octave
    # (the edges rounded to 8 of the 2**23 bit patterns of an octave).
    per_side = np.array([32, 2**20 - 64, 2**20, 3.4e38], np.float32)
    assert list(metric_bins(per_side, n)[0] - size // 2) == [
        8 * n,
        8 * n + 15 * n // 4 - 1,
        8 * n + 15 * n // 4,
        size // 2 - 1,
    ]
    # Distinct weights: each bin's count says which logits fell in it.
    weight = 2.0 ** np.arange(logits.size, dtype=np.float32)
    metric = MicroAveragedPrecision(num_thresholds=n)
    metric.update_state(np.ones_like(logits), logits, sample_weight=weight)
    expected = np.bincount(bins, weight, minlength=size)
    np.testing.assert_array_equal(histogram(metric), expected)
    # Probabilities: 0 and 1 at the ends, subnormals as 0, and 1 - 1e-7 and
    # 1 - 1e-6 (logits 15.9 and 13.8) far apart.
    probabilities = np.array(
        [0, 1e-45, 1e-30, 0.5, 1 - 1e-6, 1 - 1e-7, 1], np.float32
    )
    bins, _ = metric_bins(probabilities, n, from_logits=False)
    assert list(bins[[0, 1, -1]]) == [0, 0, size - 1]
    assert bins[5] - bins[4] == 535  # (15.942 - 13.802) * n / 4, float32
    metric = MicroAveragedPrecision(num_thresholds=n, from_logits=False)
    weight = 2.0 ** np.arange(probabilities.size, dtype=np.float32)
    # Padded with weight 0 to the shape above (JAX compiles per shape).
    pad = logits.size - probabilities.size
    metric.update_state(
        np.ones_like(logits),
        np.pad(probabilities, (0, pad)),
        sample_weight=np.pad(weight, (0, pad)),
    )
    expected = np.bincount(bins, weight, minlength=size)
    np.testing.assert_array_equal(histogram(metric), expected)


@settings(derandomize=True, max_examples=25, deadline=None)
@given(
    size=st.integers(1, 256),
    from_logits=st.booleans(),
    location=st.one_of(
        st.floats(-40.0, 40.0), st.sampled_from([-1e30, -1e5, 1e5, 1e30])
    ),
    spread=st.floats(1e-3, 10.0),
    separation=st.floats(0.0, 4.0),
    anywhere=st.floats(0.0, 0.3),
    num_thresholds=st.sampled_from([2, 7, 100, 1000]),
    seed=st.integers(0, 2**16),
)
def test_error_is_within_the_stated_bound(
    size,
    from_logits,
    location,
    spread,
    separation,
    anywhere,
    num_thresholds,
    seed,
):
    """Any scores: logits around any location, at any spread relative to
    it, with a share spread over the whole float32 range (bit patterns),
    or their probabilities. The metric is the exact AP of its bins, and
    within both stated bounds of the exact AP of the scores."""
    rng = np.random.default_rng(seed)
    # Always 256 elements, the first `size` weighted: one shape, so the JAX
    # backend compiles its eager ops once, not once per example.
    labels = (rng.random(256) < 0.3).astype(np.float32)
    labels[0] = 1.0  # AP needs a positive
    scale = spread * max(1.0, abs(location))
    logits = location + scale * (separation * labels + rng.normal(size=256))
    logits = logits.astype(np.float32)
    wide = rng.random(256) < anywhere
    logits[wide] = any_float32(rng, 256)[wide]
    if from_logits:
        scores = logits
    else:  # saturates to 0 and 1 below -104 and above 17
        scores = sigmoid(logits.astype(np.float32))
    weight = (np.arange(256) < size).astype(np.float32)
    kwargs = dict(num_thresholds=num_thresholds, from_logits=from_logits)
    got = average_precision(labels, scores, sample_weight=weight, **kwargs)
    labels, scores = labels[:size], scores[:size]
    bins, _ = metric_bins(scores, num_thresholds, from_logits)
    assert got == pytest.approx(exact_average_precision(labels, bins), 1e-5)
    exact = exact_average_precision(labels, scores)
    from_histogram, from_share = stated_bounds(labels, scores, **kwargs)
    # 1e-5: float32 accumulation in the metric's result.
    assert abs(got - exact) <= from_histogram + 1e-5
    assert from_histogram <= from_share + 1e-12


def resolution(logit, num_thresholds):
    """The widest bin at a logit, as the docstring states it: 4 / N times
    the larger of 1 and |logit| below 2**20, |logit| / 16 beyond."""
    magnitude = abs(float(logit))
    if magnitude < 2.0**20:
        return 4 / num_thresholds * max(1.0, magnitude)
    return magnitude / 16


@settings(derandomize=True, max_examples=30, deadline=None)
@given(
    sign=st.sampled_from([-1.0, 1.0]),
    exponent=st.floats(-3.0, 37.5),
    num_thresholds=st.sampled_from([7, 100, 1000]),
    spread=st.floats(0.0, 0.5),
    seed=st.integers(0, 2**16),
)
def test_scores_further_apart_than_a_bin_are_never_tied(
    sign, exponent, num_thresholds, spread, seed
):
    """Anywhere in the float range: every negative at or below a logit x,
    every positive at or above x plus the resolution there (1% more, for
    the rounding of the bin edges): AP 1. N equal bins of probability tie
    them all above a logit of about ln(N) (the issue's 30 against 17)."""
    rng = np.random.default_rng(seed)
    x = np.float32(sign * 10.0**exponent)
    # The resolution at x and at y (which may be in the next region).
    gap = resolution(x, num_thresholds)
    gap = max(gap, resolution(abs(x) + gap, num_thresholds))
    y = np.float32(x + 1.01 * gap)
    assert y > x
    # 256 elements, as in test_error_is_within_the_stated_bound: JAX
    # compiles its eager ops for this shape once.
    labels = (rng.random(256) < 0.3).astype(np.float32)
    labels[0], labels[1] = 1.0, 0.0
    step = spread * max(1.0, abs(float(x)))
    scores = np.where(
        labels > 0, y + step * rng.random(256), x - step * rng.random(256)
    ).astype(np.float32)
    scores[0], scores[1] = y, x  # the closest pair itself
    got = average_precision(labels, scores, num_thresholds=num_thresholds)
    assert got == pytest.approx(1.0, abs=1e-6)


def confident(rng, shape):
    """The issue's transcriber: 5% positives at logits N(10, 1.5), 1%
    confident negatives at N(8, 1.5), the rest at N(-5, 1.5)."""
    draw = rng.random(shape)
    labels = (draw < 0.05).astype(np.float32)
    logits = np.where(
        labels > 0,
        rng.normal(10, 1.5, shape),
        np.where(
            draw < 0.06, rng.normal(8, 1.5, shape), rng.normal(-5, 1.5, shape)
        ),
    )
    return labels, logits.astype(np.float32)


def test_confident_models_keep_their_ranking(rng):
    """Logits far above ln(999): N equal bins of probability put them all in
    the top bin (AP 0.868 and 0.934 at N = 1000 and 10000 on the issue's
    case, 0.10 for perfectly separated scores)."""
    labels, logits = confident(rng, (8, 64, 128))
    exact = exact_average_precision(labels, logits)
    assert 0.9 < exact < 0.99
    for n in (1000, 10000):
        error = exact - average_precision(labels, logits, num_thresholds=n)
        assert 0 <= error < 0.3 / n, n  # measured 0.04 to 0.16 / n
        # 30 higher, in the octave bins: measured 1.3 to 1.8 / n
        shifted = average_precision(labels, logits + 30, num_thresholds=n)
        assert 0 <= exact - shifted < 2.5 / n, n
    # Perfectly separated: positives at 30 to 31, negatives at 17 to 18.
    separated = np.where(
        labels > 0,
        rng.uniform(30, 31, labels.shape),
        rng.uniform(17, 18, labels.shape),
    )
    assert average_precision(labels, separated) == pytest.approx(1.0, abs=1e-6)
    # Probabilities 1 - 1e-7 against 1 - 1e-6, and the two largest float32
    # values below 1, 1 - 2**-24 against 1 - 2**-23.
    for top, below in [(1 - 1e-7, 1 - 1e-6), (1 - 2**-24, 1 - 2**-23)]:
        probabilities = np.where(labels > 0, top, below).astype(np.float32)
        got = average_precision(labels, probabilities, from_logits=False)
        assert got == pytest.approx(1.0, abs=1e-6), top


def test_probabilities_perfect_and_constant_scores(rng):
    labels = (rng.random((200,)) < 0.3).astype(np.float32)
    assert average_precision(
        labels, labels * 0.9 + 0.05, from_logits=False
    ) == pytest.approx(1.0)
    assert average_precision(
        labels, np.full_like(labels, 0.5), from_logits=False
    ) == pytest.approx(labels.mean(), abs=1e-6)
    # No positive at all: 0, as documented.
    assert average_precision(np.zeros(5), np.ones(5)) == 0.0


def test_sample_weight_zero_ignores_samples(rng):
    labels = (rng.random((4, 50)) < 0.3).astype(np.float32)
    logits = rng.standard_normal((4, 50))
    weighted = average_precision(
        labels, logits, sample_weight=np.array([[1], [1], [0], [0]])
    )
    # A (batch,) weight weights whole samples, as Keras passes it.
    per_sample = average_precision(
        labels, logits, sample_weight=np.array([1, 1, 0, 0])
    )
    first_two = average_precision(labels[:2], logits[:2])
    assert weighted == pytest.approx(first_two)
    assert per_sample == pytest.approx(first_two)


def test_zero_weight_elements_are_not_checked(rng):
    """Padding with label -1 and a NaN prediction under weight 0 is left
    out, eagerly and in a compiled graph alike."""
    labels = (rng.random((3, 20)) < 0.3).astype(np.float32)
    logits = rng.standard_normal((3, 20)).astype(np.float32)
    padded_labels = np.concatenate([labels, np.full((3, 5), -1.0)], axis=1)
    padded_logits = np.concatenate([logits, np.full((3, 5), np.nan)], axis=1)
    weight = np.concatenate([np.ones((3, 20)), np.zeros((3, 5))], axis=1)
    got = average_precision(padded_labels, padded_logits, sample_weight=weight)
    assert got == pytest.approx(average_precision(labels, logits))


@pytest.mark.parametrize(
    "labels, predictions, weight, match",
    [
        ([0.0, 1.0, 2.0], [0.1, 0.2, 0.3], None, r"`y_true` .*\[2\.0\]"),
        ([0.0, 1.0, 0.5], [0.1, 0.2, 0.3], None, r"`y_true` .*\[0\.5\]"),
        ([0.0, 1.0, np.nan], [0.1, 0.2, 0.3], None, r"`y_true` .*\[nan\]"),
        ([0.0, 1.0, 1.0], [0.1, np.nan, 0.3], None, r"`y_pred` .*\[nan\]"),
        ([0.0, 1.0, 1.0], [np.inf, 0.2, -np.inf], None, r"`y_pred` .* 2 "),
        ([0.0, 1.0, 1.0], [0.1, 0.2, 0.3], [1, -1, 1], r"`sample_weight`"),
        ([0.0, 1.0, 1.0], [0.1, 0.2, 0.3], [1, np.nan, 1], r"`sample_weight`"),
    ],
)
def test_bad_values_raise_eagerly_and_leave_the_state(
    labels, predictions, weight, match
):
    metric = MicroAveragedPrecision()
    metric.update_state([1.0, 0.0], [0.9, 0.1])
    before = float(ops.convert_to_numpy(metric.result()))
    assert before == 1.0
    with pytest.raises(ValueError, match=match):
        metric.update_state(
            np.array(labels, np.float32),
            np.array(predictions, np.float32),
            sample_weight=None if weight is None else np.array(weight),
        )
    assert float(ops.convert_to_numpy(metric.result())) == before
    assert float(ops.convert_to_numpy(metric.invalid)) == 0.0


def test_a_label_of_two_never_gives_an_ap_above_one():
    """The issue's example (AP = 1.5): eager tensors raise too."""
    with pytest.raises(ValueError, match="y_true"):
        MicroAveragedPrecision().update_state(
            ops.convert_to_tensor([2.0, 0.0]), ops.convert_to_tensor([1.0, 0.0])
        )


def identity_model(metric, shape, jit_compile="auto"):
    inputs = keras.Input(shape)
    model = keras.Model(inputs, keras.layers.Identity()(inputs))
    model.compile(loss="mse", metrics=[metric], jit_compile=jit_compile)
    return model


@contextlib.contextmanager
def quiet_under_torch():
    """torch.compile (`jit_compile=True` on PyTorch) turns the warnings it
    meets in Keras' own code into errors under this suite's "error"
    filter: silence them there."""
    with warnings.catch_warnings():
        if keras.backend.backend() == "torch":
            warnings.simplefilter("ignore")
        yield


@pytest.mark.slow
def test_bad_values_in_a_compiled_graph_give_nan_and_are_counted(rng):
    if keras.backend.backend() == "torch":
        pytest.skip(
            "a PyTorch step runs eagerly (torch.compile breaks its graph "
            "for the check), where bad values raise"
        )
    labels = (rng.random((8, 6)) < 0.4).astype(np.float32)
    logits = rng.standard_normal((8, 6)).astype(np.float32)
    labels[1, 2] = 2.0
    logits[3, 4] = np.nan
    logits[5, 0] = np.inf
    metric = MicroAveragedPrecision()
    model = identity_model(metric, (6,))
    got = model.evaluate(logits, labels, batch_size=4, verbose=0)
    assert np.isnan(got[1])
    assert float(ops.convert_to_numpy(metric.invalid)) == 3.0
    # The valid elements were still counted, and reset clears the flag.
    assert float(ops.convert_to_numpy(ops.sum(metric.positives))) == (
        labels.sum() - 2.0 - labels[3, 4] - labels[5, 0]
    )
    metric.reset_state()
    assert float(ops.convert_to_numpy(metric.invalid)) == 0.0


@pytest.mark.slow
def test_fit_and_evaluate_with_jit_compile(rng):
    """XLA (`jit_compile=True` on TensorFlow, `jax.jit` on JAX, and
    torch.compile) compiles the metric and gives the eager value on the
    same predictions."""
    labels = (rng.random((32, 8, 3)) < 0.3).astype(np.float32)
    x = rng.standard_normal((32, 8, 5)).astype(np.float32)
    inputs = keras.Input((8, 5))
    model = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    model.compile(
        optimizer="adam",
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[MicroAveragedPrecision()],
        jit_compile=True,
    )
    with quiet_under_torch():
        history = model.fit(x, labels, batch_size=8, epochs=2, verbose=0)
        got = model.evaluate(
            x, labels, batch_size=8, verbose=0, return_dict=True
        )
        predictions = model.predict(x, verbose=0)
    assert np.all(np.isfinite(history.history["micro_average_precision"]))
    eager = average_precision(labels, predictions)
    # 1e-5: the compiled evaluation step may round a logit differently from
    # `predict`, to the other side of a bin edge; one decision of 768 moves
    # AP by far less than 1e-3, and these agree exactly when it does not.
    assert got["micro_average_precision"] == pytest.approx(eager, abs=1e-5)


@pytest.mark.parametrize(
    "jit_compile",
    [
        "auto",
        pytest.param(
            True,
            marks=[
                pytest.mark.slow,
                pytest.mark.skipif(
                    keras.backend.backend() == "jax",
                    reason="the same jax.jit as 'auto' on JAX",
                ),
            ],
        ),
    ],
)
def test_compiled_steps_bin_as_eager_over_the_float_range(rng, jit_compile):
    """Inside `evaluate` (a graph on TensorFlow, `jax.jit` on JAX, and XLA
    or torch.compile with `jit_compile=True`), batches of 8, 8 and 4 (the
    last one traced with a batch of unknown size): the issue's confident
    logits, then floats from the whole float32 range. A logit's bin is
    bit-exact, so the histograms are those of `metric_bins` (which eager
    calls match, above); a probability's goes through the backend's `log`,
    so it may move by a bin at an edge. The AP is within the stated bound
    of the exact one."""
    from_logits = MicroAveragedPrecision(name="logits")
    # The same values as probabilities: clipped to [0, 1].
    from_probabilities = MicroAveragedPrecision(
        from_logits=False, name="probabilities"
    )
    inputs = keras.Input((128,))
    model = keras.Model(inputs, keras.layers.Identity()(inputs))
    model.compile(
        loss="mse",
        metrics=[from_logits, from_probabilities],
        jit_compile=jit_compile,
    )
    confident_labels, confident_logits = confident(rng, (20, 128))
    wide = any_float32(rng, (20, 128), tied=0)  # half inside [-1, 1]
    wide_labels = (rng.random(wide.shape) < 0.3).astype(np.float32)
    for x, y in [(confident_logits, confident_labels), (wide, wide_labels)]:
        with quiet_under_torch():
            got = model.evaluate(
                x, y, batch_size=8, verbose=0, return_dict=True
            )
        for metric in (from_logits, from_probabilities):
            bins, size = metric_bins(x, 1000, metric.from_logits)
            expected = np.bincount(bins, minlength=size)
            moved = np.abs(histogram(metric) - expected).sum()
            assert moved <= (0 if metric is from_logits else 4), moved
            scores = x if metric.from_logits else np.clip(x, 0, 1)
            exact = exact_average_precision(y, scores)
            from_histogram, _ = stated_bounds(
                y, scores, 1000, from_logits=metric.from_logits
            )
            error = abs(got[metric.name] - exact)
            assert error <= from_histogram + 1e-5, metric.name


def test_state_is_summed_across_replicas():
    metric = MicroAveragedPrecision()
    for variable in metric.variables:
        assert variable.aggregation == "sum", variable.name
    assert {v.name for v in metric.variables} == {
        "positives",
        "negatives",
        "invalid",
    }


MIRRORED = textwrap.dedent(
    """
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )
    import keras
    from cvattn_keras.metrics import MicroAveragedPrecision

    rng = np.random.default_rng(3)
    y = (rng.random((24, 4, 5)) < 0.3).astype("float32")
    x = (2 * y + rng.standard_normal(y.shape)).astype("float32")
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        inputs = keras.Input((4, 5))
        model = keras.Model(inputs, keras.layers.Identity()(inputs))
        metric = MicroAveragedPrecision()
        model.compile(loss="mse", metrics=[metric])
    got = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    one = MicroAveragedPrecision()
    one.update_state(y, x)
    positives = keras.ops.convert_to_numpy(metric.positives)
    print("REPLICAS", strategy.num_replicas_in_sync)
    print("AP", got["micro_average_precision"], float(one.result()))
    print("POSITIVES", float(positives.sum()), float(y.sum()))
    """
)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_mirrored_strategy_over_two_devices_sums_the_replicas():
    """Logical devices must be set before TensorFlow starts: a subprocess,
    bounded in time. Each replica sees half of every batch; the read state
    is the sum over replicas, so AP equals one device's."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [sys.executable, "-c", MIRRORED],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(
        line.split(" ", 1)
        for line in done.stdout.splitlines()
        if line.split(" ", 1)[0] in {"REPLICAS", "AP", "POSITIVES"}
    )
    assert lines["REPLICAS"] == "2"
    distributed, single = map(float, lines["AP"].split())
    # Same histograms, summed in another order: float32 rounding only.
    assert distributed == pytest.approx(single, abs=1e-6)
    read, expected = map(float, lines["POSITIVES"].split())
    assert read == expected  # a mean or one replica's state would not be


def test_config_and_bad_arguments():
    metric = MicroAveragedPrecision(num_thresholds=50, from_logits=False)
    assert (
        MicroAveragedPrecision.from_config(metric.get_config()).num_thresholds
        == 50
    )
    with pytest.raises(ValueError, match="num_thresholds=1"):
        MicroAveragedPrecision(num_thresholds=1)
    with pytest.raises(ValueError, match=r"y_pred.shape=\(2, 3\)"):
        metric.update_state(np.zeros((2, 4)), np.zeros((2, 3)))
