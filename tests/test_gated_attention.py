"""Tests of gated attention (`ComplexMultiHeadAttention(gated=True)`, the
gate of Qiu et al. 2025 after each head) and of
`ComplexGatedAttentionUnit` (GAU, Hua et al. 2022) against NumPy
complex128 references written here from the papers and
reference-semantics.md: the gate `sigmoid(|x| W_g + b_g)` of the query's
input scaling each head's output before `W_o`; GAU's `U = silu(|X| W_g +
b_g)`, `V = modrelu(X_v W_v)`, `Z = modrelu(X W_z)`, `Q, K = Z gamma +
beta`, `O = (U * A V) W_o`.

Tolerance: float32 layers on unit-scale data agree with complex128 to 1e-5
absolute (as ComplexMultiHeadAttention's tests).
"""

import re

import keras
import numpy as np
import pytest
from backend_utils import compiled
from backend_utils import gradients
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras import attention as att
from cvattn_keras.layers import ComplexGatedAttentionUnit
from cvattn_keras.layers import ComplexMultiHeadAttention

VARIANTS = [(s, p) for s in att.SOFTMAX_VARIANTS for p in att.PRODUCTS]
ATOL = 1e-5


# ----------------------------------------------------------------------
# The NumPy references (complex128, no library code).
# ----------------------------------------------------------------------


def _random(rng, shape, scale=1.0):
    z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return scale * z / np.sqrt(2)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _weights(a, softmax, mask):
    """The weights of one variant for complex scores `a`; masked keys get
    weight 0 (every row here keeps at least one key)."""

    def softmax_of(logits):
        return _softmax(np.where(mask, logits, -1e30))

    if softmax == "real":
        return softmax_of(a.real) + 0j
    if softmax == "absonly":
        return softmax_of(np.abs(a)) + 0j
    if softmax == "abs":
        m = np.abs(a)
        return softmax_of(m) * np.where(m > 0, a / np.where(m > 0, m, 1), 0)
    return softmax_of(a.real) + 1j * softmax_of(a.imag)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _attend(q, k, v, softmax, product, scale, mask=None):
    """q (B, N, T, h), k (B, N, S, h), v (B, N, S, w) -> (B, N, T, w)."""
    k = np.conj(k) if product == "inner" else k
    a = scale * np.einsum("bnth,bnsh->bnts", q, k)
    if mask is None:
        mask = np.ones(a.shape, bool)
    w = _weights(a, softmax, mask)
    return np.einsum("bnts,bnsh->bnth", w, v), w


def _heads(x, heads):  # (B, L, N h) -> (B, N, L, h): contiguous heads
    b, length, width = x.shape
    return x.reshape(b, length, heads, width // heads).transpose(0, 2, 1, 3)


def _merge(x):  # (B, N, T, h) -> (B, T, N h)
    b, _, t, _ = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, t, -1)


def _np(weight):
    return to_numpy(weight).astype("float64")


def _dense(dense):
    w = _np(dense.kernel_real) + 1j * _np(dense.kernel_imag)
    b = 0 if not dense.use_bias else _np(dense.bias_real)
    return w, b if not dense.use_bias else b + 1j * _np(dense.bias_imag)


def _apply(dense, x):
    w, b = _dense(dense)
    return x @ w + b


def _np_gated_mha(layer, query, value, mask=None):
    """Multi-head attention with the gate of the query's moduli on each
    head's output, before the output projection."""
    n = layer.num_heads
    q = _heads(_apply(layer.query_dense, query), n)
    k = _heads(_apply(layer.key_dense, value), n)
    v = _heads(_apply(layer.value_dense, value), n)
    out, w = _attend(q, k, v, layer.softmax, layer.product, layer.scale, mask)
    if layer.gated:
        logits = np.abs(query) @ _np(layer.gate_kernel)
        if layer.use_bias:
            logits = logits + _np(layer.gate_bias)
        out = out * _heads(_sigmoid(logits), n)
    return _apply(layer.output_dense, _merge(out)), w


def _modrelu(z, bias):
    m = np.abs(z)
    return np.maximum(m + bias, 0) * np.where(
        m > 0, z / np.where(m > 0, m, 1), 0
    )


def _np_gau(layer, query, value=None, key=None, mask=None):
    value = query if value is None else value
    key = value if key is None else key
    n, bias = layer.num_heads, layer.use_bias

    def z_of(x):
        return _modrelu(
            _apply(layer.shared_dense, x), _np(layer.shared_activation.bias)
        )

    def transform(z, name):  # (B, L, s) -> (B, N, L, s)
        g = _np(getattr(layer, f"{name}_scale_real"))
        g = g + 1j * _np(getattr(layer, f"{name}_scale_imag"))
        out = z[:, None] * g[None, :, None, :]
        if bias:
            b = _np(getattr(layer, f"{name}_offset_real"))
            b = b + 1j * _np(getattr(layer, f"{name}_offset_imag"))
            out = out + b[None, :, None, :]
        return out

    v = _modrelu(
        _apply(layer.value_dense, value), _np(layer.value_activation.bias)
    )
    out, w = _attend(
        transform(z_of(query), "query"),
        transform(z_of(key), "key"),
        _heads(v, n),
        layer.softmax,
        layer.product,
        layer.scale,
        mask,
    )
    logits = np.abs(query) @ _np(layer.gate_kernel)
    if bias:
        logits = logits + _np(layer.gate_bias)
    u = logits * _sigmoid(logits)  # SiLU
    return _apply(layer.output_dense, _merge(out) * u), w


def _stacked(z):
    return cvk.to_stacked(z)


def _randomize(layer, rng):
    """Non-zero modReLU biases, gamma and beta (they start at 0, 1, 0)."""
    for weight in layer.weights:
        name = weight.path.split("/")[-1]
        if name == "bias" or "scale" in name or "offset" in name:
            shape = tuple(weight.shape)
            weight.assign(0.3 * rng.standard_normal(shape).astype("float32"))


def _mha(softmax="real", product="inner", **kwargs):
    kwargs.setdefault("bias_initializer", "random_normal")
    kwargs.setdefault("gated", True)
    return ComplexMultiHeadAttention(
        2, 3, softmax=softmax, product=product, **kwargs
    )


def _gau(softmax="real", product="inner", **kwargs):
    kwargs.setdefault("bias_initializer", "random_normal")
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 3)
    return ComplexGatedAttentionUnit(softmax=softmax, product=product, **kwargs)


# ----------------------------------------------------------------------
# Gated multi-head attention.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_gated_attention_matches_numpy(rng, softmax, product):
    query, memory = _random(rng, (2, 4, 3)), _random(rng, (2, 5, 2))
    layer = _mha(softmax, product, value_dim=2, output_dim=4)
    keep = rng.random((2, 4, 5)) > 0.3
    keep[..., 0] = True
    out, scores = layer(
        _stacked(query),
        _stacked(memory),
        attention_mask=keep,
        return_attention_scores=True,
    )
    expected, weights = _np_gated_mha(layer, query, memory, keep[:, None])
    np.testing.assert_allclose(cvk.from_stacked(out), expected, atol=ATOL)
    np.testing.assert_allclose(cvk.from_stacked(scores), weights, atol=ATOL)


def test_a_gate_held_at_one_is_the_ungated_layer(rng):
    """gate_kernel = 0 and gate_bias = 40: sigmoid(40) is 1 in float32,
    and the output equals the ungated layer's with the same weights, bit
    for bit (also through a cache)."""
    x = _stacked(_random(rng, (2, 4, 3)))
    gated, plain = _mha("abs"), _mha("abs", gated=False)
    gated(x, x)
    plain(x, x)
    assert not hasattr(plain, "gate_kernel") and len(plain.weights) == 16
    gated.gate_kernel.assign(np.zeros((3, 6), "float32"))
    gated.gate_bias.assign(np.full((6,), 40.0, "float32"))
    names = [w.path.split("/", 1)[1] for w in plain.weights]
    by_name = {w.path.split("/", 1)[1]: w for w in gated.weights}
    plain.set_weights([to_numpy(by_name[n]) for n in names])
    for kwargs in ({}, dict(use_causal_mask=True)):
        np.testing.assert_array_equal(
            to_numpy(gated(x, x, **kwargs)), to_numpy(plain(x, x, **kwargs))
        )


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_gated_attention_turns_with_a_common_phase(rng, softmax):
    """No biases: the gate sees moduli only, so a common phase turn of
    query, keys and values turns the output by that phase."""
    query, memory = _random(rng, (2, 4, 3)), _random(rng, (2, 5, 3))
    turn = np.exp(0.9j)
    layer = _mha(softmax, use_bias=False)
    a = layer(_stacked(query), _stacked(memory))
    b = layer(_stacked(turn * query), _stacked(turn * memory))
    np.testing.assert_allclose(
        cvk.from_stacked(b), turn * cvk.from_stacked(a), atol=ATOL
    )


def test_gated_attention_with_a_cache(rng):
    """Decoding step by step through a cache equals the causal call: the
    gate of each step's query input."""
    x = _stacked(_random(rng, (1, 5, 3)))
    layer = _mha("real", rotary_max_wavelength=50.0)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    cache = np.zeros((1, 2, 5, 2, 6), "float32")
    for t in range(5):
        step, cache = layer(
            x[:, t : t + 1],
            x[:, t : t + 1],
            use_causal_mask=True,
            cache=cache,
            cache_update_index=t,
        )
        np.testing.assert_allclose(to_numpy(step)[:, 0], full[:, t], atol=1e-6)


def test_gated_config_and_refusals(rng):
    layer = _mha("naive", "bilinear", seed=3)
    config = layer.get_config()
    assert config["gated"] is True
    assert ComplexMultiHeadAttention.from_config(config).gated
    plain = ComplexMultiHeadAttention(2, 3)
    assert plain.get_config()["gated"] is False
    # A config written before the option: ungated.
    old = {k: v for k, v in plain.get_config().items() if k != "gated"}
    assert not ComplexMultiHeadAttention.from_config(old).gated
    with pytest.raises(ValueError, match="gated='yes'"):
        ComplexMultiHeadAttention(2, 3, gated="yes")
    x = _stacked(_random(rng, (1, 3, 3)))
    layer(x, x)
    with pytest.raises(ValueError, match="query=None"):
        layer._project_from_heads(keras.ops.zeros((1, 3, 2, 6)))
    with pytest.raises(ValueError, match="is gated"):
        cvk.interop.reference_state_dict(layer)


# ----------------------------------------------------------------------
# The gated attention unit.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_gau_matches_numpy(rng, softmax, product):
    """Cross-attention (T != S, a value of its own width, a key of the
    query's), two heads sharing Z, value_dim and output_dim of their own,
    biases and modReLU biases, a mask."""
    query, value = _random(rng, (2, 4, 3)), _random(rng, (2, 5, 2))
    key = _random(rng, (2, 5, 3))
    layer = _gau(softmax, product, value_dim=2, output_dim=4)
    layer(_stacked(query), _stacked(value), key=_stacked(key))
    _randomize(layer, rng)
    keep = rng.random((2, 1, 5)) > 0.3
    keep[..., 0] = True
    out, scores = layer(
        _stacked(query),
        _stacked(value),
        key=_stacked(key),
        attention_mask=keep,
        return_attention_scores=True,
    )
    assert tuple(scores.shape) == (2, 2, 4, 10)
    expected, weights = _np_gau(layer, query, value, key, keep[:, None])
    np.testing.assert_allclose(cvk.from_stacked(out), expected, atol=ATOL)
    np.testing.assert_allclose(cvk.from_stacked(scores), weights, atol=ATOL)


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_gau_causal_self_attention(rng, softmax):
    """`layer(x, use_causal_mask=True)`: GAU's self-attention (one head,
    e = 2 d), the NumPy causal reference; the keys in blocks (chunk_size
    2) give the same; outputs up to t do not change when the inputs after
    t do."""
    x = _random(rng, (2, 6, 3))
    layer = _gau(softmax, num_heads=1, chunk_size=None)
    layer(_stacked(x))
    _randomize(layer, rng)
    out = to_numpy(layer(_stacked(x), use_causal_mask=True))
    causal = np.tril(np.ones((6, 6), bool))
    expected, _ = _np_gau(layer, x, mask=causal)
    np.testing.assert_allclose(cvk.from_stacked(out), expected, atol=ATOL)
    chunked = _gau(softmax, num_heads=1, chunk_size=2)
    chunked(_stacked(x))
    chunked.set_weights(layer.get_weights())
    got = to_numpy(chunked(_stacked(x), use_causal_mask=True))
    np.testing.assert_allclose(got, out, atol=1e-5)
    changed = x.copy()
    changed[:, 3:] = _random(rng, (2, 3, 3))
    again = to_numpy(layer(_stacked(changed), use_causal_mask=True))
    np.testing.assert_allclose(again[:, :3], out[:, :3], atol=1e-6)
    assert np.abs(again[:, 3:] - out[:, 3:]).max() > 1e-3


@pytest.mark.parametrize(
    "softmax, product",
    [(s, "inner") for s in att.SOFTMAX_VARIANTS] + [("absonly", "bilinear")],
)
def test_gau_turns_with_a_common_phase(rng, softmax, product):
    """No biases (modReLU's act on the modulus and stay): a common phase
    turn of query, keys and values leaves the weights and the real gate
    unchanged and turns the output by that phase."""
    query, memory = _random(rng, (2, 4, 3)), _random(rng, (2, 5, 3))
    turn = np.exp(0.9j)
    layer = _gau(softmax, product, use_bias=False)
    layer(_stacked(query), _stacked(memory))
    _randomize(layer, rng)
    a, wa = layer(
        _stacked(query), _stacked(memory), return_attention_scores=True
    )
    b, wb = layer(
        _stacked(turn * query),
        _stacked(turn * memory),
        return_attention_scores=True,
    )
    np.testing.assert_allclose(to_numpy(wb), to_numpy(wa), atol=ATOL)
    np.testing.assert_allclose(
        cvk.from_stacked(b), turn * cvk.from_stacked(a), atol=ATOL
    )


def test_gau_padding_masks_and_fully_masked_rows(rng):
    """A Keras mask on the input pads keys (and zeroes those query rows'
    weights); a sample whose keys are all masked and zero input give
    finite outputs and gradients."""
    x = _stacked(_random(rng, (2, 4, 3))).astype("float32")
    keep = np.ones((2, 4), bool)
    keep[1, 2:] = False
    layer = _gau("abs")
    out = layer(x, value_mask=keep, key_mask=keep)
    layer_mask = layer(x, attention_mask=keep[:, None, :])
    np.testing.assert_allclose(to_numpy(out), to_numpy(layer_mask), atol=1e-6)
    expected, _ = _np_gau(
        layer, cvk.from_stacked(x, "complex128"), mask=keep[:, None, None]
    )
    np.testing.assert_allclose(cvk.from_stacked(out), expected, atol=ATOL)
    none = np.ones((2, 1, 4), bool)
    none[1] = False
    x[0] = 0

    def loss(x):
        return keras.ops.sum(layer(x, attention_mask=none) ** 2)

    assert np.all(np.isfinite(to_numpy(layer(x, attention_mask=none))))
    value, (grad_x,), grad_vars = gradients(
        loss, [x], layer.trainable_variables
    )
    assert np.isfinite(value)
    for grad in [grad_x] + grad_vars:
        assert np.all(np.isfinite(grad))


def test_gau_symbolic_shapes(rng):
    layer = _gau(output_dim=5)
    assert layer.compute_output_shape((2, 9, 6)) == (2, 9, 10)
    assert layer.compute_output_shape((2, 9, 6), (2, 7, 4), (2, 7, 6)) == (
        2,
        9,
        10,
    )
    x = keras.Input((None, 6))
    out, scores = layer(x, return_attention_scores=True)
    assert tuple(out.shape) == (None, None, 10)
    assert tuple(scores.shape) == (None, 2, None, None)
    model = keras.Model(x, out)
    z = _random(rng, (2, 3, 3))
    expected, _ = _np_gau(layer, z)
    np.testing.assert_allclose(
        cvk.from_stacked(model(_stacked(z))), expected, atol=ATOL
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_heads=0), "num_heads=0"),
        (dict(key_dim=2.0), "key_dim=2.0"),
        (dict(expansion=0), "expansion=0"),
        (dict(value_dim=-1), "value_dim=-1"),
        (dict(softmax="soft"), "softmax='soft'"),
        (dict(activation="tanh"), "activation='tanh'"),
        (dict(dropout=1.0), "dropout=1.0"),
        (dict(chunk_size=0), "chunk_size=0"),
    ],
)
def test_gau_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        _gau(**kwargs)


@pytest.mark.parametrize(
    "shapes, kwargs, match",
    [
        (((2, 4, 6), (2, 5, 4)), {}, "key_shape=(2, 5, 4)"),
        (((2, 4, 6), (2, 5, 6)), dict(key=(2, 4, 6)), "same length"),
        (((2, 4, 5), (2, 5, 6)), {}, "query_shape"),
        (((2, 4, 6), (2, 5, 6)), dict(attention_mask=(2, 4, 4)), "mask"),
        (((2, 4, 6), (2, 5, 6)), dict(value_mask=(2, 4)), "value_mask"),
        (((2, 4, 6), (2, 5, 6)), dict(use_causal_mask=1), "use_causal_mask"),
        (((2, 3, 6), None), dict(num_heads=4), "num_heads=4"),
    ],
)
def test_gau_bad_call_arguments(shapes, kwargs, match):
    layer = _gau(num_heads=kwargs.pop("num_heads", 2))
    query = np.zeros(shapes[0], "float32")
    value = None if shapes[1] is None else np.zeros(shapes[1], "float32")
    kwargs = {
        k: np.ones(v, bool if "mask" in k else "float32")
        if isinstance(v, tuple)
        else v
        for k, v in kwargs.items()
    }
    with pytest.raises(ValueError, match=re.escape(match)):
        layer(query, value, **kwargs)


# ----------------------------------------------------------------------
# Both: configs, files, precision, XLA, export.
# ----------------------------------------------------------------------


def test_gau_config_round_trip(rng):
    layer = _gau(
        "naive",
        "bilinear",
        value_dim=4,
        expansion=3,
        activation="cardioid",
        dropout=0.1,
        output_dim=3,
        scale=0.3,
        kernel_regularizer="l2",
        seed=5,
        chunk_size=8,
        name="gau",
    )
    config = layer.get_config()
    clone = ComplexGatedAttentionUnit.from_config(config)
    assert clone.get_config() == config
    x = _stacked(_random(rng, (1, 4, 2)))
    layer(x)
    clone(x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_numpy(clone(x)), to_numpy(layer(x)))


def _both_model(**kwargs):
    """Frames -> dense -> gated attention -> GAU (causal, padded) ->
    dense: the model of the file, XLA and export tests."""
    frames = keras.Input((5, 8), name="frames")
    keep = keras.Input((1, 5), dtype="bool", name="keep")
    x = cvk.layers.ComplexDense(4, name="dense_in")(frames)
    x = ComplexMultiHeadAttention(2, 2, gated=True, **kwargs)(
        x, x, attention_mask=keep
    )
    x = ComplexGatedAttentionUnit(1, 3, **kwargs)(
        x, use_causal_mask=True, attention_mask=keep
    )
    return keras.Model([frames, keep], cvk.layers.ComplexDense(2)(x))


def _data(rng, count):
    keep = np.ones((count, 1, 5), bool)
    keep[::2, :, 4:] = False
    frames = _stacked(_random(rng, (count, 5, 4))).astype("float32")
    return [frames, keep]


@pytest.mark.slow
def test_saved_model_loads_with_safe_mode(rng, tmp_path):
    model = _both_model(bias_initializer="random_normal")
    inputs = _data(rng, 2)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.layers[3].gated
    assert isinstance(loaded.layers[4], ComplexGatedAttentionUnit)
    np.testing.assert_array_equal(
        to_numpy(loaded(inputs)), to_numpy(model(inputs))
    )


@pytest.mark.parametrize("kind", ["gated", "gau"])
def test_mixed_float16_scores_in_float32(rng, kind):
    """Under mixed_float16 the output is float16 and the variables float32;
    inputs at 300 give scores past float16's 65504, and the output stays
    finite and close to the float32 layer's."""
    x = _stacked(_random(rng, (2, 5, 4), scale=300.0))
    make = _mha if kind == "gated" else _gau
    full = make("abs", use_bias=False)
    full(x, x)
    if kind == "gau":
        # GAU's output is quadratic in its input (U times A V): a small
        # gate keeps it within float16's range while the scores are not.
        full.gate_kernel.assign(1e-3 * to_numpy(full.gate_kernel))
    expected = to_numpy(full(x, x))
    mixed = make("abs", use_bias=False, dtype="mixed_float16")
    mixed(x, x)
    mixed.set_weights(full.get_weights())
    out, scores = mixed(x, x, return_attention_scores=True)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert all(w.dtype == "float32" for w in mixed.weights)
    _, weights = full(x, x, return_attention_scores=True)
    out = to_numpy(out).astype("float32")
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(to_numpy(scores)))
    peak = np.max(np.abs(expected))
    np.testing.assert_allclose(out, expected, atol=2e-2 * peak)
    # The scores themselves exceed float16's range (the weights are
    # finite only because they are computed in float32): with no biases
    # and modReLU at first the identity, GAU's Q = K = Z W_z.
    z = cvk.from_stacked(x, "complex128")
    if kind == "gated":
        q = _heads(z @ _dense(full.query_dense)[0], 2)
        k = _heads(z @ _dense(full.key_dense)[0], 2)
    else:
        q = k = _heads(z @ _dense(full.shared_dense)[0], 1)
    scores = full.scale * np.einsum("bnth,bnsh->bnts", q, np.conj(k))
    assert np.max(np.abs(scores)) > 65504


@pytest.mark.slow
def test_xla_equals_eager(rng):
    model = _both_model(bias_initializer="random_normal")
    inputs = _data(rng, 2)
    xla = compiled(lambda f, k: model([f, k]))
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    np.testing.assert_allclose(
        to_numpy(xla(*inputs)), to_numpy(model(inputs)), atol=1e-6
    )


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_tflite_float32_and_full_int8(rng, tmp_path):
    keras.utils.set_random_seed(3)
    model = _both_model()
    data = _data(rng, 32)
    path = cvk.export.export_tflite(model, tmp_path / "f32.tflite")
    report = cvk.export.verify_tflite(path, model, [x[:3] for x in data])
    assert report.builtin_only and report.non_builtin_ops == (), report
    peak = np.max(np.abs(to_numpy(model([x[:3] for x in data]))))
    assert report.max_abs_error <= 1e-4 * peak, report
    # full_int8: export_tflite raises FloatFallbackError on any float op.
    path = cvk.export.export_tflite(
        model,
        tmp_path / "int8.tflite",
        quantization="full_int8",
        representative_data=data,
        batch_size=2,
    )
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        tflite = schema.ModelT.InitFromPackedBuf(f.read(), 0)
    floats = {schema.TensorType.FLOAT32, schema.TensorType.FLOAT16}
    assert not [t.name for t in tflite.subgraphs[0].tensors if t.type in floats]
    report = cvk.export.verify_tflite(path, model, [x[:2] for x in data])
    assert report.quantization == "full_int8", report
    # Measured when written: each layer alone 2-4% of the largest output
    # (ungated attention alike); the two stacked here 0.1 to 0.18 over
    # draws of the data: about 2x that.
    assert report.max_rel_error <= 0.3, report


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_onnx_matches_keras(rng, tmp_path):
    pytest.importorskip("onnxruntime", reason="needs cvattn_keras[onnx]")
    pytest.importorskip("tf2onnx", reason="needs cvattn_keras[onnx]")
    keras.utils.set_random_seed(3)
    model = _both_model()
    path = cvk.export.export_onnx(model, str(tmp_path / "m.onnx"))
    report = cvk.export.verify_onnx(path, model, _data(rng, 3))
    assert "Sigmoid" in report.ops, report
    assert report.max_abs_error <= 1e-5, report  # measured 2e-8
