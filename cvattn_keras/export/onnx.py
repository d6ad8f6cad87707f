"""ONNX export, verified on ONNX Runtime: `export_onnx`, `verify_onnx`.

ONNX has no complex tensors in the general case, so no natively complex
network reaches ONNX Runtime. A model of this library's layers holds no
complex dtype: it converts to plain ONNX ops of the default domain
(MatMul, Softmax, Conv, Reshape, ...), with no custom op and no contrib
domain, which ONNX Runtime runs on servers, Windows, the web
(onnxruntime-web) and phones (ONNX Runtime Mobile).

    import cvattn_keras as cvk

    cvk.export.export_onnx(model, "model.onnx")
    print(cvk.export.verify_onnx("model.onnx", model, sample_inputs))

The route: TensorFlow and tf2onnx. The model is traced as a TensorFlow
function (Keras' `model.export(format="onnx")`) inside the exporter's
tracing contexts (`_tracing.for_export`, `attention.portable_masking`:
complex weights stored once, masks as exact 0/1 selections, the STFT as a
convolution) and converted by tf2onnx. Under another Keras backend the
model is saved to a temporary `.keras` file and converted by `python -m
cvattn_keras.export` under `KERAS_BACKEND=tensorflow` in a subprocess, as
`export_tflite` does.

Both routes were measured on the example's small classifier
(`examples/train_music.py`'s "small" sizes on 128 bins, 32 frames, 24
notes: 50,651 parameters, untrained), batch 4, on 2 CPU cores (TensorFlow
2.21, tf2onnx 1.17, torch 2.13, ONNX Runtime 1.32 with one thread; the
PyTorch route through `torch.onnx.export(dynamo=True)` with a dynamic
batch, inside the same tracing contexts or not):

    route                        convert  file      max abs error  latency
    TensorFlow, tf2onnx          6-7 s    396 KiB   7.7e-7         3.1-3.3 ms
      weights_once=False         6-7 s    575 KiB   5.4e-7         2.3-2.6 ms
    PyTorch, torch.onnx.export   21-25 s  1.1 MiB   6e-7 to 9e-7   3.1-4.6 ms

The TensorFlow route is the one taken: it converts three to four times
faster and writes files a third the size (most of a PyTorch file, 650
to 790 KiB, is per-node metadata: the source stack of each op) that run
as fast; it needs no `torch.export.Dim` bounds for dynamic sizes; and it is
the route that `export_tflite` already takes from every backend (one
subprocess protocol). tf2onnx's support table stops at TensorFlow 2.15,
but it converts these graphs under TensorFlow 2.21, and every file is
checked here: only default-domain ONNX ops, no complex tensor type. (The
layers trace under `torch.export` with symbolic sizes too, so the PyTorch
route also works for a user who wants it.)

`quantization="float16"` stores the weights as float16 (half the file)
and casts them to float32 when the session loads (ONNX Runtime folds the
casts): the computation stays float32, as in a TFLite float16 file.
Tensors whose values do not fit float16, and constants of fewer than 16
elements (scales, epsilons), stay float32.

Needs the optional extra: `pip install "cvattn_keras[onnx]"` (onnx,
onnxruntime, tf2onnx); they are imported only inside these functions.
From the shell: `python -m cvattn_keras.export MODEL.keras OUT.onnx
[--quantize float16] [--opset N] [--verify]` (the suffix picks ONNX).
"""

import contextlib
import dataclasses
import importlib.util
import logging
import os
import tempfile
import warnings

import keras
import numpy as np

from cvattn_keras import _tracing
from cvattn_keras import attention as core
from cvattn_keras.export import _files
from cvattn_keras.export._arguments import _as_input_list
from cvattn_keras.export._arguments import _cast
from cvattn_keras.export._arguments import _check_expected_max_rel_error
from cvattn_keras.export._arguments import _check_file_inputs
from cvattn_keras.export._arguments import _check_model
from cvattn_keras.export._arguments import _dtype_policies
from cvattn_keras.export._arguments import _input_names
from cvattn_keras.export._arguments import _input_signature
from cvattn_keras.export._arguments import _median_latency_ms
from cvattn_keras.export._arguments import _verified_errors
from cvattn_keras.export._errors import ONNXUnsupportedOpsError
from cvattn_keras.export._report import TensorInfo
from cvattn_keras.export._report import _Bounded
from cvattn_keras.export._report import _expected_text
from cvattn_keras.export._report import _sizes_text
from cvattn_keras.export._subprocess import convert_by_command_line

ONNX_QUANTIZATIONS = (None, "float16")
"""The modes of `export_onnx(quantization=...)`."""

# The opsets `export_onnx` writes: tf2onnx 1.17 converts up to 18; below
# 13 its Softmax and Split take other forms, which are not tested here.
ONNX_OPSETS = tuple(range(13, 19))
"""The ONNX opsets that `export_onnx(opset=...)` writes (13 to 18)."""

_INSTALL = 'pip install "cvattn_keras[onnx]"'

# Float constants smaller than this stay float32 in float16 files.
_FLOAT16_MIN_ELEMENTS = 16
_FLOAT16_MAX = 65504.0


def _require(modules, who):
    """Raises an `ImportError` naming the extra unless every module of
    `modules` is importable."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"{who} needs {', '.join(missing)} (the optional extra "
            f"'onnx'), which {'is' if len(missing) == 1 else 'are'} not "
            f"installed: {_INSTALL}"
        )


@dataclasses.dataclass
class ONNXReport(_Bounded):
    """What `verify_onnx` measured.

    Attributes:
        path: the `.onnx` file.
        size_bytes: its size.
        weight_bytes: the bytes of its initializers (weights and other
            constants); `size_bytes - weight_bytes` is the graph and
            names.
        ops: the operators in the file (`op_type`), sorted; all of the
            default ONNX domain in a file from `export_onnx`.
        opset: the file's default-domain opset.
        max_abs_error: the largest |ONNX Runtime - Keras| over all outputs.
        max_rel_error: `max_abs_error` divided by the largest |Keras
            output| (scale-free, and stable on outputs near 0).
        median_latency_ms: the median time of one run of the verified
            batch on ONNX Runtime's CPU execution provider.
        batch_size: the batch the figures were measured on.
        inputs, outputs: a `TensorInfo` per input and output of the file
            (name, dtype, shape with `-1` for a dynamic dimension).
        quantization: `"float16"` (float16 weights) or `"float32"`.
        expected_max_rel_error: the bound of that mode's usual
            `max_rel_error` (`EXPECTED_MAX_REL_ERROR`, as for TFLite
            files of the mode, raised to 10 times the Keras model's own
            rounding floor where that is larger, as `TFLiteReport`'s, or
            the one given to `verify_onnx`);
            `within_expected` (a property) says whether the error is within
            it, and `warning` (a property) is otherwise one line that
            `str(report)` prints last.
    """

    path: str
    size_bytes: int
    ops: tuple
    opset: int
    max_abs_error: float
    max_rel_error: float
    median_latency_ms: float
    batch_size: int
    inputs: tuple = ()
    outputs: tuple = ()
    weight_bytes: int = None
    quantization: str = None
    expected_max_rel_error: float = None

    @property
    def warning(self):
        """`None`, or one line saying that the error is far above the
        usual error of the file's mode."""
        if self.within_expected:
            return None
        return (
            f"max rel error {self.max_rel_error:.3g} is far above the "
            f"usual error of {self.quantization} files (bound "
            f"{self.expected_max_rel_error:g}): was the file exported from "
            "this model?"
        )

    def __str__(self):
        lines = [
            f"ONNX file        {self.path}",
            f"size             "
            f"{_sizes_text(self.size_bytes, self.weight_bytes)}",
            f"opset            {self.opset}",
            f"ops              {', '.join(self.ops)}",
        ]
        lines += [f"input            {info}" for info in self.inputs]
        lines += [f"output           {info}" for info in self.outputs]
        lines += [
            f"weights          {self.quantization}",
            f"max abs error    {self.max_abs_error:.3g} (vs Keras)",
            f"max rel error    {self.max_rel_error:.3g} "
            "(abs error / max |output|)" + _expected_text(self),
            f"median latency   {self.median_latency_ms:.3f} ms "
            f"(batch {self.batch_size}, ONNX Runtime CPU)",
        ]
        if self.warning is not None:
            lines.append(f"WARNING          {self.warning}")
        return "\n".join(lines)


def _check_arguments(quantization, opset, dynamic_batch, weights_once):
    if quantization not in ONNX_QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be one of {list(ONNX_QUANTIZATIONS)} for "
            "an ONNX file (the integer modes are export_tflite's). "
            f"Received: quantization={quantization!r}"
        )
    if opset is not None and (
        isinstance(opset, bool)
        or not isinstance(opset, (int, np.integer))
        or int(opset) not in ONNX_OPSETS
    ):
        raise ValueError(
            f"`opset` must be None (tf2onnx's default, 15) or an int in "
            f"[{ONNX_OPSETS[0]}, {ONNX_OPSETS[-1]}]. Received: opset={opset!r}"
        )
    if not isinstance(dynamic_batch, bool):
        raise ValueError(
            "`dynamic_batch` must be True or False. Received: "
            f"dynamic_batch={dynamic_batch!r}"
        )
    if weights_once is not None and not isinstance(weights_once, bool):
        raise ValueError(
            "`weights_once` must be True, False or None (True). Received: "
            f"weights_once={weights_once!r}"
        )


def _check_float32(model):
    """The exporter writes float32 graphs: a mixed or half-precision
    policy would put float16/bfloat16 tensors in the file, which ONNX
    Runtime's CPU provider lacks kernels for."""
    _, others = _dtype_policies(model)
    if others:
        raise ValueError(
            "export_onnx exports float32 models (a float16 file: "
            "quantization='float16'), but the model has layers with dtype "
            f"policies {others}. Rebuild it under the 'float32' policy "
            "(keras.config.set_dtype_policy('float32')) and copy the "
            "weights (model.set_weights(trained.get_weights()))."
        )


def export_onnx(
    model,
    path,
    quantization=None,
    opset=None,
    dynamic_batch=True,
    overwrite=True,
    weights_once=None,
):
    """Converts a Keras model to an `.onnx` file of standard ONNX ops.

    The file holds only ops of the default ONNX domain and no complex
    tensor type (checked: a model whose ops tf2onnx cannot map raises an
    `ONNXUnsupportedOpsError` naming the ops and layers, and no file is
    written). Its inputs keep the model's input names; its outputs are
    named `output_0`, `output_1`, ... as in `export_tflite`'s files.

    The conversion runs under TensorFlow (tf2onnx). Under another Keras
    backend the model is saved to a temporary `.keras` file and converted
    by `python -m cvattn_keras.export` under `KERAS_BACKEND=tensorflow` in
    a subprocess (stopped after `SUBPROCESS_TIMEOUT` seconds): the model
    must then be serializable and its custom layers registered in an
    importable module. See the module docstring for why this route.

    The file is written as `export_tflite` writes its files: whole or not
    at all, as `open(path, "wb")` would (a new file's mode from the
    umask, an existing file's mode kept, a symbolic link written through),
    into an existing directory.

    Args:
        model: a `keras.Model` with defined inputs, of float32 layers.
        path: the output file; must end in `.onnx`.
        quantization: `None` (float32) or `"float16"`: float16 weights
            (half the file), cast to float32 when ONNX Runtime loads the
            file, so that the model computes in float32 as before.
        opset: `None` (tf2onnx's default, 15) or the default-domain opset
            to write, an int in `ONNX_OPSETS` (13 to 18).
        dynamic_batch: `True` (default): the file takes any batch size.
            `False`: a static batch of 1 (for runtimes that need static
            shapes). Other unknown input dimensions (a model built with
            `frames=None`) stay dynamic either way.
        overwrite: whether to replace an existing file at `path` (default
            `True`, as `keras.Model.save`). With `False` an existing file
            is kept and a `FileExistsError` (also a `ValueError`) is
            raised before any conversion.
        weights_once: `True` or `None` (default): each complex weight is
            stored once, `W_r` and `W_i`; `False`: as the real block
            kernel `[[W_r, W_i], [-W_i, W_r]]`, twice the weight data
            but one MatMul per product, faster where per-op work
            dominates (the example's small classifier on ONNX Runtime:
            2.3-2.6 ms against 3.1-3.3 ms, 575 KiB against 396 KiB).

    Returns:
        The path of the written file.

    Raises:
        ImportError: onnx or tf2onnx is not installed (the message gives
            `pip install "cvattn_keras[onnx]"`).
        ValueError: bad arguments (`path` not ending in `.onnx`, a
            directory or in a missing directory; an existing file with
            `overwrite=False`; an unknown `quantization` or `opset`), a
            model that is not float32, or no TensorFlow to convert with.
        ONNXUnsupportedOpsError: (a `ValueError`) the model needs ops that
            tf2onnx cannot map to standard ONNX ops; the error names the
            ops and the layers.
    """
    path = _files.check_output(path, overwrite, suffix=".onnx")
    _check_arguments(quantization, opset, dynamic_batch, weights_once)
    _check_model(model)
    _check_float32(model)
    _require(("onnx", "tf2onnx"), "export_onnx")
    opset = None if opset is None else int(opset)
    weights_once = True if weights_once is None else weights_once
    if keras.backend.backend() == "tensorflow":
        data = _convert(model, quantization, opset, dynamic_batch, weights_once)
    else:
        data = _convert_in_subprocess(
            model, quantization, opset, dynamic_batch, weights_once
        )
    _files.write_atomically(path, data, overwrite)
    return path


def _shapes(model, dynamic_batch):
    """The traced input shapes: the model's, axis 0 set to 1 for a static
    batch."""
    shapes = [tuple(tensor.shape) for tensor in model.inputs]
    if dynamic_batch:
        return shapes
    return [(1,) + shape[1:] for shape in shapes]


def _convert(model, quantization, opset, dynamic_batch, weights_once):
    """The bytes of the `.onnx` file of `model`, converted in this process
    (the TensorFlow backend)."""
    import onnx

    signature = _input_signature(model, _shapes(model, dynamic_batch))
    if not isinstance(signature, (list, tuple)):
        signature = [signature]
    with tempfile.TemporaryDirectory() as directory:
        output = os.path.join(directory, "model.onnx")
        with (
            core.portable_masking(),
            # float_activations=False: a ComplexSTFT asked for its FFT
            # traces its convolution (tf2onnx maps TensorFlow's RFFT only
            # before a modulus).
            _tracing.for_export(
                weights_once=weights_once, float_activations=False
            ),
            _quiet_tf2onnx(),
        ):
            model.export(
                output,
                format="onnx",
                verbose=False,
                input_signature=signature,
                opset_version=opset,
            )
        proto = onnx.load(output)
    _check_standard(proto, model)
    _name_outputs(proto)
    _drop_unused_opsets(proto)
    if quantization == "float16":
        _float16_weights(proto)
    onnx.checker.check_model(proto)
    return proto.SerializeToString()


@contextlib.contextmanager
def _quiet_tf2onnx():
    """Silences tf2onnx's logging (it logs every op it cannot map, with a
    traceback; `_check_standard` reports them instead) and the
    deprecation warnings that it and TensorFlow's tracing emit (not ours),
    for the conversion."""
    logger = logging.getLogger("tf2onnx")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        logger.setLevel(level)


def _graphs(graph):
    """`graph` and every subgraph of its nodes' attributes."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.g.ByteSize():
                yield from _graphs(attribute.g)
            for sub in attribute.graphs:
                yield from _graphs(sub)


def _complex_types(proto):
    """The names of the tensors of `proto` (initializers, inputs, outputs,
    value infos) whose element type is complex."""
    import onnx

    complex_types = {
        onnx.TensorProto.COMPLEX64,
        onnx.TensorProto.COMPLEX128,
    }
    names = []
    for graph in _graphs(proto.graph):
        for tensor in graph.initializer:
            if tensor.data_type in complex_types:
                names.append(tensor.name)
        for info in (*graph.input, *graph.output, *graph.value_info):
            if info.type.tensor_type.elem_type in complex_types:
                names.append(info.name)
    return names


def _check_standard(proto, model):
    """Raises `ONNXUnsupportedOpsError` unless every node of `proto` is an
    op of the default ONNX domain known to `onnx` and no tensor is
    complex (tf2onnx writes a TensorFlow op it cannot map as a node of
    that name, e.g. `Complex`, which ONNX Runtime then refuses)."""
    import onnx

    from cvattn_keras.export._conversion import _layers_of_tensors

    ops, details, names = set(), [], []
    for graph in _graphs(proto.graph):
        for node in graph.node:
            standard = node.domain in ("", "ai.onnx") and onnx.defs.has(
                node.op_type
            )
            if not standard:
                domain = f" (domain {node.domain!r})" if node.domain else ""
                ops.add(node.op_type)
                details.append(f"{node.op_type}{domain} -> {node.name}")
                names.append(node.name)
    complex_tensors = _complex_types(proto)
    if ops or complex_tensors:
        details += [f"complex tensor {name}" for name in complex_tensors]
        raise ONNXUnsupportedOpsError(
            sorted(ops),
            _layers_of_tensors(names + complex_tensors, model),
            details,
            involves_complex=bool(complex_tensors),
        )


def _rename(graph, old, new):
    """Renames the value `old` to `new` wherever `graph` (and its
    subgraphs) use it."""
    for sub in _graphs(graph):
        for node in sub.node:
            node.input[:] = [new if n == old else n for n in node.input]
            node.output[:] = [new if n == old else n for n in node.output]
        for info in (*sub.output, *sub.value_info):
            if info.name == old:
                info.name = new


def _name_outputs(proto):
    """Names the graph's outputs `output_0`, `output_1`, ... (tf2onnx
    names them after TensorFlow's tensors, `Identity:0`)."""
    graph = proto.graph
    taken = {info.name for info in graph.input}
    for index, info in enumerate(list(graph.output)):
        new = f"output_{index}"
        if info.name != new and new not in taken:
            _rename(graph, info.name, new)


def _drop_unused_opsets(proto):
    """Removes the opset imports of domains that no node uses (tf2onnx
    declares `ai.onnx.ml` in every file)."""
    used = {""}
    for graph in _graphs(proto.graph):
        used |= {node.domain or "" for node in graph.node}
    keep = [o for o in proto.opset_import if (o.domain or "") in used]
    del proto.opset_import[:]
    proto.opset_import.extend(keep)


def _float16_weights(proto):
    """Stores the float32 initializers of at least `_FLOAT16_MIN_ELEMENTS`
    elements whose values fit float16 as float16, each cast back to
    float32 by a `Cast` node under its old name (ONNX Runtime folds the
    casts at load: the graph computes in float32 as before)."""
    import onnx
    from onnx import numpy_helper

    graph = proto.graph
    casts, kept = [], []
    for tensor in graph.initializer:
        if tensor.data_type != onnx.TensorProto.FLOAT:
            kept.append(tensor)
            continue
        values = numpy_helper.to_array(tensor)
        if (
            values.size < _FLOAT16_MIN_ELEMENTS
            or not np.all(np.isfinite(values))
            or np.max(np.abs(values), initial=0) > _FLOAT16_MAX
        ):
            kept.append(tensor)
            continue
        half = numpy_helper.from_array(
            values.astype(np.float16), f"{tensor.name}__float16"
        )
        kept.append(half)
        casts.append(
            onnx.helper.make_node(
                "Cast",
                [half.name],
                [tensor.name],
                to=onnx.TensorProto.FLOAT,
            )
        )
    del graph.initializer[:]
    graph.initializer.extend(kept)
    nodes = casts + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)


def _convert_in_subprocess(
    model, quantization, opset, dynamic_batch, weights_once
):
    """The bytes of the `.onnx` file of `model`, converted by this
    package's command line in a subprocess under
    `KERAS_BACKEND=tensorflow`."""

    def options(directory):
        command = []
        if quantization is not None:
            command += ["--quantize", quantization]
        if opset is not None:
            command += ["--opset", str(opset)]
        if not dynamic_batch:
            command += ["--static-batch", "1"]
        return command

    return convert_by_command_line(
        model, weights_once, options, "export_onnx", suffix=".onnx"
    )


# --------------------------------------------------------------------------
# Running files on ONNX Runtime.
# --------------------------------------------------------------------------

_ORT_DTYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(bool)": "bool",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(int16)": "int16",
    "tensor(int32)": "int32",
    "tensor(int64)": "int64",
}


def _tensor_info(arg):
    """A `TensorInfo` of an ONNX Runtime input or output (`-1`: a dynamic
    dimension)."""
    return TensorInfo(
        name=arg.name,
        dtype=_ORT_DTYPES.get(arg.type, arg.type),
        shape=tuple(d if isinstance(d, int) else -1 for d in arg.shape),
    )


def _load(path):
    """The `onnx.ModelProto` of `path`, or a `ValueError` naming `path`
    when it is no ONNX file."""
    import onnx

    if os.path.isdir(path):
        raise ValueError(
            f"`path` is a directory, not an .onnx file. Received: path={path!r}"
        )
    if not os.path.exists(path):
        raise ValueError(f"No such file: path={path!r}")
    if not os.path.getsize(path):
        raise ValueError(f"{path!r} is empty, not an ONNX model.")
    try:
        proto = onnx.load(path)
    except Exception as error:
        raise ValueError(
            f"{path!r} is not an ONNX model (it does not parse as one: "
            f"{type(error).__name__}); give a file written by export_onnx."
        ) from None
    if not proto.graph.node and not proto.graph.output:
        raise ValueError(
            f"{path!r} is not an ONNX model (it holds no graph); give a "
            "file written by export_onnx."
        )
    return proto


def _session(path, num_threads):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if num_threads is not None:
        options.intra_op_num_threads = num_threads
    try:
        return onnxruntime.InferenceSession(
            path, options, providers=["CPUExecutionProvider"]
        )
    except Exception as error:
        raise ValueError(
            f"ONNX Runtime cannot load {path!r}: {error}".rstrip()
        ) from None


def _feed(session, model, arrays, path):
    """The inputs keyed by the file's input names, each in its dtype."""
    names = _input_names(model)
    details = {arg.name: arg for arg in session.get_inputs()}
    _check_file_inputs(names, details, path)
    feed = {}
    for name, array in zip(names, arrays):
        arg = details[name]
        for axis, want in enumerate(arg.shape):
            if isinstance(want, int) and array.shape[axis] != want:
                what = "batch" if axis == 0 else f"axis {axis}"
                raise ValueError(
                    f"{path!r} has a static {what} of {want} for input "
                    f"{name!r} (exported with dynamic_batch=False?), but "
                    f"`inputs` has shape {array.shape}."
                )
        dtype = _ORT_DTYPES.get(arg.type, "float32")
        feed[name] = _cast(array, dtype, f"`inputs` for {name!r}")
    return feed


def _weight_bytes(proto):
    return sum(len(t.raw_data) or t.ByteSize() for t in proto.graph.initializer)


def _quantization(proto):
    import onnx

    types = {t.data_type for t in proto.graph.initializer}
    return "float16" if onnx.TensorProto.FLOAT16 in types else "float32"


def verify_onnx(
    path,
    model,
    inputs,
    num_runs=20,
    num_threads=None,
    expected_max_rel_error=None,
):
    """Runs an `.onnx` file on ONNX Runtime (CPU) and compares it with the
    Keras model (under any Keras backend).

    Args:
        path: the `.onnx` file (from `export_onnx`).
        model: the Keras model it was exported from.
        inputs: one batch of inputs (at least one sample): an array, a list
            of arrays (one per model input) or a dict keyed by input name,
            each in its input's dtype (a bool mask as bool).
        num_runs: how many runs the median latency is taken over.
        num_threads: ONNX Runtime's intra-op threads (`None`: its
            default, one per core).
        expected_max_rel_error: `None` (default: the usual bound of the
            file's mode, `EXPECTED_MAX_REL_ERROR["float32"]` or
            `["float16"]`, or 10 times the model's own rounding floor
            where that is larger: `ONNXReport`) or a positive number: the
            `max_rel_error` beyond which the report warns.

    Returns:
        An `ONNXReport` (its `str` is a printable table): sizes, ops,
        opset, every input and output, the errors against Keras and the
        median latency.

    Raises:
        ImportError: onnx or onnxruntime is not installed.
        ValueError: bad arguments: a path not ending in `.onnx`, a missing
            or empty file or a directory, a file that is not ONNX (the
            message names the path), inputs that do not fit the model or
            the file, a file with other outputs than the model.
    """
    path = _files.check_path(path, suffix=".onnx")
    if isinstance(num_runs, bool) or not isinstance(num_runs, int):
        num_runs = None
    if num_runs is None or num_runs < 1:
        raise ValueError(
            "`num_runs` must be a positive int. Received: "
            f"num_runs={num_runs!r}"
        )
    if num_threads is not None and (
        isinstance(num_threads, bool)
        or not isinstance(num_threads, int)
        or num_threads < 1
    ):
        raise ValueError(
            "`num_threads` must be None or a positive int. Received: "
            f"num_threads={num_threads!r}"
        )
    _check_expected_max_rel_error(expected_max_rel_error)
    _require(("onnx", "onnxruntime"), "verify_onnx")
    _check_model(model)
    arrays = _as_input_list(model, inputs, "inputs")
    proto = _load(path)
    session = _session(path, num_threads)
    feed = _feed(session, model, arrays, path)
    got = session.run(None, feed)
    quantization = _quantization(proto)
    max_abs, max_rel, bound = _verified_errors(
        model, arrays, got, path, quantization, expected_max_rel_error
    )
    ops = sorted({n.op_type for g in _graphs(proto.graph) for n in g.node})
    opset = next(
        (o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
        None,
    )
    return ONNXReport(
        path=path,
        size_bytes=os.path.getsize(path),
        ops=tuple(ops),
        opset=opset,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        median_latency_ms=_median_latency_ms(
            lambda: session.run(None, feed), num_runs
        ),
        batch_size=int(arrays[0].shape[0]),
        inputs=tuple(_tensor_info(arg) for arg in session.get_inputs()),
        outputs=tuple(_tensor_info(arg) for arg in session.get_outputs()),
        weight_bytes=_weight_bytes(proto),
        quantization=quantization,
        expected_max_rel_error=bound,
    )
