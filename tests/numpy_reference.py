"""An independent NumPy complex128 reference of the paper's attention.

Written from reference-semantics.md, with native complex numbers and none of
the library's code: the layers are tested against it.
"""

import numpy as np


def masked_softmax(logits, mask=None):
    """Softmax over the last axis; masked entries 0; rows with no unmasked
    entry all 0 (the library's documented choice where the reference gives
    NaN)."""
    logits = np.asarray(logits, dtype=np.float64)
    if mask is None:
        mask = np.ones(logits.shape, dtype=bool)
    mask = np.broadcast_to(mask, logits.shape)
    shifted = np.where(mask, logits, -np.inf)
    row_max = np.max(shifted, axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.where(mask, np.exp(np.where(mask, logits, 0.0) - row_max), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)


def weights(scores, softmax, mask=None):
    """The complex weights W of one variant for complex scores A."""
    if softmax == "real":
        return masked_softmax(scores.real, mask).astype(np.complex128)
    if softmax == "absonly":
        return masked_softmax(np.abs(scores), mask).astype(np.complex128)
    if softmax == "abs":
        magnitude = np.abs(scores)
        phase = np.where(
            magnitude > 0, scores / np.where(magnitude > 0, magnitude, 1), 0
        )
        return masked_softmax(magnitude, mask) * phase
    if softmax == "naive":
        return masked_softmax(scores.real, mask) + 1j * masked_softmax(
            scores.imag, mask
        )
    raise ValueError(softmax)


def scores(q, k, product, scale):
    """A = scale * q conj(k)^T ('inner') or scale * q k^T ('bilinear')."""
    k = np.conj(k) if product == "inner" else k
    return scale * np.einsum("...th,...sh->...ts", q, k)


def attention(q, k, v, softmax, product, scale, mask=None):
    """Per-head attention: q (..., T, H), k (..., S, H), v (..., S, V)."""
    w = weights(scores(q, k, product, scale), softmax, mask)
    return w @ v, w


def dense(x, kernel, bias=None):
    """x W + b in complex128."""
    y = x @ kernel
    return y if bias is None else y + bias


def multi_head_attention(
    query, value, key, params, num_heads, softmax, product, scale, mask=None
):
    """The reference MHA.

    query (B, T, Eq), value (B, S, Ev), key (B, S, Ek): complex.
    params: {"query": (W, b), "key": ..., "value": ..., "output": ...},
        complex kernels (in, out) and biases (out,) or None.
    mask: boolean, broadcastable to (B, T, S) (or (B, N, T, S)).
    Returns the output (B, T, O) and the weights (B, N, T, S).
    """

    def heads(x):  # (B, L, N*h) -> (B, N, L, h), contiguous blocks
        b, length, width = x.shape
        return x.reshape(b, length, num_heads, width // num_heads).transpose(
            0, 2, 1, 3
        )

    q = heads(dense(query, *params["query"]))
    k = heads(dense(key, *params["key"]))
    v = heads(dense(value, *params["value"]))
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.ndim == 3:
            mask = mask[:, None]
    out, w = attention(q, k, v, softmax, product, scale, mask)
    b, _, t, _ = out.shape
    merged = out.transpose(0, 2, 1, 3).reshape(b, t, -1)
    return dense(merged, *params["output"]), w


def random_complex(rng, shape, scale=1.0):
    return (
        scale
        * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
        / np.sqrt(2)
    )


# ----------------------------------------------------------------------
# Building blocks.
# ----------------------------------------------------------------------


def _sym_power(m, power):
    """m^power for stacks of symmetric positive definite 2x2 matrices, by
    eigendecomposition (independent of the library's closed form)."""
    values, vectors = np.linalg.eigh(m)
    return (vectors * values[..., None, :] ** power) @ np.swapaxes(
        vectors, -1, -2
    )


def whitening_layer_norm(z, w0, w1, w2, bias, epsilon, estimator="reference"):
    """The paper's LayerNorm per token over the last axis of complex z.

    Variances divide by E - 1 ('reference') or E ('biased'); the covariance
    by E; epsilon is added to both variances."""
    features = z.shape[-1]
    x = z - z.mean(axis=-1, keepdims=True)
    divisor = features - 1 if estimator == "reference" else features
    v_rr = (x.real**2).sum(-1) / divisor + epsilon
    v_ii = (x.imag**2).sum(-1) / divisor + epsilon
    v_ri = (x.real * x.imag).mean(-1)
    cov = np.stack([np.stack([v_rr, v_ri], -1), np.stack([v_ri, v_ii], -1)], -2)
    white = _sym_power(cov, -0.5)[..., None, :, :]  # (..., 1, 2, 2)
    rho = (2 / (1 + np.exp(-w2)) - 1) * np.abs(w0 * w1)
    gamma = np.stack(
        [np.stack([w0**2, rho], -1), np.stack([rho, w1**2], -1)], -2
    )
    scale = _sym_power(gamma, 0.5)  # (E, 2, 2)
    vec = np.stack([x.real, x.imag], -1)[..., None]  # (..., E, 2, 1)
    out = (scale @ (white @ vec))[..., 0]
    return out[..., 0] + 1j * out[..., 1] + bias


def naive_layer_norm(z, gamma_r, gamma_i, beta_r, beta_i, epsilon):
    def norm(part):
        centred = part - part.mean(-1, keepdims=True)
        return centred / np.sqrt(part.var(-1, keepdims=True) + epsilon)

    return (norm(z.real) * gamma_r + beta_r) + 1j * (
        norm(z.imag) * gamma_i + beta_i
    )


def leaky_relu(z, slope=0.01):
    def leaky(a):
        return np.where(a >= 0, a, slope * a)

    return leaky(z.real) + 1j * leaky(z.imag)


def dense_params(dense):
    """A ComplexDense's weights as complex128 (kernel, bias or None)."""
    kernel = np.asarray(dense.kernel_real) + 1j * np.asarray(dense.kernel_imag)
    bias = None
    if dense.use_bias:
        bias = np.asarray(dense.bias_real) + 1j * np.asarray(dense.bias_imag)
    return kernel.astype(np.complex128), bias


def attention_params(layer):
    """A ComplexMultiHeadAttention's projections, for multi_head_attention."""
    return {
        "query": dense_params(layer.query_dense),
        "key": dense_params(layer.key_dense),
        "value": dense_params(layer.value_dense),
        "output": dense_params(layer.output_dense),
    }


def whiten(z, axes, epsilon, variance_divisor_offset=0):
    """The 2x2 whitening `(C + epsilon I)^-1/2 (z - mean)` of complex z in
    float64 (by `eigh`), the statistics over `axes`: variances divide by
    `n - variance_divisor_offset`, the covariance by `n`.

    Returns the whitened complex array and the condition number of the
    regularised covariance, both broadcastable against z."""
    z = np.asarray(z, np.complex128)
    axes = tuple(a % z.ndim for a in axes)
    n = np.prod([z.shape[a] for a in axes])
    c = z - z.mean(axis=axes, keepdims=True)
    divisor = n - variance_divisor_offset
    v_rr = (c.real**2).sum(axes, keepdims=True) / divisor + epsilon
    v_ii = (c.imag**2).sum(axes, keepdims=True) / divisor + epsilon
    v_ri = (c.real * c.imag).mean(axes, keepdims=True)
    cov = np.stack([np.stack([v_rr, v_ri], -1), np.stack([v_ri, v_ii], -1)], -2)
    values = np.linalg.eigvalsh(cov)
    condition = values[..., 1] / values[..., 0]
    white = _sym_power(cov, -0.5)
    out = (white @ np.stack([c.real, c.imag], -1)[..., None])[..., 0]
    return out[..., 0] + 1j * out[..., 1], condition


def improper(rng, shape, correlation, noise, scale=1.0, offset=0.0):
    """Improper complex samples `Re + i (correlation Re + noise n)`, times
    `scale`, plus `offset`: a nearly singular 2x2 covariance when `noise`
    is small."""
    re = rng.standard_normal(shape)
    im = correlation * re + noise * rng.standard_normal(shape)
    return (re + 1j * im) * scale + offset


def norm_at_init(name, z):
    """The complex norms of this library at their initial parameters, in
    float64: `name` is "batch", "layer" (the reference estimator),
    "layer-biased", "naive" or "rms" (epsilons at the layers' defaults)."""
    if name == "batch":
        return whiten(z, (0, 1), 1e-5)[0] / np.sqrt(2)
    if name == "layer":
        return whiten(z, (-1,), 1e-5, 1)[0]
    if name == "layer-biased":
        return whiten(z, (-1,), 1e-5)[0]
    if name == "naive":
        ones, zeros = np.ones(z.shape[-1]), np.zeros(z.shape[-1])
        return naive_layer_norm(z, ones, ones, zeros, zeros, 1e-5)
    power = (np.abs(z) ** 2).mean(-1, keepdims=True)
    return z / np.sqrt(power + 1e-6)


# The LayerNorm fixtures of reference-semantics.md (initial parameters):
# (tokens, outputs), printed to 6 decimals there.
LAYER_NORM_FIXTURES = [
    ([1, 1j, -1, -1j], 1.224745 * np.array([1, 1j, -1, -1j])),
    (
        [2 + 1j, -2 - 1j, 1, -1],
        [
            0.923484 + 0.885178j,
            -0.923484 - 0.885178j,
            0.643215 - 0.362945j,
            -0.643215 + 0.362945j,
        ],
    ),
    (
        [3 + 1j, 1 + 2j, -1, 1 - 1j],
        [
            1.207404 + 0.228274j,
            -0.126132 + 1.189350j,
            -1.207404 - 0.228274j,
            0.126132 - 1.189350j,
        ],
    ),
]


def hann(size):
    """The periodic Hann window of `size` points."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(size) / size)


def stft(
    x, frame_length, step, fft_length, center, pad_mode, bins, window=None
):
    """`x` (B, L) -> (B, frames, F) complex128: numpy's rfft of each padded
    frame times the window (default the periodic Hann) centred in
    `fft_length`."""
    if center:
        half = fft_length // 2
        x = np.pad(x, ((0, 0), (half, half)), mode=pad_mode)
    padded = np.zeros(fft_length)
    start = (fft_length - frame_length) // 2
    padded[start : start + frame_length] = (
        hann(frame_length) if window is None else window
    )
    frames = 1 + (x.shape[1] - fft_length) // step
    framed = np.stack(
        [x[:, t * step : t * step + fft_length] for t in range(frames)], 1
    )
    spectra = np.fft.rfft(framed * padded, axis=-1)
    low, high = bins or (0, fft_length // 2 + 1)
    return spectra[..., low:high]
