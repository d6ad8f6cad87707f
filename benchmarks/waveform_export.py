"""Waveform models in TFLite files: the STFT front end's SNR in each mode,
and the real-time factor of the waveform -> notes file on one CPU thread.

1. SNR of the front end. A model that is only a `ComplexSTFT` (the
   convolution route, a builtin CONV_2D, `implementation="conv"`: the one
   route of the integer modes; RFFT2D, which "auto" takes in float files
   from 512 points, computes in float32) is exported in every mode,
   calibrated on music-like clips of
   `datasets.synthetic_music(output="waveform")` and fed other clips (a
   different seed); its output is compared with a float64 NumPy STFT of
   the same float32 clips (written here: numpy's `rfft` of each frame times
   the window centred in `fft_length`): SNR = 10 log10(sum |X|^2 / sum
   |X_file - X|^2) in dB, over every kept bin of every frame. Two STFTs:
   `hann512` (512-point periodic Hann, hop 128, bins 0-199: 0 to 6.2 kHz
   at 16 kHz, notes C4 to B5 with 6 harmonics) and `synthetic128`
   (`datasets.synthetic_music_stft(128)`: 256-point symmetric Hann frames
   without overlap, scaled by 1 / 16, at 4 kHz, the spectra of the
   training data). `clipped` is the share of the reference's values
   outside the range that the file's STFT output can hold (its calibrated
   integer range): held-out clips louder than every calibration clip.
   `keras` is the layer itself in float32.

2. Real-time factor. `music_classifier(frames=64, stft=...)`, untrained,
   batch 1, on LiteRT with one thread (`num_threads=1`, the XNNPACK CPU
   delegate as `cvattn_keras.export` runs files): the median seconds of
   one invocation divided by the seconds of audio it takes (its input
   samples / sample rate). `small`: examples/train_music.py's "small"
   architecture on `synthetic_music_stft(128)` (16,384 samples at 4 kHz,
   4.1 s); `paper`: the builders' defaults (2048 bins, the five-block front
   end, E = 320, 6 layers) on `ComplexSTFT(4096, 512, bins=(0, 2048))` at
   44.1 kHz (32,256 samples, 0.73 s). Goals (issue 19): RTF <= 0.05 small,
   <= 0.2 paper. The files have a static batch of 1 (as an app's). The
   STFT is `implementation="auto"` (the convolution at the small size and
   in the integer modes, RFFT2D in the paper size's float files); a mode
   `+conv` forces the convolution (what the GPU delegate needs), `+fft`
   RFFT2D (float modes only). The `stft only` rows time the front
   end alone in float32, as the convolution (CONV_2D) and as the FFT
   (RFFT2D). A paper-size export takes 25 s (float32) to a minute
   (int16x8) on 2 cores; `export (s)` is each file's conversion time.

Run:  python benchmarks/waveform_export.py [--quick] [--json PATH]
          [--small-modes float32,...,int16x8]
          [--paper-modes float32,float32+conv,dynamic_int8,int8,full_int8]
          [--runs 20]

About 4 minutes on 2 CPU cores; `--quick` (about 1.5 minutes) skips the
paper size and uses fewer clips and runs.
"""

import argparse
import json
import os
import platform
import statistics
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

MODES = ("float32", "float16", "dynamic_int8", "int8", "full_int8", "int16x8")
CALIBRATED = ("int8", "full_int8", "int16x8")

# examples/train_music.py's "small" architecture.
SMALL = dict(
    notes=24,
    embed_dim=32,
    num_heads=4,
    num_layers=2,
    head_dim=64,
    frontend_filters=(8, 16, 16),
    frontend_kernel_sizes=(6, 3, 3),
)
FRAMES = 64
GOALS = {"small": 0.05, "paper": 0.2}


def _periodic_hann(n):
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


# The SNR part's STFTs: the layer's arguments, the NumPy reference's
# (written out, not read from the layer) and synthetic_music's arguments
# for clips of 16 of its frames.
SNR_CONFIGS = {
    "hann512": dict(
        layer=lambda: ComplexSTFT(
            512, 128, bins=(0, 200), implementation="conv", name="stft"
        ),
        reference=dict(
            window=_periodic_hann(512),
            frame_step=128,
            fft_length=512,
            center=True,
            bins=(0, 200),
            normalized=False,
        ),
        music=dict(frames=16, bins=256, sample_rate=16000),
    ),
    "synthetic128": dict(
        layer=lambda: cvk.datasets.synthetic_music_stft(128),
        reference=dict(
            window=np.hanning(256),
            frame_step=256,
            fft_length=256,
            center=False,
            bins=(0, 128),
            normalized=True,
        ),
        music=dict(frames=16, bins=128, sample_rate=4000),
    ),
}


def numpy_stft(x, window, frame_step, fft_length, center, bins, normalized):
    """numpy's convention in complex128: frame `t` of `x` (zero-padded by
    `fft_length // 2` on each side when centred) times the window centred
    in `fft_length` samples, `rfft`, the bins `[low, high)`, scaled by `1
    / sqrt(fft_length)` when normalized. `(B, L)` -> `(B, frames, F)`."""
    x = np.asarray(x, np.float64)
    if center:
        half = fft_length // 2
        x = np.pad(x, ((0, 0), (half, half)))
    padded = np.zeros(fft_length)
    start = (fft_length - len(window)) // 2
    padded[start : start + len(window)] = window
    frames = 1 + (x.shape[1] - fft_length) // frame_step
    index = np.arange(frames)[:, None] * frame_step + np.arange(fft_length)
    spectra = np.fft.rfft(x[:, index] * padded, axis=-1)[..., slice(*bins)]
    return spectra / np.sqrt(fft_length) if normalized else spectra


def _quantization(mode):
    return None if mode == "float32" else mode


def _clips(stft, count, seed, frames, bins, sample_rate, notes=24):
    audio, _ = cvk.datasets.synthetic_music(
        num_samples=count,
        frames=frames,
        bins=bins,
        notes=notes,
        sample_rate=sample_rate,
        output="waveform",
        stft=stft,
        seed=seed,
    )
    return np.asarray(audio, "float32")


def _export(model, path, mode, calibration):
    start = time.perf_counter()
    cvk.export.export_tflite(
        model,
        path,
        quantization=_quantization(mode),
        representative_data=calibration if mode in CALIBRATED else None,
        num_calibration_samples=len(calibration),
        batch_size=1,
    )
    return time.perf_counter() - start


def _stft_output_range(path):
    """`(low, high)`: the values that the STFT's CONV_2D output can hold
    (its integer range, dequantized), or `None` for a float output."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.interpreter import Interpreter

    with open(path, "rb") as f:
        tflite = schema.ModelT.InitFromPackedBuf(f.read(), 0)
    conv = [
        operator.outputs[0]
        for operator in tflite.subgraphs[0].operators
        if max(
            tflite.operatorCodes[operator.opcodeIndex].builtinCode,
            tflite.operatorCodes[operator.opcodeIndex].deprecatedBuiltinCode,
        )
        == schema.BuiltinOperator.CONV_2D
    ][0]
    detail = Interpreter(model_path=path).get_tensor_details()[conv]
    scale, zero_point = detail["quantization"]
    if not scale:
        return None
    info = np.iinfo(detail["dtype"])
    return scale * (info.min - zero_point), scale * (info.max - zero_point)


def _snr_db(got, want):
    noise = np.sum(np.abs(got - want) ** 2)
    return float(10 * np.log10(np.sum(np.abs(want) ** 2) / noise))


def _complex(stacked):
    bins = stacked.shape[-1] // 2
    return stacked[..., :bins].astype("float64") + 1j * stacked[..., bins:]


def front_end_snr(args, directory):
    rows = []
    for name, config in SNR_CONFIGS.items():
        layer = config["layer"]()
        music = config["music"]
        calibration = _clips(layer, args.calibration_clips, 0, **music)
        test = _clips(layer, args.test_clips, 1, **music)
        inputs = keras.Input((test.shape[1],), name="waveform")
        model = keras.Model(inputs, layer(inputs), name=name)
        want = numpy_stft(test, **config["reference"])
        peak = max(np.abs(want.real).max(), np.abs(want.imag).max())
        keras_out = _complex(keras.ops.convert_to_numpy(model(test)))
        rows.append(
            dict(stft=name, mode="keras", snr_db=_snr_db(keras_out, want))
        )
        _print_snr_row(rows[-1])
        for mode in MODES:
            path = os.path.join(directory, f"{name}-{mode}.tflite")
            took = _export(model, path, mode, calibration)
            got = cvk.export.predict_tflite(path, model, test, batch_size=1)
            limits = _stft_output_range(path)
            clipped = None
            if limits is not None:
                values = np.concatenate([want.real, want.imag])
                outside = (values < limits[0]) | (values > limits[1])
                clipped = float(np.mean(outside))
            rows.append(
                dict(
                    stft=name,
                    mode=mode,
                    snr_db=_snr_db(_complex(got), want),
                    clipped=clipped,
                    range=None if limits is None else float(limits[1]),
                    peak=float(peak),
                    export_s=took,
                )
            )
            os.remove(path)
            _print_snr_row(rows[-1])
    return rows


def _print_snr_row(row):
    clipped = "" if row.get("clipped") is None else f"{row['clipped']:.1e}"
    limits = "" if row.get("range") is None else f"{row['range']:.3g}"
    peak = "" if row.get("peak") is None else f"{row['peak']:.3g}"
    took = "" if row.get("export_s") is None else f"{row['export_s']:.1f}"
    print(
        f"| {row['stft']} | {row['mode']} | {row['snr_db']:.1f} "
        f"| {limits} | {peak} | {clipped} | {took} |",
        flush=True,
    )


def _runner(path):
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=path, num_threads=1).get_signature_runner()


def _feed(runner, x):
    """`x` in the file's input dtype (quantized for an integer input)."""
    ((name, detail),) = runner.get_input_details().items()
    scale, zero_point = detail["quantization"]
    dtype = np.dtype(detail["dtype"])
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        codes = np.round(x.astype("float64") / scale) + zero_point
        x = np.clip(codes, info.min, info.max)
    return {name: x.astype(dtype)}


def _median_seconds(path, x, runs):
    runner = _runner(path)
    feed = _feed(runner, x)
    runner(**feed)  # warm up: XNNPACK packs the weights on the first run
    timings = []
    for _ in range(runs):
        start = time.perf_counter()
        runner(**feed)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings)


def _synthetic_stft(**kwargs):
    """`synthetic_music_stft(128)`, with `kwargs` changed."""
    config = cvk.datasets.synthetic_music_stft(128).get_config()
    return ComplexSTFT.from_config({**config, **kwargs})


def _sizes():
    """name -> (the model's STFT maker, its kwargs, the sample rate,
    synthetic_music's arguments for the model's input length)."""
    return {
        "small": (
            _synthetic_stft,
            SMALL,
            4000,
            dict(frames=FRAMES, bins=128, sample_rate=4000),
        ),
        "paper": (
            lambda **kw: ComplexSTFT(4096, 512, bins=(0, 2048), **kw),
            {},
            44100,
            # 63 frames of 512 samples: the 32,256 samples of 64 centred
            # frames at hop 512.
            dict(frames=FRAMES - 1, bins=256, sample_rate=44100),
        ),
    }


def _rtf_row(path, x, runs, seconds, took, **fields):
    latency = _median_seconds(path, x, runs)
    row = dict(
        **fields,
        file_mb=os.path.getsize(path) / 1e6,
        export_s=took,
        latency_ms=1e3 * latency,
        audio_s=seconds,
        rtf=latency / seconds,
    )
    os.remove(path)
    _print_rtf_row(row)
    return row


def real_time_factor(directory, size, modes, runs, calibration_count):
    """The classifier's rows (a mode `+conv` takes the STFT as the
    convolution: `implementation="conv"`), then the STFT alone in
    float32."""
    make_stft, kwargs, rate, music = _sizes()[size]
    stft = make_stft(name="stft")
    samples = cvk.models.waveform_length(stft, FRAMES)
    seconds = samples / rate
    clips = _clips(stft, calibration_count + 1, 2, **music)
    assert clips.shape[1] == samples, (clips.shape, samples)
    calibration, x = clips[:-1], clips[-1:]
    models = {}
    rows = []
    for mode in modes:
        base, _, route = mode.partition("+")
        if route not in models:
            keras.utils.set_random_seed(0)  # the same weights either way
            layer = make_stft(name="stft", implementation=route or "auto")
            models[route] = cvk.models.music_classifier(
                frames=FRAMES, stft=layer, **kwargs
            )
        path = os.path.join(directory, f"{size}-{mode}.tflite")
        took = _export(models[route], path, base, calibration)
        rows.append(
            _rtf_row(
                path,
                x,
                runs,
                seconds,
                took,
                size=size,
                model="classifier",
                mode=mode,
                goal=GOALS[size],
            )
        )
    for route in ("conv", "fft"):
        inputs = keras.Input((samples,), name="waveform")
        layer = make_stft(name="stft", implementation=route)
        alone = keras.Model(inputs, layer(inputs))
        path = os.path.join(directory, f"{size}-stft-{route}.tflite")
        took = _export(alone, path, "float32", calibration)
        op = "CONV_2D" if route == "conv" else "RFFT2D"
        rows.append(
            _rtf_row(
                path,
                x,
                runs,
                seconds,
                took,
                size=size,
                model="stft only",
                mode=f"float32 {op}",
                goal=GOALS[size],
            )
        )
    return rows


def _print_rtf_row(row):
    meets = "yes" if row["rtf"] <= row["goal"] else "no"
    if row["model"] != "classifier":
        meets = ""
    print(
        f"| {row['size']} | {row['model']} | {row['mode']} "
        f"| {row['file_mb']:.1f} | {row['export_s']:.0f} "
        f"| {row['latency_ms']:.3g} | {row['audio_s']:.2f} "
        f"| {row['rtf']:.3g} | {meets} |",
        flush=True,
    )


def _modes(text):
    """The modes of `text` (comma-separated): `MODES`, and each with
    `+conv` (the STFT as the convolution) or, the float ones, `+fft` (as
    RFFT2D, which has no integer kernel)."""
    modes = [m for m in text.split(",") if m]
    allowed = (
        set(MODES)
        | {f"{m}+conv" for m in MODES}
        | {f"{m}+fft" for m in MODES[:3]}
    )
    unknown = sorted(set(modes) - allowed)
    if unknown:
        raise SystemExit(
            f"unknown modes {unknown}; choose from {sorted(allowed)}"
        )
    return modes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--small-modes", default=",".join(MODES))
    parser.add_argument(
        "--paper-modes",
        default="float32,float32+conv,dynamic_int8,int8,full_int8",
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", default=None, help="write results here")
    args = parser.parse_args()
    args.calibration_clips = 32 if args.quick else 128
    args.test_clips = 8 if args.quick else 32
    runs = 5 if args.quick else args.runs
    keras.utils.set_random_seed(0)
    results = dict(
        machine=platform.processor() or platform.machine(),
        cpus=os.cpu_count(),
        quick=args.quick,
    )
    with tempfile.TemporaryDirectory() as directory:
        print(
            f"Front-end SNR against a float64 NumPy STFT "
            f"({args.calibration_clips} calibration clips, "
            f"{args.test_clips} other clips):"
        )
        print(
            "| stft | mode | SNR (dB) | output range | peak |X| "
            "| clipped | export (s) |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- |")
        results["snr"] = front_end_snr(args, directory)
        print()
        print(
            "Real-time factor, LiteRT, 1 thread, batch 1, "
            f"{FRAMES} frames (median of {runs} runs):"
        )
        print(
            "| size | model | mode | file (MB) | export (s) | latency (ms) "
            "| audio (s) | RTF | goal met |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        rows = real_time_factor(
            directory, "small", _modes(args.small_modes), runs, 32
        )
        if not args.quick:
            rows += real_time_factor(
                directory,
                "paper",
                _modes(args.paper_modes),
                min(runs, 10),
                8,
            )
        results["rtf"] = rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
