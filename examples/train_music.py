"""Train the paper's complex transformer to transcribe music, end to end.

Trains `cvattn_keras.models.music_classifier` (a small configuration by
default) on the built-in `synthetic_music` data -- polyphonic harmonic
notes -- reports the micro-averaged average precision (the paper's metric)
on held-out data, saves the `.keras` model, exports it to TFLite with
builtin ops only, verifies the file on the LiteRT interpreter, and writes a
PNG with the training curves, an attention map and the transcription of one
held-out sample.

`--input waveform` (the default on the built-in data) trains from audio
samples: the model's first layer is a `ComplexSTFT` (the one that makes
`synthetic_music`'s spectra, `datasets.synthetic_music_stft`), so the
exported file goes from samples to notes, and `music_classifier.json`
beside it says what it takes (sample rate, samples per window, the
frames' hop, the lowest note): `examples/transcribe.py AUDIO.wav --model
OUTPUT/music_classifier.tflite` runs it on a WAV file. `--input spectra`
trains on the STFT frames computed outside the model (and is the only
input of `--data MUSICNET.npz`, MusicNet's preprocessed features).
`--data scores` trains on `datasets.score_music` (real scores played by
sampled instruments; the `music` extra), held-out AP on its test works:
not comparable to MusicNet's published numbers.

The model is the paper's architecture (`--size paper`: exactly the
reference's, trained with its recipe: Adam 1e-4, batch 35, BCE with logits,
the learning rate halved after 2 epochs without a better validation AP) or
the same architecture scaled down (`--size small`, the default).

Run:  python examples/train_music.py [--softmax real] [--product inner]
          [--epochs N] [--size small|paper] [--input waveform|spectra]
          [--data scores|MUSICNET.npz]
          [--output examples/output] [--modes float32,...|all|none] [--smoke]

It ends with a table of the TFLite files of every quantization mode
(`--modes`): file size, weight data, the held-out AP measured on the LiteRT
interpreter, its change against Keras, and the latency of one sample.
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

SIZES = {
    # The reference architecture scaled down to the 128 bins of the default
    # data (front end 128 -> 62 -> 30 -> 14 bins, 16 x 14 complex features
    # per frame). Seconds per epoch on 2 CPU cores: about 5.
    "small": dict(
        embed_dim=32,
        num_heads=4,
        num_layers=2,
        head_dim=64,
        frontend_filters=(8, 16, 16),
        frontend_kernel_sizes=(6, 3, 3),
    ),
    # The paper's: the builders' defaults (E = 320, 8 heads, 6 layers, a
    # 2048-wide head, the five-block front end over 2048 bins).
    "paper": dict(),
    # For --smoke: seconds in all.
    "tiny": dict(
        embed_dim=8,
        num_heads=2,
        num_layers=1,
        head_dim=8,
        frontend_filters=(4, 8),
        frontend_kernel_sizes=(6, 3),
    ),
}

# Training recipes: learning rate, batch size, epochs. "paper" is the
# reference's (`execute.py`): Adam 1e-4, batch 35, up to 100 epochs, the
# learning rate halved when the validation AP has not improved for 2
# epochs.
RECIPES = {
    "small": dict(learning_rate=2e-3, batch_size=32, epochs=20),
    "paper": dict(learning_rate=1e-4, batch_size=35, epochs=100),
    "tiny": dict(learning_rate=2e-3, batch_size=32, epochs=1),
}


# The TFLite modes of the table: name -> export_tflite's `quantization`.
MODES = {
    "float32": None,
    "float16": "float16",
    "dynamic_int8": "dynamic_int8",
    "int8": "int8",
    "full_int8": "full_int8",
    "int16x8": "int16x8",
}


def parse_modes(parser, text):
    if text == "all":
        return list(MODES)
    if text == "none":
        return []
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(
            f"--modes must list some of {', '.join(MODES)} (or be 'all' or "
            f"'none'). Received: --modes={text!r}"
        )
    return modes


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--softmax", default="real", help="real|abs|absonly|naive"
    )
    parser.add_argument("--product", default="inner", help="inner|bilinear")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument(
        "--epochs", type=int, default=None, help="default: the size's recipe"
    )
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--learning-rate", type=float, default=None)
    parser.add_argument(
        "--data",
        default=None,
        help="'scores' (datasets.score_music: real scores played by sampled "
        "instruments, the music extra) or MusicNet features (.npz or "
        "directory); default: synthetic_music",
    )
    parser.add_argument(
        "--input",
        choices=("waveform", "spectra"),
        default=None,
        help="what the model takes (default: waveform; spectra with --data)",
    )
    parser.add_argument("--output", default=os.path.join("examples", "output"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--modes",
        default=None,
        help="TFLite quantization modes to measure, comma-separated: "
        f"{','.join(MODES)}; 'all' or 'none' (default: all; with --smoke "
        "float32,full_int8)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a seconds-long run (tests)"
    )
    args = parser.parse_args(argv)
    if args.modes is None:
        args.modes = "float32,full_int8" if args.smoke else "all"
    args.modes = parse_modes(parser, args.modes)
    musicnet = args.data not in (None, "scores")
    if args.input is None:
        args.input = "spectra" if musicnet else "waveform"
    if args.input == "waveform" and musicnet:
        parser.error(
            "--data holds MusicNet's STFT features, not audio: use --input "
            "spectra with it. Received: --input waveform"
        )
    if args.input == "spectra" and args.data == "scores":
        parser.error(
            "--data scores is audio: the model takes it through its STFT "
            "(--input waveform). Received: --input spectra"
        )
    if args.smoke:
        args.size, args.samples, args.epochs = "tiny", 48, 1
    for name, value in RECIPES[args.size].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


# synthetic_music's sample rate and lowest note, as this example draws it.
SAMPLE_RATE = 4000
LOWEST_NOTE = 60


def load_scores(args):
    """`score_music`'s train split and its test split (held-out works),
    the STFT of its labels, its sample rate and lowest note."""
    size = dict(minutes=0.2, clip_seconds=3.0) if args.smoke else {}
    train, test = (
        cvk.datasets.score_music(split, seed=args.seed, **size)
        for split in ("train", "test")
    )
    stft = cvk.layers.ComplexSTFT.from_config(train.stft_config)
    # The model takes the fewest samples that give the labels' frames
    # (`models.waveform_length`): a clip's tail past the last frame's
    # centre is cut (the frames and their labels are unchanged).
    samples = cvk.models.waveform_length(stft, train.labels.shape[1])
    return (
        (train.audio[:, :samples], train.labels),
        (test.audio[:, :samples], test.labels),
        stft,
        dict(sample_rate=train.sample_rate, lowest_note=train.lowest_note),
    )


def load_data(args):
    """Train and held-out splits `(x, y), (x, y)`, the model's `ComplexSTFT`
    (None for spectra) and the audio's sample rate and lowest note: `x`
    holds waveforms or spectra."""
    if args.data == "scores":
        return load_scores(args)
    stft = None
    audio = dict(sample_rate=SAMPLE_RATE, lowest_note=LOWEST_NOTE)
    if args.data:
        x, y = cvk.datasets.load_musicnet(args.data)
    else:
        # The paper's front end needs the paper's 2048 bins and 64 frames.
        size = dict(bins=2048, frames=64) if args.size == "paper" else {}
        x, y = cvk.datasets.synthetic_music(
            num_samples=args.samples + args.samples // 4,
            seed=args.seed,
            sample_rate=SAMPLE_RATE,
            lowest_note=LOWEST_NOTE,
            output=args.input,
            **size,
        )
        if args.input == "waveform":
            stft = cvk.datasets.synthetic_music_stft(size.get("bins", 128))
    split = len(x) - max(1, len(x) // 5)
    return (x[:split], y[:split]), (x[split:], y[split:]), stft, audio


def describe_file(model, stft, sample_rate, lowest_note):
    """What a waveform file takes and gives, for `transcribe.py` (and an
    app): the sample rate, samples per window, the frames' hop and the
    offset of their centres, the notes."""
    return dict(
        input="waveform",
        sample_rate=sample_rate,
        samples=int(model.input_shape[1]),
        frames=int(model.output_shape[1]),
        frame_step=stft.frame_step,
        # Frame t is centred on sample t * frame_step + first_centre.
        first_centre=0 if stft.center else stft.fft_length // 2,
        lowest_note=lowest_note,
        notes=int(model.output_shape[2]),
        output="note logits (probability: sigmoid)",
    )


def attention_map(model, x):
    """The first encoder layer's weights for one sample: |W| (T, S),
    averaged over heads."""
    positions = keras.Model(model.input, model.get_layer("positions").output)
    encoder = model.get_layer("encoder_0")
    _, scores = encoder(positions(x[:1]), return_attention_scores=True)
    scores = keras.ops.convert_to_numpy(scores)[0]  # (N, T, 2S)
    weights = cvk.from_stacked(scores)  # (N, T, S) complex
    return np.abs(weights).mean(axis=0)


def save_figure(path, history, weights, truth, prediction, title):
    from matplotlib import pyplot as plt

    figure = draw_figure(history, weights, truth, prediction, title)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def draw_figure(history, weights, truth, prediction, title):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(1, 4, figsize=(17, 4))
    epochs = np.arange(1, len(history["loss"]) + 1)
    axes[0].plot(epochs, history["loss"], label="train")
    axes[0].plot(epochs, history["val_loss"], label="held-out")
    axes[0].set(title="loss (binary cross-entropy)", xlabel="epoch")
    axes[0].legend()
    axes[1].plot(epochs, history["micro_average_precision"], label="train")
    axes[1].plot(
        epochs, history["val_micro_average_precision"], label="held-out"
    )
    axes[1].set(title="micro-averaged AP", xlabel="epoch", ylim=(0, 1))
    axes[1].legend()
    image = axes[2].imshow(weights, cmap="viridis")
    axes[2].set(
        title="attention |W|, layer 1 (mean of heads)",
        xlabel="key frame",
        ylabel="query frame",
    )
    figure.colorbar(image, ax=axes[2])
    roll = np.stack([truth.T, prediction.T, np.zeros_like(truth.T)], -1)
    axes[3].imshow(roll, aspect="auto", origin="lower")
    axes[3].set(
        title="notes: truth (red), predicted (green),\nboth (yellow)",
        xlabel="frame",
        ylabel="note",
    )
    figure.suptitle(title)
    figure.tight_layout()
    return figure


def tflite_modes(model, args, x, x_test, y_test, keras_ap):
    """One row per quantization mode: the file's size and weight data, the
    held-out AP of its outputs on the LiteRT interpreter, its change
    against Keras (in AP points, x100), the median latency of one sample.
    The calibrated modes calibrate on 128 training samples."""
    rows = []
    for mode in args.modes:
        path = os.path.join(args.output, f"music_classifier_{mode}.tflite")
        quantization = MODES[mode]
        calibrated = quantization in ("int8", "full_int8", "int16x8")
        cvk.export.export_tflite(
            model,
            path,
            quantization=quantization,
            representative_data=x[:128] if calibrated else None,
        )
        logits = cvk.export.predict_tflite(path, model, x_test, batch_size=32)
        metric = cvk.metrics.MicroAveragedPrecision()
        metric.update_state(y_test, logits)
        ap = float(metric.result())
        report = cvk.export.verify_tflite(path, model, x_test[:1])
        rows.append(
            dict(
                mode=mode,
                size_kib=report.size_bytes / 1024,
                weights_kib=report.weight_bytes / 1024,
                ap=ap,
                # + 0.0: a change that rounds to zero prints +0.00, not -0.00.
                change=round(100 * (ap - keras_ap), 2) + 0.0,
                latency_ms=report.median_latency_ms,
            )
        )
    return rows


def format_modes(rows):
    lines = [
        "| mode | file (KiB) | weights (KiB) | held-out AP (LiteRT) | "
        "vs Keras (AP points) | latency, 1 sample (ms) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['size_kib']:.0f} | {r['weights_kib']:.0f} "
            f"| {r['ap']:.3f} | {r['change']:+.2f} | {r['latency_ms']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    os.makedirs(args.output, exist_ok=True)
    start = time.perf_counter()
    (x, y), (x_test, y_test), stft, audio = load_data(args)
    frames, notes = y.shape[1], y.shape[2]
    if stft is None:
        shape = (
            f"{frames} frames x {x.shape[2] // 2} complex bins (stacked: "
            f"{x.shape[2]} floats)"
        )
    else:
        shape = (
            f"{x.shape[1]} audio samples at {audio['sample_rate']} Hz "
            f"({frames} frames of a {stft.fft_length}-point STFT in the "
            "model)"
        )
    print(
        f"data: {len(x)} train / {len(x_test)} held-out samples of {shape}, "
        f"{notes} notes; {y.mean():.1%} of labels on"
    )

    model = cvk.models.music_classifier(
        frames=frames,
        bins=None if stft else x.shape[2] // 2,
        stft=stft,
        notes=notes,
        softmax=args.softmax,
        product=args.product,
        **SIZES[args.size],
    )
    model.compile(
        optimizer=keras.optimizers.Adam(args.learning_rate),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[cvk.metrics.MicroAveragedPrecision()],
        # --smoke: eagerly, where tracing and compiling the steps would
        # take most of its seconds.
        run_eagerly=args.smoke,
    )
    print(
        f"model: {args.size}, softmax={model.get_layer('encoder_0').softmax}"
        f", product={model.get_layer('encoder_0').product}, "
        f"{model.count_params():,} parameters"
        + (
            f" ({model.get_layer('stft').count_params():,} of them the "
            "STFT's fixed DFT kernels)"
            if stft is not None
            else ""
        )
    )
    callbacks = []
    if args.size == "paper":
        callbacks.append(
            keras.callbacks.ReduceLROnPlateau(
                monitor="val_micro_average_precision",
                mode="max",
                patience=2,
                factor=0.5,
            )
        )
    history = model.fit(
        x,
        y,
        validation_data=(x_test, y_test),
        epochs=args.epochs,
        batch_size=args.batch_size,
        callbacks=callbacks,
        # The progress bar on a terminal; one line per epoch into a log
        # (a redirected stdout), where the bar's redraws are thousands of
        # control characters an epoch.
        verbose="auto" if sys.stdout.isatty() and not args.smoke else 2,
    ).history
    _, ap = model.evaluate(x_test, y_test, verbose=0)
    print(
        f"\nheld-out micro-averaged AP: {ap:.3f} (chance: {y_test.mean():.3f}"
        f", the rate of notes on) after {args.epochs} epochs, "
        f"{time.perf_counter() - start:.0f} s"
    )

    model_path = os.path.join(args.output, "music_classifier.keras")
    model.save(model_path)
    tflite_path = os.path.join(args.output, "music_classifier.tflite")
    cvk.export.export_tflite(model, tflite_path)
    report = cvk.export.verify_tflite(tflite_path, model, x_test[:4])
    print(f"saved {model_path}\n{report}")
    if stft is not None:
        description = os.path.join(args.output, "music_classifier.json")
        with open(description, "w") as f:
            json.dump(describe_file(model, stft, **audio), f, indent=2)
        print(
            f"{description}: what the file takes. Transcribe a WAV file:\n"
            f"  python examples/transcribe.py AUDIO.wav --model {tflite_path}"
        )
    if args.modes:
        rows = tflite_modes(model, args, x, x_test, y_test, ap)
        table = format_modes(rows)
        print(f"\nTFLite files, held-out AP on LiteRT:\n{table}")
        with open(os.path.join(args.output, "tflite_modes.md"), "w") as f:
            f.write(table + "\n")

    prediction = keras.ops.convert_to_numpy(model(x_test[:1]))[0] > 0
    figure_path = os.path.join(args.output, "train_music.png")
    save_figure(
        figure_path,
        history,
        attention_map(model, x_test),
        y_test[0],
        prediction.astype(np.float32),
        f"music_classifier ({args.size}, {args.input}, softmax="
        f"{args.softmax}, product={args.product}): held-out AP {ap:.3f}",
    )
    print(f"figure: {figure_path}")
    return ap


if __name__ == "__main__":
    main()
