"""Complex attention in O(T) memory: keys in blocks, an online softmax.

`chunked_dot_product_attention` computes what
`cvattn_keras.attention.complex_dot_product_attention` computes, for every
softmax variant and product, without ever holding the `(T, S)` scores:
the keys and values go through in blocks of `chunk_size`, and each query
row keeps a running maximum `m`, a running normaliser `l` and a running
numerator `acc` (the online-softmax recurrence of FlashAttention). Per
block of keys, with `x` the block's logits and `m' = max(m, max x)`:

    l   <- l exp(m - m') + sum exp(x - m')
    acc <- acc exp(m - m') + sum exp(x - m') w v
    out  = acc / l

where the logits and the extra factor `w` depend on the variant:

| softmax   | logits `x` | `w`      | state                           |
| --------- | ---------- | -------- | ------------------------------- |
| "real"    | `Re A`     | 1        | one `(m, l, acc)`               |
| "absonly" | `abs(A)`   | 1        | one `(m, l, acc)`               |
| "abs"     | `abs(A)`   | `sgn(A)` | one `(m, l, acc)`, `acc` complex|
| "naive"   | `Re A`,    | 1        | two, one per softmax; the       |
|           | `Im A`     |          | output `o_re + i o_im`          |

The gradient is custom (`keras.ops.custom_gradient`) and recomputes each
block's weights from the saved row statistics `m + log l` and the output,
as FlashAttention's backward does, so that training does not store the
scores either: the residuals are the inputs, the output and one or two
numbers per query row. Memory is O(T * chunk_size) per head for the
blocks in flight, plus O((T + S) * head width), plus the mask if one is
given (`(B|1, T, S)` bools; `is_causal=True` needs none).

With a sliding window (`sliding_window=W`) and a query length known when
traced, the loops run over blocks of query rows instead (`W` rows, at
least 16, at most `chunk_size`), each against the one contiguous span of
keys its window reaches (`_block_pattern`, shared with
`layers.ComplexSparseAttention`): `Cq + 2W - 2` keys, `Cq + W - 1` when
causal. The key blocks outside the window are never visited, forward or
backward: O(T * W) work instead of O(T * S), one softmax per query block
(its keys all in one block).

Both loops (forward and backward) are `keras.ops.fori_loop`s over the
blocks: on TensorFlow and JAX one compiled loop whatever the number of
blocks (a Python loop would unroll into a graph that grows with S, and
XLA could merge the backward's recomputation with the forward's and keep
the scores alive); on PyTorch it is a Python loop. Without a window the
queries are not blocked: each block's matmuls see every query row, the
widest matmuls this layout allows.

Precision: everything is computed in float32 (float64 stays float64);
the output is cast to `value`'s dtype and the gradients to their inputs'
dtypes. Fully masked rows give an exactly-zero output and zero, finite
gradients, as in the full path. `sgn(0) = 0` and the gradient of the
modulus at 0 is 0 (the library's convention).

Not covered here (use the full path): dropout on the weights, returning
the weights, `portable_masking` (export), and key lengths unknown when the
function is traced.
"""

from keras import backend
from keras import ops

from cvattn_keras import _attention_args as args
from cvattn_keras import _block_pattern as pattern
from cvattn_keras import _validation as check
from cvattn_keras import complex as cx

__all__ = ["chunked_dot_product_attention"]

# The fill of masked logits and the initial running maximum: finite, so
# that exp(m - m') is 1 (not NaN) while a row has seen no attended key.
_NEGATIVE = -0.7 * 3.4028235e38


def chunked_dot_product_attention(
    query,
    key,
    value,
    softmax="real",
    product="inner",
    scale=None,
    mask=None,
    is_causal=False,
    chunk_size=512,
    sliding_window=None,
):
    """Complex multi-head attention with the keys in blocks (O(T) memory).

    The same results as
    `cvattn_keras.attention.complex_dot_product_attention` (without
    dropout or returned weights), to float32 rounding, for every variant,
    product and mask; see the module docstring for how.

    Args:
        query: `(B, T, N, 2H)` stacked per head.
        key: `(B, S, N, 2H)`; `S` must be known when traced.
        value: `(B, S, N, 2V)`.
        softmax: `"real"` (CAtt), `"abs"` (APAtt), `"absonly"` (AAtt) or
            `"naive"` (RIAtt), or an alias (see
            `cvattn_keras.attention.resolve_softmax`).
        product: `"inner"` (`q conj(k)`) or `"bilinear"` (`q k`).
        scale: the score scale, a positive number. Defaults to
            `H ** -0.5`, H in complex units. A tensor is taken as a
            constant (no gradient flows to it).
        mask: optional boolean mask, `True` = attend, of rank 2 `(T, S)`,
            3 `(B, T, S)` or 4 `(B, N, T, S)`, broadcastable.
        is_causal: if `True`, query `t` attends only to keys `s <= t`
            (top-left aligned), combined with `mask`.
        chunk_size: the number of keys per block, a positive integer;
            blocks hold `(B, N, T, chunk_size)` scores. When `S` is not a
            multiple of it, the last block overlaps the one before and
            masks the keys that one covered.
        sliding_window: `None` or a positive int `W`: query `t` attends
            only to keys `t - W < s` (and `s < t + W` without
            `is_causal`). With a query length known when traced, the
            queries go in blocks, each against its window's keys only
            (O(T * W) work; see the module docstring); otherwise the key
            blocks each mask the window, as the causal mask.

    Returns:
        The output `(B, T, N, 2V)`, in `value`'s dtype.

    Raises:
        ValueError: for a bad `chunk_size`, `scale`, variant, mask shape,
            inconsistent shapes or an unknown key length.
    """
    softmax = args.resolve_softmax(softmax)
    product = args.resolve_product(product)
    chunk_size = check.positive_int(chunk_size, "chunk_size")
    head_dim = cx.check_even(query.shape[-1], "query.shape[-1]") // 2
    args.check_shapes(query, key, value)
    cx.check_even(value.shape[-1], "value.shape[-1]")
    if scale is None:
        scale = head_dim**-0.5
    elif not hasattr(scale, "shape"):
        scale = check.greater_than(scale, "scale")
    keys = key.shape[1]
    if keys is None:
        raise ValueError(
            "The chunked attention needs a key length known when traced "
            "(the number of blocks is static). Received: "
            f"key.shape={tuple(key.shape)}"
        )
    if not isinstance(is_causal, bool):
        raise ValueError(
            f"`is_causal` must be a bool. Received: is_causal={is_causal!r}"
        )
    mask = args.expand_mask(mask)
    if mask is not None:
        batch, length, heads = query.shape[:3]
        args.check_mask_shape(
            mask.shape, (batch, heads, length, keys), "mask", "(B, N, T, S)"
        )
    window = args.resolve_sliding_window(sliding_window)
    plan = _Plan(
        softmax,
        product,
        scale,
        mask,
        is_causal,
        chunk_size,
        keys,
        window,
        rows=check.static_size(query.shape[1]),
    )

    @ops.custom_gradient
    def attend(query, key, value):
        outputs, residuals = plan.forward(query, key, value)

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            return plan.backward(residuals, upstream)

        return outputs, grad

    return attend(query, key, value)


def _compute_dtype(*dtypes):
    """float64 if any input is float64, float32 otherwise."""
    dtypes = [backend.standardize_dtype(d) for d in dtypes]
    return "float64" if "float64" in dtypes else "float32"


def _times_minus_i(x):
    """`-i x` of a stacked tensor, `[im | -re]`: the transpose of
    `complex.times_i` as a linear map, which carries gradients back
    through it."""
    real, imag = cx.split(x)
    return ops.concatenate([imag, -real], axis=-1)


def _safe_divide(numerator, denominator):
    """`numerator / denominator` where the denominator is positive, else 0
    (fully masked rows), with no division by 0 in either branch."""
    positive = denominator > 0
    safe = ops.where(positive, denominator, ops.ones_like(denominator))
    return ops.where(positive, numerator / safe, ops.zeros_like(numerator))


def _modulus_sign(real, imag):
    """`(r, u_re, u_im, 1/r)` of the block's scores, 0 where `r = 0`:
    `sqrt(re^2 + im^2)` unscaled, as the full path computes it."""
    squared = real * real + imag * imag
    nonzero = squared > 0
    root = ops.sqrt(ops.where(nonzero, squared, ops.ones_like(squared)))
    inverse = ops.where(nonzero, 1.0 / root, ops.zeros_like(root))
    modulus = ops.where(nonzero, root, ops.zeros_like(root))
    return modulus, real * inverse, imag * inverse, inverse


def _scores(q, k):
    """`(B, N, T, 2H) x (B, N, C, 2H) -> (B, N, T, C)`."""
    return ops.einsum("bnth,bnch->bntc", q, k)


def _times(p, v):
    """`(B, N, T, C) x (B, N, C, 2V) -> (B, N, T, 2V)`."""
    return ops.einsum("bntc,bnch->bnth", p, v)


def _transposed(p, x):
    """`(B, N, T, C) x (B, N, T, W) -> (B, N, C, W)`: `p^T x`."""
    return ops.einsum("bntc,bnth->bnch", p, x)


class _Plan:
    """The static configuration of one chunked attention and its forward
    and backward loops, on `(B, N, L, width)` tensors.

    Without a window (or with a query length unknown when traced) the
    loops run over blocks of `chunk` keys, each against every query row.
    With a window (`banded`) they run over blocks of `query_block` query
    rows instead, each against the one span of `span` keys its window
    reaches (`_block_pattern`): the key blocks outside the window are
    never visited, O(T * W) work instead of O(T * S)."""

    def __init__(
        self,
        softmax,
        product,
        scale,
        mask,
        causal,
        chunk,
        keys,
        window=None,
        rows=None,
    ):
        self.softmax = softmax
        self.product = product
        self.scale = scale
        self.mask = mask
        self.causal = causal
        self.window = window  # a sliding window's width, or None
        self.chunk = min(chunk, keys)
        self.keys = keys
        self.blocks = -(-keys // self.chunk)
        # The last block starts at S - C: it overlaps the one before when
        # C does not divide S, and masks the keys below (blocks - 1) * C.
        self.overlap = keys % self.chunk != 0
        # Which logits go through a softmax: "re" (Re A), "mod" (abs A) or
        # both "re" and "im" (two softmaxes).
        self.planes = 2 if softmax == "naive" else 1
        self.rows = rows  # the query length, None if unknown when traced
        self.banded = window is not None and rows is not None and rows > 0
        if self.banded:
            self.query_block = pattern.query_block(window, chunk, rows)
            self.query_blocks = -(-rows // self.query_block)
            self.span = pattern.window_span(
                self.query_block, window, causal, keys
            )
            self.row_overlap = rows % self.query_block != 0

    @property
    def work(self):
        """The scores computed per head: `T * S` by key blocks (`T` the
        query length, `None` if unknown), `query_blocks * query_block *
        span` for a window."""
        if self.banded:
            return self.query_blocks * self.query_block * self.span
        if self.rows is None:
            return None
        return self.rows * self.blocks * self.chunk

    # -- per-block pieces ---------------------------------------------

    def _scale(self, dtype):
        """The scale as a tensor of `dtype` (a Python number converted
        straight to it: on PyTorch a cast would round it through
        float32 first)."""
        if hasattr(self.scale, "shape"):
            return ops.cast(self.scale, dtype)
        return ops.convert_to_tensor(self.scale, dtype)

    def _start(self, i):
        """The first key of block `i`."""
        last = self.keys - self.chunk
        if isinstance(i, int):
            return min(i * self.chunk, last)
        return ops.minimum(i * self.chunk, last)

    def _slice_keys(self, x, start, size=None):
        """`x[:, :, start:start + size]` of a `(B, N, L, W)` tensor (`size`
        defaults to the key block `C`)."""
        return _slice_rows(x, start, self.chunk if size is None else size)

    def _user_mask(self, row, rows, start, cols):
        """The mask's part for query rows `[row, row + rows)` (all rows
        when `row` is `None`) and keys `[start, start + cols)`, or
        `None`."""
        mask = self.mask
        if mask is None:
            return None
        by_row = row is not None and mask.shape[2] != 1
        by_key = mask.shape[3] != 1
        if not (by_row or by_key):
            return mask
        begin, size = [0, 0, 0, 0], list(ops.shape(mask))
        if by_row:
            begin[2], size[2] = row, rows
        if by_key:
            begin[3], size[3] = start, cols
        return ops.slice(mask, begin, size)

    def _block_mask(self, i, start, rows):
        """The key block's mask, broadcastable to `(B, N, T, C)`, or
        `None`."""
        masks = []
        mask = self._user_mask(None, rows, start, self.chunk)
        if mask is not None:
            masks.append(mask)
        if self.causal or self.overlap or self.window is not None:
            cols = start + ops.arange(self.chunk, dtype="int32")
            if self.overlap:  # keys the block before covered
                masks.append(cols >= i * self.chunk)
            row = ops.arange(rows, dtype="int32")[:, None]
            allowed = args.allowed_positions(
                row, cols[None, :], self.causal, self.window
            )
            if allowed is not None:
                masks.append(allowed)
        return args.all_of(masks)

    def _band_mask(self, i, row, start):
        """The mask of query block `i` (rows from `row`) against its span
        (keys from `start`), broadcastable to `(B, N, Cq, span)`: the
        window (and causality), the user's mask, and the rows an earlier
        block covered."""
        block = self.query_block
        masks = [
            pattern.local_mask(
                row, start, block, self.span, self.causal, self.window
            )
        ]
        mask = self._user_mask(row, block, start, self.span)
        if mask is not None:
            masks.append(mask)
        if self.row_overlap:
            masks.append(pattern.new_rows(i, row, block))
        return args.all_of(masks)

    def _logits(self, q, kb, ikb):
        """The block's logits `(x, sign)`: `x` a list of one (two for
        "naive") `(B, N, T, C)` tensors, `sign` `(u_re, u_im, 1/r)` for
        "abs" and "absonly", else `None`."""
        real = _scores(q, kb)
        if self.softmax == "real":
            return [real], None
        imag = _scores(q, ikb)
        if self.softmax == "naive":
            return [real, imag], None
        modulus, u_re, u_im, inverse = _modulus_sign(real, imag)
        return [modulus], (u_re, u_im, inverse)

    # -- forward -------------------------------------------------------

    def _initial_state(self, q, v):
        """`(m, l, acc)` per plane for the query rows of `q`."""
        dtype = q.dtype
        stats_shape = ops.shape(q)[:3] + (1,)
        acc_shape = ops.shape(q)[:3] + (ops.shape(v)[3],)
        state = []
        for _ in range(self.planes):
            state += [
                ops.full(stats_shape, _NEGATIVE, dtype),  # running max
                ops.zeros(stats_shape, dtype),  # running normaliser
                ops.zeros(acc_shape, dtype),  # running numerator
            ]
        return state

    def _update(self, state, q, kb, ikb, vb, ivb, mask):
        """One step of the online softmax: the state after the keys `kb`
        (values `vb`, `i vb` for "abs") under `mask`."""
        dtype = q.dtype
        logits, sign = self._logits(q, kb, ikb)
        new = []
        for plane, x in enumerate(logits):
            m, total, acc = state[3 * plane : 3 * plane + 3]
            if mask is not None:
                x = ops.where(mask, x, ops.cast(_NEGATIVE, dtype))
            # max(m, block max) by `where`: Keras 3.15's `ops.maximum`
            # returns float32 for float64 tensors on PyTorch.
            block_max = ops.max(x, axis=-1, keepdims=True)
            top = ops.where(m >= block_max, m, block_max)
            decay = ops.exp(m - top)
            p = ops.exp(x - top)
            if mask is not None:
                p = ops.where(mask, p, ops.zeros_like(p))
            total = total * decay + ops.sum(p, axis=-1, keepdims=True)
            if self.softmax == "abs":
                u_re, u_im, _ = sign
                update = _times(p * u_re, vb) + _times(p * u_im, ivb)
            else:
                update = _times(p, vb)
            new += [top, total, acc * decay + update]
        return new

    def _finish(self, state):
        """`(pieces, log_totals)` per plane from the final state: the
        output `acc / l` (0 for rows with no key) and the row's
        log-sum-exp `m + log l` (0 for rows with no key: their weights
        are masked to 0 in the backward anyway)."""
        pieces, log_totals = [], []
        for plane in range(self.planes):
            m, total, acc = state[3 * plane : 3 * plane + 3]
            pieces.append(_safe_divide(acc, total))
            safe = ops.where(total > 0, total, ops.ones_like(total))
            log_totals.append(
                ops.where(total > 0, m + ops.log(safe), ops.zeros_like(m))
            )
        return pieces, log_totals

    def forward(self, query, key, value):
        out_dtype = value.dtype
        dtype = _compute_dtype(query.dtype, key.dtype, value.dtype)
        q = ops.transpose(ops.cast(query, dtype), (0, 2, 1, 3))
        q = q * self._scale(dtype)  # (B, N, T, 2H), scaled
        k = ops.transpose(ops.cast(key, dtype), (0, 2, 1, 3))
        if self.product == "bilinear":
            k = cx.conjugate(k)  # <q, k> = q conj(k') with k' = conj(k)
        ik = cx.times_i(k)
        v = ops.transpose(ops.cast(value, dtype), (0, 2, 1, 3))
        iv = cx.times_i(v) if self.softmax == "abs" else None
        if self.banded:
            pieces, log_totals = self._forward_banded(q, k, ik, v, iv)
        else:
            pieces, log_totals = self._forward_keys(q, k, ik, v, iv)
        if self.planes == 2:
            pieces[1] = cx.times_i(pieces[1])  # + i softmax(Im A) v
        outputs = pieces[0] if self.planes == 1 else pieces[0] + pieces[1]
        residuals = {
            "q": q,
            "k": k,
            "ik": ik,
            "v": v,
            "iv": iv,
            "pieces": pieces,
            "lse": log_totals,
            "dtypes": (query.dtype, key.dtype, value.dtype),
        }
        result = ops.cast(ops.transpose(outputs, (0, 2, 1, 3)), out_dtype)
        return result, residuals

    def _forward_keys(self, q, k, ik, v, iv):
        """The key blocks in turn, every query row against each."""
        rows = ops.shape(q)[2]

        def body(i, state):
            start = self._start(i)
            ivb = None if iv is None else self._slice_keys(iv, start)
            return self._update(
                state,
                q,
                self._slice_keys(k, start),
                self._slice_keys(ik, start),
                self._slice_keys(v, start),
                ivb,
                self._block_mask(i, start, rows),
            )

        state = self._initial_state(q, v)
        state = ops.fori_loop(0, self.blocks, body, state)
        return self._finish(state)

    def _band(self, i):
        """`(row, start)`: query block `i`'s first row and its span's
        first key."""
        row = pattern.block_rows(i, self.query_block, self.rows)
        return row, pattern.span_start(row, self.window, self.span, self.keys)

    def _forward_banded(self, q, k, ik, v, iv):
        """The query blocks in turn, each against its window's span only:
        one softmax over the span (one step of the online recurrence),
        added into the rows' output and log-sum-exp (an overlapping last
        block's earlier rows are masked, so they add 0)."""
        block, span = self.query_block, self.span
        shape = ops.shape(q)
        state = []
        for _ in range(self.planes):
            state += [
                ops.zeros(shape[:3] + (ops.shape(v)[3],), q.dtype),
                ops.zeros(shape[:3] + (1,), q.dtype),
            ]

        def body(i, state):
            row, start = self._band(i)
            qb = _slice_rows(q, row, block)
            ivb = None if iv is None else _slice_rows(iv, start, span)
            update = self._update(
                self._initial_state(qb, v),
                qb,
                _slice_rows(k, start, span),
                _slice_rows(ik, start, span),
                _slice_rows(v, start, span),
                ivb,
                self._band_mask(i, row, start),
            )
            pieces, log_totals = self._finish(update)
            new = []
            for plane in range(self.planes):
                new.append(_add_rows(state[2 * plane], row, pieces[plane]))
                new.append(
                    _add_rows(state[2 * plane + 1], row, log_totals[plane])
                )
            return new

        state = ops.fori_loop(0, self.query_blocks, body, state)
        return list(state[0::2]), list(state[1::2])

    # -- backward ------------------------------------------------------

    def _gradients(self, q, d_out, lses, deltas, kb, ikb, vb, ivb, mask):
        """The gradients from one block of keys (`kb`, values `vb`, `i vb`
        for "abs") for the query rows of `q` (their upstream `d_out`,
        row statistics `lses` and `deltas` per plane): `(d_q, d_kb,
        d_vb)`, `d_q` unscaled."""
        logits, sign = self._logits(q, kb, ikb)
        weights = []
        for x, lse in zip(logits, lses):
            p = ops.exp(x - lse)
            if mask is not None:
                p = ops.where(mask, p, ops.zeros_like(p))
            weights.append(p)
        if self.softmax == "abs":
            (p,) = weights
            u_re, u_im, inverse = sign
            d_w_re = _scores(d_out, vb)  # dL/dRe W
            d_w_im = _scores(d_out, ivb)
            d_p = d_w_re * u_re + d_w_im * u_im
            d_x = p * (d_p - deltas[0])
            # A = r u: dA = u dr + (I - u u^T) du / r, du = P dW and
            # u . du = P dP.
            tangential = p * inverse
            g_re = u_re * (d_x - tangential * d_p) + tangential * d_w_re
            g_im = u_im * (d_x - tangential * d_p) + tangential * d_w_im
            w_re, w_im = p * u_re, p * u_im
            d_vb = _transposed(w_re, d_out) + _times_minus_i(
                _transposed(w_im, d_out)
            )
        else:
            # Per softmax plane, the upstream gradient of its real-weight
            # product P v (piece 2 = i (P2 v) for "naive").
            grads_in = [d_out]
            if self.planes == 2:
                grads_in.append(_times_minus_i(d_out))
            d_xs, d_vb = [], 0.0
            for p, g, delta in zip(weights, grads_in, deltas):
                d_xs.append(p * (_scores(g, vb) - delta))
                d_vb = d_vb + _transposed(p, g)
            if self.softmax == "real":
                g_re, g_im = d_xs[0], None
            elif self.softmax == "naive":
                g_re, g_im = d_xs
            else:  # "absonly": x = r, dA = u dr
                u_re, u_im, _ = sign
                g_re, g_im = d_xs[0] * u_re, d_xs[0] * u_im
        d_q = _times(g_re, kb)
        d_kb = _transposed(g_re, q)
        if g_im is not None:
            d_q = d_q + _times(g_im, ikb)
            d_kb = d_kb + _times_minus_i(_transposed(g_im, q))
        return d_q, d_kb, d_vb

    def backward(self, res, upstream):
        q, k, ik, v, iv = res["q"], res["k"], res["ik"], res["v"], res["iv"]
        dtype = q.dtype
        rows = ops.shape(q)[2]
        d_out = ops.transpose(ops.cast(upstream, dtype), (0, 2, 1, 3))
        # Per softmax plane, D = sum_s P dP = <upstream, piece> per row.
        deltas = [
            ops.sum(d_out * piece, axis=-1, keepdims=True)
            for piece in res["pieces"]
        ]
        lses = res["lse"]
        state = [ops.zeros_like(q), ops.zeros_like(k), ops.zeros_like(v)]

        def keys_body(i, state):
            d_q, d_k, d_v = state
            start = self._start(i)
            ivb = None if iv is None else self._slice_keys(iv, start)
            d_qb, d_kb, d_vb = self._gradients(
                q,
                d_out,
                lses,
                deltas,
                self._slice_keys(k, start),
                self._slice_keys(ik, start),
                self._slice_keys(v, start),
                ivb,
                self._block_mask(i, start, rows),
            )
            return [
                d_q + d_qb,
                _add_rows(d_k, start, d_kb),
                _add_rows(d_v, start, d_vb),
            ]

        def banded_body(i, state):
            d_q, d_k, d_v = state
            row, start = self._band(i)
            block, span = self.query_block, self.span

            def rows_of(x):
                return _slice_rows(x, row, block)

            ivb = None if iv is None else _slice_rows(iv, start, span)
            d_qb, d_kb, d_vb = self._gradients(
                rows_of(q),
                rows_of(d_out),
                [rows_of(x) for x in lses],
                [rows_of(x) for x in deltas],
                _slice_rows(k, start, span),
                _slice_rows(ik, start, span),
                _slice_rows(v, start, span),
                ivb,
                self._band_mask(i, row, start),
            )
            return [
                _add_rows(d_q, row, d_qb),
                _add_rows(d_k, start, d_kb),
                _add_rows(d_v, start, d_vb),
            ]

        if self.banded:
            loop = (self.query_blocks, banded_body)
        else:
            loop = (self.blocks, keys_body)
        d_q, d_k, d_v = ops.fori_loop(0, loop[0], loop[1], state)
        d_q = d_q * self._scale(dtype)
        if self.product == "bilinear":
            d_k = cx.conjugate(d_k)  # conj is its own transpose
        q_dtype, k_dtype, v_dtype = res["dtypes"]
        return (
            ops.cast(ops.transpose(d_q, (0, 2, 1, 3)), q_dtype),
            ops.cast(ops.transpose(d_k, (0, 2, 1, 3)), k_dtype),
            ops.cast(ops.transpose(d_v, (0, 2, 1, 3)), v_dtype),
        )


def _slice_rows(x, start, size):
    """`x[:, :, start:start + size]` of a `(B, N, L, W)` tensor."""
    shape = ops.shape(x)
    return ops.slice(x, (0, 0, start, 0), (shape[0], shape[1], size, shape[3]))


def _add_rows(total, start, block):
    """`total` with `block` added to its rows `[start, start + len)`
    (axis 2)."""
    current = _slice_rows(total, start, ops.shape(block)[2])
    return ops.slice_update(total, (0, 0, start, 0), current + block)
