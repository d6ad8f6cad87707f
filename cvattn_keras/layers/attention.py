"""ComplexMultiHeadAttention: the attention of Eilers & Jiang (2023)."""

import inspect

import keras
from keras import ops

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import attention as core
from cvattn_keras import complex as cx
from cvattn_keras import initializers as cinit
from cvattn_keras._attention_args import all_of
from cvattn_keras.layers import _attention_checks as _checks
from cvattn_keras.layers._options import attention_options_config
from cvattn_keras.layers._options import resolve_attention_options
from cvattn_keras.layers._options import set_options
from cvattn_keras.layers._projections import block_einsum
from cvattn_keras.layers._projections import gauss_einsum
from cvattn_keras.layers._projections import matmul_once
from cvattn_keras.layers._projections import stacked_bias
from cvattn_keras.layers._weights import set_weight_options
from cvattn_keras.layers._weights import weight_options_config
from cvattn_keras.layers.dense import ComplexDense
from cvattn_keras.layers.embeddings import ComplexRotaryEmbedding


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexMultiHeadAttention(keras.layers.Layer):
    """Complex-valued multi-head attention on stacked `[real | imag]` tensors.

    The attention of Eilers & Jiang, "Building Blocks for a Complex-Valued
    Transformer Architecture" (ICASSP 2023), computed in real arithmetic so
    that no complex dtype appears in the graph. With complex projections
    `q = x_q W_q`, `k = x_k W_k`, `v = x_v W_v` split into `num_heads`
    contiguous blocks of complex features, each head computes the score
    `A = scale * <q, k>` and weights `W` (see `cvattn_keras.attention`):

    - `softmax="real"` (CAtt, the paper's proposal): `softmax(Re A)`;
    - `"abs"` (APAtt): `softmax(|A|) * A / |A|`;
    - `"absonly"` (AAtt): `softmax(|A|)`;
    - `"naive"` (RIAtt): `softmax(Re A) + i softmax(Im A)`;

    with `product="inner"` (`<q, k> = q conj(k)^T`, the reference's "ip") or
    `"bilinear"` (`q k^T`, "cp"). The heads' outputs `W v` are concatenated
    and projected by `W_o`. CAtt is a real attention of head width
    `2 * key_dim` (for the bilinear product, against conjugated keys), and
    runs through `keras.ops.dot_product_attention` when no scores are
    requested, no dropout is active and `value_dim == key_dim` (and, with a
    mask, outside `cvattn_keras.attention.portable_masking`, which the
    exporter uses).

    Under a mixed policy (`"mixed_bfloat16"`), the projections and the
    attention matmuls take compute-dtype operands, as in Keras'
    `MultiHeadAttention`; the scores are cast to float32 for the masking and
    the softmax (and the moduli of APAtt/AAtt); the variables stay float32.
    Under `"mixed_float16"` the scores' operands are widened to float32, so
    that scores beyond float16's 65504 do not overflow.

    The layer reproduces the reference PyTorch implementation: contiguous
    heads, scale `key_dim ** -0.5` on both parts of the score, dropout on the
    weights with one mask shared by both parts.

    Args:
        num_heads: positive int, the number of heads.
        key_dim: positive int, the size of each query/key head in complex
            features.
        value_dim: positive int, the size of each value head in complex
            features. Defaults to `key_dim`.
        softmax: `"real"` (default), `"abs"`, `"absonly"` or `"naive"`; also
            the paper's names `"CAtt"`, `"APAtt"`, `"AAtt"`, `"RIAtt"` and
            `"naiv"`, in any case.
        product: `"inner"` (default) or `"bilinear"`; also `"ip"`, `"cp"`.
            For the reference's compound strings (`"absonlycp"`, ...) use
            `cvattn_keras.attention.parse_variant`.
        dropout: float in [0, 1), the dropout rate on the attention weights.
        use_bias: whether the four projections have a complex bias.
        output_dim: positive int, the number of complex output features.
            Defaults to the query's.
        scale: positive float multiplying both parts of the score. Defaults
            to `key_dim ** -0.5`.
        kernel_initializer: passed to the four `ComplexDense`
            projections (see `ComplexDense`).
        bias_initializer: passed to the four projections.
        kernel_regularizer: passed to the four projections.
        bias_regularizer: passed to the four projections.
        activity_regularizer: applied to the output.
        kernel_constraint: passed to the four projections.
        bias_constraint: passed to the four projections.
        rotary_max_wavelength: if set (e.g. 10000), complex rotary position
            encoding of the projected queries and keys: feature `j` of the
            token at position `p` is multiplied by `exp(i p theta_j)`,
            `theta_j = rotary_max_wavelength^(-j / key_dim)`, so that the
            inner-product scores depend on relative positions only.
            Defaults to `None` (no rotation).
        chunk_size: `"auto"` (default), `None` or a positive int: attend
            to keys longer than `chunk_size` in blocks of `chunk_size`
            (`"auto"`: in blocks of 512 once T * S reaches 4096 squared,
            or with a `sliding_window` W once T and S - W exceed 512, see
            `cvattn_keras.attention.chunk_for`; `None`: never), with an
            online softmax and a recomputing gradient
            (`cvattn_keras.chunked_attention`), so that neither the forward
            pass nor the gradient holds the `(T, S)` scores: without a
            mask or with `use_causal_mask` only, O(T) memory (every variant
            at T = 16,384, 4 heads, trains in about 2 GiB); another mask is
            a `(B|1, T, S)` bool tensor (256 MiB at T = 16,384). The same
            results within float32 rounding. The full path is kept for
            `return_attention_scores=True`, attention dropout in training,
            TFLite export, and a key length known only at run time.
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`: how the
            four projections and the complex products of the attention
            (the scores of APAtt, AAtt and RIAtt, the complex weights
            times the values of APAtt and RIAtt) are computed: Gauss's
            three real products or the block form's four (see
            `ComplexDense`). `"auto"` takes Gauss's form for a projection
            whose input and output widths are both at least
            `complex.GAUSS_MIN_SIZE_PROJECTIONS` (256) complex features
            (the three input projections share the input's sums; measured
            faster from there), and for the attention's products only
            where the head width and the key length are both at least
            `complex.GAUSS_MIN_SIZE` (512); never under a float16
            compute dtype (see `complex.use_gauss`). The chunked path and
            TFLite export keep their own forms.
        sliding_window: `None` (default) or a positive int `W`: query `t`
            attends only to the keys of the last `W` positions, `t - W < s
            <= t` with `use_causal_mask=True` (a local, streamable
            attention: see `cvattn_keras.streaming`), `|t - s| < W`
            without, combined with every other mask. With a cache and a
            `cache_update_index`, positions count from the index; the
            chunked path builds each block's part of the window only.
        seed: int or None, the seed of the attention dropout. (A seeded
            initializer is seeded separately; each projection and part then
            gets its own derived seed.)
        gated: if `True`, gated attention (Qiu et al., 2025, the gate after
            the attention, before `W_o`): each head's output `o` (complex,
            `(B, T, N, value_dim)`) is scaled by a real gate of the query's
            input `x`, `o * sigmoid(|x| W_g + b_g)`, elementwise and head
            by head, `|x|` the moduli of `x`'s complex features. A real,
            positive gate scales each output's modulus and keeps its phase;
            computed from the moduli, it is unchanged when the input turns
            by a common phase (a gate from `[Re x | Im x]` is not), so the
            output still turns with the inputs. Weights `gate_kernel`
            `(Eq, num_heads * value_dim)` (real, from `kernel_initializer`
            and its regularizer and constraint) and, with `use_bias`,
            `gate_bias` (from `bias_initializer`: zeros by default, so the
            gate starts near 1/2, as the paper's). Defaults to `False` (no
            gate and no extra weights).
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, 2 * Eq)`, stacked.

        value: `(B, S, 2 * Ev)`, stacked.

        key: optional `(B, S, 2 * Ek)`, stacked. Defaults to `value`.

        attention_mask: optional boolean mask, `True` = attend, of shape
            `(B, T, S)`, `(T, S)` or `(B, num_heads, T, S)`, broadcastable.
            A rank-2 mask is `(T, S)`, never a `(B, S)` key padding mask:
            pass that as `value_mask`, or as `attention_mask[:, None, :]`.

        use_causal_mask: if `True`, query `t` attends to keys `s <= t`
            (top-left aligned, as in `keras.layers.MultiHeadAttention`).

        return_attention_scores: if `True`, also return the attention
            weights `(B, num_heads, T, 2 * S)` with `[Re | Im]` on the last
            axis, before dropout (the Keras convention).

        training: whether dropout is active.

        query_mask, value_mask, key_mask: boolean `(B, T)` / `(B, S)`
            masks, filled in by Keras from the inputs' masks (`Masking`,
            `Embedding(mask_zero=True)`); combined with the others by `&`.
            With a `cache`, `S` is the cache's length `S_max`.

        cache: optional key/value cache for autoregressive decoding, as
            keras-hub's `CachedMultiHeadAttention`: a float tensor
            `(B, 2, S_max, num_heads, 2 * key_dim)` holding the projected
            keys (`cache[:, 0]`) and values (`cache[:, 1]`) in the per-head
            stacked layout, each head's features `[Re | Im]` (keys after
            the rotary encoding, if any). Needs `value_dim == key_dim`.
            Start from zeros. The attention then runs against the cache's
            `S_max` keys: `S` above reads `S_max`.

        cache_update_index: int or scalar int tensor, with `cache` only.
            If given, the keys and values projected from `key`/`value`
            (`S_new` rows) are written into the cache at rows
            `[index, index + S_new)` (`ops.slice_update`), the updated cache
            is used and returned, and only the filled rows
            `s < index + S_new` are attended; with `use_causal_mask`, query
            row `t` stands at position `index + t` and attends to `s <=
            index + t`. If `None`, the cache is used as it is (e.g. the
            encoder's keys and values of a cross-attention, computed once
            with `cache_update_index=0`): `key`/`value` are ignored, every
            row is attended and a causal mask is top-left aligned.

        query_start_index: the position of the query's first row for the
            rotary encoding. Defaults to `cache_update_index`, or 0. (A
            decoder passes its step index here when it reuses a
            cross-attention cache.)

    A masked key gets weight exactly 0 in every variant; a query row with no
    key to attend gets zero weights and a zero output (before the output
    projection's bias), with finite gradients.

    Returns:
        `(B, T, 2 * output_dim)`, then the weights when
        `return_attention_scores=True`, then the cache when one is given
        (updated, or as received): `output`, `(output, scores)`,
        `(output, cache)` or `(output, scores, cache)`, as keras-hub's.

    Examples:
        >>> layer = ComplexMultiHeadAttention(num_heads=2, key_dim=4)
        >>> x = keras.ops.ones((3, 5, 8))           # 4 complex features
        >>> tuple(layer(x, x, use_causal_mask=True).shape)
        (3, 5, 8)

    References:
        Eilers, F. and Jiang, X., "Building Blocks for a Complex-Valued
        Transformer Architecture", ICASSP 2023, arXiv:2306.09827, §3.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
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
        rotary_max_wavelength=None,
        chunk_size="auto",
        complex_matmul="auto",
        sliding_window=None,
        gated=False,
        **kwargs,
    ):
        num_heads = check.positive_int(num_heads, "num_heads")
        gated = check.boolean(gated, "gated")
        options = resolve_attention_options(
            seed,
            rotary_max_wavelength,
            chunk_size,
            complex_matmul,
            sliding_window,
        )
        key_dim = check.positive_int(key_dim, "key_dim")
        value_dim = check.positive_int(value_dim, "value_dim", allow_none=True)
        output_dim = check.positive_int(
            output_dim, "output_dim", allow_none=True
        )
        softmax = core.resolve_softmax(softmax)
        product = core.resolve_product(product)
        dropout = check.rate(dropout, "dropout")
        scale = check.greater_than(scale, "scale", allow_none=True)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.supports_masking = True
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim if value_dim is not None else key_dim
        self.softmax = softmax
        self.product = product
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)
        self.output_dim = output_dim
        self.scale = float(scale) if scale is not None else key_dim**-0.5
        self._scale_arg = scale
        self.gated = gated
        set_weight_options(
            self,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        set_options(self, options)
        self.rotary = None
        if self.rotary_max_wavelength is not None:
            self.rotary = ComplexRotaryEmbedding(
                self.rotary_max_wavelength,
                dtype=self.dtype_policy,
                name="rotary",
            )
        self.seed_generator = (
            keras.random.SeedGenerator(self.seed) if self.dropout > 0 else None
        )

    # ------------------------------------------------------------------
    # Shapes.
    # ------------------------------------------------------------------

    def _check_shapes(self, query_shape, value_shape, key_shape):
        """Validates the three input shapes; returns the complex feature
        sizes `(Eq, Ev, Ek)`. Batch sizes and lengths are compared where
        static: a symbolic size (`torch.export`, `jax.export`) is only
        known when the graph runs (`_validation.static_size`)."""
        query_shape = check.static_shape(query_shape)
        value_shape = check.static_shape(value_shape)
        key_shape = check.static_shape(key_shape)
        sizes = []
        for name, shape in (
            ("query", query_shape),
            ("value", value_shape),
            ("key", key_shape),
        ):
            shape = tuple(shape)
            if len(shape) != 3:
                raise ValueError(
                    f"ComplexMultiHeadAttention expects `{name}` of rank 3, "
                    f"(batch, length, 2 * features). Received: "
                    f"{name}_shape={shape}"
                )
            if shape[-1] is None:
                raise ValueError(
                    f"The last axis of `{name}` must be known. Received: "
                    f"{name}_shape={shape}"
                )
            cx.check_even(shape[-1], f"{name}_shape[-1]", shape)
            sizes.append(shape[-1] // 2)
        batches = {
            name: tuple(shape)[0]
            for name, shape in (
                ("query", query_shape),
                ("value", value_shape),
                ("key", key_shape),
            )
        }
        if len({size for size in batches.values() if size is not None}) > 1:
            raise ValueError(
                "`query`, `value` and `key` must have the same batch size "
                f"(axis 0). Received: query_shape={tuple(query_shape)}, "
                f"value_shape={tuple(value_shape)}, "
                f"key_shape={tuple(key_shape)}"
            )
        value_length, key_length = tuple(value_shape)[1], tuple(key_shape)[1]
        if None not in (value_length, key_length) and (
            value_length != key_length
        ):
            raise ValueError(
                "`key` and `value` must have the same length (axis 1). "
                f"Received: value_shape={tuple(value_shape)}, "
                f"key_shape={tuple(key_shape)}"
            )
        if self.built and tuple(sizes) != self._feature_sizes:
            raise ValueError(
                "The layer was built for complex feature sizes (query, "
                f"value, key) = {self._feature_sizes}, but was called with "
                f"{tuple(sizes)}: query_shape={tuple(query_shape)}, "
                f"value_shape={tuple(value_shape)}, "
                f"key_shape={tuple(key_shape)}"
            )
        return tuple(sizes)

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        query_size, value_size, key_size = self._check_shapes(
            query_shape, value_shape, key_shape
        )
        self._feature_sizes = (query_size, value_size, key_size)
        self.query_dense = self._make_dense(
            "query", self.num_heads * self.key_dim, 0
        )
        self.query_dense.build(tuple(query_shape))
        self.key_dense = self._make_dense(
            "key", self.num_heads * self.key_dim, 1
        )
        self.key_dense.build(tuple(key_shape))
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
        if self.gated:
            self._build_gate(query_size)
        self.built = True

    def _build_gate(self, query_size):
        """`gate_kernel` `(Eq, N V)` (real) and, with `use_bias`,
        `gate_bias` `(N V,)`, seeded apart from the projections (salt 8)."""
        units = self.num_heads * self.value_dim
        self.gate_kernel = self.add_weight(
            name="gate_kernel",
            shape=(query_size, units),
            initializer=cinit.clone(self.kernel_initializer, 8),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.gate_bias = None
        if self.use_bias:
            self.gate_bias = self.add_weight(
                name="gate_bias",
                shape=(units,),
                initializer=cinit.clone(self.bias_initializer, 8),
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )

    def _gate(self, query):
        """The gate `sigmoid(|x| W_g + b_g)` of the query's input `x`
        `(B, T, 2Eq)`, per head and stacked as the heads' outputs: `(B, T,
        N, 2V)`, the same real gate on each feature's two parts."""
        dtype = self.compute_dtype
        logits = ops.matmul(
            ops.cast(cx.modulus(query), dtype),
            ops.cast(self.gate_kernel, dtype),
        )
        if self.gate_bias is not None:
            logits = logits + ops.cast(self.gate_bias, dtype)
        gate = cx.reshape_tail(
            ops.sigmoid(logits), 2, (self.num_heads, self.value_dim)
        )
        return ops.concatenate([gate, gate], axis=-1)

    def _make_dense(self, name, units, index):
        # A seeded initializer gets a distinct derived seed per projection,
        # salts 0, 2, 4, 6: ComplexDense derives the imaginary part's with
        # salt 1, which must not coincide with another projection's.
        return ComplexDense(
            units,
            use_bias=self.use_bias,
            kernel_initializer=cinit.clone(self.kernel_initializer, 2 * index),
            bias_initializer=cinit.clone(self.bias_initializer, 2 * index),
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            kernel_constraint=self.kernel_constraint,
            bias_constraint=self.bias_constraint,
            complex_matmul=self.complex_matmul,
            dtype=self.dtype_policy,
            name=name,
        )

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        query_size = self._check_shapes(query_shape, value_shape, key_shape)[0]
        return tuple(query_shape)[:-1] + (2 * (self.output_dim or query_size),)

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
        cache=None,
        cache_update_index=None,
        query_start_index=None,
    ):
        output_shape = self.compute_output_shape(
            query.shape, value.shape, None if key is None else key.shape
        )
        self._check_cache(cache, cache_update_index, query.shape, value.shape)
        keys_shape = self._keys_shape(value.shape, cache)
        self._check_masks(
            query.shape,
            keys_shape,
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
        )
        outputs = [keras.KerasTensor(output_shape, dtype=self.compute_dtype)]
        if return_attention_scores:
            scores_shape = (
                query.shape[0],
                self.num_heads,
                query.shape[1],
                None if keys_shape[1] is None else 2 * keys_shape[1],
            )
            outputs.append(
                keras.KerasTensor(scores_shape, dtype=self.compute_dtype)
            )
        if cache is not None:
            outputs.append(keras.KerasTensor(cache.shape, dtype=cache.dtype))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    # ------------------------------------------------------------------
    # The key/value cache.
    # ------------------------------------------------------------------

    @staticmethod
    def _keys_shape(value_shape, cache):
        """`(B, S)`: the attended keys' batch and length, the cache's
        `S_max` when there is a cache (`_attention_checks.keys_shape`)."""
        return _checks.keys_shape(value_shape, cache)

    def _check_cache(self, cache, cache_update_index, query_shape, value_shape):
        """Raises a `ValueError` naming the argument for a cache or a
        `cache_update_index` that does not fit (see
        `_attention_checks.check_cache`)."""
        _checks.check_cache(
            self, cache, cache_update_index, query_shape, value_shape
        )

    # ------------------------------------------------------------------
    # Masks.
    # ------------------------------------------------------------------

    def _check_masks(
        self,
        query_shape,
        value_shape,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
    ):
        """Raises a `ValueError` naming the mask whose static shape does not
        fit the inputs (see `_attention_checks.check_masks`)."""
        _checks.check_masks(
            self.num_heads,
            query_shape,
            value_shape,
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
        )

    def _compute_attention_mask(
        self,
        query,
        value,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        cache=None,
        cache_update_index=None,
        window_in_core=False,
    ):
        """Merges every mask source into one boolean mask, `True` = attend,
        of rank 4 broadcastable to `(B, N, T, S)`, or `None` when there is
        nothing to mask. With a cache, `S` is its length, and with a
        `cache_update_index` the rows beyond the filled part are masked.
        The sliding window is left out with `window_in_core` (the core
        builds it per block)."""
        self._check_masks(
            query.shape,
            self._keys_shape(value.shape, cache),
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
        )
        # ops.expand_dims, not mask[:, None]: TFLite cannot lower a strided
        # slice that inserts axes into a tensor with 2+ unknown dimensions.
        masks = []
        if attention_mask is not None:
            masks.append(
                core.expand_mask(ops.convert_to_tensor(attention_mask))
            )
        if query_mask is not None:  # (B, T) -> (B, 1, T, 1)
            query_mask = ops.cast(query_mask, "bool")
            masks.append(ops.expand_dims(query_mask, (1, 3)))
        for mask in (value_mask, key_mask):
            if mask is not None:  # (B, S) -> (B, 1, 1, S)
                mask = ops.cast(mask, "bool")
                masks.append(ops.expand_dims(mask, (1, 2)))
        if cache is not None and cache_update_index is not None:
            masks.append(
                self._compute_cache_mask(
                    query, value, cache, cache_update_index, use_causal_mask
                )
            )
        else:
            keys = value if cache is None else cache[:, 0]
            if use_causal_mask:  # (1, 1, T, S)
                causal = self._compute_causal_mask(query, keys)
                masks.append(ops.expand_dims(causal, (0, 1)))
            if self.sliding_window is not None and not window_in_core:
                rows = ops.arange(ops.shape(query)[1], dtype="int32")
                cols = ops.arange(ops.shape(keys)[1], dtype="int32")
                window = core.allowed_positions(  # (T, S)
                    rows[:, None],
                    cols[None, :],
                    use_causal_mask,
                    self.sliding_window,
                )
                masks.append(ops.expand_dims(window, (0, 1)))
        return all_of(masks)

    def _compute_causal_mask(self, query, value):
        """`(T, S)`, `True` where key `s <= t`: top-left aligned."""
        rows = ops.arange(ops.shape(query)[1], dtype="int32")[:, None]
        cols = ops.arange(ops.shape(value)[1], dtype="int32")[None, :]
        return ops.greater_equal(rows, cols)

    def _compute_cache_mask(self, query, value, cache, index, causal):
        """`(1, 1, T|1, S_max)`, `True` on the cache rows filled so far,
        `s < index + S_new`, and with `causal` only on `s <= index + t`
        (query row `t` at position `index + t`)."""
        index = ops.cast(index, "int32")
        rows = ops.arange(ops.shape(query)[1], dtype="int32")[:, None]
        cols = ops.arange(ops.shape(cache)[2], dtype="int32")[None, :]
        filled = ops.less(cols, index + ops.shape(value)[1])
        allowed = core.allowed_positions(
            rows + index, cols, causal, self.sliding_window
        )
        if allowed is not None:
            filled = ops.logical_and(filled, allowed)
        return ops.expand_dims(filled, (0, 1))

    # ------------------------------------------------------------------
    # Projections in and out of the per-head layout.
    # ------------------------------------------------------------------

    def _project_to_heads(self, dense, inputs, head_dim):
        """`(B, L, 2E)` -> `(B, L, N, 2 head_dim)`, each head `[re | im]`.

        The sublayer's block kernel is assembled per head, `(2E, N, 2h)`, so
        that one einsum gives the per-head layout with no transpose of the
        activations; in Gauss's form (`complex_matmul`), three einsums
        against the kernel's parts `(E, N, h)` give each head's real and
        imaginary parts, concatenated per head. Traced for export
        (`_tracing.weights_once`), `complex.matmul_once` against `[W_i;
        W_r]` gives the real and the imaginary parts, each real weight
        once, reshaped per head and concatenated (rank 4 at most).
        """
        heads = (self.num_heads, head_dim)
        if cx.use_gauss(
            self.complex_matmul,
            *dense.kernel_real.shape,
            minimum=cx.GAUSS_MIN_SIZE_PROJECTIONS,
            dtype=dense.compute_dtype,
        ):
            return gauss_einsum(
                dense, inputs, "ble,enh->blnh", (-1,) + heads, heads
            )
        if not _tracing.weights_once():
            return block_einsum(
                dense, inputs, "bld,dnh->blnh", (-1,) + heads, 0, heads
            )
        # (B, L, 2E) -> (B L, N, 2h) -> (B, L, N, 2h): rank 4 at most.
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

    def _project_from_heads(self, inputs, query=None):
        """`(B, T, N, 2V)` -> `(B, T, 2 output_dim)` by `output_dense`,
        its block kernel assembled per head as `(N, 2V, 2O)`; traced for
        export, `complex.matmul_once` of the per-head rows against the
        kernel `(N, 2V, O)` (`W_i` then `W_r` in each head, flattened):
        no transpose of the activations. With `gated`, the heads are
        first scaled by the gate of `query`, the layer's query input."""
        if self.gated:
            if query is None:
                raise ValueError(
                    "A gated ComplexMultiHeadAttention projects its heads "
                    "with the gate of its query input: pass `query`. "
                    "Received: query=None"
                )
            inputs = inputs * ops.cast(self._gate(query), inputs.dtype)
        if cx.use_gauss(
            self.complex_matmul,
            *self.output_dense.kernel_real.shape,
            minimum=cx.GAUSS_MIN_SIZE_PROJECTIONS,
            dtype=self.output_dense.compute_dtype,
        ):
            return gauss_einsum(
                self.output_dense,
                inputs,
                "btnv,nvo->bto",
                (self.num_heads, self.value_dim, -1),
                (-1,),
            )
        if not _tracing.weights_once():
            kernel_shape = (self.num_heads, self.value_dim, -1)
            return block_einsum(
                self.output_dense,
                inputs,
                "btnh,nho->bto",
                kernel_shape,
                1,
                (-1,),
            )
        # (B, T, N, 2V), each head [x_r | x_i]: the kernel's rows in the
        # same order, (N, 2V, O) with W_i then W_r in each head.
        kernel_shape = (self.num_heads, self.value_dim, -1)
        outputs = matmul_once(self.output_dense, inputs, kernel_shape, 2)
        if self.output_dense.use_bias:
            outputs = outputs + stacked_bias(self.output_dense, (-1,))
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
        cache=None,
        cache_update_index=None,
        query_start_index=None,
    ):
        if key is None:
            key = value
        inputs = query  # the gate's input
        self._check_shapes(query.shape, value.shape, key.shape)
        self._check_cache(cache, cache_update_index, query.shape, value.shape)
        # Where the keys go through in blocks, a causal mask or sliding
        # window without a cache goes to the core (`is_causal`,
        # `sliding_window`): the chunked path then builds each block's
        # part only, never the (T, S) mask.
        window = self.sliding_window
        in_core = bool(
            (use_causal_mask or window is not None)
            and cache is None
            and core.chunk_for(
                self.chunk_size, value.shape[1], query.shape[1], window
            )
            is not None
            and self._takes_is_causal()
        )
        causal_in_core = in_core and use_causal_mask
        mask = self._compute_attention_mask(
            query,
            value,
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask and not causal_in_core,
            cache=cache,
            cache_update_index=cache_update_index,
            window_in_core=in_core,
        )
        # The position of the first new key (and, by default, query) row.
        start = 0 if cache_update_index is None else cache_update_index
        if query_start_index is None:
            query_start_index = start
        # (B, T, N, 2H), (B, S, N, 2H), (B, S, N, 2V)
        query = self._project_to_heads(self.query_dense, query, self.key_dim)
        if self.rotary is not None:
            # Feature j at position p turns by exp(i p theta_j): the scores
            # <q_t, k_s> then depend on t - s (see ComplexRotaryEmbedding).
            query = self.rotary(query, start_index=query_start_index)
        if cache is not None and cache_update_index is None:
            key, value = cache[:, 0], cache[:, 1]  # reused as they are
        else:
            key = self._project_to_heads(self.key_dense, key, self.key_dim)
            if self.rotary is not None:
                key = self.rotary(key, start_index=start)
            value = self._project_to_heads(
                self.value_dense, value, self.value_dim
            )
            if cache is not None:
                at = [0, ops.cast(cache_update_index, "int32"), 0, 0]
                key = ops.slice_update(
                    cache[:, 0], at, ops.cast(key, cache.dtype)
                )
                value = ops.slice_update(
                    cache[:, 1], at, ops.cast(value, cache.dtype)
                )
                cache = ops.stack([key, value], axis=1)
        causal = {"is_causal": True} if causal_in_core else {}
        if in_core and window is not None:
            causal["sliding_window"] = window
        outputs, scores = self._compute_attention(
            query, key, value, mask, training, return_attention_scores, **causal
        )
        outputs = [self._project_from_heads(outputs, inputs)]  # (B, T, 2O)
        if return_attention_scores:
            outputs.append(scores)
        if cache is not None:
            outputs.append(cache)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _takes_is_causal(self):
        """Whether the causal mask (and the sliding window) may go to
        `_compute_attention` as `is_causal` (`sliding_window`): not for a
        subclass that overrides `_compute_causal_mask`, or whose
        `_compute_attention` lacks the argument (it gets the mask as
        before)."""
        base = ComplexMultiHeadAttention
        if type(self)._compute_causal_mask is not base._compute_causal_mask:
            return False
        parameters = inspect.signature(self._compute_attention).parameters
        needed = ["is_causal"]
        if self.sliding_window is not None:
            needed.append("sliding_window")
        return all(name in parameters for name in needed)

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        is_causal=False,
        sliding_window=None,
    ):
        """Attention on projected per-head tensors (override to change the
        mathematics). Returns the per-head output `(B, T, N, 2V)` and the
        weights `(B, N, T, 2S)` or `None`. `is_causal=True` adds the
        causal mask that `attention_mask` then leaves out: passed only
        when the key length calls for blocks (`attention.chunk_for`;
        the core may still take the full path, e.g. for the scores),
        with no cache, to an override that takes the argument and keeps
        `_compute_causal_mask`; `sliding_window` likewise, the window
        that `attention_mask` then leaves out."""
        result = core.complex_dot_product_attention(
            query,
            key,
            value,
            softmax=self.softmax,
            product=self.product,
            scale=self.scale,
            mask=attention_mask,
            dropout=self.dropout if training else 0.0,
            seed=self.seed_generator,
            return_weights=return_attention_scores,
            chunk_size=self.chunk_size,
            is_causal=is_causal,
            complex_matmul=self.complex_matmul,
            sliding_window=sliding_window,
        )
        if return_attention_scores:
            return result
        return result, None

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "softmax": self.softmax,
                "product": self.product,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "scale": self._scale_arg,
                **weight_options_config(self),
                **attention_options_config(self),
                "gated": self.gated,
            }
        )
        return config
