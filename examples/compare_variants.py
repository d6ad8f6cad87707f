"""The paper's experiment: every attention variant and a real baseline
under one training budget, over several seeds.

Trains `music_classifier` with each of the 8 softmax x product variants and
`real_music_classifier` (real attention of comparable size) on the same
`synthetic_music` data, each for the same number of epochs, for each seed;
writes a markdown table of held-out micro-averaged AP (mean +- std over
seeds) and training time.

Run:  python examples/compare_variants.py [--epochs 10] [--seeds 3]
          [--output examples/output/compare_variants.md] [--smoke]
"""

import argparse
import math
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# cvattn_keras first, before keras imports TensorFlow: it quiets
# TensorFlow's C++ start-up lines (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

import cvattn_keras as cvk  # noqa: E402

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402

# The reference architecture scaled down to the data's 128 bins, as in
# train_music.py.
SMALL = dict(
    embed_dim=32,
    num_heads=4,
    num_layers=2,
    head_dim=64,
    frontend_filters=(8, 16, 16),
    frontend_kernel_sizes=(6, 3, 3),
)
TINY = dict(
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(4, 8),
    frontend_kernel_sizes=(6, 3),
)


def real_size(complex_size):
    """sqrt(2) times as wide (rounded to the heads): about the same number
    of parameters as the complex model."""
    heads = complex_size["num_heads"]
    return dict(
        complex_size,
        embed_dim=heads
        * round(math.sqrt(2) * complex_size["embed_dim"] / heads),
        head_dim=round(math.sqrt(2) * complex_size["head_dim"]),
        frontend_filters=tuple(
            round(math.sqrt(2) * f) for f in complex_size["frontend_filters"]
        ),
    )


def train(build, data, epochs, seed, batch_size=32):
    (x, y), (x_test, y_test) = data
    keras.utils.set_random_seed(seed)
    model = build()
    model.compile(
        keras.optimizers.Adam(2e-3),
        keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[cvk.metrics.MicroAveragedPrecision()],
    )
    start = time.perf_counter()
    model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0)
    seconds = time.perf_counter() - start
    return model.evaluate(x_test, y_test, verbose=0)[1], seconds, model


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument(
        "--output",
        default=os.path.join("examples", "output", "compare_variants.md"),
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        default=None,
        help="compound names such as realip absonlycp (default: all 8)",
    )
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    size = SMALL
    if args.smoke:
        args.epochs, args.seeds, args.samples = 1, 1, 40
        args.variants = args.variants or ["realip", "abscp"]
        size = TINY
    x, y = cvk.datasets.synthetic_music(
        num_samples=args.samples + args.samples // 4, seed=1234
    )
    split = args.samples
    data = (x[:split], y[:split]), (x[split:], y[split:])
    shape = dict(frames=x.shape[1], bins=x.shape[2] // 2, notes=y.shape[2])

    if args.variants:
        variants = [cvk.attention.parse_variant(v) for v in args.variants]
    else:
        variants = [
            (softmax, product)
            for product in cvk.attention.PRODUCTS
            for softmax in cvk.attention.SOFTMAX_VARIANTS
        ]
    runs = [(f"{s} / {p}", s, p) for s, p in variants]
    runs.append(("real baseline", None, None))
    rows = []
    for label, softmax, product in runs:
        if softmax is None:

            def build():
                return cvk.models.real_music_classifier(
                    **shape, **real_size(size)
                )
        else:

            def build():
                return cvk.models.music_classifier(
                    **shape, softmax=softmax, product=product, **size
                )

        scores, times = [], []
        for seed in range(args.seeds):
            ap, seconds, model = train(build, data, args.epochs, seed)
            scores.append(ap)
            times.append(seconds)
        rows.append(
            (
                label,
                np.mean(scores),
                np.std(scores),
                np.mean(times),
                model.count_params(),
            )
        )
        print(
            f"{label:20s} AP {rows[-1][1]:.3f} +- {rows[-1][2]:.3f}  "
            f"{rows[-1][3]:.0f} s/run",
            flush=True,
        )

    lines = [
        f"Held-out micro-averaged AP on synthetic_music ({args.samples} "
        f"training samples, {args.epochs} epochs, {args.seeds} seeds; "
        f"`python examples/compare_variants.py --epochs {args.epochs} "
        f"--seeds {args.seeds}`)",
        "",
        "| variant (softmax / product) | AP (mean +- std) | parameters "
        "| train time per run |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {label} | {mean:.3f} +- {std:.3f} | {params:,} | {sec:.0f} s |"
        for label, mean, std, sec, params in rows
    ]
    table = "\n".join(lines)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        f.write(table + "\n")
    print("\n" + table + f"\n\nwritten to {args.output}")
    return rows


if __name__ == "__main__":
    main()
