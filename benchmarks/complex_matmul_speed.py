"""Where Gauss's three-multiplication product beats the block form.

Times `ComplexDense(E, complex_matmul="block")` and
`ComplexDense(E, complex_matmul="gauss")` against a real `Dense(2E)` on the
same `(rows, 2E)` input, for a sweep of widths E, in one round-robin group
per (width, jit, pass) (see `_speed_timing`), with the bare matmuls
of each form (one `(rows, 2E) x (2E, 2E)`; three `(rows, E) x (E, E)`;
forward only), whose ratio bounds Gauss / block before any elementwise
pass. Gauss's
form does 3 real
matmuls of `rows x E x E` where the block form does one of `rows x 2E x
2E` (4 E^2 per row): 25% fewer FLOPs, but three narrower matmuls and a few
elementwise passes. The measured crossover sets `complex.GAUSS_MIN_SIZE`,
the width from which `complex_matmul="auto"` takes Gauss's form.

Run:  python benchmarks/complex_matmul_speed.py [--widths 128,256,320,512]
          [--rows 2048] [--jit on,off] [--passes forward,backward]
          [--repeats 20] [--json out.json]

The default (7 widths, jit on and off, both passes) takes about 6 minutes
on 2 CPU cores.
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

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from _speed_candidates import compiled  # noqa: E402
from _speed_timing import ratio  # noqa: E402
from _speed_timing import time_round_robin  # noqa: E402

import cvattn_keras as cvk  # noqa: E402


def candidate(layer, x):
    layer.build(x.shape)
    return dict(
        call=lambda inputs: layer(inputs),
        inputs=[x],
        variables=layer.trainable_variables,
    )


def matmuls(x, width, count):
    """The bare matmuls: `count` = 1, one `(rows, 2E) x (2E, 2E)` (the
    block form's); `count` = 3, three `(rows, E) x (E, E)` (Gauss's), on
    separate operands, with no sums or slices: what bounds Gauss / block
    before any elementwise pass."""
    rng = np.random.default_rng(1)
    if count == 1:
        size, operands = 2 * width, [x]
    else:  # each its own (rows, E) copy
        size = width
        operands = [tf.identity(x[:, :width]) for _ in range(count)]
    kernels = [
        tf.Variable(rng.standard_normal((size, size)).astype("float32"))
        for _ in range(count)
    ]

    def call(*inputs):
        return [tf.matmul(a, k) for a, k in zip(inputs, kernels)]

    return dict(call=call, inputs=operands, variables=kernels)


def bench(args):
    rows = []
    rng = np.random.default_rng(0)
    for width in args.widths:
        data = rng.standard_normal((args.rows, 2 * width)).astype("float32")
        x = tf.constant(data)
        candidates = {
            "one matmul": matmuls(x, width, 1),
            "three matmuls": matmuls(x, width, 3),
            "real": candidate(keras.layers.Dense(2 * width), x),
            "block": candidate(
                cvk.layers.ComplexDense(width, complex_matmul="block"), x
            ),
            "gauss": candidate(
                cvk.layers.ComplexDense(width, complex_matmul="gauss"), x
            ),
        }
        for jit in args.jit:
            for pass_ in args.passes:
                functions = {
                    name: compiled(c, pass_, jit)
                    for name, c in candidates.items()
                    if pass_ == "forward" or "matmul" not in name
                }
                timed = time_round_robin(functions, args.repeats)
                row = dict(
                    width=width,
                    rows=args.rows,
                    jit=jit,
                    pass_=pass_,
                    real_ms=1e3 * timed["real"]["median"],
                    block_ms=1e3 * timed["block"]["median"],
                    gauss_ms=1e3 * timed["gauss"]["median"],
                    block_vs_real=ratio(timed, "block", "real"),
                    gauss_vs_real=ratio(timed, "gauss", "real"),
                    gauss_vs_block=ratio(timed, "gauss", "block"),
                    three_vs_one=(
                        ratio(timed, "three matmuls", "one matmul")
                        if pass_ == "forward"
                        else None
                    ),
                    auto=(
                        "gauss"
                        if cvk.complex.use_gauss("auto", width, width)
                        else "block"
                    ),
                )
                rows.append(row)
                print_row(row)
    return rows


def print_header():
    print(
        "\n## ComplexDense(E): Gauss's form and the block form vs real "
        "Dense(2E)\n"
    )
    print(
        "| E | pass | jit | real (ms) | block / real | gauss / real | "
        "gauss / block | bare: three / one matmul | auto |"
    )
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")


def _cell(value):
    return "" if value is None else f"{value:.3f}"


def print_row(r):
    pass_ = "fwd" if r["pass_"] == "forward" else "fwd+bwd"
    print(
        f"| {r['width']} | {pass_} | {'on' if r['jit'] else 'off'} | "
        f"{r['real_ms']:.2f} | {r['block_vs_real']:.3f} | "
        f"{r['gauss_vs_real']:.3f} | {r['gauss_vs_block']:.3f} | "
        f"{_cell(r['three_vs_one'])} | {r['auto']} |",
        flush=True,
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    def ints(text):
        return [int(v) for v in text.split(",") if v]

    parser.add_argument(
        "--widths", type=ints, default=[128, 256, 320, 384, 512, 768, 1024]
    )
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument(
        "--jit",
        type=lambda t: [v == "on" for v in t.split(",")],
        default=[True, False],
    )
    parser.add_argument(
        "--passes",
        type=lambda t: t.split(","),
        default=["forward", "backward"],
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    print_header()
    rows = bench(args)
    if args.json:
        environment = dict(
            python=sys.version.split()[0],
            platform=platform.platform(),
            cpus=os.cpu_count(),
            tensorflow=tf.__version__,
            keras=keras.__version__,
            gauss_min_size=cvk.complex.GAUSS_MIN_SIZE,
        )
        with open(args.json, "w") as f:
            json.dump(dict(environment=environment, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
