"""Tests of ONNX export (`cvattn_keras.export.export_onnx`) on ONNX Runtime.

Each file is checked for standard ONNX alone (`_check_standard`): every
node an op of the default domain that `onnx` knows, no other domain
imported, no complex element type anywhere.

Conversions cost 3 to 10 seconds each on 2 cores (tf2onnx's graph
optimizers take half of it), so the models combine many layers: one holds
every attention variant under every kind of mask, one every block
(`tests/models.py`), then the paper's two models, and a waveform model
with the layers the others lack; float16 files are tested on the
classifier. Tolerances, from the errors measured when this was written:
float32 files matched Keras within 3.0e-6 absolute (the all-blocks model;
7.7e-7 or less on the others), 1e-5 asserted (3x, and test_export.py's
bound for float32 TFLite files); float16 weights within 4.5e-4 relative
(the classifier), 1e-2 asserted (`EXPECTED_MAX_REL_ERROR["float16"]`, the
TFLite files' bound).

Under a backend other than TensorFlow every export goes through a
TensorFlow subprocess (several seconds each): the conversion tests are
`tensorflow_only`, and `test_export_from_another_backend` converts once
through the subprocess there.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from models import all_blocks_inputs
from models import all_blocks_model
from models import all_variants_inputs
from models import all_variants_model

import cvattn_keras as cvk
from cvattn_keras.export import __main__ as cli

onnx = pytest.importorskip("onnx", reason="needs cvattn_keras[onnx]")
onnxruntime = pytest.importorskip(
    "onnxruntime", reason="needs cvattn_keras[onnx]"
)
pytest.importorskip("tf2onnx", reason="needs cvattn_keras[onnx]")

pytestmark = pytest.mark.slow

BACKEND = keras.backend.backend()

# tests/test_models.py's small sizes.
SMALL = dict(
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(2, 4),
    frontend_kernel_sizes=(3, 3),
)

# float32 files: 3.0e-6 measured at most (see the module docstring).
FLOAT32_ATOL = 1e-5
# float16 weights: 4.5e-4 relative measured.
FLOAT16_RTOL = 1e-2


def _check_standard(path):
    """The op types of the ONNX file at `path`, after checking that it is
    standard ONNX: default-domain ops known to `onnx`, no other opset
    imported, no complex tensor type."""
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    assert {o.domain for o in model.opset_import} <= {"", "ai.onnx"}
    complex_types = {onnx.TensorProto.COMPLEX64, onnx.TensorProto.COMPLEX128}
    ops = set()
    for node in model.graph.node:
        assert node.domain in ("", "ai.onnx"), (node.op_type, node.domain)
        assert onnx.defs.has(node.op_type), node.op_type
        ops.add(node.op_type)
    for tensor in model.graph.initializer:
        assert tensor.data_type not in complex_types, tensor.name
    graph = model.graph
    for info in (*graph.input, *graph.output, *graph.value_info):
        assert info.type.tensor_type.elem_type not in complex_types
    return ops


def _run(path, arrays):
    session = onnxruntime.InferenceSession(
        str(path), providers=["CPUExecutionProvider"]
    )
    names = [arg.name for arg in session.get_inputs()]
    return session.run(None, dict(zip(names, arrays)))


def _keras(model, arrays):
    outputs = model(arrays if len(arrays) > 1 else arrays[0], training=False)
    return [keras.ops.convert_to_numpy(x) for x in keras.tree.flatten(outputs)]


def _max_error(path, model, arrays):
    got, want = _run(path, arrays), _keras(model, arrays)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
    return max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))


# ----------------------------------------------------------------------
# The models.
# ----------------------------------------------------------------------


def _waveform_model():
    """The paper's classifier on waveforms (`ComplexSTFT` first) and, from
    the same input, the layers the other models lack: a full-band STFT
    and its inverse (`ComplexISTFT`), `ComplexFromReal`,
    `ComplexModulus` and `RealReadout`."""
    stft = cvk.layers.ComplexSTFT(64, 16, bins=(0, 24))
    classifier = cvk.models.music_classifier(
        frames=6, notes=4, stft=stft, **SMALL
    )
    waveform = keras.Input(classifier.inputs[0].shape[1:], name="waveform")
    spectra = cvk.layers.ComplexSTFT(32, 8, name="full_stft")(waveform)
    again = cvk.layers.ComplexISTFT(32, 8, length=waveform.shape[1])(spectra)
    real = keras.ops.expand_dims(again, -1)
    x = cvk.layers.ComplexFromReal()(real)
    x = cvk.layers.ComplexDense(2)(x)
    moduli = cvk.layers.ComplexModulus()(x)
    readout = cvk.layers.RealReadout()(x)
    return keras.Model(waveform, [classifier(waveform), again, moduli, readout])


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    return tmp_path_factory.mktemp("onnx")


def _export(model, directory, name, **kwargs):
    path = os.path.join(directory, name)
    assert cvk.export.export_onnx(model, path, **kwargs) == path
    return path


@pytest.fixture(scope="module")
def attention_file(directory):
    keras.utils.set_random_seed(1)
    model = all_variants_model()
    return model, _export(model, directory, "attention.onnx")


@pytest.fixture(scope="module")
def classifier_files(directory):
    keras.utils.set_random_seed(3)
    model = cvk.models.music_classifier(frames=None, bins=10, notes=4, **SMALL)
    return (
        model,
        _export(model, directory, "classifier.onnx"),
        _export(model, directory, "classifier16.onnx", quantization="float16"),
    )


# ----------------------------------------------------------------------
# Conversions (TensorFlow: in this process).
# ----------------------------------------------------------------------


@pytest.mark.tensorflow_only
def test_every_attention_variant_and_mask_matches_keras(rng, attention_file):
    model, path = attention_file
    assert "MatMul" in _check_standard(path)
    # Dynamic batch, query length and key length.
    for batch, length, keys in ((3, 5, 7), (4, 8, 3)):
        arrays = all_variants_inputs(rng, batch, length, keys)
        got = _run(path, arrays)
        assert _max_error(path, model, arrays) <= FLOAT32_ATOL
        assert all(np.all(np.isfinite(g)) for g in got)
        # Scores (B, N, T, 2S): masked keys weigh exactly 0, in Re and Im.
        scores = got[1].reshape(batch, 2, length, 2, keys)
        assert np.all(scores[0] == 0)  # every key masked: zero rows
        assert np.all(scores[-1] == 0)  # a memory of padding only
        causal = np.triu(np.ones((length, keys), bool), 1)
        assert np.all(
            scores[:, :, causal.nonzero()[0], :, causal.nonzero()[1]] == 0
        )


@pytest.mark.tensorflow_only
def test_every_block_matches_keras(rng, directory):
    keras.utils.set_random_seed(2)
    model = all_blocks_model()
    path = _export(model, directory, "blocks.onnx")
    assert {"MatMul", "Conv"} <= _check_standard(path)
    assert _max_error(path, model, all_blocks_inputs(rng)) <= FLOAT32_ATOL


@pytest.mark.tensorflow_only
def test_the_classifier_takes_any_batch_and_length(rng, classifier_files):
    model, path, path16 = classifier_files
    _check_standard(path)
    report = None
    for batch, frames in ((1, 6), (3, 9)):
        x = rng.standard_normal((batch, frames, 20)).astype("float32")
        assert _max_error(path, model, [x]) <= FLOAT32_ATOL
        report = cvk.export.verify_onnx(path16, model, x, num_runs=2)
        assert report.max_rel_error <= FLOAT16_RTOL, report
    # Half the weight data in the float16 file.
    full = cvk.export.verify_onnx(path, model, x, num_runs=2)
    assert report.weight_bytes < 0.6 * full.weight_bytes
    assert [i.shape for i in full.inputs] == [(-1, -1, 20)]
    assert [(o.name, o.shape) for o in full.outputs] == [
        ("output_0", (-1, -1, 4))
    ]
    assert full.max_abs_error <= FLOAT32_ATOL
    assert full.quantization == "float32"
    text = str(full)
    for line in ("ONNX file", "opset            15", "max abs error"):
        assert line in text
    assert "input            spectra: float32[?x?x20]" in text


@pytest.mark.tensorflow_only
def test_the_generator_and_a_waveform_model_match_keras(rng, directory):
    keras.utils.set_random_seed(4)
    generator = cvk.models.music_generator(
        source_frames=6, target_frames=4, bins=10, notes=4, **SMALL
    )
    path = _export(generator, directory, "generator.onnx")
    _check_standard(path)
    arrays = [
        rng.standard_normal((3, 6, 20)).astype("float32"),
        (rng.random((3, 4, 4)) < 0.5).astype("float32"),
    ]
    assert _max_error(path, generator, arrays) <= FLOAT32_ATOL
    waveform = _waveform_model()
    path = _export(waveform, directory, "waveform.onnx", opset=18)
    assert "Conv" in _check_standard(path)
    assert onnx.load(path).opset_import[0].version == 18
    length = waveform.inputs[0].shape[1]
    x = rng.standard_normal((2, length)).astype("float32")
    assert _max_error(path, waveform, [x]) <= FLOAT32_ATOL


@pytest.mark.tensorflow_only
def test_verify_accounts_for_what_an_inverse_stft_amplifies(rng, directory):
    """An uncentred ComplexISTFT divides its edge samples by a near-zero
    window envelope (periodic Hann, w[1] = 1.5e-4), so float32 rounding
    there is amplified in Keras and in a correct file alike (measured
    1.6e-4 of the largest sample on ONNX Runtime, above the float32 bound
    of 1e-4; the Keras model moves 3.0e-4 when its inputs move by one ulp):
    the report's bound is at least `ROUNDING_MARGIN` times that floor, so
    the correct file is within it (it was a false alarm, and the command
    line's --verify exited 3), and a file of another inverse is not."""
    from cvattn_keras.export._arguments import ROUNDING_MARGIN
    from cvattn_keras.layers import ComplexISTFT
    from cvattn_keras.layers import ComplexSTFT

    def inverse(window):
        inputs = keras.Input((13, 258), name="spectra")
        layer = ComplexISTFT(256, 64, center=False, window=window)
        return keras.Model(inputs, layer(inputs))

    model = inverse("hann")
    path = _export(model, directory, "istft.onnx")
    x = rng.standard_normal((4, 1024)).astype("float32")
    spectra = keras.ops.convert_to_numpy(ComplexSTFT(256, 64, center=False)(x))
    report = cvk.export.verify_onnx(path, model, spectra, num_runs=1)
    assert report.max_rel_error > 1e-4, report  # the float32 bound
    assert report.within_expected and report.warning is None, report
    assert report.expected_max_rel_error <= ROUNDING_MARGIN * 1e-3, report
    other = cvk.export.verify_onnx(path, inverse("hamming"), spectra)
    assert not other.within_expected and other.max_rel_error > 0.01, other
    # The bound of an ordinary model is the mode's.
    tiny = _tiny_model()
    path = _export(tiny, directory, "tiny_bound.onnx")
    x = rng.standard_normal((2, 5, 6)).astype("float32")
    report = cvk.export.verify_onnx(path, tiny, x, num_runs=1)
    assert report.expected_max_rel_error == 1e-4, report


@pytest.mark.tensorflow_only
def test_a_static_batch_of_one(rng, directory):
    model = _tiny_model()
    path = _export(model, directory, "static.onnx", dynamic_batch=False)
    _check_standard(path)
    x = rng.standard_normal((2, 5, 6)).astype("float32")
    report = cvk.export.verify_onnx(path, model, x[:1], num_runs=1)
    assert report.inputs[0].shape == (1, -1, 6)  # the length stays dynamic
    assert report.max_abs_error <= FLOAT32_ATOL
    with pytest.raises(ValueError, match="static batch of 1"):
        cvk.export.verify_onnx(path, model, x)


class _ComplexAbs(keras.layers.Layer):
    """Takes the modulus through a native complex tensor (TensorFlow's
    Complex and ComplexAbs), as libraries with complex dtypes do."""

    def call(self, x):
        import tensorflow as tf

        return tf.abs(tf.complex(x, x))


@pytest.mark.tensorflow_only
def test_an_unsupported_layer_is_named_and_nothing_written(tmp_path):
    x = keras.Input((4, 6), name="x")
    y = _ComplexAbs(name="native_complex")(cvk.layers.ComplexDense(3)(x))
    model = keras.Model(x, keras.layers.Dense(2)(y))
    path = tmp_path / "m.onnx"
    with pytest.raises(cvk.export.ONNXUnsupportedOpsError) as info:
        cvk.export.export_onnx(model, path)
    assert "Complex" in info.value.ops
    assert info.value.layers == ["native_complex"]
    assert info.value.involves_complex
    assert "native_complex" in str(info.value)
    assert isinstance(info.value, ValueError)
    assert not path.exists()


@pytest.mark.tensorflow_only
def test_a_mixed_precision_model_is_refused(tmp_path):
    keras.config.set_dtype_policy("mixed_bfloat16")
    x = keras.Input((4, 6))
    model = keras.Model(x, cvk.layers.ComplexDense(2)(x))
    keras.config.set_dtype_policy("float32")
    with pytest.raises(ValueError, match="mixed_bfloat16.*'float32' policy"):
        cvk.export.export_onnx(model, tmp_path / "m.onnx")


# ----------------------------------------------------------------------
# The command line (a subprocess, any backend: it converts under
# TensorFlow).
# ----------------------------------------------------------------------


def _tiny_model():
    x = keras.Input((None, 6), name="signal")
    y = cvk.layers.ComplexMultiHeadAttention(2, 3)(x, x, use_causal_mask=True)
    return keras.Model(x, cvk.layers.ComplexLayerNormalization()(y))


@pytest.mark.tensorflow_only  # the command runs under TensorFlow anyway
def test_the_command_line_writes_and_verifies_onnx(tmp_path):
    model_path = tmp_path / "m.keras"
    _tiny_model().save(model_path)
    out = tmp_path / "m.onnx"
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cvattn_keras.export",
            str(model_path),
            str(out),
            "--verify",
            "--sequence-length",
            "5",
            "--opset",
            "13",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,  # about 10 s measured
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ONNX file" in done.stdout and "output_0" in done.stdout
    assert "opset            13" in done.stdout
    _check_standard(out)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--quantize", "int8"], "--quantize float16 only"),
        (["--static-batch", "2"], "static batch of 1"),
        (["--opset", "12"], "--opset must be in"),
        (["--static-length", "4"], "only for TFLite"),
        (["--format", "tflite"], "must end in .tflite"),
    ],
)
def test_the_command_line_refuses_bad_onnx_options(
    tmp_path, capsys, arguments, message
):
    model_path = tmp_path / "m.keras"
    model_path.write_bytes(b"")  # never read: the options fail first
    status = cli.main([str(model_path), str(tmp_path / "o.onnx"), *arguments])
    assert status == 2
    assert message in capsys.readouterr().err


def test_the_command_line_refuses_opset_for_tflite(tmp_path, capsys):
    status = cli.main(["m.keras", str(tmp_path / "o.tflite"), "--opset", "15"])
    assert status == 2
    assert "--opset is used only for ONNX" in capsys.readouterr().err


# ----------------------------------------------------------------------
# Under another backend: the TensorFlow subprocess.
# ----------------------------------------------------------------------


@pytest.mark.skipif(
    BACKEND == "tensorflow",
    reason="converts in this process under TensorFlow (tested above)",
)
def test_export_from_another_backend(rng, tmp_path):
    model = cvk.models.music_classifier(frames=None, bins=10, notes=4, **SMALL)
    path = cvk.export.export_onnx(
        model, tmp_path / "m.onnx", quantization="float16"
    )
    _check_standard(path)
    x = rng.standard_normal((2, 7, 20)).astype("float32")
    report = cvk.export.verify_onnx(path, model, x, num_runs=2)
    assert report.quantization == "float16"
    assert report.max_rel_error <= FLOAT16_RTOL, report


@pytest.mark.skipif(
    BACKEND == "tensorflow", reason="TensorFlow converts in this process"
)
def test_another_backend_without_tensorflow_says_how(tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorflow" else find_spec(name, *a),
    )
    with pytest.raises(ValueError, match="ONNX export needs TensorFlow"):
        cvk.export.export_onnx(_tiny_model(), tmp_path / "m.onnx")


# ----------------------------------------------------------------------
# Bad arguments: raised before any conversion.
# ----------------------------------------------------------------------


def test_an_existing_file_is_kept_without_overwrite(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"old")
    with pytest.raises(FileExistsError, match="overwrite=False"):
        cvk.export.export_onnx(_tiny_model(), path, overwrite=False)
    assert path.read_bytes() == b"old"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(quantization="int8"), "quantization"),
        (dict(quantization="float32"), "quantization"),
        (dict(opset=12), "opset"),
        (dict(opset=19), "opset"),
        (dict(opset=15.0), "opset"),
        (dict(dynamic_batch=1), "dynamic_batch"),
        (dict(weights_once="yes"), "weights_once"),
    ],
)
def test_bad_arguments_name_the_argument(tmp_path, kwargs, message):
    name, value = next(iter(kwargs.items()))
    with pytest.raises(ValueError, match=f"{message}.*Received: {name}="):
        cvk.export.export_onnx(_tiny_model(), tmp_path / "m.onnx", **kwargs)


def test_the_path_must_end_in_onnx(tmp_path):
    with pytest.raises(ValueError, match=r"must end in '\.onnx'"):
        cvk.export.export_onnx(_tiny_model(), tmp_path / "m.tflite")


def test_a_missing_extra_names_the_install_command(tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tf2onnx" else find_spec(name, *a),
    )
    with pytest.raises(
        ImportError, match=r'pip install "cvattn_keras\[onnx\]"'
    ):
        cvk.export.export_onnx(_tiny_model(), tmp_path / "m.onnx")


def test_verify_onnx_names_a_file_that_is_not_onnx(tmp_path):
    model = _tiny_model()
    x = np.zeros((1, 3, 6), "float32")
    text = tmp_path / "notes.onnx"
    text.write_text("not a model\n" * 10)
    with pytest.raises(ValueError, match="notes.onnx.*not an ONNX model"):
        cvk.export.verify_onnx(text, model, x)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.onnx.*empty"):
        cvk.export.verify_onnx(empty, model, x)
    with pytest.raises(ValueError, match="No such file"):
        cvk.export.verify_onnx(tmp_path / "missing.onnx", model, x)
    with pytest.raises(ValueError, match="must end in '.onnx'"):
        cvk.export.verify_onnx(tmp_path / "m.tflite", model, x)
    with pytest.raises(ValueError, match="num_runs"):
        cvk.export.verify_onnx(text, model, x, num_runs=0)
