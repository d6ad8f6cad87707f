"""Tests of what `cvattn_keras.streaming.to_streaming` refuses (and the
checks of `initial_state` and `calibration_data`): a model a stream
cannot follow must fail at conversion, naming the layer, rather than
convert and give other numbers or shapes than the offline model.

What streams is checked against the offline model and NumPy in
tests/test_streaming.py.
"""

import keras
import numpy as np
import pytest
from backend_utils import to_numpy

from cvattn_keras import layers as cl
from cvattn_keras.streaming import calibration_data
from cvattn_keras.streaming import initial_state
from cvattn_keras.streaming import run_stream
from cvattn_keras.streaming import to_streaming

T = 5


def _frames(build, width=4):
    x = keras.Input((None, width))
    return keras.Model(x, build(x))


def test_stfts_at_two_frame_rates_are_refused():
    # One chunk of samples a step cannot feed two hops: the second STFT
    # is named.
    x = keras.Input((None,))
    model = keras.Model(
        x,
        [
            cl.ComplexSTFT(16, 4, center=False, name="coarse")(x),
            cl.ComplexSTFT(8, 2, center=False, name="fine")(x),
        ],
    )
    with pytest.raises(ValueError, match="'fine'.*two frame rates"):
        to_streaming(model)


TABLE = np.linspace(-1, 1, T * 4, dtype="float32").reshape(1, T, 4)
MASK = np.array([1, 0, 1, 1, 0], "float32").reshape(1, T, 1)


@pytest.mark.parametrize(
    "build, name",
    [
        (lambda x: x + TABLE, "add"),  # a table over time
        (lambda x: keras.ops.add(TABLE[0], x), "add"),  # (T, D): on time too
        (lambda x: x * MASK, "multiply"),  # a time mask
        (lambda x: keras.ops.maximum(x, TABLE), "maximum"),
        (lambda x: keras.layers.Add(name="merge")([x, TABLE]), "merge"),
        (lambda x: x + TABLE[None], "add"),  # more axes than the frames
    ],
)
def test_a_constant_with_a_time_axis_is_refused(build, name):
    # Before: each step added the whole (1, T, D) table to its one frame,
    # so the stream gave (B, steps, T, D) for the offline (B, T, D).
    model = _frames(build)
    with pytest.raises(ValueError, match=f"'{name}.*constant of shape"):
        to_streaming(model)


def test_a_constant_without_a_time_axis_still_streams(rng):
    # A gain per channel (1, 1, D) and a scalar are the same for every
    # frame: the stream equals x * gain + 1 computed in NumPy.
    gain = np.array([1.0, -2.0, 0.5, 3.0], "float32").reshape(1, 1, 4)
    model = _frames(lambda x: x * gain + 1.0)
    frames = rng.normal(size=(2, T, 4)).astype("float32")
    streamed, _ = run_stream(to_streaming(model), frames[:, :, None])
    np.testing.assert_allclose(streamed, frames * gain + 1.0, rtol=1e-6)


def test_samples_in_a_layer_along_the_last_axis_are_refused(rng):
    # An inverse STFT's output (B, L) has time on its last axis: a
    # softmax over it saw one hop a step (before: off by 0.4).
    spectra = keras.Input((None, 18))
    samples = cl.ComplexISTFT(16, 4, center=False)(spectra)
    model = keras.Model(
        spectra, keras.layers.Softmax(name="over_time")(samples)
    )
    with pytest.raises(ValueError, match="'over_time'.*samples"):
        to_streaming(model)
    # Elementwise on samples streams: each hop's values alone (a
    # Rescaling layer too, which the first version of the check refused).
    scaled = keras.layers.Rescaling(2.0)(keras.ops.tanh(samples))
    model = keras.Model(spectra, scaled)
    frames = rng.normal(size=(1, 8, 18)).astype("float32")
    streamed, _ = run_stream(to_streaming(model), frames[:, :, None])
    offline = to_numpy(model(frames))[:, 12:32]  # after R - 1 = 3 hops
    np.testing.assert_allclose(
        streamed.reshape(1, -1)[:, 12:], offline, rtol=1e-5, atol=1e-6
    )


@pytest.fixture(scope="module")
def stream():
    return to_streaming(_frames(lambda x: cl.ComplexDense(2)(x)))


@pytest.mark.parametrize("size", [np.int64(2), np.int32(2), 2])
def test_initial_state_takes_numpy_integers(stream, size):
    state = initial_state(stream, size)
    assert [s.shape for s in state] == [(2, 1)]
    assert [s.shape for s in stream.initial_state(size)] == [(2, 1)]


@pytest.mark.parametrize("bad", [True, False, 0, -1, 2.0, "2", None])
def test_initial_state_refuses_bools_and_non_integers(stream, bad):
    with pytest.raises(ValueError, match=f"batch_size={bad!r}"):
        initial_state(stream, bad)
    with pytest.raises(ValueError, match=f"batch_size={bad!r}"):
        stream.initial_state(bad)


def test_calibration_data_skip_takes_numpy_integers(stream):
    chunks = np.ones((1, 3, 1, 4), "float32")
    data = calibration_data(stream, chunks, skip=np.int64(1))
    assert data[0].shape == (2, 1, 4)
    with pytest.raises(ValueError, match="skip=True"):
        calibration_data(stream, chunks, skip=True)


def test_an_encoder_with_another_attention_is_refused():
    """An encoder whose self-attention is not `ComplexMultiHeadAttention`
    (here low rank, which sees the whole sequence) has no stream: refused
    by name, not an AttributeError."""
    x = keras.Input((None, 8))
    h = cl.ComplexTransformerEncoder(
        2,
        attention="low_rank",
        attention_options={"rank": 2, "max_length": 16},
        name="lowrank_encoder",
    )(x)
    model = keras.Model(x, h)
    with pytest.raises(ValueError, match="lowrank_encoder.*ComplexLowRank"):
        to_streaming(model)
