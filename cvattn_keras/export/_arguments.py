"""Argument checks shared by the exporters and the LiteRT runners: paths,
models, positive ints, the static input shapes and the export signature,
and inputs given as an array, a list or a dict (one array per model input,
each in its input's dtype); and what `verify_tflite` and `verify_onnx`
share: the checks of a file's inputs and of `expected_max_rel_error`, the
errors against Keras and the median latency."""

import statistics
import time

import keras
import numpy as np

from cvattn_keras.export import _files
from cvattn_keras.export._modes import EXPECTED_MAX_REL_ERROR


def _check_path(path):
    """A `.tflite` path to read (`_files.check_path`)."""
    return _files.check_path(path)


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


def _per_input(names, data, lacking):
    """`data` as a list with an entry per input: a dict's values in the
    order of `names` (a dict without some of them is a `ValueError` that
    starts with `lacking`), a list or a tuple as a list, anything else as
    its only entry."""
    if isinstance(data, dict):
        missing = sorted(set(names) - set(data))
        if missing:
            raise ValueError(
                f"{lacking} input(s) {missing}; the model's inputs are {names}."
            )
        return [data[name] for name in names]
    if isinstance(data, (list, tuple)):
        return list(data)
    return [data]


def _as_input_list(model, data, argument):
    """One array per model input, each in that input's dtype, from an
    array, a list/tuple or a dict keyed by input name."""
    names = _input_names(model)
    arrays = _per_input(names, data, f"`{argument}` is missing")
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


ROUNDING_MARGIN = 10
"""A verified file's usual error bound is at least this many times the
model's own sensitivity to float32 rounding (`_rounding_floor`)."""


def _errors_against_keras(model, arrays, got, path):
    """`(max_abs, scale, floor)`: the largest absolute difference between a
    file's outputs `got` (NumPy, in the model's order) and the Keras
    model's on `arrays`, the largest |output| of the model (for the
    relative error), and the model's rounding floor relative to it
    (`_rounding_floor`); a `ValueError` when the counts of outputs
    differ."""
    expected = _model_outputs(model, arrays)
    if len(got) != len(expected):
        raise ValueError(
            f"{path!r} has {len(got)} outputs but the model has "
            f"{len(expected)}: was it exported from this model?"
        )
    max_abs = _max_difference(got, expected)
    scale = max(float(np.max(np.abs(e), initial=0)) for e in expected)
    floor = _rounding_floor(model, arrays, expected)
    return max_abs, scale, floor / scale if scale > 0 else floor


def _model_outputs(model, arrays):
    outputs = model(arrays if len(arrays) > 1 else arrays[0], training=False)
    return [keras.ops.convert_to_numpy(x) for x in keras.tree.flatten(outputs)]


def _max_difference(got, expected):
    return max(
        float(
            np.max(np.abs(g.astype("float64") - e.astype("float64")), initial=0)
        )
        for g, e in zip(got, expected)
    )


def _rounding_floor(model, arrays, expected):
    """How far the Keras model's outputs move when each float input
    element moves by one unit in the last place (up or down at random,
    seeded): the error that float32 rounding alone causes where the
    model amplifies it (an uncentred `ComplexISTFT` divides its edge
    samples by a near-zero window envelope), which a correct file shows
    too. About 1e-7 of the largest output for most models. 0 when the
    model has no float input."""
    rng = np.random.default_rng(0)
    nudged, moved = [], False
    for array in arrays:
        array = np.asarray(array)
        if np.issubdtype(array.dtype, np.floating):
            up = rng.random(array.shape) < 0.5
            array = np.where(
                up,
                np.nextafter(array, np.inf, dtype=array.dtype),
                np.nextafter(array, -np.inf, dtype=array.dtype),
            ).astype(array.dtype)
            moved = True
        nudged.append(array)
    if not moved:
        return 0.0
    return _max_difference(_model_outputs(model, nudged), expected)


def _expected_bound(mode_bound, floor):
    """The usual `max_rel_error` of a correct file: the mode's bound, or
    `ROUNDING_MARGIN` times the model's relative rounding floor where
    that is larger."""
    return float(max(mode_bound, ROUNDING_MARGIN * floor))


def _check_expected_max_rel_error(value):
    """The verifiers' `expected_max_rel_error`: `None` or a positive
    number (not a bool), else a `ValueError` naming it."""
    if value is not None and (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.number))
        or not value > 0
    ):
        raise ValueError(
            "`expected_max_rel_error` must be None or a positive number. "
            f"Received: expected_max_rel_error={value!r}"
        )
    return value


def _check_file_inputs(names, file_names, path):
    """A `ValueError` when the file `path`, whose inputs are named
    `file_names`, lacks some of the model's input `names`."""
    missing = sorted(set(names) - set(file_names))
    if missing:
        raise ValueError(
            f"{path!r} has inputs {sorted(file_names)}, not the model's "
            f"{missing}: was it exported from this model?"
        )


def _verified_errors(model, arrays, got, path, mode, expected_max_rel_error):
    """`(max_abs_error, max_rel_error, expected_max_rel_error)` of a
    file's outputs `got` against the Keras model on `arrays`
    (`_errors_against_keras`); the bound is the one given, or the usual
    one of the file's `mode` (`_expected_bound`)."""
    max_abs, scale, floor = _errors_against_keras(model, arrays, got, path)
    if expected_max_rel_error is None:
        expected_max_rel_error = _expected_bound(
            EXPECTED_MAX_REL_ERROR[mode], floor
        )
    max_rel = max_abs / scale if scale > 0 else max_abs
    return max_abs, max_rel, float(expected_max_rel_error)


def _median_latency_ms(run, num_runs):
    """The median time of `num_runs` calls of `run()`, in milliseconds."""
    timings = []
    for _ in range(num_runs):
        start = time.perf_counter()
        run()
        timings.append(time.perf_counter() - start)
    return 1e3 * statistics.median(timings)


def _dtype_policies(model):
    """`(policies, others)`: the names of the dtype policies of `model`
    and every layer in it, and those other than float32 (both sorted).
    The exporters write float32 graphs and refuse the others."""
    policies = {model.dtype_policy.name}
    for layer in model._flatten_layers(include_self=False, recursive=True):
        policies.add(layer.dtype_policy.name)
    return sorted(policies), sorted(set(policies) - {"float32"})
