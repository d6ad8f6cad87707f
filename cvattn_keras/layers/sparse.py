"""ComplexSparseAttention: the fixed sparse patterns of the Sparse
Transformer and BigBird, complex.

Child et al., "Generating Long Sequences with Sparse Transformers" (2019)
and Zaheer et al., "Big Bird: Transformers for Longer Sequences" (2020)
let each query attend to a fixed set of keys instead of all of them: a
local window, every `stride`-th key, and a few global tokens that attend
to, and are attended by, every position. Here the pattern is computed
block by block: each block of queries gathers the keys of its window (one
contiguous span), the strided keys and the global keys into one key set,
and `ComplexMultiHeadAttention`'s attention (every softmax variant and
product) runs on it under the pattern's mask. No `(T, S)` tensor appears.
"""

import keras
from keras import ops

from cvattn_keras import _block_pattern as pattern
from cvattn_keras import _validation as check
from cvattn_keras import attention as core
from cvattn_keras import complex as cx
from cvattn_keras._attention_args import all_of
from cvattn_keras.layers._attention_masks import mask_shape as _mask_shape
from cvattn_keras.layers._attention_wrapper import AttentionWrapper
from cvattn_keras.layers.attention import ComplexMultiHeadAttention

__all__ = ["ComplexSparseAttention"]

# The query rows per block when `block_size` is None: the window's width
# (work within 1.5x of the band's), between 16 and DEFAULT_MAX_BLOCK.
DEFAULT_MAX_BLOCK = 256

# The arguments passed on to the attention sublayer, and serialized as it
# serializes them.
_ATTENTION_ARGS = (
    "num_heads",
    "key_dim",
    "value_dim",
    "softmax",
    "product",
    "dropout",
    "use_bias",
    "output_dim",
    "scale",
    "kernel_initializer",
    "bias_initializer",
    "kernel_regularizer",
    "bias_regularizer",
    "kernel_constraint",
    "bias_constraint",
    "seed",
    "complex_matmul",
)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexSparseAttention(AttentionWrapper):
    """Complex sparse attention (Sparse Transformer, BigBird) on stacked
    tensors.

    Query `t` attends to key `s` when any of these holds (positions count
    from 0, top-left aligned as in `ComplexMultiHeadAttention`):

    - local: `|t - s| < window` (causal: `t - window < s <= t`), the
      window of `ComplexMultiHeadAttention(sliding_window=window)`;
    - strided: `s % stride == stride - 1`, the last key of every
      `stride` keys (the "summary" positions of the Sparse Transformer's
      fixed pattern); none with `stride=None`;
    - global: `s < global_tokens`, or `t < global_tokens` (the first
      `global_tokens` positions attend to every key and every query
      attends to them, BigBird's global tokens);

    and, with `use_causal_mask=True`, only if `s <= t`: that masks every
    part, the global ones included (a global query `t` then sees `s <=
    t`), so no output depends on a later input. Each key counts once
    whatever parts admit it. The projections, the scores `A = scale *
    <q, k>`, the softmax variants and products are those of
    `ComplexMultiHeadAttention` (the sublayer `attention`), on each
    query's pattern instead of every key: every variant is a function of
    a query row's attended scores only, so each is defined on a pattern
    as on any set of keys (masked keys get weight exactly 0, in both
    softmaxes of RIAtt). A window covering the sequence (`window >= max(T,
    S)`) is full attention; with `stride=None, global_tokens=0` the
    layer equals `ComplexMultiHeadAttention(sliding_window=window)` with
    the same weights.

    How it is computed: the queries go in blocks of `block_size` rows;
    each block gathers one key set, the contiguous span of keys its
    windows reach (`block + 2 window - 2` keys, causal `block + window -
    1`), then the strided keys and the global keys (the same for every
    block), and attends to it under a mask that keeps each key's pattern
    (a key in the span and in the extra keys counts once). The global
    query rows attend to every key through the full (or chunked) exact
    path. Work and memory per head: `T * (block + 2 window + S / stride +
    global_tokens)` scores, plus `global_tokens * S` (O(T (W + T/S + G))
    for `block ~ window`: O(T) for a fixed window and `stride=None`,
    O(T sqrt T) for `stride = sqrt(T)`, the Sparse Transformer's); the
    gradient keeps the blocks' weights (autodiff), as BigBird's blocked
    implementation does. `key_set_size(T, S)` gives the numbers.

    Decisions:

    - Strided keys at fixed positions (`s % stride == stride - 1`, the
      fixed pattern's), not at fixed offsets from the query (`(t - s) %
      stride == 0`, the Sparse Transformer's strided pattern): every
      block then shares one gathered set of `S / stride` keys, for
      causal and bidirectional use alike.
    - Global tokens are the first `global_tokens` positions (BigBird's
      ITC): prepend summary tokens (a class token) to use them.
    - Masks: a key padding mask (`value_mask`, `key_mask` `(B, S)`, a
      Keras mask, or `attention_mask` of shape `(B, 1, S)`, `(1, S)` or
      `(B, 1, 1, S)`) masks keys in every part of the pattern; a query
      mask (`query_mask`) gives zero rows. A mask that differs between
      queries or heads (`(B, T, S)`, `(T, S)`, `(B, N, T, S)`) is
      refused (`ValueError`): it is itself the `(T, S)` tensor the
      pattern avoids (use `ComplexMultiHeadAttention` for it).
    - `return_attention_scores=True` is refused for the same reason.
    - The query and key lengths must be known when the layer is traced
      (the blocks are laid out statically): a length known only when the
      graph runs is a `ValueError` at trace time.

    A common phase turn of queries, keys and values (no biases) turns
    the output by that phase: the pattern does not depend on the values,
    and CAtt's weights are unchanged.

    Args:
        num_heads: positive int, the number of heads.
        key_dim: positive int, the size of each query/key head in complex
            features.
        window: positive int, the local window's width (1: each query
            sees its own position only).
        stride: `None` (default: no strided keys) or a positive int, the
            stride of the strided keys.
        global_tokens: non-negative int (default 0), the number of
            global tokens (the first positions).
        block_size: `None` (default: `window`, at least 16, at most
            256) or a positive int, the query rows per block.
        value_dim: positive int, the size of each value head in complex
            features. Defaults to `key_dim`.
        softmax: `"real"` (CAtt, default), `"abs"` (APAtt), `"absonly"`
            (AAtt) or `"naive"` (RIAtt), or an alias (see
            `ComplexMultiHeadAttention`).
        product: `"inner"` (default) or `"bilinear"`; also `"ip"`, `"cp"`.
        dropout: float in [0, 1), the dropout rate on the attention
            weights.
        use_bias: whether the four projections have a complex bias.
        output_dim: positive int, the number of complex output features.
            Defaults to the query's.
        scale: positive float multiplying both parts of the score.
            Defaults to `key_dim ** -0.5`.
        kernel_initializer: passed to the four `ComplexDense` projections.
        bias_initializer: passed to the four projections.
        kernel_regularizer: passed to the four projections.
        bias_regularizer: passed to the four projections.
        activity_regularizer: applied to the output.
        kernel_constraint: passed to the four projections.
        bias_constraint: passed to the four projections.
        seed: int or None, the seed of the attention dropout.
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`: how
            the four projections and the attention's complex products are
            computed (see `ComplexMultiHeadAttention`).
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, 2 * Eq)`, stacked.

        value: `(B, S, 2 * Ev)`, stacked.

        key: optional `(B, S, 2 * Ek)`, stacked. Defaults to `value`.

        attention_mask: optional key padding mask, `True` = attend, the
            same for every query and head: `(B, 1, S)`, `(1, S)` or `(B,
            1, 1, S)`; a `(B, S)` one goes in as `value_mask=`.

        use_causal_mask: if `True`, query `t` sees keys `s <= t` only, in
            every part of the pattern.

        return_attention_scores: must be `False` (see above).

        training: whether dropout is active.

        query_mask, value_mask, key_mask: boolean `(B, T)` / `(B, S)`
            masks, filled in by Keras from the inputs' masks (`Masking`,
            `Embedding(mask_zero=True)`).

    Returns:
        `(B, T, 2 * output_dim)`.

    Examples:
        >>> layer = ComplexSparseAttention(
        ...     2, 4, window=8, stride=16, global_tokens=2
        ... )
        >>> x = keras.ops.ones((3, 50, 8))          # 4 complex features
        >>> tuple(layer(x, x, use_causal_mask=True).shape)
        (3, 50, 8)

    References:
        Child, R., Gray, S., Radford, A. and Sutskever, I., "Generating
        Long Sequences with Sparse Transformers", arXiv:1904.10509, 2019.
        Zaheer, M. et al., "Big Bird: Transformers for Longer
        Sequences", NeurIPS 2020, arXiv:2007.14062.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        window,
        stride=None,
        global_tokens=0,
        block_size=None,
        value_dim=None,
        softmax="real",
        product="inner",
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        scale=None,
        kernel_initializer="complex_glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        seed=None,
        complex_matmul="auto",
        **kwargs,
    ):
        window = check.positive_int(window, "window")
        stride = check.positive_int(stride, "stride", allow_none=True)
        global_tokens = check.non_negative_int(global_tokens, "global_tokens")
        block_size = check.positive_int(
            block_size, "block_size", allow_none=True
        )
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.supports_masking = True
        self.window = window
        self.stride = stride
        self.global_tokens = global_tokens
        self.block_size = block_size
        # Validates every other argument, naming it.
        self.attention = ComplexMultiHeadAttention(
            num_heads,
            key_dim,
            value_dim=value_dim,
            softmax=softmax,
            product=product,
            dropout=dropout,
            use_bias=use_bias,
            output_dim=output_dim,
            scale=scale,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            seed=seed,
            chunk_size="auto",  # for the global rows against every key
            complex_matmul=complex_matmul,
            dtype=self.dtype_policy,
            name="attention",
        )
        self._mirror_attention()

    # ------------------------------------------------------------------
    # The pattern's layout.
    # ------------------------------------------------------------------

    def _pattern(self, length, keys, causal):
        """The `_block_pattern.SparsePattern` of `length` queries and
        `keys` keys."""
        block = self.block_size or pattern.query_block(
            self.window, DEFAULT_MAX_BLOCK, length
        )
        return pattern.SparsePattern(
            length,
            keys,
            self.window,
            self.stride,
            self.global_tokens,
            causal,
            block,
        )

    def key_set_size(self, length, keys=None, causal=False):
        """The layout of the blocks for `length` queries and `keys` keys
        (default `length`): a dict with `block` (query rows per block),
        `blocks`, `key_set` (keys each block attends to: `span` from its
        window, `strided`, `global`), `global_rows` (queries attending to
        every key) and `scores` (per head and batch entry, `blocks *
        block * key_set + global_rows * keys`; full attention computes
        `length * keys`)."""
        keys = length if keys is None else keys
        layout = self._pattern(length, keys, causal)
        rows = 0 if causal else min(self.global_tokens, length)
        return {
            "block": layout.block,
            "blocks": layout.blocks,
            "key_set": layout.key_set,
            "span": layout.span,
            "strided": len(layout.strided),
            "global": len(layout.globals),
            "global_rows": rows,
            "scores": layout.work + rows * keys,
        }

    # ------------------------------------------------------------------
    # Shapes and masks.
    # ------------------------------------------------------------------

    def _check_shapes(self, query_shape, value_shape, key_shape):
        """Raises a `ValueError` naming the input whose static shape does
        not fit: rank 3, a known even last axis, keys and values of one
        length."""
        shapes = {
            "query": check.static_shape(query_shape),
            "value": check.static_shape(value_shape),
            "key": check.static_shape(key_shape),
        }
        for name, shape in shapes.items():
            if len(shape) != 3 or shape[-1] is None:
                raise ValueError(
                    f"ComplexSparseAttention expects `{name}` of rank 3, "
                    "(batch, length, 2 * features), its last axis known. "
                    f"Received: {name}_shape={shape}"
                )
            cx.check_even(shape[-1], f"{name}_shape[-1]", shape)
        value_length, key_length = shapes["value"][1], shapes["key"][1]
        if None not in (value_length, key_length) and (
            value_length != key_length
        ):
            raise ValueError(
                "`key` and `value` must have the same length (axis 1). "
                f"Received: value_shape={shapes['value']}, "
                f"key_shape={shapes['key']}"
            )
        if self.attention.built:  # the feature sizes it was built for
            self.attention._check_shapes(query_shape, value_shape, key_shape)

    def _check_call(
        self,
        query_shape,
        value_shape,
        key_shape,
        causal,
        scores,
        attention_mask=None,
        value_mask=None,
        key_mask=None,
        query_mask=None,
    ):
        """Raises a `ValueError` naming the argument that does not fit:
        the inputs' shapes, `use_causal_mask` not a bool,
        `return_attention_scores=True`, a mask that does not fit `(B, S)`
        / `(B, T)`, an attention mask that differs between queries or
        heads (`_padding_layout`). Returns `use_causal_mask` as a bool."""
        self._check_shapes(query_shape, value_shape, key_shape)
        causal = check.boolean(causal, "use_causal_mask")
        if check.boolean(scores, "return_attention_scores"):
            raise ValueError(
                "ComplexSparseAttention does not return attention scores: "
                "its weights over the pattern would be the (T, S) tensor "
                "it never builds. Received: return_attention_scores=True"
            )
        batch, length = check.static_shape(value_shape)[:2]
        for name, mask in (("value_mask", value_mask), ("key_mask", key_mask)):
            if mask is not None:
                core.check_mask_shape(
                    _mask_shape(mask), (batch, length), name, "(B, S)"
                )
        if query_mask is not None:
            core.check_mask_shape(
                _mask_shape(query_mask),
                tuple(check.static_shape(query_shape))[:2],
                "query_mask",
                "(B, T)",
            )
        if attention_mask is not None:
            self._padding_layout(attention_mask, batch, length)
        return causal

    def _padding_layout(self, attention_mask, batch, length):
        """The axes of `attention_mask` to squeeze to a `(B|1, S)` key
        padding: `()` for rank 2 `(1, S)`, `(1,)` for rank 3 `(B, 1, S)`,
        `(1, 2)` for rank 4 `(B, 1, 1, S)`. Raises a `ValueError` for a
        mask of another rank, one whose query or head axis is not 1, or
        one that does not broadcast to the key length."""
        shape = check.static_shape(_mask_shape(attention_mask))
        layouts = {
            2: ("(T, S)", "(1, S)", (0,), (1, length)),
            3: ("(B, T, S)", "(B, 1, S)", (1,), (batch, 1, length)),
            4: ("(B, N, T, S)", "(B, 1, 1, S)", (1, 2), (batch, 1, 1, length)),
        }
        if len(shape) not in layouts or any(
            shape[axis] != 1 for axis in layouts[len(shape)][2]
        ):
            full = layouts.get(len(shape), ("of rank 2, 3 or 4",))[0]
            raise ValueError(
                "ComplexSparseAttention takes a key padding mask only, the "
                "same for every query and head: `attention_mask` of shape "
                "(B, 1, S), (1, S) or (B, 1, 1, S) (a (B, S) mask goes in "
                f"as `value_mask=`). A mask {full} that differs between "
                "queries or heads is the (T, S) tensor the pattern avoids; "
                "use ComplexMultiHeadAttention for it. Received: "
                f"attention_mask.shape={shape}"
            )
        _, layout, axes, target = layouts[len(shape)]
        core.check_mask_shape(shape, target, "attention_mask", layout)
        return axes if len(shape) > 2 else ()

    def _key_padding(self, value_shape, attention_mask, value_mask, key_mask):
        """Every key mask source as one bool `(B|1, S)`, `True` = keep, or
        `None` (checked by `_check_call`)."""
        masks = [
            ops.cast(mask, "bool")
            for mask in (value_mask, key_mask)
            if mask is not None
        ]
        if attention_mask is not None:
            batch, length = check.static_shape(value_shape)[:2]
            axes = self._padding_layout(attention_mask, batch, length)
            mask = ops.cast(ops.convert_to_tensor(attention_mask), "bool")
            masks.append(ops.squeeze(mask, axes) if axes else mask)
        return all_of(masks)

    # ------------------------------------------------------------------
    # Build, call.
    # ------------------------------------------------------------------

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        self._check_shapes(query_shape, value_shape, key_shape)
        self.attention.build(
            tuple(query_shape), tuple(value_shape), tuple(key_shape)
        )
        self.built = True

    def _attend(self, query, key, value, padding, causal, training):
        """The pattern's attention on projected per-head tensors `(B, T,
        N, 2H)`, `(B, S, N, 2H)`, `(B, S, N, 2V)`, with the key padding
        `(B|1, S)` or `None`: `(B, T, N, 2V)`."""
        length = check.static_size(query.shape[1])
        keys = check.static_size(key.shape[1])
        if length is None or keys is None:
            raise ValueError(
                "ComplexSparseAttention needs the query and key lengths "
                "known when traced (its blocks are laid out statically). "
                f"Received: query length {length}, key length {keys}"
            )
        layout = self._pattern(length, keys, causal)
        block, blocks, key_set = layout.block, layout.blocks, layout.key_set
        heads = self.num_heads
        common = dict(
            softmax=self.softmax,
            product=self.product,
            scale=self.scale,
            dropout=self.dropout if training else 0.0,
            seed=self.attention.seed_generator,
            complex_matmul=self.complex_matmul,
        )
        # Queries (B, T, N, 2H) -> (B blocks, block, N, 2H), the last
        # block padded with zero rows (their outputs are dropped).
        padded = blocks * block - length
        rows = query
        if padded:
            rows = ops.pad(query, ((0, 0), (0, padded), (0, 0), (0, 0)))
        rows = ops.reshape(rows, (-1, block, heads, query.shape[-1]))
        # Each block's key set, gathered: (B blocks, key_set, N, 2H).
        positions = ops.reshape(layout.key_positions(), (-1,))

        def gather(x):
            x = ops.take(x, positions, axis=1)
            return ops.reshape(x, (-1, key_set, heads, x.shape[-1]))

        allowed = ops.expand_dims(layout.allowed(), 0)  # (1, n, C, K)
        if padding is not None:  # (B|1, S) -> (B|1, n, 1, K)
            kept = ops.take(padding, positions, axis=1)
            kept = ops.reshape(kept, (-1, blocks, 1, key_set))
            allowed = ops.logical_and(allowed, kept)
        batch = ops.shape(query)[0]
        allowed = ops.broadcast_to(allowed, (batch, blocks, block, key_set))
        allowed = ops.reshape(allowed, (-1, 1, block, key_set))
        outputs = core.complex_dot_product_attention(
            rows, gather(key), gather(value), mask=allowed, **common
        )
        width = outputs.shape[-1]
        outputs = ops.reshape(outputs, (-1, blocks * block, heads, width))
        if padded:
            outputs = outputs[:, :length]
        global_rows = 0 if causal else min(self.global_tokens, length)
        if global_rows:
            # The global queries against every key, exactly (chunked when
            # the keys are many: O(G S) work, O(S) memory).
            mask = None
            if padding is not None:
                mask = ops.expand_dims(padding, (1, 2))  # (B|1, 1, 1, S)
            first = core.complex_dot_product_attention(
                query[:, :global_rows],
                key,
                value,
                mask=mask,
                chunk_size="auto",
                **common,
            )
            outputs = ops.concatenate([first, outputs[:, global_rows:]], axis=1)
        return outputs

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
    ):
        if key is None:
            key = value
        causal = self._check_call(
            query.shape,
            value.shape,
            key.shape,
            use_causal_mask,
            return_attention_scores,
            attention_mask,
            value_mask,
            key_mask,
            query_mask,
        )
        padding = self._key_padding(
            value.shape, attention_mask, value_mask, key_mask
        )
        attention = self.attention
        # (B, T, N, 2H), (B, S, N, 2H), (B, S, N, 2V)
        q = attention._project_to_heads(
            attention.query_dense, query, self.key_dim
        )
        k = attention._project_to_heads(attention.key_dense, key, self.key_dim)
        v = attention._project_to_heads(
            attention.value_dense, value, self.value_dim
        )
        outputs = self._attend(q, k, v, padding, causal, training)
        if query_mask is not None:  # masked query rows: zero, as MHA's
            keep = ops.where(ops.cast(query_mask, "bool"), 1.0, 0.0)
            keep = ops.expand_dims(keep, (2, 3))  # (B, T, 1, 1)
            outputs = outputs * ops.cast(keep, outputs.dtype)
        return attention._project_from_heads(outputs)

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        self._check_shapes(query_shape, value_shape, key_shape)
        features = self.output_dim or tuple(query_shape)[-1] // 2
        return tuple(query_shape)[:-1] + (2 * features,)

    def compute_output_spec(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
    ):
        key_shape = value.shape if key is None else key.shape
        self._check_call(
            query.shape,
            value.shape,
            key_shape,
            use_causal_mask,
            return_attention_scores,
            attention_mask,
            value_mask,
            key_mask,
            query_mask,
        )
        shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        attention = self.attention.get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "window": self.window,
                "stride": self.stride,
                "global_tokens": self.global_tokens,
                "block_size": self.block_size,
                **{name: attention[name] for name in _ATTENTION_ARGS},
            }
        )
        return config
