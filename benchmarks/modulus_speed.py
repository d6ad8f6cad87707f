"""Speed of the safe (scaled) complex modulus against the plain one.

`cvattn_keras.complex.modulus_and_sign(x, scaled=True)` (the default)
computes `|z| = m sqrt(1 + (s/m)^2)` with `m = max(|re|, |im|)`: exact over
the whole float32 range, never forming a square of the data.
`scaled=False` computes `sqrt(re^2 + im^2)`: cheaper, but infinite above
about 1.8e19 and zero below about 1e-19. This times both, with the sign
(the phase `z / |z|`), forward and forward+backward, compiled
(`tf.function(jit_compile=True)` on TensorFlow, `jax.jit` on JAX; set
`KERAS_BACKEND`), and prints the ratio safe / plain. The library keeps the
plain form for callers whose range is known (the attention scores outside
export) because this ratio is far above the 5% that would justify one form
only.

Both candidates are timed round-robin in the same run; a time is the median
over rounds, the ratio the median of the ratios within a round, so load
from other processes cancels out.

Run:  KERAS_BACKEND=tensorflow python benchmarks/modulus_speed.py
          [--shape 64,512,256] [--repeats 15] [--json out.json]

About 20 s on 2 CPU cores.
"""

import argparse
import json
import os
import platform
import statistics
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
from keras import ops  # noqa: E402

from cvattn_keras import complex as cx  # noqa: E402


def _candidates():
    def plain(x):
        magnitude, phase = cx.modulus_and_sign(x, scaled=False)
        return ops.sum(magnitude) + ops.sum(phase * x)

    def safe(x):
        magnitude, phase = cx.modulus_and_sign(x, scaled=True)
        return ops.sum(magnitude) + ops.sum(phase * x)

    return {"plain": plain, "safe": safe}


def _compile(fn, backward):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if backward:

            def step(x):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    value = fn(x)
                return tape.gradient(value, x)

        else:
            step = fn
        return tf.function(step, jit_compile=True)
    if backend == "jax":
        import jax

        return jax.jit(jax.grad(fn) if backward else fn)
    raise SystemExit(f"timed on tensorflow and jax only, not {backend}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="64,512,256")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    shape = tuple(int(n) for n in args.shape.split(","))
    rng = np.random.default_rng(0)
    x = ops.convert_to_tensor(rng.standard_normal(shape).astype("float32"))
    rows = []
    print(f"backend {keras.backend.backend()}, stacked input {shape}")
    print("| pass | plain ms | safe ms | safe / plain |")
    print("| --- | ---: | ---: | ---: |")
    for backward in (False, True):
        fns = {
            name: _compile(fn, backward) for name, fn in _candidates().items()
        }
        times = {name: [] for name in fns}
        for fn in fns.values():  # compile and warm up
            ops.convert_to_numpy(fn(x))
        for _ in range(args.repeats):
            for name, fn in fns.items():
                start = time.perf_counter()
                ops.convert_to_numpy(fn(x))
                times[name].append(time.perf_counter() - start)
        ratio = statistics.median(
            s / p for s, p in zip(times["safe"], times["plain"])
        )
        row = {
            "pass": "forward+backward" if backward else "forward",
            "plain_ms": 1e3 * statistics.median(times["plain"]),
            "safe_ms": 1e3 * statistics.median(times["safe"]),
            "safe_over_plain": ratio,
        }
        rows.append(row)
        print(
            f"| {row['pass']} | {row['plain_ms']:.2f} | "
            f"{row['safe_ms']:.2f} | {ratio:.2f} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "backend": keras.backend.backend(),
                    "shape": shape,
                    "machine": platform.platform(),
                    "rows": rows,
                },
                f,
                indent=2,
            )
    return rows


if __name__ == "__main__":
    main()
