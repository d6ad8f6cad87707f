"""ComplexConv2D and ComplexConv2DTranspose in TFLite files: builtin ops
only (one CONV_2D or TRANSPOSE_CONV per layer, no CONV_3D, which has no
integer kernel), each real weight stored once, LiteRT's outputs against
the NumPy complex128 convolutions of tests/test_convolution_2d.py.

A three-layer encoder-decoder (the model measured in
cvattn_keras/layers/convolution_2d.py's docstring), exported in float32
and full_int8 with `weights_once=True`, and in float32 with block kernels
for contrast: three conversions, one of them calibrated (in a
subprocess)."""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from test_convolution_2d import _numpy_conv2d
from test_convolution_2d import _numpy_conv2d_transpose

import cvattn_keras as cvk
from cvattn_keras.layers import ComplexConv2D
from cvattn_keras.layers import ComplexConv2DTranspose

pytestmark = [
    pytest.mark.slow,
    # Three conversions (a TensorFlow subprocess each under the other
    # backends), as tests/test_export_weights.py.
    pytest.mark.tensorflow_only,
]

SHAPE = (16, 16, 4)  # 16 x 16 images of 2 complex channels

# Constants that are not weights: shapes and slice bounds (tens of int32
# numbers). 1 KiB covers them; a second copy of the smallest kernel
# (288 float32 weights) would not fit in it.
ALLOWANCE = 1024


def _model():
    inputs = keras.Input(SHAPE)
    x = ComplexConv2D(8, 3, strides=2, padding="same", name="down")(inputs)
    x = ComplexConv2D(8, 3, padding="same", name="conv")(x)
    x = ComplexConv2DTranspose(
        4, 3, strides=2, padding="same", output_padding=1, name="up"
    )(x)
    model = keras.Model(inputs, x)
    rng = np.random.default_rng(7)
    for layer in model.layers[1:]:
        fan_in = np.prod(layer.kernel_real.shape[:-1])
        layer.set_weights(
            [rng.standard_normal(w.shape) * fan_in**-0.5 for w in layer.weights]
        )
    return model


def _complex(layer, kind):
    parts = [getattr(layer, f"{kind}_{p}") for p in ("real", "imag")]
    real, imag = (keras.ops.convert_to_numpy(p) for p in parts)
    return real + 1j * imag


def _numpy_model(model, x):
    """The model in complex128, layer by layer."""
    down, conv, up = (model.get_layer(n) for n in ("down", "conv", "up"))
    z = cvk.from_stacked(x, "complex128")
    z = _numpy_conv2d(
        z, _complex(down, "kernel"), _complex(down, "bias"), 2, 1, "same"
    )
    z = _numpy_conv2d(
        z, _complex(conv, "kernel"), _complex(conv, "bias"), 1, 1, "same"
    )
    return _numpy_conv2d_transpose(
        z, _complex(up, "kernel"), _complex(up, "bias"), 2, 1, "same", 1
    )


def _kernels(model):
    return sum(
        int(np.prod(w.shape))
        for w in model.weights
        if w.path.endswith(("kernel_real", "kernel_imag"))
    )


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    keras.utils.set_random_seed(7)
    model = _model()
    rng = np.random.default_rng(8)
    calibration = cvk.to_stacked(
        ref.random_complex(rng, (64,) + SHAPE[:2] + (2,))
    )
    # Test inputs from the calibration set: in the calibrated range, so
    # the int8 error is the rounding's, not clipping of unseen extremes.
    return model, calibration, calibration[:4], tmp_path_factory.mktemp("c2d")


def test_float32_file_is_builtin_and_stores_each_weight_once(setup):
    model, _, inputs, directory = setup
    path = cvk.export.export_tflite(model, directory / "once.tflite")
    report = cvk.export.verify_tflite(path, model, inputs)
    assert report.builtin_only and report.non_builtin_ops == (), report
    assert {"CONV_2D", "TRANSPOSE_CONV"} <= set(report.ops), report.ops
    assert "CONV_3D" not in report.ops
    kernels = _kernels(model)
    assert 4 * kernels <= report.weight_bytes, report
    assert report.weight_bytes <= 4 * model.count_params() + ALLOWANCE
    # float32 against Keras: 1e-5 absolute, as tests/test_export.py.
    assert report.max_abs_error <= 1e-5, report
    # And against complex128: outputs of order 1 summing at most 72
    # float32 products per layer, three layers: 1e-5 absolute.
    got = cvk.export.predict_tflite(path, model, inputs)
    np.testing.assert_allclose(
        cvk.from_stacked(got, "complex128"),
        _numpy_model(model, inputs),
        atol=1e-5,
    )


def test_block_kernels_store_every_weight_twice(setup):
    """The contrast: `weights_once=False` keeps the block kernels, at
    least twice every kernel weight, with the same outputs."""
    model, _, inputs, directory = setup
    path = cvk.export.export_tflite(
        model, directory / "block.tflite", weights_once=False
    )
    report = cvk.export.verify_tflite(path, model, inputs)
    assert report.builtin_only, report
    assert report.weight_bytes >= 2 * 4 * _kernels(model), report
    assert report.max_abs_error <= 1e-5, report


def test_full_int8_file_is_integer_and_stores_each_weight_once(setup):
    model, calibration, inputs, directory = setup
    path = cvk.export.export_tflite(
        model,
        directory / "once_int8.tflite",
        quantization="full_int8",
        representative_data=calibration,
        weights_once=True,  # the calibrated modes' default: False
    )
    report = cvk.export.verify_tflite(path, model, inputs)
    assert report.builtin_only, report
    assert {"CONV_2D", "TRANSPOSE_CONV"} <= set(report.ops), report.ops
    # One int8 byte per kernel weight (scales are quantization
    # parameters, not tensor data), at most an int32 per bias, 1 KiB for
    # the rest.
    kernels = _kernels(model)
    biases = model.count_params() - kernels
    assert kernels <= report.weight_bytes <= kernels + 4 * biases + 1024
    # Measured: 3.6% of the largest output against Keras, 3.4% against
    # complex128; 0.1 as tests/test_export_weights.py's full_int8 bound.
    assert report.max_rel_error <= 0.1, report
    expected = _numpy_model(model, inputs)
    got = cvk.from_stacked(
        cvk.export.predict_tflite(path, model, inputs), "complex128"
    )
    error = np.abs(got - expected).max() / np.abs(expected).max()
    assert error <= 0.1, error


def test_dilated_transpose_is_refused_by_name(tmp_path):
    """TFLite's TRANSPOSE_CONV has no dilation (the docstring says so):
    the export fails with the error that names the layer, and writes
    nothing. A dilated `ComplexConv2D` converts (SPACE_TO_BATCH_ND)."""
    inputs = keras.Input((8, 8, 4))
    x = ComplexConv2D(3, 3, dilation_rate=2, padding="same")(inputs)
    outputs = ComplexConv2DTranspose(2, 3, dilation_rate=2, name="up")(x)
    model = keras.Model(inputs, outputs)
    path = tmp_path / "dilated.tflite"
    with pytest.raises(cvk.export.UnsupportedOpsError, match="'up'"):
        cvk.export.export_tflite(model, path)
    assert not path.exists()
