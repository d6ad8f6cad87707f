"""Tests of the complex activations against their formulas in NumPy."""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import to_numpy
from backend_utils import value_and_gradients
from keras import ops

import cvattn_keras as cvk
from cvattn_keras import activations
from cvattn_keras.layers import ComplexActivation
from cvattn_keras.layers import ModReLU

Z = np.array([[1 + 2j, -1 - 2j, 3 - 1j, -0.5 + 0.5j, 0j, 2 + 0j, 0 + 3j]])


def _apply(fn, z=Z):
    x = ops.convert_to_tensor(cvk.to_stacked(z))
    return cvk.from_stacked(fn(x), "complex128")


def _numpy(name, z=Z):
    magnitude = np.abs(z)
    phase = np.where(
        magnitude > 0, z / np.where(magnitude > 0, magnitude, 1), 0
    )
    if name == "split_leaky_relu":
        return ref.leaky_relu(z)
    if name == "crelu":
        return np.maximum(z.real, 0) + 1j * np.maximum(z.imag, 0)
    if name == "zrelu":
        return np.where((z.real >= 0) & (z.imag >= 0), z, 0)
    if name == "cardioid":
        return 0.5 * (1 + phase.real) * z
    raise ValueError(name)


@pytest.mark.parametrize("name", sorted(activations.ACTIVATIONS))
def test_functions_and_layers_match_their_formula(name):
    expected = _numpy(name)
    np.testing.assert_allclose(
        _apply(activations.get(name)), expected, atol=1e-6
    )
    layer = ComplexActivation(name)
    np.testing.assert_allclose(_apply(layer), expected, atol=1e-6)
    assert ComplexActivation.from_config(layer.get_config()).activation == name


def test_reference_crelu_fixture():
    np.testing.assert_allclose(
        _apply(activations.split_leaky_relu, np.array([[-1 - 2j]])),
        [[-0.01 - 0.02j]],
        atol=1e-7,
    )


def test_modrelu_is_multiplicative():
    """ReLU(|z| + b) z/|z|: with b = -1, z = 3 + 4i becomes 0.8 (3 + 4i)
    (the additive bug would give 3 + 4i - 1); |z| < 1 is cut to 0."""
    layer = ModReLU(bias_initializer="zeros")
    z = np.array([[3 + 4j, 0.3 + 0.4j, 0j]])
    layer.build((None, 6))
    layer.set_weights([np.full(3, -1.0)])
    np.testing.assert_allclose(
        _apply(layer, z), [[0.8 * (3 + 4j), 0, 0]], atol=1e-6
    )
    magnitude = np.abs(Z)
    bias = np.linspace(-1, 1, Z.shape[-1])
    layer = ModReLU()
    layer.build((None, 2 * Z.shape[-1]))
    layer.set_weights([bias])
    phase = np.where(
        magnitude > 0, Z / np.where(magnitude > 0, magnitude, 1), 0
    )
    expected = np.maximum(magnitude + bias, 0) * phase
    np.testing.assert_allclose(_apply(layer), expected, atol=1e-6)


@pytest.mark.parametrize("name", sorted(activations.ACTIVATIONS) + ["modrelu"])
def test_zero_input_has_finite_gradients(name):
    layer = ModReLU() if name == "modrelu" else ComplexActivation(name)
    x = np.zeros((2, 6), "float32")
    layer(x)
    y, grad, grad_vars = value_and_gradients(layer, x, layer=layer)
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(grad))
    assert all(np.all(np.isfinite(g)) for g in grad_vars)


def test_unknown_names_are_value_errors():
    with pytest.raises(ValueError, match="'cardioid', 'crelu'"):
        ComplexActivation("gelu")
    with pytest.raises(ValueError, match="ModReLU"):
        activations.get("modrelu")
    with pytest.raises(ValueError, match="activation=3"):
        ComplexActivation(3)


def test_half_precision_keeps_large_and_small_moduli():
    """In float16 |z|^2 overflows above 256 and underflows below 2e-4; the
    modulus-based activations compute in float32."""
    z = np.array([[300 + 0j, 1e-4 + 0j, 3 + 4j]])
    x = ops.cast(cvk.to_stacked(z), "float16")
    modrelu = ModReLU(dtype="mixed_float16")
    y = cvk.from_stacked(to_numpy(modrelu(x)).astype("float32"), "complex128")
    np.testing.assert_allclose(y, z, rtol=2e-3)
    y = cvk.from_stacked(
        to_numpy(activations.cardioid(x)).astype("float32"), "complex128"
    )
    np.testing.assert_allclose(y, [[300, 1e-4, 2.4 + 3.2j]], rtol=2e-3)


# Issue 11, item 4: at float32 extremes |z|^2 leaves the float range; the
# modulus-based activations use the scaled modulus.
EXTREMES = np.array([[2e19 + 0j, 1e-19 + 0j, -3e19 + 4e19j, 1e-30 - 1e-30j]])


def test_modrelu_and_cardioid_at_float32_extremes():
    x = cvk.to_stacked(EXTREMES)
    z = cvk.from_stacked(x, "complex128")  # the float32 values exactly
    modrelu = ModReLU()
    y = modrelu(x)
    # Bias 0: the identity. rtol 3e-7: a few float32 roundings.
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), z, rtol=3e-7, atol=0
    )
    cardioid = activations.cardioid(ops.convert_to_tensor(x))
    np.testing.assert_allclose(
        cvk.from_stacked(cardioid, "complex128"),
        _numpy("cardioid", z),
        rtol=3e-7,
        atol=0,
    )
    # cardioid(1e-19) = 1e-19 (phase 0), not 5e-20.
    assert abs(float(to_numpy(cardioid)[0, 1]) - 1e-19) < 1e-25
    for layer in (modrelu, ComplexActivation("cardioid")):
        layer(x)
        _, grad, _ = value_and_gradients(layer, x)
        assert np.all(np.isfinite(grad)), layer.name


@pytest.mark.parametrize("layer", [ComplexActivation("crelu"), ModReLU()])
def test_scalar_input_is_a_value_error(layer):
    """Issue 11, item 13: a scalar input raised an IndexError."""
    with pytest.raises(ValueError, match="scalar"):
        layer(np.float32(1.0))


def test_activations_under_mixed_precision_return_the_compute_dtype():
    keras.config.set_dtype_policy("mixed_float16")
    x = cvk.to_stacked(np.array([[300 + 1e-4j, 1e-4 + 0j]]))
    for layer in (ModReLU(), ComplexActivation("cardioid")):
        y = layer(x)
        assert keras.backend.standardize_dtype(y.dtype) == "float16"
        assert np.all(np.isfinite(to_numpy(ops.cast(y, "float32"))))


def test_modrelu_none_bias_initializer_means_zeros():
    layer = ModReLU(bias_initializer=None)
    layer.build((None, 6))
    np.testing.assert_array_equal(to_numpy(layer.bias), np.zeros(3))
