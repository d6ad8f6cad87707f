"""Size, error and LiteRT latency of a model exported in every quantization.

By default the model is a two-layer complex attention model with 64 complex
features (ComplexDense -> causal CAtt -> RIAtt -> ComplexDense, 0.6 MB of
float32 weights in the file), randomly initialised; `--model` takes a saved
`.keras` file instead (e.g. from `examples/quickstart.py --save`). Errors
are against Keras on standard-normal inputs; the calibrated modes (int8,
full_int8, int16x8) are calibrated on other standard-normal inputs. A mode
the model cannot take (a float op left in a full-integer mode) is reported
as such.

Run:  python benchmarks/tflite_quantization.py [--model M.keras]
          [--batch-size 1] [--json out.json]
"""

import argparse
import json
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

# First, before keras imports TensorFlow: it filters TensorFlow's
# start-up lines (cvattn_keras/_startup.py).
import cvattn_keras  # noqa: E402, F401

# isort: split

import keras  # noqa: E402
import numpy as np  # noqa: E402

import cvattn_keras as cvk  # noqa: E402

CALIBRATED = ("int8", "full_int8", "int16x8")


def wide_model():
    inputs = keras.Input((8, 128), name="frames")
    x = cvk.layers.ComplexDense(64)(inputs)
    x = cvk.layers.ComplexMultiHeadAttention(4, 16)(x, x, use_causal_mask=True)
    x = cvk.layers.ComplexMultiHeadAttention(4, 16, softmax="naive")(x, x)
    return keras.Model(inputs, cvk.layers.ComplexDense(8)(x))


def standard_normal(model, batch, rng):
    return [
        rng.standard_normal((batch,) + tuple(t.shape[1:])).astype("float32")
        for t in model.inputs
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a saved .keras model")
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", default=None, help="write results here")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    if args.model:
        model = keras.saving.load_model(args.model, safe_mode=True)
    else:
        model = wide_model()
    calibration = standard_normal(model, 200, rng)
    inputs = standard_normal(model, args.batch_size, rng)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for mode in cvk.export.QUANTIZATIONS:
            try:
                path = cvk.export.export_tflite(
                    model,
                    os.path.join(directory, f"{mode}.tflite"),
                    quantization=mode,
                    representative_data=(
                        calibration if mode in CALIBRATED else None
                    ),
                )
            except cvk.export.FloatFallbackError as error:
                rows.append(dict(quantization=mode, refused=error.ops))
                continue
            report = cvk.export.verify_tflite(
                path, model, inputs, num_runs=args.runs
            )
            rows.append(
                dict(
                    quantization=mode or "float32",
                    size_kib=report.size_bytes / 1024,
                    weights_kib=report.weight_bytes / 1024,
                    max_abs_error=report.max_abs_error,
                    max_rel_error=report.max_rel_error,
                    median_latency_ms=report.median_latency_ms,
                    builtin_only=report.builtin_only,
                )
            )
    base = rows[0]["size_kib"]
    print(
        "| quantization | file (KiB) | vs float32 | weight data (KiB) "
        f"| max abs error | max rel error | latency (ms, batch "
        f"{args.batch_size}) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        if "refused" in row:
            print(
                f"| {row['quantization']} | float ops left: "
                f"{', '.join(row['refused'])} | | | | | |"
            )
            continue
        print(
            f"| {row['quantization']} | {row['size_kib']:.1f} "
            f"| {base / row['size_kib']:.2f}x smaller "
            f"| {row['weights_kib']:.1f} "
            f"| {row['max_abs_error']:.2e} | {row['max_rel_error']:.2e} "
            f"| {row['median_latency_ms']:.3f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
