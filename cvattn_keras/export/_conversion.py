"""Conversion of a Keras model to a `.tflite` flatbuffer: `export_tflite`,
in this process (the TensorFlow backend) or through a TensorFlow
subprocess (`_subprocess`), and the checks of the converted graph (no
float op in a full-integer file), with the converter's messages mapped to
the model's layer names."""

import contextlib
import os
import re
import sys
import tempfile
import warnings

import keras
import numpy as np

from cvattn_keras import _tracing
from cvattn_keras import attention as core
from cvattn_keras.export import _files
from cvattn_keras.export._arguments import _check_model
from cvattn_keras.export._arguments import _check_num_samples
from cvattn_keras.export._arguments import _check_output
from cvattn_keras.export._arguments import _dtype_policies
from cvattn_keras.export._arguments import _input_names
from cvattn_keras.export._arguments import _input_signature
from cvattn_keras.export._arguments import _static_shapes
from cvattn_keras.export._calibration import _calibration_arrays
from cvattn_keras.export._calibration import _check_calibration_data
from cvattn_keras.export._calibration import _representative_dataset
from cvattn_keras.export._errors import FloatFallbackError
from cvattn_keras.export._errors import UnsupportedOpsError
from cvattn_keras.export._keras_layers import integer_keras_layers
from cvattn_keras.export._modes import _CALIBRATED
from cvattn_keras.export._modes import _FULL_INTEGER
from cvattn_keras.export._modes import QUANTIZATIONS
from cvattn_keras.export._stream import _STATE
from cvattn_keras.export._subprocess import _CHILD_ENV
from cvattn_keras.export._subprocess import convert_by_command_line
from cvattn_keras.quantization import QuantizeWrapper


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


def _check_float32_policy(model):
    """Raises a `ValueError` naming the dtype policies of a model built
    under mixed or half precision: the file would compute in float16 or
    bfloat16, which TFLite's builtin kernels lack (the converter's error
    then blames ordinary ops, MatMul or AddV2, as if unsupported)."""
    policies, others = _dtype_policies(model)
    if others:
        raise ValueError(
            "export_tflite converts float32 models (float16 weights: "
            "quantization='float16'; integer kernels: the int8 modes), but "
            "the model has layers with dtype policies "
            f"{others}, which put float16 or bfloat16 tensors in the graph "
            "and have no TFLite builtin kernels. Rebuild the model under "
            "the 'float32' policy (keras.config.set_dtype_policy('float32')"
            ") and copy the weights (model.set_weights(trained.get_weights"
            "())): they are float32 under mixed precision. Received: a "
            f"model {model.name!r} with dtype policies {sorted(policies)}."
        )


def _write(path, flatbuffer, overwrite):
    """Writes the file whole or not at all, as `open(path, "wb")` would
    (the umask's mode for a new file, an existing file's mode kept, a
    symbolic link written through): `_files.write_atomically`."""
    _files.write_atomically(path, flatbuffer, overwrite)


# A stream's calibration samples by default from a callable (which may
# never stop): every step of 100 clips of 100 steps.
_STREAM_CALLABLE_SAMPLES = 10_000


def _default_num_samples(model, default=100, data=None):
    """`num_calibration_samples=None`: `default` samples, or every sample
    for a stream (its inputs `chunk` and `state_NN_...`; 10,000 from a
    callable `data`)."""
    names = _input_names(model) if getattr(model, "inputs", None) else []
    stream = len(names) > 1 and names[0] == "chunk"
    if stream and all(_STATE.fullmatch(n) for n in names[1:]):
        return _STREAM_CALLABLE_SAMPLES if callable(data) else sys.maxsize
    return default


def _check_qat_mode(model, quantization):
    """A `quantization.quantize_model` copy trained its 8-bit ranges for
    the int8 modes; another mode would ignore or misuse them."""
    wrapped = [
        layer.name
        for layer in getattr(model, "layers", [])
        if isinstance(layer, QuantizeWrapper)
    ]
    if wrapped and quantization not in (None, "int8", "full_int8"):
        raise ValueError(
            f"`model` {model.name!r} is quantization-aware (8-bit ranges "
            f"in {len(wrapped)} layers, e.g. {wrapped[0]!r}): it exports "
            "with quantization='int8' or 'full_int8' (or None: a float32 "
            "file that simulates the rounding with FAKE_QUANT ops). For "
            f"quantization={quantization!r}, export "
            "`cvattn_keras.quantization.strip(model)`, its float model."
        )


def export_tflite(
    model,
    path,
    quantization=None,
    representative_data=None,
    num_calibration_samples=None,
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
    calibrated modes (`int8`, `full_int8`, `int16x8`) under every backend,
    the model is saved to a temporary `.keras` file and converted by
    `python -m cvattn_keras.export` under `KERAS_BACKEND=tensorflow` in a
    subprocess (stopped after `SUBPROCESS_TIMEOUT` seconds): the model
    must then be serializable (`model.save` works) and its custom layers
    registered in an importable module. (TensorFlow 2.21's calibration
    crashes its process on a tensor whose range it cannot quantize: an
    activation that overflows on finite inputs too large for the model,
    or an empty range; in a subprocess that is an error, not a crash.)

    A model built under a mixed or half-precision dtype policy
    (`mixed_float16`, `mixed_bfloat16`) is refused: rebuild it under
    `float32` and copy its weights (float32 under mixed precision).

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
            iterable of per-sample inputs, as TFLite's converter takes
            (drawn from before conversion, up to `num_calibration_samples`
            samples, which must share their shapes). It must hold at least
            one sample, and its calibration samples only finite values
            (inf or NaN is a `ValueError` before conversion). With
            `batch_size`, the converter draws batches of `batch_size`
            samples (the last one completed with the first samples).
            Give typical inputs: int8 ranges calibrated on random ones fit
            noise, not the data (the command line calibrates on random
            inputs only when asked by name, `--representative-data
            random`), and `verify_tflite` on typical inputs shows it.
        num_calibration_samples: positive int, how many samples of
            `representative_data` to calibrate on (at most); `None` (the
            default): 100, or every sample given for a stream
            (`streaming.to_streaming`: inputs `chunk` and `state_NN_...`;
            10,000 from a callable), whose `streaming.calibration_data`
            lists every step of its clips, step by step: its first 100
            samples would be the first steps of the clips, where every
            state is still zero, and the file's ranges would not fit a
            running stream's.
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
            or empty calibration data for a calibrated mode, or calibration
            data with inf or NaN, a non-positive `batch_size` or
            `sequence_length`, a `sequence_length` the model cannot take,
            a model under a mixed or half-precision dtype policy), or no
            TensorFlow to convert with.
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
    _check_qat_mode(model, quantization)
    if num_calibration_samples is None:
        num_calibration_samples = _default_num_samples(
            model, data=representative_data
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
    _check_float32_policy(model)
    shapes = _static_shapes(model, batch_size, sequence_length)
    static_batch = None if shapes is None or batch_size is None else batch_size
    in_child = os.environ.get(_CHILD_ENV) == "1"
    # The calibrated modes convert in a subprocess under every backend:
    # TensorFlow 2.21's calibration crashes its process (SIGSEGV, 'scale
    # out of expressed type range') on an activation whose range
    # overflows, which finite data can cause (inputs of 1e20 squared in
    # a score), and the caller's process must survive that.
    if keras.backend.backend() != "tensorflow" or (
        quantization in _CALIBRATED and not in_child
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
            # Validate (dtypes, shapes, at least one sample, finite
            # values) before tracing.
            _check_calibration_data(
                model, representative_data, num_calibration_samples
            )
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
        integer_forms = (
            integer_keras_layers(quantization != "int16x8")
            if quantization in _CALIBRATED
            else contextlib.nullcontext()
        )
        with (
            core.portable_masking(),
            integer_forms,
            _tracing.for_export(
                plain_statistics=quantization in _CALIBRATED,
                weights_once=weights_once,
                lookup_masks=quantization == "int16x8",
                float_activations=quantization not in _CALIBRATED,
                float16_weights=quantization == "float16",
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

    def options(directory):
        command = []
        if quantization is not None:
            command += ["--quantize", quantization]
        if batch_size is not None:
            command += ["--static-batch", str(batch_size)]
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
        return command

    return convert_by_command_line(
        model,
        weights_once,
        options,
        "export_tflite",
        quantization=quantization,
        scope=" (and for full-integer modes)",
        env={_CHILD_ENV: "1"},  # the child converts in its own process
    )
