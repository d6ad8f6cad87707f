"""The image reconstruction models (`cvattn_keras.models.images`):
`mri_transformer`, `complex_unet` and their real baselines.

What the builders compose is checked against NumPy complex128: the last
step of every model is k-space data consistency of the residual image,
`ifft2(where(mask, masked_kspace, fft2(x + f(x))))` (norm "ortho",
numpy's order), so the sampled k-space of the output is the measured one;
and `complex_unet`'s join (a sum of two complex convolutions) is U-Net's
concatenation followed by one complex convolution. The layers themselves
are tested against NumPy in their own files.

Tolerances: float32 against complex128 through two 16-point DFTs per
axis (the data consistency's) of images of order 1: 1e-5 absolute
(measured below 2e-6); the join sums 2 x 9 x 2 complex products of
order-1 terms: 1e-5 absolute (measured below 1e-6).
"""

import keras
import numpy as np
import pytest
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras import models

SIZE = 16
ATOL = 1e-5  # float32 through DFTs of 16 points, see the docstring
# Small models of every builder, 16 x 16 images of one coil.
SMALL = {
    "mri_transformer": dict(
        image_size=SIZE, patch_size=4, embed_dim=8, num_heads=2, num_layers=1
    ),
    "real_mri_transformer": dict(
        image_size=SIZE, patch_size=4, embed_dim=12, num_heads=2, num_layers=1
    ),
    "complex_unet": dict(image_size=SIZE, filters=2, depth=2),
    "real_unet": dict(image_size=SIZE, filters=3, depth=2),
}
BUILDERS = sorted(SMALL)


def _build(name, **overrides):
    return getattr(models, name)(**{**SMALL[name], **overrides})


def _measurements(count=3, size=SIZE, acceleration=4, seed=0):
    """`synthetic_mri`'s test split as the models take it, and the
    targets."""
    data = cvk.datasets.synthetic_mri(
        "test", count, image_size=size, acceleration=acceleration, seed=seed
    )
    inputs = [data.zero_filled, data.masked_kspace, data.mask[:, :1]]
    return inputs, data


def _randomize(model, rng):
    """Every weight random (the output layers start at zero: the model
    would be the zero-filled image's data consistency otherwise)."""
    model.set_weights(
        [
            (0.3 * rng.standard_normal(w.shape)).astype("float32")
            for w in model.get_weights()
        ]
    )


def _complex(x):
    return cvk.from_stacked(np.asarray(x, np.float64), "complex128")


# --------------------------------------------------------------------------
# Shapes and parameters.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILDERS)
def test_inputs_and_output(name):
    model = _build(name)
    assert [i.name for i in model.inputs] == [
        "zero_filled",
        "masked_kspace",
        "mask",
    ]
    assert [tuple(i.shape) for i in model.inputs] == [
        (None, SIZE, SIZE, 2),
        (None, SIZE, SIZE, 2),
        (None, 1, SIZE),
    ]
    assert model.output_shape == (None, SIZE, SIZE, 2)
    inputs, _ = _measurements(2)
    # A dict by the inputs' names is the list.
    named = dict(zip(["zero_filled", "masked_kspace", "mask"], inputs))
    np.testing.assert_array_equal(
        to_numpy(model(named)), to_numpy(model(inputs))
    )


@pytest.mark.parametrize("name", BUILDERS)
def test_options_change_the_inputs(name):
    """`mask="full"` takes `(B, H, W)` masks; without data consistency
    the model takes the zero-filled image only; `channels=2` images of
    two coils; a pair `image_size`."""
    model = _build(name, mask="full", channels=2, image_size=(SIZE, 8))
    assert [tuple(i.shape) for i in model.inputs] == [
        (None, SIZE, 8, 4),
        (None, SIZE, 8, 4),
        (None, SIZE, 8),
    ]
    assert model.output_shape == (None, SIZE, 8, 4)
    model = _build(name, data_consistency=False)
    assert [i.name for i in model.inputs] == ["zero_filled"]
    assert model.output_shape == (None, SIZE, SIZE, 2)


# The documented counts of the defaults (models/images.py's table).
DEFAULT_PARAMETERS = {
    "mri_transformer": 44_482,
    "real_mri_transformer": 44_018,
    "complex_unet": 58_642,
    "real_unet": 58_851,
}
# A real baseline's count within 5% of its complex model's: "about the
# same", as the widths (sqrt(2) times) can give with whole channels.
PAIR_TOLERANCE = 0.05


@pytest.mark.skipif(
    keras.backend.backend() == "jax",
    reason="JAX compiles each initializer for each new weight shape (15 s "
    "for the default models); the counts are Keras', the same on every "
    "backend (run on TensorFlow and torch)",
)
def test_default_parameter_counts():
    counts = {name: getattr(models, name)().count_params() for name in BUILDERS}
    assert counts == DEFAULT_PARAMETERS
    for complex_name, real_name in (
        ("mri_transformer", "real_mri_transformer"),
        ("complex_unet", "real_unet"),
    ):
        ratio = counts[real_name] / counts[complex_name]
        assert abs(ratio - 1) < PAIR_TOLERANCE, (real_name, ratio)


def test_cascades_repeat_the_network_and_the_data_consistency():
    model = _build("mri_transformer", cascades=2)
    single = _build("mri_transformer")
    assert model.count_params() == 2 * single.count_params()
    names = [layer.name for layer in model.layers]
    for k in range(2):
        for prefix in ("embedding", "encoder", "unembedding", "residual"):
            assert any(n.startswith(f"{prefix}_{k}") for n in names), prefix
        assert f"data_consistency_{k}" in names


# --------------------------------------------------------------------------
# What the builders compute, against NumPy.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", BUILDERS)
@pytest.mark.parametrize("cascades", [1, 2])
def test_output_is_the_data_consistent_residual(name, cascades, rng):
    """The output is `ifft2(where(m, k0, fft2(r)))` of the last residual
    `r` (NumPy complex128), so its k-space holds the measured samples in
    the sampled columns; `r` is the cascade's input plus the network's
    output."""
    model = _build(name, cascades=cascades)
    _randomize(model, rng)
    inputs, data = _measurements(3)
    last = cascades - 1
    probe = keras.Model(
        model.inputs,
        [
            model.get_layer(f"residual_{last}").input[0],
            model.get_layer(f"residual_{last}").output,
            model.output,
        ],
    )
    before, residual, output = (_complex(to_numpy(t)) for t in probe(inputs))
    mask = data.mask[..., None] > 0  # (B, H, W, 1)
    measured = _complex(data.masked_kspace)
    predicted = np.fft.fft2(residual, axes=(1, 2), norm="ortho")
    want = np.fft.ifft2(
        np.where(mask, measured, predicted), axes=(1, 2), norm="ortho"
    )
    np.testing.assert_allclose(output, want, atol=ATOL)
    kspace = np.fft.fft2(output, axes=(1, 2), norm="ortho")
    np.testing.assert_allclose(
        np.where(mask, kspace, 0), np.where(mask, measured, 0), atol=ATOL
    )
    # The network changed the image (random weights), and did not reach
    # the output other than through the residual.
    assert np.abs(residual - before).max() > 1e-2
    if cascades == 1:
        np.testing.assert_array_equal(before, _complex(inputs[0]))


@pytest.mark.parametrize("name", BUILDERS)
def test_starts_as_the_zero_filled_image(name):
    """The output layers start at zero: an untrained model gives the
    zero-filled image (consistent already), so training starts from the
    field's baseline."""
    inputs, data = _measurements(2)
    got = to_numpy(_build(name)(inputs))
    np.testing.assert_allclose(got, data.zero_filled, atol=ATOL)


def _numpy_same_conv(x, kernel):
    """Keras' "same" 3 x 3 cross-correlation: x (B, H, W, C), kernel (3,
    3, C, F), complex."""
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    height, width = x.shape[1:3]
    y = np.zeros(x.shape[:3] + (kernel.shape[-1],), complex)
    for i in range(3):
        for j in range(3):
            window = padded[:, i : i + height, j : j + width]
            y += np.einsum("bhwc,cf->bhwf", window, kernel[i, j])
    return y


def test_complex_unet_join_is_a_convolution_of_the_concatenation(rng):
    """`up_0_join_0` = the complex 3 x 3 convolution of `[skip, x]`
    (channels concatenated) with the kernels of `up_0_skip_0` and
    `up_0_conv_0_0` stacked on the input-channel axis, plus the latter's
    bias (NumPy complex128)."""
    model = _build("complex_unet")
    _randomize(model, rng)
    skip_conv = model.get_layer("up_0_skip_0")
    conv = model.get_layer("up_0_conv_0_0")
    probe = keras.Model(
        model.inputs,
        [skip_conv.input, conv.input, model.get_layer("up_0_join_0").output],
    )
    inputs, _ = _measurements(2)
    skip, x, joined = (_complex(to_numpy(t)) for t in probe(inputs))

    def kernel(layer):
        return to_numpy(layer.kernel_real) + 1j * to_numpy(layer.kernel_imag)

    stacked = np.concatenate([kernel(skip_conv), kernel(conv)], axis=2)
    bias = to_numpy(conv.bias_real) + 1j * to_numpy(conv.bias_imag)
    want = _numpy_same_conv(np.concatenate([skip, x], -1), stacked) + bias
    np.testing.assert_allclose(joined, want, atol=ATOL)


# --------------------------------------------------------------------------
# Saving, compiling, training, precision.
# --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", BUILDERS)
def test_keras_file_round_trip(name, rng, tmp_path):
    model = _build(name, cascades=2)
    _randomize(model, rng)
    inputs, _ = _measurements(2)
    path = tmp_path / f"{name}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(
        to_numpy(loaded(inputs)), to_numpy(model(inputs))
    )


@pytest.mark.slow
@pytest.mark.skipif(
    keras.backend.backend() == "torch", reason="no XLA on the torch backend"
)
@pytest.mark.parametrize("name", BUILDERS)
def test_fit_step_compiles_and_zeros_stay_finite(name):
    """`fit` with `jit_compile=True` (XLA on TensorFlow, `jax.jit`) on
    measurements, then on all-zero ones (a degenerate input: moduli and
    norms at 0): finite losses and weights."""
    model = _build(name)
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    inputs, data = _measurements(4)
    history = model.fit(inputs, data.image, batch_size=4, verbose=0)
    zeros = [np.zeros_like(x) for x in inputs]
    again = model.fit(zeros, np.zeros_like(data.image), batch_size=4, verbose=0)
    losses = history.history["loss"] + again.history["loss"]
    assert np.isfinite(losses).all(), losses
    assert all(np.isfinite(w).all() for w in model.get_weights())


@pytest.mark.parametrize("name", BUILDERS)
def test_mixed_precision(name):
    """Under `mixed_bfloat16` the layers compute in bfloat16, the
    variables stay float32 and the output (`reconstruction`) is float32,
    within bfloat16's rounding of the float32 model's: an RMS error
    below 5% of the output's RMS (8 bits of mantissa, 2^-8 = 0.4% per
    operand, through a few layers of random weights). Measured on every
    backend: 0.4% for the transformers and the real U-Net, 3% for the
    complex U-Net, whose max pooling picks another pixel where two moduli
    differ by less than bfloat16's rounding (0.9% with average
    pooling)."""
    inputs, _ = _measurements(2)
    reference = _build(name)
    reference.set_weights(
        [
            (0.3 * np.random.default_rng(1).standard_normal(w.shape)).astype(
                "float32"
            )
            for w in reference.get_weights()
        ]
    )
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = _build(name)
    model.set_weights(reference.get_weights())
    got = model(inputs)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    assert all(
        keras.backend.standardize_dtype(w.dtype) == "float32"
        for w in model.weights
    )
    want = to_numpy(reference(inputs))
    error = np.sqrt(np.mean((to_numpy(got) - want) ** 2))
    assert error < 0.05 * np.sqrt(np.mean(want**2)), error


# --------------------------------------------------------------------------
# Bad arguments.
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, arguments, match",
    [
        ("mri_transformer", dict(patch_size=3), "patch_size=3"),
        ("mri_transformer", dict(patch_size=0), "patch_size=0"),
        ("mri_transformer", dict(image_size=(16, 10)), "image_size"),
        ("mri_transformer", dict(image_size=0), "image_size=0"),
        ("mri_transformer", dict(softmax="soft"), "softmax='soft'"),
        ("mri_transformer", dict(product="outer"), "product='outer'"),
        ("mri_transformer", dict(num_heads=3), "num_heads=3"),
        ("mri_transformer", dict(embed_dim=0), "embed_dim=0"),
        ("mri_transformer", dict(num_layers=0), "num_layers=0"),
        ("mri_transformer", dict(positions="rotary"), "positions='rotary'"),
        ("mri_transformer", dict(cascades=0), "cascades=0"),
        ("mri_transformer", dict(channels=0), "channels=0"),
        ("mri_transformer", dict(mask="rows"), "mask='rows'"),
        ("mri_transformer", dict(data_consistency="yes"), "data_consistency"),
        ("real_mri_transformer", dict(patch_size=5), "patch_size=5"),
        ("real_mri_transformer", dict(num_heads=20), "num_heads=20"),
        ("real_mri_transformer", dict(dropout=1.5), "dropout"),
        ("real_mri_transformer", dict(layer_norm_epsilon=0), "epsilon"),
        ("complex_unet", dict(depth=4, image_size=12), "depth=4"),
        ("complex_unet", dict(depth=0), "depth=0"),
        ("complex_unet", dict(filters=0), "filters=0"),
        ("complex_unet", dict(activation="relu"), "activation='relu'"),
        ("complex_unet", dict(activation=None), "activation=None"),
        ("complex_unet", dict(pooling="min"), "pooling='min'"),
        ("real_unet", dict(filters=0.2), "filters=0.2"),
        ("real_unet", dict(pooling="min"), "pooling='min'"),
        ("real_unet", dict(mask=None), "mask=None"),
    ],
)
def test_bad_arguments_are_named(name, arguments, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(")):
        _build(name, **arguments)


def test_other_activations_and_pooling():
    for activation in ("modrelu", "cardioid", "split_leaky_relu"):
        model = _build("complex_unet", activation=activation, pooling="average")
        assert model.output_shape == (None, SIZE, SIZE, 2)
    assert any(
        isinstance(layer, cvk.layers.ModReLU)
        for layer in _build("complex_unet", activation="modrelu").layers
    )
    model = _build("real_unet", pooling="average")
    pools = [keras.layers.AveragePooling2D, keras.layers.MaxPooling2D]
    assert [type(layer) for layer in model.layers if type(layer) in pools] == [
        keras.layers.AveragePooling2D
    ]
