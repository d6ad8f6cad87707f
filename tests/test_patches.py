"""Tests of ComplexPatchEmbedding and ComplexPatchUnembedding against
NumPy complex128 references (tests/image_reference.py)."""

import image_reference as iref
import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import compiled
from backend_utils import gradients
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras import _tracing
from cvattn_keras.layers import ComplexConv2D
from cvattn_keras.layers import ComplexConv2DTranspose
from cvattn_keras.layers import ComplexMultiHeadAttention
from cvattn_keras.layers import ComplexPatchEmbedding
from cvattn_keras.layers import ComplexPatchUnembedding
from cvattn_keras.layers import ComplexTransformerEncoder
from cvattn_keras.layers.patches import sinusoidal_encoding_2d

# float32 products of at most 2 x 3 x 3 = 18 complex terms of unit scale
# (plus a position of modulus 1): a few float32 ulps of the sum, 1e-5
# absolute (Gauss's form: its sums of products cancel, same bound).
ATOL = 1e-5


def _complex(y):
    return cvk.from_stacked(y, "complex128")


def _pair(real, imag):
    return to_numpy(real).astype(np.float64) + 1j * to_numpy(imag)


def _run(layer, x, form):
    """The layer's output: as for training, or traced for export (the
    weights-once product)."""
    if form == "export":
        with _tracing.for_export():
            return layer(x)
    return layer(x)


@pytest.mark.parametrize("form", ["block", "gauss", "export"])
@pytest.mark.parametrize(
    "patch_size, positions",
    [(2, None), ((2, 3), "learned"), (3, "sinusoidal")],
)
def test_embedding_matches_numpy(rng, patch_size, positions, form):
    x = ref.random_complex(rng, (2, 6, 6, 3))
    layer = ComplexPatchEmbedding(
        patch_size,
        5,
        positions=positions,
        bias_initializer="random_normal",
        complex_matmul="gauss" if form == "gauss" else "block",
    )
    y = _run(layer, cvk.to_stacked(x), form)
    kernel = _pair(layer.kernel_real, layer.kernel_imag)
    bias = _pair(layer.bias_real, layer.bias_imag)
    ph, pw = layer.patch_size
    if positions == "learned":
        table = _pair(layer.position_real, layer.position_imag)
        assert table.shape == ((6 // ph) * (6 // pw), 5)
    elif positions == "sinusoidal":
        table = iref.sinusoidal_2d(6 // ph, 6 // pw, 5)
    else:
        table = 0.0
    expected = iref.patch_embedding(x, kernel, bias, table)
    assert kernel.shape == (ph, pw, 3, 5)
    assert tuple(y.shape) == expected.shape[:2] + (10,)
    assert layer.compute_output_shape((2, 6, 6, 6)) == tuple(y.shape)
    np.testing.assert_allclose(_complex(y), expected, atol=ATOL)


def test_sinusoidal_positions_take_any_image_size(rng):
    """Without learned positions nothing depends on the grid: one layer
    embeds 4 x 6 and 8 x 2 images."""
    layer = ComplexPatchEmbedding(2, 4, positions="sinusoidal")
    inputs = keras.Input((None, None, 2))
    model = keras.Model(inputs, layer(inputs))
    for shape in ((1, 4, 6, 1), (2, 8, 2, 1)):
        x = ref.random_complex(rng, shape)
        kernel = _pair(layer.kernel_real, layer.kernel_imag)
        bias = _pair(layer.bias_real, layer.bias_imag)
        table = iref.sinusoidal_2d(shape[1] // 2, shape[2] // 2, 4)
        expected = iref.patch_embedding(x, kernel, bias, table)
        y = model(cvk.to_stacked(x))
        np.testing.assert_allclose(_complex(y), expected, atol=ATOL)


def test_sinusoidal_encoding_2d():
    table = to_numpy(sinusoidal_encoding_2d(3, 4, 6, max_wavelength=100.0))
    z = table[:, :6] + 1j * table[:, 6:]
    np.testing.assert_allclose(z, iref.sinusoidal_2d(3, 4, 6, 100.0), atol=1e-6)
    # Unit phasors: the encoding adds no modulus beyond 1 per feature.
    np.testing.assert_allclose(np.abs(z), 1.0, atol=1e-6)


@pytest.mark.parametrize("form", ["block", "gauss", "export"])
@pytest.mark.parametrize(
    "patch_size, grid, tokens",
    [(2, None, 9), ((2, 3), (2, 3), 6), (3, (1, 2), 2)],
)
def test_unembedding_matches_numpy(rng, patch_size, grid, tokens, form):
    t = ref.random_complex(rng, (2, tokens, 4))
    layer = ComplexPatchUnembedding(
        patch_size,
        3,
        grid=grid,
        bias_initializer="random_normal",
        complex_matmul="gauss" if form == "gauss" else "block",
    )
    y = _run(layer, cvk.to_stacked(t), form)
    kernel = _pair(layer.kernel_real, layer.kernel_imag)
    bias = _pair(layer.bias_real, layer.bias_imag)
    side = int(np.sqrt(tokens))
    resolved = (side, side) if grid is None else layer.grid
    expected = iref.patch_unembedding(t, kernel, resolved, bias)
    assert kernel.shape == layer.patch_size + (3, 4)
    assert tuple(y.shape) == expected.shape[:3] + (6,)
    assert layer.compute_output_shape((2, tokens, 8)) == tuple(y.shape)
    np.testing.assert_allclose(_complex(y), expected, atol=ATOL)


def test_unembedding_with_the_inverse_kernel_recovers_the_image(rng):
    """E = ph pw C: the unembedding whose matrix is the inverse of the
    embedding's gives the image back."""
    x = ref.random_complex(rng, (2, 4, 6, 2))
    embed = ComplexPatchEmbedding(2, 8, use_bias=False, positions=None)
    unembed = ComplexPatchUnembedding(2, 2, grid=(2, 3), use_bias=False)
    tokens = embed(cvk.to_stacked(x))
    unembed.build(tokens.shape)
    matrix = _pair(embed.kernel_real, embed.kernel_imag).reshape(8, 8)
    inverse = np.linalg.inv(matrix)  # (E, ph pw C) = (E, ph pw F)
    kernel = inverse.reshape(8, 2, 2, 2).transpose(1, 2, 3, 0)
    unembed.set_weights([kernel.real, kernel.imag])
    y = _complex(unembed(tokens))
    # float32 products through a matrix and its inverse: the error is
    # about the condition number (measured 20-40 for this seed) times
    # float32's 6e-8 per product: 1e-4 absolute on unit-scale pixels.
    np.testing.assert_allclose(y, x, atol=1e-4)


def test_equal_to_strided_convolutions(rng):
    """What the docstrings say: with the same weights, the embedding is
    `ComplexConv2D(E, p, strides=p)` reshaped to tokens, and the
    unembedding `ComplexConv2DTranspose(F, p, strides=p)` of the tokens'
    grid."""
    x = cvk.to_stacked(ref.random_complex(rng, (2, 4, 6, 2)))
    embed = ComplexPatchEmbedding((2, 3), 3, positions=None)
    tokens = embed(x)  # (2, 4, 6)
    conv = ComplexConv2D(3, (2, 3), strides=(2, 3))
    conv.build(x.shape)
    conv.set_weights(embed.get_weights())
    grid = to_numpy(conv(x))  # (2, 2, 2, 6)
    np.testing.assert_allclose(
        to_numpy(tokens), grid.reshape(2, 4, 6), atol=ATOL
    )
    unembed = ComplexPatchUnembedding((2, 3), 2, grid=(2, 2))
    image = unembed(tokens)  # (2, 4, 6, 4)
    transposed = ComplexConv2DTranspose(2, (2, 3), strides=(2, 3))
    transposed.build((2, 2, 2, 6))
    transposed.set_weights(unembed.get_weights())
    np.testing.assert_allclose(
        to_numpy(image), to_numpy(transposed(grid)), atol=ATOL
    )


def test_attention_and_encoder_run_over_the_patches(rng):
    """`ComplexMultiHeadAttention` on the tokens is the reference's MHA of
    the NumPy tokens; a transformer encoder runs on them and the
    unembedding gives back an image of the input's size. (One model,
    run by `predict_on_batch`: compiled once on JAX, not op by op.)"""
    x = ref.random_complex(rng, (2, 8, 4, 1))
    inputs = keras.Input((8, 4, 2))
    tokens = ComplexPatchEmbedding(2, 8)(inputs)  # learned: 8 tokens
    attention = ComplexMultiHeadAttention(2, 4)
    attended = attention(tokens, tokens)
    encoded = ComplexTransformerEncoder(2)(tokens)
    image = ComplexPatchUnembedding(2, 1, grid=(4, 2))(encoded)
    model = keras.Model(inputs, [tokens, attended, image])
    tokens, attended, image = model.predict_on_batch(cvk.to_stacked(x))
    t = _complex(tokens)
    expected, _ = ref.multi_head_attention(
        t, t, t, ref.attention_params(attention), 2, "real", "inner", 0.5
    )
    np.testing.assert_allclose(_complex(attended), expected, atol=ATOL)
    assert image.shape == (2, 8, 4, 2)
    assert np.all(np.isfinite(image))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: ComplexPatchEmbedding(0, 4), "patch_size=0"),
        (lambda: ComplexPatchEmbedding((2, 2, 2), 4), "patch_size="),
        (lambda: ComplexPatchEmbedding("2", 4), "patch_size='2'"),
        (lambda: ComplexPatchEmbedding(2, 0), "embed_dim=0"),
        (lambda: ComplexPatchEmbedding(2, 2.5), "embed_dim=2.5"),
        (
            lambda: ComplexPatchEmbedding(2, 4, positions="rotary"),
            "positions='rotary'",
        ),
        (
            lambda: ComplexPatchEmbedding(2, 1, positions="sinusoidal"),
            "embed_dim=1",
        ),
        (
            lambda: ComplexPatchEmbedding(2, 4, max_wavelength=1),
            "max_wavelength=1",
        ),
        (
            lambda: ComplexPatchEmbedding(2, 4, position_initializer="nope"),
            "position_initializer='nope'",
        ),
        (
            lambda: ComplexPatchEmbedding(2, 4, complex_matmul="fast"),
            "complex_matmul='fast'",
        ),
        (lambda: ComplexPatchUnembedding(2, 0), "filters=0"),
        (lambda: ComplexPatchUnembedding(0, 2), "patch_size=0"),
        (lambda: ComplexPatchUnembedding(2, 2, grid=0), "grid=0"),
        (lambda: ComplexPatchUnembedding(2, 2, grid=(2, 2, 2)), "grid="),
    ],
)
def test_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_images():
    layer = ComplexPatchEmbedding((2, 3), 4)
    with pytest.raises(ValueError, match=r"input_shape\[-1\]=5"):
        layer(np.zeros((1, 4, 6, 5), "float32"))
    with pytest.raises(ValueError, match="batch, height, width"):
        layer(np.zeros((1, 4, 6), "float32"))
    # The height or width not a multiple of the patch: both named.
    match = r"patch_size=\(2, 3\)\. Received: width 8"
    with pytest.raises(ValueError, match=match):
        layer(keras.Input((4, 8, 2)))
    with pytest.raises(ValueError, match=match):
        layer.compute_output_shape((None, 4, 8, 2))
    match = r"patch_size=\(2, 3\)\. Received: height 5"
    with pytest.raises(ValueError, match=match):
        ComplexPatchEmbedding((2, 3), 4, positions=None)(
            np.zeros((1, 5, 6, 2), "float32")
        )
    # Learned positions need the grid at build.
    with pytest.raises(ValueError, match="positions='learned'.*None, None"):
        layer(keras.Input((None, None, 2)))
    # A built layer with learned positions refuses another grid.
    layer = ComplexPatchEmbedding(2, 4)
    layer(np.zeros((1, 4, 4, 2), "float32"))
    with pytest.raises(ValueError, match="incompatible"):
        layer(np.zeros((1, 6, 4, 2), "float32"))


def test_bad_tokens():
    with pytest.raises(ValueError, match=r"input_shape\[-1\]=5"):
        ComplexPatchUnembedding(2, 2)(np.zeros((1, 4, 5), "float32"))
    with pytest.raises(ValueError, match="batch, tokens"):
        ComplexPatchUnembedding(2, 2)(np.zeros((1, 2, 2, 4), "float32"))
    # No grid: a square number of tokens, known at build.
    with pytest.raises(ValueError, match="perfect square.*6 tokens"):
        ComplexPatchUnembedding(2, 2)(np.zeros((1, 6, 4), "float32"))
    with pytest.raises(ValueError, match="perfect square.*None tokens"):
        ComplexPatchUnembedding(2, 2)(keras.Input((None, 4)))
    # A grid that does not hold the tokens.
    match = r"grid=\(2, 3\)\)\. Received: 4 tokens"
    with pytest.raises(ValueError, match=match):
        ComplexPatchUnembedding(2, 2, grid=(2, 3))(keras.Input((4, 4)))
    with pytest.raises(ValueError, match=match):
        ComplexPatchUnembedding(2, 2, grid=(2, 3)).compute_output_shape(
            (None, 4, 4)
        )
    # With a grid, the number of tokens may be unknown at build.
    layer = ComplexPatchUnembedding(2, 1, grid=(2, 3))
    assert tuple(layer(keras.Input((None, 4))).shape) == (None, 4, 6, 2)


def test_weights_and_config():
    embed = ComplexPatchEmbedding(
        (2, 3), 4, kernel_regularizer="l2", position_initializer="zeros"
    )
    embed.build((None, 4, 6, 2))
    names = [w.path.split("/")[-1] for w in embed.weights]
    assert names == [
        "position_real",
        "position_imag",
        "kernel_real",
        "kernel_imag",
        "bias_real",
        "bias_imag",
    ]
    assert tuple(embed.position_real.shape) == (4, 4)
    clone = ComplexPatchEmbedding.from_config(embed.get_config())
    assert clone.get_config() == embed.get_config()
    unembed = ComplexPatchUnembedding(2, 3, grid=(1, 2), use_bias=False)
    unembed.build((None, 2, 8))
    assert [w.path.split("/")[-1] for w in unembed.weights] == [
        "kernel_real",
        "kernel_imag",
    ]
    assert tuple(unembed.kernel_real.shape) == (2, 2, 3, 4)
    clone = ComplexPatchUnembedding.from_config(unembed.get_config())
    assert clone.get_config() == unembed.get_config()


def _model(positions="learned"):
    inputs = keras.Input((4, 6, 4))
    tokens = ComplexPatchEmbedding(2, 6, positions=positions)(inputs)
    outputs = ComplexPatchUnembedding(2, 3, grid=(2, 3))(tokens)
    return keras.Model(inputs, outputs)


def test_round_trip_with_safe_mode(rng, tmp_path):
    model = _model()
    x = cvk.to_stacked(ref.random_complex(rng, (2, 4, 6, 2)))
    path = tmp_path / "patches.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(
        loaded.predict_on_batch(x), model.predict_on_batch(x)
    )
    for ours, theirs in zip(model.layers[1:], loaded.layers[1:]):
        assert type(ours) is type(theirs)
        assert ours.get_config() == theirs.get_config()


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_compiles_under_xla(rng, positions):
    model = _model(positions)
    x = cvk.to_stacked(ref.random_complex(rng, (2, 4, 6, 2)))
    xla = compiled(lambda x: model(x))
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    np.testing.assert_allclose(to_numpy(xla(x)), to_numpy(model(x)), atol=ATOL)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(rng, policy):
    x = cvk.to_stacked(ref.random_complex(rng, (2, 4, 6, 2)))
    reference = _model("sinusoidal")
    expected = to_numpy(reference(x))
    keras.config.set_dtype_policy(policy)
    model = _model("sinusoidal")
    model.set_weights(reference.get_weights())
    y = model(x)
    compute = policy.split("_")[1]
    assert keras.backend.standardize_dtype(y.dtype) == compute
    assert all(
        keras.backend.standardize_dtype(w.dtype) == "float32"
        for w in model.weights
    )
    # Two products of <= 16 terms of unit scale in the compute dtype
    # (relative 2^-11 or 2^-8 per rounding, outputs of modulus < 5):
    # 2e-2 for float16 and 1e-1 for bfloat16.
    atol = 2e-2 if compute == "float16" else 1e-1
    np.testing.assert_allclose(
        to_numpy(keras.ops.cast(y, "float32")), expected, atol=atol
    )


def test_gradients_at_zero_images_are_finite():
    model = _model()
    x = np.zeros((2, 4, 6, 4), "float32")
    weights = np.arange(2 * 4 * 6 * 6, dtype="float32").reshape(2, 4, 6, 6)

    def loss(x):  # every output weighted differently
        return keras.ops.sum(keras.ops.multiply(model(x), weights))

    value, (grad,), grads = gradients(loss, [x], model.trainable_variables)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    # Positions, two kernels and two biases, each in two parts.
    assert len(grads) == 10
    assert all(np.all(np.isfinite(g)) for g in grads)
