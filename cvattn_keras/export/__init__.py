"""TFLite / LiteRT export with builtin ops only, and parity verification.

A model made of this library's layers holds no complex dtype, so it converts
with `TFLITE_BUILTINS` alone: no Flex delegate, no custom ops. This module
is the only one that uses TensorFlow directly; it is imported lazily, so the
rest of the library does not pull TensorFlow in on other backends.

    import cvattn_keras as cvk

    cvk.export.export_tflite(model, "model.tflite", quantization="float16")
    print(cvk.export.verify_tflite("model.tflite", model, sample_inputs))

From the shell: `python -m cvattn_keras.export MODEL.keras OUT.tflite
[--quantize float16|dynamic_int8|int8] [--verify]`.
"""

import dataclasses
import os
import re
import statistics
import tempfile
import time
import warnings

import keras
import numpy as np

from cvattn_keras import attention as core

__all__ = [
    "QUANTIZATIONS",
    "TFLiteReport",
    "UnsupportedOpsError",
    "export_tflite",
    "verify_tflite",
]

QUANTIZATIONS = (None, "float16", "dynamic_int8", "int8")


class UnsupportedOpsError(ValueError):
    """The model needs operations that TFLite has no builtin kernel for.

    Attributes:
        ops: the TensorFlow op names, e.g. `["Complex"]`.
        layers: the names of the model's layers that emit them, where the
            converter's locations name them.
    """

    def __init__(self, ops, layers):
        self.ops = list(ops)
        self.layers = list(layers)
        where = (
            f" They come from layer(s) {self.layers}." if self.layers else ""
        )
        super().__init__(
            f"The model uses TensorFlow op(s) {self.ops} that have no TFLite "
            f"builtin kernel.{where} Complex dtypes are the usual cause: "
            "keep complex values as stacked real channels "
            "(cvattn_keras.complex) and use this library's layers. "
            "cvattn_keras exports builtin ops only (no Flex delegate)."
        )


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
# Export.
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


def _input_names(model):
    return [tensor.name for tensor in model.inputs]


def _as_input_list(model, data, argument):
    """One array per model input, from an array, a list/tuple or a dict."""
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
    arrays = [np.asarray(array, dtype="float32") for array in arrays]
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
    sizes = {array.shape[0] for array in arrays if array.ndim}
    if len(sizes) != 1:
        raise ValueError(
            f"The arrays of `{argument}` must share their first (batch) "
            f"axis. Received shapes {[a.shape for a in arrays]}."
        )
    return arrays


def _representative_dataset(model, data, num_samples):
    """A converter calibration generator: one sample at a time, as a dict
    keyed by the signature's input names."""
    if callable(data):
        return data
    names = _input_names(model)
    arrays = _as_input_list(model, data, "representative_data")
    count = min(len(arrays[0]), num_samples)

    def generator():
        for i in range(count):
            yield {name: a[i : i + 1] for name, a in zip(names, arrays)}

    return generator


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
    raise UnsupportedOpsError(
        sorted(set(ops)), _layers_in(message, model)
    ) from None


def export_tflite(
    model,
    path,
    quantization=None,
    representative_data=None,
    num_calibration_samples=100,
):
    """Converts a Keras model to a `.tflite` file with TFLite builtin ops only.

    The model is traced as a TensorFlow SavedModel (its batch dimension stays
    dynamic where the model's is) and converted with
    `TFLITE_BUILTINS` alone, never `SELECT_TF_OPS`. Attention masks are
    traced with `cvattn_keras.attention.portable_masking`, which keeps every
    tensor in the data's range, as quantization needs.

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
            name, samples on the first axis; or a callable returning an
            iterable of per-sample inputs, as TFLite's converter takes.
        num_calibration_samples: how many samples of `representative_data`
            to calibrate on.

    Returns:
        The path of the written file.

    Raises:
        ValueError: bad arguments.
        UnsupportedOpsError: the model needs an op with no builtin kernel;
            the error names the op and the layer.
    """
    path = _check_path(path)
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be one of {list(QUANTIZATIONS)}. "
            f"Received: quantization={quantization!r}"
        )
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
    import tensorflow as tf
    from tensorflow.lite.python.convert_phase import ConverterError

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
                model, representative_data, num_calibration_samples
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
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(path, "wb") as f:
        f.write(flatbuffer)
    return path


# ----------------------------------------------------------------------
# Verification on the LiteRT interpreter.
# ----------------------------------------------------------------------


def _file_ops(path):
    """The operator names in a `.tflite` file, read from its flatbuffer:
    builtin operators by their enum name, custom ones (Flex included) by
    their custom code, e.g. `"FlexComplex"`. Returns `(ops, non_builtin)`.
    """
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        flatbuffer = schema.ModelT.InitFromPackedBuf(f.read(), 0)
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


def verify_tflite(path, model, inputs, num_runs=20, num_threads=None):
    """Runs a `.tflite` file on the LiteRT interpreter and compares it with
    the Keras model.

    Args:
        path: the `.tflite` file (from `export_tflite`).
        model: the Keras model it was exported from.
        inputs: one batch of inputs: an array, a list of arrays (one per
            model input) or a dict keyed by input name. The file is resized
            to its batch size when its batch dimension is dynamic.
        num_runs: how many invocations the median latency is taken over.
        num_threads: LiteRT CPU threads (`None`: LiteRT's default).

    Returns:
        A `TFLiteReport` (its `str` is a printable table).

    Raises:
        ValueError: bad arguments, or a file with non-builtin ops, which
            this interpreter cannot run (the message lists them).
    """
    path = _check_path(path)
    if not os.path.exists(path):
        raise ValueError(f"No such file: path={path!r}")
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

    runner = Interpreter(
        model_path=path, num_threads=num_threads
    ).get_signature_runner()
    feed = dict(zip(_input_names(model), arrays))
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
        float(np.max(np.abs(g.astype("float64") - e)))
        for g, e in zip(got, expected)
    )
    scale = max(float(np.max(np.abs(e))) for e in expected)
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
