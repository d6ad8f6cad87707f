"""Tests of ComplexSparseAttention (Sparse Transformer / BigBird patterns,
complex) against a NumPy complex128 reference: full multi-head attention
(numpy_reference.py, no library code) under the pattern's dense mask,
written here from the layer's definition: local `|t - s| < W` (causal
`t - W < s <= t`), strided `s % stride == stride - 1`, global `s < G` or
`t < G`, and `s <= t` everywhere when causal.

Tolerance: float32 layers on unit-scale data agree with complex128 to 1e-5
absolute (as ComplexMultiHeadAttention's tests); measured about 1e-6.
"""

import re

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import compiled
from backend_utils import gradients
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras import attention as att
from cvattn_keras.layers import ComplexMultiHeadAttention
from cvattn_keras.layers import ComplexSparseAttention

VARIANTS = [(s, p) for s in att.SOFTMAX_VARIANTS for p in att.PRODUCTS]
ATOL = 1e-5


def _pattern(length, keys, window, stride, global_tokens, causal):
    """The pattern's dense (T, S) mask, from its definition."""
    t, s = np.arange(length)[:, None], np.arange(keys)[None, :]
    local = (s > t - window) & ((s <= t) if causal else (s < t + window))
    allowed = local | (s < global_tokens) | (t < global_tokens)
    if stride is not None:
        allowed |= s % stride == stride - 1
    return allowed & (s <= t) if causal else allowed


def _layer(softmax="real", product="inner", **kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 3)
    kwargs.setdefault("window", 2)
    kwargs.setdefault("bias_initializer", "random_normal")
    return ComplexSparseAttention(softmax=softmax, product=product, **kwargs)


def _reference(layer, query, value, key=None, mask=None):
    """NumPy MHA with the layer's weights under `mask` (T, S) or
    (B, T, S)."""
    key = value if key is None else key
    out, _ = ref.multi_head_attention(
        query,
        value,
        key,
        ref.attention_params(layer.attention),
        layer.num_heads,
        layer.softmax,
        layer.product,
        layer.scale,
        None if mask is None else (mask if mask.ndim == 3 else mask[None]),
    )
    return out


def _out(x):
    return cvk.from_stacked(to_numpy(x), "complex128")


_stacked = cvk.to_stacked


# ----------------------------------------------------------------------
# Exact where it says it is.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_window_covering_the_sequence_is_full_attention(rng, softmax, product):
    """window >= T: full attention (causal: full causal attention), the
    NumPy one and ComplexMultiHeadAttention with the same weights; 7
    queries in blocks of 3 (the last padded), strided and global keys
    changing nothing."""
    x = ref.random_complex(rng, (2, 7, 3))
    layer = _layer(
        softmax, product, window=7, stride=2, global_tokens=1, block_size=3
    )
    full = ComplexMultiHeadAttention(2, 3, softmax=softmax, product=product)
    full.build((2, 7, 6), (2, 7, 6))
    for causal in (False, True):
        out = layer(_stacked(x), _stacked(x), use_causal_mask=causal)
        mask = np.tril(np.ones((7, 7), bool)) if causal else None
        expected = _reference(layer, x, x, mask=mask)
        np.testing.assert_allclose(_out(out), expected, atol=ATOL)
        full.set_weights(layer.attention.get_weights())
        again = full(_stacked(x), _stacked(x), use_causal_mask=causal)
        np.testing.assert_allclose(to_numpy(out), to_numpy(again), atol=1e-6)


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_window_only_is_the_sliding_window_attention(rng, softmax):
    """stride=None, global_tokens=0: ComplexMultiHeadAttention(
    sliding_window=W) with the same weights under a key padding mask (11
    tokens in blocks of 4): causal, output and gradients; bidirectional,
    output."""
    x = _stacked(ref.random_complex(rng, (2, 11, 3))).astype("float32")
    keep = np.ones((2, 11), bool)
    keep[1, 6:] = False
    layer = _layer(softmax, window=3, block_size=4)
    window = ComplexMultiHeadAttention(2, 3, softmax=softmax, sliding_window=3)
    layer(x, x)
    window(x, x)
    window.set_weights(layer.attention.get_weights())
    out = layer(x, x, value_mask=keep)
    np.testing.assert_allclose(
        to_numpy(out), to_numpy(window(x, x, value_mask=keep)), atol=1e-6
    )
    results = []
    for attention in (layer, window):

        def loss(x, attention=attention):
            out = attention(x, x, value_mask=keep, use_causal_mask=True)
            return keras.ops.sum(out * out)

        out = attention(x, x, value_mask=keep, use_causal_mask=True)
        _, (grad,), grads = gradients(loss, [x], attention.trainable_variables)
        results.append((to_numpy(out), grad, grads))
    (out, grad, grads), (want, want_grad, want_grads) = results
    np.testing.assert_allclose(out, want, atol=1e-6)
    np.testing.assert_allclose(grad, want_grad, atol=1e-5)
    for got, wanted in zip(grads, want_grads):
        np.testing.assert_allclose(got, wanted, atol=1e-5)


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_matches_the_numpy_pattern(rng, softmax, product):
    """Window 2, stride 4, 2 global tokens, 13 tokens in blocks of 4, a
    key padding mask, bidirectional and causal: NumPy attention under the
    pattern's dense mask."""
    x = ref.random_complex(rng, (2, 13, 3))
    keep = np.ones((2, 13), bool)
    keep[0, [3, 7]] = False
    keep[1, 10:] = False
    layer = _layer(softmax, product, stride=4, global_tokens=2, block_size=4)
    for causal in (False, True):
        out = layer(
            _stacked(x), _stacked(x), value_mask=keep, use_causal_mask=causal
        )
        pattern = _pattern(13, 13, 2, 4, 2, causal)
        expected = _reference(layer, x, x, mask=pattern[None] & keep[:, None])
        np.testing.assert_allclose(_out(out), expected, atol=ATOL)
        # The pattern is not full attention: the test can fail.
        assert not pattern.all()
        assert np.abs(_reference(layer, x, x) - expected).max() > 1e-3


def test_cross_attention_and_attention_mask_forms(rng):
    """T = 6 queries, S = 10 keys unlike the values, value_dim and
    output_dim of their own; the padding as value_mask, (B, 1, S) and
    (B, 1, 1, S) attention masks and a Keras mask give the same output;
    a query mask zeroes rows (before the output projection's bias)."""
    query = ref.random_complex(rng, (2, 6, 3))
    value, key = (
        ref.random_complex(rng, (2, 10, 2)),
        ref.random_complex(rng, (2, 10, 4)),
    )
    keep = np.ones((2, 10), bool)
    keep[1, 7:] = False
    layer = _layer("abs", stride=3, global_tokens=1, value_dim=2, output_dim=5)
    args = (_stacked(query), _stacked(value))
    out = layer(*args, key=_stacked(key), value_mask=keep)
    pattern = _pattern(6, 10, 2, 3, 1, False)
    expected = _reference(layer, query, value, key, pattern & keep[:, None])
    np.testing.assert_allclose(_out(out), expected, atol=ATOL)
    for mask in (keep[:, None], keep[:, None, None]):
        again = layer(*args, key=_stacked(key), attention_mask=mask)
        np.testing.assert_allclose(to_numpy(again), to_numpy(out), atol=1e-6)
    padded = _stacked(value * keep[..., None])
    keys = _stacked(key)
    again = layer(_stacked(query), keras.layers.Masking()(padded), key=keys)
    wanted = layer(_stacked(query), padded, key=keys, value_mask=keep)
    np.testing.assert_allclose(to_numpy(again), to_numpy(wanted), atol=1e-6)
    rows = np.array([[True] * 6, [True, False] * 3])
    masked = to_numpy(layer(*args, key=keys, query_mask=rows))
    bias = cvk.to_stacked(ref.dense_params(layer.output_dense)[1])
    np.testing.assert_allclose(masked[1, 1::2], np.tile(bias, (3, 1)), 1e-6)


@pytest.mark.parametrize(
    "softmax, product",
    [(s, "inner") for s in att.SOFTMAX_VARIANTS] + [("absonly", "bilinear")],
)
def test_a_common_phase_turns_the_output(rng, softmax, product):
    """No biases: x -> e^{i phi} x for queries, keys and values turns the
    output by phi (the bilinear product turns the scores by 2 phi, which
    AAtt's modulus does not see)."""
    x = ref.random_complex(rng, (2, 9, 3))
    turn = np.exp(0.9j)
    layer = _layer(softmax, product, use_bias=False, stride=3, global_tokens=1)
    a = layer(_stacked(x), _stacked(x))
    b = layer(_stacked(turn * x), _stacked(turn * x))
    np.testing.assert_allclose(_out(b), turn * _out(a), atol=ATOL)


@pytest.mark.parametrize("softmax", ["real", "naive"])
def test_causal_does_not_look_ahead(rng, softmax):
    """Causal, with strided and global keys: changing the inputs after t
    leaves the outputs up to t unchanged, for every t tried; without
    causality they change."""
    x = ref.random_complex(rng, (1, 12, 3))
    layer = _layer(softmax, window=3, stride=4, global_tokens=2, block_size=4)
    out = to_numpy(layer(_stacked(x), _stacked(x), use_causal_mask=True))
    bidirectional = to_numpy(layer(_stacked(x), _stacked(x)))
    for t in (0, 1, 4, 7, 10):
        changed = x.copy()
        changed[:, t + 1 :] = ref.random_complex(rng, (1, 11 - t, 3))
        again = to_numpy(
            layer(_stacked(changed), _stacked(changed), use_causal_mask=True)
        )
        np.testing.assert_allclose(again[:, : t + 1], out[:, : t + 1], 1e-6)
        other = to_numpy(layer(_stacked(changed), _stacked(changed)))
        assert np.abs(other[:, : t + 1] - bidirectional[:, : t + 1]).max() > 0


def test_the_work_is_sub_quadratic(rng, monkeypatch):
    """At T = 4096 (window 16, stride 64, 4 global tokens), every matmul
    the layer runs (keras.ops.einsum, recorded) is at most the blocks'
    scores `B N blocks block 2 key_set` ([Re A | Im A] of APAtt), and all
    the scores together are under T^2 / 10: no (T, T) tensor."""
    length = 4096
    layer = _layer(
        "abs", num_heads=1, key_dim=1, window=16, stride=64, global_tokens=4
    )
    info = layer.key_set_size(length)
    assert info["block"] == 16 and info["span"] == 16 + 30
    assert info["strided"] == 64 and info["global"] == 4
    assert info["key_set"] == 46 + 64 + 4
    assert info["scores"] == length * 114 + 4 * length < length**2 // 10
    largest = []
    einsum = keras.ops.einsum

    def recording(equation, *operands):
        result = einsum(equation, *operands)
        largest.append(int(np.prod(result.shape)))
        return result

    monkeypatch.setattr(keras.ops, "einsum", recording)
    x = _stacked(ref.random_complex(rng, (1, length, 1))).astype("float32")
    out = layer(x, x)
    assert np.all(np.isfinite(to_numpy(out)))
    assert max(largest) == length * 2 * info["key_set"], max(largest)
    causal = layer.key_set_size(length, causal=True)
    assert causal["span"] == 16 + 15 and causal["global_rows"] == 0


# ----------------------------------------------------------------------
# Keras: config, files, precision, XLA, symbolic shapes.
# ----------------------------------------------------------------------


def test_config_round_trip(rng):
    layer = _layer(
        "naive",
        "bilinear",
        window=3,
        stride=5,
        global_tokens=2,
        block_size=8,
        value_dim=4,
        dropout=0.1,
        output_dim=3,
        scale=0.3,
        kernel_regularizer="l2",
        seed=5,
        name="sparse",
    )
    config = layer.get_config()
    clone = ComplexSparseAttention.from_config(config)
    assert clone.get_config() == config
    assert (config["window"], config["stride"]) == (3, 5)
    assert (config["global_tokens"], config["block_size"]) == (2, 8)
    x = _stacked(ref.random_complex(rng, (1, 6, 2)))
    layer(x, x)
    clone(x, x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_numpy(clone(x, x)), to_numpy(layer(x, x)))


@pytest.mark.slow
def test_saved_model_loads_with_safe_mode(rng, tmp_path):
    inputs = keras.Input((9, 6))
    x = keras.layers.Masking()(cvk.layers.ComplexDense(3)(inputs))
    x = _layer("abs", "bilinear", stride=3, global_tokens=1, dropout=0.1)(
        x, x, use_causal_mask=True
    )
    model = keras.Model(inputs, x)
    data = _stacked(ref.random_complex(rng, (2, 9, 3))).astype("float32")
    data[1, 6:] = 0  # padding
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded.layers[-1], ComplexSparseAttention)
    np.testing.assert_array_equal(to_numpy(loaded(data)), to_numpy(model(data)))


def test_mixed_float16_scores_in_float32(rng):
    """Under mixed_float16 the output is float16, the variables float32,
    and the scores float32: inputs at 300 give scores past float16's
    65504, and the output stays finite and close to the float32 layer's."""
    z = ref.random_complex(rng, (2, 9, 4), scale=300.0)
    x = _stacked(z)
    full = _layer("abs", use_bias=False, stride=3, global_tokens=1)
    expected = to_numpy(full(x, x))
    mixed = _layer(
        "abs", use_bias=False, stride=3, global_tokens=1, dtype="mixed_float16"
    )
    mixed.build(x.shape, x.shape)
    mixed.set_weights(full.get_weights())
    out = mixed(x, x)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert all(w.dtype == "float32" for w in mixed.weights)
    params = ref.attention_params(full.attention)
    q = ref.dense(z, *params["query"]).reshape(2, 9, 2, 3)
    scores = 3**-0.5 * np.einsum("btnh,bsnh->bnts", q, np.conj(q))
    assert np.max(np.abs(scores)) > 65504  # past float16's range
    out = to_numpy(out).astype("float32")
    assert np.all(np.isfinite(out))
    peak = np.max(np.abs(expected))
    np.testing.assert_allclose(out, expected, atol=2e-2 * peak)


@pytest.mark.slow
def test_xla_equals_eager(rng):
    x = _stacked(ref.random_complex(rng, (2, 10, 3)))
    keep = rng.random((2, 10)) > 0.3
    layers = [
        _layer("real", stride=3, global_tokens=1),
        _layer("abs", "cp", window=3, block_size=4),
    ]
    for layer in layers:
        layer(x, x)

    def run(x, keep):
        return [
            layers[0](x, x, value_mask=keep),
            layers[1](x, x, value_mask=keep, use_causal_mask=True),
        ]

    xla = compiled(run)
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    for got, want in zip(xla(x, keep), run(x, keep)):
        np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-6)


def test_symbolic_shapes(rng):
    layer = _layer(output_dim=5, stride=2)
    assert layer.compute_output_shape((2, 9, 6), (2, 7, 4)) == (2, 9, 10)
    query, memory = keras.Input((None, 6)), keras.Input((None, 4))
    out = layer(query, memory)
    assert tuple(out.shape) == (None, None, 10)
    model = keras.Model([query, memory], out)
    x, m = (
        ref.random_complex(rng, (2, 3, 3)),
        ref.random_complex(rng, (2, 5, 2)),
    )
    got = model([_stacked(x), _stacked(m)])
    expected = _reference(layer, x, m, mask=_pattern(3, 5, 2, 2, 0, False))
    np.testing.assert_allclose(_out(got), expected, atol=ATOL)


# ----------------------------------------------------------------------
# The edges: degenerate input, bad arguments.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_zeros_and_fully_masked_keys_are_finite(rng, softmax):
    """Zero inputs (no biases: zero scores, the modulus at 0) and a sample
    whose keys are all padded: finite outputs and gradients; the padded
    sample's output is 0."""
    x = _stacked(ref.random_complex(rng, (2, 6, 3))).astype("float32")
    x[0] = 0
    keep = np.ones((2, 6), bool)
    keep[1] = False
    layer = _layer(softmax, use_bias=False, stride=2, global_tokens=1)

    def loss(x):
        out = layer(x, x, value_mask=keep)
        return keras.ops.sum(out**2) + keras.ops.sum(layer(x * 0, x * 0))

    out = to_numpy(layer(x, x, value_mask=keep))
    assert np.all(np.isfinite(out)) and np.all(out[1] == 0)
    value, (grad_x,), grad_vars = gradients(
        loss, [x], layer.trainable_variables
    )
    assert np.isfinite(value)
    for grad in [grad_x] + grad_vars:
        assert np.all(np.isfinite(grad))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(window=0), "window=0"),
        (dict(window=None), "window=None"),
        (dict(window=2.5), "window=2.5"),
        (dict(stride=0), "stride=0"),
        (dict(stride=-3), "stride=-3"),
        (dict(global_tokens=-1), "global_tokens=-1"),
        (dict(global_tokens=1.5), "global_tokens=1.5"),
        (dict(block_size=0), "block_size=0"),
        (dict(num_heads=0), "num_heads=0"),
        (dict(softmax="soft"), "softmax='soft'"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        _layer(**kwargs)


@pytest.mark.parametrize(
    "shapes, kwargs, match",
    [
        (((2, 4, 6), (2, 5, 6)), dict(attention_mask=(2, 4, 5)), "(B, T, S)"),
        (((2, 4, 6), (2, 5, 6)), dict(attention_mask=(4, 5)), "(T, S)"),
        (((2, 4, 6), (2, 5, 6)), dict(attention_mask=(2, 2, 1, 5)), "N, T"),
        (((2, 4, 6), (2, 5, 6)), dict(attention_mask=(2, 1, 3)), "mask.shape"),
        (((2, 4, 6), (2, 5, 6)), dict(value_mask=(2, 4)), "value_mask"),
        (((2, 4, 6), (2, 5, 6)), dict(query_mask=(2, 5)), "query_mask"),
        (
            ((2, 4, 6), (2, 5, 6)),
            dict(return_attention_scores=True),
            "return_attention_scores=True",
        ),
        (((2, 4, 6), (2, 5, 6)), dict(use_causal_mask=1), "use_causal_mask"),
        (((2, 4, 5), (2, 5, 6)), {}, "query_shape"),
        (((2, 4, 6), (2, 5, 8)), {}, "built for complex feature sizes"),
    ],
)
def test_bad_call_arguments(shapes, kwargs, match):
    layer = _layer()
    layer.build((2, 4, 6), (2, 5, 6))
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
# TFLite: builtin ops only, float32 and full_int8; ONNX.
# ----------------------------------------------------------------------


def _export_model():
    """A dense stem, then causal self-attention over 12 frames (window 3,
    stride 4, 1 global token, blocks of 4), padded by a bool input."""
    frames = keras.Input((12, 8), name="frames")
    keep = keras.Input((1, 12), dtype="bool", name="keep")
    x = cvk.layers.ComplexDense(4, name="dense_in")(frames)
    x = ComplexSparseAttention(
        2, 3, window=3, stride=4, global_tokens=1, block_size=4
    )(x, x, attention_mask=keep, use_causal_mask=True)
    return keras.Model([frames, keep], x)


def _export_data(rng, count):
    keep = np.ones((count, 1, 12), bool)
    keep[::2, :, 9:] = False
    return [
        _stacked(ref.random_complex(rng, (count, 12, 4))).astype("float32"),
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
    assert report.max_rel_error <= 0.1, report


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_onnx_matches_keras(rng, tmp_path):
    """export_onnx checks that the file holds standard ONNX only (default
    domain, no complex type); on ONNX Runtime it matches Keras."""
    pytest.importorskip("onnxruntime", reason="needs cvattn_keras[onnx]")
    pytest.importorskip("tf2onnx", reason="needs cvattn_keras[onnx]")
    keras.utils.set_random_seed(3)
    model = _export_model()
    path = cvk.export.export_onnx(model, str(tmp_path / "m.onnx"))
    report = cvk.export.verify_onnx(path, model, _export_data(rng, 3))
    assert "Gather" in report.ops, report
    assert report.max_abs_error <= 1e-5, report
