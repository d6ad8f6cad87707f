"""Speech enhancement (issue 40): `ComplexCompression`, `ComplexMask`,
`models.speech_enhancer`, its real baseline and `SpeechEnhancementLoss`,
each against NumPy complex128; the enhancer streamed against itself.

Backend-neutral (keras.ops and NumPy) but the LiteRT test."""

import math

import keras
import numpy as np
import numpy_reference
import pytest
from backend_utils import to_numpy
from backend_utils import value_and_gradients

from cvattn_keras import layers
from cvattn_keras import models
from cvattn_keras import streaming

# A small enhancer: 64-sample frames, hop 32 (33 bins), 8 complex
# features, window of 4 frames.
SMALL = dict(
    frame_length=64,
    frame_step=32,
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    sliding_window=4,
)
REAL_SMALL = {
    **{k: v for k, v in SMALL.items() if k != "embed_dim"},
    "width": 8,
}
# float32 through a 64-term DFT and its inverse, relative to the largest
# output: a few roundings per operation (measured below 1e-6).
TOL = 1e-5


def _complex(rng, shape, scale=1.0):
    return scale * (
        rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    )


def _stacked(z):
    return np.concatenate([z.real, z.imag], axis=-1).astype(np.float32)


def _unstack(x):
    x = np.asarray(x, np.float64)
    half = x.shape[-1] // 2
    return x[..., :half] + 1j * x[..., half:]


# -- ComplexCompression --------------------------------------------------


@pytest.mark.parametrize("exponent", [0.3, 0.5, 1.0])
def test_compression_against_numpy(rng, exponent):
    z = _complex(rng, (3, 5, 7), scale=10.0)
    z[0, 0, 0] = 0
    got = _unstack(to_numpy(layers.ComplexCompression(exponent)(_stacked(z))))
    want = np.abs(z) ** exponent * np.exp(1j * np.angle(z))
    want[0, 0, 0] = 0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_compression_keeps_the_phase_and_is_finite_at_zero(rng):
    """Turning the input turns the output by the same phase; a zero input
    has a zero output and finite gradients."""
    layer = layers.ComplexCompression(0.3)
    z = _complex(rng, (2, 6))
    turn = np.exp(0.7j)
    a = _unstack(to_numpy(layer(_stacked(z * turn))))
    b = _unstack(to_numpy(layer(_stacked(z)))) * turn
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    zeros = np.zeros((2, 6), np.float32)
    y, grad, _ = value_and_gradients(layer, zeros)
    assert np.all(y == 0)
    assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("exponent", [0, -0.3, 1.5, math.nan, True, "0.3"])
def test_compression_refuses_bad_exponents(exponent):
    with pytest.raises(ValueError, match="exponent"):
        layers.ComplexCompression(exponent)


def test_compression_refuses_odd_inputs():
    with pytest.raises(ValueError):
        layers.ComplexCompression()(np.zeros((2, 3), np.float32))


# -- ComplexMask --------------------------------------------------------


@pytest.mark.parametrize("mask", ["complex", "magnitude"])
def test_mask_against_numpy(rng, mask):
    m = _complex(rng, (2, 4, 5), scale=2.0)
    x = _complex(rng, (2, 4, 5))
    got = _unstack(
        to_numpy(layers.ComplexMask(mask)([_stacked(m), _stacked(x)]))
    )
    gain = np.tanh(np.abs(m))
    phase = np.exp(1j * np.angle(m)) if mask == "complex" else 1
    np.testing.assert_allclose(got, gain * phase * x, rtol=1e-5, atol=1e-6)


def test_mask_is_bounded_and_finite_at_zero(rng):
    m = _complex(rng, (3, 8), scale=100.0)
    x = _complex(rng, (3, 8))
    y = _unstack(to_numpy(layers.ComplexMask()([_stacked(m), _stacked(x)])))
    assert np.all(np.abs(y) <= np.abs(x) * (1 + 1e-6))
    layer = layers.ComplexMask()
    zeros = np.zeros((3, 16), np.float32)

    def call(features):
        return layer([features, keras.ops.ones_like(features)])

    y, grad, _ = value_and_gradients(call, zeros)
    assert np.all(y == 0)
    assert np.all(np.isfinite(grad))


def test_mask_refuses_bad_arguments():
    with pytest.raises(ValueError, match="mask"):
        layers.ComplexMask("phase")
    with pytest.raises(ValueError, match="same shape"):
        layers.ComplexMask()(
            [np.zeros((1, 4), np.float32), np.zeros((1, 6), np.float32)]
        )
    with pytest.raises(ValueError, match="list"):
        layers.ComplexMask()(np.zeros((1, 4), np.float32))


def test_scale_against_numpy(rng):
    z = _complex(rng, (2, 3, 5))
    layer = layers.ComplexScale()
    layer.build((2, 3, 10))
    w = _complex(rng, (5,))
    layer.scale_real.assign(w.real)
    layer.scale_imag.assign(w.imag)
    got = _unstack(to_numpy(layer(_stacked(z))))
    np.testing.assert_allclose(got, w * z, rtol=1e-5, atol=1e-6)


def test_layers_round_trip_their_configs():
    for layer in (
        layers.ComplexCompression(0.25),
        layers.ComplexMask("magnitude"),
        layers.ComplexScale(),
    ):
        clone = type(layer).from_config(layer.get_config())
        assert clone.get_config() == layer.get_config()


def test_layers_compute_in_float32_under_mixed_precision(rng):
    z = _stacked(_complex(rng, (2, 3, 4), scale=300.0))
    try:
        keras.config.set_dtype_policy("mixed_float16")
        compress = layers.ComplexCompression(0.3)
        mask = layers.ComplexMask()
        a = compress(z)
        b = mask([z, z])
    finally:
        keras.config.set_dtype_policy("float32")
    assert keras.backend.standardize_dtype(a.dtype) == "float16"
    assert keras.backend.standardize_dtype(b.dtype) == "float16"
    want = to_numpy(layers.ComplexCompression(0.3)(z))
    np.testing.assert_allclose(to_numpy(a), want, rtol=2e-3, atol=1e-3)


# -- the enhancer -------------------------------------------------------


def _numpy_istft(spectra, frame_length, step):
    """The inverse of `numpy_reference.stft` (not centred, Hann): each
    frame's irfft windowed, overlap-added, divided by the squared
    window's envelope where it is above 1e-3 of its peak."""
    frames = np.fft.irfft(spectra, n=frame_length, axis=-1)
    window = numpy_reference.hann(frame_length)
    count = frames.shape[1]
    length = frame_length + (count - 1) * step
    out = np.zeros((frames.shape[0], length))
    envelope = np.zeros(length)
    for t in range(count):
        out[:, t * step : t * step + frame_length] += frames[:, t] * window
        envelope[t * step : t * step + frame_length] += window**2
    reached = envelope > 1e-3 * envelope.max()
    return np.where(reached, out / np.where(reached, envelope, 1), 0)


def _with_constant_mask(model, value):
    """`model` with a mask of `value` in every bin: the mask's dense
    layer's kernel zeroed, its bias the value (so `M = tanh(|v|) v/|v|`)."""
    dense = model.get_layer("mask_dense")
    dense.kernel_real.assign(np.zeros(dense.kernel_real.shape))
    dense.kernel_imag.assign(np.zeros(dense.kernel_imag.shape))
    dense.bias_real.assign(np.full(dense.bias_real.shape, value.real))
    dense.bias_imag.assign(np.full(dense.bias_imag.shape, value.imag))
    scale = model.get_layer("bin_scale")
    scale.scale_real.assign(np.zeros(scale.scale_real.shape))
    return model


@pytest.mark.parametrize("mask", ["complex", "magnitude"])
def test_enhancer_applies_its_mask_to_the_noisy_spectra(rng, mask):
    """With a constant mask of `v = 2i` the output is the inverse STFT of
    `M X` (NumPy complex128): the complex mask turns every bin by 90
    degrees, the magnitude mask only scales it by tanh(2)."""
    model = _with_constant_mask(models.speech_enhancer(mask=mask, **SMALL), 2j)
    x = rng.standard_normal((2, 64 + 9 * 32))
    got = to_numpy(model(x.astype(np.float32)))
    spectra = numpy_reference.stft(x, 64, 32, 64, False, "constant", None)
    gain = np.tanh(2.0) * (1j if mask == "complex" else 1)
    want = _numpy_istft(gain * spectra, 64, 32)
    # The first and last half frames are divided by a partial envelope
    # (near 0 at the edges): compared where two windows overlap.
    inner = slice(32, -32)
    scale = np.abs(want[:, inner]).max()
    np.testing.assert_allclose(
        got[:, inner], want[:, inner], atol=TOL * scale, rtol=0
    )


def test_enhancer_layers_and_parameters():
    model = models.speech_enhancer()
    names = [layer.name for layer in model.layers]
    for name in ("stft", "compress", "embedding", "encoder_0", "encoder_1"):
        assert name in names
    assert names[-4:] == ["bin_scale", "mask_features", "mask", "istft"]
    trainable = sum(math.prod(w.shape) for w in model.trainable_weights)
    assert trainable <= 100_000
    real = models.real_speech_enhancer()
    real_trainable = sum(math.prod(w.shape) for w in real.trainable_weights)
    assert abs(real_trainable - trainable) <= 0.05 * trainable
    magnitude = models.speech_enhancer(mask="magnitude")
    assert magnitude.count_params() == model.count_params()


@pytest.mark.parametrize("width, layers", [(8, 1), (48, 2)])
def test_real_width_count_is_the_models(width, layers):
    """The count `real_speech_enhancer(width=None)` matches widths by is
    the built model's."""
    from cvattn_keras.models.speech import _real_trainable

    model = models.real_speech_enhancer(width=width, num_layers=layers)
    trainable = sum(math.prod(w.shape) for w in model.trainable_weights)
    assert _real_trainable(width, 257, 4, layers) == trainable


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(frame_step=40), "frame_step"),
        (dict(mask="phase"), "mask"),
        (dict(sliding_window=0), "sliding_window"),
        (dict(num_layers=0), "num_layers"),
        (dict(samples=-3), "samples"),
        (dict(compression=2.0), "exponent"),
    ],
)
def test_enhancer_refuses_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        models.speech_enhancer(**{**SMALL, **kwargs})


def test_stream_equals_the_offline_enhancer(rng):
    """Hop by hop, after the warm-up, the stream's samples are the
    offline model's, `frame_length` samples after the input's; the
    partial first half frame comes out as zeros."""
    model = models.speech_enhancer(**SMALL)
    stream = streaming.to_streaming(model)
    assert stream.warmup_steps == 1
    frames = 12
    x = rng.standard_normal((2, 64 + (frames - 1) * 32)).astype(np.float32)
    offline = to_numpy(model(x))
    chunks = np.concatenate([x, np.zeros((2, 64), np.float32)], 1)
    out, _ = streaming.run_stream(stream, chunks.reshape(2, -1, 32))
    out = np.asarray(out).reshape(2, -1)[:, 32:]  # the warm-up step
    assert np.all(out[:, :32] == 0)
    inner = slice(32, offline.shape[1] - 32)
    scale = np.abs(offline[:, inner]).max()
    np.testing.assert_allclose(
        out[:, inner], offline[:, inner], atol=TOL * scale, rtol=0
    )


def test_real_rotary_attention_turns_pairs_by_position(rng):
    """`_rotate` is the complex rotation of pairs `(x_i, x_{i + d/2})` by
    `t * wavelength ** (-2i/d)`."""
    from cvattn_keras.models.speech import _rotate

    x = rng.standard_normal((2, 5, 3, 8))
    got = to_numpy(_rotate(keras.ops.convert_to_tensor(x, "float32"), 100.0))
    z = x[..., :4] + 1j * x[..., 4:]
    rates = 100.0 ** (-np.arange(4) * 2 / 8)
    turned = z * np.exp(1j * np.arange(5)[:, None, None] * rates)
    want = np.concatenate([turned.real, turned.imag], -1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_real_enhancer_is_causal(rng):
    """Changing the input's last samples leaves every earlier output
    sample that no later frame reaches as it was."""
    model = models.real_speech_enhancer(**REAL_SMALL)
    x = rng.standard_normal((1, 64 + 9 * 32)).astype(np.float32)
    y = x.copy()
    y[:, -16:] += 1.0
    a, b = to_numpy(model(x)), to_numpy(model(y))
    np.testing.assert_allclose(a[:, :-64], b[:, :-64], atol=1e-5)
    assert np.abs(a - b).max() > 1e-3


# -- the loss -----------------------------------------------------------


def _numpy_loss(clean, estimate, frame_length, step, a, b, trim):
    clean = clean[:, trim:-trim]
    estimate = estimate[:, trim:-trim]

    def spectra(x):
        s = numpy_reference.stft(
            x, frame_length, step, frame_length, False, "constant", None
        )
        return np.abs(s) ** 0.3 * np.exp(1j * np.angle(s))

    s, e = spectra(clean), spectra(estimate)
    complex_term = np.mean(np.abs(s - e) ** 2, axis=(1, 2))
    magnitude_term = np.mean((np.abs(s) - np.abs(e)) ** 2, axis=(1, 2))
    r = clean - clean.mean(-1, keepdims=True)
    p = estimate - estimate.mean(-1, keepdims=True)
    target = (p @ r.T).diagonal()[:, None] / (r * r).sum(-1, keepdims=True) * r
    si_sdr = 10 * np.log10((target**2).sum(-1) / ((p - target) ** 2).sum(-1))
    return np.mean(
        (1 - a) * complex_term + a * magnitude_term - b * si_sdr / 100
    )


def test_loss_against_numpy(rng):
    clean = rng.standard_normal((3, 64 + 20 * 32))
    estimate = 0.7 * clean + 0.3 * rng.standard_normal(clean.shape)
    loss = models.SpeechEnhancementLoss(64, 32, magnitude_weight=0.4)
    got = float(
        to_numpy(loss(clean.astype(np.float32), estimate.astype(np.float32)))
    )
    want = _numpy_loss(clean, estimate, 64, 32, 0.4, 1.0, 64)
    assert abs(got - want) <= 1e-4 * abs(want)


def test_loss_is_finite_on_silence():
    zeros = np.zeros((2, 64 + 10 * 32), np.float32)
    loss = models.SpeechEnhancementLoss(64, 32)
    assert np.isfinite(float(to_numpy(loss(zeros, zeros))))


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(magnitude_weight=1.5), "magnitude_weight"),
        (dict(si_sdr_weight=-1), "si_sdr_weight"),
        (dict(trim=-1), "trim"),
        (dict(trim=2.5), "trim"),
        (dict(exponent=0), "exponent"),
        (dict(frame_step=0), "frame_step"),
    ],
)
def test_loss_refuses_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        models.SpeechEnhancementLoss(**kwargs)


# -- saving and training ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("build", ["complex", "real"])
def test_enhancers_train_compiled_and_reload(tmp_path, rng, build):
    """One compiled training step (XLA; eager on PyTorch), then a `.keras`
    round trip with `safe_mode=True` and the loss in the file: the same
    outputs."""
    if build == "complex":
        model = models.speech_enhancer(**SMALL)
    else:
        model = models.real_speech_enhancer(**REAL_SMALL)
    model.compile(
        optimizer="adam",
        loss=models.SpeechEnhancementLoss(64, 32),
        # XLA on TensorFlow and JAX; PyTorch has no XLA compiler here.
        jit_compile=keras.backend.backend() != "torch",
    )
    x = rng.standard_normal((4, 64 + 9 * 32)).astype(np.float32)
    history = model.fit(x, 0.5 * x, epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    path = tmp_path / f"{build}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        to_numpy(loaded(x)), to_numpy(model(x)), rtol=1e-6, atol=1e-6
    )
    assert isinstance(loaded.loss, models.SpeechEnhancementLoss)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_stream_file_equals_the_keras_stream(tmp_path, rng):
    """The float32 streaming file on LiteRT equals the Keras stream to
    1e-4 of its peak; the full_int8 file converts with integer kernels
    only."""
    from cvattn_keras import export

    model = models.speech_enhancer(**SMALL)
    stream = streaming.to_streaming(model)
    x = rng.standard_normal((1, 64 + 15 * 32)).astype(np.float32)
    chunks = np.concatenate([x, np.zeros((1, 64), np.float32)], 1)
    chunks = chunks.reshape(1, -1, 32)
    want, _ = streaming.run_stream(stream, chunks)
    path = str(tmp_path / "stream.tflite")
    export.export_tflite(stream, path, batch_size=1)
    got = np.asarray(export.TFLiteStream(path).run(chunks.transpose(1, 0, 2)))
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, atol=1e-4 * scale, rtol=0)
    data = streaming.calibration_data(stream, chunks)
    export.export_tflite(
        stream,
        str(tmp_path / "stream_full_int8.tflite"),
        quantization="full_int8",
        batch_size=1,
        representative_data=data,
    )
