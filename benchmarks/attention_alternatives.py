"""Speed and memory of the alternatives to full attention (issue 43).

Times, at each sequence length T, self-attention of B = 1 sequence, 4
heads, E = 64 complex features (16 per head), softmax `--softmax`
(default CAtt), inner product:

- `low_rank`: `ComplexLowRankAttention(rank=min(--rank, T), max_length=T)`
  (Linformer; `--rank` 256 by default, Linformer's k);
- `full`: `ComplexMultiHeadAttention` (exact; its default
  `chunk_size="auto"` attends in blocks of 512 keys from T = 4096 on);
- `native`: the same full attention in native complex64 TensorFlow ops,
  the reference PyTorch code's formulation (`_speed_native.py`, as
  `attention_speed.py` times it); skipped where its `(T, T)` complex64
  scores per head would exceed `--native-limit-gib`;
- `real2x`: a real `keras.layers.MultiHeadAttention` of twice the width
  (`key_dim` 32 on the 2E = 128 stacked channels: the same FLOPs as CAtt);
  skipped where its `(T, T)` float32 scores reach `--native-limit-gib`
  (at T = 16384, 4 GiB: its backward pass asked for 16 GiB);
- `gated`: `ComplexMultiHeadAttention(gated=True)` (`full` with a gate
  of the query's moduli on each head's output);
- `gau`: `ComplexGatedAttentionUnit(1, 32)` (GAU: one head, `Z` of 32
  complex features, `e = 2E = 128`; exact attention, as `full`);
- `lsh`: `ComplexLSHAttention(num_buckets=64, num_hashes=2,
  chunk_length=64)` (the Reformer's LSH attention, two hash rounds; the
  buckets fixed, so that hashing costs O(T), not the O(T^2 / 64) of
  buckets growing with T);
- `sparse`: `ComplexSparseAttention(window=128, global_tokens=16)` (a
  local window and BigBird's global tokens, no stride: O(T) work; a
  fixed stride S would add T^2/S);
- `sparse_strided`: the same with `stride = sqrt(T)` (the Sparse
  Transformer's: O(T sqrt(T)) work).

Each pass (`forward`, `backward`: forward and the gradient of `sum y^2`
with respect to the weights) is one `tf.function`, XLA-compiled (`--jit
off` for graph mode); the candidates of one length and pass are timed
round-robin (`_speed_timing.py`) so that load that comes and goes hits
them alike, the median of `--repeats` rounds after warm-up. `--memory`
adds the peak resident memory of each candidate and pass, one subprocess
each (`VmHWM` after a reset, the whole process: Python, TensorFlow, XLA),
as `attention_speed.py --memory` measures it.

The exact candidates (`full`, `native`, `real2x`, `gated`, `gau`) are
timed up to `--exact-max-length` (16384 by default: at 65536 tokens one
forward and backward step of exact CAtt takes minutes on a 2-core CPU);
above it their cells are `-`. After the table: each candidate's growth
with T, the slope of log(time) against log(T) by least squares over the
lengths it was timed at (2 is quadratic, 1 linear), and at each length
how many times faster than `full` each alternative is.

Run:  python benchmarks/attention_alternatives.py
          [--lengths 1024,4096,16384,65536] [--exact-max-length 16384]
          [--rank 256] [--softmax real] [--passes forward,backward]
          [--repeats 5] [--jit on] [--memory] [--native-limit-gib 4]
          [--candidates low_rank,full,sparse,lsh] [--json out.json]

On a 2-core CPU: about 15 minutes for the defaults without `--memory`
(the exact attentions at T = 16384 take seconds to tens of seconds per
step); numbers from a machine shared with other work are indicative.
"""

import argparse
import json
import os
import platform
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BATCH, HEADS, FEATURES = 1, 4, 64
CANDIDATES = (
    "low_rank",
    "full",
    "native",
    "real2x",
    "gated",
    "gau",
    "lsh",
    "sparse",
    "sparse_strided",
)
GAU_KEY_DIM = 32
LSH_BUCKETS, LSH_HASHES, LSH_CHUNK = 64, 2, 64
SPARSE_WINDOW, SPARSE_GLOBAL = 128, 16
EXACT = ("full", "native", "real2x", "gated", "gau")
ALTERNATIVES = ("low_rank", "sparse", "lsh", "sparse_strided")


def _candidate(name, length, rank, softmax):
    """`{call, inputs, variables}` for `_speed_candidates.compiled`; layers
    built on 8 tokens first, so that the build leaves no full-size
    buffers behind."""
    import keras
    import numpy as np

    import cvattn_keras as cvk

    rng = np.random.default_rng(0)
    z = rng.standard_normal((BATCH, length, FEATURES))
    z = z + 1j * rng.standard_normal((BATCH, length, FEATURES))
    x = keras.ops.convert_to_tensor(cvk.to_stacked(z / np.sqrt(2)))
    head = FEATURES // HEADS
    if name == "native":
        from _speed_native import NativeComplexAttention
        from _speed_native import native_input

        module = NativeComplexAttention(FEATURES, HEADS, softmax, "inner")
        return dict(
            call=module,
            inputs=(native_input(x),),
            variables=list(module.trainable_variables),
        )
    if name == "real2x":
        layer = keras.layers.MultiHeadAttention(HEADS, 2 * head)
    elif name in ("full", "gated"):
        layer = cvk.layers.ComplexMultiHeadAttention(
            HEADS, head, softmax=softmax, gated=name == "gated"
        )
    elif name == "gau":
        layer = cvk.layers.ComplexGatedAttentionUnit(
            1, GAU_KEY_DIM, softmax=softmax
        )
    elif name == "lsh":
        layer = cvk.layers.ComplexLSHAttention(
            HEADS,
            head,
            num_buckets=LSH_BUCKETS,
            num_hashes=LSH_HASHES,
            chunk_length=LSH_CHUNK,
            softmax=softmax,
            seed=0,
        )
    elif name in ("sparse", "sparse_strided"):
        # sparse_strided: also every S-th key, S = sqrt(T) (the Sparse
        # Transformer's choice: O(T sqrt(T)) work).
        stride = int(round(length**0.5)) if name == "sparse_strided" else None
        layer = cvk.layers.ComplexSparseAttention(
            HEADS,
            head,
            window=SPARSE_WINDOW,
            stride=stride,
            global_tokens=SPARSE_GLOBAL,
            softmax=softmax,
        )
    else:
        layer = cvk.layers.ComplexLowRankAttention(
            HEADS,
            head,
            rank=min(rank, length),
            max_length=length,
            softmax=softmax,
        )
    layer(x[:, :8], x[:, :8])
    return dict(
        call=lambda x: layer(x, x),
        inputs=(x,),
        variables=list(layer.trainable_variables),
    )


def _native_gib(length):
    """The native path's `(B, N, T, T)` complex64 scores, GiB."""
    return BATCH * HEADS * length * length * 8 / 2**30


def _real_gib(length):
    """`real2x`'s `(B, N, T, T)` float32 scores (Keras' MultiHeadAttention
    holds them whole, and its gradient several copies), GiB."""
    return BATCH * HEADS * length * length * 4 / 2**30


def _names(length, args):
    names = [name for name in CANDIDATES if name in args.candidates]
    if _native_gib(length) > args.native_limit_gib:
        names = [name for name in names if name != "native"]
    if _real_gib(length) >= args.native_limit_gib:
        names = [name for name in names if name != "real2x"]
    if length > args.exact_max_length:
        names = [name for name in names if name not in EXACT]
    return names


def _slope(points):
    """The least-squares slope of log(seconds) against log(T) over
    `[(T, seconds), ...]` (None for fewer than two lengths)."""
    import numpy as np

    if len(points) < 2:
        return None
    lengths, seconds = np.log(np.array(points, dtype=float)).T
    return float(np.polyfit(lengths, seconds, 1)[0])


def _growth(rows, passes):
    """`{pass: {candidate: slope}}` over the rows' lengths."""
    growth = {}
    for pass_ in passes:
        growth[pass_] = {}
        for name in CANDIDATES:
            points = [
                (row["length"], row["seconds"][name])
                for row in rows
                if row["pass"] == pass_ and name in row["seconds"]
            ]
            growth[pass_][name] = _slope(points)
    return growth


def _speedups(row):
    """How many times faster than `full` each alternative is in `row`
    (None where `full` was not timed)."""
    full = row["seconds"].get("full")
    return {
        name: (full / row["seconds"][name] if full else None)
        for name in ALTERNATIVES
        if name in row["seconds"]
    }


def _time(length, pass_, args):
    from _speed_candidates import compiled
    from _speed_timing import time_round_robin

    steps = {
        name: compiled(
            _candidate(name, length, args.rank, args.softmax),
            pass_,
            args.jit == "on",
        )
        for name in _names(length, args)
    }
    timed = time_round_robin(steps, args.repeats, warmup=1)
    return {name: result["median"] for name, result in timed.items()}


def _child(spec):
    """One candidate, length and pass in this process: prints its peak
    resident memory (MiB) as a JSON line."""
    from _speed_candidates import compiled
    from _speed_memory import _reset_peak
    from _speed_timing import block
    from attention_memory import _peak_and_current_kib

    candidate = _candidate(
        spec["name"], spec["length"], spec["rank"], spec["softmax"]
    )
    step = compiled(candidate, spec["pass_"], spec["jit"])
    reset = _reset_peak()
    _, base = _peak_and_current_kib()
    block(step())
    block(step())
    peak, _ = _peak_and_current_kib()
    print(
        json.dumps(
            dict(peak_mib=peak / 1024, base_mib=base / 1024, reset=reset)
        )
    )


def _memory(name, length, pass_, args):
    """`{peak_mib, base_mib}` of one candidate and pass, measured in a
    subprocess (`_child`), or `{error}`."""
    from cvattn_keras.export._subprocess import run_python

    spec = dict(
        name=name,
        length=length,
        pass_=pass_,
        rank=args.rank,
        softmax=args.softmax,
        jit=args.jit == "on",
    )
    done = run_python(
        [os.path.abspath(__file__), "--child", json.dumps(spec)],
        900,
        {"TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-2:]
        return {"error": f"exit {done.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


def _row_text(row):
    def ms(name):
        value = row["seconds"].get(name)
        return "-" if value is None else f"{1e3 * value:.1f}"

    def mib(name):
        value = row.get("memory", {}).get(name, {})
        return f"{value['peak_mib']:.0f}" if "peak_mib" in value else "-"

    speedups = _speedups(row)
    cells = [str(row["length"]), row["pass"]]
    cells += [ms(name) for name in CANDIDATES]
    cells += [
        "-" if speedups.get(name) is None else f"{speedups[name]:.1f}"
        for name in ALTERNATIVES
    ]
    if "memory" in row:
        cells += [mib(name) for name in CANDIDATES]
    return "| " + " | ".join(cells) + " |"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1024,4096,16384,65536")
    parser.add_argument("--exact-max-length", type=int, default=16384)
    parser.add_argument("--rank", type=int, default=256)
    parser.add_argument("--softmax", default="real")
    parser.add_argument("--passes", default="forward,backward")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--jit", choices=("on", "off"), default="on")
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--native-limit-gib", type=float, default=4.0)
    parser.add_argument("--json", default=None, help="write results here")
    parser.add_argument(
        "--candidates",
        default=",".join(CANDIDATES),
        help="comma-separated subset of " + ",".join(CANDIDATES),
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(json.loads(args.child))
        return None
    args.candidates = args.candidates.split(",")
    unknown = sorted(set(args.candidates) - set(CANDIDATES))
    if unknown:
        parser.error(f"--candidates: unknown {unknown}; from {CANDIDATES}")
    lengths = [int(x) for x in args.lengths.split(",")]
    passes = args.passes.split(",")
    print(
        f"B={BATCH}, heads={HEADS}, E={FEATURES} complex, softmax="
        f"{args.softmax}, rank={args.rank}, jit={args.jit}; ms per step "
        "(median), full/X = how many times faster X is than full"
        + ("; peak RSS MiB of a subprocess" if args.memory else "")
    )
    header = ["T", "pass", *CANDIDATES]
    header += [f"full/{name}" for name in ALTERNATIVES]
    if args.memory:
        header += [f"{name} MiB" for name in CANDIDATES]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    rows = []
    for length in lengths:
        for pass_ in passes:
            row = dict(length=length, seconds=_time(length, pass_, args))
            row["pass"] = pass_
            if args.memory:
                row["memory"] = {
                    name: _memory(name, length, pass_, args)
                    for name in _names(length, args)
                }
            rows.append(row)
            print(_row_text(row), flush=True)
    growth = _growth(rows, passes)
    print("\nGrowth with T (slope of log time against log T):")
    print("| pass | " + " | ".join(CANDIDATES) + " |")
    print("|" + " --- |" * (len(CANDIDATES) + 1))
    for pass_, slopes in growth.items():
        cells = [
            "-" if slopes[name] is None else f"{slopes[name]:.2f}"
            for name in CANDIDATES
        ]
        print(f"| {pass_} | " + " | ".join(cells) + " |")
    if args.json:
        import tensorflow as tf

        results = dict(
            benchmark="attention_alternatives",
            shape=dict(batch=BATCH, heads=HEADS, features=FEATURES),
            arguments=vars(args),
            machine=platform.platform(),
            cpus=os.cpu_count(),
            tensorflow=tf.__version__,
            rows=[dict(row, speedups=_speedups(row)) for row in rows],
            growth=growth,
        )
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2)
        print(f"Wrote {args.json}")
    return None


if __name__ == "__main__":
    main()
