"""The functional core of complex attention, on stacked per-head tensors.

Shapes use B = batch, T = query length, S = key length, N = heads,
H = key/query head width and V = value head width, both in complex units.
Per-head tensors are laid out like `keras.ops.dot_product_attention`'s,
`(B, T, N, 2H)`, each head's features stacked `[real | imag]`.

With the score `A = scale * <q, k>` (`(T, S)` per head, complex):

| softmax   | paper  | weights `W`                          |
| --------- | ------ | ------------------------------------ |
| "real"    | CAtt   | `softmax(Re A)`, real                |
| "abs"     | APAtt  | `softmax(abs(A)) * sgn(A)`, complex  |
| "absonly" | AAtt   | `softmax(abs(A))`, real              |
| "naive"   | RIAtt  | `softmax(Re A) + i softmax(Im A)`    |

| product    | reference | `<q, k>`       |
| ---------- | --------- | -------------- |
| "inner"    | "ip"      | `q conj(k)^T`  |
| "bilinear" | "cp"      | `q k^T`        |

and the output is the complex product `W v`.

Every complex product here is a real matmul on stacked vectors. Writing
`s(a, b) = a_r . b_r + a_i . b_i` for the real dot product of two stacked
vectors, `Re(a conj(b)) = s(a, b)` and `Im(a conj(b)) = s(a, i b)`. So the
real part of the inner-product score is one real dot product of width 2H,
and CAtt is exactly a real scaled-dot-product attention of head width 2H
(it runs through `keras.ops.dot_product_attention` when the value heads
are as wide as the key heads, with the keys conjugated for the bilinear
product). The other variants
stack the keys `[k, i k]` along the key axis, one matmul of width 2S giving
`[Re A | Im A]`, and stack the values `[v, i v]` the same way, one matmul
for the complex `W v`.

Masks are boolean, `True` = attend, broadcastable to `(B, N, T, S)`; ranks
2 `(T, S)` and 3 `(B, T, S)` are accepted too. A masked key gets weight
exactly 0 (in both softmaxes for "naive"); a query row with no key left gets
all-zero weights and a zero output, with finite gradients.
"""

import contextlib

from keras import backend
from keras import ops
from keras import random

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import chunked_attention
from cvattn_keras import complex as cx
from cvattn_keras._attention_args import PRODUCTS
from cvattn_keras._attention_args import SOFTMAX_VARIANTS
from cvattn_keras._attention_args import allowed_positions
from cvattn_keras._attention_args import check_mask_shape
from cvattn_keras._attention_args import check_shapes
from cvattn_keras._attention_args import expand_mask
from cvattn_keras._attention_args import parse_variant
from cvattn_keras._attention_args import resolve_product
from cvattn_keras._attention_args import resolve_sliding_window
from cvattn_keras._attention_args import resolve_softmax

__all__ = [
    "PRODUCTS",
    "SOFTMAX_VARIANTS",
    "apply_weights",
    "attention_weights",
    "check_mask_shape",
    "chunk_for",
    "complex_dot_product_attention",
    "complex_scores",
    "expand_mask",
    "parse_variant",
    "portable_masking",
    "resolve_chunk_size",
    "resolve_product",
    "resolve_softmax",
]

# The fill of masked logits (float32 and wider; float16), as Keras's.
_LARGE_NEGATIVE = (-0.7 * 3.4028235e38, -0.7 * 65504.0)
# Real-valued weights: these variants need neither Im A in the softmax nor
# the doubled value matmul.
_REAL_WEIGHTS = ("real", "absonly")

# chunk_size="auto": keys in blocks of AUTO_CHUNK_SIZE once each head's
# (T, S) scores reach AUTO_CHUNK_MIN_SCORES numbers (T * S, static; an
# unknown T counts as S, self-attention). Measured at T = S = 4096 (B = 1,
# 4 heads, E = 128, forward+backward, XLA, benchmarks/attention_memory.py):
# the full path peaks at 2.2-4.4 GiB, the chunked one at 1.0-1.3 GiB, in
# 0.38x (CAtt), 1.04x (APAtt), 1.19x (AAtt), 1.10x (RIAtt) the full
# path's time (blocks of 1024: 0.40-1.28x, no better). The full path's
# memory grows as T * S from there. A decoding step (T = 1) or a short
# query never chunks. With a sliding window W each query block reads only
# its window's keys, so blocks pay from far shorter lengths: causal,
# forward+backward, XLA, CPU (4 heads, 16 complex dims), T = 640, 1024,
# 2048 with W = 16 took 0.65x, 0.14x, 0.04x the full path's time, W = 128
# 0.80x, 0.25x, 0.08x; W = 400 at T = 640 1.15x (slower): the rule chunks
# once T and S - W exceed one block.
AUTO_CHUNK_MIN_SCORES = 4096 * 4096
AUTO_CHUNK_SIZE = 512


@contextlib.contextmanager
def portable_masking():
    """Within this context, the attention takes forms that suit TFLite's
    integer kernels and the GPU delegate, with the same weights: masked
    CAtt takes the general path instead of
    `keras.ops.dot_product_attention`; every variant's masked softmax
    shifts the scores and multiplies them by the mask as 0/1 instead of
    filling masked scores, and divides by the row's mean through RSQRT (no
    SELECT_V2 with a broadcast branch, no DIV, which 16-bit TFLite lacks);
    APAtt, AAtt and RIAtt work on the rank-4 halves `Re A`, `Im A` of the
    scores instead of a rank-5 view; negations are products with -1 (NEG
    has no integer kernel). Masked scores must be finite.

    The default fill, `-0.7 * float32 max` (fast: a `where` before a plain
    softmax), becomes -inf in float16 (NaN on fully masked rows) and
    swamps the calibrated range of int8 quantization. Likewise APAtt and
    AAtt take the modulus of the scores without squaring them (the scaled
    form of `cvattn_keras.complex.modulus_and_sign`), which lowers their
    int8 error (APAtt: 8.6% to 5.4% of the output's scale on the test
    model). `cvattn_keras.export` traces models under this context.
    """
    token = _tracing._FILL_MASKED.set(False)
    try:
        yield
    finally:
        _tracing._FILL_MASKED.reset(token)


def resolve_chunk_size(chunk_size, name="chunk_size"):
    """Validates a `chunk_size` argument: `None`, `"auto"` or a positive
    int; returns it (an int as `int`)."""
    if chunk_size == "auto" and isinstance(chunk_size, str):
        return chunk_size
    if chunk_size is None or check._is_int(chunk_size):
        return check.positive_int(chunk_size, name, allow_none=True)
    raise ValueError(
        f"`{name}` must be a positive integer, 'auto' or None. "
        f"Received: {name}={chunk_size!r}"
    )


def chunk_for(chunk_size, keys, queries=None, sliding_window=None):
    """The block size the keys go through in, or `None` for the full
    path: `chunk_size` (an int) when the static key length `keys` exceeds
    it; for `"auto"`, `AUTO_CHUNK_SIZE` once `queries * keys >=
    AUTO_CHUNK_MIN_SCORES` (an unknown query length `queries` counts as
    `keys`) and `keys > AUTO_CHUNK_SIZE`, or, with a `sliding_window` W,
    once both `queries` and `keys - W` exceed `AUTO_CHUNK_SIZE` (each
    query block then reads its window's keys only: O(T W) work, see
    `AUTO_CHUNK_SIZE`); `None` for `chunk_size=None` or an unknown key
    length."""
    keys, queries = check.static_size(keys), check.static_size(queries)
    if keys is None or chunk_size is None:
        return None
    if chunk_size == "auto":
        queries = keys if queries is None else queries
        wide = queries * keys >= AUTO_CHUNK_MIN_SCORES
        if sliding_window is not None:
            wide = wide or (
                queries > AUTO_CHUNK_SIZE
                and keys - sliding_window > AUTO_CHUNK_SIZE
            )
        return AUTO_CHUNK_SIZE if wide and keys > AUTO_CHUNK_SIZE else None
    return chunk_size if keys > chunk_size else None


def complex_scores(
    query,
    key,
    product="inner",
    scale=1.0,
    real_only=False,
    score_dtype=None,
    complex_matmul="auto",
):
    """The scaled complex scores `A = scale * <q, k>` of every head.

    Args:
        query: `(B, T, N, 2H)` stacked per head.
        key: `(B, S, N, 2H)` stacked per head.
        product: `"inner"` (`q conj(k)^T`) or `"bilinear"` (`q k^T`).
        scale: multiplies both parts of the score.
        real_only: compute only `Re A`, one matmul of width S.
        score_dtype: the dtype of the returned scores. Defaults to the
            operands'. When it differs (bfloat16 operands, float32
            scores), the matmul takes the operands as they are, its output
            is cast to `score_dtype` and then scaled.
        complex_matmul: `"block"`: one matmul of the queries against the
            keys and `i` times the keys (four real multiplications per
            complex one); `"gauss"`: Gauss's three matmuls of width S
            (`complex.gauss_product`); `"auto"` (default): Gauss's when
            the head width and S are both at least
            `complex.GAUSS_MIN_SIZE`. Ignored with `real_only`; an S
            unknown when traced takes the block form.

    Returns:
        `(B, N, T, 2S)` with `[Re A | Im A]` on the last axis, or
        `(B, N, T, S)` holding `Re A` when `real_only`.
    """
    product = resolve_product(product)
    complex_matmul = cx.resolve_complex_matmul(complex_matmul)
    equation = "btnh,bsnh->bnts"
    head_width, keys = query.shape[-1], key.shape[1]
    if (
        not real_only
        and None not in (head_width, keys)
        and cx.use_gauss(
            complex_matmul, head_width // 2, keys, dtype=query.dtype
        )
    ):
        # A = sum_h q_h w_h with w = conj(k) (inner) or k (bilinear).
        key_real, key_imag = cx.split(key)
        if product == "inner":
            key_imag = cx.negative(key_imag)

        def scores(query):
            return cx.gauss_product_stacked(
                query,
                key_real,
                key_imag,
                lambda x, w: ops.einsum(equation, x, w),
            )

    else:
        # <q, k> = q conj(k') with k' = k (inner) or conj(k) (bilinear),
        # so Re A = s(q, k') and Im A = s(q, i k').
        key = key if product == "inner" else cx.conjugate(key)
        if not real_only:
            key = ops.concatenate([key, cx.times_i(key)], axis=1)  # (B,2S,N,2H)

        def scores(query):
            return ops.einsum(equation, query, key)

    if score_dtype is None or backend.standardize_dtype(
        score_dtype
    ) == backend.standardize_dtype(query.dtype):
        # Scaling the query rather than the scores touches T*2H numbers,
        # not T*2S (and no more in the gradient).
        return scores(query * ops.cast(scale, query.dtype))
    # Low-precision operands: scale the widened scores, so that the scale
    # adds no rounding of its own.
    widened = ops.cast(scores(query), score_dtype)
    return widened * ops.cast(scale, score_dtype)


def _modulus_and_sign(real, imag):
    """`(|z|, re sgn z, im sgn z)` of `z = real + i imag`, all of the
    halves' shape, for `portable_masking`: the scaled form of
    `cx.modulus_and_sign` (divide by `m = max(|re|, |im|)` first, so that
    no intermediate leaves the data's range, which int8 calibration could
    not resolve), without its rank-5 `(..., 2, n)` view (the GPU delegate
    takes rank 4 at most) and with scalar branches in every `where` (no
    all-zero constant tensor, which has no int8 kernel). At 0 all three
    are 0 with a zero gradient."""
    largest = ops.stop_gradient(ops.maximum(ops.abs(real), ops.abs(imag)))
    nonzero = largest > 0
    safe = ops.where(nonzero, largest, 1.0)
    unit_r, unit_i = real / safe, imag / safe
    # In [1, 2] where z != 0; 1 (instead of 0) elsewhere, so that the
    # root's derivative stays finite in the branch `where` discards.
    squared = ops.where(nonzero, unit_r * unit_r + unit_i * unit_i, 1.0)
    root = ops.sqrt(squared)
    magnitude = largest * root  # 0 where z = 0
    sign_r = ops.where(nonzero, unit_r / root, 0.0)
    sign_i = ops.where(nonzero, unit_i / root, 0.0)
    return magnitude, sign_r, sign_i


def _softmax(logits):
    """`keras.ops.softmax` over the last axis. Over a (static) axis of
    size 1, where `ops.softmax` warns ("did you mean sigmoid?") although a
    single key is legitimate here, the same numbers by its definition:
    `exp(x - max) / sum` is exactly 1 for a finite logit (NaN for a
    non-finite one, as `ops.softmax` gives), with gradient 0."""
    if logits.shape[-1] != 1:
        return ops.softmax(logits, axis=-1)
    exp = ops.exp(logits - ops.stop_gradient(logits))
    return exp / ops.sum(exp, axis=-1, keepdims=True)


def _mask_as_multiplier(mask):
    """A bool mask as 0/1 floats for `portable_masking`: a select with
    scalar branches (a mask computed at run time would leave a float CAST
    in an int8 file; a constant one is folded either way); for int16x8
    files (`_tracing.lookup_masks`, TensorFlow only), a lookup in `[0, 1]`
    at the mask as int32 (GATHER), since TFLite's 16-bit activation mode
    has no SELECT_V2 (nor a float CAST). `tf.gather` itself: Keras' `take`
    adds a negative-index fix that TensorFlow 2.21's converter folds into
    an invalid op on a bool mask."""
    if _tracing.lookup_masks() and backend.backend() == "tensorflow":
        import tensorflow as tf

        table = tf.constant([0.0, 1.0], dtype="float32")
        return tf.gather(table, tf.cast(mask, "int32"))
    return ops.where(mask, 1.0, 0.0)


def _masked_softmax(logits, mask):
    """Softmax over the last axis with masked entries exactly 0, and rows
    with nothing to attend all 0 (instead of uniform or NaN).

    By default masked logits are filled with `-0.7 * float32 max` (as
    `keras.ops.dot_product_attention` does; exp() makes them exactly 0)
    before a plain softmax: about half the elementwise passes of the
    portable way below. Under `portable_masking` no constant outside the
    data's range appears: float16 would turn the fill into -inf, and int8
    quantization calibrates each tensor's range, which the fill would swamp.
    """
    if mask is None:
        return _softmax(logits)
    if _tracing.fill_masked():
        half = backend.standardize_dtype(logits.dtype) == "float16"
        fill = ops.cast(_LARGE_NEGATIVE[half], logits.dtype)
        weights = _softmax(ops.where(mask, logits, fill))
        # A row with nothing to attend came out uniform: make it 0.
        has_key = ops.any(mask, axis=-1, keepdims=True)
        return weights * ops.cast(has_key, weights.dtype)
    # Under portable_masking the mask multiplies, as 0/1 (the integer
    # kernels of TFLite's 16-bit mode have no SELECT_V2 or GREATER, and
    # the GPU delegate no select with a broadcast branch); masked scores
    # must be finite (padding's are: they are products of finite keys).
    # Shift by the largest attended logit: the attended logits minus the
    # row's minimum are >= 0, masked ones 0, so their maximum is the
    # largest attended logit minus the minimum (0 for a row with none).
    keep = _mask_as_multiplier(mask)
    row_min = ops.stop_gradient(ops.min(logits, axis=-1, keepdims=True))
    lifted = (logits - row_min) * keep
    row_max = ops.stop_gradient(ops.max(lifted, axis=-1, keepdims=True))
    exp = ops.exp(lifted - row_max) * keep  # masked: 0
    # The largest attended entry is exp(0) = 1, so the mean is >= 1 / S
    # when any key is attended and 0 otherwise: its maximum with 1 / S is
    # the attended rows' mean, and leaves the others 0. Divided as the
    # square of a reciprocal square root (16-bit TFLite has RSQRT but no
    # DIV), by the mean rather than the total (its 16-bit SUM loses the
    # sum: 80% error where MEAN is exact to 1e-4).
    keys = logits.shape[-1]
    if keys is None:  # a dynamic key length: the total, >= 1 if any
        total = ops.sum(exp, axis=-1, keepdims=True)
        inverse = ops.rsqrt(ops.maximum(total, 1.0))
        return exp * (inverse * inverse)
    mean = ops.mean(exp, axis=-1, keepdims=True)
    inverse = ops.rsqrt(ops.maximum(mean, 1.0 / keys))
    return exp * (inverse * inverse) * (1.0 / keys)


def attention_weights(scores, softmax="real", mask=None):
    """The attention weights of one softmax variant.

    Args:
        scores: the output of `complex_scores`: `(B, N, T, S)` holding
            `Re A` for `"real"` (computed with `real_only=True`, as CAtt
            needs nothing else), `(B, N, T, 2S)` holding `[Re A | Im A]`
            for the other variants.
        softmax: a softmax variant or alias (see `resolve_softmax`).
        mask: optional boolean mask, `True` = attend, of rank 2 `(T, S)`,
            3 `(B, T, S)` or 4 `(B, N, T, S)`, broadcastable.

    Returns:
        `(B, N, T, S)` real weights for `"real"` and `"absonly"`;
        `(B, N, T, 2S)` stacked complex weights for `"abs"` and `"naive"`.
    """
    softmax = resolve_softmax(softmax)
    mask = expand_mask(mask)
    if _tracing.portable():
        # The portable forms use operators: NumPy scores as tensors first.
        scores = ops.convert_to_tensor(scores)
    if softmax == "real":
        return _masked_softmax(scores, mask)
    if _tracing.portable():
        return _portable_weights(scores, softmax, mask)
    if softmax == "naive":
        # Both softmaxes at once on the (B, N, T, 2, S) view, the mask
        # broadcast over the parts: no slicing or concatenating copies.
        if mask is not None:
            mask = ops.expand_dims(mask, -2)  # (B, N, T, 1, S)
        return cx.merge_planes(_masked_softmax(cx.split_planes(scores), mask))
    magnitude, phase = cx.modulus_and_sign(  # (B, N, T, S), (B, N, T, 2S)
        scores, scaled=False
    )
    weights = _masked_softmax(magnitude, mask)
    if softmax == "absonly":
        return weights
    # "abs": restore the phase; sgn(0) = 0, so an exactly-zero score takes
    # softmax mass but contributes nothing, as in the reference. The real
    # weights broadcast over both parts of the phase.
    weights = ops.expand_dims(weights, -2)  # (B, N, T, 1, S)
    return cx.merge_planes(cx.split_planes(phase) * weights)


def _portable_weights(scores, softmax, mask):
    """`attention_weights` under `portable_masking` (`softmax` not
    "real"): the same weights, computed on the rank-4 halves `Re A`,
    `Im A` of the scores (no rank-5 view, which the GPU delegate and some
    integer kernels reject), with the modulus of APAtt and AAtt taken
    without squaring the scores (`_modulus_and_sign`), which lowers their
    int8 error (APAtt: 8.6% to 5.4% of the output's scale on the test
    model)."""
    real, imag = cx.split(scores)  # (B, N, T, S) each
    if softmax == "naive":
        return ops.concatenate(
            [_masked_softmax(real, mask), _masked_softmax(imag, mask)], -1
        )
    magnitude, sign_r, sign_i = _modulus_and_sign(real, imag)
    weights = _masked_softmax(magnitude, mask)
    if softmax == "absonly":
        return weights
    return ops.concatenate([sign_r * weights, sign_i * weights], axis=-1)


def apply_weights(weights, value, softmax="real", complex_matmul="auto"):
    """The complex product `W v` of the weights and the values of each head.

    Args:
        weights: as `attention_weights` returns them for `softmax`:
            `(B, N, T, S)` real or `(B, N, T, 2S)` stacked complex.
        value: `(B, S, N, 2V)` stacked per head.
        softmax: the variant that produced `weights`.
        complex_matmul: for complex weights, `"block"` (one matmul
            against the values and `i` times the values), `"gauss"`
            (three matmuls, `complex.gauss_product`) or `"auto"`
            (default: Gauss's when S and V are both at least
            `complex.GAUSS_MIN_SIZE`). An S unknown when traced always
            takes the block form.

    Returns:
        `(B, T, N, 2V)` stacked per head.
    """
    complex_matmul = cx.resolve_complex_matmul(complex_matmul)
    complex_weights = resolve_softmax(softmax) not in _REAL_WEIGHTS
    # S and V as use_gauss sees them (an unknown S: the block form).
    keys, width = value.shape[1], value.shape[-1]
    if (
        complex_weights
        and None not in (keys, width)
        and cx.use_gauss(complex_matmul, keys, width // 2, dtype=value.dtype)
    ):
        return cx.gauss_product_stacked(
            weights,
            *cx.split(value),
            lambda x, w: ops.einsum("bnts,bsnh->btnh", x, w),
        )
    if complex_weights:
        # [W_r | W_i] @ [v ; i v] = W_r v + W_i (i v) = W v: one matmul.
        value = ops.concatenate([value, cx.times_i(value)], axis=1)
    return ops.einsum("bnts,bsnh->btnh", weights, value)


def complex_dot_product_attention(
    query,
    key,
    value,
    softmax="real",
    product="inner",
    scale=None,
    mask=None,
    dropout=0.0,
    seed=None,
    return_weights=False,
    chunk_size=None,
    is_causal=False,
    complex_matmul="auto",
    sliding_window=None,
):
    """Complex multi-head attention on stacked per-head tensors.

    Precision (mixed precision): the softmax, moduli and masking are
    computed in float32 whatever the input dtype (float64 stays float64).
    The matmuls take bfloat16 operands as they come (as Keras'
    `MultiHeadAttention` does), their scores cast to float32 before the
    softmax and the weights cast to bfloat16 for the product with the
    values; float16 queries and keys are widened to float32 for the scores
    (float16 scores overflow beyond 65504). The output is in `value`'s
    dtype.

    Args:
        query: `(B, T, N, 2H)`.
        key: `(B, S, N, 2H)`.
        value: `(B, S, N, 2V)`.
        softmax: `"real"` (CAtt), `"abs"` (APAtt), `"absonly"` (AAtt) or
            `"naive"` (RIAtt), or an alias (see `resolve_softmax`).
        product: `"inner"` (`q conj(k)`) or `"bilinear"` (`q k`).
        scale: the score scale. Defaults to `H ** -0.5`, H in complex units.
        mask: optional boolean mask, `True` = attend, of rank 2 `(T, S)`,
            3 `(B, T, S)` or 4 `(B, N, T, S)`, broadcastable.
        dropout: the rate of dropout on the weights; one Bernoulli mask
            multiplies both parts of complex weights. Pass 0 at inference.
        seed: seed or `keras.random.SeedGenerator` for the dropout.
        return_weights: also return the weights.
        chunk_size: `None`, `"auto"` or a positive int: with a key length
            (static) above `chunk_size`, and neither `return_weights` nor
            `dropout` nor `portable_masking`, the keys go through in
            blocks of `chunk_size` (`cvattn_keras.chunked_attention`: O(T)
            memory forward and backward, the same results within float32
            rounding). `"auto"`: blocks of `AUTO_CHUNK_SIZE` (512) once
            `T * S` reaches `AUTO_CHUNK_MIN_SCORES` (4096 squared; see
            `chunk_for`). `None` (default): always the full path.
        is_causal: if `True`, query `t` attends only to keys `s <= t`
            (top-left aligned), combined with `mask`. The chunked path
            builds each block's part only, so that no `(T, S)` mask is
            held; the full path builds the `(T, S)` mask.
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`: the
            form of the complex score and weights-times-values products
            on the full path (see `complex_scores`, `apply_weights`); the
            chunked path and CAtt's fused kernel have their own.
        sliding_window: `None` (default) or a positive int `W`: query `t`
            attends only to keys `t - W < s` (with `is_causal`, keys
            `t - W < s <= t`: the last `W` positions; without, also `s < t
            + W`), top-left aligned, combined with `mask`. The chunked
            path builds each block's part only.

    Returns:
        The output `(B, T, N, 2V)`, and, if `return_weights`, the weights
        `(B, N, T, 2S)` as `[Re W | Im W]` (before dropout, the imaginary
        part zero for the real-valued variants).

    Examples:
        >>> q = ops.ones((2, 5, 4, 6))   # B=2, T=5, N=4, H=3
        >>> kv = ops.ones((2, 7, 4, 6))  # S=7
        >>> tuple(complex_dot_product_attention(q, kv, kv, softmax="abs").shape)
        (2, 5, 4, 6)
    """
    softmax = resolve_softmax(softmax)
    product = resolve_product(product)
    complex_matmul = cx.resolve_complex_matmul(complex_matmul)
    dropout = check.rate(dropout, "dropout")
    head_dim = cx.check_even(query.shape[-1], "query.shape[-1]") // 2
    check_shapes(query, key, value)
    if scale is None:
        scale = head_dim**-0.5
    elif not hasattr(scale, "shape"):  # a number (a tensor passes as is)
        scale = check.greater_than(scale, "scale")
    mask = expand_mask(mask)
    if mask is not None:
        batch, length, heads = query.shape[:3]
        check_mask_shape(
            mask.shape,
            (batch, heads, length, key.shape[1]),
            "mask",
            "(B, N, T, S)",
        )
    chunk_size = resolve_chunk_size(chunk_size)
    if not isinstance(is_causal, bool):
        raise ValueError(
            f"`is_causal` must be a bool. Received: is_causal={is_causal!r}"
        )
    sliding_window = resolve_sliding_window(sliding_window)
    chunk_size = chunk_for(
        chunk_size, key.shape[1], query.shape[1], sliding_window
    )
    if (
        chunk_size is not None
        and not return_weights
        and not dropout
        and _tracing.fill_masked()
    ):
        return chunked_attention.chunked_dot_product_attention(
            query,
            key,
            value,
            softmax,
            product,
            scale=scale,
            mask=mask,
            is_causal=is_causal,
            chunk_size=chunk_size,
            sliding_window=sliding_window,
        )
    if is_causal or sliding_window is not None:  # (1, 1, T, S), top-left
        rows = ops.arange(ops.shape(query)[1], dtype="int32")[:, None]
        cols = ops.arange(ops.shape(key)[1], dtype="int32")[None, :]
        allowed = allowed_positions(rows, cols, is_causal, sliding_window)
        allowed = ops.expand_dims(allowed, (0, 1))
        mask = allowed if mask is None else ops.logical_and(mask, allowed)
    out_dtype = value.dtype
    matmul_dtype, score_dtype = _precision(query.dtype, key.dtype)
    query = ops.cast(query, matmul_dtype)
    key = ops.cast(key, matmul_dtype)

    if (
        softmax == "real"
        and not return_weights
        and not dropout
        and (mask is None or _tracing.fill_masked())
        and value.shape[-1] == query.shape[-1]
    ):
        # CAtt is a real attention of width 2H: use the fused kernel (which
        # needs values as wide as the keys on some backends, e.g. JAX's).
        # Its scores and softmax are float32 for bfloat16 operands, as
        # Keras' MultiHeadAttention's. For the bilinear product,
        # Re(q k^T) = Re(q conj(conj k)^T).
        if product == "bilinear":
            key = cx.conjugate(key)
        outputs = ops.dot_product_attention(
            query, key, ops.cast(value, matmul_dtype), mask=mask, scale=scale
        )
        if mask is not None:
            # The fused kernel spreads a fully masked row uniformly; such a
            # row must give 0. (B|1, N|1, T) -> (B|1, T, N|1, 1).
            has_key = ops.any(mask, axis=-1)
            has_key = ops.expand_dims(ops.transpose(has_key, (0, 2, 1)), -1)
            outputs = outputs * ops.cast(has_key, outputs.dtype)
        return ops.cast(outputs, out_dtype)

    scores = complex_scores(
        query,
        key,
        product,
        scale,
        real_only=softmax == "real",
        score_dtype=score_dtype,
        complex_matmul=complex_matmul,
    )
    weights = attention_weights(scores, softmax, mask)
    kept = weights
    if dropout:
        kept = _dropout(weights, softmax, dropout, seed)
    outputs = apply_weights(
        ops.cast(kept, out_dtype), value, softmax, complex_matmul
    )
    if not return_weights:
        return outputs
    if softmax in _REAL_WEIGHTS:
        weights = cx.merge(weights, ops.zeros_like(weights))
    return outputs, ops.cast(weights, out_dtype)


def _precision(query_dtype, key_dtype):
    """`(matmul_dtype, score_dtype)` for the score matmul: bfloat16
    operands stay bfloat16 (the matmul units' native type; its range is
    float32's), their scores are cast to float32; float16 operands are
    widened to float32 first, since scores beyond 65504 would overflow;
    float64 stays float64; anything else computes in float32."""
    dtype = backend.result_type(query_dtype, key_dtype)
    if dtype == "bfloat16":
        return "bfloat16", "float32"
    if dtype == "float64":
        return "float64", "float64"
    return "float32", "float32"


def _dropout(weights, softmax, rate, seed):
    """Dropout on the weights, one Bernoulli mask shared by both parts."""
    if softmax in _REAL_WEIGHTS:
        return random.dropout(weights, rate, seed=seed)
    return cx.dropout(weights, rate, seed=seed)
