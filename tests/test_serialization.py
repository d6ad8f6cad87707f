"""Every public layer in one model: `.keras` round trip with safe_mode=True,
and XLA (TensorFlow's `jit_compile`, `jax.jit`) equal to eager."""

import keras
import numpy as np
import pytest
from backend_utils import compiled
from backend_utils import to_numpy
from models import all_blocks_inputs
from models import all_blocks_model

import cvattn_keras as cvk

pytestmark = pytest.mark.slow


def test_every_layer_is_registered():
    for name in cvk.layers.__all__:
        cls = getattr(cvk.layers, name)
        assert keras.saving.get_registered_name(cls) == f"cvattn_keras>{name}"


def test_all_blocks_round_trip_with_safe_mode(rng, tmp_path):
    model = all_blocks_model()
    inputs = all_blocks_inputs(rng)
    # One training step moves the BatchNorm statistics off their initial
    # values, so that loading them is tested too.
    model.compile("adam", "mse")
    model.fit(inputs, np.zeros((3, 8, 4)), epochs=1, verbose=0)
    path = tmp_path / "blocks.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(
        to_numpy(loaded(inputs)), to_numpy(model(inputs))
    )
    assert [type(layer) for layer in loaded.layers] == [
        type(layer) for layer in model.layers
    ]


def test_all_blocks_under_xla(rng):
    model = all_blocks_model()
    inputs = all_blocks_inputs(rng)
    eager = to_numpy(model(inputs))
    xla = compiled(lambda a, b: model([a, b]))
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    np.testing.assert_allclose(to_numpy(xla(*inputs)), eager, atol=1e-5)
