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

`--per-layer CLIPS` adds each quantized layer's output in the file
against the QAT model's, from the input and on the file's own input to
the layer: where the file departs from the QAT model.

Run:  python benchmarks/qat_gap.py --model runs/music_classifier.keras
          [--calibration 100] [--held-out 64] [--post-training]
          [--per-layer 3] [--json qat_gap.json]
"""

import argparse
import json
import os
import tempfile
import time
import warnings

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
    parser.add_argument(
        "--per-layer",
        type=int,
        default=0,
        metavar="CLIPS",
        help="also each quantized layer's output, file vs QAT model, on "
        "CLIPS held-out clips (the file's tensors kept: slow, memory)",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.per_layer < 0:
        parser.error(f"--per-layer must be >= 0. Received: {args.per_layer}")
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


def nudged(quantizer):
    """The scale and int8 zero point that a `FakeQuant`'s range becomes in
    the file (the range widened to hold 0, the zero point on a level)."""
    low = min(float(quantizer.range_min), 0.0)
    high = max(float(quantizer.range_max), 0.0, low + 1e-6)
    scale = (high - low) / 255
    return scale, int(np.clip(np.floor(-low / scale + 0.5), 0, 255)) - 128


def file_tensor(interpreter, details, quantizer, like, name):
    """The file's int8 tensor of `quantizer`'s scale and zero point and of
    `like`'s size, dequantized: of those, one whose name holds `name`
    where any does, the closest to `like` (`None` if none). The closest:
    where several match, the errors found are a lower bound."""
    scale, zero = nudged(quantizer)
    found = []
    for detail in details:
        tensor_scale, tensor_zero = detail["quantization"]
        if (
            detail["dtype"] != np.int8
            or abs(tensor_scale - scale) > 1e-4 * scale
            or tensor_zero != zero
        ):
            continue
        try:
            value = interpreter.get_tensor(detail["index"])
        except ValueError:  # freed (a tensor of no op's output)
            continue
        if value.size == like.size:
            value = (value.astype(np.float64) - zero) * scale
            found.append((name in detail["name"], value.reshape(like.shape)))
    named = [value for hit, value in found if hit] or [v for _, v in found]
    if not named:
        return None
    return min(named, key=lambda value: np.abs(value - like).max())


def per_layer(qat, path, clips):
    """Each top-level quantized layer's output in the file (found by its
    range's scale and zero point and its size) against the QAT model's,
    in steps of that range, over `clips` run one at a time: `total`, from
    the model's input, and `own`, the layer run in Keras on the file's
    tensor of the quantized layer that feeds it (where it has one such
    input): where the file departs from the QAT model."""
    from ai_edge_litert.interpreter import Interpreter

    wrappers = [w for w in qat.layers if isinstance(w, cq.QuantizeWrapper)]
    probe = keras.Model(qat.inputs, [w.output for w in wrappers])
    with warnings.catch_warnings():  # "for debugging purposes only": yes
        warnings.simplefilter("ignore", UserWarning)
        interpreter = Interpreter(
            model_path=path, experimental_preserve_all_tensors=True
        )
    interpreter.allocate_tensors()
    (source,) = interpreter.get_input_details()
    details = interpreter.get_tensor_details()
    by_id = {id(w): i for i, w in enumerate(wrappers)}
    rows = {w.name: {"total": [], "own": []} for w in wrappers}
    for clip in clips:
        wants = [np.asarray(o) for o in probe([clip[None]], training=False)]
        scale, zero = source["quantization"]
        value = np.clip(np.round(clip[None] / scale + zero), -128, 127)
        interpreter.set_tensor(source["index"], value.astype(np.int8))
        interpreter.invoke()
        found = [
            file_tensor(interpreter, details, output_quantizer(w), want, w.name)
            for w, want in zip(wrappers, wants)
        ]
        for i, wrapper in enumerate(wrappers):
            if found[i] is None:
                continue
            step = nudged(output_quantizer(wrapper))[0]
            rows[wrapper.name]["total"].append(
                np.abs(found[i] - wants[i]) / step
            )
            inputs = wrapper._inbound_nodes[0].input_tensors
            feeds = [by_id.get(id(t._keras_history.operation)) for t in inputs]
            if (
                len(feeds) == 1
                and feeds[0] is not None
                and found[feeds[0]] is not None
            ):
                own = wrapper(found[feeds[0]].astype("float32"), training=False)
                rows[wrapper.name]["own"].append(
                    np.abs(np.asarray(own) - found[i]) / step
                )
    summary = {}
    for name, row in rows.items():
        summary[name] = {
            key: {
                "max_steps": float(max(e.max() for e in errors)),
                "mean_steps": float(np.mean([e.mean() for e in errors])),
            }
            for key, errors in row.items()
            if errors
        }
    return summary


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
                if args.per_layer:
                    layers = per_layer(qat, path, held_out[: args.per_layer])
    result = {
        "model": args.model,
        "calibration_clips": args.calibration,
        "held_out_clips": args.held_out,
        "output_step": step,
        "qat_vs_float_max": float(np.abs(qat_logits - float_logits).max()),
        "files": rows,
    }
    if args.per_layer:
        result["per_layer"] = layers
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
    if args.per_layer:
        print(
            f"\nEach quantized layer's output, file vs QAT model, in steps "
            f"of its range ({args.per_layer} held-out clips; own: the layer "
            "on the file's input to it):\n"
            "| layer | total: max / mean | own: max / mean |\n"
            "| --- | --- | --- |"
        )
        for name, row in layers.items():
            cells = [
                f"{row[k]['max_steps']:.0f} / {row[k]['mean_steps']:.2f}"
                if k in row
                else "-"
                for k in ("total", "own")
            ]
            print(f"| {name} | {cells[0]} | {cells[1]} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return result


if __name__ == "__main__":
    main()
