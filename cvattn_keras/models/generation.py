"""Autoregressive decoding with `music_generator` models: `generate`
(the paper's protocol, feeding back notes or logits, with or without a
decoding cache), `shift_right` (teacher forcing's inputs), and training
the way `generate` decodes: `FeedbackTraining` (the decoder run again on
its own fed-back outputs, `feedback_inputs`)."""

import weakref

import keras
import numpy as np

from cvattn_keras import _validation as check
from cvattn_keras.layers import ComplexTransformerDecoder

__all__ = [
    "FEEDBACKS",
    "FeedbackTraining",
    "feedback_inputs",
    "generate",
    "shift_right",
]


def shift_right(labels):
    """Teacher forcing: `(B, T, notes)` labels -> the decoder's previous
    notes, shifted right one frame with a zero start token."""
    labels = np.asarray(labels, np.float32)
    start = np.zeros_like(labels[:, :1])
    return np.concatenate([start, labels[:, :-1]], axis=1)


FEEDBACKS = ("notes", "logits")
"""What `generate(feedback=...)` feeds back as the previous frame's
notes.
"""


def generate(
    model,
    spectra,
    threshold=0.5,
    steps=None,
    feedback="notes",
    cache=True,
    jit_compile=True,
):
    """Greedy autoregressive decoding with a `music_generator` model (also
    one loaded from a `.keras` file).

    The decoder is causal, so the logits of frame `t` depend on the
    previous-notes input at frames `<= t` only, i.e. on what was decoded at
    frames `< t`. Each step feeds the result at `t` back as the previous
    notes of frame `t + 1`:

    - `feedback="notes"` (default): the thresholded notes (0 or 1), the
      same kind of input as the shifted labels of teacher forcing;
    - `feedback="logits"`: the raw logits, the reference's evaluation loop
      (`outputs[:, i] = model(x, tgt=outputs)[:, i]` in its
      `train_gen.py`), which the paper's generation numbers used.

    With `cache=True` (default) the encoder runs once, and the decoder
    decodes one frame per step with key/value caches in every attention
    (as keras-hub's `CachedMultiHeadAttention`): the self-attention caches
    grow by one frame per step, the cross-attention caches hold the
    encoder's projected keys and values, computed once before the first
    step. The whole loop (`keras.ops.fori_loop`) runs in one compiled
    call: XLA on TensorFlow, `jax.jit` on JAX, eagerly on PyTorch. It uses
    the model's layers by name (`notes_as_complex`, `note_embedding`,
    `target_positions`, `decoder_{i}`, `head_dense`, `head_act`,
    `head_dropout`, `head_notes`, `note_logits`) and the encoder's output
    as the decoders' second input. The compiled loop is kept per model,
    `steps`, `feedback` and `threshold`, so later calls reuse it.
    `cvattn_keras.export.export_generator_tflite` exports the same
    decoding step for LiteRT.

    With `cache=False`, each step re-runs the whole model from Python on
    all `target_frames` (O(T^2) work). Both give the same logits up to
    float32 rounding (the projections of one frame and of the whole
    sequence are matmuls of different shapes), hence the same notes
    unless a logit lies within that rounding of the threshold.

    Args:
        model: a model with inputs `(spectra, previous_notes)`.
        spectra: `(B, source_frames, 2 * bins)`, or the waveform `(B,
            samples)` of a model built with `stft`.
        threshold: probability above which a note is on (the returned
            notes, and the feedback with `feedback="notes"`).
        steps: frames to decode (default: all `target_frames`).
        feedback: `"notes"` or `"logits"`, see above.
        cache: `True` for the cached, compiled decoding; `False` for the
            full recompute at every step.
        jit_compile: with `cache=True`, compile the loop (XLA, `jax.jit`;
            ignored on PyTorch). `False` runs the same loop uncompiled:
            slower per frame, but without the compilation (seconds) that
            each new model or argument set costs.

    Returns:
        `(notes, logits)`: the decoded multi-hot notes and their logits,
        each `(B, steps, notes)`, float32 NumPy arrays.

    Raises:
        ValueError: for spectra of another shape than the model's input
            (`B >= 1`), complex spectra, or a bad argument; checked on
            every call, before a kept compiled loop runs. And for
            `cache=True` with a generator whose `decoder_{i}` are not
            `ComplexTransformerDecoder`s (a real-valued one decodes with
            `cache=False`).
    """
    _check_feedback(feedback, threshold)
    for name, value in (("cache", cache), ("jit_compile", jit_compile)):
        if not isinstance(value, bool):
            raise ValueError(
                f"`{name}` must be True or False. Received: {name}={value!r}"
            )
    if not isinstance(model, keras.Model):
        raise ValueError(
            "`model` must be a `music_generator` model. Received: "
            f"model of type {type(model).__name__}"
        )
    if len(model.inputs) != 2:
        raise ValueError(
            "`model` must be a generator with inputs (spectra, "
            f"previous_notes). Received: a model with {len(model.inputs)} "
            "input(s)"
        )
    # Checked here on every call: the compiled loop, once traced, would
    # take spectra of other shapes silently (or fail inside).
    spectra = _check_spectra(model, spectra)
    _, target_frames, notes = model.inputs[1].shape
    steps = target_frames if steps is None else steps
    if not check._is_int(steps) or not 1 <= steps <= target_frames:
        raise ValueError(
            f"`steps` must be an integer in [1, {target_frames}]. "
            f"Received: steps={steps!r}"
        )
    steps = int(steps)
    cut = np.log(threshold / (1 - threshold))
    if cache:
        _check_cacheable(model)
        decoder = _cached_decoder(model, steps, feedback, cut, jit_compile)
        logits = (
            decoder.predict_on_batch(spectra)
            if jit_compile
            else decoder(spectra)
        )
        logits = np.asarray(keras.ops.convert_to_numpy(logits), np.float32)
        return (logits > cut).astype(np.float32), logits
    batch = spectra.shape[0]
    previous = np.zeros((batch, target_frames, notes), np.float32)
    decoded = np.zeros((batch, steps, notes), np.float32)
    logits = np.zeros((batch, steps, notes), np.float32)
    for t in range(steps):
        step = keras.ops.convert_to_numpy(
            model([spectra, previous], training=False)
        )[:, t]
        logits[:, t] = step
        decoded[:, t] = step > cut
        if t + 1 < target_frames:
            previous[:, t + 1] = step if feedback == "logits" else decoded[:, t]
    return decoded, logits


def _check_cacheable(model):
    """A `ValueError` unless every `decoder_{i}` of `model` is a
    `ComplexTransformerDecoder` (whose attention caches the cached decoding
    steps): a real-valued generator decodes with `cache=False`."""
    for layer in _decoder_layers(model):
        if not isinstance(layer, ComplexTransformerDecoder):
            raise ValueError(
                "`cache=True` decodes `music_generator`'s "
                "ComplexTransformerDecoder layers; decode this model with "
                f"`cache=False`. Received: model {model.name!r} whose "
                f"{layer.name!r} is a {type(layer).__name__}"
            )


def _check_feedback(feedback, threshold):
    """`ValueError`s for a `feedback` not in `FEEDBACKS` or a `threshold`
    outside (0, 1)."""
    if feedback not in FEEDBACKS:
        raise ValueError(
            f"`feedback` must be one of {list(FEEDBACKS)}. "
            f"Received: feedback={feedback!r}"
        )
    if not check._is_real(threshold) or not 0 < threshold < 1:
        raise ValueError(
            f"`threshold` must be in (0, 1). Received: threshold={threshold!r}"
        )


def _check_spectra(model, spectra):
    """`spectra` as a float32 array of the shape the generator's input
    `spectra` takes, `(B, source_frames, 2 * bins)` with `B >= 1`, or a
    `ValueError`."""
    expected = tuple(model.inputs[0].shape)
    wanted = "(batch, " + ", ".join(str(d) for d in expected[1:]) + ")"
    try:
        array = np.asarray(spectra)
    except (TypeError, ValueError) as error:
        array, problem = None, str(error)
    if array is not None and array.dtype.kind == "c":
        raise ValueError(
            f"`spectra` must be real: stacked {wanted} [Re | Im] on the "
            "last axis (see `cvattn_keras.to_stacked`). Received: a complex "
            f"array of dtype {array.dtype}"
        )
    if array is not None and array.dtype.kind not in "fiub":
        array, problem = None, f"dtype {array.dtype}"
    if array is None:
        raise ValueError(
            f"`spectra` must be a float array {wanted}. Received: "
            f"spectra of type {type(spectra).__name__} ({problem})"
        )
    array = array.astype(np.float32, copy=False)
    fits = len(array.shape) == len(expected) and all(
        want is None or want == got for want, got in zip(expected, array.shape)
    )
    if not fits or array.shape[0] == 0:
        raise ValueError(
            f"`spectra` must have shape {wanted}, batch >= 1, for the "
            f"model {model.name!r} (its input {model.inputs[0].name!r}: "
            f"{expected}). Received: spectra.shape={array.shape}"
        )
    return array


# The compiled decoders of `generate(cache=True)`, per model, then per
# (steps, feedback, cut): dropped with their model.
_CACHED_DECODERS = weakref.WeakKeyDictionary()

_HEAD_LAYERS = ("head_dense", "head_act", "head_dropout", "head_notes")


def _cached_decoder(model, steps, feedback, cut, jit_compile=True):
    """The (compiled) `_CachedDecoding` of `model` for these arguments."""
    decoders = _CACHED_DECODERS.setdefault(model, {})
    key = (steps, feedback, float(cut), jit_compile)
    if key not in decoders:
        decoder = _CachedDecoding(model, steps, feedback, cut)
        if jit_compile:
            # XLA / jax.jit; PyTorch runs the loop eagerly.
            decoder.compile(jit_compile=keras.backend.backend() != "torch")
        decoders[key] = decoder
    return decoders[key]


def _float32_cut(cut):
    """The largest float32 `<= cut`: for a float32 logit `x`,
    `x > cut` exactly when `x > _float32_cut(cut)`, so the compiled
    feedback thresholds exactly as NumPy does in float64."""
    low = np.float32(cut)
    if float(low) > cut:
        low = np.nextafter(low, np.float32(-np.inf))
    return float(low)


def _decoder_layers(model):
    """The `decoder_{i}` layers of a generator, in order."""
    layers, names = [], {layer.name for layer in model.layers}
    while f"decoder_{len(layers)}" in names:
        layers.append(model.get_layer(f"decoder_{len(layers)}"))
    if not layers:
        raise ValueError(
            "`model` must be a `music_generator` model with layers named "
            f"decoder_0, decoder_1, .... Received: model {model.name!r} "
            "without a layer 'decoder_0'"
        )
    return layers


class _CachedDecoding(keras.Model):
    """Greedy decoding of a `music_generator` with key/value caches, one
    frame per step in a `fori_loop`: `spectra` -> logits
    `(B, steps, notes)`. Shares the generator's layers (and weights)."""

    def __init__(self, model, steps, feedback, cut):
        super().__init__(name=f"{model.name}_cached_decoding")
        self.decoders = _decoder_layers(model)
        # The encoder's output is the decoders' second input.
        self.encoder = keras.Model(
            model.inputs[0], self.decoders[0].input[1], name="encoder"
        )
        self.notes_as_complex = model.get_layer("notes_as_complex")
        self.note_embedding = model.get_layer("note_embedding")
        self.target_positions = model.get_layer("target_positions")
        self.head = [model.get_layer(name) for name in _HEAD_LAYERS]
        self.readout = model.get_layer("note_logits")
        self.steps = steps
        self.feedback = feedback
        self.cut = _float32_cut(cut)
        self.target_frames = model.inputs[1].shape[1]
        self.notes = model.inputs[1].shape[2]
        self.built = True

    def empty_self_caches(self, batch, length=None):
        """Zero self-attention caches of every decoder,
        `(B, 2, length, num_heads, 2 * key_dim)` each (`length` defaults
        to `target_frames`)."""
        length = self.target_frames if length is None else length
        dtype = self.decoders[0].compute_dtype
        return [
            keras.ops.zeros(
                (batch, 2, length)
                + (
                    decoder.self_attention.num_heads,
                    2 * decoder.self_attention.key_dim,
                ),
                dtype,
            )
            for decoder in self.decoders
        ]

    def cross_caches(self, memory):
        """The cross-attention caches of every decoder: the encoder's
        output projected to keys and values, `(B, 2, S, num_heads,
        2 * key_dim)` each, computed once per sequence. (Each is the cache
        that an attention call with `cache_update_index=0` writes; its
        query, here a zero frame, plays no part in it.)"""
        batch = keras.ops.shape(memory)[0]
        dtype = self.decoders[0].compute_dtype
        caches = []
        for decoder in self.decoders:
            attention = decoder.cross_attention
            query = keras.ops.zeros((batch, 1, decoder.input[0].shape[-1]))
            empty = keras.ops.zeros(
                (batch, 2, keras.ops.shape(memory)[1])
                + (attention.num_heads, 2 * attention.key_dim),
                dtype,
            )
            _, cache = attention(
                keras.ops.cast(query, attention.compute_dtype),
                memory,
                cache=empty,
                cache_update_index=0,
                training=False,
            )
            caches.append(cache)
        return caches

    def step(self, previous, index, memory, self_caches, cross_caches):
        """Logits `(B, 1, notes)` of frame `index` from the previous frame's
        notes `(B, 1, notes)` and the caches (lists, one per decoder); the
        updated self-attention caches. `memory` (the encoder's output) is
        not read: the cross-attention caches hold its keys and values."""
        x = self.notes_as_complex(previous)
        x = self.note_embedding(x)
        x = self.target_positions(x, start_index=index)
        new_self = []
        for decoder, self_cache, cross_cache in zip(
            self.decoders, self_caches, cross_caches
        ):
            x, self_cache, _ = decoder(
                x,
                memory,
                self_attention_cache=self_cache,
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache,
                training=False,
            )
            new_self.append(self_cache)
        for layer in self.head:
            x = layer(x, training=False) if layer is self.head[2] else layer(x)
        return self.readout(x), new_self

    def call(self, spectra):
        ops = keras.ops
        memory = self.encoder(spectra, training=False)
        batch = ops.shape(spectra)[0]
        cross_caches = self.cross_caches(memory)
        start = ops.zeros((batch, 1, self.notes), "float32")
        logits = ops.zeros((batch, self.steps, self.notes), "float32")

        def body(index, state):
            logits, previous, self_caches = state
            step, self_caches = self.step(
                previous, index, memory, self_caches, cross_caches
            )
            step = ops.cast(step, "float32")
            logits = ops.slice_update(logits, [0, index, 0], step)
            if self.feedback == "notes":
                step = ops.cast(ops.greater(step, self.cut), "float32")
            return logits, step, list(self_caches)

        logits, _, _ = ops.fori_loop(
            0,
            self.steps,
            body,
            (logits, start, self.empty_self_caches(batch)),
        )
        return logits


def feedback_inputs(logits, feedback="logits", threshold=0.5):
    """What `generate(feedback=...)` feeds the decoder, for every frame at
    once: the previous-notes input of a decoder pass run on the outputs of
    the last one.

    The logits `(B, T, notes)` of frames `0 .. T-1` become the previous
    notes of frames `1 .. T` (shifted right one frame with a zero start
    token, as `shift_right`): the raw logits with `feedback="logits"`,
    or the notes whose probability is above `threshold` (1.0, else 0.0)
    with `feedback="notes"`, thresholded exactly as `generate` does. No
    gradient flows through them (`keras.ops.stop_gradient`): what is fed
    back is an input, as in `generate`. `keras.ops` only, so it runs in a
    model's `call` on every backend.

    Args:
        logits: `(B, T, notes)`, a tensor or an array.
        feedback: `"logits"` (default, the paper's protocol) or
            `"notes"`, see `generate`.
        threshold: probability above which a note is on
            (`feedback="notes"`).

    Returns:
        `(B, T, notes)` float32 previous notes, a tensor of the backend.

    Example:

    >>> import numpy as np
    >>> logits = np.array([[[2.0, -1.0], [-3.0, 0.5]]], "float32")
    >>> np.asarray(feedback_inputs(logits, "notes")).tolist()
    [[[0.0, 0.0], [1.0, 0.0]]]
    """
    _check_feedback(feedback, threshold)
    ops = keras.ops
    logits = ops.cast(ops.stop_gradient(logits), "float32")
    if len(logits.shape) != 3:
        raise ValueError(
            "`logits` must have shape (batch, frames, notes). Received: "
            f"logits.shape={tuple(logits.shape)}"
        )
    if feedback == "notes":
        cut = _float32_cut(np.log(threshold / (1 - threshold)))
        logits = ops.cast(ops.greater(logits, cut), "float32")
    start = ops.zeros_like(logits[:, :1])
    return ops.concatenate([start, logits[:, :-1]], axis=1)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class FeedbackTraining(keras.Model):
    """Trains a `music_generator` the way `generate` decodes it: on its
    own fed-back outputs, not only on the true previous notes.

    A generator trained with teacher forcing alone sees the true previous
    notes at every frame, and learns mostly to carry them on (at 31
    frames per second, 99% of a frame's notes are the previous frame's);
    decoding from its own outputs, it has none of them. This model runs
    the generator's decoder `passes` times (Mihaylova and Martins' two-pass
    scheduled sampling for transformers, unrolled):

    1. on the given `previous_notes` (teacher forcing's `shift_right` of
       the labels; zeros to start from the start token alone);
    2. then each pass on the last one's outputs as `generate(feedback=...)`
       feeds them back (`feedback_inputs`: the logits, or the notes above
       `threshold`, shifted right one frame; no gradient through them).
       While training, each frame of those inputs is the given
       `previous_notes`' frame instead with probability `teacher_rate`.

    It returns the last pass's logits, which the loss compares with the
    labels. The encoder runs once per call; the passes share it and every
    weight (those of `generator`, which stays a plain generator for
    `generate`, saving and export). The decoder is causal, so pass `k`
    computes frames `0 .. k-1` exactly as greedy decoding does (the frame
    `k - 1` from decoded frames only): at inference with
    `teacher_rate=0`, `passes = target_frames` gives `generate`'s logits
    (`cache=False`) whatever the given previous notes past frame 0.
    Each pass costs about one decoder run.

    `source_notes=True` adds a transcription of the source frames from the
    encoder's output (a `Dense` over its stacked channels, a layer of this
    model, not of the generator): the outputs become a dict, `"notes"`
    (the last pass's logits) and `"source_notes"` `(B, source_frames,
    notes)` logits, to be trained on the source frames' labels. Without
    it, the encoder learns only what reaches the decoder through the
    cross-attention, and at a small budget learns little: the generator
    then decodes its first frame barely better than each note's frequency.

    Inputs: `[source, previous_notes]`, the generator's (a list), or a dict
    by its input names (`"spectra"` or `"waveform"`, `"previous_notes"`).

    Args:
        generator: a `music_generator` model (also one loaded from a
            `.keras` file), or a real-valued generator with its layer names
            and inputs (without `notes_as_complex` and `head_notes`; its
            `decoder_{i}` layers called as `decoder(x, memory)`).
        passes: decoder passes, 1 (teacher forcing alone) to the
            generator's `target_frames`. Default 2.
        feedback: `"logits"` (default, the paper's protocol) or `"notes"`:
            what is fed back, as `generate`'s `feedback`.
        teacher_rate: while training, the probability in `[0, 1)` that a
            frame of a later pass's previous notes is the given one (the
            true previous notes) rather than fed back. Default 0.
        threshold: probability above which a note is on
            (`feedback="notes"`).
        source_notes: also output the source frames' transcription (see
            above). Default False.
        seed: the seed of the `teacher_rate` draws (an int, or None).
        **kwargs: base `keras.Model` arguments (`name`).

    Example:

    >>> import numpy as np
    >>> from cvattn_keras.models import music_generator
    >>> generator = music_generator(
    ...     source_frames=4, target_frames=3, bins=8, notes=2, embed_dim=4,
    ...     num_heads=1, num_layers=1, head_dim=4, frontend_filters=(2,),
    ...     frontend_kernel_sizes=(3,))
    >>> model = FeedbackTraining(generator, passes=2)
    >>> labels = np.zeros((5, 3, 2), "float32")
    >>> logits = model([np.ones((5, 4, 16), "float32"), shift_right(labels)])
    >>> tuple(logits.shape)
    (5, 3, 2)

    Compiled with a loss on logits (`BinaryCrossentropy(from_logits=True)`)
    and fitted on `[source, shift_right(labels)]` and `labels`, it trains
    `generator`, which `generate` then decodes.
    """

    def __init__(
        self,
        generator,
        passes=2,
        feedback="logits",
        teacher_rate=0.0,
        threshold=0.5,
        source_notes=False,
        seed=None,
        **kwargs,
    ):
        if not isinstance(generator, keras.Model) or len(generator.inputs) != 2:
            raise ValueError(
                "`generator` must be a `music_generator` model, with inputs "
                "(source, previous_notes). Received: generator="
                f"{generator!r}"
            )
        decoders = _decoder_layers(generator)
        target_frames = generator.inputs[1].shape[1]
        if not check._is_int(passes) or not 1 <= passes <= target_frames:
            raise ValueError(
                f"`passes` must be an integer in [1, {target_frames}] (the "
                f"generator's target_frames). Received: passes={passes!r}"
            )
        _check_feedback(feedback, threshold)
        teacher_rate = check.rate(teacher_rate, "teacher_rate")
        source_notes = check.boolean(source_notes, "source_notes")
        seed = check.seed(seed)
        kwargs.setdefault("name", f"{generator.name}_feedback_training")
        super().__init__(**kwargs)
        self.generator = generator
        self.passes = int(passes)
        self.feedback = feedback
        self.teacher_rate = teacher_rate
        self.threshold = float(threshold)
        self.source_notes = source_notes
        self.seed = seed
        # The encoder: a view of the generator's graph (source -> the
        # decoders' second input), sharing its layers. The decoder is its
        # layers by name, called in `decode` (a view from the encoder's
        # output would add nodes to the generator's graph, which then
        # fails to serialise).
        memory = decoders[0].input[1]
        self.encoder = keras.Model(generator.inputs[0], memory, name="encoder")
        self.decoders = decoders
        # A real generator (no complex parts) has no `notes_as_complex`
        # and no `head_notes`: only the layers it has are called.
        names = {layer.name for layer in generator.layers}
        self.embedding = [
            generator.get_layer(name)
            for name in (
                "notes_as_complex",
                "note_embedding",
                "target_positions",
            )
            if name != "notes_as_complex" or name in names
        ]
        self.head = [
            generator.get_layer(name)
            for name in _HEAD_LAYERS + ("note_logits",)
            if name != "head_notes" or name in names
        ]
        self.source_head = None
        if source_notes:
            self.source_head = keras.layers.Dense(
                generator.outputs[0].shape[-1], name="source_notes"
            )
            self.source_head.build(memory.shape)
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.built = True

    def _split(self, inputs):
        """`(source, previous_notes)` of a list or a dict of inputs."""
        names = [tensor.name for tensor in self.generator.inputs]
        if isinstance(inputs, dict) and set(inputs) == set(names):
            return inputs[names[0]], inputs[names[1]]
        if isinstance(inputs, (list, tuple)) and len(inputs) == 2:
            return tuple(inputs)
        keys = ""
        if isinstance(inputs, dict):
            keys = f" with keys {sorted(inputs)}"
        raise ValueError(
            f"{type(self).__name__} takes [source, previous_notes], or a "
            f"dict with the keys {names}. Received: inputs of type "
            f"{type(inputs).__name__}{keys}"
        )

    def pass_inputs(self, logits, previous_notes, training=False):
        """The previous notes of the pass after the one that gave `logits`:
        `feedback_inputs(logits)`, and while training with `teacher_rate`,
        each `(example, frame)` of `previous_notes` instead with that
        probability."""
        ops = keras.ops
        fed = feedback_inputs(logits, self.feedback, self.threshold)
        if not training or self.teacher_rate == 0:
            return fed
        shape = ops.shape(fed)
        teacher = ops.less(
            keras.random.uniform(
                (shape[0], shape[1], 1), seed=self.seed_generator
            ),
            self.teacher_rate,
        )
        return ops.where(teacher, ops.cast(previous_notes, fed.dtype), fed)

    def decode(self, memory, previous_notes, training=None):
        """The generator's decoder: logits `(B, target_frames, notes)` from
        the encoder's output `memory` and the previous notes, every frame
        at once (causal), as the generator computes them."""
        x = previous_notes
        for layer in self.embedding:
            x = layer(x)
        for decoder in self.decoders:
            x = decoder(x, memory, training=training)
        for layer in self.head:
            # Only the head's dropout takes `training`.
            x = (
                layer(x, training=training)
                if layer.name == "head_dropout"
                else layer(x)
            )
        return x

    def call(self, inputs, training=None):
        source, previous = self._split(inputs)
        memory = self.encoder(source, training=training)
        logits = self.decode(memory, previous, training=training)
        for _ in range(self.passes - 1):
            fed = self.pass_inputs(logits, previous, training=training)
            logits = self.decode(memory, fed, training=training)
        if self.source_head is None:
            return logits
        return {"notes": logits, "source_notes": self.source_head(memory)}

    def get_config(self):
        return {
            "generator": keras.saving.serialize_keras_object(self.generator),
            "passes": self.passes,
            "feedback": self.feedback,
            "teacher_rate": self.teacher_rate,
            "threshold": self.threshold,
            "source_notes": self.source_notes,
            "seed": self.seed,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        generator = keras.saving.deserialize_keras_object(
            config.pop("generator")
        )
        return cls(generator, **config)
