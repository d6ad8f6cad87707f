"""Tests of the chunked attention (cvattn_keras.chunked_attention): the
same outputs and gradients as the full path and the NumPy complex128
reference, for every variant, product and mask, without the (T, S)
scores."""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import gradients
from backend_utils import has_float64
from backend_utils import to_numpy
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from keras import ops

import cvattn_keras as cvk
from cvattn_keras import attention as att
from cvattn_keras.chunked_attention import chunked_dot_product_attention

VARIANTS = [(s, p) for s in att.SOFTMAX_VARIANTS for p in att.PRODUCTS]
# B, T, S, N, H, V: T and S not multiples of the chunk (4), T != S.
SHAPE = (2, 13, 11, 3, 4, 5)
CHUNK = 4
# float32 against complex128 and against the full path: the online
# softmax rescales the running sums once per block and sums in another
# order, a few float32 roundings (~1e-7) on O(1) values; 1e-5 of the
# output's largest entry is the bound and leaves a 30x margin.
RTOL = 1e-5
# Gradients: differences of products of O(1) numbers, summed over the
# keys; measured below 1e-6 of the largest entry (TF, JAX and torch).
GRAD_RTOL = 1e-5


def _close(actual, expected, rtol, what=""):
    """Max-norm error relative to the expected array's largest entry (an
    entrywise relative bound would fail on entries near 0)."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, what
    scale = max(np.abs(expected).max(), 1e-30)
    error = np.abs(actual - expected).max() / scale
    assert error <= rtol, f"{what}: relative error {error:.2e} > {rtol}"


def _inputs(rng, shape=SHAPE, dtype=np.float32):
    batch, length, keys, heads, head, value = shape

    def complex_(*dims):
        return ref.random_complex(rng, dims)

    qc = complex_(batch, length, heads, head)
    kc = complex_(batch, keys, heads, head)
    vc = complex_(batch, keys, heads, value)
    stacked = [cvk.to_stacked(z, "float64").astype(dtype) for z in (qc, kc, vc)]
    return (qc, kc, vc), stacked


def _padding_mask(rng, batch, length, keys):
    """(B, T, S) random padding with a fully masked query row."""
    mask = rng.random((batch, length, keys)) > 0.35
    mask[0, 2] = False  # a query with nothing to attend
    return mask


def _causal(length, keys):
    return np.tril(np.ones((length, keys), bool))


def _masks(rng, shape=SHAPE):
    """`{name: (mask, is_causal, the equivalent full (B|1, T, S) mask)}`."""
    batch, length, keys = shape[:3]
    padding = _padding_mask(rng, batch, length, keys)
    causal = _causal(length, keys)
    return {
        "none": (None, False, None),
        "padding": (padding, False, padding),
        "causal": (None, True, causal[None]),
        "causal+padding": (padding, True, padding & causal),
    }


def _reference(complex_inputs, softmax, product, mask):
    """The NumPy complex128 output, (B, T, N, V)."""
    qc, kc, vc = (np.transpose(z, (0, 2, 1, 3)) for z in complex_inputs)
    scale = qc.shape[-1] ** -0.5
    if mask is not None:
        mask = np.asarray(mask)[:, None] if np.ndim(mask) == 3 else mask
    out, _ = ref.attention(qc, kc, vc, softmax, product, scale, mask)
    return np.transpose(out, (0, 2, 1, 3))


def _full(q, k, v, softmax, product, mask, **kwargs):
    return att.complex_dot_product_attention(
        q, k, v, softmax, product, mask=mask, **kwargs
    )


@pytest.mark.parametrize("mask_kind", ["none", "padding", "causal+padding"])
@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_matches_reference_and_full_path(rng, softmax, product, mask_kind):
    complex_inputs, (q, k, v) = _inputs(rng)
    mask, causal, full_mask = _masks(rng)[mask_kind]
    out = to_numpy(
        chunked_dot_product_attention(
            q,
            k,
            v,
            softmax,
            product,
            mask=mask,
            is_causal=causal,
            chunk_size=CHUNK,
        )
    )
    expected = _reference(complex_inputs, softmax, product, full_mask)
    _close(cvk.from_stacked(out, "complex128"), expected, RTOL, "reference")
    full = to_numpy(_full(q, k, v, softmax, product, full_mask))
    _close(out, full, RTOL, "full path")
    if mask is not None:
        # The fully masked query row: exactly 0, as in the full path.
        assert np.all(out[0, 2] == 0)


def _loss_weights(rng, shape):
    return rng.standard_normal(shape).astype("float32")


def _gradients(fn, inputs, weights):
    """Gradients of `sum(fn(q, k, v) * weights)` (distinct weights per
    output entry, so that no error cancels)."""

    def loss(q, k, v):
        return ops.sum(
            ops.multiply(fn(q, k, v), ops.convert_to_tensor(weights))
        )

    return gradients(loss, inputs)[1]


@pytest.mark.parametrize("mask_kind", ["none", "causal+padding"])
@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_gradients_match_full_path(rng, softmax, product, mask_kind):
    _, inputs = _inputs(rng)
    mask, causal, full_mask = _masks(rng)[mask_kind]
    batch, length, _, heads, _, value = SHAPE
    weights = _loss_weights(rng, (batch, length, heads, 2 * value))

    def chunked(q, k, v):
        return chunked_dot_product_attention(
            q, k, v, softmax, product, mask=mask, is_causal=causal, chunk_size=3
        )

    def full(q, k, v):
        return _full(q, k, v, softmax, product, full_mask)

    got = _gradients(chunked, inputs, weights)
    want = _gradients(full, inputs, weights)
    for name, g, w in zip("qkv", got, want):
        assert np.all(np.isfinite(g)), name
        _close(g, w, GRAD_RTOL, f"d{name}")
    if mask is not None:
        # Nothing flows through the fully masked query row.
        assert np.all(got[0][0, 2] == 0)


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_float64_matches_reference_and_full_gradients_tightly(
    rng, softmax, product
):
    """In float64 the only differences are roundings of 1e-16: a wrong
    term in the recurrence or in the hand-written backward shows up
    many orders of magnitude above the 1e-10 used here."""
    if not has_float64():
        pytest.skip("the backend computes in float32 (JAX without x64)")
    complex_inputs, inputs = _inputs(rng, dtype=np.float64)
    mask, causal, full_mask = _masks(rng)["causal+padding"]
    # A float64 tensor: the full path casts a Python scale, which PyTorch
    # rounds through float32 (a 1e-8 difference).
    scale = ops.convert_to_tensor(SHAPE[4] ** -0.5, "float64")
    out = chunked_dot_product_attention(
        *inputs, softmax, product, mask=mask, is_causal=causal, chunk_size=5
    )
    assert backend_dtype(out) == "float64"
    expected = _reference(complex_inputs, softmax, product, full_mask)
    _close(cvk.from_stacked(to_numpy(out), "complex128"), expected, 1e-12)
    batch, length, _, heads, _, value = SHAPE
    weights = rng.standard_normal((batch, length, heads, 2 * value))

    def chunked(q, k, v):
        return chunked_dot_product_attention(
            q,
            k,
            v,
            softmax,
            product,
            scale=scale,
            mask=mask,
            is_causal=causal,
            chunk_size=5,
        )

    def full(q, k, v):
        return _full(q, k, v, softmax, product, full_mask, scale=scale)

    got = _gradients(chunked, inputs, weights)

    # Independent of the library: the derivative along random directions
    # by central differences of the NumPy complex128 loss. Step 1e-6: the
    # truncation error, step^2 times a third derivative that sgn(A) makes
    # large near small scores, measured 3e-7 at step 1e-5 and 3e-9 at
    # 1e-6; the rounding, ~1e-16 / step of the loss, stays below 1e-9.
    def numpy_loss(q, k, v):
        complex_ = [_np_complex(x) for x in (q, k, v)]
        out = _reference(complex_, softmax, product, full_mask)
        return np.sum(np.concatenate([out.real, out.imag], -1) * weights)

    for _ in range(2):
        direction = [rng.standard_normal(x.shape) for x in inputs]
        step = 1e-6
        plus = numpy_loss(*[x + step * d for x, d in zip(inputs, direction)])
        minus = numpy_loss(*[x - step * d for x, d in zip(inputs, direction)])
        numeric = (plus - minus) / (2 * step)
        analytic = sum(np.sum(g * d) for g, d in zip(got, direction))
        assert abs(analytic - numeric) <= 1e-7 * abs(numeric), (
            analytic,
            numeric,
        )
    if keras.backend.backend() == "torch":
        return  # the full path rounds through float32 there (~1e-7)
    want = _gradients(full, inputs, weights)
    for name, g, w in zip("qkv", got, want):
        _close(g, w, 1e-10, f"d{name}")


def _np_complex(x):
    """Stacked float64 NumPy -> complex128, in NumPy only."""
    half = x.shape[-1] // 2
    return x[..., :half] + 1j * x[..., half:]


def backend_dtype(x):
    return keras.backend.standardize_dtype(x.dtype)


@pytest.mark.parametrize("chunk_size", [1, 4, 11, 64])
@pytest.mark.parametrize("mask_kind", ["causal", "causal+padding"])
def test_any_chunk_size_gives_the_same_output(rng, chunk_size, mask_kind):
    """One key per block, a chunk that does not divide S (overlapping last
    block), one equal to S and one larger than S (one block)."""
    complex_inputs, (q, k, v) = _inputs(rng)
    mask, causal, full_mask = _masks(rng)[mask_kind]
    out = chunked_dot_product_attention(
        q, k, v, "abs", mask=mask, is_causal=causal, chunk_size=chunk_size
    )
    expected = _reference(complex_inputs, "abs", "inner", full_mask)
    _close(cvk.from_stacked(to_numpy(out), "complex128"), expected, RTOL)


@pytest.mark.parametrize("rank", [2, 4])
def test_masks_of_rank_2_and_4(rng, rank):
    complex_inputs, (q, k, v) = _inputs(rng)
    batch, length, keys, heads = SHAPE[:4]
    mask = rng.random((batch, heads, length, keys)) > 0.4
    if rank == 2:
        mask = mask[0, 0]
    out = chunked_dot_product_attention(q, k, v, "naive", mask=mask)
    full = _full(q, k, v, "naive", "inner", mask)
    _close(to_numpy(out), to_numpy(full), RTOL)
    expected = _reference(complex_inputs, "naive", "inner", mask)
    _close(cvk.from_stacked(to_numpy(out), "complex128"), expected, RTOL)


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
@pytest.mark.parametrize("kind", ["zeros", "constant"])
def test_degenerate_inputs_give_finite_outputs_and_gradients(
    rng, softmax, kind
):
    """All-zero inputs (scores 0: sgn(0) = 0, the modulus at 0) and
    identical tokens (every score equal), against the full path."""
    batch, length, keys, heads, head, value = SHAPE
    if kind == "zeros":
        inputs = [
            np.zeros((batch, n, heads, 2 * w), np.float32)
            for n, w in ((length, head), (keys, head), (keys, value))
        ]
    else:
        token = rng.standard_normal((1, 1, heads, 2 * head)).astype("float32")
        inputs = [
            np.broadcast_to(token, (batch, length, heads, 2 * head)).copy(),
            np.broadcast_to(token, (batch, keys, heads, 2 * head)).copy(),
            np.broadcast_to(token[..., :1], (batch, keys, heads, 2 * value))
            .copy()
            .astype("float32"),
        ]
    weights = _loss_weights(rng, (batch, length, heads, 2 * value))

    def chunked(q, k, v):
        return chunked_dot_product_attention(q, k, v, softmax, chunk_size=4)

    def full(q, k, v):
        return _full(q, k, v, softmax, "inner", None)

    out = to_numpy(chunked(*[ops.convert_to_tensor(x) for x in inputs]))
    assert np.all(np.isfinite(out))
    _close(out, to_numpy(full(*inputs)), RTOL)
    got = _gradients(chunked, inputs, weights)
    want = _gradients(full, inputs, weights)
    for name, g, w in zip("qkv", got, want):
        assert np.all(np.isfinite(g)), name
        # As GRAD_RTOL, relative to the largest entry (at least 1: the
        # gradients of zero inputs are 0 up to rounding).
        np.testing.assert_allclose(g, w, atol=1e-5 * max(1, np.abs(w).max()))


@pytest.mark.slow  # about 10 s on JAX (compiled gradients)
def test_fully_masked_everything_gives_zeros_and_zero_gradients(rng):
    _, inputs = _inputs(rng)
    batch, length, keys = SHAPE[:3]
    mask = np.zeros((batch, length, keys), bool)
    weights = _loss_weights(rng, (batch, length, SHAPE[3], 2 * SHAPE[5]))
    for softmax in att.SOFTMAX_VARIANTS:

        def chunked(q, k, v, softmax=softmax):
            return chunked_dot_product_attention(
                q, k, v, softmax, mask=mask, chunk_size=4
            )

        assert np.all(to_numpy(chunked(*inputs)) == 0)
        for g in _gradients(chunked, inputs, weights):
            assert np.all(g == 0), softmax


@pytest.mark.parametrize("chunk_size", [0, -3, 2.5, True, "8", None])
def test_bad_chunk_size_is_rejected_by_name(rng, chunk_size):
    _, (q, k, v) = _inputs(rng)
    with pytest.raises(ValueError, match="chunk_size") as info:
        chunked_dot_product_attention(q, k, v, chunk_size=chunk_size)
    assert repr(chunk_size) in str(info.value)


def test_bad_arguments_are_rejected_by_name(rng):
    _, (q, k, v) = _inputs(rng)
    with pytest.raises(ValueError, match="mask"):
        chunked_dot_product_attention(q, k, v, mask=np.ones((2, 13, 4), bool))
    with pytest.raises(ValueError, match="scale"):
        chunked_dot_product_attention(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match="is_causal"):
        chunked_dot_product_attention(q, k, v, is_causal="yes")
    with pytest.raises(ValueError, match="softmax"):
        chunked_dot_product_attention(q, k, v, softmax="nope")
    with pytest.raises(ValueError, match="product"):
        chunked_dot_product_attention(q, k, v, product="outer")
    with pytest.raises(ValueError, match="same head width"):
        chunked_dot_product_attention(q, v, v)


def test_half_precision_inputs_compute_in_float32(rng):
    complex_inputs, inputs = _inputs(rng)
    half = [ops.cast(x, "float16") for x in inputs]
    out = chunked_dot_product_attention(*half, "abs", chunk_size=4)
    assert backend_dtype(out) == "float16"
    expected = _reference(
        [cvk.from_stacked(to_numpy(x), "complex128") for x in half],
        "abs",
        "inner",
        None,
    )
    # float16 output: its rounding, 2**-11 relative.
    _close(cvk.from_stacked(to_numpy(out), "complex128"), expected, 1e-3)


def test_compiled_matches_eager(rng):
    from backend_utils import compiled

    _, (q, k, v) = _inputs(rng)
    mask, _, _ = _masks(rng)["padding"]
    mask = ops.convert_to_tensor(mask)

    def fn(q, k, v, mask):
        return chunked_dot_product_attention(
            q, k, v, "naive", "bilinear", mask=mask, is_causal=True
        )

    jitted = compiled(fn)
    if jitted is None:
        pytest.skip("no compiler for this backend here")
    _close(to_numpy(jitted(q, k, v, mask)), to_numpy(fn(q, k, v, mask)), 1e-6)


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_xla_gradients_match_full_path(rng):
    """The custom gradient and its while loop under XLA (the benchmark's
    and `fit(jit_compile=True)`'s setting)."""
    import tensorflow as tf

    _, inputs = _inputs(rng)
    mask, _, full_mask = _masks(rng)["padding"]
    weights = tf.constant(_loss_weights(rng, (2, 13, 3, 10)))

    def grads_of(fn):
        @tf.function(jit_compile=True)
        def step(q, k, v):
            with tf.GradientTape() as tape:
                tape.watch([q, k, v])
                loss = tf.reduce_sum(fn(q, k, v) * weights)
            return tape.gradient(loss, [q, k, v])

        return [g.numpy() for g in step(*map(tf.constant, inputs))]

    for softmax in ("abs", "naive"):  # the hand-written complex backward
        got = grads_of(
            lambda q, k, v, s=softmax: chunked_dot_product_attention(
                q, k, v, s, mask=mask, chunk_size=4
            )
        )
        want = grads_of(
            lambda q, k, v, s=softmax: _full(q, k, v, s, "inner", full_mask)
        )
        for g, w in zip(got, want):
            _close(g, w, GRAD_RTOL, softmax)


@pytest.mark.slow  # about 20 s on JAX (one compilation per shape)
@settings(derandomize=True, max_examples=10, deadline=None)
@given(
    softmax=st.sampled_from(att.SOFTMAX_VARIANTS),
    product=st.sampled_from(att.PRODUCTS),
    length=st.integers(1, 9),
    keys=st.integers(1, 9),
    chunk=st.integers(1, 10),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_property_matches_reference(
    softmax, product, length, keys, chunk, causal, seed
):
    rng = np.random.default_rng(seed)
    shape = (1, length, keys, 2, 3, 2)
    complex_inputs, (q, k, v) = _inputs(rng, shape)
    mask = rng.random((1, length, keys)) > 0.3
    out = chunked_dot_product_attention(
        q, k, v, softmax, product, mask=mask, is_causal=causal, chunk_size=chunk
    )
    full_mask = mask & _causal(length, keys) if causal else mask
    expected = _reference(complex_inputs, softmax, product, full_mask)
    _close(cvk.from_stacked(to_numpy(out), "complex128"), expected, RTOL)


# ----------------------------------------------------------------------
# Wired in: complex_dot_product_attention(chunk_size=) and the layer.
# ----------------------------------------------------------------------


def _record_chunked_calls(monkeypatch, *names):
    """Wraps `chunked_dot_product_attention` so that each call appends
    the keyword arguments `names` (a tuple, or the value for one name) to
    the returned list."""
    from cvattn_keras import chunked_attention

    calls = []
    original = chunked_attention.chunked_dot_product_attention

    def recording(*args, **kwargs):
        values = tuple(kwargs.get(name) for name in names)
        calls.append(values[0] if len(values) == 1 else values)
        return original(*args, **kwargs)

    monkeypatch.setattr(
        chunked_attention, "chunked_dot_product_attention", recording
    )
    return calls


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_layer_with_chunk_size_equals_the_full_layer(rng, softmax, product):
    """ComplexMultiHeadAttention(chunk_size=4) on 11 keys (three blocks)
    with a causal mask and a padding mask: the outputs and the gradients
    (inputs and every weight) of the same layer without chunks."""
    x = cvk.to_stacked(ref.random_complex(rng, (2, 11, 6))).astype("float32")
    padding = rng.random((2, 11, 11)) > 0.3
    padding[0, 3] = False  # a query with nothing to attend
    kwargs = dict(softmax=softmax, product=product, value_dim=3)
    full = cvk.layers.ComplexMultiHeadAttention(2, 4, **kwargs)
    chunked = cvk.layers.ComplexMultiHeadAttention(2, 4, chunk_size=4, **kwargs)
    full(x, x)
    chunked(x, x)
    chunked.set_weights(full.get_weights())
    weights = _loss_weights(rng, (2, 11, 12))
    results = []
    for layer in (full, chunked):

        def loss(inputs, layer=layer):
            out = layer(
                inputs,
                inputs,
                attention_mask=ops.convert_to_tensor(padding),
                use_causal_mask=True,
            )
            return ops.sum(out * ops.convert_to_tensor(weights))

        results.append(gradients(loss, [x], layer.trainable_variables))
    (loss_full, dx_full, dw_full), (loss_chunk, dx_chunk, dw_chunk) = results
    _close(loss_chunk, loss_full, RTOL, "loss")
    _close(dx_chunk[0], dx_full[0], GRAD_RTOL, "d input")
    # Relative to the largest weight gradient: some are 0 up to rounding
    # (the key bias under CAtt and RIAtt shifts a row's logits by a
    # constant, which the softmax ignores), so their own scale is noise.
    scale = max(np.abs(g).max() for g in dw_full)
    for a, b, var in zip(dw_chunk, dw_full, full.trainable_variables):
        error = np.abs(np.asarray(a) - np.asarray(b)).max() / scale
        assert error <= GRAD_RTOL, (var.path, error)


def test_chunk_size_keeps_the_full_path_where_it_must(rng):
    """Attention scores, a key length within one chunk and portable masking
    (export) take the full path: the same numbers; the returned scores are
    the full (B, N, T, 2S) weights."""
    x = cvk.to_stacked(ref.random_complex(rng, (1, 6, 4))).astype("float32")
    layer = cvk.layers.ComplexMultiHeadAttention(2, 2, chunk_size=2)
    out, scores = layer(x, x, return_attention_scores=True)
    assert tuple(scores.shape) == (1, 2, 6, 12)
    _close(to_numpy(layer(x, x)), to_numpy(out), RTOL, "chunked vs scores")
    wide = cvk.layers.ComplexMultiHeadAttention(2, 2, chunk_size=64)
    wide(x, x)
    wide.set_weights(layer.get_weights())
    _close(to_numpy(wide(x, x)), to_numpy(out), RTOL, "one chunk")
    with att.portable_masking():
        _close(to_numpy(layer(x, x)), to_numpy(out), RTOL, "portable")


def test_chunk_size_is_serialized_and_checked():
    layer = cvk.layers.ComplexMultiHeadAttention(2, 4, chunk_size=256)
    config = layer.get_config()
    assert config["chunk_size"] == 256
    again = cvk.layers.ComplexMultiHeadAttention.from_config(config)
    assert again.chunk_size == 256
    for bad in (0, -3, 2.5, "64", True):
        with pytest.raises(ValueError, match="chunk_size"):
            cvk.layers.ComplexMultiHeadAttention(2, 4, chunk_size=bad)
    q = ops.ones((1, 5, 2, 4))
    with pytest.raises(ValueError, match="chunk_size=0"):
        att.complex_dot_product_attention(q, q, q, chunk_size=0)


def test_chunk_size_takes_the_chunked_path_only_where_it_may(rng, monkeypatch):
    """Which path runs, counted: the chunked one for keys longer than the
    chunk; the full one for the scores, dropout in training, export
    (portable masking) and keys within one chunk."""
    calls = _record_chunked_calls(monkeypatch, "chunk_size")
    x = cvk.to_stacked(ref.random_complex(rng, (1, 6, 4))).astype("float32")
    layer = cvk.layers.ComplexMultiHeadAttention(2, 2, chunk_size=2)
    layer(x, x)
    assert calls == [2]
    layer(x, x, return_attention_scores=True)
    with att.portable_masking():
        layer(x, x)
    wide = cvk.layers.ComplexMultiHeadAttention(2, 2, chunk_size=6)
    wide(x, x)
    dropping = cvk.layers.ComplexMultiHeadAttention(
        2, 2, chunk_size=2, dropout=0.5, seed=1
    )
    dropping(x, x, training=True)
    assert calls == [2]
    dropping(x, x)  # inference: no dropout, chunked
    assert calls == [2, 2]


@pytest.mark.parametrize("chunk_size", [None, 4])
@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_core_is_causal_equals_the_causal_mask(rng, softmax, chunk_size):
    """complex_dot_product_attention(is_causal=True), full path and chunked,
    with and without a padding mask: the NumPy complex128 output under the
    equivalent (T, S) mask."""
    complex_inputs, (q, k, v) = _inputs(rng)
    padding = _padding_mask(rng, *SHAPE[:3])
    for mask in (None, padding):
        out = _full(
            q,
            k,
            v,
            softmax,
            "inner",
            mask,
            is_causal=True,
            chunk_size=chunk_size,
        )
        causal = _causal(*SHAPE[1:3])
        full_mask = causal[None] if mask is None else mask & causal
        expected = _reference(complex_inputs, softmax, "inner", full_mask)
        _close(cvk.from_stacked(to_numpy(out), "complex128"), expected, RTOL)
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match="is_causal"):
            _full(q, k, v, softmax, "inner", None, is_causal=bad)


def test_layer_causal_mask_reaches_the_chunked_path_as_is_causal(
    rng, monkeypatch
):
    """With chunk_size and use_causal_mask alone, the layer builds no mask:
    the chunked path gets mask=None and is_causal=True, and the output and
    the returned scores equal the layer without chunks."""
    seen = _record_chunked_calls(monkeypatch, "mask", "is_causal")
    x = cvk.to_stacked(ref.random_complex(rng, (2, 9, 4))).astype("float32")
    full = cvk.layers.ComplexMultiHeadAttention(2, 3, softmax="abs")
    chunked = cvk.layers.ComplexMultiHeadAttention(
        2, 3, softmax="abs", chunk_size=4
    )
    expected, scores = full(
        x, x, use_causal_mask=True, return_attention_scores=True
    )
    chunked(x, x)
    chunked.set_weights(full.get_weights())
    _close(
        to_numpy(chunked(x, x, use_causal_mask=True)),
        to_numpy(expected),
        RTOL,
        "chunked causal",
    )
    assert seen[-1] == (None, True)
    out, again = chunked(
        x, x, use_causal_mask=True, return_attention_scores=True
    )
    _close(to_numpy(again), to_numpy(scores), RTOL, "scores, full path")
    _close(to_numpy(out), to_numpy(expected), RTOL, "output, full path")


def test_chunk_for_and_the_auto_rule():
    wide = att.AUTO_CHUNK_MIN_SCORES
    side = int(round(wide**0.5))
    assert att.chunk_for("auto", side) == att.AUTO_CHUNK_SIZE  # T = S
    assert att.chunk_for("auto", side, side) == att.AUTO_CHUNK_SIZE
    assert att.chunk_for("auto", side - 1, side) is None
    assert att.chunk_for("auto", 10**6, 1) is None  # a decoding step
    assert att.chunk_for("auto", None, side) is None  # dynamic S: full
    # wide enough, but no more keys than one block
    assert att.chunk_for("auto", att.AUTO_CHUNK_SIZE, 10**9) is None
    assert att.chunk_for(None, 10**6) is None
    # a sliding window W: blocks once T and S - W exceed one block
    block = att.AUTO_CHUNK_SIZE
    assert att.chunk_for("auto", 2 * block, 2 * block, block - 1) == block
    assert att.chunk_for("auto", 2 * block, 2 * block, block) is None
    assert att.chunk_for("auto", 2 * block, block, 8) is None  # short T
    assert att.chunk_for("auto", 2 * block, None, 8) == block  # T as S
    assert att.chunk_for("auto", block, block, 1) is None
    assert att.chunk_for("auto", side, side, side) == block  # wide anyway
    assert att.chunk_for(4, 5) == 4 and att.chunk_for(4, 4) is None
    assert att.resolve_chunk_size("auto") == "auto"
    for bad in ("AUTO", "fast", 0, -1, 2.5, True):
        with pytest.raises(ValueError, match="chunk_size"):
            att.resolve_chunk_size(bad)


def _auto_and_full(x, **kwargs):
    """Two `ComplexMultiHeadAttention(2, 2, **kwargs)` with equal weights,
    built on `x`: the default `chunk_size="auto"` and `chunk_size=None`
    (the full path)."""
    auto = cvk.layers.ComplexMultiHeadAttention(2, 2, **kwargs)
    full = cvk.layers.ComplexMultiHeadAttention(2, 2, chunk_size=None, **kwargs)
    full(x, x)
    auto(x, x)
    auto.set_weights(full.get_weights())
    return auto, full


def test_layer_default_chunks_wide_scores_automatically(rng, monkeypatch):
    """The layer's default chunk_size="auto", with the rule's constants
    made small: 8 queries x 16 keys take the chunked path in blocks of
    AUTO_CHUNK_SIZE and equal chunk_size=None (the full path); one query
    (a decoding step) takes the full path. A causal mask goes as
    `is_causal`."""
    monkeypatch.setattr(att, "AUTO_CHUNK_MIN_SCORES", 8 * 16)
    monkeypatch.setattr(att, "AUTO_CHUNK_SIZE", 4)
    calls = _record_chunked_calls(monkeypatch, "chunk_size", "is_causal")
    x = cvk.to_stacked(ref.random_complex(rng, (1, 16, 4))).astype("float32")
    auto, full = _auto_and_full(x, softmax="abs")
    assert auto.chunk_size == "auto"
    assert auto.get_config()["chunk_size"] == "auto"
    calls.clear()
    for causal in (False, True):
        _close(
            to_numpy(auto(x[:, :8], x, use_causal_mask=causal)),
            to_numpy(full(x[:, :8], x, use_causal_mask=causal)),
            RTOL,
            f"auto, causal={causal}",
        )
    assert calls == [(4, False), (4, True)]
    auto(x[:, :1], x)  # 1 x 16 < 8 x 16: the full path
    assert len(calls) == 2


def test_layer_default_chunks_a_sliding_window_early(rng, monkeypatch):
    """With a sliding window the default chunk_size="auto" takes the
    windowed blocks once T and S - W exceed one block, far below the
    rule's T * S (left at its value here): blocks of 4 for 16 tokens and
    a window of 3 (causal or not) equal the full path; a window of 12
    (16 - 12 = 4, not above a block) stays on the full path."""
    monkeypatch.setattr(att, "AUTO_CHUNK_SIZE", 4)
    calls = _record_chunked_calls(monkeypatch, "chunk_size", "sliding_window")
    x = cvk.to_stacked(ref.random_complex(rng, (1, 16, 4))).astype("float32")
    for window, expected in ((3, [(4, 3), (4, 3)]), (12, [])):
        auto, full = _auto_and_full(x, sliding_window=window)
        calls.clear()
        for causal in (False, True):
            _close(
                to_numpy(auto(x, x, use_causal_mask=causal)),
                to_numpy(full(x, x, use_causal_mask=causal)),
                RTOL,
                f"window {window}, causal={causal}",
            )
        assert calls == expected, (window, calls)


def test_overrides_of_compute_attention_keep_their_causal_mask(rng):
    """A subclass whose _compute_attention predates `is_causal` gets the
    causal mask in `attention_mask`, chunked or not: the same output as
    the layer without chunks."""

    class Old(cvk.layers.ComplexMultiHeadAttention):
        def _compute_attention(
            self,
            query,
            key,
            value,
            attention_mask=None,
            training=None,
            return_attention_scores=False,
        ):
            return super()._compute_attention(
                query,
                key,
                value,
                attention_mask,
                training,
                return_attention_scores,
            )

    x = cvk.to_stacked(ref.random_complex(rng, (1, 9, 4))).astype("float32")
    old = Old(2, 2, chunk_size=4)
    full = cvk.layers.ComplexMultiHeadAttention(2, 2, chunk_size=None)
    full(x, x)
    old(x, x)
    old.set_weights(full.get_weights())
    _close(
        to_numpy(old(x, x, use_causal_mask=True)),
        to_numpy(full(x, x, use_causal_mask=True)),
        RTOL,
        "override",
    )


# ----------------------------------------------------------------------
# The sliding window: query blocks against their window's keys only.
# ----------------------------------------------------------------------


def _band(length, keys, window, causal):
    """(T, S): t - W < s (and s <= t causal, s < t + W otherwise)."""
    t, s = np.arange(length)[:, None], np.arange(keys)[None, :]
    return (s > t - window) & ((s <= t) if causal else (s < t + window))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_sliding_window_matches_reference_and_gradients(
    rng, softmax, product, causal
):
    """The windowed chunked path (T = 13 queries in blocks of 3, the last
    overlapping; S = 11 keys; a padding mask with a fully masked row):
    the NumPy complex128 output under the band's mask for windows of 1,
    3 and one covering every key, and the full path's gradients for the
    window of 3."""
    complex_inputs, inputs = _inputs(rng)
    batch, length, keys, heads, _, value = SHAPE
    padding = _padding_mask(rng, batch, length, keys)
    weights = _loss_weights(rng, (batch, length, heads, 2 * value))
    for window in (1, 3, 20):
        band = _band(length, keys, window, causal)

        def chunked(q, k, v, window=window):
            return chunked_dot_product_attention(
                q,
                k,
                v,
                softmax,
                product,
                mask=padding,
                is_causal=causal,
                chunk_size=3,
                sliding_window=window,
            )

        def full(q, k, v, band=band):
            return _full(q, k, v, softmax, product, padding & band)

        out = to_numpy(chunked(*inputs))
        expected = _reference(complex_inputs, softmax, product, padding & band)
        _close(cvk.from_stacked(out, "complex128"), expected, RTOL, "output")
        assert np.all(out[0, 2] == 0)  # the fully masked row
        if window != 3:
            continue
        got = _gradients(chunked, inputs, weights)
        want = _gradients(full, inputs, weights)
        for name, g, w in zip("qkv", got, want):
            _close(g, w, GRAD_RTOL, f"window {window}: d{name}")


def test_sliding_window_visits_only_its_key_blocks(monkeypatch):
    """At T = S = 1024 and a window of 32, every score block the forward
    and backward compute is (B, N, 32 rows, 32 + 62 keys) (causal: 32 +
    31): O(T W) work in all (the plan's count), where the key-block loop
    computed (B, N, T, 512) blocks, T^2 in all."""
    from cvattn_keras import chunked_attention as ca

    length, window = 1024, 32
    largest = []
    einsum = ops.einsum

    def recording(equation, *operands):
        result = einsum(equation, *operands)
        largest.append(int(np.prod(result.shape)))
        return result

    monkeypatch.setattr(ops, "einsum", recording)
    x = np.zeros((1, length, 1, 2), "float32")
    for causal in (False, True):

        def run(q, k, v, causal=causal):
            out = chunked_dot_product_attention(
                q,
                k,
                v,
                "abs",
                is_causal=causal,
                chunk_size=512,
                sliding_window=window,
            )
            return ops.sum(out)

        span = window + (window - 1) * (1 if causal else 2)
        gradients(run, [x, x, x])
        scores = [n for n in largest if n != length * 2]
        assert max(scores) == window * span, (causal, max(scores))
        largest.clear()
        plan = ca._Plan(
            "abs", "inner", 1.0, None, causal, 512, length, window, length
        )
        assert plan.work == length * span < length * length // 10
