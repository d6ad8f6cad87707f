"""Speed of complex attention against its limit and its native peer.

Times `ComplexMultiHeadAttention` (every softmax x product variant) against

- the *limit*: a real `keras.layers.MultiHeadAttention` with
  `key_dim = 2 * key_dim` on the same stacked input of 2E channels: the same
  FLOPs and the same kernels (design.md section 2);
- the *native peer*: the same complex attention written with native complex64
  TensorFlow ops (complex projections, `q @ conj(k)^T`, softmax on
  `tf.math.real` / `tf.abs`, complex weights x values), fed complex64 inputs;

and `ComplexDense` against a real `Dense` of the equivalent block shape
(`2E -> 2E` channels). All candidates of one group (shape, pass, jit mode)
are timed round-robin in the same run, so machine noise hits them alike;
each time is the median over `--repeats` rounds after warm-up. A sweep over
the sequence length T gives the scaling curve (a PNG when matplotlib is
importable). `--tflite` adds the LiteRT latency of an exported CAtt model
against an exported real model of twice the width.

Ratios: `ours / limit` (1.0 = as fast as a real attention of twice the
width; lower is better) and `native / ours` (how many times faster ours is
than native complex64; higher is better) are medians over rounds of the
ratio of two times taken in the same round, so load that comes and goes
between rounds (another process) cancels out.

Run:  python benchmarks/attention_speed.py [--quick] [--json out.json]
          [--softmax real,abs,absonly,naive] [--product inner,bilinear]
          [--shapes paper,long] [--passes forward,backward] [--jit on,off]
          [--level layer,core] [--repeats 9] [--causal] [--sweep-max 4096]
          [--no-sweep] [--no-dense] [--plot sweep.png] [--tflite]
          [--forms auto,gauss,block] [--memory] [--vs-reference PATH]

Options beyond the variants, shapes, passes and jit modes:

- `--level core` times the attention core alone (projected per-head q, k,
  v) against `keras.ops.dot_product_attention`, and against its FLOP floor
  over 2S keys; `--causal` adds a causal mask to every attention group.
- `--forms auto,gauss,block` times one `ours` per complex-product form
  (`complex_matmul=` of `ComplexMultiHeadAttention`, `ComplexDense` and the
  core; `gauss`: three real matmuls per complex product, `block`: one of
  the 2x2 block kernel, `auto`: the library's choice), all in the same
  round-robin group as the limit, and prints one `<form> / limit` (or
  `/ real`) column per further form. The first form fills the `ours`
  columns, the sweep and the reference comparison. Where the library has
  no `complex_matmul` argument, one line says so and only its default
  (`auto`) is timed. Default `auto`: the tables of docs/performance.md.
- `--memory` adds the peak resident memory (MiB) of ours (each form) and of
  the limit for every attention row: one subprocess per candidate and pass
  (`_speed_memory.py`, reading `/proc/self/status` as
  `attention_memory.py` does), whole process (Python, TensorFlow, XLA)
  included. Opt-in: each subprocess imports TensorFlow and compiles.
- `--vs-reference PATH` times the authors' PyTorch `MultiheadAttention`
  (Eilers & Jiang; `git clone https://github.com/richarms/cv_transformer`
  and pass the clone's folder) against ours at the same shapes, variants,
  passes and jit modes, on the CPU, and prints `ours / reference` and
  `reference / ours` per row (`_speed_reference.py` says exactly how).
  Without torch, or without their code at PATH, one line says the section
  is skipped; torch is not imported at all without the option.
- `--json out.json` writes every row (each time with its form), the
  arguments and the environment.

The default (every variant, both shapes, both passes, jit on, layer level,
ComplexDense, sweep to T = 4096) takes about 3 minutes on 2 CPU cores;
`--quick` under 1 minute; `--jit on,off --tflite` about 6. Each further
form adds about half to the attention groups and a third to the dense
ones; `--memory` adds
about 10 s per subprocess (the default run: 32 per form and 4 for the
limit, about 6 minutes more; `--quick`: 12 for one form, 2 minutes);
`--vs-reference` adds about 8 minutes to the default (the reference takes
0.3-2 s a call on 2 cores), 1-2 with `--quick`.

The modules `_speed_*.py` next to this script hold its parts: the
candidates and the compiled step (`_speed_candidates`), the native peer
(`_speed_native`), the round-robin timing (`_speed_timing`), the timed
groups (`_speed_runs`), the tables (`_speed_tables`), the memory
subprocess (`_speed_memory`) and the reference comparison
(`_speed_reference`).
"""

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

# First, before keras imports TensorFlow: it filters TensorFlow's
# start-up lines (cvattn_keras/_startup.py).
import cvattn_keras  # noqa: E402, F401

# isort: split

import _speed_reference  # noqa: E402
import _speed_runs  # noqa: E402
import _speed_tables as tables  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from _speed_candidates import FORMS  # noqa: E402
from _speed_candidates import SHAPES  # noqa: E402

import cvattn_keras as cvk  # noqa: E402

# --------------------------------------------------------------------------
# Command line.
# --------------------------------------------------------------------------


def csv(choices, convert=str):
    def parse(text):
        values = [convert(v.strip()) for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in choices]
        if bad or not values:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated subset of {list(choices)}, "
                f"got {text!r}"
            )
        return values

    return parse


def on_off(value):
    return {"on": True, "off": False}.get(value, value)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CAtt and APAtt (inner) only, 5 repeats, sweep to T=1024 "
        "(about 1 minute)",
    )
    parser.add_argument(
        "--softmax",
        type=csv(cvk.attention.SOFTMAX_VARIANTS),
        default=None,
        help="softmax variants (default: all four)",
    )
    parser.add_argument(
        "--product",
        type=csv(cvk.attention.PRODUCTS),
        default=None,
        help="products (default: inner,bilinear)",
    )
    parser.add_argument(
        "--shapes",
        type=csv(SHAPES),
        default=list(SHAPES),
        help="paper = B 35, T 64, E 320, 8 heads; long = B 4, T 512, E 128, "
        "4 heads (default: both)",
    )
    parser.add_argument(
        "--level",
        type=csv(("layer", "core")),
        default=["layer"],
        help="layer = the whole layer with its projections; core = the "
        "attention core alone, on projected per-head tensors, also against "
        "the FLOP floor of the complex-weight variants (default: layer)",
    )
    parser.add_argument(
        "--passes",
        type=csv(("forward", "backward")),
        default=["forward", "backward"],
        help="forward and/or backward (= forward + gradients of all weights)",
    )
    parser.add_argument(
        "--jit",
        type=csv((True, False), on_off),
        default=[True],
        help="on = tf.function(jit_compile=True), off = tf.function "
        "(default: on)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed rounds per group (default 9, --quick 5)",
    )
    parser.add_argument(
        "--causal", action="store_true", help="time with a causal mask"
    )
    parser.add_argument(
        "--sweep-max",
        type=int,
        default=None,
        help="largest T of the sweep (default 4096, --quick 1024)",
    )
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--no-dense", action="store_true")
    parser.add_argument(
        "--plot",
        default=None,
        help="sweep PNG path (default: next to --json, else "
        "attention_speed_sweep.png in the current directory)",
    )
    parser.add_argument(
        "--tflite",
        action="store_true",
        help="also time exported .tflite models on LiteRT",
    )
    parser.add_argument("--tflite-runs", type=int, default=100)
    parser.add_argument(
        "--forms",
        type=csv(FORMS),
        default=["auto"],
        help="complex-product forms of ours to time, the first filling the "
        "ours columns (default: auto)",
    )
    parser.add_argument(
        "--memory",
        action="store_true",
        help="add the peak resident memory of ours and the limit to every "
        "attention row (one subprocess per candidate; slow)",
    )
    parser.add_argument(
        "--vs-reference",
        metavar="PATH",
        default=None,
        help="also time the authors' PyTorch attention from a checkout of "
        "https://github.com/richarms/cv_transformer at PATH (needs torch)",
    )
    parser.add_argument("--json", default=None, help="write all results here")
    args = parser.parse_args(argv)
    if args.softmax is None:
        args.softmax = ["real", "abs"]
        if not args.quick:
            args.softmax += ["absonly", "naive"]
    if args.product is None:
        args.product = ["inner"] if args.quick else ["inner", "bilinear"]
    if args.repeats is None:
        args.repeats = 5 if args.quick else 9
    if args.sweep_max is None:
        args.sweep_max = 1024 if args.quick else 4096
    if args.plot is None:
        args.plot = "attention_speed_sweep.png"
        if args.json:
            args.plot = os.path.splitext(args.json)[0] + "_sweep.png"
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    return args


def environment():
    return dict(
        python=platform.python_version(),
        tensorflow=tf.__version__,
        keras=keras.__version__,
        cvattn_keras=cvk.__version__,
        machine=platform.machine(),
        processor=platform.processor(),
        cpus=os.cpu_count(),
        load_average=os.getloadavg() if hasattr(os, "getloadavg") else None,
        date=time.strftime("%Y-%m-%d %H:%M:%S %z"),
    )


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(0)
    started = time.perf_counter()
    env = environment()
    print(
        f"TensorFlow {env['tensorflow']}, Keras {env['keras']}, "
        f"{env['cpus']} CPUs, load average {env['load_average']}; "
        f"medians of {args.repeats} interleaved rounds.",
    )
    results = dict(environment=env, arguments=vars(args))
    forms = _speed_runs.announce_forms(args)
    args.layer_form = _speed_runs.layer_form(args)
    if "layer" in args.level:
        results["attention"] = _speed_runs.bench_attention(
            args, "layer", forms["layer"]
        )
        tables.print_attention_table(results["attention"], args.causal)
    if "core" in args.level:
        results["core"] = _speed_runs.bench_attention(
            args, "core", forms["core"]
        )
        tables.print_core_table(results["core"], args.causal)
    if not args.no_dense:
        results["dense"] = _speed_runs.bench_dense(args, forms["dense"])
        tables.print_dense_table(results["dense"])
    if not args.no_sweep:
        results["sweep"] = _speed_runs.bench_sweep(args)
        tables.print_sweep_table(results["sweep"])
        results["sweep_plot"] = tables.plot_sweep(results["sweep"], args.plot)
    if args.tflite:
        results["tflite"] = _speed_runs.bench_tflite(args)
        tables.print_tflite_table(results["tflite"])
    if args.vs_reference is not None:
        rows, info = _speed_reference.bench_reference(args)
        results["reference"] = dict(info, rows=rows)
        if rows is not None:
            tables.print_reference_table(rows, info, args.causal)
    results["seconds"] = time.perf_counter() - started
    print(f"\n(total {results['seconds']:.0f} s)")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2, default=str)
        print(f"Wrote {args.json}")


if __name__ == "__main__":
    main()
