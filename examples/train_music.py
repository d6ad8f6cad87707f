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

`--streaming W` trains the same model in its streamable configuration:
every attention causal over the last `W` frames (`music_classifier(...,
sliding_window=W)`, rotary positions relative to the window) after an
uncentred STFT (`ComplexSTFT(..., center=False)`: `synthetic_music`'s
already is; `--data scores` is rendered with labels at the uncentred
frames' centres), with the same data and recipe otherwise; `--frame-step
N` (a divisor of the frame length) makes its frames overlap, N samples
apart (the labels follow the frames). Besides the offline files it writes
the streaming file `music_classifier_stream.tflite`
(`cvattn_keras.streaming.to_streaming`, static batch 1: one hop of N
samples in, one frame of note logits out, the state carried outside the
file), the same in each `--modes` mode (`music_classifier_stream_MODE
.tflite`, the calibrated ones on every step of 128 training clips with
the states they carry), verifies
each on LiteRT against the Keras stream (`TFLiteStream` against
`run_stream`: the max relative error over held-out clips after the
warm-up, the held-out AP of the streamed frames, ms per hop; the table in
`stream_modes.md`) and writes `music_classifier_stream.json`, what
`examples/transcribe.py AUDIO.wav --stream --model
OUTPUT/music_classifier_stream.tflite` needs to feed it hop by hop.

`--qat EPOCHS` continues the trained model for EPOCHS of
quantization-aware training (`cvattn_keras.quantization.quantize_model`)
and writes its int8 and full_int8 files (`music_classifier_qat_MODE
.tflite`; with `--streaming` also the full_int8 stream of its weights,
`music_classifier_qat_stream_full_int8.tflite`), beside a control that
fine-tunes the float model as long without fake quantization
(`music_classifier_finetuned_MODE.tflite`): the table `qat_modes.md`.
`--qat-seeds N` repeats both over N seeds (the batches' order) and adds
each arm's full_int8 AP, mean +- std, and their paired difference with
its 95% t interval.

The model is the paper's architecture (`--size paper`: exactly the
reference's, trained with its recipe: Adam 1e-4, batch 35, BCE with logits,
the learning rate halved after 2 epochs without a better validation AP) or
the same architecture scaled down (`--size small`, the default).

Run:  python examples/train_music.py [--softmax real] [--product inner]
          [--epochs N] [--size small|paper] [--input waveform|spectra]
          [--data scores|MUSICNET.npz]
          [--output examples/output] [--modes float32,...|all|none] [--smoke]
          [--streaming W [--frame-step N]] [--qat EPOCHS [--qat-seeds N]]

It ends with a table of the TFLite files of every quantization mode
(`--modes`): file size, weight data, the held-out AP measured on the LiteRT
interpreter, its change against Keras, and the latency of one sample.
"""

import argparse
import json
import os
import sys
import tempfile
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
from _qat import seeds_summary  # noqa: E402

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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    positive = arguments.positive_int
    parser.add_argument(
        "--softmax",
        type=arguments.checked_by(cvk.attention.resolve_softmax),
        default="real",
        help="real|abs|absonly|naive",
    )
    parser.add_argument(
        "--product",
        type=arguments.checked_by(cvk.attention.resolve_product),
        default="inner",
        help="inner|bilinear",
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument(
        "--epochs",
        type=positive,
        default=None,
        help="default: the size's recipe",
    )
    parser.add_argument(
        "--samples",
        type=arguments.int_at_least(2, "one to train on, one held out"),
        default=1024,
        help="synthetic_music's training examples (a fifth more are held out)",
    )
    parser.add_argument("--batch-size", type=positive, default=None)
    parser.add_argument(
        "--learning-rate", type=arguments.positive_float, default=None
    )
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
    parser.add_argument(
        "--output",
        type=arguments.output_folder,
        default=os.path.join("examples", "output"),
    )
    parser.add_argument("--seed", type=arguments.non_negative_int, default=0)
    modes = arguments.names(MODES, {"all": list(MODES), "none": []})
    parser.add_argument(
        "--modes",
        type=modes,
        default=None,
        help="TFLite quantization modes to measure, comma-separated: "
        f"{','.join(MODES)}; 'all' or 'none' (default: all; with --smoke "
        "float32,full_int8)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a seconds-long run (tests)"
    )
    parser.add_argument(
        "--qat",
        type=positive,
        default=None,
        metavar="EPOCHS",
        help="after float training, EPOCHS of quantization-aware training "
        "(cvattn_keras.quantization, a tenth of the learning rate), then "
        "its int8 and full_int8 files (and, with --streaming, its full_int8 "
        "stream), beside a control: the float model fine-tuned as long "
        "without fake quantization",
    )
    parser.add_argument(
        "--qat-seeds",
        type=positive,
        default=1,
        metavar="N",
        help="with --qat: the QAT and control fine-tuning repeated over N "
        "seeds (the batches' order): each arm's full_int8 AP, mean +- std, "
        "and the paired difference with its 95%% t interval (default 1)",
    )
    parser.add_argument(
        "--streaming",
        type=arguments.int_at_least(1, "a window of frames"),
        default=None,
        metavar="W",
        help="train the streamable model (causal attention over the last W "
        "frames, an uncentred STFT) and export the streaming file "
        "music_classifier_stream.tflite (one hop in, one frame out) beside "
        "the offline one",
    )
    parser.add_argument(
        "--frame-step",
        type=positive,
        default=None,
        metavar="N",
        help="with --streaming and audio: the STFT's hop in samples, a "
        "divisor of its frame length (default: the data's; 256, the frame "
        "length, for synthetic_music; 512 for scores)",
    )
    args = parser.parse_args(argv)
    if args.frame_step is not None and args.streaming is None:
        parser.error("--frame-step goes with --streaming")
    if args.qat_seeds != 1 and args.qat is None:
        parser.error("--qat-seeds goes with --qat")
    if args.modes is None:
        args.modes = modes("float32,full_int8" if args.smoke else "all")
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
    if args.frame_step is not None and args.input != "waveform":
        parser.error(
            "--frame-step sets the model's STFT: it needs --input waveform"
        )
    if args.smoke:
        args.size, args.samples, args.epochs = "tiny", 48, 1
    for name, value in RECIPES[args.size].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.frame_step is not None:
        # The frame length of the data's STFT: score_music's, or
        # synthetic_music's 2 * bins.
        length = 2048 if args.data == "scores" else 2 * _bins(args)
        if length % args.frame_step:
            parser.error(
                f"--frame-step must divide the frame length, {length} "
                f"samples. Received: --frame-step {args.frame_step}"
            )
    return args


def _bins(args):
    """synthetic_music's bins for this run."""
    return 2048 if args.size == "paper" else 128


def streaming_stft(stft, frame_step=None):
    """`stft` (a `ComplexSTFT`) uncentred, the first layer of a streamable
    model, with `frame_step` as its hop if given; itself when it already
    is."""
    config = stft.get_config()
    changes = dict(center=False)
    if frame_step is not None:
        changes["frame_step"] = frame_step
    if all(config[k] == v for k, v in changes.items()):
        return stft
    return type(stft).from_config({**config, **changes})


# synthetic_music's sample rate and lowest note, as this example draws it.
SAMPLE_RATE = 4000
LOWEST_NOTE = 60


def load_scores(args):
    """`score_music`'s train split and its test split (held-out works),
    the STFT of its labels, its sample rate and lowest note."""
    size = dict(minutes=0.2, clip_seconds=3.0) if args.smoke else {}
    if args.streaming is not None:
        # score_music's default STFT uncentred: labels at the frames'
        # centres, t * hop + fft_length // 2.
        size["stft"] = streaming_stft(
            cvk.layers.ComplexSTFT(2048, 512, bins=(0, 640), name="stft"),
            args.frame_step,
        )
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
        if args.input == "waveform":
            stft = cvk.datasets.synthetic_music_stft(_bins(args))
            if args.streaming is not None:
                # Uncentred already; overlapping frames with --frame-step
                # (the labels follow the frames).
                stft = streaming_stft(stft, args.frame_step)
                size["stft"] = stft
        x, y = cvk.datasets.synthetic_music(
            num_samples=args.samples + args.samples // 4,
            seed=args.seed,
            sample_rate=SAMPLE_RATE,
            lowest_note=LOWEST_NOTE,
            output=args.input,
            **size,
        )
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
        fft_length=stft.fft_length,
        # Frame t is centred on sample t * frame_step + first_centre.
        first_centre=0 if stft.center else stft.fft_length // 2,
        lowest_note=lowest_note,
        notes=int(model.output_shape[2]),
        output="note logits (probability: sigmoid)",
    )


def attention_map(model, x):
    """The first encoder layer's weights for one sample: |W| (T, S),
    averaged over heads."""
    names = [layer.name for layer in model.layers]
    # Rotary positions (a sliding window) are inside the attention: the
    # encoder takes the embedding.
    before = "positions" if "positions" in names else "embedding"
    positions = keras.Model(model.input, model.get_layer(before).output)
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


def tflite_modes(
    model, args, x, x_test, y_test, keras_ap, modes=None, name="", label=""
):
    """One row per quantization mode: the file's size and weight data, the
    held-out AP of its outputs on the LiteRT interpreter, its change
    against Keras (in AP points, x100), the median latency of one sample.
    The calibrated modes calibrate on 128 training samples. `modes`
    (default `--modes`), the files' `name` suffix and the rows' `label`
    serve --qat."""
    rows = []
    for mode in args.modes if modes is None else modes:
        path = os.path.join(
            args.output, f"music_classifier{name}_{mode}.tflite"
        )
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
                mode=label + mode,
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


# ----------------------------------------------------------------------
# --qat: quantization-aware training.
# ----------------------------------------------------------------------

QAT_MODES = ("int8", "full_int8")


def qat_runs(model, args, x, y, x_test, y_test, keras_ap):
    """--qat: `--qat` epochs of quantization-aware training from the
    trained model (a tenth of its learning rate), and the same fine-tuning
    without fake quantization (the control: what the extra epochs alone
    give), `_qat.fine_tuned_copy`, for each of `--qat-seeds` seeds (the
    batches' order). The first seed's int8 and full_int8 files (those of
    `--modes`, or full_int8 alone), one row per mode; every seed's
    last mode's AP of each arm (`{label: [AP by seed]}`, the later seeds'
    files in a temporary folder); and the first seed's QAT model's float
    model (`quantization.strip`, for the stream)."""
    rows, by_seed, stripped = [], {}, None
    modes = [m for m in args.modes if m in QAT_MODES] or ["full_int8"]
    # The seeds' summary takes the last mode: full_int8 where asked for.
    modes.sort(key=lambda mode: mode == "full_int8")
    for k in range(args.qat_seeds):
        for label, quantize in (("fine-tuned ", False), ("QAT ", True)):
            copy = fine_tuned_copy(
                model,
                quantize,
                x[:128],
                compile_args=dict(
                    optimizer=keras.optimizers.Adam(args.learning_rate / 10),
                    loss=keras.losses.BinaryCrossentropy(from_logits=True),
                    metrics=[cvk.metrics.MicroAveragedPrecision()],
                    run_eagerly=args.smoke,
                ),
                fit_args=dict(
                    x=x,
                    y=y,
                    epochs=args.qat,
                    batch_size=args.batch_size,
                ),
                seed=args.seed + k,
            )
            _, ap = copy.evaluate(x_test, y_test, verbose=0)
            print(f"{label}model (seed {args.seed + k}): AP {ap:.3f} in Keras")
            name = "_qat" if quantize else "_finetuned"
            with tempfile.TemporaryDirectory() as folder:
                # The later seeds' files: their AP only.
                where = (
                    args
                    if k == 0
                    else argparse.Namespace(**{**vars(args), "output": folder})
                )
                seed_rows = tflite_modes(
                    copy, where, x, x_test, y_test, keras_ap,
                    modes if k == 0 else modes[-1:], name, label,
                )  # fmt: skip
            rows += seed_rows if k == 0 else []
            by_seed.setdefault(label.strip(), []).append(seed_rows[-1]["ap"])
            if quantize and k == 0:
                stripped = cvk.quantization.strip(copy)
    return rows, by_seed, stripped


# ----------------------------------------------------------------------
# --streaming: the streaming file.
# ----------------------------------------------------------------------


def stream_chunks(stream, x):
    """Clips `x` as a stream takes them, `(clips, steps, *chunk_shape)`:
    waveforms `(clips, samples)` cut into hops, spectra `(clips, frames,
    D)` into frames."""
    shape = stream.chunk_shape
    if len(shape) == 1:  # hops of samples
        steps = x.shape[1] // shape[0]
        return x[:, : steps * shape[0]].reshape(len(x), steps, shape[0])
    return x[:, :, None, :]


def run_stream_file(runner, clip):
    """One clip `(steps, *chunk_shape)` through a `TFLiteStream` from its
    zero state: the outputs `(steps, notes)` and each step's seconds."""
    runner.reset()
    outputs, seconds = [], []
    for chunk in clip:
        start = time.perf_counter()
        out = runner.step(chunk[None])
        seconds.append(time.perf_counter() - start)
        outputs.append(out.reshape(-1))
    return np.stack(outputs), np.array(seconds)


def streaming_files(
    model, args, x, x_test, y_test, keras_ap, modes=None, label=""
):
    """Exports the streaming file of `model` (float32, then each of
    `modes`, default `--modes`), checks each on LiteRT against the Keras
    stream and measures it: one row per mode (its name after `label`),
    and the stream."""
    stream = cvk.streaming.to_streaming(model)
    warmup = stream.warmup_steps
    clips = stream_chunks(stream, x_test)
    # The Keras stream of a few held-out clips, the files' reference: it
    # equals the offline model after its warm-up.
    count = 2 if args.smoke else 4
    want, _ = cvk.streaming.run_stream(stream, clips[:count])
    want = want[:, warmup:]  # the warm-up steps' outputs are discarded
    offline = keras.ops.convert_to_numpy(model(x_test[:count]))
    scale = np.abs(want).max()
    print(
        f"\nstream: {len(stream.inputs) - 1} state tensors "
        f"({state_bytes(stream) / 1024:.1f} KiB), chunk "
        f"{stream.chunk_shape}, {warmup} warm-up step(s); Keras stream vs "
        "offline model after the warm-up: max rel error "
        f"{np.abs(want - offline).max() / scale:.2e}"
    )
    calibration = None
    rows = []
    modes = args.modes if modes is None else modes
    modes = ["float32"] + [m for m in modes if m != "float32"]
    name = "_" + label.strip().lower() if label else ""
    for mode in modes:
        suffix = "" if mode == "float32" else f"_{mode}"
        path = os.path.join(
            args.output, f"music_classifier{name}_stream{suffix}.tflite"
        )
        quantization = MODES[mode]
        calibrated = quantization in ("int8", "full_int8", "int16x8")
        if calibrated and calibration is None:
            # Every step of 128 training clips (as the offline table's
            # calibration), with the states they carry.
            calibration = cvk.streaming.calibration_data(
                stream, stream_chunks(stream, x[: 4 if args.smoke else 128])
            )
        try:
            cvk.export.export_tflite(
                stream,
                path,
                quantization=quantization,
                representative_data=calibration if calibrated else None,
                batch_size=1,
            )
        except (RuntimeError, ValueError) as error:
            first = (str(error).strip().splitlines() or ["?"])[0]
            rows.append(dict(mode=label + mode, error=first[:200]))
            continue
        runner = cvk.export.TFLiteStream(path, num_threads=1)
        got = np.stack([run_stream_file(runner, c)[0] for c in clips[:count]])
        error = float(np.abs(got[:, warmup:] - want).max() / scale)
        metric = cvk.metrics.MicroAveragedPrecision()
        seconds = []
        for clip, labels in zip(clips, y_test):
            logits, times = run_stream_file(runner, clip)
            metric.update_state(labels[None], logits[None, warmup:])
            seconds.append(times)
        ap = float(metric.result())
        rows.append(
            dict(
                mode=label + mode,
                path=path,
                size_kib=os.path.getsize(path) / 1024,
                error=error,
                ap=ap,
                change=round(100 * (ap - keras_ap), 2) + 0.0,
                hop_ms=1000 * float(np.median(np.concatenate(seconds))),
            )
        )
    return rows, stream


def state_bytes(stream):
    """The bytes of one stream's state (batch 1)."""
    return sum(s.nbytes for s in stream.initial_state(1))


def format_stream_modes(rows):
    lines = [
        "| mode | file (KiB) | max rel error vs Keras stream (after the "
        "warm-up) | held-out AP "
        "(LiteRT, streamed) | vs Keras offline (AP points) | ms per hop "
        "(median, 1 thread) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        if isinstance(r["error"], str):
            lines.append(f"| {r['mode']} | export failed: {r['error']} |")
            continue
        lines.append(
            f"| {r['mode']} | {r['size_kib']:.0f} | {r['error']:.2e} | "
            f"{r['ap']:.3f} | {r['change']:+.2f} | {r['hop_ms']:.3f} |"
        )
    return "\n".join(lines)


def describe_stream(stream, stft, sample_rate, lowest_note, window):
    """What the streaming waveform file takes and gives, for
    `transcribe.py --stream` (and an app)."""
    return dict(
        input="waveform",
        stream=True,
        sample_rate=sample_rate,
        # One step: `chunk` float32 (1, frame_step) samples in.
        chunk=stft.frame_step,
        frame_step=stft.frame_step,
        fft_length=stft.fft_length,
        # Step k gives frame k - warmup_steps, which covers the samples
        # [f * frame_step, f * frame_step + fft_length), centred on
        # first_centre + f * frame_step.
        warmup_steps=stream.warmup_steps,
        first_centre=stft.fft_length // 2,
        sliding_window=window,
        lowest_note=lowest_note,
        notes=int(stream.outputs[0].shape[-1]),
        inputs=[t.name for t in stream.inputs],
        outputs="output_0: the frame's note logits (1, 1, notes), "
        "probability sigmoid(logit); output_1...: the next state, in the "
        "inputs' order after chunk",
    )


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
        sliding_window=args.streaming,
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
    stripped = None
    if args.qat is not None:
        rows, by_seed, stripped = qat_runs(
            model, args, x, y, x_test, y_test, ap
        )
        table = format_modes(rows)
        mode = rows[-1]["mode"].split()[-1]
        seeds = seeds_summary(by_seed, f"{mode} files, held-out AP", ap)
        print(
            f"\nAfter {args.qat} more epoch(s), with and without "
            f"quantization-aware training, held-out AP on LiteRT (vs the "
            f"float model's {ap:.3f}):\n{table}\n\n{seeds}"
        )
        with open(os.path.join(args.output, "qat_modes.md"), "w") as f:
            f.write(f"{table}\n\n{seeds}\n")
    if args.streaming is not None:
        rows, stream = streaming_files(model, args, x, x_test, y_test, ap)
        if stripped is not None:
            # The QAT weights streamed: the stream is built from the float
            # model (to_streaming knows the library's layers, not their
            # wrappers) and calibrated as any stream.
            qat_rows, _ = streaming_files(
                stripped, args, x, x_test, y_test, ap, ["full_int8"], "QAT "
            )
            rows += qat_rows[1:]  # its float32 file: the QAT weights' own
        table = format_stream_modes(rows)
        print(f"\nStreaming files, one hop a step on LiteRT:\n{table}")
        with open(os.path.join(args.output, "stream_modes.md"), "w") as f:
            f.write(table + "\n")
        if stft is not None:
            description = os.path.join(
                args.output, "music_classifier_stream.json"
            )
            with open(description, "w") as f:
                json.dump(
                    describe_stream(
                        stream, stft, **audio, window=args.streaming
                    ),
                    f,
                    indent=2,
                )
            print(
                f"{description}: what the streaming file takes; the "
                f"algorithmic latency of a frame is its span, "
                f"{1000 * stft.fft_length / audio['sample_rate']:.0f} ms. "
                "Transcribe a WAV file hop by hop:\n  python "
                "examples/transcribe.py AUDIO.wav --stream --model "
                f"{rows[0].get('path')}"
            )

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
