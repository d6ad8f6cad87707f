"""Tests of ComplexMultiHeadAttention against the NumPy complex128 reference.

Tolerance: float32 layers on unit-scale data agree with complex128 to 1e-5
absolute (the issue's bound); measured errors are about 1e-6.
"""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import compiled
from backend_utils import gradients
from backend_utils import has_float64
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras import attention as att
from cvattn_keras.layers import ComplexMultiHeadAttention

VARIANTS = [(s, p) for s in att.SOFTMAX_VARIANTS for p in att.PRODUCTS]
ATOL = 1e-5


_params = ref.attention_params


def _layer(softmax="real", product="inner", **kwargs):
    kwargs.setdefault("num_heads", 2)
    kwargs.setdefault("key_dim", 3)
    kwargs.setdefault("bias_initializer", "random_normal")
    return ComplexMultiHeadAttention(softmax=softmax, product=product, **kwargs)


def _check(layer, outputs, query, value, key, mask, scores=None):
    """Compares outputs (and scores) with the reference MHA."""
    ref_out, ref_w = ref.multi_head_attention(
        query,
        value,
        key,
        _params(layer),
        layer.num_heads,
        layer.softmax,
        layer.product,
        layer.key_dim**-0.5,
        mask,
    )
    got = cvk.from_stacked(outputs, "complex128")
    np.testing.assert_allclose(got, ref_out, atol=ATOL)
    if scores is not None:
        got_w = cvk.from_stacked(scores, "complex128")
        np.testing.assert_allclose(got_w, ref_w, atol=ATOL)
    return ref_out


# ----------------------------------------------------------------------
# Parity with the reference.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_self_attention_with_causal_mask(rng, softmax, product):
    x = ref.random_complex(rng, (2, 5, 4))
    layer = _layer(softmax, product, value_dim=2, output_dim=3)
    xs = cvk.to_stacked(x)
    out, scores = layer(
        xs, xs, use_causal_mask=True, return_attention_scores=True
    )
    assert tuple(out.shape) == (2, 5, 6)
    assert tuple(scores.shape) == (2, 2, 5, 10)
    causal = np.tril(np.ones((5, 5), bool))[None]
    _check(layer, out, x, x, x, causal, scores)
    # The fused path (no scores requested) gives the same output.
    np.testing.assert_allclose(
        to_numpy(layer(xs, xs, use_causal_mask=True)), to_numpy(out), atol=1e-6
    )


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_cross_attention_with_boolean_mask(rng, softmax, product):
    # T = 4 queries with 3 features; S = 6 keys with 2, values with 5.
    query = ref.random_complex(rng, (2, 4, 3))
    value = ref.random_complex(rng, (2, 6, 5))
    key = ref.random_complex(rng, (2, 6, 2))
    mask = rng.random((2, 4, 6)) > 0.4
    mask[:, :, 0] = True
    mask[1, 2] = False  # a query with nothing to attend
    layer = _layer(softmax, product, num_heads=3, key_dim=2, value_dim=3)
    out, scores = layer(
        cvk.to_stacked(query),
        cvk.to_stacked(value),
        cvk.to_stacked(key),
        attention_mask=mask,
        return_attention_scores=True,
    )
    assert tuple(out.shape) == (2, 4, 6) and tuple(scores.shape) == (
        2,
        3,
        4,
        12,
    )
    _check(layer, out, query, value, key, mask, scores)
    # The fully masked row: zero weights, output = the output bias.
    assert np.all(to_numpy(scores)[1, :, 2] == 0)
    bias = np.concatenate(
        [
            to_numpy(layer.output_dense.bias_real),
            to_numpy(layer.output_dense.bias_imag),
        ]
    )
    np.testing.assert_allclose(to_numpy(out)[1, 2], bias, atol=1e-6)


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_padding_masks_from_keras_masking(rng, softmax, product):
    query = ref.random_complex(rng, (3, 4, 2))
    value = ref.random_complex(rng, (3, 5, 3))
    query[0, 3:] = 0  # padded steps are all-zero: Masking(0.0) masks them
    value[0, 3:] = 0
    value[2, 4:] = 0
    layer = _layer(softmax, product)
    q_in, v_in = keras.Input((4, 4)), keras.Input((5, 6))
    out = layer(keras.layers.Masking()(q_in), keras.layers.Masking()(v_in))
    model = keras.Model([q_in, v_in], out)
    got = model([cvk.to_stacked(query), cvk.to_stacked(value)])
    q_valid = np.any(query != 0, axis=-1)
    v_valid = np.any(value != 0, axis=-1)
    mask = q_valid[:, :, None] & v_valid[:, None, :]
    _check(layer, got, query, value, value, mask)


@pytest.mark.parametrize("softmax", ["real", "abs"])
def test_key_mask_from_keras_masking(rng, softmax):
    query = ref.random_complex(rng, (2, 3, 2))
    value = ref.random_complex(rng, (2, 4, 2))
    key = ref.random_complex(rng, (2, 4, 3))
    key[1, 2:] = 0  # only the key carries the padding
    layer = _layer(softmax)
    q_in, v_in, k_in = (
        keras.Input((3, 4)),
        keras.Input((4, 4)),
        keras.Input((4, 6)),
    )
    out = layer(q_in, v_in, keras.layers.Masking()(k_in))
    model = keras.Model([q_in, v_in, k_in], out)
    got = model([cvk.to_stacked(a) for a in (query, value, key)])
    mask = np.broadcast_to(np.any(key != 0, axis=-1)[:, None, :], (2, 3, 4))
    _check(layer, got, query, value, key, mask)


@pytest.mark.parametrize("softmax", ["real", "naive"])
def test_mask_ranks_are_equivalent(rng, softmax):
    x = cvk.to_stacked(ref.random_complex(rng, (2, 4, 3)))
    m = rng.random((4, 4)) > 0.3
    layer = _layer(softmax)
    outs = [
        to_numpy(layer(x, x, attention_mask=mask))
        for mask in (
            m,
            np.broadcast_to(m, (2, 4, 4)),
            np.broadcast_to(m, (2, 2, 4, 4)),
        )
    ]
    # The float 0/1 mask of Keras' own examples means the same.
    outs.append(to_numpy(layer(x, x, attention_mask=m.astype("float32"))))
    for out in outs[1:]:
        np.testing.assert_allclose(out, outs[0], atol=1e-6)


def test_per_head_mask(rng):
    x = ref.random_complex(rng, (1, 3, 2))
    mask = np.ones((1, 2, 3, 3), bool)
    mask[0, 1, :, 0] = False  # head 1 does not see key 0
    layer = _layer("abs")
    out = layer(cvk.to_stacked(x), cvk.to_stacked(x), attention_mask=mask)
    _check(layer, out, x, x, x, mask)


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_fully_masked_rows_have_finite_gradients(rng, softmax, product):
    x = cvk.to_stacked(ref.random_complex(rng, (2, 3, 2)))
    mask = np.ones((2, 3, 3), bool)
    mask[0, 1] = False
    mask[1] = False
    layer = _layer(softmax, product)
    out = layer(x, x, attention_mask=mask, use_causal_mask=True)
    assert np.all(np.isfinite(to_numpy(out)))

    def loss(x):
        out = layer(x, x, attention_mask=mask, use_causal_mask=True)
        return keras.ops.sum(out**2)

    value, (grad_x,), grad_vars = gradients(
        loss, [x], layer.trainable_variables
    )
    assert np.isfinite(value)
    for grad in [grad_x] + grad_vars:
        assert np.all(np.isfinite(grad))
    assert np.any(grad_x != 0)


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_global_phase_rotates_the_output(rng, softmax):
    """With bias-free projections, x -> e^{i phi} x leaves the inner-product
    scores (so every variant's weights) unchanged and rotates the output."""
    x = ref.random_complex(rng, (2, 4, 3))
    rotation = np.exp(0.7j)
    layer = _layer(softmax, use_bias=False)
    a, wa = layer(
        cvk.to_stacked(x), cvk.to_stacked(x), return_attention_scores=True
    )
    xr = cvk.to_stacked(rotation * x)
    b, wb = layer(xr, xr, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(wb), to_numpy(wa), atol=1e-6)
    np.testing.assert_allclose(
        cvk.from_stacked(b), rotation * cvk.from_stacked(a), atol=1e-5
    )


def test_scale_argument(rng):
    x = ref.random_complex(rng, (1, 3, 2))
    layer = _layer("naive", scale=0.25)
    out = layer(cvk.to_stacked(x), cvk.to_stacked(x))
    ref_out, _ = ref.multi_head_attention(
        x, x, x, _params(layer), 2, "naive", "inner", 0.25
    )
    np.testing.assert_allclose(cvk.from_stacked(out), ref_out, atol=ATOL)


def test_dropout_only_in_training(rng):
    x = cvk.to_stacked(ref.random_complex(rng, (2, 4, 3)))
    layer = _layer("abs", dropout=0.5, seed=3)
    inference = to_numpy(layer(x, x))
    np.testing.assert_array_equal(
        to_numpy(layer(x, x, training=False)), inference
    )
    train_a = to_numpy(layer(x, x, training=True))
    train_b = to_numpy(layer(x, x, training=True))
    assert not np.allclose(train_a, inference)
    assert not np.allclose(train_a, train_b)


# ----------------------------------------------------------------------
# Keras citizenship.
# ----------------------------------------------------------------------


def test_sublayers_and_weights_follow_the_contract():
    layer = _layer(num_heads=2, key_dim=3, value_dim=4, output_dim=5)
    layer.build((None, 6, 8), (None, 7, 10))
    for name, shape in [
        ("query_dense", (4, 6)),
        ("key_dense", (5, 6)),
        ("value_dense", (5, 8)),
        ("output_dense", (8, 5)),
    ]:
        dense = getattr(layer, name)
        assert isinstance(dense, cvk.layers.ComplexDense)
        assert tuple(dense.kernel_real.shape) == shape
    # 4 projections x (kernel_real, kernel_imag, bias_real, bias_imag).
    assert len(layer.trainable_weights) == 16
    # All initial kernels differ (cloned initializers).
    kernels = [
        to_numpy(w) for w in layer.trainable_weights if "kernel" in w.path
    ]
    assert not np.allclose(kernels[0], kernels[1])


def test_output_shapes_symbolic_and_eager_with_t_not_s():
    layer = _layer(num_heads=2, key_dim=3, output_dim=4)
    q, v = keras.Input((5, 6), batch_size=2), keras.Input((7, 10), batch_size=2)
    out, scores = layer(q, v, return_attention_scores=True)
    assert tuple(out.shape) == (2, 5, 8)
    assert tuple(scores.shape) == (2, 2, 5, 14)
    assert layer.compute_output_shape((2, 5, 6), (2, 7, 10)) == (2, 5, 8)
    eager_out, eager_scores = layer(
        np.zeros((2, 5, 6), "float32"),
        np.zeros((2, 7, 10), "float32"),
        return_attention_scores=True,
    )
    assert tuple(eager_out.shape) == tuple(out.shape)
    assert tuple(eager_scores.shape) == tuple(scores.shape)


def test_variable_length_sequences_in_a_functional_model(rng):
    q_in, v_in = keras.Input((None, 4)), keras.Input((None, 6))
    out, scores = _layer("naive")(q_in, v_in, return_attention_scores=True)
    assert tuple(out.shape) == (None, None, 4)
    assert tuple(scores.shape) == (None, 2, None, None)
    model = keras.Model([q_in, v_in], [out, scores])
    got, got_scores = model([np.ones((1, 3, 4)), np.ones((1, 5, 6))])
    assert tuple(got.shape) == (1, 3, 4) and tuple(got_scores.shape) == (
        1,
        2,
        3,
        10,
    )


def test_config_round_trip():
    layer = _layer(
        "absonly",
        "bilinear",
        value_dim=2,
        dropout=0.1,
        output_dim=3,
        scale=0.3,
        kernel_regularizer="l2",
        seed=5,
        name="cmha",
    )
    config = layer.get_config()
    clone = ComplexMultiHeadAttention.from_config(config)
    assert clone.get_config() == config
    assert config["softmax"] == "absonly" and config["product"] == "bilinear"


@pytest.mark.slow
def test_saved_model_loads_with_safe_mode(rng, tmp_path):
    q_in, v_in = keras.Input((4, 6)), keras.Input((5, 4))
    x = cvk.layers.ComplexDense(3)(q_in)
    x = _layer("abs", "bilinear", dropout=0.1, seed=1, kernel_regularizer="l2")(
        x, v_in, use_causal_mask=True
    )
    model = keras.Model([q_in, v_in], x)
    inputs = [
        cvk.to_stacked(ref.random_complex(rng, (2, 4, 3))),
        cvk.to_stacked(ref.random_complex(rng, (2, 5, 2))),
    ]
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded.layers[-1], ComplexMultiHeadAttention)
    np.testing.assert_array_equal(
        to_numpy(loaded(inputs)), to_numpy(model(inputs))
    )


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(rng, policy):
    x = cvk.to_stacked(ref.random_complex(rng, (2, 5, 4)))
    full = _layer("abs", bias_initializer="zeros")
    expected, _ = full(x, x, return_attention_scores=True)
    mixed = _layer("abs", bias_initializer="zeros", dtype=policy)
    mixed.build(x.shape, x.shape)
    mixed.set_weights(full.get_weights())
    out, scores = mixed(x, x, return_attention_scores=True)
    compute = policy.split("_")[1]
    assert keras.backend.standardize_dtype(out.dtype) == compute
    assert keras.backend.standardize_dtype(scores.dtype) == compute
    assert all(w.dtype == "float32" for w in mixed.weights)
    # Half-precision projections: 8 (bfloat16) or 11 (float16) mantissa bits.
    tol = 5e-2 if compute == "bfloat16" else 1e-2
    np.testing.assert_allclose(
        to_numpy(out).astype("float32"), to_numpy(expected), atol=tol
    )
    # The fused CAtt path under mixed precision too.
    cat = _layer(dtype=policy)
    assert keras.backend.standardize_dtype(cat(x, x).dtype) == compute


@pytest.mark.slow
@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_xla_equals_eager(rng, softmax, product):
    query = cvk.to_stacked(ref.random_complex(rng, (2, 4, 3)))
    value = cvk.to_stacked(ref.random_complex(rng, (2, 6, 3)))
    mask = rng.random((2, 4, 6)) > 0.3
    layer = _layer(softmax, product)
    layer(query, value)

    def both(q, v, m):
        fused = layer(q, v, attention_mask=m)
        out, scores = layer(
            q, v, attention_mask=m, return_attention_scores=True
        )
        return fused, out, scores

    xla = compiled(both)
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    fused, out, scores = xla(query, value, mask)
    eager, eager_scores = layer(
        query, value, attention_mask=mask, return_attention_scores=True
    )
    eager, eager_scores = to_numpy(eager), to_numpy(eager_scores)
    np.testing.assert_allclose(to_numpy(fused), eager, atol=1e-6)
    np.testing.assert_allclose(to_numpy(out), eager, atol=1e-6)
    np.testing.assert_allclose(to_numpy(scores), eager_scores, atol=1e-6)


@pytest.mark.slow
def test_fit_lowers_the_loss(rng):
    """Learn a teacher attention layer's map: the loss must drop."""
    x = cvk.to_stacked(ref.random_complex(rng, (64, 6, 4)))
    teacher = _layer("real", num_heads=2, key_dim=4)
    y = to_numpy(teacher(x, x, use_causal_mask=True))
    inputs = keras.Input((6, 8))
    student = _layer("real", num_heads=2, key_dim=4, dropout=0.1)
    model = keras.Model(inputs, student(inputs, inputs, use_causal_mask=True))
    model.compile(keras.optimizers.Adam(1e-2), "mse")
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=10, batch_size=16, verbose=0)
    after = model.evaluate(x, y, verbose=0)
    assert after < 0.5 * before


# ----------------------------------------------------------------------
# Bad input.
# ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_heads=0), "num_heads=0"),
        (dict(num_heads=2.0), "num_heads=2.0"),
        (dict(num_heads=True), "num_heads=True"),
        (dict(key_dim=-1), "key_dim=-1"),
        (dict(value_dim=0), "value_dim=0"),
        (dict(output_dim="4"), "output_dim='4'"),
        (dict(dropout=1.0), "dropout=1.0"),
        (dict(dropout=-0.1), "dropout=-0.1"),
        (dict(softmax="sparsemax"), "softmax='sparsemax'"),
        (dict(softmax="realip"), "parse_variant"),
        (dict(product="outer"), "product='outer'"),
        (dict(scale=0.0), "scale=0.0"),
        (dict(seed="1"), "seed='1'"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    base = dict(num_heads=2, key_dim=3)
    with pytest.raises(ValueError, match=match):
        ComplexMultiHeadAttention(**{**base, **kwargs})


def _zeros(*shape):
    return np.zeros(shape, "float32")


@pytest.mark.parametrize(
    "args, kwargs, match",
    [
        ((_zeros(2, 4, 5), _zeros(2, 4, 6)), {}, "query_shape\\[-1\\]=5"),
        ((_zeros(2, 4, 6), _zeros(2, 4, 3)), {}, "value_shape\\[-1\\]=3"),
        ((_zeros(2, 4, 6), _zeros(2, 4, 6), _zeros(2, 4, 7)), {}, "key_shape"),
        (
            (_zeros(2, 4, 6), _zeros(2, 5, 6), _zeros(2, 4, 6)),
            {},
            "same length",
        ),
        ((_zeros(4, 6), _zeros(4, 6)), {}, "rank 3"),
        (
            (_zeros(2, 4, 6), _zeros(2, 5, 6)),
            dict(attention_mask=np.ones((2, 4, 6), bool)),
            "attention_mask.shape=\\(2, 4, 6\\)",
        ),
        (
            (_zeros(2, 4, 6), _zeros(2, 5, 6)),
            dict(attention_mask=np.ones((1, 2, 2, 4, 5), bool)),
            "attention_mask",
        ),
    ],
)
def test_bad_inputs(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        _layer()(*args, **kwargs)


def test_inputs_must_fit_the_built_layer():
    layer = _layer()
    layer(_zeros(1, 3, 6), _zeros(1, 3, 6))
    with pytest.raises(ValueError, match="built for complex feature sizes"):
        layer(_zeros(1, 3, 8), _zeros(1, 3, 6))


def test_causal_mask_with_t_not_s(rng):
    """Top-left aligned, as Keras: query t sees keys s <= t."""
    query = ref.random_complex(rng, (2, 3, 2))
    value = ref.random_complex(rng, (2, 5, 2))
    for softmax in ("real", "naive"):
        layer = _layer(softmax)
        out = layer(
            cvk.to_stacked(query), cvk.to_stacked(value), use_causal_mask=True
        )
        _check(layer, out, query, value, value, np.tril(np.ones((3, 5), bool)))


def test_numpy_integers_and_mask_lists_are_accepted(rng):
    layer = ComplexMultiHeadAttention(
        np.int64(2), np.int32(3), dropout=np.float32(0.1)
    )
    assert layer.num_heads == 2 and isinstance(layer.key_dim, int)
    x = cvk.to_stacked(ref.random_complex(rng, (1, 2, 2)))
    listed = layer(x, x, attention_mask=[[[True, False], [True, True]]])
    array = layer(
        x, x, attention_mask=np.array([[[True, False], [True, True]]])
    )
    np.testing.assert_array_equal(to_numpy(listed), to_numpy(array))
    assert cvk.layers.ComplexDense(np.int64(4)).units == 4
    with pytest.raises(ValueError, match="input_shape\\[-1\\]=5"):
        cvk.layers.ComplexDense(2).compute_output_shape((None, 5))


def test_core_rejects_mismatched_heads_and_bad_dropout():
    q = keras.ops.zeros((1, 2, 1, 4))
    with pytest.raises(ValueError, match="same head width"):
        att.complex_dot_product_attention(q, keras.ops.zeros((1, 2, 1, 6)), q)
    with pytest.raises(ValueError, match="dropout='0.1'"):
        att.complex_dot_product_attention(q, q, q, dropout="0.1")


def test_rotary_position_encoding_matches_numpy(rng):
    x = ref.random_complex(rng, (2, 5, 4))
    layer = _layer("abs", rotary_max_wavelength=100)
    out, scores = layer(
        cvk.to_stacked(x), cvk.to_stacked(x), return_attention_scores=True
    )
    # Reference: rotate each head's projected queries and keys.
    params = ref.attention_params(layer)
    theta = 100.0 ** (-np.arange(3) / 3)  # key_dim = 3 complex features
    turn = np.exp(1j * np.arange(5)[:, None] * theta)  # (T, H)

    def heads(z):
        return z.reshape(2, 5, 2, 3).transpose(0, 2, 1, 3)

    q = heads(ref.dense(x, *params["query"])) * turn
    k = heads(ref.dense(x, *params["key"])) * turn
    v = heads(ref.dense(x, *params["value"]))
    merged, weights = ref.attention(q, k, v, "abs", "inner", 3**-0.5)
    merged = merged.transpose(0, 2, 1, 3).reshape(2, 5, 6)
    expected = ref.dense(merged, *params["output"])
    np.testing.assert_allclose(
        cvk.from_stacked(out, "complex128"), expected, atol=ATOL
    )
    np.testing.assert_allclose(
        cvk.from_stacked(scores, "complex128"), weights, atol=ATOL
    )


# ----------------------------------------------------------------------
# Issue 11 item 13: masks, batches and initializers that do not fit.
# ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        # The example: a (B, T) mask passed as value_mask.
        (
            dict(value_mask=np.ones((2, 4), bool)),
            "`value_mask` must have a shape that broadcasts to (B, S) = "
            "(2, 5). Received: value_mask.shape=(2, 4)",
        ),
        (
            dict(key_mask=np.ones((2, 5, 1), bool)),
            "`key_mask` must have a shape that broadcasts to (B, S) = "
            "(2, 5). Received: key_mask.shape=(2, 5, 1)",
        ),
        (
            dict(query_mask=np.ones((2, 5), bool)),
            "`query_mask` must have a shape that broadcasts to (B, T) = "
            "(2, 4). Received: query_mask.shape=(2, 5)",
        ),
        (
            dict(query_mask=np.ones((3, 4), bool)),
            "Received: query_mask.shape=(3, 4)",
        ),
        (
            dict(attention_mask=np.ones((2, 4, 4), bool)),
            "`attention_mask` must have a shape that broadcasts to (B, T, S)"
            " = (2, 4, 5). Received: attention_mask.shape=(2, 4, 4)",
        ),
        (
            dict(attention_mask=np.ones((2, 3, 4, 5), bool)),
            "(B, num_heads, T, S) = (2, 2, 4, 5). Received: "
            "attention_mask.shape=(2, 3, 4, 5)",
        ),
        (
            dict(attention_mask=np.ones((5,), bool)),
            "`attention_mask` must have rank 2",
        ),
    ],
)
def test_wrong_mask_shapes_name_the_argument(kwargs, message):
    query, value = _zeros(2, 4, 6), _zeros(2, 5, 6)
    for softmax in att.SOFTMAX_VARIANTS:
        with pytest.raises(ValueError) as info:
            _layer(softmax)(query, value, **kwargs)
        assert message in str(info.value)


def test_wrong_mask_shapes_are_caught_when_a_model_is_built():
    """Static shapes: the error comes when the functional model is traced,
    not when it runs."""
    q, v = keras.Input((4, 6)), keras.Input((5, 6))
    mask = keras.Input((4,), dtype="bool")
    with pytest.raises(ValueError, match="value_mask.shape=\\(None, 4\\)"):
        _layer()(q, v, value_mask=mask)


@pytest.mark.parametrize("key_batch", [None, 2, 3])
def test_query_and_value_batch_sizes_must_agree(key_batch):
    args = [_zeros(2, 4, 6), _zeros(3, 5, 6)]
    if key_batch:
        args.append(_zeros(key_batch, 5, 6))
    with pytest.raises(ValueError, match="same batch size \\(axis 0\\)"):
        _layer()(*args)
    # Symbolic inputs with known batch sizes: at model construction.
    q = keras.Input((4, 6), batch_size=2)
    v = keras.Input((5, 6), batch_size=3)
    with pytest.raises(ValueError, match="value_shape=\\(3, 5, 6\\)"):
        _layer()(q, v)


def test_none_initializers_mean_the_defaults():
    """As `keras.layers.Dense(kernel_initializer=None)` gets Dense's
    default Glorot kernel: `None` is the documented default (the kernel's
    complex Glorot, zero biases); it used to be an `AttributeError`."""
    layer = _layer(kernel_initializer=None, bias_initializer=None)
    layer.build((None, 4, 6), (None, 5, 6))
    for dense in (layer.query_dense, layer.output_dense):
        assert isinstance(
            dense.kernel_initializer, cvk.initializers.ComplexGlorotUniform
        )
        assert isinstance(dense.bias_initializer, keras.initializers.Zeros)
        assert np.all(to_numpy(dense.bias_real) == 0)
    config = layer.get_config()
    assert ComplexMultiHeadAttention.from_config(config).get_config() == config
    with pytest.raises(ValueError, match="kernel_initializer=3"):
        _layer(kernel_initializer=3)
    with pytest.raises(ValueError, match="bias_constraint='nope'"):
        _layer(bias_constraint="nope")


# ----------------------------------------------------------------------
# Issue 11 item 16: one key.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_one_key_without_warning(rng, softmax, product):
    """S = 1 with every variant: equal to the reference, and no Keras
    "softmax over axis of size 1" warning (pytest makes it an error)."""
    query = ref.random_complex(rng, (2, 3, 4))
    value = ref.random_complex(rng, (2, 1, 4))
    layer = _layer(softmax, product)
    q, v = cvk.to_stacked(query), cvk.to_stacked(value)
    out, scores = layer(q, v, return_attention_scores=True)
    assert tuple(scores.shape) == (2, 2, 3, 2)
    _check(layer, out, query, value, value, None, scores)
    _check(layer, layer(q, v), query, value, value, None)
    # A masked single key: zero weights, output = the output bias.
    mask = np.array([[True], [False]])[:, None, :]  # (B, 1, S)
    masked = layer(q, v, attention_mask=mask)
    _check(layer, masked, query, value, value, mask)


# ----------------------------------------------------------------------
# Issue 9: fused CAtt with value_dim != key_dim; bfloat16 matmuls.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("product", att.PRODUCTS)
@pytest.mark.parametrize("value_dim", [1, 5])
def test_fused_cattn_with_value_dim_unlike_key_dim(rng, product, value_dim):
    """Under JAX this crashed (`cannot reshape array` inside
    `keras.ops.dot_product_attention`)."""
    query = ref.random_complex(rng, (2, 4, 3))
    value = ref.random_complex(rng, (2, 6, 3))
    mask = rng.random((2, 4, 6)) > 0.3
    mask[0, 1] = False
    layer = _layer("real", product, key_dim=3, value_dim=value_dim)
    out = layer(
        cvk.to_stacked(query), cvk.to_stacked(value), attention_mask=mask
    )
    _check(layer, out, query, value, value, mask)


def _dot_general_dtypes(fn, *args):
    """Counts the `dot_general`s of `jax.make_jaxpr(fn)(*args)` (nested
    jaxprs included) by `(lhs dtype, rhs dtype, output dtype)`."""
    import jax

    counts = {}

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                key = tuple(
                    str(var.aval.dtype) for var in eqn.invars + eqn.outvars
                )
                counts[key] = counts.get(key, 0) + 1
            for param in eqn.params.values():
                for sub in (
                    param if isinstance(param, (list, tuple)) else [param]
                ):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return counts


@pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="reads the matmul dtypes from a JAX jaxpr; the math is tested "
    "on every backend by test_attention.py's bfloat16 tests",
)
@pytest.mark.parametrize("softmax, product", VARIANTS)
@pytest.mark.parametrize("value_dim", [None, 3])
def test_bfloat16_attention_matmuls(rng, softmax, product, value_dim):
    """Under mixed_bfloat16 every matmul takes bfloat16 operands, as in
    Keras' MultiHeadAttention: 4 projections and the 2 attention matmuls
    (scores, weights x values). Before the fix the attention matmuls of
    every variant took float32 operands (2 of 6 dot_generals for fused
    CAtt, 1 of 6 for the others). The fused CAtt path (value_dim equal to
    key_dim) has exactly Keras' dtypes, scores accumulated into float32."""
    keras.config.set_dtype_policy("mixed_bfloat16")
    q = cvk.to_stacked(ref.random_complex(rng, (2, 5, 4)))
    v = cvk.to_stacked(ref.random_complex(rng, (2, 6, 4)))
    layer = _layer(softmax, product, key_dim=4, value_dim=value_dim)
    layer(q, v)
    bf16 = ("bfloat16", "bfloat16")
    for scores in (False, True):
        counts = _dot_general_dtypes(
            lambda a, b: layer(a, b, return_attention_scores=scores), q, v
        )
        assert sum(counts.values()) == 6, counts
        assert all(key[:2] == bf16 for key in counts), counts
    mha = keras.layers.MultiHeadAttention(2, 4)
    mha(q, v)
    keras_counts = _dot_general_dtypes(lambda a, b: mha(a, b), q, v)
    assert all(key[:2] == bf16 for key in keras_counts), keras_counts
    if softmax == "real" and value_dim is None:
        fused = _dot_general_dtypes(lambda a, b: layer(a, b), q, v)
        assert fused == keras_counts


@pytest.mark.parametrize("softmax", ["real", "abs", "absonly", "naive"])
def test_every_variant_under_a_float64_policy(softmax, rng):
    """A float64 policy computes in float64 end to end (moduli and phases
    included) and agrees with float32 to float32 precision."""
    if not has_float64():
        pytest.skip("JAX without jax_enable_x64 has no float64")
    x = cvk.to_stacked(ref.random_complex(rng, (2, 5, 3)))
    mask = np.tril(np.ones((5, 5), bool))[None]
    layer32 = ComplexMultiHeadAttention(2, 2, softmax=softmax)
    y32 = layer32(x, x, attention_mask=mask)
    layer64 = ComplexMultiHeadAttention(2, 2, softmax=softmax, dtype="float64")
    layer64(x, x)
    layer64.set_weights(layer32.get_weights())
    y64 = layer64(x.astype("float64"), x.astype("float64"), attention_mask=mask)
    assert keras.backend.standardize_dtype(y64.dtype) == "float64"
    # float32 rounding of the 32-bit layer, amplified by APAtt's phase.
    np.testing.assert_allclose(to_numpy(y64), to_numpy(y32), atol=1e-5)
