"""Tests of the positional encodings."""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras import attention as att
from cvattn_keras.layers import ComplexRotaryEmbedding
from cvattn_keras.layers import SinusoidalPositionalEncoding


def test_sinusoidal_reference_fixture():
    y = SinusoidalPositionalEncoding()(np.zeros((1, 2, 8), "float32"))
    np.testing.assert_allclose(
        to_numpy(y)[0, 1],
        [0.841471, 0.540302, 0.010000, 0.999950, 0, 0, 0, 0],
        atol=1e-6,
    )


def test_sinusoidal_matches_numpy_on_the_real_part_only(rng):
    z = ref.random_complex(rng, (2, 6, 10))
    p = np.arange(3, 9)[:, None]  # start_index = 3
    j = np.arange(10)[None, :] // 2
    angle = p / 10000.0 ** (j / 5.0)
    pe = np.where(np.arange(10) % 2 == 0, np.sin(angle), np.cos(angle))
    y = SinusoidalPositionalEncoding()(cvk.to_stacked(z), start_index=3)
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), z + pe, atol=1e-5
    )


def test_rotary_matches_numpy(rng):
    z = ref.random_complex(rng, (2, 5, 3, 4))  # (B, T, N, H)
    theta = 100.0 ** (-np.arange(4) / 4)
    rotation = np.exp(1j * np.arange(5)[:, None] * theta)[None, :, None, :]
    y = ComplexRotaryEmbedding(max_wavelength=100)(cvk.to_stacked(z))
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), z * rotation, atol=1e-5
    )


def test_rotary_inner_product_scores_depend_on_relative_position_only(rng):
    """Same content at every position: after rotation, the CAtt scores
    A[t, s] = <q_t, k_s> depend on t - s alone (a Toeplitz matrix)."""
    rotary = ComplexRotaryEmbedding()
    q = np.repeat(ref.random_complex(rng, (1, 1, 2, 4)), 6, axis=1)
    k = np.repeat(ref.random_complex(rng, (1, 1, 2, 4)), 6, axis=1)
    q, k = rotary(cvk.to_stacked(q)), rotary(cvk.to_stacked(k))
    scores = to_numpy(att.complex_scores(q, k, "inner", 1.0))  # (1, 2, 6, 12)
    a = scores[..., :6] + 1j * scores[..., 6:]
    np.testing.assert_allclose(a[..., 1:, 1:], a[..., :-1, :-1], atol=1e-5)
    assert not np.allclose(a[..., 0, 0], a[..., 0, 1])  # it does vary
    # Without rotation the scores would be constant.


def test_rotary_start_index_continues_the_sequence(rng):
    z = cvk.to_stacked(ref.random_complex(rng, (1, 6, 3)))
    rotary = ComplexRotaryEmbedding()
    whole = to_numpy(rotary(z))
    tail = to_numpy(rotary(z[:, 4:], start_index=4))
    np.testing.assert_allclose(tail, whole[:, 4:], atol=1e-6)


@pytest.mark.parametrize(
    "layer", [SinusoidalPositionalEncoding, ComplexRotaryEmbedding]
)
def test_bad_input_and_config(layer):
    with pytest.raises(ValueError, match="max_wavelength"):
        layer(max_wavelength=1)
    with pytest.raises(ValueError):
        layer()(keras.ops.zeros((2, 3, 5)))
    instance = layer(max_wavelength=500)
    assert layer.from_config(instance.get_config()).max_wavelength == 500


def test_start_index_may_be_an_integer_tensor(rng):
    x = cvk.to_stacked(ref.random_complex(rng, (1, 3, 2)))
    for layer in (SinusoidalPositionalEncoding(), ComplexRotaryEmbedding()):
        a = to_numpy(
            layer(x, start_index=keras.ops.convert_to_tensor(2, "int32"))
        )
        b = to_numpy(layer(x, start_index=np.int32(2)))
        np.testing.assert_allclose(a, layer(x, start_index=2), atol=1e-6)
        np.testing.assert_allclose(b, a, atol=1e-6)
