"""Regression tests for the export items of issue 11: dynamic length with
padding masks (9), inputs in their own dtypes (10), empty calibration (11),
`overwrite` (12) and clear errors from `verify_tflite` and the command line
(15).

Conversions are few (each costs seconds; a TensorFlow subprocess under
other backends) and shared through module-scoped fixtures. Float32 files
match Keras within 1e-5 absolute, the bound of tests/test_export.py.
"""

import dataclasses
import os

import keras
import numpy as np
import numpy_reference as ref
import pytest

import cvattn_keras as cvk
from cvattn_keras.export import __main__ as cli
from cvattn_keras.export import _conversion

# These test the exporter itself, which runs on TensorFlow: under another
# backend export_tflite hands the same work to a TensorFlow subprocess,
# which tests/test_export_backends.py tests.
pytestmark = [pytest.mark.slow, pytest.mark.tensorflow_only]

FLOAT32_TOLERANCE = 1e-5  # as tests/test_export.py: float32 kernels


def _run_cli(args, capfd):
    """`(exit status, stdout, stderr)` of the command line, run in this
    process (TensorFlow) or in its subprocess (other backends)."""
    try:
        code = cli.main([str(a) for a in args])
    except SystemExit as exit:  # argparse errors, in this process
        code = exit.code
    captured = capfd.readouterr()
    return code, captured.out, captured.err


def _assert_one_line_error(code, err, *fragments):
    assert code not in (0, None), err
    lines = [line for line in err.strip().splitlines() if line]
    assert lines[-1].startswith("python -m cvattn_keras.export: error: ") or (
        lines[-1].startswith("error: ")
    ), err
    assert "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[-1], err


# ----------------------------------------------------------------------
# Item 9: variable length with padding masks exports builtin-only.
# ----------------------------------------------------------------------


def _variable_length_model():
    """`Input((None, F))` masked three ways: a Keras `Masking` layer into
    ComplexMultiHeadAttention, an explicit bool `value_mask` input, and an
    encoder block's `padding_mask`, plus an explicit `(B, T, T)`
    `attention_mask`."""
    frames = keras.Input((None, 4), name="frames")
    padding = keras.Input((None,), dtype="bool", name="padding")
    pairs = keras.Input((None, None), dtype="bool", name="pairs")
    masked = keras.layers.Masking()(frames)
    x = cvk.layers.ComplexMultiHeadAttention(2, 3, name="keras_mask")(
        masked, masked
    )
    x = cvk.layers.ComplexMultiHeadAttention(
        2, 3, softmax="abs", name="value_mask"
    )(x, x, value_mask=padding, attention_mask=pairs)
    x = cvk.layers.ComplexTransformerEncoder(num_heads=2, name="encoder")(
        x, padding_mask=padding
    )
    return keras.Model([frames, padding, pairs], x)


def _variable_length_inputs(rng, length):
    frames = cvk.to_stacked(ref.random_complex(rng, (3, length, 2)))
    padding = np.ones((3, length), bool)
    padding[1, length // 2 :] = False
    frames[1, length // 2 :] = 0.0  # what Masking detects
    pairs = rng.random((3, length, length)) < 0.7
    pairs[:, :, 0] = True  # no fully masked row in every layer
    return [frames.astype("float32"), padding, pairs]


def test_variable_length_with_padding_masks_exports_builtin_only(rng, tmp_path):
    model = _variable_length_model()
    path = cvk.export.export_tflite(model, tmp_path / "m.tflite")
    for length in (7, 3):  # one file, any length
        report = cvk.export.verify_tflite(
            path, model, _variable_length_inputs(rng, length)
        )
        assert report.builtin_only, report
        assert report.max_abs_error <= FLOAT32_TOLERANCE, report


class _NewAxisSlice(keras.layers.Layer):
    """`x[:, None, :, None]` on a `(B, T)` tensor with both dimensions
    unknown: TFLite's converter cannot lower that strided slice."""

    def call(self, x):
        return x[:, None, :, None] * 2.0


@pytest.mark.tensorflow_only  # a layer that only this process can load
def test_a_non_complex_unsupported_op_does_not_blame_complex_dtypes(tmp_path):
    inputs = keras.Input((None,), name="x")
    model = keras.Model(inputs, _NewAxisSlice(name="slicer")(inputs))
    with pytest.raises(cvk.export.UnsupportedOpsError) as info:
        cvk.export.export_tflite(model, tmp_path / "m.tflite")
    error = info.value
    assert error.ops == ["StridedSlice"]
    assert error.layers == ["slicer"]
    assert not error.involves_complex
    assert "complex" not in str(error).lower(), str(error)
    assert "expand_dims" in str(error)  # the hint for this failure
    assert any("new_axis_mask" in line for line in error.details)
    assert not (tmp_path / "m.tflite").exists()


@pytest.mark.parametrize(
    "ops, details, involves_complex",
    [
        (["StridedSlice"], ["tf.StridedSlice(tensor<?x?xi1>) -> ()"], False),
        (["Where"], [], False),
        (["Cast"], ["tf.Cast(tensor<2xcomplex<f32>>) -> tensor<2xf32>"], 1),
        (["ComplexAbs"], [], True),
    ],
)
def test_unsupported_ops_error_blames_complex_only_when_involved(
    ops, details, involves_complex
):
    error = cvk.export.UnsupportedOpsError(ops, ["layer"], details)
    assert error.involves_complex == bool(involves_complex)
    assert ("complex dtypes" in str(error)) == bool(involves_complex)
    assert isinstance(error, ValueError) and str(ops) in str(error)


# ----------------------------------------------------------------------
# Item 10: bool and int inputs, verified and calibrated in their dtypes.
# ----------------------------------------------------------------------


def _typed_model():
    """A float input, an int32 token input (embedded, added to it) and a
    bool key padding mask; fixed length."""
    frames = keras.Input((5, 4), name="frames")
    tokens = keras.Input((5,), dtype="int32", name="tokens")
    padding = keras.Input((5,), dtype="bool", name="padding")
    x = keras.layers.Add()([frames, keras.layers.Embedding(6, 4)(tokens)])
    x = cvk.layers.ComplexMultiHeadAttention(2, 3)(x, x, value_mask=padding)
    return keras.Model([frames, tokens, padding], x)


def _typed_inputs(rng, batch):
    frames = rng.standard_normal((batch, 5, 4)).astype("float32")
    tokens = rng.integers(0, 6, (batch, 5)).astype("int32")
    padding = rng.random((batch, 5)) < 0.7
    padding[:, 0] = True
    return [frames, tokens, padding]


@pytest.fixture(scope="module")
def typed(tmp_path_factory):
    keras.utils.set_random_seed(3)
    model = _typed_model()
    directory = tmp_path_factory.mktemp("typed")
    data = _typed_inputs(np.random.default_rng(3), 32)
    float_path = cvk.export.export_tflite(
        model, os.path.join(directory, "float.tflite")
    )
    int8_path = cvk.export.export_tflite(
        model,
        os.path.join(directory, "int8.tflite"),
        quantization="int8",
        representative_data=data,
    )
    return model, data, float_path, int8_path, directory


def test_verify_feeds_bool_and_int_inputs_in_their_dtypes(typed):
    model, data, float_path, _, _ = typed
    report = cvk.export.verify_tflite(float_path, model, data)
    assert report.builtin_only
    assert report.max_abs_error <= FLOAT32_TOLERANCE, report
    # Exact values in another dtype are converted (0/1 floats for a bool
    # mask, float token ids); the result is the same.
    loose = [data[0], data[1].astype("float64"), data[2].astype("float32")]
    again = cvk.export.verify_tflite(float_path, model, loose)
    assert again.max_abs_error == report.max_abs_error


def test_verify_refuses_values_that_do_not_fit_the_input_dtype(typed):
    model, data, float_path, _, _ = typed
    halves = data[2].astype("float32") * 0.5
    with pytest.raises(ValueError, match="'padding'.*bool"):
        cvk.export.verify_tflite(float_path, model, [data[0], data[1], halves])
    fractional = data[1] + 0.25
    with pytest.raises(ValueError, match="'tokens'.*int32"):
        cvk.export.verify_tflite(
            float_path, model, [data[0], fractional, data[2]]
        )


def test_int8_calibrates_on_bool_and_int_inputs(typed):
    model, data, _, int8_path, _ = typed
    report = cvk.export.verify_tflite(int8_path, model, data[:8])
    assert "QUANTIZE" in report.ops  # calibrated: integer kernels in use
    # The int8 bound of tests/test_export.py (relative to the output).
    assert report.max_rel_error <= 0.15, report


def test_command_line_verifies_and_calibrates_typed_inputs(typed, capfd):
    """`--verify` draws random inputs in each input's dtype; int8 is
    calibrated on `--representative-data`, keyed by input name."""
    model, data, _, _, directory = typed
    keras_path = os.path.join(directory, "typed.keras")
    model.save(keras_path)
    npz = os.path.join(directory, "calibration.npz")
    np.savez(npz, frames=data[0], tokens=data[1], padding=data[2])
    out = os.path.join(directory, "cli_int8.tflite")
    code, printed, err = _run_cli(
        [
            keras_path,
            out,
            "--quantize",
            "int8",
            "--representative-data",
            npz,
            "--calibration-samples",
            "8",
            "--verify",
        ],
        capfd,
    )
    assert code == 0, err
    assert "quantization: int8" in printed
    assert "non-builtin ops  none" in printed
    wrong = os.path.join(directory, "wrong.npz")
    np.savez(wrong, frames=data[0])
    code, _, err = _run_cli(
        [
            keras_path,
            os.path.join(directory, "other.tflite"),
            "--quantize",
            "int8",
            "--representative-data",
            wrong,
        ],
        capfd,
    )
    _assert_one_line_error(code, err, "wrong.npz", "'padding'")


# ----------------------------------------------------------------------
# Item 11: int8 never silently falls back to a float model.
# ----------------------------------------------------------------------


def _small_model():
    inputs = keras.Input((3, 4), name="x")
    return keras.Model(inputs, cvk.layers.ComplexDense(2)(inputs))


def _empty():
    return iter(())


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_calibration_samples=0), "num_calibration_samples=0"),
        (dict(num_calibration_samples=-5), "num_calibration_samples=-5"),
        (dict(num_calibration_samples=2.0), "num_calibration_samples=2.0"),
        (dict(num_calibration_samples=True), "num_calibration_samples"),
        (
            dict(representative_data=np.zeros((0, 3, 4), "float32")),
            "representative_data.*at least one sample",
        ),
        (dict(representative_data=[]), "representative_data"),
        (dict(representative_data=_empty), "representative_data.*no samp"),
    ],
)
def test_int8_without_calibration_samples_is_an_error(
    tmp_path, monkeypatch, kwargs, match
):
    def no_conversion(*args, **kwargs):
        raise AssertionError("validation must come before conversion")

    monkeypatch.setattr(_conversion, "_convert", no_conversion)
    monkeypatch.setattr(_conversion, "_convert_in_subprocess", no_conversion)
    args = dict(
        quantization="int8",
        representative_data=np.ones((4, 3, 4), "float32"),
    )
    args.update(kwargs)
    path = tmp_path / "m.tflite"
    with pytest.raises(ValueError, match=match):
        cvk.export.export_tflite(_small_model(), path, **args)
    assert not path.exists()


# ----------------------------------------------------------------------
# Issue 22, item 9: no silent calibration on random inputs; a verified
# error far above the mode's usual one is a warning and exit status 3.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["int8", "full_int8", "int16x8"])
def test_command_line_calibrates_only_on_data_asked_for(tmp_path, capfd, mode):
    """Without --representative-data a calibrated mode is refused before
    the model is loaded (no conversion): random inputs only by name."""
    keras_path = tmp_path / "m.keras"
    _small_model().save(keras_path)
    out = tmp_path / "m.tflite"
    code, _, err = _run_cli([keras_path, out, "--quantize", mode], capfd)
    _assert_one_line_error(
        code, err, f"--quantize {mode}", "--representative-data random"
    )
    assert code == 2 and not out.exists()


def test_command_line_random_calibration_by_name(tmp_path, capfd):
    keras_path = tmp_path / "m.keras"
    _small_model().save(keras_path)
    out = tmp_path / "m.tflite"
    code, printed, err = _run_cli(
        [
            keras_path,
            out,
            "--quantize",
            "int8",
            "--representative-data",
            "random",
            "--calibration-samples",
            "16",
            "--verify",
        ],
        capfd,
    )
    assert code == 0, err
    assert "calibrated on random inputs" in printed
    assert "int8 files usually <= 0.15" in printed and "WARNING" not in printed


def test_verify_flags_an_error_far_above_the_usual_one(tmp_path, capfd):
    """int8 calibrated on samples 100 times smaller than those verified
    (the samples of the .npz after the calibration ones): the file
    saturates, and both the report and the command line say so."""
    model = _small_model()
    keras_path = tmp_path / "m.keras"
    model.save(keras_path)
    rng = np.random.default_rng(22)
    x = rng.standard_normal((24, 3, 4)).astype("float32")
    x[:16] *= 0.1  # calibration
    x[16:] *= 10.0  # verification
    npz = tmp_path / "data.npz"
    np.savez(npz, x=x)
    out = tmp_path / "m.tflite"
    code, printed, err = _run_cli(
        [
            keras_path,
            out,
            "--quantize",
            "int8",
            "--representative-data",
            npz,
            "--calibration-samples",
            "16",
            "--verify",
        ],
        capfd,
    )
    assert code == 3, err
    assert out.exists()  # written, but suspect
    assert "FAR ABOVE" in printed and "WARNING" in printed, printed
    lines = err.strip().splitlines()
    assert lines[-1].startswith("warning: max rel error"), err
    assert "far above the usual error of int8 files" in lines[-1]
    assert "Traceback" not in err
    report = cvk.export.verify_tflite(out, model, x[16:20])
    assert report.quantization == "int8"
    assert report.max_rel_error > 0.15 and not report.within_expected
    assert "representative_data" in report.warning, report.warning
    # In the calibrated range, or with a bound given: no warning.
    assert cvk.export.verify_tflite(out, model, x[:4]).within_expected
    loose = cvk.export.verify_tflite(
        out, model, x[16:20], expected_max_rel_error=10.0
    )
    assert loose.within_expected and loose.warning is None
    with pytest.raises(ValueError, match="expected_max_rel_error=0"):
        cvk.export.verify_tflite(out, model, x[:4], expected_max_rel_error=0)


# ----------------------------------------------------------------------
# Item 12: overwrite, and a directory as the output.
# ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small model exported with the default `overwrite=True` over an
    existing junk file, which it must replace."""
    keras.utils.set_random_seed(5)
    model = _small_model()
    directory = tmp_path_factory.mktemp("small")
    path = os.path.join(directory, "small.tflite")
    with open(path, "wb") as f:
        f.write(b"junk")
    cvk.export.export_tflite(model, path)
    return model, path


def test_default_overwrite_replaces_an_existing_file(small):
    model, path = small
    with open(path, "rb") as f:
        assert f.read(8)[4:] == b"TFL3"  # no longer the junk
    report = cvk.export.verify_tflite(path, model, np.ones((2, 3, 4)))
    assert report.max_abs_error <= FLOAT32_TOLERANCE


def test_overwrite_false_keeps_the_file_and_refuses_before_converting(
    tmp_path, monkeypatch
):
    def no_conversion(*args, **kwargs):
        raise AssertionError("the refusal must come before conversion")

    monkeypatch.setattr(_conversion, "_convert", no_conversion)
    monkeypatch.setattr(_conversion, "_convert_in_subprocess", no_conversion)
    path = tmp_path / "m.tflite"
    path.write_bytes(b"keep me")
    with pytest.raises(FileExistsError, match="overwrite=True") as info:
        cvk.export.export_tflite(_small_model(), path, overwrite=False)
    assert isinstance(info.value, ValueError)  # a bad argument, too
    assert path.read_bytes() == b"keep me"
    directory = tmp_path / "d.tflite"
    directory.mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        cvk.export.export_tflite(_small_model(), directory)
    with pytest.raises(ValueError, match="overwrite='yes'"):
        cvk.export.export_tflite(_small_model(), path, overwrite="yes")


def test_command_line_refuses_an_existing_output(small, tmp_path, capfd):
    model, _ = small
    keras_path = tmp_path / "m.keras"
    model.save(keras_path)
    out = tmp_path / "m.tflite"
    out.write_bytes(b"keep me")
    code, _, err = _run_cli([keras_path, out], capfd)
    _assert_one_line_error(code, err, "already exists", "--overwrite")
    assert out.read_bytes() == b"keep me"
    directory = tmp_path / "d.tflite"
    directory.mkdir()
    code, _, err = _run_cli([keras_path, directory], capfd)
    _assert_one_line_error(code, err, "is a directory")
    code, printed, err = _run_cli([keras_path, out, "--overwrite"], capfd)
    assert code == 0, err
    assert "wrote" in printed and out.read_bytes()[4:8] == b"TFL3"


# ----------------------------------------------------------------------
# Item 15: verify_tflite and the command line on bad files and numbers.
# ----------------------------------------------------------------------


def test_verify_on_a_junk_empty_or_directory_path(small, tmp_path):
    model, _ = small
    inputs = np.ones((1, 3, 4), "float32")
    empty = tmp_path / "empty.tflite"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty.tflite' is empty"):
        cvk.export.verify_tflite(empty, model, inputs)
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"this is not a flatbuffer at all")
    with pytest.raises(ValueError, match="junk.tflite' is not a TFLite"):
        cvk.export.verify_tflite(junk, model, inputs)
    short = tmp_path / "short.tflite"
    short.write_bytes(b"\x00\x01")
    with pytest.raises(ValueError, match="short.tflite' is not a TFLite"):
        cvk.export.verify_tflite(short, model, inputs)
    directory = tmp_path / "d.tflite"
    directory.mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        cvk.export.verify_tflite(directory, model, inputs)


def test_verify_on_a_truncated_file(small, tmp_path):
    model, path = small
    with open(path, "rb") as f:
        head = f.read(64)  # the identifier is there, the rest is missing
    truncated = tmp_path / "truncated.tflite"
    truncated.write_bytes(head)
    with pytest.raises(ValueError, match="truncated.tflite"):
        cvk.export.verify_tflite(truncated, model, np.ones((1, 3, 4)))


def test_verify_on_an_empty_batch(small):
    model, path = small
    with pytest.raises(ValueError, match="`inputs` must hold at least one"):
        cvk.export.verify_tflite(path, model, np.ones((0, 3, 4), "float32"))


@pytest.mark.parametrize(
    "contents, name",
    [
        (b"not a zip", "text.keras"),
        (None, "config-less.keras"),  # a zip without a model in it
    ],
)
def test_command_line_on_a_file_that_is_not_a_model(
    tmp_path, capfd, contents, name
):
    import zipfile

    path = tmp_path / name
    if contents is None:
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "hello")
    else:
        path.write_bytes(contents)
    code, _, err = _run_cli([path, tmp_path / "m.tflite"], capfd)
    _assert_one_line_error(code, err, name)
    assert code == 2
    assert not (tmp_path / "m.tflite").exists()


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--batch-size", "0"),
        ("--calibration-samples", "-3"),
        ("--sequence-length", "0"),
        ("--batch-size", "two"),
    ],
)
def test_command_line_rejects_non_positive_numbers(
    tmp_path, capfd, flag, value
):
    code, _, err = _run_cli(
        [tmp_path / "m.keras", tmp_path / "m.tflite", flag, value], capfd
    )
    _assert_one_line_error(code, err, flag, value)
    assert code == 2


# ----------------------------------------------------------------------
# Issue 31, item 7: non-finite calibration data is refused before any
# conversion, and a converter crash never takes the caller down.
# ----------------------------------------------------------------------


def _no_conversion(monkeypatch):
    def no_conversion(*args, **kwargs):
        raise AssertionError("validation must come before conversion")

    monkeypatch.setattr(_conversion, "_convert", no_conversion)
    monkeypatch.setattr(_conversion, "_convert_in_subprocess", no_conversion)


def _with_inf(data):
    data[2, 1, 3] = np.inf
    return data, r"1 inf and 0 NaN among the 96 values of input 'x'.*sample 2"


def _all_nan(data):
    data[:] = np.nan
    return data, r"0 inf and 96 NaN among the 96 values of input 'x'"


def _a_callable_with_inf(data):
    data[3, 0, 0] = -np.inf

    def samples():
        for i in range(len(data)):
            yield data[i : i + 1]

    return samples, r"1 inf and 0 NaN.*first in sample 3"


@pytest.mark.parametrize("mode", ["int8", "full_int8", "int16x8"])
@pytest.mark.parametrize("make", [_with_inf, _all_nan, _a_callable_with_inf])
def test_non_finite_calibration_data_is_refused_before_conversion(
    tmp_path, monkeypatch, mode, make
):
    _no_conversion(monkeypatch)
    data, match = make(np.ones((8, 3, 4), "float32"))
    path = tmp_path / "m.tflite"
    with pytest.raises(ValueError, match="`representative_data` must hold fin"):
        cvk.export.export_tflite(
            _small_model(), path, mode, representative_data=data
        )
    with pytest.raises(ValueError, match=match):
        cvk.export.export_tflite(
            _small_model(), path, mode, representative_data=data
        )
    assert not path.exists()


def test_only_the_calibration_samples_need_to_be_finite(tmp_path, monkeypatch):
    """Samples past `num_calibration_samples` are not calibrated on."""
    converted = []

    def fake_subprocess(model, quantization, arrays, **kwargs):
        converted.append(arrays)
        return b"fake"

    monkeypatch.setattr(_conversion, "_convert_in_subprocess", fake_subprocess)
    data = np.ones((8, 3, 4), "float32")
    data[6] = np.nan
    cvk.export.export_tflite(
        _small_model(),
        tmp_path / "m.tflite",
        "int8",
        representative_data=data,
        num_calibration_samples=6,
    )
    assert converted[0][0].shape == (6, 3, 4)


def test_calibration_samples_of_different_shapes_are_a_clear_error(
    tmp_path, monkeypatch
):
    """A callable's samples are gathered into one array per input before
    conversion (checked, then calibrated on in a subprocess)."""
    _no_conversion(monkeypatch)
    inputs = keras.Input((None, 4), name="x")
    model = keras.Model(inputs, cvk.layers.ComplexDense(2)(inputs))

    def samples():
        yield np.ones((1, 5, 4), "float32")
        yield np.ones((1, 6, 4), "float32")

    with pytest.raises(
        ValueError, match=r"representative_data.*one shape.*\(1, 6, 4\)"
    ):
        cvk.export.export_tflite(
            model, tmp_path / "m.tflite", "int8", representative_data=samples
        )


def test_command_line_refuses_non_finite_calibration_data(
    tmp_path, capfd, monkeypatch
):
    _no_conversion(monkeypatch)
    keras_path = tmp_path / "m.keras"
    _small_model().save(keras_path)
    data = np.ones((8, 3, 4), "float32")
    data[0, 0, 0] = np.inf
    npz = tmp_path / "data.npz"
    np.savez(npz, x=data)
    out = tmp_path / "m.tflite"
    code, _, err = _run_cli(
        [keras_path, out, "--quantize", "int8", "--representative-data", npz],
        capfd,
    )
    _assert_one_line_error(
        code, err, "--representative-data", "data.npz", "must hold finite"
    )
    assert code == 2 and not out.exists()


# What a caller ran before issue 31: int8 calibration in its own process
# on finite inputs so large that an attention score overflows; TensorFlow
# 2.21's quantizer then killed the process with SIGSEGV ('scale out of
# expressed type range'). Run in a child, so that a regression fails this
# test instead of crashing the test run.
_CRASHING_CALIBRATION = """
import numpy as np, keras
import cvattn_keras as cvk
inputs = keras.Input((3, 4), name="x")
x = cvk.layers.ComplexMultiHeadAttention(1, 2)(inputs, inputs)
model = keras.Model(inputs, cvk.layers.ComplexDense(2)(x))
data = np.random.default_rng(0).standard_normal((8, 3, 4))
data = (data / np.abs(data).max() * 1e20).astype("float32")
try:
    cvk.export.export_tflite(
        model, {path!r}, "int8", representative_data=data
    )
except RuntimeError as error:
    print("raised:", " ".join(str(error).split()))
"""


def test_a_converter_crash_does_not_take_the_caller_down(tmp_path):
    import subprocess
    import sys

    path = str(tmp_path / "m.tflite")
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING_CALIBRATION.format(path=path)],
        env=dict(os.environ, KERAS_BACKEND="tensorflow"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "raised: TensorFlow's converter crashed" in done.stdout, done.stdout
    assert "'int8'" in done.stdout and "representative_data" in done.stdout
    assert not os.path.exists(path)


# ----------------------------------------------------------------------
# Issue 31, item 8: a mixed-precision model's error names its policy.
# ----------------------------------------------------------------------


def _policy_model(policy):
    inputs = keras.Input((3, 4), name="x")
    x = cvk.layers.ComplexDense(2, dtype=policy)(inputs)
    return keras.Model(inputs, keras.layers.Dense(3)(x))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_a_mixed_precision_model_names_its_dtype_policy(
    tmp_path, monkeypatch, capfd, policy
):
    _no_conversion(monkeypatch)
    model = _policy_model(policy)
    path = tmp_path / "m.tflite"
    with pytest.raises(ValueError, match=f"dtype policies \\['{policy}'\\]"):
        cvk.export.export_tflite(model, path)
    with pytest.raises(ValueError, match=r"set_dtype_policy\('float32'\)"):
        cvk.export.export_tflite(model, path, "float16")
    keras_path = tmp_path / "m.keras"
    model.save(keras_path)
    code, _, err = _run_cli([keras_path, path], capfd)
    _assert_one_line_error(code, err, "m.keras", policy, "'float32'")
    assert code == 2 and not path.exists()


# ----------------------------------------------------------------------
# Issue 31, item 9: the command line checks before converting, and
# replaces an existing file only by a verified new one.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".tflite", ".onnx"])
def test_command_line_checks_verify_inputs_before_converting(
    tmp_path, capfd, monkeypatch, suffix
):
    def no_conversion(*args, **kwargs):
        raise AssertionError("the checks must come before conversion")

    monkeypatch.setattr(cvk.export, "export_tflite", no_conversion)
    monkeypatch.setattr(cvk.export, "export_onnx", no_conversion)
    inputs = keras.Input((None, 4), name="x")
    keras_path = tmp_path / "m.keras"
    keras.Model(inputs, cvk.layers.ComplexDense(2)(inputs)).save(keras_path)
    out = tmp_path / f"m{suffix}"
    out.write_bytes(b"keep me")
    code, _, err = _run_cli([keras_path, out, "--verify", "--overwrite"], capfd)
    _assert_one_line_error(code, err, "--sequence-length", "'x'")
    assert code == 2 and out.read_bytes() == b"keep me"
    if suffix == ".tflite":  # a static batch of a variable-length input
        code, _, err = _run_cli(
            [keras_path, out, "--overwrite", "--static-batch", "2"], capfd
        )
        _assert_one_line_error(code, err, "m.keras", "batch_size=2")
        assert code == 2 and out.read_bytes() == b"keep me"


@dataclasses.dataclass(frozen=True)
class _Report:
    """What the command line reads of a verification report."""

    path: str
    warning: str = None

    def __str__(self):
        return f"report on {self.path}"


@pytest.mark.parametrize(
    "outcome, exists, code, contents",
    [
        ("error", True, 1, b"keep me"),
        ("error", False, 1, None),
        ("far above", True, 3, b"keep me"),
        ("far above", False, 3, b"new"),  # written, but suspect
        ("within", True, 0, b"new"),
        ("within", False, 0, b"new"),
    ],
)
def test_command_line_replaces_a_file_only_by_a_verified_one(
    tmp_path, capfd, monkeypatch, outcome, exists, code, contents
):
    exported, verified = [], []

    def fake_export(model, path, **kwargs):
        exported.append(path)
        with open(path, "wb") as f:
            f.write(b"new")
        return path

    def fake_verify(path, model, inputs, **kwargs):
        verified.append(path)
        with open(path, "rb") as f:
            assert f.read() == b"new"
        if outcome == "error":
            raise ValueError("the file does not run")
        if outcome == "far above":
            return _Report(path, "max rel error 0.9")
        return _Report(path)

    monkeypatch.setattr(cvk.export, "export_tflite", fake_export)
    monkeypatch.setattr(cvk.export, "verify_tflite", fake_verify)
    keras_path = tmp_path / "m.keras"
    _small_model().save(keras_path)
    out = tmp_path / "m.tflite"
    if exists:
        out.write_bytes(b"keep me")
        out.chmod(0o640)
    status, printed, err = _run_cli(
        [keras_path, out, "--verify", "--overwrite"], capfd
    )
    assert status == code, err
    # The new file was verified next to OUTPUT, before replacing it.
    assert exported == verified
    assert os.path.dirname(exported[0]) == str(tmp_path)
    assert exported[0] != str(out)
    assert sorted(os.listdir(tmp_path)) == ["m.keras"] + (
        ["m.tflite"] if contents else []
    )
    if contents is None:
        assert "was not written" in err
        return
    assert out.read_bytes() == contents
    if exists:
        assert out.stat().st_mode & 0o777 == 0o640  # its own mode kept
    if outcome == "far above" and exists:
        assert "was kept" in err.strip().splitlines()[-1]
    elif outcome != "error":
        assert "wrote" in printed and f"report on {out}" in printed


def test_cli_export_failures_are_one_line_and_recorded(tmp_path, capsys):
    """What the command does with an export that raised, past the format's
    own errors: a file error is a `_CommandError` naming OUTPUT; a
    `ValueError` and anything else exit 1 with one line on stderr and
    their kind in `--error-file`."""
    import argparse
    import json

    error_file = tmp_path / "error.json"
    args = argparse.Namespace(output="out.tflite", error_file=str(error_file))
    with pytest.raises(cli._CommandError, match="file-system error while "):
        cli._export_failed(args, PermissionError("denied"))

    class Both(OSError, ValueError):
        pass

    # An error of both kinds (as io.UnsupportedOperation) is a file error.
    with pytest.raises(cli._CommandError, match="file-system error while "):
        cli._export_failed(args, Both("unsupported"))
    assert not error_file.exists()

    assert cli._export_failed(args, ValueError("bad\n  value")) == 1
    assert capsys.readouterr().err == "error: bad value\n"
    assert json.loads(error_file.read_text()) == {
        "kind": "value",
        "message": "bad\n  value",
    }

    assert cli._export_failed(args, RuntimeError("\x1b[1mboom\x1b[0m")) == 1
    message = "export failed: RuntimeError: boom"
    assert capsys.readouterr().err == f"error: {message}\n"
    assert json.loads(error_file.read_text()) == {
        "kind": "other",
        "message": message,
    }
