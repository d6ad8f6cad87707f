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

Full-integer files (`quantization="full_int8"` or `"int16x8"`) for NPUs,
DSPs and the Edge TPU are always converted in such a subprocess (under
every backend): TensorFlow 2.21's quantizer can crash the whole process
(a segmentation fault) on some graphs, which must not take the caller
down with it.

`batch_size=` (and `sequence_length=`) give a graph of static shapes, with
no shape arithmetic, as GPU delegates and NPUs need;
`cvattn_keras.export.gpu.check_gpu_compatibility` (also in
`verify_tflite`'s report) lists what the TFLite GPU delegate would leave
to the CPU.

From the shell (under any `KERAS_BACKEND`): `python -m cvattn_keras.export
MODEL.keras OUT.tflite [--quantize float16|dynamic_int8|int8|full_int8|
int16x8] [--representative-data FILE.npz|random] [--static-batch N]
[--static-length L] [--verify] [--overwrite]` (the calibrated modes need
`--representative-data`; `--verify` exits with status 3 when the error is
far above the mode's usual one, `EXPECTED_MAX_REL_ERROR`).
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

from cvattn_keras import _tracing
from cvattn_keras import attention as core
from cvattn_keras.export import _files
from cvattn_keras.export import gpu
from cvattn_keras.export.generator import export_generator_tflite
from cvattn_keras.export.generator import generate_tflite
from cvattn_keras.export.gpu import check_gpu_compatibility

__all__ = [
    "EXPECTED_MAX_REL_ERROR",
    "FloatFallbackError",
    "QUANTIZATIONS",
    "SUBPROCESS_TIMEOUT",
    "TFLiteReport",
    "TensorInfo",
    "UnsupportedOpsError",
    "check_gpu_compatibility",
    "export_generator_tflite",
    "export_tflite",
    "file_sizes",
    "generate_tflite",
    "gpu",
    "predict_tflite",
    "verify_tflite",
]

QUANTIZATIONS = (
    None,
    "float16",
    "dynamic_int8",
    "int8",
    "full_int8",
    "int16x8",
)

# The modes calibrated on `representative_data`, and the full-integer ones
# among them (integer inputs and outputs, no float kernel allowed).
_CALIBRATED = ("int8", "full_int8", "int16x8")
_FULL_INTEGER = ("full_int8", "int16x8")

# The largest `max_rel_error` (`verify_tflite`) that a file of each mode
# usually shows: about 2 to 3 times the largest error measured on this
# library's models, calibrated and verified on inputs of one distribution
# (docs/deploy.md, "Verification"): float32 8e-7, float16 6.8e-4,
# dynamic_int8 2.5e-2, int8 and full_int8 3.6e-2 to 6e-2 (one layer, the
# two-layer benchmark, the tiny music classifier), int16x8 7e-3 to
# 1.7e-2. Beyond it the report warns (`TFLiteReport.within_expected`) and
# `python -m cvattn_keras.export --verify` exits with status 3.
EXPECTED_MAX_REL_ERROR = {
    "float32": 1e-4,
    "float16": 1e-2,
    "dynamic_int8": 0.1,
    "int8": 0.15,
    "full_int8": 0.15,
    "int16x8": 0.05,
}

# Seconds that an export through the TensorFlow subprocess (under a
# backend other than TensorFlow) may take before it is stopped.
SUBPROCESS_TIMEOUT = 900

# Set in the environment of the export subprocess, which then converts
# in its own process (the full-integer modes included).
_CHILD_ENV = "CVATTN_KERAS_EXPORT_SUBPROCESS"

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


class FloatFallbackError(UnsupportedOpsError):
    """A full-integer conversion (`"full_int8"`, `"int16x8"`) met operators
    with no integer kernel: the converter left them float (full_int8) or
    refused them (int16x8), and an NPU, DSP or Edge TPU could not run
    them. No file is written.

    Attributes:
        ops: the TFLite operators that stayed float, e.g. `["CEIL", "NEG"]`.
        layers: the model's layers (`outer/inner` for a layer inside a
            layer) whose tensors they compute.
        details: one line per float operator: `OP -> tensor name` (for
            int16x8, `OP: no int16 activation kernel`).
        quantization: the mode that was asked for.
    """

    def __init__(self, ops, layers, details=(), quantization="full_int8"):
        ValueError.__init__(self)
        self.ops = list(ops)
        self.layers = list(layers)
        self.details = list(details)
        self.involves_complex = False
        self.quantization = quantization
        where = (
            f" They compute tensors of layer(s) {self.layers}."
            if self.layers
            else ""
        )
        shown = "; ".join(self.details[:6])
        self.args = (
            f"quantization={quantization!r} needs an integer kernel for "
            f"every operator, but {self.ops} have none in this converter "
            "(they would stay float, which integer-only accelerators cannot "
            f"run); no file was written.{where} Use quantization='int8' "
            "(integer kernels with a float fallback) for this model, or "
            "rewrite those computations with integer-friendly ops."
            + (f" Float ops: {shown}" if shown else ""),
        )


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One input or output of a `.tflite` file, as the interpreter sees it.

    Attributes:
        name: the signature name (the model's input name, or `output_0`,
            `output_1`, ...).
        dtype: e.g. `"float32"`, `"int8"`, `"bool"`.
        shape: the file's shape; `-1` marks a dynamic dimension.
        scale, zero_point: the affine quantization of an integer tensor
            (`real = scale * (q - zero_point)`); `None` for a tensor that is
            not quantized.
    """

    name: str
    dtype: str
    shape: tuple
    scale: float = None
    zero_point: int = None

    def __str__(self):
        shape = "x".join("?" if d < 0 else str(d) for d in self.shape)
        text = f"{self.name}: {self.dtype}[{shape}]"
        if self.scale is not None:
            text += f" scale {self.scale:.6g} zero point {self.zero_point}"
        return text


@dataclasses.dataclass
class TFLiteReport:
    """What `verify_tflite` measured.

    Attributes:
        path: the `.tflite` file.
        size_bytes: its size.
        weight_bytes: the bytes of its constant tensors (weights, biases,
            quantization-free constants such as shapes), each buffer
            counted once however many tensors share it.
        rest_bytes: (a property) `size_bytes - weight_bytes`: the format's
            metadata, the tensor names and the graph.
        ops: the operators in the file, sorted.
        non_builtin_ops: those that are not TFLite builtins (Flex or custom).
        max_abs_error: the largest |LiteRT - Keras| over all outputs (the
            outputs of an integer file dequantized first).
        max_rel_error: `max_abs_error` divided by the largest |Keras output|
            (a scale-free figure that, unlike an elementwise ratio, does not
            blow up on outputs near 0).
        median_latency_ms: the median time of one inference on the
            verified batch (set inputs, invoke, read outputs), with
            LiteRT's default CPU delegate (XNNPACK).
        batch_size: the batch the figures were measured on.
        inputs, outputs: a `TensorInfo` per input and output of the file:
            name, dtype, shape (`-1`: dynamic), and the scale and zero
            point of an integer (quantized) tensor.
        gpu: a `gpu.GpuCompatibility`: whether the TFLite GPU delegate
            would run every op (`gpu.compatible`) and, if not, which ops
            fall back to the CPU and why (`gpu.fallbacks`).
        quantization: the file's mode, read from its tensors' types:
            `"float32"`, `"float16"`, `"dynamic_int8"`, `"int8"`,
            `"full_int8"` or `"int16x8"` (a dynamic_int8 file whose
            weights all stayed float, as the converter leaves tensors under
            1,024 elements, reads as float32, and computes as one).
        expected_max_rel_error: the bound of that mode's usual
            `max_rel_error` (`EXPECTED_MAX_REL_ERROR`, or the one given to
            `verify_tflite`).
        within_expected: (a property) whether `max_rel_error` is within
            it; `warning` (a property) is then `None`, otherwise one line
            that says the error is far outside the mode's usual one, which
            `str(report)` prints last.
    """

    path: str
    size_bytes: int
    ops: tuple
    non_builtin_ops: tuple
    max_abs_error: float
    max_rel_error: float
    median_latency_ms: float
    batch_size: int
    inputs: tuple = ()
    outputs: tuple = ()
    gpu: object = None
    weight_bytes: int = None
    quantization: str = None
    expected_max_rel_error: float = None

    @property
    def builtin_only(self):
        return not self.non_builtin_ops

    @property
    def within_expected(self):
        """Whether `max_rel_error` is within `expected_max_rel_error`
        (`True` where no bound is known)."""
        if self.expected_max_rel_error is None:
            return True
        return bool(self.max_rel_error <= self.expected_max_rel_error)

    @property
    def warning(self):
        """`None`, or one line saying that the error is far outside the
        mode's usual error (`within_expected` is False) and what to check.
        """
        if self.within_expected:
            return None
        mode = self.quantization
        hint = (
            "the calibration inputs were unlike the verified ones (random "
            "ones, or another scale): calibrate on typical inputs "
            "(representative_data; on the command line --representative-"
            "data FILE.npz) and verify on such inputs"
            if mode in _CALIBRATED
            else "was the file exported from this model?"
        )
        return (
            f"max rel error {self.max_rel_error:.3g} is far above the "
            f"usual error of {mode} files (bound "
            f"{self.expected_max_rel_error:g}): "
            f"{hint}; a deep model with random weights can exceed it too "
            "(docs/deploy.md)"
        )

    @property
    def rest_bytes(self):
        if self.weight_bytes is None:
            return None
        return self.size_bytes - self.weight_bytes

    def __str__(self):
        flagged = ", ".join(self.non_builtin_ops) or "none"
        sizes = _sizes_text(self.size_bytes, self.weight_bytes)
        lines = [
            f"TFLite file      {self.path}",
            f"size             {sizes}",
            f"ops              {', '.join(self.ops)}",
            f"non-builtin ops  {flagged}",
        ]
        lines += [f"input            {info}" for info in self.inputs]
        lines += [f"output           {info}" for info in self.outputs]
        lines += [
            f"max abs error    {self.max_abs_error:.3g} (vs Keras)",
            f"max rel error    {self.max_rel_error:.3g} "
            "(abs error / max |output|)" + _expected_text(self),
            f"median latency   {self.median_latency_ms:.3f} ms "
            f"(batch {self.batch_size})",
        ]
        if self.gpu is not None:
            lines.append(f"GPU delegate     {self.gpu}")
        if self.warning is not None:
            lines.append(f"WARNING          {self.warning}")
        return "\n".join(lines)


def _expected_text(report):
    """`"; usual for full_int8: <= 0.15"` (and `", FAR ABOVE"`)."""
    if report.expected_max_rel_error is None:
        return ""
    text = (
        f"; {report.quantization} files usually <= "
        f"{report.expected_max_rel_error:g}"
    )
    return text if report.within_expected else text + ": FAR ABOVE"


def _kib(size):
    return f"{size / 1024:.1f} KiB"


def _sizes_text(size_bytes, weight_bytes):
    """`"549.0 KiB (weight data 240.3 KiB, rest 308.7 KiB)"`."""
    if weight_bytes is None:
        return _kib(size_bytes)
    return (
        f"{_kib(size_bytes)} (weight data {_kib(weight_bytes)}, "
        f"rest {_kib(size_bytes - weight_bytes)})"
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
    """Checks the output path before any conversion starts, as
    `open(path, "wb")` would (`_files.check_output`)."""
    return _files.check_output(path, overwrite)


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


def _check_positive(value, name):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(
            f"`{name}` must be a positive int or None. Received: "
            f"{name}={value!r}"
        )
    if value < 1:
        raise ValueError(
            f"`{name}` must be a positive int or None. Received: {name}={value}"
        )
    return int(value)


def _static_shapes(model, batch_size, sequence_length):
    """The input shapes to trace with: axis 0 set to `batch_size`, and
    axis 1 set to `sequence_length` in every input whose axis 1 is unknown;
    `None` when neither is given (the model's own shapes, dynamic batch).
    """
    batch_size = _check_positive(batch_size, "batch_size")
    sequence_length = _check_positive(sequence_length, "sequence_length")
    if batch_size is None and sequence_length is None:
        return None
    shapes = [list(tensor.shape) for tensor in model.inputs]
    names = _input_names(model)
    if sequence_length is not None:
        unknown = [s for s in shapes if len(s) > 1 and s[1] is None]
        if not unknown:
            fixed = {name: s[1] for name, s in zip(names, shapes) if len(s) > 1}
            if not fixed or shapes[0][1:2] != [sequence_length]:
                raise ValueError(
                    "`sequence_length` fixes axis 1 of the inputs whose "
                    "axis 1 is unknown, but the model's inputs have fixed "
                    f"lengths {fixed} (axis 1), so it cannot take another "
                    "one; pass sequence_length=None (or the first input's "
                    f"length). Received: sequence_length={sequence_length}"
                )
        for shape in unknown:
            shape[1] = sequence_length
    if batch_size is not None:
        for name, shape in zip(names, shapes):
            shape[0] = batch_size
            if None in shape[1:]:
                raise ValueError(
                    f"With `batch_size`, every input dimension must be "
                    f"static, but input {name!r} has shape "
                    f"{tuple(shape)} after fixing the batch"
                    + (
                        " and axis 1"
                        if sequence_length is not None
                        else "; pass `sequence_length` for axis 1"
                    )
                    + f". Received: batch_size={batch_size}, "
                    f"sequence_length={sequence_length}"
                )
    return [tuple(shape) for shape in shapes]


def _input_signature(model, shapes):
    """Keras' export input signature of `model` with the given shapes (in
    `model.inputs` order; `None`: the model's own), its inputs named by
    `_input_names`."""
    from keras.src.export.export_utils import get_input_signature

    signature = get_input_signature(model)
    specs = keras.tree.flatten(signature)
    if shapes is None and len(specs) != len(model.inputs):
        return None  # Keras' own signature, named its way
    if shapes is not None and len(specs) != len(shapes):
        raise ValueError(
            f"`batch_size` / `sequence_length` need a model whose export "
            f"signature matches its {len(shapes)} inputs; model "
            f"{model.name!r} has {len(specs)}."
        )
    if shapes is None:
        shapes = [spec.shape for spec in specs]
    fixed = [
        keras.InputSpec(dtype=spec.dtype, shape=shape, name=name)
        for spec, shape, name in zip(specs, shapes, _input_names(model))
    ]
    return keras.tree.pack_sequence_as(signature, fixed)


def _input_names(model):
    """The names of the file's inputs: the model's input layers' names,
    which `.keras` files keep (an unnamed `keras.Input`'s tensor name is
    not: a reloaded model, as the conversion subprocess uses, renames
    it)."""
    names = []
    for tensor in model.inputs:
        history = getattr(tensor, "_keras_history", None)
        layer = getattr(history, "operation", None)
        names.append(getattr(layer, "name", None) or tensor.name)
    return names


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


def _representative_dataset(model, data, num_samples, counter, batch=None):
    """A converter calibration generator: one sample at a time (or, with a
    static `batch`, `batch` samples at a time, the last batch completed
    with the first samples), as a dict keyed by the signature's input
    names, each in its input's dtype. `counter[0]` counts the samples the
    converter drew."""
    names = _input_names(model)
    if callable(data):
        dtypes = _input_dtypes(model)

        def samples():
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

        if batch is None:
            return samples

        def batches():
            # Each sample of a callable carries its own batch axis (of 1
            # usually): concatenate, then cut into static batches.
            drawn = list(samples())
            if not drawn:
                return
            arrays = [
                np.concatenate([sample[name] for sample in drawn])
                for name in names
            ]
            yield from _batched(names, arrays, len(arrays[0]), batch)

        return batches
    arrays = _as_input_list(model, data, "representative_data")
    count = min(len(arrays[0]), num_samples)

    def generator():
        if batch is not None:
            counter[0] += count
            yield from _batched(names, arrays, count, batch)
            return
        for i in range(count):
            counter[0] += 1
            yield {name: a[i : i + 1] for name, a in zip(names, arrays)}

    return generator


def _batched(names, arrays, count, batch):
    """The first `count` samples of `arrays` in batches of `batch`, the
    last one completed by wrapping around to the first samples."""
    for start in range(0, count, batch):
        index = np.arange(start, start + batch) % count
        yield {name: a[index] for name, a in zip(names, arrays)}


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


def _all_layer_names(model):
    """The names of `model`'s layers and of the layers inside them."""
    names = set()
    for layer in model._flatten_layers(include_self=False, recursive=True):
        names.add(layer.name)
    return names


def _layers_of_tensors(tensor_names, model):
    """The layers that compute the named tensors of a converted file, as
    `outer/inner` paths: a name `model_1/encoder_0_1/norm_1/Neg` gives
    `encoder_0/norm` (Keras suffixes scope names with `_1`)."""
    names = _all_layer_names(model)
    found = []
    for tensor in tensor_names:
        path = []
        for scope in tensor.split(";")[0].split("/")[:-1]:
            for candidate in (scope, re.sub(r"_\d+$", "", scope)):
                if candidate in names:
                    path.append(candidate)
                    break
        layer = "/".join(path)
        if layer and layer not in found:
            found.append(layer)
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
    """Writes the file whole or not at all, as `open(path, "wb")` would
    (the umask's mode for a new file, an existing file's mode kept, a
    symbolic link written through): `_files.write_atomically`."""
    _files.write_atomically(path, flatbuffer, overwrite)


def export_tflite(
    model,
    path,
    quantization=None,
    representative_data=None,
    num_calibration_samples=100,
    overwrite=True,
    batch_size=None,
    sequence_length=None,
    weights_once=None,
):
    """Converts a Keras model to a `.tflite` file with TFLite builtin ops only.

    The model is traced as a TensorFlow SavedModel and converted with
    TFLite builtin kernels alone, never `SELECT_TF_OPS`. By default its
    batch dimension, and any other `None` dimension of its inputs, stays
    dynamic; `batch_size` (and `sequence_length`) trace it with static
    shapes instead, so that the file has no shape arithmetic (no SHAPE,
    BROADCAST_TO, PACK, GATHER or REDUCE_PROD on shapes) and no dynamic
    dimension, as GPU delegates and NPUs need. Attention masks are traced
    with `cvattn_keras.attention.portable_masking`, which keeps every
    tensor in the data's range, as quantization needs.

    Conversion needs TensorFlow. Under another Keras backend, and for the
    full-integer modes under every backend, the model is saved to a
    temporary `.keras` file and converted by `python -m cvattn_keras.export`
    under `KERAS_BACKEND=tensorflow` in a subprocess (stopped after
    `SUBPROCESS_TIMEOUT` seconds): the model must then be serializable
    (`model.save` works) and its custom layers registered in an importable
    module. (TensorFlow 2.21's full-integer quantizer can crash its process
    on some graphs; in a subprocess that is an error, not a crash.)

    The file is written as `open(path, "wb")` would write it, but whole
    or not at all (through a temporary file next to it, renamed over
    it): a new file gets the mode `0o666 & ~umask`, an existing file
    keeps its mode, a symbolic link is written through to its target
    (the link stays a link), and the directory must exist (as for
    `model.save`; none is created).

    Args:
        model: a `keras.Model` with defined inputs.
        path: the output file; must end in `.tflite`.
        quantization: one of `QUANTIZATIONS`:
            `None` (float32);
            `"float16"` (float16 weights);
            `"dynamic_int8"` (int8 weights, dynamic-range activations);
            `"int8"` (int8 weights and activations, calibrated on
            `representative_data`; float inputs and outputs, float
            fallback for ops without an int8 kernel);
            `"full_int8"` (integer only, for NPUs, DSPs and the Edge TPU:
            `TFLITE_BUILTINS_INT8` kernels alone, int8 weights and
            activations calibrated on `representative_data`, and int8
            float inputs and outputs, each with the scale and zero point
            that `verify_tflite`'s report shows; bool and integer inputs,
            such as masks or ids, keep their dtype);
            `"int16x8"` (int16 activations and int8 weights, calibrated on
            `representative_data`, for accuracy-sensitive models: the
            `EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8`
            kernels alone, int16 float inputs and outputs with zero point
            0; no float fallback either; bool masks computed at run time
            are supported, as a GATHER in `[0, 1]`, since 16-bit TFLite
            has no SELECT_V2; APAtt and AAtt are not: their modulus
            needs DIV and SQRT, which have no 16-bit kernels).
            In both full-integer modes an op without an integer kernel
            would stay float (the converter's fallback): the file is then
            not written and a `FloatFallbackError` names the ops and the
            layers.
        representative_data: for `"int8"`, `"full_int8"` and `"int16x8"`
            (required there, refused otherwise): an array (one input), a
            list of arrays (one per model input, in order) or a dict keyed
            by input name, samples on the first axis, each input in its
            own dtype (bool masks as bool); or a callable returning a fresh
            iterable of per-sample inputs on each call, as TFLite's
            converter takes (it is called once more, to check that it
            yields a sample). It must hold at least one sample. With
            `batch_size`, the converter draws batches of `batch_size`
            samples (the last one completed with the first samples).
            Give typical inputs: int8 ranges calibrated on random ones fit
            noise, not the data (the command line calibrates on random
            inputs only when asked by name, `--representative-data
            random`), and `verify_tflite` on typical inputs shows it.
        num_calibration_samples: positive int, how many samples of
            `representative_data` to calibrate on (at most).
        overwrite: whether to replace an existing file at `path`, as in
            `keras.Model.save` (default `True`, as there). With `False` an
            existing file is kept and a `FileExistsError` (which is also a
            `ValueError`) is raised, before any conversion.
        batch_size: `None` (a dynamic batch) or a positive int: the file's
            static batch. Every other input dimension must then be static
            too (give `sequence_length` for an unknown axis 1); the file
            only runs on batches of that size.
        sequence_length: `None` or a positive int: the static length of
            axis 1 of every input whose axis 1 is `None` (inputs whose
            axis 1 is fixed keep their length). A model whose inputs all
            have a fixed axis 1 takes only its first input's length.
        weights_once: `True` stores each complex weight once: the layers
            apply `[W_i; W_r]` to `[-x_i | x_r]` and to `[x_r | x_i]`
            instead of the real block kernel `[[W_r, W_i], [-W_i, W_r]]`,
            which the converter stores whole (two real numbers per real
            parameter). `False` keeps the block kernel: twice the weight
            data, but one op per product, which LiteRT runs faster where a
            model is small enough for per-op work to dominate (about 30% on
            the example's 50k-parameter classifier), and, in the
            calibrated modes, a smaller error: the weights-once rows
            `[-x_i | x_r]` span both signs, which doubles their int8 scale
            (masked CAtt: 2.3% of the output's scale with block kernels,
            9.9% with weights once). `None` (default): `True` for float32,
            float16 and dynamic_int8, `False` for the calibrated modes.
            Float results are the same up to rounding either way.

    Returns:
        The path of the written file.

    Raises:
        ValueError: bad arguments (`path` a directory or in a missing
            directory, an existing file with `overwrite=False` (then a
            `FileExistsError` too; the path errors are `OSError`s too), no
            or empty calibration data for a
            calibrated mode, a non-positive `batch_size` or
            `sequence_length`, a `sequence_length` the model cannot take),
            or no TensorFlow to convert with.
        UnsupportedOpsError: the model needs an op with no builtin kernel;
            the error names the op and the layer.
        FloatFallbackError: (an `UnsupportedOpsError`) a full-integer mode
            left float ops; the error names the ops and the layers.
    """
    path = _check_output(path, overwrite)
    if quantization not in QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be one of {list(QUANTIZATIONS)}. "
            f"Received: quantization={quantization!r}"
        )
    num_calibration_samples = _check_num_samples(num_calibration_samples)
    if quantization in _CALIBRATED and representative_data is None:
        raise ValueError(
            f"`quantization={quantization!r}` calibrates activation ranges "
            "and needs `representative_data` (a few hundred typical "
            "inputs). Received: representative_data=None"
        )
    if quantization not in _CALIBRATED and representative_data is not None:
        raise ValueError(
            "`representative_data` is used only with quantization='int8', "
            "'full_int8' or 'int16x8' (the calibrated modes). Received: "
            f"quantization={quantization!r}"
        )
    if weights_once is not None and not isinstance(weights_once, bool):
        raise ValueError(
            f"`weights_once` must be True, False or None (by mode). "
            f"Received: weights_once={weights_once!r}"
        )
    if weights_once is None:
        weights_once = quantization not in _CALIBRATED
    _check_model(model)
    shapes = _static_shapes(model, batch_size, sequence_length)
    static_batch = None if shapes is None or batch_size is None else batch_size
    in_child = os.environ.get(_CHILD_ENV) == "1"
    if keras.backend.backend() != "tensorflow" or (
        quantization in _FULL_INTEGER and not in_child
    ):
        if quantization in _CALIBRATED:
            representative_data = _calibration_arrays(
                model, representative_data, num_calibration_samples
            )
        flatbuffer = _convert_in_subprocess(
            model,
            quantization,
            representative_data,
            batch_size=batch_size,
            sequence_length=sequence_length,
            weights_once=weights_once,
        )
    else:
        if quantization in _CALIBRATED:
            # Validate (dtypes, shapes, at least one sample) before tracing.
            _check_calibration_data(model, representative_data)
        flatbuffer = _convert(
            model,
            quantization,
            representative_data,
            num_calibration_samples,
            shapes=shapes,
            static_batch=static_batch,
            weights_once=weights_once,
        )
    _write(path, flatbuffer, overwrite)
    return path


def _convert(
    model,
    quantization,
    representative_data,
    num_samples,
    shapes=None,
    static_batch=None,
    weights_once=True,
):
    """The `.tflite` flatbuffer of `model`, converted in this process (the
    TensorFlow backend), traced with the input `shapes` if given."""
    import tensorflow as tf
    from tensorflow.lite.python.convert_phase import ConverterError

    counter = [0]
    signature = _input_signature(model, shapes)
    with tempfile.TemporaryDirectory() as saved_model:
        with (
            core.portable_masking(),
            _tracing.for_export(
                plain_statistics=quantization in _CALIBRATED,
                weights_once=weights_once,
                lookup_masks=quantization == "int16x8",
            ),
        ):
            model.export(
                saved_model,
                format="tf_saved_model",
                verbose=False,
                input_signature=signature,
            )
        converter = tf.lite.TFLiteConverter.from_saved_model(saved_model)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantization is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        if quantization in _CALIBRATED:
            converter.representative_dataset = _representative_dataset(
                model, representative_data, num_samples, counter, static_batch
            )
        if quantization == "full_int8":
            converter.target_spec.supported_ops = [
                tf.lite.OpsSet.TFLITE_BUILTINS_INT8
            ]
            converter.inference_input_type = tf.int8
            converter.inference_output_type = tf.int8
        if quantization == "int16x8":
            # TFLITE_BUILTINS too: the 16x8 quantizer refuses every op
            # outside its list, even one on bools or integers only (the
            # CAST of a bool mask to int32, a LOGICAL_AND of two masks);
            # with the builtins such ops stay as they are, and an op that
            # would compute in float instead is refused below
            # (`_check_no_float_ops`), naming its layer.
            converter.target_spec.supported_ops = [
                tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8,  # noqa: E501
                tf.lite.OpsSet.TFLITE_BUILTINS,
            ]
            converter.inference_input_type = tf.int16
            converter.inference_output_type = tf.int16
        try:
            with warnings.catch_warnings():
                # Calibration runs TensorFlow's own deprecated
                # tf.lite.Interpreter internally; the warning is not ours.
                warnings.filterwarnings(
                    "ignore",
                    message=r"(?s).*tf\.lite\.Interpreter is deprecated",
                )
                flatbuffer = converter.convert()
        except ConverterError as error:
            _raise_unsupported(error, model)
        except RuntimeError as error:
            refused = re.findall(
                r"Quantization to 16x8-bit not yet supported for op: "
                r"'(\w+)'",
                str(error),
            )
            if not refused:
                raise
            raise FloatFallbackError(
                sorted(set(refused)),
                [],
                [f"{op}: no int16 activation kernel" for op in refused],
                quantization,
            ) from None
    if quantization in _CALIBRATED and counter[0] == 0:
        # TensorFlow's converter would silently write a float model.
        raise ValueError(
            "`representative_data` yielded no samples; int8 calibration "
            "needs at least one. Received: an empty iterable."
        )
    if quantization in _FULL_INTEGER:
        _check_no_float_ops(flatbuffer, model, quantization)
    return flatbuffer


def _check_no_float_ops(flatbuffer, model, quantization):
    """Raises `FloatFallbackError` if a full-integer file computes any
    float tensor (QUANTIZE / DEQUANTIZE at a float op's boundary are part
    of that fallback, not reported on their own)."""
    from ai_edge_litert import schema_py_generated as schema

    tflite = schema.ModelT.InitFromPackedBuf(flatbuffer, 0)
    op_names = {
        code: name
        for name, code in vars(schema.BuiltinOperator).items()
        if not name.startswith("_")
    }
    floats = {schema.TensorType.FLOAT32, schema.TensorType.FLOAT16}
    ops, details, tensor_names = set(), [], []
    for subgraph in tflite.subgraphs or []:
        for operator in subgraph.operators or []:
            code = tflite.operatorCodes[operator.opcodeIndex]
            name = op_names.get(
                max(code.builtinCode, code.deprecatedBuiltinCode), "CUSTOM"
            )
            if name in ("QUANTIZE", "DEQUANTIZE"):
                continue
            indices = [i for i in operator.inputs if i >= 0]
            indices += list(operator.outputs)
            float_tensors = [
                subgraph.tensors[i]
                for i in indices
                if subgraph.tensors[i].type in floats
            ]
            if float_tensors:
                ops.add(name)
                output = subgraph.tensors[operator.outputs[0]].name.decode()
                details.append(f"{name} -> {output}")
                tensor_names.append(output)
    if ops:
        raise FloatFallbackError(
            sorted(ops),
            _layers_of_tensors(tensor_names, model),
            details,
            quantization,
        )


def _convert_in_subprocess(
    model,
    quantization,
    representative_arrays,
    batch_size=None,
    sequence_length=None,
    weights_once=True,
):
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
                f"Under the {backend!r} backend (and for full-integer "
                "modes), export_tflite converts a saved copy of the model "
                f"under TensorFlow, but the model could not be saved: "
                f"{error}. Make it serializable, or export under "
                "KERAS_BACKEND=tensorflow."
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
        if batch_size is not None:
            command += ["--static-batch", str(batch_size)]
        command += ["--weights", "once" if weights_once else "block"]
        if sequence_length is not None:
            command += ["--static-length", str(sequence_length)]
        if quantization in _CALIBRATED:
            data = os.path.join(directory, "calibration.npz")
            # Positional (arr_0, arr_1, ...): the reloaded model's inputs
            # come in the same order, but an unnamed keras.Input may get
            # another automatic name there.
            np.savez(data, *representative_arrays)
            command += [
                "--representative-data",
                data,
                "--calibration-samples",
                str(len(representative_arrays[0])),
            ]
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        env[_CHILD_ENV] = "1"  # the child converts in its own process
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
            _raise_subprocess_error(done, error_file, backend, quantization)
        with open(output, "rb") as f:
            return f.read()


def _raise_subprocess_error(done, error_file, backend, quantization=None):
    if os.path.exists(error_file):
        with open(error_file) as f:
            failure = json.load(f)
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
    if done.returncode < 0:
        raise RuntimeError(
            f"TensorFlow's converter crashed (signal {-done.returncode}) "
            f"in the export subprocess"
            + (f" while quantizing to {quantization!r}" if quantization else "")
            + ". With a full-integer mode this is TensorFlow 2.21's "
            "quantizer failing on a tensor it cannot quantize (e.g. "
            "'scale out of expressed type range': a tensor whose "
            "calibrated range is empty). Its last output:\n" + tail
        )
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


def file_sizes(path):
    """`(size_bytes, weight_bytes)` of a `.tflite` file: its size, and the
    bytes of the buffers that its constant tensors read (weights, biases
    and the other constants, each buffer once however many tensors share
    it; without the metadata buffers). `size_bytes - weight_bytes` is the
    rest: the format's metadata, names and graph.

    Raises:
        ValueError: if `path` is not a TFLite flatbuffer.
    """
    from ai_edge_litert import schema_py_generated as schema

    path = _check_path(path)
    _check_tflite_file(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        tflite = schema.Model.GetRootAs(data, 0)
        used = set()
        for s in range(tflite.SubgraphsLength()):
            subgraph = tflite.Subgraphs(s)
            for t in range(subgraph.TensorsLength()):
                used.add(subgraph.Tensors(t).Buffer())
        weight_bytes = 0
        for index in used:
            if index <= 0 or index >= tflite.BuffersLength():
                continue  # 0: the empty buffer of every runtime tensor
            buffer = tflite.Buffers(index)
            # Files over 2 GB keep buffers after the flatbuffer (offset,
            # size); the others inline (data).
            if buffer.Offset() > 1:
                weight_bytes += buffer.Size()
            else:
                weight_bytes += buffer.DataLength()
    except Exception as error:
        raise ValueError(
            f"{path!r} is not a valid TFLite model (its flatbuffer does not "
            f"parse: {type(error).__name__}: {error})."
        ) from None
    return len(data), weight_bytes


def _file_quantization(path):
    """The quantization mode of a `.tflite` file, read from the types of
    its tensors: int16 activations -> `"int16x8"`; int8 activations ->
    `"full_int8"`, or `"int8"` where float activations remain (its float
    inputs and outputs); int8 constants only -> `"dynamic_int8"`; float16
    constants -> `"float16"`; otherwise `"float32"`."""
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        data = f.read()
    types = schema.TensorType
    activations, constants = set(), set()
    try:
        tflite = schema.Model.GetRootAs(data, 0)
        for s in range(tflite.SubgraphsLength()):
            subgraph = tflite.Subgraphs(s)
            for t in range(subgraph.TensorsLength()):
                tensor = subgraph.Tensors(t)
                index = tensor.Buffer()
                constant = 0 < index < tflite.BuffersLength() and (
                    tflite.Buffers(index).DataLength() > 0
                    or tflite.Buffers(index).Offset() > 1
                )
                (constants if constant else activations).add(tensor.Type())
    except Exception as error:
        raise ValueError(
            f"{path!r} is not a valid TFLite model (its flatbuffer does not "
            f"parse: {type(error).__name__}: {error})."
        ) from None
    if types.INT16 in activations:
        return "int16x8"
    if activations & {types.INT8, types.UINT8}:
        return "int8" if types.FLOAT32 in activations else "full_int8"
    if constants & {types.INT8, types.UINT8}:
        return "dynamic_int8"
    if types.FLOAT16 in constants:
        return "float16"
    return "float32"


def _ordered_outputs(results):
    """Signature outputs in the model's order (`output_0`, `output_1`, ...,
    sorted numerically so that `output_10` follows `output_9`)."""

    def index(name):
        match = re.fullmatch(r"output_(\d+)", name)
        return int(match.group(1)) if match else name

    return [results[name] for name in sorted(results, key=index)]


def _quantization(detail):
    """`(scale, zero_point)` of an interpreter tensor detail, or `None`
    for a tensor that is not quantized."""
    scale, zero_point = detail.get("quantization", (0.0, 0))
    if not scale:
        return None
    return float(scale), int(zero_point)


def _tensor_info(name, detail):
    quantized = _quantization(detail)
    signature = detail.get("shape_signature")
    shape = (
        signature
        if signature is not None and len(signature)
        else (detail["shape"])
    )
    return TensorInfo(
        name=name,
        dtype=np.dtype(detail["dtype"]).name,
        shape=tuple(int(d) for d in shape),
        scale=None if quantized is None else quantized[0],
        zero_point=None if quantized is None else quantized[1],
    )


def _quantize(array, detail):
    """A float array as the integer input `detail` describes:
    `round(x / scale) + zero_point`, saturated to the integer range."""
    scale, zero_point = _quantization(detail)
    dtype = np.dtype(detail["dtype"])
    limits = np.iinfo(dtype)
    q = np.round(array.astype("float64") / scale) + zero_point
    return np.clip(q, limits.min, limits.max).astype(dtype)


def _dequantize(array, detail):
    """An integer output as float64: `scale * (q - zero_point)`."""
    quantized = _quantization(detail)
    if quantized is None or not np.issubdtype(array.dtype, np.integer):
        return array
    scale, zero_point = quantized
    return scale * (array.astype("float64") - zero_point)


def _feed(runner, model, arrays, path):
    """The inputs keyed by signature name, each in the file's dtype: a
    float input of an integer (quantized) file is quantized with the
    file's scale and zero point."""
    names = _input_names(model)
    details = runner.get_input_details()
    missing = sorted(set(names) - set(details))
    if missing:
        raise ValueError(
            f"{path!r} has inputs {sorted(details)}, not the model's "
            f"{missing}: was it exported from this model?"
        )
    feed = {}
    for name, array, dtype in zip(names, arrays, _input_dtypes(model)):
        detail = details[name]
        signature = detail.get("shape_signature")
        if signature is not None and len(signature) == array.ndim:
            fixed = [
                (axis, want)
                for axis, want in enumerate(signature)
                if want >= 0 and array.shape[axis] != want
            ]
            if fixed:
                axis, want = fixed[0]
                what = "batch" if axis == 0 else f"axis {axis}"
                raise ValueError(
                    f"{path!r} has a static {what} of {want} for input "
                    f"{name!r} (exported with batch_size / "
                    f"sequence_length), but `inputs` has shape "
                    f"{array.shape}. Give inputs of shape "
                    f"{tuple(int(d) for d in signature)}."
                )
        quantized = _quantization(detail)
        target = np.dtype(detail["dtype"])
        if (
            quantized is not None
            and np.issubdtype(target, np.integer)
            and np.issubdtype(np.dtype(dtype), np.floating)
        ):
            feed[name] = _quantize(array, detail)
        else:
            feed[name] = _cast(array, target, f"`inputs` for {name!r}")
    return feed


def _runner(path, num_threads):
    """The LiteRT signature runner of the file at `path`."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        return Interpreter(
            model_path=path, num_threads=num_threads
        ).get_signature_runner()
    except (RuntimeError, ValueError) as error:
        raise ValueError(
            f"LiteRT cannot load {path!r}: {error}".rstrip()
        ) from None


def _outputs(runner, feed):
    """The file's outputs for `feed`, in the model's order, dequantized."""
    results = runner(**feed)
    details = runner.get_output_details()
    return _ordered_outputs(
        {
            name: _dequantize(value, details[name])
            for name, value in results.items()
        }
    )


def predict_tflite(path, model, inputs, batch_size=None, num_threads=None):
    """The outputs of a `.tflite` file on the LiteRT interpreter, as
    `model.predict` gives the Keras model's: for evaluating an exported
    (quantized) file on a whole data set.

    Args:
        path: the `.tflite` file (from `export_tflite`).
        model: the Keras model it was exported from (it gives the inputs'
            names and dtypes; it is not run).
        inputs: as for `verify_tflite`, any number of samples.
        batch_size: samples per invocation; `None` feeds all at once. A
            file with a static batch (`export_tflite(..., batch_size=N)`)
            runs in batches of N (`batch_size` must then be None or N), the
            last one padded with zeros (the padding's outputs are dropped).
        num_threads: LiteRT CPU threads (`None`: LiteRT's default).

    Returns:
        One float array (integer outputs dequantized with the file's
        scale and zero point), or a list of them for a model with several
        outputs.
    """
    path = _check_path(path)
    _check_tflite_file(path)
    _check_model(model)
    if batch_size is not None:
        _check_positive(batch_size, "batch_size")
    arrays = _as_input_list(model, inputs, "inputs")
    if not arrays[0].shape[0]:
        raise ValueError(
            "`inputs` must hold at least one sample. Received: inputs of "
            f"shape {arrays[0].shape}"
        )
    runner = _runner(path, num_threads)
    details = runner.get_input_details()
    first = _input_names(model)[0]
    if first not in details:
        _feed(runner, model, arrays, path)  # raises: names the file's inputs
    signature = details[first].get("shape_signature")
    total = int(arrays[0].shape[0])
    static = None
    if signature is not None and len(signature) and signature[0] > 0:
        static = int(signature[0])
        if batch_size is not None and batch_size != static:
            raise ValueError(
                f"{path!r} has a static batch of {static}; `batch_size` must "
                f"be None or {static}. Received: batch_size={batch_size}"
            )
        batch_size = static
    step = total if batch_size is None else batch_size
    chunks = []
    for start in range(0, total, step):
        chunk = [a[start : start + step] for a in arrays]
        size = len(chunk[0])
        if static is not None and size < static:  # pad to the static batch
            chunk = [
                np.concatenate(
                    [a, np.zeros((static - size,) + a.shape[1:], a.dtype)]
                )
                for a in chunk
            ]
        outputs = _outputs(runner, _feed(runner, model, chunk, path))
        chunks.append([o[:size] for o in outputs])
    # Dequantized outputs come as float64: float32, as Keras gives them.
    merged = [
        np.concatenate(parts).astype(
            "float32" if parts[0].dtype == np.float64 else parts[0].dtype
        )
        for parts in zip(*chunks)
    ]
    return merged[0] if len(merged) == 1 else merged


def verify_tflite(
    path,
    model,
    inputs,
    num_runs=20,
    num_threads=None,
    expected_max_rel_error=None,
):
    """Runs a `.tflite` file on the LiteRT interpreter and compares it with
    the Keras model (under any Keras backend).

    Args:
        path: the `.tflite` file (from `export_tflite`).
        model: the Keras model it was exported from.
        inputs: one batch of inputs (at least one sample): an array, a list
            of arrays (one per model input) or a dict keyed by input name,
            each in its input's dtype (a bool mask as bool; floats are cast
            to float inputs). The file is resized to their shapes where its
            dimensions are dynamic; a static file (`batch_size=`) takes
            only its own shapes. Float inputs of an integer file
            (`"full_int8"`, `"int16x8"`) are quantized with the file's
            scale and zero point, and its integer outputs dequantized, so
            that the errors compare with those of float files.
        num_runs: how many invocations the median latency is taken over.
        num_threads: LiteRT CPU threads (`None`: LiteRT's default).
        expected_max_rel_error: `None` (default: the usual bound of the
            file's mode, `EXPECTED_MAX_REL_ERROR`) or a positive number:
            the `max_rel_error` beyond which the report warns
            (`report.within_expected`, `report.warning`).

    Returns:
        A `TFLiteReport` (its `str` is a printable table): the errors, the
        latency, every input and output (dtype, shape, scale and zero
        point), the GPU delegate's compatibility
        (`gpu.check_gpu_compatibility`), the file's mode and whether the
        error is within that mode's usual error (`within_expected`; a
        last `WARNING` line when it is not). An error far above it
        usually means calibration on inputs unlike the verified ones
        (random ones, say), or a file of another model.

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
    if expected_max_rel_error is not None and (
        isinstance(expected_max_rel_error, bool)
        or not isinstance(expected_max_rel_error, (int, float, np.number))
        or not expected_max_rel_error > 0
    ):
        raise ValueError(
            "`expected_max_rel_error` must be None or a positive number. "
            f"Received: expected_max_rel_error={expected_max_rel_error!r}"
        )
    _check_model(model)
    arrays = _as_input_list(model, inputs, "inputs")
    ops, non_builtin = _file_ops(path)
    quantization = _file_quantization(path)
    if expected_max_rel_error is None:
        expected_max_rel_error = EXPECTED_MAX_REL_ERROR[quantization]
    if non_builtin:
        raise ValueError(
            f"{path} uses non-builtin op(s) {list(non_builtin)}, which the "
            "LiteRT interpreter cannot run without the Flex delegate. "
            "Export with cvattn_keras.export.export_tflite instead."
        )
    runner = _runner(path, num_threads)
    feed = _feed(runner, model, arrays, path)
    got = _outputs(runner, feed)
    output_details = runner.get_output_details()
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
        inputs=tuple(
            _tensor_info(name, runner.get_input_details()[name])
            for name in _input_names(model)
        ),
        outputs=tuple(
            _tensor_info(name, output_details[name])
            for name in _ordered_outputs({n: n for n in output_details})
        ),
        gpu=check_gpu_compatibility(path),
        weight_bytes=file_sizes(path)[1],
        quantization=quantization,
        expected_max_rel_error=float(expected_max_rel_error),
    )
