"""Builders for the paper's MusicNet models and a real-valued baseline.

Eilers & Jiang (2023, §4) transcribe music from complex STFT frames:

- `music_classifier`: predict the notes of every frame of a sequence;
- `music_generator`: read the first frames and decode the notes of the
  following ones autoregressively (an encoder-decoder), with `generate`;
- `real_music_classifier`: the same architecture on real channels, with
  `keras.layers.MultiHeadAttention`, of comparable size.

Sizes are arguments; the defaults are the paper's, read from its code
(`attention/transformer.py` of the reference): the front end of
`ComplexFrequencyFrontEnd` (five complex convolutions over the 2048
frequency bins of each frame, 7,936 complex features per frame), E = 320
complex features, 8 heads, 6 layers (6 + 6 for generation), 128 notes, a
2048-wide head, dropout 0.1 on the attention weights, after the
feed-forward activation and in the head.

Parameter counts of the defaults, trainable (Keras counts real numbers: a
complex weight is two), equal to the reference's:

| part                                   | classifier  | generator   |
| -------------------------------------- | ----------- | ----------- |
| front-end convolutions                 | 89,888      | 89,888      |
| front-end batch norms                  | 1,520       | 1,520       |
| embedding ComplexDense(7936 -> 320)    | 5,079,680   | 5,079,680   |
| 6 encoder layers                       | 7,415,040   | 7,415,040   |
| note embedding ComplexDense(128 -> 320) |            | 82,560      |
| 6 decoder layers                       |             | 12,355,200  |
| head 320 -> 2048 -> 128, Linear(2->1)  | 1,839,363   | 1,839,363   |
| total                                  | 14,425,491  | 26,863,251  |

The batch norms' moving statistics (6 per channel, 1,824 numbers) are
non-trainable weights on top. PyTorch's `numel` reports 14,421,347 and
26,853,347 for the reference: it counts each of its complex-dtype norm
parameters once.
"""

import weakref

import keras
import numpy as np

from cvattn_keras import _validation as check
from cvattn_keras import layers as cl
from cvattn_keras.layers import transformer as _transformer
from cvattn_keras.layers.stft import as_stft

__all__ = [
    "FEEDBACKS",
    "FRONTEND_FILTERS",
    "FRONTEND_KERNEL_SIZES",
    "generate",
    "music_classifier",
    "music_generator",
    "real_music_classifier",
    "shift_right",
    "waveform_length",
]


# The paper's frequency bins, when neither `bins` nor `stft` says.
_PAPER_BINS = 2048


def _stft_layer(stft):
    """`stft` as a `ComplexSTFT`, or `None`."""
    return None if stft is None else as_stft(stft)


def _inputs(frames, bins, stft, name):
    """The model's input and the spectra `(B, frames, 2 * bins)` that it
    gives: the input itself, or a waveform input and its `stft`."""
    stft = _stft_layer(stft)
    if stft is None:
        bins = _PAPER_BINS if bins is None else check.positive_int(bins, "bins")
        spectra = keras.Input((frames, 2 * bins), name=name)
        return spectra, spectra
    if bins is not None and bins != stft.num_bins:
        raise ValueError(
            f"`bins` must be None or the STFT's {stft.num_bins} bins "
            f"(bins={stft.bins} of fft_length={stft.fft_length}): the "
            f"model's spectra are the STFT's. Received: bins={bins!r}"
        )
    samples = None
    if frames is not None:
        frames = check.positive_int(frames, "frames")
        samples = waveform_length(stft, frames)
    waveform = keras.Input((samples,), name="waveform")
    return waveform, stft(waveform)


def waveform_length(stft, frames):
    """The fewest samples of which `stft` (a `ComplexSTFT`) makes `frames`
    frames: the input length of a waveform model of `frames` frames.
    `(frames - 1) * frame_step` for a centred STFT of even `fft_length`,
    `fft_length + (frames - 1) * frame_step` without centring. A
    `ValueError` when that is too short for `pad_mode="reflect"`."""
    stft = _stft_layer(stft)
    frames = check.positive_int(frames, "frames")
    span = (frames - 1) * stft.frame_step
    if not stft.center:
        return span + stft.fft_length
    length = max(1, span + stft.fft_length - 2 * (stft.fft_length // 2))
    if stft.pad_mode == "reflect" and length <= stft.fft_length // 2:
        raise ValueError(
            "A centred STFT with pad_mode='reflect' needs waveforms longer "
            f"than fft_length // 2 = {stft.fft_length // 2} samples, which "
            f"make more than `frames` frames: ask for more frames, or use "
            f"pad_mode='constant'. Received: frames={frames}"
        )
    return length


FRONTEND_FILTERS = (16, 32, 64, 64, 128)
"""The reference's front end (`Transformer_Pred.conv`): the complex
channels of its blocks.
"""
FRONTEND_KERNEL_SIZES = (6, 3, 3, 3, 3)
"""The reference's front end: the kernel widths of its blocks."""


def _frontend(filters, kernel_sizes, strides):
    """The front-end arguments, checked under the builders' names."""
    filters = check.positive_ints(filters, "frontend_filters")
    return (
        filters,
        check.positive_ints(
            kernel_sizes, "frontend_kernel_sizes", len(filters)
        ),
        check.positive_ints(strides, "frontend_strides", len(filters)),
    )


def _encode(
    inputs,
    embed_dim,
    num_layers,
    frontend,
    batch_norm_synchronized=False,
    no_positions=False,
    **encoder_args,
):
    """The frequency front end, a ComplexDense embedding, the sinusoidal
    positions (unless the encoders rotate, or `no_positions`), then
    `num_layers` encoder layers."""
    filters, kernel_sizes, strides = frontend
    x = cl.ComplexFrequencyFrontEnd(
        filters,
        kernel_sizes,
        strides,
        synchronized=batch_norm_synchronized,
        name="frontend",
    )(inputs)
    x = cl.ComplexDense(embed_dim, name="embedding")(x)
    if encoder_args.get("rotary_max_wavelength") is None and not no_positions:
        x = cl.SinusoidalPositionalEncoding(name="positions")(x)
    for i in range(num_layers):
        x = cl.ComplexTransformerEncoder(name=f"encoder_{i}", **encoder_args)(x)
    return x


def _head(x, head_dim, notes, dropout):
    """ComplexDense -> activation -> dropout -> ComplexDense(notes) -> one
    shared real Linear(2 -> 1) over (Re, Im): real note logits."""
    x = cl.ComplexDense(head_dim, name="head_dense")(x)
    x = cl.ComplexActivation("split_leaky_relu", name="head_act")(x)
    x = cl.ComplexDropout(dropout, name="head_dropout")(x)
    x = cl.ComplexDense(notes, name="head_notes")(x)
    return cl.RealReadout(name="note_logits")(x)


def music_classifier(
    frames=64,
    bins=None,
    notes=128,
    embed_dim=320,
    num_heads=8,
    num_layers=6,
    intermediate_dim=None,
    head_dim=2048,
    softmax="real",
    product="inner",
    dropout=0.1,
    feedforward_dropout=0.1,
    frontend_filters=FRONTEND_FILTERS,
    frontend_kernel_sizes=FRONTEND_KERNEL_SIZES,
    frontend_strides=2,
    batch_norm_synchronized=False,
    layer_norm_epsilon=1e-5,
    stft=None,
    sliding_window=None,
    positions="auto",
    name="music_classifier",
):
    """The paper's classification model (the reference's
    `Transformer_Pred`): note logits for every frame.

    `(B, frames, 2 * bins)` stacked spectra (or a waveform through `stft`,
    the first layer) -> `ComplexFrequencyFrontEnd`
    (complex convolutions over the bins of each frame, flattened) ->
    ComplexDense embedding -> sinusoidal positions -> `num_layers`
    `ComplexTransformerEncoder` -> head (ComplexDense(head_dim) ->
    activation -> dropout -> ComplexDense(notes) -> shared real
    Linear(2 -> 1)) -> `(B, frames, notes)` logits, to train with
    `binary_crossentropy(from_logits=True)`.

    Layer names (an API: `cvattn_keras.interop` maps the reference's
    weights onto them): `frontend`, `embedding`, `positions`,
    `encoder_{i}`, `head_dense`, `head_act`, `head_dropout`, `head_notes`,
    `note_logits`, and `stft` first in a waveform model (built from a
    config; an instance keeps its own name).

    Args:
        frames: sequence length, or None for any.
        bins: the input's frequency bins (`None`: 2048, the paper's; the
            STFT's bins when `stft` is given, and an error if they
            differ).
        notes: the output notes.
        embed_dim: the encoder's complex width (the embedding's).
        num_heads: the attention heads of every encoder layer.
        num_layers: the number of encoder layers.
        intermediate_dim: the feed-forward width of every encoder layer.
            Defaults to `embed_dim`, the reference's.
        head_dim: complex width of the head.
        softmax: the attention variant of every layer: its softmax (see
            `layers.ComplexMultiHeadAttention`).
        product: the attention variant of every layer: its product (see
            `layers.ComplexMultiHeadAttention`).
        dropout: the attention weights' and the head's dropout (the
            paper: 0.1).
        feedforward_dropout: after the activation inside every encoder and
            decoder layer (the reference's `relu_dropout`, 0.1).
        frontend_filters: the `ComplexFrequencyFrontEnd` blocks'
            `filters` (the reference's defaults; fewer or narrower blocks
            for small inputs).
        frontend_kernel_sizes: the front end's `kernel_sizes`.
        frontend_strides: the front end's `strides`.
        batch_norm_synchronized: the front end's batch norms'
            `synchronized`: batch statistics over all replicas under a
            `tf.distribute` strategy (saved with the model; a no-op
            elsewhere).
        layer_norm_epsilon: the epsilon of every layer norm (default
            1e-5: finite gradients near constant tokens, for training). 0
            is the reference's arithmetic, for an exact port of its
            weights (`cvattn_keras.interop`): outputs differ by about
            `epsilon / variance` otherwise, most of the difference between
            a ported model and the reference. NaN-safe either way (see
            `ComplexLayerNormalization`).
        stft: `None` (default: the model takes spectra), or a
            `cvattn_keras.layers.ComplexSTFT` (or the dict of its
            `get_config()`): the model takes the waveform `(B, samples)`
            (input `waveform`) and the STFT is its first layer, saved in
            the `.keras` file and exported with the model. An instance is
            used as given (two models built with one instance share it:
            with `trainable=True`, one kernel for both); a config builds a
            new layer. `samples` is the fewest that give
            `frames` frames (`waveform_length(stft, frames)`: `(frames -
            1) * frame_step` centred with an even `fft_length`), `None`
            for `frames=None`. The front end slides over the STFT's bins
            as over spectra; `cvattn_keras.interop` loads reference
            checkpoints into such a model (the STFT has no reference
            weights: it keeps its own).
        sliding_window: `None` (default: every frame attends to every
            other, the paper's) or a positive int `W`: every encoder's
            self-attention is causal and sees the last `W` frames only
            (`ComplexTransformerEncoder(sliding_window=W)`), so that the
            model streams frame by frame
            (`cvattn_keras.streaming.to_streaming`; with `stft`, a
            `ComplexSTFT(center=False)`).
        positions: how the encoders know the frames' order: `"auto"`
            (default: `"sinusoidal"` without `sliding_window`, `"rotary"`
            with), `"sinusoidal"` (the paper's: absolute positions added
            after the embedding, layer `positions`), `"rotary"` (relative
            positions: `rotary_max_wavelength=10000` in every attention;
            the only kind a stream can keep bounded for hours, with
            `product="inner"`) or `"none"`.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model`.
    """
    layer_norm_epsilon = _transformer._check_layer_norm_epsilon(
        layer_norm_epsilon, "whitening"
    )
    sliding_window = check.positive_int(
        sliding_window, "sliding_window", allow_none=True
    )
    positions = _positions(positions, sliding_window)
    inputs, spectra = _inputs(frames, bins, stft, "spectra")
    x = _encode(
        spectra,
        embed_dim,
        num_layers,
        _frontend(frontend_filters, frontend_kernel_sizes, frontend_strides),
        batch_norm_synchronized,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        softmax=softmax,
        product=product,
        attention_dropout=dropout,
        dropout=feedforward_dropout,
        layer_norm_epsilon=layer_norm_epsilon,
        sliding_window=sliding_window,
        no_positions=positions == "none",
        rotary_max_wavelength=10000 if positions == "rotary" else None,
    )
    return keras.Model(inputs, _head(x, head_dim, notes, dropout), name=name)


_POSITIONS = ("auto", "sinusoidal", "rotary", "none")


def _positions(positions, sliding_window):
    """`positions` resolved (`"auto"`: rotary with a sliding window)."""
    if positions not in _POSITIONS:
        raise ValueError(
            f"`positions` must be one of {list(_POSITIONS)}. Received: "
            f"positions={positions!r}"
        )
    if positions == "auto":
        return "sinusoidal" if sliding_window is None else "rotary"
    return positions


def music_generator(
    source_frames=43,
    target_frames=21,
    bins=None,
    notes=128,
    embed_dim=320,
    num_heads=8,
    num_layers=6,
    intermediate_dim=None,
    head_dim=2048,
    softmax="real",
    product="inner",
    dropout=0.1,
    feedforward_dropout=0.1,
    frontend_filters=FRONTEND_FILTERS,
    frontend_kernel_sizes=FRONTEND_KERNEL_SIZES,
    frontend_strides=2,
    batch_norm_synchronized=False,
    layer_norm_epsilon=1e-5,
    stft=None,
    name="music_generator",
):
    """The paper's sequence-generation model (the reference's
    `Transformer_Generation`, an encoder-decoder).

    Inputs: `spectra` `(B, source_frames, 2 * bins)` (frames 0-42 of a
    64-frame sample) and `previous_notes` `(B, target_frames, notes)`: the
    target shifted right by one frame with a zero start token (see
    `shift_right`; at inference `generate` fills it in). The encoder is
    `music_classifier`'s front end and `num_layers` encoder layers; the
    decoder embeds the previous notes (as complex numbers with zero
    imaginary part) with a ComplexDense, adds positions (restarting at 0),
    and runs `num_layers` causal `ComplexTransformerDecoder` layers
    attending to the encoder. Output: `(B, target_frames, notes)` logits.

    Given `stft`, the first input is the waveform of the source frames
    (`waveform`, see `stft` below) in place of the spectra.

    Layer names: `music_classifier`'s, plus `notes_as_complex`,
    `note_embedding`, `target_positions` and `decoder_{i}`.

    Args:
        source_frames: the encoder's length (in frames).
        target_frames: the decoder's length (in frames).
        bins: the input's frequency bins (`None`: 2048, the paper's; the
            STFT's bins when `stft` is given, and an error if they
            differ).
        notes: the output notes.
        embed_dim: the complex width of the encoder and the decoder
            (their embeddings').
        num_heads: the attention heads of every encoder and decoder layer.
        num_layers: the number of encoder layers, and of decoder layers.
        intermediate_dim: the feed-forward width of every encoder and
            decoder layer. Defaults to `embed_dim`, the reference's.
        head_dim: complex width of the head.
        softmax: the attention variant of every layer: its softmax (see
            `layers.ComplexMultiHeadAttention`).
        product: the attention variant of every layer: its product (see
            `layers.ComplexMultiHeadAttention`).
        dropout: the attention weights' and the head's dropout (the
            paper: 0.1).
        feedforward_dropout: after the activation inside every encoder and
            decoder layer (the reference's `relu_dropout`, 0.1).
        frontend_filters: the `ComplexFrequencyFrontEnd` blocks'
            `filters` (the reference's defaults; fewer or narrower blocks
            for small inputs).
        frontend_kernel_sizes: the front end's `kernel_sizes`.
        frontend_strides: the front end's `strides`.
        batch_norm_synchronized: the front end's batch norms'
            `synchronized`: batch statistics over all replicas under a
            `tf.distribute` strategy (saved with the model; a no-op
            elsewhere).
        layer_norm_epsilon: the epsilon of every layer norm (default
            1e-5: finite gradients near constant tokens, for training). 0
            is the reference's arithmetic, for an exact port of its
            weights (`cvattn_keras.interop`): outputs differ by about
            `epsilon / variance` otherwise, most of the difference between
            a ported model and the reference. NaN-safe either way (see
            `ComplexLayerNormalization`).
        stft: `None` (default: the model takes spectra), or a
            `cvattn_keras.layers.ComplexSTFT` (or the dict of its
            `get_config()`): the encoder takes the waveform `(B,
            samples)` (input `waveform`, in place of `spectra`) and the
            STFT is its first layer, saved in the `.keras` file and
            exported with the model (a builtin convolution in TFLite).
            `samples` is the fewest that give `source_frames` frames
            (`waveform_length(stft, source_frames)`), `None` for
            `source_frames=None`. `generate` takes the waveform then.
            `cvattn_keras.interop` loads reference checkpoints into such
            a model (the STFT keeps its own weights).
        name: the model's name.

    Returns:
        An uncompiled `keras.Model`.
    """
    layer_norm_epsilon = _transformer._check_layer_norm_epsilon(
        layer_norm_epsilon, "whitening"
    )
    source, spectra = _inputs(source_frames, bins, stft, "spectra")
    previous = keras.Input((target_frames, notes), name="previous_notes")
    layer_args = dict(
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        softmax=softmax,
        product=product,
        attention_dropout=dropout,
        dropout=feedforward_dropout,
        layer_norm_epsilon=layer_norm_epsilon,
    )
    memory = _encode(
        spectra,
        embed_dim,
        num_layers,
        _frontend(frontend_filters, frontend_kernel_sizes, frontend_strides),
        batch_norm_synchronized,
        **layer_args,
    )
    x = cl.ComplexFromReal(name="notes_as_complex")(previous)
    x = cl.ComplexDense(embed_dim, name="note_embedding")(x)
    x = cl.SinusoidalPositionalEncoding(name="target_positions")(x)
    for i in range(num_layers):
        x = cl.ComplexTransformerDecoder(name=f"decoder_{i}", **layer_args)(
            x, memory
        )
    logits = _head(x, head_dim, notes, dropout)
    return keras.Model([source, previous], logits, name=name)


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


def real_music_classifier(
    frames=64,
    bins=None,
    notes=128,
    embed_dim=456,
    num_heads=8,
    num_layers=6,
    intermediate_dim=None,
    head_dim=2896,
    dropout=0.1,
    feedforward_dropout=0.1,
    frontend_filters=(23, 45, 91, 91, 181),
    frontend_kernel_sizes=FRONTEND_KERNEL_SIZES,
    frontend_strides=2,
    layer_norm_epsilon=1e-3,
    stft=None,
    name="real_music_classifier",
):
    """A real-valued baseline of `music_classifier`'s architecture.

    The same stacked input; each frame's bins read as a 2-channel (Re, Im)
    real signal, with real Conv1D (valid, over the bins) + BatchNorm +
    LeakyReLU blocks, flattened per frame; a Dense embedding, the
    sinusoidal positions (added to the first half of the channels),
    post-norm encoder layers of `keras.layers.MultiHeadAttention` +
    LayerNormalization + a Dense feed-forward network with dropout, and a
    Dense head to `notes` logits. A complex weight holds two reals, so
    widths `sqrt(2)` times the complex model's (456 for 320, 2896 for
    2048, front-end channels 23 ... 181 for 16 ... 128) give a comparable
    parameter count.

    `layer_norm_epsilon` is the `keras.layers.LayerNormalization`s'
    epsilon, positive (default 1e-3, Keras'). `bins` and `stft` are
    `music_classifier`'s: given a `ComplexSTFT`, the model takes the
    waveform.

    Returns:
        An uncompiled `keras.Model`.
    """
    layer_norm_epsilon = check.greater_than(
        layer_norm_epsilon, "layer_norm_epsilon"
    )
    layers = keras.layers
    frontend = _frontend(
        frontend_filters, frontend_kernel_sizes, frontend_strides
    )
    inputs, spectra = _inputs(frames, bins, stft, "spectra")
    bins = spectra.shape[-1] // 2
    # (B, T, [Re | Im]) -> (B, T, F, 2): a 2-channel signal per frame.
    x = layers.Reshape((-1, 2, bins), name="frames_as_signals")(spectra)
    x = layers.Permute((1, 3, 2), name="channels_last")(x)
    for i, (channels, kernel, stride) in enumerate(zip(*frontend)):
        x = layers.TimeDistributed(
            layers.Conv1D(channels, kernel, strides=stride),
            name=f"frontend_conv_{i}",
        )(x)
        x = layers.BatchNormalization(name=f"frontend_norm_{i}")(x)
        x = layers.LeakyReLU(0.01, name=f"frontend_act_{i}")(x)
    x = layers.TimeDistributed(layers.Flatten(), name="frontend_flatten")(x)
    x = layers.Dense(embed_dim, name="embedding")(x)
    x = cl.SinusoidalPositionalEncoding(name="positions")(x)
    for i in range(num_layers):
        attention = layers.MultiHeadAttention(
            num_heads,
            embed_dim // num_heads,
            dropout=dropout,
            name=f"encoder_{i}_attention",
        )(x, x)
        x = layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name=f"encoder_{i}_norm_1"
        )(layers.Add()([x, attention]))
        h = layers.Dense(intermediate_dim or embed_dim, name=f"encoder_{i}_in")(
            x
        )
        h = layers.LeakyReLU(0.01)(h)
        h = layers.Dropout(feedforward_dropout)(h)
        h = layers.Dense(embed_dim, name=f"encoder_{i}_out")(h)
        x = layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name=f"encoder_{i}_norm_2"
        )(layers.Add()([x, h]))
    x = layers.Dense(head_dim, name="head_dense")(x)
    x = layers.LeakyReLU(0.01, name="head_act")(x)
    x = layers.Dropout(dropout, name="head_dropout")(x)
    logits = layers.Dense(notes, name="note_logits")(x)
    return keras.Model(inputs, logits, name=name)
