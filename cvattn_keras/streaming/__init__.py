"""Streaming: a trained model run one frame (or one hop of samples) at a
time, with its state carried between steps.

`to_streaming(model)` rebuilds a functional model as a `keras.Model`
whose inputs are `[chunk, *state]` and outputs `[outputs, *state]`: a
step takes the newest chunk and the state the step before returned, and
gives that frame's outputs and the next state. The weights are the
offline model's (shared, not copied); the state is external (plain
inputs and outputs, no variables), so the same graph exports to one
builtin-only TFLite file (`cvattn_keras.export.export_tflite`, every
mode) that runs under any delegate, and to ONNX; `TFLiteStream` in
`cvattn_keras.export` runs such a file hop by hop.

What streams, and the state each keeps:

- `ComplexSTFT(center=False)`, the first layer (several on the waveform,
  at one `frame_step`, share it): the last `fft_length - frame_step`
  samples (the longest `fft_length`);
- `ComplexMultiHeadAttention(sliding_window=W)` as causal self-attention,
  and `ComplexTransformerEncoder(sliding_window=W)`: the projected keys
  and values of the last `W - 1` frames;
- `ComplexConv1D(padding="causal", strides=1)`: the last `dilation_rate *
  (kernel_size - 1)` input frames;
- `ComplexISTFT(center=False)` with `frame_length == fft_length`: the
  overlap-add tail, `fft_length - frame_step` samples;
- the stream itself: a frame counter `(B, warmup_steps + H)` of bools
  (`H` the furthest any layer looks back, in frames), saturating;
- every per-frame layer (dense, norms, activations, dropout, the
  frequency front end, readouts): nothing.

A chunk is one frame `(B, 1, D)` of a model of spectra `(B, T, D)`, or
one hop `(B, frame_step)` of samples of a model whose first layer is a
`ComplexSTFT(center=False)`. Step `k`'s output is the offline model's
output for frame `k - warmup_steps` (`stream.warmup_steps`: 0 for
spectra; `ceil(fft_length / frame_step) - 1` after an STFT, whose first
frames would reach before the stream's first sample: discard those
steps' outputs). For an STFT model, that is the offline model on the same
samples when `frame_step` divides `fft_length`; otherwise it is the
offline model on the samples less their first `P = frame_step -
fft_length % frame_step` (a step's frame ends with the hop just
arrived, so the stream's frames start `P` samples after the offline
model's): prepend `P` zeros to the stream's samples to get the offline
model on all of them. Two or more STFTs on the waveform must share
`frame_step` (one chunk a step); their frames all come out at the same
step, the longest `fft_length`'s warm-up and `P` for all. A model
ending in `ComplexISTFT` emits `frame_step` samples a step: those of the
frame just completed, `fft_length` samples after the input's (the
algorithmic latency of an STFT-ISTFT model); its first
`ceil(fft_length / frame_step) - 1` steps after the warm-up emit zeros,
where the offline inverse divides the signal's first samples by a
partial window envelope (see `StreamingISTFT`).

Positions: a stream's output depends only on the last `W` frames, so it
runs for hours. Rotary positions (`rotary_max_wavelength`, inner product)
stay bounded: the window's keys take positions `0 .. W - 1` and the query
`W - 1` at every step (the scores depend only on `t - s`, so this equals
the offline model everywhere), and the frame counter saturates once every
buffer is full. Absolute positions (`SinusoidalPositionalEncoding`) and
rotary positions with the bilinear product (scores depending on `t + s`)
would grow without bound: `to_streaming` refuses them.

What cannot stream raises a `ValueError` naming the layer and the reason:
attention without a sliding window or not causal, a centred STFT, STFTs
at two `frame_step`s, a convolution over time that looks ahead or
strides, a pooling, flatten or any layer that mixes frames and is not in
the table; a constant with a time axis (`x + table` with `table` of
shape `(1, T, D)`, a `(1, T, 1)` mask: a step would take all of it onto
one frame), and samples `(B, L)` (the waveform, an inverse STFT's
output) in anything but an elementwise layer or op (their last axis is
time).

A stream is a `StreamingModel`, a functional `keras.Model` that reads
its `warmup_steps`, `chunk_shape` and `initial_state` from its graph: a
stream saved to `.keras` and loaded back (`safe_mode=True` too) still
has them.
"""

import keras
import numpy as np

from cvattn_keras import _validation as validation
from cvattn_keras.streaming import _layers
from cvattn_keras.streaming._convert import StreamingModel
from cvattn_keras.streaming._convert import to_streaming as _to_streaming
from cvattn_keras.streaming._convert import zero_state
from cvattn_keras.streaming._layers import FrameCounter
from cvattn_keras.streaming._layers import StreamingAttention
from cvattn_keras.streaming._layers import StreamingConv1D
from cvattn_keras.streaming._layers import StreamingEncoder
from cvattn_keras.streaming._layers import StreamingISTFT
from cvattn_keras.streaming._layers import StreamingSTFT

__all__ = [
    "FrameCounter",
    "StreamingAttention",
    "StreamingConv1D",
    "StreamingEncoder",
    "StreamingISTFT",
    "StreamingModel",
    "StreamingSTFT",
    "calibration_data",
    "initial_state",
    "run_stream",
    "to_streaming",
]

del _layers


def to_streaming(model):
    """A streaming version of `model`: one frame (or hop) per call.

    Args:
        model: a functional or Sequential `keras.Model` with one input:
            spectra `(B, T, D)`, or a waveform `(B, L)` whose first layer
            is a `ComplexSTFT(center=False)`. Every attention must be
            causal with a `sliding_window` (e.g.
            `music_classifier(..., sliding_window=W)`).

    Returns:
        A `StreamingModel` (a functional `keras.Model`) with inputs
        `[chunk, *state]` and outputs `[outputs, *state]` (the state in
        the same order and shapes, each input named
        `state_NN_<layer>_<kind>`), sharing `model`'s weights. It has
        `initial_state(batch_size)` (the zero state, a list of arrays in
        input order), `warmup_steps` (the steps whose outputs come before
        the offline model's first frame) and `chunk_shape`, read from its
        graph: they survive saving to `.keras` and loading back.

    Raises:
        ValueError: naming the layer and the reason, for what cannot
            stream (see the module's docstring).

    Examples:
        >>> import keras
        >>> from cvattn_keras import layers
        >>> x = keras.Input((None, 8))
        >>> h = layers.ComplexTransformerEncoder(2, sliding_window=4)(x)
        >>> stream = to_streaming(keras.Model(x, h))
        >>> state = stream.initial_state(1)
        >>> chunk = np.ones((1, 1, 8), "float32")
        >>> out, *state = stream([chunk, *state])
        >>> tuple(out.shape), [tuple(s.shape) for s in state]
        ((1, 1, 8), [(1, 3), (1, 3, 2, 4), (1, 3, 2, 4)])
    """
    return _to_streaming(model)


def initial_state(stream, batch_size=1):
    """The zero state of `stream` (from `to_streaming`, or reloaded from a
    file) for `batch_size` parallel streams: a list of float arrays, in
    the order of its inputs after the chunk (float, but the frame
    counter's bools). `batch_size`: a Python or NumPy int (not a
    bool)."""
    return zero_state(stream, batch_size)


def _check_chunks(stream, chunks):
    chunks = np.asarray(chunks)
    shape = tuple(stream.inputs[0].shape[1:])
    if chunks.ndim != len(shape) + 2 or tuple(chunks.shape[2:]) != shape:
        raise ValueError(
            f"`chunks` must have shape (B, steps) + {shape}. Received: "
            f"chunks.shape={chunks.shape}"
        )
    if not chunks.shape[0] or not chunks.shape[1]:
        raise ValueError(
            "`chunks` must hold at least one stream and one step. "
            f"Received: chunks.shape={chunks.shape}"
        )
    return chunks


def run_stream(stream, chunks, state=None):
    """Feeds `chunks` `(B, steps, *chunk_shape)` to `stream` one step at a
    time, as a device would; returns `(outputs, state)`: each output of
    the steps stacked on axis 1 (`(B, steps, ...)`: a frame's `(B, 1,
    ...)` squeezed to `(B, ...)` first), and the state after the last
    step (to continue from). `state` defaults to the zero state."""
    chunks = _check_chunks(stream, chunks)
    if state is None:
        state = initial_state(stream, chunks.shape[0])
    count = len(stream.outputs) - len(stream.inputs) + 1
    steps = []
    step = _step_function(stream)
    for t in range(chunks.shape[1]):
        results = step([chunks[:, t], *state])
        steps.append(results[:count])
        state = results[count:]
    outputs = _stack_steps(steps)
    return (outputs[0] if count == 1 else outputs), state


def _stack_steps(steps):
    """The outputs of a stream's steps (a list over the steps of a list
    over the outputs), each output's steps stacked on axis 1 (a frame's
    `(B, 1, ...)` squeezed to `(B, ...)` first): a list over the outputs.
    `run_stream`'s, and `export.TFLiteStream.run`'s."""
    return [
        np.stack(
            [o[:, 0] if o.ndim >= 3 and o.shape[1] == 1 else o for o in parts],
            axis=1,
        )
        for parts in zip(*steps)
    ]


def calibration_data(stream, chunks, state=None, skip=0):
    """The calibration data of a stream's calibrated TFLite modes (`int8`,
    `full_int8`, `int16x8`): `stream` run over typical `chunks` `(B,
    steps, *chunk_shape)`, every step after the first `skip` a sample: a
    list `[chunks, *states]` of arrays with `B * (steps - skip)` samples
    on axis 0, each state the one that entered the step, so that each
    state's integer range is calibrated on the states a running stream
    carries (give enough steps to fill every buffer: more than the frame
    counter's length). Pass the result to `export_tflite(stream, ...,
    representative_data=...)`."""
    chunks = _check_chunks(stream, chunks)
    if not validation._is_int(skip) or not 0 <= skip < chunks.shape[1]:
        raise ValueError(
            "`skip` must be an int in [0, steps) and `chunks` longer than "
            f"it (steps = {chunks.shape[1]}). Received: skip={skip!r}"
        )
    if state is None:
        state = initial_state(stream, chunks.shape[0])
    count = len(stream.outputs) - len(stream.inputs) + 1
    columns = [[] for _ in stream.inputs]
    step = _step_function(stream)
    for t in range(chunks.shape[1]):
        if t >= skip:
            columns[0].append(chunks[:, t])
            for column, array in zip(columns[1:], state):
                column.append(np.asarray(array))
        state = step([chunks[:, t], *state])[count:]
    return [np.concatenate(column, axis=0) for column in columns]


def _step_function(stream):
    """One step of `stream` on NumPy arrays, as NumPy arrays: compiled on
    JAX (`predict_on_batch`: its eager mode compiles every op of every
    step), eager elsewhere (a tf.function would trace for longer than a
    short stream runs)."""
    if keras.backend.backend() == "jax":
        return lambda inputs: [
            np.asarray(r) for r in stream.predict_on_batch(inputs)
        ]
    return lambda inputs: [
        keras.ops.convert_to_numpy(r) for r in stream(inputs, training=False)
    ]
