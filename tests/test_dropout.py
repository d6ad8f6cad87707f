"""Tests of ComplexDropout."""

import numpy as np
import pytest
from backend_utils import to_numpy

from cvattn_keras.layers import ComplexDropout


def test_one_mask_for_both_parts_scaled(rng):
    x = rng.standard_normal((64, 32)).astype("float32") + 3.0
    y = to_numpy(ComplexDropout(0.25, seed=1)(x, training=True))
    re, im = y[:, :16], y[:, 16:]
    dropped = re == 0
    np.testing.assert_array_equal(dropped, im == 0)
    assert 0.2 < dropped.mean() < 0.3
    np.testing.assert_allclose(
        re[~dropped], x[:, :16][~dropped] / 0.75, rtol=1e-6
    )
    np.testing.assert_allclose(
        im[~dropped], x[:, 16:][~dropped] / 0.75, rtol=1e-6
    )


def test_identity_at_inference(rng):
    x = rng.standard_normal((4, 6)).astype("float32")
    np.testing.assert_array_equal(ComplexDropout(0.5)(x), x)


@pytest.mark.parametrize("rate", [1.0, -0.1, "0.5", True])
def test_bad_rate(rate):
    with pytest.raises(ValueError, match="rate"):
        ComplexDropout(rate)


def test_config_and_odd_channels():
    layer = ComplexDropout(0.3, seed=4)
    assert ComplexDropout.from_config(layer.get_config()).get_config() == (
        layer.get_config()
    )
    with pytest.raises(ValueError, match="even number"):
        ComplexDropout(0.3)(np.zeros((2, 3), "float32"))
