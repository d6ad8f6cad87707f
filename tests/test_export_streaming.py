"""Streams on the device: `to_streaming`'s model exported to TFLite (every
mode) and ONNX, run hop by hop with the state carried between calls,
against the Keras stream (itself equal to the offline model,
tests/test_streaming.py).

Tolerances: float32 files 1e-4 of the output's largest magnitude (the
issue's bound; measured about 2e-6); quantized files the mode's usual
bound (`EXPECTED_MAX_REL_ERROR`; measured on this model: float16 5e-4,
dynamic_int8 0.03, int8 0.08, full_int8 0.08), int16x8 0.08 (measured
0.05 to 0.065 depending on the calibration clips: above its usual 0.05).
"""

import keras
import numpy as np
import pytest

import cvattn_keras as cvk
from cvattn_keras import attention as att
from cvattn_keras import layers as cl
from cvattn_keras.export import EXPECTED_MAX_REL_ERROR
from cvattn_keras.export import TFLiteStream
from cvattn_keras.streaming import calibration_data
from cvattn_keras.streaming import initial_state
from cvattn_keras.streaming import run_stream
from cvattn_keras.streaming import to_streaming

pytestmark = pytest.mark.tensorflow_only


def _relative(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.fixture(scope="module")
def denoiser():
    """STFT -> dense -> a windowed encoder with rotary positions ->
    inverse STFT: a streaming denoiser, with its stream and a test
    signal."""
    keras.utils.set_random_seed(0)
    x = keras.Input((None,))
    h = cl.ComplexSTFT(64, 16, center=False)(x)
    h = cl.ComplexDense(33, bias_initializer="random_normal")(h)
    h = cl.ComplexTransformerEncoder(
        3, key_dim=2, sliding_window=3, rotary_max_wavelength=100.0
    )(h)
    model = keras.Model(x, cl.ComplexISTFT(64, 16, center=False)(h))
    stream = to_streaming(model)
    rng = np.random.default_rng(0)
    chunks = rng.normal(size=(1, 24, 16)).astype("float32")
    keras_out, _ = run_stream(stream, chunks)
    return stream, chunks, keras_out, rng


@pytest.fixture(scope="module")
def denoiser_file(tmp_path_factory, denoiser):
    """The denoiser's stream as a float32 file of batch 1."""
    path = str(tmp_path_factory.mktemp("stream") / "denoiser.tflite")
    cvk.export.export_tflite(denoiser[0], path, batch_size=1)
    return path


def _run_file(path, chunks):
    runner = TFLiteStream(path)
    assert runner.chunk_shape == (1, 16)
    return runner.run(np.swapaxes(chunks, 0, 1))


def test_every_variant_and_product_on_litert(tmp_path, rng):
    # One file holds an encoder of each variant and product: the stream
    # of all eight equals the Keras stream within 1e-4 on LiteRT.
    x = keras.Input((None, 4))
    h = cl.ComplexDense(4)(x)
    for softmax in att.SOFTMAX_VARIANTS:
        for product in att.PRODUCTS:
            h = cl.ComplexTransformerEncoder(
                2,
                softmax=softmax,
                product=product,
                sliding_window=3,
                bias_initializer="random_normal",
            )(h)
    stream = to_streaming(keras.Model(x, cl.RealReadout()(h)))
    frames = rng.normal(size=(1, 8, 1, 4)).astype("float32")
    want, _ = run_stream(stream, frames)
    path = str(tmp_path / "variants.tflite")
    cvk.export.export_tflite(stream, path, batch_size=1)
    got = TFLiteStream(path).run(np.swapaxes(frames, 0, 1))
    assert got.shape == want.shape
    assert _relative(got, want) <= 1e-4


def test_float32_file_with_stft_and_istft(denoiser, denoiser_file):
    _, chunks, want, _ = denoiser
    path = denoiser_file
    got = _run_file(path, chunks)
    assert _relative(got, want) <= 1e-4
    # Static shapes; every op but the frame counter's bools (a small CPU
    # partition at the graph's start) on the GPU delegate.
    fallbacks = cvk.export.check_gpu_compatibility(path).fallbacks
    assert fallbacks and all("bool" in f.reason for f in fallbacks)
    # The state is carried: a runner restarted mid-stream from the zero
    # state gives other outputs (the test of carrying can fail).
    runner = TFLiteStream(path)
    for chunk in np.swapaxes(chunks, 0, 1)[:10]:
        runner.step(chunk)
    assert runner.state[0].all()  # the counter saturated
    carried = runner.step(chunks[:, 10])
    runner.reset()
    assert not np.allclose(runner.step(chunks[:, 10]), carried)
    np.testing.assert_allclose(carried, want[:, 10], atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode", ["float16", "dynamic_int8", "int8", "full_int8", "int16x8"]
)
def test_every_quantization_mode(tmp_path, denoiser, mode):
    stream, chunks, want, rng = denoiser
    extra = {}
    if mode in ("int8", "full_int8", "int16x8"):
        # Its own draw of 16 clips (the fixture's generator gave each mode
        # the data the modes before it left, so -k changed the numbers;
        # 4 clips left the int8 error between 0.07 and 0.17).
        typical = np.random.default_rng(1).normal(size=(16, 24, 16))
        typical = typical.astype("float32")
        extra["representative_data"] = calibration_data(stream, typical)
    path = str(tmp_path / f"{mode}.tflite")
    cvk.export.export_tflite(
        stream, path, quantization=mode, batch_size=1, **extra
    )
    got = _run_file(path, chunks)
    assert np.isfinite(got).all()
    # int16x8 on this random denoiser: 0.05 to 0.065 over calibration
    # draws (0.0515 and 0.060 measured), above the mode's usual 0.05.
    bound = 0.08 if mode == "int16x8" else EXPECTED_MAX_REL_ERROR[mode]
    assert _relative(got, want) <= bound


def test_onnx_runtime_step_by_step(tmp_path, denoiser):
    ort = pytest.importorskip("onnxruntime")
    stream, chunks, want, _ = denoiser
    path = str(tmp_path / "denoiser.onnx")
    cvk.export.export_onnx(stream, path)
    session = ort.InferenceSession(path)
    names = [i.name for i in session.get_inputs()]
    assert names[0] == "chunk" and names[1].startswith("state_00_")
    state = initial_state(stream, 1)
    outputs = []
    for t in range(chunks.shape[1]):
        results = session.run(None, dict(zip(names, [chunks[:, t], *state])))
        outputs.append(results[0])
        state = results[1:]
    assert _relative(np.stack(outputs, 1), want) <= 1e-4


def test_tflite_stream_refuses_what_it_cannot_run(tmp_path, denoiser_file):
    path = denoiser_file
    runner = TFLiteStream(path)
    with pytest.raises(ValueError, match="chunk"):
        runner.step(np.zeros((1, 15), "float32"))
    with pytest.raises(ValueError, match="batch_size"):
        TFLiteStream(path, batch_size=2)
    runner.state = runner.state[::-1]  # out of order
    with pytest.raises(ValueError, match="input order"):
        runner.step(np.zeros((1, 16), "float32"))
    runner.state = runner.state[1:]
    with pytest.raises(ValueError, match="carries"):
        runner.step(np.zeros((1, 16), "float32"))
    # A file that is not a stream.
    x = keras.Input((4,))
    plain = str(tmp_path / "plain.tflite")
    cvk.export.export_tflite(keras.Model(x, keras.layers.Dense(2)(x)), plain)
    with pytest.raises(ValueError, match="not a streaming file"):
        TFLiteStream(plain)


@pytest.fixture(scope="module")
def classifier():
    """STFT -> dense -> a windowed encoder -> a real readout: a frame
    classifier, its stream, 40 calibration clips of sinusoids in noise
    (every step of each, with the states it carries: 960 samples) and 4
    test clips, with the Keras stream's and the offline model's outputs
    on them."""
    keras.utils.set_random_seed(0)
    x = keras.Input((None,))
    h = cl.ComplexSTFT(64, 16, center=False)(x)
    h = cl.ComplexDense(8)(h)
    h = cl.ComplexTransformerEncoder(
        2, key_dim=4, sliding_window=4, rotary_max_wavelength=100.0
    )(h)
    model = keras.Model(x, keras.layers.Dense(5)(h))
    stream = to_streaming(model)
    rng = np.random.default_rng(0)

    def clips(count):
        t = np.arange(24 * 16)
        shape = (count, 3, 1)
        tones = rng.uniform(0.2, 1, shape) * np.sin(
            2 * np.pi * rng.uniform(0.02, 0.4, shape) * t
            + rng.uniform(0, 6, shape)
        )
        noise = 0.05 * rng.normal(size=(count, t.size))
        return (tones.sum(1) + noise).astype("float32")

    typical, test = clips(40), clips(4)
    calibration = calibration_data(stream, typical.reshape(40, 24, 16))
    want, _ = run_stream(stream, test.reshape(4, 24, 16))
    offline = keras.ops.convert_to_numpy(model(test))
    return model, stream, typical, calibration, test, want, offline


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["int8", "full_int8", "int16x8"])
def test_calibrated_stream_as_faithful_as_the_offline_file(
    tmp_path, classifier, mode
):
    """Issue 41: a calibrated stream file's error against the Keras stream
    is at most 1.5 times the offline file's against the offline model (the
    same model, mode and calibration clips). `export_tflite` calibrates a
    stream on every sample `calibration_data` gives by default: on the
    first 100 (the first steps of the clips, states still zero) the
    stream's error was 5.3 (int8) and 3.7 (int16x8) times the offline
    file's; on all, 1.4 and 0.2 times."""
    model, stream, typical, calibration, test, want, offline = classifier
    offline_path = str(tmp_path / "offline.tflite")
    cvk.export.export_tflite(
        model,
        offline_path,
        quantization=mode,
        representative_data=typical,
        batch_size=1,
        sequence_length=test.shape[1],
    )
    got = cvk.export.predict_tflite(offline_path, model, test, batch_size=1)
    offline_error = _relative(np.asarray(got), offline)
    stream_path = str(tmp_path / "stream.tflite")
    cvk.export.export_tflite(
        stream,
        stream_path,
        quantization=mode,
        representative_data=calibration,
        batch_size=1,
    )
    runner = TFLiteStream(stream_path)
    steps = []
    for clip in test.reshape(4, 24, 16):
        runner.reset()
        steps.append([np.asarray(runner.step(c[None]))[0, 0] for c in clip])
    warmup = stream.warmup_steps
    stream_error = _relative(np.array(steps)[:, warmup:], want[:, warmup:])
    assert np.isfinite(stream_error) and 0 < offline_error
    assert stream_error <= 1.5 * offline_error, (stream_error, offline_error)
