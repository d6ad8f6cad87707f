"""Speech enhancement from samples to samples: a spectral mask written by a
causal, sliding-window complex transformer.

- `speech_enhancer`: `ComplexSTFT(center=False)` -> compressed spectra
  (`ComplexCompression`) -> `ComplexDense` embedding -> causal
  sliding-window `ComplexTransformerEncoder` layers (CAtt by default,
  rotary positions) -> `ComplexDense` to one complex number per bin -> a
  bounded mask on the noisy spectra (`ComplexMask`: complex, or its
  modulus alone) -> `ComplexISTFT`. Every layer streams:
  `cvattn_keras.streaming.to_streaming(model)` runs it one hop at a time.
- `real_speech_enhancer`: the same model with real layers on `[Re | Im]`
  (`keras.layers.MultiHeadAttention` with the same causal window and
  rotary positions) writing the same complex mask: the real baseline,
  its width chosen for about the same parameter count.
- `SpeechEnhancementLoss`: what both train with.

The algorithmic latency is the STFT's `frame_length` (`frame_length /
sample_rate`: 512 samples, 32 ms at 16 kHz by default): a hop's output
needs the frame that ends with it.
"""

import math

import keras
from keras import ops

from cvattn_keras import _validation as check
from cvattn_keras import layers as cl
from cvattn_keras.layers.masks import MASKS

__all__ = [
    "RealRotaryAttention",
    "SpeechEnhancementLoss",
    "real_speech_enhancer",
    "speech_enhancer",
]


def _transforms(frame_length, frame_step):
    frame_length = check.positive_int(frame_length, "frame_length")
    frame_step = check.positive_int(frame_step, "frame_step")
    if frame_step > frame_length // 2:
        raise ValueError(
            "`frame_step` must be at most half of `frame_length` (the Hann "
            "windows must overlap for the inverse STFT to rebuild every "
            f"sample). Received: frame_length={frame_length}, "
            f"frame_step={frame_step}"
        )
    stft = cl.ComplexSTFT(frame_length, frame_step, center=False, name="stft")
    istft = cl.ComplexISTFT(
        frame_length, frame_step, center=False, name="istft"
    )
    return stft, istft


def _samples(samples):
    return check.positive_int(samples, "samples", allow_none=True)


def _mask(mask):
    if mask not in MASKS:
        raise ValueError(f"`mask` must be one of {MASKS}. Received: {mask!r}")
    return mask


def speech_enhancer(
    frame_length=512,
    frame_step=256,
    embed_dim=40,
    num_heads=4,
    num_layers=2,
    intermediate_dim=None,
    sliding_window=32,
    mask="complex",
    compression=0.3,
    softmax="real",
    product="inner",
    dropout=0.0,
    samples=None,
    name="speech_enhancer",
):
    """A complex-mask speech enhancer: noisy samples in, enhanced samples
    out, `(B, samples) -> (B, samples)`.

    Layers (their names are an API): `stft` (`ComplexSTFT(frame_length,
    frame_step, center=False)`, Hann), `compress`
    (`ComplexCompression(compression)`), `embedding`
    (`ComplexDense(embed_dim)`), `encoder_{i}`
    (`ComplexTransformerEncoder(sliding_window=W)`, causal, rotary
    positions), `mask_dense` (`ComplexDense` to one complex number per
    bin), `bin_level`, `bin_level_complex`, `bin_scale` (a learned
    complex weight per bin, `ComplexScale`, times the bin's compressed
    noisy level `|X|**c`, phase left out) added to it (`mask_features`),
    `mask`
    (`ComplexMask`, applied to the uncompressed noisy spectra) and
    `istft`. The per-bin path gives the mask the spectrum's full
    resolution beside the encoder's narrow summary of the frame (trials
    in `docs/speech.md`: without it, or with the bin's complex value in
    place of its level, runs could end worse than their input). The
    output has the input's
    length when `samples - frame_length` is a multiple of `frame_step`
    (the trailing samples are dropped otherwise), aligned with it
    offline; streamed (`cvattn_keras.streaming.to_streaming`) it comes
    `frame_length` samples late (see there).

    Args:
        frame_length: the STFT's window and DFT length (the algorithmic
            latency: 512 samples, 32 ms at 16 kHz).
        frame_step: the hop (the samples a stream step takes); at most
            `frame_length // 2`.
        embed_dim: the encoder's complex width.
        num_heads: attention heads per encoder layer.
        num_layers: encoder layers.
        intermediate_dim: the encoders' feed-forward width (`None`:
            `embed_dim`).
        sliding_window: the frames each frame attends to (itself and the
            `sliding_window - 1` before it).
        mask: `"complex"` (a bounded complex ratio mask) or
            `"magnitude"` (its modulus: the noisy phase kept).
        compression: the exponent of the input's `ComplexCompression`.
        softmax: the attention variant (`"real"`: CAtt; see
            `layers.ComplexMultiHeadAttention`).
        product: the attention's product (`"inner"`: rotary positions
            then depend on `t - s` only, as a stream needs).
        dropout: the attention weights' and feed-forward dropout.
        samples: the input length, or `None` for any.
        name: the model's name.

    Returns:
        An uncompiled `keras.Model`; train it with
        `SpeechEnhancementLoss`.
    """
    stft, istft = _transforms(frame_length, frame_step)
    mask = _mask(mask)
    num_layers = check.positive_int(num_layers, "num_layers")
    embed_dim = check.positive_int(embed_dim, "embed_dim")
    sliding_window = check.positive_int(sliding_window, "sliding_window")

    def network(x):
        x = cl.ComplexDense(embed_dim, name="embedding")(x)
        for i in range(num_layers):
            x = cl.ComplexTransformerEncoder(
                num_heads,
                intermediate_dim=intermediate_dim,
                softmax=softmax,
                product=product,
                dropout=dropout,
                attention_dropout=dropout,
                sliding_window=sliding_window,
                rotary_max_wavelength=10000,
                name=f"encoder_{i}",
            )(x)
        return cl.ComplexDense(stft.num_bins, name="mask_dense")(x)

    return _enhancer(stft, istft, samples, compression, network, mask, name)


def _enhancer(stft, istft, samples, compression, network, mask, name):
    """The model of both enhancers: the waveform (`samples` long), its
    `stft`, compressed (`compress`); `network` of the compressed spectra
    (the mask's features, `(B, T, 2 * bins)`) plus the per-bin path
    (`mask_features`); the `mask` on the noisy spectra, and `istft`."""
    waveform = keras.Input((_samples(samples),), name="waveform")
    spectra = stft(waveform)
    compressed = cl.ComplexCompression(compression, name="compress")(spectra)
    x = network(compressed)
    x = keras.layers.Add(name="mask_features")([x, _bin_levels(compressed)])
    enhanced = cl.ComplexMask(mask, name="mask")([x, spectra])
    return keras.Model(waveform, istft(enhanced), name=name)


def _bin_levels(compressed):
    """The per-bin path to the mask: each bin's compressed noisy level
    `|X|**c` (real: the noisy phase left out, or the mask would turn the
    output by it again) times a learned complex weight per bin
    (`ComplexScale`, initialised to 1: at the start the mask passes the
    loud bins and lowers the quiet ones, a spectral gate)."""
    level = cl.ComplexModulus(name="bin_level")(compressed)
    level = cl.ComplexFromReal(name="bin_level_complex")(level)
    return cl.ComplexScale(name="bin_scale")(level)


def _rotate(x, max_wavelength):
    """Rotary positions along axis 1 of `(B, T, heads, dim)`: the pairs
    `(x[..., i], x[..., i + dim/2])` turned by `t / max_wavelength **
    (2i / dim)`."""
    dim = x.shape[-1]
    half = dim // 2
    positions = ops.cast(ops.arange(ops.shape(x)[1]), "float32")
    rates = max_wavelength ** (-ops.arange(half, dtype="float32") * 2 / dim)
    angles = positions[:, None] * rates[None, :]  # (T, half)
    cos = ops.cast(ops.cos(angles)[None, :, None, :], x.dtype)
    sin = ops.cast(ops.sin(angles)[None, :, None, :], x.dtype)
    first, second = x[..., :half], x[..., half : 2 * half]
    rotated = [first * cos - second * sin, second * cos + first * sin]
    if dim % 2:
        rotated.append(x[..., 2 * half :])
    return ops.concatenate(rotated, axis=-1)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class RealRotaryAttention(keras.layers.MultiHeadAttention):
    """`keras.layers.MultiHeadAttention` with rotary positions: the
    projected queries and keys are turned by their positions (`(x_i,
    x_{i + d/2})` pairs, wavelengths up to `rotary_max_wavelength`) before
    their product, so that the scores depend on `t - s`: the real
    counterpart of `ComplexMultiHeadAttention(rotary_max_wavelength=...)`
    for self-attention."""

    def __init__(self, *args, rotary_max_wavelength=10000, **kwargs):
        super().__init__(*args, **kwargs)
        self.rotary_max_wavelength = check.greater_than(
            rotary_max_wavelength, "rotary_max_wavelength"
        )

    def _compute_attention(self, query, key, value, *args, **kwargs):
        wavelength = self.rotary_max_wavelength
        return super()._compute_attention(
            _rotate(query, wavelength),
            _rotate(key, wavelength),
            value,
            *args,
            **kwargs,
        )

    def get_config(self):
        return {
            **super().get_config(),
            "rotary_max_wavelength": self.rotary_max_wavelength,
        }


def _real_encoder(x, width, heads, sliding_window, dropout, prefix):
    """A post-norm real encoder layer (the complex encoder's order):
    causal windowed rotary attention, residual, norm; a LeakyReLU
    feed-forward of the same width, residual, norm."""
    layers = keras.layers
    attention = RealRotaryAttention(
        heads,
        max(1, width // heads),
        dropout=dropout,
        sliding_window=sliding_window,
        name=f"{prefix}_attention",
    )
    h = attention(x, x, use_causal_mask=True)
    x = layers.LayerNormalization(name=f"{prefix}_norm1")(x + h)
    h = layers.Dense(width, name=f"{prefix}_ff1")(x)
    h = layers.LeakyReLU(0.01, name=f"{prefix}_act")(h)
    h = layers.Dropout(dropout, name=f"{prefix}_dropout")(h)
    h = layers.Dense(width, name=f"{prefix}_ff2")(h)
    return layers.LayerNormalization(name=f"{prefix}_norm2")(x + h)


def real_speech_enhancer(
    frame_length=512,
    frame_step=256,
    width=None,
    num_heads=4,
    num_layers=2,
    sliding_window=32,
    compression=0.3,
    dropout=0.0,
    samples=None,
    name="real_speech_enhancer",
):
    """The real baseline of `speech_enhancer`: the same STFT, compression,
    complex mask and inverse STFT, with real layers between them on the
    stacked `[Re | Im]` spectra: `Dense(width)`, `num_layers` post-norm
    encoders (`RealRotaryAttention`, causal over the last
    `sliding_window` frames, and a feed-forward of `width`), then
    `Dense(2 * bins)` read as the complex mask's features. `width=None`
    takes the width whose parameter count is nearest to the complex
    model's of the same arguments (default widths: 40 complex features).

    Returns:
        An uncompiled `keras.Model`, `(B, samples) -> (B, samples)`.
    """
    stft, istft = _transforms(frame_length, frame_step)
    num_heads = check.positive_int(num_heads, "num_heads")
    num_layers = check.positive_int(num_layers, "num_layers")
    sliding_window = check.positive_int(sliding_window, "sliding_window")
    if width is None:
        width = _matching_width(
            stft.num_bins, num_heads, num_layers, frame_length, frame_step
        )
    width = check.positive_int(width, "width")

    def network(x):
        x = keras.layers.Dense(width, name="embedding")(x)
        for i in range(num_layers):
            x = _real_encoder(
                x, width, num_heads, sliding_window, dropout, f"encoder_{i}"
            )
        return keras.layers.Dense(2 * stft.num_bins, name="mask_dense")(x)

    return _enhancer(
        stft, istft, samples, compression, network, "complex", name
    )


def _trainable(model):
    return sum(math.prod(w.shape) for w in model.trainable_weights)


def _real_trainable(width, bins, heads, layers):
    """The trainable parameters of `real_speech_enhancer(width=width)`
    over `bins` bins: the dense layers in and out; per layer 4
    projections, 2 norms, 2 dense; the per-bin scale (a complex weight per
    bin). Tested equal to the built model's count."""
    head_dim = max(1, width // heads)
    attention = 4 * heads * head_dim * width + 3 * heads * head_dim + width
    per_layer = attention + 4 * width + 2 * (width * width + width)
    return (
        (2 * bins + 1) * width
        + layers * per_layer
        + (width + 1) * 2 * bins
        + 2 * bins
    )


def _matching_width(bins, heads, layers, frame_length, frame_step):
    """The real width (a multiple of `heads`) whose model's trainable
    parameter count is nearest the default complex model's."""
    target = _trainable(
        speech_enhancer(
            frame_length, frame_step, num_heads=heads, num_layers=layers
        )
    )
    widths = range(heads, 64 * heads, heads)
    return min(
        widths,
        key=lambda w: abs(_real_trainable(w, bins, heads, layers) - target),
    )


@keras.saving.register_keras_serializable(package="cvattn_keras")
class SpeechEnhancementLoss(keras.losses.Loss):
    """The loss of `speech_enhancer`: a compressed complex spectral loss
    plus a weighted negative SI-SDR, between clean and enhanced samples.

    `loss = (1 - a) * mean |C(S_hat) - C(S)|^2 + a * mean |C_m(S_hat) -
    C_m(S)|^2 - b * SI-SDR(s, s_hat) / 100`, with `S` the STFT
    (`frame_length`, `frame_step`, Hann, not centred) of the clean
    samples, `C` the power-law compression of the modulus (`exponent`,
    the phase kept: `ComplexCompression`), `C_m` its modulus alone, `a =
    magnitude_weight`, `b = si_sdr_weight`. The spectral terms are those
    of GTCRN's and DCCRN's successors (compression evens the bins'
    levels; the complex term teaches the phase, the magnitude term the
    level); SI-SDR, in dB over the whole clip (zero-mean), scores the
    waveform as the field reports it, and is scaled by 1/100 so that the
    terms are of one size. `trim` samples at each end (the inverse STFT's
    partial windows) are left out.

    Args:
        frame_length: the loss' STFT window (the model's, by default).
        frame_step: its hop.
        exponent: the compression exponent.
        magnitude_weight: `a`, in [0, 1].
        si_sdr_weight: `b`, >= 0.
        trim: the samples left out at each end; `None`: `frame_length`.
    """

    def __init__(
        self,
        frame_length=512,
        frame_step=256,
        exponent=0.3,
        magnitude_weight=0.3,
        si_sdr_weight=1.0,
        trim=None,
        name="speech_enhancement_loss",
        **kwargs,
    ):
        super().__init__(name=name, **kwargs)
        self.frame_length = check.positive_int(frame_length, "frame_length")
        self.frame_step = check.positive_int(frame_step, "frame_step")
        self.exponent = cl.ComplexCompression(exponent).exponent
        self.magnitude_weight = check.rate(magnitude_weight, "magnitude_weight")
        self.si_sdr_weight = check.non_negative_float(
            si_sdr_weight, "si_sdr_weight"
        )
        trim = self.frame_length if trim is None else trim
        self.trim = check.non_negative_int(trim, "trim")

    def _spectra(self, x):
        real, imag = ops.stft(
            x,
            self.frame_length,
            self.frame_step,
            self.frame_length,
            window="hann",
            center=False,
        )
        # The floor (|S| >= 1e-3, 70 dB below a speech bin at -25 dBFS)
        # bounds the compression's gradient, c |S|**(c - 1), in silent
        # bins: the clips hold exact digital silence (zero padding, gaps
        # between bursts), where a floor of 1e-6 gave gradients of 1e4.
        modulus = ops.sqrt(real * real + imag * imag + 1e-6)
        scale = ops.power(modulus, self.exponent - 1)
        return real * scale, imag * scale, modulus * scale

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "float32")
        y_pred = ops.cast(y_pred, "float32")
        if self.trim:
            y_true = y_true[:, self.trim : -self.trim]
            y_pred = y_pred[:, self.trim : -self.trim]
        tr, ti, tm = self._spectra(y_true)
        pr, pi, pm = self._spectra(y_pred)
        axes = (1, 2)
        complex_term = ops.mean((tr - pr) ** 2 + (ti - pi) ** 2, axis=axes)
        magnitude_term = ops.mean((tm - pm) ** 2, axis=axes)
        a = self.magnitude_weight
        loss = (1 - a) * complex_term + a * magnitude_term
        if self.si_sdr_weight:
            loss = loss - self.si_sdr_weight * _si_sdr(y_true, y_pred) / 100
        return loss

    def get_config(self):
        return {
            **super().get_config(),
            "frame_length": self.frame_length,
            "frame_step": self.frame_step,
            "exponent": self.exponent,
            "magnitude_weight": self.magnitude_weight,
            "si_sdr_weight": self.si_sdr_weight,
            "trim": self.trim,
        }


def _si_sdr(reference, estimate, eps=1e-8):
    """SI-SDR in dB per row of `(B, L)` tensors (zero-mean), with `eps`
    keeping silent rows finite."""
    reference = reference - ops.mean(reference, axis=-1, keepdims=True)
    estimate = estimate - ops.mean(estimate, axis=-1, keepdims=True)
    scale = ops.sum(reference * estimate, -1, keepdims=True) / (
        ops.sum(reference * reference, -1, keepdims=True) + eps
    )
    target = scale * reference
    residual = estimate - target
    ratio = (ops.sum(target * target, -1) + eps) / (
        ops.sum(residual * residual, -1) + eps
    )
    return 10 * ops.log10(ratio)
