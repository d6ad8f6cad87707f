"""Loading a reference state dict: `load_reference_state_dict`.

The given tensors are read duck-typed (torch tensors by their `detach`,
`cpu` and `numpy` methods: nothing here imports torch), checked against
the dtype and shapes each key accepts, converted group by group
(`_mapping`) and assigned only when everything fits (or, with
`strict=False`, what fits); a `LoadResult` says what was done.
"""

import dataclasses

import keras
import numpy as np

from cvattn_keras.interop._mapping import _describe
from cvattn_keras.interop._mapping import _Mismatch
from cvattn_keras.interop._mapping import _shape
from cvattn_keras.interop._models import _kind_error
from cvattn_keras.interop._models import _mapping


def _to_numpy(value):
    """A NumPy array from a NumPy array, a torch tensor (duck-typed: no
    torch import) or anything `np.asarray` takes."""
    if all(hasattr(value, a) for a in ("detach", "cpu", "numpy")):
        tensor = value.detach().cpu()
        for method in ("resolve_conj", "resolve_neg"):
            if hasattr(tensor, method):
                tensor = getattr(tensor, method)()
        # NumPy has no bfloat16, float8 or complex32 (torch's chalf):
        # widen them first (exactly: complex32 to complex64, the others to
        # float32).
        dtype = str(getattr(tensor, "dtype", ""))
        if "complex32" in dtype or "chalf" in dtype:
            tensor = tensor.cfloat()
        elif "bfloat16" in dtype or "float8" in dtype:
            tensor = tensor.float()
        return np.asarray(tensor.numpy())
    return np.asarray(value)


def _dtype_name(complex_):
    return "complex (complex64)" if complex_ else "real (float32)"


def _check_array(key, value):
    """The array for `key`, or a mismatch message."""
    try:
        array = _to_numpy(value)
    except Exception as error:  # anything that is not array-like
        return None, f"not an array or tensor ({type(value).__name__}: {error})"
    if array.dtype.kind not in "fc":
        return None, (
            f"expected a {_dtype_name(key.complex)} tensor, received "
            f"dtype {array.dtype}"
        )
    if key.complex != (array.dtype.kind == "c"):
        return None, (
            f"expected a {_dtype_name(key.complex)} tensor, received a "
            f"{'complex' if array.dtype.kind == 'c' else 'real'} one "
            f"({array.dtype})"
        )
    if tuple(array.shape) not in key.shapes:
        expected = " or ".join(
            f"{shape}" + (f" ({label})" if label else "")
            for shape, label in zip(
                key.shapes, key.labels or ("",) * len(key.shapes)
            )
        )
        return None, (
            f"expected shape {expected}, received {tuple(array.shape)}"
        )
    return array, None


@dataclasses.dataclass(frozen=True)
class LoadResult:
    """What `load_reference_state_dict` did.

    Attributes:
        loaded: dict, each loaded reference key -> the tuple of library
            variable paths it set (attribute paths from the object loaded,
            e.g. `"encoder_0.self_attention.query_dense.kernel_real"`).
            The two keys of a bias pair both list both bias variables.
        missing: reference keys the object needs that were not given.
        unexpected: given keys the object has no place for.
        mismatched: `(key, problem)` pairs: a wrong shape or dtype (the
            message names the expected and the received), or a partner of
            a bias pair missing.
        parameters: the number of real numbers loaded.
    """

    loaded: dict
    missing: tuple
    unexpected: tuple
    mismatched: tuple
    parameters: int

    def __str__(self):
        lines = [
            f"{key} -> {', '.join(paths)}" for key, paths in self.loaded.items()
        ]
        lines.append(
            f"loaded {len(self.loaded)} reference tensors "
            f"({self.parameters:,} real numbers, batch-norm statistics"
            " included)"
        )
        lines += _problem_lines(self.missing, self.unexpected, self.mismatched)
        return "\n".join(lines)


def _problem_lines(missing, unexpected, mismatched):
    lines = []
    if missing:
        lines.append(f"missing keys ({len(missing)}): {', '.join(missing)}")
    if unexpected:
        lines.append(
            f"unexpected keys ({len(unexpected)}): {', '.join(unexpected)}"
        )
    for key, problem in mismatched:
        lines.append(f"mismatch {key}: {problem}")
    return lines


def _prefix_hint(missing, unexpected):
    """A suggested `prefix` when the given keys look like the expected ones
    behind a common prefix."""
    counts = {}
    for key in missing[:20]:
        for other in unexpected:
            if other.endswith("." + key):
                candidate = other[: -len(key)]
                counts[candidate] = counts.get(candidate, 0) + 1
    if not counts:
        return ""
    best = max(counts, key=counts.get)
    return (
        f" The given keys look like the expected ones behind the prefix "
        f"{best!r}: pass prefix={best!r} (e.g. a whole model's checkpoint "
        "loaded into one of its layers, or a `module.` of DataParallel)."
    )


def load_reference_state_dict(
    model_or_layer, state_dict, strict=True, prefix=""
):
    """Loads a reference `state_dict` into a model or layer of this library.

    The weights are the reference's; its arithmetic also needs the layer
    norms without epsilon: build the model with `layer_norm_epsilon=0`
    (`music_classifier`, `music_generator`; the command line's default)
    or the layer with `ComplexLayerNormalization(epsilon=0)`. With the
    builders' default 1e-5 the outputs differ by about `1e-5 / variance`,
    most of the remaining difference.

    Args:
        model_or_layer: a built object with a reference counterpart (see
            the table in the docstring of `cvattn_keras.interop`): a
            layer, or a model built by `music_classifier` /
            `music_generator` (recognised by its layers' names and
            types).
        state_dict: a mapping from the reference's parameter names,
            relative to the module that corresponds to `model_or_layer`
            (`"encoder.layers.0.self_attn.in_proj_q.Linear_real.weight"`
            for a model, `"Linear_real.weight"` for a `ComplexDense`), to
            torch tensors or NumPy arrays (any float or complex precision,
            also torch's bfloat16, float8 and complex32, widened exactly;
            the loader computes in float64 and rounds once to the
            variables' dtype). The reference's complex parameters (the
            norms' `bias`, the batch norm's `running_mean`) must be
            complex and its real ones real: the other kind is a mismatch,
            never a silent cast. A batch norm's buffers may have the
            trained shapes or the untrained placeholders' (`(C,)` and the
            identity `(C, C)`, which load as mean 0 and R = I).
        strict: if `True` (default), any missing key, unexpected key or
            mismatch (shape or dtype) raises one `ValueError` listing them
            all, and nothing is loaded; a checkpoint of the other model
            kind (a generator's into a classifier or the reverse) raises a
            `ValueError` saying so. If `False`, what matches is loaded
            and the rest is reported in the result.
        prefix: only keys starting with `prefix` are considered, with it
            removed (`"encoder.layers.0."` to load one layer of a whole
            model's checkpoint, `"module."` for a DataParallel one).

    Returns:
        A `LoadResult`: the loaded keys and the variables each one set, and
        what was missing, unexpected or mismatched (empty when strict).

    Raises:
        ValueError: as above, and for an object without a reference
            counterpart, an unbuilt one, or one whose variables cannot
            hold the reference's parameters (a Trabelsi-convention batch
            norm, a naive layer norm, ...).
    """
    if not hasattr(state_dict, "keys") or not hasattr(state_dict, "items"):
        raise ValueError(
            "`state_dict` must be a mapping from the reference's parameter "
            "names to tensors or arrays. Received: "
            f"state_dict of type {type(state_dict).__name__}"
        )
    if not isinstance(prefix, str):
        raise ValueError(
            f"`prefix` must be a string. Received: prefix={prefix!r}"
        )
    if not isinstance(strict, bool):
        raise ValueError(
            f"`strict` must be True or False. Received: strict={strict!r}"
        )
    kind, groups, order = _mapping(
        model_or_layer, {"batch_norm_statistics": "trained"}
    )
    given = {}
    for key, value in state_dict.items():
        if not isinstance(key, str):
            raise ValueError(
                "The keys of `state_dict` must be strings (the reference's "
                f"parameter names). Received the key {key!r}"
            )
        if key.startswith(prefix):
            given[key[len(prefix) :]] = value
    if strict and kind is not None:
        message = _kind_error(kind, given)
        if message:
            raise ValueError(message)
    expected = {key.name for group in groups for key in group.keys}
    unexpected = [key for key in given if key not in expected]
    missing, mismatched, updates, loaded = [], [], [], {}
    for group in groups:
        arrays, problems = [], []
        for key in group.keys:
            if key.name not in given:
                missing.append(key.name)
                continue
            array, problem = _check_array(key, given[key.name])
            if problem:
                problems.append((key.name, problem))
            arrays.append(array)
        if not problems and len(arrays) == len(group.keys):
            try:
                values = group.load(arrays)
            except _Mismatch as error:
                problems.append((group.keys[0].name, str(error)))
        mismatched += problems
        if problems or len(arrays) != len(group.keys):
            for key in group.keys:
                if key.name in given and key.name not in dict(problems):
                    others = [k.name for k in group.keys if k is not key]
                    mismatched.append(
                        (
                            key.name,
                            f"not loaded: it makes one parameter with "
                            f"{', '.join(others)}, which is missing or "
                            "mismatched",
                        )
                    )
            continue
        paths = tuple(path for path, _ in group.variables)
        for (path, variable), value in zip(group.variables, values):
            value = np.asarray(value)
            if value.shape != _shape(variable):  # an internal invariant
                raise RuntimeError(
                    f"interop computed shape {value.shape} for {path}, "
                    f"whose shape is {_shape(variable)}"
                )
            updates.append((variable, value))
        for key in group.keys:
            loaded[key.name] = paths
    rank = {name: i for i, name in enumerate(order)}
    missing.sort(key=rank.get)
    mismatched.sort(key=lambda item: rank.get(item[0], 0))
    if strict and (missing or unexpected or mismatched):
        lines = _problem_lines(missing, unexpected, mismatched)
        raise ValueError(
            f"The state dict does not fit {_describe(model_or_layer)} "
            f"(strict=True): "
            + "; ".join(lines)
            + "."
            + _prefix_hint(missing, unexpected)
        )
    count = 0
    for variable, value in updates:
        variable.assign(
            value.astype(keras.backend.standardize_dtype(variable.dtype))
        )
        count += value.size
    loaded = {name: loaded[name] for name in order if name in loaded}
    return LoadResult(
        loaded=loaded,
        missing=tuple(missing),
        unexpected=tuple(unexpected),
        mismatched=tuple(mismatched),
        parameters=count,
    )
