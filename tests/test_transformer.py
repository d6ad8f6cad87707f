"""Tests of ComplexTransformerEncoder / Decoder against a composition of the
reference formulas in NumPy complex128.

Tolerance 1e-4 absolute: two or three whitening norms in a row amplify the
float32 rounding of the attention (1e-6) by up to their gain."""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import compiled
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras.layers import ComplexTransformerDecoder
from cvattn_keras.layers import ComplexTransformerEncoder

ATOL = 1e-4


def _norm(layer):
    w0, w1, w2, b_r, b_i = [
        to_numpy(w).astype("float64") for w in layer.weights
    ]
    return lambda z: ref.whitening_layer_norm(
        z, w0, w1, w2, b_r + 1j * b_i, 1e-5
    )


def _attention(layer, mask=None):
    def attend(query, value):
        out, _ = ref.multi_head_attention(
            query,
            value,
            value,
            ref.attention_params(layer),
            layer.num_heads,
            layer.softmax,
            layer.product,
            layer.key_dim**-0.5,
            mask,
        )
        return out

    return attend


def _feedforward(block):
    w_in, b_in = ref.dense_params(block.feedforward_in)
    w_out, b_out = ref.dense_params(block.feedforward_out)
    return lambda z: ref.leaky_relu(z @ w_in + b_in) @ w_out + b_out


def _randomize(layer, rng):
    """Non-trivial norm parameters and biases, so every term is tested."""
    for weight in layer.weights:
        if any(n in weight.path for n in ("w0", "w1", "w2", "bias")):
            weight.assign(
                0.3 * rng.standard_normal(weight.shape)
                + (1.0 if weight.path.endswith(("w0", "w1")) else 0.0)
            )


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("softmax", ["real", "abs"])
def test_encoder_equals_the_reference_composition(rng, norm_first, softmax):
    z = ref.random_complex(rng, (2, 5, 4))
    layer = ComplexTransformerEncoder(
        2, intermediate_dim=6, softmax=softmax, norm_first=norm_first
    )
    layer.build((None, 5, 8))
    _randomize(layer, rng)
    y = layer(cvk.to_stacked(z))
    attend = _attention(layer.self_attention)
    ln1, ln2 = _norm(layer.self_attention_norm), _norm(layer.feedforward_norm)
    ff = _feedforward(layer)
    if norm_first:
        x = z + attend(ln1(z), ln1(z))
        expected = x + ff(ln2(x))
    else:  # the reference: post-norm
        x = ln1(z + attend(z, z))
        expected = ln2(x + ff(x))
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, atol=ATOL
    )


def test_decoder_equals_the_reference_composition(rng):
    target = ref.random_complex(rng, (2, 4, 4))
    memory = ref.random_complex(rng, (2, 6, 3))
    layer = ComplexTransformerDecoder(2, softmax="naive", product="bilinear")
    layer.build((None, 4, 8), (None, 6, 6))
    _randomize(layer, rng)
    y = layer(cvk.to_stacked(target), cvk.to_stacked(memory))
    causal = np.tril(np.ones((4, 4), bool))[None]
    self_attend = _attention(layer.self_attention, causal)
    cross_attend = _attention(layer.cross_attention)
    ln1, ln2, ln3 = (
        _norm(layer.self_attention_norm),
        _norm(layer.cross_attention_norm),
        _norm(layer.feedforward_norm),
    )
    x = ln1(target + self_attend(target, target))
    x = ln2(x + cross_attend(x, memory))
    expected = ln3(x + _feedforward(layer)(x))
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, atol=ATOL
    )


def test_keras_masks_equal_explicit_padding_masks(rng):
    z = ref.random_complex(rng, (3, 5, 4))
    z[0, 3:] = 0
    z[2, 1:] = 0
    valid = np.any(z != 0, axis=-1)
    x = cvk.to_stacked(z)
    encoder = ComplexTransformerEncoder(2, softmax="absonly")
    decoder = ComplexTransformerDecoder(2)
    inputs = keras.Input((5, 8))
    masked = keras.layers.Masking()(inputs)
    hidden = encoder(masked)
    model = keras.Model(inputs, decoder(masked, hidden))
    implicit = to_numpy(model(x))
    hidden = encoder(x, padding_mask=valid)
    explicit = to_numpy(
        decoder(
            x, hidden, decoder_padding_mask=valid, encoder_padding_mask=valid
        )
    )
    np.testing.assert_allclose(implicit, explicit, atol=1e-5)
    # The padding matters: without it the outputs differ.
    assert not np.allclose(
        to_numpy(decoder(x, encoder(x))), explicit, atol=1e-3
    )


def test_scores_and_output_shapes(rng):
    x = cvk.to_stacked(ref.random_complex(rng, (2, 5, 4)))
    memory = cvk.to_stacked(ref.random_complex(rng, (2, 7, 3)))
    y, scores = ComplexTransformerEncoder(2)(x, return_attention_scores=True)
    assert tuple(y.shape) == (2, 5, 8) and tuple(scores.shape) == (2, 2, 5, 10)
    decoder = ComplexTransformerDecoder(2, key_dim=3, intermediate_dim=16)
    y, (self_scores, cross_scores) = decoder(
        x, memory, return_attention_scores=True
    )
    assert tuple(self_scores.shape) == (2, 2, 5, 10)
    assert tuple(cross_scores.shape) == (2, 2, 5, 14)
    symbolic = ComplexTransformerDecoder(2)(
        keras.Input((5, 8)), keras.Input((7, 6)), return_attention_scores=True
    )
    assert tuple(symbolic[1][1].shape) == (None, 2, 5, 14)
    only = ComplexTransformerDecoder(2)
    assert tuple(only(x).shape) == (2, 5, 8) and only.cross_attention is None
    with pytest.raises(ValueError, match="built without"):
        only(x, memory)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_heads=0), "num_heads=0"),
        (dict(num_heads=2, key_dim=0), "key_dim=0"),
        (dict(num_heads=2, intermediate_dim=2.5), "intermediate_dim=2.5"),
        (dict(num_heads=2, dropout=1.0), "dropout=1.0"),
        (dict(num_heads=2, attention_dropout=-1), "attention_dropout=-1"),
        (dict(num_heads=2, activation="gelu"), "activation='gelu'"),
        (dict(num_heads=2, normalization="batch"), "normalization='batch'"),
        (dict(num_heads=2, softmax="soft"), "softmax='soft'"),
        (dict(num_heads=2, layer_norm_epsilon=-1e-3), "epsilon=-0.001"),
        # Issue 22, item 12: 0 is the reference's arithmetic for the layer
        # norms, not for "rms".
        (
            dict(num_heads=2, normalization="rms", layer_norm_epsilon=0),
            "layer_norm_epsilon=0",
        ),
    ],
)
def test_bad_arguments(kwargs, match):
    for cls in (ComplexTransformerEncoder, ComplexTransformerDecoder):
        with pytest.raises(ValueError, match=match):
            cls(**kwargs)


def test_heads_must_divide_the_features_without_key_dim():
    with pytest.raises(ValueError, match="num_heads=3"):
        ComplexTransformerEncoder(3)(np.zeros((1, 2, 8), "float32"))
    assert ComplexTransformerEncoder(3, key_dim=2)(
        np.zeros((1, 2, 8), "float32")
    ).shape == (1, 2, 8)


@pytest.mark.parametrize("normalization", ["naive", "rms"])
def test_other_normalizations_and_mixed_precision(rng, normalization):
    x = cvk.to_stacked(ref.random_complex(rng, (2, 3, 4)))
    layer = ComplexTransformerEncoder(
        2,
        normalization=normalization,
        activation="modrelu",
        dtype="mixed_bfloat16",
    )
    y = layer(x)
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"
    assert np.all(np.isfinite(to_numpy(y).astype("float32")))
    assert all(w.dtype == "float32" for w in layer.weights)


@pytest.mark.slow
def test_saved_model_round_trip_and_training(rng, tmp_path):
    source = keras.Input((6, 8))
    target = keras.Input((4, 8))
    hidden = ComplexTransformerEncoder(
        2, dropout=0.1, attention_dropout=0.1, seed=3
    )(source)
    out = ComplexTransformerDecoder(2, activation="cardioid", norm_first=True)(
        target, hidden
    )
    model = keras.Model([source, target], cvk.layers.ComplexDense(1)(out))
    inputs = [
        cvk.to_stacked(ref.random_complex(rng, (32, 6, 4))),
        cvk.to_stacked(ref.random_complex(rng, (32, 4, 4))),
    ]
    labels = cvk.to_stacked(ref.random_complex(rng, (32, 4, 1)))
    model.compile(keras.optimizers.Adam(3e-3), "mse")
    before = model.evaluate(inputs, labels, verbose=0)
    model.fit(inputs, labels, epochs=8, batch_size=8, verbose=0)
    assert model.evaluate(inputs, labels, verbose=0) < before
    path = tmp_path / "transformer.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(
        to_numpy(loaded(inputs)), to_numpy(model(inputs))
    )


@pytest.mark.slow
def test_xla_equals_eager(rng):
    x = cvk.to_stacked(ref.random_complex(rng, (2, 5, 4)))
    layer = ComplexTransformerDecoder(2)
    eager = layer(x, x)
    xla = compiled(lambda a: layer(a, a))
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    np.testing.assert_allclose(to_numpy(xla(x)), to_numpy(eager), atol=1e-5)


def test_seeded_initializers_give_every_kernel_its_own_values():
    init = cvk.initializers.ComplexGlorotUniform(seed=7)
    layer = ComplexTransformerDecoder(2, kernel_initializer=init, seed=3)
    layer.build((None, 4, 8), (None, 5, 8))
    kernels = [to_numpy(w) for w in layer.weights if "kernel" in w.path]
    assert len(kernels) == 20
    for i, a in enumerate(kernels):
        for b in kernels[i + 1 :]:
            assert a.shape != b.shape or not np.allclose(a, b)
    again = ComplexTransformerDecoder(2, kernel_initializer=init, seed=3)
    again.build((None, 4, 8), (None, 5, 8))
    for a, b in zip(layer.weights, again.weights):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_rotary_option_reaches_every_attention(rng):
    layer = ComplexTransformerDecoder(2, rotary_max_wavelength=500)
    x = cvk.to_stacked(ref.random_complex(rng, (1, 3, 4)))
    layer(x, x)
    assert layer.self_attention.rotary_max_wavelength == 500
    assert layer.cross_attention.rotary is not None
    clone = ComplexTransformerDecoder.from_config(layer.get_config())
    assert clone.rotary_max_wavelength == 500
    with pytest.raises(ValueError, match="rotary_max_wavelength=1"):
        ComplexTransformerEncoder(2, rotary_max_wavelength=1)


# ----------------------------------------------------------------------
# Issue 11 items 13 and 16: masks that do not fit, None initializers, one
# key.
# ----------------------------------------------------------------------


def _blocks():
    x = np.zeros((2, 5, 8), "float32")
    memory = np.zeros((2, 3, 6), "float32")
    return x, memory


@pytest.mark.parametrize(
    "block, kwargs, message",
    [
        (
            "encoder",
            dict(padding_mask=np.ones((2, 4), bool)),
            "`padding_mask` must have a shape that broadcasts to (B, T) = "
            "(2, 5). Received: padding_mask.shape=(2, 4)",
        ),
        (
            "encoder",
            dict(attention_mask=np.ones((2, 5, 4), bool)),
            "(B, T, S) = (2, 5, 5). Received: attention_mask.shape=(2, 5, 4)",
        ),
        (
            "decoder",
            dict(decoder_padding_mask=np.ones((2, 3), bool)),
            "`decoder_padding_mask` must have a shape that broadcasts to "
            "(B, T) = (2, 5). Received: decoder_padding_mask.shape=(2, 3)",
        ),
        (
            "decoder",
            dict(encoder_padding_mask=np.ones((2, 5), bool)),
            "`encoder_padding_mask` must have a shape that broadcasts to "
            "(B, S) = (2, 3). Received: encoder_padding_mask.shape=(2, 5)",
        ),
        (
            "decoder",
            dict(self_attention_mask=np.ones((2, 5, 3), bool)),
            "Received: self_attention_mask.shape=(2, 5, 3)",
        ),
        (
            "decoder",
            dict(cross_attention_mask=np.ones((2, 5, 5), bool)),
            "(B, T, S) = (2, 5, 3). Received: cross_attention_mask.shape="
            "(2, 5, 5)",
        ),
    ],
)
def test_wrong_mask_shapes_name_the_argument(block, kwargs, message):
    x, memory = _blocks()
    for symbolic in (False, True):
        if symbolic:  # checked when the functional model is traced
            x = keras.Input(x.shape[1:], batch_size=2)
            memory = keras.Input(memory.shape[1:], batch_size=2)
        with pytest.raises(ValueError) as info:
            if block == "encoder":
                ComplexTransformerEncoder(2)(x, **kwargs)
            else:
                ComplexTransformerDecoder(2)(x, memory, **kwargs)
        assert message in str(info.value)


def test_none_initializers_mean_the_defaults():
    layer = ComplexTransformerEncoder(
        2, kernel_initializer=None, bias_initializer=None
    )
    assert isinstance(
        layer.kernel_initializer, cvk.initializers.ComplexGlorotUniform
    )
    assert isinstance(layer.bias_initializer, keras.initializers.Zeros)
    layer(np.zeros((1, 3, 8), "float32"))
    assert np.all(to_numpy(layer.feedforward_in.bias_real) == 0)
    with pytest.raises(ValueError, match="kernel_initializer=3"):
        ComplexTransformerDecoder(2, kernel_initializer=3)


@pytest.mark.parametrize("softmax", ["real", "abs", "absonly", "naive"])
def test_cross_attention_to_one_step_memory_does_not_warn(rng, softmax):
    """A memory of length 1 (S = 1): attention over one key, no Keras
    softmax warning (pytest makes warnings errors)."""
    layer = ComplexTransformerDecoder(2, softmax=softmax)
    target = cvk.to_stacked(ref.random_complex(rng, (2, 1, 4)))
    memory = cvk.to_stacked(ref.random_complex(rng, (2, 1, 3)))
    y = layer(target, memory)
    assert np.all(np.isfinite(to_numpy(y)))


def test_another_attention_layer_in_the_encoder(rng, tmp_path):
    """`attention="low_rank"`: the self-attention is a
    `ComplexLowRankAttention` with the block's arguments and the options,
    composed as multi-head attention is (NumPy norms and feed-forward,
    the sublayer called as itself: its own tests check it against
    NumPy), and the block saves and reloads with it."""
    z = ref.random_complex(rng, (2, 6, 4))
    layer = ComplexTransformerEncoder(
        2,
        intermediate_dim=6,
        softmax="abs",
        seed=5,
        attention="low_rank",
        attention_options={"rank": 3, "max_length": 8},
    )
    layer.build((None, 6, 8))
    _randomize(layer, rng)
    attention = layer.self_attention
    assert isinstance(attention, cvk.layers.ComplexLowRankAttention)
    assert (attention.rank, attention.max_length) == (3, 8)
    assert (attention.num_heads, attention.key_dim) == (2, 2)
    assert attention.softmax == "abs" and attention.seed == 6
    y = cvk.from_stacked(layer(cvk.to_stacked(z)), "complex128")

    def attend(q, v):
        out = attention(cvk.to_stacked(q), cvk.to_stacked(v))
        return cvk.from_stacked(out, "complex128")

    ln1, ln2 = _norm(layer.self_attention_norm), _norm(layer.feedforward_norm)
    x = ln1(z + attend(z, z))
    expected = ln2(x + _feedforward(layer)(x))
    np.testing.assert_allclose(y, expected, atol=ATOL)

    config = layer.get_config()
    assert config["attention"] == "low_rank"
    assert config["attention_options"] == {"rank": 3, "max_length": 8}
    inputs = keras.Input((6, 8))
    model = keras.Model(inputs, layer(inputs))
    model.save(tmp_path / "encoder.keras")
    loaded = keras.saving.load_model(tmp_path / "encoder.keras", safe_mode=True)
    x_in = cvk.to_stacked(z).astype("float32")
    np.testing.assert_array_equal(to_numpy(loaded(x_in)), to_numpy(model(x_in)))


def test_multi_head_options_and_the_default_are_the_same_layer(rng):
    """`attention_options` for the default layer reach it (here the one
    it has already: `softmax`); the block has the default block's weights
    (the same names and shapes, in the same order) and, given them, its
    outputs."""
    x = cvk.to_stacked(ref.random_complex(rng, (2, 5, 4)))
    plain = ComplexTransformerEncoder(2)
    layer = ComplexTransformerEncoder(
        2, softmax="abs", attention_options={"softmax": "real"}
    )
    want = to_numpy(plain(x))
    layer.build(x.shape)
    assert [w.path.split("/", 1)[1] for w in layer.weights] == [
        w.path.split("/", 1)[1] for w in plain.weights
    ]
    layer.set_weights(plain.get_weights())
    assert layer.self_attention.softmax == "real"
    assert layer.get_config()["attention_options"] == {"softmax": "real"}
    np.testing.assert_array_equal(to_numpy(layer(x)), want)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(attention="linear"), "attention='linear'"),
        (dict(attention=None), "attention=None"),
        (dict(attention_options=[("rank", 2)]), "attention_options="),
        (dict(attention_options={1: 2}), "attention_options="),
        (
            dict(attention="low_rank", sliding_window=4),
            "sliding_window=4",
        ),
        (
            dict(attention="low_rank", rotary_max_wavelength=100.0),
            "rotary_max_wavelength=100.0",
        ),
    ],
)
def test_bad_attention_choices(kwargs, match):
    for cls in (ComplexTransformerEncoder, ComplexTransformerDecoder):
        with pytest.raises(ValueError, match=match):
            cls(2, **kwargs)
