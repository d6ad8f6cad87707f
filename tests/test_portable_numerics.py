"""The export formulations compute the training formulation's numbers.

`cvattn_keras.export` traces models inside `attention.portable_masking()`
and, for the calibrated modes, `_tracing.for_export(plain_statistics=True)`:
the attention and the norms then take integer-friendly forms (masks as 0/1
factors, no NEG, rank-4 halves instead of rank-5 views, no power-of-two
rescaling of statistics). These tests check, on every backend, that both
ways give the NumPy complex128 reference's outputs, including masked and
fully masked rows and degenerate input, with finite gradients.
"""

import contextlib

import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import gradients
from backend_utils import to_numpy
from keras import ops
from models import NORMS
from models import norm_layer

import cvattn_keras as cvk
from cvattn_keras import _tracing
from cvattn_keras import attention as core

VARIANTS = [
    (softmax, product)
    for softmax in core.SOFTMAX_VARIANTS
    for product in core.PRODUCTS
]


@contextlib.contextmanager
def exporting():
    """The contexts `export_tflite` traces calibrated modes in."""
    with core.portable_masking(), _tracing.for_export(plain_statistics=True):
        yield


def both_ways(fn):
    """`fn()` outside and inside the export's contexts, as NumPy."""
    outside = to_numpy(fn())
    with exporting():
        inside = to_numpy(fn())
    return outside, inside


def _heads(rng, batch, length, heads, width, scale=1.0):
    """Per-head stacked tensors `(B, L, N, 2W)` and their complex form
    `(B, N, L, W)`."""
    z = ref.random_complex(rng, (batch, length, heads, width), scale)
    return cvk.to_stacked(z).astype("float32"), np.moveaxis(z, 2, 1)


def _mask(batch, length, keys):
    """Causal over the first `keys` positions, with a fully masked row
    (batch 0, query 1) and a padded key (batch 1, key 0)."""
    mask = np.tril(np.ones((length, keys), bool))
    mask = np.repeat(mask[None], batch, 0)
    mask[0, 1] = False
    mask[1, :, 0] = False
    return mask


def _weighted_sum(y):
    """A loss weighting every output differently (a plain sum could hide
    gradients that cancel)."""
    size = int(np.prod(y.shape))
    weights = ops.reshape(ops.cast(ops.arange(1, size + 1), y.dtype), y.shape)
    return ops.sum(y * weights)


# float32 arithmetic against complex128: scores and weights of order 1,
# errors a few float32 ulps (measured below 1e-6); 2e-5 leaves margin.
ATTENTION_TOLERANCE = 2e-5


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_attention_is_the_same_inside_the_export_contexts(
    rng, softmax, product
):
    q, qc = _heads(rng, 2, 5, 2, 3)
    k, kc = _heads(rng, 2, 5, 2, 3)
    v, vc = _heads(rng, 2, 5, 2, 4)
    mask = _mask(2, 5, 5)

    def run():
        return core.complex_dot_product_attention(
            q, k, v, softmax=softmax, product=product, mask=mask
        )

    outside, inside = both_ways(run)
    expected, _ = ref.attention(
        qc, kc, vc, softmax, product, 3**-0.5, mask[:, None]
    )
    expected = cvk.to_stacked(np.moveaxis(expected, 1, 2))
    for got in (outside, inside):
        np.testing.assert_allclose(
            got, expected, rtol=0, atol=ATTENTION_TOLERANCE
        )
    # The fully masked row gives exactly 0 both ways.
    assert not np.any(inside[0, 1]) and not np.any(outside[0, 1])


@pytest.mark.parametrize("softmax", core.SOFTMAX_VARIANTS)
def test_portable_weights_are_the_reference_weights(rng, softmax):
    """`attention_weights` itself (stacked in, stacked out), fully masked
    rows all 0."""
    scores = ref.random_complex(rng, (2, 2, 4, 6), 3.0)
    mask = _mask(2, 4, 6)
    stacked = scores.real if softmax == "real" else cvk.to_stacked(scores)
    with exporting():
        got = to_numpy(
            core.attention_weights(
                stacked.astype("float32"), softmax, mask=mask
            )
        )
    expected = ref.weights(scores, softmax, mask[:, None])
    if softmax in ("real", "absonly"):
        expected = expected.real
    else:
        expected = cvk.to_stacked(expected)
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATTENTION_TOLERANCE)
    assert not np.any(got[0, :, 1])


@pytest.mark.parametrize("softmax", core.SOFTMAX_VARIANTS)
@pytest.mark.parametrize("kind", ["zeros", "constant"])
def test_degenerate_attention_is_finite_with_finite_gradients(softmax, kind):
    """All-zero (scores 0: the modulus at 0) and constant tokens, a fully
    masked row: finite outputs and gradients inside the export contexts."""
    shape = (2, 4, 2, 6)
    value = 0.0 if kind == "zeros" else 0.5
    q = np.full(shape, value, "float32")
    k = np.full(shape, value, "float32")
    v = np.linspace(-1, 1, np.prod(shape), dtype="float32").reshape(shape)
    mask = _mask(2, 4, 4)

    def loss(q, k, v):
        out = core.complex_dot_product_attention(
            q, k, v, softmax=softmax, mask=mask
        )
        return _weighted_sum(out)

    with exporting():
        out = to_numpy(
            core.complex_dot_product_attention(
                q, k, v, softmax=softmax, mask=mask
            )
        )
        value, grads, _ = gradients(loss, [q, k, v])
    assert np.all(np.isfinite(out)) and np.isfinite(value)
    assert not np.any(out[0, 1])  # fully masked row
    for grad in grads:
        assert np.all(np.isfinite(grad))


# float32 statistics against float64: whitened outputs of order 1, the
# plain determinant loses at most cond(C) ulps on these well-conditioned
# tokens (measured below 2e-6); 1e-4 leaves margin.
NORM_TOLERANCE = 1e-4


@pytest.mark.parametrize("name", NORMS)
def test_norms_are_the_same_inside_the_export_contexts(rng, name):
    z = ref.random_complex(rng, (3, 5, 6), 4.0) + (1 - 0.5j)
    x = cvk.to_stacked(z).astype("float32")
    layer = norm_layer(name)
    # The reference's batch norm is the training one (batch statistics).
    kwargs = dict(training=True) if name == "batch" else {}
    outside, inside = both_ways(lambda: layer(x, **kwargs))
    expected = cvk.to_stacked(ref.norm_at_init(name, z))
    for got in (outside, inside):
        np.testing.assert_allclose(got, expected, rtol=0, atol=NORM_TOLERANCE)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(estimator="biased"),
        dict(method="naive"),
    ],
    ids=["reference", "biased", "naive"],
)
def test_trained_layer_norm_parameters_inside_the_export_contexts(rng, kwargs):
    """Non-trivial scale and bias (and an improper, offset input)."""
    layer = cvk.layers.ComplexLayerNormalization(**kwargs)
    z = ref.improper(rng, (4, 6), 0.7, 0.5, 3.0, 2.0 - 1j)
    x = cvk.to_stacked(z).astype("float32")
    layer.build(x.shape)
    for weight in layer.weights:
        weight.assign(rng.uniform(0.5, 1.5, weight.shape))
    outside, inside = both_ways(lambda: layer(x))
    np.testing.assert_allclose(inside, outside, rtol=0, atol=NORM_TOLERANCE)


@pytest.mark.parametrize("name", ["batch", "layer", "layer-biased"])
@pytest.mark.parametrize("scale", [0.1, 0.01, 0.003])
def test_whitening_of_quiet_improper_tokens_inside_the_export_contexts(
    rng, name, scale
):
    """Tokens whose variance is near the norms' epsilon (1e-5 at scale
    0.003: near-silent frames), improper (a nearly singular covariance):
    the plain statistics whiten them as `(C + epsilon)^-1/2` does, against
    float64. (A determinant that added epsilon^2 to `det(C + epsilon)`
    was off by 3% at scale 0.01 and 16% at 0.003.)"""
    z = ref.improper(rng, (3, 5, 6), 0.8, 0.05, scale, 0.2 * scale)
    x = cvk.to_stacked(z).astype("float32")
    layer = norm_layer(name)
    kwargs = dict(training=True) if name == "batch" else {}
    outside, inside = both_ways(lambda: layer(x, **kwargs))
    expected = cvk.to_stacked(ref.norm_at_init(name, z))
    # Outputs of order 1 (whitened); float32 statistics of a nearly
    # singular covariance lose about cond(C) ulps (cond ~ 1e3 here).
    for got in (outside, inside):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-3)


def test_rms_norm_with_a_complex_scale_inside_the_export_contexts(rng):
    layer = cvk.layers.ComplexRMSNormalization(complex_scale=True)
    z = ref.random_complex(rng, (3, 4, 5), 10.0)
    x = cvk.to_stacked(z).astype("float32")
    layer.build(x.shape)
    layer.scale_real.assign(rng.uniform(0.5, 1.5, 5))
    layer.scale_imag.assign(rng.uniform(-1, 1, 5))
    outside, inside = both_ways(lambda: layer(x))
    g = to_numpy(layer.scale_real) + 1j * to_numpy(layer.scale_imag)
    power = (np.abs(z) ** 2).mean(-1, keepdims=True)
    expected = cvk.to_stacked(z / np.sqrt(power + 1e-6) * g)
    for got in (outside, inside):
        np.testing.assert_allclose(got, expected, rtol=0, atol=NORM_TOLERANCE)


@pytest.mark.parametrize("name", NORMS)
@pytest.mark.parametrize("kind", ["zeros", "constant"])
def test_degenerate_norm_input_is_finite_with_finite_gradients(name, kind):
    """All-zero and constant tokens: the default path's outputs (the bias,
    0 at init, for the centring norms), finite gradients, inside the
    export contexts."""
    x = np.zeros((2, 3, 8), "float32")
    if kind == "constant":
        x[..., :4], x[..., 4:] = 1.5, -0.5
    layer = norm_layer(name)
    layer.build(x.shape)

    def loss(x):
        return _weighted_sum(layer(x))

    outside = to_numpy(layer(x))
    with exporting():
        out = to_numpy(layer(x))
        value, (grad,), variable_grads = gradients(
            loss, [x], layer.trainable_variables
        )
    assert np.all(np.isfinite(out)) and np.isfinite(value)
    np.testing.assert_allclose(out, outside, rtol=0, atol=NORM_TOLERANCE)
    if name not in ("batch", "rms"):  # centred: the bias (0)
        np.testing.assert_array_equal(out, 0.0)
    assert np.all(np.isfinite(grad))
    for g in variable_grads:
        assert np.all(np.isfinite(g))


def test_the_default_formulation_is_untouched_outside_the_contexts(rng):
    """Leaving the contexts restores the default graph: the same numbers
    before and after (bit for bit), whatever was traced in between."""
    layer = cvk.layers.ComplexLayerNormalization()
    attention = cvk.layers.ComplexMultiHeadAttention(2, 3, softmax="abs")
    x = cvk.to_stacked(ref.random_complex(rng, (2, 5, 4))).astype("float32")

    def run():
        y = layer(x)
        return to_numpy(attention(y, y, use_causal_mask=True))

    before = run()
    with exporting():
        run()
    np.testing.assert_array_equal(run(), before)
    assert not _tracing.plain_statistics() and _tracing.fill_masked()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_portable_attention_under_mixed_precision(rng, dtype):
    """Half-precision operands: the softmax still computes in float32,
    fully masked rows stay 0 (no -inf fill)."""
    q, _ = _heads(rng, 2, 4, 2, 3)
    mask = _mask(2, 4, 4)
    with core.portable_masking():
        out = to_numpy(
            core.complex_dot_product_attention(
                ops.cast(q, dtype),
                ops.cast(q, dtype),
                ops.cast(q, dtype),
                softmax="abs",
                mask=mask,
            )
        ).astype("float32")
    assert np.all(np.isfinite(out)) and not np.any(out[0, 1])
