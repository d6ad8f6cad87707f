"""Modulation recognition as the radio field measures it: accuracy
against SNR on frames of RadioML 2016.10a's design, a complex transformer
(CAtt) against a real transformer of about its size and a small CNN.

The data: `cvattn_keras.datasets.radio_modulation`, RadioML 2016.10a's
eleven classes (8PSK, AM-DSB, AM-SSB, BPSK, CPFSK, GFSK, PAM4, QAM16,
QAM64, QPSK, WBFM; root-raised-cosine pulses at 8 samples per symbol),
frames of 128 complex samples through a channel of carrier frequency and
phase offset, sample-rate and timing offset, Rician multipath fading and
white noise at SNRs from -20 to 18 dB in steps of 2, the same number of
frames for every class and SNR. Every frame is scaled to unit mean power
(what a receiver's AGC does; the models never see the SNR). Every model
is trained on every SNR and scored on held-out frames (the test split's
own seed stream) per SNR.

The models (`--models`; each reads the same frames):

- `complex`: CAtt (softmax of Re<q, k>) transformer on IQ tokens: each
  token 8 complex samples (a symbol's length; the frames start anywhere
  in a symbol), a `ComplexDense` embedding, two
  `ComplexTransformerEncoder`s with causal attention over sliding windows
  of the last 8 and 9 tokens (so that a token's output depends on the
  last 16 tokens, a frame, and no more) and rotary positions, and a
  per-token real head on the stacked features; the frame's decision is
  its last token's. Causal, so it streams (below).
- `real`: the same structure on the stacked `[Re | Im]` tokens, real
  `Dense`, causal `keras.layers.MultiHeadAttention`, post-norm blocks,
  learned positions, `sqrt(2)` times as wide: about the same parameter
  count.
- `cnn`: the field's usual baseline shape (O'Shea et al.'s CNNs):
  convolutions over time of the `(128, 2)` I/Q samples, pooling, a dense
  layer and dropout, sized to the transformers' parameter count.

Each is trained alike (Adam, cosine decay, batches of 128, sparse
cross-entropy) for `--seeds` seeds (initial weights and batch order; the
data is the same). Reported: accuracy per SNR (a table and
`radio_accuracy.png`), the mean over every SNR (RadioML's headline
figure), the high-SNR plateau (mean over 0..18 dB), mean +- sample std
over seeds, the paired difference of each model against `complex` by
seed with its 95% t interval (over training seeds, on one draw of the
data: `--data-seed`), and the confusion matrix at high SNR of the best
model. The best model (highest validation accuracy), and the best
complex model when another wins, are exported to TFLite (builtin ops
only; `--modes`, default float32 and full_int8 calibrated on 256 training
frames) and scored per SNR on LiteRT. (The real transformer's Keras
`LayerNormalization`s are traced without their NEG, which has no integer
kernel: see `cvattn_keras/export/_keras_layers.py`.) `--qat EPOCHS`
continues each exported model for EPOCHS at a tenth of the learning rate
with quantization-aware training (`cvattn_keras.quantization`) and,
as a control, without it, and scores each one's full_int8 file.

Live IQ (whenever the complex model is trained): the best complex
classifier on validation becomes a stream (`cvattn_keras.streaming.
to_streaming`: one token of 8 samples a step, the attention's keys and
values of the last 7 and 8 tokens as state), exported as one TFLite file
(float32, batch 1) and stepped on LiteRT over continuous signals
(`--streams-per-class` of each class, `--stream-tokens` tokens each, at
`--stream-snr`; not frames pasted together), a decision per token: its
largest error against the Keras stream and against the frame classifier
run on the last 16 tokens (they are the same function), the accuracy of
its decisions from the 16th token on (the first whose window is a whole
frame), and the time of a step.

These are NOT RadioML's numbers: the generator follows RadioML 2016.10a's
design (its classes, pulse shaping, channel model and SNR grid) but is not
its data, and the models are small and trained for minutes on a CPU.

Run:  python examples/radio.py [--seeds 3] [--epochs 10]
          [--train-per-cell 200] [--test-per-cell 100]
          [--models complex,real,cnn] [--modes float32,full_int8]
          [--stream-tokens 256] [--streams-per-class 4]
          [--stream-snr 10] [--qat EPOCHS] [--out examples/output]
          [--smoke]
"""

import argparse
import json
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
from _qat import fine_tuned_copy  # noqa: E402
from _stats import mean_std  # noqa: E402
from _stats import paired  # noqa: E402

MODELS = ("complex", "real", "cnn")
MODES = {"float32": None, "float16": "float16", "full_int8": "full_int8"}
TOKEN = 8  # complex samples per token: one symbol at 8 samples per symbol
HIGH_SNR = 0.0  # the plateau: every SNR >= this (dB)
ROTARY_WAVELENGTH = 10000.0


# ----------------------------------------------------------------------
# The models.
# ----------------------------------------------------------------------


def _last_token(x):
    """The last token's outputs `(B, C)` of `(B, T, C)`: the frame's
    decision of a causal model (it has seen every token)."""
    return x[:, -1, :]


def complex_model(
    tokens, classes, width=32, heads=4, windows=(8, 9), encoders=None
):
    """`(per_token, model)`: the per-token model `(B, None, 2 TOKEN) ->
    (B, None, classes)` (what streams) and the frame classifier `(B,
    tokens, 2 TOKEN) -> (B, classes)` sharing its layers.

    One causal encoder per entry of `windows`, each attending to the last
    `windows[i]` tokens: a token's output depends on the last
    `sum(windows) - len(windows) + 1` tokens (16 with the default 8 and
    9: exactly a frame), so the stream's decision at every token is the
    frame classifier's on the last 16 tokens, which it was trained on.

    `encoders`: `None`, or per encoder `(arguments, causal)`: its
    `ComplexTransformerEncoder` arguments in place of the window and the
    rotary positions (`attention=`, `attention_options=`: the
    alternatives of examples/_attention_radio.py) and whether it is
    called causal; the per-token model then takes `tokens` tokens only.
    """
    layers = cvk.layers
    if encoders is None:
        rotary = ROTARY_WAVELENGTH  # causal: implied by the window
        encoders = [
            (dict(sliding_window=w, rotary_max_wavelength=rotary), False)
            for w in windows
        ]
        tokens_in = None
    else:
        tokens_in = tokens  # the sparse and LSH layers need it traced
    inputs = keras.Input((tokens_in, 2 * TOKEN), name="iq")
    x = layers.ComplexDense(width, name="embed")(inputs)
    for i, (options, causal) in enumerate(encoders):
        x = layers.ComplexTransformerEncoder(
            num_heads=heads,
            intermediate_dim=2 * width,
            name=f"encoder_{i}",
            **options,
        )(x, use_causal_mask=causal)
    x = keras.layers.Dense(2 * width, activation="relu", name="head")(x)
    logits = keras.layers.Dense(classes, name="classes")(x)
    per_token = keras.Model(inputs, logits, name="complex_per_token")
    frame = keras.Input((tokens, 2 * TOKEN), name="iq")
    model = keras.Model(frame, _last_token(per_token(frame)), name="complex")
    return per_token, model


def real_model(tokens, classes, width=45, heads=4, depth=2):
    """The real transformer: the same structure on the stacked tokens,
    `sqrt(2)` times as wide, learned positions, post-norm blocks of causal
    `MultiHeadAttention` and a ReLU feed-forward network."""
    layers = keras.layers
    inputs = keras.Input((tokens, 2 * TOKEN), name="iq")
    x = layers.Dense(width, name="embed")(inputs)
    # Learned positions, one vector per token (ViT's; the MRI example's
    # real transformer's layer, registered so the file reloads).
    x = cvk.models.images.RealPatchPositions(name="positions")(x)
    for i in range(depth):
        attention = layers.MultiHeadAttention(
            heads, width // heads, name=f"attention_{i}"
        )(x, x, use_causal_mask=True)
        x = layers.LayerNormalization(name=f"norm_a{i}")(x + attention)
        h = layers.Dense(2 * width, activation="relu", name=f"ffn_{i}")(x)
        h = layers.Dense(width, name=f"ffn_out_{i}")(h)
        x = layers.LayerNormalization(name=f"norm_f{i}")(x + h)
    x = layers.Dense(2 * width, activation="relu", name="head")(x)
    logits = layers.Dense(classes, name="classes")(x)
    return keras.Model(inputs, _last_token(logits), name="real")


def cnn_model(samples, classes, filters=32, hidden=64, dropout=0.5):
    """The CNN baseline on `(B, samples, 2)` I/Q: three convolution +
    max-pooling blocks over time, a dense layer with dropout."""
    layers = keras.layers
    inputs = keras.Input((samples, 2), name="iq")
    x = inputs
    for i, kernel in enumerate((7, 5, 3)):
        x = layers.Conv1D(
            filters, kernel, padding="same", activation="relu", name=f"conv{i}"
        )(x)
        x = layers.MaxPooling1D(2, name=f"pool{i}")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(hidden, activation="relu", name="dense")(x)
    x = layers.Dropout(dropout, name="dropout")(x)
    outputs = layers.Dense(classes, name="classes")(x)
    return keras.Model(inputs, outputs, name="cnn")


def inputs_of(name, frames):
    """What model `name` reads of a `RadioFrames`, each frame scaled to
    unit mean power: tokens `(N, T, 2 TOKEN)` or samples `(N, L, 2)`."""
    x = frames.stacked() if name == "cnn" else frames.tokens(TOKEN)
    power = np.mean(np.abs(frames.iq) ** 2, axis=1)
    return x / np.sqrt(np.maximum(power, 1e-12))[:, None, None]


def build(name, frame_length, classes, windows=(8, 9)):
    tokens = frame_length // TOKEN
    if name == "complex":
        return complex_model(tokens, classes, windows=windows)
    if name == "real":
        return None, real_model(tokens, classes)
    return None, cnn_model(frame_length, classes)


# ----------------------------------------------------------------------
# Training and scores.
# ----------------------------------------------------------------------


def train(model, x, y, validation, args, seed):
    steps = args.epochs * -(-len(x) // args.batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(
        args.learning_rate, decay_steps=max(steps, 1)
    )
    model.compile(
        keras.optimizers.Adam(schedule),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        run_eagerly=args.run_eagerly,  # smoke runs (see parse)
    )
    start = time.perf_counter()
    model.fit(
        x,
        y,
        epochs=args.epochs,
        batch_size=args.batch_size,
        validation_data=validation,
        verbose=2,
        shuffle=True,
    )
    return time.perf_counter() - start


def predict(model, x, batch_size=512):
    return np.argmax(
        np.concatenate(
            [
                keras.ops.convert_to_numpy(
                    model(x[i : i + batch_size], training=False)
                )
                for i in range(0, len(x), batch_size)
            ]
        ),
        axis=-1,
    )


def per_snr(predicted, frames):
    """`{snr: accuracy}` over the SNR grid, the mean over every SNR and
    the plateau (mean over SNR >= HIGH_SNR)."""
    snrs = np.unique(frames.snr_db)
    accuracy = {
        float(s): float(
            np.mean(
                predicted[frames.snr_db == s]
                == frames.labels[frames.snr_db == s]
            )
        )
        for s in snrs
    }
    values = np.array(list(accuracy.values()))
    keys = np.array(list(accuracy))
    return dict(
        per_snr=accuracy,
        mean=float(values.mean()),
        high=float(values[keys >= HIGH_SNR].mean()),
    )


def confusion(predicted, frames, classes):
    """Row-normalised confusion matrix over the frames of SNR >= HIGH_SNR
    (rows: true class, columns: predicted)."""
    keep = frames.snr_db >= HIGH_SNR
    matrix = np.zeros((classes, classes))
    np.add.at(matrix, (frames.labels[keep], predicted[keep]), 1)
    return matrix / np.maximum(matrix.sum(axis=1, keepdims=True), 1)


def percent(pair):
    """`mean ± std` in percent (the mean alone for one seed)."""
    mean, std = pair
    return f"{100 * mean:.1f}" + ("" if std is None else f" ± {100 * std:.1f}")


# ----------------------------------------------------------------------
# Export and the live stream.
# ----------------------------------------------------------------------


def export_rows(name, model, args, x_train, x_test, test, modes=None):
    rows = []
    for mode in args.modes if modes is None else modes:
        path = os.path.join(args.out, f"radio_{name}_{mode}.tflite")
        quantization = MODES[mode]
        calibrated = quantization == "full_int8"
        try:
            cvk.export.export_tflite(
                model,
                path,
                quantization=quantization,
                representative_data=x_train[:256] if calibrated else None,
            )
        except (RuntimeError, ValueError) as error:
            first = (str(error).strip().splitlines() or ["?"])[0]
            rows.append(dict(mode=mode, error=first[:200]))
            continue
        logits = cvk.export.predict_tflite(path, model, x_test, batch_size=256)
        scores = per_snr(np.argmax(logits, axis=-1), test)
        report = cvk.export.verify_tflite(path, model, x_test[:1])
        rows.append(
            dict(
                mode=mode,
                path=path,
                size_kib=os.path.getsize(path) / 1024,
                latency_ms=report.median_latency_ms,
                **scores,
            )
        )
    return rows


def qat_rows(name, model, args, x_train, y_train, x_test, test, seed):
    """--qat: `args.qat` more epochs at a tenth of the learning rate with
    quantization-aware training (the ranges calibrated on 256 training
    frames first) and, the control, without (`_qat.fine_tuned_copy`, the
    model's training `seed`); each one's full_int8 file (calibrated as the
    post-training one), one row each."""
    rows = []
    for label, quantize in (("fine-tuned", False), ("QAT", True)):
        copy = fine_tuned_copy(
            model,
            quantize,
            x_train[:256],
            compile_args=dict(
                optimizer=keras.optimizers.Adam(args.learning_rate / 10),
                loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True
                ),
                run_eagerly=args.run_eagerly,
            ),
            fit_args=dict(
                x=x_train,
                y=y_train,
                epochs=args.qat,
                batch_size=args.batch_size,
                shuffle=True,
            ),
            seed=seed,
        )
        file = f"{name}_{label.replace('-', '').lower()}"
        for row in export_rows(
            file, copy, args, x_train, x_test, test, ["full_int8"]
        ):
            rows.append(dict(row, mode=f"{label} {args.qat} epochs, full_int8"))
    return rows


def live_stream(per_token, model, args, class_names):
    """The complex classifier streamed on LiteRT over continuous signals
    (`--streams-per-class` of each class, `--stream-tokens` tokens each,
    at `--stream-snr`): its error against the Keras stream and against the
    frame classifier on the last 16 tokens, the accuracy of its decisions
    once the window is full (from the 16th token on), ms per step."""
    steps = args.stream_tokens
    frames = cvk.datasets.radio_modulation(
        "test",
        frames_per_class_and_snr=args.streams_per_class,
        snr_db=(args.stream_snr,),
        frame_length=steps * TOKEN,
        seed=args.data_seed + 7,
    )
    order = np.argsort(frames.labels, kind="stable")
    # A slow AGC: one gain per stream (its mean power over the stream),
    # where training scaled each 128-sample frame alone.
    tokens = inputs_of("complex", frames)[order]
    labels = frames.labels[order]
    stream = cvk.streaming.to_streaming(per_token)
    chunks = tokens[:, :, None, :]  # (streams, steps, 1, 2 TOKEN)
    want, _ = cvk.streaming.run_stream(stream, chunks[:2])
    frame_tokens = model.inputs[0].shape[1]
    full = frame_tokens - 1  # the first step whose window is a whole frame
    # The frame classifier on the last 16 tokens at each step from `full`.
    windows = np.lib.stride_tricks.sliding_window_view(
        tokens[:2], frame_tokens, axis=1
    )  # (2, steps - full, 2 TOKEN, frame_tokens)
    windows = np.moveaxis(windows, -1, -2).reshape(-1, frame_tokens, 2 * TOKEN)
    framed = keras.ops.convert_to_numpy(model(windows, training=False))
    framed = framed.reshape(2, steps - full, -1)
    path = os.path.join(args.out, "radio_complex_stream.tflite")
    cvk.export.export_tflite(stream, path, batch_size=1)
    runner = cvk.export.TFLiteStream(path, num_threads=1)
    got, seconds = [], []
    for clip in chunks:
        runner.reset()
        outputs = []
        for chunk in clip:
            start = time.perf_counter()
            out = runner.step(chunk[None])
            seconds.append(time.perf_counter() - start)
            outputs.append(np.reshape(out, -1))
        got.append(np.stack(outputs))
    got = np.stack(got)  # (streams, steps, classes)
    scale = np.abs(want).max()
    settled = np.argmax(got[:, full:], axis=-1)  # (streams, steps - full)
    per_stream = np.mean(settled == labels[:, None], axis=1)
    return dict(
        streams=len(tokens),
        tokens_per_stream=steps,
        snr_db=args.stream_snr,
        state_kib=sum(s.nbytes for s in stream.initial_state(1)) / 1024,
        file_kib=os.path.getsize(path) / 1024,
        error_vs_keras_stream=float(np.abs(got[:2] - want).max() / scale),
        error_vs_frames=float(
            np.abs(got[:2, full:] - framed).max() / np.abs(framed).max()
        ),
        accuracy=float(per_stream.mean()),
        accuracy_std=float(np.std(per_stream, ddof=min(1, len(labels) - 1))),
        per_class={
            name: float(per_stream[labels == c].mean())
            for c, name in enumerate(class_names)
            if np.any(labels == c)
        },
        step_ms=1000 * float(np.median(seconds)),
    )


# ----------------------------------------------------------------------
# Tables.
# ----------------------------------------------------------------------


def snr_table(summary, names):
    snrs = sorted(next(iter(summary.values()))["per_snr"])
    lines = [
        "| SNR (dB) | " + " | ".join(names) + " |",
        "| ---: | " + " | ".join("---" for _ in names) + " |",
    ]
    for s in snrs:
        cells = []
        for n in names:
            cells.append(percent(summary[n]["per_snr"][s]))
        lines.append(f"| {s:+.0f} | " + " | ".join(cells) + " |")
    for key, label in (("mean", "mean, every SNR"), ("high", "mean, 0-18 dB")):
        cells = []
        for n in names:
            cells.append(f"**{percent(summary[n][key])}**")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def confusion_table(matrix, class_names):
    lines = [
        "| true \\ predicted | " + " | ".join(class_names) + " |",
        "| --- | " + " | ".join("---:" for _ in class_names) + " |",
    ]
    for name, row in zip(class_names, matrix):
        cells = " | ".join(f"{100 * v:.0f}" for v in row)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def plot(summary, names, path):
    try:
        import matplotlib
    except ImportError:
        print(
            "(matplotlib missing: no figure; pip install "
            "cvattn_keras[examples])"
        )
        return None
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for n in names:
        snrs = sorted(summary[n]["per_snr"])
        mean = np.array([summary[n]["per_snr"][s][0] for s in snrs])
        std = np.array([summary[n]["per_snr"][s][1] or 0.0 for s in snrs])
        axis.plot(snrs, 100 * mean, marker="o", markersize=3, label=n)
        axis.fill_between(
            snrs, 100 * (mean - std), 100 * (mean + std), alpha=0.2
        )
    axis.set(
        xlabel="SNR (dB)",
        ylabel="accuracy (%)",
        title="modulation recognition, radio_modulation (11 classes)",
        ylim=(0, 100),
    )
    axis.axhline(100 / 11, color="gray", linestyle=":", label="chance")
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


# ----------------------------------------------------------------------


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    positive = arguments.positive_int
    parser.add_argument("--seeds", type=positive, default=3)
    parser.add_argument("--epochs", type=positive, default=10)
    parser.add_argument(
        "--train-per-cell",
        type=positive,
        default=200,
        help="training frames per class and SNR (RadioML 2016.10a: 1000 "
        "in all, of which the usual split trains on half)",
    )
    parser.add_argument("--test-per-cell", type=positive, default=100)
    parser.add_argument("--batch-size", type=positive, default=128)
    parser.add_argument(
        "--learning-rate", type=arguments.positive_float, default=3e-3
    )
    parser.add_argument(
        "--models", type=arguments.names(MODELS), default=",".join(MODELS)
    )
    parser.add_argument(
        "--modes",
        type=arguments.names(MODES, {"": []}),
        default="float32,full_int8",
        help="'' for none",
    )
    parser.add_argument(
        "--stream-tokens",
        type=arguments.int_at_least(32, "two windows"),
        default=256,
        help="tokens (of 8 samples) in each live stream",
    )
    parser.add_argument("--streams-per-class", type=positive, default=4)
    parser.add_argument(
        "--stream-snr",
        type=arguments.float_in(-20, 30, why="radio_modulation's range, dB"),
        default=10.0,
    )
    parser.add_argument(
        "--windows",
        type=arguments.ints_at_least(1),
        default="8,9",
        help="the complex model's sliding windows, one encoder each; the "
        "live stream needs them to cover one frame exactly (sum - count + "
        "1 = 16 tokens)",
    )
    parser.add_argument(
        "--data-seed", type=arguments.non_negative_int, default=0
    )
    parser.add_argument(
        "--out",
        type=arguments.output_folder,
        default=os.path.join("examples", "output"),
    )
    parser.add_argument(
        "--qat",
        type=positive,
        metavar="EPOCHS",
        help="continue each exported model EPOCHS with quantization-aware "
        "training and, as a control, without; full_int8 files of both",
    )
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    # A smoke run trains eagerly: the whole run took 208 s with the three
    # models' XLA compiles, 117 s without (a loaded 2-core CPU).
    args.run_eagerly = args.smoke
    if args.smoke:
        args.seeds, args.epochs = 1, 1
        args.train_per_cell, args.test_per_cell = 2, 2
        args.stream_tokens, args.streams_per_class = 32, 1
    return args


def load(counts, seed):
    """`{split: radio_modulation(split, ...)}` for `counts`, `{split:
    frames per class and SNR}`, of the data draw `seed`."""
    return {
        split: cvk.datasets.radio_modulation(
            split, frames_per_class_and_snr=count, seed=seed
        )
        for split, count in counts.items()
    }


def main(argv=None):
    args = parse(argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    data = load(
        dict(
            train=args.train_per_cell,
            validation=max(1, args.train_per_cell // 5),
            test=args.test_per_cell,
        ),
        args.data_seed,
    )
    train_set, validation_set, test_set = (
        data["train"],
        data["validation"],
        data["test"],
    )
    class_names = list(train_set.classes)
    classes = len(class_names)
    frame_length = train_set.iq.shape[1]
    print(
        f"radio_modulation: {len(train_set)} training, "
        f"{len(validation_set)} validation, {len(test_set)} test frames of "
        f"{frame_length} samples, {classes} classes, SNR "
        f"{test_set.snr_db.min():+.0f}..{test_set.snr_db.max():+.0f} dB "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    runs = {name: [] for name in args.models}
    best = streamable = None
    for name in args.models:
        x, xv, xt = (inputs_of(name, d) for d in data.values())
        for seed in range(args.seeds):
            keras.utils.set_random_seed(seed)
            per_token, model = build(name, frame_length, classes, args.windows)
            seconds = train(
                model,
                x,
                train_set.labels,
                (xv, validation_set.labels),
                args,
                seed,
            )
            validation = float(
                np.mean(predict(model, xv) == validation_set.labels)
            )
            predicted = predict(model, xt)
            scores = per_snr(predicted, test_set)
            run = dict(
                seed=seed,
                params=int(model.count_params()),
                seconds=seconds,
                validation=validation,
                **scores,
            )
            runs[name].append(run)
            print(
                f"{name} seed {seed}: {run['params']:,} parameters, "
                f"{seconds:.0f} s, test accuracy {100 * scores['mean']:.1f}% "
                f"(0-18 dB {100 * scores['high']:.1f}%), validation "
                f"{100 * validation:.1f}%"
            )
            if best is None or validation > best["validation"]:
                best = dict(
                    name=name,
                    seed=seed,
                    validation=validation,
                    model=model,
                    predicted=predicted,
                )
            if name == "complex" and (
                streamable is None or validation > streamable["validation"]
            ):
                streamable = dict(
                    seed=seed,
                    validation=validation,
                    per_token=per_token,
                    model=model,
                    accuracy=scores["per_snr"].get(float(args.stream_snr)),
                )
    summary = {}
    for name, rs in runs.items():
        snrs = sorted(rs[0]["per_snr"])
        summary[name] = dict(
            params=rs[0]["params"],
            seconds=mean_std([r["seconds"] for r in rs]),
            per_snr={s: mean_std([r["per_snr"][s] for r in rs]) for s in snrs},
            mean=mean_std([r["mean"] for r in rs]),
            high=mean_std([r["high"] for r in rs]),
        )
    names = list(runs)
    lines = [
        f"Accuracy (%) against SNR, mean ± std over {args.seeds} seed(s); "
        f"{len(test_set)} test frames ({args.test_per_cell} per class and "
        "SNR):",
        "",
        snr_table(summary, names),
        "",
        "| model | parameters | train time (s) | mean, every SNR | 0-18 dB |",
        "| --- | ---: | ---: | --- | --- |",
    ]
    for n in names:
        s = summary[n]
        lines.append(
            f"| {n} | {s['params']:,} | {s['seconds'][0]:.0f} | "
            f"{percent(s['mean'])} | {percent(s['high'])} |"
        )
    differences = {}
    if "complex" in runs:
        for n in names:
            if n == "complex":
                continue
            differences[n] = {
                key: paired(
                    [r[key] for r in runs["complex"]],
                    [r[key] for r in runs[n]],
                )
                for key in ("mean", "high")
            }
        if differences:
            lines += [
                "",
                "Paired by seed, complex - other (accuracy points, 95% t "
                "interval):",
                "",
            ]
            for n, d in differences.items():
                parts = []
                for key, label in (("mean", "every SNR"), ("high", "0-18 dB")):
                    m, half = d[key]
                    interval = (
                        f" [{100 * (m - half):+.1f}, {100 * (m + half):+.1f}]"
                        if half is not None
                        else ""
                    )
                    parts.append(f"{label} {100 * m:+.1f}{interval}")
                lines.append(f"- complex - {n}: " + "; ".join(parts))
    matrix = confusion(best["predicted"], test_set, classes)
    lines += [
        "",
        f"Confusion at 0-18 dB of the best model on validation "
        f"({best['name']}, seed {best['seed']}), % of each true class:",
        "",
        confusion_table(matrix, class_names),
    ]
    exported = []
    targets = [dict(best)]
    if streamable is not None and best["name"] != "complex":
        # The library's own model too: its best on validation.
        targets.append(dict(streamable, name="complex"))
    for target in targets if args.modes else []:
        name = target["name"]
        rows = export_rows(
            name,
            target["model"],
            args,
            inputs_of(name, train_set),
            inputs_of(name, test_set),
            test_set,
        )
        if args.qat:
            rows += qat_rows(
                name,
                target["model"],
                args,
                inputs_of(name, train_set),
                train_set.labels,
                inputs_of(name, test_set),
                test_set,
                target["seed"],
            )
        exported += [dict(r, model=name, seed=target["seed"]) for r in rows]
        lines += [
            "",
            f"{name} (seed {target['seed']}, the best {name} model on "
            "validation) on LiteRT:",
            "",
            "| mode | file (KiB) | mean, every SNR | 0-18 dB | ms per frame |",
            "| --- | ---: | --- | --- | ---: |",
        ]
        for r in rows:
            if "error" in r:
                lines.append(f"| {r['mode']} | export failed: {r['error']} |")
                continue
            lines.append(
                f"| {r['mode']} | {r['size_kib']:.0f} | "
                f"{100 * r['mean']:.1f} | {100 * r['high']:.1f} | "
                f"{r['latency_ms']:.3f} |"
            )
    live = None
    field = sum(args.windows) - len(args.windows) + 1
    if "complex" in runs and field != frame_length // TOKEN:
        lines += [
            "",
            f"(No live stream: windows {args.windows} make a decision depend "
            f"on {field} tokens, not on one frame of "
            f"{frame_length // TOKEN}.)",
        ]
    elif "complex" in runs:
        live = live_stream(
            streamable["per_token"], streamable["model"], args, class_names
        )
        live["seed"] = streamable["seed"]
        frames_accuracy = streamable["accuracy"]
        live["frame_accuracy"] = frames_accuracy
        reference = (
            f" (its test frames at that SNR: {100 * frames_accuracy:.1f}%)"
            if frames_accuracy is not None
            else ""
        )
        lines += [
            "",
            f"Live IQ: the complex classifier (seed {live['seed']}, the best "
            f"complex one on validation) streamed on LiteRT (float32, batch "
            f"1, one token of {TOKEN} samples a step, "
            f"{live['state_kib']:.1f} KiB of state) over {live['streams']} "
            f"continuous streams of {live['tokens_per_stream']} tokens at "
            f"{live['snr_db']:+.0f} dB, {args.streams_per_class} of each "
            f"class: largest error against the Keras stream "
            f"{live['error_vs_keras_stream']:.1e}, against the frame "
            f"classifier on the last 16 tokens {live['error_vs_frames']:.1e}; "
            f"accuracy of its decisions from the 16th token on "
            f"{100 * live['accuracy']:.1f}% (± {100 * live['accuracy_std']:.1f}"
            f" over the streams){reference}; {live['step_ms']:.3f} ms a step "
            "(median, one thread).",
        ]
    figure = plot(summary, names, os.path.join(args.out, "radio_accuracy.png"))
    text = "\n".join(lines)
    print("\n" + text)
    with open(os.path.join(args.out, "radio.md"), "w") as f:
        f.write(text + "\n")
    result = dict(
        args={k: v for k, v in vars(args).items()},
        classes=class_names,
        runs=runs,
        summary=summary,
        differences=differences,
        best=dict(name=best["name"], seed=best["seed"]),
        confusion=matrix.tolist(),
        exported=exported,
        live=live,
        figure=figure,
        seconds=time.perf_counter() - t0,
    )
    with open(os.path.join(args.out, "radio.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(f"\n({time.perf_counter() - t0:.0f} s in all; {args.out}/radio.*)")
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
