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
from cvattn_keras.export._subprocess import _raise_subprocess_error


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
    assert report.quantization == "full_int8" and report.within_expected


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
def test_predict_runs_a_static_file_in_padded_batches(full_int8):
    """predict_tflite over 5 samples of a file with a static batch of 2:
    three invocations, the last padded; each sample's outputs are those
    verify_tflite checks (the same dequantized codes), and the padding's
    are dropped."""
    model, data, path = full_int8
    got = cvk.export.predict_tflite(path, model, data[:5])
    expected = keras.ops.convert_to_numpy(model(data[:5]))
    assert got.shape == expected.shape and got.dtype == np.float32
    scale = np.max(np.abs(expected))
    assert np.max(np.abs(got - expected)) <= FULL_INT8_TOLERANCE * scale
    # Batched the file's way or one pair at a time: the same numbers.
    pair = cvk.export.predict_tflite(path, model, data[2:4])
    np.testing.assert_array_equal(got[2:4], pair)
    with pytest.raises(ValueError, match="at least one sample"):
        cvk.export.predict_tflite(path, model, data[:0])
    with pytest.raises(ValueError, match="batch_size=0"):
        cvk.export.predict_tflite(path, model, data[:2], batch_size=0)
    with pytest.raises(ValueError, match="static batch of 2.*batch_size=3"):
        cvk.export.predict_tflite(path, model, data[:4], batch_size=3)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_full_int8_names_the_float_ops_and_the_layer(rng, tmp_path):
    """Keras' squareplus activation computes `x * x` as SQUARE, which has
    no int8 kernel in this converter: the error names the op and the
    layer, and no file is written."""
    frames = keras.Input((8, 16), name="frames")
    x = cvk.layers.ComplexDense(8)(frames)
    x = keras.layers.Activation("squareplus", name="squareplus")(x)
    model = keras.Model(frames, cvk.layers.ComplexDense(4)(x))
    path = tmp_path / "m.tflite"
    with pytest.raises(cvk.export.FloatFallbackError) as info:
        cvk.export.export_tflite(
            model,
            path,
            quantization="full_int8",
            representative_data=_data(rng, 16),
        )
    assert info.value.ops == ["SQUARE"], info.value
    assert info.value.layers == ["squareplus"]
    assert "full_int8" in str(info.value) and "'squareplus'" in str(info.value)
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
    assert report.quantization == "int16x8" and report.within_expected
    (info,), (out,) = report.inputs, report.outputs
    assert info.dtype == "int16" and info.zero_point == 0
    assert out.dtype == "int16" and out.zero_point == 0
    # Measured when written: 4.9e-3, the int8 weights' rounding (int16
    # activations add little); 3x that.
    assert report.max_rel_error <= 1.5e-2, report


@pytest.mark.slow
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("softmax", ["abs", "absonly"])
def test_int16x8_without_int16_kernels_names_the_ops(rng, tmp_path, softmax):
    """TensorFlow 2.21 has no 16x8 kernel for DIV, SQRT, GREATER and
    SELECT_V2, which the modulus of APAtt and AAtt needs (computed without
    squaring the scores, for int8's sake): they would stay float, and the
    error names them and the layer."""
    frames = keras.Input((8, 16), name="frames")
    x = cvk.layers.ComplexMultiHeadAttention(2, 4, softmax=softmax)(
        frames, frames
    )
    path = tmp_path / "m.tflite"
    with pytest.raises(cvk.export.FloatFallbackError) as info:
        cvk.export.export_tflite(
            keras.Model(frames, x),
            path,
            quantization="int16x8",
            representative_data=_data(rng, 8),
        )
    assert {"DIV", "SQRT"} <= set(info.value.ops), info.value
    assert "int16x8" in str(info.value)
    assert (
        info.value.layers
        and "complex_multi_head_attention" in (info.value.layers[0])
    ), info.value
    assert not path.exists()


# ----------------------------------------------------------------------
# Every layer in full_int8 (and int16x8 where the converter has the
# kernels): one file per mode holding every attention variant (causal
# and over a padded memory) and every norm, each as its own output.
# ----------------------------------------------------------------------

VARIANTS = ("real", "abs", "absonly", "naive")


def _every_layer_model(variants=VARIANTS, padding=True):
    """Inputs `frames` (B, 8, 2*8), `memory` (B, 5, 2*8) and, with
    `padding`, the boolean `memory_mask` (B, 8, 5) (False: a padded step);
    one output per attention variant (causal self-attention, then
    cross-attention to the memory, masked at run time) and per norm."""
    layers = cvk.layers
    frames = keras.Input((8, 16), name="frames")
    memory = keras.Input((5, 16), name="memory")
    inputs = [frames, memory]
    mask = None
    if padding:
        mask = keras.Input((8, 5), dtype="bool", name="memory_mask")
        inputs.append(mask)
    x = layers.ComplexDense(8, name="dense_in")(frames)
    outputs = []
    for softmax in variants:
        y = layers.ComplexMultiHeadAttention(
            2, 4, softmax=softmax, name=f"self_{softmax}"
        )(x, x, use_causal_mask=True)
        y = layers.ComplexMultiHeadAttention(
            2, 4, softmax=softmax, name=f"cross_{softmax}"
        )(y, memory, attention_mask=mask)
        outputs.append(y)
    for norm in (
        layers.ComplexLayerNormalization(name="layer"),
        layers.ComplexLayerNormalization(estimator="biased", name="biased"),
        layers.ComplexLayerNormalization(method="naive", name="naive"),
        layers.ComplexRMSNormalization(complex_scale=True, name="rms"),
        layers.ComplexBatchNormalization(name="batch"),
        layers.ComplexBatchNormalization(
            convention="reference", name="batch_reference"
        ),
    ):
        outputs.append(norm(x))
    return keras.Model(inputs, outputs)


def _every_layer_data(rng, count, padding=True):
    frames = _data(rng, count)
    memory = cvk.to_stacked(ref.random_complex(rng, (count, 5, 8)))
    data = [frames, memory.astype("float32")]
    if padding:
        mask = np.ones((count, 8, 5), bool)
        mask[::2, :, 3:] = False  # every other sample: 2 padded steps
        data.append(mask)
    return data


def _per_output_errors(path, model, inputs):
    """Each output's largest error relative to its largest |value|, the
    file run on LiteRT with its inputs quantized and its outputs
    dequantized by their own scale and zero point."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=path).get_signature_runner()
    feeds = {}
    for name, x in zip(("frames", "memory", "memory_mask"), inputs):
        detail = runner.get_input_details()[name]
        if x.dtype == bool:
            feeds[name] = x
            continue
        scale, zero = detail["quantization"]
        info = np.iinfo(detail["dtype"])
        codes = np.round(x.astype("float64") / scale) + zero
        feeds[name] = np.clip(codes, info.min, info.max).astype(detail["dtype"])
    results = runner(**feeds)
    details = runner.get_output_details()
    expected = [keras.ops.convert_to_numpy(y) for y in model(inputs)]
    errors = {}
    for index, name in enumerate(model.output_names):
        key = f"output_{index}"
        scale, zero = details[key]["quantization"]
        got = scale * (results[key].astype("float64") - zero)
        want = expected[index].astype("float64")
        errors[name] = np.max(np.abs(got - want)) / np.max(np.abs(want))
    return errors


# Measured when written (each output's largest error relative to its
# largest |value|, a static batch of 4, 64 calibration samples):
# full_int8: attention 3.6e-2 (CAtt, AAtt) to 4.3e-2 (RIAtt) and 2.0e-1
# for APAtt (two APAtt layers in a row; its phase factors multiply the
# int8 weights), norms 1.9e-2 (batch) to 4.9e-2 (layer);
# int16x8 (no APAtt, AAtt): attention 7e-3 to 1.2e-2, norms 3.8e-3 to
# 8.5e-3 (mostly the int8 weights). The bounds are about 2x these.
EVERY_LAYER_TOLERANCE = {
    "full_int8": dict(attention=0.1, abs=0.4, norm=0.1),
    "int16x8": dict(attention=2.5e-2, norm=2e-2),
}


@pytest.mark.slow
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("mode", ["full_int8", "int16x8"])
def test_every_layer_converts_with_no_float_op(rng, tmp_path, mode):
    """Every attention variant (masked: causal, and a padded memory by a
    bool mask input, computed at run time) and every norm converts with no
    float op (`export_tflite` checks it and would raise
    `FloatFallbackError`) and matches Keras within the quantization error.
    int16x8: APAtt and AAtt have no 16-bit kernels (see above); the run-
    time mask converts there too (issue 22, item 10: a GATHER instead of
    SELECT_V2, which 16-bit TFLite lacks)."""
    keras.utils.set_random_seed(7)
    full = mode == "full_int8"
    variants = VARIANTS if full else ("real", "naive")
    model = _every_layer_model(variants)
    data = _every_layer_data(rng, 64)
    path = cvk.export.export_tflite(
        model,
        tmp_path / "m.tflite",
        quantization=mode,
        representative_data=data,
        batch_size=4,
    )
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        tflite = schema.ModelT.InitFromPackedBuf(f.read(), 0)
    floats = {schema.TensorType.FLOAT32, schema.TensorType.FLOAT16}
    assert not [t.name for t in tflite.subgraphs[0].tensors if t.type in floats]
    errors = _per_output_errors(path, model, [x[:4] for x in data])
    report = cvk.export.verify_tflite(path, model, [x[:4] for x in data], 1)
    assert report.quantization == mode, report
    bounds = EVERY_LAYER_TOLERANCE[mode]
    for name, error in errors.items():
        kind = "attention" if name.startswith("cross_") else "norm"
        kind = "abs" if name == "cross_abs" else kind
        assert error <= bounds[kind], errors


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
        _raise_subprocess_error(done, str(error_file), "jax")
    assert info.value.ops == ["NEG"] and info.value.layers == ["encoder/norm"]
    assert isinstance(info.value, cvk.export.UnsupportedOpsError)


def test_a_crashed_converter_is_a_clear_error(tmp_path):
    import subprocess

    done = subprocess.CompletedProcess([], -11, "", "scale out of range")
    with pytest.raises(RuntimeError, match="crashed.*signal 11.*full_int8"):
        _raise_subprocess_error(
            done, str(tmp_path / "none.json"), "tensorflow", "full_int8"
        )


# ----------------------------------------------------------------------
# The paper's models (examples/train_music.py's "tiny" configuration, on
# synthetic_music data): full_int8 with no float op.
# ----------------------------------------------------------------------

TINY = dict(
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(4, 8),
    frontend_kernel_sizes=(6, 3),
)


def _music_model_and_data(name):
    x, y = cvk.datasets.synthetic_music(num_samples=40, frames=16, notes=12)[:2]
    x, y = np.asarray(x, "float32"), np.asarray(y, "float32")
    keras.utils.set_random_seed(5)
    if name == "music_classifier":
        model = cvk.models.music_classifier(
            frames=16, bins=128, notes=12, **TINY
        )
        return model, x
    model = cvk.models.music_generator(
        source_frames=10, target_frames=6, bins=128, notes=12, **TINY
    )
    return model, [x[:, :10], cvk.models.shift_right(y[:, 10:16])]


# Measured when written (relative to the largest |logit|, untrained
# models, 32 calibration samples, 8 test samples): classifier 5.8e-2 (its
# 8-wide tiny layers; the small configuration's is 3.2e-2); 2.5x that.
MUSIC_TOLERANCE = 0.15


@pytest.mark.slow
@pytest.mark.tensorflow_only
@pytest.mark.parametrize(
    "name",
    ["music_classifier", "music_generator"],
)
def test_music_models_convert_to_full_int8(tmp_path, name):
    model, data = _music_model_and_data(name)
    if name == "music_classifier":
        calibration, test = data[:32], data[32:]
    else:
        calibration, test = [x[:32] for x in data], [x[32:] for x in data]
    path = cvk.export.export_tflite(
        model,
        tmp_path / "m.tflite",
        quantization="full_int8",
        representative_data=calibration,
    )
    report = cvk.export.verify_tflite(path, model, test, num_runs=1)
    assert all(info.dtype == "int8" for info in report.inputs), report
    assert report.max_rel_error <= MUSIC_TOLERANCE, report


def _layer_norm_model(rng):
    """Dense -> LayerNormalization (last axis) -> LayerNormalization over
    two axes -> Dense, with random gammas and betas."""
    frames = keras.Input((8, 16), name="frames")
    x = keras.layers.Dense(16)(frames)
    x = keras.layers.LayerNormalization(name="norm_last")(x)
    x = keras.layers.LayerNormalization(axis=(1, 2), name="norm_two")(x)
    model = keras.Model(frames, keras.layers.Dense(4)(x))
    for weight in model.weights:
        if weight.path.endswith(("gamma", "beta")):
            weight.assign(rng.normal(size=weight.shape).astype("float32"))
    return model


@pytest.mark.parametrize("squared_difference", [True, False])
@pytest.mark.parametrize("axis", [-1, (1, 2)])
def test_integer_keras_layers_is_keras_layer_normalization(
    rng, squared_difference, axis
):
    """The export's form of `LayerNormalization` against NumPy float64,
    and Keras' own `call` restored after the context."""
    from cvattn_keras.export._keras_layers import integer_keras_layers

    layer = keras.layers.LayerNormalization(axis=axis, epsilon=1e-3)
    x = rng.normal(1.5, 2.0, size=(3, 8, 16)).astype("float32")
    layer.build(x.shape)
    for weight in layer.weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32"))
    axes = (2,) if axis == -1 else axis
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    variance = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    gamma = keras.ops.convert_to_numpy(layer.gamma).reshape(
        (1,) + tuple(x.shape[a] if a in axes else 1 for a in (1, 2))
    )
    beta = keras.ops.convert_to_numpy(layer.beta).reshape(gamma.shape)
    want = (x64 - mean) / np.sqrt(variance + 1e-3) * gamma + beta
    original = keras.layers.LayerNormalization.call
    with integer_keras_layers(squared_difference):
        got = keras.ops.convert_to_numpy(layer(x))
    assert keras.layers.LayerNormalization.call is original
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mask_dtype", ["bool", "float32"])
def test_integer_masked_softmax_is_keras_masked_softmax(rng, mask_dtype):
    """The export's form of a masked Keras `Softmax` against NumPy: the
    masked entries 0, each row's attended entries its softmax; a row with
    nothing to attend 0 (Keras: uniform). Another axis keeps Keras'."""
    from cvattn_keras.attention import portable_masking
    from cvattn_keras.export._keras_layers import integer_keras_layers

    logits = rng.normal(0.0, 3.0, size=(2, 3, 5, 6)).astype("float32")
    mask = np.tril(np.ones((5, 6), bool), k=1)[None, None]
    mask = np.broadcast_to(mask, logits.shape).copy()
    mask[1, 2, 4] = False  # a row with nothing to attend
    exp = np.exp(logits - logits.max(-1, keepdims=True)) * mask
    total = exp.sum(-1, keepdims=True)
    want = exp / np.where(total > 0, total, 1.0)
    layer = keras.layers.Softmax()
    other_axis = keras.layers.Softmax(axis=-2)
    original = keras.layers.Softmax.call
    with portable_masking(), integer_keras_layers():
        got = keras.ops.convert_to_numpy(
            layer(logits, mask=mask.astype(mask_dtype))
        )
        kept = keras.ops.convert_to_numpy(other_axis(logits, mask=mask))
    assert keras.layers.Softmax.call is original
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert np.all(got[1, 2, 4] == 0)
    np.testing.assert_allclose(
        kept, keras.ops.convert_to_numpy(other_axis(logits, mask=mask))
    )


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_keras_causal_attention_keeps_its_accuracy_in_full_int8(rng, tmp_path):
    """Keras' `MultiHeadAttention(use_causal_mask=True)` fills masked
    scores with -1e9, which swamped their int8 range (every attended
    weight the same); the export traces its masked softmax without it."""
    frames = keras.Input((8, 16), name="frames")
    x = keras.layers.Dense(16)(frames)
    x = keras.layers.MultiHeadAttention(2, 8)(x, x, use_causal_mask=True)
    model = keras.Model(frames, keras.layers.Dense(4)(x))
    data = rng.normal(size=(64, 8, 16)).astype("float32")
    path = cvk.export.export_tflite(
        model,
        tmp_path / "m.tflite",
        quantization="full_int8",
        representative_data=data,
    )
    report = cvk.export.verify_tflite(path, model, data[:4])
    # Measured when written: about 3.8e-2 (with the fill: 0.38); 2x.
    assert report.max_rel_error <= 0.07, report


@pytest.mark.slow
@pytest.mark.tensorflow_only
@pytest.mark.parametrize(
    "mode, tolerance",
    # Measured when written: 0.023 (full_int8), 0.0047 (int16x8); 3x.
    [("full_int8", 0.07), ("int16x8", 0.015)],
)
def test_keras_layer_normalization_has_full_integer_files(
    rng, tmp_path, mode, tolerance
):
    """Keras' `LayerNormalization` converted with a NEG, which has no
    integer kernel: no full_int8 or int16x8 file of a model with one (the
    radio example's real transformer). The export traces it without."""
    model = _layer_norm_model(rng)
    data = rng.normal(size=(64, 8, 16)).astype("float32")
    path = cvk.export.export_tflite(
        model,
        tmp_path / "m.tflite",
        quantization=mode,
        representative_data=data,
    )
    report = cvk.export.verify_tflite(path, model, data[:4])
    assert "NEG" not in report.ops and "SUB" in report.ops, report
    assert report.max_rel_error <= tolerance, report
    # The model itself still calls Keras' form.
    assert keras.layers.LayerNormalization.call.__qualname__ == (
        "LayerNormalization.call"
    )
