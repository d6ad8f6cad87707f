"""Tests of the complex activations against their formulas in NumPy."""

import numpy as np
import numpy_reference as ref
import pytest
import tensorflow as tf

import cvattn_keras as cvk
from cvattn_keras import activations
from cvattn_keras.layers import ComplexActivation
from cvattn_keras.layers import ModReLU

Z = np.array([[1 + 2j, -1 - 2j, 3 - 1j, -0.5 + 0.5j, 0j, 2 + 0j, 0 + 3j]])


def _apply(fn, z=Z):
    return cvk.from_stacked(fn(tf.constant(cvk.to_stacked(z))), "complex128")


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
    x = tf.zeros((2, 6))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(y)
    grad = tape.gradient(loss, x)
    assert np.all(np.isfinite(y.numpy())) and np.all(np.isfinite(grad.numpy()))


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
    x = tf.constant(cvk.to_stacked(z), tf.float16)
    modrelu = ModReLU(dtype="mixed_float16")
    y = cvk.from_stacked(np.asarray(modrelu(x), "float32"), "complex128")
    np.testing.assert_allclose(y, z, rtol=2e-3)
    y = cvk.from_stacked(
        np.asarray(activations.cardioid(x), "float32"), "complex128"
    )
    np.testing.assert_allclose(y, [[300, 1e-4, 2.4 + 3.2j]], rtol=2e-3)
