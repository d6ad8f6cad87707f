"""Tests of the model builders and greedy generation."""

import re

import keras
import numpy as np
import pytest

import cvattn_keras as cvk
from cvattn_keras import models

# The reference architecture scaled down: 10 bins -> 4 -> 1 in the front end.
SMALL = dict(
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(2, 4),
    frontend_kernel_sizes=(3, 3),
)


def _trainable(layer):
    return sum(int(np.prod(w.shape)) for w in layer.trainable_weights)


def test_classifier_shapes_and_logits(rng):
    model = models.music_classifier(frames=6, bins=10, notes=4, **SMALL)
    x = rng.standard_normal((3, 6, 20)).astype("float32")
    assert tuple(model(x).shape) == (3, 6, 4)
    assert model.output.dtype == "float32"
    variable = models.music_classifier(frames=None, bins=10, notes=4, **SMALL)
    assert tuple(variable(x[:, :5]).shape) == (3, 5, 4)


@pytest.mark.slow
def test_default_parameter_counts_are_the_references():
    """Issue 10: the paper's models hold the reference's parameters, part by
    part (reference-semantics.md, "The MusicNet models and their state
    dicts"); Keras counts every real number, as that count does."""
    classifier = models.music_classifier()
    frontend = classifier.get_layer("frontend")
    parts = {
        "front-end convolutions": sum(map(_trainable, frontend.convolutions)),
        "front-end batch norms": sum(map(_trainable, frontend.norms)),
        "in_embedding": _trainable(classifier.get_layer("embedding")),
        "encoders": sum(
            _trainable(classifier.get_layer(f"encoder_{i}")) for i in range(6)
        ),
        "head": sum(
            _trainable(classifier.get_layer(name))
            for name in ("head_dense", "head_notes", "note_logits")
        ),
    }
    assert parts == {
        "front-end convolutions": 89_888,
        "front-end batch norms": 1_520,
        "in_embedding": 5_079_680,
        "encoders": 7_415_040,
        "head": 1_839_363,
    }
    assert _trainable(classifier) == 14_425_491
    # The batch norms' moving statistics (6 per channel) are not trained.
    assert classifier.count_params() == 14_425_491 + 6 * 304
    assert frontend.compute_output_shape((None, 64, 4096)) == (None, 64, 15872)
    generator = models.music_generator()
    assert (
        sum(_trainable(generator.get_layer(f"decoder_{i}")) for i in range(6))
        == 12_355_200
    )
    assert _trainable(generator.get_layer("note_embedding")) == 82_560
    assert _trainable(generator) == 26_863_251
    # A comparable size on real channels.
    assert models.real_music_classifier().count_params() == 14_417_109


def test_paper_dropouts_are_the_defaults():
    """Issue 10: attention 0.1, feed-forward 0.1 (after the activation) and
    head 0.1, as in the reference."""
    model = models.music_generator(
        source_frames=3, target_frames=2, bins=10, notes=2, **SMALL
    )
    for name in ("encoder_0", "decoder_0"):
        layer = model.get_layer(name)
        assert (layer.attention_dropout, layer.dropout) == (0.1, 0.1)
    assert model.get_layer("head_dropout").rate == 0.1


def test_generator_shapes_and_shift_right(rng):
    model = models.music_generator(
        source_frames=5, target_frames=4, bins=10, notes=3, **SMALL
    )
    labels = (rng.random((2, 4, 3)) > 0.5).astype("float32")
    previous = models.shift_right(labels)
    np.testing.assert_array_equal(previous[:, 0], 0)
    np.testing.assert_array_equal(previous[:, 1:], labels[:, :-1])
    spectra = rng.standard_normal((2, 5, 20)).astype("float32")
    assert tuple(model([spectra, previous]).shape) == (2, 4, 3)


def _trained_generator(rng):
    """A tiny generator fitted a little so that its decisions vary."""
    model = models.music_generator(
        source_frames=5,
        target_frames=6,
        bins=10,
        notes=4,
        dropout=0.0,
        feedforward_dropout=0.0,
        **SMALL,
    )
    spectra = rng.standard_normal((16, 5, 20)).astype("float32")
    labels = (rng.random((16, 6, 4)) > 0.5).astype("float32")
    model.compile("adam", keras.losses.BinaryCrossentropy(from_logits=True))
    model.fit(
        [spectra, models.shift_right(labels)], labels, epochs=3, verbose=0
    )
    return model, spectra


@pytest.mark.slow
def test_generate_equals_teacher_forcing_on_its_own_output(rng, tmp_path):
    model, spectra = _trained_generator(rng)
    # Uncompiled (tests/test_cache.py compiles once): the same loop. On
    # JAX, compiled: its uncompiled loop dispatches op by op, a minute here.
    jit = keras.backend.backend() == "jax"
    notes, logits = models.generate(model, spectra[:4], jit_compile=jit)
    assert notes.shape == (4, 6, 4) and 0 < notes.mean() < 1
    forced = keras.ops.convert_to_numpy(
        model([spectra[:4], models.shift_right(notes)])
    )
    np.testing.assert_allclose(forced, logits, atol=1e-5)
    np.testing.assert_array_equal(forced > 0, notes > 0)
    # feedback="logits" (the reference's loop): the previous frame's raw
    # logits are the decoder's input, so teacher forcing on the shifted
    # logits gives them back.
    notes_l, logits_l = models.generate(
        model, spectra[:4], feedback="logits", jit_compile=jit
    )
    forced = keras.ops.convert_to_numpy(
        model([spectra[:4], models.shift_right(logits_l)])
    )
    # The same computation batched differently: float32 rounding (as above).
    np.testing.assert_allclose(forced, logits_l, atol=1e-5)
    np.testing.assert_array_equal(notes_l, logits_l > 0)
    # The first frame sees only the start token: the same inputs either
    # way, so rounding only; the two protocols differ later, by far more
    # than rounding (logits of order 1).
    np.testing.assert_allclose(logits_l[:, 0], logits[:, 0], atol=1e-6)
    assert not np.allclose(logits_l, logits, atol=1e-3)
    # Also on a model loaded from a file.
    model.save(tmp_path / "generator.keras")
    loaded = keras.saving.load_model(tmp_path / "generator.keras")
    again, _ = models.generate(loaded, spectra[:4], steps=3, jit_compile=jit)
    np.testing.assert_array_equal(again, notes[:, :3])


def test_generate_bad_arguments(rng):
    model = models.music_generator(
        source_frames=3, target_frames=2, bins=10, notes=2, **SMALL
    )
    spectra = np.zeros((1, 3, 20), "float32")
    with pytest.raises(ValueError, match="threshold=1.5"):
        models.generate(model, spectra, threshold=1.5)
    with pytest.raises(ValueError, match="steps=3"):
        models.generate(model, spectra, steps=3)
    with pytest.raises(ValueError, match="feedback='probabilities'"):
        models.generate(model, spectra, feedback="probabilities")
    classifier = models.music_classifier(frames=3, bins=10, notes=2, **SMALL)
    with pytest.raises(ValueError, match="generator"):
        models.generate(classifier, spectra)


_NORMS = ("self_attention_norm", "cross_attention_norm", "feedforward_norm")


def _norms(model):
    """The layer norms of a model's encoder and decoder layers."""
    return [
        getattr(layer, name)
        for layer in model.layers
        if layer.name.startswith(("encoder_", "decoder_"))
        for name in _NORMS
        if hasattr(layer, name)
    ]


@pytest.mark.parametrize(
    "builder", [models.music_classifier, models.music_generator]
)
def test_layer_norm_epsilon_reaches_every_layer_norm(builder):
    """Issue 22, item 12: the builders take the layer norms' epsilon; 0 is
    the reference's arithmetic (for exact ports)."""
    model = builder(bins=10, notes=2, layer_norm_epsilon=0, **SMALL)
    norms = _norms(model)
    # 2 per encoder layer, 3 per decoder layer.
    assert len(norms) == (2 if builder is models.music_classifier else 5)
    assert all(norm.epsilon == 0.0 for norm in norms)
    assert model.get_layer("encoder_0").get_config()["layer_norm_epsilon"] == 0
    assert all(
        norm.epsilon == 1e-5 for norm in _norms(builder(bins=10, **SMALL))
    )
    for bad in (-1, float("nan"), "0"):
        with pytest.raises(
            ValueError, match=re.escape(f"layer_norm_epsilon={bad!r}")
        ):
            builder(bins=10, notes=2, layer_norm_epsilon=bad, **SMALL)


def test_real_baseline_layer_norm_epsilon():
    size = dict(bins=10, notes=2, embed_dim=8, num_heads=2, num_layers=1)
    size.update(head_dim=8, frontend_filters=(2, 4))
    size.update(frontend_kernel_sizes=(3, 3))
    model = models.real_music_classifier(layer_norm_epsilon=1e-6, **size)
    assert model.get_layer("encoder_0_norm_1").epsilon == 1e-6
    with pytest.raises(ValueError, match="layer_norm_epsilon=0"):
        models.real_music_classifier(layer_norm_epsilon=0, **size)


@pytest.mark.parametrize(
    "builder",
    [
        models.music_classifier,
        models.music_generator,
        models.real_music_classifier,
    ],
)
def test_front_end_arguments_are_checked_by_name(builder):
    """A front end given unequal lists is an error naming the argument,
    never fewer blocks than asked for."""
    size = dict(bins=64, notes=2, embed_dim=8, num_heads=2, num_layers=1)
    with pytest.raises(ValueError, match="frontend_kernel_sizes"):
        builder(
            **size,
            frontend_filters=(4, 8, 8),
            frontend_kernel_sizes=(6, 3),
        )
    with pytest.raises(ValueError, match="frontend_strides"):
        builder(
            **size,
            frontend_filters=(4, 8),
            frontend_kernel_sizes=(6, 3),
            frontend_strides=(2, 2, 2),
        )
    with pytest.raises(ValueError, match="frontend_filters"):
        builder(**size, frontend_filters=(4, 0))


@pytest.mark.slow
def test_small_models_round_trip(rng, tmp_path):
    for model in (
        models.music_classifier(frames=6, bins=10, notes=4, **SMALL),
        models.real_music_classifier(frames=6, bins=10, notes=4, **SMALL),
    ):
        x = rng.standard_normal((2, 6, 20)).astype("float32")
        path = tmp_path / f"{model.name}.keras"
        model.save(path)
        loaded = keras.saving.load_model(path, safe_mode=True)
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(loaded(x)),
            keras.ops.convert_to_numpy(model(x)),
        )


def test_readout_layers(rng):
    z = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
    x = cvk.to_stacked(z)
    readout = cvk.layers.RealReadout()
    readout.build((None, 6))
    readout.set_weights([np.array([0.5, -2.0]), np.array(0.25)])
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(readout(x)),
        0.5 * z.real - 2.0 * z.imag + 0.25,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(cvk.layers.ComplexModulus()(x)),
        np.abs(z),
        atol=1e-6,
    )
    stacked = cvk.layers.ComplexFromReal()(z.real.astype("float32"))
    np.testing.assert_allclose(cvk.from_stacked(stacked), z.real, atol=1e-7)


@pytest.mark.parametrize("synchronized", [False, True])
def test_batch_norm_synchronized_is_exposed_and_saved(synchronized):
    """Issue 9: the paper models expose the front-end batch norm's
    `synchronized` (a no-op outside a tf.distribute strategy), and it is
    part of the saved configuration."""
    classifier = models.music_classifier(
        frames=6,
        bins=10,
        notes=4,
        batch_norm_synchronized=synchronized,
        **SMALL,
    )
    generator = models.music_generator(
        source_frames=5,
        target_frames=4,
        bins=10,
        notes=3,
        batch_norm_synchronized=synchronized,
        **SMALL,
    )
    for model in (classifier, generator):
        frontend = model.get_layer("frontend")
        assert [n.synchronized for n in frontend.norms] == [synchronized] * 2
        rebuilt = keras.Model.from_config(model.get_config())
        for norm in rebuilt.get_layer("frontend").norms:
            assert norm.synchronized is synchronized


def test_complex_modulus_under_mixed_float16():
    """Issue 11, item 1: ComplexModulus squared in float16: |300| -> inf,
    |1e-4| -> 0. It computes in float32 and returns float16."""
    layer = cvk.layers.ComplexModulus(dtype="mixed_float16")
    x = cvk.to_stacked(np.array([[300 + 0j, 1e-4 + 0j, 3 - 4j]]))
    y = layer(keras.ops.cast(x, "float16"))
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    # rtol 1e-3: one rounding to float16 (2^-11 relative).
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(keras.ops.cast(y, "float32")),
        [[300, 1e-4, 5]],
        rtol=1e-3,
    )


@pytest.mark.parametrize(
    "layer",
    [
        cvk.layers.ComplexModulus,
        cvk.layers.RealReadout,
    ],
)
def test_conversion_layers_reject_scalars(layer):
    with pytest.raises(ValueError, match="scalar"):
        layer()(np.float32(2.0))


def test_music_classifier_takes_another_attention(rng):
    """`attention=` reaches every encoder's self-attention, with its
    options, and the model runs."""
    model = models.music_classifier(
        frames=6,
        bins=10,
        notes=4,
        attention="low_rank",
        attention_options={"rank": 2, "max_length": 6},
        **SMALL,
    )
    encoders = [x for x in model.layers if x.name.startswith("encoder_")]
    assert encoders and all(
        isinstance(e.self_attention, cvk.layers.ComplexLowRankAttention)
        and e.self_attention.rank == 2
        for e in encoders
    )
    x = rng.standard_normal((3, 6, 20)).astype("float32")
    assert tuple(model(x).shape) == (3, 6, 4)
