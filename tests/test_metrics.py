"""Tests of MicroAveragedPrecision against an exact NumPy average precision,
under XLA, across replicas, and on bad values."""

import os
import subprocess
import sys
import textwrap

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


def stated_bounds(labels, scores, num_thresholds):
    """The two bounds of the metric's docstring (unit weights): from the
    histograms, sum_b tp_b (n_b - 1) / (P S_b), and from the peak density,
    rho / (pi N) (1 + ln(N / rho))."""
    n = num_thresholds
    labels = labels.ravel().astype(np.float64)
    scores = scores.ravel().astype(np.float32)  # binned as the metric does
    bins = np.clip(np.floor(scores * np.float32(n)), 0, n - 1).astype(int)
    count = np.bincount(bins, minlength=n)[::-1].astype(np.float64)
    positives = np.bincount(bins, labels, minlength=n)[::-1]
    above = np.cumsum(count)  # S_b: scores in bin b and above
    from_histogram = (
        np.sum(positives * np.maximum(count - 1, 0) / np.maximum(above, 1))
        / labels.sum()
    )
    rho = n * count.max() / labels.size
    from_density = rho / (labels.mean() * n) * (1 + np.log(n / rho))
    return from_histogram, from_density


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
    # 1000 bins: ties of scores in one bin move AP by about 1.5 / 1000
    # (see test_error_against_exact_for_several_num_thresholds).
    assert abs(float(ops.convert_to_numpy(metric.result())) - expected) < 2e-3
    assert 0.5 < expected < 0.95
    metric.reset_state()
    metric.update_state(labels, logits)
    assert abs(float(ops.convert_to_numpy(metric.result())) - expected) < 2e-3


def test_error_against_exact_for_several_num_thresholds(rng):
    """MusicNet-like decisions (5% positives, (16, 64, 128)): the error
    stays within both stated bounds and falls as 1/N (measured about 1.5/N
    on these data)."""
    labels = (rng.random((16, 64, 128)) < 0.05).astype(np.float32)
    probabilities = sigmoid(2.0 * labels + rng.standard_normal(labels.shape))
    exact = exact_average_precision(labels, probabilities)
    for n in (10, 100, 1000, 10000):
        got = average_precision(
            labels, probabilities, num_thresholds=n, from_logits=False
        )
        from_histogram, from_density = stated_bounds(labels, probabilities, n)
        error = abs(got - exact)
        # 1e-5: float32 accumulation of ~1e5 counts and of the AP sum.
        assert error <= from_histogram + 1e-5, n
        assert from_histogram <= from_density, n
        assert error < 2.0 / n, n  # measured 1.43, 1.54, 1.57, 1.50 / n


def test_scores_on_the_bins_give_the_exact_value(rng):
    """When every score sits in its own bin's interior and equal scores
    share a bin, binning changes nothing: the metric is the exact AP."""
    n = 64
    labels = (rng.random(500) < 0.3).astype(np.float32)
    centres = (rng.integers(0, n, 500) + 0.5) / n
    scores = np.where(labels > 0, np.sqrt(centres), centres)
    scores = ((np.floor(scores * n) + 0.5) / n).astype(np.float32)
    got = average_precision(labels, scores, num_thresholds=n, from_logits=False)
    # float32 sums of counts < 2**24 are exact; 1e-6 covers the AP sum.
    assert got == pytest.approx(exact_average_precision(labels, scores), 1e-6)


@settings(derandomize=True, max_examples=20, deadline=None)
@given(
    size=st.integers(1, 300),
    positives=st.floats(0.01, 0.9),
    separation=st.floats(0.0, 4.0),
    spread=st.floats(0.01, 3.0),
    num_thresholds=st.sampled_from([2, 7, 100, 1000]),
    seed=st.integers(0, 2**16),
)
def test_error_is_within_the_stated_bound(
    size, positives, separation, spread, num_thresholds, seed
):
    rng = np.random.default_rng(seed)
    # Always 300 elements, the first `size` weighted: one shape, so the JAX
    # backend compiles its eager ops once, not once per example.
    labels = (rng.random(300) < positives).astype(np.float32)
    labels[0] = 1.0  # AP needs a positive
    logits = separation * labels + spread * rng.standard_normal(300)
    probabilities = sigmoid(logits.astype(np.float32))
    weight = (np.arange(300) < size).astype(np.float32)
    got = average_precision(
        labels,
        probabilities,
        sample_weight=weight,
        num_thresholds=num_thresholds,
        from_logits=False,
    )
    labels, probabilities = labels[:size], probabilities[:size]
    exact = exact_average_precision(labels, probabilities)
    from_histogram, from_density = stated_bounds(
        labels, probabilities, num_thresholds
    )
    # 1e-5: float32 accumulation in the metric's result.
    assert abs(got - exact) <= from_histogram + 1e-5
    assert from_histogram <= from_density + 1e-12


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


@pytest.mark.slow
def test_bad_values_in_a_compiled_graph_give_nan_and_are_counted(rng):
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
    """XLA (`jit_compile=True` on TensorFlow, `jax.jit` on JAX) compiles
    the metric and gives the eager value on the same predictions."""
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
    history = model.fit(x, labels, batch_size=8, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["micro_average_precision"]))
    got = model.evaluate(x, labels, batch_size=8, verbose=0, return_dict=True)
    eager = average_precision(labels, model.predict(x, verbose=0))
    # 1e-5: a compiled sigmoid may round a score to the other side of a bin
    # edge; one decision of 768 moves AP by far less than 1e-3, and these
    # agree exactly when it does not.
    assert got["micro_average_precision"] == pytest.approx(eager, abs=1e-5)


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
