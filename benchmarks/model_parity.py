"""Parity of the paper's whole models with the reference's formulas.

Draws random state dicts in the reference's names and shapes
(`tests/reference_model.py`), loads them into `music_classifier` and
`music_generator` with `cvattn_keras.interop.load_reference_state_dict`,
and compares the models' logits (inference) with a NumPy complex128
evaluation of the reference's formulas on the state dicts themselves:
small models over several seeds, and the paper's sizes once each.

Run:  python benchmarks/model_parity.py [--seeds 5] [--no-full]
          [--json model_parity.json]
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

# First, before keras imports TensorFlow: it filters TensorFlow's
# start-up lines (cvattn_keras/_startup.py).
import cvattn_keras  # noqa: E402, F401

# isort: split

import keras  # noqa: E402
import numpy as np  # noqa: E402
import reference_model as ref  # noqa: E402
import test_interop as helpers  # noqa: E402

from cvattn_keras import interop  # noqa: E402
from cvattn_keras import models  # noqa: E402


def full_size(kind, rng):
    """One random reference checkpoint at the paper's sizes."""
    state = ref.random_model(
        rng,
        kind,
        2048,
        models.FRONTEND_FILTERS,
        models.FRONTEND_KERNEL_SIZES,
        320,
        6,
        2048,
        128,
    )
    if kind == "classifier":
        model = models.music_classifier()
        source = helpers._complex_normal(rng, (1, 64, 2048))
        interop.load_reference_state_dict(model, state)
        got = model(helpers._stack(source), training=False)
        want = ref.classifier(state, source, 8)
    else:
        model = models.music_generator()
        source = helpers._complex_normal(rng, (1, 43, 2048))
        target = (rng.uniform(size=(1, 21, 128)) > 0.9).astype(float)
        interop.load_reference_state_dict(model, state)
        got = model(
            [helpers._stack(source), models.shift_right(target)],
            training=False,
        )
        want = ref.generator(state, source, target, 8)
    return helpers._rel(helpers._np(got), want), len(state)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--no-full", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rows = []
    for kind in ("classifier", "generator"):
        start = time.perf_counter()
        errors = [
            helpers._model_parity(kind, np.random.default_rng(seed))
            for seed in range(args.seeds)
        ]
        rows.append(
            dict(
                model=kind,
                size=f"small ({args.seeds} seeds)",
                error=max(errors),
                seconds=time.perf_counter() - start,
            )
        )
        if not args.no_full:
            start = time.perf_counter()
            error, keys = full_size(kind, np.random.default_rng(0))
            rows.append(
                dict(
                    model=kind,
                    size=f"paper ({keys} tensors)",
                    error=error,
                    seconds=time.perf_counter() - start,
                )
            )
    print(f"backend: {keras.backend.backend()}")
    print("| model | size | max abs error / max abs output | seconds |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['model']} | {row['size']} | {row['error']:.1e} | "
            f"{row['seconds']:.0f} |"
        )
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"backend": keras.backend.backend(), "rows": rows}, file)
    return rows


if __name__ == "__main__":
    main()
