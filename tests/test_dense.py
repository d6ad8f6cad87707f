"""Tests of ComplexDense against a NumPy complex128 reference."""

import keras
import numpy as np
import pytest
from backend_utils import to_numpy
from numpy_reference import random_complex

import cvattn_keras as cvk
from cvattn_keras.layers import ComplexDense


def _complex_weights(layer):
    kernel = to_numpy(layer.kernel_real) + 1j * to_numpy(layer.kernel_imag)
    bias = to_numpy(layer.bias_real) + 1j * to_numpy(layer.bias_imag)
    return kernel.astype(np.complex128), bias.astype(np.complex128)


@pytest.mark.parametrize("shape", [(4, 3), (2, 5, 3), (2, 3, 4, 3)])
def test_matches_numpy_for_rank_2_3_4(rng, shape):
    layer = ComplexDense(5, bias_initializer="random_normal")
    x = random_complex(rng, shape)
    y = layer(cvk.to_stacked(x))
    assert tuple(y.shape) == shape[:-1] + (10,)
    kernel, bias = _complex_weights(layer)
    # float32 on unit-scale data: 1e-5 absolute.
    np.testing.assert_allclose(
        cvk.from_stacked(y, "complex128"), x @ kernel + bias, atol=1e-5
    )


def test_weights_are_named_and_shaped_as_the_contract():
    layer = ComplexDense(4)
    layer.build((None, 6))
    assert [w.path.split("/")[-1] for w in layer.weights] == [
        "kernel_real",
        "kernel_imag",
        "bias_real",
        "bias_imag",
    ]
    assert tuple(layer.kernel_real.shape) == (3, 4)
    assert tuple(layer.bias_imag.shape) == (4,)
    no_bias = ComplexDense(4, use_bias=False)
    no_bias.build((None, 6))
    assert len(no_bias.weights) == 2 and no_bias.bias_real is None


def test_porting_the_reference_complex_linear(rng):
    """The reference ComplexLinear: out_r = W_r x_r - W_i x_i + (b_r - b_i),
    out_i = W_r x_i + W_i x_r + (b_r + b_i), weights stored [out, in]."""
    w_r, w_i = rng.standard_normal((2, 5, 3))  # [out, in]
    b_r, b_i = rng.standard_normal((2, 5))
    x = random_complex(rng, (4, 3))
    out_r = x.real @ w_r.T - x.imag @ w_i.T + (b_r - b_i)
    out_i = x.imag @ w_r.T + x.real @ w_i.T + (b_r + b_i)
    layer = ComplexDense(5)
    layer.build((None, 6))
    layer.set_weights([w_r.T, w_i.T, b_r - b_i, b_r + b_i])
    y = cvk.from_stacked(layer(cvk.to_stacked(x)), "complex128")
    np.testing.assert_allclose(y, out_r + 1j * out_i, atol=1e-5)


def test_default_initializer_has_glorot_complex_variance():
    fan_in, units = 400, 300
    layer = ComplexDense(units)
    layer.build((None, 2 * fan_in))
    kernel, _ = _complex_weights(layer)
    # E|W|^2 = 2 / (fan_in + fan_out); 120k samples: about 0.4% std error.
    expected = 2.0 / (fan_in + units)
    np.testing.assert_allclose(
        np.mean(np.abs(kernel) ** 2), expected, rtol=0.03
    )
    # Real and imaginary parts are drawn independently, each half of it.
    np.testing.assert_allclose(np.var(kernel.real), expected / 2, rtol=0.03)
    assert (
        abs(np.corrcoef(kernel.real.ravel(), kernel.imag.ravel())[0, 1]) < 0.02
    )


def test_seeded_initializer_gives_distinct_parts_reproducibly():
    def kernels(seed):
        layer = ComplexDense(
            8, kernel_initializer=keras.initializers.GlorotNormal(seed=seed)
        )
        layer.build((None, 8))
        return to_numpy(layer.kernel_real), to_numpy(layer.kernel_imag)

    real_a, imag_a = kernels(7)
    real_b, imag_b = kernels(7)
    assert not np.allclose(real_a, imag_a)
    np.testing.assert_array_equal(real_a, real_b)
    np.testing.assert_array_equal(imag_a, imag_b)


def test_unseeded_string_initializer_gives_distinct_parts():
    layer = ComplexDense(8, kernel_initializer="glorot_uniform")
    layer.build((None, 8))
    assert not np.allclose(
        to_numpy(layer.kernel_real), to_numpy(layer.kernel_imag)
    )


def test_config_round_trip_and_output_shape():
    layer = ComplexDense(
        3,
        use_bias=False,
        kernel_regularizer="l2",
        kernel_constraint="max_norm",
        activity_regularizer="l1",
        name="cd",
    )
    clone = ComplexDense.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert layer.compute_output_shape((None, 7, 10)) == (None, 7, 6)
    layer.build((None, 10))
    assert len(layer.losses) == 2  # the l2 penalty on each kernel part


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(units=0), "units"),
        (dict(units=2.5), "units"),
        (dict(units=True), "units"),
        (dict(units=2, kernel_initializer="no_such_init"), "no_such_init"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ComplexDense(**kwargs)


def test_odd_input_channels_is_a_value_error():
    with pytest.raises(ValueError, match="input_shape\\[-1\\]=5"):
        ComplexDense(2)(np.zeros((3, 5), "float32"))
    with pytest.raises(ValueError, match="rank >= 2"):
        ComplexDense(2).build((4,))


def test_mixed_precision_keeps_float32_weights():
    layer = ComplexDense(4, dtype="mixed_bfloat16")
    y = layer(np.ones((2, 6), "float32"))
    assert layer.kernel_real.dtype == "float32"
    assert keras.backend.standardize_dtype(y.dtype) == "bfloat16"


@pytest.mark.parametrize(
    "cls, args",
    [(ComplexDense, (3,)), (cvk.layers.ComplexConv1D, (3, 2))],
)
def test_none_initializers_mean_the_defaults(cls, args):
    """`kernel_initializer=None` was an `AttributeError`. As
    `keras.layers.Dense(kernel_initializer=None)` gets Dense's default
    Glorot kernel, `None` is the documented default here: complex Glorot
    for the kernel, zeros for the bias."""
    layer = cls(*args, kernel_initializer=None, bias_initializer=None)
    assert isinstance(
        layer.kernel_initializer, cvk.initializers.ComplexGlorotUniform
    )
    assert isinstance(layer.bias_initializer, keras.initializers.Zeros)
    layer.build((None, 5, 4))
    assert np.all(to_numpy(layer.bias_real) == 0)
    assert np.std(to_numpy(layer.kernel_real)) > 0
    config = layer.get_config()
    assert cls.from_config(config).get_config() == config


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(kernel_initializer=3), "`kernel_initializer`.*=3"),
        (dict(bias_initializer=[0.0]), "`bias_initializer`.*=\\[0.0\\]"),
        (dict(kernel_regularizer="l3"), "`kernel_regularizer`.*='l3'"),
        (dict(bias_constraint=1.5), "`bias_constraint`.*=1.5"),
    ],
)
def test_weight_options_that_cannot_be_resolved_name_the_argument(
    kwargs, match
):
    for cls, args in ((ComplexDense, (3,)), (cvk.layers.ComplexConv1D, (3, 2))):
        with pytest.raises(ValueError, match=match):
            cls(*args, **kwargs)
