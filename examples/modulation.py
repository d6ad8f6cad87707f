"""Does complex structure buy robustness? Radio modulation recognition
under carrier phases never seen in training.

Both models read IQ sequences from `cvattn_keras.datasets.
synthetic_modulation` (BPSK, QPSK, 8PSK, 16QAM, 64QAM, GFSK with noise and
frequency offset), cut into tokens of 8 complex samples. They are trained
on carrier phases in [0, pi/16) only and tested on [0, pi/16) and on the
unseen [pi/8, pi/4) (unseen modulo every constellation's symmetry).

- complex: bias-free ComplexDense embedding, a bias-free
  ComplexMultiHeadAttention (CAtt: its inner-product scores ignore a global
  phase) with a residual connection, a bias-free ComplexDense, then the
  modulus, average pooling and a real softmax classifier. A constant phase
  rotation of the input rotates every complex feature and vanishes in the
  modulus: the model is phase-invariant by construction.
- real: the same architecture on the stacked [Re | Im] channels with real
  Dense layers and `keras.layers.MultiHeadAttention`, sqrt(2) times as wide
  (a complex weight holds two reals): about the same parameter count.

A demonstration of phase invariance, not a benchmark: the test is built
so that a model which has seen one range of phases fails on another.
The radio field trains on every phase and reads accuracy against SNR:
`examples/radio.py` does that (docs/radio.md).

Run:  python examples/modulation.py [--epochs 20] [--smoke]
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# cvattn_keras first, before keras imports TensorFlow: it quiets
# TensorFlow's C++ start-up lines (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

import cvattn_keras as cvk  # noqa: E402

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402

# The examples' shared argument checks, beside this file (on sys.path when
# run as a script; added when loaded with runpy, as the tests do).
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
import _arguments as arguments  # noqa: E402

# Constellations repeat under rotation (QPSK and QAM by pi/2, 8PSK by
# pi/4, BPSK by pi): training on [0, pi/16) and testing on [pi/8, pi/4)
# leaves the test phases unseen modulo every symmetry.
TRAIN_PHASES = (0.0, np.pi / 16)
UNSEEN_PHASES = (np.pi / 8, np.pi / 4)
# A small frequency offset (at most 0.1 rad of drift over a sequence), so
# that a sequence's phase stays in its range.
FREQUENCY_OFFSET = 1e-4


def complex_model(tokens, token_length, classes, width=32, heads=4):
    layers = cvk.layers
    inputs = keras.Input((tokens, 2 * token_length), name="iq")
    x = layers.ComplexDense(width, use_bias=False, name="embed")(inputs)
    attention = layers.ComplexMultiHeadAttention(
        heads, width // heads, use_bias=False, name="attention"
    )(x, x)
    x = keras.layers.Add()([x, attention])
    x = layers.ComplexDense(width, use_bias=False, name="mix")(x)
    x = layers.ComplexModulus(name="modulus")(x)
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(width, activation="relu")(x)
    outputs = keras.layers.Dense(classes, name="classes")(x)
    return keras.Model(inputs, outputs, name="complex")


def real_model(tokens, token_length, classes, width=44, heads=4):
    layers = keras.layers
    inputs = keras.Input((tokens, 2 * token_length), name="iq")
    x = layers.Dense(width, name="embed")(inputs)
    attention = layers.MultiHeadAttention(
        heads, width // heads, name="attention"
    )(x, x)
    x = layers.Add()([x, attention])
    x = layers.Dense(width, activation="relu", name="mix")(x)
    x = layers.GlobalAveragePooling1D()(x)
    x = layers.Dense(width, activation="relu")(x)
    outputs = layers.Dense(classes, name="classes")(x)
    return keras.Model(inputs, outputs, name="real")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=arguments.positive_int, default=20)
    parser.add_argument(
        "--samples",
        type=arguments.int_at_least(4, "a quarter of them in each test set"),
        default=6000,
    )
    parser.add_argument("--seed", type=arguments.non_negative_int, default=0)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.smoke:
        args.epochs, args.samples = 1, 120
    return args


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)

    def data(phases, count, seed):
        return cvk.datasets.synthetic_modulation(
            num_samples=count,
            phase_range=phases,
            max_frequency_offset=FREQUENCY_OFFSET,
            seed=seed,
        )

    x, y = data(TRAIN_PHASES, args.samples, args.seed)
    tests = {
        "seen phases [0, pi/16)": data(TRAIN_PHASES, args.samples // 4, 101),
        "unseen phases [pi/8, pi/4)": data(
            UNSEEN_PHASES, args.samples // 4, 102
        ),
    }
    tokens, token_length = x.shape[1], x.shape[2] // 2
    classes = len(cvk.datasets.MODULATIONS)
    print(
        f"{len(x)} training sequences of {tokens} tokens x {token_length} "
        f"complex samples, {classes} modulations: "
        f"{', '.join(cvk.datasets.MODULATIONS)}"
    )
    results = {}
    for build in (complex_model, real_model):
        model = build(tokens, token_length, classes)
        model.compile(
            keras.optimizers.Adam(2e-3),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        start = time.perf_counter()
        model.fit(
            x,
            y,
            epochs=args.epochs,
            batch_size=64,
            validation_split=0.1,
            verbose=2,
        )
        seconds = time.perf_counter() - start
        accuracy = {
            name: model.evaluate(tx, ty, verbose=0)[1]
            for name, (tx, ty) in tests.items()
        }
        results[model.name] = (model.count_params(), seconds, accuracy)

    print("\n| model | parameters | train time | " + " | ".join(tests) + " |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in tests) + " |")
    for name, (params, seconds, accuracy) in results.items():
        cells = " | ".join(f"{accuracy[t]:.1%}" for t in tests)
        print(f"| {name} | {params:,} | {seconds:.0f} s | {cells} |")
    print(f"(chance: {1 / classes:.1%})")
    return results


if __name__ == "__main__":
    main()
