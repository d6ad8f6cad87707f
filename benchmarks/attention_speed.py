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

The default (every variant, both shapes, both passes, jit on, layer level,
ComplexDense, sweep to T = 4096) takes about 3 minutes on 2 CPU cores;
`--quick` under 1 minute; `--jit on,off --tflite` about 6.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import cvattn_keras as cvk  # noqa: E402

SHAPES = {
    # The paper's attention layer (Eilers & Jiang 2023, MusicNet model).
    "paper": dict(batch=35, length=64, features=320, heads=8),
    "long": dict(batch=4, length=512, features=128, heads=4),
}
PAPER_NAMES = {"real": "CAtt", "abs": "APAtt", "absonly": "AAtt"}
PAPER_NAMES["naive"] = "RIAtt"
PRODUCT_NAMES = {"inner": "ip", "bilinear": "cp"}


def variant_name(softmax, product):
    return f"{PAPER_NAMES[softmax]} {PRODUCT_NAMES[product]}"


def targets(softmax, product, pass_):
    """(max ratio to the limit, min speed-up over native or None): issue 6."""
    if softmax == "real" and product == "inner":
        return (1.1, 3.0) if pass_ == "forward" else (1.2, None)
    return 1.5, 2.0


# --------------------------------------------------------------------------
# The native complex64 peer.
# --------------------------------------------------------------------------


class NativeComplexAttention(tf.Module):
    """Complex multi-head attention in native complex64 TensorFlow ops: the
    formulation of the reference PyTorch code (complex projections, complex
    score matmul, softmax on the real part or the modulus)."""

    def __init__(self, features, heads, softmax, product, seed=0):
        super().__init__()
        self.heads, self.head_dim = heads, features // heads
        self.softmax, self.product = softmax, product
        rng = np.random.default_rng(seed)
        scale = (2.0 * features) ** -0.5

        def complex_variable(shape, name):
            parts = rng.standard_normal((2,) + shape) * scale
            value = (parts[0] + 1j * parts[1]).astype(np.complex64)
            return tf.Variable(value, name=name)

        self.kernels = [
            complex_variable((features, features), f"kernel_{n}")
            for n in "qkvo"
        ]
        self.biases = [
            complex_variable((features,), f"bias_{n}") for n in "qkvo"
        ]

    def _split_heads(self, x):  # (B, L, E) -> (B, N, L, H)
        shape = tf.shape(x)
        x = tf.reshape(x, (shape[0], shape[1], self.heads, self.head_dim))
        return tf.transpose(x, (0, 2, 1, 3))

    def __call__(self, z, causal=False):  # z: (B, T, E) complex64
        (wq, wk, wv, wo), (bq, bk, bv, bo) = self.kernels, self.biases
        q = self._split_heads(tf.matmul(z, wq) + bq)
        k = self._split_heads(tf.matmul(z, wk) + bk)
        v = self._split_heads(tf.matmul(z, wv) + bv)
        out = native_core(q, k, v, self.softmax, self.product, causal)
        out = tf.transpose(out, (0, 2, 1, 3))  # (B, T, N, H)
        return tf.matmul(tf.reshape(out, tf.shape(z)), wo) + bo


def native_core(q, k, v, softmax, product, causal=False):
    """Complex attention of per-head complex64 `(B, N, T, H)` tensors."""
    scale = tf.constant(q.shape[-1] ** -0.5, tf.complex64)
    if product == "inner":  # q conj(k)^T
        a = tf.matmul(q, k, adjoint_b=True) * scale
    else:  # q k^T
        a = tf.matmul(q, k, transpose_b=True) * scale
    mask = None
    if causal:
        ones = tf.ones((tf.shape(q)[2], tf.shape(k)[2]), tf.bool)
        mask = tf.linalg.band_part(ones, -1, 0)

    def masked_softmax(logits):
        if mask is not None:
            logits = tf.where(mask, logits, tf.constant(-1e30, logits.dtype))
        return tf.nn.softmax(logits, axis=-1)

    if softmax == "real":
        w = tf.cast(masked_softmax(tf.math.real(a)), tf.complex64)
    elif softmax == "naive":
        w = tf.complex(
            masked_softmax(tf.math.real(a)), masked_softmax(tf.math.imag(a))
        )
    else:
        modulus = tf.abs(a)
        w = tf.cast(masked_softmax(modulus), tf.complex64)
        if softmax == "abs":  # sgn(A) = A / |A|, 0 at 0
            w = w * tf.math.divide_no_nan(a, tf.cast(modulus, a.dtype))
    return tf.matmul(w, v)


# --------------------------------------------------------------------------
# Candidates: a model, its input, its variables, its loss.
# --------------------------------------------------------------------------


def stacked_input(shape, seed=0):
    rng = np.random.default_rng(seed)
    size = (shape["batch"], shape["length"], 2 * shape["features"])
    return tf.constant(rng.standard_normal(size).astype("float32"))


def native_input(x):
    re, im = tf.split(x, 2, axis=-1)
    return tf.complex(re, im)


def built(layer, x, **kwargs):
    layer(x, x, **kwargs)
    return layer


def candidate_ours(shape, softmax, product, x, causal):
    layer = built(
        cvk.layers.ComplexMultiHeadAttention(
            shape["heads"],
            shape["features"] // shape["heads"],
            softmax=softmax,
            product=product,
        ),
        x,
        use_causal_mask=causal,
    )
    return dict(
        call=lambda x: layer(x, x, use_causal_mask=causal),
        inputs=(x,),
        variables=layer.trainable_weights,
    )


def candidate_limit(shape, x, causal):
    layer = built(
        keras.layers.MultiHeadAttention(
            shape["heads"], 2 * (shape["features"] // shape["heads"])
        ),
        x,
        use_causal_mask=causal,
    )
    return dict(
        call=lambda x: layer(x, x, use_causal_mask=causal),
        inputs=(x,),
        variables=layer.trainable_weights,
    )


def candidate_native(shape, softmax, product, x, causal):
    module = NativeComplexAttention(
        shape["features"], shape["heads"], softmax, product
    )
    return dict(
        call=lambda z: module(z, causal=causal),
        inputs=(native_input(x),),
        variables=list(module.trainable_variables),
    )


def candidate_dense(layer, x):
    layer(x)
    return dict(call=layer, inputs=(x,), variables=layer.trainable_weights)


def candidate_native_dense(features, x):
    rng = np.random.default_rng(0)
    parts = rng.standard_normal((2, features, features)) / np.sqrt(features)
    kernel = tf.Variable((parts[0] + 1j * parts[1]).astype(np.complex64))
    bias = tf.Variable(tf.zeros((features,), tf.complex64))
    return dict(
        call=lambda z: tf.matmul(z, kernel) + bias,
        inputs=(native_input(x),),
        variables=[kernel, bias],
    )


def core_inputs(shape, seed=0):
    """Per-head stacked q, k, v `(B, L, N, 2H)` of the attention core."""
    rng = np.random.default_rng(seed)
    size = (
        shape["batch"],
        shape["length"],
        shape["heads"],
        2 * (shape["features"] // shape["heads"]),
    )
    return tuple(
        tf.constant(rng.standard_normal(size).astype("float32"))
        for _ in range(3)
    )


def candidate_core_ours(softmax, product, qkv, causal):
    mask = causal_mask(qkv[0]) if causal else None
    return dict(
        call=lambda q, k, v: cvk.attention.complex_dot_product_attention(
            q, k, v, softmax, product, mask=mask
        ),
        inputs=qkv,
    )


def candidate_core_limit(qkv, causal, doubled=False):
    """Real `keras.ops.dot_product_attention` of head width 2H; `doubled`:
    over 2S keys, the FLOPs of the stacked [Re | Im] score and value
    matmuls of the complex-weight variants."""
    mask = causal_mask(qkv[0]) if causal else None

    def call(q, k, v):
        mask_ = mask
        if doubled:
            k, v = (_twice_the_keys(t) for t in (k, v))
            mask_ = None if mask is None else tf.concat([mask, mask], -1)
        scale = (q.shape[-1] // 2) ** -0.5
        return keras.ops.dot_product_attention(q, k, v, mask=mask_, scale=scale)

    return dict(call=call, inputs=qkv)


def _twice_the_keys(t):
    return tf.concat([t, t], axis=1)


def causal_mask(q):
    length = q.shape[1]
    return tf.linalg.band_part(tf.ones((length, length), tf.bool), -1, 0)


def candidate_core_native(softmax, product, qkv, causal):
    def to_native(t):  # (B, L, N, 2H) stacked -> (B, N, L, H) complex64
        re, im = tf.split(t, 2, axis=-1)
        return tf.transpose(tf.complex(re, im), (0, 2, 1, 3))

    return dict(
        call=lambda q, k, v: native_core(q, k, v, softmax, product, causal),
        inputs=tuple(to_native(t) for t in qkv),
    )


def squared_norm(y):
    if y.dtype.is_complex:
        return tf.reduce_sum(tf.math.real(y * tf.math.conj(y)))
    return tf.reduce_sum(tf.square(y))


def compiled(candidate, pass_, jit):
    """A zero-argument callable running the candidate's forward pass, or its
    forward pass and the gradient of `sum |y|^2` w.r.t. its weights (its
    inputs when it has none), as one `tf.function` (XLA-compiled when
    `jit`)."""
    call, variables = candidate["call"], candidate.get("variables")
    if pass_ == "forward":

        def step(*inputs):
            return call(*inputs)

    else:

        def step(*inputs):
            with tf.GradientTape() as tape:
                tape.watch(inputs)
                loss = squared_norm(call(*inputs))
            return tape.gradient(loss, variables or inputs)

    function = tf.function(step, jit_compile=jit)
    inputs = candidate["inputs"]
    return lambda: function(*inputs)


# --------------------------------------------------------------------------
# Timing.
# --------------------------------------------------------------------------


def time_round_robin(functions, repeats, warmup=2):
    """Median seconds per call of each function, timed in interleaved
    rounds (rotating the order) so that load changes hit all alike.

    Returns {name: dict(median, iqr, first, samples)}, `first` being the
    first call (tracing and compilation included) and `samples` the time of
    each round."""
    first = {}
    for name, function in functions.items():
        start = time.perf_counter()
        _block(function())
        first[name] = time.perf_counter() - start
        for _ in range(warmup):
            _block(function())
    times = {name: [] for name in functions}
    names = list(functions)
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            _block(functions[name]())
            times[name].append(time.perf_counter() - start)
    result = {}
    for name, samples in times.items():
        quartiles = statistics.quantiles(samples, n=4) if repeats > 1 else []
        result[name] = dict(
            median=statistics.median(samples),
            iqr=(quartiles[2] - quartiles[0]) if quartiles else 0.0,
            first=first[name],
            samples=samples,
        )
    return result


def ratio(timed, numerator, denominator):
    """The median over rounds of the time ratio of two functions timed in
    the same round: robust to load that changes between rounds."""
    pairs = zip(timed[numerator]["samples"], timed[denominator]["samples"])
    return statistics.median(a / b for a, b in pairs)


def _block(outputs):
    """Waits for the outputs (TensorFlow runs ops asynchronously only on
    accelerators, but reading one element makes the wait explicit)."""
    for tensor in tf.nest.flatten(outputs):
        tensor.numpy().flat[0]


# --------------------------------------------------------------------------
# The benchmarks.
# --------------------------------------------------------------------------


def attention_candidates(level, shape, args):
    """The candidates of one group: the limit (and, for the core, the
    FLOP floor of the complex-weight variants), ours and native for every
    variant asked for."""
    causal = args.causal
    if level == "layer":
        x = stacked_input(shape)
        candidates = {"limit": candidate_limit(shape, x, causal)}
        ours, native = candidate_ours, candidate_native
        data = x
    else:
        qkv = core_inputs(shape)
        candidates = {
            "limit": candidate_core_limit(qkv, causal),
            "floor": candidate_core_limit(qkv, causal, doubled=True),
        }
        data = qkv

        def ours(shape, softmax, product, qkv, causal):
            return candidate_core_ours(softmax, product, qkv, causal)

        def native(shape, softmax, product, qkv, causal):
            return candidate_core_native(softmax, product, qkv, causal)

    for softmax in args.softmax:
        for product in args.product:
            key = (softmax, product)
            candidates[("ours",) + key] = ours(
                shape, softmax, product, data, causal
            )
            candidates[("native",) + key] = native(
                shape, softmax, product, data, causal
            )
    return candidates


def bench_attention(args, level):
    """Rows of ours / limit / native times for every shape, jit mode, pass
    and variant; `level` is "layer" (ComplexMultiHeadAttention against
    keras.layers.MultiHeadAttention) or "core" (complex_dot_product_attention
    against keras.ops.dot_product_attention, on projected per-head
    tensors)."""
    rows = []
    for shape_name in args.shapes:
        shape = SHAPES[shape_name]
        for jit in args.jit:
            candidates = attention_candidates(level, shape, args)
            for pass_ in args.passes:
                functions = {
                    name: compiled(c, pass_, jit)
                    for name, c in candidates.items()
                }
                started = time.perf_counter()
                # Forward passes are cheap: twice the rounds.
                repeats = args.repeats * (2 if pass_ == "forward" else 1)
                timed = time_round_robin(functions, repeats)
                limit = timed["limit"]["median"]
                floor = timed.get("floor", {}).get("median")
                for softmax in args.softmax:
                    for product in args.product:
                        ours = timed[("ours", softmax, product)]
                        native = timed[("native", softmax, product)]["median"]
                        max_ratio, min_speedup = targets(
                            softmax, product, pass_
                        )
                        name = ("ours", softmax, product)
                        vs_limit = ratio(timed, name, "limit")
                        vs_floor = floor and ratio(timed, name, "floor")
                        speedup = ratio(
                            timed, ("native", softmax, product), name
                        )
                        rows.append(
                            dict(
                                level=level,
                                shape=shape_name,
                                **shape,
                                jit=jit,
                                pass_=pass_,
                                softmax=softmax,
                                product=product,
                                variant=variant_name(softmax, product),
                                ours_ms=1e3 * ours["median"],
                                ours_iqr_ms=1e3 * ours["iqr"],
                                limit_ms=1e3 * limit,
                                limit_iqr_ms=1e3 * timed["limit"]["iqr"],
                                floor_ms=floor and 1e3 * floor,
                                native_ms=1e3 * native,
                                vs_limit=vs_limit,
                                vs_floor=vs_floor,
                                native_over_ours=speedup,
                                target_vs_limit=max_ratio,
                                target_speedup=min_speedup,
                                met=vs_limit <= max_ratio
                                and (
                                    min_speedup is None
                                    or speedup >= min_speedup
                                ),
                            )
                        )
                print(
                    f"  [{level} {shape_name}, {pass_}, "
                    f"jit={'on' if jit else 'off'}: "
                    f"{time.perf_counter() - started:.0f} s]",
                    file=sys.stderr,
                )
    return rows


def _pass_name(pass_):
    return "fwd" if pass_ == "forward" else "fwd+bwd"


def print_attention_table(rows, causal):
    print(
        "\n## ComplexMultiHeadAttention vs the limit (real MHA, 2 x key_dim) "
        f"and native complex64{' (causal mask)' if causal else ''}\n"
    )
    print(
        "| shape | pass | jit | variant | ours (ms) | limit (ms) | "
        "native (ms) | ours / limit | native / ours | target | met |"
    )
    print("| --- " * 4 + "| ---: " * 5 + "| --- | --- |")
    for r in rows:
        target = f"≤ {r['target_vs_limit']}"
        if r["target_speedup"]:
            target += f", ≥ {r['target_speedup']:g}×"
        print(
            f"| {r['shape']} | {_pass_name(r['pass_'])} | "
            f"{'on' if r['jit'] else 'off'} | {r['variant']} | "
            f"{r['ours_ms']:.2f} | {r['limit_ms']:.2f} | "
            f"{r['native_ms']:.2f} | {r['vs_limit']:.2f} | "
            f"{r['native_over_ours']:.2f} | {target} | "
            f"{'yes' if r['met'] else 'no'} |"
        )


def print_core_table(rows, causal):
    print(
        "\n## Attention core alone (projected per-head q, k, v): "
        "complex_dot_product_attention vs keras.ops.dot_product_attention "
        f"of width 2H, over S and 2S keys{' (causal mask)' if causal else ''}"
        "\n"
    )
    print(
        "| shape | pass | jit | variant | ours (ms) | limit (ms) | "
        "floor, 2S keys (ms) | native (ms) | ours / limit | ours / floor | "
        "native / ours |"
    )
    print("| --- " * 4 + "| ---: " * 7 + "|")
    for r in rows:
        print(
            f"| {r['shape']} | {_pass_name(r['pass_'])} | "
            f"{'on' if r['jit'] else 'off'} | {r['variant']} | "
            f"{r['ours_ms']:.2f} | {r['limit_ms']:.2f} | "
            f"{r['floor_ms']:.2f} | {r['native_ms']:.2f} | "
            f"{r['vs_limit']:.2f} | {r['vs_floor']:.2f} | "
            f"{r['native_over_ours']:.2f} |"
        )


def bench_dense(args):
    rows = []
    for shape_name in args.shapes:
        shape = SHAPES[shape_name]
        x = stacked_input(shape)
        features = shape["features"]
        for jit in args.jit:
            candidates = {
                "ours": candidate_dense(cvk.layers.ComplexDense(features), x),
                "real": candidate_dense(keras.layers.Dense(2 * features), x),
                "native": candidate_native_dense(features, x),
            }
            for pass_ in args.passes:
                functions = {
                    name: compiled(c, pass_, jit)
                    for name, c in candidates.items()
                }
                timed = time_round_robin(functions, 4 * args.repeats)
                ours, real, native = (
                    timed[n]["median"] for n in ("ours", "real", "native")
                )
                vs_real = ratio(timed, "ours", "real")
                rows.append(
                    dict(
                        shape=shape_name,
                        tokens=shape["batch"] * shape["length"],
                        features=features,
                        jit=jit,
                        pass_=pass_,
                        ours_ms=1e3 * ours,
                        real_ms=1e3 * real,
                        native_ms=1e3 * native,
                        vs_real=vs_real,
                        native_over_ours=ratio(timed, "native", "ours"),
                        met=vs_real <= 1.1,
                    )
                )
    return rows


def print_dense_table(rows):
    print(
        "\n## ComplexDense(E) vs real Dense(2E) on the same (B, T, 2E) "
        "input, and native complex64 matmul\n"
    )
    print(
        "| shape | pass | jit | ours (ms) | real Dense (ms) | native (ms) | "
        "ours / real | native / ours | target | met |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for r in rows:
        pass_ = "fwd" if r["pass_"] == "forward" else "fwd+bwd"
        print(
            f"| {r['shape']} (B·T={r['tokens']}, E={r['features']}) | {pass_} "
            f"| {'on' if r['jit'] else 'off'} | {r['ours_ms']:.3f} | "
            f"{r['real_ms']:.3f} | {r['native_ms']:.3f} | "
            f"{r['vs_real']:.2f} | {r['native_over_ours']:.2f} | ≤ 1.1 | "
            f"{'yes' if r['met'] else 'no'} |"
        )


def bench_sweep(args):
    """Forward time against T (batch 1, E = 128, 4 heads) for CAtt and
    APAtt (inner product), the limit, and native complex64."""
    rows = []
    jit = args.jit[0]
    lengths = []
    length = 128
    while length <= args.sweep_max:
        lengths.append(length)
        length *= 2
    for length in lengths:
        shape = dict(batch=1, length=length, features=128, heads=4)
        x = stacked_input(shape)
        candidates = {"limit": candidate_limit(shape, x, False)}
        for softmax in ("real", "abs"):
            candidates[f"ours {softmax}"] = candidate_ours(
                shape, softmax, "inner", x, False
            )
            candidates[f"native {softmax}"] = candidate_native(
                shape, softmax, "inner", x, False
            )
        functions = {
            name: compiled(c, "forward", jit) for name, c in candidates.items()
        }
        repeats = max(5, args.repeats * 256 // max(length, 256))
        timed = time_round_robin(functions, repeats, warmup=1)
        rows.append(
            dict(length=length, jit=jit, repeats=repeats)
            | {name: 1e3 * t["median"] for name, t in timed.items()}
            | {
                f"{name} / limit": ratio(timed, name, "limit")
                for name in ("ours real", "ours abs")
            }
        )
        print(f"  [sweep T={length}]", file=sys.stderr)
    return rows


SWEEP_COLUMNS = ("limit", "ours real", "native real", "ours abs", "native abs")
SWEEP_LABELS = dict(
    zip(
        SWEEP_COLUMNS,
        (
            "limit: real MHA, 2x width",
            "CAtt ip (ours)",
            "CAtt ip (native complex64)",
            "APAtt ip (ours)",
            "APAtt ip (native complex64)",
        ),
    )
)


def print_sweep_table(rows):
    jit = "on" if rows and rows[0]["jit"] else "off"
    print(
        "\n## Scaling with T: forward, batch 1, E = 128, 4 heads, "
        f"jit {jit} (ms)\n"
    )
    print(
        "| T | "
        + " | ".join(SWEEP_LABELS[c] for c in SWEEP_COLUMNS)
        + " | CAtt / limit | APAtt / limit |"
    )
    print("| ---: " * (len(SWEEP_COLUMNS) + 3) + "|")
    for r in rows:
        cells = " | ".join(f"{r[c]:.2f}" for c in SWEEP_COLUMNS)
        print(
            f"| {r['length']} | {cells} | {r['ours real / limit']:.2f} "
            f"| {r['ours abs / limit']:.2f} |"
        )


def plot_sweep(rows, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "\n(matplotlib is not installed: skipping the sweep plot; the "
            "table above holds the same numbers.)"
        )
        return None
    lengths = [r["length"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    for column in SWEEP_COLUMNS:
        style = "--" if column.startswith("native") else "-"
        ax.loglog(
            lengths,
            [r[column] for r in rows],
            style,
            marker="o",
            label=SWEEP_LABELS[column],
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("forward time (ms)")
    ax.set_title("Complex attention, batch 1, E = 128, 4 heads")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"\nSaved the sweep plot to {path}")
    return path


def bench_tflite(args):
    """LiteRT latency of an exported CAtt model vs an exported real MHA
    model of twice the width, batch 1, paper shape."""
    shape = SHAPES["paper"]
    heads, features = shape["heads"], shape["features"]
    inputs = keras.Input((shape["length"], 2 * features))
    catt = keras.Model(
        inputs,
        cvk.layers.ComplexMultiHeadAttention(heads, features // heads)(
            inputs, inputs
        ),
    )
    real = keras.Model(
        inputs,
        keras.layers.MultiHeadAttention(heads, 2 * features // heads)(
            inputs, inputs
        ),
    )
    sample = np.random.default_rng(0).standard_normal(
        (1, shape["length"], 2 * features)
    )
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for name, model in (("CAtt ip (ours)", catt), ("real MHA", real)):
            path = cvk.export.export_tflite(
                model, os.path.join(directory, "model.tflite")
            )
            report = cvk.export.verify_tflite(
                path, model, sample.astype("float32"), num_runs=args.tflite_runs
            )
            rows.append(
                dict(
                    model=name,
                    size_kib=report.size_bytes / 1024,
                    median_latency_ms=report.median_latency_ms,
                    max_abs_error=report.max_abs_error,
                    builtin_only=report.builtin_only,
                )
            )
    return rows


def print_tflite_table(rows):
    print(
        "\n## LiteRT latency, batch 1, T = 64, E = 320 complex (640 real "
        "channels), 8 heads\n"
    )
    print("| model | size (KiB) | median latency (ms) | builtin only |")
    print("| --- | ---: | ---: | --- |")
    for r in rows:
        print(
            f"| {r['model']} | {r['size_kib']:.0f} | "
            f"{r['median_latency_ms']:.3f} | {r['builtin_only']} |"
        )
    if len(rows) == 2:
        ratio = rows[0]["median_latency_ms"] / rows[1]["median_latency_ms"]
        print(f"\nCAtt / real: {ratio:.2f}")


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
    if "layer" in args.level:
        results["attention"] = bench_attention(args, "layer")
        print_attention_table(results["attention"], args.causal)
    if "core" in args.level:
        results["core"] = bench_attention(args, "core")
        print_core_table(results["core"], args.causal)
    if not args.no_dense:
        results["dense"] = bench_dense(args)
        print_dense_table(results["dense"])
    if not args.no_sweep:
        results["sweep"] = bench_sweep(args)
        print_sweep_table(results["sweep"])
        results["sweep_plot"] = plot_sweep(results["sweep"], args.plot)
    if args.tflite:
        results["tflite"] = bench_tflite(args)
        print_tflite_table(results["tflite"])
    results["seconds"] = time.perf_counter() - started
    print(f"\n(total {results['seconds']:.0f} s)")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=2, default=str)
        print(f"Wrote {args.json}")


if __name__ == "__main__":
    main()
