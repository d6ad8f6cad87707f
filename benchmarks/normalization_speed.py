"""Speed of the complex normalization layers against their real peers.

Times `ComplexLayerNormalization` and `ComplexBatchNormalization` (training
mode: batch statistics and moving-average updates) against a plain
`keras.layers.LayerNormalization` / `keras.layers.BatchNormalization` over
the same stacked input of 2E real channels: the real norm is the cost of
one pass of statistics over the same data, the floor the complex whitening
(2x2 covariance, power-of-two rescaling, pivoted determinant) is measured
against. Forward and forward+backward (gradients with respect to the input
and every trainable weight), compiled: `tf.function(jit_compile=True)` on
TensorFlow, `jax.jit` on JAX (set `KERAS_BACKEND`; other backends are not
timed).

`--baseline [NAME=]PATH` (repeatable) adds the layers of another copy of
`cvattn_keras/layers/normalization.py` (for example an older revision:
`git show REV:cvattn_keras/layers/normalization.py > /tmp/old.py`), timed
in the same rounds, for a before/after comparison; `/ baseline` is the
ratio to the first one. That file held every norm and its mathematics up
to 0.2's split into `_whitening.py`, `normalization.py` and
`batch_normalization.py`; a copy of a later `normalization.py` imports
those from the installed package (and re-exports its batch norm), so for
revisions after the split run this benchmark in each checkout and compare
the JSON files.

All candidates of one group (norm, pass) are timed round-robin in the same
run, so machine noise hits them alike; each time is the median over
`--repeats` rounds after warm-up. The ratios (`/ real`, `/ baseline`) are
medians over rounds of the ratio of two times taken in the same round, so
load that comes and goes between rounds cancels out.

Run:  KERAS_BACKEND=tensorflow python benchmarks/normalization_speed.py
          [--shape 32,64,640] [--repeats 15] [--norms layer,batch]
          [--passes forward,backward] [--baseline [NAME=]PATH ...]
          [--json out.json]

The default takes about 30 s on TensorFlow and 20 s on JAX on 2 CPU cores.
"""

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
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

from cvattn_keras.layers import normalization  # noqa: E402

BACKENDS = ("tensorflow", "jax")
PASS_NAMES = {"forward": "forward", "backward": "forward+backward"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape",
        default="32,64,640",
        help="stacked input shape B,T,2E (default 32,64,640)",
    )
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--norms", default="layer,batch")
    parser.add_argument("--passes", default="forward,backward")
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        help="[NAME=]PATH of another normalization.py to time side by side "
        "(repeatable)",
    )
    parser.add_argument("--json", default=None, help="write results here")
    args = parser.parse_args(argv)
    args.shape = tuple(int(n) for n in args.shape.split(","))
    if len(args.shape) < 2 or args.shape[-1] % 2:
        parser.error(f"--shape must end in an even 2E. Received: {args.shape}")
    args.norms = args.norms.split(",")
    args.passes = args.passes.split(",")
    baselines = {}
    for index, spec in enumerate(args.baseline):
        name, _, path = spec.rpartition("=")
        name = name or ("baseline" if index == 0 else f"baseline{index}")
        if name in ("complex", "real") or name in baselines:
            parser.error(f"--baseline: a new name, please. Received: {spec}")
        if not os.path.isfile(path):
            parser.error(f"--baseline: no such file. Received: {path}")
        baselines[name] = path
    args.baseline = baselines
    for norm in args.norms:
        if norm not in ("layer", "batch"):
            parser.error(f"--norms: layer or batch. Received: {norm}")
    for pass_ in args.passes:
        if pass_ not in PASS_NAMES:
            parser.error(f"--passes: forward or backward. Received: {pass_}")
    return args


def load_module(name, path):
    """Imports a normalization.py from a file path (it imports the installed
    `cvattn_keras` for its helpers)."""
    spec = importlib.util.spec_from_file_location(f"_norm_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_layer(module, norm):
    if module is None:  # the real peer over 2E channels
        if norm == "layer":
            return keras.layers.LayerNormalization()
        return keras.layers.BatchNormalization()
    if norm == "layer":
        return module.ComplexLayerNormalization()
    return module.ComplexBatchNormalization()


def compiled(layer, norm, pass_, x, weight):
    """A compiled step: forward, or forward+backward of `sum(y * weight)`
    with respect to the input and the trainable weights."""
    layer.build(tuple(x.shape))
    kwargs = {"training": True} if norm == "batch" else {}
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function(jit_compile=True)
        def forward(x):
            return layer(x, **kwargs)

        @tf.function(jit_compile=True)
        def backward(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = tf.reduce_sum(layer(x, **kwargs) * weight)
            return tape.gradient(loss, [x] + layer.trainable_variables)

        step = forward if pass_ == "forward" else backward
        return lambda: step(x)
    import jax

    trainable = [v.value for v in layer.trainable_variables]
    frozen = [v.value for v in layer.non_trainable_variables]

    def call(trainable, x):
        y, updated = layer.stateless_call(trainable, frozen, x, **kwargs)
        return y, updated

    def loss(trainable, x):
        y, updated = call(trainable, x)
        return (y * weight).sum(), updated

    if pass_ == "forward":
        step = jax.jit(call)
    else:
        step = jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True))
    return lambda: step(trainable, x)


def block(outputs):
    for leaf in keras.tree.flatten(outputs):
        np.asarray(keras.ops.convert_to_numpy(leaf))


def time_round_robin(functions, repeats, warmup=3):
    """Median seconds per candidate; every round times each candidate
    once, in turn."""
    for function in functions.values():
        for _ in range(warmup):
            block(function())
    samples = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            start = time.perf_counter()
            block(function())
            samples[name].append(time.perf_counter() - start)
    return samples


def ratio(samples, numerator, denominator):
    pairs = zip(samples[numerator], samples[denominator])
    return statistics.median(a / b for a, b in pairs)


def bench(args):
    rng = np.random.default_rng(0)
    data = rng.standard_normal(args.shape).astype("float32")
    weight = keras.ops.convert_to_tensor(
        rng.standard_normal(args.shape).astype("float32")
    )
    x = keras.ops.convert_to_tensor(data)
    modules = {"complex": normalization, "real": None}
    for name, path in args.baseline.items():
        modules[name] = load_module(name, path)
    first = next(iter(args.baseline), None)
    rows = []
    for norm in args.norms:
        for pass_ in args.passes:
            functions = {
                name: compiled(make_layer(module, norm), norm, pass_, x, weight)
                for name, module in modules.items()
            }
            samples = time_round_robin(functions, args.repeats)
            for name in functions:
                row = dict(
                    norm=norm,
                    passes=PASS_NAMES[pass_],
                    candidate=name,
                    median_ms=1e3 * statistics.median(samples[name]),
                    min_ms=1e3 * min(samples[name]),
                    ratio_to_real=ratio(samples, name, "real"),
                )
                if first:
                    row["ratio_to_baseline"] = ratio(samples, name, first)
                rows.append(row)
    return rows


def print_table(rows, baseline):
    header = f"{'norm':6s} {'pass':17s} {'candidate':9s} {'median ms':>10s}"
    header += f" {'min ms':>8s} {'/ real':>7s}"
    if baseline:
        header += f" {'/ baseline':>10s}"
    print(header)
    print("-" * len(header))
    for row in rows:
        line = f"{row['norm']:6s} {row['passes']:17s} {row['candidate']:9.9s}"
        line += f" {row['median_ms']:10.2f} {row['min_ms']:8.2f}"
        line += f" {row['ratio_to_real']:7.2f}"
        if baseline:
            line += f" {row['ratio_to_baseline']:10.2f}"
        print(line)


def environment():
    env = dict(
        backend=keras.backend.backend(),
        keras=keras.__version__,
        python=platform.python_version(),
        cpus=os.cpu_count(),
        load_average=(
            [round(n, 2) for n in os.getloadavg()]
            if hasattr(os, "getloadavg")
            else None
        ),
    )
    if env["backend"] == "tensorflow":
        import tensorflow as tf

        env["tensorflow"] = tf.__version__
    else:
        import jax

        env["jax"] = jax.__version__
    return env


def main(argv=None):
    args = parse_args(argv)
    if keras.backend.backend() not in BACKENDS:
        sys.exit(
            f"Times compiled steps on {' or '.join(BACKENDS)} only. "
            f"Received: KERAS_BACKEND={keras.backend.backend()}"
        )
    keras.utils.set_random_seed(0)
    started = time.perf_counter()
    env = environment()
    print(
        f"{env['backend']}, Keras {env['keras']}, {env['cpus']} CPUs, load "
        f"average {env['load_average']}; input {args.shape}, jit on; "
        f"medians of {args.repeats} interleaved rounds."
    )
    rows = bench(args)
    print_table(rows, args.baseline)
    seconds = time.perf_counter() - started
    print(f"\n(total {seconds:.0f} s)")
    if args.json:
        results = dict(
            environment=env,
            arguments=vars(args),
            results=rows,
            seconds=seconds,
        )
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2, default=str)
        print(f"Wrote {args.json}")


if __name__ == "__main__":
    main()
