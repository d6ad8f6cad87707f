"""Tests of ComplexLSHAttention (Reformer, complex) against a NumPy
complex128 reference written here from its definition, not from the
layer's block algorithm: per head, queries q = x W + b, keys k = q / |q|,
in each round r the bucket argmax_j |<k, R_rj>|; query t's keys in round r
are the other tokens of its bucket whose place among the bucket's tokens
(by position) is less than chunk_length from its own (before it, if
causal); the layer is attention over the union of the rounds' keys (t
alone when the union is empty), padded tokens in no bucket.

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
from cvattn_keras.layers import ComplexLSHAttention

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
    """The weights of one variant for complex scores `a` (one row)."""
    if softmax == "real":
        return _softmax(a.real) + 0j
    if softmax == "absonly":
        return _softmax(np.abs(a)) + 0j
    if softmax == "abs":
        m = np.abs(a)
        return _softmax(m) * np.where(m > 0, a / np.where(m > 0, m, 1), 0)
    return _softmax(a.real) + 1j * _softmax(a.imag)  # naive


def _complex(weight):
    return to_numpy(weight).astype("float64")


def _dense(dense):
    w = _complex(dense.kernel_real) + 1j * _complex(dense.kernel_imag)
    if not dense.use_bias:
        return w, 0
    return w, _complex(dense.bias_real) + 1j * _complex(dense.bias_imag)


def _heads(layer, query, value):
    """`q`, `k`, `v` per head `(B, N, T, h)` (complex128)."""
    n = layer.num_heads

    def project(x, dense):
        w, b = _dense(dense)
        y = x @ w + b
        return y.reshape(y.shape[:2] + (n, -1)).transpose(0, 2, 1, 3)

    q = project(query, layer.query_dense)
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    k = q / np.where(norm > 0, norm, 1)
    return q, k, project(value, layer.value_dense)


def _np_buckets(layer, k):
    """`(B, N, T, R)`: argmax_j |<k, R_j>| per round."""
    rot = _complex(layer.rotations_real) + 1j * _complex(
        layer.rotations_imag
    )  # (N, h, R n)
    z = np.abs(np.einsum("bnth,nhj->bntj", k, rot))
    z = z.reshape(z.shape[:3] + (layer.num_hashes, layer.num_buckets))
    return z.argmax(-1)


def _union(buckets, valid, t, chunk, causal):
    """Query t's keys: the union over rounds of its bucket's tokens within
    `chunk` places of it (before it if causal), t left out."""
    keys = set()
    for r in range(buckets.shape[-1]):
        members = [
            s
            for s in range(len(valid))
            if valid[s] and buckets[s, r] == (buckets[t, r])
        ]
        place = members.index(t)
        for s in members[max(0, place - chunk + 1) : place + chunk]:
            if s != t and (not causal or s < t):
                keys.add(s)
    return sorted(keys)


def _np_lsh(layer, query, value, causal=False, padding=None):
    """The reference layer output `(B, T, E_out)`, complex."""
    q, k, v = _heads(layer, query, value)
    buckets = _np_buckets(layer, k)
    batch, heads, length, _ = q.shape
    valid = np.ones((batch, length), bool) if padding is None else padding
    out = np.zeros(v.shape, complex)
    for b in range(batch):
        for n in range(heads):
            for t in range(length):
                if not valid[b, t]:
                    continue
                keys = _union(
                    buckets[b, n], valid[b], t, layer.chunk_length, causal
                ) or [t]
                a = layer.scale * (np.conj(k[b, n, keys]) @ q[b, n, t])
                w = _weights(a, layer.softmax)
                out[b, n, t] = w @ v[b, n, keys]
    merged = out.transpose(0, 2, 1, 3).reshape(batch, length, -1)
    w, bias = _dense(layer.output_dense)
    return merged @ w + bias


def _np_full(layer, query, value, causal=False):
    """num_buckets=1: full shared-QK attention, own key masked (alone for
    the first causal query)."""
    q, k, v = _heads(layer, query, value)
    a = layer.scale * np.einsum("bnth,bnsh->bnts", q, np.conj(k))
    length = q.shape[2]
    allowed = ~np.eye(length, dtype=bool)
    if causal:
        allowed &= np.tri(length, dtype=bool)
    allowed[0, 0] = not allowed[0].any()
    out = np.zeros(v.shape, complex)
    for t in range(length):
        w = _weights(a[:, :, t][..., allowed[t]], layer.softmax)
        out[:, :, t] = np.einsum("bns,bnsh->bnh", w, v[:, :, allowed[t]])
    merged = out.transpose(0, 2, 1, 3).reshape(q.shape[0], length, -1)
    w, bias = _dense(layer.output_dense)
    return merged @ w + bias


def _layer(softmax="real", **kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 3)
    kwargs.setdefault("num_buckets", 3)
    kwargs.setdefault("num_hashes", 2)
    kwargs.setdefault("chunk_length", 3)
    kwargs.setdefault("bias_initializer", "random_normal")
    kwargs.setdefault("seed", 7)
    return ComplexLSHAttention(softmax=softmax, **kwargs)


def _stacked(z):
    return cvk.to_stacked(z)


# ----------------------------------------------------------------------
# Exact where it says it is.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_one_bucket_is_full_attention(rng, softmax, causal):
    """num_buckets=1, num_hashes=1, a chunk covering the sequence: full
    shared-QK attention (own key masked), value_dim and output_dim of
    their own."""
    x, m = _random(rng, (2, 6, 3)), _random(rng, (2, 6, 2))
    layer = _layer(
        softmax,
        num_buckets=1,
        num_hashes=1,
        chunk_length=64,
        value_dim=2,
        output_dim=4,
    )
    out = layer(_stacked(x), _stacked(m), use_causal_mask=causal)
    expected = _np_full(layer, x, m, causal)
    np.testing.assert_allclose(cvk.from_stacked(out), expected, atol=ATOL)


@pytest.mark.parametrize(
    "softmax, causal, kwargs",
    [
        ("real", False, {}),
        ("real", True, dict(num_buckets=4, num_hashes=3, chunk_length=2)),
        ("abs", False, {}),
        ("abs", True, {}),
        ("absonly", True, {}),
        ("naive", False, {}),
        ("naive", True, dict(num_buckets=5, num_hashes=1, chunk_length=2)),
    ],
)
def test_matches_the_numpy_lsh(rng, softmax, causal, kwargs):
    """Several buckets and rounds, 11 tokens (no multiple of the chunk),
    key padding (middle and trailing): the union attention of the
    reference, padded rows zero."""
    x, m = _random(rng, (2, 11, 3)), _random(rng, (2, 11, 3))
    keep = np.ones((2, 11), bool)
    keep[0, 8:] = False
    keep[1, 3] = False
    layer = _layer(softmax, **kwargs)
    out = layer(
        _stacked(x), _stacked(m), value_mask=keep, use_causal_mask=causal
    )
    expected = _np_lsh(layer, x, m, causal, keep)
    expected[~keep] = 0  # padded tokens: no key, and the query mask's 0
    got = cvk.from_stacked(out) * keep[..., None]
    np.testing.assert_allclose(got, expected, atol=ATOL)


def test_key_padding_forms_agree(rng):
    """value_mask, a (B, 1, S) and a (B, 1, 1, S) attention_mask and a
    Keras mask give the same outputs on real tokens, and trailing padding
    those of the sequence without it."""
    x = _random(rng, (2, 11, 3))
    keep = np.ones((2, 11), bool)
    keep[0, 6:] = False
    layer = _layer("abs")
    out = to_numpy(layer(_stacked(x), _stacked(x), value_mask=keep))
    for mask in (keep[:, None], keep[:, None, None]):
        again = layer(_stacked(x), _stacked(x), attention_mask=mask)
        np.testing.assert_allclose(to_numpy(again)[keep], out[keep], atol=1e-6)
    masked = keras.layers.Masking()(_stacked(x * keep[..., None]))
    again = to_numpy(layer(masked, masked))  # query_mask and value_mask
    np.testing.assert_allclose(again[keep], out[keep], atol=1e-6)
    assert np.all(again[~keep] == 0)
    short = layer(_stacked(x[:1, :6]), _stacked(x[:1, :6]))
    np.testing.assert_allclose(to_numpy(short)[0], out[0, :6], atol=1e-6)


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_a_common_phase_turns_the_output(rng, softmax):
    """No biases: x -> e^{i phi} x leaves every bucket and weight as it
    was and turns the output by phi; the Reformer's hash of the stacked
    vectors, argmax [xR, -xR], moves buckets under the same turn."""
    x = _random(rng, (2, 11, 3))
    turn = np.exp(0.9j)
    layer = _layer(softmax, use_bias=False)
    a = layer(_stacked(x), _stacked(x))
    b = layer(_stacked(turn * x), _stacked(turn * x))
    np.testing.assert_allclose(
        cvk.from_stacked(b), turn * cvk.from_stacked(a), atol=ATOL
    )
    _, k, _ = _heads(layer, x, x)
    _, k_turned, _ = _heads(layer, turn * x, turn * x)
    np.testing.assert_array_equal(
        _np_buckets(layer, k), _np_buckets(layer, k_turned)
    )
    stacked = np.random.default_rng(0).standard_normal((6, 3))

    def reformer(k):
        z = np.concatenate([k.real, k.imag], -1) @ stacked
        return np.concatenate([z, -z], -1).argmax(-1)

    assert np.any(reformer(k) != reformer(k_turned))


def test_causal_outputs_do_not_see_the_future(rng):
    """Outputs at t <= 7 unchanged when the inputs after 7 change, though
    the new tokens land in other buckets, and the Reformer's fixed chunks
    of the sorted sequence would give the queries before 7 other keys."""
    x = _random(rng, (1, 16, 3))
    y = x.copy()
    y[:, 8:] = _random(rng, (1, 8, 3))
    layer = _layer(num_buckets=4, chunk_length=2)
    a = to_numpy(layer(_stacked(x), _stacked(x), use_causal_mask=True))
    b = to_numpy(layer(_stacked(y), _stacked(y), use_causal_mask=True))
    np.testing.assert_allclose(b[:, :8], a[:, :8], atol=1e-6)
    assert np.max(np.abs(b[:, 8:] - a[:, 8:])) > 1e-2
    bx = _np_buckets(layer, _heads(layer, x, x)[1])[0]  # (N, T, R)
    by = _np_buckets(layer, _heads(layer, y, y)[1])[0]
    assert np.any(bx[:, 8:] != by[:, 8:])

    def fixed_chunks(b):  # the Reformer's: the chunk of each token
        chunk = np.empty(16, int)
        chunk[np.lexsort((np.arange(16), b))] = np.arange(16) // 2
        return chunk

    def seen(b, t):  # the earlier keys of t's chunk and the one before
        chunk = fixed_chunks(b)
        return {s for s in range(t) if chunk[t] - chunk[s] in (0, 1)}

    assert any(
        seen(bx[n, :, r], t) != seen(by[n, :, r], t)
        for n in range(2)
        for r in range(2)
        for t in range(8)
    )


def test_rotations_come_from_the_seed():
    """The rotations are NumPy's draws from `seed` (every backend alike),
    each direction of unit norm, non-trainable; another seed draws
    others."""
    layer = _layer(seed=11)
    layer.build((1, 4, 6), (1, 4, 6))
    draws = np.random.default_rng(11).standard_normal((2, 2, 3, 6))
    draws /= np.linalg.norm(draws, axis=(0, 2), keepdims=True)  # unit lines
    np.testing.assert_allclose(
        to_numpy(layer.rotations_real), draws[0], rtol=1e-6
    )
    np.testing.assert_allclose(
        to_numpy(layer.rotations_imag), draws[1], rtol=1e-6
    )
    assert len(layer.trainable_weights) == 12  # 3 kernels, 3 biases
    assert [w.path.split("/")[-1] for w in layer.non_trainable_weights] == [
        "rotations_real",
        "rotations_imag",
    ]
    other = _layer(seed=12)
    other.build((1, 4, 6), (1, 4, 6))
    assert not np.allclose(
        to_numpy(other.rotations_real), to_numpy(layer.rotations_real)
    )


# ----------------------------------------------------------------------
# Keras: config, files, precision, XLA, symbolic shapes.
# ----------------------------------------------------------------------


def test_config_round_trip(rng):
    layer = _layer(
        "naive",
        num_buckets=5,
        value_dim=4,
        dropout=0.1,
        output_dim=3,
        scale=0.3,
        kernel_regularizer="l2",
        seed=5,
        name="reformer",
    )
    config = layer.get_config()
    clone = ComplexLSHAttention.from_config(config)
    assert clone.get_config() == config
    assert (config["num_buckets"], config["num_hashes"]) == (5, 2)
    assert config["chunk_length"] == 3
    x = _stacked(_random(rng, (2, 11, 2)))
    layer(x, x)
    clone(x, x)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(to_numpy(clone(x, x)), to_numpy(layer(x, x)))


@pytest.mark.slow
def test_saved_model_loads_with_safe_mode(rng, tmp_path):
    """The rotations are saved (a load with another global seed gives the
    same outputs)."""
    inputs = keras.Input((None, 4))
    x = keras.layers.Masking()(inputs)
    x = _layer("abs", seed=None)(x, x)
    model = keras.Model(inputs, x)
    data = _stacked(_random(rng, (2, 11, 2))).astype("float32")
    data[1, 5:] = 0  # padding
    path = tmp_path / "model.keras"
    model.save(path)
    keras.utils.set_random_seed(99)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded.layers[-1], ComplexLSHAttention)
    np.testing.assert_array_equal(to_numpy(loaded(data)), to_numpy(model(data)))


def test_mixed_float16_scores_in_float32(rng):
    """Under mixed_float16 the output is float16, the variables float32;
    inputs at 300 give scores (at most scale |q|, the keys being unit
    vectors) whose exponentials are far past float16's 65504, and the
    output stays finite and close to the float32 layer's."""
    x = _stacked(_random(rng, (2, 11, 4), scale=300.0))
    full = _layer("abs", use_bias=False)
    expected = to_numpy(full(x, x))
    mixed = _layer(
        "abs",
        use_bias=False,
        dtype="mixed_float16",
    )
    mixed.build(x.shape, x.shape)
    mixed.set_weights(full.get_weights())
    out = mixed(x, x)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert all(w.dtype == "float32" for w in mixed.weights)
    z = cvk.from_stacked(x, "complex128")
    q, _, _ = _heads(full, z, z)
    assert np.max(full.scale * np.linalg.norm(q, axis=-1)) > np.log(65504)
    out = to_numpy(out).astype("float32")
    assert np.all(np.isfinite(out))
    peak = np.max(np.abs(expected))
    np.testing.assert_allclose(out, expected, atol=2e-2 * peak)


@pytest.mark.slow
def test_xla_equals_eager(rng):
    x = _stacked(_random(rng, (2, 11, 3)))
    keep = rng.random((2, 1, 11)) > 0.3
    layers = [_layer("naive")]  # two planes: every path but APAtt's sign

    def run(x, m):
        return [
            layer(x, x, attention_mask=m, use_causal_mask=causal)
            for layer in layers
            for causal in (False, True)
        ]

    expected = run(x, keep)
    xla = compiled(run)
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    for got, want in zip(xla(x, keep), expected):
        np.testing.assert_allclose(to_numpy(got), to_numpy(want), atol=1e-6)


def test_symbolic_shapes_and_unknown_lengths(rng):
    layer = _layer(output_dim=5)
    assert layer.compute_output_shape((2, 9, 6), (2, 9, 4)) == (2, 9, 10)
    query, memory = keras.Input((None, 6)), keras.Input((None, 4))
    out = layer(query, memory)
    assert tuple(out.shape) == (None, None, 10)
    model = keras.Model([query, memory], out)
    x, m = _random(rng, (2, 5, 3)), _random(rng, (2, 5, 2))
    got = model([_stacked(x), _stacked(m)])
    np.testing.assert_allclose(
        cvk.from_stacked(got), _np_lsh(layer, x, m), atol=ATOL
    )


@pytest.mark.tensorflow_only
def test_lengths_known_only_when_the_graph_runs(rng):
    """A tf.function traced with unknown batch and length (the padding to
    whole blocks computed at run time) gives the eager outputs."""
    import tensorflow as tf

    layer = _layer()
    spec = tf.TensorSpec((None, None, 6), "float32")
    fn = tf.function(
        lambda x: layer(x, x, use_causal_mask=True), input_signature=[spec]
    )
    for shape in ((2, 11, 3), (1, 3, 3)):
        x = _stacked(_random(rng, shape)).astype("float32")
        np.testing.assert_allclose(
            to_numpy(fn(x)),
            to_numpy(layer(x, x, use_causal_mask=True)),
            atol=1e-6,
        )


# ----------------------------------------------------------------------
# The edges: degenerate input, bad arguments, the cost.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_zeros_and_fully_masked_keys_are_finite(rng, softmax):
    """Zero inputs (no biases: zero queries and keys, every bucket 0) and
    a sample whose keys are all padded: finite outputs and gradients."""
    x = _stacked(_random(rng, (2, 11, 3))).astype("float32")
    x[0] = 0
    keep = np.ones((2, 1, 11), bool)
    keep[1] = False
    layer = _layer(softmax, use_bias=False)

    def loss(x):
        out = layer(x, x, attention_mask=keep, use_causal_mask=True)
        return keras.ops.sum(out**2) + keras.ops.sum(layer(x * 0, x * 0))

    out = to_numpy(layer(x, x, attention_mask=keep))
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
        (dict(num_buckets=0), "num_buckets=0"),
        (dict(num_buckets=2.0), "num_buckets=2.0"),
        (dict(num_hashes=0), "num_hashes=0"),
        (dict(num_hashes=True), "num_hashes=True"),
        (dict(chunk_length=0), "chunk_length=0"),
        (dict(chunk_length=-3), "chunk_length=-3"),
        (dict(num_heads=0), "num_heads=0"),
        (dict(softmax="soft"), "softmax='soft'"),
        (dict(product="bilinear"), "product='bilinear'"),
        (dict(dropout=1.0), "dropout=1.0"),
        (dict(seed="a"), "seed='a'"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=re.escape(match)):
        _layer(**kwargs)


@pytest.mark.parametrize(
    "shapes, kwargs, match",
    [
        (((2, 4, 6), (2, 5, 6)), {}, "same batch size and length"),
        (((2, 4, 6), (2, 4, 6)), dict(key=(2, 4, 6)), "key.shape"),
        (
            ((2, 4, 6), (2, 4, 6)),
            dict(return_attention_scores=True),
            "return_attention_scores=True",
        ),
        (((2, 4, 6), (2, 4, 6)), dict(attention_mask=(2, 4, 4)), "(B, T, S)"),
        (((2, 4, 6), (2, 4, 6)), dict(attention_mask=(4, 4)), "(T, S)"),
        (((2, 4, 6), (2, 4, 6)), dict(attention_mask=(2, 1, 3)), "mask.shape"),
        (((2, 4, 6), (2, 4, 6)), dict(value_mask=(2, 5)), "value_mask"),
        (((2, 4, 5), (2, 4, 6)), {}, "query_shape"),
        (((2, 4, 6), (2, 4, 6)), dict(use_causal_mask=1), "use_causal_mask"),
    ],
)
def test_bad_call_arguments(shapes, kwargs, match):
    layer = _layer()
    query, value = (np.zeros(s, "float32") for s in shapes)
    kwargs = {
        k: np.ones(v, bool if "mask" in k else "float32")
        if isinstance(v, tuple)
        else v
        for k, v in kwargs.items()
    }
    with pytest.raises(ValueError, match=re.escape(match)):
        layer(query, value, **kwargs)
    # Refused as well when a functional model is built.
    symbolic = {
        k: keras.Input(v.shape[1:], batch_size=v.shape[0]) if k == "key" else v
        for k, v in kwargs.items()
    }
    with pytest.raises(ValueError, match=re.escape(match)):
        layer(
            keras.Input(shapes[0][1:]), keras.Input(shapes[1][1:]), **symbolic
        )


def test_too_many_buckets_for_int32():
    layer = _layer(num_buckets=2**20)
    x = keras.Input((4096, 6))
    with pytest.raises(ValueError, match=re.escape("num_buckets=1048576")):
        layer(x, x)


@pytest.mark.tensorflow_only
def test_no_tensor_grows_as_t_squared():
    """The traced graph at T = 512, chunk_length 8, two rounds, two heads:
    no tensor holds T^2 / 4 numbers (full attention's scores hold T^2 per
    head; the largest here are the rounds' (2 N T, 2 chunk_length)
    blocks)."""
    import tensorflow as tf

    layer = _layer(num_hashes=2, chunk_length=8, num_buckets=8)
    layer.build((1, 512, 6), (1, 512, 6))
    fn = tf.function(lambda x: layer(x, x, use_causal_mask=True))
    graph = fn.get_concrete_function(
        tf.TensorSpec((1, 512, 6), "float32")
    ).graph
    sizes = [
        t.shape.num_elements() or 0
        for op in graph.get_operations()
        for t in op.outputs
    ]
    assert 0 < max(sizes) < 512 * 512 / 4, max(sizes)


# ----------------------------------------------------------------------
# TFLite: builtin ops only, float32 and full_int8; ONNX.
# ----------------------------------------------------------------------


def _export_model(num_buckets=3):
    """A dense stem, then causal LSH self-attention (CAtt, two rounds,
    T = 12 in blocks of 4), padded by a bool input."""
    frames = keras.Input((12, 8), name="frames")
    keep = keras.Input((1, 12), dtype="bool", name="keep")
    x = cvk.layers.ComplexDense(4, name="dense_in")(frames)
    x = ComplexLSHAttention(
        2, 3, num_buckets=num_buckets, num_hashes=2, chunk_length=4, seed=3
    )(x, x, attention_mask=keep, use_causal_mask=True)
    return keras.Model([frames, keep], x)


def _export_data(rng, count):
    keep = np.ones((count, 1, 12), bool)
    keep[::2, :, 9:] = False
    return [_stacked(_random(rng, (count, 12, 4))).astype("float32"), keep]


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_tflite_float32_and_full_int8(rng, tmp_path):
    """Sorted by TOPK_V2, gathered by GATHER: builtin ops only. The
    full_int8 file has the same ops, all integer; its accuracy is checked
    with one bucket: where int8 rounding moves a token to another bucket,
    it sees other keys (measured when written, three buckets: 0.40 of the
    largest output; one bucket: 0.021)."""
    keras.utils.set_random_seed(3)
    model = _export_model()
    data = _export_data(rng, 32)
    path = cvk.export.export_tflite(model, tmp_path / "f32.tflite")
    report = cvk.export.verify_tflite(path, model, [x[:3] for x in data])
    assert report.builtin_only and report.non_builtin_ops == (), report
    assert "TOPK_V2" in report.ops and "GATHER" in report.ops, report
    peak = np.max(np.abs(to_numpy(model([x[:3] for x in data]))))
    assert report.max_abs_error <= 1e-4 * peak, report
    model = _export_model(num_buckets=1)
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
    assert "TOPK_V2" in report.ops, report
    assert report.max_rel_error <= 0.1, report


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_onnx_matches_keras(rng, tmp_path):
    """Standard ONNX only (TopK, Gather); on ONNX Runtime it matches
    Keras."""
    pytest.importorskip("onnxruntime", reason="needs cvattn_keras[onnx]")
    pytest.importorskip("tf2onnx", reason="needs cvattn_keras[onnx]")
    keras.utils.set_random_seed(3)
    model = _export_model()
    path = cvk.export.export_onnx(model, str(tmp_path / "m.onnx"))
    report = cvk.export.verify_onnx(path, model, _export_data(rng, 3))
    assert "TopK" in report.ops, report
    assert report.max_abs_error <= 1e-5, report
