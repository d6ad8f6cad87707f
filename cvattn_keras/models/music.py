"""Builders for the paper's MusicNet models.

Eilers & Jiang (2023, §4) transcribe music from complex STFT frames:

- `music_classifier`: predict the notes of every frame of a sequence;
- `music_generator`: read the first frames and decode the notes of the
  following ones autoregressively (an encoder-decoder), with `generate`;
- their real-valued baselines, `real_music_classifier` and
  `real_music_generator`, are in `models.real_music`.

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

import keras

from cvattn_keras import _validation as check
from cvattn_keras import layers as cl
from cvattn_keras.layers import transformer as _transformer
from cvattn_keras.layers.stft import as_stft

__all__ = [
    "FRONTEND_FILTERS",
    "FRONTEND_KERNEL_SIZES",
    "music_classifier",
    "music_generator",
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
    attention="multi_head",
    attention_options=None,
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
        attention: every encoder's self-attention layer (see
            `layers.ComplexTransformerEncoder`): `"multi_head"` (default,
            the paper's), `"low_rank"`, `"sparse"`, `"lsh"` or
            `"gated_unit"` (docs/attention-alternatives.md).
        attention_options: `None` or a dict of that layer's own
            arguments (e.g. `{"rank": 16, "max_length": 64}`).
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
        attention=attention,
        attention_options=attention_options,
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
