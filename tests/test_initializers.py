"""Tests of the complex initializers: complex variance, independence,
seeding."""

import numpy as np
import pytest

from cvattn_keras import initializers

FAN_IN, FAN_OUT = 300, 200
EXPECTED = {
    "complex_glorot_uniform": 2 / (FAN_IN + FAN_OUT),
    "complex_glorot_normal": 2 / (FAN_IN + FAN_OUT),
    "complex_he_uniform": 2 / FAN_IN,
    "complex_he_normal": 2 / FAN_IN,
    "complex_rayleigh": 2 / (FAN_IN + FAN_OUT),
}


def _complex_kernel(initializer, shape=(FAN_IN, FAN_OUT)):
    real = initializers.clone(initializer, 0)(shape)
    imag = initializers.clone(initializer, 1)(shape)
    return np.asarray(real) + 1j * np.asarray(imag)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_complex_variance(name):
    w = _complex_kernel(initializers.get(name))
    # 60k samples: the sample variance is within about 1% (3 std errors).
    np.testing.assert_allclose(
        np.mean(np.abs(w) ** 2), EXPECTED[name], rtol=0.03
    )
    assert abs(np.mean(w)) < 3e-3 * np.sqrt(EXPECTED[name] * 60000) / 60
    assert abs(np.corrcoef(w.real.ravel(), w.imag.ravel())[0, 1]) < 0.02


def test_he_rayleigh_and_the_square_root_deep_complex_networks_omits():
    w = _complex_kernel(initializers.ComplexRayleigh("he"))
    np.testing.assert_allclose(np.mean(np.abs(w) ** 2), 2 / FAN_IN, rtol=0.03)
    # Without the sqrt, sigma = 1/fan_in would give 2/fan_in^2: 300x less.


def test_rayleigh_modulus_and_uniform_phase():
    w = _complex_kernel(initializers.ComplexRayleigh())
    sigma = 1 / np.sqrt(FAN_IN + FAN_OUT)
    # Rayleigh(sigma): mean sigma sqrt(pi/2); the phase is uniform.
    np.testing.assert_allclose(
        np.mean(np.abs(w)), sigma * np.sqrt(np.pi / 2), rtol=0.02
    )
    counts, _ = np.histogram(np.angle(w), bins=8, range=(-np.pi, np.pi))
    np.testing.assert_allclose(counts / w.size, 1 / 8, atol=0.01)


def test_convolution_fans_count_the_window():
    w = _complex_kernel(initializers.get("complex_he_normal"), (5, 40, 30))
    np.testing.assert_allclose(np.mean(np.abs(w) ** 2), 2 / (5 * 40), rtol=0.05)


def test_seeded_initializers_are_reproducible():
    for cls in (
        initializers.ComplexGlorotUniform,
        initializers.ComplexRayleigh,
    ):
        a = np.asarray(cls(seed=3)((4, 5)))
        b = np.asarray(cls(seed=3)((4, 5)))
        np.testing.assert_array_equal(a, b)
        # As Keras' seeded initializers: the same values at every call.
        same = cls(seed=3)
        np.testing.assert_array_equal(same((4, 5)), same((4, 5)))
        config = cls(seed=3).get_config()
        assert cls.from_config(config).get_config() == config


def test_unknown_names_are_value_errors():
    with pytest.raises(ValueError):
        initializers.get("complex_orthogonal_nonsense")
    with pytest.raises(ValueError, match="criterion='xavier'"):
        initializers.ComplexRayleigh("xavier")
