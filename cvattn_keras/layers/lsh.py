"""ComplexLSHAttention: the Reformer's LSH attention, complex.

Kitaev, Kaiser and Levskaya, "Reformer: The Efficient Transformer" (2020)
hash queries and keys (shared: a key is its query, normalized) by random
rotations, sort the sequence by bucket, and let each query attend only to
the keys near it in that order: O(T log T) for the sort and O(T c) for the
attention, instead of O(T^2). Here the hash is phase-invariant, the chunks
are windows within each bucket (so that causal attention never depends on
the future), and the rounds combine into attention over the union of
their keys, for every softmax variant of `ComplexMultiHeadAttention` with
the inner product.
"""

import keras
import numpy as np
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import attention as core
from cvattn_keras import complex as cx
from cvattn_keras import initializers as cinit
from cvattn_keras._attention_args import all_of
from cvattn_keras.layers._attention_masks import mask_shape as _mask_shape
from cvattn_keras.layers._lsh import LSHPlan
from cvattn_keras.layers._projections import block_einsum
from cvattn_keras.layers._projections import matmul_once
from cvattn_keras.layers._projections import stacked_bias
from cvattn_keras.layers._weights import set_weight_options
from cvattn_keras.layers._weights import weight_options_config
from cvattn_keras.layers.dense import ComplexDense

__all__ = ["ComplexLSHAttention"]

# The sort keys `bucket * T + t` are int32.
_INT32_MAX = 2**31 - 1


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexLSHAttention(keras.layers.Layer):
    """Complex LSH (Reformer) self-attention on stacked tensors.

    The Reformer's attention (Kitaev et al., 2020) for complex numbers, in
    `num_hashes` rounds per head. Queries `q = x W_qk + b` (per head,
    `key_dim` complex features); keys are the queries, normalized (shared
    QK): `k = q / |q|`; values `v = x_v W_v + b_v`. In each round `r` the
    tokens are hashed into `num_buckets` buckets by

        h_r(k) = argmax_j |<k, R_rj>|,   j = 1 .. num_buckets,

    the largest modulus of the complex projections of `k` on random
    complex directions `R_rj` of unit norm (complex Gaussian draws from
    `seed`, normalized; non-trainable weights `rotations_real`,
    `rotations_imag`): the nearest of `n` random lines. A common phase
    turn of the keys multiplies every projection by one unit complex
    number, so the buckets, and CAtt's weights, do not change (the
    Reformer's `argmax [xR, -xR]` of the stacked `[Re | Im]` vector would
    move them). The tokens are sorted by `(bucket, position)` and query
    `t` attends to the keys of its bucket whose place among the bucket's
    tokens (in position order) is less than `chunk_length` from its own,
    and, with `use_causal_mask`, only those before it. The rounds combine
    as in the Reformer (each round's output weighted by its normaliser,
    each key divided by the number of rounds that gave it): the result is
    exactly attention over the union `U_t` of the keys the rounds give
    query `t`. Its own key is left out (the Reformer's rule: with shared
    QK, `Re<q_t, k_t> = |q_t|` is the largest score), unless `U_t` is
    empty, where query `t` attends to itself alone.

    Computed block by block: the sorted sequence in blocks of
    `chunk_length`, each block's queries against its own and the
    neighbouring blocks' keys (`3 chunk_length` of them; `2 chunk_length`
    causal), masked to the window: work and memory
    `O(num_hashes T chunk_length)` per head and the sort's `O(T log T)`;
    no `(T, T)` tensor. Sorting by `keras.ops.top_k` (TFLite `TOPK_V2`),
    gathering by `keras.ops.take` (`GATHER`).

    Decisions:

    - Shared QK, as the Reformer: a query and a key that should score
      high must land in one bucket, and only a shared hash of one vector
      puts each token's query and key in one place of the sorted order.
      So the layer is self-attention: `key` must be `None`, and `value`
      has the query's length.
    - The hash is the largest modulus of `num_buckets` complex random
      projections (not `[xR, -xR]`: the modulus folds the sign, so `n`
      buckets take `n` directions). It depends on each token's complex
      line only, the keys of largest `Re<q, k>`, `Im<q, k>` and
      `|<q, k>|` alike, so every softmax variant is served by it. Any
      hash of one token invariant to a common phase is invariant to that
      token's phase, so nothing finer is possible without looking at
      other tokens (which would break causality).
    - Windows within a bucket instead of the Reformer's fixed chunks of
      the sorted sequence: a future token sorted into bucket `b` shifts
      every later bucket's tokens across the fixed chunk boundaries, so
      which past keys a query saw would depend on the future. A query's
      place in its bucket counts only the tokens before it, so causal
      outputs at `t` depend on the inputs up to `t` alone (tested).
    - Softmax variants: all four are defined with the inner product: each
      round's normaliser is a sum of exponentials that combines across
      rounds (two of them for RIAtt, one per softmax). The bilinear
      product is refused (`ValueError`): its large scores `Re(q k^T)` lie
      near `conj(q)`, not in `q`'s bucket, so the hash would not find them.
    - Masks: key padding only (`value_mask`, `key_mask` `(B, S)`, a Keras
      mask, or `attention_mask` `(B, 1, S)`, `(1, S)`, `(B, 1, 1, S)`):
      padded tokens are sorted into a bucket of their own and attend to
      nothing (zero output rows), and take no place in any window. A mask
      that differs between queries is refused (it would be a `(T, S)`
      tensor).
    - A sequence length that `chunk_length` does not divide is padded
      internally (the padding is masked); a `chunk_length` beyond `T` is
      `T`.
    - Exact: with `num_buckets=1` and `chunk_length >= T`, `U_t` is every
      other (earlier, if causal) key: full shared-QK attention with the
      own key masked. Tested against a NumPy complex128 reference of the
      union for several buckets and rounds.

    Weights: `query_dense` (the shared query/key projection),
    `value_dense`, `output_dense` (`ComplexDense`), and the non-trainable
    `rotations_real`, `rotations_imag` `(num_heads, key_dim, num_hashes *
    num_buckets)`, saved with the model.

    Precision: the hash, scores, softmax and sums are float32 (float64
    stays float64) under any policy; the output is in the compute dtype.

    Args:
        num_heads: positive int, the number of heads.
        key_dim: positive int, the size of each query/key head in complex
            features.
        num_buckets: positive int, the buckets per round (1: no hashing).
        num_hashes: positive int, the hash rounds. Defaults to 1.
        chunk_length: positive int, the window within a bucket and the
            block length of the sorted sequence. Defaults to 64.
        value_dim: positive int, the size of each value head in complex
            features. Defaults to `key_dim`.
        softmax: `"real"` (CAtt, default), `"abs"` (APAtt), `"absonly"`
            (AAtt) or `"naive"` (RIAtt), or an alias.
        product: `"inner"` (default; `"ip"`). `"bilinear"` is refused.
        dropout: float in [0, 1), the dropout rate on the attention
            weights.
        use_bias: whether the three projections have a complex bias.
        output_dim: positive int, the number of complex output features.
            Defaults to the query's.
        scale: positive float multiplying the scores. Defaults to
            `key_dim ** -0.5`.
        kernel_initializer: passed to the three `ComplexDense`
            projections.
        bias_initializer: passed to the three projections.
        kernel_regularizer: passed to the three projections.
        bias_regularizer: passed to the three projections.
        activity_regularizer: applied to the output.
        kernel_constraint: passed to the three projections.
        bias_constraint: passed to the three projections.
        seed: int or None: the random rotations are drawn from it by NumPy
            (the same on every backend); `None` draws them from NumPy's
            global generator (`keras.utils.set_random_seed` seeds it). It
            also seeds the attention dropout.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, 2 * Eq)`, stacked.

        value: `(B, T, 2 * Ev)`, stacked, the query's length.

        key: must be `None` (shared QK: the keys are the queries').

        attention_mask: optional key padding mask, `True` = attend:
            `(B, 1, T)`, `(1, T)` or `(B, 1, 1, T)`.

        use_causal_mask: if `True`, query `t` attends to keys `s < t`
            only (itself alone when it has none).

        return_attention_scores: must be `False` (no `(T, T)` weights).

        training: whether dropout is active.

        query_mask, value_mask, key_mask: boolean `(B, T)` masks, filled
            in by Keras from the inputs' masks; `value_mask` and
            `key_mask` pad keys, `query_mask` zeroes output rows.

    Returns:
        `(B, T, 2 * output_dim)`.

    Examples:
        >>> layer = ComplexLSHAttention(2, 4, num_buckets=4, chunk_length=8)
        >>> x = keras.ops.ones((3, 50, 8))          # 4 complex features
        >>> tuple(layer(x, x, use_causal_mask=True).shape)
        (3, 50, 8)

    References:
        Kitaev, N., Kaiser, L. and Levskaya, A., "Reformer: The Efficient
        Transformer", ICLR 2020, arXiv:2001.04451.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        num_buckets,
        num_hashes=1,
        chunk_length=64,
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
        **kwargs,
    ):
        num_heads = check.positive_int(num_heads, "num_heads")
        key_dim = check.positive_int(key_dim, "key_dim")
        num_buckets = check.positive_int(num_buckets, "num_buckets")
        num_hashes = check.positive_int(num_hashes, "num_hashes")
        chunk_length = check.positive_int(chunk_length, "chunk_length")
        value_dim = check.positive_int(value_dim, "value_dim", allow_none=True)
        output_dim = check.positive_int(
            output_dim, "output_dim", allow_none=True
        )
        softmax = core.resolve_softmax(softmax)
        product = core.resolve_product(product)
        if product != "inner":
            raise ValueError(
                "ComplexLSHAttention takes the inner product only: the "
                "hash buckets the keys near each query's complex line, "
                "where <q, k> is large; the bilinear product's large "
                "scores Re(q k^T) lie near conj(q), in another bucket. "
                f"Received: product={product!r}"
            )
        dropout = check.rate(dropout, "dropout")
        scale = check.greater_than(scale, "scale", allow_none=True)
        seed = check.seed(seed)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.supports_masking = True
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.num_buckets = num_buckets
        self.num_hashes = num_hashes
        self.chunk_length = chunk_length
        self.value_dim = value_dim if value_dim is not None else key_dim
        self.softmax = softmax
        self.product = product
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)
        self.output_dim = output_dim
        self.scale = float(scale) if scale is not None else key_dim**-0.5
        self._scale_arg = scale
        self.seed = seed
        set_weight_options(
            self,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        self.seed_generator = (
            keras.random.SeedGenerator(seed) if self.dropout > 0 else None
        )

    # ------------------------------------------------------------------
    # Shapes and masks.
    # ------------------------------------------------------------------

    def _check_shapes(self, query_shape, value_shape, key_shape=None):
        """Raises a `ValueError` naming the input that does not fit: rank
        3 with a known even last axis, `key` given, a value of another
        length than the query, or `num_buckets * T` past int32."""
        if key_shape is not None:
            raise ValueError(
                "ComplexLSHAttention is self-attention with a shared "
                "query/key projection (the Reformer's shared QK): the keys "
                "are the queries', so `key` must be None. Received: "
                f"key.shape={tuple(key_shape)}"
            )
        shapes = {
            "query": check.static_shape(query_shape),
            "value": check.static_shape(value_shape),
        }
        for name, shape in shapes.items():
            if len(shape) != 3 or shape[-1] is None:
                raise ValueError(
                    f"ComplexLSHAttention expects `{name}` of rank 3, "
                    "(batch, length, 2 * features), its last axis known. "
                    f"Received: {name}_shape={shape}"
                )
            cx.check_even(shape[-1], f"{name}_shape[-1]", shape)
        lengths = {shape[1] for shape in shapes.values()} - {None}
        batches = {shape[0] for shape in shapes.values()} - {None}
        if len(lengths) > 1 or len(batches) > 1:
            raise ValueError(
                "ComplexLSHAttention is self-attention: `query` and "
                "`value` must have the same batch size and length. "
                f"Received: query_shape={shapes['query']}, "
                f"value_shape={shapes['value']}"
            )
        length = shapes["query"][1]
        if length is not None and (self.num_buckets + 1) * length > (
            _INT32_MAX
        ):
            raise ValueError(
                "The sort keys bucket * T + t must fit int32: num_buckets "
                f"* T = {self.num_buckets} * {length} is too large. "
                f"Received: num_buckets={self.num_buckets}, "
                f"query_shape={shapes['query']}"
            )

    def _padding_layout(self, attention_mask, batch, length):
        """The axes of `attention_mask` to squeeze to a `(B|1, T)` key
        padding (`()`, `(1,)` or `(1, 2)` for ranks 2, 3, 4); a
        `ValueError` for any other layout."""
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
                "ComplexLSHAttention takes a key padding mask only, the "
                "same for every query and head: `attention_mask` of shape "
                "(B, 1, S), (1, S) or (B, 1, 1, S) (a (B, S) mask goes in "
                f"as `value_mask=`). A mask {full} that differs between "
                "queries would be a (T, S) tensor, which LSH attention "
                f"exists to avoid. Received: attention_mask.shape={shape}"
            )
        _, layout, axes, target = layouts[len(shape)]
        core.check_mask_shape(shape, target, "attention_mask", layout)
        return axes if len(shape) > 2 else ()

    def _check_call(
        self,
        query_shape,
        value_shape,
        key_shape,
        causal,
        scores,
        attention_mask=None,
        masks=(),
    ):
        """Raises a `ValueError` naming the argument that does not fit."""
        self._check_shapes(query_shape, value_shape, key_shape)
        check.boolean(causal, "use_causal_mask")
        if check.boolean(scores, "return_attention_scores"):
            raise ValueError(
                "ComplexLSHAttention has no (T, T) attention weights to "
                "return (each query sees a few keys of its buckets). "
                f"Received: return_attention_scores={scores!r}"
            )
        batch, length = check.static_shape(query_shape)[:2]
        for name, mask in masks:
            if mask is not None:
                core.check_mask_shape(
                    _mask_shape(mask), (batch, length), name, "(B, T)"
                )
        if attention_mask is not None:
            self._padding_layout(attention_mask, batch, length)

    def _key_padding(self, query_shape, attention_mask, value_mask, key_mask):
        """Every key mask as one bool `(B|1, T)`, `True` = keep, or
        `None`."""
        masks = [
            ops.cast(mask, "bool")
            for mask in (value_mask, key_mask)
            if mask is not None
        ]
        if attention_mask is not None:
            batch, length = check.static_shape(query_shape)[:2]
            axes = self._padding_layout(attention_mask, batch, length)
            mask = ops.cast(ops.convert_to_tensor(attention_mask), "bool")
            masks.append(ops.squeeze(mask, axes) if axes else mask)
        return all_of(masks)

    # ------------------------------------------------------------------
    # Build and projections.
    # ------------------------------------------------------------------

    def build(self, query_shape, value_shape, key_shape=None):
        self._check_shapes(query_shape, value_shape, key_shape)
        query_size = tuple(query_shape)[-1] // 2
        self.query_dense = self._make_dense(
            "query", self.num_heads * self.key_dim, 0
        )
        self.query_dense.build(tuple(query_shape))
        self.value_dense = self._make_dense(
            "value", self.num_heads * self.value_dim, 2
        )
        self.value_dense.build(tuple(value_shape))
        self.output_dense = self._make_dense(
            "attention_output", self.output_dim or query_size, 3
        )
        self.output_dense.build(
            tuple(query_shape)[:-1] + (2 * self.num_heads * self.value_dim,)
        )
        shape = (
            self.num_heads,
            self.key_dim,
            self.num_hashes * self.num_buckets,
        )
        seed = self.seed
        if seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))
        # Complex Gaussian directions, each scaled to unit norm: the
        # buckets are then the cells of the nearest of n random lines.
        draws = np.random.default_rng(seed).standard_normal((2,) + shape)
        draws = draws / np.sqrt(np.sum(draws**2, axis=(0, 2), keepdims=True))
        for part, draw in zip(("real", "imag"), draws):
            weight = self.add_weight(
                name=f"rotations_{part}",
                shape=shape,
                initializer=_constant(draw),
                trainable=False,
            )
            setattr(self, f"rotations_{part}", weight)
        self.built = True

    def _make_dense(self, name, units, index):
        # Salts as ComplexMultiHeadAttention's projections (no key one).
        return ComplexDense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=cinit.clone(self.kernel_initializer, 2 * index),
            bias_initializer=cinit.clone(self.bias_initializer, 2 * index),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            dtype=self.dtype_policy,
            name=name,
        )

    def _project_to_heads(self, dense, inputs, head_dim):
        """`(B, T, 2E)` -> `(B, T, N, 2 head_dim)`, each head `[re | im]`
        (the block kernel; traced for export, each real weight once)."""
        heads = (self.num_heads, head_dim)
        if not _tracing.weights_once():
            return block_einsum(
                dense, inputs, "bld,dnh->blnh", (-1,) + heads, 0, heads
            )
        outputs = matmul_once(
            dense, inputs, (-1, self.num_heads * head_dim), out_shape=heads
        )
        outputs = cx.reshape(
            outputs,
            tuple(ops.shape(inputs)[:2]) + (self.num_heads, 2 * head_dim),
        )
        if dense.use_bias:
            outputs = outputs + stacked_bias(dense, heads)
        return outputs

    def _project_from_heads(self, inputs):
        """`(B, T, N, 2V)` -> `(B, T, 2 output_dim)` by `output_dense`."""
        kernel_shape = (self.num_heads, self.value_dim, -1)
        dense = self.output_dense
        if not _tracing.weights_once():
            return block_einsum(
                dense, inputs, "btnh,nho->bto", kernel_shape, 1, (-1,)
            )
        outputs = matmul_once(dense, inputs, kernel_shape, 2)
        if dense.use_bias:
            outputs = outputs + stacked_bias(dense, (-1,))
        return outputs

    # ------------------------------------------------------------------
    # Call.
    # ------------------------------------------------------------------

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
        masks = (
            ("query_mask", query_mask),
            ("value_mask", value_mask),
            ("key_mask", key_mask),
        )
        self._check_call(
            query.shape,
            value.shape,
            None if key is None else key.shape,
            use_causal_mask,
            return_attention_scores,
            attention_mask,
            masks,
        )
        padding = self._key_padding(
            query.shape, attention_mask, value_mask, key_mask
        )
        q = self._project_to_heads(self.query_dense, query, self.key_dim)
        v = self._project_to_heads(self.value_dense, value, self.value_dim)
        dropout = self.dropout if training else 0.0
        outputs = LSHPlan(self, bool(use_causal_mask), dropout).attend(
            q, v, padding
        )
        outputs = self._project_from_heads(ops.cast(outputs, v.dtype))
        if query_mask is not None:
            keep = ops.where(ops.expand_dims(query_mask, -1), 1.0, 0.0)
            outputs = outputs * ops.cast(keep, outputs.dtype)
        return outputs

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
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
        key_shape = None if key is None else key.shape
        masks = (
            ("query_mask", query_mask),
            ("value_mask", value_mask),
            ("key_mask", key_mask),
        )
        self._check_call(
            query.shape,
            value.shape,
            key_shape,
            use_causal_mask,
            return_attention_scores,
            attention_mask,
            masks,
        )
        shape = self.compute_output_shape(query.shape, value.shape)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "num_buckets": self.num_buckets,
                "num_hashes": self.num_hashes,
                "chunk_length": self.chunk_length,
                "value_dim": self.value_dim,
                "softmax": self.softmax,
                "product": self.product,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "scale": self._scale_arg,
                "seed": self.seed,
                **weight_options_config(self),
            }
        )
        return config


def _constant(values):
    """An initializer returning `values` (the rotations, drawn by NumPy)."""

    def initializer(shape, dtype=None):
        return ops.cast(ops.convert_to_tensor(values), dtype or "float32")

    return initializer
