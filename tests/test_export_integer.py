"""Tests of the full-integer TFLite modes (`"full_int8"`, `"int16x8"`).

Full-integer conversions always run in a TensorFlow subprocess (TensorFlow
2.21's quantizer can crash its process), about 10 s each on two cores, so
the converting tests share module-scoped files and are `tensorflow_only`
(under another backend they would take the same subprocess route again).

Tolerances: relative to the largest |output| (`max_rel_error`), about 3x
the errors measured when the tests were written (stated at each test).
"""

import os

import keras
import numpy as np
import numpy_reference as ref
import pytest

import cvattn_keras as cvk
from cvattn_keras.export import __main__ as cli


def _attention_model():
    """Float inputs only: ComplexDense -> causal self-attention ->
    ComplexDense."""
    frames = keras.Input((8, 16), name="frames")
    x = cvk.layers.ComplexDense(8, name="dense_in")(frames)
    x = cvk.layers.ComplexMultiHeadAttention(2, 4, name="attention")(
        x, x, use_causal_mask=True
    )
    return keras.Model(frames, cvk.layers.ComplexDense(4, name="head")(x))


def _dense_model():
    frames = keras.Input((8, 16), name="frames")
    x = cvk.layers.ComplexDense(8)(frames)
    return keras.Model(frames, cvk.layers.ComplexDense(4)(x))


def _data(rng, count=64):
    return cvk.to_stacked(ref.random_complex(rng, (count, 8, 8)))


@pytest.fixture(scope="module")
def full_int8(tmp_path_factory):
    """One full_int8 file with a static batch of 2 (calibrated in batches
    of 2)."""
    keras.utils.set_random_seed(11)
    rng = np.random.default_rng(11)
    model = _attention_model()
    data = _data(rng)
    path = cvk.export.export_tflite(
        model,
        os.path.join(tmp_path_factory.mktemp("int"), "full.tflite"),
        quantization="full_int8",
        representative_data=data,
        batch_size=2,
    )
    return model, data, path


# Measured when written: 3.5e-2 of the largest output (int8 activations
# through the attention's softmax); 0.1 leaves about 3x.
FULL_INT8_TOLERANCE = 0.1


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_full_int8_has_int8_inputs_and_outputs_and_matches_keras(full_int8):
    model, data, path = full_int8
    report = cvk.export.verify_tflite(path, model, data[:2])
    (info,) = report.inputs
    assert info.dtype == "int8" and info.shape == (2, 8, 16)
    assert info.scale > 0 and -128 <= info.zero_point <= 127
    (out,) = report.outputs
    assert out.dtype == "int8" and out.scale > 0
    # No float kernel and no float boundary.
    assert not {"QUANTIZE", "DEQUANTIZE"} & set(report.ops), report
    # verify_tflite quantizes the inputs and dequantizes the outputs: the
    # error is comparable with that of float files (raw int8 codes would
    # be off by ~100x the output's scale).
    assert report.max_rel_error <= FULL_INT8_TOLERANCE, report
    text = str(report)
    assert "frames: int8[2x8x16] scale" in text and "zero point" in text


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_verify_quantizes_and_dequantizes_with_the_files_parameters(
    full_int8,
):
    """The error verify_tflite reports is the one of the file's affine maps
    applied by hand: `q = round(x / s) + z` in, `s (q - z)` out."""
    from ai_edge_litert.interpreter import Interpreter

    model, data, path = full_int8
    x = data[:2]
    report = cvk.export.verify_tflite(path, model, x, num_runs=1)
    runner = Interpreter(model_path=path).get_signature_runner()
    scale, zero = runner.get_input_details()["frames"]["quantization"]
    codes = np.clip(np.round(x.astype("float64") / scale) + zero, -128, 127)
    ((name, y),) = runner(frames=codes.astype("int8")).items()
    scale, zero = runner.get_output_details()[name]["quantization"]
    y = scale * (y.astype("float64") - zero)
    expected = keras.ops.convert_to_numpy(model(x)).astype("float64")
    manual = np.max(np.abs(y - expected))
    # Same arithmetic, float64 both ways: equal up to rounding.
    assert report.max_abs_error == pytest.approx(manual, rel=1e-9, abs=1e-12)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_a_static_file_refuses_another_batch(full_int8):
    model, data, path = full_int8
    with pytest.raises(ValueError, match="static batch of 2"):
        cvk.export.verify_tflite(path, model, data[:3])


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_full_int8_names_the_float_ops_and_the_layer(rng, tmp_path):
    """ComplexLayerNormalization's power-of-two rescaling (CEIL, FLOOR,
    POW, NEG, ... on exponents) has no int8 kernel: the error names those
    ops and the layer, and no file is written."""
    frames = keras.Input((8, 16), name="frames")
    x = cvk.layers.ComplexLayerNormalization(name="norm")(frames)
    model = keras.Model(frames, cvk.layers.ComplexDense(4)(x))
    path = tmp_path / "m.tflite"
    with pytest.raises(cvk.export.FloatFallbackError) as info:
        cvk.export.export_tflite(
            model,
            path,
            quantization="full_int8",
            representative_data=_data(rng, 16),
        )
    assert "CEIL" in info.value.ops and "POW" in info.value.ops
    assert info.value.layers == ["norm"]
    assert "full_int8" in str(info.value) and "'norm'" in str(info.value)
    assert not path.exists()


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_int16x8_has_int16_inputs_and_outputs_and_matches_keras(rng, tmp_path):
    model = _dense_model()
    data = _data(rng)
    path = cvk.export.export_tflite(
        model,
        tmp_path / "m.tflite",
        quantization="int16x8",
        representative_data=data,
    )
    report = cvk.export.verify_tflite(path, model, data[:4])
    (info,), (out,) = report.inputs, report.outputs
    assert info.dtype == "int16" and info.zero_point == 0
    assert out.dtype == "int16" and out.zero_point == 0
    # Measured when written: 4.9e-3, the int8 weights' rounding (int16
    # activations add little); 3x that.
    assert report.max_rel_error <= 1.5e-2, report


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_int16x8_without_int16_kernels_names_the_ops(rng, tmp_path):
    """TensorFlow 2.21 has no 16x8 kernel for the masked softmax's
    SELECT_V2, GREATER and DIV: the converter refuses them, and the error
    names them."""
    path = tmp_path / "m.tflite"
    with pytest.raises(cvk.export.FloatFallbackError) as info:
        cvk.export.export_tflite(
            _attention_model(),
            path,
            quantization="int16x8",
            representative_data=_data(rng, 8),
        )
    assert "SELECT_V2" in info.value.ops, info.value
    assert "int16x8" in str(info.value)
    assert not path.exists()


@pytest.mark.parametrize("mode", ["full_int8", "int16x8"])
def test_full_integer_needs_representative_data(tmp_path, mode):
    with pytest.raises(ValueError, match="representative_data"):
        cvk.export.export_tflite(
            _dense_model(), tmp_path / "m.tflite", quantization=mode
        )
    assert not (tmp_path / "m.tflite").exists()


def test_full_integer_modes_are_offered():
    assert {"full_int8", "int16x8"} <= set(cvk.export.QUANTIZATIONS)
    choices = next(
        action.choices
        for action in cli._parser()._actions
        if action.dest == "quantize"
    )
    assert {"full_int8", "int16x8"} <= set(choices)


def test_subprocess_records_of_float_fallbacks_become_the_error(tmp_path):
    import json
    import subprocess

    error_file = tmp_path / "error.json"
    record = {
        "kind": "float_fallback",
        "ops": ["NEG"],
        "layers": ["encoder/norm"],
        "details": ["NEG -> model/encoder_1/norm_1/Neg"],
        "quantization": "full_int8",
    }
    error_file.write_text(json.dumps(record))
    done = subprocess.CompletedProcess([], 1, "", "")
    with pytest.raises(cvk.export.FloatFallbackError) as info:
        cvk.export._raise_subprocess_error(done, str(error_file), "jax")
    assert info.value.ops == ["NEG"] and info.value.layers == ["encoder/norm"]
    assert isinstance(info.value, cvk.export.UnsupportedOpsError)


def test_a_crashed_converter_is_a_clear_error(tmp_path):
    import subprocess

    done = subprocess.CompletedProcess([], -11, "", "scale out of range")
    with pytest.raises(RuntimeError, match="crashed.*signal 11.*full_int8"):
        cvk.export._raise_subprocess_error(
            done, str(tmp_path / "none.json"), "tensorflow", "full_int8"
        )
