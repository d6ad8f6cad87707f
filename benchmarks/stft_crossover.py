"""Where ComplexSTFT's (and ComplexISTFT's) FFT route beats the convolution.

Times the forward pass of `ComplexSTFT(N, N // 4, implementation="conv")`
and `implementation="fft"` (every bin) on a batch of waveforms (with
`--inverse`, of `ComplexISTFT` on their spectra), compiled by
the backend's compiler (XLA through `tf.function(jit_compile=True)` on
TensorFlow, `jax.jit` on JAX), alternating the two routes, the median of
`--repeats` calls each. The crossover sets `stft.AUTO_FFT_MIN_LENGTH`.

Run:  KERAS_BACKEND=tensorflow|jax python benchmarks/stft_crossover.py
          [--lengths 256,512,1024,2048] [--batch 8] [--samples 32000]
          [--repeats 15] [--inverse]

About a minute per backend on 2 CPU cores.
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402

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


def _block(y):
    return keras.ops.convert_to_numpy(y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="256,512,1024,2048")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--samples", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--inverse", action="store_true")
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
    for n in [int(v) for v in args.lengths.split(",")]:
        runs = {}
        x = ComplexSTFT(n, n // 4)(waveform) if args.inverse else waveform
        for route in ("conv", "fft"):
            layer = cls(n, n // 4, implementation=route)
            layer.build(tuple(x.shape))
            runs[route] = _compiled(layer)
            _block(runs[route](x))  # compile
        times = {route: [] for route in runs}
        for _ in range(args.repeats):
            for route, run in runs.items():
                start = time.perf_counter()
                _block(run(x))
                times[route].append(time.perf_counter() - start)
        conv, fft = (1e3 * np.median(times[r]) for r in ("conv", "fft"))
        print(
            f"N={n:5d}  conv {conv:7.2f}  fft {fft:7.2f}  "
            f"conv/fft {conv / fft:5.2f}"
        )


if __name__ == "__main__":
    main()
