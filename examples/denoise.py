"""Speech enhancement, live: a complex-mask denoiser trained on recorded
speech, scored as the field scores it, and streamed hop by hop on LiteRT.

The data: `cvattn_keras.datasets.noisy_speech`, 2-s mixtures at 16 kHz of
the studio prompts and codec2 speech that Debian ships (`apt-get install
asterisk-core-sounds-en-g722 asterisk-core-sounds-es-g722
asterisk-core-sounds-fr-g722 codec2-examples asterisk-moh-opsound-wav`)
with music, babble, coloured noise, hum and bursts, some through a
simulated room, at SNRs from -5 to 20 dB; the test split's prompts,
speakers and music track are not in the training split.

The models (`--models`), each trained alike (Adam, cosine decay, batches
of 16, `models.SpeechEnhancementLoss`) for `--seeds` seeds on the same
data:

- `complex`: `models.speech_enhancer()`: STFT (32-ms Hann frames, 16-ms
  hops, not centred) -> compressed spectra -> two causal CAtt encoders
  over the last 32 frames with rotary positions -> a bounded complex
  ratio mask on the noisy spectra -> inverse STFT. It streams.
- `magnitude`: the same model with the mask's modulus alone (the noisy
  phase kept): the same weights and parameter count.
- `real`: `models.real_speech_enhancer()`: real layers on `[Re | Im]`
  (the same window and rotary positions) writing the same complex mask,
  within 5% of the complex model's parameter count.

Scored on the test split offline (the waveform padded by a frame at each
end, so that the inverse STFT's partial first and last windows fall on
the padding): SI-SDR (dB), wide-band PESQ, STOI and DNSMOS P.835 OVRL
(on the first `--dnsmos-examples` test clips of the first seed: a DNSMOS
call costs about a second), per input SNR band and overall, mean +-
sample std over seeds, and the paired differences (complex - magnitude,
complex - real) by seed with 95% t intervals (over training seeds, on one
draw of the test mixtures). Also the clean test speech passed through the
complex model (SI-SDR against itself: what the model does to speech
without noise).

Live: the first seed's complex model becomes a stream
(`streaming.to_streaming`: a hop of 256 samples in, 256 enhanced samples
out, 32 ms of algorithmic latency), exported in `--modes` (float32,
dynamic_int8, full_int8 calibrated on training hops; int16x8 does not
convert: the modulus has no int16 kernels) and run hop by hop on LiteRT
over the test mixtures, scored the same way.

Written to `--output` (default `examples/output/denoise`): the trained
`speech_enhancer.keras`, `speech_enhancer_stream.tflite` (float32) and
`speech_enhancer_stream_<mode>.tflite`, `denoise.md` (the tables),
`denoise.json` (every number) and `denoise.png` (noisy, enhanced and clean
spectrograms of one test clip). Then `python examples/enhance.py
NOISY.wav --model OUTPUT/speech_enhancer_stream.tflite --output OUT.wav`
enhances a file. Needs the `speech` extra (`pip install
".[examples,speech]"`).

Run:  python examples/denoise.py [--output DIR] [--smoke] [--seeds 5]
          [--epochs 12] [--train-examples 1000] [--test-examples 100]
          [--models complex,magnitude,real]
          [--modes float32,dynamic_int8,full_int8] [--dnsmos-examples 20]
"""

import argparse
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
from _qat import fine_tuned_copy  # noqa: E402
from _qat import seeds_summary  # noqa: E402

MODELS = ("complex", "magnitude", "real")
MODES = {
    "float32": None,
    "float16": "float16",
    "dynamic_int8": "dynamic_int8",
    "full_int8": "full_int8",
}
SNR_BANDS = ((-5, 0), (0, 5), (5, 10), (10, 15), (15, 20))
METRICS = ("si_sdr", "pesq", "stoi")
PAIRS = (("complex", "magnitude"), ("complex", "real"))
SAMPLE_RATE = 16000


# ----------------------------------------------------------------------
# Arguments.
# ----------------------------------------------------------------------


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    positive = arguments.positive_int
    parser.add_argument("--seeds", type=positive, default=5)
    parser.add_argument("--epochs", type=positive, default=12)
    parser.add_argument("--train-examples", type=positive, default=1000)
    parser.add_argument("--test-examples", type=positive, default=100)
    parser.add_argument("--batch-size", type=positive, default=16)
    parser.add_argument(
        "--learning-rate", type=arguments.positive_float, default=2e-3
    )
    parser.add_argument(
        "--models", type=arguments.names(MODELS), default=",".join(MODELS)
    )
    parser.add_argument(
        "--modes",
        type=arguments.names(MODES),
        default="float32,dynamic_int8,full_int8",
    )
    parser.add_argument(
        "--dnsmos-examples",
        type=arguments.non_negative_int,
        default=20,
        help="test clips scored by DNSMOS (about a second each), of the "
        "first seed; 0 leaves DNSMOS out",
    )
    parser.add_argument(
        "--data-seed", type=arguments.non_negative_int, default=0
    )
    parser.add_argument(
        "--output",
        type=arguments.output_folder,
        default=os.path.join("examples", "output", "denoise"),
    )
    parser.add_argument(
        "--qat",
        type=positive,
        default=None,
        metavar="EPOCHS",
        help="after the streams, EPOCHS more of the first complex model's "
        "training at a tenth of the learning rate, with quantization-aware "
        "training (cvattn_keras.quantization) and, the control, without; "
        "each one's full_int8 stream file, scored hop by hop",
    )
    parser.add_argument(
        "--qat-seeds",
        type=positive,
        default=1,
        metavar="N",
        help="with --qat: both fine-tunings over N seeds: each arm's SI-SDR "
        "and PESQ, mean +- std, and the paired differences (default 1)",
    )
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.qat_seeds != 1 and args.qat is None:
        parser.error("--qat-seeds goes with --qat")
    if args.qat is not None and "complex" not in args.models:
        parser.error(
            "--qat fine-tunes the first complex model: --models needs "
            f"complex. Received: --models {','.join(args.models)}"
        )
    if args.smoke:
        args.seeds, args.epochs = 2, 1
        args.train_examples, args.test_examples = 8, 2
        args.dnsmos_examples = min(args.dnsmos_examples, 1)
    return args


# ----------------------------------------------------------------------
# Models, training and enhancement.
# ----------------------------------------------------------------------


def build(name, smoke):
    size = dict(embed_dim=8, num_layers=1, sliding_window=8) if smoke else {}
    if name == "real":
        size = {k: v for k, v in size.items() if k != "embed_dim"}
        if smoke:
            size["width"] = 8  # within 5% of the smoke complex model
        return cvk.models.real_speech_enhancer(**size)
    return cvk.models.speech_enhancer(mask=name, **size)


def train(model, data, args):
    steps = args.epochs * math.ceil(len(data.noisy) / args.batch_size)
    schedule = keras.optimizers.schedules.CosineDecay(args.learning_rate, steps)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, clipnorm=1.0),
        loss=cvk.models.SpeechEnhancementLoss(),
        # --smoke: eagerly, where the XLA compiles of a few batches' steps
        # would take most of the run.
        jit_compile=not args.smoke,
        run_eagerly=args.smoke,
    )
    start = time.perf_counter()
    model.fit(
        data.noisy,
        data.clean,
        batch_size=args.batch_size,
        epochs=args.epochs,
        shuffle=True,
        verbose=0,
    )
    return time.perf_counter() - start


def frame_length(model):
    return model.get_layer("stft").frame_length


def enhance(model, noisy):
    """The model on whole clips, padded by a frame at each end (where the
    inverse STFT's partial windows then fall) and cropped back: the
    enhanced clips, aligned with `noisy`."""
    pad = frame_length(model)
    padded = np.pad(noisy, ((0, 0), (pad, pad)))
    out = model.predict(padded, batch_size=32, verbose=0)
    return np.asarray(out)[:, pad : pad + noisy.shape[1]]


def stream_hops(noisy, frame_step, frame_length):
    """`noisy` as a stream's hops `(B, steps, frame_step)`: a frame of
    zeros after it, so that its last samples come out."""
    padded = np.pad(noisy, ((0, 0), (0, frame_length)))
    return padded.reshape(noisy.shape[0], -1, frame_step)


def run_file(path, noisy, frame_step, frame_length, warmup):
    """A streaming `.tflite` file hop by hop over each clip (one stream,
    batch 1, as a device runs it): the enhanced clips, aligned with
    `noisy` (the warm-up steps and the frame of delay removed), and the
    mean seconds a hop took."""
    runner = cvk.export.TFLiteStream(path, num_threads=1)
    hops = stream_hops(noisy, frame_step, frame_length)
    out, seconds = [], 0.0
    for clip in hops:
        runner.reset()
        start = time.perf_counter()
        steps = runner.run(clip[:, None, :])
        seconds += time.perf_counter() - start
        out.append(np.asarray(steps).reshape(-1))
    skip = warmup * frame_step
    enhanced = np.stack(out)[:, skip : skip + noisy.shape[1]]
    return enhanced, seconds / hops.shape[0] / hops.shape[1]


# ----------------------------------------------------------------------
# Scores.
# ----------------------------------------------------------------------


def scores(clean, estimate, snr, dnsmos_examples, kinds=None):
    """Per-clip SI-SDR, PESQ and STOI, their means per SNR band, per
    noise kind (`kinds`, one per clip) and overall, and DNSMOS OVRL over
    the first `dnsmos_examples` clips."""
    m = cvk.metrics
    per_clip = {
        "si_sdr": m.si_sdr(clean, estimate),
        "pesq": m.pesq(clean, estimate, SAMPLE_RATE),
        "stoi": np.array([_stoi(c, e) for c, e in zip(clean, estimate)]),
    }
    result = {k: _mean(v) for k, v in per_clip.items()}
    result["stoi_clips"] = int(np.isfinite(per_clip["stoi"]).sum())
    result["bands"] = {}
    for low, high in SNR_BANDS:
        inside = (snr >= low) & (snr < high if high < 20 else snr <= high)
        if inside.any():
            result["bands"][f"{low}..{high}"] = {
                k: _mean(v[inside]) for k, v in per_clip.items()
            }
    if kinds is not None:
        kinds = np.asarray(kinds)
        result["kinds"] = {
            kind: {k: _mean(v[kinds == kind]) for k, v in per_clip.items()}
            for kind in sorted(set(kinds.tolist()))
        }
    if dnsmos_examples:
        peak = np.abs(estimate[:dnsmos_examples]).max(axis=1, keepdims=True)
        clips = estimate[:dnsmos_examples] / np.maximum(peak, 1.0)
        result["ovrl"] = float(np.mean(m.dnsmos(clips, SAMPLE_RATE)["ovrl"]))
    result["per_clip"] = {
        k: [None if np.isnan(x) else float(x) for x in v]
        for k, v in per_clip.items()
    }
    return result


def _mean(values):
    """The mean of the finite values (NaN, silently, when there are
    none: STOI of clips too short for it)."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else float("nan")


def _stoi(clean, estimate):
    """STOI of one clip, NaN where it is undefined (a short utterance:
    fewer than 30 frames of speech once silence is dropped), left out of
    the means."""
    try:
        return cvk.metrics.stoi(clean, estimate, SAMPLE_RATE)
    except ValueError:
        return float("nan")


def mean_std(values):
    values = np.asarray(values, float)
    if len(values) < 2:
        return f"{values.mean():.3f}"
    return f"{values.mean():.3f} ± {values.std(ddof=1):.3f}"


def paired(ours, theirs):
    """The mean of the differences `ours - theirs` (paired by seed) and
    the half width of its 95% t interval (NaN for one seed)."""
    from scipy import stats

    d = np.asarray(ours, float) - np.asarray(theirs, float)
    if len(d) < 2:
        return float(d.mean()), float("nan")
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return float(d.mean()), float(half)


def interval(mean, half):
    if math.isnan(half):
        return f"{mean:+.3f}"
    return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"


def tables(result):
    """The markdown report: the overall table, the per-band SI-SDR and
    PESQ, and the paired differences."""
    runs, noisy = result["runs"], result["noisy"]
    lines = [
        "| input | SI-SDR (dB) | SI-SDR improvement | PESQ | STOI | "
        "DNSMOS OVRL | trainable parameters |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| noisy | {noisy['si_sdr']:.3f} | | {noisy['pesq']:.3f} | "
        f"{noisy['stoi']:.3f} | {noisy.get('ovrl', float('nan')):.3f} | |",
    ]
    for name, seeds in runs.items():
        cells = [mean_std([s["scores"][k] for s in seeds]) for k in METRICS]
        gain = mean_std(
            [s["scores"]["si_sdr"] - noisy["si_sdr"] for s in seeds]
        )
        ovrl = seeds[0]["scores"].get("ovrl")
        lines.append(
            f"| {name} ({len(seeds)} seeds) | {cells[0]} | {gain} | "
            f"{cells[1]} | {cells[2]} | "
            f"{'' if ovrl is None else f'{ovrl:.3f}'} | "
            f"{seeds[0]['trainable']:,} |"
        )
    for mode, stream in result.get("streams", {}).items():
        s = stream["scores"]
        lines.append(
            f"| complex, seed 0, stream file {mode} (LiteRT, hop by hop) | "
            f"{s['si_sdr']:.3f} | {s['si_sdr'] - noisy['si_sdr']:+.3f} | "
            f"{s['pesq']:.3f} | {s['stoi']:.3f} | "
            f"{s.get('ovrl', float('nan')):.3f} | |"
        )
    lines += [
        "",
        f"STOI over the {noisy['stoi_clips']} of "
        f"{len(noisy['per_clip']['stoi'])} test clips where it is defined "
        "(at least 30 frames of speech).",
        "",
        "SI-SDR (dB) / PESQ by input SNR band (mean over seeds):",
        "",
        "| input | " + " | ".join(f"{b} dB" for b in noisy["bands"]) + " |",
        "| --- |" + " --- |" * len(noisy["bands"]),
    ]

    def band_row(label, score_list):
        cells = []
        for band in noisy["bands"]:
            sdr = np.mean([s["bands"][band]["si_sdr"] for s in score_list])
            pesq = np.mean([s["bands"][band]["pesq"] for s in score_list])
            cells.append(f"{sdr:.2f} / {pesq:.2f}")
        return f"| {label} | " + " | ".join(cells) + " |"

    lines.append(band_row("noisy", [noisy]))
    for name, seeds in runs.items():
        lines.append(band_row(name, [s["scores"] for s in seeds]))
    for mode, stream in result.get("streams", {}).items():
        lines.append(band_row(f"stream {mode}", [stream["scores"]]))
    if "kinds" in noisy:
        kinds = list(noisy["kinds"])
        lines += [
            "",
            "SI-SDR improvement (dB) by noise (mean over seeds; noisy: its "
            "SI-SDR):",
            "",
            "| input | " + " | ".join(kinds) + " |",
            "| --- |" + " --- |" * len(kinds),
            "| noisy | "
            + " | ".join(f"{noisy['kinds'][k]['si_sdr']:.2f}" for k in kinds)
            + " |",
        ]
        for name, seeds in runs.items():
            cells = [
                np.mean([s["scores"]["kinds"][k]["si_sdr"] for s in seeds])
                - noisy["kinds"][k]["si_sdr"]
                for k in kinds
            ]
            lines.append(
                f"| {name} | " + " | ".join(f"{c:+.2f}" for c in cells) + " |"
            )
    lines.append("")
    for ours, theirs in PAIRS:
        if ours not in runs or theirs not in runs:
            continue
        cells = []
        for key in METRICS:
            mean, half = paired(
                [s["scores"][key] for s in runs[ours]],
                [s["scores"][key] for s in runs[theirs]],
            )
            cells.append(f"{key} {interval(mean, half)}")
        lines.append(
            f"Paired difference {ours} minus {theirs}, seed by seed on the "
            f"fixed test mixtures (mean over {len(runs[ours])} seeds [95% "
            "t interval]): " + "; ".join(cells) + "."
        )
    if "passthrough" in result:
        p = result["passthrough"]
        lines.append(
            f"Clean test speech through the complex model: SI-SDR "
            f"{mean_std(p)} dB against itself (mean over clips, seeds)."
        )
    return "\n".join(lines) + "\n"


def figure(path, clean, noisy, enhanced):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    for ax, (title, x) in zip(
        axes,
        (("noisy", noisy), ("enhanced (complex)", enhanced), ("clean", clean)),
    ):
        with np.errstate(divide="ignore"):  # log of digital silence
            ax.specgram(x, NFFT=512, Fs=SAMPLE_RATE, noverlap=384, vmin=-120)
        ax.set_title(title)
        ax.set_ylabel("Hz")
    axes[-1].set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ----------------------------------------------------------------------
# The run.
# ----------------------------------------------------------------------


def export_streams(model, train_data, args, modes=None, name="stream"):
    """The first seed's complex model as streaming files, one per mode
    (`--modes`, or `modes`), `speech_enhancer_{name}[_MODE].tflite`."""
    stream = cvk.streaming.to_streaming(model)
    step = model.get_layer("stft").frame_step
    length = frame_length(model)
    count = min(len(train_data.noisy), 16)
    calibration = cvk.streaming.calibration_data(
        stream, stream_hops(train_data.noisy[:count], step, length)
    )
    files = {}
    for mode in args.modes if modes is None else modes:
        quantization = MODES[mode]
        suffix = "" if quantization is None else f"_{mode}"
        path = os.path.join(
            args.output, f"speech_enhancer_{name}{suffix}.tflite"
        )
        cvk.export.export_tflite(
            stream,
            path,
            quantization=quantization,
            batch_size=1,
            representative_data=calibration if mode == "full_int8" else None,
            overwrite=True,
        )
        files[mode] = path
    return stream, files


def stream_scores(model, stream, path, test, args):
    """A stream file run hop by hop over the test mixtures: its scores,
    size and time a hop."""
    step = model.get_layer("stft").frame_step
    streamed, seconds = run_file(
        path, test.noisy, step, frame_length(model), stream.warmup_steps
    )
    score = scores(
        test.clean, streamed, test.snr, args.dnsmos_examples, test.noise_kind
    )
    return dict(
        file=os.path.basename(path),
        kib=os.path.getsize(path) / 1024,
        hop_ms=1000 * seconds,
        real_time_factor=seconds * SAMPLE_RATE / step,
        scores=score,
    )


def qat_streams(model, train_data, test, args):
    """--qat: `--qat` more epochs of `model` at a tenth of the learning
    rate with quantization-aware training and, the control, without
    (`_qat.fine_tuned_copy`, for each of `--qat-seeds` seeds); each one's
    float model (`quantization.strip` for QAT: a stream is built from the
    library's layers) streamed and exported in full_int8, calibrated as
    the post-training stream file. Returns the first seed's rows
    (`{label: stream_scores}`) and each arm's SI-SDR and PESQ by seed."""
    rows, by_seed = {}, {"si_sdr": {}, "pesq": {}}
    for k in range(args.qat_seeds):
        for label, quantize in (("fine-tuned", False), ("QAT", True)):
            copy = fine_tuned_copy(
                model,
                quantize,
                train_data.noisy[:128],
                compile_args=dict(
                    optimizer=keras.optimizers.Adam(
                        args.learning_rate / 10, clipnorm=1.0
                    ),
                    loss=cvk.models.SpeechEnhancementLoss(),
                    jit_compile=not args.smoke,
                    run_eagerly=args.smoke,
                ),
                fit_args=dict(
                    x=train_data.noisy,
                    y=train_data.clean,
                    batch_size=args.batch_size,
                    epochs=args.qat,
                    shuffle=True,
                ),
                seed=k,
            )
            trained = cvk.quantization.strip(copy) if quantize else copy
            name = f"{'qat' if quantize else 'finetuned'}_stream"
            stream, files = export_streams(
                trained, train_data, args, ["full_int8"], name
            )
            row = stream_scores(trained, stream, files["full_int8"], test, args)
            for key in by_seed:
                by_seed[key].setdefault(label, []).append(row["scores"][key])
            print(
                f"{label} seed {k}: stream full_int8 SI-SDR "
                f"{row['scores']['si_sdr']:.2f} dB, PESQ "
                f"{row['scores']['pesq']:.3f}"
            )
            if k == 0:
                rows[f"{label} {args.qat} epochs, full_int8"] = row
    return rows, by_seed


def qat_report(result):
    """--qat's lines: each arm's full_int8 stream SI-SDR and PESQ over the
    seeds and their paired difference, beside the float32 stream file's
    (the float model; the first complex model offline without it) and
    the post-training full_int8 stream file's."""
    streams = result.get("streams", {})
    base = streams.get("float32", result["runs"]["complex"][0])["scores"]
    post = streams.get("full_int8", {}).get("scores")
    lines = []
    for key, what in (("si_sdr", "SI-SDR (dB)"), ("pesq", "PESQ")):
        also = "" if post is None else (
            f"; the post-training full_int8 stream: {post[key]:.3f}"
        )  # fmt: skip
        lines += ["", seeds_summary(
            result["qat"][key], f"full_int8 stream files, test {what}{also},",
            base[key], digits=3,
        )]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse(argv)
    try:
        train_data = cvk.datasets.noisy_speech(
            "train", num_examples=args.train_examples, seed=args.data_seed
        )
        test = cvk.datasets.noisy_speech(
            "test", num_examples=args.test_examples, seed=args.data_seed
        )
    except (ImportError, FileNotFoundError, ValueError) as error:
        print(f"denoise.py: {error}", file=sys.stderr)
        return 2
    os.makedirs(args.output, exist_ok=True)
    print(
        f"noisy_speech: {len(train_data.noisy)} training and "
        f"{len(test.noisy)} test mixtures of "
        f"{test.noisy.shape[1] / SAMPLE_RATE:g} s, SNR "
        f"{test.snr.min():+.1f}..{test.snr.max():+.1f} dB"
    )
    noisy_scores = scores(
        test.clean,
        test.noisy,
        test.snr,
        args.dnsmos_examples,
        test.noise_kind,
    )
    result = {
        "arguments": {
            k: v for k, v in vars(args).items() if k not in ("output",)
        },
        "noisy": noisy_scores,
        "runs": {name: [] for name in args.models},
        "versions": versions(),
    }
    first_complex = None
    passthrough = []
    for seed in range(args.seeds):
        for name in args.models:
            keras.utils.set_random_seed(seed)
            model = build(name, args.smoke)
            seconds = train(model, train_data, args)
            enhanced = enhance(model, test.noisy)
            dnsmos = args.dnsmos_examples if seed == 0 else 0
            score = scores(
                test.clean, enhanced, test.snr, dnsmos, test.noise_kind
            )
            trainable = int(
                sum(math.prod(w.shape) for w in model.trainable_weights)
            )
            result["runs"][name].append(
                dict(
                    seed=seed,
                    seconds=seconds,
                    trainable=trainable,
                    parameters=int(model.count_params()),
                    scores=score,
                )
            )
            print(
                f"{name} seed {seed}: {seconds:.0f} s, SI-SDR "
                f"{score['si_sdr']:.2f} dB (noisy "
                f"{noisy_scores['si_sdr']:.2f}), PESQ {score['pesq']:.3f} "
                f"(noisy {noisy_scores['pesq']:.3f}), STOI "
                f"{score['stoi']:.3f}"
            )
            if name == "complex":
                passthrough += cvk.metrics.si_sdr(
                    test.clean, enhance(model, test.clean)
                ).tolist()
                if first_complex is None:
                    first_complex = (model, enhanced)
    if passthrough:
        result["passthrough"] = passthrough
    if first_complex is not None:
        model, enhanced = first_complex
        model.save(
            os.path.join(args.output, "speech_enhancer.keras"), overwrite=True
        )
        figure(
            os.path.join(args.output, "denoise.png"),
            test.clean[0],
            test.noisy[0],
            enhanced[0],
        )
        if args.modes:
            stream, files = export_streams(model, train_data, args)
            result["streams"] = {}
            for mode, path in files.items():
                row = stream_scores(model, stream, path, test, args)
                result["streams"][mode] = row
                print(
                    f"stream {mode}: {row['kib']:.0f} KiB, "
                    f"{row['hop_ms']:.2f} ms a hop, SI-SDR "
                    f"{row['scores']['si_sdr']:.2f} dB, PESQ "
                    f"{row['scores']['pesq']:.3f}"
                )
        if args.qat is not None:
            rows, by_seed = qat_streams(model, train_data, test, args)
            result.setdefault("streams", {}).update(rows)
            result["qat"] = by_seed
    report = tables(result)
    if "qat" in result:
        report += qat_report(result)
    with open(os.path.join(args.output, "denoise.md"), "w") as f:
        f.write(report)
    with open(os.path.join(args.output, "denoise.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(report)
    return 0


def versions():
    from importlib import metadata

    out = {}
    for package in (
        "keras",
        "tensorflow",
        "ai-edge-litert",
        "pesq",
        "pystoi",
        "speechmos",
        "onnxruntime",
    ):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = None
    return out


if __name__ == "__main__":
    sys.exit(main())
