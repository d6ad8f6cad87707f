"""Per-frame decoding time of a `music_generator`: cached against full
recompute, in Keras and on LiteRT.

Decodes `target_frames` frames greedily (batch 1, `feedback="notes"`) four
ways, on the same random spectra:

- Keras full recompute: `models.generate(..., cache=False)`, the whole
  model re-run from Python for every frame (O(T^2) work);
- Keras cached: `models.generate(..., cache=True)`, the encoder once and
  one frame per step with key/value caches, the loop compiled (XLA);
- LiteRT cached: a file from `export_generator_tflite`, run by
  `generate_tflite` (`encode` once, `decode_step` per frame); the median
  `decode_step` call is reported too;
- LiteRT full recompute: a plain `export_tflite` file of the model
  (static batch 1) run once per frame on the growing previous notes.

Times are the median over `--repeats` decodings after one warm-up (which
holds the XLA compilation); "per frame" is a decoding's time divided by
its frames (the encoder included). Every method's logits are checked
against the Keras full recompute. The default generator is the small one
of `examples/train_music.py` (128 bins, E = 32, 4 heads, 2 + 2 layers,
43 source and 21 target frames); `--paper` adds the paper-size generator
(E = 320, 8 heads, 6 + 6 layers, 2048 bins; its conversion takes
minutes).

Run:  python benchmarks/generation_speed.py [--paper] [--repeats 5]
          [--threads N] [--json out.json]
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
from cvattn_keras import models  # noqa: E402
from cvattn_keras.export.generator import export_generator_tflite  # noqa: E402
from cvattn_keras.export.generator import generate_tflite  # noqa: E402

SIZES = {
    # examples/train_music.py's "small", as a generator over 128 bins.
    "small": dict(
        bins=128,
        embed_dim=32,
        num_heads=4,
        num_layers=2,
        head_dim=64,
        frontend_filters=(8, 16, 16),
        frontend_kernel_sizes=(6, 3, 3),
    ),
    # The paper's: the builder's defaults.
    "paper": dict(),
}


def median_time(fn, repeats):
    """The median wall time of `fn()` in seconds, after one warm-up call;
    and the warm-up's result."""
    result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def litert_full_recompute(path, spectra, steps, cut, threads):
    """Greedy decoding with a plain export of the whole model: one
    inference per frame on the growing previous notes."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(
        model_path=path, num_threads=threads
    ).get_signature_runner()
    batch, notes = spectra.shape[0], None
    names = runner.get_input_details()
    notes_shape = names["previous_notes"]["shape"]
    previous = np.zeros(notes_shape, np.float32)
    notes = notes_shape[2]
    logits = np.zeros((batch, steps, notes), np.float32)
    for t in range(steps):
        (out,) = runner(spectra=spectra, previous_notes=previous).values()
        logits[:, t] = out[:, t]
        if t + 1 < notes_shape[1]:
            previous[:, t + 1] = out[:, t] > cut
    return logits


def decode_step_time(path, repeats, threads):
    """The median time of one `decode_step` call (at the last frame)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=threads)
    encode = interpreter.get_signature_runner("encode")
    decode = interpreter.get_signature_runner("decode_step")
    details = decode.get_input_details()
    spectra = encode.get_input_details()["spectra"]
    cross = encode(spectra=np.zeros(spectra["shape"], np.float32))
    feed = dict(
        cross_cache=cross["cross_cache"],
        self_cache=np.zeros(details["self_cache"]["shape"], np.float32),
        previous_notes=np.zeros(details["previous_notes"]["shape"], np.float32),
        index=np.array(details["self_cache"]["shape"][3] - 1, np.int32),
    )
    seconds, _ = median_time(lambda: decode(**feed), max(repeats, 20))
    return seconds


def run(size, repeats, threads, directory):
    keras.utils.set_random_seed(0)
    model = models.music_generator(**SIZES[size], name=f"{size}_generator")
    _, sources, channels = model.inputs[0].shape
    _, steps, _ = model.inputs[1].shape
    spectra = (
        np.random.default_rng(0)
        .standard_normal((1, sources, channels))
        .astype("float32")
    )
    cut = 0.0  # threshold 0.5
    rows = []

    def add(method, seconds, logits, reference, **extra):
        error = float(np.max(np.abs(logits - reference)))
        rows.append(
            dict(
                model=size,
                method=method,
                total_ms=1e3 * seconds,
                per_frame_ms=1e3 * seconds / steps,
                max_abs_error=error,
                **extra,
            )
        )

    full_s, (_, reference) = median_time(
        lambda: models.generate(model, spectra, cache=False), repeats
    )
    add("keras full recompute", full_s, reference, reference)
    cached_s, (_, logits) = median_time(
        lambda: models.generate(model, spectra, cache=True), repeats
    )
    add("keras cached (XLA)", cached_s, logits, reference)

    start = time.perf_counter()
    generator_path = export_generator_tflite(
        model, os.path.join(directory, f"{size}_generator.tflite")
    )
    export_s = time.perf_counter() - start
    litert_s, (_, logits) = median_time(
        lambda: generate_tflite(generator_path, spectra, num_threads=threads),
        repeats,
    )
    add(
        "litert cached",
        litert_s,
        logits,
        reference,
        decode_step_ms=1e3 * decode_step_time(generator_path, repeats, threads),
        export_s=export_s,
        file_kib=os.path.getsize(generator_path) / 1024,
    )

    start = time.perf_counter()
    full_path = cvk.export.export_tflite(
        model, os.path.join(directory, f"{size}_full.tflite"), batch_size=1
    )
    export_s = time.perf_counter() - start
    full_litert_s, logits = median_time(
        lambda: litert_full_recompute(full_path, spectra, steps, cut, threads),
        repeats,
    )
    add(
        "litert full recompute",
        full_litert_s,
        logits,
        reference,
        export_s=export_s,
        file_kib=os.path.getsize(full_path) / 1024,
    )
    return rows, steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--paper", action="store_true", help="add the paper-size generator"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=None, help="LiteRT CPU threads"
    )
    parser.add_argument("--json", default=None, help="write results here")
    args = parser.parse_args()
    sizes = ["small"] + (["paper"] if args.paper else [])
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for size in sizes:
            found, steps = run(size, args.repeats, args.threads, directory)
            rows += found
            print(
                f"\n{size} generator: {steps} frames decoded, batch 1, "
                f"median of {args.repeats}"
            )
            print(
                f"{'method':<24}{'total ms':>10}{'ms/frame':>10}"
                f"{'vs full':>9}{'step ms':>9}{'max |err|':>11}"
            )
            base = found[0]["total_ms"]
            for row in found:
                step = row.get("decode_step_ms")
                print(
                    f"{row['method']:<24}{row['total_ms']:>10.1f}"
                    f"{row['per_frame_ms']:>10.2f}"
                    f"{base / row['total_ms']:>8.1f}x"
                    + (f"{step:>9.3f}" if step is not None else f"{'':>9}")
                    + f"{row['max_abs_error']:>11.2g}"
                )
    print(
        "\n(step ms: one decode_step call; max |err|: logits against the "
        "Keras full recompute. Indicative numbers: shared CPU cores.)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                dict(
                    machine=platform.machine(),
                    cpus=os.cpu_count(),
                    backend=keras.backend.backend(),
                    rows=rows,
                ),
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
