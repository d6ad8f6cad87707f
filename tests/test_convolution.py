"""Tests of ComplexConv1D against a NumPy complex128 convolution."""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import to_numpy
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

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


def _too_short(length, kernel_size, dilation):
    """The error's text: the input length, the kernel and the dilation."""
    span = dilation * (kernel_size - 1) + 1
    return (
        f"= {span} samples long \\(kernel_size={kernel_size}, "
        f"dilation_rate={dilation}\\).*Received: input length {length}"
    )


@pytest.mark.parametrize(
    "length, kernel_size, dilation", [(2, 4, 1), (3, 2, 3), (4, 3, 2)]
)
def test_valid_input_shorter_than_the_kernel(length, kernel_size, dilation):
    """Issue 22: a "valid" convolution of an input shorter than its
    dilated kernel raised `Cannot convert '(None, -1, 4)' to a shape`
    symbolically and a backend kernel error eagerly. Now a ValueError
    naming the length, the kernel size and the dilation: when built
    (symbolically), in `compute_output_shape`, and in `call` for a length
    known only then (eagerly, through a variable-length model); nothing
    is built by the failed call."""
    match = _too_short(length, kernel_size, dilation)

    def make():
        return ComplexConv1D(2, kernel_size, dilation_rate=dilation)

    with pytest.raises(ValueError, match=match):
        make()(keras.Input((length, 4)))
    with pytest.raises(ValueError, match=match):
        make().compute_output_shape((None, length, 4))
    layer = make()
    with pytest.raises(ValueError, match=match):
        layer(np.zeros((1, length, 4), "float32"))
    assert not layer.weights
    inputs = keras.Input((None, 4))
    model = keras.Model(inputs, make()(inputs))
    with pytest.raises(ValueError, match=match):
        model(np.zeros((1, length, 4), "float32"))


@settings(derandomize=True, max_examples=20, deadline=None)
@given(
    length=st.integers(1, 7),
    kernel_size=st.integers(1, 4),
    dilation=st.integers(1, 3),
    padding=st.sampled_from(["valid", "same", "causal"]),
)
def test_every_length_gives_its_output_or_the_error(
    length, kernel_size, dilation, padding
):
    """Every (length, kernel, dilation, padding): "same" and "causal"
    keep the length; "valid" gives `length - span + 1` samples, the
    NumPy convolution's, from a length of `span` on, and the error below
    it."""
    rng = np.random.default_rng(length)
    x = ref.random_complex(rng, (1, length, 2))
    layer = ComplexConv1D(
        2, kernel_size, padding=padding, dilation_rate=dilation
    )
    span = dilation * (kernel_size - 1) + 1
    if padding == "valid" and length < span:
        with pytest.raises(ValueError, match=f"input length {length}"):
            layer(cvk.to_stacked(x))
        return
    y = layer(cvk.to_stacked(x))
    kernel = to_numpy(layer.kernel_real) + 1j * to_numpy(layer.kernel_imag)
    expected = _numpy_conv(x, kernel, 0.0, 1, dilation, padding)
    assert tuple(y.shape) == layer.compute_output_shape((1, length, 4))
    assert tuple(y.shape) == expected.shape[:2] + (4,)
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), expected, atol=1e-5
    )
