"""Where ComplexSTFT's (and ComplexISTFT's) FFT route beats the convolution,
and how both compare with the backend's own STFT.

Times the forward pass of `ComplexSTFT(N, N // 4, implementation="conv")`
and `implementation="fft"` (every bin) on a batch of waveforms (with
`--inverse`, of `ComplexISTFT` on their spectra), and the peers on the
same waveforms: `keras.ops.stft(x, N, N // 4, N)` (centred, reflect
padding) and, on TensorFlow, `tf.signal.stft` (not centred), all compiled
by the backend's compiler (XLA through `tf.function(jit_compile=True)` on
TensorFlow, `jax.jit` on JAX), round-robin, the median of `--repeats`
calls each. The crossover sets `stft.AUTO_FFT_MIN_LENGTH`; `auto/keras`
is the default layer against `keras.ops.stft` (the issue's goal: <= 1).

Run:  KERAS_BACKEND=tensorflow|jax python benchmarks/stft_crossover.py
          [--lengths 256,512,1024,2048] [--batch 8] [--samples 32000]
          [--repeats 15] [--inverse] [--json PATH]

About a minute per backend on 2 CPU cores.
"""

import argparse
import json
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from cvattn_keras import stft as sf  # noqa: E402
from cvattn_keras.layers import ComplexISTFT  # noqa: E402
from cvattn_keras.layers import ComplexSTFT  # noqa: E402


def _compiled(layer):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(layer, jit_compile=True)
    if backend == "jax":
        import jax

        weights = [v.value for v in layer.non_trainable_variables]

        @jax.jit
        def run(weights, x):
            return layer.stateless_call([], weights, x)[0]

        return lambda x: run(weights, x)
    return layer


def _compiled_function(function):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(function, jit_compile=True)
    if backend == "jax":
        import jax

        return jax.jit(function)
    return function


def _peers(n):
    """The backend's own STFTs of the same frames (forward only)."""
    peers = {
        "keras.ops.stft": _compiled_function(
            lambda x: keras.ops.stft(x, n, n // 4, n)
        )
    }
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        peers["tf.signal.stft"] = _compiled_function(
            lambda x: tf.signal.stft(x, n, n // 4, n)
        )
    return peers


def _block(y):
    return keras.tree.map_structure(keras.ops.convert_to_numpy, y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="256,512,1024,2048")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--samples", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--inverse", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    waveform = np.random.default_rng(0).standard_normal(
        (args.batch, args.samples)
    )
    waveform = keras.ops.convert_to_tensor(waveform.astype("float32"))
    cls = ComplexISTFT if args.inverse else ComplexSTFT
    print(
        f"{cls.__name__}, backend {keras.backend.backend()}, batch "
        f"{args.batch}, {args.samples} samples, hop N/4, forward, ms "
        "(median)"
    )
    rows = []
    for n in [int(v) for v in args.lengths.split(",")]:
        runs = {}
        x = ComplexSTFT(n, n // 4)(waveform) if args.inverse else waveform
        for route in ("conv", "fft"):
            layer = cls(n, n // 4, implementation=route)
            layer.build(tuple(x.shape))
            runs[route] = _compiled(layer)
        if not args.inverse:
            runs.update(_peers(n))
        for run in runs.values():
            _block(run(x))  # compile
        times = {name: [] for name in runs}
        for _ in range(args.repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                _block(run(x))
                times[name].append(time.perf_counter() - start)
        ms = {name: 1e3 * float(np.median(t)) for name, t in times.items()}
        auto = "fft" if n >= sf.AUTO_FFT_MIN_LENGTH else "conv"
        row = dict(fft_length=n, ms=ms, auto=auto)
        text = "  ".join(f"{name} {value:7.2f}" for name, value in ms.items())
        text += f"  conv/fft {ms['conv'] / ms['fft']:5.2f}"
        if "keras.ops.stft" in ms:
            row["auto_over_keras"] = ms[auto] / ms["keras.ops.stft"]
            text += f"  auto/keras {row['auto_over_keras']:5.2f}"
        print(f"N={n:5d}  {text}")
        rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                dict(
                    layer=cls.__name__,
                    backend=keras.backend.backend(),
                    machine=platform.processor() or platform.machine(),
                    cpus=os.cpu_count(),
                    batch=args.batch,
                    samples=args.samples,
                    repeats=args.repeats,
                    rows=rows,
                ),
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
