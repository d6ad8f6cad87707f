"""Running `.tflite` files on the LiteRT interpreter: `predict_tflite`
(outputs over a data set) and `verify_tflite` (parity with the Keras
model, latency and a `TFLiteReport`), with the quantization of inputs and
dequantization of outputs of integer files."""

import os
import re

import numpy as np

from cvattn_keras.export._arguments import _as_input_list
from cvattn_keras.export._arguments import _cast
from cvattn_keras.export._arguments import _check_expected_max_rel_error
from cvattn_keras.export._arguments import _check_file_inputs
from cvattn_keras.export._arguments import _check_model
from cvattn_keras.export._arguments import _check_path
from cvattn_keras.export._arguments import _check_positive
from cvattn_keras.export._arguments import _input_dtypes
from cvattn_keras.export._arguments import _input_names
from cvattn_keras.export._arguments import _median_latency_ms
from cvattn_keras.export._arguments import _verified_errors
from cvattn_keras.export._reading import _check_tflite_file
from cvattn_keras.export._reading import _file_ops
from cvattn_keras.export._reading import _file_quantization
from cvattn_keras.export._reading import file_sizes
from cvattn_keras.export._report import TensorInfo
from cvattn_keras.export._report import TFLiteReport
from cvattn_keras.export.gpu import check_gpu_compatibility


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
    _check_file_inputs(names, details, path)
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
            file's mode, `EXPECTED_MAX_REL_ERROR`, or 10 times the
            model's own rounding floor where that is larger:
            `TFLiteReport`) or a positive number:
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
    _check_expected_max_rel_error(expected_max_rel_error)
    _check_model(model)
    arrays = _as_input_list(model, inputs, "inputs")
    ops, non_builtin = _file_ops(path)
    quantization = _file_quantization(path)
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
    max_abs, max_rel, bound = _verified_errors(
        model, arrays, got, path, quantization, expected_max_rel_error
    )
    return TFLiteReport(
        path=path,
        size_bytes=os.path.getsize(path),
        ops=ops,
        non_builtin_ops=non_builtin,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        median_latency_ms=_median_latency_ms(lambda: runner(**feed), num_runs),
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
        expected_max_rel_error=bound,
    )
