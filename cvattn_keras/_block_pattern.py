"""Which keys a block of queries sees under a local window, a stride and
global tokens: the block gather that the chunked sliding window
(`cvattn_keras.chunked_attention`) and `layers.ComplexSparseAttention`
share.

Positions are top-left aligned, as everywhere in the library: query `t`
and key `s` count from 0. The local window of width `W` is `|t - s| < W`,
or `t - W < s <= t` when causal (`_attention_args.allowed_positions`).
A block of `C` consecutive query rows starting at row `r` needs the keys
`[r - W + 1, r + C - 1 + W - 1]` (causal: `[r - W + 1, r + C - 1]`), one
contiguous span of `window_span` keys that starts at `span_start` (moved
inside `[0, S)` at the ends: it still holds every key the block's window
reaches). Work per block: `C * span`, so `T * (C + 2W)` in all instead
of `T * S`.

The helpers take Python ints or int32 tensors (a scalar, a loop's block
index, or a vector of every block's first row), so that the chunked loop
slices one block at a time and the sparse layer gathers all at once.
"""

import numpy as np
from keras import ops

from cvattn_keras._attention_args import all_of
from cvattn_keras._attention_args import allowed_positions

# The smallest query block of a window: below it, the per-block overhead
# outweighs the keys a larger block would attend to needlessly.
MIN_QUERY_BLOCK = 16


def query_block(window, limit, length):
    """The number of query rows per block for a window of width `window`:
    `window` (the span is then at most 3 windows wide, work within 1.5x
    of the band's), at least `MIN_QUERY_BLOCK`, at most `limit` and the
    query length `length`."""
    return max(1, min(max(window, MIN_QUERY_BLOCK), limit, length))


def window_span(block, window, causal, keys):
    """The number of contiguous keys that `block` query rows need under a
    window of width `window`: `block + window - 1` when causal, `block +
    2 (window - 1)` otherwise; at most `keys`."""
    reach = window - 1 if causal else 2 * (window - 1)
    return min(block + reach, keys)


def span_start(first_row, window, span, keys):
    """The first key of the span of the block whose first query row is
    `first_row` (an int or an int32 tensor): `first_row - window + 1`,
    moved into `[0, keys - span]`."""
    start = first_row - (window - 1)
    if isinstance(start, (int, np.integer)):
        return int(min(max(start, 0), keys - span))
    return ops.clip(start, 0, keys - span)


def block_rows(index, block, length):
    """The first query row of block `index`: `index * block`, the last
    block moved back to `length - block` when `block` does not divide
    `length` (it overlaps the one before; `new_rows` masks the rows that
    one covered)."""
    first = index * block
    if isinstance(first, (int, np.integer)):
        return int(min(first, length - block))
    return ops.minimum(first, length - block)


def new_rows(index, first_row, block):
    """`(block, 1)` bool, `True` on the block's rows that no earlier block
    covered (`row >= index * block`)."""
    rows = first_row + ops.arange(block, dtype="int32")
    return ops.expand_dims(rows >= index * block, -1)


def local_mask(first_row, start, block, span, causal, window):
    """`(..., block, span)` bool: where the block's query rows see the
    span's keys under the window (and causality). `first_row` and `start`
    are ints, scalar tensors or `(n, 1, 1)` tensors (then the mask is
    `(n, block, span)`)."""
    rows = first_row + ops.expand_dims(ops.arange(block, dtype="int32"), -1)
    cols = start + ops.expand_dims(ops.arange(span, dtype="int32"), 0)
    return allowed_positions(rows, cols, causal, window)


class SparsePattern:
    """The static layout of a sparse pattern over `length` queries and
    `keys` keys (both known when traced): query blocks of `block` rows,
    each seeing `key_set` keys, the span of its local window followed by
    the extra keys every block shares (the strided ones, then the global
    ones).

    Attributes:
        block, blocks, span: rows per block, the number of blocks (the
            last one padded), keys in each block's window span.
        strided: the strided key positions, `s % stride == stride - 1`
            (the last key of every `stride` keys), those below
            `global_tokens` left to the global set: a NumPy int array.
        globals: the global keys, `0 .. min(global_tokens, keys) - 1`.
        key_set: the keys each block attends to, `span + len(strided) +
            len(globals)`.
    """

    def __init__(
        self, length, keys, window, stride, global_tokens, causal, block
    ):
        self.length, self.keys = length, keys
        self.window, self.stride = window, stride
        self.causal = causal
        self.block = max(1, min(block, length))
        self.blocks = -(-length // self.block)
        self.span = window_span(self.block, window, causal, keys)
        first = stride - 1 if stride is not None else keys
        strided = np.arange(first, keys, stride or 1, dtype="int32")
        self.strided = strided[strided >= global_tokens]
        self.globals = np.arange(min(global_tokens, keys), dtype="int32")
        self.extra = np.concatenate([self.strided, self.globals])
        self.key_set = self.span + len(self.extra)

    @property
    def work(self):
        """The scores the blocks compute per head: `blocks * block *
        key_set`, against `length * keys` for full attention."""
        return self.blocks * self.block * self.key_set

    def _starts(self):
        """`(blocks,)` int32: each block's first row and span start."""
        first = ops.arange(self.blocks, dtype="int32") * self.block
        return first, span_start(first, self.window, self.span, self.keys)

    def key_positions(self):
        """`(blocks, key_set)` int32: the key each block attends to at
        each place of its key set."""
        _, starts = self._starts()
        span = ops.expand_dims(starts, -1) + ops.expand_dims(
            ops.arange(self.span, dtype="int32"), 0
        )
        if not len(self.extra):
            return span
        extra = ops.convert_to_tensor(self.extra, "int32")
        extra = ops.broadcast_to(extra[None], (self.blocks, len(self.extra)))
        return ops.concatenate([span, extra], axis=1)

    def allowed(self):
        """`(blocks, block, key_set)` bool, `True` where the pattern lets
        the query row see the key: in the span, the keys of its window;
        among the extra keys, those outside its window (each key counted
        once), and with `causal` only keys `s <= t`. Global query rows
        are not set here (they see every key: the caller attends for
        them separately); without causality they are the first
        `len(globals)` rows."""
        first, starts = self._starts()
        first = ops.reshape(first, (-1, 1, 1))
        local = local_mask(
            first,
            ops.reshape(starts, (-1, 1, 1)),
            self.block,
            self.span,
            self.causal,
            self.window,
        )
        if local is None:  # no window reaches beyond the span
            local = ops.ones((self.blocks, self.block, self.span), "bool")
        if not len(self.extra):
            return local
        rows = ops.arange(self.block, dtype="int32")
        rows = first + ops.expand_dims(rows, -1)
        cols = ops.convert_to_tensor(self.extra, "int32")[None, None]
        outside = ops.logical_not(
            allowed_positions(rows, cols, self.causal, self.window)
        )
        masks = [outside]
        if self.causal:
            masks.append(cols <= rows)
        return ops.concatenate([local, all_of(masks)], axis=-1)
