"""The block computation of `ComplexLSHAttention` (`layers/lsh.py`): hash,
sort by `(bucket, position)`, attend within each bucket's window block by
block, unsort and combine the rounds. Rank 4 at most throughout, builtin
TFLite ops only (`TOPK_V2` on int32 keys, `GATHER`, `BATCH_MATMUL`)."""

import keras
import numpy as np
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import complex as cx
from cvattn_keras._attention_args import all_of

# The fill of masked logits, as the attention core's (float32 and wider).
_NEGATIVE = -0.7 * 3.4028235e38


def _compute_dtype(dtype):
    """float64 stays float64; anything else computes in float32."""
    if keras.backend.standardize_dtype(dtype) == "float64":
        return "float64"
    return "float32"


class LSHPlan:
    """One call's LSH attention on per-head tensors.

    Shapes: B batch, T length, N heads, R = num_hashes rounds, n buckets,
    c the block (window) length, nb = ceil(T / c) blocks, L = nb c, and G
    = B N R the rounds of every head and sample, the leading axis of the
    sorted tensors (rank 4 at most throughout, for TFLite)."""

    def __init__(self, layer, causal, dropout):
        self.layer = layer
        self.causal = causal
        self.dropout = dropout
        self.heads = layer.num_heads
        self.rounds = layer.num_hashes
        self.buckets = layer.num_buckets
        self.softmax = layer.softmax
        self.planes = 2 if layer.softmax == "naive" else 1

    # -- hashing and sorting -------------------------------------------

    def _buckets(self, q, padding):
        """`(B, N, T, 2H)` -> int32 buckets `(B N, T, R)`; padded tokens
        in bucket n (after every other)."""
        layer, dtype = self.layer, q.dtype
        rotations = cx.block_kernel(
            ops.cast(layer.rotations_real, dtype),
            ops.cast(layer.rotations_imag, dtype),
            in_axis=1,
        )  # (N, 2H, 2 R n): z = k R, [Re z | Im z]
        z = ops.einsum("bntd,ndj->bntj", q, rotations)
        real, imag = cx.split(z)
        power = real * real + imag * imag  # |<k, R_j>|^2 / |q|^2
        power = ops.reshape(power, (-1, self.rounds, self.buckets))
        # The argmax (the first of equal largest) as the least index at
        # the maximum: Keras' argmax of floats adds a sign-bit test
        # (BitwiseAnd) that TFLite lacks, and a TOPK_V2 of floats has no
        # integer kernel.
        top = ops.max(power, axis=-1, keepdims=True)
        index = ops.arange(self.buckets, dtype="int32")
        buckets = ops.min(
            ops.where(ops.equal(power, top), index, self.buckets), axis=-1
        )
        buckets = ops.reshape(buckets, (self.bn, self.length, self.rounds))
        if padding is not None:  # (B|1, T) -> (B|1, 1, T, 1)
            keep = ops.expand_dims(padding, (1, 3))
            buckets = cx.reshape(
                buckets, (self.batch, self.heads, self.length, self.rounds)
            )
            buckets = ops.where(keep, buckets, self.buckets)
            buckets = ops.reshape(buckets, (self.bn, self.length, self.rounds))
        return buckets

    def _sort(self, buckets):
        """The order by `(bucket, position)` of each round: `(order,
        sorted_buckets, places)`, each `(G, T)` int32: the token at each
        sorted place, its bucket, and each token's place."""
        per_round = ops.reshape(
            ops.transpose(buckets, (0, 2, 1)), (self.g, self.length)
        )
        positions = ops.arange(self.length, dtype="int32")[None, :]
        # Descending -(bucket T + t): ascending (bucket, t), int32.
        keys = per_round * (-self.length) - positions
        values, order = ops.top_k(keys, self.length)
        order = ops.cast(order, "int32")
        sorted_buckets = ops.floor_divide(
            ops.cast(values, "int32") * -1, self.length
        )
        _, places = ops.top_k(order * -1, self.length)
        return order, sorted_buckets, ops.cast(places, "int32")

    def _pad(self, x, value):
        """`(G, T, ...)` -> `(G, L, ...)`, padded with `value`."""
        if not isinstance(self.extra, int):  # a length known at run time
            shape = tuple(ops.shape(x))
            filler = ops.full(
                (shape[0], self.extra) + shape[2:], value, dtype=x.dtype
            )
            return ops.concatenate([x, filler], axis=1)
        if self.extra == 0:
            return x
        pad = [[0, 0], [0, self.extra]] + [[0, 0]] * (len(x.shape) - 2)
        return ops.pad(x, pad, constant_values=value)

    def _gather(self, table, index):
        """Rows of `table` `(rows, W)` at `index` `(G, L')` -> `(G, L',
        W)`."""
        return ops.take(table, index, axis=0)

    def _blocks(self, x):
        """`(G, L, W)` -> `(G, nb, c, W)`."""
        return cx.reshape(
            x, (self.g, self.blocks, self.chunk, ops.shape(x)[-1])
        )

    def _windows(self, x, value):
        """`(G, L, W)` -> `(G, nb, K, W)`: each block's keys, the block
        before, the block and (not causal) the block after, `value` past
        the ends; the block alone when there is one."""
        if self.single:
            return self._blocks(x)
        c = self.chunk
        after = 0 if self.causal else c
        rank = len(x.shape)
        pad = [[0, 0], [c, after]] + [[0, 0]] * (rank - 2)
        x = ops.pad(x, pad, constant_values=value)
        pieces = [
            self._blocks(x[:, start : start + self.padded])
            for start in range(0, c + after + 1, c)
        ]
        return ops.concatenate(pieces, axis=2)

    def _pattern(self):
        """The static `(c, K)` window: key `kk` of a block's window is
        `d = kk - c - qq` places after query `qq` (`kk - qq` with one
        block), and is seen where `0 < |d| < c`, `d < 0` if causal."""
        c = self.chunk
        width = c if self.single else (2 * c if self.causal else 3 * c)
        offset = 0 if self.single else c
        d = np.arange(width)[None, :] - offset - np.arange(c)[:, None]
        seen = (np.abs(d) < c) & (d != 0)
        if self.causal:
            seen &= d < 0
        return seen

    def _counts(self, info_q, info_k):
        """How many rounds give each query each window key: `(G, nb, c,
        K)` floats, from every round's `(bucket, place)` of the query
        `(G, nb, c, 2R)` and of the keys `(G, nb, K, 2R)`."""
        count = None
        c = self.chunk
        for r in range(self.rounds):
            bq = ops.expand_dims(info_q[..., r], -1)
            bk = ops.expand_dims(info_k[..., r], 2)
            pq = ops.expand_dims(info_q[..., self.rounds + r], -1)
            pk = ops.expand_dims(info_k[..., self.rounds + r], 2)
            d = pk - pq
            near = all_of([ops.equal(bq, bk), d > -c, d < c])
            term = ops.where(near, 1.0, 0.0)
            count = term if count is None else count + term
        return count

    # -- attention -----------------------------------------------------

    def attend(self, q, v, padding):
        """`q` `(B, T, N, 2H)`, `v` `(B, T, N, 2V)`, `padding` `(B|1, T)`
        or `None` -> the per-head output `(B, T, N, 2V)`."""
        layer = self.layer
        dtype = _compute_dtype(q.dtype)
        q = ops.transpose(ops.cast(q, dtype), (0, 2, 1, 3))  # (B, N, T, 2H)
        v = ops.transpose(ops.cast(v, dtype), (0, 2, 1, 3))  # (B, N, T, 2V)
        shape = ops.shape(q)
        length = check.static_size(q.shape[2])
        self.length = shape[2] if length is None else length
        self.batch = shape[0]
        self.bn = self.batch * self.heads
        self.g = self.bn * self.rounds
        chunk = layer.chunk_length
        if length is not None:
            chunk = min(chunk, length)
        self.chunk = chunk
        self.single = length is not None and length <= chunk
        if length is not None:
            self.blocks = -(-length // chunk)
            self.extra = self.blocks * chunk - length
        else:
            self.blocks = (self.length + chunk - 1) // chunk
            self.extra = self.blocks * chunk - self.length
        self.padded = self.blocks * chunk
        width_q, width_v = q.shape[-1], v.shape[-1]

        buckets = self._buckets(ops.stop_gradient(q), padding)  # (BN, T, R)
        order, sorted_buckets, places = self._sort(buckets)
        # Rows of the (B N T, W) tables: each round's tokens, sorted.
        base = ops.arange(self.g, dtype="int32") // self.rounds
        index = self._pad(order + (base * self.length)[:, None], 0)
        sorted_buckets = self._pad(sorted_buckets, self.buckets)
        q_rows = ops.reshape(q, (-1, width_q))
        v_rows = ops.reshape(v, (-1, width_v))
        qs = self._gather(q_rows, index) * ops.cast(layer.scale, dtype)
        vs = self._gather(v_rows, index)
        ks = _normalized(qs)
        qs = self._blocks(qs)  # (G, nb, c, 2H), scaled
        kw = self._windows(ks, 0.0)  # (G, nb, K, 2H)
        vw = self._windows(vs, 0.0)  # (G, nb, K, 2V)
        # (G, nb, c, 1) == (G, nb, 1, K): a token of the query's bucket.
        bq = self._blocks(sorted_buckets[..., None])
        bk = self._windows(sorted_buckets[..., None], self.buckets)
        bk = ops.transpose(bk, (0, 1, 3, 2))
        mask = all_of(
            [
                ops.equal(bq, bk),
                bk < self.buckets,
                ops.convert_to_tensor(self._pattern()),
            ]
        )
        keep = ops.where(mask, 1.0, 0.0)
        if self.rounds > 1:
            # Each round's (bucket, place) of every token, by its rows.
            token_places = ops.transpose(
                ops.reshape(places, (self.bn, self.rounds, self.length)),
                (0, 2, 1),
            )
            info = ops.reshape(
                ops.concatenate([buckets, token_places], axis=-1),
                (-1, 2 * self.rounds),
            )
            info = self._gather(info, index)  # (G, L, 2R)
            count = self._counts(self._blocks(info), self._windows(info, -1))
            keep = keep / ops.maximum(count, 1.0)
        keep = ops.cast(keep, dtype)

        logits, sign = self._logits(qs, kw)
        dropped = None
        if self.dropout:  # one Bernoulli mask for every plane
            dropped = keras.random.dropout(
                ops.ones_like(keep), self.dropout, seed=layer.seed_generator
            )
        stats = []  # per plane: (m, Z, S) sorted, (G, nb, c, 2 + 2V)
        for x in logits:
            m, p = _exponentials(x, mask, keep)
            total = ops.sum(p, axis=-1, keepdims=True)
            if dropped is not None:  # the numerator only: dropped weights
                p = p * dropped
            if sign is not None and self.softmax == "abs":
                u_re, u_im = sign
                s = _times(p * u_re, vw) + _times(p * u_im, cx.times_i(vw))
            else:
                s = _times(p, vw)
            stats.append(ops.concatenate([m, total, s], axis=-1))
        outputs = self._combine(stats, places)
        return self._finish(outputs, q, v, padding)

    def _logits(self, qs, kw):
        """The block's logits (one plane, two for RIAtt) `(G, nb, c, K)`
        and, for APAtt, the score's sign `(u_re, u_im)`."""
        real = _scores(qs, kw)
        if self.softmax == "real":
            return [real], None
        imag = _scores(qs, cx.times_i(kw))
        if self.softmax == "naive":
            return [real, imag], None
        squared = real * real + imag * imag
        nonzero = squared > 0
        root = ops.sqrt(ops.where(nonzero, squared, 1.0))
        inverse = ops.where(nonzero, 1.0 / root, 0.0)
        modulus = ops.where(nonzero, root, 0.0)
        return [modulus], (real * inverse, imag * inverse)

    def _combine(self, stats, places):
        """Each plane's `(m, Z, S)` back in token order (`places` `(G,
        T)`: each token's sorted place), the rounds combined: `sum_r
        e^{m_r - M} S_r / sum_r e^{m_r - M} Z_r`. Returns `(output (B N,
        T, 2V), attended (B N, T, 1))`."""
        outputs, attended = [], None
        base = ops.arange(self.g, dtype="int32")[:, None] * self.padded
        index = places + base
        for plane, stat in enumerate(stats):
            width = stat.shape[-1]
            rows = ops.reshape(stat, (-1, width))
            stat = self._gather(rows, index)  # (G, T, 2 + 2V)
            stat = cx.reshape(stat, (self.bn, self.rounds, self.length, width))
            m, total, s = stat[..., :1], stat[..., 1:2], stat[..., 2:]
            has = total > 0
            if _tracing.fill_masked():
                m = ops.where(has, m, _NEGATIVE)
                top = ops.max(m, axis=1, keepdims=True)
                factor = ops.exp(m - top) * ops.where(has, 1.0, 0.0)
            else:
                # No constant outside the data's range (int8 files).
                has = ops.where(has, 1.0, 0.0)
                low = ops.min(m, axis=1, keepdims=True)
                top = ops.max((m - low) * has, axis=1, keepdims=True) + low
                factor = ops.exp((m - top) * has) * has
            numerator = ops.sum(factor * s, axis=1)
            denominator = ops.sum(factor * total, axis=1)
            positive = denominator > 0
            safe = ops.where(positive, denominator, 1.0)
            piece = numerator / safe * ops.where(positive, 1.0, 0.0)
            if plane == 1:
                piece = cx.times_i(piece)
            outputs.append(piece)
            attended = positive
        output = outputs[0] if len(outputs) == 1 else outputs[0] + outputs[1]
        return output, attended

    def _finish(self, combined, q, v, padding):
        """Queries with no key in any round attend to themselves alone
        (weight 1; `sgn(scale |q|)` for APAtt; `1 + i` for RIAtt), padded
        ones to nothing; back to `(B, T, N, 2V)`."""
        output, attended = combined
        shape = (self.batch, self.heads, self.length, output.shape[-1])
        output = cx.reshape(output, shape)
        alone = ops.logical_not(cx.reshape(attended, shape[:3] + (1,)))
        if padding is not None:
            alone = ops.logical_and(alone, ops.expand_dims(padding, (1, 3)))
        self_value = v
        if self.softmax == "naive":
            self_value = v + cx.times_i(v)
        elif self.softmax == "abs":
            power = ops.sum(q * q, axis=-1, keepdims=True)
            self_value = v * ops.where(power > 0, 1.0, 0.0)
        output = output + self_value * ops.where(alone, 1.0, 0.0)
        return ops.transpose(output, (0, 2, 1, 3))


def _normalized(x):
    """`x / |x|` over the last (stacked) axis; 0 where `x = 0`."""
    squared = ops.sum(x * x, axis=-1, keepdims=True)
    nonzero = squared > 0
    inverse = ops.where(nonzero, ops.rsqrt(ops.where(nonzero, squared, 1.0)), 0)
    return x * inverse


def _exponentials(x, mask, keep):
    """The block's row maximum `m` `(..., 1)` over the seen keys and `p =
    keep e^{x - m}` (`keep`: the seen keys, each divided by the rounds
    that give it). Under `portable_masking`, without any constant
    outside the data's range (the shift of the attention core)."""
    if _tracing.fill_masked():
        filled = ops.where(mask, x, _NEGATIVE)
        m = ops.stop_gradient(ops.max(filled, axis=-1, keepdims=True))
        return m, ops.exp(filled - m) * keep
    seen = ops.where(mask, 1.0, 0.0)
    low = ops.stop_gradient(ops.min(x, axis=-1, keepdims=True))
    lifted = (x - low) * seen
    top = ops.stop_gradient(ops.max(lifted, axis=-1, keepdims=True))
    return top + low, ops.exp(lifted - top) * keep


def _scores(q, k):
    """`(G, nb, c, 2H) x (G, nb, K, 2H) -> (G, nb, c, K)`."""
    return ops.einsum("gmqd,gmkd->gmqk", q, k)


def _times(p, v):
    """`(G, nb, c, K) x (G, nb, K, 2V) -> (G, nb, c, 2V)`."""
    return ops.einsum("gmqk,gmkd->gmqd", p, v)
