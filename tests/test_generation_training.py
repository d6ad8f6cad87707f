"""Tests of training a generator on its own fed-back outputs:
`models.feedback_inputs` and `models.FeedbackTraining`, against NumPy
computations of the passes (the generator called on previous notes
built here) and against `models.generate`."""

import keras
import numpy as np
import pytest

from cvattn_keras import models

# A tiny generator: 10 bins -> 4 -> 1 in the front end.
SMALL = dict(
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(2, 4),
    frontend_kernel_sizes=(3, 3),
)
SOURCE, TARGET, BINS, NOTES = 5, 4, 10, 3

# Float32 rounding: the same decoder computation, batched or sliced
# differently (a view of the generator's graph against the whole model;
# logits of order 1, about 1e-7 relative).
ATOL = 1e-5


def _generator(dropout=0.0):
    return models.music_generator(
        source_frames=SOURCE,
        target_frames=TARGET,
        bins=BINS,
        notes=NOTES,
        dropout=dropout,
        feedforward_dropout=dropout,
        **SMALL,
    )


def _np_shift(x):
    """NumPy: shifted right one frame along axis 1, a zero first frame."""
    out = np.zeros_like(x)
    out[:, 1:] = x[:, :-1]
    return out


def _np_feedback(logits, feedback, threshold=0.5):
    """NumPy: what `generate` feeds back, every frame at once: the logits,
    or 1.0 where the probability is above `threshold` (in float64)."""
    logits = np.asarray(logits, np.float64)
    if feedback == "notes":
        logits = (1 / (1 + np.exp(-logits)) > threshold).astype(np.float64)
    return _np_shift(logits).astype(np.float32)


def _call(model, *inputs, training=False):
    return keras.ops.convert_to_numpy(model(list(inputs), training=training))


def _data(rng, batch=6):
    spectra = rng.standard_normal((batch, SOURCE, 2 * BINS)).astype("float32")
    labels = (rng.random((batch, TARGET, NOTES)) > 0.5).astype("float32")
    return spectra, labels


@pytest.mark.parametrize("feedback", ["logits", "notes"])
@pytest.mark.parametrize("threshold", [0.5, 0.3])
def test_feedback_inputs_match_numpy(rng, feedback, threshold):
    logits = rng.standard_normal((3, 5, 4)).astype("float32") * 3
    # Logits at the threshold's cut, and one float32 step either side:
    # thresholded as NumPy does (strictly above).
    cut = np.float32(np.log(threshold / (1 - threshold)))
    logits[0, 0, :3] = [
        cut,
        np.nextafter(cut, np.float32(np.inf)),
        np.nextafter(cut, np.float32(-np.inf)),
    ]
    got = keras.ops.convert_to_numpy(
        models.feedback_inputs(logits, feedback, threshold)
    )
    # Exact: a copy, or a comparison with the same cut.
    np.testing.assert_array_equal(
        got, _np_feedback(logits, feedback, threshold)
    )
    if feedback == "notes":
        assert set(np.unique(got[:, 1:])) == {0.0, 1.0}


def test_one_pass_is_teacher_forcing_and_two_passes_feed_back(rng):
    generator = _generator()
    spectra, labels = _data(rng)
    previous = models.shift_right(labels)
    forced = _call(generator, spectra, previous)
    one = models.FeedbackTraining(generator, passes=1)
    np.testing.assert_allclose(_call(one, spectra, previous), forced, atol=ATOL)
    for feedback in ("logits", "notes"):
        two = models.FeedbackTraining(generator, passes=2, feedback=feedback)
        expected = _call(
            generator, spectra, _np_feedback(forced, feedback)
        )  # pass 2 on pass 1's fed-back outputs
        np.testing.assert_allclose(
            _call(two, spectra, previous), expected, atol=ATOL
        )
    # A dict of the generator's input names is the same input.
    got = keras.ops.convert_to_numpy(
        two({"spectra": spectra, "previous_notes": previous})
    )
    np.testing.assert_allclose(got, expected, atol=ATOL)


@pytest.mark.parametrize("feedback", ["logits", "notes"])
def test_passes_decode_as_generate(rng, feedback):
    generator = _generator()
    spectra, labels = _data(rng)
    previous = models.shift_right(labels)
    _, decoded = models.generate(
        generator, spectra, feedback=feedback, cache=False
    )
    # Pass k computes frames 0 .. k-1 as greedy decoding, whatever the
    # given previous notes past frame 0 (the true ones here): all frames
    # after target_frames passes. Rounding as above, except where a note
    # is thresholded within it (feedback="notes"; none here, checked).
    for passes in range(1, TARGET + 1):
        model = models.FeedbackTraining(
            generator, passes=passes, feedback=feedback
        )
        got = _call(model, spectra, previous)
        np.testing.assert_allclose(
            got[:, :passes], decoded[:, :passes], atol=ATOL
        )
    assert np.abs(decoded).min() > 10 * ATOL
    # Not a check that cannot fail: teacher forcing differs from decoding
    # past the first frame.
    forced = _call(generator, spectra, previous)
    assert not np.allclose(forced[:, 1:], decoded[:, 1:], atol=1e-3)


def test_teacher_rate_mixes_frames(rng):
    generator = _generator()
    model = models.FeedbackTraining(
        generator, passes=2, teacher_rate=0.3, seed=7
    )
    logits = rng.standard_normal((400, TARGET, NOTES)).astype("float32")
    previous = (rng.random(logits.shape) > 0.5).astype("float32") + 5
    fed = _np_feedback(logits, "logits")
    mixed = keras.ops.convert_to_numpy(
        model.pass_inputs(logits, previous, training=True)
    )
    # Every (example, frame) is wholly the given previous notes' frame or
    # wholly the fed-back one (the given ones are >= 5, the logits'
    # magnitudes here below 5, so the two cannot coincide).
    teacher = np.all(mixed == previous, axis=-1)
    assert np.all(teacher | np.all(mixed == fed, axis=-1))
    # About teacher_rate of them are the given ones: 1600 draws, a
    # binomial standard deviation of 0.011; 5 of them is 0.057.
    assert abs(teacher.mean() - 0.3) < 0.057
    # Not while inferring.
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model.pass_inputs(logits, previous)), fed
    )


def test_source_notes_head(rng):
    generator = _generator()
    spectra, labels = _data(rng)
    model = models.FeedbackTraining(generator, passes=2, source_notes=True)
    out = model([spectra, models.shift_right(labels)])
    assert set(out) == {"notes", "source_notes"}
    memory = keras.ops.convert_to_numpy(model.encoder(spectra))
    kernel, bias = (
        keras.ops.convert_to_numpy(w) for w in model.source_head.weights
    )
    # NumPy: a Dense over the encoder's stacked output (float32 matmul).
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(out["source_notes"]),
        memory @ kernel + bias,
        atol=ATOL,
    )
    assert out["source_notes"].shape == (len(spectra), SOURCE, NOTES)
    # The head is this model's, not the generator's.
    assert len(model.trainable_weights) == (
        len(generator.trainable_weights) + 2
    )


@pytest.mark.slow
def test_fit_trains_the_generator_and_round_trips(rng, tmp_path):
    generator = _generator(dropout=0.1)
    spectra, labels = _data(rng, batch=8)
    model = models.FeedbackTraining(
        generator, passes=2, teacher_rate=0.5, source_notes=True, seed=3
    )
    kernel = generator.get_layer("head_notes").weights[0]
    before = keras.ops.convert_to_numpy(kernel)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    # Eagerly on TensorFlow, where tracing the step would take most of the
    # test; on JAX, jit-compiled (30-60 s on 2 busy cores), faster than
    # its eager op-by-op dispatch (twice that); so the traced step is
    # tested too. One step.
    model.compile(
        "adam",
        {"notes": bce, "source_notes": bce},
        run_eagerly=keras.backend.backend() != "jax",
    )
    source_labels = (rng.random((8, SOURCE, NOTES)) > 0.5).astype("float32")
    model.fit(
        [spectra, models.shift_right(labels)],
        {"notes": labels, "source_notes": source_labels},
        batch_size=8,
        epochs=1,
        verbose=0,
    )
    assert not np.allclose(before, keras.ops.convert_to_numpy(kernel))
    model.save(tmp_path / "training.keras")
    loaded = keras.saving.load_model(tmp_path / "training.keras")
    config = model.get_config()
    assert config["generator"]["class_name"] == "Functional"
    assert {
        k: v for k, v in loaded.get_config().items() if k != "generator"
    } == {k: v for k, v in config.items() if k != "generator"}
    inputs = [spectra, models.shift_right(labels)]
    for key in ("notes", "source_notes"):
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(loaded(inputs)[key]),
            keras.ops.convert_to_numpy(model(inputs)[key]),
            atol=ATOL,
        )


def test_bad_arguments():
    generator = _generator()
    with pytest.raises(ValueError, match=r"passes=0"):
        models.FeedbackTraining(generator, passes=0)
    with pytest.raises(ValueError, match=r"passes=5"):
        models.FeedbackTraining(generator, passes=TARGET + 1)
    with pytest.raises(ValueError, match=r"passes=1.5"):
        models.FeedbackTraining(generator, passes=1.5)
    with pytest.raises(ValueError, match=r"feedback='sigmoid'"):
        models.FeedbackTraining(generator, feedback="sigmoid")
    with pytest.raises(ValueError, match=r"teacher_rate=1"):
        models.FeedbackTraining(generator, teacher_rate=1)
    with pytest.raises(ValueError, match=r"threshold=0"):
        models.FeedbackTraining(generator, threshold=0)
    with pytest.raises(ValueError, match=r"source_notes=1"):
        models.FeedbackTraining(generator, source_notes=1)
    with pytest.raises(ValueError, match=r"seed='a'"):
        models.FeedbackTraining(generator, seed="a")
    classifier = models.music_classifier(
        frames=SOURCE, bins=BINS, notes=NOTES, **SMALL
    )
    with pytest.raises(ValueError, match="generator"):
        models.FeedbackTraining(classifier)
    model = models.FeedbackTraining(generator)
    with pytest.raises(ValueError, match="Received: inputs of type"):
        model(np.zeros((1, SOURCE, 2 * BINS), "float32"))
    with pytest.raises(ValueError, match=r"keys \['previous_notes'\]"):
        model({"previous_notes": np.zeros((1, TARGET, NOTES), "float32")})
    with pytest.raises(ValueError, match="feedback='sigmoid'"):
        models.feedback_inputs(np.zeros((1, 2, 3)), feedback="sigmoid")
    with pytest.raises(ValueError, match="threshold=1.0"):
        models.feedback_inputs(np.zeros((1, 2, 3)), "notes", threshold=1.0)
    with pytest.raises(ValueError, match=r"logits.shape=\(2, 3\)"):
        models.feedback_inputs(np.zeros((2, 3)))
