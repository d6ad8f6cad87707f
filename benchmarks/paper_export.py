"""The paper-size models exported in each TFLite mode: file, weight data,
the rest, bytes per parameter, error against Keras and LiteRT latency.

Random weights (sizes and latency do not depend on training); the
calibrated modes calibrate on 32 standard-normal samples. A mode may carry
`-once` or `-block` to force `export_tflite(weights_once=True|False)`
(default: by mode). Each float32 export of the classifier takes about half
a minute, a calibrated one several minutes.

Run:  python benchmarks/paper_export.py [--model classifier|generator]
          [--modes float32,float32-block,float16,dynamic_int8,full_int8]
          [--runs 5] [--json out.json]
"""

import argparse
import json
import os
import tempfile
import time

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
LAYOUTS = {"": None, "once": True, "block": False}


def model_and_data(kind, rng):
    """The model with default (paper) arguments, 32 calibration samples and
    one test sample, each a list of per-input arrays."""
    if kind == "classifier":
        model = cvk.models.music_classifier()
    else:
        model = cvk.models.music_generator()
    data = []
    for tensor in model.inputs:
        shape = (33,) + tuple(tensor.shape[1:])
        if tensor.name.startswith("previous"):  # 0/1 notes
            data.append((rng.random(shape) > 0.9).astype("float32"))
        else:
            data.append(rng.standard_normal(shape).astype("float32"))
    return model, [x[:32] for x in data], [x[32:] for x in data]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", choices=("classifier", "generator"), default="classifier"
    )
    parser.add_argument(
        "--modes", default="float32,float32-block,float16,dynamic_int8"
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", default=None, help="write results here")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    model, calibration, test = model_and_data(
        args.model, np.random.default_rng(0)
    )
    params = int(sum(np.prod(w.shape) for w in model.trainable_weights))
    rows = []
    print(
        "| mode | file (MB) | weight data (MB) | bytes / parameter | rest (kB)"
        " | max rel error | latency (ms) | export (s) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as directory:
        for mode in args.modes.split(","):
            base, _, layout = mode.partition("-")
            quantization = None if base == "float32" else base
            path = os.path.join(directory, f"{mode}.tflite")
            start = time.perf_counter()
            cvk.export.export_tflite(
                model,
                path,
                quantization=quantization,
                representative_data=(
                    calibration if quantization in CALIBRATED else None
                ),
                weights_once=LAYOUTS[layout],
            )
            took = time.perf_counter() - start
            report = cvk.export.verify_tflite(
                path, model, test, num_runs=args.runs
            )
            row = dict(
                model=args.model,
                mode=mode,
                parameters=params,
                size_bytes=report.size_bytes,
                weight_bytes=report.weight_bytes,
                rest_bytes=report.rest_bytes,
                bytes_per_parameter=report.weight_bytes / params,
                max_rel_error=report.max_rel_error,
                latency_ms=report.median_latency_ms,
                export_s=took,
            )
            rows.append(row)
            os.remove(path)
            print(
                f"| {mode} | {row['size_bytes'] / 1e6:.1f} "
                f"| {row['weight_bytes'] / 1e6:.1f} "
                f"| {row['bytes_per_parameter']:.2f} "
                f"| {row['rest_bytes'] / 1e3:.0f} "
                f"| {row['max_rel_error']:.1e} | {row['latency_ms']:.0f} "
                f"| {took:.0f} |",
                flush=True,
            )
    print(f"{args.model}: {params:,} trainable parameters")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
