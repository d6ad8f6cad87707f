"""Property-based tests of the attention (issue 11, items 13 and 16, and
issue 9's fused path): random shapes, variants and masks, including one
key (S = 1), value heads unlike key heads and fully masked rows, against
the NumPy complex128 reference; random masks and batches that do not fit
always raise a `ValueError` naming the argument.

pytest turns warnings into errors, so any Keras warning (such as the
"softmax over axis of size 1" one) fails these tests.
"""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import gradients
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

import cvattn_keras as cvk
from cvattn_keras import attention as att
from cvattn_keras.layers import ComplexMultiHeadAttention

# Eager op-by-op execution costs most on JAX, where every op compiles once
# per new shape: the shapes come from a small set (each with S = 1 or
# V != H somewhere) and JAX draws fewer examples, so that every test
# stays within a few seconds.
_JAX = keras.backend.backend() == "jax"
SETTINGS = settings(
    derandomize=True, max_examples=8 if _JAX else 30, deadline=None
)
# (B, T, S, N, H, V)
SHAPES = [
    (2, 3, 1, 2, 2, 2),  # one key
    (1, 1, 1, 1, 1, 3),  # one query, one key, V > H
    (2, 4, 5, 2, 3, 1),  # V < H
    (1, 3, 4, 1, 2, 2),
]


@st.composite
def attention_cases(draw):
    """Shapes `(B, T, S, N, H, V)`, a variant, a mask (or none) with some
    fully masked rows, and the inputs drawn from a seed."""
    names = ("batch", "queries", "keys", "heads", "key_width", "value_width")
    sizes = dict(zip(names, draw(st.sampled_from(SHAPES))))
    softmax = draw(st.sampled_from(att.SOFTMAX_VARIANTS))
    product = draw(st.sampled_from(att.PRODUCTS))
    mask_kind = draw(st.sampled_from([None, "random", "none_left"]))
    return_weights = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return sizes, softmax, product, mask_kind, return_weights, seed


def _inputs(sizes, mask_kind, seed):
    rng = np.random.default_rng(seed)
    b, t, s = sizes["batch"], sizes["queries"], sizes["keys"]
    n, h, v = sizes["heads"], sizes["key_width"], sizes["value_width"]
    q = ref.random_complex(rng, (b, t, n, h))
    k = ref.random_complex(rng, (b, s, n, h))
    val = ref.random_complex(rng, (b, s, n, v))
    mask = None
    if mask_kind == "random":
        mask = rng.random((b, t, s)) > 0.4  # may mask whole rows
    elif mask_kind == "none_left":
        mask = np.ones((b, t, s), bool)
        mask[:, -1] = False  # the last query has no key
    return q, k, val, mask


def jax_jit(fn):
    import jax

    return jax.jit(fn)


def _heads(z):
    return keras.ops.convert_to_tensor(cvk.to_stacked(z))


@SETTINGS
@given(attention_cases())
def test_core_equals_the_complex128_reference(case):
    sizes, softmax, product, mask_kind, return_weights, seed = case
    q, k, v, mask = _inputs(sizes, mask_kind, seed)

    def attend(q, k, v, mask):
        return att.complex_dot_product_attention(
            q, k, v, softmax, product, mask=mask, return_weights=return_weights
        )

    if _JAX:  # one compilation, not one per eager op and shape
        attend = jax_jit(attend)
    result = attend(_heads(q), _heads(k), _heads(v), mask)
    out = result[0] if return_weights else result
    to_bnth = lambda z: z.transpose(0, 2, 1, 3)  # noqa: E731
    expected, expected_w = ref.attention(
        to_bnth(q),
        to_bnth(k),
        to_bnth(v),
        softmax,
        product,
        scale=sizes["key_width"] ** -0.5,
        mask=None if mask is None else mask[:, None],
    )
    got = cvk.from_stacked(out, "complex128")
    assert np.all(np.isfinite(got))
    # float32 on unit-scale data with at most 5 keys: 1e-5 absolute.
    np.testing.assert_allclose(got, to_bnth(expected), atol=1e-5)
    if mask is not None:
        # Rows with no key left: exactly zero.
        empty = ~mask.any(axis=-1)  # (B, T)
        assert np.all(got[empty] == 0)
    if return_weights:
        got_w = cvk.from_stacked(result[1], "complex128")
        np.testing.assert_allclose(got_w, expected_w, atol=1e-5)


@settings(derandomize=True, max_examples=5 if _JAX else 15, deadline=None)
@given(attention_cases())
def test_gradients_are_finite_with_any_mask(case):
    sizes, softmax, product, mask_kind, _, seed = case
    q, k, v, mask = _inputs(sizes, mask_kind, seed)

    def loss(q, k, v):
        out = att.complex_dot_product_attention(
            q, k, v, softmax, product, mask=mask
        )
        return keras.ops.sum(out**2)

    stacked = [cvk.to_stacked(z) for z in (q, k, v)]
    value, grads, _ = gradients(loss, stacked)
    assert np.isfinite(value)
    for grad in grads:
        assert np.all(np.isfinite(grad))


_LAYERS = {}


def _layer(num_heads=2):
    """One built layer per head count (built on first use; the checks run
    before any computation, so reusing it is safe)."""
    if num_heads not in _LAYERS:
        _LAYERS[num_heads] = ComplexMultiHeadAttention(num_heads, 2)
    return _LAYERS[num_heads]


@st.composite
def wrong_masks(draw):
    """A mask argument and a static shape that does not broadcast to what
    that argument needs, for query `(B, T, 4)` and value `(B, S, 4)`."""
    batch = draw(st.integers(1, 3))
    queries = draw(st.integers(1, 4))
    keys = draw(st.integers(1, 4))
    name = draw(
        st.sampled_from(
            ["query_mask", "value_mask", "key_mask", "attention_mask"]
        )
    )
    if name == "query_mask":
        target = [batch, queries]
    elif name in ("value_mask", "key_mask"):
        target = [batch, keys]
    else:
        rank = draw(st.sampled_from([2, 3, 4]))
        target = {
            2: [queries, keys],
            3: [batch, queries, keys],
            4: [batch, 2, queries, keys],
        }[rank]
    if draw(st.booleans()) and name != "attention_mask":
        # A wrong rank: one axis more or one fewer.
        shape = target + [1] if draw(st.booleans()) else target[:1]
    elif name == "attention_mask" and draw(st.integers(0, 4)) == 0:
        shape = draw(st.sampled_from([[keys], [1, batch, 2, queries, keys]]))
    else:
        # The right rank; one axis neither 1 nor the target's size.
        shape = list(target)
        axis = draw(st.integers(0, len(shape) - 1))
        shape[axis] = target[axis] + draw(st.integers(1, 3))
    return batch, queries, keys, name, tuple(shape)


@SETTINGS
@given(wrong_masks())
def test_wrong_mask_shapes_always_name_the_argument(case):
    batch, queries, keys, name, shape = case
    query = np.zeros((batch, queries, 4), "float32")
    value = np.zeros((batch, keys, 4), "float32")
    with pytest.raises(ValueError) as info:
        _layer()(query, value, **{name: np.ones(shape, bool)})
    message = str(info.value)
    assert f"`{name}`" in message
    assert f"Received: {name}.shape={shape}" in message


@SETTINGS
@given(
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 4),
    st.booleans(),
)
def test_mismatched_batch_sizes_always_raise(
    query_batch, value_batch, key_batch, with_key
):
    sizes = {query_batch, value_batch} | ({key_batch} if with_key else set())
    args = [
        np.zeros((query_batch, 3, 4), "float32"),
        np.zeros((value_batch, 2, 4), "float32"),
    ]
    if with_key:
        args.append(np.zeros((key_batch, 2, 4), "float32"))
    if len(sizes) == 1:
        assert tuple(_layer()(*args).shape) == (query_batch, 3, 4)
        return
    with pytest.raises(ValueError, match="same batch size \\(axis 0\\)"):
        _layer()(*args)
