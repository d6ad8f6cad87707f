"""`.keras` files saved by an earlier version still load and compute the
same outputs.

`tests/data/*_v0_1.keras` were written by `tests/data/make_v0_1_files.py`
at commit 1726e05, before `cvattn_keras.models` and
`cvattn_keras.datasets` became packages (the issue that moved them asks
that old files still load): one model holding every layer of the library
at the time (`tests/models.py`'s `all_blocks_model`) and a small
`music_classifier` that takes samples. They load with `safe_mode=True`
and no `custom_objects`, and give the outputs recorded when they were
saved.
"""

import pathlib

import keras
import numpy as np
import pytest
from backend_utils import to_numpy

DATA = pathlib.Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def recorded():
    with np.load(DATA / "outputs_v0_1.npz") as arrays:
        return dict(arrays)


def _load(name):
    return keras.saving.load_model(DATA / name, safe_mode=True)


def test_every_layer_of_0_1_loads(recorded):
    model = _load("all_blocks_v0_1.keras")
    inputs = [recorded[f"blocks_in_{i}"] for i in range(len(model.inputs))]
    # Saved and recorded under TensorFlow in float32; other backends sum
    # in other orders (outputs of order 1: 1e-4 covers float32 rounding
    # through ~20 layers).
    np.testing.assert_allclose(
        to_numpy(model(inputs, training=False)),
        recorded["blocks_out"],
        rtol=1e-4,
        atol=1e-4,
    )


def test_a_0_1_music_classifier_loads(recorded):
    model = _load("music_classifier_v0_1.keras")
    np.testing.assert_allclose(
        to_numpy(model(recorded["clf_in"], training=False)),
        recorded["clf_out"],
        rtol=1e-4,
        atol=1e-4,
    )
