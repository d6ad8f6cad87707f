"""TFLite / LiteRT export with builtin ops only, and parity verification.

A model made of this library's layers holds no complex dtype, so it converts
with `TFLITE_BUILTINS` alone: no Flex delegate, no custom ops. This module
is the only one that uses TensorFlow directly; it imports TensorFlow only
inside `export_tflite`, so the rest of the library does not pull TensorFlow
in on other backends.

    import cvattn_keras as cvk

    cvk.export.export_tflite(model, "model.tflite", quantization="float16")
    print(cvk.export.verify_tflite("model.tflite", model, sample_inputs))

Conversion needs TensorFlow. Under another Keras backend (JAX, torch),
`export_tflite` saves the model to a temporary `.keras` file (which is
backend-independent) and converts it in a subprocess that runs this
package's command line under `KERAS_BACKEND=tensorflow`; verification runs
on LiteRT under any backend.

From the shell (under any `KERAS_BACKEND`): `python -m cvattn_keras.export
MODEL.keras OUT.tflite [--quantize float16|dynamic_int8|int8] [--verify]
[--overwrite]`.
"""

import dataclasses
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import keras
import numpy as np

from cvattn_keras import attention as core

__all__ = [
    "QUANTIZATIONS",
    "SUBPROCESS_TIMEOUT",
    "TFLiteReport",
    "UnsupportedOpsError",
    "export_tflite",
    "verify_tflite",
]

QUANTIZATIONS = (None, "float16", "dynamic_int8", "int8")

# Seconds that an export through the TensorFlow subprocess (under a
# backend other than TensorFlow) may take before it is stopped.
SUBPROCESS_TIMEOUT = 900

# TensorFlow ops that exist only for complex dtypes.
_COMPLEX_OPS = {"Angle", "Complex", "ComplexAbs", "Conj", "Imag", "Real"}


class UnsupportedOpsError(ValueError):
    """The model needs operations that TFLite has no builtin kernel for,
    or that its converter could not lower to one.

    Attributes:
        ops: the TensorFlow op names, e.g. `["Complex"]`.
        layers: the names of the model's layers that emit them, where the
            converter's locations name them.
        details: the converter's one-line description of each failing op
            (its operand and result types and attributes).
        involves_complex: whether a complex dtype is among the failing
            ops' operands or results, or an op exists only for complex
            dtypes (then complex values are the cause).
    """

    def __init__(self, ops, layers, details=()):
        self.ops = list(ops)
        self.layers = list(layers)
        self.details = [line.strip() for line in details if line.strip()]
        self.involves_complex = bool(_COMPLEX_OPS & set(self.ops)) or any(
            "complex<" in line for line in self.details
        )
        where = (
            f" They come from layer(s) {self.layers}." if self.layers else ""
        )
        if self.involves_complex:
            cause = (
                " They operate on complex dtypes, which TFLite builtins do "
                "not support: keep complex values as stacked real channels "
                "(cvattn_keras.complex) and use this library's layers."
            )
        elif any(
            re.search(r"new_axis_mask = [1-9]", line) for line in self.details
        ):
            cause = (
                " A strided slice that inserts axes (`x[:, None]`) into a "
                "tensor with more than one unknown dimension cannot be "
                "lowered: use `keras.ops.expand_dims` (or a reshape) there."
            )
        else:
            cause = (
                " Rewrite that computation with operations that TFLite "
                "supports as builtins."
            )
        shown = "; ".join(self.details[:4])
        super().__init__(
            f"The model uses TensorFlow op(s) {self.ops} that TFLite's "
            f"converter could not lower to builtin kernels.{where}{cause} "
            "cvattn_keras exports builtin ops only (no Flex delegate)."
            + (f" Converter details: {shown}" if shown else "")
        )


class _OutputExistsError(FileExistsError, ValueError):
    """The output file exists and `overwrite=False` (a `FileExistsError`
    and, as every bad argument of this library, a `ValueError`)."""


@dataclasses.dataclass
class TFLiteReport:
    """What `verify_tflite` measured.

    Attributes:
        path: the `.tflite` file.
        size_bytes: its size.
        ops: the operators in the file, sorted.
        non_builtin_ops: those that are not TFLite builtins (Flex or custom).
        max_abs_error: the largest |LiteRT - Keras| over all outputs.
        max_rel_error: `max_abs_error` divided by the largest |Keras output|
            (a scale-free figure that, unlike an elementwise ratio, does not
            blow up on outputs near 0).
        median_latency_ms: the median time of one inference on the
            verified batch (set inputs, invoke, read outputs), with
            LiteRT's default CPU delegate (XNNPACK).
        batch_size: the batch the figures were measured on.
    """

    path: str
    size_bytes: int
    ops: tuple
    non_builtin_ops: tuple
    max_abs_error: float
    max_rel_error: float
    median_latency_ms: float
    batch_size: int

    @property
    def builtin_only(self):
        return not self.non_builtin_ops

    def __str__(self):
        flagged = ", ".join(self.non_builtin_ops) or "none"
        return "\n".join(
            [
                f"TFLite file      {self.path}",
                f"size             {self.size_bytes / 1024:.1f} KiB",
                f"ops              {', '.join(self.ops)}",
                f"non-builtin ops  {flagged}",
                f"max abs error    {self.max_abs_error:.3g} (vs Keras)",
                f"max rel error    {self.max_rel_error:.3g} "
                "(abs error / max |output|)",
                f"median latency   {self.median_latency_ms:.3f} ms "
                f"(batch {self.batch_size})",
            ]
        )


# ----------------------------------------------------------------------
# Arguments.
# ----------------------------------------------------------------------


def _check_path(path):
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(
            f"`path` must be a file path ending in '.tflite'. "
            f"Received: path={path!r}"
        )
    path = os.fspath(path)
    if not path.endswith(".tflite"):
        raise ValueError(
            f"`path` must end in '.tflite'. Received: path={path!r}"
        )
    return path


def _check_output(path, overwrite):
    """Checks the output path before any conversion starts."""
    path = _check_path(path)
    if not isinstance(overwrite, bool):
        raise ValueError(
            f"`overwrite` must be True or False. Received: "
            f"overwrite={overwrite!r}"
        )
    if os.path.isdir(path):
        raise ValueError(
            f"`path` is a directory; give the .tflite file to write. "
            f"Received: path={path!r}"
        )
    if os.path.exists(path) and not overwrite:
        raise _OutputExistsError(
            f"{path!r} already exists and `overwrite=False`: it was kept. "
            "Pass overwrite=True to replace it."
        )
    return path


def _check_model(model):
    if not isinstance(model, keras.Model):
        raise ValueError(
            f"`model` must be a keras.Model. Received: {type(model).__name__}"
        )
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if not inputs:
        raise ValueError(
            "`model` must have defined inputs (a functional or a built "
            "Sequential model with an Input) so that its input signature "
            f"is known. Received: model {model.name!r} with no inputs."
        )
    return inputs


def _check_num_samples(value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(
            "`num_calibration_samples` must be a positive int. Received: "
            f"num_calibration_samples={value!r}"
        )
    if value < 1:
        raise ValueError(
            "`num_calibration_samples` must be a positive int: int8 "
            "calibration needs at least one sample. Received: "
            f"num_calibration_samples={value}"
        )
    return int(value)


def _input_names(model):
    return [tensor.name for tensor in model.inputs]


def _input_dtypes(model):
    return [keras.backend.standardize_dtype(t.dtype) for t in model.inputs]


def _cast(array, dtype, what):
    """`array` as `dtype`: any float array to a float dtype; to a bool or
    integer dtype only when no value changes (never a silent truncation).
    """
    try:
        target = np.dtype(dtype)
    except TypeError:  # e.g. bfloat16 without ml_dtypes: feed float32
        target = np.dtype("float32")
    if array.dtype == target:
        return array
    if np.issubdtype(target, np.floating):
        return array.astype(target)
    cast = array.astype(target)
    if array.dtype.kind not in "biuf" or not np.array_equal(cast, array):
        raise ValueError(
            f"{what} must hold {target} values (the input's dtype). "
            f"Received an array of dtype {array.dtype} whose values do not "
            f"convert to {target} exactly."
        )
    return cast


def _as_input_list(model, data, argument):
    """One array per model input, each in that input's dtype, from an
    array, a list/tuple or a dict keyed by input name."""
    names = _input_names(model)
    if isinstance(data, dict):
        missing = sorted(set(names) - set(data))
        if missing:
            raise ValueError(
                f"`{argument}` is missing input(s) {missing}; the model's "
                f"inputs are {names}."
            )
        arrays = [data[name] for name in names]
    elif isinstance(data, (list, tuple)):
        arrays = list(data)
    else:
        arrays = [data]
    if len(arrays) != len(names):
        raise ValueError(
            f"`{argument}` must hold one array per model input "
            f"({len(names)}: {names}). Received {len(arrays)}."
        )
    arrays = [
        _cast(
            np.asarray(keras.ops.convert_to_numpy(array)),
            dtype,
            f"`{argument}` for input {name!r}",
        )
        for array, dtype, name in zip(arrays, _input_dtypes(model), names)
    ]
    for name, array, tensor in zip(names, arrays, model.inputs):
        expected = tuple(tensor.shape)
        if array.ndim != len(expected) or any(
            want is not None and got != want
            for got, want in zip(array.shape[1:], expected[1:])
        ):
            raise ValueError(
                f"`{argument}` for input {name!r} must have shape "
                f"{expected} (None: any size). Received: {array.shape}"
            )
    sizes = {array.shape[0] for array in arrays}
    if len(sizes) != 1:
        raise ValueError(
            f"The arrays of `{argument}` must share their first (batch) "
            f"axis. Received shapes {[a.shape for a in arrays]}."
        )
    if sizes == {0}:
        raise ValueError(
            f"`{argument}` must hold at least one sample on its first "
            f"(batch) axis. Received shapes {[a.shape for a in arrays]}."
        )
    return arrays


def _calibration_arrays(model, data, num_samples):
    """The first `num_samples` samples of `representative_data`, one array
    per model input; a callable is drawn from until it stops or
    `num_samples` samples are taken."""
    if not callable(data):
        arrays = _as_input_list(model, data, "representative_data")
        return [array[:num_samples] for array in arrays]
    names = _input_names(model)
    columns = [[] for _ in names]
    for sample in data():
        if isinstance(sample, dict):
            missing = sorted(set(names) - set(sample))
            if missing:
                raise ValueError(
                    f"`representative_data` yielded a dict without "
                    f"input(s) {missing}; the model's inputs are {names}."
                )
            sample = [sample[name] for name in names]
        elif not isinstance(sample, (list, tuple)):
            sample = [sample]
        if len(sample) != len(names):
            raise ValueError(
                "`representative_data` must yield one array per model "
                f"input ({len(names)}: {names}). Received {len(sample)}."
            )
        for column, array in zip(columns, sample):
            column.append(np.asarray(keras.ops.convert_to_numpy(array)))
        if len(columns[0]) >= num_samples:
            break
    if not columns[0]:
        raise ValueError(
            "`representative_data` yielded no samples; int8 calibration "
            "needs at least one. Received: an empty iterable."
        )
    arrays = [np.concatenate(column, axis=0) for column in columns]
    return _as_input_list(model, arrays, "representative_data")


def _check_calibration_data(model, data):
    """Raises unless `representative_data` holds at least one sample (a
    callable is asked for a fresh iterable and its first sample)."""
    if not callable(data):
        _as_input_list(model, data, "representative_data")
        return
    if next(iter(data()), None) is None:
        raise ValueError(
            "`representative_data` yielded no samples; int8 calibration "
            "needs at least one. Received: a callable whose iterable is "
            "empty."
        )


def _representative_dataset(model, data, num_samples, counter):
    """A converter calibration generator: one sample at a time, as a dict
    keyed by the signature's input names, each in its input's dtype.
    `counter[0]` counts the samples the converter drew."""
    names = _input_names(model)
    if callable(data):
        dtypes = _input_dtypes(model)

        def generator():
            for sample in data():
                if counter[0] >= num_samples:
                    return
                if isinstance(sample, dict):
                    sample = [sample[name] for name in names]
                elif not isinstance(sample, (list, tuple)):
                    sample = [sample]
                counter[0] += 1
                yield {
                    name: _cast(
                        np.asarray(array),
                        dtype,
                        f"`representative_data` for input {name!r}",
                    )
                    for name, array, dtype in zip(names, sample, dtypes)
                }

        return generator
    arrays = _as_input_list(model, data, "representative_data")
    count = min(len(arrays[0]), num_samples)

    def generator():
        for i in range(count):
            counter[0] += 1
            yield {name: a[i : i + 1] for name, a in zip(names, arrays)}

    return generator


# ----------------------------------------------------------------------
# Export.
# ----------------------------------------------------------------------


def _layer_names(model):
    """The names of `model`'s layers, nested models included."""
    names = set()
    for layer in model.layers:
        names.add(layer.name)
        if isinstance(layer, keras.Model):
            names |= _layer_names(layer)
    return names


def _layers_in(message, model):
    """The names of `model`'s layers that the converter's locations name
    (`.../layer_name_1/OpName@...`: Keras suffixes scope names)."""
    names = _layer_names(model)
    found = []
    for scope in re.findall(r"/([A-Za-z0-9_.\-]+)/", message):
        candidate = scope if scope in names else re.sub(r"_\d+$", "", scope)
        if candidate in names and candidate not in found:
            found.append(candidate)
    return found


def _raise_unsupported(error, model):
    message = str(error)
    match = re.search(r"TF Select ops: ([^\n]+)", message)
    if match is None:
        ops = re.findall(r"'tf\.(\w+)' op is neither a custom op", message)
        if not ops:
            raise error
    else:
        ops = [op.strip() for op in match.group(1).split(",")]
    details = re.findall(r"^\s*(tf\.\w+\(.*)$", message, flags=re.MULTILINE)
    raise UnsupportedOpsError(
        sorted(set(ops)), _layers_in(message, model), sorted(set(details))
    ) from None


def _write(path, flatbuffer, overwrite):
    """Writes through a temporary file in the same directory, so that a
    failure never leaves a partial file and never touches an existing one
    unless it is replaced whole."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        dir=directory or ".", prefix=".", suffix=".tflite.partial"
    )
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(flatbuffer)
        if os.path.exists(path) and not overwrite:
            raise _OutputExistsError(
                f"{path!r} already exists and `overwrite=False`: it was "
                "kept. Pass overwrite=True to replace it."
            )
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def export_tflite(
    model,
    path,
    quantization=None,
    representative_data=None,
    num_calibration_samples=100,
    overwrite=True,
):
    """Converts a Keras model to a `.tflite` file with TFLite builtin ops only.

    The model is traced as a TensorFlow SavedModel (its batch dimension, and
    any other `None` dimension of its inputs, stays dynamic) and converted
    with `TFLITE_BUILTINS` alone, never `SELECT_TF_OPS`. Attention masks are
    traced with `cvattn_keras.attention.portable_masking`, which keeps every
    tensor in the data's range, as quantization needs.

    Conversion needs TensorFlow. Under another Keras backend the model is
    saved to a temporary `.keras` file and converted by
    `python -m cvattn_keras.export` under `KERAS_BACKEND=tensorflow` in a
    subprocess (stopped after `SUBPROCESS_TIMEOUT` seconds); the model must
    then be serializable (`model.save` works) and its custom layers
    registered in an importable module.

    The file is written whole or not at all (through a temporary file in
    the same directory).

    Args:
        model: a `keras.Model` with defined inputs.
        path: the output file; must end in `.tflite`.
        quantization: `None` (float32), `"float16"` (float16 weights),
            `"dynamic_int8"` (int8 weights, dynamic-range activations) or
            `"int8"` (int8 weights and activations, calibrated on
            `representative_data`; float inputs and outputs, float fallback
            for ops without an int8 kernel).
        representative_data: for `"int8"`: an array (one input), a list of
            arrays (one per model input, in order) or a dict keyed by input
            name, samples on the first axis, each input in its own dtype
            (bool masks as bool); or a callable returning a fresh iterable
            of per-sample inputs on each call, as TFLite's converter takes
            (it is called once more, to check that it yields a sample). It
            must hold at least one sample.
        num_calibration_samples: positive int, how many samples of
            `representative_data` to calibrate on (at most).
        overwrite: whether to replace an existing file at `path`, as in
            `keras.Model.save` (default `True`, as there). With `False` an
            existing file is kept and a `FileExistsError` (which is also a
            `ValueError`) is raised, before any conversion.

    Returns:
        The path of the written file.

    Raises:
        ValueError: bad arguments (`path` a directory, an existing file
            with `overwrite=False`, no or empty calibration data for
            `"int8"`), or no TensorFlow to convert with.
        UnsupportedOpsError: the model needs an op with no builtin kernel;
            the error names the op and the layer.
    """
    path = _check_output(path, overwrite)
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be one of {list(QUANTIZATIONS)}. "
            f"Received: quantization={quantization!r}"
        )
    num_calibration_samples = _check_num_samples(num_calibration_samples)
    if quantization == "int8" and representative_data is None:
        raise ValueError(
            "`quantization='int8'` calibrates activation ranges and needs "
            "`representative_data` (a few hundred typical inputs). "
            "Received: representative_data=None"
        )
    if quantization != "int8" and representative_data is not None:
        raise ValueError(
            "`representative_data` is used only with quantization='int8'. "
            f"Received: quantization={quantization!r}"
        )
    _check_model(model)
    if keras.backend.backend() != "tensorflow":
        if quantization == "int8":
            representative_data = _calibration_arrays(
                model, representative_data, num_calibration_samples
            )
        flatbuffer = _convert_in_subprocess(
            model, quantization, representative_data
        )
    else:
        if quantization == "int8":
            # Validate (dtypes, shapes, at least one sample) before tracing.
            _check_calibration_data(model, representative_data)
        flatbuffer = _convert(
            model, quantization, representative_data, num_calibration_samples
        )
    _write(path, flatbuffer, overwrite)
    return path


def _convert(model, quantization, representative_data, num_samples):
    """The `.tflite` flatbuffer of `model`, converted in this process (the
    TensorFlow backend)."""
    import tensorflow as tf
    from tensorflow.lite.python.convert_phase import ConverterError

    counter = [0]
    with tempfile.TemporaryDirectory() as saved_model:
        with core.portable_masking():
            model.export(saved_model, format="tf_saved_model", verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantization is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        if quantization == "int8":
            converter.representative_dataset = _representative_dataset(
                model, representative_data, num_samples, counter
            )
        try:
            with warnings.catch_warnings():
                # int8 calibration runs TensorFlow's own deprecated
                # tf.lite.Interpreter internally; the warning is not ours.
                warnings.filterwarnings(
                    "ignore",
                    message=r"(?s).*tf\.lite\.Interpreter is deprecated",
                )
                flatbuffer = converter.convert()
        except ConverterError as error:
            _raise_unsupported(error, model)
    if quantization == "int8" and counter[0] == 0:
        # TensorFlow's converter would silently write a float model.
        raise ValueError(
            "`representative_data` yielded no samples; int8 calibration "
            "needs at least one. Received: an empty iterable."
        )
    return flatbuffer


def _convert_in_subprocess(model, quantization, representative_arrays):
    """The `.tflite` flatbuffer of `model`, converted by this package's
    command line in a subprocess under `KERAS_BACKEND=tensorflow`."""
    backend = keras.backend.backend()
    if importlib.util.find_spec("tensorflow") is None:
        raise ValueError(
            f"TFLite export needs TensorFlow, which is not installed; the "
            f"Keras backend is {backend!r}. Install it (`pip install "
            "tensorflow`) and export again: the model is then converted "
            "under KERAS_BACKEND=tensorflow in a subprocess."
        )
    with tempfile.TemporaryDirectory() as directory:
        model_path = os.path.join(directory, "model.keras")
        try:
            model.save(model_path)
        except Exception as error:
            raise ValueError(
                f"Under the {backend!r} backend, export_tflite converts a "
                "saved copy of the model under TensorFlow, but the model "
                f"could not be saved: {error}. Make it serializable, or "
                "export under KERAS_BACKEND=tensorflow."
            ) from error
        output = os.path.join(directory, "model.tflite")
        error_file = os.path.join(directory, "error.json")
        command = [
            sys.executable,
            "-m",
            "cvattn_keras.export",
            model_path,
            output,
            "--no-safe-mode",  # our own file, just written
            "--error-file",
            error_file,
        ]
        if quantization is not None:
            command += ["--quantize", quantization]
        if quantization == "int8":
            data = os.path.join(directory, "calibration.npz")
            names = _input_names(model)
            np.savez(data, **dict(zip(names, representative_arrays)))
            command += [
                "--representative-data",
                data,
                "--calibration-samples",
                str(len(representative_arrays[0])),
            ]
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        try:
            done = subprocess.run(
                command,
                env=env,
                capture_output=True,
                text=True,
                timeout=SUBPROCESS_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"The TensorFlow export subprocess took more than "
                f"{SUBPROCESS_TIMEOUT} s and was stopped; raise "
                "cvattn_keras.export.SUBPROCESS_TIMEOUT or export under "
                "KERAS_BACKEND=tensorflow."
            ) from None
        if done.returncode != 0:
            _raise_subprocess_error(done, error_file, backend)
        with open(output, "rb") as f:
            return f.read()


def _raise_subprocess_error(done, error_file, backend):
    if os.path.exists(error_file):
        with open(error_file) as f:
            failure = json.load(f)
        if failure["kind"] == "unsupported":
            raise UnsupportedOpsError(
                failure["ops"], failure["layers"], failure["details"]
            )
        if failure["kind"] == "load":
            raise ValueError(
                f"Under the {backend!r} backend, export_tflite converts a "
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
    raise RuntimeError(
        f"The TensorFlow export subprocess failed (exit status "
        f"{done.returncode}):\n{tail}"
    )


# ----------------------------------------------------------------------
# Verification on the LiteRT interpreter.
# ----------------------------------------------------------------------


def _check_tflite_file(path):
    """Raises a `ValueError` naming `path` unless it is a TFLite
    flatbuffer (file identifier `TFL3` at bytes 4-8)."""
    if os.path.isdir(path):
        raise ValueError(
            f"`path` is a directory, not a .tflite file. Received: "
            f"path={path!r}"
        )
    if not os.path.exists(path):
        raise ValueError(f"No such file: path={path!r}")
    with open(path, "rb") as f:
        head = f.read(8)
    if not head:
        raise ValueError(f"{path!r} is empty, not a TFLite model.")
    if len(head) < 8 or head[4:8] != b"TFL3":
        raise ValueError(
            f"{path!r} is not a TFLite model (no 'TFL3' flatbuffer "
            "identifier); give a file written by export_tflite."
        )


def _file_ops(path):
    """The operator names in a `.tflite` file, read from its flatbuffer:
    builtin operators by their enum name, custom ones (Flex included) by
    their custom code, e.g. `"FlexComplex"`. Returns `(ops, non_builtin)`.
    """
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        try:
            flatbuffer = schema.ModelT.InitFromPackedBuf(f.read(), 0)
        except Exception as error:
            raise ValueError(
                f"{path!r} is not a valid TFLite model (its flatbuffer "
                f"does not parse: {type(error).__name__}: {error})."
            ) from None
    builtin_names = {
        code: name
        for name, code in vars(schema.BuiltinOperator).items()
        if not name.startswith("_")
    }
    ops, non_builtin = set(), set()
    for subgraph in flatbuffer.subgraphs or []:
        for operator in subgraph.operators or []:
            code = flatbuffer.operatorCodes[operator.opcodeIndex]
            # Codes above 127 live in `builtinCode` only (schema v3a).
            builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
            if builtin == schema.BuiltinOperator.CUSTOM:
                name = code.customCode.decode()
                non_builtin.add(name)
            else:
                name = builtin_names.get(builtin, f"BUILTIN_{builtin}")
            ops.add(name)
    return tuple(sorted(ops)), tuple(sorted(non_builtin))


def _ordered_outputs(results):
    """Signature outputs in the model's order (`output_0`, `output_1`, ...,
    sorted numerically so that `output_10` follows `output_9`)."""

    def index(name):
        match = re.fullmatch(r"output_(\d+)", name)
        return int(match.group(1)) if match else name

    return [results[name] for name in sorted(results, key=index)]


def _feed(runner, names, arrays, path):
    """The inputs keyed by signature name, each in the file's dtype."""
    details = runner.get_input_details()
    missing = sorted(set(names) - set(details))
    if missing:
        raise ValueError(
            f"{path!r} has inputs {sorted(details)}, not the model's "
            f"{missing}: was it exported from this model?"
        )
    return {
        name: _cast(array, details[name]["dtype"], f"`inputs` for {name!r}")
        for name, array in zip(names, arrays)
    }


def verify_tflite(path, model, inputs, num_runs=20, num_threads=None):
    """Runs a `.tflite` file on the LiteRT interpreter and compares it with
    the Keras model (under any Keras backend).

    Args:
        path: the `.tflite` file (from `export_tflite`).
        model: the Keras model it was exported from.
        inputs: one batch of inputs (at least one sample): an array, a list
            of arrays (one per model input) or a dict keyed by input name,
            each in its input's dtype (a bool mask as bool; floats are cast
            to float inputs). The file is resized to their shapes where its
            dimensions are dynamic.
        num_runs: how many invocations the median latency is taken over.
        num_threads: LiteRT CPU threads (`None`: LiteRT's default).

    Returns:
        A `TFLiteReport` (its `str` is a printable table).

    Raises:
        ValueError: bad arguments (a missing, empty, non-TFLite file or a
            directory, an empty batch), or a file with non-builtin ops,
            which this interpreter cannot run (the message lists them).
    """
    path = _check_path(path)
    _check_tflite_file(path)
    if not isinstance(num_runs, int) or num_runs < 1:
        raise ValueError(
            f"`num_runs` must be a positive int. Received: num_runs={num_runs}"
        )
    _check_model(model)
    arrays = _as_input_list(model, inputs, "inputs")
    ops, non_builtin = _file_ops(path)
    if non_builtin:
        raise ValueError(
            f"{path} uses non-builtin op(s) {list(non_builtin)}, which the "
            "LiteRT interpreter cannot run without the Flex delegate. "
            "Export with cvattn_keras.export.export_tflite instead."
        )
    from ai_edge_litert.interpreter import Interpreter

    try:
        runner = Interpreter(
            model_path=path, num_threads=num_threads
        ).get_signature_runner()
    except (RuntimeError, ValueError) as error:
        raise ValueError(
            f"LiteRT cannot load {path!r}: {error}".rstrip()
        ) from None
    feed = _feed(runner, _input_names(model), arrays, path)
    got = _ordered_outputs(runner(**feed))
    expected = model(arrays if len(arrays) > 1 else arrays[0], training=False)
    expected = [
        keras.ops.convert_to_numpy(x) for x in keras.tree.flatten(expected)
    ]
    if len(got) != len(expected):
        raise ValueError(
            f"{path} has {len(got)} outputs but the model has "
            f"{len(expected)}: was it exported from this model?"
        )
    max_abs = max(
        float(
            np.max(np.abs(g.astype("float64") - e.astype("float64")), initial=0)
        )
        for g, e in zip(got, expected)
    )
    scale = max(float(np.max(np.abs(e), initial=0)) for e in expected)
    timings = []
    for _ in range(num_runs):
        start = time.perf_counter()
        runner(**feed)
        timings.append(time.perf_counter() - start)
    return TFLiteReport(
        path=path,
        size_bytes=os.path.getsize(path),
        ops=ops,
        non_builtin_ops=non_builtin,
        max_abs_error=max_abs,
        max_rel_error=max_abs / scale if scale > 0 else max_abs,
        median_latency_ms=1e3 * statistics.median(timings),
        batch_size=int(arrays[0].shape[0]),
    )
