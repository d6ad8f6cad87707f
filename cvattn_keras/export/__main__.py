"""Command line: export a saved `.keras` model to TFLite or ONNX and
verify it.

    python -m cvattn_keras.export MODEL.keras OUT.tflite \\
        [--quantize float16|dynamic_int8|int8|full_int8|int16x8] \\
        [--representative-data FILE.npz|random] \\
        [--static-batch N] [--static-length L] [--weights auto|once|block] \\
        [--verify [--max-rel-error REL]] [--overwrite]

    python -m cvattn_keras.export MODEL.keras OUT.onnx \\
        [--quantize float16] [--opset N] [--static-batch 1] \\
        [--weights auto|once|block] [--verify [--max-rel-error REL]] \\
        [--overwrite]

The suffix of OUT picks the format (`--format tflite|onnx` says it
explicitly; OUT must then end in `.tflite` or `.onnx`). An ONNX file
(`cvattn_keras.export.export_onnx`, the optional extra `onnx`) takes
`--quantize float16` (float16 weights) only, `--opset` (13 to 18;
default 15), and `--static-batch 1` for a static batch of 1; `--verify`
runs it on ONNX Runtime (CPU).

It works under any `KERAS_BACKEND`: conversion needs TensorFlow, so under
another backend the command runs itself again in a subprocess under
`KERAS_BACKEND=tensorflow` (a `.keras` file is backend-independent).

The model is loaded with `safe_mode=True` (`--no-safe-mode` for trusted
files with `Lambda` layers). An existing OUT is refused unless
`--overwrite` is given. OUT is written as `open()` would write it, but
whole or not at all: a new file's mode from the umask, an existing file's
mode kept, a symbolic link written through to its target; its directory
must exist.

`--static-batch N` writes a file with a static batch of N (and
`--static-length L` a static length L on axis 1 of the inputs where it is
unknown): static shapes and no shape arithmetic, as GPU delegates and NPUs
need (`export_tflite(batch_size=N, sequence_length=L)`). They shape the
file. `--batch-size` and `--sequence-length` only shape the random inputs
of `--verify` and of random calibration (they default to the static sizes
when these are given, and must match them).

The calibrated modes (int8, full_int8, int16x8) need
`--representative-data`: `FILE.npz`, typical inputs, one array per model
input keyed by input name (or `arr_0`, `arr_1`, ... in input order, as
`numpy.savez` names positional arrays), of which the first
`--calibration-samples` calibrate; or `random`, by name, to calibrate on
random inputs (below), which rarely match real data: the file's int8
ranges then fit noise, not the data (write `./random` for a file of that
name).

`--verify` runs the file on LiteRT and compares it with Keras on one
batch: the samples of FILE.npz after the calibration samples (the first
ones when it has no more), or random inputs of the model's input shapes
and dtypes: standard normal floats, bools (True with probability 0.8),
integers in `[0, n)` where `n` is the smallest `input_dim` of the model's
layers (2 if none has one). An error beyond the mode's usual one
(`cvattn_keras.export.EXPECTED_MAX_REL_ERROR`, or `--max-rel-error`) is a
warning line and exit status 3. With `--verify` the new file is written
next to OUT (`.OUT.XXXXXXXX.partial.tflite`) and verified there, then
renamed over OUT: a verification that fails leaves OUT as it was (exit
status 1), and a file whose error is far above the usual one is written
where OUT did not exist but does not replace an existing OUT (exit
status 3 either way).

Exit status: 0 written (and verified); 1 the export itself failed (an op
without a builtin or integer kernel, a converter failure); 2 bad arguments
or files, before any conversion where they can be checked then (an
unknown option, a missing, unreadable or non-`.keras` MODEL, a directory,
a missing parent directory or an existing file as OUT, a missing or
unreadable `--representative-data` file or arrays that do not fit the
model or hold inf or NaN in the calibration samples, a calibrated mode
without `--representative-data`, a MODEL built under a mixed-precision
dtype policy or that cannot take `--static-batch` / `--static-length`, a
variable-length MODEL without `--sequence-length` for random inputs); 3
`--verify` measured an error far above the mode's usual one (a new OUT
written, an existing one kept). Every error
is one line, `error: ...` (argparse's own, for bad options, follow its
usage line), with no traceback.
"""

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import zipfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from cvattn_keras import _validation as check  # noqa: E402
from cvattn_keras import export  # noqa: E402
from cvattn_keras.export import _conversion  # noqa: E402
from cvattn_keras.export import _files  # noqa: E402
from cvattn_keras.export import onnx as _onnx  # noqa: E402
from cvattn_keras.export._arguments import _as_input_list  # noqa: E402
from cvattn_keras.export._arguments import _input_names  # noqa: E402
from cvattn_keras.export._arguments import _static_shapes  # noqa: E402
from cvattn_keras.export._calibration import _check_finite  # noqa: E402
from cvattn_keras.export._modes import _CALIBRATED  # noqa: E402

# `--representative-data random`: calibrate on random inputs, by name.
RANDOM = "random"


class _CommandError(Exception):
    """A one-line error for the user (exit status 2); `kind` is recorded
    in `--error-file` for `export_tflite`'s subprocess route."""

    def __init__(self, message, kind="value"):
        super().__init__(message)
        self.kind = kind


# `--weights` -> the exporters' `weights_once`.
_WEIGHTS_ONCE = {"auto": None, "once": True, "block": False}


def _smallest_input_dim(model):
    """The smallest `input_dim` (vocabulary size) of the model's layers,
    nested models included, or `None`."""
    sizes = []
    for layer in getattr(model, "layers", []):
        size = getattr(layer, "input_dim", None)
        if isinstance(size, int) and size > 0:
            sizes.append(size)
        if isinstance(layer, keras.Model):
            size = _smallest_input_dim(layer)
            if size is not None:
                sizes.append(size)
    return min(sizes) if sizes else None


def random_inputs(model, batch_size, sequence_length, seed):
    """Random inputs for every model input, each in its own dtype:
    standard-normal floats, bools (True with probability 0.8), integers in
    `[0, n)` with `n` the smallest `input_dim` of the model's layers (2 if
    none). Unknown non-batch dimensions take `sequence_length`."""
    rng = np.random.default_rng(seed)
    vocabulary = _smallest_input_dim(model) or 2
    arrays = []
    for tensor in model.inputs:
        shape = list(tensor.shape)
        shape[0] = batch_size
        if None in shape[1:]:
            if sequence_length is None:
                raise _CommandError(
                    f"input {tensor.name!r} has shape "
                    f"{tuple(tensor.shape)}; give --sequence-length to "
                    "choose its unknown dimensions (random inputs)"
                )
            shape = [sequence_length if d is None else d for d in shape]
        dtype = np.dtype(keras.backend.standardize_dtype(tensor.dtype))
        if dtype == np.bool_:
            array = rng.random(shape) < 0.8
        elif np.issubdtype(dtype, np.integer):
            array = rng.integers(0, vocabulary, shape).astype(dtype)
        else:
            array = rng.standard_normal(shape).astype(dtype)
        arrays.append(array)
    return arrays


def _load_npz(path, model):
    """`--representative-data FILE.npz`: one array per model input, each
    checked against the input's shape and dtype."""
    names = _input_names(model)
    try:
        with np.load(path, allow_pickle=False) as data:
            found = {key: data[key] for key in data.files}
    except Exception as error:
        raise _CommandError(
            f"--representative-data {path!r} is not a readable .npz file: "
            f"{type(error).__name__}: {_one_line(error)}"
        ) from None
    if set(names) <= set(found):
        arrays = [found[name] for name in names]
    else:
        positional = [f"arr_{i}" for i in range(len(names))]
        if sorted(found) != sorted(positional):
            raise _CommandError(
                f"--representative-data {path!r} must hold one array per "
                f"model input, keyed by input name {names} (or arr_0, "
                f"arr_1, ...); it holds {sorted(found)}"
            )
        arrays = [found[key] for key in positional]
    try:
        return _as_input_list(model, arrays, "representative_data")
    except ValueError as error:
        raise _CommandError(
            f"--representative-data {path!r} does not fit the model: "
            f"{_one_line(error)}"
        ) from None


def _verification_inputs(args, model, representative):
    """The batch `--verify` compares on: `--batch-size` samples of
    FILE.npz after the calibration samples (from the first ones when it
    has no more), or random inputs."""
    if representative is None or args.representative_data == RANDOM:
        return random_inputs(
            model, args.batch_size, args.sequence_length, args.seed + 1
        )
    count = len(representative[0])
    start = args.calibration_samples if count > args.calibration_samples else 0
    index = (start + np.arange(args.batch_size)) % count
    return [array[index] for array in representative]


def _rerun_under_tensorflow(argv):
    """Runs this command again in a subprocess under the TensorFlow
    backend; returns its exit status."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    command = [sys.executable, "-m", "cvattn_keras.export", *argv]
    return subprocess.run(command, env=env).returncode


def _positive_float(text):
    """An `argparse` type: a positive finite float."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a positive number, got {text!r}"
        )
    return value


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m cvattn_keras.export",
        description="Export a .keras model to a builtin-ops-only .tflite "
        "file or an .onnx file of standard ONNX ops, and optionally verify "
        "it on the LiteRT interpreter or ONNX Runtime. Works under any "
        "KERAS_BACKEND (conversion runs under TensorFlow).",
    )
    parser.add_argument("model", help="a model saved with model.save()")
    parser.add_argument(
        "output",
        help="the .tflite or .onnx file to write (its suffix picks the format)",
    )
    parser.add_argument(
        "--format",
        choices=("tflite", "onnx"),
        default=None,
        help="the file format (default: from OUTPUT's suffix)",
    )
    parser.add_argument(
        "--opset",
        type=check.positive_int_argument,
        default=None,
        metavar="N",
        help="ONNX only: the opset to write, 13 to 18 (default 15)",
    )
    parser.add_argument(
        "--quantize",
        choices=[q for q in export.QUANTIZATIONS if q],
        default=None,
        help="quantization (default: none, float32)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace OUTPUT if it exists (default: refuse)",
    )
    parser.add_argument(
        "--verify",
        action="store_true",
        help="run the file on LiteRT and compare with Keras (on samples "
        "of --representative-data FILE.npz after the calibration samples, "
        "else on random inputs); exit status 3 if the error is far above "
        "the mode's usual one",
    )
    parser.add_argument(
        "--max-rel-error",
        type=_positive_float,
        default=None,
        metavar="REL",
        help="with --verify, the max rel error beyond which it warns and "
        "exits with status 3 (default: the mode's usual bound, "
        "cvattn_keras.export.EXPECTED_MAX_REL_ERROR)",
    )
    parser.add_argument(
        "--static-batch",
        type=check.positive_int_argument,
        default=None,
        metavar="N",
        help="write a file with a static batch of N: static shapes, no "
        "shape ops (for GPU delegates and NPUs; default: dynamic batch)",
    )
    parser.add_argument(
        "--weights",
        choices=("auto", "once", "block"),
        default="auto",
        help="store each complex weight once, or as the real block kernel "
        "(twice the data; faster on small models, smaller int8 error); "
        "auto: once for float32, float16, dynamic_int8 (export_tflite("
        "weights_once=None|True|False))",
    )
    parser.add_argument(
        "--static-length",
        type=check.positive_int_argument,
        default=None,
        metavar="L",
        help="with a static file, the length of axis 1 of the inputs "
        "where it is unknown",
    )
    parser.add_argument(
        "--batch-size",
        type=check.positive_int_argument,
        default=None,
        help="batch of the random inputs of --verify (default: the "
        "static batch, else 4)",
    )
    parser.add_argument(
        "--sequence-length",
        type=check.positive_int_argument,
        default=None,
        help="size of the unknown non-batch dimensions of the random "
        "inputs (default: --static-length)",
    )
    parser.add_argument(
        "--calibration-samples",
        type=check.positive_int_argument,
        default=None,
        help="samples to calibrate int8 on (default 200, or every sample "
        "of a stream's FILE.npz: streaming.calibration_data lists its "
        "clips step by step)",
    )
    parser.add_argument(
        "--representative-data",
        default=None,
        metavar="FILE.npz|random",
        help="calibration data, required by int8, full_int8 and int16x8: "
        "a .npz file of typical inputs, one array per model input keyed "
        "by input name; or 'random' to calibrate on random inputs "
        "(rarely like real data)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--no-safe-mode",
        action="store_true",
        help="load MODEL with safe_mode=False (Lambda layers); only for "
        "files you trust",
    )
    # Used by export_tflite under other backends: the failure, as JSON.
    parser.add_argument("--error-file", help=argparse.SUPPRESS)
    return parser


def _one_line(error):
    """An exception as one line of plain text (Keras' messages carry
    terminal escape codes and line breaks)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    return " ".join(text.split()) or type(error).__name__


def _record(args, failure):
    if args.error_file:
        with open(args.error_file, "w") as f:
            json.dump(failure, f)


def _fail(args, error, **failure):
    """Exit status 1 for an export that failed with `error`: `failure`
    (its `kind` and details) recorded to `--error-file`, the error printed
    as one line."""
    _record(args, failure)
    print(f"error: {_one_line(error)}", file=sys.stderr)
    return 1


def _export_failed(args, error):
    """The exit status of an export that raised `error`, past the
    format's own errors: a file error (writing OUTPUT after the checks, the
    disk full, a directory removed meanwhile, or the converter's temporary
    files) as a `_CommandError`; a `ValueError`, and anything else, recorded
    and printed as one line (no traceback)."""
    if isinstance(error, OSError):
        raise _CommandError(
            f"a file-system error while exporting to OUTPUT "
            f"{args.output!r} (it was not written): {_one_line(error)}"
        ) from None
    if isinstance(error, ValueError):
        return _fail(args, error, kind="value", message=str(error))
    message = f"export failed: {type(error).__name__}: {_one_line(error)}"
    return _fail(args, message, kind="other", message=message)


def _check_readable_file(path, what, kind="value"):
    """Raises `_CommandError` unless `path` is a readable regular file."""
    if not os.path.lexists(path):
        raise _CommandError(f"{what} {path!r}: no such file", kind)
    if not os.path.exists(path):
        raise _CommandError(
            f"{what} {path!r} is a symbolic link to "
            f"{os.path.realpath(path)!r}, which does not exist",
            kind,
        )
    if os.path.isdir(path):
        raise _CommandError(f"{what} {path!r} is a directory, not a file", kind)
    if not os.path.isfile(path):
        raise _CommandError(f"{what} {path!r} is not a regular file", kind)
    if not os.access(path, os.R_OK):
        raise _CommandError(f"{what} {path!r} is not readable", kind)


def _check_format(args):
    """Sets `args.format` from `--format` or OUTPUT's suffix, and checks
    the options that only one format takes."""
    suffix = os.path.splitext(args.output)[1]
    if args.format is None:
        if suffix not in (".tflite", ".onnx"):
            raise _CommandError(
                f"OUTPUT must end in .tflite or .onnx, got {args.output!r}"
            )
        args.format = suffix[1:]
    elif suffix != "." + args.format:
        raise _CommandError(
            f"OUTPUT must end in .{args.format} with --format "
            f"{args.format}, got {args.output!r}"
        )
    if args.format == "tflite":
        if args.opset is not None:
            raise _CommandError("--opset is used only for ONNX files")
        return
    for flag, given in (
        ("--static-length", args.static_length),
        ("--representative-data", args.representative_data),
    ):
        if given is not None:
            raise _CommandError(f"{flag} is used only for TFLite files")
    if args.quantize not in export.ONNX_QUANTIZATIONS:
        raise _CommandError(
            f"an ONNX file takes --quantize float16 only (float16 "
            f"weights), got --quantize {args.quantize}; the integer modes "
            "are TFLite's (OUT.tflite)"
        )
    if args.static_batch not in (None, 1):
        raise _CommandError(
            "an ONNX file has a dynamic batch, or a static batch of 1 "
            f"(--static-batch 1), got --static-batch {args.static_batch}"
        )
    if args.opset is not None and args.opset not in export.ONNX_OPSETS:
        raise _CommandError(
            f"--opset must be in [{export.ONNX_OPSETS[0]}, "
            f"{export.ONNX_OPSETS[-1]}], got {args.opset}"
        )


def _check_arguments(args):
    """The checks that need no TensorFlow, under any backend, before the
    model is loaded."""
    _check_format(args)
    try:
        # With overwrite=True: an existing file is refused below, with
        # the command line's own words.
        _files.check_output(
            args.output, True, argument="OUTPUT", suffix="." + args.format
        )
    except ValueError as error:
        raise _CommandError(_one_line(error)) from None
    if os.path.exists(args.output) and not args.overwrite:
        raise _CommandError(
            f"OUTPUT {args.output!r} already exists; pass --overwrite to "
            "replace it"
        )
    calibrated = list(_CALIBRATED)
    if args.representative_data and args.quantize not in calibrated:
        raise _CommandError(
            "--representative-data is used only with --quantize "
            + "|".join(calibrated)
        )
    if args.quantize in calibrated and not args.representative_data:
        raise _CommandError(
            f"--quantize {args.quantize} calibrates the int8 ranges on "
            "typical inputs: give --representative-data FILE.npz (one "
            "array per model input, keyed by input name), or "
            f"--representative-data {RANDOM} to calibrate on random "
            "inputs, which rarely match real data"
        )
    if args.max_rel_error is not None and not args.verify:
        raise _CommandError("--max-rel-error is used only with --verify")
    for flag, given, static in (
        ("--batch-size", args.batch_size, args.static_batch),
        ("--sequence-length", args.sequence_length, args.static_length),
    ):
        if given is not None and static is not None and given != static:
            raise _CommandError(
                f"{flag} {given} differs from the static size {static} of "
                "the file (--static-batch / --static-length); leave it out"
            )
    if args.batch_size is None:
        args.batch_size = args.static_batch or 4
    if args.sequence_length is None:
        args.sequence_length = args.static_length
    _check_readable_file(args.model, "MODEL", kind="load")
    if not zipfile.is_zipfile(args.model):
        raise _CommandError(
            f"MODEL {args.model!r} is not a .keras model file (not a zip "
            "archive written by model.save())",
            kind="load",
        )
    if args.representative_data not in (None, RANDOM):
        _check_readable_file(args.representative_data, "--representative-data")


def _load_model(args):
    import cvattn_keras  # noqa: F401  (registers the layers)

    try:
        model = keras.saving.load_model(
            args.model, safe_mode=not args.no_safe_mode
        )
    except Exception as error:
        raise _CommandError(
            f"cannot load MODEL {args.model!r} as a Keras model: "
            f"{_one_line(error)}",
            kind="load",
        ) from None
    if not isinstance(model, keras.Model):
        raise _CommandError(
            f"MODEL {args.model!r} holds a {type(model).__name__}, not a "
            "keras.Model",
            kind="load",
        )
    return model


def main(argv=None):
    """Runs the command; returns the exit status (see the module's
    docstring): 0, 1 (the export failed), 2 (bad arguments or files) or 3
    (written, but verified far above the mode's usual error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # argparse's own errors, and --help
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        return _run(args, argv)
    except _CommandError as error:
        _record(args, {"kind": error.kind, "message": str(error)})
        print(f"error: {error}", file=sys.stderr)
        return 2


def _run(args, argv):
    _check_arguments(args)
    if keras.backend.backend() != "tensorflow":
        return _rerun_under_tensorflow(argv)
    model = _load_model(args)
    if args.format == "onnx":
        return _run_onnx(args, model)
    # Everything the model and the arguments decide, before conversion.
    _check_model_fits(args, model, _conversion._check_float32_policy)
    representative = None
    if args.calibration_samples is None:
        args.calibration_samples = (
            200
            if args.representative_data == RANDOM
            else _conversion._default_num_samples(model, 200)
        )
    if args.representative_data == RANDOM:
        representative = random_inputs(
            model, args.calibration_samples, args.sequence_length, args.seed
        )
    elif args.representative_data:
        representative = _load_npz(args.representative_data, model)
        try:
            _check_finite(
                model,
                [array[: args.calibration_samples] for array in representative],
            )
        except ValueError as error:
            raise _CommandError(
                f"--representative-data {args.representative_data!r}: "
                f"{_one_line(error)}"
            ) from None
    inputs = None
    if args.verify:
        inputs = _verification_inputs(args, model, representative)
    target = _target(args, ".tflite")
    try:
        try:
            export.export_tflite(
                model,
                target,
                quantization=args.quantize,
                representative_data=representative,
                num_calibration_samples=args.calibration_samples,
                overwrite=args.overwrite or target != args.output,
                batch_size=args.static_batch,
                sequence_length=args.static_length,
                weights_once=_WEIGHTS_ONCE[args.weights],
            )
        except export.FloatFallbackError as error:
            return _fail(
                args,
                error,
                kind="float_fallback",
                ops=error.ops,
                layers=error.layers,
                details=error.details,
                quantization=error.quantization,
            )
        except export.UnsupportedOpsError as error:
            return _fail(
                args,
                error,
                kind="unsupported",
                ops=error.ops,
                layers=error.layers,
                details=error.details,
            )
        except Exception as error:
            return _export_failed(args, error)
        static = (
            f", static batch {args.static_batch}" if args.static_batch else ""
        )
        calibration = ""
        if args.representative_data == RANDOM:
            calibration = ", calibrated on random inputs"
        described = (
            f"quantization: {args.quantize or 'none (float32)'}{static}"
            f"{calibration}"
        )
        return _verify_and_commit(
            args,
            model,
            inputs,
            target,
            export.verify_tflite,
            described,
            (ValueError,),
        )
    finally:
        _remove_temporary(args, target)


def _check_model_fits(args, model, check_policy, static_shapes=True):
    """The checks of the loaded model against the arguments, before any
    conversion: its dtype policy (`check_policy`, the exporter's own) and
    the static shapes asked for (TFLite's: every dimension static)."""
    try:
        check_policy(model)
        if static_shapes:
            _static_shapes(model, args.static_batch, args.static_length)
    except ValueError as error:
        raise _CommandError(
            f"MODEL {args.model!r}: {_one_line(error)}"
        ) from None


def _target(args, suffix):
    """The path to export to: OUTPUT, or with `--verify` a new temporary
    file next to it (`.NAME.XXXXXXXX.partial` + `suffix`), which replaces
    OUTPUT only once verified (`_verify_and_commit`)."""
    if not args.verify:
        return args.output
    try:
        return _files.reserve_temporary(args.output, suffix)
    except OSError as error:
        raise _CommandError(
            f"cannot write next to OUTPUT {args.output!r} (it was not "
            f"written): {_one_line(error)}"
        ) from None


def _remove_temporary(args, target):
    if target != args.output and os.path.lexists(target):
        os.remove(target)


def _verify_and_commit(args, model, inputs, target, verify, described, errors):
    """Prints what was written and, with `--verify`, verifies the new file
    `target` and renames it over OUTPUT: a new OUTPUT is written even if
    its error is far above the usual one (exit status 3), an existing one
    is replaced only by a file within it (else kept, exit status 3)."""
    if target != args.output:
        try:
            report = verify(
                target, model, inputs, expected_max_rel_error=args.max_rel_error
            )
        except errors as error:
            print(
                f"error: {_one_line(error)} (OUTPUT {args.output!r} was not "
                "written)",
                file=sys.stderr,
            )
            return 1
        report = dataclasses.replace(report, path=args.output)
        if report.warning is not None and os.path.exists(args.output):
            print(report)
            print(
                f"warning: {report.warning} OUTPUT {args.output!r} was kept "
                "and the new file not written (--max-rel-error REL accepts "
                "a larger error)",
                file=sys.stderr,
            )
            return 3
        try:
            _files.replace_with(target, args.output, args.overwrite)
        except OSError as error:
            raise _CommandError(
                f"cannot write OUTPUT {args.output!r}: {_one_line(error)}"
            ) from None
    size = os.path.getsize(args.output) / 1024
    print(f"wrote {args.output} ({size:.1f} KiB, {described})")
    if not args.verify:
        return 0
    print(report)
    if report.warning is not None:
        print(f"warning: {report.warning}", file=sys.stderr)
        return 3
    return 0


def _run_onnx(args, model):
    """Exports (and with `--verify` checks) an ONNX file; the exit status."""
    _check_model_fits(args, model, _onnx._check_float32, False)
    inputs = None
    if args.verify:
        inputs = random_inputs(
            model, args.batch_size, args.sequence_length, args.seed + 1
        )
    target = _target(args, ".onnx")
    try:
        try:
            export.export_onnx(
                model,
                target,
                quantization=args.quantize,
                opset=args.opset,
                dynamic_batch=args.static_batch is None,
                overwrite=args.overwrite or target != args.output,
                weights_once=_WEIGHTS_ONCE[args.weights],
            )
        except export.ONNXUnsupportedOpsError as error:
            return _fail(
                args,
                error,
                kind="onnx_unsupported",
                ops=error.ops,
                layers=error.layers,
                details=error.details,
                involves_complex=error.involves_complex,
            )
        except ImportError as error:
            return _fail(args, error, kind="import", message=str(error))
        except Exception as error:
            return _export_failed(args, error)
        static = ", static batch 1" if args.static_batch else ""
        return _verify_and_commit(
            args,
            model,
            inputs,
            target,
            export.verify_onnx,
            f"weights: {args.quantize or 'float32'}{static}",
            (ImportError, ValueError),
        )
    finally:
        _remove_temporary(args, target)


if __name__ == "__main__":
    sys.exit(main())
