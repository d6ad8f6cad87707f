"""Tests of ComplexConv1D against a NumPy complex128 convolution."""

import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras.layers import ComplexConv1D


def _numpy_conv(x, kernel, bias, stride, dilation, padding):
    """x (B, L, C) complex, kernel (K, C, F): Keras Conv1D semantics."""
    k = kernel.shape[0]
    span = dilation * (k - 1) + 1
    length = x.shape[1]
    if padding == "causal":
        x = np.pad(x, ((0, 0), (span - 1, 0), (0, 0)))
    elif padding == "same":
        out = -(-length // stride)
        total = max((out - 1) * stride + span - length, 0)
        x = np.pad(x, ((0, 0), (total // 2, total - total // 2), (0, 0)))
    steps = (x.shape[1] - span) // stride + 1
    y = np.stack(
        [
            sum(x[:, t * stride + i * dilation] @ kernel[i] for i in range(k))
            for t in range(steps)
        ],
        axis=1,
    )
    return y + bias


@pytest.mark.parametrize(
    "stride, dilation, padding",
    [
        (1, 1, "valid"),
        (2, 1, "same"),
        (1, 2, "causal"),
        (3, 1, "valid"),
        (1, 3, "same"),
    ],
)
def test_matches_numpy(rng, stride, dilation, padding):
    x = ref.random_complex(rng, (2, 11, 3))
    layer = ComplexConv1D(
        4,
        3,
        strides=stride,
        padding=padding,
        dilation_rate=dilation,
        bias_initializer="random_normal",
    )
    y = layer(cvk.to_stacked(x))
    kernel = to_numpy(layer.kernel_real) + 1j * to_numpy(layer.kernel_imag)
    bias = to_numpy(layer.bias_real) + 1j * to_numpy(layer.bias_imag)
    expected = _numpy_conv(x, kernel, bias, stride, dilation, padding)
    assert tuple(y.shape) == expected.shape[:2] + (8,)
    assert layer.compute_output_shape((2, 11, 6)) == tuple(y.shape)
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, atol=1e-5
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(filters=0, kernel_size=3), "filters=0"),
        (dict(filters=2, kernel_size=1.5), "kernel_size=1.5"),
        (dict(filters=2, kernel_size=3, padding="full"), "padding='full'"),
        (
            dict(filters=2, kernel_size=3, padding="causal", strides=2),
            "strides",
        ),
        (dict(filters=2, kernel_size=3, dilation_rate=0), "dilation_rate=0"),
        (
            dict(filters=2, kernel_size=3, strides=2, dilation_rate=2),
            "dilation_rate=2",
        ),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ComplexConv1D(**kwargs)


def test_odd_channels_rank_and_config():
    with pytest.raises(ValueError, match="input_shape\\[-1\\]=5"):
        ComplexConv1D(2, 3)(np.zeros((1, 4, 5), "float32"))
    with pytest.raises(ValueError, match="batch, length"):
        ComplexConv1D(2, 3).build((4, 6))
    layer = ComplexConv1D(2, 3, padding="causal", kernel_regularizer="l2")
    clone = ComplexConv1D.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
