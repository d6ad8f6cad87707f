"""Counts the collectives XLA inserts for one model-parallel layer.

Run as a script (it forces 2 host devices before JAX starts):

    python tests/distributed_workers/hlo_collectives.py [--only TEXT[|TEXT...]]

For each case it compiles, on a (batch=1, model=2) mesh, the forward pass
`sum(layer(x) ** 2)` and one SGD training step with `jax.jit`, and counts
the all-reduce, all-gather, all-to-all, collective-permute and
reduce-scatter ops of the compiled HLO and the bytes of their results.
Prints a Markdown table and a `RESULT {"rows": [...]}` line; `--only
TEXT|TEXT2` keeps the cases whose name contains one of the texts.
"""

import os

os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_force_host_platform_device_count=2"
)

import json  # noqa: E402
import sys  # noqa: E402

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from cvattn_keras import distribution as cdist  # noqa: E402
from cvattn_keras import layers as cl  # noqa: E402

BATCH, LENGTH = 8, 16


def case_layers():
    """(name, layer factory, input width, layout rules) for each case."""
    shard_units = {
        ".*kernel.*": (None, "model"),
        ".*bias.*": ("model",),
    }
    shard_inputs = {".*kernel.*": ("model", None)}
    megatron = {
        ".*mlp_in/kernel.*": (None, "model"),
        ".*mlp_in/bias.*": ("model",),
        ".*mlp_out/kernel.*": ("model", None),
    }
    return [
        (
            "real Dense 128->256, replicated",
            lambda: keras.layers.Dense(256),
            128,
            {},
        ),
        (
            "real Dense 128->256, units sharded",
            lambda: keras.layers.Dense(256),
            128,
            shard_units,
        ),
        (
            "real Dense 128->256, inputs sharded",
            lambda: keras.layers.Dense(256),
            128,
            shard_inputs,
        ),
        (
            "ComplexDense 64->128, kernel_real/imag units sharded",
            lambda: cl.ComplexDense(128),
            128,
            shard_units,
        ),
        (
            "ComplexDense 64->128, kernel_real/imag inputs sharded",
            lambda: cl.ComplexDense(128),
            128,
            shard_inputs,
        ),
        (
            "ComplexDense 64->128, get_layout_map",
            lambda: cl.ComplexDense(128),
            128,
            None,
        ),
        (
            "BlockComplexDense 64->128, units sharded",
            lambda: BlockComplexDense(128),
            128,
            shard_units,
        ),
        (
            "BlockComplexDense 64->128, inputs sharded",
            lambda: BlockComplexDense(128),
            128,
            shard_inputs,
        ),
        (
            "real MLP 128->256->128, Megatron",
            lambda: mlp(keras.layers.Dense, 256, 128),
            128,
            megatron,
        ),
        (
            "ComplexDense MLP 64->128->64, Megatron",
            lambda: mlp(cl.ComplexDense, 128, 64),
            128,
            megatron,
        ),
        (
            "BlockComplexDense MLP 64->128->64, Megatron",
            lambda: mlp(BlockComplexDense, 128, 64),
            128,
            megatron,
        ),
        (
            "ComplexMultiHeadAttention E=64, 4 heads, Megatron layout",
            lambda: cl.ComplexMultiHeadAttention(4, 16),
            128,
            {
                ".*(query|key|value)/kernel.*": (None, "model"),
                ".*(query|key|value)/bias.*": ("model",),
                ".*attention_output/kernel.*": ("model", None),
            },
        ),
        (
            "ComplexDense MLP 64->128->64, get_layout_map",
            lambda: mlp(cl.ComplexDense, 128, 64, "feedforward"),
            128,
            None,
        ),
        (
            "ComplexMultiHeadAttention E=64, 4 heads, get_layout_map",
            lambda: cl.ComplexMultiHeadAttention(4, 16),
            128,
            None,
        ),
        (
            "real MultiHeadAttention E=128, 4 heads, Megatron layout",
            lambda: keras.layers.MultiHeadAttention(4, 32),
            128,
            {
                ".*(query|key|value)/kernel": (None, "model", None),
                ".*(query|key|value)/bias": ("model", None),
                ".*attention_output/kernel": ("model", None, None),
            },
        ),
    ]


class BlockComplexDense(cl.ComplexDense):
    """ComplexDense as it was computed before: one matmul against the block
    kernel `[[W_r, W_i], [-W_i, W_r]]`, concatenated along the feature axes
    (measured here against today's contraction over stacked axes)."""

    def call(self, inputs):
        from keras import ops

        from cvattn_keras import complex as cx

        kernel = cx.block_kernel(self.kernel_real, self.kernel_imag)
        outputs = ops.matmul(inputs, kernel)
        if self.use_bias:
            bias = ops.concatenate([self.bias_real, self.bias_imag], axis=0)
            outputs = outputs + bias
        return outputs


def mlp(dense, hidden, out, prefix="mlp"):
    """Two dense layers with a ReLU between (names `<prefix>_in/out`)."""
    return keras.Sequential(
        [
            dense(hidden, name=f"{prefix}_in"),
            keras.layers.ReLU(),
            dense(out, name=f"{prefix}_out"),
        ]
    )


_BYTES = {
    "f32": 4,
    "f16": 2,
    "bf16": 2,
    "s32": 4,
    "u32": 4,
    "pred": 1,
    "f64": 8,
    "s64": 8,
    "u8": 1,
    "s8": 1,
}
OPS = (
    "all-reduce",
    "all-gather",
    "all-to-all",
    "collective-permute",
    "reduce-scatter",
)


def count_collectives(hlo_text):
    """{op: [count, bytes]} over the compiled HLO text."""
    import re

    counts = {op: [0, 0] for op in OPS}
    for line in hlo_text.splitlines():
        match = re.search(r"=\s*(.*?)\s+([a-z\-]+)\(", line)
        if not match:
            continue
        op = match.group(2)
        if op.endswith("-start"):
            op = op[: -len("-start")]
        if op not in counts:
            continue
        nbytes = 0
        for dtype, dims in re.findall(
            r"([a-z]+\d*)\[([\d,]*)\]", match.group(1)
        ):
            size = int(np.prod([int(d) for d in dims.split(",") if d]))
            nbytes += size * _BYTES.get(dtype, 4)
        counts[op][0] += 1
        counts[op][1] += nbytes
    return counts


def measure(name, factory, width, rules):
    mesh = keras.distribution.DeviceMesh((1, 2), ("batch", "model"))
    if rules is None:
        layout_map = cdist.get_layout_map(mesh)
    else:
        layout_map = keras.distribution.LayoutMap(mesh)
        for key, axes in rules.items():
            layout_map[key] = axes
    distribution = keras.distribution.ModelParallel(
        layout_map=layout_map, batch_dim_name="batch"
    )
    with distribution.scope():
        layer = factory()
        x = (
            np.random.default_rng(0)
            .standard_normal((BATCH, LENGTH, width))
            .astype("float32")
        )
        is_attention = "Attention" in name
        if is_attention:
            layer(x, x)
        else:
            layer(x)
        trainable = [v.value for v in layer.trainable_variables]
        frozen = [v.value for v in layer.non_trainable_variables]

    def loss(trainable, x):
        args = (x, x) if is_attention else (x,)
        y, _ = layer.stateless_call(trainable, frozen, *args)
        return jax.numpy.sum(y * y)

    def step(trainable, x):
        grads = jax.grad(loss)(trainable, x)
        return [v - 0.01 * g for v, g in zip(trainable, grads)]

    shardings = [v.sharding for v in trainable]
    rows = {}
    for kind, fn, out in (
        ("forward", loss, None),
        ("train step", step, shardings),
    ):
        jitted = jax.jit(fn, out_shardings=out)
        text = jitted.lower(trainable, x).compile().as_text()
        rows[kind] = count_collectives(text)
    return rows


def main(argv):
    assert len(jax.devices()) == 2, jax.devices()
    # --only A|B|...: the cases whose name contains any of the texts.
    only = argv[argv.index("--only") + 1] if "--only" in argv else ""
    results = []
    for name, factory, width, rules in case_layers():
        if not any(text in name for text in only.split("|")):
            continue
        rows = measure(name, factory, width, rules)
        for kind, counts in rows.items():
            results.append(
                {
                    "case": name,
                    "pass": kind,
                    **{
                        op: {"count": c, "bytes": b}
                        for op, (c, b) in counts.items()
                    },
                }
            )
    header = "| case | pass | " + " | ".join(OPS) + " | total bytes |"
    print(header)
    print("|" + "---|" * (len(OPS) + 3))
    for row in results:
        cells = [f"{row[op]['count']} ({row[op]['bytes']} B)" for op in OPS]
        total = sum(row[op]["bytes"] for op in OPS)
        print(
            f"| {row['case']} | {row['pass']} | "
            + " | ".join(cells)
            + f" | {total} |"
        )
    print("RESULT " + json.dumps({"rows": results}), flush=True)


if __name__ == "__main__":
    main(sys.argv)
