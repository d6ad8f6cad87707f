"""The streaming step of each layer that looks along time.

Each class wraps the offline layer (its weights, not a copy) and computes
one step: it takes the new frame (or hop of samples) and the layer's state
(external: inputs and outputs of the step, never variables), and returns
the step's output and the new state. States are buffers updated by
concatenate-and-slice (static shapes, builtin ops, every delegate).

`clock` below tells each step how many frames the stream has seen: a
`(B, H + 1)` bool tensor from `FrameCounter`, `clock[:, i]` true when
the current frame's index is at least `H - i` (`H`, the horizon: the
furthest any layer looks back; index 0 is the first frame the offline
model would see, negative ones the warm-up of a `ComplexSTFT`, whose
first frames hold samples from before the stream began). It is a
thermometer code of bools, updated by a shift (no arithmetic, nothing a
quantizer touches: every TFLite mode, int16x8 included, keeps it
exact) and saturated once `H` frames have passed, so that the state
stays the same size and the same values however long the stream runs.
"""

import keras
import numpy as np
from keras import ops

from cvattn_keras import attention as core
from cvattn_keras import stft as sf


def _multiplier(mask):
    """A bool mask as 0/1 floats, in the form each export mode takes (a
    table lookup in int16x8 files, which have no select or float cast)."""
    return core._mask_as_multiplier(mask)


def _check_batch(inputs, state, name):
    """A `ValueError` when the static batch sizes of the step's input and
    one of its states differ (eager calls; symbolic ones have `None`)."""
    got, want = inputs.shape[0], state.shape[0]
    if isinstance(got, int) and isinstance(want, int) and got != want:
        raise ValueError(
            f"The chunk's batch size ({got}) differs from the state's: "
            f"state {name!r} has batch {want}. Start a stream of batch {got} "
            f"from `initial_state({got})`."
        )


def _cut(x, start, stop):
    """`x[:, start:stop]` of a `(B, L)` tensor, sliced at rank 3: the GPU
    delegate slices rank-3 and rank-4 tensors only."""
    length = x.shape[1]
    stop = length if stop is None else stop
    x = ops.reshape(x, (-1, 1, length))[:, :, start:stop]
    return ops.reshape(x, (-1, stop - start))


def _inner_config(layer):
    return keras.saving.serialize_keras_object(layer)


def _inner_layer(config):
    return keras.saving.deserialize_keras_object(config)


class _StreamStep(keras.layers.Layer):
    """A step wrapper: holds the offline `layer` as a tracked sublayer, so
    that the stream shares (and saves) its weights."""

    def __init__(self, layer, **kwargs):
        if isinstance(layer, dict):
            layer = _inner_layer(layer)
        kwargs.setdefault("dtype", layer.dtype_policy)
        super().__init__(**kwargs)
        self.layer = layer

    def build(self, *shapes):
        self.built = True

    def get_config(self):
        return {**super().get_config(), "layer": _inner_config(self.layer)}


@keras.saving.register_keras_serializable(package="cvattn_keras")
class FrameCounter(keras.layers.Layer):
    """The stream's clock. Its state `(B, warmup + horizon)` bool holds
    true in its last `n` entries after `n` steps (saturated: all ones after
    `warmup + horizon` steps); each step shifts a true in from the right. It
    returns the clock `(B, horizon + 1)` of the current step (see the
    module docstring) and the next state."""

    def __init__(self, warmup=0, horizon=1, **kwargs):
        kwargs["dtype"] = "float32"  # the policy; the clock is bool
        super().__init__(**kwargs)
        self.warmup = int(warmup)
        self.horizon = int(horizon)

    def call(self, counter):
        counter = ops.cast(counter, "bool")
        ones = ops.ones_like(counter[:, :1])
        extended = ops.concatenate([counter, ones], axis=1)  # (B, L + 1)
        return extended[:, : self.horizon + 1], extended[:, 1:]

    def compute_output_spec(self, counter):
        return (
            keras.KerasTensor((counter.shape[0], self.horizon + 1), "bool"),
            keras.KerasTensor(counter.shape, "bool"),
        )

    def get_config(self):
        return {
            **super().get_config(),
            "warmup": self.warmup,
            "horizon": self.horizon,
        }


@keras.saving.register_keras_serializable(package="cvattn_keras")
class StreamingSTFT(_StreamStep):
    """`ComplexSTFT(center=False)` one hop at a time: the state is the last
    `span - frame_step` samples (`span`, the longest `fft_length` of the
    stream's STFTs, all at the same hop: this one's by default); each hop
    of `frame_step` samples completes one frame, the transform of the
    first `fft_length` of the last `span` samples (the last `fft_length`
    when `span == fft_length`), so that every STFT of the stream gives the
    same frame at the same step. Frames that do not overlap (`frame_step
    >= span`) keep no state (`samples=None`): the window is the hop's last
    `span` samples."""

    def __init__(self, layer, span=None, **kwargs):
        super().__init__(layer, **kwargs)
        fft_length = self.layer.fft_length
        self.span = fft_length if span is None else int(span)
        if self.span < fft_length:
            raise ValueError(
                f"`span` must be at least the STFT's fft_length "
                f"({fft_length}). Received: span={span!r}"
            )

    def _frame(self, window, start):
        stop = start + self.layer.fft_length
        if (start, stop) != (0, window.shape[1]):
            window = _cut(window, start, stop)
        return self.layer(window)  # (B, 1, 2F)

    def call(self, hop, samples=None):
        hop = ops.cast(hop, "float32")
        if samples is None:
            return self._frame(hop, self.layer.frame_step - self.span)
        _check_batch(hop, samples, "samples")
        window = ops.concatenate([samples, hop], 1)  # (B, span)
        frame = self._frame(window, 0)
        return frame, _cut(window, self.layer.frame_step, None)

    def compute_output_spec(self, hop, samples=None):
        batch = hop.shape[0]
        frame = keras.KerasTensor(
            (batch, 1, 2 * self.layer.num_bins), self.layer.compute_dtype
        )
        if samples is None:
            return frame
        return frame, keras.KerasTensor(samples.shape, samples.dtype)

    def get_config(self):
        return {**super().get_config(), "span": self.span}


@keras.saving.register_keras_serializable(package="cvattn_keras")
class StreamingISTFT(_StreamStep):
    """`ComplexISTFT(center=False)` one frame at a time: each frame's
    windowed inverse DFT is overlap-added onto the state, the tail of the
    frames before (`fft_length - frame_step` samples), and the first
    `frame_step` samples, complete now, are divided by the window
    envelope and emitted.

    The first `R - 1` steps (`R = ceil(frame_length / frame_step)`, the
    frames that overlap a sample) emit zeros: the offline inverse divides
    those first samples of the signal by a partial envelope, near zero
    where the window is (1e5 times the steady one's reciprocal for a
    64-point Hann window), which no quantized file could represent beside
    the steady samples. From then on every emitted sample equals the
    offline model's."""

    def __init__(self, layer, **kwargs):
        super().__init__(layer, **kwargs)
        step, size = self.layer.frame_step, self.layer.frame_length
        window = np.asarray(self.layer._window, "float64")
        reach = -(-size // step)  # frames that overlap a sample
        envelope = sf.overlap_envelope(window, step, 2 * reach + 1)
        steady = envelope[(reach - 1) * step : reach * step]  # R frames
        reached = steady > sf.NOLA_TOLERANCE * envelope.max()
        inverse = np.where(reached, 1 / np.where(reached, steady, 1), 0)
        self._inverse = inverse[None].astype("float32")  # (1, step)
        self._reach = reach

    def call(self, frame, tail=None, clock=None):
        if tail is not None:
            _check_batch(frame, tail, "tail")
        layer = self.layer
        x = ops.reshape(ops.cast(frame, "float32"), (-1, frame.shape[-1]))
        kernel = ops.concatenate(layer._float32_kernels(), axis=1)  # (fl, 2F)
        samples = ops.matmul(x, ops.transpose(kernel))  # (B, fl)
        horizon = clock.shape[1] - 1
        valid = _multiplier(clock[:, horizon:])  # index >= 0
        step = layer.frame_step
        added = samples * valid
        if tail is not None:
            zeros = ops.zeros_like(samples[:, :step])
            added = ops.concatenate([tail, zeros], 1) + added
        # Emitted once R frames reached the samples: index >= R - 1.
        at = horizon + 1 - self._reach
        whole = _multiplier(clock[:, at : at + 1])  # (B, 1)
        inverse = ops.convert_to_tensor(self._inverse) * whole
        if tail is None:  # frames that do not overlap
            return ops.cast(added * inverse, layer.compute_dtype)
        emitted = _cut(added, 0, step) * inverse  # (B, step)
        tail = _cut(added, step, None)
        return ops.cast(emitted, layer.compute_dtype), tail

    def compute_output_spec(self, frame, tail=None, clock=None):
        samples = keras.KerasTensor(
            (frame.shape[0], self.layer.frame_step), self.layer.compute_dtype
        )
        if tail is None:
            return samples
        return samples, keras.KerasTensor(tail.shape, tail.dtype)


def _rotate(attention, x, start):
    if attention.rotary is None:
        return x
    return attention.rotary(x, start_index=start)


def attention_step(attention, x, keys, values, clock, window):
    """One step of a causal sliding-window self-attention: `x` `(B, 1,
    2E)`, the buffers of the last `window - 1` frames' projected keys
    `(B, W-1, N, 2H)` (before any rotary encoding) and values; returns
    the output `(B, 1, 2O)` and the new buffers. With rotary positions the
    window's keys take positions `0 .. W-1` and the query `W-1`: the
    scores depend on `t - s` only, so the positions never grow."""
    q = attention._project_to_heads(attention.query_dense, x, attention.key_dim)
    k = attention._project_to_heads(attention.key_dense, x, attention.key_dim)
    v = attention._project_to_heads(
        attention.value_dense, x, attention.value_dim
    )
    if keys is not None:
        k = ops.concatenate([ops.cast(keys, k.dtype), k], axis=1)
        v = ops.concatenate([ops.cast(values, v.dtype), v], axis=1)
    q = _rotate(attention, q, window - 1)
    rotated = _rotate(attention, k, 0)
    # Slot j holds the frame W - 1 - j steps back: attended if that
    # frame exists (index >= W - 1 - j, clock[:, H - W + 1 + j]); the
    # current frame always.
    horizon = clock.shape[1] - 1
    past = clock[:, horizon + 1 - window : horizon]  # (B, W - 1)
    seen = ops.concatenate([past, ops.ones_like(clock[:, :1])], axis=1)
    mask = ops.expand_dims(seen, (1, 2))  # (B, 1, 1, W)
    outputs, _ = attention._compute_attention(q, rotated, v, mask, False)
    outputs = attention._project_from_heads(outputs, x)
    if keys is None:
        return outputs, None, None
    return outputs, k[:, 1:], v[:, 1:]


def _with_states(output, keys, values):
    if keys is None:
        return output
    return (
        output,
        keras.KerasTensor(keys.shape, keys.dtype),
        keras.KerasTensor(values.shape, values.dtype),
    )


@keras.saving.register_keras_serializable(package="cvattn_keras")
class StreamingAttention(_StreamStep):
    """A `ComplexMultiHeadAttention` called as causal self-attention with
    a `sliding_window` W, one frame at a time: the state is the projected
    keys and values of the last W - 1 frames."""

    def call(self, x, keys=None, values=None, clock=None):
        window = self.layer.sliding_window
        if keys is None:  # W = 1
            return attention_step(self.layer, x, None, None, clock, 1)[0]
        _check_batch(x, keys, "keys")
        return attention_step(self.layer, x, keys, values, clock, window)

    def compute_output_spec(self, x, keys=None, values=None, clock=None):
        shape = self.layer.compute_output_shape(x.shape, x.shape)
        output = keras.KerasTensor(shape, self.layer.compute_dtype)
        return _with_states(output, keys, values)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class StreamingEncoder(_StreamStep):
    """A `ComplexTransformerEncoder` with a `sliding_window`, one frame at
    a time: its self-attention as `StreamingAttention`, the rest (norms,
    residuals, the feed-forward network) per frame."""

    def call(self, x, keys=None, values=None, clock=None):
        if keys is not None:
            _check_batch(x, keys, "keys")
        block = self.layer
        attention = block.self_attention
        window = attention.sliding_window
        state = []

        def attend(h):
            out, *new = attention_step(
                attention,
                h,
                keys,
                values,
                clock,
                window if keys is not None else 1,
            )
            state.extend(new)
            return out

        x, _ = block._residual(x, block.self_attention_norm, attend)
        x, _ = block._residual(
            x, block.feedforward_norm, lambda h: block._feedforward(h, False)
        )
        return x if keys is None else (x, state[0], state[1])

    def compute_output_spec(self, x, keys=None, values=None, clock=None):
        output = keras.KerasTensor(x.shape, self.layer.compute_dtype)
        return _with_states(output, keys, values)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class StreamingConv1D(_StreamStep):
    """A `ComplexConv1D` with `padding="causal"` and `strides=1`, one frame
    at a time: the state is the last `dilation_rate * (kernel_size - 1)`
    input frames (zeros before the stream, as the causal padding; the
    frames of a `ComplexSTFT`'s warm-up enter as zeros too)."""

    def call(self, x, frames, clock):
        _check_batch(x, frames, "frames")
        horizon = clock.shape[1] - 1
        valid = _multiplier(clock[:, horizon:])  # index >= 0
        valid = ops.expand_dims(valid, -1)  # (B, 1, 1)
        x = x * ops.cast(valid, x.dtype)
        window = ops.concatenate([ops.cast(frames, x.dtype), x], axis=1)
        outputs = self.layer(window)[:, -1:]  # the last output: this frame's
        return outputs, window[:, 1:]

    def compute_output_spec(self, x, frames, clock):
        shape = self.layer.compute_output_shape(x.shape)
        return (
            keras.KerasTensor(shape, self.layer.compute_dtype),
            keras.KerasTensor(frames.shape, frames.dtype),
        )
