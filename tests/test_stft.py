"""Tests of ComplexSTFT and ComplexISTFT against a NumPy complex128 STFT."""

import re

import keras
import numpy as np
import numpy_reference
import pytest
from backend_utils import compiled
from backend_utils import gradients
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras import stft as sf
from cvattn_keras.layers import ComplexISTFT
from cvattn_keras.layers import ComplexSTFT

_hann = numpy_reference.hann
_numpy_stft = numpy_reference.stft


def _run(fn, x):
    """`fn(x)`; under JAX compiled once (eager JAX compiles each op: many
    times slower here)."""
    if keras.backend.backend() == "jax":
        return compiled(fn)(x)
    return fn(x)


def _complex(y, bins):
    y = to_numpy(y).astype("float64")
    return y[..., :bins] + 1j * y[..., bins:]


# (frame_length, frame_step, fft_length, center, pad_mode, length, bins):
# for each N, centred and not, both pad modes, even and odd lengths, a
# window shorter than N, a bin range.
_CASES = {
    256: [
        (256, 64, 256, True, "constant", 1000, None),
        (256, 100, 256, True, "reflect", 777, (5, 60)),
        (200, 50, 256, False, "constant", 901, None),
        (256, 64, 256, False, "reflect", 640, (0, 1)),
        (100, 30, 129, True, "reflect", 700, None),  # an odd N
    ],
    512: [
        (512, 128, 512, True, "reflect", 1500, None),
        (400, 160, 512, True, "constant", 1601, (10, 257)),
        (512, 128, 512, False, "constant", 1537, (100, 200)),
    ],
    2048: [
        (2048, 512, 2048, True, "constant", 4097, (0, 300)),
        (1500, 512, 2048, False, "reflect", 5000, (20, 400)),
    ],
}


@pytest.mark.parametrize("implementation", ["conv", "fft"])
@pytest.mark.parametrize(
    "case",
    [case for cases in _CASES.values() for case in cases],
    ids=lambda case: "-".join(map(str, case[:6])) + f"-{case[6]}",
)
def test_matches_numpy(rng, case, implementation):
    frame_length, step, fft_length, center, pad_mode, length, bins = case
    x = rng.standard_normal((2, length))
    layer = ComplexSTFT(
        frame_length,
        step,
        fft_length=fft_length,
        center=center,
        pad_mode=pad_mode,
        bins=bins,
        implementation=implementation,
    )
    y = _run(layer, x.astype("float32"))
    expected = _numpy_stft(
        x, frame_length, step, fft_length, center, pad_mode, bins
    )
    frames = sf.frame_count(length, step, fft_length, center)
    assert tuple(y.shape) == (2, frames, 2 * expected.shape[-1])
    assert layer.compute_output_shape((2, length)) == tuple(y.shape)
    error = np.abs(_complex(y, layer.num_bins) - expected).max()
    assert error <= 1e-4 * np.abs(expected).max()


@pytest.mark.parametrize(
    "length, step, fft_length, center, frames",
    [
        (1000, 100, 256, True, 11),  # 1 + L // step
        (1024, 128, 512, True, 9),  # L a multiple of the step
        (1000, 100, 255, True, 10),  # odd N: 1 + (L - 1) // step
        (1000, 100, 256, False, 8),  # 1 + (L - N) // step
        (256, 100, 256, False, 1),
    ],
)
def test_frame_count(length, step, fft_length, center, frames):
    layer = ComplexSTFT(fft_length, step, center=center, bins=(0, 2))
    assert layer.compute_output_shape((1, length)) == (1, frames, 4)
    assert _run(layer, np.zeros((1, length), "float32")).shape[1] == frames
    assert layer.compute_output_shape((1, None)) == (1, None, 4)


@pytest.mark.parametrize("implementation", ["conv", "fft"])
def test_reflect_centred_equals_keras_stft(rng, implementation):
    x = rng.standard_normal((2, 1200)).astype("float32")
    layer = ComplexSTFT(
        300,
        75,
        fft_length=512,
        pad_mode="reflect",
        implementation=implementation,
    )
    real, imag = _run(lambda x: keras.ops.stft(x, 300, 75, 512), x)
    expected = to_numpy(real) + 1j * to_numpy(imag)
    error = np.abs(_complex(_run(layer, x), layer.num_bins) - expected).max()
    assert error <= 1e-4 * np.abs(expected).max()


def test_window_array_channel_input_and_normalized(rng):
    x = rng.standard_normal((2, 700)).astype("float32")
    hann = ComplexSTFT(128, 32)
    window = ComplexSTFT(128, 32, window=_hann(128), normalized=True)
    expected = to_numpy(hann(x)) / np.sqrt(128)
    np.testing.assert_allclose(
        to_numpy(window(x[..., None])), expected, atol=1e-5
    )


def test_hamming_and_rectangular_windows(rng):
    x = rng.standard_normal((1, 300))
    for name, w in [
        ("hamming", 0.54 - 0.46 * np.cos(2 * np.pi * np.arange(64) / 64)),
        ("rectangular", np.ones(64)),
    ]:
        y = ComplexSTFT(64, 16, window=name, center=False)(x.astype("f4"))
        frames = np.stack([x[0, t * 16 : t * 16 + 64] for t in range(15)])
        expected = np.fft.rfft(frames * w, axis=-1)
        error = np.abs(_complex(y, 33)[0] - expected).max()
        assert error <= 1e-4 * np.abs(expected).max(), name


def test_frame_mask():
    mask = np.zeros((2, 1000), bool)
    mask[0, :1000] = True
    mask[1, :333] = True
    for center, starts in [(True, 0), (False, 128)]:
        layer = ComplexSTFT(256, 100, center=center, bins=(0, 2))
        frames = layer.compute_output_shape((2, 1000))[1]
        centres = starts + 100 * np.arange(frames)
        # A centre past the end counts as the last sample.
        expected = np.stack([m[np.minimum(centres, 999)] for m in mask])
        got = to_numpy(layer.compute_mask(np.zeros((2, 1000)), mask))
        np.testing.assert_array_equal(got, expected)
        if center:  # 1000 % 100 == 0: the last centre is past the end
            assert frames == 11 and got[0].all() and not got[1, 4:].any()
    masked = keras.layers.Masking()(np.ones((2, 1000, 1), "float32"))
    assert ComplexISTFT(256, 64).compute_mask(masked, mask) is None


@pytest.mark.parametrize("implementation", ["conv", "fft"])
@pytest.mark.parametrize(
    "frame_length, step, fft_length, window, length",
    [
        (256, 64, 256, "hann", 1000),
        (256, 128, 256, "hann", 1001),
        (200, 50, 256, "hamming", 999),
        (64, 64, 64, "rectangular", 640),
        (100, 30, 129, "hann", 700),  # odd N, a step not dividing it
        (512, 128, 512, "hann", 2049),
    ],
)
def test_inverse_round_trip(
    rng, frame_length, step, fft_length, window, length, implementation
):
    x = rng.standard_normal((2, length)).astype("float32")
    args = dict(
        fft_length=fft_length, window=window, implementation=implementation
    )
    spectra = _run(ComplexSTFT(frame_length, step, **args), x)
    inverse = ComplexISTFT(frame_length, step, length=length, **args)
    y = _run(inverse, spectra)
    assert tuple(y.shape) == (2, length)
    assert inverse.compute_output_shape(spectra.shape) == (2, length)
    np.testing.assert_allclose(to_numpy(y), x, atol=2e-5)
    # Without `length`: (T - 1) * step samples, the first of the waveform.
    default = to_numpy(_run(ComplexISTFT(frame_length, step, **args), spectra))
    frames = spectra.shape[1]
    assert default.shape == (2, (frames - 1) * step + fft_length % 2)
    np.testing.assert_allclose(default, x[:, : default.shape[1]], atol=2e-5)


@pytest.mark.parametrize("implementation", ["conv", "fft"])
def test_inverse_without_centring(rng, implementation):
    x = rng.standard_normal((2, 1100)).astype("float32")
    spectra = _run(ComplexSTFT(256, 64, center=False), x)
    inverse = ComplexISTFT(
        256, 64, center=False, length=1100, implementation=implementation
    )
    y = to_numpy(_run(inverse, spectra))
    # Sample 0 is reached by no window (periodic Hann w[0] = 0): 0 there;
    # the tail past the last frame is 0 too.
    end = 64 * (spectra.shape[1] - 1) + 256
    assert y[:, 0].tolist() == [0.0, 0.0] and not y[:, end:].any()
    np.testing.assert_allclose(y[:, 8 : end - 8], x[:, 8 : end - 8], atol=1e-4)


def test_inverse_routes_agree_on_any_spectrum(rng):
    # Random spectra: the imaginary parts of bins 0 and N / 2 are ignored
    # by both, as numpy.fft.irfft ignores them.
    spectra = rng.standard_normal((2, 30, 2 * 50)).astype("float32")
    args = dict(fft_length=128, bins=(10, 60), normalized=True, length=900)
    conv = _run(ComplexISTFT(100, 30, implementation="conv", **args), spectra)
    fft = _run(ComplexISTFT(100, 30, implementation="fft", **args), spectra)
    np.testing.assert_allclose(
        to_numpy(fft), to_numpy(conv), atol=1e-5 * np.abs(to_numpy(conv)).max()
    )


def test_inverse_of_a_bin_range_zero_fills(rng):
    x = rng.standard_normal((1, 900)).astype("float32")
    full = to_numpy(ComplexSTFT(128, 32)(x))
    part = ComplexSTFT(128, 32, bins=(10, 40))(x)
    zeroed = full.copy()
    for offset in (0, 65):
        zeroed[..., offset : offset + 10] = 0
        zeroed[..., offset + 40 : offset + 65] = 0
    expected = to_numpy(ComplexISTFT(128, 32, length=900)(zeroed))
    got = ComplexISTFT(128, 32, bins=(10, 40), length=900)(part)
    np.testing.assert_allclose(to_numpy(got), expected, atol=1e-5)


def test_float16_policy_computes_in_float32(rng):
    x = rng.standard_normal((1, 3000)).astype("float32")
    expected = to_numpy(ComplexSTFT(1024, 256, implementation="conv")(x))
    keras.config.set_dtype_policy("mixed_float16")
    layer = ComplexSTFT(1024, 256, implementation="conv")
    y = layer(x)
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    assert layer.kernel_real.dtype == "float32"
    # float16 rounding of the result only (1e-3 relative), not of the sums.
    error = np.abs(to_numpy(y).astype("float32") - expected).max()
    assert error <= 1e-3 * np.abs(expected).max()
    keras.config.set_dtype_policy("float16")
    inverse = ComplexISTFT(1024, 256, length=3000)
    back = inverse(expected)
    assert keras.backend.standardize_dtype(back.dtype) == "float16"
    assert inverse.kernel_real.dtype == "float32"
    np.testing.assert_allclose(to_numpy(back).astype("float32"), x, atol=3e-3)


def test_trainable_kernels_get_finite_gradients(rng):
    layer = ComplexSTFT(64, 16, trainable=True, bins=(2, 20))
    inverse = ComplexISTFT(64, 16, trainable=True, bins=(2, 20))
    x = rng.standard_normal((2, 300)).astype("float32")
    layer.build(x.shape)
    inverse.build((2, 19, 36))
    assert len(layer.trainable_weights) == 2
    assert ComplexSTFT(64, 16).trainable_weights == []

    def loss(x):
        return keras.ops.sum(inverse(layer(x)) ** 2)

    variables = layer.trainable_weights + inverse.trainable_weights
    value, (grad_x,), grads = gradients(loss, [x], variables)
    assert np.isfinite(value) and np.isfinite(grad_x).all()
    assert all(np.isfinite(g).all() and np.abs(g).max() > 0 for g in grads)


def test_unfreezing_a_model_keeps_a_frozen_stft_the_dft(rng):
    """`model.trainable = False; model.trainable = True` (fine-tuning)
    leaves a layer built frozen on its route, with fixed kernels; one
    built trainable is frozen and unfrozen with the model."""
    fixed = ComplexSTFT(512, 128, bins=(0, 8))
    learned = ComplexSTFT(64, 16, trainable=True, bins=(0, 8))
    inputs = keras.Input((1024,))
    model = keras.Model(inputs, [fixed(inputs), learned(inputs)])
    model.trainable = False
    assert model.trainable_weights == []
    model.trainable = True
    assert fixed.implementation == "auto" and fixed.trainable_weights == []
    # The config holds the layer's state (unfrozen with the model) and
    # whether its kernels learn (they do not).
    assert fixed.get_config()["trainable"] is True
    assert fixed.get_config()["learn_kernels"] is False
    assert len(learned.trainable_weights) == 2
    assert learned.implementation == "conv"
    clone = ComplexSTFT.from_config(fixed.get_config())
    clone.build((None, 1024))
    assert clone.implementation == "auto" and clone.trainable_weights == []


def test_saved_model_round_trip(rng, tmp_path):
    window = np.kaiser(200, 8.0)  # a window given as an array
    model = keras.Sequential(
        [
            keras.Input((1000,)),
            ComplexSTFT(200, 50, fft_length=256, window=window, bins=(0, 64)),
            ComplexISTFT(
                200,
                50,
                fft_length=256,
                window=window,
                bins=(0, 64),
                trainable=True,
                length=1000,
            ),
        ]
    )
    config = model.layers[0].get_config()
    assert config["window"] == window.tolist() and config["bins"] == [0, 64]
    model.layers[1].kernel_real.assign(model.layers[1].kernel_real * 2)
    path = tmp_path / "stft.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    x = rng.standard_normal((2, 1000)).astype("float32")
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))
    assert loaded.layers[1].length == 1000 and loaded.layers[1].trainable


@pytest.mark.slow
@pytest.mark.parametrize("cls", [ComplexSTFT, ComplexISTFT])
def test_a_frozen_learned_front_end_reloads_frozen(rng, tmp_path, cls):
    """Built trainable, then frozen: saved and reloaded frozen (`fit`
    moves the Dense after it, not its kernels; it thawed on reload when
    the config held the construction's flag), and unfrozen after the
    reload it learns again, as the original would."""
    if cls is ComplexSTFT:
        inputs = keras.Input((300,))
        layer = ComplexSTFT(64, 16, trainable=True, bins=(0, 8))
    else:
        inputs = keras.Input((19, 66))
        layer = ComplexISTFT(64, 16, trainable=True, length=300)
    dense = keras.layers.Dense(3)
    model = keras.Model(inputs, dense(layer(inputs)[..., None]))
    layer.trainable = False
    assert layer.get_config()["trainable"] is False
    assert layer.get_config()["learn_kernels"] is True
    path = tmp_path / "frozen.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    front, back = loaded.layers[1], loaded.layers[-1]
    assert not front.trainable and front.trainable_weights == []
    assert len(loaded.trainable_weights) == 2  # the Dense's
    before = to_numpy(front.kernel_real).copy()
    dense_before = to_numpy(back.kernel).copy()
    x = rng.standard_normal((8,) + tuple(inputs.shape[1:])).astype("f4")
    y = rng.standard_normal((8,) + tuple(loaded.output.shape[1:]))
    loaded.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    loaded.fit(x, y.astype("float32"), epochs=1, verbose=0)
    np.testing.assert_array_equal(to_numpy(front.kernel_real), before)
    assert np.abs(to_numpy(back.kernel) - dense_before).max() > 0
    front.trainable = True
    assert len(front.trainable_weights) == 2
    assert front.implementation == "conv"


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(implementation="conv"),
        dict(implementation="fft"),
        dict(pad_mode="reflect"),
        dict(center=False, implementation="conv"),
        dict(center=False, implementation="fft"),
    ],
)
def test_an_empty_batch(kwargs):
    """Batch 0 gives what compute_output_shape says on every backend
    (TensorFlow's convolution returned the padded waveform, MirrorPad and
    torch's FFT failed, JAX's FFT route dropped the batch axis)."""
    layer = ComplexSTFT(256, 64, **kwargs)
    expected = layer.compute_output_shape((0, 1000))
    assert expected == (0, 16 if layer.center else 12, 258)
    y = layer(np.zeros((0, 1000), "float32"))
    assert tuple(y.shape) == expected
    inverse = ComplexISTFT(256, 64, **kwargs)
    back = inverse(y)
    assert tuple(back.shape) == inverse.compute_output_shape(expected)
    assert tuple(back.shape) == (0, 960)  # (15 * 64 or 11 * 64 + 256)


@pytest.mark.parametrize(
    "frame_length, step, window, first",
    [
        (256, 256, "rectangular", 896),  # the last frame ends at 896
        (256, 256, "hamming", 896),
        (255, 200, "hann", 928),  # passes the NOLA check
    ],
)
def test_the_inverse_refuses_a_tail_no_frame_covers(
    rng, frame_length, step, window, first
):
    """Centred, 1 + L // step frames can end before sample L: the inverse
    cannot rebuild the tail (it returned zeros there), so asking for it
    is a ValueError naming the samples and the arguments, at build with
    a static frame count and at call otherwise."""
    x = rng.standard_normal((2, 1000)).astype("float32")
    args = dict(window=window)
    spectra = ComplexSTFT(frame_length, step, **args)(x)
    # The NumPy reference: the samples no window reaches.
    frames = spectra.shape[1]
    covered = np.zeros(1000 + frame_length, bool)
    for t in range(frames):
        start = t * step - frame_length // 2
        span = np.flatnonzero(sf.window_array(window, frame_length))
        covered[np.clip(start + span, 0, None)] = True
    assert np.flatnonzero(~covered[:1000])[0] == first
    message = f"samples {first} to 999 .*length=1000.*frame_step={step}"
    with pytest.raises(ValueError, match=message):
        ComplexISTFT(frame_length, step, length=1000, **args)(spectra)
    # A model built on frames of unknown count: checked when called.
    inverse = ComplexISTFT(frame_length, step, length=1000, **args)
    inverse.build((None, None, spectra.shape[-1]))
    with pytest.raises(ValueError, match=message):
        inverse(spectra)
    # The covered part is rebuilt (but for the last few samples of the
    # Hann window's tail, where w ~ 1e-4 divides float32 rounding).
    part = ComplexISTFT(frame_length, step, length=first, **args)(spectra)
    assert tuple(part.shape) == (2, first)
    good = first - 8
    np.testing.assert_allclose(to_numpy(part)[:, :good], x[:, :good], atol=2e-5)


@pytest.mark.parametrize("implementation", ["conv", "fft"])
def test_under_xla(rng, implementation):
    x = rng.standard_normal((2, 1000)).astype("float32")
    layer = ComplexSTFT(256, 64, bins=(0, 100), implementation=implementation)
    inverse = ComplexISTFT(
        256, 64, bins=(0, 100), length=1000, implementation=implementation
    )
    eager = to_numpy(inverse(layer(x)))
    xla = compiled(lambda x: inverse(layer(x)))
    if xla is None:
        pytest.skip(f"no XLA compiler on {keras.backend.backend()}")
    np.testing.assert_allclose(to_numpy(xla(x)), eager, atol=1e-5)


def test_degenerate_window_and_integer_spectra():
    with pytest.raises(ValueError, match="frame_length 1"):
        ComplexSTFT(1, 1)
    assert ComplexSTFT(1, 1, window="rectangular").num_bins == 1
    inverse = ComplexISTFT(64, 16)
    with pytest.raises(ValueError, match="inputs.dtype=int32"):
        inverse(np.zeros((1, 9, 66), "int32"))


@pytest.mark.parametrize("cls", [ComplexSTFT, ComplexISTFT])
def test_auto_implementation(cls):
    layer = cls(512, 128)
    assert layer._use_fft() and cls(256, 64)._use_fft()
    assert not cls(128, 32)._use_fft()
    assert not cls(512, 128, trainable=True)._use_fft()
    with cvk._tracing.for_export():
        # "auto" in a float file: RFFT2D from 512 points, a power of two,
        # for the forward transform.
        assert layer._use_fft() == (cls is ComplexSTFT)
        assert not cls(256, 64)._use_fft()
        assert not cls(768, 192)._use_fft()
        fft = cls(512, 128, implementation="fft")
        if cls is ComplexSTFT:
            assert fft._use_fft()  # RFFT2D, in a float file
            with pytest.warns(UserWarning, match="power-of-two lengths"):
                assert not cls(500, 125, implementation="fft")._use_fft()
        else:
            with pytest.warns(UserWarning, match="holds an inverse FFT"):
                assert not fft._use_fft()
    # An integer file: the convolution.
    with cvk._tracing.for_export(float_activations=False):
        assert not layer._use_fft()
        why = (
            "no integer kernel"
            if cls is ComplexSTFT
            else "holds an inverse FFT"
        )
        with pytest.warns(UserWarning, match=why):
            assert not cls(512, 128, implementation="fft")._use_fft()
    # Unfrozen later (a parent model's fine-tuning): still the DFT, on its
    # route; built trainable: the convolution for good, in the config.
    layer.trainable = True
    layer.trainable = False
    assert layer._use_fft() and layer.get_config()["implementation"] == "auto"
    learned = cls(512, 128, trainable=True)
    learned.trainable = False
    assert not learned._use_fft()
    assert learned.get_config()["implementation"] == "conv"
    with pytest.raises(ValueError, match="implementation='fft'"):
        cls(512, 128, trainable=True, implementation="fft")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(frame_length=0, frame_step=1), "frame_length=0"),
        (dict(frame_length=64, frame_step=-2), "frame_step=-2"),
        (dict(frame_length=64, frame_step=65), "allow_gaps"),
        (dict(frame_length=64, frame_step=16, fft_length=32), "fft_length=32"),
        (dict(frame_length=64, frame_step=16, window="hanning"), "hanning"),
        (
            dict(frame_length=64, frame_step=16, window=np.ones(63)),
            re.escape("(63,)"),
        ),
        (dict(frame_length=64, frame_step=16, bins=(5, 5)), r"bins=\(5, 5\)"),
        (dict(frame_length=64, frame_step=16, bins=(0, 34)), "33"),
        (dict(frame_length=64, frame_step=16, bins=(-1, 3)), "bins="),
        (dict(frame_length=64, frame_step=16, bins=7), "bins=7"),
        (dict(frame_length=64, frame_step=16, pad_mode="edge"), "'edge'"),
        (dict(frame_length=64, frame_step=16, implementation="x"), "'x'"),
        (dict(frame_length=64, frame_step=16, center="yes"), "center='yes'"),
        (
            dict(frame_length=64, frame_step=16, learn_kernels=1),
            "learn_kernels=1",
        ),
        (
            dict(
                frame_length=64,
                frame_step=16,
                learn_kernels=True,
                implementation="fft",
            ),
            "implementation='fft'",
        ),
    ],
)
def test_bad_arguments(kwargs, match):
    for cls in (ComplexSTFT, ComplexISTFT):
        with pytest.raises(ValueError, match=match):
            cls(**kwargs)


def test_gaps_when_asked():
    layer = ComplexSTFT(64, 100, allow_gaps=True, center=False)
    assert layer(np.zeros((1, 500), "float32")).shape[1] == 5


@pytest.mark.parametrize(
    "kwargs, shape_or_dtype, match",
    [
        (dict(center=False), (2, 100), "fft_length=128"),
        (dict(pad_mode="reflect"), (2, 64), "pad_mode='reflect'"),
        ({}, (2, 100, 2), r"input_shape=\(2, 100, 2\)"),
        ({}, (2,), "input_shape"),
        ({}, "int16", "x / 32768"),
    ],
)
def test_bad_waveforms(kwargs, shape_or_dtype, match):
    layer = ComplexSTFT(128, 32, **kwargs)
    if isinstance(shape_or_dtype, str):
        x = np.zeros((2, 500), shape_or_dtype)
    else:
        x = np.zeros(shape_or_dtype, "float32")
    with pytest.raises(ValueError, match=match):
        layer(x)


def test_inverse_refuses_windows_failing_nola():
    with pytest.raises(ValueError, match="NOLA.*frame_step=256"):
        ComplexISTFT(256, 256)  # periodic Hann, no overlap: zeros
    with pytest.raises(ValueError, match="NOLA"):
        ComplexISTFT(64, 100, allow_gaps=True, window="rectangular")
    ComplexISTFT(256, 128)  # half overlap is fine
    with pytest.raises(ValueError, match="F = 20"):
        ComplexISTFT(64, 16, bins=(0, 20)).build((1, 10, 66))


@pytest.mark.tensorflow_only
def test_non_centred_equals_tf_signal_stft(rng):
    import tensorflow as tf

    x = rng.standard_normal((2, 1000)).astype("float32")
    layer = ComplexSTFT(256, 64, center=False)
    expected = tf.signal.stft(x, 256, 64, window_fn=tf.signal.hann_window)
    expected = expected.numpy().astype("complex128")
    error = np.abs(_complex(layer(x), 129) - expected).max()
    assert error <= 1e-4 * np.abs(expected).max()


@pytest.mark.tensorflow_only
@pytest.mark.slow
@pytest.mark.parametrize("inverse", [False, True])
def test_exports_builtin_only(rng, tmp_path, inverse):
    # The FFT routes ("auto" at 256 points) trace as the convolutions.
    layers = [ComplexSTFT(256, 64, bins=(0, 64))]
    if inverse:
        layers.append(ComplexISTFT(256, 64, bins=(0, 64), length=1000))
    model = keras.Sequential([keras.Input((1000,))] + layers)
    path = cvk.export.export_tflite(model, tmp_path / "stft.tflite")
    x = rng.standard_normal((2, 1000)).astype("float32")
    report = cvk.export.verify_tflite(path, model, x)
    assert report.builtin_only, report
    assert "RFFT2D" not in report.ops and "CONV_2D" in report.ops
    assert ("TRANSPOSE_CONV" in report.ops) == inverse
    assert report.max_rel_error <= 1e-4


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_fft_route_exports_as_rfft2d_in_float_files(rng, tmp_path):
    # "auto" at 512 points: the builtin RFFT2D (+ REAL, IMAG) in a float
    # file, of any shape; implementation="conv": the convolution (for the
    # GPU delegate); implementation="fft" in a calibrated file: the
    # convolution.
    stft = ComplexSTFT(512, 128, bins=(0, 200))
    model = keras.Sequential([keras.Input((4000,)), stft])
    x = rng.standard_normal((2, 4000)).astype("float32")
    path = cvk.export.export_tflite(model, tmp_path / "fft.tflite")
    report = cvk.export.verify_tflite(path, model, x)
    assert report.builtin_only, report
    assert {"RFFT2D", "REAL", "IMAG"} <= set(report.ops), report.ops
    assert "CONV_2D" not in report.ops
    # Measured 1.4e-7 relative to the largest bin.
    assert report.max_rel_error <= 1e-5
    path = cvk.export.export_tflite(
        model, tmp_path / "static.tflite", batch_size=2
    )
    assert "RFFT2D" in cvk.export.verify_tflite(path, model, x).ops
    stft = ComplexSTFT(512, 128, bins=(0, 200), implementation="conv")
    model = keras.Sequential([keras.Input((4000,)), stft])
    path = cvk.export.export_tflite(model, tmp_path / "conv.tflite")
    ops = cvk.export.verify_tflite(path, model, x).ops
    assert "RFFT2D" not in ops and "CONV_2D" in ops
    stft = ComplexSTFT(512, 128, bins=(0, 200), implementation="fft")
    model = keras.Sequential([keras.Input((4000,)), stft])
    # Calibrated modes convert in a TensorFlow subprocess, where the
    # layer warns (test_auto_implementation checks the warning).
    path = cvk.export.export_tflite(
        model,
        tmp_path / "int8.tflite",
        quantization="int8",
        representative_data=x,
    )
    ops = cvk.export.verify_tflite(path, model, x).ops
    assert "RFFT2D" not in ops and "CONV_2D" in ops


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_a_float16_file_computes_the_fft_route_in_float32(rng, tmp_path):
    """A float16 file stores every float constant in float16; the window
    of the RFFT2D route is stored in two float16-exact parts, so its STFT
    keeps float32's precision: SNR against a float64 NumPy STFT measured
    144 dB (146 in the float32 file; 76 with the window in float16, as
    before), bound 130 dB, at any length."""
    model = keras.Sequential(
        [keras.Input((None,)), ComplexSTFT(512, 128, bins=(0, 200))]
    )
    path = cvk.export.export_tflite(
        model, tmp_path / "half.tflite", quantization="float16"
    )
    for batch, length in ((2, 4000), (1, 777)):
        x = rng.standard_normal((batch, length))
        got = cvk.export.predict_tflite(path, model, x.astype("float32"))
        want = _numpy_stft(x, 512, 128, 512, True, "constant", (0, 200))
        noise = np.sum(np.abs(_complex(got, 200) - want) ** 2)
        snr = 10 * np.log10(np.sum(np.abs(want) ** 2) / noise)
        assert snr >= 130, snr
    report = cvk.export.verify_tflite(path, model, x.astype("float32"))
    assert report.quantization == "float16" and "RFFT2D" in report.ops


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("implementation", ["conv", "fft"])
def test_lengths_known_at_run_time_only(rng, implementation):
    # A traced graph with unknown batch and length: the frame count and
    # the inverse's envelope are computed in the graph.
    import tensorflow as tf

    args = dict(bins=None, implementation=implementation)
    stft = ComplexSTFT(256, 64, **args)
    istft = ComplexISTFT(256, 64, length=999, **args)
    run = tf.function(
        lambda x: (stft(x), istft(stft(x))),
        input_signature=[tf.TensorSpec((None, None), "float32")],
    )
    x = rng.standard_normal((2, 999)).astype("float32")
    spectra, y = run(x)
    assert spectra.shape == (2, 1 + 999 // 64, 258)
    np.testing.assert_allclose(to_numpy(spectra), to_numpy(stft(x)), atol=1e-4)
    np.testing.assert_allclose(y.numpy(), x, atol=2e-5)
    # Without centring the edges are reached barely or not at all: the
    # run-time envelope zeroes them as the static one does (a first window
    # value of 1e-7: its square is below NOLA_TOLERANCE of the peak).
    window = _hann(256)
    window[0] = 1e-7
    args.update(window=window, center=False)
    stft = ComplexSTFT(256, 64, **args)
    istft = ComplexISTFT(256, 64, **args)
    run = tf.function(
        lambda s: istft(s),
        input_signature=[tf.TensorSpec((None, None, 258), "float32")],
    )
    spectra = stft(x)
    static = to_numpy(istft(spectra))
    np.testing.assert_allclose(run(spectra).numpy(), static, atol=1e-6)
    assert static[:, 0].tolist() == [0.0, 0.0]
