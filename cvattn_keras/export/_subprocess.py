"""The TensorFlow subprocess: conversion under a backend other than
TensorFlow (and, for the full-integer modes, under every backend).

`run_python` runs this interpreter with `KERAS_BACKEND=tensorflow` and its
output captured; the benchmarks run their TensorFlow children with it too.
`convert_saved_copy` is the exporters' protocol on top of it: the model is
saved to a temporary `.keras` file, a child entry (`python -m
cvattn_keras.export` for `export_tflite`, `generator._main` for
`export_generator_tflite`; the same command line for `export_onnx`)
converts it to a `.tflite` (or `.onnx`) file and, where it
fails, writes a JSON record of the failure to an error file, which
`_raise_subprocess_error` turns back into the exception the child met.
"""

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import keras

from cvattn_keras.export._errors import FloatFallbackError
from cvattn_keras.export._errors import ONNXUnsupportedOpsError
from cvattn_keras.export._errors import UnsupportedOpsError

SUBPROCESS_TIMEOUT = 900
"""Seconds that an export through the TensorFlow subprocess (under a
backend other than TensorFlow) may take before it is stopped. Read
from `cvattn_keras.export.SUBPROCESS_TIMEOUT` at each export: set it
there to raise it.
"""

# Set in the environment of the export subprocess, which then converts
# in its own process (the full-integer modes included).
_CHILD_ENV = "CVATTN_KERAS_EXPORT_SUBPROCESS"


def run_python(arguments, timeout, env=None):
    """Runs this Python interpreter on `arguments` (`["-m", MODULE, ...]`,
    `["-c", CODE, ...]` or a script and its arguments) under
    `KERAS_BACKEND=tensorflow`, with the variables of `env` added
    (`TF_CPP_MIN_LOG_LEVEL` is 2 unless set there or already); returns
    the `subprocess.CompletedProcess`, its stdout and stderr as text.

    Raises:
        subprocess.TimeoutExpired: the child ran for more than `timeout`
            seconds (it is then stopped).
    """
    env = dict(os.environ, KERAS_BACKEND="tensorflow", **(env or {}))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return subprocess.run(
        [sys.executable, *arguments],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def convert_saved_copy(
    model,
    arguments,
    who,
    advice,
    scope="",
    install_note="",
    env=None,
    quantization=None,
    suffix=".tflite",
):
    """The bytes of the `.tflite` flatbuffer (or of the file of another
    `suffix`) that a TensorFlow subprocess converts from a copy of `model`
    saved to a temporary directory.

    Args:
        model: the Keras model.
        arguments: a function of `(directory, model_path, output,
            error_file)` that returns the child's `run_python` arguments
            (it may write more inputs into `directory`); the child reads
            `model_path`, writes `output`, and on failure a JSON record in
            `error_file` (see `_raise_subprocess_error`).
        who: the exporter's name in the messages (`"export_tflite"`).
        advice: the sentence that ends the message of a model that cannot
            be saved.
        scope: added after the backend's name in that message, e.g.
            `" (and for full-integer modes)"`.
        install_note: added to the message of a missing TensorFlow.
        env: environment variables for the child (`run_python`).
        quantization: the mode asked for, named where the child crashes.
        suffix: the suffix of the file the child writes (`".onnx"` for
            `export_onnx`).
    """
    backend = keras.backend.backend()
    if importlib.util.find_spec("tensorflow") is None:
        what = "ONNX" if suffix == ".onnx" else "TFLite"
        raise ValueError(
            f"{what} export needs TensorFlow, which is not installed; the "
            f"Keras backend is {backend!r}. Install it (`pip install "
            f"tensorflow`) and export again{install_note}."
        )
    with tempfile.TemporaryDirectory() as directory:
        model_path = os.path.join(directory, "model.keras")
        try:
            model.save(model_path)
        except Exception as error:
            raise ValueError(
                f"Under the {backend!r} backend{scope}, {who} "
                "converts a saved copy of the model under TensorFlow, but "
                f"the model could not be saved: {error}. {advice}"
            ) from error
        output = os.path.join(directory, "model" + suffix)
        error_file = os.path.join(directory, "error.json")
        command = arguments(directory, model_path, output, error_file)
        timeout = importlib.import_module(__package__).SUBPROCESS_TIMEOUT
        try:
            done = run_python(command, timeout, env)
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"The TensorFlow export subprocess took more than "
                f"{timeout} s and was stopped; raise "
                "cvattn_keras.export.SUBPROCESS_TIMEOUT or export under "
                "KERAS_BACKEND=tensorflow."
            ) from None
        if done.returncode != 0:
            _raise_subprocess_error(
                done, error_file, backend, quantization, who
            )
        with open(output, "rb") as f:
            return f.read()


def convert_by_command_line(
    model,
    weights_once,
    options,
    who,
    quantization=None,
    suffix=".tflite",
    scope="",
    env=None,
):
    """The bytes of the file that this package's command line (`python -m
    cvattn_keras.export`) writes in a TensorFlow subprocess from a saved
    copy of `model` (`convert_saved_copy`, whose arguments `who`,
    `quantization`, `suffix`, `scope` and `env` are): the copy (loaded
    with `--no-safe-mode`: our own file, just written), the output, the
    error file, `--weights once|block`, then `options(directory)`, the
    further arguments, a function of the temporary directory (where it
    may write inputs, such as calibration data)."""

    def arguments(directory, model_path, output, error_file):
        return [
            "-m",
            "cvattn_keras.export",
            model_path,
            output,
            "--no-safe-mode",
            "--error-file",
            error_file,
            "--weights",
            "once" if weights_once else "block",
            *options(directory),
        ]

    return convert_saved_copy(
        model,
        arguments,
        who,
        "Make it serializable, or export under KERAS_BACKEND=tensorflow.",
        scope=scope,
        install_note=": the model is then converted under "
        "KERAS_BACKEND=tensorflow in a subprocess",
        env=env,
        quantization=quantization,
        suffix=suffix,
    )


def _raise_subprocess_error(
    done, error_file, backend, quantization=None, who="export_tflite"
):
    if os.path.exists(error_file):
        with open(error_file) as f:
            failure = json.load(f)
        if failure["kind"] == "onnx_unsupported":
            raise ONNXUnsupportedOpsError(
                failure["ops"],
                failure["layers"],
                failure["details"],
                failure["involves_complex"],
            )
        if failure["kind"] == "import":
            raise ImportError(failure["message"])
        if failure["kind"] == "unsupported":
            raise UnsupportedOpsError(
                failure["ops"], failure["layers"], failure["details"]
            )
        if failure["kind"] == "float_fallback":
            raise FloatFallbackError(
                failure["ops"],
                failure["layers"],
                failure["details"],
                failure["quantization"],
            )
        if failure["kind"] == "load":
            raise ValueError(
                f"Under the {backend!r} backend, {who} converts a "
                "saved copy of the model under TensorFlow, which could not "
                f"load it: {failure['message']}. Register custom objects "
                "in an importable module, or export under "
                "KERAS_BACKEND=tensorflow."
            )
        if failure["kind"] == "value":
            raise ValueError(failure["message"])
        raise RuntimeError(
            f"The TensorFlow export subprocess failed: {failure['message']}"
        )
    tail = "\n".join(done.stderr.strip().splitlines()[-15:])
    if done.returncode < 0:
        raise RuntimeError(
            f"TensorFlow's converter crashed (signal {-done.returncode}) "
            f"in the export subprocess"
            + (f" while quantizing to {quantization!r}" if quantization else "")
            + ". In a calibrated mode this is TensorFlow 2.21's "
            "quantizer failing on a tensor it cannot quantize (e.g. "
            "'scale out of expressed type range': a tensor whose "
            "calibrated range overflows float32, as an activation does on "
            "`representative_data` too large for the model, or is empty). "
            "Its last output:\n" + tail
        )
    raise RuntimeError(
        f"The TensorFlow export subprocess failed (exit status "
        f"{done.returncode}):\n{tail}"
    )
