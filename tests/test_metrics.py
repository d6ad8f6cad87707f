"""Tests of MicroAveragedPrecision against an exact NumPy average precision."""

import numpy as np
import pytest

from cvattn_keras.metrics import MicroAveragedPrecision


def exact_average_precision(labels, scores):
    """sklearn's definition: sum over distinct thresholds, from the top, of
    (recall gained) x precision."""
    labels, scores = labels.ravel(), scores.ravel()
    order = np.argsort(-scores, kind="stable")
    labels, scores = labels[order], scores[order]
    last_of_tie = np.r_[scores[1:] != scores[:-1], True]
    tp = np.cumsum(labels)[last_of_tie]
    predicted = (np.arange(labels.size) + 1)[last_of_tie]
    recall = tp / labels.sum()
    precision = tp / predicted
    return np.sum(np.diff(np.r_[0.0, recall]) * precision)


def test_matches_the_exact_definition_streaming(rng):
    labels = (rng.random((6, 10, 12)) < 0.2).astype(np.float32)
    logits = 2.0 * labels + rng.standard_normal(labels.shape)
    metric = MicroAveragedPrecision()
    for batch in range(3):  # streaming over batches
        part = slice(2 * batch, 2 * batch + 2)
        metric.update_state(labels[part], logits[part])
    expected = exact_average_precision(labels, 1 / (1 + np.exp(-logits)))
    # 1000 bins: ties of scores closer than 1e-3 move AP by < 1e-3.
    assert abs(float(metric.result()) - expected) < 2e-3
    assert 0.5 < expected < 0.95
    metric.reset_state()
    metric.update_state(labels, logits)
    assert abs(float(metric.result()) - expected) < 2e-3


def test_probabilities_perfect_and_constant_scores(rng):
    labels = (rng.random((200,)) < 0.3).astype(np.float32)
    metric = MicroAveragedPrecision(from_logits=False)
    metric.update_state(labels, labels * 0.9 + 0.05)
    assert float(metric.result()) == pytest.approx(1.0)
    metric = MicroAveragedPrecision(from_logits=False)
    metric.update_state(labels, np.full_like(labels, 0.5))
    assert float(metric.result()) == pytest.approx(labels.mean(), abs=1e-6)


def test_sample_weight_zero_ignores_samples(rng):
    labels = (rng.random((4, 50)) < 0.3).astype(np.float32)
    logits = rng.standard_normal((4, 50))
    weighted = MicroAveragedPrecision()
    weighted.update_state(
        labels, logits, sample_weight=np.array([[1], [1], [0], [0]])
    )
    first_two = MicroAveragedPrecision()
    first_two.update_state(labels[:2], logits[:2])
    assert float(weighted.result()) == pytest.approx(float(first_two.result()))


def test_config_and_bad_arguments():
    metric = MicroAveragedPrecision(num_thresholds=50, from_logits=False)
    assert (
        MicroAveragedPrecision.from_config(metric.get_config()).num_thresholds
        == 50
    )
    with pytest.raises(ValueError, match="num_thresholds=1"):
        MicroAveragedPrecision(num_thresholds=1)
