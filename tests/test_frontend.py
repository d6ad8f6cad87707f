"""ComplexFrequencyFrontEnd: complex convolutions over the bins of each
frame, against a NumPy complex128 computation of the same arithmetic."""

import keras
import numpy as np
import pytest

import cvattn_keras as cvk
from cvattn_keras.layers import ComplexFrequencyFrontEnd
from tests import backend_utils as bu
from tests.numpy_reference import leaky_relu
from tests.numpy_reference import random_complex


def _params(layer):
    """Per block: the complex kernel (k, in, out) and bias (out,)."""
    return [
        (
            bu.to_numpy(conv.kernel_real) + 1j * bu.to_numpy(conv.kernel_imag),
            bu.to_numpy(conv.bias_real) + 1j * bu.to_numpy(conv.bias_imag),
        )
        for conv in layer.convolutions
    ]


def _norm_inference(z, norm):
    """The reference batch norm at inference, `R sqrtm(Gamma) (z - mean) +
    bias`, from the layer's variables, in complex128 (z: (N, L, C))."""
    v = {w.name: bu.to_numpy(w).astype(np.float64) for w in norm.weights}
    x = z - (v["moving_mean_real"] + 1j * v["moving_mean_imag"])
    w0, w1, w2 = v["w0"], v["w1"], v["w2"]
    rho = (2 / (1 + np.exp(-w2)) - 1) * np.abs(w0 * w1)
    gamma = np.stack(
        [np.stack([w0**2, rho], -1), np.stack([rho, w1**2], -1)], -2
    )  # (C, 2, 2)
    values, vectors = np.linalg.eigh(gamma)
    root = vectors @ (np.sqrt(values)[..., None] * vectors.swapaxes(-1, -2))
    r = np.stack(
        [
            np.stack([v["moving_whitening_rr"], v["moving_whitening_ri"]], -1),
            np.stack([v["moving_whitening_ir"], v["moving_whitening_ii"]], -1),
        ],
        -2,
    )
    matrix = r @ root  # (C, 2, 2)
    parts = np.stack([x.real, x.imag], -1)  # (N, L, C, 2)
    out = np.einsum("cij,nlcj->nlci", matrix, parts)
    bias = v["bias_real"] + 1j * v["bias_imag"]
    return out[..., 0] + 1j * out[..., 1] + bias


def _reference(layer, spectra):
    """The front end in complex128: spectra (B, T, F) complex -> (B, T,
    C * L) complex, flattened channel-major."""
    batch, frames, bins = spectra.shape
    x = spectra.reshape(batch * frames, bins, 1)
    for (kernel, bias), stride, norm in zip(
        _params(layer), layer.strides, layer.norms
    ):
        size = kernel.shape[0]
        length = (x.shape[1] - size) // stride + 1
        windows = np.stack(
            [x[:, i * stride : i * stride + size] for i in range(length)], 1
        )  # (N, L, k, in)
        x = np.einsum("nlki,kio->nlo", windows, kernel) + bias
        x = leaky_relu(_norm_inference(x, norm))
    x = x.transpose(0, 2, 1)  # (N, C, L): feature c * L + l
    return x.reshape(batch, frames, -1)


def _randomize_statistics(layer, rng):
    """Moving statistics and scales away from their identity defaults."""
    for norm in layer.norms:
        for weight in norm.weights:
            shape = tuple(weight.shape)
            if weight.name.startswith("moving_whitening"):
                diagonal = weight.name[-2] == weight.name[-1]
                value = (
                    rng.uniform(0.5, 2.0, shape)
                    if diagonal
                    else rng.uniform(-0.3, 0.3, shape)
                )
            else:
                value = rng.uniform(-1.0, 1.0, shape)
            weight.assign(value.astype("float32"))


def test_reference_sizes():
    """The paper's: 2048 bins -> 1022, 510, 254, 126, 62; 7936 features."""
    layer = ComplexFrequencyFrontEnd()
    assert layer.lengths(2048) == [2048, 1022, 510, 254, 126, 62]
    assert layer.compute_output_shape((None, 64, 4096)) == (None, 64, 15872)
    assert [norm.convention for norm in layer.norms] == ["reference"] * 5
    assert [norm.momentum for norm in layer.norms] == [0.5] * 5
    assert [norm.epsilon for norm in layer.norms] == [1e-9] * 5


def test_inference_against_complex128(rng):
    layer = ComplexFrequencyFrontEnd(
        filters=(3, 4, 5), kernel_sizes=(6, 3, 3), strides=(2, 2, 1)
    )
    spectra = random_complex(rng, (2, 3, 40))
    x = cvk.to_stacked(spectra).astype("float32")
    layer.build(x.shape)
    _randomize_statistics(layer, rng)
    out = bu.to_numpy(layer(x, training=False))
    expected = _reference(layer, spectra)
    assert out.shape == (2, 3, 2 * expected.shape[-1])
    assert layer.lengths(40) == [40, 18, 8, 6]
    # float32 arithmetic over three blocks of O(10)-term sums.
    scale = np.abs(expected).max()
    np.testing.assert_allclose(
        cvk.from_stacked(out), expected, rtol=0, atol=2e-5 * scale
    )


def test_training_uses_batch_statistics_of_unmasked_frames(rng):
    layer = ComplexFrequencyFrontEnd(filters=(2, 3), kernel_sizes=(4, 3))
    x = cvk.to_stacked(random_complex(rng, (3, 4, 20))).astype("float32")
    mask = np.ones((3, 4), bool)
    mask[1, 2:] = False
    out = bu.to_numpy(layer(x, training=True, mask=mask))
    assert np.isfinite(out).all()
    # Masked frames are out of the statistics: changing them changes no
    # unmasked frame's output.
    changed = x.copy()
    changed[1, 2:] = 1e6
    again = bu.to_numpy(layer(changed, training=True, mask=mask))
    # Equal but for float32 rounding: the statistics' sums run over other
    # values in the masked slots (zeroed, but summed in another order).
    np.testing.assert_allclose(again[mask], out[mask], rtol=1e-5, atol=1e-6)
    # Without the mask they do: outputs of order 1 move by far more than
    # rounding (1e6 in the statistics).
    unmasked = bu.to_numpy(layer(changed, training=True))
    assert not np.allclose(unmasked[mask], out[mask], atol=1e-3)


def test_constant_frames_are_finite_with_finite_gradients():
    layer = ComplexFrequencyFrontEnd(filters=(2, 3), kernel_sizes=(4, 3))
    layer.build((2, 3, 40))
    for value in (0.0, 1.0, 1e30):
        x = np.full((2, 3, 40), value, "float32")
        y, grad_x, grad_vars = bu.value_and_gradients(
            layer, x, layer=layer, training=True
        )
        assert np.isfinite(y).all(), value
        assert np.isfinite(grad_x).all(), value
        assert all(np.isfinite(g).all() for g in grad_vars), value


def test_variable_frames_and_serialization(rng, tmp_path):
    inputs = keras.Input((None, 64))
    outputs = ComplexFrequencyFrontEnd(filters=(2, 4), kernel_sizes=(6, 3))(
        inputs
    )
    model = keras.Model(inputs, outputs)
    x = cvk.to_stacked(random_complex(rng, (2, 5, 32))).astype("float32")
    y = bu.to_numpy(model(x))
    assert y.shape == (2, 5, 2 * 4 * 6)
    path = tmp_path / "frontend.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(bu.to_numpy(loaded(x)), y)
    config = loaded.layers[-1].get_config()
    assert config["filters"] == [2, 4] and config["kernel_sizes"] == [6, 3]


@pytest.mark.skipif(
    keras.backend.backend() == "torch", reason="no XLA on the torch backend"
)
def test_compiles_under_xla(rng):
    layer = ComplexFrequencyFrontEnd(filters=(2, 3), kernel_sizes=(4, 3))
    x = cvk.to_stacked(random_complex(rng, (2, 3, 20))).astype("float32")
    layer.build(x.shape)
    eager = bu.to_numpy(layer(x, training=False))
    compiled = bu.to_numpy(bu.compiled(lambda v: layer(v, training=False))(x))
    # XLA may fuse and reorder the float32 sums: rounding only.
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="filters"):
        ComplexFrequencyFrontEnd(filters=())
    with pytest.raises(ValueError, match="kernel_sizes"):
        ComplexFrequencyFrontEnd(filters=(2, 3), kernel_sizes=(3,))
    with pytest.raises(ValueError, match="strides"):
        ComplexFrequencyFrontEnd(filters=(2,), kernel_sizes=3, strides=0)
    with pytest.raises(ValueError, match="batch_norm_convention='ref'"):
        ComplexFrequencyFrontEnd(batch_norm_convention="ref")
    with pytest.raises(ValueError, match="batch_norm_momentum=1.5"):
        ComplexFrequencyFrontEnd(batch_norm_momentum=1.5)
    with pytest.raises(ValueError, match="batch_norm_epsilon=0"):
        ComplexFrequencyFrontEnd(batch_norm_epsilon=0)
    with pytest.raises(ValueError, match="synchronized=1"):
        ComplexFrequencyFrontEnd(synchronized=1)
    with pytest.raises(ValueError, match="activation"):
        ComplexFrequencyFrontEnd(activation="softmax")
    # Any sequence of positive ints, a NumPy array included.
    layer = ComplexFrequencyFrontEnd(np.array([2, 3]), np.array([4, 3]))
    assert layer.filters == (2, 3) and layer.kernel_sizes == (4, 3)
    with pytest.raises(ValueError, match="bins=10"):
        ComplexFrequencyFrontEnd().build((None, 4, 20))
    with pytest.raises(ValueError, match="input_shape"):
        ComplexFrequencyFrontEnd().build((None, 4, 4095))
