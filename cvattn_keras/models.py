"""Builders for the paper's MusicNet models and a real-valued baseline.

Eilers & Jiang (2023, §4) transcribe music from complex STFT frames:

- `music_classifier`: predict the notes of every frame of a sequence;
- `music_generator`: read the first frames and decode the notes of the
  following ones autoregressively (an encoder-decoder), with `generate`;
- `real_music_classifier`: the same architecture on real channels, with
  `keras.layers.MultiHeadAttention`, of comparable size.

Sizes are arguments; the defaults are the paper's: E = 320 complex
features, 8 heads, 6 layers (6 + 6 for generation), 2048 frequency bins,
128 notes, attention dropout 0.1, a 2048-wide head.

Parameter counts of the defaults (Keras counts real numbers: a complex
weight is two):

| part                               | classifier  | generator   |
| ---------------------------------- | ----------- | ----------- |
| front end: Conv1D(2048 -> 320, k=3) | 3,932,800   | 3,932,800   |
| front-end BatchNorm (1,600 moving)  | 3,200       | 3,200       |
| embedding ComplexDense(320)         | 205,440     | 205,440     |
| 6 encoder layers                    | 7,415,040   | 7,415,040   |
| note embedding ComplexDense(320)    |             | 82,560      |
| 6 decoder layers                    |             | 12,355,200  |
| head 320 -> 2048 -> 128, Linear(2->1) | 1,839,363 | 1,839,363   |
| total                               | 13,395,843  | 25,833,603  |

The reference reports 14,421,347 and 26,853,347 (PyTorch's count). The
attention, feed-forward, norm and head blocks follow its formulas (a
ComplexLinear(in, out) holds 2 in out + 2 out reals); both totals differ by
about 1.02 M, i.e. in the part the two models share, the front end, whose
exact configuration (kernel size, channels) reference-semantics.md does not
record. `conv_kernel_size` and `embed_dim` change it.
"""

import keras
import numpy as np

from cvattn_keras import layers as cl

__all__ = [
    "generate",
    "music_classifier",
    "music_generator",
    "real_music_classifier",
    "shift_right",
]


def _encode(
    inputs,
    embed_dim,
    kernel_size,
    num_layers,
    batch_norm_synchronized=False,
    **encoder_args,
):
    """Complex Conv1D over frames + BatchNorm + activation, a ComplexDense
    embedding, the sinusoidal positions, then `num_layers` encoder layers."""
    x = cl.ComplexConv1D(
        embed_dim, kernel_size, padding="same", name="frontend_conv"
    )(inputs)
    x = cl.ComplexBatchNormalization(
        synchronized=batch_norm_synchronized, name="frontend_norm"
    )(x)
    x = cl.ComplexActivation("split_leaky_relu", name="frontend_act")(x)
    x = cl.ComplexDense(embed_dim, name="embedding")(x)
    x = cl.SinusoidalPositionalEncoding(name="positions")(x)
    for i in range(num_layers):
        x = cl.ComplexTransformerEncoder(name=f"encoder_{i}", **encoder_args)(x)
    return x


def _head(x, head_dim, notes, dropout, prefix=""):
    """ComplexDense -> activation -> dropout -> ComplexDense(notes) -> one
    shared real Linear(2 -> 1) over (Re, Im): real note logits."""
    x = cl.ComplexDense(head_dim, name=f"{prefix}head_dense")(x)
    x = cl.ComplexActivation("split_leaky_relu", name=f"{prefix}head_act")(x)
    x = cl.ComplexDropout(dropout, name=f"{prefix}head_dropout")(x)
    x = cl.ComplexDense(notes, name=f"{prefix}head_notes")(x)
    return cl.RealReadout(name=f"{prefix}note_logits")(x)


def music_classifier(
    frames=64,
    bins=2048,
    notes=128,
    embed_dim=320,
    num_heads=8,
    num_layers=6,
    intermediate_dim=None,
    head_dim=2048,
    softmax="real",
    product="inner",
    dropout=0.1,
    conv_kernel_size=3,
    batch_norm_synchronized=False,
    name="music_classifier",
):
    """The paper's classification model: note logits for every frame.

    `(B, frames, 2 * bins)` stacked spectra -> complex Conv1D (over frames)
    + BatchNorm + activation -> ComplexDense embedding -> sinusoidal
    positions -> `num_layers` `ComplexTransformerEncoder` -> head
    (ComplexDense(head_dim) -> activation -> dropout -> ComplexDense(notes)
    -> shared real Linear(2 -> 1)) -> `(B, frames, notes)` logits, to train
    with `binary_crossentropy(from_logits=True)`.

    Args:
        frames: sequence length, or None for any.
        bins, notes: input frequency bins and output notes.
        embed_dim, num_heads, num_layers, intermediate_dim: the encoder
            (`intermediate_dim` defaults to `embed_dim`, the reference's).
        head_dim: complex width of the head.
        softmax, product: the attention variant of every layer.
        dropout: attention dropout and head dropout (the paper: 0.1).
        conv_kernel_size: the front-end convolution's width in frames.
        batch_norm_synchronized: the front-end
            `ComplexBatchNormalization`'s `synchronized`: batch statistics
            over all replicas under a `tf.distribute` strategy (saved with
            the model; a no-op elsewhere).
        name: the model's name.

    Returns:
        An uncompiled `keras.Model`.
    """
    inputs = keras.Input((frames, 2 * bins), name="spectra")
    x = _encode(
        inputs,
        embed_dim,
        conv_kernel_size,
        num_layers,
        batch_norm_synchronized,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        softmax=softmax,
        product=product,
        attention_dropout=dropout,
    )
    return keras.Model(inputs, _head(x, head_dim, notes, dropout), name=name)


def music_generator(
    source_frames=43,
    target_frames=21,
    bins=2048,
    notes=128,
    embed_dim=320,
    num_heads=8,
    num_layers=6,
    intermediate_dim=None,
    head_dim=2048,
    softmax="real",
    product="inner",
    dropout=0.1,
    conv_kernel_size=3,
    batch_norm_synchronized=False,
    name="music_generator",
):
    """The paper's sequence-generation model (encoder-decoder).

    Inputs: `spectra` `(B, source_frames, 2 * bins)` (frames 0-42 of a
    64-frame sample) and `previous_notes` `(B, target_frames, notes)`: the
    target labels shifted right by one frame with a zero start token (see
    `shift_right`; at inference `generate` fills them in). The encoder is
    `music_classifier`'s front end and `num_layers` encoder layers; the
    decoder embeds the previous notes (as complex numbers with zero
    imaginary part) with a ComplexDense, adds positions, and runs
    `num_layers` causal `ComplexTransformerDecoder` layers attending to the
    encoder. Output: `(B, target_frames, notes)` logits.
    `batch_norm_synchronized` is as in `music_classifier`; the other
    arguments too.

    Returns:
        An uncompiled `keras.Model`.
    """
    spectra = keras.Input((source_frames, 2 * bins), name="spectra")
    previous = keras.Input((target_frames, notes), name="previous_notes")
    layer_args = dict(
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        softmax=softmax,
        product=product,
        attention_dropout=dropout,
    )
    memory = _encode(
        spectra,
        embed_dim,
        conv_kernel_size,
        num_layers,
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
    return keras.Model([spectra, previous], logits, name=name)


def shift_right(labels):
    """Teacher forcing: `(B, T, notes)` labels -> the decoder's previous
    notes, shifted right one frame with a zero start token."""
    labels = np.asarray(labels, np.float32)
    start = np.zeros_like(labels[:, :1])
    return np.concatenate([start, labels[:, :-1]], axis=1)


def generate(model, spectra, threshold=0.5, steps=None):
    """Greedy autoregressive decoding with a `music_generator` model (also
    one loaded from a `.keras` file).

    Frame `t`'s notes are the logits at `t` above `logit(threshold)`, given
    the notes decoded at frames `< t`; they are fed back as the previous
    notes of frame `t + 1`.

    Args:
        model: a model with inputs `(spectra, previous_notes)`.
        spectra: `(B, source_frames, 2 * bins)`.
        threshold: probability above which a note is on.
        steps: frames to decode (default: all `target_frames`).

    Returns:
        `(notes, logits)`: the decoded multi-hot notes and their logits,
        each `(B, steps, notes)`.
    """
    if not 0 < threshold < 1:
        raise ValueError(
            f"`threshold` must be in (0, 1). Received: threshold={threshold}"
        )
    spectra = np.asarray(spectra, np.float32)
    _, target_frames, notes = model.inputs[1].shape
    steps = target_frames if steps is None else steps
    if not 1 <= steps <= target_frames:
        raise ValueError(
            f"`steps` must be in [1, {target_frames}]. Received: steps={steps}"
        )
    batch = spectra.shape[0]
    previous = np.zeros((batch, target_frames, notes), np.float32)
    decoded = np.zeros((batch, steps, notes), np.float32)
    logits = np.zeros((batch, steps, notes), np.float32)
    cut = np.log(threshold / (1 - threshold))
    for t in range(steps):
        # The decoder is causal: logits at t see previous[:, :t + 1] only.
        step = keras.ops.convert_to_numpy(
            model([spectra, previous], training=False)
        )[:, t]
        logits[:, t] = step
        decoded[:, t] = step > cut
        if t + 1 < target_frames:
            previous[:, t + 1] = decoded[:, t]
    return decoded, logits


def real_music_classifier(
    frames=64,
    bins=2048,
    notes=128,
    embed_dim=456,
    num_heads=8,
    num_layers=6,
    intermediate_dim=None,
    head_dim=2896,
    dropout=0.1,
    conv_kernel_size=3,
    name="real_music_classifier",
):
    """A real-valued baseline of `music_classifier`'s architecture.

    The same stacked input read as `2 * bins` real channels; Conv1D +
    BatchNorm + LeakyReLU, a Dense embedding, the sinusoidal positions
    (added to the first half of the channels), post-norm encoder layers of
    `keras.layers.MultiHeadAttention` + LayerNormalization + a Dense
    feed-forward network, and a Dense head to `notes` logits. A complex
    weight holds two reals, so widths `sqrt(2)` times the complex model's
    (456 for 320, 2896 for 2048) give a comparable parameter count.

    Returns:
        An uncompiled `keras.Model`.
    """
    layers = keras.layers
    inputs = keras.Input((frames, 2 * bins), name="spectra")
    x = layers.Conv1D(
        embed_dim, conv_kernel_size, padding="same", name="frontend_conv"
    )(inputs)
    x = layers.BatchNormalization(name="frontend_norm")(x)
    x = layers.LeakyReLU(0.01, name="frontend_act")(x)
    x = layers.Dense(embed_dim, name="embedding")(x)
    x = cl.SinusoidalPositionalEncoding(name="positions")(x)
    for i in range(num_layers):
        attention = layers.MultiHeadAttention(
            num_heads,
            embed_dim // num_heads,
            dropout=dropout,
            name=f"encoder_{i}_attention",
        )(x, x)
        x = layers.LayerNormalization(name=f"encoder_{i}_norm_1")(
            layers.Add()([x, attention])
        )
        h = layers.Dense(intermediate_dim or embed_dim, name=f"encoder_{i}_in")(
            x
        )
        h = layers.LeakyReLU(0.01)(h)
        h = layers.Dense(embed_dim, name=f"encoder_{i}_out")(h)
        x = layers.LayerNormalization(name=f"encoder_{i}_norm_2")(
            layers.Add()([x, h])
        )
    x = layers.Dense(head_dim, name="head_dense")(x)
    x = layers.LeakyReLU(0.01, name="head_act")(x)
    x = layers.Dropout(dropout, name="head_dropout")(x)
    logits = layers.Dense(notes, name="note_logits")(x)
    return keras.Model(inputs, logits, name=name)
