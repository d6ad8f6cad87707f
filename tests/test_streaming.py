"""Tests of `cvattn_keras.streaming`: a stream fed one frame (or hop) at a
time equals the offline model, and what cannot stream says so.

The offline models are themselves checked against NumPy complex128
elsewhere (test_multi_head_attention.py, test_stft.py, ...); the sliding
window's own mask is checked against the NumPy reference here.
Tolerance: 1e-5 of the output's largest magnitude (the issue's bound);
measured: 0 without rotary positions, about 5e-7 with them.
"""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import compiled
from backend_utils import to_numpy

import cvattn_keras as cvk
from cvattn_keras import attention as att
from cvattn_keras import layers as cl
from cvattn_keras import models
from cvattn_keras.streaming import StreamingModel
from cvattn_keras.streaming import initial_state
from cvattn_keras.streaming import run_stream
from cvattn_keras.streaming import to_streaming

VARIANTS = [(s, p) for s in att.SOFTMAX_VARIANTS for p in att.PRODUCTS]
RTOL = 1e-5


def _relative(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def _frames_model(softmax, product, rotary=None, window=4):
    """Frames (B, T, 6) -> dense -> an encoder and a bare attention, both
    windowed -> (B, T, 3) real."""
    x = keras.Input((None, 6))
    h = cl.ComplexDense(8, bias_initializer="random_normal")(x)
    h = cl.ComplexTransformerEncoder(
        2,
        softmax=softmax,
        product=product,
        sliding_window=window,
        rotary_max_wavelength=rotary,
        bias_initializer="random_normal",
    )(h)
    h = cl.ComplexMultiHeadAttention(
        2,
        3,
        softmax=softmax,
        product=product,
        sliding_window=window - 1,
        rotary_max_wavelength=rotary,
    )(h, h, use_causal_mask=True)
    return keras.Model(x, cl.RealReadout()(cl.ComplexDense(3)(h)))


# ----------------------------------------------------------------------
# The sliding window itself.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_against_numpy(rng, softmax, product, causal):
    x = ref.random_complex(rng, (2, 9, 4))
    layer = cl.ComplexMultiHeadAttention(
        2,
        3,
        softmax=softmax,
        product=product,
        sliding_window=3,
        bias_initializer="random_normal",
    )
    xs = cvk.to_stacked(x)
    out = layer(xs, xs, use_causal_mask=causal)
    t, s = np.arange(9)[:, None], np.arange(9)[None, :]
    window = (s > t - 3) & ((s <= t) if causal else (s < t + 3))
    want, _ = ref.multi_head_attention(
        x,
        x,
        x,
        ref.attention_params(layer),
        2,
        layer.softmax,
        layer.product,
        3**-0.5,
        window[None],
    )
    np.testing.assert_allclose(
        cvk.from_stacked(out, "complex128"), want, atol=1e-5
    )


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_sliding_window_chunked_path_and_cache(rng, softmax):
    # Keys in blocks of 4 (the O(T) path) and a decoding cache, against
    # the full path with the window as an explicit mask.
    x = cvk.to_stacked(ref.random_complex(rng, (2, 11, 4)))
    windowed = cl.ComplexMultiHeadAttention(
        2, 2, softmax=softmax, sliding_window=3, chunk_size=4
    )
    chunked = to_numpy(windowed(x, x, use_causal_mask=True))
    plain = cl.ComplexMultiHeadAttention(2, 2, softmax=softmax)
    plain(x, x)
    plain.set_weights(windowed.get_weights())
    t, s = np.arange(11)[:, None], np.arange(11)[None, :]
    band = (s > t - 3) & (s <= t)
    want = to_numpy(plain(x, x, attention_mask=band))
    np.testing.assert_allclose(chunked, want, atol=1e-5)
    # Without the window the outputs differ: the test can fail.
    causal = to_numpy(plain(x, x, use_causal_mask=True))
    assert np.abs(causal - want).max() > 1e-3
    # Decoding one step at a time with a cache gives the same rows.
    cache = keras.ops.zeros((2, 2, 11, 2, 4))
    rows = []
    for i in range(11):
        out, cache = windowed(
            x[:, i : i + 1],
            x[:, i : i + 1],
            use_causal_mask=True,
            cache=cache,
            cache_update_index=i,
        )
        rows.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(rows, 1), want, atol=1e-5)


def test_sliding_window_in_config_and_bad_values():
    layer = cl.ComplexMultiHeadAttention(2, 2, sliding_window=5)
    assert layer.get_config()["sliding_window"] == 5
    clone = cl.ComplexMultiHeadAttention.from_config(layer.get_config())
    assert clone.sliding_window == 5
    block = cl.ComplexTransformerEncoder(2, sliding_window=3)
    assert block.get_config()["sliding_window"] == 3
    for bad in (0, -2, 1.5, "4"):
        with pytest.raises(ValueError, match="sliding_window"):
            cl.ComplexMultiHeadAttention(2, 2, sliding_window=bad)
        with pytest.raises(ValueError, match="sliding_window"):
            cl.ComplexTransformerEncoder(2, sliding_window=bad)


# ----------------------------------------------------------------------
# Streams equal the offline model.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("softmax, product", VARIANTS)
def test_stream_equals_offline(rng, softmax, product):
    model = _frames_model(softmax, product)
    stream = to_streaming(model)
    frames = rng.normal(size=(2, 10, 6)).astype("float32")
    offline = to_numpy(model(frames))
    streamed, state = run_stream(stream, frames[:, :, None, :])
    assert streamed.shape == offline.shape
    assert _relative(streamed, offline) <= RTOL
    # The state: a counter, then keys and values for each attention.
    shapes = [s.shape for s in state]
    assert shapes == [(2, 3), (2, 3, 2, 8), (2, 3, 2, 8)] + [(2, 2, 2, 6)] * 2


def test_gated_encoder_and_attention_stream(rng):
    """`gated=True` (the encoder's through `attention_options`): each step
    gates its heads with its own frame, as the offline model does."""
    x = keras.Input((None, 6))
    h = cl.ComplexDense(8)(x)
    h = cl.ComplexTransformerEncoder(
        2, sliding_window=3, attention_options={"gated": True}
    )(h)
    h = cl.ComplexMultiHeadAttention(2, 3, sliding_window=2, gated=True)(
        h, h, use_causal_mask=True
    )
    model = keras.Model(x, cl.RealReadout()(cl.ComplexDense(3)(h)))
    for weight in model.weights:
        if "gate_bias" in weight.path:
            weight.assign(rng.normal(size=weight.shape))
    frames = rng.normal(size=(2, 9, 6)).astype("float32")
    streamed, _ = run_stream(to_streaming(model), frames[:, :, None, :])
    assert _relative(streamed, to_numpy(model(frames))) <= RTOL


@pytest.mark.parametrize("softmax", att.SOFTMAX_VARIANTS)
def test_stream_with_rotary_positions(rng, softmax):
    model = _frames_model(softmax, "inner", rotary=50.0)
    stream = to_streaming(model)
    frames = rng.normal(size=(1, 12, 6)).astype("float32")
    streamed, _ = run_stream(stream, frames[:, :, None, :])
    assert _relative(streamed, to_numpy(model(frames))) <= RTOL


def test_stream_after_a_million_frames_equals_the_last_window(rng):
    """The stream's state after 10^6 frames: the frame counter saturated
    (all ones, as after any stream longer than its horizon: checked
    below) and buffers of old frames. Fed the last frames of the model's
    receptive field on top of such a state (R = (4 - 1) + (3 - 1) + 1 =
    6 frames: an encoder of window 4 under an attention of window 3), the
    output equals the offline model on those R frames alone: rotary
    positions are relative to the window, so nothing grows."""
    window = 6
    model = _frames_model("real", "inner", rotary=10000.0, window=4)
    stream = to_streaming(model)
    state = initial_state(stream, 1)
    state[0][:] = True  # the frame counter, as after 10^6 frames
    for s in state[1:]:  # frames from long ago: pushed out by the window
        s[:] = rng.normal(size=s.shape)
    frames = rng.normal(size=(1, window, 6)).astype("float32")
    streamed, after = run_stream(stream, frames[:, :, None, :], state)
    last = to_numpy(model(frames))[:, -1]
    assert _relative(streamed[:, -1], last) <= RTOL
    # The counter saturates: the state of a long stream is all true, the
    # same as after `horizon` frames (3 here), and never grows.
    assert after[0].shape == (1, 3) and after[0].all()
    _, early = run_stream(stream, np.zeros((1, 2, 1, 6), "float32"))
    assert early[0].tolist() == [[False, True, True]]
    _, fresh = run_stream(stream, np.zeros((1, 3, 1, 6), "float32"))
    assert fresh[0].all()


def _stft_model(stft, tail=None):
    """A waveform model: STFT -> dense -> windowed encoder -> readout, or
    -> `tail` (a ComplexISTFT) for a denoiser."""
    x = keras.Input((None,))
    h = stft(x)
    h = cl.ComplexDense(
        stft.num_bins if tail is not None else 6,
        bias_initializer="random_normal",
    )(h)
    h = cl.ComplexTransformerEncoder(
        2, key_dim=3, sliding_window=3, rotary_max_wavelength=100.0
    )(h)
    if tail is not None:
        return keras.Model(x, tail(h))
    return keras.Model(x, cl.RealReadout()(h))


def test_stream_with_an_stft_first(rng):
    stft = cl.ComplexSTFT(64, 16, center=False)
    model = _stft_model(stft)
    stream = to_streaming(model)
    assert stream.warmup_steps == 3 and stream.chunk_shape == (16,)
    wave = rng.normal(size=(2, 16 * 20)).astype("float32")
    offline = to_numpy(model(wave))  # (2, 17, 6): 1 + (320 - 64) // 16
    streamed, _ = run_stream(stream, wave.reshape(2, 20, 16))
    assert streamed.shape[1] - 3 == offline.shape[1]
    assert _relative(streamed[:, 3:], offline) <= RTOL


def test_stream_with_an_istft_last(rng):
    spectra = keras.Input((None, 2 * 33))
    h = cl.ComplexDense(33, bias_initializer="random_normal")(spectra)
    model = keras.Model(spectra, cl.ComplexISTFT(64, 16, center=False)(h))
    stream = to_streaming(model)
    frames = rng.normal(size=(1, 12, 66)).astype("float32")
    offline = to_numpy(model(frames))  # (1, 11 * 16 + 64)
    streamed, _ = run_stream(stream, frames[:, :, None, :])
    assert streamed.shape == (1, 12, 16)
    streamed = streamed.reshape(1, -1)  # samples 0 .. 12 * 16 - 1
    # The first 3 hops (R - 1 = 64 / 16 - 1 frames) are zeros, where the
    # offline inverse divides by a partial envelope; then the same.
    assert not streamed[:, :48].any()
    assert _relative(streamed[:, 48:], offline[:, 48 : 12 * 16]) <= RTOL


def test_streaming_denoiser_stft_to_istft(rng):
    stft = cl.ComplexSTFT(64, 16, center=False)
    model = _stft_model(stft, tail=cl.ComplexISTFT(64, 16, center=False))
    stream = to_streaming(model)
    wave = rng.normal(size=(1, 16 * 24)).astype("float32")
    offline = to_numpy(model(wave))
    streamed, _ = run_stream(stream, wave.reshape(1, 24, 16))
    # Step k emits the samples of frame k - 3 (after the warm-up), from
    # frame 3 on (the first R - 1 = 3 frames' samples are zeros).
    streamed = streamed[:, 3:].reshape(1, -1)
    assert not streamed[:, :48].any()
    stop = streamed.shape[1]
    assert _relative(streamed[:, 48:], offline[:, 48:stop]) <= RTOL


@pytest.mark.parametrize("ffts", [(10,), (16, 8), (10, 8), (8, 16)])
def test_stfts_at_one_hop_against_numpy(rng, ffts):
    """STFTs of hop 4 on one waveform (one chunk a step): every one's
    frame of step k is the NumPy STFT's frame k - warmup_steps of the
    samples less their first P = (-longest fft_length) mod 4 (P = 2 for
    a longest of 10: the module docstring's claim; 0 when 4 divides it),
    and of the samples themselves when P zeros are streamed first. Before,
    the shorter STFT's frames came warmup steps early (off by 6.3)."""
    hop, steps = 4, 14
    x = keras.Input((None,))
    stfts = [cl.ComplexSTFT(n, hop, center=False) for n in ffts]
    model = keras.Model(x, [stft(x) for stft in stfts])
    stream = to_streaming(model)
    span = max(ffts)
    warmup, skip = -(-span // hop) - 1, -span % hop
    assert stream.warmup_steps == warmup
    samples = [s for s in stream.inputs if "samples" in s.name]
    assert [tuple(s.shape) for s in samples] == [(None, span - hop)]
    wave = rng.normal(size=(1, hop * steps)).astype("float64")
    padded = np.concatenate([np.zeros((1, skip)), wave], 1)
    for signal, reference in ((wave, wave[:, skip:]), (padded, wave)):
        chunks = signal[:, : hop * (signal.shape[1] // hop)]
        streamed, _ = run_stream(
            stream, chunks.reshape(1, -1, hop).astype("float32")
        )
        streamed = streamed if len(stfts) > 1 else [streamed]
        for out, stft in zip(streamed, stfts, strict=True):
            n = stft.fft_length
            want = ref.stft(reference, n, hop, n, False, None, None)
            got = cvk.from_stacked(out[:, warmup:], "complex128")
            frames = min(got.shape[1], want.shape[1])
            assert frames >= steps - warmup - 1
            assert _relative(got[:, :frames], want[:, :frames]) <= RTOL
            if skip and n == span and signal is wave:
                # The claim before: the offline model on the samples
                # after P leading zeros. It is not.
                off = ref.stft(padded, n, hop, n, False, None, None)
                assert _relative(got[:, :frames], off[:, :frames]) > 0.1


def test_stream_of_the_music_classifier(rng):
    model = models.music_classifier(
        frames=None,
        notes=5,
        embed_dim=8,
        num_heads=2,
        num_layers=2,
        head_dim=8,
        frontend_filters=(2,),
        frontend_kernel_sizes=(3,),
        stft=cl.ComplexSTFT(64, 32, center=False),
        sliding_window=4,
    )
    assert "positions" not in [layer.name for layer in model.layers]
    stream = to_streaming(model)
    wave = rng.normal(size=(1, 32 * 14)).astype("float32")
    offline = to_numpy(model(wave))
    streamed, _ = run_stream(stream, wave.reshape(1, 14, 32))
    assert _relative(streamed[:, 1:], offline) <= RTOL


def test_causal_convolution_streams(rng):
    x = keras.Input((None, 4))
    h = cl.ComplexConv1D(3, 3, padding="causal", dilation_rate=2)(x)
    model = keras.Model(x, cl.ComplexDense(2)(h))
    stream = to_streaming(model)
    frames = rng.normal(size=(2, 9, 4)).astype("float32")
    streamed, _ = run_stream(stream, frames[:, :, None, :])
    assert _relative(streamed, to_numpy(model(frames))) <= RTOL


def test_a_non_finite_sample_spoils_only_its_frames(rng):
    stft = cl.ComplexSTFT(64, 16, center=False)
    model = _stft_model(stft)
    stream = to_streaming(model)
    wave = rng.normal(size=(1, 16 * 20)).astype("float32")
    clean, _ = run_stream(stream, wave.reshape(1, 20, 16))
    wave[0, 16 * 8 + 3] = np.nan  # in hop 8
    dirty, _ = run_stream(stream, wave.reshape(1, 20, 16))
    bad = ~np.isfinite(dirty).all(axis=-1)[0]
    # Frames holding the sample (hops 8-11), then the attention's window
    # of 3 frames: steps 8 .. 13 at most; the stream then recovers.
    assert bad[8] and not bad[:8].any() and not bad[14:].any()
    np.testing.assert_allclose(dirty[:, 14:], clean[:, 14:], rtol=1e-5)


# ----------------------------------------------------------------------
# What cannot stream, and bad input.
# ----------------------------------------------------------------------


def _model_with(layer_fn, shape=(None, 4)):
    x = keras.Input(shape)
    return keras.Model(x, layer_fn(x))


@pytest.mark.parametrize(
    "build, match",
    [
        (
            lambda x: cl.ComplexTransformerEncoder(2)(x),
            "encoder.*no `sliding_window`",
        ),
        (
            lambda x: cl.ComplexMultiHeadAttention(2, 2, sliding_window=3)(
                x, x
            ),
            "use_causal_mask=True",
        ),
        (
            lambda x: cl.SinusoidalPositionalEncoding()(x),
            "absolute positions",
        ),
        (
            lambda x: keras.layers.GlobalAveragePooling1D()(x),
            "may look along time",
        ),
        (
            lambda x: cl.ComplexConv1D(2, 3, padding="same")(x),
            "padding='causal'",
        ),
        (
            lambda x: cl.ComplexTransformerEncoder(
                2,
                sliding_window=3,
                product="bilinear",
                rotary_max_wavelength=100.0,
            )(x),
            "t \\+ s",
        ),
    ],
)
def test_what_cannot_stream_raises(build, match):
    with pytest.raises(ValueError, match=match):
        to_streaming(_model_with(build))


def test_a_centred_stft_cannot_stream():
    model = _model_with(lambda x: cl.ComplexSTFT(64, 16)(x), shape=(None,))
    with pytest.raises(ValueError, match="center=False"):
        to_streaming(model)


def test_bad_chunks_and_states_raise(rng):
    stream = to_streaming(_frames_model("real", "inner"))
    state = initial_state(stream, 2)
    with pytest.raises(ValueError):  # a chunk of two frames
        stream([np.zeros((2, 2, 6), "float32"), *state])
    with pytest.raises(ValueError, match="batch"):
        stream([np.zeros((1, 1, 6), "float32"), *state])
    with pytest.raises(ValueError):  # states out of order
        stream([np.zeros((2, 1, 6), "float32"), *state[::-1]])
    with pytest.raises(ValueError, match="chunks"):
        run_stream(stream, np.zeros((2, 3, 6), "float32"))
    with pytest.raises(ValueError, match="batch_size"):
        initial_state(stream, 0)
    with pytest.raises(ValueError, match="functional"):
        to_streaming(cl.ComplexDense(3))


# ----------------------------------------------------------------------
# Keras idiom: saving, XLA, mixed precision.
# ----------------------------------------------------------------------


def test_stream_saves_compiles_and_runs_mixed(tmp_path, rng):
    stft = cl.ComplexSTFT(64, 16, center=False)
    model = _stft_model(stft)
    stream = to_streaming(model)
    chunks = rng.normal(size=(1, 12, 16)).astype("float32")
    want, _ = run_stream(stream, chunks)
    # A .keras file of the stream loads with safe_mode=True (the wrappers
    # are registered), with the same weights.
    path = str(tmp_path / "stream.keras")
    stream.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    got, _ = run_stream(loaded, chunks)
    np.testing.assert_array_equal(got, want)
    # It is a StreamingModel again: it still says how to run it.
    assert isinstance(loaded, StreamingModel)
    assert (loaded.warmup_steps, loaded.chunk_shape) == (3, (16,))
    for mine, theirs in zip(
        loaded.initial_state(2), stream.initial_state(2), strict=True
    ):
        assert (mine.shape, mine.dtype) == (theirs.shape, theirs.dtype)
    # Compiled with XLA (tf.function or jax.jit), step by step.
    step = compiled(lambda *inputs: stream(list(inputs)))
    if step is not None:
        state, rows = initial_state(stream, 1), []
        for t in range(12):
            out, *state = step(chunks[:, t], *state)
            rows.append(to_numpy(out)[:, 0])
        assert _relative(np.stack(rows, 1), want) <= RTOL
    # Under mixed_bfloat16 the keys and values are carried in bfloat16
    # and the stream follows its offline model to bfloat16's precision:
    # 8 bits, rounded differently along the two paths through some 20
    # ops, so 0.1 of the largest output (measured 1.2e-2 on TensorFlow,
    # 4.9e-2 on JAX); a wrong mask or state is off by the output itself.
    policy = keras.config.dtype_policy()
    try:
        keras.config.set_dtype_policy("mixed_bfloat16")
        mixed = _stft_model(cl.ComplexSTFT(64, 16, center=False))
        mixed.set_weights(model.get_weights())
        mixed_stream = to_streaming(mixed)
        dtypes = [str(x.dtype) for x in mixed_stream.inputs]
        assert dtypes == ["float32", "bool", "float32"] + ["bfloat16"] * 2
        offline = to_numpy(mixed(chunks.reshape(1, -1))).astype("float32")
        got, _ = run_stream(mixed_stream, chunks)
        assert _relative(got[:, 3:].astype("float32"), offline) <= 0.1
    finally:
        keras.config.set_dtype_policy(policy)


def test_a_layer_called_twice_gets_two_steps(rng):
    # One encoder applied twice (shared weights): two steps, two states.
    x = keras.Input((None, 4))
    block = cl.ComplexTransformerEncoder(2, sliding_window=3)
    model = keras.Model(x, block(block(x)))
    stream = to_streaming(model)
    assert len(stream.inputs) == 1 + 1 + 4  # chunk, counter, 2 x (k, v)
    frames = rng.normal(size=(1, 7, 4)).astype("float32")
    streamed, _ = run_stream(stream, frames[:, :, None, :])
    assert _relative(streamed, to_numpy(model(frames))) <= RTOL


def test_frames_that_do_not_overlap_keep_no_state(rng):
    # frame_step == fft_length: the STFT and its inverse keep nothing (a
    # zero-sized state would break LiteRT), and the stream still equals
    # the offline model.
    stft = cl.ComplexSTFT(32, 32, window="rectangular", center=False)
    model = _stft_model(
        stft,
        tail=cl.ComplexISTFT(32, 32, window="rectangular", center=False),
    )
    stream = to_streaming(model)
    names = [x.name for x in stream.inputs]
    assert not any("samples" in n or "tail" in n for n in names)
    assert stream.warmup_steps == 0
    wave = rng.normal(size=(1, 32 * 9)).astype("float32")
    streamed, _ = run_stream(stream, wave.reshape(1, 9, 32))
    offline = to_numpy(model(wave))
    assert _relative(streamed.reshape(1, -1), offline) <= RTOL
