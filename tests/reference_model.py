"""A NumPy complex128 forward of the reference PyTorch modules, written from
their formulas (../shared/docs/reference-semantics.md) and operating
directly on a reference-named state dict, for the interop tests.

Every function takes `sd`, a dict from the reference's parameter names to
NumPy arrays, and `prefix`, the module's name followed by a dot (or "").
Inputs and outputs are complex arrays (`(..., features)`), as in the
reference; nothing here reads a Keras variable. Also: `random_*` builders
of reference-named state dicts with random values in the reference's
shapes and dtypes (float32, complex64).
"""

import numpy as np

# ---------------------------------------------------------------------------
# Random reference-named state dicts.
# ---------------------------------------------------------------------------


def _real(rng, shape, scale=0.3):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def _complex(rng, shape, scale=0.3):
    return (
        scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))
    ).astype(np.complex64)


def random_linear(rng, in_features, out_features, prefix="", scale=None):
    scale = scale or in_features**-0.5
    sd = {}
    for module in ("Linear_real", "Linear_img"):
        sd[f"{prefix}{module}.weight"] = _real(
            rng, (out_features, in_features), scale
        )
        sd[f"{prefix}{module}.bias"] = _real(rng, (out_features,), 0.3)
    return sd


def random_conv(rng, in_channels, out_channels, kernel, prefix=""):
    sd = {}
    scale = (in_channels * kernel) ** -0.5
    for module in ("Conv_real", "Conv_imag"):
        sd[f"{prefix}{module}.weight"] = _real(
            rng, (out_channels, in_channels, kernel), scale
        )
        sd[f"{prefix}{module}.bias"] = _real(rng, (out_channels,), 0.3)
    return sd


def _norm_weights(rng, count):
    # w0, w1 around 1 (either sign), w2 around 0: a proper, non-trivial
    # Gamma.
    w = np.empty((count, 3), np.float32)
    w[:, 0] = rng.uniform(0.6, 1.4, count) * rng.choice([-1, 1], count)
    w[:, 1] = rng.uniform(0.6, 1.4, count)
    w[:, 2] = rng.normal(0, 1.0, count)
    return w


def random_layer_norm(rng, features, prefix=""):
    return {
        f"{prefix}weights": _norm_weights(rng, features)[:, :, None],
        f"{prefix}bias": _complex(rng, (1, 1, features)),
    }


def random_batch_norm(rng, channels, prefix="", trained=True):
    """A reference batch norm's state dict; `trained` buffers have the
    shapes after a training step, with a random mean and a random
    R with independent off-diagonal entries (the reference's training
    stores a symmetric one, the inverse square root of a covariance; an
    asymmetric one checks which entry goes where), else the placeholders."""
    sd = {
        f"{prefix}weights": _norm_weights(rng, channels)[:, None, :, None],
        f"{prefix}bias": _complex(rng, (1, channels, 1)),
    }
    if trained:
        sd[f"{prefix}running_mean"] = _complex(rng, (1, channels, 1))
        a = rng.uniform(0.5, 2.0, channels)
        d = rng.uniform(0.5, 2.0, channels)
        b = rng.uniform(-0.4, 0.4, channels) * np.sqrt(a * d)
        cov = np.zeros((1, channels, 2, 2), np.float32)
        cov[0, :, 0, 0], cov[0, :, 1, 1] = a, d
        cov[0, :, 0, 1] = b
        cov[0, :, 1, 0] = rng.uniform(-0.4, 0.4, channels) * np.sqrt(a * d)
        sd[f"{prefix}running_cov"] = cov
    else:
        sd[f"{prefix}running_mean"] = np.zeros((channels,), np.complex64)
        sd[f"{prefix}running_cov"] = np.eye(channels, dtype=np.float32)
    return sd


def random_attention(rng, embed_dim, prefix=""):
    sd = {}
    for module in ("in_proj_q", "in_proj_k", "in_proj_v", "out_proj"):
        sd.update(
            random_linear(rng, embed_dim, embed_dim, f"{prefix}{module}.")
        )
    return sd


def random_encoder_layer(rng, embed_dim, prefix=""):
    sd = random_attention(rng, embed_dim, f"{prefix}self_attn.")
    sd.update(random_linear(rng, embed_dim, embed_dim, f"{prefix}linear1."))
    sd.update(random_linear(rng, embed_dim, embed_dim, f"{prefix}linear2."))
    for i in range(2):
        sd.update(
            random_layer_norm(rng, embed_dim, f"{prefix}layer_norms.{i}.")
        )
    return sd


def random_decoder_layer(rng, embed_dim, prefix=""):
    sd = random_attention(rng, embed_dim, f"{prefix}self_attn.")
    sd.update(random_attention(rng, embed_dim, f"{prefix}attn."))
    sd.update(random_linear(rng, embed_dim, embed_dim, f"{prefix}linear1."))
    sd.update(random_linear(rng, embed_dim, embed_dim, f"{prefix}linear2."))
    for i in range(3):
        sd.update(
            random_layer_norm(rng, embed_dim, f"{prefix}layer_norms.{i}.")
        )
    return sd


def random_frontend(rng, filters, kernels, prefix="", trained=True):
    sd = {}
    channels = (1,) + tuple(filters)
    for b, kernel in enumerate(kernels):
        sd.update(
            random_conv(
                rng, channels[b], channels[b + 1], kernel, f"{prefix}{3 * b}."
            )
        )
        sd.update(
            random_batch_norm(
                rng, channels[b + 1], f"{prefix}{3 * b + 1}.", trained
            )
        )
    return sd


def frontend_length(bins, kernels, stride=2):
    for kernel in kernels:
        bins = (bins - kernel) // stride + 1
    return bins


def random_model(
    rng,
    kind,
    bins,
    filters,
    kernels,
    embed_dim,
    num_layers,
    head_dim,
    notes,
):
    """A random state dict of `Transformer_Pred` (kind "classifier") or
    `Transformer_Generation` ("generator") of these sizes."""
    generator = kind == "generator"
    flat = filters[-1] * frontend_length(bins, kernels)
    sd = random_frontend(
        rng, filters, kernels, "conv_src." if generator else "conv."
    )
    name = "in_embedding_src." if generator else "in_embedding."
    sd.update(random_linear(rng, flat, embed_dim, name))
    if generator:
        sd.update(random_linear(rng, notes, embed_dim, "in_embedding_tgt."))
    sd.update(random_linear(rng, embed_dim, head_dim, "output_linear_1."))
    sd["final_out.weight"] = _real(rng, (1, 2), 0.7)
    sd["final_out.bias"] = _real(rng, (1,), 0.3)
    sd.update(random_linear(rng, head_dim, notes, "output_linear_2."))
    for i in range(num_layers):
        sd.update(random_encoder_layer(rng, embed_dim, f"encoder.layers.{i}."))
    if generator:
        for i in range(num_layers):
            sd.update(
                random_decoder_layer(rng, embed_dim, f"decoder.layers.{i}.")
            )
    return sd


# ---------------------------------------------------------------------------
# The reference's formulas, in complex128.
# ---------------------------------------------------------------------------


def _f(sd, key):
    return np.asarray(sd[key], np.float64)


def complex_linear(sd, prefix, x):
    """`ComplexLinear`: two real `nn.Linear`, applied as the reference
    does: `Lr(x_r) - Li(x_i) + i (Lr(x_i) + Li(x_r))`, each `L(x) = x W^T +
    b` with its own bias."""
    w_r, b_r = (
        _f(sd, f"{prefix}Linear_real.weight"),
        _f(sd, f"{prefix}Linear_real.bias"),
    )
    w_i, b_i = (
        _f(sd, f"{prefix}Linear_img.weight"),
        _f(sd, f"{prefix}Linear_img.bias"),
    )

    def lin(v, w, b):
        return v @ w.T + b

    return (
        lin(x.real, w_r, b_r)
        - lin(x.imag, w_i, b_i)
        + 1j * (lin(x.imag, w_r, b_r) + lin(x.real, w_i, b_i))
    )


def _conv1d(x, w, b, stride):
    """PyTorch's `Conv1d` (cross-correlation, no padding) on real
    `(N, C_in, L)` with `w` `[out, in, k]`."""
    k = w.shape[-1]
    windows = np.lib.stride_tricks.sliding_window_view(x, k, axis=-1)
    windows = windows[:, :, ::stride, :]  # (N, C_in, L', k)
    return np.einsum("nclk,ock->nol", windows, w) + b[None, :, None]


def complex_conv1d(sd, prefix, x, stride):
    """`Complex_Conv1d` on complex `(N, C, L)`: `out_r = Cr(x_r) -
    Ci(x_i)`, `out_i = Cr(x_i) + Ci(x_r)`, each real conv with its bias."""
    w_r, b_r = (
        _f(sd, f"{prefix}Conv_real.weight"),
        _f(sd, f"{prefix}Conv_real.bias"),
    )
    w_i, b_i = (
        _f(sd, f"{prefix}Conv_imag.weight"),
        _f(sd, f"{prefix}Conv_imag.bias"),
    )
    conv = _conv1d
    return (
        conv(x.real, w_r, b_r, stride)
        - conv(x.imag, w_i, b_i, stride)
        + 1j * (conv(x.imag, w_r, b_r, stride) + conv(x.real, w_i, b_i, stride))
    )


def sqrtm_2x2(m):
    """`sqrtm(M) = (M + s I) / t`, `s = sqrt(det M)`, `t = sqrt(tr M + 2s)`
    on `(..., 2, 2)`."""
    s = np.sqrt(m[..., 0, 0] * m[..., 1, 1] - m[..., 0, 1] * m[..., 1, 0])
    t = np.sqrt(m[..., 0, 0] + m[..., 1, 1] + 2 * s)
    out = m.copy()
    out[..., 0, 0] += s
    out[..., 1, 1] += s
    return out / t[..., None, None]


def inv_2x2(m):
    a, b, c, d = m[..., 0, 0], m[..., 0, 1], m[..., 1, 0], m[..., 1, 1]
    det = a * d - b * c
    return (
        np.stack([np.stack([d, -b], -1), np.stack([-c, a], -1)], -2)
        / (det[..., None, None])
    )


def gamma(w):
    """`Gamma` `(n, 2, 2)` from `(n, 3)` learnable `(w0, w1, w2)`."""
    w0, w1, w2 = w[:, 0], w[:, 1], w[:, 2]
    rr, ii = w0**2, w1**2
    rho = (2 / (1 + np.exp(-w2)) - 1) * np.sqrt(rr * ii)
    return np.stack([np.stack([rr, rho], -1), np.stack([rho, ii], -1)], -2)


def _apply_2x2(m, x):
    """`m (..., 2, 2)` applied to complex `x` seen as `[Re; Im]`."""
    re = m[..., 0, 0] * x.real + m[..., 0, 1] * x.imag
    im = m[..., 1, 0] * x.real + m[..., 1, 1] * x.imag
    return re + 1j * im


def layer_norm(sd, prefix, x):
    """`Complex_LayerNorm` over the last axis: `sqrtm(Gamma) inv(sqrtm(C))
    (x - mean) + bias`, variances unbiased, covariance biased."""
    mean = x.mean(-1, keepdims=True)
    xc = x - mean
    v_rr = x.real.var(-1, ddof=1)
    v_ii = x.imag.var(-1, ddof=1)
    v_ri = (xc.real * xc.imag).mean(-1)
    cov = np.stack(
        [np.stack([v_rr, v_ri], -1), np.stack([v_ri, v_ii], -1)], -2
    )  # (..., 2, 2)
    whiten = inv_2x2(sqrtm_2x2(cov))[..., None, :, :]  # per token
    scale = sqrtm_2x2(gamma(_f(sd, f"{prefix}weights")[:, :, 0]))  # (E,2,2)
    out = _apply_2x2(scale @ whiten, xc)
    return out + np.asarray(sd[f"{prefix}bias"], np.complex128).reshape(-1)


def batch_norm(sd, prefix, x):
    """`Complex_BatchNorm1d` at inference on `(N, C, L)`: `R sqrtm(Gamma)
    (x - running_mean) + bias`, R = `running_cov[0, c]` (trained
    shapes)."""
    mean = np.asarray(sd[f"{prefix}running_mean"], np.complex128)
    r = _f(sd, f"{prefix}running_cov")[0]  # (C, 2, 2)
    w = _f(sd, f"{prefix}weights")[:, 0, :, 0]  # (C, 3)
    m = r @ sqrtm_2x2(gamma(w))  # (C, 2, 2)
    out = _apply_2x2(m[None, :, None], x - mean.reshape(1, -1, 1))
    return out + np.asarray(sd[f"{prefix}bias"], np.complex128).reshape(
        1, -1, 1
    )


def crelu(x):
    """The reference's "CReLU": LeakyReLU(0.01) on Re and Im."""

    def leaky(v):
        return np.where(v >= 0, v, 0.01 * v)

    return leaky(x.real) + 1j * leaky(x.imag)


def attention(sd, prefix, query, key, value, num_heads, variant, causal):
    """`MultiheadAttention` (no dropout) on complex `(B, T, E)`, `(B, S,
    E)`: projections, contiguous head split, scaled complex scores, one of
    the four softmax variants, `W @ v`, heads merged in order, output
    projection."""
    q = complex_linear(sd, f"{prefix}in_proj_q.", query)
    k = complex_linear(sd, f"{prefix}in_proj_k.", key)
    v = complex_linear(sd, f"{prefix}in_proj_v.", value)
    batch, t_len, embed = q.shape
    s_len = k.shape[1]
    head = embed // num_heads

    def heads(z, length):
        return z.reshape(batch, length, num_heads, head).transpose(0, 2, 1, 3)

    q, k, v = heads(q, t_len), heads(k, s_len), heads(v, s_len)
    product, softmax = variant[-2:], variant[:-2]
    k_t = np.conj(k) if product == "ip" else k
    scores = np.einsum("bhtd,bhsd->bhts", q, k_t) * head**-0.5
    mask = np.zeros((t_len, s_len))
    if causal:
        mask = np.where(np.tril(np.ones((t_len, s_len))) == 1, 0.0, -np.inf)

    def sm(z):
        z = z - z.max(-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(-1, keepdims=True)

    if softmax == "real":
        weights = sm(scores.real + mask)
    elif softmax == "absonly":
        weights = sm(np.abs(scores) + mask)
    elif softmax == "abs":
        modulus = np.abs(scores)
        sign = np.where(
            modulus > 0, scores / np.where(modulus > 0, modulus, 1), 0
        )
        weights = sm(modulus + mask) * sign
    elif softmax == "naiv":
        weights = sm(scores.real + mask) + 1j * sm(scores.imag + mask)
    else:
        raise ValueError(variant)
    out = np.einsum("bhts,bhsd->bhtd", weights, v)
    out = out.transpose(0, 2, 1, 3).reshape(batch, t_len, embed)
    return complex_linear(sd, f"{prefix}out_proj.", out)


def encoder_layer(sd, prefix, x, num_heads, variant):
    x = layer_norm(
        sd,
        f"{prefix}layer_norms.0.",
        x
        + attention(
            sd, f"{prefix}self_attn.", x, x, x, num_heads, variant, False
        ),
    )
    h = complex_linear(sd, f"{prefix}linear1.", x)
    h = complex_linear(sd, f"{prefix}linear2.", crelu(h))
    return layer_norm(sd, f"{prefix}layer_norms.1.", x + h)


def decoder_layer(sd, prefix, x, enc, num_heads, variant):
    x = layer_norm(
        sd,
        f"{prefix}layer_norms.0.",
        x
        + attention(
            sd, f"{prefix}self_attn.", x, x, x, num_heads, variant, True
        ),
    )
    x = layer_norm(
        sd,
        f"{prefix}layer_norms.1.",
        x
        + attention(
            sd, f"{prefix}attn.", x, enc, enc, num_heads, variant, False
        ),
    )
    h = complex_linear(sd, f"{prefix}linear1.", x)
    h = complex_linear(sd, f"{prefix}linear2.", crelu(h))
    return layer_norm(sd, f"{prefix}layer_norms.2.", x + h)


def positions(length, embed_dim):
    """The reference's real sin/cos encoding, interleaved, positions from 0
    (`PE[p, 2j] = sin(p / 10000^(j / (E/2)))`, `PE[p, 2j+1] = cos(...)`)."""
    half = embed_dim // 2
    div = 10000.0 ** (np.arange(half) / half)
    angle = np.arange(length)[:, None] / div
    return np.stack([np.sin(angle), np.cos(angle)], -1).reshape(
        length, embed_dim
    )


def final_out(sd, x):
    """`nn.Linear(2, 1)` over `(Re, Im)`, squeezed."""
    w, b = _f(sd, "final_out.weight"), _f(sd, "final_out.bias")
    return w[0, 0] * x.real + w[0, 1] * x.imag + b[0]


def frontend(sd, prefix, src, blocks, stride=2):
    """The front end on complex `(B, T, F)`: each frame a 1-channel signal
    (`view(-1, 1, F)`), `blocks` conv / batch norm / CReLU blocks, flatten
    channel-major (`c L + l`), reshape back to `(B, T, C L)`."""
    batch, frames, bins = src.shape
    x = src.reshape(-1, 1, bins)
    for b in range(blocks):
        x = complex_conv1d(sd, f"{prefix}{3 * b}.", x, stride)
        x = batch_norm(sd, f"{prefix}{3 * b + 1}.", x)
        x = crelu(x)
    return x.reshape(x.shape[0], -1).reshape(batch, frames, -1)


def _head(sd, x):
    x = crelu(complex_linear(sd, "output_linear_1.", x))
    x = complex_linear(sd, "output_linear_2.", x)
    return final_out(sd, x)


def _count(sd, stem):
    layers = {
        int(k.split(".")[2]) for k in sd if k.startswith(f"{stem}.layers.")
    }
    return len(layers)


def _blocks(sd, prefix):
    return len(
        {
            k.split(".")[1]
            for k in sd
            if k.startswith(prefix) and "Conv_real.weight" in k
        }
    )


def classifier(sd, src, num_heads, variant="realip"):
    """`Transformer_Pred.forward` (eval mode) on complex `(B, T, F)`:
    logits `(B, T, notes)`."""
    x = frontend(sd, "conv.", src, _blocks(sd, "conv."))
    x = complex_linear(sd, "in_embedding.", x)
    x = x + positions(x.shape[1], x.shape[2])
    for i in range(_count(sd, "encoder")):
        x = encoder_layer(sd, f"encoder.layers.{i}.", x, num_heads, variant)
    return _head(sd, x)


def generator(sd, src, tgt, num_heads, variant="realip"):
    """`Transformer_Generation.forward` (eval mode) on complex `(B, S, F)`
    spectra and real `(B, T, notes)` target notes: the target is shifted
    right with a zero start token, embedded as complex with zero imaginary
    part, positions restart at 0; logits `(B, T, notes)`."""
    x = frontend(sd, "conv_src.", src, _blocks(sd, "conv_src."))
    x = complex_linear(sd, "in_embedding_src.", x)
    x = x + positions(x.shape[1], x.shape[2])
    for i in range(_count(sd, "encoder")):
        x = encoder_layer(sd, f"encoder.layers.{i}.", x, num_heads, variant)
    shifted = np.concatenate([np.zeros_like(tgt[:, :1]), tgt[:, :-1]], axis=1)
    y = complex_linear(sd, "in_embedding_tgt.", shifted.astype(np.complex128))
    y = y + positions(y.shape[1], y.shape[2])
    for i in range(_count(sd, "decoder")):
        y = decoder_layer(sd, f"decoder.layers.{i}.", y, x, num_heads, variant)
    return _head(sd, y)
