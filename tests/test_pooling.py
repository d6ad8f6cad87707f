"""Tests of ComplexAveragePooling2D, ComplexMaxPooling2D and
ComplexUpSampling2D against NumPy complex128 references
(tests/image_reference.py)."""

import image_reference as iref
import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import compiled
from backend_utils import to_numpy
from backend_utils import value_and_gradients

import cvattn_keras as cvk
from cvattn_keras import _tracing
from cvattn_keras.layers import ComplexAveragePooling2D
from cvattn_keras.layers import ComplexMaxPooling2D
from cvattn_keras.layers import ComplexUpSampling2D

# float32 on unit-scale data. A pooled or interpolated value is a
# weighted sum of at most 9 inputs (weights <= 1), or one of them (max):
# a few float32 ulps, 1e-6 absolute.
ATOL = 1e-6

POOLINGS = [
    # (pool_size, strides, padding)
    (2, None, "valid"),
    ((2, 3), None, "valid"),  # a non-square window
    (3, 2, "valid"),  # overlapping windows
    (3, 2, "same"),  # windows across the edge
    ((2, 3), (1, 2), "same"),
]


def _complex(y):
    return cvk.from_stacked(y, "complex128")


@pytest.mark.parametrize("pool_size, strides, padding", POOLINGS)
def test_average_pooling_matches_numpy(rng, pool_size, strides, padding):
    x = ref.random_complex(rng, (2, 7, 8, 3))
    layer = ComplexAveragePooling2D(pool_size, strides, padding)
    y = layer(cvk.to_stacked(x))
    expected = iref.average_pool(
        x, layer.pool_size, layer.strides, layer.padding
    )
    assert tuple(y.shape) == expected.shape[:3] + (6,)
    assert layer.compute_output_shape((2, 7, 8, 6)) == tuple(y.shape)
    np.testing.assert_allclose(_complex(y), expected, atol=ATOL)


@pytest.mark.parametrize("pool_size, strides, padding", POOLINGS)
def test_max_pooling_matches_numpy(rng, pool_size, strides, padding):
    x = ref.random_complex(rng, (2, 7, 8, 3))
    layer = ComplexMaxPooling2D(pool_size, strides, padding)
    y = layer(cvk.to_stacked(x))
    expected = iref.max_pool(x, layer.pool_size, layer.strides, layer.padding)
    assert tuple(y.shape) == expected.shape[:3] + (6,)
    assert layer.compute_output_shape((2, 7, 8, 6)) == tuple(y.shape)
    # A selected value is an input, exactly (float32 of it).
    np.testing.assert_array_equal(
        _complex(y), expected.astype(np.complex64).astype(np.complex128)
    )


@pytest.mark.parametrize("pool_size, strides, padding", POOLINGS)
def test_max_pooling_of_an_empty_batch(pool_size, strides, padding):
    """Regression: a batch of 0 was Keras' "Cannot compute the max of an
    empty tensor"; it is an empty batch of the output's shape, as the
    other 2-D layers give."""
    layer = ComplexMaxPooling2D(pool_size, strides, padding)
    want = iref.max_pool(
        np.zeros((0, 7, 8, 3)), layer.pool_size, layer.strides, layer.padding
    ).shape[:3] + (6,)
    y = layer(np.zeros((0, 7, 8, 6), "float32"))
    assert tuple(y.shape) == want == layer.compute_output_shape((0, 7, 8, 6))
    assert keras.backend.standardize_dtype(y.dtype) == "float32"


def test_max_pooling_is_not_real_max_pooling():
    """A real MaxPooling2D of the stacked channels gives 3 + 1j, a value
    not in the window; the complex one gives the window's 3 - 4j."""
    z = np.array([1, 3 - 4j, 1 + 1j, 0.5]).reshape(1, 2, 2, 1)
    real = keras.layers.MaxPooling2D(2)(cvk.to_stacked(z))
    np.testing.assert_allclose(_complex(real).ravel(), [3 + 1j])
    ours = ComplexMaxPooling2D(2)(cvk.to_stacked(z))
    np.testing.assert_allclose(_complex(ours).ravel(), [3 - 4j])


def test_max_pooling_ties_take_the_first_in_row_major_order():
    # Equal moduli, four phases: the first (1); an all-zero window: 0;
    # a tie after a smaller first element: the earlier of the two (1j).
    windows = [[1, 1j, -1, -1j], [0, 0, 0, 0], [0.5, 1j, -1, 0.25]]
    z = np.array(windows).reshape(3, 2, 2, 1)
    y = ComplexMaxPooling2D(2)(cvk.to_stacked(z))
    np.testing.assert_array_equal(_complex(y).ravel(), [1, 0, 1j])


def test_max_pooling_padding_is_never_selected():
    # "same" pads a 3 x 3 image of zeros to 4 x 4; every window's value
    # is 0, and the gradient reaches only pixels of the image: one per
    # window, 4 in all.
    x = np.zeros((1, 3, 3, 2), "float32")
    layer = ComplexMaxPooling2D(2, padding="same")
    y, grad, _ = value_and_gradients(layer, x)
    np.testing.assert_array_equal(y, np.zeros((1, 2, 2, 2)))
    assert np.all(np.isfinite(grad))
    assert np.count_nonzero(grad[..., 0]) == 4  # one per window


@pytest.mark.parametrize("pool_size, strides", [(2, None), (3, 1)])
def test_max_pooling_gradient_flows_to_the_selected_element(
    rng, pool_size, strides
):
    x = ref.random_complex(rng, (2, 6, 6, 2))
    layer = ComplexMaxPooling2D(pool_size, strides)
    stacked = cvk.to_stacked(x)

    def loss(y):  # the sum of the real and imaginary parts
        return keras.ops.sum(y)

    _, grad, _ = value_and_gradients(layer, stacked, loss=loss)
    selected = iref.max_pool_selection(
        x, layer.pool_size, layer.strides
    )  # (B, H, W, C)
    # Each part of a selected pixel gets 1 per window taking it.
    np.testing.assert_array_equal(
        grad, np.concatenate([selected, selected], axis=-1)
    )


def test_max_pooling_of_zeros_has_finite_gradients():
    x = np.zeros((2, 4, 4, 4), "float32")
    layer = ComplexMaxPooling2D(2)
    y, grad, _ = value_and_gradients(layer, x)
    assert np.all(y == 0) and np.all(np.isfinite(grad))
    # Each all-zero window passes its gradient to its first element.
    first = np.zeros((2, 4, 4, 4), bool)
    first[:, ::2, ::2] = True
    assert np.all(grad[~first] == 0) and np.all(grad[first] != 0)


@pytest.mark.parametrize("scale", [1e-30, 1e25])
def test_max_pooling_selects_by_modulus_over_the_float_range(rng, scale):
    """The moduli are safe (`complex.modulus`): at 1e25 the squares would
    overflow float32 and at 1e-30 underflow, and every window would be a
    tie."""
    x = ref.random_complex(rng, (1, 4, 4, 2)) * scale
    y = ComplexMaxPooling2D(2)(cvk.to_stacked(x))
    expected = iref.max_pool(x, (2, 2), (2, 2), "valid")
    np.testing.assert_allclose(_complex(y), expected, rtol=1e-6)


def test_max_pooling_traced_for_export_selects_the_same(rng):
    # The file's keys (squared moduli) order as the moduli do.
    x = cvk.to_stacked(ref.random_complex(rng, (2, 6, 6, 3)))
    layer = ComplexMaxPooling2D(3, 2, "same")
    with _tracing.for_export():
        exported = layer(x)
    np.testing.assert_array_equal(to_numpy(exported), to_numpy(layer(x)))


@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("size", [2, (2, 3)])
def test_upsampling_matches_numpy(rng, size, interpolation):
    x = ref.random_complex(rng, (2, 3, 4, 2))
    layer = ComplexUpSampling2D(size, interpolation=interpolation)
    y = layer(cvk.to_stacked(x))
    if interpolation == "nearest":
        expected = iref.upsample_nearest(x, layer.size)
    else:
        expected = iref.upsample_bilinear(x, layer.size)
    assert tuple(y.shape) == expected.shape[:3] + (4,)
    assert layer.compute_output_shape((None, 3, 4, 4)) == (None,) + tuple(
        y.shape[1:]
    )
    np.testing.assert_allclose(_complex(y), expected, atol=ATOL)


def test_keras_layers_agree_on_stacked_channels(rng):
    """What the docstrings say: Keras' AveragePooling2D and UpSampling2D
    are linear per channel, so they compute the complex layers' values."""
    x = cvk.to_stacked(ref.random_complex(rng, (2, 6, 6, 2)))
    pairs = [
        (ComplexAveragePooling2D(3, 2), keras.layers.AveragePooling2D(3, 2)),
        (
            ComplexUpSampling2D(2, "bilinear"),
            keras.layers.UpSampling2D(2, interpolation="bilinear"),
        ),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(
            to_numpy(ours(x)), to_numpy(theirs(x)), atol=ATOL
        )


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: ComplexMaxPooling2D(0), "pool_size=0"),
        (lambda: ComplexMaxPooling2D((2, 2, 2)), r"pool_size=\(2, 2, 2\)"),
        (lambda: ComplexAveragePooling2D("2"), "pool_size='2'"),
        (lambda: ComplexAveragePooling2D(2.0), "pool_size=2.0"),
        (lambda: ComplexAveragePooling2D(2, strides=0), "strides=0"),
        (lambda: ComplexMaxPooling2D(2, padding="full"), "padding='full'"),
        (lambda: ComplexUpSampling2D(0), "size=0"),
        (lambda: ComplexUpSampling2D(True), "size=True"),
        (
            lambda: ComplexUpSampling2D(2, interpolation="bicubic"),
            "interpolation='bicubic'",
        ),
    ],
)
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize(
    "cls", [ComplexAveragePooling2D, ComplexMaxPooling2D, ComplexUpSampling2D]
)
def test_bad_inputs(cls):
    with pytest.raises(ValueError, match=r"input_shape\[-1\]=5"):
        cls()(np.zeros((1, 4, 4, 5), "float32"))
    with pytest.raises(ValueError, match="batch, height, width"):
        cls()(np.zeros((1, 4, 4), "float32"))
    with pytest.raises(ValueError, match="batch, height, width"):
        cls().compute_output_shape((1, 4, None))


@pytest.mark.parametrize("cls", [ComplexAveragePooling2D, ComplexMaxPooling2D])
def test_valid_pooling_of_an_image_smaller_than_the_window(cls):
    match = r"pool_size=\(3, 3\).*Received: width 2"
    with pytest.raises(ValueError, match=match):
        cls(3)(keras.Input((4, 2, 2)))
    with pytest.raises(ValueError, match=match):
        cls(3).compute_output_shape((None, 4, 2, 2))
    # "same" takes it: one window.
    assert cls(3, padding="same").compute_output_shape((1, 4, 2, 2)) == (
        1,
        2,
        1,
        2,
    )


def _model():
    inputs = keras.Input((8, 8, 4))
    x = ComplexMaxPooling2D(2)(inputs)
    x = ComplexUpSampling2D(2, interpolation="bilinear")(x)
    x = ComplexAveragePooling2D(3, 2, padding="same")(x)
    x = ComplexUpSampling2D((1, 2))(x)
    return keras.Model(inputs, x)


def test_round_trip_with_safe_mode(rng, tmp_path):
    model = _model()
    x = cvk.to_stacked(ref.random_complex(rng, (2, 8, 8, 2)))
    path = tmp_path / "pooling.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))
    for ours, theirs in zip(model.layers[1:], loaded.layers[1:]):
        assert type(ours) is type(theirs)
        assert ours.get_config() == theirs.get_config()


def test_compiles_under_xla(rng):
    model = _model()
    x = cvk.to_stacked(ref.random_complex(rng, (2, 8, 8, 2)))
    xla = compiled(lambda x: model(x))
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    np.testing.assert_allclose(to_numpy(xla(x)), to_numpy(model(x)), atol=ATOL)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(rng, policy):
    x = ref.random_complex(rng, (2, 8, 8, 2))
    expected = to_numpy(_model()(cvk.to_stacked(x)))
    keras.config.set_dtype_policy(policy)
    model = _model()
    y = model(cvk.to_stacked(x))
    assert keras.backend.standardize_dtype(y.dtype) == policy.split("_")[1]
    # The inputs rounded to the compute dtype (relative 2^-11 or 2^-8)
    # and the interpolation's sums in it: 1e-2 (bfloat16) or 2e-3
    # (float16) on values of modulus < 4. The max pooling's selection is
    # made on float32 moduli of the rounded inputs: the same elements
    # unless two moduli are within a rounding of each other (none here).
    atol = 2e-3 if policy == "mixed_float16" else 2e-2
    np.testing.assert_allclose(
        to_numpy(ops_float32(y)), expected, atol=atol, rtol=0
    )


def ops_float32(y):
    return keras.ops.cast(y, "float32")


@pytest.mark.tensorflow_only  # run-time image sizes: a tf.function's
def test_images_of_run_time_size(rng):
    """Traced with unknown height and width (a TensorFlow graph; JAX and
    torch always see static sizes), the "same" windows, the padding and
    the interpolation are computed at run time: the same values."""
    import tensorflow as tf

    layers = [
        ComplexMaxPooling2D(3, 2, "same"),
        ComplexAveragePooling2D(3, 2, "same"),
        ComplexUpSampling2D((2, 3), "bilinear"),
    ]
    references = [
        lambda x: iref.max_pool(x, (3, 3), (2, 2), "same"),
        lambda x: iref.average_pool(x, (3, 3), (2, 2), "same"),
        lambda x: iref.upsample_bilinear(x, (2, 3)),
    ]
    spec = tf.TensorSpec((None, None, None, 4), "float32")
    for layer, reference in zip(layers, references):
        traced = tf.function(layer, input_signature=[spec])
        for shape in ((1, 5, 7, 2), (2, 4, 4, 2)):
            x = ref.random_complex(rng, shape)
            y = traced(cvk.to_stacked(x))
            np.testing.assert_allclose(_complex(y), reference(x), atol=ATOL)
