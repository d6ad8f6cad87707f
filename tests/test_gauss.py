"""Tests of Gauss's three-multiplication complex products
(`complex_matmul="gauss"`): every layer and attention product that has the
form, against NumPy complex128 and against the block form, outputs and
gradients; the "auto" rule; export keeping its own forms; the error on
large-magnitude inputs."""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import gradients
from backend_utils import to_numpy
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from keras import ops

import cvattn_keras as cvk
from cvattn_keras import _tracing
from cvattn_keras import attention as att
from cvattn_keras import complex as cx

# Each softmax once, each product twice (the score products of both are
# also checked alone below): the layer test costs seconds per case on JAX.
VARIANTS = [
    ("real", "inner"),
    ("abs", "bilinear"),
    ("absonly", "inner"),
    ("naive", "bilinear"),
]
# float32 results of O(1) data against complex128: a few roundings per
# product of up to ~12 terms; 1e-5 of the largest entry leaves a wide
# margin over the ~5e-7 measured on every backend.
RTOL = 1e-5


def _close(actual, expected, rtol=RTOL, what=""):
    """Max-norm error relative to the expected array's largest entry."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, what
    scale = max(np.abs(expected).max(), 1e-30)
    error = np.abs(actual - expected).max() / scale
    assert error <= rtol, f"{what}: relative error {error:.2e} > {rtol}"


def _stacked(rng, shape, scale=1.0):
    z = ref.random_complex(rng, shape, scale)
    return z, cvk.to_stacked(z, "float64").astype("float32")


def _complex(part_real, part_imag):
    return to_numpy(part_real).astype(np.float64) + 1j * to_numpy(part_imag)


def _twins(cls, *args, **kwargs):
    """A block-form and a Gauss-form layer with the same weights."""
    return (
        cls(*args, complex_matmul="block", **kwargs),
        cls(*args, complex_matmul="gauss", **kwargs),
    )


def _same_weights(block, gauss, *inputs):
    block(*inputs)
    gauss(*inputs)
    gauss.set_weights(block.get_weights())


def _check_gradients(block, gauss, inputs, call=None):
    """The input and weight gradients of a weighted sum of the output, in
    both forms, agree to float32 rounding."""
    rng = np.random.default_rng(7)
    cache = {}  # one set of loss weights per output shape, for both forms

    def weights_for(shape):
        if shape not in cache:
            cache[shape] = rng.standard_normal(shape).astype("float32")
        return ops.convert_to_tensor(cache[shape])

    results = []
    for layer in (block, gauss):

        def loss(*xs, layer=layer):
            out = call(layer, *xs) if call else layer(*xs)
            return ops.sum(out * weights_for(tuple(out.shape)))

        results.append(gradients(loss, inputs, layer.trainable_variables))
    (loss_b, dx_b, dw_b), (loss_g, dx_g, dw_g) = results
    _close(loss_g, loss_b, RTOL, "loss")
    for a, b in zip(dx_g, dx_b):
        _close(a, b, RTOL, "d input")
    scale = max(np.abs(np.asarray(g)).max() for g in dw_b)
    for a, b, var in zip(dw_g, dw_b, block.trainable_variables):
        error = np.abs(np.asarray(a) - np.asarray(b)).max() / scale
        assert error <= RTOL, (var.path, error)


# ----------------------------------------------------------------------
# The helpers in cvattn_keras.complex.
# ----------------------------------------------------------------------


def test_gauss_product_is_the_complex_product(rng):
    x = ref.random_complex(rng, (5, 4))
    w = ref.random_complex(rng, (4, 3))
    real, imag = cx.gauss_product(x.real, x.imag, w.real, w.imag, np.matmul)
    np.testing.assert_allclose(real + 1j * imag, x @ w, rtol=1e-12)


def test_auto_takes_gauss_only_for_wide_static_products():
    wide = cx.GAUSS_MIN_SIZE
    assert cx.use_gauss("auto", wide, wide)
    assert not cx.use_gauss("auto", wide - 1, wide)
    assert not cx.use_gauss("auto", wide, wide - 1)
    assert not cx.use_gauss("auto", None, wide)  # unknown: block
    assert cx.use_gauss("gauss", 1, 1)
    assert not cx.use_gauss("block", 4 * wide, 4 * wide)


def test_export_never_takes_gauss():
    for weights_once in (True, False):
        with _tracing.for_export(weights_once=weights_once):
            assert _tracing.exporting()
            assert not cx.use_gauss("gauss", 1024, 1024)
    assert not _tracing.exporting()


@pytest.mark.parametrize(
    "make",
    [
        lambda v: cvk.layers.ComplexDense(3, complex_matmul=v),
        lambda v: cvk.layers.ComplexConv1D(3, 2, complex_matmul=v),
        lambda v: cvk.layers.ComplexMultiHeadAttention(2, 2, complex_matmul=v),
    ],
    ids=["dense", "conv", "attention"],
)
def test_bad_complex_matmul_is_rejected_by_name(make):
    for bad in ("fast", "", None, 3, True):
        with pytest.raises(ValueError, match="complex_matmul"):
            make(bad)
    assert make("GAUSS").complex_matmul == "gauss"  # any case


def test_core_functions_reject_a_bad_form():
    q = ops.ones((1, 3, 2, 4))
    with pytest.raises(ValueError, match="complex_matmul='x'"):
        att.complex_dot_product_attention(q, q, q, complex_matmul="x")
    with pytest.raises(ValueError, match="complex_matmul"):
        att.complex_scores(q, q, complex_matmul="fast")


# ----------------------------------------------------------------------
# Layers.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 6), (2, 5, 6)])
def test_dense_gauss_matches_numpy_and_block(rng, shape):
    z, x = _stacked(rng, shape)
    block, gauss = _twins(
        cvk.layers.ComplexDense, 5, bias_initializer="random_normal"
    )
    _same_weights(block, gauss, x)
    kernel = _complex(gauss.kernel_real, gauss.kernel_imag)
    bias = _complex(gauss.bias_real, gauss.bias_imag)
    out = cvk.from_stacked(to_numpy(gauss(x)), "complex128")
    _close(out, z @ kernel + bias)
    _close(to_numpy(gauss(x)), to_numpy(block(x)))
    _check_gradients(block, gauss, [x])


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(padding="valid"),
        dict(padding="same", strides=2),
        dict(padding="causal", dilation_rate=2),
    ],
    ids=["valid", "same-strided", "causal-dilated"],
)
def test_conv_gauss_matches_block(rng, kwargs):
    _, x = _stacked(rng, (2, 9, 4))
    block, gauss = _twins(
        cvk.layers.ComplexConv1D,
        3,
        3,
        bias_initializer="random_normal",
        **kwargs,
    )
    _same_weights(block, gauss, x)
    _close(to_numpy(gauss(x)), to_numpy(block(x)))
    _check_gradients(block, gauss, [x])


def test_conv_gauss_matches_numpy(rng):
    z, x = _stacked(rng, (2, 7, 4))
    layer = cvk.layers.ComplexConv1D(3, 3, complex_matmul="gauss")
    out = cvk.from_stacked(to_numpy(layer(x)), "complex128")
    kernel = _complex(layer.kernel_real, layer.kernel_imag)  # (k, in, f)
    expected = np.stack(
        [
            np.einsum("bki,kif->bf", z[:, t : t + 3], kernel)
            for t in range(z.shape[1] - 2)
        ],
        axis=1,
    )
    _close(out, expected)


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_attention_gauss_matches_numpy_and_block(rng, softmax, product):
    """Every product of the layer in Gauss's form (projections, scores,
    weights x values), with a padding and a causal mask: the NumPy
    complex128 layer, the block form, and the block form's gradients."""
    zq, q = _stacked(rng, (2, 6, 4))
    zv, v = _stacked(rng, (2, 5, 6))
    mask = rng.random((2, 6, 5)) > 0.3
    mask[1, 2] = False  # a query with nothing to attend
    block, gauss = _twins(
        cvk.layers.ComplexMultiHeadAttention,
        2,
        3,
        softmax=softmax,
        product=product,
        value_dim=2,
        bias_initializer="random_normal",
    )
    _same_weights(block, gauss, q, v)

    def call(layer, q, v):
        return layer(q, v, attention_mask=ops.convert_to_tensor(mask))

    out = cvk.from_stacked(to_numpy(call(gauss, q, v)), "complex128")
    params = {
        name: (
            _complex(d.kernel_real, d.kernel_imag),
            _complex(d.bias_real, d.bias_imag),
        )
        for name, d in (
            ("query", gauss.query_dense),
            ("key", gauss.key_dense),
            ("value", gauss.value_dense),
            ("output", gauss.output_dense),
        )
    }
    expected, _ = ref.multi_head_attention(
        zq, zv, zv, params, 2, softmax, product, 3**-0.5, mask
    )
    _close(out, expected)
    _close(to_numpy(call(gauss, q, v)), to_numpy(call(block, q, v)))
    _check_gradients(block, gauss, [q, v], call)


@pytest.mark.parametrize("softmax", ["abs", "naive"])
def test_core_products_in_gauss_form(rng, softmax):
    """complex_scores and apply_weights with complex_matmul="gauss": the
    complex128 scores and W v, per product."""
    shape = (2, 5, 3, 4)  # B, L, N, 2H
    zq, q = _stacked(rng, shape[:3] + (2,))
    zk, k = _stacked(rng, (2, 7, 3, 2))
    zv, v = _stacked(rng, (2, 7, 3, 3))
    q, k, v = (ops.convert_to_tensor(t) for t in (q, k, v))
    for product in att.PRODUCTS:
        scores = att.complex_scores(q, k, product, 0.5, complex_matmul="gauss")
        expected = ref.scores(
            zq.transpose(0, 2, 1, 3), zk.transpose(0, 2, 1, 3), product, 0.5
        )
        _close(cvk.from_stacked(to_numpy(scores), "complex128"), expected)
    weights = ref.random_complex(rng, (2, 3, 5, 7))
    stacked = ops.convert_to_tensor(
        cvk.to_stacked(weights, "float64").astype("float32")
    )
    out = att.apply_weights(stacked, v, softmax, complex_matmul="gauss")
    expected = np.einsum("bnts,bsnh->btnh", weights, zv)
    _close(cvk.from_stacked(to_numpy(out), "complex128"), expected)


def test_large_magnitude_inputs_stay_within_the_parity_tolerance(rng):
    """Inputs of modulus ~1e3 against weights of ~1 (the sums in Gauss's
    form meet cancellation where the block form adds products of one
    sign): both forms' errors against complex128, relative to the
    output's largest entry, stay within RTOL; Gauss's is at most a few
    times the block form's (measured ratio ~1-2)."""
    z, x = _stacked(rng, (64, 128), scale=1e3)
    block, gauss = _twins(cvk.layers.ComplexDense, 96, use_bias=False)
    _same_weights(block, gauss, x)
    kernel = _complex(block.kernel_real, block.kernel_imag)
    expected = z @ kernel
    errors = []
    for layer in (block, gauss):
        out = cvk.from_stacked(to_numpy(layer(x)), "complex128")
        _close(out, expected, RTOL, layer.complex_matmul)
        errors.append(np.abs(out - expected).max())
    assert errors[1] <= 4 * errors[0], errors


def test_complex_matmul_is_serialized(tmp_path):
    inputs = keras.Input((5, 8))
    x = cvk.layers.ComplexDense(4, complex_matmul="gauss")(inputs)
    x = cvk.layers.ComplexConv1D(4, 2, complex_matmul="block")(x)
    x = cvk.layers.ComplexMultiHeadAttention(
        2, 2, softmax="abs", complex_matmul="gauss"
    )(x, x)
    model = keras.Model(inputs, x)
    path = tmp_path / "gauss.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    forms = [
        layer.complex_matmul
        for layer in loaded.layers
        if hasattr(layer, "complex_matmul")
    ]
    assert forms == ["gauss", "block", "gauss"]
    data = np.random.default_rng(1).standard_normal((2, 5, 8))
    _close(to_numpy(loaded(data)), to_numpy(model(data)), 1e-6)


def test_mixed_precision_gauss_matches_float32(rng):
    """Under mixed_bfloat16 the Gauss form computes in bfloat16 like the
    block form: both within bfloat16 rounding (2^-8 relative per operand,
    ~1e-2 of the output's scale after a sum of 16 products) of float32."""
    _, x = _stacked(rng, (3, 4, 16))
    reference = cvk.layers.ComplexDense(8, complex_matmul="block")
    expected = to_numpy(reference(x))
    for form in ("block", "gauss"):
        layer = cvk.layers.ComplexDense(
            8, complex_matmul=form, dtype="mixed_bfloat16"
        )
        layer(x)
        layer.set_weights(reference.get_weights())
        out = layer(x)
        assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
        _close(to_numpy(ops.cast(out, "float32")), expected, 3e-2, form)


def test_transformer_blocks_pass_the_form_and_chunk_size_down(rng):
    """ComplexTransformerDecoder(complex_matmul=, chunk_size=) (the
    arguments are the shared block's, the encoder's too): every attention
    and feed-forward dense gets them, the config keeps them, and the
    output equals the block form's without chunks."""
    _, x = _stacked(rng, (2, 7, 8))
    for cls in (cvk.layers.ComplexTransformerDecoder,):
        block = cls(2, 6, softmax="naive", complex_matmul="block")
        gauss = cls(2, 6, softmax="naive", complex_matmul="gauss", chunk_size=3)
        inputs = (x,) if "Encoder" in cls.__name__ else (x, x)
        _same_weights(block, gauss, *inputs)
        sublayers = [gauss.self_attention, gauss.feedforward_in]
        sublayers += [gauss.feedforward_out]
        if hasattr(gauss, "cross_attention"):
            sublayers.append(gauss.cross_attention)
        assert {layer.complex_matmul for layer in sublayers} == {"gauss"}
        assert gauss.self_attention.chunk_size == 3
        config = gauss.get_config()
        assert (config["complex_matmul"], config["chunk_size"]) == ("gauss", 3)
        again = cls.from_config(config)
        assert (again.complex_matmul, again.chunk_size) == ("gauss", 3)
        _close(to_numpy(gauss(*inputs)), to_numpy(block(*inputs)), RTOL)
        with pytest.raises(ValueError, match="complex_matmul"):
            cls(2, complex_matmul="fastest")
        with pytest.raises(ValueError, match="chunk_size"):
            cls(2, chunk_size=0)


@pytest.mark.parametrize("form", ["auto", "gauss", "block"])
def test_an_unknown_key_length_traces_in_every_form(rng, form):
    """A variable-length functional model (key length unknown when
    traced): every variant traces, and runs, the attention's complex
    products in the block form."""
    data = rng.standard_normal((1, 5, 8)).astype("float32")
    for softmax in att.SOFTMAX_VARIANTS:
        inputs = keras.Input((None, 8))
        layer = cvk.layers.ComplexMultiHeadAttention(
            2, 2, softmax=softmax, complex_matmul=form
        )
        model = keras.Model(inputs, layer(inputs, inputs))
        assert tuple(model.output.shape) == (None, None, 8), softmax
        assert to_numpy(model(data)).shape == (1, 5, 8)


def test_auto_takes_gauss_from_the_threshold_on(rng, monkeypatch):
    """ComplexDense under "auto" calls gauss_product exactly when
    in_features and units are both GAUSS_MIN_SIZE or more."""
    calls = []
    original = cx.gauss_product

    def counting(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(cx, "gauss_product", counting)
    wide = cx.GAUSS_MIN_SIZE
    x = ops.ones((2, 2 * wide))
    cvk.layers.ComplexDense(wide)(x)
    assert len(calls) == 1
    cvk.layers.ComplexDense(wide - 1)(x)
    assert len(calls) == 1
    # The attention's projections from GAUSS_MIN_SIZE_PROJECTIONS on
    # (CAtt: no complex product in the attention itself).
    narrow = cx.GAUSS_MIN_SIZE_PROJECTIONS
    x = ops.ones((1, 2, 2 * narrow))
    cvk.layers.ComplexMultiHeadAttention(2, narrow // 2)(x, x)
    assert len(calls) == 1 + 4
    x = ops.ones((1, 2, 2 * narrow - 2))
    cvk.layers.ComplexMultiHeadAttention(1, narrow - 1)(x, x)
    assert len(calls) == 1 + 4


@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="keras.distribution has no PyTorch implementation",
)
def test_auto_keeps_the_block_form_under_model_parallel():
    devices = keras.distribution.list_devices()[:1]
    mesh = keras.distribution.DeviceMesh((1,), ["model"], devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    distribution = keras.distribution.ModelParallel(
        layout_map=layout_map, batch_dim_name="model"
    )
    wide = 2 * cx.GAUSS_MIN_SIZE
    assert cx.use_gauss("auto", wide, wide)
    with distribution.scope():
        assert not cx.use_gauss("auto", wide, wide)
        assert cx.use_gauss("gauss", wide, wide)


# ----------------------------------------------------------------------
# float16's range (issue 22, item 2).
# ----------------------------------------------------------------------


def _float16_twins(make, inputs, kernel_real, kernel_imag):
    """The block- and Gauss-form outputs, as float32 NumPy, of two
    mixed_float16 layers `make(form)` with the given kernels."""
    outputs = []
    for form in ("block", "gauss"):
        layer = make(form)
        layer.build(inputs.shape)
        layer.set_weights([kernel_real, kernel_imag])
        out = layer(inputs)
        assert keras.backend.standardize_dtype(out.dtype) == "float16"
        outputs.append(to_numpy(ops.cast(out, "float32")))
    return outputs


def test_gauss_under_float16_is_as_finite_as_the_block_form():
    """`x_r = x_i = 4e4` (the issue's case): `x_r + x_i` exceeds float16's
    65504, so Gauss's form computed in float16 gave -inf where the block
    form's results are finite. It computes in float32 and agrees."""
    x = np.full((1, 2), 4e4, "float32")  # one complex feature
    kernel_real = np.array([[0.5, -0.25]], "float32")
    kernel_imag = np.array([[0.125, 0.75]], "float32")
    block, gauss = _float16_twins(
        lambda form: cvk.layers.ComplexDense(
            2, use_bias=False, complex_matmul=form, dtype="mixed_float16"
        ),
        x,
        kernel_real,
        kernel_imag,
    )
    # (4e4 + 4e4 i)(W_r + i W_i): Re = 4e4 (W_r - W_i), Im = 4e4 (W_r + W_i).
    expected = 4e4 * np.concatenate(
        [kernel_real - kernel_imag, kernel_real + kernel_imag], axis=-1
    )
    np.testing.assert_allclose(block, expected, rtol=1e-3)
    np.testing.assert_allclose(gauss, expected, rtol=1e-3)


def test_auto_keeps_the_block_form_under_float16(monkeypatch):
    """The "auto" rule never takes Gauss's form for float16 operands (it
    would compute in float32, slower than the block form): the
    attention's projections from GAUSS_MIN_SIZE_PROJECTIONS features on,
    which take it under float32, do not under mixed_float16. bfloat16
    has float32's range: no change there; an explicit "gauss" is kept."""
    wide = 2 * cx.GAUSS_MIN_SIZE
    assert not cx.use_gauss("auto", wide, wide, dtype="float16")
    assert cx.use_gauss("auto", wide, wide, dtype="bfloat16")
    assert cx.use_gauss("auto", wide, wide, dtype="float32")
    assert cx.use_gauss("gauss", 1, 1, dtype="float16")
    calls = []
    original = cx.gauss_product

    def counting(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(cx, "gauss_product", counting)
    narrow = cx.GAUSS_MIN_SIZE_PROJECTIONS
    x = ops.ones((1, 2, 2 * narrow))
    layer = cvk.layers.ComplexMultiHeadAttention(
        1, narrow, dtype="mixed_float16"
    )
    out = layer(x, x)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert calls == []
    cvk.layers.ComplexMultiHeadAttention(1, narrow)(x, x)  # float32
    assert len(calls) == 4


# float16 values of every magnitude up to its largest, the extremes
# included; kernels up to 2 in modulus, so that a product of the largest
# inputs overflows in either form and one near the limit may or may not.
_FLOAT16 = st.floats(-65504, 65504, width=16)
_WEIGHT = st.floats(-2, 2, width=16)


@pytest.mark.parametrize("layer", ["dense", "conv"])
@settings(derandomize=True, max_examples=25, deadline=None)
@given(data=st.data())
def test_gauss_is_finite_wherever_the_block_form_is_in_float16(layer, data):
    """Under mixed_float16, for inputs near float16's limit: wherever the
    block form's output is finite, Gauss's is too, and there both are
    the exact product within float16 rounding."""
    if layer == "dense":
        x_shape, kernel_shape = (3, 4), (2, 3)

        def make(form):
            return cvk.layers.ComplexDense(
                3, use_bias=False, complex_matmul=form, dtype="mixed_float16"
            )

    else:
        x_shape, kernel_shape = (1, 3, 4), (2, 2, 3)

        def make(form):
            return cvk.layers.ComplexConv1D(
                3, 2, use_bias=False, complex_matmul=form, dtype="mixed_float16"
            )

    x = data.draw(hnp.arrays("float16", x_shape, elements=_FLOAT16))
    kernel_real, kernel_imag = (
        data.draw(hnp.arrays("float16", kernel_shape, elements=_WEIGHT))
        for _ in range(2)
    )
    x, kernel_real, kernel_imag = (
        a.astype("float32") for a in (x, kernel_real, kernel_imag)
    )
    block, gauss = _float16_twins(make, x, kernel_real, kernel_imag)
    finite = np.isfinite(block)
    assert np.isfinite(gauss[finite]).all(), (x, block, gauss)
    # The exact product, and the scale of its terms for the tolerance.
    z = x[..., :2].astype(np.float64) + 1j * x[..., 2:]
    w = kernel_real.astype(np.float64) + 1j * kernel_imag
    if layer == "dense":
        exact, scale = z @ w, np.abs(z) @ np.abs(w)
    else:
        exact = sum(z[:, k : k + 2] @ w[k] for k in range(2))
        scale = sum(np.abs(z[:, k : k + 2]) @ np.abs(w[k]) for k in range(2))
    exact = np.concatenate([exact.real, exact.imag], axis=-1)
    scale = np.concatenate([scale, scale], axis=-1)
    tolerance = 2.0**-9 * scale + 1e-3
    for out in (block, gauss):
        assert (np.abs(out - exact)[finite] <= tolerance[finite]).all()
