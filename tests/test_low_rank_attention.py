"""Tests of ComplexLowRankAttention (Linformer, complex) against a NumPy
complex128 reference written here from Wang et al. (2020) and
reference-semantics.md: keys and values projected along the sequence axis
by `E`, `F` (their first `S` columns), then multi-head attention over the
`rank` projected rows.

Tolerance: float32 layers on unit-scale data agree with complex128 to 1e-5
absolute (as ComplexMultiHeadAttention's tests); measured about 1e-6.
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
from cvattn_keras.layers import ComplexLowRankAttention
from cvattn_keras.layers import ComplexMultiHeadAttention

VARIANTS = [(s, p) for s in att.SOFTMAX_VARIANTS for p in att.PRODUCTS]
ATOL = 1e-5


# ----------------------------------------------------------------------
# The NumPy reference (complex128, no library code).
# ----------------------------------------------------------------------


def _random(rng, shape, scale=1.0):
    z = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return scale * z / np.sqrt(2)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _weights(a, softmax):
    """The weights of one variant for complex scores `a` (no mask)."""
    if softmax == "real":
        return _softmax(a.real) + 0j
    if softmax == "absonly":
        return _softmax(np.abs(a)) + 0j
    if softmax == "abs":
        m = np.abs(a)
        return _softmax(m) * np.where(m > 0, a / np.where(m > 0, m, 1), 0)
    return _softmax(a.real) + 1j * _softmax(a.imag)  # naive


def _np_attention(query, value, key, params, heads, softmax, product, scale):
    """Multi-head attention: query (B, T, Eq), value/key (B, S, E*)."""

    def project(x, name):
        w, b = params[name]
        return x @ w + (0 if b is None else b)

    def split(x):  # (B, L, N h) -> (B, N, L, h): contiguous heads
        b, length, width = x.shape
        return x.reshape(b, length, heads, width // heads).transpose(0, 2, 1, 3)

    q = split(project(query, "query"))
    k = split(project(key, "key"))
    v = split(project(value, "value"))
    k = np.conj(k) if product == "inner" else k
    w = _weights(scale * np.einsum("bnth,bnsh->bnts", q, k), softmax)
    out = np.einsum("bnts,bnsh->bnth", w, v)
    b, _, t, _ = out.shape
    merged = out.transpose(0, 2, 1, 3).reshape(b, t, -1)
    return project(merged, "output"), w


def _np_low_rank(query, value, key, params, e, f, padding=None, **kwargs):
    """Linformer: the key/value inputs, padded rows zeroed, times the first
    S columns of E and F, then attention over the rank rows."""
    length = value.shape[1]
    if padding is not None:
        value, key = value * padding[..., None], key * padding[..., None]
    key = np.einsum("rs,bsd->brd", e[:, :length], key)
    value = np.einsum("rs,bsd->brd", f[:, :length], value)
    return _np_attention(query, value, key, params, **kwargs)


def _complex(weight):
    return to_numpy(weight).astype("float64")


def _dense(dense):
    w = _complex(dense.kernel_real) + 1j * _complex(dense.kernel_imag)
    if not dense.use_bias:
        return w, None
    return w, _complex(dense.bias_real) + 1j * _complex(dense.bias_imag)


def _params(layer):
    names = ("query", "key", "value", "output")
    return {n: _dense(getattr(layer, f"{n}_dense")) for n in names}


def _projections(layer):
    e = _complex(layer.key_projection_real)
    f = _complex(layer.value_projection_real)
    e = e + 1j * _complex(layer.key_projection_imag)
    return e, f + 1j * _complex(layer.value_projection_imag)


def _reference(layer, query, value, key=None, padding=None):
    key = value if key is None else key
    return _np_low_rank(
        query,
        value,
        key,
        _params(layer),
        *_projections(layer),
        padding=padding,
        heads=layer.num_heads,
        softmax=layer.softmax,
        product=layer.product,
        scale=layer.scale,
    )


def _layer(softmax="real", product="inner", **kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 3)
    kwargs.setdefault("rank", 3)
    kwargs.setdefault("max_length", 7)
    kwargs.setdefault("bias_initializer", "random_normal")
    return ComplexLowRankAttention(softmax=softmax, product=product, **kwargs)


def _stacked(z):
    return cvk.to_stacked(z)


# ----------------------------------------------------------------------
# Exact where it says it is.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_identity_projections_are_full_attention(rng, softmax, product):
    """rank = max_length = S, E = F = I: the full attention, both the NumPy
    one and ComplexMultiHeadAttention with the same weights."""
    x, m = _random(rng, (2, 4, 3)), _random(rng, (2, 5, 2))
    layer = _layer(softmax, product, rank=5, max_length=5)
    layer(_stacked(x), _stacked(m))
    eye = np.eye(5, dtype="float32")
    layer.key_projection_real.assign(eye)
    layer.value_projection_real.assign(eye)
    for weight in (layer.key_projection_imag, layer.value_projection_imag):
        weight.assign(np.zeros((5, 5), "float32"))
    out, scores = layer(_stacked(x), _stacked(m), return_attention_scores=True)
    expected, weights = _np_attention(
        x, m, m, _params(layer), 2, softmax, product, 3**-0.5
    )
    np.testing.assert_allclose(cvk.from_stacked(out), expected, atol=ATOL)
    np.testing.assert_allclose(cvk.from_stacked(scores), weights, atol=ATOL)
    full = ComplexMultiHeadAttention(2, 3, softmax=softmax, product=product)
    full.build(x.shape[:2] + (6,), m.shape[:2] + (4,))
    full.set_weights(layer.attention.get_weights())
    np.testing.assert_allclose(
        to_numpy(full(_stacked(x), _stacked(m))), to_numpy(out), atol=1e-6
    )


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_matches_the_numpy_linformer(rng, softmax, product):
    """Learned E, F of rank 3, a sequence of 5 < max_length 7 (the first
    columns), cross-attention with T != S, keys unlike values, value_dim
    and output_dim of their own, biases."""
    query = _random(rng, (2, 4, 3))
    value, key = _random(rng, (2, 5, 2)), _random(rng, (2, 5, 4))
    layer = _layer(softmax, product, value_dim=2, output_dim=5)
    out, scores = layer(
        _stacked(query),
        _stacked(value),
        key=_stacked(key),
        return_attention_scores=True,
    )
    assert tuple(scores.shape) == (2, 2, 4, 2 * 3)
    expected, weights = _reference(layer, query, value, key)
    np.testing.assert_allclose(cvk.from_stacked(out), expected, atol=ATOL)
    np.testing.assert_allclose(cvk.from_stacked(scores), weights, atol=ATOL)


def test_key_padding_zeroes_the_padded_tokens(rng):
    """A (B, S) value_mask, a (B, 1, S) and a (B, 1, 1, S) attention_mask
    and a Keras mask all zero the padded keys and values before the
    projection (the NumPy reference); trailing padding gives the output of
    the sequence without it (its first columns)."""
    query, memory = _random(rng, (2, 4, 3)), _random(rng, (2, 6, 3))
    keep = np.ones((2, 6), bool)
    keep[0, 4:] = False
    keep[1, 1] = False
    layer = _layer("abs")
    out = layer(_stacked(query), _stacked(memory), value_mask=keep)
    expected, _ = _reference(layer, query, memory, padding=keep)
    np.testing.assert_allclose(cvk.from_stacked(out), expected, atol=ATOL)
    for mask in (keep[:, None], keep[:, None, None]):
        again = layer(_stacked(query), _stacked(memory), attention_mask=mask)
        np.testing.assert_allclose(to_numpy(again), to_numpy(out), atol=1e-6)
    padded = _stacked(memory * keep[..., None])
    masked = keras.layers.Masking()(padded)
    again = layer(_stacked(query), masked)  # value_mask from Keras
    np.testing.assert_allclose(to_numpy(again), to_numpy(out), atol=1e-6)
    short = layer(_stacked(query[:1]), _stacked(memory[:1, :4]))
    np.testing.assert_allclose(to_numpy(short), to_numpy(out)[:1], atol=1e-6)


@pytest.mark.parametrize(
    "softmax, product",
    [(s, "inner") for s in att.SOFTMAX_VARIANTS] + [("absonly", "bilinear")],
)
def test_a_common_phase_turns_the_output(rng, softmax, product):
    """No biases: x -> e^{i phi} x for query, keys and values leaves the
    weights unchanged (E and F are linear) and turns the output by phi
    (the bilinear product turns the scores by 2 phi, which AAtt's modulus
    does not see)."""
    query, memory = _random(rng, (2, 4, 3)), _random(rng, (2, 6, 3))
    turn = np.exp(0.9j)
    layer = _layer(softmax, product, use_bias=False)
    a, wa = layer(
        _stacked(query), _stacked(memory), return_attention_scores=True
    )
    b, wb = layer(
        _stacked(turn * query),
        _stacked(turn * memory),
        return_attention_scores=True,
    )
    np.testing.assert_allclose(to_numpy(wb), to_numpy(wa), atol=1e-5)
    np.testing.assert_allclose(
        cvk.from_stacked(b), turn * cvk.from_stacked(a), atol=1e-5
    )


# ----------------------------------------------------------------------
# Keras: config, files, precision, XLA, symbolic shapes.
# ----------------------------------------------------------------------


def test_config_round_trip(rng):
    layer = _layer(
        "naive",
        "bilinear",
        rank=2,
        max_length=9,
        value_dim=4,
        dropout=0.1,
        output_dim=3,
        scale=0.3,
        projection_initializer="random_normal",
        kernel_regularizer="l2",
        seed=5,
        name="linformer",
    )
    config = layer.get_config()
    clone = ComplexLowRankAttention.from_config(config)
    assert clone.get_config() == config
    assert (config["rank"], config["max_length"]) == (2, 9)
    x = _stacked(_random(rng, (1, 4, 2)))
    layer(x, x)
    clone(x, x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_numpy(clone(x, x)), to_numpy(layer(x, x)))


@pytest.mark.slow
def test_saved_model_loads_with_safe_mode(rng, tmp_path):
    query, memory = keras.Input((4, 6)), keras.Input((None, 4))
    x = cvk.layers.ComplexDense(3)(query)
    x = _layer("abs", "bilinear", dropout=0.1, seed=1)(
        x, keras.layers.Masking()(memory)
    )
    model = keras.Model([query, memory], x)
    inputs = [
        _stacked(_random(rng, (2, 4, 3))).astype("float32"),
        _stacked(_random(rng, (2, 5, 2))).astype("float32"),
    ]
    inputs[1][1, 3:] = 0  # padding
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded.layers[-1], ComplexLowRankAttention)
    np.testing.assert_array_equal(
        to_numpy(loaded(inputs)), to_numpy(model(inputs))
    )


def test_mixed_float16_scores_in_float32(rng):
    """Under mixed_float16 the output is float16 and the variables
    float32, and the scores are float32: inputs at 300 give scores past
    float16's 65504, and the output stays finite and close to the float32
    layer's."""
    x = _stacked(_random(rng, (2, 5, 4), scale=300.0))
    full = _layer("abs", use_bias=False)
    expected = to_numpy(full(x, x))
    mixed = _layer("abs", use_bias=False, dtype="mixed_float16")
    mixed.build(x.shape, x.shape)
    mixed.set_weights(full.get_weights())
    out, scores = mixed(x, x, return_attention_scores=True)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert all(w.dtype == "float32" for w in mixed.weights)
    z = cvk.from_stacked(x, "complex128")
    params, (e, _) = _params(full), _projections(full)
    q = (z @ params["query"][0]).reshape(2, 5, 2, 3)
    k = (np.einsum("rs,bsd->brd", e[:, :5], z) @ params["key"][0]).reshape(
        2, 3, 2, 3
    )
    scores_np = 3**-0.5 * np.einsum("btnh,bsnh->bnts", q, np.conj(k))
    assert np.max(np.abs(scores_np)) > 65504  # past float16's range
    out = to_numpy(out).astype("float32")
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(to_numpy(scores)))
    peak = np.max(np.abs(expected))
    np.testing.assert_allclose(out, expected, atol=2e-2 * peak)


@pytest.mark.slow
def test_xla_equals_eager(rng):
    query = _stacked(_random(rng, (2, 4, 3)))
    memory = _stacked(_random(rng, (2, 6, 3)))
    keep = rng.random((2, 1, 6)) > 0.3
    layers = [_layer(s, p) for s, p in (("real", "inner"), ("abs", "cp"))]
    for layer in layers:
        layer(query, memory)

    def run(q, v, m):
        return [layer(q, v, attention_mask=m) for layer in layers]

    xla = compiled(run)
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    for got, want in zip(xla(query, memory, keep), run(query, memory, keep)):
        np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-6)


def test_symbolic_shapes_and_unknown_lengths(rng):
    layer = _layer(output_dim=5)
    assert layer.compute_output_shape((2, 9, 6), (2, 7, 4)) == (2, 9, 10)
    query, memory = keras.Input((None, 6)), keras.Input((None, 4))
    out, scores = layer(query, memory, return_attention_scores=True)
    assert tuple(out.shape) == (None, None, 10)
    assert tuple(scores.shape) == (None, 2, None, 6)
    model = keras.Model([query, memory], out)
    x, m = _random(rng, (2, 3, 3)), _random(rng, (2, 4, 2))
    got = model([_stacked(x), _stacked(m)])
    expected, _ = _reference(layer, x, m)
    np.testing.assert_allclose(cvk.from_stacked(got), expected, atol=ATOL)


# ----------------------------------------------------------------------
# The edges: degenerate input, bad arguments.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_zeros_and_fully_masked_keys_are_finite(rng, softmax):
    """Zero inputs (no biases: zero scores, the modulus at 0) and a sample
    whose keys are all padded: finite outputs and gradients."""
    x = _stacked(_random(rng, (2, 4, 3))).astype("float32")
    x[0] = 0
    keep = np.ones((2, 1, 4), bool)
    keep[1] = False
    layer = _layer(softmax, use_bias=False, rank=2, max_length=4)

    def loss(x):
        out = layer(x, x, attention_mask=keep)
        return keras.ops.sum(out**2) + keras.ops.sum(layer(x * 0, x * 0))

    out = to_numpy(layer(x, x, attention_mask=keep))
    assert np.all(np.isfinite(out))
    value, (grad_x,), grad_vars = gradients(
        loss, [x], layer.trainable_variables
    )
    assert np.isfinite(value)
    for grad in [grad_x] + grad_vars:
        assert np.all(np.isfinite(grad))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(rank=0), "rank=0"),
        (dict(rank=8, max_length=7), "rank=8, max_length=7"),
        (dict(max_length=0), "max_length=0"),
        (dict(rank=2.0), "rank=2.0"),
        (dict(num_heads=0), "num_heads=0"),
        (dict(softmax="soft"), "softmax='soft'"),
        (dict(projection_initializer="nope"), "projection_initializer"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _layer(**kwargs)


@pytest.mark.parametrize(
    "shapes, kwargs, match",
    [
        (
            ((2, 4, 6), (2, 5, 6)),
            dict(use_causal_mask=True),
            "use_causal_mask=True",
        ),
        (((2, 4, 6), (2, 8, 6)), {}, "8 tokens, more than max_length=7"),
        (((2, 4, 6), (2, 5, 6)), dict(attention_mask=(2, 4, 5)), "(B, T, S)"),
        (((2, 4, 6), (2, 5, 6)), dict(attention_mask=(4, 5)), "(T, S)"),
        (((2, 4, 6), (2, 5, 6)), dict(attention_mask=(2, 2, 1, 5)), "N, T"),
        (((2, 4, 6), (2, 5, 6)), dict(attention_mask=(2, 1, 3)), "mask.shape"),
        (((2, 4, 6), (2, 5, 6)), dict(value_mask=(2, 4)), "value_mask"),
        (((2, 4, 5), (2, 5, 6)), {}, "query_shape"),
    ],
)
def test_bad_call_arguments(shapes, kwargs, match):
    layer = _layer()
    query, value = (np.zeros(s, "float32") for s in shapes)
    kwargs = {
        k: np.ones(v, bool) if isinstance(v, tuple) else v
        for k, v in kwargs.items()
    }
    with pytest.raises(ValueError, match=re.escape(match)):
        layer(query, value, **kwargs)
    # Refused as well when a functional model is built.
    with pytest.raises(ValueError, match=re.escape(match)):
        layer(keras.Input(shapes[0][1:]), keras.Input(shapes[1][1:]), **kwargs)


# ----------------------------------------------------------------------
# TFLite: builtin ops only, float32 and full_int8.
# ----------------------------------------------------------------------


def _export_model():
    """A dense stem, then cross-attention (CAtt) to a memory of 6 <
    max_length 8, padded by a bool input."""
    frames = keras.Input((5, 8), name="frames")
    memory = keras.Input((6, 6), name="memory")
    keep = keras.Input((1, 6), dtype="bool", name="keep")
    x = cvk.layers.ComplexDense(4, name="dense_in")(frames)
    x = ComplexLowRankAttention(2, 3, rank=4, max_length=8)(
        x, memory, attention_mask=keep
    )
    return keras.Model([frames, memory, keep], x)


def _export_data(rng, count):
    keep = np.ones((count, 1, 6), bool)
    keep[::2, :, 4:] = False
    return [
        _stacked(_random(rng, (count, 5, 4))).astype("float32"),
        _stacked(_random(rng, (count, 6, 3))).astype("float32"),
        keep,
    ]


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_tflite_float32_and_full_int8(rng, tmp_path):
    keras.utils.set_random_seed(3)
    model = _export_model()
    data = _export_data(rng, 32)
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
    # Measured when written: 2.4e-2 of the largest output (test_export_
    # integer.py's full_int8 attention: 3.5e-2); about 4x that.
    assert report.max_rel_error <= 0.1, report


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_onnx_matches_keras(rng, tmp_path):
    """export_onnx checks that the file holds standard ONNX only (default
    domain, no complex type); on ONNX Runtime it matches Keras (measured
    1.2e-7 when written)."""
    pytest.importorskip("onnxruntime", reason="needs cvattn_keras[onnx]")
    pytest.importorskip("tf2onnx", reason="needs cvattn_keras[onnx]")
    keras.utils.set_random_seed(3)
    model = _export_model()
    path = cvk.export.export_onnx(model, str(tmp_path / "m.onnx"))
    report = cvk.export.verify_onnx(path, model, _export_data(rng, 3))
    assert "MatMul" in report.ops, report
    assert report.max_abs_error <= 1e-5, report
