"""`to_streaming`: a functional model's graph, rebuilt one step at a time."""

import keras
import numpy as np

from cvattn_keras import _validation as validation
from cvattn_keras import layers as cl
from cvattn_keras.streaming import _layers as sl

# Layers that act on each frame alone (or are the identity at inference):
# called as they are on the one-frame chunk, with the offline weights.
_PER_FRAME = (
    cl.ComplexActivation,
    cl.ComplexBatchNormalization,
    cl.ComplexCompression,
    cl.ComplexDense,
    cl.ComplexDropout,
    cl.ComplexFrequencyFrontEnd,
    cl.ComplexFromReal,
    cl.ComplexLayerNormalization,
    cl.ComplexMask,
    cl.ComplexModulus,
    cl.ComplexRMSNormalization,
    cl.ComplexScale,
    cl.ModReLU,
    cl.RealReadout,
    keras.layers.Activation,
    keras.layers.Add,
    keras.layers.Average,
    keras.layers.Dense,
    keras.layers.Dropout,
    keras.layers.GaussianDropout,
    keras.layers.GaussianNoise,
    keras.layers.Identity,
    keras.layers.LeakyReLU,
    keras.layers.Maximum,
    keras.layers.Minimum,
    keras.layers.Multiply,
    keras.layers.ReLU,
    keras.layers.Rescaling,
    keras.layers.SpatialDropout1D,
    keras.layers.Subtract,
)
# Layers on the last axis only: per frame when `axis` is the last one.
_LAST_AXIS = (
    keras.layers.BatchNormalization,
    keras.layers.Concatenate,
    keras.layers.LayerNormalization,
    keras.layers.Softmax,
)
# Elementwise `keras.ops` in a functional graph (`x + y`, `ops.tanh(x)`).
_ELEMENTWISE_OPS = {
    "Abs",
    "Add",
    "Cast",
    "Cos",
    "Divide",
    "Exp",
    "Log",
    "Maximum",
    "Minimum",
    "Multiply",
    "Negative",
    "Relu",
    "Sigmoid",
    "Sin",
    "Sqrt",
    "Square",
    "Subtract",
    "Tanh",
    "TrueDivide",
}
# Layers that act on each value alone: the only ones (with the ops above)
# that may take samples `(B, L)` (a waveform, an inverse STFT's output),
# whose last axis is time.
_PER_SAMPLE = (
    keras.layers.Add,
    keras.layers.Average,
    keras.layers.Dropout,
    keras.layers.GaussianDropout,
    keras.layers.GaussianNoise,
    keras.layers.Identity,
    keras.layers.LeakyReLU,
    keras.layers.Maximum,
    keras.layers.Minimum,
    keras.layers.Multiply,
    keras.layers.ReLU,
    keras.layers.Rescaling,
    keras.layers.Subtract,
)


def _refuse(layer, reason):
    name = getattr(layer, "name", type(layer).__name__)
    raise ValueError(
        f"Cannot stream layer {name!r} ({type(layer).__name__}): {reason}"
    )


def _last_axis(layer):
    axis = getattr(layer, "axis", -1)
    if isinstance(axis, (list, tuple)):
        axis = axis[0] if len(axis) == 1 else None
    return axis == -1


def _check_attention(attention, owner, product_note=True):
    """The checks every streamed attention passes: a sliding window, and
    rotary positions only with the inner product."""
    if type(attention) is not cl.ComplexMultiHeadAttention:
        _refuse(
            owner,
            f"its attention is a {type(attention).__name__}, which has no "
            "stream: only ComplexMultiHeadAttention with sliding_window=W "
            "streams.",
        )
    if attention.sliding_window is None:
        _refuse(
            owner,
            "its attention sees the whole sequence (no `sliding_window`): "
            "each step would need every frame so far. Build it with "
            "sliding_window=W (causal, the last W frames).",
        )
    if attention.rotary is not None and attention.product == "bilinear":
        _refuse(
            owner,
            "rotary positions with product='bilinear' make the scores "
            "depend on t + s, the absolute positions, which grow without "
            "bound in a stream; use product='inner' (scores depend on t - "
            "s) or no rotary positions.",
        )


def _no_extras(layer, kwargs, names):
    for name in names:
        if kwargs.get(name) not in (None, False):
            _refuse(
                layer,
                f"it is called with `{name}`, which a stream has no "
                "equivalent of.",
            )


def _operands(args, kwargs):
    """The operands of a call: its arguments, a list of tensors (a merge
    layer's) opened."""
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, (list, tuple)) and any(
            isinstance(v, keras.KerasTensor) for v in value
        ):
            yield from value
        else:
            yield value


def _shape(value):
    """The shape of a constant operand (an array, a tensor, a nested list),
    `()` for what has none (a scalar, a dtype, None)."""
    if hasattr(value, "shape") and not callable(value.shape):
        return tuple(value.shape)
    try:
        return np.shape(value)
    except ValueError:  # a ragged list: no shape to broadcast
        return ()


def _per_sample(layer):
    if isinstance(layer, keras.layers.Activation):
        name = getattr(layer.activation, "__name__", "")
        return "softmax" not in name  # softmax, log_softmax: the last axis
    if isinstance(layer, keras.layers.Layer):
        return isinstance(layer, _PER_SAMPLE)
    return type(layer).__name__ in _ELEMENTWISE_OPS


def _check_operands(layer, args, kwargs):
    """Refuses a per-frame layer or op whose operands hold a time axis the
    step would take whole: a constant that broadcasts along the frames'
    (or samples') time axis (axis 1), and samples `(B, L)`, whose last
    axis is time, in a layer that acts along the last axis."""
    tensors, constants = [], []
    for value in _operands(args, kwargs):
        if isinstance(value, keras.KerasTensor):
            tensors.append(value)
        else:
            constants.append(value)
    if not tensors:
        return
    rank = max(len(x.shape) for x in tensors)
    for constant in constants:
        shape = _shape(constant)
        axis = len(shape) - rank + 1  # the constant's axis on time
        if len(shape) > rank:
            _refuse(
                layer,
                f"it takes a constant of shape {shape}, of more axes than "
                f"its tensors (rank {rank}): the result would gain axes "
                "in front of the batch, and time would move off axis 1.",
            )
        if axis >= 0 and shape[axis] != 1:
            _refuse(
                layer,
                f"it takes a constant of shape {shape} against tensors of "
                f"rank {rank}: the constant's axis {axis} lines up with "
                "time (axis 1), so each step would take the whole of it "
                "instead of its frame (a table or mask over time, as "
                "absolute positions are). Give the constant size 1 on that "
                "axis (the same for every frame), or apply it to the "
                "stream's outputs yourself, frame by frame.",
            )
    if any(len(x.shape) == 2 for x in tensors) and not _per_sample(layer):
        _refuse(
            layer,
            "it takes samples (B, L), a waveform or an inverse STFT's "
            "output, whose last axis is time: a step holds one hop of "
            "them, and a layer that acts along the last axis (or is not "
            "known to act on each value alone) would see that hop "
            "instead of the whole signal. Only elementwise layers and ops "
            "may take samples.",
        )


class _Builder:
    """Walks the offline graph, calling each layer's step on the stream's
    tensors and collecting the states."""

    def __init__(self, model):
        self.model = model
        self.states = []  # [name, input tensor, new tensor]
        self.names = {}  # step names used so far
        self.clock = None  # see _layers: (B, horizon + 1) bool
        self.chunk = None
        self.hop = None  # a waveform's chunk: the STFTs' frame_step
        self.span = None  # the longest fft_length of the STFTs
        self.samples = None  # the STFTs' shared state, and its slot

    def state(self, owner, kind, shape, dtype):
        owner = getattr(owner, "name", owner)
        name = f"state_{len(self.states):02d}_{owner}_{kind}"
        tensor = keras.Input(shape, dtype=dtype, name=name)
        self.states.append([name, tensor, None])
        return tensor, len(self.states) - 1

    def step_name(self, layer):
        """A unique name for a layer's step (a layer called twice in the
        model gets two steps, and two states)."""
        name = f"{layer.name}_step"
        count = self.names.get(name, 0)
        self.names[name] = count + 1
        return name if not count else f"{name}_{count}"

    def update(self, slot, tensor):
        self.states[slot][2] = tensor

    # -- one node --------------------------------------------------------

    def call(self, layer, args, kwargs):
        if isinstance(layer, keras.Model):
            _refuse(
                layer,
                "a nested model: build the model from its layers "
                "(a functional model of layers), or stream it alone.",
            )
        if isinstance(layer, cl.ComplexSTFT):
            return self._stft(layer, args, kwargs)
        _check_operands(layer, args, kwargs)
        if isinstance(layer, cl.ComplexISTFT):
            return self._istft(layer, args)
        if isinstance(layer, cl.ComplexTransformerEncoder):
            _no_extras(
                layer,
                kwargs,
                ("padding_mask", "attention_mask", "return_attention_scores"),
            )
            _check_attention(layer.self_attention, layer)
            return self._attention(
                sl.StreamingEncoder, layer, layer.self_attention, args[0]
            )
        if isinstance(layer, cl.ComplexMultiHeadAttention):
            return self._mha(layer, args, kwargs)
        if isinstance(layer, cl.ComplexConv1D):
            return self._conv(layer, args)
        if isinstance(layer, cl.ComplexTransformerDecoder):
            _refuse(
                layer,
                "a decoder block streams as generation does "
                "(`cvattn_keras.models.generate`), not frame by frame.",
            )
        if (
            isinstance(
                layer, (cl.SinusoidalPositionalEncoding, keras.layers.Embedding)
            )
            or "PositionEmbedding" in type(layer).__name__
        ):
            _refuse(
                layer,
                "absolute positions make each step depend on its frame "
                "index, which grows without bound (and loses float32 "
                "precision in a long stream). Use relative positions: "
                "rotary_max_wavelength in the attention (music_classifier("
                "..., positions='rotary')), or none.",
            )
        if isinstance(layer, _PER_FRAME) or (
            isinstance(layer, _LAST_AXIS) and _last_axis(layer)
        ):
            return layer(*args, **self._inference(layer, kwargs))
        if not isinstance(layer, keras.layers.Layer) and (
            type(layer).__name__ in _ELEMENTWISE_OPS
        ):
            return layer(*args, **kwargs)
        _refuse(
            layer,
            "it may look along time (a pooling, flatten, reshape, "
            "recurrent or other layer that mixes frames), and no streaming "
            "step is known for it.",
        )

    @staticmethod
    def _inference(layer, kwargs):
        kwargs = dict(kwargs)
        if "training" in kwargs:
            kwargs["training"] = False
        return kwargs

    def _stft(self, layer, args, kwargs):
        if layer.center:
            _refuse(
                layer,
                "a centred STFT (center=True) pads the signal's start with "
                "what has not arrived (frame t is centred on sample t * "
                "frame_step, so it needs fft_length // 2 samples from the "
                "future); build it with center=False.",
            )
        if args[0] is not self.chunk or self.hop is None:
            _refuse(
                layer,
                "a ComplexSTFT streams only as the first layer, "
                "on the waveform input.",
            )
        if layer.frame_step != self.hop:
            _refuse(
                layer,
                f"its frame_step ({layer.frame_step}) differs from the "
                f"first ComplexSTFT's ({self.hop}): a stream takes one "
                "chunk of samples a step, which cannot feed two frame "
                "rates. Give every STFT of the waveform the same "
                "frame_step, or stream them as separate models.",
            )
        # Every STFT keeps the longest one's samples (one state, shared)
        # and takes the first `fft_length` of them: all give the frame of
        # the same step, `warmup_steps` late.
        step = sl.StreamingSTFT(
            layer, span=self.span, name=self.step_name(layer)
        )
        if self.span <= self.hop:  # frames that do not overlap: no state
            return step(args[0])
        if self.samples is None:
            self.samples = self.state(
                layer, "samples", (self.span - self.hop,), "float32"
            )
        samples, slot = self.samples
        frame, new = step(args[0], samples)
        if self.states[slot][2] is None:
            self.update(slot, new)
        return frame

    def _istft(self, layer, args):
        if layer.center:
            _refuse(
                layer,
                "a centred inverse (center=True) trims samples "
                "at the start; build it with center=False.",
            )
        if layer.frame_length != layer.fft_length:
            _refuse(
                layer,
                "a stream's inverse needs frame_length == "
                "fft_length (no window offset within the frame).",
            )
        if layer.frame_length < layer.frame_step:
            _refuse(layer, "frame_step > frame_length leaves gaps.")
        step = sl.StreamingISTFT(layer, name=self.step_name(layer))
        size = layer.frame_length - layer.frame_step
        if size == 0:  # frames that do not overlap: no tail
            return step(args[0], clock=self.clock)
        tail, slot = self.state(layer, "tail", (size,), "float32")
        samples, new = step(args[0], tail, self.clock)
        self.update(slot, new)
        return samples

    def _mha(self, layer, args, kwargs):
        args = list(args)
        query = args[0]
        value = args[1] if len(args) > 1 else kwargs.get("value")
        key = args[2] if len(args) > 2 else kwargs.get("key")
        if value is not query or (key is not None and key is not query):
            _refuse(
                layer,
                "only self-attention (query, value and key the "
                "same tensor) streams.",
            )
        if not kwargs.get("use_causal_mask"):
            _refuse(
                layer,
                "it is not called with use_causal_mask=True: it "
                "sees frames that have not arrived yet.",
            )
        _no_extras(
            layer,
            kwargs,
            (
                "attention_mask",
                "return_attention_scores",
                "cache",
                "cache_update_index",
                "query_mask",
                "value_mask",
                "key_mask",
            ),
        )
        _check_attention(layer, layer)
        return self._attention(sl.StreamingAttention, layer, layer, query)

    def _attention(self, step_class, layer, attention, x):
        window = attention.sliding_window
        keys = values = None
        if window > 1:
            heads = attention.num_heads
            dtype = attention.compute_dtype
            keys, key_slot = self.state(
                layer,
                "keys",
                (window - 1, heads, 2 * attention.key_dim),
                dtype,
            )
            values, value_slot = self.state(
                layer,
                "values",
                (window - 1, heads, 2 * attention.value_dim),
                dtype,
            )
        step = step_class(layer, name=self.step_name(layer))
        if keys is None:  # W = 1: each frame attends to itself alone
            return step(x, clock=self.clock)
        out, new_keys, new_values = step(x, keys, values, clock=self.clock)
        self.update(key_slot, new_keys)
        self.update(value_slot, new_values)
        return out

    def _conv(self, layer, args):
        if layer.padding != "causal" or layer.strides != 1:
            _refuse(
                layer,
                "a convolution over time streams with padding='causal' and "
                f"strides=1 only (received padding={layer.padding!r}, "
                f"strides={layer.strides}): 'same' and 'valid' look ahead or "
                "change the frame rate.",
            )
        size = layer.dilation_rate * (layer.kernel_size - 1)
        x = args[0]
        if size == 0:
            return layer(x)
        frames, slot = self.state(
            layer, "frames", (size, x.shape[-1]), layer.compute_dtype
        )
        out, new = sl.StreamingConv1D(layer, name=self.step_name(layer))(
            x, frames, self.clock
        )
        self.update(slot, new)
        return out


def _functional(model):
    if isinstance(model, keras.Sequential):
        if not model.built:
            raise ValueError(
                "`model` must be built (call it once, or give it an Input) "
                f"before streaming. Received: an unbuilt Sequential "
                f"{model.name!r}"
            )
        model = model._functional
    if not isinstance(model, keras.Model) or not hasattr(
        model, "_nodes_by_depth"
    ):
        raise ValueError(
            "`model` must be a functional (or Sequential) keras.Model: a "
            "stream is built from its graph of layers. Received: "
            f"{type(model).__name__} {getattr(model, 'name', '')!r}"
        )
    if len(model.inputs) != 1:
        raise ValueError(
            "`model` must have one input (spectra (B, T, D) or a waveform "
            f"(B, L) into a ComplexSTFT). Received: {len(model.inputs)} "
            f"inputs, {[tuple(x.shape) for x in model.inputs]}"
        )
    return model


def zero_state(stream, batch_size):
    """See `cvattn_keras.streaming.initial_state`."""
    if not validation._is_int(batch_size) or batch_size < 1:
        raise ValueError(
            "`batch_size` must be a positive int (a Python or NumPy "
            f"integer, not a bool). Received: batch_size={batch_size!r}"
        )
    return [
        np.zeros((int(batch_size),) + tuple(x.shape[1:]), x.dtype)
        for x in stream.inputs[1:]
    ]


@keras.saving.register_keras_serializable(package="cvattn_keras")
class StreamingModel(keras.Model):
    """A stream from `to_streaming`: a functional `keras.Model` with inputs
    `[chunk, *state]` and outputs `[outputs, *state]`, which knows how to
    run itself. What it knows is read from its graph (the frame counter's
    warm-up, the inputs' shapes), so a stream saved to `.keras` and loaded
    back (`keras.saving.load_model`, `safe_mode=True` too) is a
    `StreamingModel` again, with the same `warmup_steps`, `chunk_shape`
    and `initial_state`."""

    @property
    def warmup_steps(self):
        """The steps whose outputs come before the offline model's first
        frame: step `k` gives frame `k - warmup_steps`."""
        for layer in self.layers:
            if isinstance(layer, sl.FrameCounter):
                return layer.warmup
        raise ValueError(
            f"{self.name!r} has no FrameCounter layer: not a stream made "
            "by `to_streaming`."
        )

    @property
    def chunk_shape(self):
        """The shape of one step's chunk, less the batch: `(1, D)` (a
        frame) or `(frame_step,)` (a hop of samples)."""
        return tuple(self.inputs[0].shape[1:])

    def initial_state(self, batch_size=1):
        """The zero state for `batch_size` parallel streams (see
        `cvattn_keras.streaming.initial_state`)."""
        return zero_state(self, batch_size)


def _timing(model):
    """`(warmup, horizon)`: the steps before the first whole frame (a
    `ComplexSTFT`'s), and how far back any layer looks, in frames."""
    warmup, horizon = 0, 1
    for layer in model._flatten_layers(include_self=False, recursive=True):
        if isinstance(layer, cl.ComplexSTFT):  # the longest one's
            reach = -(-layer.fft_length // layer.frame_step) - 1
            warmup = max(warmup, reach)
        if isinstance(layer, cl.ComplexISTFT):
            reach = -(-layer.frame_length // layer.frame_step)
            horizon = max(horizon, reach - 1)
        if isinstance(layer, cl.ComplexMultiHeadAttention) and (
            layer.sliding_window is not None
        ):
            horizon = max(horizon, layer.sliding_window - 1)
    return warmup, horizon


def to_streaming(model):
    """See `cvattn_keras.streaming.to_streaming`."""
    model = _functional(model)
    source = model.inputs[0]
    shape = tuple(source.shape)
    builder = _Builder(model)
    if len(shape) == 2:
        stfts = [
            layer for layer in model.layers if isinstance(layer, cl.ComplexSTFT)
        ]
        if not stfts:
            raise ValueError(
                "A model of waveforms (B, L) streams when a "
                "ComplexSTFT(center=False) is its first layer. Received: "
                f"input shape {shape}, first layers "
                f"{[layer.name for layer in model.layers[:2]]}"
            )
        chunk = keras.Input((stfts[0].frame_step,), name="chunk")
        builder.hop = stfts[0].frame_step
        builder.span = max(
            layer.fft_length
            for layer in stfts
            if layer.frame_step == builder.hop
        )
    elif len(shape) == 3 and shape[-1] is not None:
        chunk = keras.Input((1, shape[-1]), dtype=source.dtype, name="chunk")
    else:
        raise ValueError(
            "A streamed model takes frames (B, T, D), with D known, or a "
            f"waveform (B, L). Received: input shape {shape}"
        )
    builder.chunk = chunk
    warmup, horizon = _timing(model)
    counter, slot = builder.state(
        "stream", "frames", (warmup + horizon,), "bool"
    )
    builder.clock, following = sl.FrameCounter(
        warmup, horizon, name="frame_counter"
    )(counter)
    builder.update(slot, following)
    tensors = {id(source): chunk}
    for depth in sorted(model._nodes_by_depth, reverse=True):
        for node in model._nodes_by_depth[depth]:
            if not node.operation or node.is_input:
                continue
            args, kwargs = node.arguments.fill_in(tensors)
            outputs = builder.call(node.operation, args, kwargs)
            for x, y in zip(node.outputs, keras.tree.flatten(outputs)):
                tensors[id(x)] = y
    outputs = [tensors[id(x)] for x in model.outputs]
    inputs = [chunk] + [state[1] for state in builder.states]
    news = [state[2] for state in builder.states]
    return StreamingModel(inputs, outputs + news, name=f"{model.name}_stream")
