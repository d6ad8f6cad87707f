"""`ComplexBatchNormalization(convention="reference")` against a NumPy
float64 implementation of the reference's `Complex_BatchNorm1d` formulas
(reference-semantics.md, "The MusicNet models and their state dicts"),
written here with none of the library's code."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import compiled
from backend_utils import has_float64
from backend_utils import to_numpy
from backend_utils import value_and_gradients

import cvattn_keras as cvk
from cvattn_keras.layers import ComplexBatchNormalization

MOVING = (
    "moving_mean_real",
    "moving_mean_imag",
    "moving_whitening_rr",
    "moving_whitening_ri",
    "moving_whitening_ir",
    "moving_whitening_ii",
)


# --------------------------------------------------------------------------
# The NumPy reference (float64 / complex128).
# --------------------------------------------------------------------------


def _sym_power(m, power):
    """`m^power` of symmetric positive (semi-)definite 2x2 matrices
    `(..., 2, 2)` by eigendecomposition."""
    values, vectors = np.linalg.eigh(m)
    values = np.maximum(values, 0.0) ** power
    return (vectors * values[..., None, :]) @ np.swapaxes(vectors, -1, -2)


def _gamma_sqrt(w0, w1, w2):
    """sqrtm(Gamma) `(C, 2, 2)`, Gamma = [[w0^2, rho], [rho, w1^2]],
    rho = (2 sigmoid(w2) - 1) sqrt(w0^2 w1^2)."""
    rho = (2.0 / (1.0 + np.exp(-w2)) - 1.0) * np.sqrt(w0**2 * w1**2)
    gamma = np.stack(
        [np.stack([w0**2, rho], -1), np.stack([rho, w1**2], -1)], -2
    )
    return _sym_power(gamma, 0.5)


def reference_batch_norm(
    z, params, momentum, epsilon, training, mask=None, samples=None
):
    """The reference's Complex_BatchNorm1d on complex `z` (B, L, C).

    `params`: dict of float64 arrays named like the layer's variables
    (`w0`... absent without scale, `bias_*` absent without center).
    `samples`: the N of the unbiased variances' factor N / (N - 1) on the
    biased ones (default: the number of unmasked samples).
    Returns the complex output and, in training, the updated moving
    statistics (Keras' momentum sense: `m old + (1 - m) batch`)."""
    channels = z.shape[-1]
    moving = {}
    if training:
        keep = np.ones(z.shape[:-1], bool) if mask is None else mask
        data = z[keep]  # (N, C)
        n = data.shape[0]
        mu = data.mean(0)
        centred = data - mu
        samples = n if samples is None else samples
        # Unbiased: the biased variance times N / (N - 1).
        unbiased = samples / (samples - 1)
        v_rr = (centred.real**2).mean(0) * unbiased + epsilon
        v_ii = (centred.imag**2).mean(0) * unbiased + epsilon
        v_ri = (centred.real * centred.imag).mean(0)  # biased
        cov = np.stack(
            [np.stack([v_rr, v_ri], -1), np.stack([v_ri, v_ii], -1)], -2
        )
        whitening = np.linalg.inv(_sym_power(cov, 0.5))  # R, (C, 2, 2)
        assert n > 1
        batch = {
            "moving_mean_real": mu.real,
            "moving_mean_imag": mu.imag,
            "moving_whitening_rr": whitening[:, 0, 0],
            "moving_whitening_ri": whitening[:, 0, 1],
            "moving_whitening_ir": whitening[:, 1, 0],
            "moving_whitening_ii": whitening[:, 1, 1],
        }
        for name in MOVING:
            moving[name] = (
                momentum * params[name] + (1 - momentum) * batch[name]
            )
    else:
        mu = params["moving_mean_real"] + 1j * params["moving_mean_imag"]
        whitening = np.stack(
            [
                np.stack(
                    [
                        params["moving_whitening_rr"],
                        params["moving_whitening_ri"],
                    ],
                    -1,
                ),
                np.stack(
                    [
                        params["moving_whitening_ir"],
                        params["moving_whitening_ii"],
                    ],
                    -1,
                ),
            ],
            -2,
        )
    if "w0" in params:
        matrix = whitening @ _gamma_sqrt(
            params["w0"], params["w1"], params["w2"]
        )
    else:
        matrix = whitening
    centred = z - mu
    vec = np.stack([centred.real, centred.imag], -1)[..., None]
    out = (matrix.reshape(channels, 2, 2) @ vec)[..., 0]
    y = out[..., 0] + 1j * out[..., 1]
    if "bias_real" in params:
        y = y + params["bias_real"] + 1j * params["bias_imag"]
    return y, moving


def _randomize(layer, rng, whitening="random"):
    """Random trainable and moving values, set with `assign`; returns them
    as float64 arrays by variable name."""
    params = {}
    for variable in layer.weights:
        name = variable.name
        shape = tuple(variable.shape)
        if name.startswith("moving_whitening"):
            if whitening == "random":
                value = rng.standard_normal(shape) * 0.3
                if name[-2] == name[-1]:  # rr, ii: a well-scaled diagonal
                    value = value + 1.0
            else:  # "zero"
                value = np.zeros(shape)
        elif name.startswith("moving_mean"):
            value = rng.standard_normal(shape) * 0.5
        else:
            value = rng.standard_normal(shape)
        variable.assign(value.astype("float32"))
        params[name] = value.astype("float32").astype("float64")
    return params


def _values(layer):
    return {v.name: to_numpy(v).astype("float64") for v in layer.weights}


def _data(rng, shape, scale=1.0):
    """Correlated (improper) parts and a non-zero mean, representable in
    complex64 (the layer's float32 inputs are exactly these numbers)."""
    z = ref.random_complex(rng, shape) * (1.5 - 0.7j) + (0.4 + 0.2j)
    z = scale * (z + 0.6 * np.conj(z))
    return z.astype("complex64").astype("complex128")


def _layer(**kwargs):
    options = {"momentum": 0.3, "epsilon": 1e-9, "convention": "reference"}
    return ComplexBatchNormalization(**{**options, **kwargs})


# float32 arithmetic (eps 1.2e-7) on O(1) data: sums over 40 samples,
# a 2x2 inverse square root of a covariance of condition number about 10
# and two 2x2 products. Measured errors are below 1e-6 (20 seeds, outputs
# and moving statistics, training and inference); 2e-5 leaves a
# margin while a wrong formula (divisor, order of R and sqrtm(Gamma),
# momentum sense) is off by 1e-2 or more.
TOL = 2e-5


# --------------------------------------------------------------------------
# Arithmetic.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("scale, center", [(True, True), (False, False)])
def test_training_matches_the_reference_formulas(rng, scale, center):
    z = _data(rng, (4, 10, 3))
    layer = _layer(scale=scale, center=center)
    layer.build((None, 10, 6))
    params = _randomize(layer, rng)
    y = layer(cvk.to_stacked(z), training=True)
    expected, moving = reference_batch_norm(z, params, 0.3, 1e-9, True)
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, rtol=TOL, atol=TOL
    )
    values = _values(layer)
    for name in MOVING:
        np.testing.assert_allclose(
            values[name], moving[name], rtol=TOL, atol=TOL, err_msg=name
        )
    # The trainable parameters are untouched by a training step.
    for name in set(params) - set(MOVING):
        np.testing.assert_array_equal(values[name], params[name])


def test_epsilon_is_added_to_the_unbiased_variances(rng):
    """A large epsilon makes its place visible: added to the unbiased
    variances, not to the biased ones nor to R."""
    z = _data(rng, (2, 3, 2), scale=0.1)
    layer = _layer(epsilon=0.05)
    layer.build((None, 3, 4))
    params = _randomize(layer, rng)
    y = layer(cvk.to_stacked(z), training=True)
    expected, moving = reference_batch_norm(z, params, 0.3, 0.05, True)
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, rtol=TOL, atol=TOL
    )
    values = _values(layer)
    for name in MOVING:
        np.testing.assert_allclose(values[name], moving[name], atol=TOL)


@pytest.mark.parametrize("scale, center", [(True, True), (False, True)])
def test_inference_matches_the_reference_formulas(rng, scale, center):
    """R_moving sqrtm(Gamma) (z - moving_mean) + bias, with a random,
    non-symmetric moving R (a loaded checkpoint may hold any 2x2)."""
    z = _data(rng, (3, 7, 4))
    layer = _layer(scale=scale, center=center)
    layer.build((None, 7, 8))
    params = _randomize(layer, rng)
    assert not np.allclose(
        params["moving_whitening_ri"], params["moving_whitening_ir"]
    )
    y = layer(cvk.to_stacked(z))
    expected, _ = reference_batch_norm(z, params, 0.3, 1e-9, False)
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, rtol=TOL, atol=TOL
    )
    # Inference leaves every variable as it is.
    for name, value in _values(layer).items():
        np.testing.assert_array_equal(value, params[name])


def test_r_is_applied_after_sqrtm_gamma(rng):
    """The order matters when R and sqrtm(Gamma) do not commute: the other
    order (the LayerNorm's) gives a different output."""
    z = _data(rng, (2, 5, 2))
    layer = _layer()
    layer.build((None, 5, 4))
    params = _randomize(layer, rng)
    y = cvk.from_stacked(layer(cvk.to_stacked(z)), "complex128")
    expected, _ = reference_batch_norm(z, params, 0.3, 1e-9, False)
    np.testing.assert_allclose(y, expected, rtol=TOL, atol=TOL)
    mu = params["moving_mean_real"] + 1j * params["moving_mean_imag"]
    centred = z - mu
    vec = np.stack([centred.real, centred.imag], -1)[..., None]
    r = np.stack(
        [
            np.stack(
                [params["moving_whitening_rr"], params["moving_whitening_ri"]],
                -1,
            ),
            np.stack(
                [params["moving_whitening_ir"], params["moving_whitening_ii"]],
                -1,
            ),
        ],
        -2,
    )
    s = _gamma_sqrt(params["w0"], params["w1"], params["w2"])
    wrong = (s @ r @ vec)[..., 0]
    wrong = wrong[..., 0] + 1j * wrong[..., 1]
    wrong = wrong + params["bias_real"] + 1j * params["bias_imag"]
    assert np.abs(y - wrong).max() > 1e-2


@pytest.mark.skipif(not has_float64(), reason="the backend lacks float64")
@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="Keras' torch backend returns float32 from ops.maximum and "
    "ops.ceil of float64 tensors (measured: 2e-8 errors here)",
)
def test_float64_policy_matches_to_double_precision(rng):
    """Under a float64 policy the layer computes in float64: the reference
    formulas hold to 1e-10 (the 1e-12 determinant floor of sqrtm(Gamma)
    moves the output by about 1e-12)."""
    z = _data(rng, (3, 6, 2))
    layer = _layer(dtype="float64")
    layer.build((None, 6, 4))
    params = _randomize(layer, rng)
    params = {v.name: to_numpy(v).astype("float64") for v in layer.weights}
    y = layer(cvk.to_stacked(z).astype("float64"), training=True)
    expected, moving = reference_batch_norm(z, params, 0.3, 1e-9, True)
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, rtol=1e-10, atol=1e-10
    )
    values = _values(layer)
    for name in MOVING:
        np.testing.assert_allclose(
            values[name], moving[name], rtol=1e-10, atol=1e-10
        )
    y = layer(cvk.to_stacked(z).astype("float64"))
    expected, _ = reference_batch_norm(z, values, 0.3, 1e-9, False)
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, rtol=1e-10, atol=1e-10
    )


def test_initial_state_and_two_training_steps(rng):
    """Initially R = I and mean 0 (the reference's placeholder): inference
    before training is `sqrtm(Gamma) z + bias` (here z). Two steps average
    with momentum in Keras' sense (the reference's first step would store
    the batch statistics without averaging: a documented difference)."""
    z = _data(rng, (4, 6, 2))
    layer = _layer(momentum=0.5)
    x = cvk.to_stacked(z)
    np.testing.assert_allclose(to_numpy(layer(x)), x, atol=1e-6)
    params = _values(layer)
    np.testing.assert_array_equal(params["moving_whitening_rr"], 1.0)
    np.testing.assert_array_equal(params["moving_whitening_ri"], 0.0)
    for step in range(2):
        batch = z[:, 3 * step : 3 * step + 3]
        layer(cvk.to_stacked(batch), training=True)
        _, params = reference_batch_norm(
            batch, {**_values(layer), **params}, 0.5, 1e-9, True
        )
        params = {**_values(layer), **params}
    for name in MOVING:
        np.testing.assert_allclose(
            _values(layer)[name], params[name], rtol=TOL, atol=TOL
        )


def test_gradients_match_finite_differences_of_the_reference(rng):
    """Training-mode gradients with respect to the input (through the
    statistics) and to w0, w1, w2 and the bias, against central differences
    of the float64 reference. Tolerance 2e-3 relative to the largest
    gradient: float32 gradients (eps 1.2e-7) through a 2x2 inverse square
    root; the differences themselves are accurate to about 1e-8."""
    z = _data(rng, (3, 4, 2))
    layer = _layer()
    layer.build((None, 4, 4))
    params = _randomize(layer, rng)
    x = cvk.to_stacked(z).astype("float32")
    size = x.size
    weights = np.arange(1, size + 1).reshape(x.shape) / size

    def loss(x, params):
        zz = x[..., :2] + 1j * x[..., 2:]
        y, _ = reference_batch_norm(zz, params, 0.3, 1e-9, True)
        return float(np.sum(np.concatenate([y.real, y.imag], -1) * weights))

    _, grad_x, grad_w = value_and_gradients(
        layer, x, layer=layer, training=True
    )
    h = 1e-6
    base = x.astype("float64")
    numeric = np.zeros_like(base)
    for index in np.ndindex(base.shape):
        up, down = base.copy(), base.copy()
        up[index] += h
        down[index] -= h
        numeric[index] = (loss(up, params) - loss(down, params)) / (2 * h)
    np.testing.assert_allclose(
        grad_x, numeric, atol=2e-3 * np.abs(numeric).max()
    )
    for variable, grad in zip(layer.trainable_variables, grad_w):
        numeric = np.zeros(tuple(variable.shape))
        for i in range(numeric.size):
            up, down = dict(params), dict(params)
            up[variable.name] = params[variable.name].copy()
            down[variable.name] = params[variable.name].copy()
            up[variable.name][i] += h
            down[variable.name][i] -= h
            numeric[i] = (loss(base, up) - loss(base, down)) / (2 * h)
        np.testing.assert_allclose(
            grad,
            numeric,
            atol=2e-3 * np.abs(numeric).max(),
            err_msg=variable.name,
        )


# --------------------------------------------------------------------------
# Masks, degenerate input, small batches.
# --------------------------------------------------------------------------


def test_masked_steps_are_left_out_of_the_statistics(rng):
    """N counts the unmasked samples only; padding may hold inf and NaN."""
    z = _data(rng, (3, 6, 2))
    mask = np.ones((3, 6), bool)
    mask[0, 4:] = False
    mask[2, 1:] = False
    padded = z.copy()
    padded[~mask] = np.inf
    padded[0, 5] = np.nan
    layer = _layer()
    layer.build((None, 6, 4))
    params = _randomize(layer, rng)
    y = layer(cvk.to_stacked(padded), training=True, mask=mask)
    expected, moving = reference_batch_norm(z, params, 0.3, 1e-9, True, mask)
    # Stacked: the padded outputs are not finite (from_stacked would warn).
    expected = np.concatenate([expected.real, expected.imag], -1)
    np.testing.assert_allclose(
        to_numpy(y)[mask], expected[mask], rtol=TOL, atol=TOL
    )
    values = _values(layer)
    for name in MOVING:
        np.testing.assert_allclose(values[name], moving[name], atol=TOL)


def test_fewer_than_two_samples_keep_the_moving_statistics(rng):
    """N = 1 (one unmasked sample) or 0: no unbiased variance; the output
    is finite (the bias for the one sample), the moving statistics stay as
    they are."""
    layer = _layer()
    layer.build((None, 3, 4))
    params = _randomize(layer, rng)
    z = _data(rng, (2, 3, 2))
    for count in (1, 0):
        mask = np.zeros((2, 3), bool)
        mask[1, 2] = count == 1
        y = to_numpy(layer(cvk.to_stacked(z), training=True, mask=mask))
        assert np.all(np.isfinite(y))
        bias = np.concatenate([params["bias_real"], params["bias_imag"]])
        if count:  # the one unmasked sample
            np.testing.assert_allclose(y[1, 2], bias, atol=1e-6)
        for name in MOVING:
            np.testing.assert_array_equal(_values(layer)[name], params[name])
    # One sample without a mask: (B, L) = (1, 1).
    y = to_numpy(layer(cvk.to_stacked(z[:1, :1]), training=True))
    np.testing.assert_allclose(y[0, 0], bias, atol=1e-6)
    for name in MOVING:
        np.testing.assert_array_equal(_values(layer)[name], params[name])


def test_batch_of_one_is_normalized_over_its_length(rng):
    """The reference returns its input for a training batch of size 1; here
    B = 1 is normalized over its length like any batch (documented)."""
    z = _data(rng, (1, 8, 2))
    layer = _layer()
    layer.build((None, 8, 4))
    params = _randomize(layer, rng)
    y = layer(cvk.to_stacked(z), training=True)
    expected, _ = reference_batch_norm(z, params, 0.3, 1e-9, True)
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, rtol=TOL, atol=TOL
    )


def _degenerate(name):
    rng = np.random.default_rng(5)
    z = _data(rng, (3, 4, 3))
    if name == "constant channel":
        z[..., 1] = 2.0 - 1.0j
    elif name == "zeros":
        z = np.zeros_like(z)
    elif name == "real":
        z = z.real + 0j
    elif name == "improper":
        z = z.real * (1 + 0.5j)
    elif name == "huge":
        z = z * 1e30
    elif name == "tiny":
        z = z * 1e-30
    return cvk.to_stacked(z).astype("float32")


@pytest.mark.parametrize(
    "name",
    ["constant channel", "zeros", "real", "improper", "huge", "tiny"],
)
def test_degenerate_input_is_finite_with_finite_gradients(name):
    layer = _layer()
    x = _degenerate(name)
    layer.build(x.shape)
    y, grad_x, grad_w = value_and_gradients(
        layer, x, layer=layer, training=True
    )
    assert np.all(np.isfinite(y))
    assert np.all(np.isfinite(grad_x))
    assert all(np.all(np.isfinite(g)) for g in grad_w)
    layer(x, training=True)  # an update, then inference
    moving = _values(layer)
    assert all(np.all(np.isfinite(v)) for v in moving.values()), moving
    assert np.all(np.isfinite(to_numpy(layer(x))))


def test_huge_and_tiny_training_outputs_are_scale_invariant(rng):
    """Powers-of-two rescaling: data at 1e30 and 1e-10 give the unit-scale
    outputs (epsilon = 1e-30 is negligible at all three scales), and the
    batch's R scales by 1 / scale (from a zero moving R, the moving R is
    0.7 R_batch). Tolerance 1e-5: the same float32 arithmetic on data
    rescaled by a power of two, up to the rounding of z * scale."""
    z = _data(rng, (3, 5, 2))
    layer = _layer(epsilon=1e-30)
    layer.build((None, 5, 4))
    params = _randomize(layer, rng, whitening="zero")
    base = to_numpy(layer(cvk.to_stacked(z), training=True))
    r_base = _values(layer)["moving_whitening_rr"]
    for scale in (1e30, 1e-10):
        for name, value in params.items():
            getattr(layer, name).assign(value.astype("float32"))
        y = to_numpy(layer(cvk.to_stacked(z * scale), training=True))
        np.testing.assert_allclose(y, base, rtol=1e-5, atol=1e-5)
        r = _values(layer)["moving_whitening_rr"]
        np.testing.assert_allclose(r * scale, r_base, rtol=1e-5)


# --------------------------------------------------------------------------
# API: parameters, configuration, serialization, compilation.
# --------------------------------------------------------------------------


def test_variables_and_parameter_count_of_the_reference_front_end():
    """5 trainable numbers per channel (w0, w1, w2, bias re/im), as the
    reference counts its BatchNorm1d parameters (weights C*3 real, bias C
    complex = 2C reals): 1,520 over the front end's 16+32+64+64+128
    channels; 6 moving statistics per channel."""
    total = 0
    for channels in (16, 32, 64, 64, 128):
        layer = _layer()
        layer.build((None, 10, 2 * channels))
        names = sorted(v.name for v in layer.trainable_variables)
        assert names == ["bias_imag", "bias_real", "w0", "w1", "w2"]
        assert sorted(v.name for v in layer.non_trainable_variables) == sorted(
            MOVING
        )
        total += sum(int(np.prod(v.shape)) for v in layer.trainable_variables)
    assert total == 1520
    plain = _layer(scale=False, center=False)
    plain.build((None, 10, 8))
    assert not plain.trainable_variables
    assert len(plain.non_trainable_variables) == 6


def test_trabelsi_is_the_default_and_unchanged():
    layer = ComplexBatchNormalization()
    assert layer.get_config()["convention"] == "trabelsi"
    layer.build((None, 3, 4))
    assert sorted(v.name for v in layer.weights) == sorted(
        [
            "moving_mean_real",
            "moving_mean_imag",
            "moving_var_rr",
            "moving_var_ii",
            "moving_cov_ri",
            "gamma_rr",
            "gamma_ii",
            "gamma_ri",
            "beta_real",
            "beta_imag",
        ]
    )


@pytest.mark.parametrize("convention", ["Reference", "pytorch", 1, None])
def test_bad_convention_is_a_value_error(convention):
    with pytest.raises(ValueError, match="convention") as info:
        ComplexBatchNormalization(convention=convention)
    assert f"convention={convention!r}" in str(info.value)


def test_front_end_signature_and_config_round_trip():
    layer = ComplexBatchNormalization(
        momentum=0.5,
        epsilon=1e-9,
        convention="reference",
        synchronized=True,
        name="bn",
    )
    config = layer.get_config()
    assert config["convention"] == "reference"
    clone = ComplexBatchNormalization.from_config(config)
    assert clone.get_config() == config
    assert clone.convention == "reference" and clone.synchronized


def test_synchronized_is_a_no_op_outside_a_strategy(rng):
    z = _data(rng, (3, 5, 2))
    mask = np.ones((3, 5), bool)
    mask[1, 3:] = False
    outputs = []
    for sync in (True, False):
        layer = _layer(synchronized=sync)
        y = layer(cvk.to_stacked(z), training=True, mask=mask)
        outputs.append((to_numpy(y), _values(layer)))
    np.testing.assert_allclose(outputs[0][0], outputs[1][0], rtol=1e-6)
    for name in MOVING:
        np.testing.assert_allclose(
            outputs[0][1][name], outputs[1][1][name], rtol=1e-6
        )


@pytest.mark.slow
def test_keras_file_round_trip_in_safe_mode(rng, tmp_path):
    z = _data(rng, (2, 5, 3))
    inputs = keras.Input((5, 6))
    outputs = _layer(name="bn")(inputs)
    model = keras.Model(inputs, outputs)
    layer = model.get_layer("bn")
    _randomize(layer, rng)
    x = cvk.to_stacked(z).astype("float32")
    before = to_numpy(model(x))
    path = os.path.join(tmp_path, "bn.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    again = loaded.get_layer("bn")
    assert again.convention == "reference"
    np.testing.assert_array_equal(to_numpy(loaded(x)), before)
    for name, value in _values(layer).items():
        np.testing.assert_array_equal(to_numpy(getattr(again, name)), value)


def test_mixed_precision_outputs_in_the_compute_dtype(rng):
    z = _data(rng, (2, 5, 2))
    layer = _layer(dtype="mixed_float16")
    x = cvk.to_stacked(z).astype("float16")
    for training in (True, False):
        y = layer(x, training=training)
        assert keras.backend.standardize_dtype(y.dtype) == "float16"
        assert np.all(np.isfinite(to_numpy(y).astype("float64")))
    assert all(v.dtype == "float32" for v in layer.weights)


@pytest.mark.slow
def test_compiled_training_step_matches_eager(rng):
    """A training step under XLA (`jit_compile` on TensorFlow, `jax.jit`)
    gives the eager outputs and moving statistics. Tolerance 1e-6: the
    same float32 arithmetic, fused in another order."""
    z = _data(rng, (3, 6, 2))
    layer = _layer()
    layer.build((None, 6, 4))
    _randomize(layer, rng)
    x = cvk.to_stacked(z).astype("float32")

    def step(trainable, non_trainable, x):
        return layer.stateless_call(trainable, non_trainable, x, training=True)

    fn = compiled(step)
    if fn is None:
        pytest.skip(f"no compiler test on {keras.backend.backend()}")
    trainable = [v.value for v in layer.trainable_variables]
    non_trainable = [v.value for v in layer.non_trainable_variables]
    y, updated = fn(trainable, non_trainable, x)
    eager = to_numpy(layer(x, training=True))
    np.testing.assert_allclose(to_numpy(y), eager, rtol=1e-6, atol=1e-6)
    for variable, value in zip(layer.non_trainable_variables, updated):
        np.testing.assert_allclose(
            to_numpy(value), to_numpy(variable), rtol=1e-6, atol=1e-6
        )


_MIRRORED_SCRIPT = r"""
import json, os
os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)
import numpy as np
from cvattn_keras.layers import ComplexBatchNormalization

x = np.asarray(json.loads(os.environ["BN_X"]), "float32")
mask = np.asarray(json.loads(os.environ["BN_MASK"]), bool)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    layer = ComplexBatchNormalization(
        momentum=0.5, epsilon=1e-9, convention="reference", synchronized=True
    )
    layer.build((None,) + x.shape[1:])

@tf.function
def step(xs, ms):
    return layer(xs, training=True, mask=ms)

data = tf.data.Dataset.from_tensor_slices((x, mask)).batch(len(x))
for xs, ms in strategy.experimental_distribute_dataset(data):
    y = strategy.run(step, args=(xs, ms))
y = np.concatenate([t.numpy() for t in strategy.experimental_local_results(y)])
moving = {w.name: np.asarray(w).tolist() for w in layer.non_trainable_weights}
print("RESULT" + json.dumps({"outputs": y.tolist(), "moving": moving}))
"""


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_synchronized_reference_batch_norm_under_mirrored_strategy(
    rng, tmp_path
):
    """Under MirroredStrategy over 2 logical CPU devices, each replica is
    normalized with the global batch's statistics, the unbiased correction
    using N = the mean over the replicas of their unmasked counts
    (documented: the replica count is not visible to keras.ops). In a
    subprocess: logical devices must be configured before TensorFlow
    initializes. Tolerance TOL: float32, as above."""
    z = _data(rng, (8, 5, 3))
    z[:4] = 3 * z[:4] + 1  # the two replicas see different data
    mask = np.ones((8, 5), bool)
    mask[1, 3:] = False
    mask[6] = False
    x = cvk.to_stacked(z)
    script = tmp_path / "mirrored.py"
    script.write_text(_MIRRORED_SCRIPT)
    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "BN_X": json.dumps(np.asarray(x).tolist()),
        "BN_MASK": json.dumps(mask.tolist()),
    }
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = [r for r in done.stdout.splitlines() if r.startswith("RESULT")]
    result = json.loads(line[-1][len("RESULT") :])
    layer = _layer(momentum=0.5)
    layer.build((None, 5, 6))
    params = _values(layer)  # the initial values
    samples = mask.sum() / 2  # 2 replicas
    expected, moving = reference_batch_norm(
        z, params, 0.5, 1e-9, True, mask, samples=samples
    )
    expected = np.concatenate([expected.real, expected.imag], -1)
    outputs = np.array(result["outputs"])
    np.testing.assert_allclose(
        outputs[mask], expected[mask], rtol=TOL, atol=TOL
    )
    for name in MOVING:
        np.testing.assert_allclose(
            result["moving"][name], moving[name], rtol=TOL, atol=TOL
        )
    # One device's N differs enough to be seen: the test can fail.
    _, single = reference_batch_norm(z, params, 0.5, 1e-9, True, mask)
    assert (
        np.abs(
            single["moving_whitening_rr"] - moving["moving_whitening_rr"]
        ).max()
        > 1e-3
    )
