"""The image layers (pooling, upsampling, patches) in TFLite files:
builtin ops only, in float32 and in the calibrated int8 modes (int8,
full_int8: no float fallback), each weight stored once in float32, and
the LiteRT outputs against Keras and against a NumPy complex128
computation of the same model (tests/image_reference.py).

TensorFlow-only: 3 conversions (the calibrated ones in a TensorFlow
subprocess under every backend); tests/test_export_backends.py checks
the other backends' route.
"""

import image_reference as iref
import keras
import numpy as np
import pytest
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras.layers import ComplexAveragePooling2D
from cvattn_keras.layers import ComplexMaxPooling2D
from cvattn_keras.layers import ComplexPatchEmbedding
from cvattn_keras.layers import ComplexPatchUnembedding
from cvattn_keras.layers import ComplexUpSampling2D

pytestmark = [pytest.mark.slow, pytest.mark.tensorflow_only]

MODES = (None, "int8", "full_int8")

# Bounds on LiteRT's error, relative to the largest |output| (the
# report's max_rel_error). float32: the same float32 arithmetic in
# another order, 1e-5 (measured 1.8e-7). The calibrated modes: int8
# activations (a step of 1/255 of each range) through two products and
# five reshaping and pooling layers, measured 2.8e-2: 0.05. The max
# pooling selects exactly in the int8 files because each input window
# has one clear winner (see `_images`): its modulus is above the others'
# by far more than a quantization step.
BOUNDS = {None: 1e-5, "int8": 0.05, "full_int8": 0.05}

# Constants that are not parameters (shapes, slice bounds, the "same"
# average pooling's 4 x 4 scale map): 1 KiB (measured 556 bytes). A
# second copy of either kernel (the block form) adds 512 or 768 bytes
# and breaks the limit.
ALLOWANCE = 1024


def _model():
    """A small complex encoder-decoder over the image layers: (B, 8, 8,
    2 x 2) -> (B, 8, 8, 2 x 3)."""
    inputs = keras.Input((8, 8, 4))
    x = ComplexMaxPooling2D(2)(inputs)  # (4, 4)
    x = ComplexPatchEmbedding(2, 8)(x)  # 4 tokens, learned positions
    x = ComplexPatchUnembedding(2, 3)(x)  # a square grid: (4, 4)
    x = ComplexUpSampling2D(2, interpolation="bilinear")(x)  # (8, 8)
    x = ComplexAveragePooling2D(3, 2, padding="same")(x)  # (4, 4)
    x = ComplexUpSampling2D(2)(x)  # (8, 8), nearest
    return keras.Model(inputs, x)


def _images(rng, count):
    """Complex images (B, 8, 8, 2) whose every 2 x 2 window has one value
    of modulus in [1, 2] and the others below 0.5, random phases."""
    shape = (count, 8, 8, 2)
    phase = np.exp(2j * np.pi * rng.random(shape))
    modulus = rng.uniform(0.0, 0.5, shape)
    winner = rng.integers(0, 4, (count, 4, 4, 2))
    for index in range(4):
        i, j = divmod(index, 2)
        block = modulus[:, i::2, j::2]
        chosen = winner == index
        block[chosen] = rng.uniform(1.0, 2.0, int(chosen.sum()))
    return modulus * phase


def _numpy_model(model, z):
    """The model in NumPy complex128, from its weights."""
    layers = {type(layer).__name__: layer for layer in model.layers}

    def weights(layer, *names):
        return [
            to_numpy(getattr(layer, f"{name}_real")).astype(np.float64)
            + 1j * to_numpy(getattr(layer, f"{name}_imag"))
            for name in names
        ]

    embed = layers["ComplexPatchEmbedding"]
    unembed = layers["ComplexPatchUnembedding"]
    x = iref.max_pool(z, (2, 2), (2, 2), "valid")
    x = iref.patch_embedding(x, *weights(embed, "kernel", "bias", "position"))
    kernel, bias = weights(unembed, "kernel", "bias")
    x = iref.patch_unembedding(x, kernel, (2, 2), bias)
    x = iref.upsample_bilinear(x, (2, 2))
    x = iref.average_pool(x, (3, 3), (2, 2), "same")
    return iref.upsample_nearest(x, (2, 2))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    directory = tmp_path_factory.mktemp("patches")
    rng = np.random.default_rng(7)
    keras.utils.set_random_seed(7)
    model = _model()
    calibration = cvk.to_stacked(_images(rng, 64))
    files = {}
    for mode in MODES:
        files[mode] = cvk.export.export_tflite(
            model,
            directory / f"images_{mode}.tflite",
            quantization=mode,
            representative_data=None if mode is None else calibration,
        )
    return model, files


@pytest.mark.parametrize("mode", MODES)
def test_image_layers_export_builtin_only(exported, rng, mode):
    model, files = exported
    z = _images(rng, 4)
    x = cvk.to_stacked(z)
    report = cvk.export.verify_tflite(files[mode], model, x)
    assert report.non_builtin_ops == (), report
    assert report.max_rel_error <= BOUNDS[mode], report
    # LiteRT against NumPy: the same bound, on the NumPy output's scale.
    expected = _numpy_model(model, z)
    got = cvk.from_stacked(
        cvk.export.predict_tflite(files[mode], model, x), "complex128"
    )
    scale = np.max(np.abs(cvk.to_stacked(expected)))
    error = np.max(np.abs(cvk.to_stacked(got - expected))) / scale
    assert error <= BOUNDS[mode], (mode, error)
    if mode is None:
        # Each weight once (ComplexDense's weights-once products): at
        # most 4 bytes per parameter and the allowance.
        limit = 4 * model.count_params() + ALLOWANCE
        assert report.weight_bytes <= limit, report
