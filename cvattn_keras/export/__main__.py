"""Command line: export a saved `.keras` model to TFLite and verify it.

    python -m cvattn_keras.export MODEL.keras OUT.tflite \\
        [--quantize float16|dynamic_int8|int8|full_int8|int16x8] \\
        [--static-batch N] [--static-length L] [--weights auto|once|block] \\
        [--verify] [--overwrite]

It works under any `KERAS_BACKEND`: conversion needs TensorFlow, so under
another backend the command runs itself again in a subprocess under
`KERAS_BACKEND=tensorflow` (a `.keras` file is backend-independent).

The model is loaded with `safe_mode=True` (`--no-safe-mode` for trusted
files with `Lambda` layers). An existing OUT is refused unless
`--overwrite` is given.

`--static-batch N` writes a file with a static batch of N (and
`--static-length L` a static length L on axis 1 of the inputs where it is
unknown): static shapes and no shape arithmetic, as GPU delegates and NPUs
need (`export_tflite(batch_size=N, sequence_length=L)`). They shape the
file. `--batch-size` and `--sequence-length` only shape the random inputs
of `--verify` and of the calibration (they default to the static sizes
when these are given, and must match them).

Verification and, without `--representative-data`, the calibration of the
calibrated modes (int8, full_int8, int16x8) use random inputs of the
model's input shapes and dtypes:
standard normal floats, bools (True with probability 0.8), integers in
`[0, n)` where `n` is the smallest `input_dim` of the model's layers (2 if
none has one). `--representative-data FILE.npz` calibrates int8 on real
data instead: one array per model input, keyed by input name (or `arr_0`,
`arr_1`, ... in input order, as `numpy.savez` names positional arrays).

Errors print one line, `error: ...`, and exit with status 2 (bad
arguments or files, as argparse) or 1 (the export itself failed).
"""

import argparse
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
                raise SystemExit(
                    f"error: input {tensor.name!r} has shape "
                    f"{tuple(tensor.shape)}; give --sequence-length to "
                    "choose its unknown dimensions"
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


def _load_npz(path, model, fail):
    """`--representative-data`: one array per model input."""
    names = [tensor.name for tensor in model.inputs]
    try:
        with np.load(path, allow_pickle=False) as data:
            found = {key: data[key] for key in data.files}
    except Exception as error:
        fail(
            f"--representative-data {path!r} is not a readable .npz file: "
            f"{type(error).__name__}: {error}"
        )
    if set(names) <= set(found):
        return [found[name] for name in names]
    positional = [f"arr_{i}" for i in range(len(names))]
    if sorted(found) == sorted(positional):
        return [found[key] for key in positional]
    fail(
        f"--representative-data {path!r} must hold one array per model "
        f"input, keyed by input name {names} (or arr_0, arr_1, ...); "
        f"it holds {sorted(found)}"
    )


def _rerun_under_tensorflow(argv):
    """Runs this command again in a subprocess under the TensorFlow
    backend; returns its exit status."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    command = [sys.executable, "-m", "cvattn_keras.export", *argv]
    return subprocess.run(command, env=env).returncode


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m cvattn_keras.export",
        description="Export a .keras model to a builtin-ops-only .tflite "
        "file, and optionally verify it on the LiteRT interpreter. Works "
        "under any KERAS_BACKEND (conversion runs under TensorFlow).",
    )
    parser.add_argument("model", help="a model saved with model.save()")
    parser.add_argument("output", help="the .tflite file to write")
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
        help="run the file on LiteRT and compare with Keras",
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
        default=200,
        help="samples to calibrate int8 on (default 200)",
    )
    parser.add_argument(
        "--representative-data",
        default=None,
        metavar="FILE.npz",
        help="calibration data (int8, full_int8, int16x8), one array per "
        "model input keyed by input name (default: random inputs)",
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


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)

    def fail(message, kind="value"):
        _record(args, {"kind": kind, "message": message})
        parser.error(message)

    # Checks that need no TensorFlow come first, under any backend.
    if not args.output.endswith(".tflite"):
        fail(f"OUTPUT must end in .tflite, got {args.output!r}")
    if os.path.isdir(args.output):
        fail(f"OUTPUT {args.output!r} is a directory, not a .tflite file")
    if os.path.exists(args.output) and not args.overwrite:
        fail(
            f"OUTPUT {args.output!r} already exists; pass --overwrite to "
            "replace it"
        )
    calibrated = [q for q in export._CALIBRATED]
    if args.representative_data and args.quantize not in calibrated:
        fail(
            "--representative-data is used only with --quantize "
            + "|".join(calibrated)
        )
    for flag, given, static in (
        ("--batch-size", args.batch_size, args.static_batch),
        ("--sequence-length", args.sequence_length, args.static_length),
    ):
        if given is not None and static is not None and given != static:
            fail(
                f"{flag} {given} differs from the static size {static} of "
                "the file (--static-batch / --static-length); leave it out"
            )
    if args.batch_size is None:
        args.batch_size = args.static_batch or 4
    if args.sequence_length is None:
        args.sequence_length = args.static_length
    if not os.path.isfile(args.model):
        fail(f"no such model file: {args.model!r}", kind="load")
    if not zipfile.is_zipfile(args.model):
        fail(
            f"MODEL {args.model!r} is not a .keras model file (not a zip "
            "archive written by model.save())",
            kind="load",
        )
    if keras.backend.backend() != "tensorflow":
        return _rerun_under_tensorflow(argv)

    import cvattn_keras  # noqa: F401  (registers the layers)

    try:
        model = keras.saving.load_model(
            args.model, safe_mode=not args.no_safe_mode
        )
    except Exception as error:
        reason = _one_line(error)
        fail(
            f"cannot load MODEL {args.model!r} as a Keras model: {reason}",
            kind="load",
        )
    if not isinstance(model, keras.Model):
        fail(
            f"MODEL {args.model!r} holds a {type(model).__name__}, not a "
            "keras.Model",
            kind="load",
        )
    try:
        representative = None
        if args.quantize in calibrated:
            if args.representative_data:
                representative = _load_npz(
                    args.representative_data, model, fail
                )
            else:
                representative = random_inputs(
                    model,
                    args.calibration_samples,
                    args.sequence_length,
                    args.seed,
                )
        path = export.export_tflite(
            model,
            args.output,
            quantization=args.quantize,
            representative_data=representative,
            num_calibration_samples=args.calibration_samples,
            overwrite=args.overwrite,
            batch_size=args.static_batch,
            sequence_length=args.static_length,
            weights_once={"auto": None, "once": True, "block": False}[
                args.weights
            ],
        )
    except export.FloatFallbackError as error:
        _record(
            args,
            {
                "kind": "float_fallback",
                "ops": error.ops,
                "layers": error.layers,
                "details": error.details,
                "quantization": error.quantization,
            },
        )
        print(f"error: {_one_line(error)}", file=sys.stderr)
        return 1
    except export.UnsupportedOpsError as error:
        _record(
            args,
            {
                "kind": "unsupported",
                "ops": error.ops,
                "layers": error.layers,
                "details": error.details,
            },
        )
        print(f"error: {_one_line(error)}", file=sys.stderr)
        return 1
    except ValueError as error:
        _record(args, {"kind": "value", "message": str(error)})
        print(f"error: {_one_line(error)}", file=sys.stderr)
        return 1
    except Exception as error:  # anything else: one line, no traceback
        message = f"export failed: {type(error).__name__}: {_one_line(error)}"
        _record(args, {"kind": "other", "message": message})
        print(f"error: {message}", file=sys.stderr)
        return 1
    static = f", static batch {args.static_batch}" if args.static_batch else ""
    print(
        f"wrote {path} ({os.path.getsize(path) / 1024:.1f} KiB, "
        f"quantization: {args.quantize or 'none (float32)'}{static})"
    )
    if args.verify:
        inputs = random_inputs(
            model, args.batch_size, args.sequence_length, args.seed + 1
        )
        try:
            report = export.verify_tflite(path, model, inputs)
        except ValueError as error:
            print(f"error: {_one_line(error)}", file=sys.stderr)
            return 1
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
