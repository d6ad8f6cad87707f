"""Tests of the real-valued music baselines (`models.real_music`):
`RealTransformerDecoder` against a NumPy float64 computation from its
weights, `real_music_generator` trained by `FeedbackTraining`, decoded by
`generate` and saved, and `real_music_classifier`'s `sliding_window`:
causal over its window, and its default builds those of the builder
before it had the argument."""

import re

import keras
import numpy as np
import pytest

import cvattn_keras as cvk
from cvattn_keras import models

# 10 bins -> 4 -> 1 in the front end.
SMALL = dict(
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(2, 4),
    frontend_kernel_sizes=(3, 3),
)
SOURCE, TARGET, BINS, NOTES = 6, 4, 10, 5


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _np_attention(layer, query, value, causal):
    """NumPy float64: `keras.layers.MultiHeadAttention` from its weights
    (inference, no dropout)."""

    def project(dense, x):
        kernel, bias = (np.asarray(w, np.float64) for w in dense.get_weights())
        return np.einsum("btd,dhk->bthk", x, kernel) + bias

    q = project(layer._query_dense, query)
    k = project(layer._key_dense, value)
    v = project(layer._value_dense, value)
    logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
    if causal:
        t, s = np.indices(logits.shape[-2:])
        logits = np.where(s > t, -np.inf, logits)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    heads = np.einsum("bhts,bshk->bthk", weights, v)
    kernel, bias = (
        np.asarray(w, np.float64) for w in layer._output_dense.get_weights()
    )
    return np.einsum("bthk,hkd->btd", heads, kernel) + bias


def _np_layer_norm(norm, x):
    gamma, beta = (np.asarray(w, np.float64) for w in norm.get_weights())
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + norm.epsilon) * gamma + beta


def test_decoder_against_numpy(rng):
    """Post-norm causal self-attention, cross-attention and a LeakyReLU
    feed-forward network, against NumPy float64 from the layer's weights
    (tolerance: float32 rounding of order-1 activations)."""
    decoder = models.RealTransformerDecoder(
        2, intermediate_dim=12, name="decoder"
    )
    x = rng.standard_normal((3, 5, 8))
    memory = rng.standard_normal((3, 7, 6))
    got = _np(decoder(x.astype("float32"), memory.astype("float32")))
    h = x + _np_attention(decoder.self_attention, x, x, causal=True)
    h = _np_layer_norm(decoder.norms[0], h)
    h = h + _np_attention(decoder.cross_attention, h, memory, causal=False)
    h = _np_layer_norm(decoder.norms[1], h)
    kernel_in, bias_in = decoder.feedforward_in.get_weights()
    kernel_out, bias_out = decoder.feedforward_out.get_weights()
    inner = h @ kernel_in + bias_in
    inner = np.where(inner > 0, inner, 0.01 * inner)
    want = _np_layer_norm(decoder.norms[2], h + inner @ kernel_out + bias_out)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert decoder.compute_output_shape((3, 5, 8), (3, 7, 6)) == (3, 5, 8)


def test_decoder_config_round_trip_and_bad_arguments(rng):
    decoder = models.RealTransformerDecoder(
        2,
        intermediate_dim=6,
        attention_dropout=0.2,
        dropout=0.3,
        layer_norm_epsilon=1e-4,
        name="d",
    )
    config = decoder.get_config()
    again = models.RealTransformerDecoder.from_config(config)
    assert again.get_config() == config
    assert "cvattn_keras>RealTransformerDecoder" == (
        keras.saving.get_registered_name(models.RealTransformerDecoder)
    )
    for kwargs, shown in (
        (dict(num_heads=0), "num_heads=0"),
        (dict(num_heads=2, intermediate_dim=0), "intermediate_dim=0"),
        (dict(num_heads=2, attention_dropout=1.0), "attention_dropout=1.0"),
        (dict(num_heads=2, dropout=-0.1), "dropout=-0.1"),
        (dict(num_heads=2, layer_norm_epsilon=0), "layer_norm_epsilon=0"),
    ):
        with pytest.raises(ValueError, match=re.escape(shown)):
            models.RealTransformerDecoder(**kwargs)
    with pytest.raises(ValueError, match="at least `num_heads`"):
        models.RealTransformerDecoder(4)(
            np.ones((1, 2, 3), "float32"), np.ones((1, 2, 3), "float32")
        )


@pytest.fixture(scope="module")
def generator():
    """A tiny real generator on spectra, every weight moved off its
    initial value (the norms' scales and offsets, the batch norms'
    statistics), so that one left unloaded would show."""
    keras.utils.set_random_seed(0)
    model = models.real_music_generator(
        SOURCE,
        TARGET,
        bins=BINS,
        notes=NOTES,
        dropout=0.0,
        feedforward_dropout=0.0,
        **SMALL,
    )
    rng = np.random.default_rng(1)
    model.set_weights(
        [w + rng.normal(0, 0.1, w.shape) for w in model.get_weights()]
    )
    return model


def _generator_inputs(rng):
    spectra = rng.standard_normal((2, SOURCE, 2 * BINS)).astype("float32")
    labels = (rng.random((2, TARGET, NOTES)) > 0.5).astype("float32")
    return spectra, models.shift_right(labels)


def test_generator_layers_decode_and_train_as_the_complex_one(generator, rng):
    """The layer names `FeedbackTraining` and `generate` use: its passes
    decode as `generate` without the cache, which it refuses by name."""
    names = {layer.name for layer in generator.layers}
    assert {
        "embedding",
        "encoder_0_attention",
        "note_embedding",
        "target_positions",
        "decoder_0",
        "head_dense",
        "head_dropout",
        "note_logits",
    } <= names
    assert [t.name for t in generator.inputs] == ["spectra", "previous_notes"]
    assert isinstance(
        generator.get_layer("decoder_0"), models.RealTransformerDecoder
    )
    spectra, previous = _generator_inputs(rng)
    assert generator([spectra, previous]).shape == (2, TARGET, NOTES)
    _, logits = models.generate(
        generator, spectra, feedback="logits", cache=False
    )
    trainer = models.FeedbackTraining(generator, passes=TARGET)
    np.testing.assert_allclose(
        _np(trainer([spectra, previous])), logits, atol=1e-5
    )
    with pytest.raises(ValueError, match="cache=False"):
        models.generate(generator, spectra, cache=True)


@pytest.mark.slow
def test_generator_saves_and_loads(generator, rng, tmp_path):
    inputs = list(_generator_inputs(rng))
    path = str(tmp_path / "real_music_generator.keras")
    generator.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        _np(loaded(inputs)), _np(generator(inputs)), atol=1e-6
    )
    assert loaded.get_layer("decoder_0").get_config() == (
        generator.get_layer("decoder_0").get_config()
    )


def test_generator_bad_arguments():
    for kwargs, shown in (
        (dict(target_frames=0), "target_frames=0"),
        (dict(layer_norm_epsilon=-1.0), "layer_norm_epsilon=-1.0"),
        (dict(frontend_filters=(2, 0)), "frontend_filters"),
    ):
        with pytest.raises(ValueError, match=re.escape(shown)):
            models.real_music_generator(
                **{**dict(bins=BINS, notes=NOTES, **SMALL), **kwargs}
            )


def _classifier(**kwargs):
    return models.real_music_classifier(
        bins=BINS, notes=NOTES, dropout=0.0, feedforward_dropout=0.0, **kwargs
    )


def test_sliding_window_hides_frames_outside_it(rng):
    """With `sliding_window=W` the output at frame t does not change when
    the frames outside its window change (one encoder layer: frames
    t - W + 1 to t; the front end reads each frame alone, the batch norms
    at inference), and does change with a frame inside it."""
    window, frames, t = 3, 12, 8
    size = SMALL
    model = _classifier(frames=frames, sliding_window=window, **size)
    x = rng.standard_normal((2, frames, 2 * BINS)).astype("float32")
    first = t - window + 1
    out = _np(model(x, training=False))
    changed = x.copy()
    changed[:, :first] = rng.standard_normal(changed[:, :first].shape)
    changed[:, t + 1 :] = 100.0
    np.testing.assert_allclose(
        _np(model(changed, training=False))[:, t], out[:, t], atol=1e-6
    )
    for inside in (first, t):
        changed = x.copy()
        changed[:, inside] += 1.0
        moved = np.abs(_np(model(changed, training=False))[:, t] - out[:, t])
        assert moved.max() > 1e-3
    # Without a window every frame sees every other.
    model = _classifier(frames=frames, **size)
    out = _np(model(x, training=False))
    changed = x.copy()
    changed[:, t + 1 :] = 100.0
    moved = np.abs(_np(model(changed, training=False))[:, t] - out[:, t])
    assert moved.max() > 1e-3


def test_sliding_window_attention_band_and_positions():
    """`sliding_window=W`: every encoder's attention sees t - W < s <= t
    (its scores), rotary by default (`RealRotaryAttention`, no
    `positions` layer), as `music_classifier`'s `positions`."""
    model = _classifier(frames=None, sliding_window=3, **SMALL)
    attention = model.get_layer("encoder_0_attention")
    assert isinstance(attention, models.RealRotaryAttention)
    assert attention.rotary_max_wavelength == 10000
    assert "positions" not in {layer.name for layer in model.layers}
    frames = np.ones((1, 8, SMALL["embed_dim"]), "float32")
    _, scores = attention(
        frames, frames, use_causal_mask=True, return_attention_scores=True
    )
    t, s = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    np.testing.assert_array_equal(_np(scores)[0, 0] > 0, (t - 3 < s) & (s <= t))
    for positions, attention_type, has_positions in (
        ("sinusoidal", keras.layers.MultiHeadAttention, True),
        ("none", keras.layers.MultiHeadAttention, False),
    ):
        model = _classifier(
            frames=6, sliding_window=3, positions=positions, **SMALL
        )
        layer = model.get_layer("encoder_0_attention")
        assert type(layer) is attention_type
        names = {layer.name for layer in model.layers}
        assert ("positions" in names) is has_positions
    rotary = _classifier(frames=6, positions="rotary", **SMALL)
    assert isinstance(
        rotary.get_layer("encoder_0_attention"), models.RealRotaryAttention
    )
    with pytest.raises(ValueError, match="sliding_window=0"):
        _classifier(frames=6, sliding_window=0, **SMALL)
    with pytest.raises(ValueError, match="positions='learned'"):
        _classifier(frames=6, positions="learned", **SMALL)


def _real_music_classifier_before(frames, bins, notes, **size):
    """`models.real_music_classifier` as it was before it had
    `sliding_window` (version 0.2.0's development, commit 1a7be40), on
    spectra, at the default dropouts and epsilon: the reference of the
    default build."""
    layers = keras.layers
    filters, kernels = size["frontend_filters"], size["frontend_kernel_sizes"]
    embed_dim, num_heads = size["embed_dim"], size["num_heads"]
    inputs = keras.Input((frames, 2 * bins), name="spectra")
    x = layers.Reshape((-1, 2, bins), name="frames_as_signals")(inputs)
    x = layers.Permute((1, 3, 2), name="channels_last")(x)
    for i, (channels, kernel) in enumerate(zip(filters, kernels)):
        x = layers.TimeDistributed(
            layers.Conv1D(channels, kernel, strides=2),
            name=f"frontend_conv_{i}",
        )(x)
        x = layers.BatchNormalization(name=f"frontend_norm_{i}")(x)
        x = layers.LeakyReLU(0.01, name=f"frontend_act_{i}")(x)
    x = layers.TimeDistributed(layers.Flatten(), name="frontend_flatten")(x)
    x = layers.Dense(embed_dim, name="embedding")(x)
    x = cvk.layers.SinusoidalPositionalEncoding(name="positions")(x)
    for i in range(size["num_layers"]):
        attention = layers.MultiHeadAttention(
            num_heads,
            embed_dim // num_heads,
            dropout=0.1,
            name=f"encoder_{i}_attention",
        )(x, x)
        x = layers.LayerNormalization(epsilon=1e-3, name=f"encoder_{i}_norm_1")(
            layers.Add()([x, attention])
        )
        h = layers.Dense(embed_dim, name=f"encoder_{i}_in")(x)
        h = layers.LeakyReLU(0.01)(h)
        h = layers.Dropout(0.1)(h)
        h = layers.Dense(embed_dim, name=f"encoder_{i}_out")(h)
        x = layers.LayerNormalization(epsilon=1e-3, name=f"encoder_{i}_norm_2")(
            layers.Add()([x, h])
        )
    x = layers.Dense(size["head_dim"], name="head_dense")(x)
    x = layers.LeakyReLU(0.01, name="head_act")(x)
    x = layers.Dropout(0.1, name="head_dropout")(x)
    logits = layers.Dense(notes, name="note_logits")(x)
    return keras.Model(inputs, logits, name="real_music_classifier")


def test_default_build_is_the_one_before_sliding_window(rng):
    """Without `sliding_window` (and `positions="auto"`), the builder
    makes the model it made before: the same layers and parameter count,
    the same weights for the same seed and the same outputs, bit for
    bit."""
    size = dict(SMALL, num_layers=2)
    keras.utils.set_random_seed(3)
    before = _real_music_classifier_before(6, BINS, NOTES, **size)
    keras.utils.set_random_seed(3)
    now = models.real_music_classifier(frames=6, bins=BINS, notes=NOTES, **size)
    # The unnamed layers' names count up across models.
    automatic = re.compile(r"(add|leaky_re_lu|dropout)(_\d+)?$")

    def layers(model):
        return [
            (type(layer), automatic.sub(r"\1", layer.name))
            for layer in model.layers
        ]

    assert layers(now) == layers(before)
    assert now.count_params() == before.count_params()
    for a, b in zip(before.get_weights(), now.get_weights()):
        np.testing.assert_array_equal(a, b)
    x = rng.standard_normal((2, 6, 2 * BINS)).astype("float32")
    np.testing.assert_array_equal(_np(now(x)), _np(before(x)))
