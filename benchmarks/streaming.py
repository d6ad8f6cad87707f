"""Streaming on LiteRT, one thread: a hop through the streaming file against
re-running the offline window every hop.

For each size and TFLite mode, the classifier
`music_classifier(..., stft=ComplexSTFT(..., center=False),
sliding_window=W)` (untrained, random weights: the latency does not depend
on them) is exported twice with `batch_size=1`:

- `stream`: `cvattn_keras.streaming.to_streaming(model)`, inputs `[chunk
  (1, frame_step), *state]`, outputs `[notes of one frame, *state]`;
- `offline`: the model itself on a window of W frames
  (`waveform_length(stft, W)` samples), what an app without streaming
  re-runs at every hop to get the newest frame's notes.

The calibrated modes (int8, full_int8, int16x8) calibrate the stream on
`streaming.calibration_data(stream, chunks)` (the states a stream carries,
over random audio: every step of `--calibration-streams` streams of
`warmup_steps + 2 W` hops, every `k`-th step kept) and the offline file on
random windows. A mode that fails to convert (or to load) is a row with
its error.

Columns: `state (B)` is the sum of the streaming file's state inputs'
bytes, each in the file's dtype; `stream (ms)` and `offline (ms)` are
LiteRT's `Invoke` alone (the inputs set before the clock starts: what a
C++ or Kotlin app pays), the median over `--repeats` rounds that time
the two files in turn (so that load from other jobs hits both alike);
`ratio` is the median of the per-round ratios stream / offline (goal:
at most 1/16 = 0.0625 at the paper's size); `RTF` is `stream` / the
hop's duration (compute per hop / audio per hop), `offline RTF` the same
for re-running the window every hop (above 1: it cannot keep up);
`step (ms)` is `TFLiteStream.step` from Python (the state quantized in
and dequantized out as an app does, plus the signature runner's
overhead; marked `*` where `TFLiteStream` failed and the script stepped
the file through the interpreter's tensors instead,
`_litert_stream.Stepper`); `err` is the streaming file's outputs
against the Keras offline model's on the same audio (max |difference|
/ max |Keras|, over the W frames after the warm-up; the JSON's
`err_median` takes the median frame's max |difference| instead: in the
calibrated modes one early frame can be the worst by far), `offline err`
the offline file's on that window (what the mode costs without
streaming), and `export (s)` the two conversions.

Sizes (`--sizes`):

- `example`: examples/train_music.py's "small" architecture (E = 32, 4
  heads, 2 layers, the three-block front end, 24 notes) behind its
  `datasets.synthetic_music_stft(128)` (`ComplexSTFT(256, 256,
  center=False)`, 128 bins) at 4 kHz: a hop of 64 ms, W = 32 frames
  (the example's window of 8,192 samples);
- `paper`: the builders' defaults (E = 320, 8 heads, 6 layers, the
  five-block front end over 2048 bins, 128 notes) behind MusicNet's
  features (`ComplexSTFT(4096, 512, window="rectangular", center=False,
  bins=(0, 2048))`) at 11,025 Hz: a hop of 46.4 ms, W = 64 frames;
- `smoke`: a tiny classifier (`--smoke`: seconds, for the tests).

Run:  python benchmarks/streaming.py [--sizes example,paper]
          [--modes float32,float16,dynamic_int8,int8,full_int8,int16x8]
          [--repeats 10] [--json PATH] [--smoke]
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

# First, before keras imports TensorFlow: it filters TensorFlow's
# start-up lines (cvattn_keras/_startup.py).
import cvattn_keras  # noqa: E402, F401

# isort: split

import keras  # noqa: E402
import numpy as np  # noqa: E402

import cvattn_keras as cvk  # noqa: E402
from cvattn_keras.layers import ComplexSTFT  # noqa: E402

# isort: split
from _litert_stream import Stepper  # noqa: E402
from _litert_stream import error_text  # noqa: E402
from _litert_stream import from_file  # noqa: E402

MODES = ("float32", "float16", "dynamic_int8", "int8", "full_int8", "int16x8")
CALIBRATED = ("int8", "full_int8", "int16x8")
GOAL = 1 / 16

# examples/train_music.py's "small" architecture and its "tiny" one.
EXAMPLE = dict(
    notes=24,
    embed_dim=32,
    num_heads=4,
    num_layers=2,
    head_dim=64,
    frontend_filters=(8, 16, 16),
    frontend_kernel_sizes=(6, 3, 3),
)
TINY = dict(
    notes=8,
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(4, 8),
    frontend_kernel_sizes=(6, 3),
)


def _sizes():
    """name -> (the STFT maker, the classifier's kwargs, sample rate, W)."""
    return {
        "smoke": (
            lambda: ComplexSTFT(64, 32, center=False, bins=(0, 32)),
            TINY,
            4000,
            8,
        ),
        "example": (
            lambda: cvk.datasets.synthetic_music_stft(128),
            EXAMPLE,
            4000,
            32,
        ),
        "paper": (
            lambda: ComplexSTFT(
                4096,
                512,
                window="rectangular",
                center=False,
                bins=(0, 2048),
            ),
            {},
            11025,
            64,
        ),
    }


class _Skipped(Exception):
    pass


def _quantization(mode):
    return None if mode == "float32" else mode


def _export(model, path, mode, calibration):
    start = time.perf_counter()
    cvk.export.export_tflite(
        model,
        path,
        quantization=_quantization(mode),
        representative_data=calibration if mode in CALIBRATED else None,
        num_calibration_samples=len(calibration[0]),
        batch_size=1,
        overwrite=True,
    )
    return time.perf_counter() - start


def _state_bytes(path):
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=path).get_signature_runner()
    return sum(
        int(np.prod(detail["shape"])) * np.dtype(detail["dtype"]).itemsize
        for name, detail in runner.get_input_details().items()
        if name != "chunk"
    )


def _offline_runner(path, window):
    """The offline file's signature runner, its input set to `window`."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=path, num_threads=1).get_signature_runner()
    ((name, detail),) = runner.get_input_details().items()
    x = window
    dtype = np.dtype(detail["dtype"])
    if np.issubdtype(dtype, np.integer):
        scale, zero_point = detail["quantization"]
        info = np.iinfo(dtype)
        x = np.clip(np.round(x / scale) + zero_point, info.min, info.max)
    # Sets the input (XNNPACK packs the weights on the first run).
    ((out, value),) = runner(**{name: x.astype(dtype)}).items()
    return runner, from_file(value, runner.get_output_details()[out])


def _invoke_seconds(runner, count):
    """Seconds of `count` invocations on the inputs last set, each."""
    wrapper, index = runner._interpreter_wrapper, runner._subgraph_index
    start = time.perf_counter()
    for _ in range(count):
        wrapper.Invoke(index)
    return (time.perf_counter() - start) / count


def _relative(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _time_pair(stream_runner, offline_runner, repeats):
    """Median seconds of an invocation of each, and the median of the
    per-round ratios: rounds alternate the two files."""
    # Each round runs each file for about 20 ms (at least once).
    first_s = _invoke_seconds(stream_runner, 1)
    first_o = _invoke_seconds(offline_runner, 1)
    count_s = max(1, min(200, int(0.02 / max(first_s, 1e-6))))
    count_o = max(1, min(50, int(0.02 / max(first_o, 1e-6))))
    streams, offlines, ratios = [], [], []
    for _ in range(repeats):
        s = _invoke_seconds(stream_runner, count_s)
        o = _invoke_seconds(offline_runner, count_o)
        streams.append(s)
        offlines.append(o)
        ratios.append(s / o)
    return (
        statistics.median(streams),
        statistics.median(offlines),
        statistics.median(ratios),
    )


def benchmark_size(size, modes, args, directory):
    make_stft, kwargs, rate, window = _sizes()[size]
    keras.utils.set_random_seed(0)
    stft = make_stft()
    model = cvk.models.music_classifier(
        frames=window, stft=stft, sliding_window=window, **kwargs
    )
    start = time.perf_counter()
    stream = cvk.streaming.to_streaming(model)
    hop = stft.frame_step
    hop_s = hop / rate
    warmup = stream.warmup_steps
    samples = cvk.models.waveform_length(stft, window)
    rng = np.random.default_rng(0)
    # The audio of the accuracy check: warm-up hops then W frames, the
    # offline window's samples exactly when frame_step divides fft_length.
    audio = (0.1 * rng.standard_normal((1, (warmup + window) * hop))).astype(
        "float32"
    )
    if stft.fft_length % hop == 0:
        assert audio.shape[1] == samples, (audio.shape, samples)
    keras_out = keras.ops.convert_to_numpy(model(audio[:, :samples]))
    # Calibration: streams of random audio, every step a sample.
    steps = warmup + 2 * window
    chunks = (
        0.1 * rng.standard_normal((args.calibration_streams, steps, hop))
    ).astype("float32")
    stream_calibration = cvk.streaming.calibration_data(stream, chunks)
    total = len(stream_calibration[0])
    keep = np.unique(
        np.linspace(0, total - 1, min(total, args.calibration_samples))
        .round()
        .astype(int)
    )
    stream_calibration = [x[keep] for x in stream_calibration]
    offline_calibration = [
        (0.1 * rng.standard_normal((args.calibration_samples, samples))).astype(
            "float32"
        )
    ]
    prepare_s = time.perf_counter() - start
    print(
        f"{size}: W = {window} frames, hop {hop} samples at {rate} Hz "
        f"({1e3 * hop_s:.1f} ms), warm-up {warmup} steps, "
        f"{model.count_params():,} parameters, "
        f"{len(stream.inputs) - 1} state tensors; stream, calibration data "
        f"({len(keep)} stream / {args.calibration_samples} offline samples) "
        f"in {prepare_s:.0f} s",
        flush=True,
    )
    print(HEADER)
    print("| --- " * 16 + "|", flush=True)
    rows = []
    for mode in modes:
        row = dict(size=size, mode=mode, window=window, hop_ms=1e3 * hop_s)
        stream_path = os.path.join(directory, f"{size}-{mode}-stream.tflite")
        offline_path = os.path.join(directory, f"{size}-{mode}-offline.tflite")
        try:
            row["export_stream_s"] = _export(
                stream, stream_path, mode, stream_calibration
            )
        except Exception as error:  # noqa: BLE001 (a row, not a crash)
            row["error"] = "stream: " + error_text(error)
        # Without a streaming file there is no ratio: the offline file
        # (minutes at the paper's size in the calibrated modes) is skipped.
        try:
            if "error" in row:
                raise _Skipped()
            row["export_offline_s"] = _export(
                model, offline_path, mode, offline_calibration
            )
        except _Skipped:
            pass
        except Exception as error:  # noqa: BLE001
            row["error"] = (
                row.get("error", "") + " offline: " + error_text(error)
            ).strip()
        if "error" not in row:
            try:
                row.update(
                    _measure(
                        stream_path,
                        offline_path,
                        audio,
                        samples,
                        keras_out,
                        warmup,
                        hop,
                        hop_s,
                        args.repeats,
                    )
                )
            except Exception as error:  # noqa: BLE001
                row["error"] = "LiteRT: " + error_text(error)
        for path in (stream_path, offline_path):
            if os.path.exists(path):
                os.remove(path)
        rows.append(row)
        _print_row(row)
    failed = {
        r["tflitestream_error"] for r in rows if "tflitestream_error" in r
    }
    for error in sorted(failed):
        print(
            f"* TFLiteStream failed ({error}): stepped through the "
            "interpreter's tensors instead (_litert_stream.Stepper)"
        )
    return rows


def _run(runner, audio, hop):
    """The runner's outputs over `audio`'s hops, and each step's seconds."""
    outputs, step_times = [], []
    for t in range(audio.shape[1] // hop):
        chunk = audio[:, t * hop : (t + 1) * hop]
        start = time.perf_counter()
        out = runner.step(chunk)
        step_times.append(time.perf_counter() - start)
        outputs.append(np.asarray(out)[:, 0])
    return np.stack(outputs, axis=1), step_times


def _measure(
    stream_path,
    offline_path,
    audio,
    samples,
    keras_out,
    warmup,
    hop,
    hop_s,
    repeats,
):
    measured = {}
    try:
        runner = cvk.export.TFLiteStream(stream_path, num_threads=1)
        streamed, step_times = _run(runner, audio, hop)
    except ValueError as error:
        measured["tflitestream_error"] = error_text(error)
        runner = Stepper(stream_path)
        streamed, step_times = _run(runner, audio, hop)
    streamed = streamed[:, warmup:]
    # The stream's signature runner holds the last step's inputs (full
    # buffers): invoking it again times a steady-state hop.
    stream_runner = runner._runner
    offline_runner, offline_out = _offline_runner(
        offline_path, audio[:, :samples]
    )
    stream_s, offline_s, ratio = _time_pair(
        stream_runner, offline_runner, repeats
    )
    return dict(
        **measured,
        state_bytes=_state_bytes(stream_path),
        stream_mb=os.path.getsize(stream_path) / 1e6,
        offline_mb=os.path.getsize(offline_path) / 1e6,
        stream_ms=1e3 * stream_s,
        offline_ms=1e3 * offline_s,
        ratio=ratio,
        rtf=stream_s / hop_s,
        offline_rtf=offline_s / hop_s,
        step_ms=1e3 * statistics.median(step_times[warmup:]),
        err=_relative(streamed, keras_out),
        # The median frame's error (in the JSON only): in the calibrated
        # modes the worst frame can be one early frame.
        err_median=float(
            np.median(np.abs(streamed - keras_out).max(axis=-1))
            / np.max(np.abs(keras_out))
        ),
        offline_err=_relative(offline_out, keras_out),
    )


HEADER = (
    "| size | mode | W | hop (ms) | state (B) | stream (ms) | offline (ms) "
    "| ratio | goal <= 1/16 | RTF | offline RTF | step (ms) | err "
    "| offline err "
    "| files (MB) | export (s) |"
)


def _ratio(ratio):
    return f"{ratio:.3f} (1/{1 / ratio:.0f})" if ratio < 1 else f"{ratio:.2f}"


def _print_row(row):
    lead = f"| {row['size']} | {row['mode']} | {row['window']} "
    lead += f"| {row['hop_ms']:.1f} "
    if "error" in row:
        print(
            lead + f"| failed: {row['error']} | | | | | | | | | | | |",
            flush=True,
        )
        return
    met = "yes" if row["ratio"] <= GOAL else "no"
    print(
        lead + f"| {row['state_bytes']:,} | {row['stream_ms']:.3g} "
        f"| {row['offline_ms']:.3g} | {_ratio(row['ratio'])} | {met} "
        f"| {row['rtf']:.3g} "
        f"| {row['offline_rtf']:.3g} | {row['step_ms']:.3g}"
        f"{' *' if 'tflitestream_error' in row else ''} "
        f"| {row['err']:.1e} | {row['offline_err']:.1e} "
        f"| {row['stream_mb']:.2f} / "
        f"{row['offline_mb']:.2f} | {row['export_stream_s']:.0f} / "
        f"{row['export_offline_s']:.0f} |",
        flush=True,
    )


def _list(text, allowed, what):
    items = [item for item in text.split(",") if item]
    unknown = sorted(set(items) - set(allowed))
    if unknown or not items:
        raise SystemExit(
            f"unknown {what} {unknown}; choose from {list(allowed)}"
        )
    return items


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="example,paper")
    parser.add_argument(
        "--modes",
        default=None,
        help=f"comma-separated, of {','.join(MODES)} (default: all; "
        "float32 with --smoke)",
    )
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--calibration-streams", type=int, default=2)
    parser.add_argument("--calibration-samples", type=int, default=32)
    parser.add_argument("--json", default=None, help="write results here")
    parser.add_argument(
        "--smoke", action="store_true", help="the tiny size only: seconds"
    )
    args = parser.parse_args(argv)
    sizes = _list(args.sizes, _sizes(), "sizes")
    if args.modes is None:
        args.modes = "float32" if args.smoke else ",".join(MODES)
    modes = _list(args.modes, MODES, "modes")
    if args.smoke:
        sizes = ["smoke"]
        args.repeats = min(args.repeats, 3)
        args.calibration_streams = 1
        args.calibration_samples = min(args.calibration_samples, 8)
    results = dict(
        machine=platform.processor() or platform.machine(),
        cpus=os.cpu_count(),
        command=" ".join(["python", "benchmarks/streaming.py", *sys.argv[1:]])
        if argv is None
        else " ".join(["python", "benchmarks/streaming.py", *argv]),
        repeats=args.repeats,
        rows=[],
    )
    start = time.perf_counter()
    print(
        "Streaming against re-running the offline window every hop: "
        "LiteRT, 1 thread, batch 1, untrained weights "
        f"(median of {args.repeats} rounds):",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as directory:
        for size in sizes:
            results["rows"] += benchmark_size(size, modes, args, directory)
            print(flush=True)
    results["seconds"] = time.perf_counter() - start
    print(f"{results['seconds']:.0f} s in all")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
