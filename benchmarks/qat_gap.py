"""How closely a full_int8 file follows its quantization-aware model.

Loads a saved music classifier that takes waveforms (e.g. the
`music_classifier.keras` of `examples/train_music.py --data scores`),
makes its quantization-aware copy (`quantization.quantize_model`, then
`quantization.calibrate` on training clips of `datasets.score_music`; no
training, so the weights are the float model's), exports it in
`full_int8` calibrated on the same clips, and compares the logits of
held-out clips: the file against the QAT model, in steps of the output's
int8 grid (what "within one quantization step" counts), and each against
the float model. `--post-training` adds the float model's own full_int8
file against the float model. Prints a table, writes JSON.

Run:  python benchmarks/qat_gap.py --model runs/music_classifier.keras
          [--calibration 100] [--held-out 64] [--post-training]
          [--json qat_gap.json]
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
from cvattn_keras import quantization as cq  # noqa: E402


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a saved .keras")
    parser.add_argument("--calibration", type=int, default=100)
    parser.add_argument("--held-out", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--post-training", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    for name in ("calibration", "held_out"):
        if getattr(args, name) < 1:
            parser.error(
                f"--{name.replace('_', '-')} must be at least 1. "
                f"Received: {getattr(args, name)}"
            )
    return args


def clips(model, split, count, seed):
    """`count` clips of `score_music`'s `split`, as long as the model's
    waveform input."""
    (shape,) = [tuple(t.shape) for t in model.inputs]
    if len(shape) != 2 or shape[1] is None:
        raise ValueError(
            "`--model` must take waveforms of a known length (batch, "
            f"samples). Received: input shape {shape}"
        )
    samples = shape[1]
    data = cvk.datasets.score_music(
        split,
        seed=seed,
        minutes=count * samples / 16000 / 60 + 0.1,
        clip_seconds=samples / 16000,
    )
    audio = data.audio[:count, :samples].astype("float32")
    if len(audio) < count or audio.shape[1] < samples:
        raise ValueError(
            f"score_music's {split!r} split gave {audio.shape} clips for "
            f"{count} of {samples} samples"
        )
    return audio


def output_quantizer(wrapper):
    """The `FakeQuant` that rounds the QAT model's output: the wrapper's
    output one, or its last point where the output is that point's (a
    batch norm last)."""
    if not isinstance(wrapper, cq.QuantizeWrapper):
        raise ValueError(
            "The model's last layer must be a quantized layer. Received: "
            f"{type(wrapper).__name__} {wrapper.name!r}"
        )
    quantizer = wrapper.output_quantizers[0]
    if float(quantizer.seen) == 0 and wrapper.point_quantizers:
        return wrapper.point_quantizers[-1]
    return quantizer


def steps_apart(got, want, step):
    error = np.abs(got - want) / step
    return {
        "max_steps": float(error.max()),
        "mean_steps": float(error.mean()),
        "beyond_one_step": float((error > 1.01).mean()),
    }


def main(argv=None):
    args = parse(argv)
    model = keras.saving.load_model(args.model)
    calibration = clips(model, "train", args.calibration, args.seed)
    held_out = clips(model, "test", args.held_out, args.seed)
    qat = cq.calibrate(cq.quantize_model(model), calibration, batch_size=8)
    last = output_quantizer(qat.layers[-1])
    low = min(float(last.range_min), 0.0)
    step = (max(float(last.range_max), 0.0) - low) / 255
    float_logits = np.asarray(model.predict(held_out, verbose=0))
    qat_logits = np.asarray(qat.predict(held_out, verbose=0))
    rows = {}
    with tempfile.TemporaryDirectory() as directory:
        files = [("QAT (calibrated)", qat)]
        if args.post_training:
            files.append(("post-training", model))
        for name, source in files:
            path = os.path.join(directory, "model.tflite")
            start = time.perf_counter()
            cvk.export.export_tflite(
                source,
                path,
                quantization="full_int8",
                representative_data=calibration,
                batch_size=1,
            )
            seconds = time.perf_counter() - start
            logits = np.asarray(
                cvk.export.predict_tflite(path, source, held_out, batch_size=1)
            )
            rows[name] = {
                "file_vs_float_max": float(np.abs(logits - float_logits).max()),
                "export_seconds": seconds,
            }
            if source is qat:
                rows[name]["file_vs_qat"] = steps_apart(
                    logits, qat_logits, step
                )
    result = {
        "model": args.model,
        "calibration_clips": args.calibration,
        "held_out_clips": args.held_out,
        "output_step": step,
        "qat_vs_float_max": float(np.abs(qat_logits - float_logits).max()),
        "files": rows,
    }
    print(f"full_int8 files of {args.model} (output step {step:.4f})")
    print(
        "| file | vs QAT model: max / mean steps, beyond one | vs float: max |"
    )
    print("| --- | --- | ---: |")
    for name, row in rows.items():
        apart = row.get("file_vs_qat")
        text = (
            f"{apart['max_steps']:.0f} / {apart['mean_steps']:.2f}, "
            f"{apart['beyond_one_step']:.1%}"
            if apart
            else "-"
        )
        print(f"| {name} | {text} | {row['file_vs_float_max']:.2f} |")
    print(f"QAT model vs float: max {result['qat_vs_float_max']:.2f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return result


if __name__ == "__main__":
    main()
