"""Tests of the transcription scores: the exact AP, the frame-to-note
decoding, and mir_eval's frame and note metrics through
`transcription_scores`."""

import sys

import numpy as np
import pytest

from cvattn_keras import metrics


def _reference_ap(labels, scores):
    """AP by its definition, one distinct threshold at a time."""
    labels, scores = np.ravel(labels), np.ravel(scores)
    total, recall, ap = labels.sum(), 0.0, 0.0
    for cut in sorted(set(scores.tolist()), reverse=True):
        chosen = scores >= cut
        hits = labels[chosen].sum()
        ap += (hits / total - recall) * hits / chosen.sum()
        recall = hits / total
    return ap


def test_average_precision_worked_example():
    # Ranks 1 and 3 are positive: (1/2) * 1 + (1/2) * (2/3).
    ap = metrics.average_precision([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1])
    assert ap == pytest.approx(5 / 6, abs=1e-12)
    # A tie between a positive and a negative counts together: 1/2.
    assert metrics.average_precision([1, 0], [0.5, 0.5]) == 0.5
    assert np.isnan(metrics.average_precision([0, 0], [0.1, 0.2]))


def test_average_precision_against_its_definition(rng):
    labels = (rng.uniform(size=(4, 30, 7)) < 0.2).astype(float)
    # Rounded scores: many ties.
    scores = np.round(labels * 0.3 + rng.uniform(size=labels.shape), 1)
    got = metrics.average_precision(labels, scores)
    assert got == pytest.approx(_reference_ap(labels, scores), abs=1e-12)


def test_frames_to_notes_runs():
    p = np.zeros((8, 3))
    p[1:4, 0] = [0.6, 0.9, 0.7]  # frames 1-3
    p[5, 0] = 0.8  # one frame
    p[6:8, 2] = 0.55  # to the end
    p[2, 1] = 0.5  # not above the threshold
    notes = metrics.frames_to_notes(p, 10, min_frames=2, lowest_note=60)
    assert notes == [(0.1, 0.4, 60), (0.6, 0.8, 62)]
    notes = metrics.frames_to_notes(p, 10, lowest_note=60, start_time=1.0)
    assert notes == [(1.1, 1.4, 60), (1.5, 1.6, 60), (1.6, 1.8, 62)]


def _music(rng, clips=3, frames=50, notes=12):
    """Piano-roll labels of a few held notes per clip."""
    labels = np.zeros((clips, frames, notes))
    for clip in labels:
        for _ in range(6):
            start = rng.integers(frames - 5)
            clip[start : start + rng.integers(3, 10), rng.integers(notes)] = 1
    return labels


def test_the_ground_truth_scores_one_on_each(rng):
    labels = _music(rng)
    scores = metrics.transcription_scores(labels, labels, 100, lowest_note=48)
    assert set(scores) == {
        "ap",
        "frame_precision",
        "frame_recall",
        "frame_accuracy",
        "note_precision",
        "note_recall",
        "note_f1",
    }
    for name, value in scores.items():
        assert value == pytest.approx(1.0, abs=1e-12), name


def test_a_constant_predictor_scores_the_label_density(rng):
    labels = _music(rng)
    scores = metrics.transcription_scores(
        labels, np.full(labels.shape, 0.3), 100, lowest_note=48
    )
    assert scores["ap"] == pytest.approx(labels.mean(), abs=1e-12)
    # Nothing above the threshold: no frame or note found.
    assert scores["frame_recall"] == 0 and scores["note_recall"] == 0


def test_onsets_within_the_tolerance_match_and_wrong_pitches_do_not(rng):
    labels = _music(rng, clips=1)
    # One frame (10 ms) late: every onset within 50 ms, the frames not all.
    late = np.roll(labels, 1, axis=1)
    scores = metrics.transcription_scores(labels, late, 100, lowest_note=48)
    assert scores["note_f1"] == pytest.approx(1.0)
    assert scores["frame_precision"] < 1 and scores["frame_recall"] < 1
    # Six frames late (60 ms): no onset matches.
    later = np.roll(labels, 6, axis=1)
    scores = metrics.transcription_scores(labels, later, 100, lowest_note=48)
    assert scores["note_f1"] == 0
    # A semitone up: no note, no frame matches.
    up = np.roll(labels, 1, axis=2)
    up[..., 0] = 0
    scores = metrics.transcription_scores(labels, up, 100, lowest_note=48)
    assert scores["note_f1"] == 0 and scores["frame_precision"] == 0


def test_bad_arguments_are_named(rng):
    labels = _music(rng)
    scores = metrics.transcription_scores
    with pytest.raises(ValueError, match="same shape"):
        scores(labels, labels[:, :10], 100)
    with pytest.raises(ValueError, match="only 0 and 1"):
        scores(labels * 0.5, labels, 100)
    with pytest.raises(ValueError, match="frame_rate=0"):
        scores(labels, labels, 0)
    with pytest.raises(ValueError, match="`probabilities` must be finite"):
        scores(labels, labels * np.nan, 100)
    with pytest.raises(ValueError, match=r"\(frames, notes\)"):
        scores(labels[0, 0], labels[0, 0], 100)
    with pytest.raises(ValueError, match="min_frames=0"):
        metrics.frames_to_notes(labels[0], 100, min_frames=0)
    for threshold in (0, 1, 1.5, float("nan"), "0.5", True):
        with pytest.raises(ValueError, match="threshold="):
            scores(labels, labels, 100, threshold=threshold)
        with pytest.raises(ValueError, match="threshold="):
            metrics.frames_to_notes(labels[0], 100, threshold=threshold)


def test_missing_mir_eval_names_the_extra(rng, monkeypatch):
    for name in [m for m in sys.modules if m.startswith("mir_eval")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "mir_eval", None)
    labels = _music(rng)
    with pytest.raises(ImportError, match=r"cvattn_keras\[music\]"):
        metrics.transcription_scores(labels, labels, 100)


def test_notes_outside_mir_evals_range_are_left_out_of_frame_scores():
    # MusicNet's 128 notes from MIDI 0: notes below 20 Hz (MIDI 15) and
    # above 5 kHz (MIDI 112) are outside mir_eval's multipitch range.
    labels = np.zeros((10, 128))
    labels[2:6, 69] = 1
    predicted = labels.copy()
    predicted[3, 120] = 0.9  # 8.4 kHz
    predicted[4, 5] = 0.9  # 11 Hz
    with pytest.warns(UserWarning, match=r"MIDI note\(s\) \[5, 120\]"):
        scores = metrics.transcription_scores(labels, predicted, 10.0)
    assert scores["frame_precision"] == 1.0
    # The note scores count them: two extra notes.
    assert scores["note_precision"] == pytest.approx(1 / 3)


def test_min_frames_filters_the_estimate_only():
    labels = np.zeros((20, 2))
    labels[1:3, 0] = 1  # a 2-frame note, missed
    labels[5:13, 1] = 1  # an 8-frame note, found
    predicted = np.zeros_like(labels)
    predicted[5:13, 1] = 0.9
    for min_frames in (1, 3):
        scores = metrics.transcription_scores(
            labels, predicted, 10.0, min_frames=min_frames, lowest_note=60
        )
        assert scores["note_recall"] == 0.5, min_frames


def test_average_precision_checks_its_inputs():
    with pytest.raises(ValueError, match="same shape"):
        metrics.average_precision([1, 0, 1], [0.9, 0.8])
    with pytest.raises(ValueError, match="finite"):
        metrics.average_precision([1, 0], [0.9, np.nan])
    assert np.isnan(metrics.average_precision([], []))


def test_average_precision_takes_only_0_and_1_labels():
    """As scikit-learn: labels {0, 2} scored twice the 0/1 value."""
    for labels in ([0, 2, 1], [0, 0.5, 1], [0, -1, 1], [0, np.nan, 1]):
        with pytest.raises(ValueError, match="`labels` must hold only 0"):
            metrics.average_precision(labels, [0.1, 0.9, 0.5])
    booleans = metrics.average_precision([False, True], [0.1, 0.9])
    assert booleans == 1.0


def test_transcription_scores_refuse_what_they_cannot_score(rng):
    """Each was scored silently: a wrong number, not an error."""
    labels = _music(rng)
    scores = metrics.transcription_scores
    with pytest.raises(ValueError, match="only 0 and 1"):
        scores(labels * 2, labels, 100, lowest_note=48)
    # Logits: thresholded at 0.5 as if probabilities.
    with pytest.raises(ValueError, match=r"`probabilities` must be in \[0"):
        scores(labels, 8 * labels - 4, 100, lowest_note=48)
    for tolerance in (-1, float("nan"), float("inf"), "0.05", None):
        with pytest.raises(ValueError, match="onset_tolerance="):
            scores(
                labels, labels, 100, lowest_note=48, onset_tolerance=tolerance
            )
    for note in (48.7, 48.0, "48", True, None):
        with pytest.raises(ValueError, match="lowest_note="):
            scores(labels, labels, 100, lowest_note=note)
        with pytest.raises(ValueError, match="lowest_note="):
            metrics.frames_to_notes(labels[0], 100, lowest_note=note)
    # Outside MIDI 0-127 (12 notes: 0 to 116 can be served).
    for note in (5000, -500, -1, 117):
        with pytest.raises(ValueError, match=r"lowest_note <= 116"):
            scores(labels, labels, 100, lowest_note=note)
    assert scores(labels, labels, 100, lowest_note=np.int64(100))["ap"] == 1
    for shape in ((0, 12), (10, 0), (3, 0, 12), (0, 10, 12)):
        with pytest.raises(ValueError, match="at least one frame and one"):
            scores(np.zeros(shape), np.zeros(shape), 100)


def test_no_warning_when_every_note_on_is_in_range():
    """Notes outside 20 Hz-5 kHz that are never on change nothing."""
    import warnings

    labels = np.zeros((10, 128))
    labels[2:6, 69] = 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores = metrics.transcription_scores(labels, labels * 0.9, 10.0)
    assert scores["frame_precision"] == 1.0
