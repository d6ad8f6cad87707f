"""Calibration data of the calibrated modes (`int8`, `full_int8`,
`int16x8`): `representative_data` checked, gathered into arrays (for the
subprocess route) and fed to TFLite's converter as its representative
dataset."""

import keras
import numpy as np

from cvattn_keras.export._arguments import _as_input_list
from cvattn_keras.export._arguments import _cast
from cvattn_keras.export._arguments import _input_dtypes
from cvattn_keras.export._arguments import _input_names
from cvattn_keras.export._arguments import _per_input


def _check_finite(model, arrays):
    """Raises a `ValueError` naming `representative_data` unless every
    float value of `arrays` (one per model input, in its dtype) is finite:
    TensorFlow's calibration takes each tensor's range from them, and on
    an inf its converter crashes the process ('scale out of expressed
    type range'), on NaN it writes a file that is far off on clean data."""
    for name, array in zip(_input_names(model), arrays):
        if array.dtype.kind not in "fc":
            continue  # bool and integer inputs: always finite
        finite = np.isfinite(array)
        if finite.all():
            continue
        nan = int(np.count_nonzero(np.isnan(array)))
        inf = int(array.size - np.count_nonzero(finite)) - nan
        sample = int(np.argwhere(~finite)[0][0])
        raise ValueError(
            "`representative_data` must hold finite values: calibration "
            "sets each tensor's integer range from them, and on inf or NaN "
            "TensorFlow's converter crashes or writes a file that is far "
            f"off. Received: {inf} inf and {nan} NaN among the "
            f"{array.size} values of input {name!r} in the "
            f"{len(array)} calibration sample(s), the first in sample "
            f"{sample} (in the input's dtype, {array.dtype})."
        )


def _calibration_arrays(model, data, num_samples):
    """The first `num_samples` samples of `representative_data`, one array
    per model input, checked to be finite; a callable is drawn from until
    it stops or `num_samples` samples are taken."""
    if not callable(data):
        arrays = _as_input_list(model, data, "representative_data")
        arrays = [array[:num_samples] for array in arrays]
        _check_finite(model, arrays)
        return arrays
    names = _input_names(model)
    columns = [[] for _ in names]
    for sample in data():
        sample = _per_input(
            names, sample, "`representative_data` yielded a dict without"
        )
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
    for name, column in zip(names, columns):
        shapes = sorted({array.shape[1:] for array in column})
        if len(shapes) > 1 or any(array.ndim == 0 for array in column):
            raise ValueError(
                "`representative_data` must yield samples of one shape "
                "per input (they are calibrated on as one array, in a "
                "TensorFlow subprocess): give variable-length inputs as "
                "samples of one typical length. Received: input "
                f"{name!r} in shapes {sorted({a.shape for a in column})}."
            )
    arrays = [np.concatenate(column, axis=0) for column in columns]
    arrays = _as_input_list(model, arrays, "representative_data")
    _check_finite(model, arrays)
    return arrays


def _check_calibration_data(model, data, num_samples):
    """Raises unless `representative_data` holds at least one sample (a
    callable is asked for a fresh iterable and its first sample), and,
    for arrays, unless the `num_samples` first ones are finite."""
    if not callable(data):
        arrays = _as_input_list(model, data, "representative_data")
        _check_finite(model, [array[:num_samples] for array in arrays])
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
