"""Peak memory and time of the chunked attention against the full path.

For every softmax variant, one forward+backward step of the attention core
(`cvattn_keras.attention.complex_dot_product_attention`, the full path, and
`cvattn_keras.chunked_attention.chunked_dot_product_attention`, the
chunked one) on self-attention inputs of B = 1, 4 heads, E = 128 complex
features (head width H = 32 complex), no mask, compiled (XLA:
`tf.function(jit_compile=True)` on TensorFlow, `jax.jit` on JAX). Each
configuration runs in its own subprocess, which reports the peak resident
memory of the whole process (`VmHWM` of `/proc/self/status`: Python, the
framework and the compiler included) and, for reference, the resident
memory before the step was built (`base`). A time is the median over
`--repeats` steps after one compiling step (one step at the longest
length).

The full path holds `(B, N, T, 2S)` float32 scores (8.6 GB at T = 16384)
and several temporaries of that size for the backward, so it is skipped
where its scores alone would exceed `--full-limit-gib / 4`.

Run:  python benchmarks/attention_memory.py [--lengths 1024,4096,16384]
          [--variants real,abs,absonly,naive] [--backends tensorflow]
          [--chunk-size 512] [--repeats 3] [--full-limit-gib 12]
          [--json out.json]

On a 2-core CPU: about 15 minutes for the defaults (the T = 16384 steps
take tens of seconds each). Numbers from a machine shared with other work
are indicative.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

BATCH, HEADS, FEATURES = 1, 4, 128
VARIANTS = ("real", "abs", "absonly", "naive")


def _peak_and_current_kib():
    """`(VmHWM, VmRSS)` of this process in KiB."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmHWM", "VmRSS"):
                values[name] = int(rest.split()[0])
    return values["VmHWM"], values["VmRSS"]


def _child(args):
    """One configuration: prints a JSON line with the time and memory."""
    import keras
    import numpy as np
    from keras import ops

    from cvattn_keras import attention as att
    from cvattn_keras import chunked_attention as chunked

    head = FEATURES // HEADS
    length = args.length
    rng = np.random.default_rng(0)
    q, k, v = (
        rng.standard_normal((BATCH, length, HEADS, 2 * head)).astype("float32")
        for _ in range(3)
    )
    weights = rng.standard_normal(q.shape).astype("float32")

    def attend(q, k, v):
        if args.path == "full":
            return att.complex_dot_product_attention(q, k, v, args.variant)
        return chunked.chunked_dot_product_attention(
            q, k, v, args.variant, chunk_size=args.chunk_size
        )

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def step(q, k, v, w):
            with tf.GradientTape() as tape:
                tape.watch([q, k, v])
                loss = ops.sum(attend(q, k, v) * w)
            return tape.gradient(loss, [q, k, v])

        tensors = [tf.constant(x) for x in (q, k, v, weights)]
    elif backend == "jax":
        import jax

        def loss(q, k, v, w):
            return ops.sum(attend(q, k, v) * w)

        step = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
        tensors = [jax.numpy.asarray(x) for x in (q, k, v, weights)]
    else:
        raise SystemExit(f"timed on tensorflow and jax only, not {backend}")

    _, base = _peak_and_current_kib()
    start = time.perf_counter()
    grads = step(*tensors)
    finite = all(np.isfinite(ops.convert_to_numpy(g)).all() for g in grads)
    first = time.perf_counter() - start
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        grads = step(*tensors)
        ops.convert_to_numpy(grads[0])
        times.append(time.perf_counter() - start)
    peak, _ = _peak_and_current_kib()
    print(
        json.dumps(
            {
                "first_s": first,
                "time_s": statistics.median(times) if times else first,
                "peak_gib": peak / 2**20,
                "base_gib": base / 2**20,
                "finite": bool(finite),
            }
        )
    )


def _run(backend, variant, path, length, args):
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--variant",
        variant,
        "--path",
        path,
        "--length",
        str(length),
        "--chunk-size",
        str(args.chunk_size),
        "--repeats",
        str(args.repeats if length < 16384 else min(args.repeats, 1)),
    ]
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, check=False
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,4096,16384")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--backends", default="tensorflow")
    parser.add_argument("--chunk-size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full-limit-gib", type=float, default=12.0)
    parser.add_argument("--json", default=None, help="write results here")
    # Internal: one configuration in a subprocess.
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)

    lengths = [int(x) for x in args.lengths.split(",")]
    rows = []
    header = (
        f"{'backend':<11} {'variant':<8} {'T':>6} "
        f"{'chunked GiB':>11} {'full GiB':>9} {'chunked s':>10} "
        f"{'full s':>8} {'time ratio':>10}"
    )
    print(
        f"B={BATCH}, heads={HEADS}, E={FEATURES} complex, "
        f"chunk_size={args.chunk_size}, forward+backward, jit; peak RSS "
        "of a subprocess"
    )
    print(header)
    for backend in args.backends.split(","):
        for variant in args.variants.split(","):
            for length in lengths:
                scores_gib = BATCH * HEADS * length * 2 * length * 4 / 2**30
                row = {
                    "backend": backend,
                    "variant": variant,
                    "length": length,
                    "chunked": _run(backend, variant, "chunked", length, args),
                }
                if scores_gib * 4 <= args.full_limit_gib:
                    row["full"] = _run(backend, variant, "full", length, args)
                else:
                    row["full"] = {
                        "skipped": f"scores alone {scores_gib:.1f} GiB"
                    }
                rows.append(row)
                print(_format(row), flush=True)
    if args.json:
        results = {
            "benchmark": "attention_memory",
            "shape": {"batch": BATCH, "heads": HEADS, "features": FEATURES},
            "chunk_size": args.chunk_size,
            "repeats": args.repeats,
            "machine": platform.platform(),
            "cpus": os.cpu_count(),
            "rows": rows,
        }
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)
        print(f"Wrote {args.json}")
    return None


def _format(row):
    chunked, full = row["chunked"], row["full"]

    def gib(result):
        if "peak_gib" in result:
            return f"{result['peak_gib']:.2f}"
        return "skip" if "skipped" in result else "error"

    def seconds(result):
        return f"{result['time_s']:.3f}" if "time_s" in result else "-"

    ratio = "-"
    if "time_s" in chunked and "time_s" in full:
        ratio = f"{chunked['time_s'] / full['time_s']:.2f}"
    line = (
        f"{row['backend']:<11} {row['variant']:<8} {row['length']:>6} "
        f"{gib(chunked):>11} {gib(full):>9} {seconds(chunked):>10} "
        f"{seconds(full):>8} {ratio:>10}"
    )
    for name, result in (("chunked", chunked), ("full", full)):
        if "error" in result:
            line += f"\n    {name}: {result['error']}"
    return line


if __name__ == "__main__":
    main()
