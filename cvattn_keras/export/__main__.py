"""Command line: export a saved `.keras` model to TFLite and verify it.

    python -m cvattn_keras.export MODEL.keras OUT.tflite \\
        [--quantize float16|dynamic_int8|int8] [--verify]

The model is loaded with `safe_mode=True`. Verification and int8
calibration use standard-normal inputs of the model's input shapes; for
int8 from real data, call `cvattn_keras.export.export_tflite` with
`representative_data`.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from cvattn_keras import export  # noqa: E402


def random_inputs(model, batch_size, sequence_length, seed):
    """Standard-normal float32 inputs for every model input. Unknown
    non-batch dimensions take `sequence_length`."""
    rng = np.random.default_rng(seed)
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
        arrays.append(rng.standard_normal(shape).astype("float32"))
    return arrays


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m cvattn_keras.export",
        description="Export a .keras model to a builtin-ops-only .tflite "
        "file, and optionally verify it on the LiteRT interpreter.",
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
        "--verify",
        action="store_true",
        help="run the file on LiteRT and compare with Keras",
    )
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument(
        "--sequence-length",
        type=int,
        default=None,
        help="size of the model's unknown non-batch input dimensions",
    )
    parser.add_argument(
        "--calibration-samples",
        type=int,
        default=200,
        help="random samples to calibrate int8 on",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.output.endswith(".tflite"):
        parser.error(f"OUTPUT must end in .tflite, got {args.output!r}")
    if not os.path.exists(args.model):
        parser.error(f"no such model file: {args.model!r}")

    import cvattn_keras  # noqa: F401  (registers the layers)

    model = keras.saving.load_model(args.model, safe_mode=True)
    representative = None
    if args.quantize == "int8":
        representative = random_inputs(
            model, args.calibration_samples, args.sequence_length, args.seed
        )
    path = export.export_tflite(
        model,
        args.output,
        quantization=args.quantize,
        representative_data=representative,
        num_calibration_samples=args.calibration_samples,
    )
    print(
        f"wrote {path} ({os.path.getsize(path) / 1024:.1f} KiB, "
        f"quantization: {args.quantize or 'none (float32)'})"
    )
    if args.verify:
        inputs = random_inputs(
            model, args.batch_size, args.sequence_length, args.seed + 1
        )
        print(export.verify_tflite(path, model, inputs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
