"""ComplexFFT2D and ComplexDataConsistency in TFLite files: builtin ops
only (the DFT as FULLY_CONNECTED products), compared on LiteRT with NumPy
complex128 in float32 and in the integer modes.

The model is a reconstruction step: data consistency of a zero-filled
image with its measured k-space (fastMRI-like column masks, norm
"ortho"), then the k-space of the result (`ComplexFFT2D`), on 16 x 16
phantoms (random ellipses with a smooth phase). Errors are given as the
SNR of the LiteRT output against NumPy, `10 log10(sum |want|^2 / sum
|got - want|^2)`, measured when the tests were written (bounds a few dB
below): float32 136.6 dB; int16x8 48.4 dB (42 at 32 x 32: its int8 DFT
matrices bound it), usable; full_int8 24.4 dB (23 at 32 x 32: int8
activations cannot hold a k-space whose zero frequency dwarfs the rest),
marginal. Also measured, not tested: float16 73.2 dB (68 at 32 x 32; its
DFT matrices stored in float16), dynamic_int8 36 dB at 32 x 32 (at 16 x
16 the matrices are too small for the converter to quantize). LiteRT,
a batch of two 16 x 16 images: 0.02 ms float32, 0.03 ms full_int8, 0.14
ms int16x8.

The calibrated modes convert in a TensorFlow subprocess (about 10 s each
on two cores), so the files are made once per module and every test is
`tensorflow_only`, as in test_export_weights.py.
"""

import keras
import numpy as np
import pytest

import cvattn_keras as cvk
from cvattn_keras.layers import ComplexDataConsistency
from cvattn_keras.layers import ComplexFFT2D

SIZE = 16


def _phantoms(rng, count, size):
    """Complex images `(count, size, size)`: four random ellipses of
    intensities in [0.2, 1] with a smooth (linear) random phase."""
    yy, xx = np.mgrid[-1 : 1 : size * 1j, -1 : 1 : size * 1j]
    images = np.zeros((count, size, size), complex)
    for i in range(count):
        for _ in range(4):
            cx, cy = rng.uniform(-0.4, 0.4, 2)
            a, b = rng.uniform(0.15, 0.6, 2)
            angle = rng.uniform(0, np.pi)
            u = (xx - cx) * np.cos(angle) + (yy - cy) * np.sin(angle)
            v = (yy - cy) * np.cos(angle) - (xx - cx) * np.sin(angle)
            inside = (u / a) ** 2 + (v / b) ** 2 < 1
            images[i] += rng.uniform(0.2, 1.0) * inside
        slope = rng.uniform(-0.5, 0.5, 3)
        phase = np.pi * (slope[0] * xx + slope[1] * yy + 2 * slope[2])
        images[i] *= np.exp(1j * phase)
    return images[..., None]  # (count, H, W, 1)


def _measurements(rng, count, size=SIZE):
    """`[zero-filled image, measured k-space, mask (B, 1, W)]` as the
    model takes them: k-space in numpy's order with norm "ortho", noise
    of 1% of a pixel, about 30% of the columns plus the lowest
    frequencies sampled."""
    images = _phantoms(rng, count, size)
    kspace = np.fft.fft2(images, axes=(1, 2), norm="ortho")
    kspace += 0.01 * (
        rng.standard_normal(kspace.shape)
        + 1j * rng.standard_normal(kspace.shape)
    )
    mask = (rng.random((count, 1, size)) < 0.3).astype("float32")
    mask[..., :3] = mask[..., -2:] = 1  # frequencies 0, 1, 2 and -1, -2
    kspace = kspace * mask[..., None]
    zero_filled = np.fft.ifft2(kspace, axes=(1, 2), norm="ortho")
    return [cvk.to_stacked(zero_filled), cvk.to_stacked(kspace), mask]


def _numpy_model(inputs):
    """The model in complex128: `fft2(ifft2(where(m, k0, fft2(x))))`."""
    image, kspace, mask = inputs
    image = cvk.from_stacked(image, "complex128")
    kspace = cvk.from_stacked(kspace, "complex128")
    predicted = np.fft.fft2(image, axes=(1, 2), norm="ortho")
    mixed = np.where(mask[..., None] > 0, kspace, predicted)
    consistent = np.fft.ifft2(mixed, axes=(1, 2), norm="ortho")
    return np.fft.fft2(consistent, axes=(1, 2), norm="ortho")


def _model():
    image = keras.Input((SIZE, SIZE, 2), name="image")
    kspace = keras.Input((SIZE, SIZE, 2), name="kspace")
    mask = keras.Input((1, SIZE), name="mask")
    consistent = ComplexDataConsistency()(image, kspace, mask)
    outputs = ComplexFFT2D(norm="ortho")(consistent)
    return keras.Model([image, kspace, mask], outputs)


def _snr(got, want):
    noise = np.sum(np.abs(got - want) ** 2)
    return 10 * np.log10(np.sum(np.abs(want) ** 2) / noise)


MODES = (None, "int16x8", "full_int8")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fourier")
    rng = np.random.default_rng(5)
    model = _model()
    inputs = _measurements(rng, 2)
    calibration = _measurements(rng, 32)
    files = {}
    for mode in MODES:
        files[mode] = cvk.export.export_tflite(
            model,
            directory / f"fourier_{mode}.tflite",
            quantization=mode,
            representative_data=calibration if mode else None,
        )
    return model, inputs, files


# (mode, SNR bound in dB: the measured SNR above, less 3-5 dB).
BOUNDS = [(None, 130.0), ("int16x8", 44.0), ("full_int8", 21.0)]


@pytest.mark.slow
@pytest.mark.tensorflow_only  # a conversion each (the integer ones in
# a subprocess, also under the other backends)
@pytest.mark.parametrize("mode, bound", BOUNDS)
def test_builtin_only_and_matches_numpy(exported, mode, bound):
    model, inputs, files = exported
    report = cvk.export.verify_tflite(files[mode], model, inputs)
    assert report.builtin_only, report
    # The DFT is matrix products: no FFT op (TFLite has none for complex
    # numbers), and no float op left in the integer files.
    assert "FULLY_CONNECTED" in report.ops, report.ops
    assert not {"RFFT2D", "COMPLEX_ABS", "REAL", "IMAG"} & set(report.ops)
    if mode is not None:
        assert report.quantization == mode, report
    got = cvk.export.predict_tflite(files[mode], model, inputs)
    snr = _snr(cvk.from_stacked(got, "complex128"), _numpy_model(inputs))
    assert snr >= bound, (mode, snr)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_float32_file_stores_each_dft_matrix_once(exported):
    """Three transforms of one size (the consistency's forward and
    inverse, the last forward) on both axes: two distinct matrices
    `[M_i; M_r]` `(2N, N)` of float32 (the converter shares equal
    constants), plus 1 KiB for the shapes and permutations."""
    model, inputs, files = exported
    _, weight_bytes = cvk.export.file_sizes(files[None])
    assert weight_bytes <= 2 * 4 * (2 * SIZE * SIZE) + 1024, weight_bytes


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_chained_square_transforms(tmp_path):
    """Regression: TensorFlow 2.21's converter folded one transform's
    last transpose and reshape with the next one's first reshape and
    transpose into a reshape (a wrong file for square images: 240 times
    the output's scale off); each transform starts with a transpose now.
    The centred round trip on 8 x 8 images gives the input back."""
    inputs = keras.Input((8, 8, 4))
    k = ComplexFFT2D(norm="ortho", centered=True)(inputs)
    outputs = ComplexFFT2D(inverse=True, norm="ortho", centered=True)(k)
    model = keras.Model(inputs, outputs)
    path = cvk.export.export_tflite(model, tmp_path / "chain.tflite")
    x = np.random.default_rng(2).standard_normal((2, 8, 8, 4))
    got = cvk.export.predict_tflite(path, model, x.astype("float32"))
    # Two float32 transforms of values of order 1.
    np.testing.assert_allclose(got, x, atol=1e-5)
