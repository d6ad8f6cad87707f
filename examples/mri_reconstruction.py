"""Reconstruct MR images from undersampled k-space: complex networks
against real ones of the same size.

Trains four models of `cvattn_keras.models.images` on
`cvattn_keras.datasets.synthetic_mri` (64 x 64 complex phantoms with
smooth phase maps, fastMRI-like random column masks at 4x, k-space noise),
each a residual around the zero-filled image followed by k-space data
consistency:

- `complex_transformer`: `models.mri_transformer`, a complex vision
  transformer with CAtt over 4 x 4 patches;
- `real_transformer`: `models.real_mri_transformer`, the same on the
  stacked image read as 2 real channels, `keras.layers.MultiHeadAttention`;
- `complex_unet`: `models.complex_unet`, ComplexConv2D, complex max
  pooling by modulus, CReLU;
- `real_unet`: `models.real_unet`, Conv2D and ReLU;

each real model of about its complex model's parameter count, all
trained alike (Adam 1e-3, batches of 16, the mean squared error of the
stacked image: the complex MSE). For each
acceleration (`--acceleration 4 8` for both) and each seed (`--seeds`:
the initial weights, the order of the batches and the training phantoms;
the test phantoms are the same for all) it reports on the held-out test
phantoms, as fastMRI's `evaluate.py` scores reconstructions, the PSNR and
SSIM of the magnitude (data range: each target's maximum), the NMSE, and
the mean absolute phase error inside the object (the phantom's
`support`), for the zero-filled image and each model: mean +- std over
the seeds, and the paired difference by seed complex - real of each pair
with its 95% t interval (as `examples/compare_variants.py` reports
differences).

The best complex model (highest PSNR on 64 validation phantoms at the
first acceleration, so not chosen on the test set) is
exported to TFLite with builtin ops only (`cvattn_keras.export`: float32
and the integer modes of `--modes`, calibrated on 64 training examples)
and each file is run on LiteRT over the test set: PSNR / SSIM of its
output, its largest error against Keras, its latency per image; and to
ONNX (`export_onnx` + `verify_onnx` on ONNX Runtime) when the `onnx` extra
is installed (skipped otherwise, and said so). A mode the model cannot
take is a row that says why: the complex U-Net's max pooling compares
moduli (GREATER, SELECT_V2), which have no 16-bit kernels, so it has no
int16x8 file. It writes, under `--out`
(default `examples/output`): `mri_reconstruction.json` (every number,
every seed), `mri_reconstruction.md` (the tables), the files
`{model}.tflite` / `{model}_{mode}.tflite` / `.onnx` / `.keras` (the
model's name: `mri_transformer` or `complex_unet`),
and `mri_reconstruction.png` (a test phantom: target, zero-filled and each
reconstruction; magnitude, error map and phase). With the `examples`
extra (matplotlib) for the figure. `--qat EPOCHS` fine-tunes the exported
model EPOCHS more with quantization-aware training
(`cvattn_keras.quantization`) and, the control, without, and adds each
one's full_int8 file to the export table (`--qat-seeds N`: both over N
seeds, each arm's PSNR mean +- std and their paired difference).

Measured (`python examples/mri_reconstruction.py`, TensorFlow 2.21, a
shared 2-core CPU: 4 min 22 s in all, 10-30 s to train a model; +- the
sample std over 3 seeds): at 4x the zero-filled image scores PSNR 14.79
dB, SSIM 0.303; the complex ViT 17.22 +- 0.03 dB against the real ViT's
17.03 +- 0.04 (paired difference
+0.19 dB [+0.12, +0.26], SSIM +0.008 [+0.004, +0.011]), the complex
U-Net 18.13 +- 0.42 against the real U-Net's 16.74 +- 0.84 (+1.39 dB
[-1.26, +4.05]: the real U-Net varies by seed); the phase errors differ
by less than their intervals. At 8x (`--acceleration 8`): 13.03 dB
zero-filled, the ViTs 14.94 and 14.80 (+0.14 [-0.01, +0.29]), the U-Nets
14.87 and 14.61. The exported complex U-Net (seed 2): float32 18.46 dB on
LiteRT (as Keras), full_int8 18.20 dB (-0.26), 7.1 and 3.6 ms per image; the
complex ViT (`--models complex_transformer --seeds 1`): float32 17.22,
int16x8 17.22 (30.6 ms per image: reference 16-bit kernels), full_int8
17.02 dB. A few minutes of CPU training on simulated phantoms: the
numbers compare the models under one budget, not with published fastMRI
results.

Run:  python examples/mri_reconstruction.py [--acceleration 4 [8]]
          [--seeds 3] [--epochs 6] [--train 384] [--test 128]
          [--models complex_transformer,real_transformer,...]
          [--modes float32,int16x8,full_int8] [--out examples/output]
          [--qat EPOCHS [--qat-seeds N]]
          [--smoke]
"""

import argparse
import inspect
import json
import math
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# cvattn_keras first, before keras imports TensorFlow: it quiets
# TensorFlow's C++ start-up lines (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

import cvattn_keras as cvk  # noqa: E402

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402

# The examples' shared argument checks, beside this file (on sys.path when
# run as a script; added when loaded with runpy, as the tests do).
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
import _arguments as arguments  # noqa: E402
import _stats as stats  # noqa: E402
from _qat import fine_tuned_copy  # noqa: E402
from _qat import seeds_summary  # noqa: E402

# name -> (builder, the complex model it is paired with or None, label).
MODELS = {
    "complex_transformer": ("mri_transformer", None, "complex ViT (CAtt)"),
    "real_transformer": (
        "real_mri_transformer",
        "complex_transformer",
        "real ViT",
    ),
    "complex_unet": ("complex_unet", None, "complex U-Net"),
    "real_unet": ("real_unet", "complex_unet", "real U-Net"),
}
# --smoke: 32 x 32 images and models of a few hundred weights.
SMOKE_SIZES = {
    "complex_transformer": dict(
        patch_size=8, embed_dim=8, num_heads=2, num_layers=1
    ),
    "real_transformer": dict(
        patch_size=8, embed_dim=12, num_heads=2, num_layers=1
    ),
    "complex_unet": dict(filters=2, depth=2),
    "real_unet": dict(filters=3, depth=2),
}
# The TFLite modes: name -> export_tflite's `quantization`.
MODES = {"float32": None, "int16x8": "int16x8", "full_int8": "full_int8"}
METRICS = (
    ("psnr", "PSNR (dB)", "{:.2f}"),
    ("ssim", "SSIM", "{:.4f}"),
    ("nmse", "NMSE", "{:.4f}"),
    ("phase_error", "phase error (rad)", "{:.4f}"),
)
CALIBRATION_SAMPLES = 64


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    positive = arguments.positive_int
    parser.add_argument(
        "--acceleration",
        type=arguments.float_in(1),
        nargs="+",
        default=None,
        help="undersampling factors, each >= 1 (default: 4; e.g. 4 8)",
    )
    parser.add_argument("--seeds", type=positive, default=None)
    parser.add_argument("--epochs", type=positive, default=None)
    parser.add_argument(
        "--train", type=positive, default=None, help="training phantoms"
    )
    parser.add_argument(
        "--test", type=positive, default=None, help="test phantoms"
    )
    parser.add_argument(
        "--image-size",
        type=arguments.int_at_least(
            cvk.datasets.images.MIN_IMAGE_SIZE, "synthetic_mri's smallest"
        ),
        default=None,
        help="the phantoms' height and width: a multiple of every chosen "
        "model's patch size and of 2 ** (depth - 1) of its U-Nets "
        "(default 64; 32 with --smoke)",
    )
    parser.add_argument("--batch-size", type=positive, default=16)
    parser.add_argument(
        "--learning-rate", type=arguments.positive_float, default=1e-3
    )
    parser.add_argument("--cascades", type=positive, default=1)
    parser.add_argument(
        "--models",
        type=arguments.names(MODELS),
        default=",".join(MODELS),
        help=f"comma-separated, of {', '.join(MODELS)} (default: all)",
    )
    modes = arguments.names(MODES, {"none": []})
    parser.add_argument(
        "--modes",
        type=modes,
        default=None,
        help="TFLite modes of the exported complex model, comma-separated: "
        f"{', '.join(MODES)}; 'none' for no export (default: all; with "
        "--smoke float32,full_int8)",
    )
    parser.add_argument(
        "--qat",
        type=positive,
        default=None,
        metavar="EPOCHS",
        help="after export, EPOCHS more of the exported model's training at "
        "a tenth of the learning rate with quantization-aware training "
        "(cvattn_keras.quantization) and, the control, without; each one's "
        "full_int8 file on LiteRT",
    )
    parser.add_argument(
        "--qat-seeds",
        type=positive,
        default=1,
        metavar="N",
        help="with --qat: both fine-tunings over N seeds (the batches' "
        "order): each arm's PSNR, mean +- std, and the paired difference "
        "with its 95%% t interval (default 1)",
    )
    parser.add_argument(
        "--out",
        "--output",
        dest="out",
        type=arguments.output_folder,
        default=os.path.join("examples", "output"),
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a seconds-long run (tests)"
    )
    args = parser.parse_args(argv)
    small = dict(seeds=2, epochs=1, train=16, test=8, image_size=32)
    full = dict(seeds=3, epochs=6, train=384, test=128, image_size=64)
    for name, value in (small if args.smoke else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.acceleration is None:
        args.acceleration = [4.0]
    if args.qat_seeds != 1 and args.qat is None:
        parser.error("--qat-seeds goes with --qat")
    if args.modes is None:
        args.modes = modes(
            "float32,full_int8" if args.smoke else ",".join(MODES)
        )
    if args.qat is not None and not args.modes:
        parser.error("--qat exports full_int8 files: not with --modes none")
    if args.qat is not None and all(MODELS[m][1] for m in args.models):
        parser.error(
            "--qat fine-tunes the exported complex model: --models needs "
            f"one. Received: --models {','.join(args.models)}"
        )
    factor, why = image_factor(args.models, args.smoke)
    if args.image_size % factor:
        parser.error(
            f"--image-size must be a multiple of {factor} ({why}). "
            f"Received: --image-size {args.image_size}"
        )
    for acceleration in args.acceleration:
        # synthetic_mri samples round(width * 0.32 / acceleration) centre
        # columns (fastMRI's fraction): at least one.
        if round(args.image_size * 0.32 / acceleration) < 1:
            parser.error(
                f"--acceleration {acceleration:g} leaves no fully sampled "
                f"centre column at --image-size {args.image_size} "
                "(synthetic_mri keeps round(0.32 * size / acceleration) of "
                "them): raise --image-size or lower --acceleration. "
                f"Received: --acceleration {acceleration:g}"
            )
    return args


def image_factor(models, smoke):
    """`(factor, why)`: what the image size of `models` must be a
    multiple of (the builders' defaults, or `SMOKE_SIZES` with `smoke`):
    the transformers' patch size and the U-Nets' `2 ** (depth - 1)` (each
    level halves the image)."""
    factor, reasons = 1, {}
    for name in models:
        builder = getattr(cvk.models, MODELS[name][0])
        sizes = {
            key: p.default
            for key, p in inspect.signature(builder).parameters.items()
        }
        sizes.update(SMOKE_SIZES[name] if smoke else {})
        if "patch_size" in sizes:
            need = sizes["patch_size"]
            reason = f"the patch size {need}"
        else:
            need = 2 ** (sizes["depth"] - 1)
            reason = f"2 ** (depth - 1) = {need}"
        factor = math.lcm(factor, need)
        reasons.setdefault(reason, []).append(name)
    why = "; ".join(f"{k} of {', '.join(v)}" for k, v in reasons.items())
    return factor, why


def _label(acceleration):
    return f"{acceleration:g}x"


# ----------------------------------------------------------------------
# Data and scores.
# ----------------------------------------------------------------------


def load(split, count, acceleration, args, seed):
    """`synthetic_mri`'s split: the models' inputs `[zero_filled,
    masked_kspace, mask (N, 1, W)]` and the data."""
    data = cvk.datasets.synthetic_mri(
        split,
        count,
        image_size=args.image_size,
        acceleration=acceleration,
        seed=seed,
    )
    return [data.zero_filled, data.masked_kspace, data.mask[:, :1]], data


def scores(data, prediction):
    """The mean over the test phantoms of each metric (magnitudes for
    PSNR, SSIM and NMSE; the phase inside the object)."""
    metrics = cvk.metrics
    return dict(
        psnr=float(np.mean(metrics.psnr(data.image, prediction))),
        ssim=float(np.mean(metrics.ssim(data.image, prediction))),
        nmse=float(np.mean(metrics.nmse(data.image, prediction))),
        phase_error=float(
            np.mean(metrics.phase_error(data.image, prediction, data.support))
        ),
    )


# ----------------------------------------------------------------------
# Training.
# ----------------------------------------------------------------------


def build(name, args):
    builder = getattr(cvk.models, MODELS[name][0])
    sizes = SMOKE_SIZES[name] if args.smoke else {}
    return builder(image_size=args.image_size, cascades=args.cascades, **sizes)


def train(name, args, inputs, target, seed):
    keras.utils.set_random_seed(seed)
    model = build(name, args)
    tensorflow = keras.backend.backend() == "tensorflow"
    model.compile(
        keras.optimizers.Adam(args.learning_rate),
        "mse",
        # TensorFlow: XLA compiles these models in 30-50 s on 2 CPU
        # cores, a graph traces in 8 and runs a step about as fast; and
        # --smoke runs eagerly, where tracing would take most of its
        # seconds (JAX compiles a small model in seconds, and runs each
        # op of an eager step through a compilation of its own).
        jit_compile=False if tensorflow else "auto",
        run_eagerly=args.smoke and tensorflow,
    )
    start = time.perf_counter()
    history = model.fit(
        inputs,
        target,
        batch_size=args.batch_size,
        epochs=args.epochs,
        shuffle=True,
        # The progress bar on a terminal; one line per epoch into a log
        # (a redirected stdout), where the bar's redraws are thousands of
        # control characters an epoch.
        verbose="auto" if sys.stdout.isatty() and not args.smoke else 2,
    ).history
    return model, time.perf_counter() - start, history["loss"]


def predict(model, inputs, batch_size=32):
    """The model's outputs. On TensorFlow called batch by batch:
    `model.predict` traces a function for each new model, and TensorFlow
    warns about retracing after a few (on JAX it compiles, where eager
    calls would compile each op on its own)."""
    if keras.backend.backend() != "tensorflow":
        return model.predict(inputs, batch_size=batch_size, verbose=0)
    return np.concatenate(
        [
            keras.ops.convert_to_numpy(
                model([x[i : i + batch_size] for x in inputs], training=False)
            )
            for i in range(0, len(inputs[0]), batch_size)
        ]
    )


def paired(runs, references, key):
    """The paired difference `runs - references` of `key` over the seeds:
    `(mean, half width of its 95% t interval)`; `None` width for one
    seed."""
    return stats.paired([r[key] for r in runs], [r[key] for r in references])


def summarize(runs):
    """Mean and sample std (ddof=1, as the intervals; 0 for one seed) over
    the seeds of each metric."""
    return {
        key: (
            float(np.mean([r[key] for r in runs])),
            float(np.std([r[key] for r in runs], ddof=min(1, len(runs) - 1))),
        )
        for key, _, _ in METRICS
    }


def run_acceleration(acceleration, args, keep):
    """Every model and seed at one acceleration: the per-seed scores, the
    zero-filled scores, the best complex model and a prediction of the
    first test phantom by each model (seed 0)."""
    test_inputs, test = load("test", args.test, acceleration, args, 0)
    # The model to export is chosen on held-out validation phantoms, not
    # on the test set its files are then scored on.
    if keep:
        validation_inputs, validation = load(
            "validation", min(args.test, 64), acceleration, args, 0
        )
    result = dict(
        zero_filled=scores(test, test.zero_filled),
        measured_acceleration=float(
            test.mask.shape[-1] / test.mask[:, 0].sum(-1).mean()
        ),
        models={name: [] for name in args.models},
    )
    best, examples = (None, -np.inf), {}
    for seed in range(args.seeds):
        inputs, data = load("train", args.train, acceleration, args, seed)
        for name in args.models:
            print(
                f"\n{_label(acceleration)}, seed {seed}: {name} "
                f"({MODELS[name][2]})"
            )
            model, seconds, losses = train(name, args, inputs, data.image, seed)
            prediction = predict(model, test_inputs)
            row = scores(test, prediction)
            row.update(
                seed=seed,
                seconds=seconds,
                parameters=model.count_params(),
                loss=[float(v) for v in losses],
            )
            result["models"][name].append(row)
            print(
                "  test: "
                + ", ".join(
                    f"{label} {fmt.format(row[key])}"
                    for key, label, fmt in METRICS
                )
                + f" ({seconds:.0f} s)"
            )
            if seed == 0 and keep:
                examples[name] = prediction[:1]
            if keep and MODELS[name][1] is None:
                chosen = scores(validation, predict(model, validation_inputs))[
                    "psnr"
                ]
                if chosen > best[1]:
                    best = ((name, seed, model), chosen)
    result["summary"] = {
        name: summarize(runs) for name, runs in result["models"].items()
    }
    result["differences"] = {}
    for name in args.models:
        partner = MODELS[name][1]
        if partner is None or partner not in args.models:
            continue
        runs, references = result["models"][partner], result["models"][name]
        result["differences"][f"{partner} - {name}"] = {
            key: paired(runs, references, key) for key, _, _ in METRICS
        }
    return result, best[0], (test_inputs, test, examples)


# ----------------------------------------------------------------------
# Export.
# ----------------------------------------------------------------------


def export(model, args, calibration, test_inputs, test, keras_prediction):
    """TFLite files of each mode (builtin ops only) run on LiteRT over the
    test set, and the ONNX file on ONNX Runtime when installed."""
    keras_scores = scores(test, keras_prediction)
    rows = []
    for mode in args.modes:
        suffix = "" if mode == "float32" else f"_{mode}"
        path = os.path.join(args.out, f"{model.name}{suffix}.tflite")
        quantization = MODES[mode]
        try:
            cvk.export.export_tflite(
                model,
                path,
                quantization=quantization,
                representative_data=calibration if quantization else None,
            )
        except (
            cvk.export.FloatFallbackError,
            cvk.export.UnsupportedOpsError,
        ) as error:
            # A mode the model cannot take (ComplexMaxPooling2D's
            # comparisons have no 16-bit kernels): a row that says why.
            rows.append(dict(mode=mode, error=str(error).split(";")[0]))
            print(f"  {mode}: not converted: {rows[-1]['error']}")
            continue
        got = cvk.export.predict_tflite(path, model, test_inputs, batch_size=16)
        report = cvk.export.verify_tflite(
            path, model, [x[:1] for x in test_inputs]
        )
        row = scores(test, got)
        row.update(
            mode=mode,
            path=path,
            size_kib=report.size_bytes / 1024,
            builtin_only=bool(report.builtin_only),
            max_abs_error=float(np.max(np.abs(got - keras_prediction))),
            psnr_change=row["psnr"] - keras_scores["psnr"],
            latency_ms=report.median_latency_ms,
        )
        rows.append(row)
        print(
            f"  {mode}: {row['size_kib']:.0f} KiB, builtin ops only: "
            f"{row['builtin_only']}, PSNR {row['psnr']:.2f} dB "
            f"({row['psnr_change']:+.2f} against Keras), "
            f"{row['latency_ms']:.2f} ms per image"
        )
    return rows, keras_scores, export_onnx(model, args, test_inputs)


def qat_rows(model, args, calibration, train_data, test_inputs, test):
    """--qat: `args.qat` more epochs of `model`'s training at a tenth of
    its learning rate, with quantization-aware training (the ranges
    calibrated on `calibration` first) and, the control, without
    (`_qat.fine_tuned_copy`), for each of `--qat-seeds` seeds (the
    batches' order); each one's full_int8 file (calibrated on
    `calibration`) on LiteRT over the test set. Returns the first seed's
    rows (`export_table`'s) and each arm's PSNR by seed."""
    rows, by_seed = [], {}
    inputs, data = train_data
    for k in range(args.qat_seeds):
        for label, quantize in (("fine-tuned", False), ("QAT", True)):
            copy = fine_tuned_copy(
                model,
                quantize,
                calibration,
                compile_args=dict(
                    optimizer=keras.optimizers.Adam(args.learning_rate / 10),
                    loss="mse",
                    jit_compile=False,
                    run_eagerly=args.smoke,
                ),
                fit_args=dict(
                    x=inputs,
                    y=data.image,
                    batch_size=args.batch_size,
                    epochs=args.qat,
                    shuffle=True,
                ),
                seed=k,
            )
            stem = "qat" if quantize else "finetuned"
            path = os.path.join(args.out, f"{model.name}_{stem}_full_int8")
            path += ".tflite" if k == 0 else f"_seed{k}.tflite"
            cvk.export.export_tflite(
                copy,
                path,
                quantization="full_int8",
                representative_data=calibration,
            )
            got = cvk.export.predict_tflite(path, copy, test_inputs, 16)
            row = scores(test, got)
            by_seed.setdefault(label, []).append(row["psnr"])
            print(f"  {label} (seed {k}): full_int8 PSNR {row['psnr']:.2f} dB")
            if k > 0:
                os.remove(path)  # the later seeds: their scores only
                continue
            report = cvk.export.verify_tflite(
                path, copy, [x[:1] for x in test_inputs]
            )
            row.update(
                mode=f"{label} {args.qat} epochs, full_int8",
                path=path,
                size_kib=report.size_bytes / 1024,
                builtin_only=bool(report.builtin_only),
                max_abs_error=float(
                    np.max(np.abs(got - predict(copy, test_inputs)))
                ),
                latency_ms=report.median_latency_ms,
            )
            rows.append(row)
    return rows, by_seed


def export_onnx(model, args, test_inputs):
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
        import tf2onnx  # noqa: F401
    except ImportError as error:
        reason = (
            f"skipped: the `onnx` extra is not installed ({error}); pip "
            "install 'cvattn-keras[onnx]'"
        )
        print(f"  ONNX {reason}")
        return dict(skipped=reason)
    path = os.path.join(args.out, f"{model.name}.onnx")
    cvk.export.export_onnx(model, path)
    report = cvk.export.verify_onnx(path, model, [x[:1] for x in test_inputs])
    row = dict(
        path=path,
        size_kib=os.path.getsize(path) / 1024,
        max_rel_error=float(report.max_rel_error),
        latency_ms=float(report.median_latency_ms),
    )
    print(
        f"  ONNX: {row['size_kib']:.0f} KiB, max relative error against "
        f"Keras {row['max_rel_error']:.1e}, {row['latency_ms']:.2f} ms per "
        "image on ONNX Runtime"
    )
    return row


# ----------------------------------------------------------------------
# Tables and the figure.
# ----------------------------------------------------------------------


def _cell(mean_std, fmt):
    mean, std = mean_std
    return f"{fmt.format(mean)} ± {fmt.format(std)}"


def _interval(mean, half, fmt):
    if half is None:
        return f"{fmt.format(mean)}"
    return (
        f"{fmt.format(mean)} [{fmt.format(mean - half)}, "
        f"{fmt.format(mean + half)}]"
    )


def tables(results, args):
    lines = []
    for acceleration, result in results.items():
        lines += [
            f"### {acceleration} (measured "
            f"{result['measured_acceleration']:.2f}x), {args.seeds} "
            f"seed(s), {args.test} test phantoms",
            "",
            "| model | parameters | "
            + " | ".join(label for _, label, _ in METRICS)
            + " | train (s) |",
            "| --- | --- | " + " | ".join("---" for _ in METRICS) + " | --- |",
            "| zero-filled | 0 | "
            + " | ".join(
                fmt.format(result["zero_filled"][key])
                for key, _, fmt in METRICS
            )
            + " | |",
        ]
        for name, summary in result["summary"].items():
            runs = result["models"][name]
            lines.append(
                f"| {MODELS[name][2]} | {runs[0]['parameters']:,} | "
                + " | ".join(
                    _cell(summary[key], fmt) for key, _, fmt in METRICS
                )
                + f" | {np.mean([r['seconds'] for r in runs]):.0f} |"
            )
        if result["differences"]:
            lines += [
                "",
                "Paired differences by seed, complex - real, mean [95% t "
                "interval]:",
                "",
                "| pair | "
                + " | ".join(label for _, label, _ in METRICS)
                + " |",
                "| --- | " + " | ".join("---" for _ in METRICS) + " |",
            ]
            for pair, difference in result["differences"].items():
                lines.append(
                    f"| {pair} | "
                    + " | ".join(
                        _interval(*difference[key], "{:+" + fmt[2:])
                        for key, _, fmt in METRICS
                    )
                    + " |"
                )
        lines.append("")
    return "\n".join(lines)


def export_table(rows, keras_scores, onnx, name):
    lines = [
        f"Exported: {name} (Keras: PSNR {keras_scores['psnr']:.2f} dB, SSIM "
        f"{keras_scores['ssim']:.4f} on the test set)",
        "",
        "| file | KiB | builtin only | PSNR (dB) | vs Keras (dB) | SSIM | "
        "phase error (rad) | max abs error | ms per image |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if "error" in r:
            lines.append(
                f"| TFLite {r['mode']} | not converted: {r['error']} "
                "| | | | | | | |"
            )
            continue
        lines.append(
            f"| TFLite {r['mode']} | {r['size_kib']:.0f} | "
            f"{r['builtin_only']} | {r['psnr']:.2f} | "
            f"{r['psnr_change']:+.2f} | {r['ssim']:.4f} | "
            f"{r['phase_error']:.4f} | {r['max_abs_error']:.1e} | "
            f"{r['latency_ms']:.2f} |"
        )
    if "skipped" in onnx:
        lines += ["", f"ONNX: {onnx['skipped']}"]
    else:
        lines.append(
            f"| ONNX (ONNX Runtime) | {onnx['size_kib']:.0f} | | | | | | "
            f"{onnx['max_rel_error']:.1e} (relative) | "
            f"{onnx['latency_ms']:.2f} |"
        )
    return "\n".join(lines)


def save_figure(path, test, examples, title):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    target = cvk.from_stacked(test.image[:1])[0, ..., 0]
    images = {"target": target}
    images["zero-filled"] = cvk.from_stacked(test.zero_filled[:1])[0, ..., 0]
    for name, prediction in examples.items():
        images[MODELS[name][2]] = cvk.from_stacked(prediction)[0, ..., 0]
    support = test.support[0]
    figure, axes = plt.subplots(
        3, len(images), figsize=(2.4 * len(images), 7.4), squeeze=False
    )
    top = np.abs(target).max()
    for column, (label, z) in enumerate(images.items()):
        axes[0, column].imshow(np.abs(z), cmap="gray", vmin=0, vmax=top)
        axes[0, column].set_title(label, fontsize=9)
        error = np.abs(np.abs(z) - np.abs(target))
        axes[1, column].imshow(error, cmap="magma", vmin=0, vmax=0.25 * top)
        phase = np.where(support, np.angle(z), np.nan)
        axes[2, column].imshow(phase, cmap="twilight", vmin=-np.pi, vmax=np.pi)
        for row in range(3):
            axes[row, column].set_xticks([])
            axes[row, column].set_yticks([])
    axes[0, 0].set_ylabel("magnitude")
    axes[1, 0].set_ylabel("| |z| - |target| |")
    axes[2, 0].set_ylabel("phase (object)")
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


# ----------------------------------------------------------------------
# main
# ----------------------------------------------------------------------


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    print(
        f"synthetic_mri: {args.train} training and {args.test} test "
        f"phantoms of {args.image_size} x {args.image_size}, accelerations "
        f"{', '.join(_label(a) for a in args.acceleration)}; models "
        f"{', '.join(args.models)}; {args.seeds} seed(s), {args.epochs} "
        f"epoch(s); Keras backend {keras.backend.backend()}"
    )
    results, best, figure_data = {}, None, None
    for index, acceleration in enumerate(args.acceleration):
        result, found, shown = run_acceleration(
            acceleration, args, keep=index == 0
        )
        results[_label(acceleration)] = result
        if index == 0:
            best, figure_data = found, shown
    table = tables(results, args)
    print("\n" + table)
    output = dict(
        command=["examples/mri_reconstruction.py"] + list(argv or sys.argv[1:]),
        backend=keras.backend.backend(),
        arguments={
            k: v for k, v in vars(args).items() if not k.startswith("_")
        },
        results=results,
    )
    markdown = [table]
    if best is not None:
        name, seed, model = best
        model_path = os.path.join(args.out, f"{model.name}.keras")
        model.save(model_path)
        test_inputs, test, examples = figure_data
        print(
            f"\nexporting {name} (seed {seed}, the best complex model at "
            f"{_label(args.acceleration[0])}): {model_path}"
        )
        output["exported"] = dict(model=name, seed=seed, keras=model_path)
        if args.modes:
            calibration, _ = load(
                "train",
                CALIBRATION_SAMPLES,
                args.acceleration[0],
                args,
                seed,
            )
            keras_prediction = predict(model, test_inputs)
            rows, keras_scores, onnx = export(
                model, args, calibration, test_inputs, test, keras_prediction
            )
            integer = [
                r for r in rows if r["mode"] != "float32" and "error" not in r
            ]
            output["exported"].update(
                keras=dict(model_path=model_path, **keras_scores),
                tflite=rows,
                onnx=onnx,
                integer_mode=max(integer, key=lambda r: r["psnr"])["mode"]
                if integer
                else None,
            )
            if args.qat is not None:
                train_data = load(
                    "train", args.train, args.acceleration[0], args, seed
                )
                qat, by_seed = qat_rows(
                    model, args, calibration, train_data, test_inputs, test
                )
                for row in qat:
                    row["psnr_change"] = row["psnr"] - keras_scores["psnr"]
                output["exported"]["qat"] = dict(rows=qat, psnr=by_seed)
            exported = export_table(
                rows + output["exported"].get("qat", {}).get("rows", []),
                keras_scores,
                onnx,
                name,
            )
            if args.qat is not None:
                exported += "\n\n" + seeds_summary(
                    by_seed, "full_int8 files, test PSNR (dB)",
                    keras_scores["psnr"], digits=3,
                )  # fmt: skip
            print("\n" + exported)
            markdown.append(exported)
    if figure_data is not None:
        figure_path = os.path.join(args.out, "mri_reconstruction.png")
        _, test, examples = figure_data
        save_figure(
            figure_path,
            test,
            examples,
            f"synthetic_mri test phantom 0 at {_label(args.acceleration[0])}"
            " (seed 0 models)",
        )
        output["figure"] = figure_path
        print(f"figure: {figure_path}")
    output["seconds"] = time.perf_counter() - start
    with open(os.path.join(args.out, "mri_reconstruction.json"), "w") as f:
        json.dump(output, f, indent=2)
    with open(os.path.join(args.out, "mri_reconstruction.md"), "w") as f:
        f.write("\n\n".join(markdown) + "\n")
    print(
        f"{output['seconds']:.0f} s in all; {args.out}/mri_reconstruction.json"
    )
    return output


if __name__ == "__main__":
    main()
