"""Tests of the functional attention core (cvattn_keras.attention)."""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import gradients
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras import attention as att

VARIANTS = [(s, p) for s in att.SOFTMAX_VARIANTS for p in att.PRODUCTS]

# Worked rows of reference-semantics.md: A = [1+i, 2-i, 0.5i], no scaling.
WORKED_SCORES = np.array([1 + 1j, 2 - 1j, 0.5j])
WORKED = {
    "real": (
        [0.244728, 0.665241, 0.090031],
        [0.731059, 0, 0.268941],
    ),
    "abs": (
        [0.192381 + 0.192381j, 0.553541 - 0.276771j, 0.109054j],
        [0.504776 + 0.504776j, 0, 0.286138j],
    ),
    "absonly": (
        [0.272068, 0.618878, 0.109054],
        [0.713862, 0, 0.286138],
    ),
    "naive": (
        [0.244728 + 0.574097j, 0.665241 + 0.077696j, 0.090031 + 0.348207j],
        [0.731059 + 0.622459j, 0, 0.268941 + 0.377541j],
    ),
}


def _heads(z, dtype="float32"):
    """Complex (B, L, N, h) -> stacked per head, a tensor of `dtype`."""
    return keras.ops.convert_to_tensor(cvk.to_stacked(z), dtype)


def _row_inputs(scores, product):
    """q = 1 (one complex feature) and keys chosen so that <q, k_s> = A_s."""
    keys = np.conj(scores) if product == "inner" else scores
    q = _heads(np.ones((1, 1, 1, 1), complex))
    k = _heads(keys.reshape(1, -1, 1, 1))
    return q, k


def _weights(softmax, product, scores, mask=None):
    q, k = _row_inputs(scores, product)
    _, w = att.complex_dot_product_attention(
        q, k, k, softmax, product, scale=1.0, mask=mask, return_weights=True
    )
    return cvk.from_stacked(w, "complex128")[0, 0, 0]


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_worked_rows_of_the_reference(softmax, product):
    unmasked, masked = WORKED[softmax]
    # The table has 6 digits: 1e-6 absolute plus rounding.
    np.testing.assert_allclose(
        _weights(softmax, product, WORKED_SCORES), unmasked, atol=1.5e-6
    )
    mask = np.array([[True, False, True]])  # (T, S)
    np.testing.assert_allclose(
        _weights(softmax, product, WORKED_SCORES, mask), masked, atol=1.5e-6
    )


def test_abs_with_an_exactly_zero_score():
    w = _weights("abs", "inner", np.array([0, 1 + 1j, -2]))
    np.testing.assert_allclose(
        w, [0, 0.232638 + 0.232638j, -0.591015], atol=1.5e-6
    )


@pytest.mark.parametrize("softmax", ["abs", "absonly"])
def test_zero_score_has_finite_gradients(softmax):
    q, k = _row_inputs(np.array([0, 1 + 1j, -2]), "inner")

    def loss(q, k):
        out = att.complex_dot_product_attention(q, k, k, softmax, scale=1.0)
        return keras.ops.sum(out**2)

    _, grads, _ = gradients(loss, [to_numpy(q), to_numpy(k)])
    for grad in grads:
        assert np.all(np.isfinite(grad))
        assert np.any(grad != 0)  # the gradient does reach q and k


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_core_matches_reference_with_mask(rng, softmax, product):
    # B=2, T=3, S=5, N=2, H=3, V=4; the last query row fully masked.
    q = ref.random_complex(rng, (2, 3, 2, 3))
    k = ref.random_complex(rng, (2, 5, 2, 3))
    v = ref.random_complex(rng, (2, 5, 2, 4))
    mask = rng.random((2, 3, 5)) > 0.4
    mask[:, -1] = False
    mask[:, 0, 0] = True
    out, w = att.complex_dot_product_attention(
        _heads(q),
        _heads(k),
        _heads(v),
        softmax,
        product,
        mask=mask,
        return_weights=True,
    )
    to_bnth = lambda z: z.transpose(0, 2, 1, 3)  # noqa: E731
    ref_out, ref_w = ref.attention(
        to_bnth(q),
        to_bnth(k),
        to_bnth(v),
        softmax,
        product,
        scale=3**-0.5,
        mask=mask[:, None],
    )
    np.testing.assert_allclose(
        cvk.from_stacked(out, "complex128"), to_bnth(ref_out), atol=1e-5
    )
    np.testing.assert_allclose(
        cvk.from_stacked(w, "complex128"), ref_w, atol=1e-5
    )
    assert np.all(cvk.from_stacked(out)[:, -1] == 0)


@pytest.mark.parametrize("mask_rank", [None, 2, 3, 4])
def test_fused_cattn_path_equals_general_path(rng, mask_rank):
    """CAtt without returned weights goes through dot_product_attention; with
    weights it goes through the general path. Both must agree."""
    q = _heads(ref.random_complex(rng, (2, 4, 3, 2)))
    kv = _heads(ref.random_complex(rng, (2, 6, 3, 2)))
    shapes = {2: (4, 6), 3: (2, 4, 6), 4: (2, 3, 4, 6)}
    mask = None
    if mask_rank:
        mask = rng.random(shapes[mask_rank]) > 0.5
        mask[..., 1, :] = False  # a fully masked query row
    fused = att.complex_dot_product_attention(q, kv, kv, mask=mask)
    general, _ = att.complex_dot_product_attention(
        q, kv, kv, mask=mask, return_weights=True
    )
    np.testing.assert_allclose(fused, general, atol=1e-6)


def test_dropout_shares_one_mask_between_parts(rng):
    q = _heads(ref.random_complex(rng, (1, 8, 1, 2)))
    k = _heads(ref.random_complex(rng, (1, 16, 1, 2)))
    weights = att.attention_weights(
        att.complex_scores(q, k, "inner", 1.0), "naive"
    )
    dropped = att._dropout(weights, "naive", 0.5, seed=3)
    re, im = np.split(to_numpy(dropped), 2, axis=-1)
    wre, wim = np.split(to_numpy(weights), 2, axis=-1)
    assert np.array_equal(re == 0, im == 0)
    assert 0.3 < np.mean(re == 0) < 0.7
    kept = re != 0
    np.testing.assert_allclose(re[kept], 2 * wre[kept], rtol=1e-6)
    np.testing.assert_allclose(im[kept], 2 * wim[kept], rtol=1e-6)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("CAtt", "real"),
        ("apatt", "abs"),
        ("AATT", "absonly"),
        ("RIAtt", "naive"),
        ("naiv", "naive"),
        ("Real", "real"),
    ],
)
def test_softmax_aliases(name, expected):
    assert att.resolve_softmax(name) == expected


def test_product_aliases_and_compound_strings():
    assert att.resolve_product("IP") == "inner"
    assert att.resolve_product("cp") == "bilinear"
    compounds = "realip absip absonlyip naivip realcp abscp absonlycp naivcp"
    parsed = [att.parse_variant(name) for name in compounds.split()]
    assert parsed == [
        (s, p)
        for p in ("inner", "bilinear")
        for s in ("real", "abs", "absonly", "naive")
    ]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: att.resolve_softmax("softplus"), "'real', 'abs'"),
        (lambda: att.resolve_softmax("realip"), "parse_variant"),
        (lambda: att.resolve_softmax(3), "Received: softmax=3"),
        (lambda: att.resolve_product("outer"), "'inner', 'bilinear'"),
        (lambda: att.parse_variant("real"), "'ip' or 'cp'"),
        (lambda: att.parse_variant("fooip"), "softmax='foo'"),
    ],
)
def test_unknown_names_list_the_valid_ones(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
@pytest.mark.parametrize("return_weights", [False, True])
def test_half_precision_inputs_get_float32_scores(rng, softmax, return_weights):
    """Scores of 4.5e5 overflow float16 (max 65504); computed in float32 as
    documented, the softmax stays finite and exact."""
    q = np.full((1, 2, 1, 8), 300.0)  # H = 4: <q, q> = 8 * 300^2 / 2 * 2
    k = q.copy()
    k[:, 1] *= -1  # scores +A and -A
    v = rng.standard_normal((1, 2, 1, 4))
    half = [keras.ops.convert_to_tensor(a, "float16") for a in (q, k, v)]
    result = att.complex_dot_product_attention(
        *half, softmax, scale=1.0, return_weights=return_weights
    )
    out = result[0] if return_weights else result
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    out = to_numpy(out).astype("float32")
    assert np.all(np.isfinite(out))
    full = att.complex_dot_product_attention(
        *[keras.ops.convert_to_tensor(a, "float32") for a in (q, k, v)],
        softmax,
        scale=1.0,
    )
    np.testing.assert_allclose(out, to_numpy(full), rtol=2e-3, atol=2e-3)


# ----------------------------------------------------------------------
# Issue 11 item 13: errors that name the argument.
# ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, match",
    [
        ("ip", "'ip' has the product suffix but no softmax name"),
        ("CP", "'CP' has the product suffix but no softmax name"),
        ("", "the product suffix is missing. Received: ''"),
        (None, "the product suffix is missing. Received: None"),
        ("fooip", "compound variant 'fooip' .* Received: softmax='foo'"),
    ],
)
def test_parse_variant_names_the_compound_and_what_is_missing(name, match):
    with pytest.raises(ValueError, match=match) as info:
        att.parse_variant(name)
    # The regression: "ip" used to be reported as `softmax=''`.
    assert "softmax=''" not in str(info.value)


def test_core_rejects_masks_and_batches_that_do_not_fit(rng):
    q = _heads(ref.random_complex(rng, (2, 3, 2, 2)))
    kv = _heads(ref.random_complex(rng, (2, 5, 2, 2)))
    for mask in (np.ones((3, 4), bool), np.ones((2, 3, 2, 3, 5), bool)):
        with pytest.raises(ValueError, match="`mask`.*Received: mask.shape"):
            att.complex_dot_product_attention(q, kv, kv, mask=mask)
    other = _heads(ref.random_complex(rng, (3, 5, 2, 2)))
    with pytest.raises(ValueError, match="same batch size"):
        att.complex_dot_product_attention(q, other, other)
    with pytest.raises(ValueError, match="same length"):
        att.complex_dot_product_attention(q, kv, other[:2, :4])


# ----------------------------------------------------------------------
# Issue 11 item 16: attention over one key.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
@pytest.mark.parametrize("masked", [None, True, False])
@pytest.mark.parametrize("return_weights", [False, True])
def test_one_key_matches_the_reference_without_warning(
    rng, softmax, product, masked, return_weights
):
    """S = 1: every weight is 1 (softmax over one key; for "abs" times the
    score's phase) or 0 where masked. Keras warns for a softmax over an
    axis of size 1 ("did you mean sigmoid?"); pytest turns warnings into
    errors, so any warning fails this test."""
    q = ref.random_complex(rng, (2, 3, 2, 2))
    k = ref.random_complex(rng, (2, 1, 2, 2))
    v = ref.random_complex(rng, (2, 1, 2, 3))
    mask = None if masked is None else np.full((2, 3, 1), masked)
    result = att.complex_dot_product_attention(
        _heads(q),
        _heads(k),
        _heads(v),
        softmax,
        product,
        mask=mask,
        return_weights=return_weights,
    )
    out = result[0] if return_weights else result
    to_bnth = lambda z: z.transpose(0, 2, 1, 3)  # noqa: E731
    ref_out, ref_w = ref.attention(
        to_bnth(q),
        to_bnth(k),
        to_bnth(v),
        softmax,
        product,
        scale=2**-0.5,
        mask=None if mask is None else mask[:, None],
    )
    # float32 on unit-scale data: 1e-5 absolute.
    np.testing.assert_allclose(
        cvk.from_stacked(out, "complex128"), to_bnth(ref_out), atol=1e-5
    )
    if return_weights:
        np.testing.assert_allclose(
            cvk.from_stacked(result[1], "complex128"), ref_w, atol=1e-5
        )


# ----------------------------------------------------------------------
# Issue 9: the fused CAtt path with value heads unlike the key heads.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("product", att.PRODUCTS)
@pytest.mark.parametrize("value_width", [1, 2, 5])
@pytest.mark.parametrize("mask_rank", [None, 3])
def test_fused_cattn_with_value_width_unlike_key_width(
    rng, product, value_width, mask_rank
):
    """H = 3 complex features per key head, V = 1, 2 or 5 per value head:
    JAX's fused kernel needs V = H (it crashed with `cannot reshape
    array`); the output must equal the complex128 reference on every
    backend."""
    q = ref.random_complex(rng, (2, 4, 2, 3))
    k = ref.random_complex(rng, (2, 6, 2, 3))
    v = ref.random_complex(rng, (2, 6, 2, value_width))
    mask = None
    if mask_rank:
        mask = rng.random((2, 4, 6)) > 0.4
        mask[1, 2] = False  # a fully masked query row
    out = att.complex_dot_product_attention(
        _heads(q), _heads(k), _heads(v), "real", product, mask=mask
    )
    assert tuple(out.shape) == (2, 4, 2, 2 * value_width)
    to_bnth = lambda z: z.transpose(0, 2, 1, 3)  # noqa: E731
    expected, _ = ref.attention(
        to_bnth(q),
        to_bnth(k),
        to_bnth(v),
        "real",
        product,
        scale=3**-0.5,
        mask=None if mask is None else mask[:, None],
    )
    # float32 on unit-scale data: 1e-5 absolute.
    np.testing.assert_allclose(
        cvk.from_stacked(out, "complex128"), to_bnth(expected), atol=1e-5
    )


# ----------------------------------------------------------------------
# Issue 9 Build item 7: bfloat16 operands.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
@pytest.mark.parametrize("return_weights", [False, True])
def test_bfloat16_operands_against_the_complex128_reference(
    rng, softmax, product, return_weights
):
    """bfloat16 q, k, v (8 significant bits, about 2.4 decimal digits): the
    scores come out of a bfloat16 matmul, the softmax runs in float32, the
    weights are rounded to bfloat16 for the product with the values, and
    the output is bfloat16. Each rounding is at most 2^-9 relative; the
    output (size up to about 2, where a bfloat16 step is 2^-6) may carry
    a few of them: bound 0.03 absolute (measured worst over 5 seeds and
    both backends: 0.007); the weights (at most 1, step 2^-8): bound 0.01
    (measured 0.003). A float32 computation is within 1e-6. The inputs are
    rounded to bfloat16 before the reference sees them, so only the
    computation's rounding is measured."""
    shapes = {"q": (2, 5, 2, 4), "k": (2, 6, 2, 4), "v": (2, 6, 2, 3)}
    inputs = {}
    for name, shape in shapes.items():
        stacked = _heads(ref.random_complex(rng, shape), "bfloat16")
        inputs[name] = stacked
    mask = rng.random((2, 5, 6)) > 0.3
    mask[0, 1] = False
    result = att.complex_dot_product_attention(
        inputs["q"],
        inputs["k"],
        inputs["v"],
        softmax,
        product,
        mask=mask,
        return_weights=return_weights,
    )
    out = result[0] if return_weights else result
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    exact = {
        name: cvk.from_stacked(to_numpy(x).astype("float64"), "complex128")
        for name, x in inputs.items()
    }
    to_bnth = lambda z: z.transpose(0, 2, 1, 3)  # noqa: E731
    expected, expected_w = ref.attention(
        to_bnth(exact["q"]),
        to_bnth(exact["k"]),
        to_bnth(exact["v"]),
        softmax,
        product,
        scale=4**-0.5,
        mask=mask[:, None],
    )
    got = cvk.from_stacked(to_numpy(out).astype("float64"), "complex128")
    np.testing.assert_allclose(got, to_bnth(expected), atol=0.03)
    assert np.all(got[0, 1] == 0) and np.all(np.isfinite(got))
    if return_weights:
        got_w = to_numpy(result[1]).astype("float64")
        np.testing.assert_allclose(
            cvk.from_stacked(got_w, "complex128"), expected_w, atol=0.01
        )


@pytest.mark.parametrize("scale", [float("inf"), float("nan"), 0.0, -1.0])
def test_core_rejects_a_scale_that_is_not_a_finite_positive_number(scale):
    q = np.ones((1, 2, 1, 4), "float32")
    with pytest.raises(ValueError, match="`scale` must be a finite number"):
        att.complex_dot_product_attention(q, q, q, scale=scale)
