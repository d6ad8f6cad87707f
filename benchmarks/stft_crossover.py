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

`--backward` times forward + backward instead: the gradient of `sum(y**2)`
with respect to the waveform and, for the layer, its kernels (the conv
route built `trainable=True`, a learned front end; the FFT route has no
kernels), against the same gradient through the peers.

`--litert` (TensorFlow) times the TFLite files instead, on the LiteRT
interpreter with one thread, one waveform: the convolution (every mode's
route) against `implementation="fft"` (RFFT2D, float files only).

Run:  KERAS_BACKEND=tensorflow|jax python benchmarks/stft_crossover.py
          [--lengths 256,512,1024,2048] [--batch 8] [--samples 32000]
          [--repeats 15] [--inverse | --backward | --litert] [--json PATH]

About a minute per backend on 2 CPU cores.
"""

import argparse
import json
import os
import platform
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


def _peer_function(name, n):
    """The uncompiled peer `name` at `n` points: `x -> (Re, Im)` (Keras)
    or a complex tensor (TensorFlow)."""
    if name == "keras.ops.stft":
        return lambda x: keras.ops.stft(x, n, n // 4, n)
    import tensorflow as tf

    return lambda x: tf.signal.stft(x, n, n // 4, n)


def _peers(n):
    """The backend's own STFTs of the same frames, compiled."""
    names = ["keras.ops.stft"]
    if keras.backend.backend() == "tensorflow":
        names.append("tf.signal.stft")
    return {name: _compiled_function(_peer_function(name, n)) for name in names}


def _energy(y):
    """`sum |y|^2` of a stacked output, a `(real, imag)` pair or a complex
    tensor."""
    if isinstance(y, (tuple, list)):
        return sum(keras.ops.sum(part**2) for part in y)
    if "complex" in str(y.dtype):
        import tensorflow as tf

        return tf.reduce_sum(tf.math.real(y * tf.math.conj(y)))
    return keras.ops.sum(y**2)


def _gradient(function, weights=()):
    """Compiled `x -> gradients of sum |function(x)|^2` with respect to
    `x` and, for a layer, its variables `weights` (TensorFlow, JAX)."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        def run(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = _energy(function(x))
            return tape.gradient(loss, [x] + list(weights))

        return tf.function(run, jit_compile=True)
    import jax

    def loss(values, x):
        if weights:  # a layer: its kernels as arguments
            return _energy(function.stateless_call(values, [], x)[0])
        return _energy(function(x))

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    values = [v.value for v in weights]
    return lambda x: grad(values, x)


def _litert_ms(layer, samples, repeats):
    """Median LiteRT latency (ms, one thread, one waveform) of the float32
    file of `layer`, and its ops."""
    import tempfile

    from ai_edge_litert.interpreter import Interpreter

    from cvattn_keras import export

    model = keras.Sequential([keras.Input((samples,)), layer])
    with tempfile.TemporaryDirectory() as folder:
        path = export.export_tflite(model, os.path.join(folder, "f.tflite"))
        ops = export.verify_tflite(
            path, model, np.zeros((1, samples), "float32")
        ).ops
        runner = Interpreter(model_path=path, num_threads=1)
        runner = runner.get_signature_runner()
    (name,) = runner.get_input_details()
    x = np.random.default_rng(0).standard_normal((1, samples))
    feed = {name: x.astype("float32")}
    runner(**feed)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        runner(**feed)
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times)), ops


def _litert_rows(args):
    print(
        f"ComplexSTFT TFLite files (float32), LiteRT 1 thread, 1 waveform "
        f"of {args.samples} samples, hop N/4, ms (median)"
    )
    rows = []
    for n in [int(v) for v in args.lengths.split(",")]:
        ms = {}
        for route in ("conv", "fft"):
            layer = ComplexSTFT(n, n // 4, implementation=route)
            ms[route], ops = _litert_ms(layer, args.samples, args.repeats)
            assert ("RFFT2D" in ops) == (route == "fft"), ops
        rows.append(dict(fft_length=n, ms=ms))
        print(
            f"N={n:5d}  conv (CONV_2D) {ms['conv']:7.2f}  fft (RFFT2D) "
            f"{ms['fft']:7.2f}  conv/fft {ms['conv'] / ms['fft']:5.2f}"
        )
    return rows


def _block(y):
    return keras.tree.map_structure(keras.ops.convert_to_numpy, y)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="256,512,1024,2048")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--samples", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=15)
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--inverse", action="store_true")
    modes.add_argument("--backward", action="store_true")
    modes.add_argument("--litert", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.litert:
        if keras.backend.backend() != "tensorflow":
            parser.error("--litert converts with TensorFlow: run it there")
        _write(args, "ComplexSTFT (LiteRT)", _litert_rows(args))
        return
    if args.backward and keras.backend.backend() not in ("tensorflow", "jax"):
        parser.error("--backward runs on TensorFlow and JAX")
    waveform = np.random.default_rng(0).standard_normal(
        (args.batch, args.samples)
    )
    waveform = keras.ops.convert_to_tensor(waveform.astype("float32"))
    cls = ComplexISTFT if args.inverse else ComplexSTFT
    print(
        f"{cls.__name__}, backend {keras.backend.backend()}, batch "
        f"{args.batch}, {args.samples} samples, hop N/4, "
        f"{'forward + backward' if args.backward else 'forward'}, ms "
        "(median)"
    )
    rows = []
    for n in [int(v) for v in args.lengths.split(",")]:
        runs = {}
        x = ComplexSTFT(n, n // 4)(waveform) if args.inverse else waveform
        for route in ("conv", "fft"):
            learned = args.backward and route == "conv"
            layer = cls(n, n // 4, implementation=route, trainable=learned)
            layer.build(tuple(x.shape))
            if args.backward:
                runs[route] = _gradient(layer, layer.trainable_variables)
            else:
                runs[route] = _compiled(layer)
        if not args.inverse:
            peers = _peers(n)
            if args.backward:
                peers = {
                    name: _gradient(
                        lambda x, n=n, name=name: _peer_function(name, n)(x)
                    )
                    for name in peers
                }
            runs.update(peers)
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
    what = cls.__name__ + (" forward + backward" if args.backward else "")
    _write(args, what, rows)


def _write(args, what, rows):
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                dict(
                    layer=what,
                    backend=keras.backend.backend(),
                    machine=platform.processor() or platform.machine(),
                    cpus=os.cpu_count(),
                    batch=1 if args.litert else args.batch,
                    samples=args.samples,
                    repeats=args.repeats,
                    rows=rows,
                ),
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
