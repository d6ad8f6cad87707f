"""Worst parity error of ComplexMultiHeadAttention against complex128 NumPy.

For each softmax x product variant, draws random layers and inputs (B=4,
T=16, S=24, 4 heads, key_dim=4, a random boolean mask with a fully masked
row), and compares the output (general and fused paths) and the returned
weights with the independent reference in tests/numpy_reference.py.

Run:  python benchmarks/parity.py [--trials 20] [--json parity.json]
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

# First, before keras imports TensorFlow: it filters TensorFlow's
# start-up lines (cvattn_keras/_startup.py).
import cvattn_keras  # noqa: E402, F401

# isort: split

import keras  # noqa: E402
import numpy as np  # noqa: E402
import numpy_reference as ref  # noqa: E402

import cvattn_keras as cvk  # noqa: E402
from cvattn_keras import attention as att  # noqa: E402


def worst_error(softmax, product, trials, rng):
    worst = 0.0
    for _ in range(trials):
        query = ref.random_complex(rng, (4, 16, 8))
        value = ref.random_complex(rng, (4, 24, 6))
        mask = rng.random((4, 16, 24)) > 0.3
        mask[1, 2] = False
        layer = cvk.layers.ComplexMultiHeadAttention(
            4,
            4,
            softmax=softmax,
            product=product,
            bias_initializer="random_normal",
        )
        q, v = cvk.to_stacked(query), cvk.to_stacked(value)
        out, weights = layer(
            q, v, attention_mask=mask, return_attention_scores=True
        )
        fused = layer(q, v, attention_mask=mask)
        expected, expected_weights = ref.multi_head_attention(
            query,
            value,
            value,
            ref.attention_params(layer),
            4,
            softmax,
            product,
            0.5,
            mask,
        )
        for got, want in [
            (out, expected),
            (fused, expected),
            (weights, expected_weights),
        ]:
            error = np.abs(cvk.from_stacked(got, "complex128") - want).max()
            worst = max(worst, float(error))
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--json", default=None, help="write results here")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    keras.utils.set_random_seed(1)  # the layers' initial weights too
    rows = []
    print(f"{'softmax':8s} {'product':9s} worst |error| (float32)")
    for softmax in att.SOFTMAX_VARIANTS:
        for product in att.PRODUCTS:
            error = worst_error(softmax, product, args.trials, rng)
            rows.append(dict(softmax=softmax, product=product, error=error))
            print(f"{softmax:8s} {product:9s} {error:.2e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
