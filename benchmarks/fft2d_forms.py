"""The stacked 2-D DFT (`layers.fourier.fft2`): the block form the library
uses against Gauss's three-product form, and TensorFlow's native complex64
FFT as the yardstick.

For each size, on one stacked `(B, H, W, 2)` image (one complex channel),
times in one round-robin group per pass (see `_speed_timing`), each as one
`tf.function` (XLA-compiled with `--jit on`):

- `block`: `cvattn_keras.layers.fourier.fft2`: per axis, one real matmul
  of the rows `[z_r | z_i]` against the block DFT matrix `[[M_r, M_i],
  [-M_i, M_r]]` (`2N x 2N`), between transposes;
- `gauss`: the same transposes, and per axis Gauss's three real matmuls
  against `M_r`, `M_i - M_r` and `M_r + M_i` (`N x N`: 25% fewer FLOPs,
  more elementwise passes);
- `tf fft`: `tf.signal.fft2d` on the complex64 image, `(B, 1, H, W)`
  (an `O(H W log(H W))` FFT; not in TFLite's builtins, no half
  precision, no int8).

Forward, or forward and the gradient of `sum y^2` with respect to the
image. Columns: `block (ms)`, the median time of the library's form; then
`gauss / block` and `fft / block`, the medians over rounds of the
per-round ratios (below 1 is faster than the library's form). The
machine's load goes in the JSON: timings on a shared machine move by
10-30% between runs; the ratios, timed in the same rounds, less.

Sizes (`--sizes`): `small`: B = 8, 64 x 64; `large`: B = 2, 256 x 256;
`smoke`: B = 2, 8 x 8 (`--smoke`: seconds, for the tests).

Run:  python benchmarks/fft2d_forms.py [--sizes small,large]
          [--jit on[,off]] [--passes forward,backward] [--repeats 10]
          [--json PATH] [--smoke]
"""

import argparse
import json
import os
import platform
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

# First, before keras imports TensorFlow: it filters TensorFlow's
# start-up lines (cvattn_keras/_startup.py).
import cvattn_keras  # noqa: E402, F401

# isort: split

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _speed_timing import ratio  # noqa: E402
from _speed_timing import time_round_robin  # noqa: E402

from cvattn_keras.layers import fourier  # noqa: E402

SIZES = {
    "small": dict(batch=8, size=64),
    "large": dict(batch=2, size=256),
    "smoke": dict(batch=2, size=8),
}


def gauss_fft2(x):
    """`fft2` of a stacked `(B, H, W, 2)` image by Gauss's form per axis,
    with the library's transposes."""
    _, height, width, _ = x.shape

    def side(t, n):  # (P, ..., 2, n) -> (P, ..., 2, n)
        real, imag = (tf.constant(m.T, tf.float32) for m in _parts(n))
        z_r, z_i = t[..., 0, :], t[..., 1, :]
        k1 = tf.matmul(z_r + z_i, real)
        k2 = tf.matmul(z_r, imag - real)
        k3 = tf.matmul(z_i, real + imag)
        return tf.stack([k1 - k3, k1 + k2], axis=-2)

    t = tf.transpose(x, (0, 1, 3, 2))  # (B, H, 2, W)
    t = side(t, width)  # (B, H, 2, L)
    t = tf.transpose(t, (0, 3, 2, 1))  # (B, L, 2, H)
    t = side(t, height)  # (B, L, 2, K)
    return tf.transpose(t, (0, 3, 1, 2))  # (B, K, L, 2)


def _parts(n):
    matrix = fourier.dft_matrix(n)
    return matrix.real, matrix.imag


def native_fft2(x):
    """`tf.signal.fft2d` of the complex64 image, stacked back."""
    z = tf.complex(x[..., 0], x[..., 1])  # (B, H, W)
    y = tf.signal.fft2d(z)
    return tf.stack([tf.math.real(y), tf.math.imag(y)], axis=-1)


PASS_NAMES = {"forward": "fwd", "backward": "fwd+bwd"}

CANDIDATES = {"block": fourier.fft2, "gauss": gauss_fft2, "fft": native_fft2}


def step(fn, pass_, jit):
    if pass_ == "forward":
        return tf.function(fn, jit_compile=jit)

    def gradient(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, x)

    return tf.function(gradient, jit_compile=jit)


def check(x):
    """Every candidate computes numpy's fft2 (to float32 rounding)."""
    z = x[..., 0].astype("float64") + 1j * x[..., 1]
    want = np.fft.fft2(z)
    for name, fn in CANDIDATES.items():
        y = fn(tf.constant(x)).numpy().astype("float64")
        error = np.abs(y[..., 0] + 1j * y[..., 1] - want).max()
        if error > 1e-4 * np.abs(want).max():
            raise AssertionError(f"{name}: error {error:.3g}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="small,large")
    parser.add_argument("--jit", default="on")
    parser.add_argument("--passes", default="forward,backward")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.repeats = "smoke", 2
    rows = []
    print(
        "| size | B, H x W | pass | XLA | block (ms) | gauss / block "
        "| fft / block |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.sizes.split(","):
        size = SIZES[name]
        rng = np.random.default_rng(0)
        shape = (size["batch"], size["size"], size["size"], 2)
        x = rng.standard_normal(shape).astype("float32")
        check(x)
        tensor = tf.constant(x)
        for pass_ in args.passes.split(","):
            for jit in (j == "on" for j in args.jit.split(",")):
                functions = {
                    candidate: (lambda f=step(fn, pass_, jit): f(tensor))
                    for candidate, fn in CANDIDATES.items()
                }
                timed = time_round_robin(functions, args.repeats)
                row = dict(
                    size=name,
                    shape=shape,
                    pass_=pass_,
                    jit=jit,
                    block_ms=1e3 * timed["block"]["median"],
                    gauss_ms=1e3 * timed["gauss"]["median"],
                    fft_ms=1e3 * timed["fft"]["median"],
                    gauss_over_block=ratio(timed, "gauss", "block"),
                    fft_over_block=ratio(timed, "fft", "block"),
                )
                rows.append(row)
                print(
                    f"| {name} | {shape[0]}, {shape[1]}x{shape[2]} | "
                    f"{PASS_NAMES[pass_]} | {'on' if jit else 'off'} | "
                    f"{row['block_ms']:.2f} | "
                    f"{row['gauss_over_block']:.2f} | "
                    f"{row['fft_over_block']:.2f} |",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as file:
            json.dump(
                dict(
                    rows=rows,
                    load=os.getloadavg(),
                    machine=platform.machine(),
                    tensorflow=tf.__version__,
                ),
                file,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
