"""Autoregressive decoding with `music_generator` models: `generate`
(the paper's protocol, feeding back notes or logits, with or without a
decoding cache) and `shift_right` (teacher forcing's inputs)."""

import weakref

import keras
import numpy as np

from cvattn_keras import _validation as check

__all__ = ["FEEDBACKS", "generate", "shift_right"]


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
            every call, before a kept compiled loop runs.
    """
    if feedback not in FEEDBACKS:
        raise ValueError(
            f"`feedback` must be one of {list(FEEDBACKS)}. "
            f"Received: feedback={feedback!r}"
        )
    if not check._is_real(threshold) or not 0 < threshold < 1:
        raise ValueError(
            f"`threshold` must be in (0, 1). Received: threshold={threshold!r}"
        )
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
