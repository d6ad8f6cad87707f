"""Real-valued baselines of the paper's MusicNet models.

- `real_music_classifier`: `music_classifier`'s architecture on real
  channels, with `keras.layers.MultiHeadAttention`, of comparable size;
  causal over a sliding window with `sliding_window`, as the complex
  model;
- `real_music_generator`: `music_generator`'s encoder-decoder on real
  channels: `real_music_classifier`'s encoder and `RealTransformerDecoder`
  layers, trained by `FeedbackTraining` and decoded by `generate`
  (`cache=False`) as the complex generator is.

A complex weight holds two reals, so the real models are `sqrt(2)` times
as wide as the complex ones (456 for 320, 2896 for 2048, front-end
channels 23 ... 181 for 16 ... 128) for a comparable parameter count.
"""

import keras

from cvattn_keras import _validation as check
from cvattn_keras import layers as cl
from cvattn_keras.models import _real
from cvattn_keras.models.music import FRONTEND_KERNEL_SIZES
from cvattn_keras.models.music import _frontend
from cvattn_keras.models.music import _inputs
from cvattn_keras.models.music import _positions
from cvattn_keras.models.speech import RealRotaryAttention

__all__ = [
    "RealTransformerDecoder",
    "real_music_classifier",
    "real_music_generator",
]

# The real models' widths: sqrt(2) times the complex defaults'.
_REAL_FRONTEND_FILTERS = (23, 45, 91, 91, 181)
# The complex models' rotary positions (`rotary_max_wavelength=10000`).
_ROTARY_MAX_WAVELENGTH = 10000


def _real_encode(
    frames,
    bins,
    stft,
    frontend,
    embed_dim,
    num_heads,
    num_layers,
    intermediate_dim,
    dropout,
    feedforward_dropout,
    layer_norm_epsilon,
    sliding_window=None,
    positions="sinusoidal",
):
    """The model's input (`frames`, `bins` and `stft` as `_inputs`'s) and
    the real encoder's output on it: each frame's bins as a 2-channel (Re,
    Im) signal through Conv1D + BatchNorm + LeakyReLU blocks (`frontend`:
    the builder's three front-end arguments, checked here), flattened; a
    Dense embedding, the positions, and `num_layers` post-norm encoder
    layers (`encoder_{i}_attention`, `encoder_{i}_norm_1`,
    `encoder_{i}_in`, `encoder_{i}_out`, `encoder_{i}_norm_2`)."""
    frontend = _frontend(*frontend)
    inputs, spectra = _inputs(frames, bins, stft, "spectra")
    layers = keras.layers
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
    if positions == "sinusoidal":
        x = cl.SinusoidalPositionalEncoding(name="positions")(x)
    attention_args = {}
    attention_class = layers.MultiHeadAttention
    if positions == "rotary":
        attention_class = RealRotaryAttention
        attention_args["rotary_max_wavelength"] = _ROTARY_MAX_WAVELENGTH
    # Causal only with a window: the default graph is the one this builder
    # made before it had `sliding_window` (the same call arguments).
    call_args = {} if sliding_window is None else {"use_causal_mask": True}
    for i in range(num_layers):
        attention = attention_class(
            num_heads,
            embed_dim // num_heads,
            dropout=dropout,
            sliding_window=sliding_window,
            name=f"encoder_{i}_attention",
            **attention_args,
        )
        x = _real.encoder_layer(
            x,
            attention,
            f"encoder_{i}",
            intermediate_dim,
            feedforward_dropout,
            layer_norm_epsilon,
            **call_args,
        )
    return inputs, x


def _real_head(x, head_dim, notes, dropout):
    """Dense(`head_dim`) -> LeakyReLU 0.01 -> dropout -> Dense(`notes`)
    logits: `head_dense`, `head_act`, `head_dropout`, `note_logits` (the
    names `FeedbackTraining` and `generate` call a generator's head by)."""
    layers = keras.layers
    x = layers.Dense(head_dim, name="head_dense")(x)
    x = layers.LeakyReLU(0.01, name="head_act")(x)
    x = layers.Dropout(dropout, name="head_dropout")(x)
    return layers.Dense(notes, name="note_logits")(x)


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
    frontend_filters=_REAL_FRONTEND_FILTERS,
    frontend_kernel_sizes=FRONTEND_KERNEL_SIZES,
    frontend_strides=2,
    layer_norm_epsilon=1e-3,
    stft=None,
    sliding_window=None,
    positions="auto",
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

    Layer names: `frontend_conv_{i}`, `frontend_norm_{i}`,
    `frontend_act_{i}`, `frontend_flatten`, `embedding`, `positions`,
    `encoder_{i}_attention`, `encoder_{i}_norm_1`, `encoder_{i}_in`,
    `encoder_{i}_out`, `encoder_{i}_norm_2`, `head_dense`, `head_act`,
    `head_dropout`, `note_logits` (and `stft` first in a waveform model).

    `layer_norm_epsilon` is the `keras.layers.LayerNormalization`s'
    epsilon, positive (default 1e-3, Keras'). `bins` and `stft` are
    `music_classifier`'s: given a `ComplexSTFT`, the model takes the
    waveform.

    `sliding_window` and `positions` are `music_classifier`'s:

    - `sliding_window=None` (default): every frame attends to every other
      (the model of the defaults, unchanged by these two arguments); a
      positive int `W`: every encoder's attention is
      `keras.layers.MultiHeadAttention(sliding_window=W)` called with
      `use_causal_mask=True`, so that frame `t` sees frames
      `t - W < s <= t` only, the band of
      `ComplexMultiHeadAttention(sliding_window=W)`. (It does not stream
      with `cvattn_keras.streaming.to_streaming`, which converts the
      complex layers; run it over the whole input.)
    - `positions`: `"auto"` (default: `"sinusoidal"` without
      `sliding_window`, `"rotary"` with), `"sinusoidal"` (layer
      `positions` after the embedding), `"rotary"` (no `positions` layer:
      every encoder's attention is a `RealRotaryAttention` with
      `rotary_max_wavelength=10000`, turning its projected queries and
      keys by their positions, as the complex model's rotary attention) or
      `"none"`.

    Returns:
        An uncompiled `keras.Model`.
    """
    layer_norm_epsilon = check.greater_than(
        layer_norm_epsilon, "layer_norm_epsilon"
    )
    sliding_window = check.positive_int(
        sliding_window, "sliding_window", allow_none=True
    )
    positions = _positions(positions, sliding_window)
    inputs, x = _real_encode(
        frames,
        bins,
        stft,
        (frontend_filters, frontend_kernel_sizes, frontend_strides),
        embed_dim,
        num_heads,
        num_layers,
        intermediate_dim,
        dropout,
        feedforward_dropout,
        layer_norm_epsilon,
        sliding_window=sliding_window,
        positions=positions,
    )
    logits = _real_head(x, head_dim, notes, dropout)
    return keras.Model(inputs, logits, name=name)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class RealTransformerDecoder(keras.layers.Layer):
    """A real-valued transformer decoder layer, the counterpart of
    `ComplexTransformerDecoder` as `real_music_classifier`'s encoder layers
    are of the complex encoder's.

    Post-norm, in order: causal self-attention, cross-attention to the
    encoder's output (each a `keras.layers.MultiHeadAttention` of
    `num_heads` heads of `width // num_heads` channels), and a
    feed-forward network (Dense(`intermediate_dim`), LeakyReLU 0.01,
    dropout, Dense(width)), each added back and normalised by a
    `keras.layers.LayerNormalization`. Called as `decoder(x, memory)`:
    `(B, T, width)` and the encoder's output `(B, S, memory width)` ->
    `(B, T, width)`; output frame `t` depends on `x` at frames `<= t` only.

    Sublayers (their names are in the saved weights): `self_attention`,
    `cross_attention`, `norm_1`, `norm_2`, `norm_3` (the list `norms`),
    `feedforward_in`, `feedforward_out`.

    Args:
        num_heads: positive int, the attention heads (at most the width).
        intermediate_dim: the feed-forward width, a positive int; `None`
            (default) for the input's width.
        attention_dropout: dropout rate on both attentions' weights, in
            [0, 1). Default 0.1 (the paper's).
        dropout: dropout rate after the feed-forward activation, in
            [0, 1). Default 0.1.
        layer_norm_epsilon: the layer norms' epsilon, > 0. Default 1e-3
            (Keras').
        **kwargs: base layer arguments (`name`, `dtype`).

    Example:

    >>> import numpy as np
    >>> decoder = RealTransformerDecoder(2)
    >>> x = np.ones((1, 3, 8), "float32")
    >>> memory = np.ones((1, 5, 6), "float32")
    >>> tuple(decoder(x, memory).shape)
    (1, 3, 8)
    """

    def __init__(
        self,
        num_heads,
        intermediate_dim=None,
        attention_dropout=0.1,
        dropout=0.1,
        layer_norm_epsilon=1e-3,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check.positive_int(num_heads, "num_heads")
        self.intermediate_dim = check.positive_int(
            intermediate_dim, "intermediate_dim", allow_none=True
        )
        self.attention_dropout = check.rate(
            attention_dropout, "attention_dropout"
        )
        self.dropout = check.rate(dropout, "dropout")
        self.layer_norm_epsilon = check.greater_than(
            layer_norm_epsilon, "layer_norm_epsilon"
        )

    def build(self, x_shape, memory_shape):
        layers = keras.layers
        if len(x_shape) != 3 or len(memory_shape) != 3:
            raise ValueError(
                "`RealTransformerDecoder` takes x (batch, frames, width) and "
                "memory (batch, frames, width). Received: "
                f"x_shape={tuple(x_shape)}, "
                f"memory_shape={tuple(memory_shape)}"
            )
        width = x_shape[-1]
        if width is None or width < self.num_heads:
            raise ValueError(
                "The input's width must be known and at least `num_heads` "
                f"({self.num_heads}): each head has width // num_heads "
                f"channels. Received: x_shape={tuple(x_shape)}"
            )
        inner = self.intermediate_dim or width

        def attention(name):
            return layers.MultiHeadAttention(
                self.num_heads,
                width // self.num_heads,
                dropout=self.attention_dropout,
                name=name,
                dtype=self.dtype_policy,
            )

        self.self_attention = attention("self_attention")
        self.self_attention.build(x_shape, x_shape)
        self.cross_attention = attention("cross_attention")
        self.cross_attention.build(x_shape, memory_shape)
        self.norms = []
        for i in range(3):
            norm = layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon,
                name=f"norm_{i + 1}",
                dtype=self.dtype_policy,
            )
            norm.build(x_shape)
            self.norms.append(norm)
        self.feedforward_in = layers.Dense(
            inner, name="feedforward_in", dtype=self.dtype_policy
        )
        self.feedforward_in.build(x_shape)
        self.feedforward_out = layers.Dense(
            width, name="feedforward_out", dtype=self.dtype_policy
        )
        self.feedforward_out.build(tuple(x_shape[:-1]) + (inner,))
        self.feedforward_dropout = layers.Dropout(
            self.dropout, dtype=self.dtype_policy
        )

    def call(self, x, memory, training=None):
        h = self.self_attention(x, x, use_causal_mask=True, training=training)
        x = self.norms[0](x + h)
        h = self.cross_attention(x, memory, training=training)
        x = self.norms[1](x + h)
        h = keras.ops.leaky_relu(self.feedforward_in(x), 0.01)
        h = self.feedforward_dropout(h, training=training)
        return self.norms[2](x + self.feedforward_out(h))

    def compute_output_shape(self, x_shape, memory_shape):
        return tuple(x_shape)

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "attention_dropout": self.attention_dropout,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        }


def real_music_generator(
    source_frames=43,
    target_frames=21,
    bins=None,
    notes=128,
    embed_dim=456,
    num_heads=8,
    num_layers=6,
    intermediate_dim=None,
    head_dim=2896,
    dropout=0.1,
    feedforward_dropout=0.1,
    frontend_filters=_REAL_FRONTEND_FILTERS,
    frontend_kernel_sizes=FRONTEND_KERNEL_SIZES,
    frontend_strides=2,
    layer_norm_epsilon=1e-3,
    stft=None,
    name="real_music_generator",
):
    """A real-valued baseline of `music_generator`'s architecture (an
    encoder-decoder).

    Inputs: `spectra` `(B, source_frames, 2 * bins)` (or, given `stft`,
    the waveform `waveform`, as `music_generator`) and `previous_notes`
    `(B, target_frames, notes)` (the target shifted right, `shift_right`).
    The encoder is `real_music_classifier`'s (its front end, embedding,
    sinusoidal positions and `num_layers` encoder layers, the same layer
    names); the decoder embeds the previous notes with a Dense
    (`note_embedding`), adds sinusoidal positions restarting at 0
    (`target_positions`), runs `num_layers` `RealTransformerDecoder`s
    (`decoder_{i}`) attending to the encoder's output, and
    `real_music_classifier`'s head (`head_dense`, `head_act`,
    `head_dropout`, `note_logits`). Output: `(B, target_frames, notes)`
    logits.

    The layer names are the ones `FeedbackTraining` trains a generator by
    and `generate(..., cache=False)` decodes it with; `generate`'s cached
    decoding steps `ComplexTransformerDecoder`s, and refuses this model
    with `cache=True`. The arguments are `music_generator`'s, less the
    attention variant (`softmax`, `product`), with
    `real_music_classifier`'s widths (`sqrt(2)` times the complex ones) and
    `layer_norm_epsilon` (> 0, default 1e-3) for every layer norm.

    Returns:
        An uncompiled `keras.Model`.
    """
    layer_norm_epsilon = check.greater_than(
        layer_norm_epsilon, "layer_norm_epsilon"
    )
    target_frames = check.positive_int(target_frames, "target_frames")
    notes = check.positive_int(notes, "notes")
    source, memory = _real_encode(
        source_frames,
        bins,
        stft,
        (frontend_filters, frontend_kernel_sizes, frontend_strides),
        embed_dim,
        num_heads,
        num_layers,
        intermediate_dim,
        dropout,
        feedforward_dropout,
        layer_norm_epsilon,
    )
    previous = keras.Input((target_frames, notes), name="previous_notes")
    x = keras.layers.Dense(embed_dim, name="note_embedding")(previous)
    x = cl.SinusoidalPositionalEncoding(name="target_positions")(x)
    for i in range(num_layers):
        x = RealTransformerDecoder(
            num_heads,
            intermediate_dim=intermediate_dim,
            attention_dropout=dropout,
            dropout=feedforward_dropout,
            layer_norm_epsilon=layer_norm_epsilon,
            name=f"decoder_{i}",
        )(x, memory)
    logits = _real_head(x, head_dim, notes, dropout)
    return keras.Model([source, previous], logits, name=name)
