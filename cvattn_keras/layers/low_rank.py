"""ComplexLowRankAttention: Linformer's low-rank attention, complex.

Wang et al., "Linformer: Self-Attention with Linear Complexity" (2020)
project the keys and values along the sequence axis to `k` rows by
learned `(k, n)` matrices, so that each query attends to `k` mixtures of
the keys instead of all `n`: O(n k) work and memory instead of O(n^2).
Here the projections are complex and act on stacked `[real | imag]`
tensors; the attention after them is `ComplexMultiHeadAttention`'s (every
softmax variant and product), over the `k` projected keys.
"""

import keras
from keras import ops

from cvattn_keras import _validation as check
from cvattn_keras import attention as core
from cvattn_keras import complex as cx
from cvattn_keras import initializers as cinit
from cvattn_keras._attention_args import all_of
from cvattn_keras.layers._attention_masks import mask_shape as _mask_shape
from cvattn_keras.layers._attention_wrapper import AttentionWrapper
from cvattn_keras.layers._weights import resolve_option
from cvattn_keras.layers.attention import ComplexMultiHeadAttention

__all__ = ["ComplexLowRankAttention"]

# The arguments passed on to the attention over the projected keys, and
# serialized as it serializes them.
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
class ComplexLowRankAttention(AttentionWrapper):
    """Complex low-rank (Linformer) attention on stacked tensors.

    Linformer's attention (Wang et al., 2020) for complex numbers: the
    key and value inputs `X_k`, `X_v` `(B, S, Ek)`, `(B, S, Ev)` (complex)
    are projected along the sequence axis by learned complex matrices
    `E`, `F` of shape `(rank, max_length)`, of which a sequence of length
    `S <= max_length` uses the first `S` columns:

        K = (E X_k) W_k + b_k,   V = (F X_v) W_v + b_v   (rank rows each)

    and the queries attend to these `rank` projected keys and values as
    in `ComplexMultiHeadAttention` (a sublayer, `attention`), with every
    softmax variant and product: the scores `A = scale * <q, K>` are
    `(T, rank)` per head, and every variant is defined on them as on any
    `rank` keys. Work and memory grow as `T * rank` instead of `T * S`.

    Decisions:

    - One `E` and one `F` per layer, shared by all heads (Linformer's
      "headwise sharing", which its paper found as good as one per head),
      distinct for keys and values.
    - `E` and `F` act on the inputs of the key and value projections,
      before `W_k`, `W_v`: Linformer's `E (X W_k)` equals `(E X) W_k`, and
      the complex bias is then added once per projected row (Linformer's
      `E (X W_k + b_k)` would add it `sum(E)` times). The key projection
      runs over `rank` rows instead of `S`, and a padded key contributes
      nothing at all, not even its bias.
    - Causal use is refused (`ValueError`): every projected row mixes
      every position, so query `t` would see the keys after `t`.
      Linformer is not causal as published; for causal attention use
      `ComplexMultiHeadAttention(use_causal_mask=True)`, with a
      `sliding_window` for long sequences.
    - Masks: a key padding mask (the same for every query) is applied by
      zeroing the masked keys' and values' inputs before the projection
      (a sequence of `S` tokens with `P` padded gives what its `S - P`
      tokens give at their positions). A mask that differs between
      queries, or between heads, has no meaning after the projection
      (there is no key `s` left to mask) and is refused (`ValueError`).
      A query mask (Keras' `query_mask`) gives zero rows, as in
      `ComplexMultiHeadAttention`.
    - With `rank = max_length = S` and identity projections (`E = F =
      I`), the layer is `ComplexMultiHeadAttention` with the same
      weights; the phase equivariance of CAtt holds: with no biases, a
      common phase turn of queries, keys and values turns the output by
      that phase (the inner product; the bilinear one turns the scores by
      twice the phase, as in full attention).

    A common phase turn commutes with `E` and `F` (they are linear), so
    the scores of the inner product stay those of the turned-back inputs.

    Precision, dropout and export are the sublayer's: under a mixed
    policy the projections take compute-dtype operands and the scores are
    float32; `E` and `F` are float32 variables. The sequence projection is
    one real matmul of `[E_r | E_i]` `(rank, 2S)` against the stacked
    `[X; i X]` `(B, 2S, 2E)`, each real weight once (so a TFLite file
    stores `E`, `F` once, and full-integer files keep it integer).

    Weights, as attributes: `key_projection_real`, `key_projection_imag`
    (`E`), `value_projection_real`, `value_projection_imag` (`F`), each
    `(rank, max_length)`; the sublayer `attention` holds `query_dense`,
    `key_dense`, `value_dense` and `output_dense` (also attributes of this
    layer).

    Args:
        num_heads: positive int, the number of heads.
        key_dim: positive int, the size of each query/key head in complex
            features.
        rank: positive int `k <= max_length`, the number of projected keys
            and values (Linformer's `k`).
        max_length: positive int, the longest key/value sequence the layer
            takes (the projections' columns). A longer one is a
            `ValueError` when its length is known while tracing; one known
            only when the graph runs fails there, in the slice of the
            projections.
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
        projection_initializer: initializer of each part of `E` and `F`
            (cloned per part). Defaults to `"complex_glorot_uniform"`
            (`E|E_rt|^2 = 2 / (rank + max_length)`, the official
            Linformer's Xavier initialization, complex); `None` means this
            default. Use `"zeros"` and set identity matrices to start from
            full attention (`rank == max_length`).
        kernel_initializer: passed to the four `ComplexDense` projections.
        bias_initializer: passed to the four projections.
        kernel_regularizer: passed to the four projections (not `E`, `F`).
        bias_regularizer: passed to the four projections.
        activity_regularizer: applied to the output.
        kernel_constraint: passed to the four projections (not `E`, `F`).
        bias_constraint: passed to the four projections.
        seed: int or None, the seed of the attention dropout.
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`: how
            the four projections and the attention's complex products are
            computed (see `ComplexMultiHeadAttention`).
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, 2 * Eq)`, stacked. `T` is not limited.

        value: `(B, S, 2 * Ev)`, stacked, `S <= max_length`.

        key: optional `(B, S, 2 * Ek)`, stacked. Defaults to `value`.

        attention_mask: optional boolean mask, `True` = attend, the same
            for every query: `(B, 1, S)`, `(1, S)` or `(B, 1, 1, S)` (the
            ranks of `ComplexMultiHeadAttention`'s masks with a query axis
            of 1), a key padding mask; a `(B, S)` one goes in as
            `value_mask=`. A mask whose query (or head) axis is not 1 is
            a `ValueError`.

        use_causal_mask: must be `False` (see above).

        return_attention_scores: if `True`, also return the weights
            `(B, num_heads, T, 2 * rank)`, `[Re | Im]` on the last axis,
            over the projected keys.

        training: whether dropout is active.

        query_mask, value_mask, key_mask: boolean `(B, T)` / `(B, S)`
            masks, filled in by Keras from the inputs' masks (`Masking`,
            `Embedding(mask_zero=True)`); `value_mask` and `key_mask` pad
            keys as `attention_mask` does.

    Returns:
        `(B, T, 2 * output_dim)`, and the weights when
        `return_attention_scores=True`.

    Examples:
        >>> layer = ComplexLowRankAttention(2, 4, rank=8, max_length=64)
        >>> x = keras.ops.ones((3, 50, 8))          # 4 complex features
        >>> tuple(layer(x, x).shape)
        (3, 50, 8)

    References:
        Wang, S., Li, B. Z., Khabsa, M., Fang, H. and Ma, H.,
        "Linformer: Self-Attention with Linear Complexity",
        arXiv:2006.04768, 2020.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        rank,
        max_length,
        value_dim=None,
        softmax="real",
        product="inner",
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        scale=None,
        projection_initializer="complex_glorot_uniform",
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
        rank = check.positive_int(rank, "rank")
        max_length = check.positive_int(max_length, "max_length")
        if rank > max_length:
            raise ValueError(
                "`rank` must be at most `max_length` (the projections "
                f"are (rank, max_length)). Received: rank={rank}, "
                f"max_length={max_length}"
            )
        if projection_initializer is None:
            projection_initializer = "complex_glorot_uniform"
        projection_initializer = resolve_option(
            "projection_initializer", projection_initializer
        )
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.supports_masking = True
        self.rank = rank
        self.max_length = max_length
        self.projection_initializer = projection_initializer
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
            chunk_size=None,  # rank keys: the (T, rank) scores are small
            complex_matmul=complex_matmul,
            dtype=self.dtype_policy,
            name="attention",
        )
        self._mirror_attention()

    # ------------------------------------------------------------------
    # Shapes and masks.
    # ------------------------------------------------------------------

    def _check_shapes(self, query_shape, value_shape, key_shape):
        """Raises a `ValueError` naming the input whose static shape does
        not fit: rank 3, a known even last axis, keys and values of one
        length, at most `max_length`."""
        shapes = {
            "query": check.static_shape(query_shape),
            "value": check.static_shape(value_shape),
            "key": check.static_shape(key_shape),
        }
        for name, shape in shapes.items():
            if len(shape) != 3 or shape[-1] is None:
                raise ValueError(
                    f"ComplexLowRankAttention expects `{name}` of rank 3, "
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
        for length in (value_length, key_length):
            if length is not None and length > self.max_length:
                raise ValueError(
                    f"The key/value sequence has {length} tokens, more "
                    f"than max_length={self.max_length} (the columns of "
                    "the (rank, max_length) projections). Build the layer "
                    "with a larger `max_length`. Received: "
                    f"value_shape={shapes['value']}"
                )

    def _check_call(
        self,
        query_shape,
        value_shape,
        key_shape,
        causal,
        attention_mask=None,
        value_mask=None,
        key_mask=None,
    ):
        """Raises a `ValueError` naming the argument that does not fit:
        the inputs' shapes (`_check_shapes`), `use_causal_mask=True`, a
        key mask that does not fit `(B, S)`, an attention mask that
        differs between queries or heads (`_padding_layout`)."""
        self._check_shapes(query_shape, value_shape, key_shape)
        if check.boolean(causal, "use_causal_mask"):
            raise ValueError(
                "ComplexLowRankAttention cannot be causal: its projections "
                "mix every key and value position into each of the "
                f"{self.rank} projected rows, so query t would see the "
                "positions after t (Linformer is not causal as published). "
                "For causal attention use ComplexMultiHeadAttention("
                "use_causal_mask=True), with a `sliding_window` for long "
                f"sequences. Received: use_causal_mask={causal!r}"
            )
        batch, length = check.static_shape(value_shape)[:2]
        for name, mask in (("value_mask", value_mask), ("key_mask", key_mask)):
            if mask is not None:
                core.check_mask_shape(
                    _mask_shape(mask), (batch, length), name, "(B, S)"
                )
        if attention_mask is not None:
            self._padding_layout(attention_mask, batch, length)

    def _padding_layout(self, attention_mask, batch, length):
        """The axes of `attention_mask` to squeeze to a `(B|1, S)` key
        padding: `()` for rank 2 `(1, S)`, `(1,)` for rank 3 `(B, 1, S)`,
        `(1, 2)` for rank 4 `(B, 1, 1, S)`. Raises a `ValueError` for a
        mask of another rank, one whose query or head axis is not 1, or
        one that does not broadcast to the key length."""
        shape = check.static_shape(_mask_shape(attention_mask))
        # Rank 2 (T, S), 3 (B, T, S), 4 (B, N, T, S): T and N must be 1.
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
                "ComplexLowRankAttention takes a key padding mask only, the "
                "same for every query and head: `attention_mask` of shape "
                "(B, 1, S), (1, S) or (B, 1, 1, S) (a (B, S) mask goes in "
                "as `value_mask=`). The keys are projected along the "
                f"sequence axis to {self.rank} rows, so a mask {full} "
                "that differs between queries or heads has no key left to "
                f"mask. Received: attention_mask.shape={shape}"
            )
        _, layout, axes, target = layouts[len(shape)]
        core.check_mask_shape(shape, target, "attention_mask", layout)
        return axes if len(shape) > 2 else ()

    def _key_padding(self, value_shape, attention_mask, value_mask, key_mask):
        """Every mask source as one bool key padding `(B|1, S)`, `True` =
        keep, or `None` (checked by `_check_call`)."""
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
        shape = (self.rank, self.max_length)
        for name in ("key", "value"):
            for salt, part in enumerate(("real", "imag")):
                salt += 2 if name == "value" else 0
                weight = self.add_weight(
                    name=f"{name}_projection_{part}",
                    shape=shape,
                    initializer=cinit.clone(self.projection_initializer, salt),
                )
                setattr(self, f"{name}_projection_{part}", weight)
        batch = tuple(value_shape)[0]
        self.attention.build(
            tuple(query_shape),
            (batch, self.rank, tuple(value_shape)[-1]),
            (batch, self.rank, tuple(key_shape)[-1]),
        )
        self.built = True

    def _project_sequence(self, kernel_real, kernel_imag, inputs, padding):
        """`(B, S, 2E)` -> `(B, rank, 2E)`: the complex product `P X` with
        the first `S` columns of `P = kernel_real + i kernel_imag`, as one
        real matmul `[P_r | P_i] [X; i X]`; padded rows zeroed first."""
        dtype = self.compute_dtype
        kernel = ops.concatenate(
            [ops.cast(kernel_real, dtype), ops.cast(kernel_imag, dtype)],
            axis=0,
        )  # (2 rank, max_length): [P_r; P_i]
        length = check.static_size(inputs.shape[1])
        if length != self.max_length:
            if length is None:
                length = ops.shape(inputs)[1]
            kernel = ops.slice(kernel, (0, 0), (2 * self.rank, length))
        kernel = ops.concatenate(
            [kernel[: self.rank], kernel[self.rank :]], axis=1
        )  # (rank, 2S): [P_r | P_i]
        if padding is not None:
            # A select with scalar branches (no float CAST of a run-time
            # mask in an integer file), then the compute dtype.
            keep = ops.where(ops.expand_dims(padding, -1), 1.0, 0.0)
            inputs = inputs * ops.cast(keep, inputs.dtype)
        rows = ops.concatenate([inputs, cx.times_i(inputs)], axis=1)
        return ops.matmul(kernel, rows)

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
        self._check_call(
            query.shape,
            value.shape,
            key.shape,
            use_causal_mask,
            attention_mask,
            value_mask,
            key_mask,
        )
        padding = self._key_padding(
            value.shape, attention_mask, value_mask, key_mask
        )
        key = self._project_sequence(
            self.key_projection_real, self.key_projection_imag, key, padding
        )
        value = self._project_sequence(
            self.value_projection_real,
            self.value_projection_imag,
            value,
            padding,
        )
        return self.attention(
            query,
            value,
            key=key,
            query_mask=query_mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )

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
            attention_mask,
            value_mask,
            key_mask,
        )
        if query_mask is not None:
            core.check_mask_shape(
                _mask_shape(query_mask),
                tuple(query.shape)[:2],
                "query_mask",
                "(B, T)",
            )
        shape = self.compute_output_shape(query.shape, value.shape, key_shape)
        output = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        scores_shape = (
            query.shape[0],
            self.num_heads,
            query.shape[1],
            2 * self.rank,
        )
        scores = keras.KerasTensor(scores_shape, dtype=self.compute_dtype)
        return output, scores

    def get_config(self):
        config = super().get_config()
        attention = self.attention.get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "rank": self.rank,
                "max_length": self.max_length,
                **{name: attention[name] for name in _ATTENTION_ARGS},
                "projection_initializer": keras.initializers.serialize(
                    self.projection_initializer
                ),
            }
        )
        return config
