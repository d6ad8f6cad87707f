"""Tests of ComplexFFT2D, ComplexDataConsistency and the functions behind
them against NumPy complex128 (`np.fft.fft2`, `ifft2`, `fftshift`)."""

import re

import keras
import numpy as np
import pytest
from backend_utils import compiled
from backend_utils import gradients
from backend_utils import has_float64
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras.layers import ComplexDataConsistency
from cvattn_keras.layers import ComplexFFT2D
from cvattn_keras.layers import fourier

NORMS = ("backward", "ortho", "forward")

# float32 products of N x N DFT matrices, summed over H then W terms: the
# error grows like float32's 6e-8 times sqrt(H W) of the largest output.
# 1e-5 of the largest |output| is tens of ulps on these small images
# (measured: at most 1.4e-7 here, 3.7e-7 at 64 x 64).
RTOL_OF_MAX = 1e-5


def _random(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _complex(y):
    return cvk.from_stacked(to_numpy(y).astype("float64"), "complex128")


def _close(got, want, rtol=RTOL_OF_MAX):
    """`got` within `rtol` of the largest |want|, everywhere."""
    error = np.abs(got - want).max()
    assert error <= rtol * np.abs(want).max(), (error, np.abs(want).max())


def _numpy_fft2(z, inverse=False, norm="backward", centered=False):
    """numpy's fft2 / ifft2 over axes 1, 2; fastMRI's centring."""
    axes = (1, 2)
    transform = np.fft.ifft2 if inverse else np.fft.fft2
    if centered:
        z = np.fft.ifftshift(z, axes=axes)
    y = transform(z, axes=axes, norm=norm)
    return np.fft.fftshift(y, axes=axes) if centered else y


# (batch, H, W, channels): square, rectangular H != W both ways, odd
# sizes, a single row, several channels.
SHAPES = [(2, 4, 4, 1), (2, 6, 5, 3), (1, 7, 3, 2), (3, 1, 8, 1)]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_numpy(rng, shape, inverse, norm):
    z = _random(rng, shape)
    layer = ComplexFFT2D(inverse=inverse, norm=norm)
    y = layer(cvk.to_stacked(z))
    assert tuple(y.shape) == shape[:3] + (2 * shape[3],)
    _close(_complex(y), _numpy_fft2(z, inverse, norm))


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("shape", [(2, 4, 6, 1), (1, 5, 7, 2)])
def test_centered_is_fastmri_shifted_transform(rng, shape, inverse):
    # Even and odd sizes (where fftshift and ifftshift differ).
    z = _random(rng, shape)
    for norm in NORMS:
        layer = ComplexFFT2D(inverse=inverse, norm=norm, centered=True)
        want = _numpy_fft2(z, inverse, norm, centered=True)
        _close(_complex(layer(cvk.to_stacked(z))), want)


@pytest.mark.parametrize("centered", [False, True])
@pytest.mark.parametrize("norm", NORMS)
def test_round_trip(rng, norm, centered):
    x = cvk.to_stacked(_random(rng, (2, 6, 5, 2)))
    k = fourier.fft2(x, norm=norm, centered=centered)
    back = fourier.ifft2(k, norm=norm, centered=centered)
    # Two transforms of float32 rounding on values of order 1.
    np.testing.assert_allclose(to_numpy(back), x, atol=1e-5)


def test_functions_take_any_leading_axes_and_dtypes(rng):
    # (B, T, H, W, 2C): a time axis before the image axes.
    z = _random(rng, (2, 3, 4, 5, 2))
    want = np.fft.fft2(z, axes=(2, 3), norm="ortho")
    y = fourier.fft2(cvk.to_stacked(z), norm="ortho")
    assert tuple(y.shape) == (2, 3, 4, 5, 4)
    _close(_complex(y), want)
    # float16 in, float16 out, computed in float32: only the result's
    # rounding (float16: 2^-11 relative, 1e-3 with margin, elementwise).
    half = fourier.fft2(cvk.to_stacked(z).astype("float16"), norm="ortho")
    assert keras.backend.standardize_dtype(half.dtype) == "float16"
    rounded = cvk.from_stacked(cvk.to_stacked(z).astype("float16"))
    exact = np.fft.fft2(rounded.astype("complex128"), axes=(2, 3), norm="ortho")
    exact = cvk.to_stacked(exact, "float64")
    got = to_numpy(half).astype("float64")
    assert np.all(np.abs(got - exact) <= 1e-3 * np.abs(exact) + 1e-6)


def test_dft_matrix_is_numpys_transform():
    for n in (1, 4, 5):
        for inverse, norm in ((False, "ortho"), (True, "backward")):
            fn = np.fft.ifft if inverse else np.fft.fft
            want = fn(np.eye(n), axis=0, norm=norm)
            got = fourier.dft_matrix(n, inverse, norm)
            np.testing.assert_allclose(got, want, atol=1e-12)
        shifted = np.fft.fftshift(
            np.fft.fft(np.fft.ifftshift(np.eye(n), axes=0), axis=0), axes=0
        )
        got = fourier.dft_matrix(n, centered=True)
        np.testing.assert_allclose(got, shifted, atol=1e-12)


def test_gradient_is_the_adjoint(rng):
    """`fft2` is linear: the gradient of `<G, fft2(x)>` (the real inner
    product of the stacked tensors) is the adjoint `F^H G`, which is
    `ifft2(G)` for "ortho" and `H W ifft2(G)` for "backward"."""
    x = cvk.to_stacked(_random(rng, (2, 4, 6, 2)))
    g = _random(rng, (2, 4, 6, 2))
    for norm, scale in (("ortho", 1.0), ("backward", 24.0)):
        layer = ComplexFFT2D(norm=norm)
        target = keras.ops.convert_to_tensor(cvk.to_stacked(g))

        def loss(x, layer=layer, target=target):
            return keras.ops.sum(layer(x) * target)

        _, (grad,), _ = gradients(loss, [x])
        want = scale * np.fft.ifft2(g, axes=(1, 2), norm=norm)
        _close(_complex(grad), want)


def _numpy_consistency(image, kspace, mask, norm, centered, weight=None):
    """`ifft2(where(m, k0, fft2(x)))`, or the soft form."""
    predicted = _numpy_fft2(image, False, norm, centered)
    m = np.broadcast_to(mask, image.shape[:3])[..., None].astype(bool)
    if weight is None:
        mixed = np.where(m, kspace, predicted)
    else:
        soft = (predicted + weight * kspace) / (1 + weight)
        mixed = np.where(m, soft, predicted)
    return _numpy_fft2(mixed, True, norm, centered)


def _columns(rng, batch, height, width):
    """fastMRI-like masks of whole columns `(B, 1, W)`, 0/1 float32."""
    return (rng.random((batch, 1, width)) < 0.4).astype("float32")


# Mask shapes for images (2, 6, 8): per image, columns per image, one
# mask for all, one row of columns, and with a trailing axis of 1.
MASKS = {
    "B,H,W": lambda rng: (rng.random((2, 6, 8)) < 0.5).astype("float32"),
    "B,1,W": lambda rng: _columns(rng, 2, 6, 8),
    "H,W": lambda rng: (rng.random((6, 8)) < 0.5).astype("float32"),
    "1,W": lambda rng: (rng.random((1, 8)) < 0.5).astype("float32"),
    "B,H,W,1": lambda rng: (rng.random((2, 6, 8, 1)) < 0.5).astype("float32"),
    "H,W,1": lambda rng: (rng.random((6, 8, 1)) < 0.5).astype("float32"),
    "1,W,1": lambda rng: (rng.random((1, 8, 1)) < 0.5).astype("float32"),
}


@pytest.mark.parametrize("mask_kind", sorted(MASKS))
def test_data_consistency_matches_numpy(rng, mask_kind):
    image, kspace = _random(rng, (2, 6, 8, 2)), _random(rng, (2, 6, 8, 2))
    mask = MASKS[mask_kind](rng)
    layer = ComplexDataConsistency()
    out = layer(cvk.to_stacked(image), cvk.to_stacked(kspace), mask)
    # The trailing axis of 1 of the last three kinds dropped (never a
    # width: these images are 8 wide).
    numpy_mask = mask[..., 0] if mask_kind.endswith(",1") else mask
    want = _numpy_consistency(image, kspace, numpy_mask, "ortho", False)
    _close(_complex(out), want)


@pytest.mark.skipif(not has_float64(), reason="the backend has no float64")
@pytest.mark.skipif(
    keras.backend.backend() == "torch",
    reason="Keras 3.15's torch matmul returns float32 for float64 operands "
    "(its result_type of two torch.float64 dtypes is float32)",
)
def test_a_float64_policy_transforms_in_float64(rng):
    """Under a float64 policy the layers keep float64 (float32 under the
    others): 1e-12 of the largest value, float64 rounding through two
    8-point sums with margin (float32 would give ~1e-6)."""
    image, kspace = _random(rng, (2, 8, 6, 1)), _random(rng, (2, 8, 6, 1))
    x = cvk.to_stacked(image, "float64")
    y = ComplexFFT2D(norm="ortho", dtype="float64")(x)
    assert keras.backend.standardize_dtype(y.dtype) == "float64"
    _close(_complex(y), _numpy_fft2(image, False, "ortho"), rtol=1e-12)
    mask = _columns(rng, 2, 8, 6)
    # Tensors, not NumPy arrays: Keras converts a layer's NumPy arguments
    # after the first one to float32 on PyTorch.
    measured = keras.ops.convert_to_tensor(cvk.to_stacked(kspace, "float64"))
    out = ComplexDataConsistency(dtype="float64")(
        keras.ops.convert_to_tensor(x), measured, mask
    )
    want = _numpy_consistency(image, kspace, mask, "ortho", False)
    _close(_complex(out), want, rtol=1e-12)


def test_a_trailing_axis_of_one_is_not_read_as_a_width(rng):
    """On square images a `(1, W, 1)` mask could pass for `(B, H, W)`
    with W = 1 and broadcast one column over the rows; it is the columns
    `(1, W)` with a trailing axis, as documented."""
    image, kspace = _random(rng, (2, 8, 8, 1)), _random(rng, (2, 8, 8, 1))
    columns = (rng.random((1, 8)) < 0.5).astype("float32")
    layer = ComplexDataConsistency()
    stacked = cvk.to_stacked(image), cvk.to_stacked(kspace)
    want = _numpy_consistency(image, kspace, columns, "ortho", False)
    for mask in (columns, columns[..., None], columns[None, :, :, None]):
        _close(_complex(layer(*stacked, mask)), want)


@pytest.mark.parametrize(
    "norm, centered, weight",
    [("backward", True, None), ("forward", False, 0.5), ("ortho", True, 4)],
)
def test_data_consistency_norms_centring_and_soft_weight(
    rng, norm, centered, weight
):
    image, kspace = _random(rng, (2, 6, 8, 1)), _random(rng, (2, 6, 8, 1))
    mask = _columns(rng, 2, 6, 8)
    layer = ComplexDataConsistency(
        norm=norm, centered=centered, data_weight=weight
    )
    out = layer(cvk.to_stacked(image), cvk.to_stacked(kspace), mask)
    want = _numpy_consistency(image, kspace, mask, norm, centered, weight)
    _close(_complex(out), want)


def test_sampled_entries_are_measured_and_idempotent(rng):
    image, kspace = _random(rng, (2, 6, 8, 2)), _random(rng, (2, 6, 8, 2))
    mask = _columns(rng, 2, 6, 8)
    layer = ComplexDataConsistency()
    out = layer(cvk.to_stacked(image), cvk.to_stacked(kspace), mask)
    k_out = _complex(fourier.fft2(out, norm="ortho"))
    sampled = np.broadcast_to(mask, (2, 6, 8)).astype(bool)
    assert 0 < sampled.sum() < sampled.size
    predicted = np.fft.fft2(image, axes=(1, 2), norm="ortho")
    # Two more float32 transforms on values of order 1: 1e-5.
    np.testing.assert_allclose(k_out[sampled], kspace[sampled], atol=1e-5)
    np.testing.assert_allclose(k_out[~sampled], predicted[~sampled], atol=1e-5)
    again = layer(out, cvk.to_stacked(kspace), mask)
    np.testing.assert_allclose(to_numpy(again), to_numpy(out), atol=1e-5)
    # A bool mask is the same mask.
    boolean = layer(cvk.to_stacked(image), cvk.to_stacked(kspace), sampled)
    np.testing.assert_allclose(to_numpy(boolean), to_numpy(out), atol=1e-6)


def test_learned_data_weight_gets_finite_gradients():
    """Zeros everywhere (a degenerate input): finite outputs and finite
    gradients for the inputs and the learned weight; the weight's
    gradient is nonzero once the prediction and the data differ."""
    layer = ComplexDataConsistency(data_weight=1.0, learn_data_weight=True)
    zeros = np.zeros((1, 4, 4, 2), "float32")
    mask = np.ones((1, 1, 4), "float32")
    layer.build(zeros.shape, zeros.shape, mask.shape)
    assert [w.name for w in layer.trainable_weights] == ["data_weight"]
    assert layer.trainable_weights[0].dtype == "float32"

    def loss(image, kspace):
        return keras.ops.sum(layer(image, kspace, mask) ** 2)

    variables = layer.trainable_weights
    value, grads, (grad_weight,) = gradients(loss, [zeros, zeros], variables)
    assert value == 0.0 and all(np.isfinite(g).all() for g in grads)
    assert np.isfinite(grad_weight).all()
    ones = np.ones_like(zeros)
    value, grads, (grad_weight,) = gradients(loss, [zeros, ones], variables)
    assert np.isfinite(value) and all(np.isfinite(g).all() for g in grads)
    assert np.isfinite(grad_weight) and grad_weight != 0


@pytest.mark.parametrize("weight", [None, 0.5])
def test_non_finite_kspace_where_not_sampled_is_ignored(rng, weight):
    """Regression: NaN and inf in k-space where the mask is 0 made the
    whole image NaN (a blend by products, and 0 * NaN is NaN). The image
    is NumPy's for any finite values there, and the gradients (image,
    k-space, a learned weight) are finite, 0 into the holes of k-space."""
    image, kspace = _random(rng, (2, 6, 8, 1)), _random(rng, (2, 6, 8, 1))
    mask = _columns(rng, 2, 6, 8)
    assert 0 < mask.sum() < mask.size
    x, k = cvk.to_stacked(image), cvk.to_stacked(kspace)
    holes = np.broadcast_to(mask[..., None] == 0, k.shape)
    values = np.array([np.nan, np.inf, -np.inf], "float32")
    k[holes] = values[np.arange(holes.sum()) % 3]
    layer = ComplexDataConsistency(
        data_weight=weight, learn_data_weight=weight is not None
    )
    want = _numpy_consistency(image, kspace, mask, "ortho", False, weight)
    _close(_complex(layer(x, k, mask)), want)

    def loss(x, k):
        return keras.ops.sum(layer(x, k, mask) ** 2)

    variables = layer.trainable_weights
    value, (grad_x, grad_k), grad_w = gradients(loss, [x, k], variables)
    assert np.isfinite(value)
    assert np.isfinite(grad_x).all() and np.isfinite(grad_k).all()
    assert all(np.isfinite(g).all() for g in grad_w)
    assert not grad_k[holes].any() and grad_k[~holes].any()


@pytest.mark.slow
def test_keras_round_trip(rng, tmp_path):
    image = keras.Input((6, 8, 4))
    kspace = keras.Input((6, 8, 4))
    mask = keras.Input((1, 8))
    consistent = ComplexDataConsistency(
        norm="backward", data_weight=2.0, learn_data_weight=True
    )(image, kspace, mask)
    outputs = ComplexFFT2D(norm="forward", centered=True)(consistent)
    model = keras.Model([image, kspace, mask], outputs)
    layer = model.layers[-2]
    layer.data_weight_variable.assign(3.5)
    path = tmp_path / "fourier.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    inputs = [
        cvk.to_stacked(_random(rng, (2, 6, 8, 2))),
        cvk.to_stacked(_random(rng, (2, 6, 8, 2))),
        _columns(rng, 2, 6, 8),
    ]
    np.testing.assert_array_equal(
        to_numpy(loaded(inputs)), to_numpy(model(inputs))
    )
    for a, b in zip(model.layers[-2:], loaded.layers[-2:]):
        assert a.get_config() == b.get_config()
    assert float(to_numpy(loaded.layers[-2].data_weight_variable)) == 3.5


def test_under_xla(rng):
    x = cvk.to_stacked(_random(rng, (2, 6, 8, 2)))
    kspace = cvk.to_stacked(_random(rng, (2, 6, 8, 2)))
    mask = _columns(rng, 2, 6, 8)
    fft = ComplexFFT2D(norm="ortho", centered=True)
    consistency = ComplexDataConsistency(data_weight=0.5)

    def fn(x, kspace, mask):
        return fft(consistency(x, kspace, mask))

    eager = to_numpy(fn(x, kspace, mask))
    xla = compiled(fn)
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    # The same float32 sums in XLA's order: ulps of values of order 1.
    np.testing.assert_allclose(to_numpy(xla(x, kspace, mask)), eager, atol=1e-5)


@pytest.mark.parametrize(
    "policy, rtol", [("mixed_float16", 1e-3), ("mixed_bfloat16", 8e-3)]
)
def test_mixed_precision_computes_in_float32(rng, policy, rtol):
    """The transform and the blend run in float32: the half-precision
    result differs from the float32 one by its own rounding, elementwise
    (float16: 2^-11, bfloat16: 2^-8 relative; 1e-3 and 8e-3 with margin),
    also at the smallest k-space entries, which a float16 DFT would lose
    (68 dB below the largest on a 64 x 64 image, see the module)."""
    x = cvk.to_stacked(_random(rng, (2, 16, 16, 1)))
    kspace = cvk.to_stacked(_random(rng, (2, 16, 16, 1)))
    mask = _columns(rng, 2, 16, 16)
    want_k = to_numpy(ComplexFFT2D(norm="ortho")(x))
    want_dc = to_numpy(ComplexDataConsistency(data_weight=1.0)(x, kspace, mask))
    keras.config.set_dtype_policy(policy)
    fft = ComplexFFT2D(norm="ortho")
    consistency = ComplexDataConsistency(
        data_weight=1.0, learn_data_weight=True
    )
    got_k, got_dc = fft(x), consistency(x, kspace, mask)
    half = policy.split("_")[1]
    for got, want in ((got_k, want_k), (got_dc, want_dc)):
        assert keras.backend.standardize_dtype(got.dtype) == half
        got = to_numpy(got).astype("float32")
        assert np.all(np.abs(got - want) <= rtol * np.abs(want) + 1e-6)
    assert consistency.data_weight_variable.dtype == "float32"


def test_compute_output_shape_symbolic_and_eager(rng):
    fft = ComplexFFT2D(inverse=True)
    assert fft.compute_output_shape((None, 6, 8, 4)) == (None, 6, 8, 4)
    symbolic = fft(keras.Input((6, 8, 4)))
    assert tuple(symbolic.shape) == (None, 6, 8, 4)
    consistency = ComplexDataConsistency()
    shape = consistency.compute_output_shape(
        (None, 6, 8, 4), (None, 6, 8, 4), (None, 1, 8)
    )
    assert shape == (None, 6, 8, 4)
    symbolic = consistency(
        keras.Input((6, 8, 4)), keras.Input((6, 8, 4)), keras.Input((1, 8))
    )
    assert tuple(symbolic.shape) == (None, 6, 8, 4)
    x = np.zeros((3, 6, 8, 4), "float32")
    eager = consistency(x, x, np.ones((6, 8), "float32"))
    assert tuple(eager.shape) == (3, 6, 8, 4)
    # An empty batch.
    empty = np.zeros((0, 6, 8, 4), "float32")
    assert tuple(ComplexFFT2D()(empty).shape) == (0, 6, 8, 4)


@pytest.mark.parametrize(
    "cls, kwargs, match",
    [
        (ComplexFFT2D, dict(norm="orthonormal"), "'backward', 'ortho'"),
        (ComplexFFT2D, dict(norm=1), "norm=1"),
        (ComplexFFT2D, dict(inverse="yes"), "inverse='yes'"),
        (ComplexFFT2D, dict(centered=1), "centered=1"),
        (ComplexDataConsistency, dict(norm="Ortho"), "norm='Ortho'"),
        (ComplexDataConsistency, dict(data_weight=-1), "data_weight=-1"),
        (ComplexDataConsistency, dict(data_weight=np.inf), "data_weight=inf"),
        (ComplexDataConsistency, dict(data_weight=True), "data_weight=True"),
        (ComplexDataConsistency, dict(learn_data_weight=True), "None"),
        (ComplexDataConsistency, dict(learn_data_weight=1), "weight=1"),
    ],
)
def test_bad_arguments(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


def test_none_norm_is_numpys_backward():
    assert ComplexFFT2D(norm=None).get_config()["norm"] == "backward"


@pytest.mark.parametrize(
    "shape, match",
    [
        ((1, 4, 4, 3), "input_shape\\[-1\\]=3"),  # an odd channel axis
        ((None, None, 8, 2), "height, width and channels known"),
        ((None, 8, None, 2), "Received: input_shape=\\(None, 8, None, 2\\)"),
        ((4, 4, 2), "batch, height, width"),
    ],
)
def test_bad_image_shapes(shape, match):
    with pytest.raises(ValueError, match=match):
        ComplexFFT2D().build(shape)


def test_data_consistency_refuses_an_odd_channel_axis():
    image = np.zeros((1, 4, 4, 3), "float32")
    with pytest.raises(ValueError, match="image.shape\\[-1\\]=3"):
        ComplexDataConsistency()(image, image, np.ones((1, 4), "float32"))


def test_bad_input_dtype():
    with pytest.raises(ValueError, match="inputs.dtype=int32"):
        ComplexFFT2D()(np.zeros((1, 2, 2, 2), "int32"))


@pytest.mark.parametrize(
    "mask_shape",
    [(2, 8, 6), (2, 6, 8, 2), (6, 8, 1, 1), (3, 1, 8), (2, 1, 1, 6, 8), ()],
)
def test_mask_that_does_not_broadcast(mask_shape):
    """Images (2, 6, 8, 4); masks with H and W swapped, two channels, a
    trailing (1, 1), a batch of 3, rank 5, a scalar: a ValueError naming
    both shapes, when built and when called on symbolic inputs."""
    match = re.escape(
        f"sampling_mask.shape={mask_shape}, image.shape=(2, 6, 8, 4)"
    )
    layer = ComplexDataConsistency()
    with pytest.raises(ValueError, match=match):
        layer.build((2, 6, 8, 4), (2, 6, 8, 4), mask_shape)
    if mask_shape:
        image = keras.Input((6, 8, 4), batch_size=2)
        mask = keras.Input(mask_shape[1:], batch_size=mask_shape[0])
        with pytest.raises(ValueError, match=match):
            ComplexDataConsistency()(image, image, mask)


def test_kspace_of_another_shape():
    with pytest.raises(ValueError, match="kspace.shape=\\(2, 6, 8, 2\\)"):
        ComplexDataConsistency().build((2, 6, 8, 4), (2, 6, 8, 2), (6, 8))
