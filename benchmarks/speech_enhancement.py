"""The speech enhancer's streaming cost and quality on LiteRT, one thread,
beside GTCRN's published streaming ONNX file on ONNX Runtime.

Our model: `--model PATH.keras` (a trained `speech_enhancer`, e.g. saved
by `examples/denoise.py`), or a freshly initialised `speech_enhancer()`
(the cost does not depend on the weights; its quality columns then say
"untrained"). `cvattn_keras.streaming.to_streaming(model)` is exported
with `batch_size=1` in each mode of `--modes`:

- `float32` (no quantization), `dynamic_int8`;
- `full_int8`, calibrated with `streaming.calibration_data` over
  `--calibration-examples` training mixtures' hops (every step a sample;
  random noise where the speech data set is missing);
- `int16x8`: the modulus has no int16 SQRT/DIV kernels, so it does not
  convert (`FloatFallbackError`): a row "not convertible" with the reason.

Columns (a row per model and mode, and the noisy input's row):

- `params`: trainable / all parameters (all: with the STFT and ISTFT DFT
  kernels, non-trainable; for GTCRN, the float initializers of its ONNX
  file, all of them and those less its fixed ERB filter banks, 192 x 64
  and 64 x 192: BatchNorm is folded into its convolutions there);
- `MAC/s`: multiply-accumulates per second of audio, `macs_per_step x
  sample_rate / frame_step` (62.5 hops/s at 16 kHz). For our model,
  `stream_macs` counts one step's real MACs, as the exported file computes
  them (complex products in the block form, 4 real MACs per complex one):

      STFT          2 * L * F            (the frame times the (L, F) real
                                          and imaginary DFT kernels)
      ComplexDense  4 * d_in * d_out     (each: embedding, per encoder the
                                          query, key, value, output and the
                                          two feed-forward layers, and
                                          mask_dense)
      attention     N * W * (s * H + v * V)  per encoder: the query against
                                          the W keys of the window and the
                                          weighted sum of the W values; s
                                          = 2 for CAtt's Re<q, k> (4 for
                                          the variants that need Im too),
                                          v = 2 for real weights (4 for
                                          complex ones)
      ISTFT         2 * L * F            (the (L, 2F) inverse kernel
                                          times the frame)

  with L the frame length, F = L / 2 + 1 bins, N heads, H and V the key
  and value head widths (complex units) and W the sliding window;
  element-wise work (compression, norms, rotary positions, softmax, the
  mask) is not counted. GTCRN's is the published figure (33.0 MMAC/s);
- `per-hop (ms)`: median / p90 over `--hops` hops after a warm-up of
  LiteRT's `Invoke` alone (the inputs set, the state quantized in and
  dequantized out, outside the clock: what a C++ app pays), one thread;
  for GTCRN ONNX Runtime's `session.run` (intra- and inter-op threads 1,
  its Python feed and fetch included), the STFT and iSTFT in NumPy not
  timed;
- `RTF`: the median / the hop's duration (16 ms);
- `state (B)`: the streaming file's state inputs, size x itemsize; for
  GTCRN its three caches plus the 2 x 256 float32 samples its NumPy STFT
  and overlap-add carry (ours are inside the file);
- `file (KiB)`;
- quality, the means over `--test-examples` mixtures of
  `noisy_speech("test", seed=0)`, each streamed hop by hop from a zero
  state through the file (then `frame_length` zeros, to flush the last
  samples): SI-SDR (dB), PESQ (wide-band), STOI, DNSMOS OVRL (the
  estimate clipped to [-1, 1] first). The output is aligned with clean by
  dropping the warm-up step's hop: a stream's output at step k holds the
  samples of the frame just completed, `frame_length` samples after the
  input's. Its first `frame_length - frame_step` samples are zeros (where
  the offline inverse divides by a partial window). GTCRN's driver
  (`GTCRNStream`, written here from its ONNX file's interface: one frame
  `(1, 257, 1, 2)` of a 512-point STFT with a periodic sqrt-Hann window,
  hop 256, and its caches) has the same latency and alignment.
  `--gtcrn-check MIX ENH` enhances GTCRN's test mixture and reports the
  SI-SDR of ours against their streamed output (their STFT pads the first
  frame by reflection where ours starts from zeros: the ends differ).

Run:  python benchmarks/speech_enhancement.py [--model M.keras]
          [--modes float32,dynamic_int8,full_int8,int16x8] [--hops 500]
          [--test-examples 20] [--gtcrn gtcrn_simple.onnx]
          [--gtcrn-check mix.wav enh_stream.wav] [--json PATH] [--smoke]
"""

import argparse
import importlib.metadata
import json
import math
import os
import platform
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
from cvattn_keras import layers as cl  # noqa: E402

# isort: split
from _litert_stream import Stepper  # noqa: E402
from _litert_stream import error_text  # noqa: E402

MODES = ("float32", "dynamic_int8", "full_int8", "int16x8")
CALIBRATED = ("int8", "full_int8", "int16x8")
SAMPLE_RATE = 16000
WARMUP_HOPS = 50
# The smoke model: a 64-sample frame, 32-sample hop, 8 complex features.
SMOKE = dict(
    frame_length=64,
    frame_step=32,
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    sliding_window=8,
)
GTCRN_MAC_S = 33.0e6  # published (the GTCRN repository's README)
GTCRN_ERB_SHAPES = ((192, 64), (64, 192))
PACKAGES = (
    "cvattn-keras",
    "keras",
    "tensorflow",
    "ai-edge-litert",
    "onnxruntime",
    "numpy",
    "pesq",
    "pystoi",
    "speechmos",
)


# --- multiply-accumulates ---------------------------------------------


def _attention_macs(attention):
    """One query against a full window: `N W (s H + v V)` (see the
    module's docstring)."""
    score = 2 if attention.softmax == "real" else 4
    value = 2 if attention.softmax in ("real", "absonly") else 4
    heads, window = attention.num_heads, attention.sliding_window
    return (
        heads
        * window
        * (score * attention.key_dim + value * attention.value_dim)
    )


def stream_macs(model):
    """Real multiply-accumulates of one streaming step of a
    `speech_enhancer`, `{part: count}` (see the module's docstring),
    derived from the weights' shapes and the attention windows."""
    counts = {}

    def add(part, count):
        counts[part] = counts.get(part, 0) + int(count)

    def walk(layer, prefix):
        if isinstance(layer, (cl.ComplexSTFT, cl.ComplexISTFT)):
            length, bins = layer.weights[0].shape  # (L, F), real part
            add(prefix + layer.name, 2 * length * bins)
            return
        if isinstance(layer, cl.ComplexDense):
            d_in, d_out = layer.weights[0].shape  # kernel_real
            add(prefix + layer.name, 4 * d_in * d_out)
            return
        if isinstance(layer, cl.ComplexMultiHeadAttention):
            add(prefix + layer.name + "/core", _attention_macs(layer))
        for child in layer._flatten_layers(include_self=False, recursive=False):
            walk(child, prefix + layer.name + "/")

    for layer in model.layers:
        walk(layer, "")
    return counts


# --- our stream on LiteRT ---------------------------------------------


def _hop(stepper, samples):
    """One hop `(hop,)` through `stepper`: the hop's output samples."""
    return np.asarray(stepper.step(samples[None]), "float32").reshape(-1)


def _stream_clip(stepper, audio, hop, length, warmup_steps):
    """`stepper` over `audio` `(L,)` from a zero state (then `length`
    zeros), its output aligned with `audio`: `(L,)`."""
    stepper.reset()
    padded = np.concatenate([audio, np.zeros(length, "float32")])
    steps = -(-padded.size // hop)
    padded = np.pad(padded, (0, steps * hop - padded.size))
    out = np.concatenate([_hop(stepper, h) for h in padded.reshape(-1, hop)])
    start = warmup_steps * hop
    return out[start : start + audio.size]


def _latency(seconds, hop_s):
    ms = 1e3 * np.asarray(seconds)
    median = float(np.median(ms))
    return dict(
        hop_ms=1e3 * hop_s,
        latency_ms=median,
        latency_p90_ms=float(np.percentile(ms, 90)),
        rtf=median / (1e3 * hop_s),
    )


# --- GTCRN ------------------------------------------------------------


class GTCRNStream:
    """GTCRN's streaming ONNX file hop by hop on ONNX Runtime (one
    thread), the STFT and overlap-add in NumPy: each hop of 256 samples
    completes a 512-sample frame (the 256 samples before it and the hop,
    zeros before the stream), windowed by a periodic sqrt-Hann window,
    whose 257 bins `(1, 257, 1, 2)` the file enhances with its caches;
    the enhanced frame's inverse, windowed again, is overlap-added and
    the 256 samples complete now are emitted (the window's square sums to
    1 at a hop of half the frame: no division). Step k emits the samples
    of frame k - 1 (256 (k - 1) .. 256 k), as our streams do."""

    n_fft = 512
    hop = 256

    def __init__(self, path):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            path, options, providers=["CPUExecutionProvider"]
        )
        inputs = self.session.get_inputs()
        self._frame = inputs[0].name
        # The caches: inputs after the frame, outputs after the enhanced
        # frame, in the same order.
        self._caches = [(i.name, tuple(i.shape)) for i in inputs[1:]]
        n = np.arange(self.n_fft)
        self.window = np.sqrt(0.5 - 0.5 * np.cos(2 * np.pi * n / self.n_fft))
        self.state_bytes = 4 * (
            sum(math.prod(shape) for _, shape in self._caches)
            + 2 * (self.n_fft - self.hop)
        )
        self.seconds = []
        self.reset()

    def reset(self):
        self.caches = [np.zeros(shape, "float32") for _, shape in self._caches]
        self.samples = np.zeros(self.n_fft - self.hop)
        self.tail = np.zeros(self.n_fft - self.hop)

    def step(self, hop):
        frame = np.concatenate([self.samples, hop])
        self.samples = frame[self.hop :]
        spectrum = np.fft.rfft(frame * self.window)
        feed = {
            self._frame: np.stack([spectrum.real, spectrum.imag], -1)[
                None, :, None, :
            ].astype("float32")
        }
        for (name, _), cache in zip(self._caches, self.caches):
            feed[name] = cache
        start = time.perf_counter()
        enhanced, *self.caches = self.session.run(None, feed)
        self.seconds.append(time.perf_counter() - start)
        bins = enhanced[0, :, 0, 0] + 1j * enhanced[0, :, 0, 1]
        samples = np.fft.irfft(bins, self.n_fft) * self.window
        samples[: self.tail.size] += self.tail
        self.tail = samples[self.hop :]
        return samples[: self.hop].astype("float32")


def _onnx_parameters(path):
    """(all float initializer values, those less the ERB filter banks)."""
    import onnx

    model = onnx.load(path)
    total = erb = 0
    for tensor in model.graph.initializer:
        if tensor.data_type != onnx.TensorProto.FLOAT:
            continue
        count = math.prod(tensor.dims)
        total += count
        if tuple(tensor.dims) in GTCRN_ERB_SHAPES:
            erb += count
    return total - erb, total


def _read_wav(path):
    from scipy.io import wavfile

    rate, data = wavfile.read(path)
    if rate != SAMPLE_RATE:
        raise ValueError(f"{path}: {rate} Hz, not {SAMPLE_RATE}")
    if np.issubdtype(data.dtype, np.integer):
        data = data / float(-np.iinfo(data.dtype).min)
    return np.asarray(data, "float32")


def _gtcrn_check(path, mix_path, enh_path):
    """Our driver's output on GTCRN's test mixture against theirs."""
    runner = GTCRNStream(path)
    mix, theirs = _read_wav(mix_path), _read_wav(enh_path)
    ours = _stream_clip(runner, mix, runner.hop, runner.n_fft, 1)
    ours = ours[: theirs.size]
    inner = slice(runner.n_fft, theirs.size - runner.n_fft)
    return dict(
        mix=mix_path,
        reference=enh_path,
        samples=int(theirs.size),
        si_sdr_db=float(cvk.metrics.si_sdr(theirs, ours)),
        si_sdr_inner_db=float(cvk.metrics.si_sdr(theirs[inner], ours[inner])),
        max_abs_diff_inner=float(np.max(np.abs(theirs[inner] - ours[inner]))),
    )


# --- quality ----------------------------------------------------------


def _scores(clean, estimates):
    """Means over the clips of SI-SDR, PESQ (wb), STOI and DNSMOS OVRL; a
    metric that fails is `None` with its error in `quality_errors`."""
    row, errors = {}, {}
    metrics = dict(
        si_sdr=lambda: cvk.metrics.si_sdr(clean, estimates),
        pesq=lambda: cvk.metrics.pesq(clean, estimates),
        stoi=lambda: cvk.metrics.stoi(clean, estimates),
        ovrl=lambda: cvk.metrics.dnsmos(np.clip(estimates, -1, 1))["ovrl"],
    )
    for name, metric in metrics.items():
        try:
            row[name] = float(np.mean(metric()))
        except Exception as error:  # noqa: BLE001 (a cell, not a crash)
            row[name] = None
            errors[name] = error_text(error)
    if errors:
        row["quality_errors"] = errors
    return row


def _speech(split, count, seed):
    data = cvk.datasets.noisy_speech(split, num_examples=count, seed=seed)
    return data


# --- the benchmark ----------------------------------------------------


def _model(args):
    if args.model:
        return keras.saving.load_model(args.model, safe_mode=True)
    keras.utils.set_random_seed(0)
    return cvk.models.speech_enhancer(**(SMOKE if args.smoke else {}))


def _transforms(model):
    stft = model.get_layer("stft")
    return stft.fft_length, stft.frame_step


def _calibration_audio(args, notes):
    """Training mixtures `(n, L)`, or random noise where the speech data
    set is missing (noted)."""
    try:
        return _speech("train", args.calibration_examples, 1).noisy
    except (ImportError, ValueError) as error:
        notes.append(
            "calibration and timing on random noise: the speech data set "
            f"is missing ({error_text(error)})"
        )
        rng = np.random.default_rng(1)
        return (0.05 * rng.standard_normal((2, 2 * SAMPLE_RATE))).astype(
            "float32"
        )


def _export(stream, path, mode, calibration):
    start = time.perf_counter()
    cvk.export.export_tflite(
        stream,
        path,
        quantization=None if mode == "float32" else mode,
        representative_data=calibration if mode in CALIBRATED else None,
        num_calibration_samples=len(calibration[0]),
        batch_size=1,
        overwrite=True,
    )
    return time.perf_counter() - start


def _ours(args, model, test, offline, notes, directory):
    length, hop = _transforms(model)
    hop_s = hop / SAMPLE_RATE
    stream = cvk.streaming.to_streaming(model)
    warmup = stream.warmup_steps
    macs = stream_macs(model)
    per_step = sum(macs.values())
    trainable = sum(math.prod(w.shape) for w in model.trainable_weights)
    base = dict(
        model="ours"
        + (f" ({os.path.basename(args.model)})" if args.model else ""),
        trained=bool(args.model),
        params_trainable=int(trainable),
        params_all=int(model.count_params()),
        macs_per_step=per_step,
        macs=macs,
        mac_s=per_step * SAMPLE_RATE / hop,
        frame_length=length,
        frame_step=hop,
    )
    audio = _calibration_audio(args, notes)
    steps = audio.shape[1] // hop
    chunks = audio[:, : steps * hop].reshape(audio.shape[0], steps, hop)
    calibration = None
    if set(args.modes) & set(CALIBRATED):
        calibration = cvk.streaming.calibration_data(stream, chunks)
    timing = np.resize(audio.reshape(-1), (WARMUP_HOPS + args.hops) * hop)
    rows = []
    for mode in args.modes:
        row = dict(base, mode=mode)
        path = os.path.join(directory, f"{mode}.tflite")
        try:
            row["export_s"] = _export(
                stream, path, mode, calibration or [chunks[:, 0]]
            )
        except cvk.export.FloatFallbackError as error:
            row["error"] = "not convertible: " + error_text(error)
        except Exception as error:  # noqa: BLE001 (a row, not a crash)
            row["error"] = "export failed: " + error_text(error)
        if "error" not in row:
            try:
                row.update(
                    _measure(path, timing, hop, hop_s, test, offline, warmup)
                )
                row["file_kib"] = os.path.getsize(path) / 1024
            except Exception as error:  # noqa: BLE001
                row["error"] = "LiteRT: " + error_text(error)
        rows.append(row)
        print(f"  {mode}: {'error' if 'error' in row else 'done'}", flush=True)
    return rows


def _measure(path, timing, hop, hop_s, test, offline, warmup):
    stepper = Stepper(path)
    for chunk in timing.reshape(-1, hop):
        _hop(stepper, chunk)
    measured = dict(
        _latency(stepper.seconds[WARMUP_HOPS:], hop_s),
        hops_timed=len(stepper.seconds) - WARMUP_HOPS,
        state_bytes=stepper.state_bytes,
    )
    if test is not None:
        length = int(test["frame_length"])
        enhanced = np.stack(
            [
                _stream_clip(stepper, clip, hop, length, warmup)
                for clip in test["noisy"]
            ]
        )
        if offline is not None:
            # The stream against the Keras model offline, away from the
            # clip's ends (partial windows).
            inner = slice(length, enhanced.shape[1] - length)
            measured["offline_err"] = float(
                np.max(np.abs(enhanced[:, inner] - offline[:, inner]))
                / np.max(np.abs(offline[:, inner]))
            )
        measured.update(_scores(test["clean"], enhanced))
    return measured


def _gtcrn(args, test):
    runner = GTCRNStream(args.gtcrn)
    hop_s = runner.hop / SAMPLE_RATE
    trainable, total = _onnx_parameters(args.gtcrn)
    rng = np.random.default_rng(2)
    timing = 0.05 * rng.standard_normal((WARMUP_HOPS + args.hops) * 256)
    for chunk in timing.astype("float32").reshape(-1, runner.hop):
        runner.step(chunk)
    row = dict(
        model="GTCRN (gtcrn_simple.onnx)",
        mode="float32 (ORT)",
        trained=True,
        params_trainable=trainable,
        params_all=total,
        mac_s=GTCRN_MAC_S,
        mac_s_published=True,
        **_latency(runner.seconds[WARMUP_HOPS:], hop_s),
        hops_timed=len(runner.seconds) - WARMUP_HOPS,
        state_bytes=runner.state_bytes,
        file_kib=os.path.getsize(args.gtcrn) / 1024,
    )
    if test is not None:
        enhanced = np.stack(
            [
                _stream_clip(runner, clip, runner.hop, runner.n_fft, 1)
                for clip in test["noisy"]
            ]
        )
        row.update(_scores(test["clean"], enhanced))
    return row


HEADER = (
    "| model | mode | params (trainable / all) | MAC/s | per-hop ms "
    "(p50 / p90) | RTF | state (B) | file (KiB) | SI-SDR (dB) | PESQ "
    "| STOI | OVRL |"
)


def _number(value, text):
    return "n/a" if value is None else text.format(value)


def _si(value):
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


def _table_row(row, quality):
    lead = f"| {row['model']} | {row['mode']} "
    if "params_all" in row:
        lead += (
            f"| {row['params_trainable']:,} / {row['params_all']:,} "
            f"| {_si(row['mac_s'])}"
            f"{' (published)' if row.get('mac_s_published') else ''} "
        )
    else:
        lead += "| | "
    if "error" in row:
        return lead + f"| {row['error']} | | | | | | | |"
    if "latency_ms" in row:
        lead += (
            f"| {row['latency_ms']:.3g} / {row['latency_p90_ms']:.3g} "
            f"| {row['rtf']:.3g} | {row['state_bytes']:,} "
            f"| {row['file_kib']:.1f} "
        )
    else:
        lead += "| | | | "
    if not quality:
        return lead + "| untrained | | | |"
    return (
        lead + f"| {_number(row.get('si_sdr'), '{:.2f}')} "
        f"| {_number(row.get('pesq'), '{:.2f}')} "
        f"| {_number(row.get('stoi'), '{:.3f}')} "
        f"| {_number(row.get('ovrl'), '{:.2f}')} |"
    )


def _versions():
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _list(text):
    items = [item for item in text.split(",") if item]
    unknown = sorted(set(items) - set(MODES))
    if unknown or not items:
        raise SystemExit(f"unknown modes {unknown}; choose from {list(MODES)}")
    return items


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a trained .keras")
    parser.add_argument(
        "--modes",
        default=None,
        help=f"comma-separated, of {','.join(MODES)} (default: all; "
        "float32 with --smoke)",
    )
    parser.add_argument("--hops", type=int, default=500, help="timed hops")
    parser.add_argument("--test-examples", type=int, default=20)
    parser.add_argument("--calibration-examples", type=int, default=4)
    parser.add_argument("--gtcrn", default=None, help="gtcrn_simple.onnx")
    parser.add_argument(
        "--gtcrn-check",
        nargs=2,
        metavar=("MIX", "ENH"),
        default=None,
        help="GTCRN's stream/test_wavs/mix.wav and enh_stream.wav: "
        "check the driver against their streamed output",
    )
    parser.add_argument("--json", default=None, help="write results here")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny model, 20 hops, 1 test example, no GTCRN: seconds",
    )
    args = parser.parse_args(argv)
    if args.modes is None:
        args.modes = "float32" if args.smoke else ",".join(MODES)
    args.modes = _list(args.modes)
    if args.smoke:
        args.hops = min(args.hops, 20)
        args.test_examples = min(args.test_examples, 1)
        args.calibration_examples = 1
        args.gtcrn = args.gtcrn_check = None
    command = sys.argv[1:] if argv is None else list(argv)
    results = dict(
        machine=platform.processor() or platform.machine(),
        platform=platform.platform(),
        cpus=os.cpu_count(),
        python=platform.python_version(),
        packages=_versions(),
        command=" ".join(
            ["python", "benchmarks/speech_enhancement.py", *command]
        ),
        hops=args.hops,
        warmup_hops=WARMUP_HOPS,
        notes=[],
        rows=[],
    )
    notes = results["notes"]
    start = time.perf_counter()
    model = _model(args)
    length, hop = _transforms(model)
    ours_quality = bool(args.model or args.smoke)
    test = offline = None
    if args.test_examples > 0 and (ours_quality or args.gtcrn):
        try:
            data = _speech("test", args.test_examples, 0)
            test = dict(clean=data.clean, noisy=data.noisy)
        except (ImportError, ValueError) as error:
            notes.append(f"no quality columns: {error_text(error)}")
    if test is not None and ours_quality:
        offline = keras.ops.convert_to_numpy(
            model.predict(test["noisy"], batch_size=8, verbose=0)
        )
    if not args.model:
        notes.append(
            "ours: freshly initialised weights"
            + (" (the smoke model)" if args.smoke else ": quality untrained")
        )
    print(
        f"Speech enhancement, streamed: {length}-sample frames, hop {hop} "
        f"({1e3 * hop / SAMPLE_RATE:.0f} ms); LiteRT / ONNX Runtime, one "
        f"thread, {args.hops} hops timed after {WARMUP_HOPS}; "
        f"{args.test_examples if test is not None else 0} test mixtures",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as directory:
        ours = _ours(
            args,
            model,
            dict(test, frame_length=length) if test and ours_quality else None,
            offline,
            notes,
            directory,
        )
    for row in ours:
        row["quality"] = ours_quality and test is not None
    results["rows"] += ours
    if args.gtcrn:
        if args.gtcrn_check:
            results["gtcrn_check"] = _gtcrn_check(args.gtcrn, *args.gtcrn_check)
        gtcrn = _gtcrn(args, test)
        gtcrn["quality"] = test is not None
        results["rows"].append(gtcrn)
    else:
        notes.append("GTCRN skipped (no --gtcrn)")
    if test is not None:
        noisy = dict(model="noisy input", mode="", quality=True)
        noisy.update(_scores(test["clean"], test["noisy"]))
        results["rows"].append(noisy)
    results["seconds"] = time.perf_counter() - start
    print(HEADER)
    print("| --- " * 12 + "|")
    for row in results["rows"]:
        print(_table_row(row, row["quality"]))
    for note in notes:
        print(f"- {note}")
    if "gtcrn_check" in results:
        check = results["gtcrn_check"]
        print(
            f"- GTCRN driver against their enh_stream.wav: SI-SDR "
            f"{check['si_sdr_db']:.1f} dB ({check['si_sdr_inner_db']:.1f} "
            "dB without the first and last 512 samples, max |diff| "
            f"{check['max_abs_diff_inner']:.1e})"
        )
    print(f"{results['seconds']:.0f} s in all")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
