"""Property-based tests of the numerics hardened for issue 11 (items 1-6,
13): moduli, signs and activations over the float32 range, whitening
accuracy on improper features, scale invariance of every norm, masked
batch statistics, and validators that reject non-finite numbers.

Each property is derandomized and bounded (a few examples, no deadline) so
that CI stays fast and deterministic.
"""

import math

import models
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import to_numpy
from backend_utils import value_and_gradients
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from keras import ops

import cvattn_keras as cvk
from cvattn_keras import activations
from cvattn_keras import complex as cx
from cvattn_keras.layers import ComplexBatchNormalization
from cvattn_keras.layers import ComplexLayerNormalization
from cvattn_keras.layers import ComplexMultiHeadAttention
from cvattn_keras.layers import ComplexRMSNormalization
from cvattn_keras.layers import ComplexTransformerDecoder
from cvattn_keras.layers import ComplexTransformerEncoder
from cvattn_keras.layers import ModReLU

EPS32 = float(np.finfo(np.float32).eps)


def _settings(examples):
    return settings(derandomize=True, max_examples=examples, deadline=None)


# A float32 number anywhere in the normal range whose modulus stays
# representable: sign, mantissa in [1, 2), exponent in [-120, 120] (base 2),
# or exactly 0.
parts = st.one_of(
    st.just(0.0),
    st.builds(
        lambda s, m, e: s * m * 2.0**e,
        st.sampled_from([-1.0, 1.0]),
        st.floats(1.0, 2.0, exclude_max=True),
        st.integers(-120, 120),
    ),
)
complex_vectors = st.lists(st.tuples(parts, parts), min_size=1, max_size=6).map(
    lambda pairs: np.array([[complex(a, b) for a, b in pairs]])
)


@_settings(40)
@given(complex_vectors)
def test_modulus_and_sign_over_the_float32_range(z):
    x = cvk.to_stacked(z)
    z = cvk.from_stacked(x, "complex128")  # the float32 values exactly
    magnitude, phase = cx.modulus_and_sign(x)
    # A few float32 roundings of a scaled computation: rtol 4 eps.
    np.testing.assert_allclose(
        to_numpy(magnitude), np.abs(z), rtol=4 * EPS32, atol=0
    )
    expected = np.where(z != 0, z / np.where(z != 0, np.abs(z), 1), 0)
    np.testing.assert_allclose(
        cvk.from_stacked(phase, "complex128"), expected, rtol=0, atol=4 * EPS32
    )
    _, grad, _ = value_and_gradients(cx.modulus, x)
    assert np.all(np.isfinite(grad))
    assert np.all(grad[np.concatenate([z == 0, z == 0], -1)] == 0)


_MODRELU = ModReLU()


@_settings(25)
@given(complex_vectors)
def test_modrelu_and_cardioid_over_the_float32_range(z):
    x = cvk.to_stacked(z)
    z = cvk.from_stacked(x, "complex128")
    phase = np.where(z != 0, z / np.where(z != 0, np.abs(z), 1), 0)
    layer = _MODRELU  # bias 0: the identity
    np.testing.assert_allclose(
        cvk.from_stacked(layer(x), "complex128"), z, rtol=4 * EPS32, atol=0
    )
    cardioid = activations.cardioid(ops.convert_to_tensor(x))
    # 1 + cos(arg z) cancels near arg z = pi: bound the error by 8 eps |z|
    # (absolute in units of |z|), not relative to the small output.
    error = np.abs(
        cvk.from_stacked(cardioid, "complex128") - 0.5 * (1 + phase.real) * z
    )
    assert np.all(error <= 8 * EPS32 * np.abs(z))
    _, grad, _ = value_and_gradients(layer, x)
    assert np.all(np.isfinite(grad))


@_settings(24)
@given(
    norm=st.sampled_from(["batch", "layer-biased", "layer-reference"]),
    scale_exponent=st.integers(-3, 10),
    correlation=st.floats(-2.0, 2.0),
    noise_exponent=st.integers(-3, 0),
    seed=st.integers(0, 2**16),
)
def test_whitening_error_is_bounded_by_the_condition_number(
    norm, scale_exponent, correlation, noise_exponent, seed
):
    """The whitened output of improper features matches float64 within
    16 eps sqrt(cond(C)) (see test_normalization for the measurement)."""
    rng = np.random.default_rng(seed)
    scale, noise = 10.0**scale_exponent, 10.0**noise_exponent
    if norm == "batch":
        z = ref.improper(rng, (12, 4, 3), correlation, noise, scale, scale)
        x = cvk.to_stacked(z)
        y = ComplexBatchNormalization()(x, training=True)
        want, cond = ref.whiten(cvk.from_stacked(x, "complex128"), (0, 1), 1e-5)
        want = want / math.sqrt(2)
    else:
        z = ref.improper(rng, (4, 24), correlation, noise, scale, -scale)
        x = cvk.to_stacked(z)
        estimator = norm.split("-")[1]
        y = ComplexLayerNormalization(estimator=estimator)(x)
        offset = 1 if estimator == "reference" else 0
        want, cond = ref.whiten(
            cvk.from_stacked(x, "complex128"), (-1,), 1e-5, offset
        )
    tolerance = 16 * EPS32 * math.sqrt(cond.max())
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), want, rtol=0, atol=tolerance
    )


@_settings(15)
@given(
    name=st.sampled_from(models.NORMS),
    exponent=st.integers(-36, 36),
    seed=st.integers(0, 2**16),
)
def test_every_norm_is_scale_invariant(name, exponent, seed):
    """Outputs match float64 (with epsilon in the data's units) at every
    scale from 1e-36 to 1e36, with finite gradients."""
    rng = np.random.default_rng(seed)
    scale = 10.0**exponent
    z = ref.random_complex(rng, (3, 4, 6), scale) + 0.25 * scale
    x = cvk.to_stacked(z)
    layer = models.norm_layer(name)
    kwargs = {"training": True} if name == "batch" else {}
    layer(x, **kwargs)
    y, grad, grad_vars = value_and_gradients(layer, x, layer=layer, **kwargs)
    want = ref.norm_at_init(name, cvk.from_stacked(x, "complex128"))
    size = np.abs(want).max()
    # 1e-5 of the output's size: float32 statistics of 24-72 samples.
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), want, rtol=0, atol=1e-5 * size
    )
    assert np.all(np.isfinite(grad))
    assert all(np.all(np.isfinite(g)) for g in grad_vars)


@_settings(12)
@given(
    mask=st.lists(st.booleans(), min_size=12, max_size=12),
    seed=st.integers(0, 2**16),
)
def test_batch_norm_statistics_leave_masked_steps_out(mask, seed):
    """The moving statistics after one step equal those of the unmasked
    steps alone; with every step masked they do not move."""
    rng = np.random.default_rng(seed)
    mask = np.array(mask).reshape(3, 4)
    z = ref.random_complex(rng, (3, 4, 2), 2.0) + 0.5
    padded = cvk.to_stacked(z)
    padded[~mask] = 1e30  # padding that must not count
    layer = ComplexBatchNormalization(momentum=0.5)
    y = layer(padded, training=True, mask=mask)
    assert np.all(np.isfinite(to_numpy(y)[mask]))
    moving = [
        to_numpy(w).astype("float64") for w in layer.non_trainable_weights
    ]
    if not mask.any():
        initial = [np.zeros(2), np.zeros(2), np.full(2, 0.5)]
        expected = initial + [np.full(2, 0.5), np.zeros(2)]
    else:
        kept = cvk.from_stacked(cvk.to_stacked(z), "complex128")[mask]
        centred = kept - kept.mean(0)
        batch = [
            kept.mean(0).real,
            kept.mean(0).imag,
            (centred.real**2).mean(0),
            (centred.imag**2).mean(0),
            (centred.real * centred.imag).mean(0),
        ]
        initial = [0.0, 0.0, 0.5, 0.5, 0.0]
        expected = [0.5 * i + 0.5 * b for i, b in zip(initial, batch)]
    for got, want in zip(moving, expected):
        # float32 statistics of at most 12 samples of size ~3.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


NON_FINITE = st.sampled_from([math.inf, -math.inf, math.nan])

CONSTRUCTORS = {
    "epsilon": [
        lambda v: ComplexLayerNormalization(epsilon=v),
        lambda v: ComplexRMSNormalization(epsilon=v),
        lambda v: ComplexBatchNormalization(epsilon=v),
    ],
    "momentum": [lambda v: ComplexBatchNormalization(momentum=v)],
    "scale": [lambda v: ComplexMultiHeadAttention(2, 4, scale=v)],
    "layer_norm_epsilon": [
        lambda v: ComplexTransformerEncoder(2, layer_norm_epsilon=v),
        lambda v: ComplexTransformerDecoder(2, layer_norm_epsilon=v),
    ],
}


@_settings(20)
@given(
    name=st.sampled_from(sorted(CONSTRUCTORS)),
    index=st.integers(0, 2),
    value=NON_FINITE,
)
def test_float_arguments_reject_inf_and_nan(name, index, value):
    """Issue 11, item 5: `scale=inf` gave NaN attention outputs and
    `epsilon=inf` / `layer_norm_epsilon=inf` NaN norms. Every float argument
    checked by the shared validators names itself and echoes the value."""
    makers = CONSTRUCTORS[name]
    make = makers[index % len(makers)]
    with pytest.raises(ValueError, match=f"{name}={value!r}"):
        make(value)
