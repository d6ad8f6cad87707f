"""ComplexConv2D against a real Conv2D of twice the channels and against
native complex64 convolutions.

For each size, on one `(B, H, W, 2C)` stacked input, times in one
round-robin group per (jit, pass) (see `_speed_timing`):

- `block`: `ComplexConv2D(F, k, padding="same", complex_matmul="block")`,
  one real convolution against the block kernel `(k, k, 2C, 2F)`;
- `gauss`: the same with `complex_matmul="gauss"`, three real
  convolutions of half the width (25% fewer FLOPs);
- `real`: `keras.layers.Conv2D(2F, k, padding="same")` on the `2C`
  channels: the same FLOPs as `block`, the yardstick;

each as one `tf.function` (XLA-compiled with `--jit on`), forward, or
forward and the gradients of `sum y^2` with respect to the weights; and,
outside Keras, the native complex64 convolutions of the same shapes
(TensorFlow has none: its `Conv2D` kernels take no complex dtype):

- `jax c64`: `jax.lax.conv_general_dilated` on complex64 NHWC arrays,
  under `jax.jit` (always compiled, whatever `--jit`), and `jax f32`, the
  same on the stacked float32 image with a `(3, 3, 2C, 2F)` kernel (the
  real convolution of the same FLOPs in the same framework);
- `torch c64`: `torch.nn.functional.conv2d` on complex64 NCHW tensors,
  eager, and `torch f32`, its real `2C -> 2F` peer.

Columns: `real (ms)`, the median time of the real Keras layer; then each
candidate's time over `real`'s (the median over rounds of the per-round
ratio; below 1 is faster than the real layer of the same FLOPs), and
each native complex64 convolution's over its own framework's float32
one (`c64 / f32`: what the complex dtype costs there). The JSON holds
every candidate's median ms (`jax_c64_ms`, ...). `auto` is what
`complex_matmul="auto"` takes at that size. The machine's load goes in
the JSON too: timings on a shared machine move by 10-20% between runs;
the ratios, timed in the same rounds, much less.

Sizes (`--sizes`):

- `unet`: B = 8, 64 x 64 images, C = F = 32, 3 x 3 kernels (a U-Net
  level of an MRI reconstruction network);
- `deep`: B = 4, 32 x 32, C = F = 128, 3 x 3 (a deeper level);
- `wide`: B = 2, 16 x 16, C = F = 512, 3 x 3 (where Gauss's form pays:
  `complex_matmul="auto"` takes it);
- `smoke`: B = 2, 8 x 8, C = F = 4 (`--smoke`: seconds, for the tests).

Run:  python benchmarks/conv2d_speed.py [--sizes unet,deep,wide]
          [--jit on[,off]] [--passes forward,backward] [--repeats 5]
          [--json PATH] [--smoke]

The default (three sizes, XLA on, both passes) takes about 2 minutes
on 2 CPU cores.
"""

import argparse
import json
import os
import platform
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
import tensorflow as tf  # noqa: E402
from _speed_candidates import compiled  # noqa: E402
from _speed_timing import ratio  # noqa: E402
from _speed_timing import time_round_robin  # noqa: E402

import cvattn_keras as cvk  # noqa: E402

SIZES = {
    "unet": dict(batch=8, height=64, width=64, channels=32, filters=32),
    "deep": dict(batch=4, height=32, width=32, channels=128, filters=128),
    "wide": dict(batch=2, height=16, width=16, channels=512, filters=512),
    "smoke": dict(batch=2, height=8, width=8, channels=4, filters=4),
}
KERNEL = 3


def layer_candidate(layer, x):
    layer.build(x.shape)
    return dict(
        call=lambda inputs: layer(inputs),
        inputs=[x],
        variables=layer.trainable_variables,
    )


def native_operands(size, x, real):
    """The native candidates' operands as NumPy arrays: the complex64
    image `(B, H, W, C)`, kernel `(k, k, C, F)` and bias `(F,)`, or, with
    `real`, the stacked float32 image `(B, H, W, 2C)`, a kernel `(k, k,
    2C, 2F)` and bias `(2F,)` (the real convolution of the same FLOPs in
    the same framework). Glorot-scaled random kernels."""
    rng = np.random.default_rng(0)
    channels, filters = size["channels"], size["filters"]
    scale = (KERNEL * KERNEL * (channels + filters)) ** -0.5
    if real:
        shape = (KERNEL, KERNEL, 2 * channels, 2 * filters)
        kernel = (rng.standard_normal(shape) * scale).astype(np.float32)
        return x, kernel, np.zeros(2 * filters, np.float32)
    shape = (KERNEL, KERNEL, channels, filters)
    parts = rng.standard_normal((2,) + shape) * scale
    kernel = (parts[0] + 1j * parts[1]).astype(np.complex64)
    return cvk.from_stacked(x), kernel, np.zeros(filters, np.complex64)


def jax_native(size, x, pass_, real=False):
    """`jax.lax.conv_general_dilated` (NHWC, HWIO), jitted: a zero-argument
    callable that waits for its result and returns `None` (what
    `_speed_timing` expects of a candidate that waited)."""
    import jax
    import jax.numpy as jnp

    z, kernel, bias = (jnp.asarray(a) for a in native_operands(size, x, real))

    def forward(kernel, bias, z):
        y = jax.lax.conv_general_dilated(
            z,
            kernel,
            (1, 1),
            "SAME",
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        return y + bias

    if pass_ == "forward":
        step = jax.jit(forward)
    else:

        def loss(kernel, bias, z):
            y = forward(kernel, bias, z)
            return jnp.sum(jnp.real(y * jnp.conj(y)))

        step = jax.jit(jax.grad(loss, argnums=(0, 1)))

    def run():
        jax.block_until_ready(step(kernel, bias, z))

    return run


def torch_native(size, x, pass_, real=False):
    """`torch.nn.functional.conv2d` (NCHW), eager; returns `None`."""
    import torch

    z, kernel, bias = native_operands(size, x, real)
    # (k, k, in, out) -> (out, in, k, k) and NHWC -> NCHW: torch's layouts.
    weight = torch.tensor(kernel.transpose(3, 2, 0, 1).copy())
    bias = torch.tensor(bias)
    z = torch.tensor(z.transpose(0, 3, 1, 2).copy())
    if pass_ == "backward":
        weight.requires_grad_(True)
        bias.requires_grad_(True)

    def forward():
        return torch.nn.functional.conv2d(z, weight, bias, padding="same")

    def run():
        if pass_ == "forward":
            with torch.no_grad():
                forward()
            return
        y = forward()
        loss = (y * y.conj()).real.sum()
        torch.autograd.grad(loss, (weight, bias))

    return run


NATIVE = ("jax c64", "jax f32", "torch c64", "torch f32")


def natives(size, x, pass_):
    """The native candidates whose framework imports: {name: callable}."""
    found = {}
    for framework, make in (("jax", jax_native), ("torch", torch_native)):
        try:
            for real in (False, True):
                name = f"{framework} {'f32' if real else 'c64'}"
                found[name] = make(size, x, pass_, real=real)
        except ImportError:
            print(f"({framework}: not installed, skipped)")
    return found


def bench_size(name, size, args):
    rng = np.random.default_rng(0)
    shape = (size["batch"], size["height"], size["width"])
    z = rng.standard_normal(shape + (size["channels"],)) + 1j * (
        rng.standard_normal(shape + (size["channels"],))
    )
    x = cvk.to_stacked(z / np.sqrt(2))  # float32 (B, H, W, 2C)
    tensor = tf.constant(x)
    filters = size["filters"]
    candidates = {
        "real": layer_candidate(
            keras.layers.Conv2D(2 * filters, KERNEL, padding="same"), tensor
        ),
        **{
            form: layer_candidate(
                cvk.layers.ComplexConv2D(
                    filters, KERNEL, padding="same", complex_matmul=form
                ),
                tensor,
            )
            for form in ("block", "gauss")
        },
    }
    auto = cvk.complex.use_gauss(
        "auto", KERNEL * KERNEL * size["channels"], filters
    )
    rows = []
    for jit in args.jit:
        for pass_ in args.passes:
            functions = {
                key: compiled(c, pass_, jit) for key, c in candidates.items()
            }
            functions.update(natives(size, x, pass_))
            timed = time_round_robin(functions, args.repeats)
            row = dict(
                size=name,
                **size,
                kernel_size=KERNEL,
                jit=jit,
                pass_=pass_,
                auto="gauss" if auto else "block",
            )
            for key in functions:
                field = key.replace(" ", "_")  # "jax c64" -> jax_c64_ms
                row[f"{field}_ms"] = 1e3 * timed[key]["median"]
                row[f"{field}_vs_real"] = ratio(timed, key, "real")
            rows.append(row)
            print_row(row)
    return rows


def print_header():
    print(
        "\n## ComplexConv2D(F, 3, padding='same') vs real Conv2D(2F) on 2C "
        "channels and native complex64\n"
    )
    print(
        "| size | B, HxW, C->F | pass | jit | real (ms) | block / real | "
        "gauss / real | jax c64 / real | jax c64 / f32 | torch c64 / real "
        "| torch c64 / f32 | auto |"
    )
    print("| --- | --- | --- | --- |" + " ---: |" * 7 + " --- |")


def _ratio(row, key, base="real"):
    key, base = key.replace(" ", "_"), base.replace(" ", "_")
    if f"{key}_ms" not in row or f"{base}_ms" not in row:
        return ""
    if base == "real":
        return f"{row[f'{key}_vs_real']:.3f}"
    return f"{row[f'{key}_ms'] / row[f'{base}_ms']:.3f}"


def print_row(r):
    shape = (
        f"{r['batch']}, {r['height']}x{r['width']}, "
        f"{r['channels']}->{r['filters']}"
    )
    pass_ = "fwd" if r["pass_"] == "forward" else "fwd+bwd"
    cells = [r["size"], shape, pass_, "on" if r["jit"] else "off"]
    cells.append(f"{r['real_ms']:.2f}")
    cells += [_ratio(r, "block"), _ratio(r, "gauss")]
    for framework in ("jax", "torch"):
        cells.append(_ratio(r, f"{framework} c64"))
        cells.append(_ratio(r, f"{framework} c64", f"{framework} f32"))
    cells.append(r["auto"])
    print("| " + " | ".join(cells) + " |", flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    def names(text):
        chosen = [v for v in text.split(",") if v]
        unknown = sorted(set(chosen) - set(SIZES))
        if unknown or not chosen:
            raise argparse.ArgumentTypeError(
                f"sizes must be among {sorted(SIZES)}, got {text!r}"
            )
        return chosen

    def on_off(text):
        values = text.split(",")
        if not values or set(values) - {"on", "off"}:
            raise argparse.ArgumentTypeError(f"on and/or off, got {text!r}")
        return [v == "on" for v in values]

    def passes(text):
        values = text.split(",")
        if not values or set(values) - {"forward", "backward"}:
            raise argparse.ArgumentTypeError(
                f"forward and/or backward, got {text!r}"
            )
        return values

    parser.add_argument("--sizes", type=names, default=["unet", "deep", "wide"])
    # XLA on by default: the native JAX candidates are compiled too.
    parser.add_argument("--jit", type=on_off, default=[True])
    parser.add_argument(
        "--passes", type=passes, default=["forward", "backward"]
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--json", "--out", dest="json", default=None, help="write rows here"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the smoke size only, 2 repeats, XLA on (seconds)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.sizes, args.jit, args.repeats = ["smoke"], [True], 2
    return args


def environment():
    return dict(
        python=platform.python_version(),
        platform=platform.platform(),
        tensorflow=tf.__version__,
        keras=keras.__version__,
        cvattn_keras=cvk.__version__,
        cpus=os.cpu_count(),
        load_average=os.getloadavg() if hasattr(os, "getloadavg") else None,
        date=time.strftime("%Y-%m-%d %H:%M:%S %z"),
        gauss_min_size=cvk.complex.GAUSS_MIN_SIZE,
    )


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(0)
    start = time.perf_counter()
    results = dict(
        environment=environment(),
        command=" ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        rows=[],
    )
    print_header()
    for name in args.sizes:
        results["rows"] += bench_size(name, SIZES[name], args)
    results["seconds"] = time.perf_counter() - start
    print(f"\n{results['seconds']:.0f} s in all")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
