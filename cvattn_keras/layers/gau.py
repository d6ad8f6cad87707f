"""ComplexGatedAttentionUnit: the gated attention unit (GAU), complex.

Hua et al., "Transformer Quality in Linear Time" (2022) fold attention
into a gated linear unit: from one input `X`, `U = phi(X W_u)`, `V =
phi(X W_v)` of width `e` and a shared `Z = phi(X W_z)` of a small width
`s`, the queries and keys are cheap per-dimension transforms of `Z`, and
the output is `(U * A V) W_o`, one head. Here the unit is complex, on
stacked `[real | imag]` tensors, with the library's attention (every
softmax variant and product) over `Q` and `K`.
"""

import keras
from keras import ops

from cvattn_keras import _validation as check
from cvattn_keras import attention as core
from cvattn_keras import complex as cx
from cvattn_keras import initializers as cinit
from cvattn_keras._attention_args import all_of
from cvattn_keras.layers import _attention_checks as checks
from cvattn_keras.layers._options import activation_layer
from cvattn_keras.layers._options import check_activation
from cvattn_keras.layers._weights import set_weight_options
from cvattn_keras.layers._weights import weight_options_config
from cvattn_keras.layers.dense import ComplexDense

__all__ = ["ComplexGatedAttentionUnit"]


def _to_heads(x, heads, width):
    """Stacked `(B, L, 2 N w)` -> `(B, L, N, 2w)`, each head `[re | im]`."""
    re, im = cx.split(x)
    return ops.concatenate(
        [
            cx.reshape_tail(re, 2, (heads, width)),
            cx.reshape_tail(im, 2, (heads, width)),
        ],
        axis=-1,
    )


def _from_heads(x, width):
    """`(B, L, N, 2w)`, each head `[re | im]` -> stacked `(B, L, 2 N w)`."""
    re, im = cx.split(x)
    return ops.concatenate(
        [cx.reshape_tail(re, 2, (width,)), cx.reshape_tail(im, 2, (width,))],
        axis=-1,
    )


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexGatedAttentionUnit(keras.layers.Layer):
    """A complex gated attention unit (GAU) on stacked tensors.

    The GAU of Hua et al. (2022) for complex numbers. From the query input
    `X` `(B, T, d)`, the value input `X_v` and the key input `X_k` (both
    `X` by default, complex):

        U = silu(|X| W_g + b_g)                 real, (B, T, e)
        V = phi(X_v W_v + b_v)                  complex, (B, S, e)
        Z = phi(X W_z + b_z), Z_k = phi(X_k W_z + b_z)    complex, width s
        Q_h = Z * gamma_q[h] + beta_q[h],  K_h = Z_k * gamma_k[h] + beta_k[h]
        O = (U * [A_1 V_1, ..., A_N V_N]) W_o + b_o

    with `e = expansion * d` (or `num_heads * value_dim`), `s = key_dim`,
    `phi` the complex `activation` (modReLU by default), `gamma`, `beta`
    complex per-dimension scales and offsets (GAU's cheap transforms of
    the shared `Z`), and `A_h` the weights of `Q_h`, `K_h` in
    `ComplexMultiHeadAttention`'s variants (`softmax`, `product`) over
    head `h`'s slice `V_h` of `V`. GAU is one head (`num_heads=1`, the
    paper's); `N > 1` splits `V` and `U` into `N` heads that share `Z`,
    each with its own `gamma`, `beta`.

    Decisions:

    - The gate `U` is real, from the moduli of the query's input: a
      complex `U` would turn `U * A V` by twice a common phase of the
      inputs, and a gate from `[Re X | Im X]` would change with it. A
      real `U` scales each output's modulus (and, where negative, turns it
      by pi) and keeps the phase; with no biases (`use_bias=False`), a
      common phase turn of query, keys and values turns the output by the
      same phase (the inner product; modReLU keeps phases, its bias acts
      on the modulus). GAU's SiLU is kept on the real gate.
    - The attention is the library's, softmax `"real"` (CAtt) by
      default, not GAU's `relu^2`: CAtt's weights are a softmax of `Re<q,
      k>`, bounded and normalised whatever the length (GAU divides
      `relu^2` by the length and needs its relative position bias and a
      scale of its own); every variant and product, masks and the
      chunked O(T)-memory path come with it. `scale` defaults to
      `key_dim ** -0.5`. GAU's relative position bias and its
      normalisation of `X` are left out (a pre-norm belongs to the
      block around the unit, as with `ComplexMultiHeadAttention`).
    - `gamma` starts at 1 and `beta` at 0: `Q = K = Z` at first (the
      paper draws `gamma` from N(0, 0.02), nearly uniform weights).
    - As a drop-in for `ComplexMultiHeadAttention`: `layer(query)` is
      GAU's self-attention; `value` gives `V` and `key` gives `K` (through
      the shared `W_z`, so a key needs the query's width), `U` and `Q`
      come from the query. `key` defaults to `value`, `value` to `query`.

    Weights, as attributes: `gate_kernel` `(d, e)`, `gate_bias` `(e,)`
    (real); the sublayers `value_dense` (`W_v`), `shared_dense` (`W_z`),
    `output_dense` (`W_o`), `value_activation`, `shared_activation`; and
    `query_scale_real`, `query_scale_imag`, `key_scale_real`,
    `key_scale_imag` `(N, s)`, with `use_bias` also `query_offset_*` and
    `key_offset_*`.

    Args:
        num_heads: positive int, the number of heads sharing `Z` (1, GAU's).
        key_dim: positive int, `s`: the complex width of `Z`, `Q`, `K`.
        value_dim: positive int, the complex width of each head of `V` and
            `U`. Defaults to `expansion * d / num_heads` (`d` the query's
            complex features).
        expansion: positive int, `e / d` when `value_dim` is `None` (2,
            GAU's).
        softmax: `"real"` (CAtt, default), `"abs"`, `"absonly"`,
            `"naive"` or an alias (see `ComplexMultiHeadAttention`).
        product: `"inner"` (default) or `"bilinear"`; also `"ip"`, `"cp"`.
        activation: `"modrelu"` (default, a learnable bias on the modulus,
            the identity at first) or a complex activation's name
            (`cvattn_keras.activations`; those keep phases only as
            modReLU does: `"crelu"`, `"cardioid"`, ... do not).
        dropout: float in [0, 1), dropout on the attention weights.
        use_bias: whether `W_v`, `W_z`, `W_o`, the gate and `Q`, `K`
            have biases (offsets).
        output_dim: positive int, the complex output features. Defaults
            to the query's.
        scale: positive float multiplying the scores. Defaults to
            `key_dim ** -0.5`.
        kernel_initializer: of the complex kernels and the gate's.
        bias_initializer: of the biases (not `gamma`, `beta`).
        kernel_regularizer: of the kernels (`W_*`, the gate's).
        bias_regularizer: of the biases.
        activity_regularizer: applied to the output.
        kernel_constraint: of the kernels.
        bias_constraint: of the biases.
        seed: int or None, the seed of the attention dropout.
        chunk_size: `"auto"` (default), `None` or a positive int: the keys
            in blocks (see `ComplexMultiHeadAttention`).
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`.
        **kwargs: base `Layer` arguments (`name`, `dtype`, ...).

    Call arguments:
        query: `(B, T, 2d)`, stacked.
        value: optional `(B, S, 2 d_v)`. Defaults to `query`.
        key: optional `(B, S, 2d)`. Defaults to `value`.
        attention_mask: optional boolean mask, `True` = attend, `(T, S)`,
            `(B, T, S)` or `(B, num_heads, T, S)`, broadcastable.
        use_causal_mask: if `True`, query `t` attends to keys `s <= t`.
        return_attention_scores: if `True`, also return the weights `(B,
            num_heads, T, 2S)`, `[Re | Im]`.
        training: whether dropout is active.
        query_mask, value_mask, key_mask: boolean `(B, T)` / `(B, S)`
            masks, filled in by Keras from the inputs' masks.

    A query row with no key to attend gets zero weights, `A V = 0` and
    the output projection's bias, with finite gradients.

    Returns:
        `(B, T, 2 output_dim)`, and the weights with
        `return_attention_scores=True`.

    Examples:
        >>> layer = ComplexGatedAttentionUnit(1, 8)
        >>> x = keras.ops.ones((3, 5, 8))          # 4 complex features
        >>> tuple(layer(x, use_causal_mask=True).shape)
        (3, 5, 8)

    References:
        Hua, W., Dai, Z., Liu, H. and Le, Q. V., "Transformer Quality in
        Linear Time", ICML 2022, arXiv:2202.10447.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        expansion=2,
        softmax="real",
        product="inner",
        activation="modrelu",
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
        chunk_size="auto",
        complex_matmul="auto",
        **kwargs,
    ):
        self.num_heads = check.positive_int(num_heads, "num_heads")
        self.key_dim = check.positive_int(key_dim, "key_dim")
        self._value_dim_arg = check.positive_int(
            value_dim, "value_dim", allow_none=True
        )
        self.expansion = check.positive_int(expansion, "expansion")
        self.softmax = core.resolve_softmax(softmax)
        self.product = core.resolve_product(product)
        self.activation = check_activation(activation)
        self.dropout = float(check.rate(dropout, "dropout"))
        self.output_dim = check.positive_int(
            output_dim, "output_dim", allow_none=True
        )
        scale = check.greater_than(scale, "scale", allow_none=True)
        self.seed = check.seed(seed)
        self.chunk_size = core.resolve_chunk_size(chunk_size)
        self.complex_matmul = cx.resolve_complex_matmul(complex_matmul)
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.supports_masking = True
        self.use_bias = bool(use_bias)
        self._scale_arg = scale
        self.scale = float(scale) if scale is not None else self.key_dim**-0.5
        self.value_dim = self._value_dim_arg  # resolved by build
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
            keras.random.SeedGenerator(self.seed) if self.dropout > 0 else None
        )

    # ------------------------------------------------------------------
    # Shapes and masks.
    # ------------------------------------------------------------------

    def _check_shapes(self, query_shape, value_shape, key_shape):
        """Raises a `ValueError` naming the input whose static shape does
        not fit: rank 3, a known even last axis, keys and values of one
        length, a key of the query's width (the shared `W_z`), a value
        width that the layer was built for. Returns the complex widths
        `(d, d_v)`."""
        shapes = {
            "query": check.static_shape(query_shape),
            "value": check.static_shape(value_shape),
            "key": check.static_shape(key_shape),
        }
        for name, shape in shapes.items():
            if len(shape) != 3 or shape[-1] is None:
                raise ValueError(
                    "ComplexGatedAttentionUnit expects `"
                    f"{name}` of rank 3, (batch, length, 2 * features), its "
                    f"last axis known. Received: {name}_shape={shape}"
                )
            cx.check_even(shape[-1], f"{name}_shape[-1]", shape)
        if shapes["key"][-1] != shapes["query"][-1]:
            raise ValueError(
                "`key` must have the query's width: both go through the "
                "shared projection W_z (by default `key` is `value`; pass "
                "`key=` for a value of another width). Received: "
                f"query_shape={shapes['query']}, key_shape={shapes['key']}"
            )
        value_length, key_length = shapes["value"][1], shapes["key"][1]
        if None not in (value_length, key_length) and (
            value_length != key_length
        ):
            raise ValueError(
                "`key` and `value` must have the same length (axis 1). "
                f"Received: value_shape={shapes['value']}, "
                f"key_shape={shapes['key']}"
            )
        sizes = (shapes["query"][-1] // 2, shapes["value"][-1] // 2)
        if self.built and sizes != self._feature_sizes:
            raise ValueError(
                "The layer was built for complex feature sizes (query, "
                f"value) = {self._feature_sizes}, but was called with "
                f"{sizes}: query_shape={shapes['query']}, "
                f"value_shape={shapes['value']}"
            )
        return sizes

    def _check_call(self, query, value, key, masks):
        """`_check_shapes`, then each mask's static shape (see
        `_attention_checks.check_masks`). Returns the widths."""
        sizes = self._check_shapes(query.shape, value.shape, key.shape)
        checks.check_masks(self.num_heads, query.shape, value.shape, **masks)
        return sizes

    @staticmethod
    def _mask(attention_mask, query_mask, value_mask, key_mask):
        """Every mask source as one bool mask broadcastable to `(B, N, T,
        S)`, `True` = attend, or `None`."""
        masks = []
        if attention_mask is not None:
            masks.append(
                core.expand_mask(ops.convert_to_tensor(attention_mask))
            )
        if query_mask is not None:  # (B, T) -> (B, 1, T, 1)
            masks.append(ops.expand_dims(ops.cast(query_mask, "bool"), (1, 3)))
        for mask in (value_mask, key_mask):
            if mask is not None:  # (B, S) -> (B, 1, 1, S)
                masks.append(ops.expand_dims(ops.cast(mask, "bool"), (1, 2)))
        return all_of(masks)

    # ------------------------------------------------------------------
    # Build.
    # ------------------------------------------------------------------

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        query_size, value_size = self._check_shapes(
            query_shape, value_shape, key_shape
        )
        if self._value_dim_arg is None:
            width = self.expansion * query_size
            if width % self.num_heads:
                raise ValueError(
                    "With `value_dim=None` each head has expansion * d / "
                    "num_heads complex features, which must be an int. "
                    f"Received: expansion={self.expansion}, d={query_size} "
                    f"(the query's), num_heads={self.num_heads}"
                )
            self.value_dim = width // self.num_heads
        self._feature_sizes = (query_size, value_size)
        width = self.num_heads * self.value_dim
        self.gate_kernel = self.add_weight(
            name="gate_kernel",
            shape=(query_size, width),
            initializer=cinit.clone(self.kernel_initializer, 6),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.gate_bias = None
        if self.use_bias:
            self.gate_bias = self.add_weight(
                name="gate_bias",
                shape=(width,),
                initializer=cinit.clone(self.bias_initializer, 6),
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
            )
        heads = (self.num_heads, self.key_dim)
        for name in ("query", "key"):
            for kind, init in (("scale", "ones"), ("offset", "zeros")):
                for part in ("real", "imag"):
                    weight = None
                    if kind == "scale" or self.use_bias:
                        weight = self.add_weight(
                            name=f"{name}_{kind}_{part}",
                            shape=heads,
                            initializer=init if part == "real" else "zeros",
                        )
                    setattr(self, f"{name}_{kind}_{part}", weight)
        self.value_dense = self._dense("value", width, 0)
        self.value_dense.build(tuple(value_shape))
        self.shared_dense = self._dense("shared", self.key_dim, 1)
        self.shared_dense.build(tuple(query_shape))
        self.output_dense = self._dense(
            "attention_output", self.output_dim or query_size, 2
        )
        self.output_dense.build(tuple(query_shape)[:-1] + (2 * width,))
        self.value_activation = activation_layer(
            self.activation, dtype=self.dtype_policy, name="value_activation"
        )
        self.value_activation.build(tuple(value_shape)[:-1] + (2 * width,))
        self.shared_activation = activation_layer(
            self.activation, dtype=self.dtype_policy, name="shared_activation"
        )
        self.shared_activation.build(
            tuple(query_shape)[:-1] + (2 * self.key_dim,)
        )
        self.built = True

    def _dense(self, name, units, index):
        # Seeds as ComplexMultiHeadAttention's projections: salts 0, 2, 4
        # (ComplexDense derives the imaginary part's with salt 1); the
        # gate's is 6.
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

    # ------------------------------------------------------------------
    # Call.
    # ------------------------------------------------------------------

    def _stacked(self, name, kind):
        """`gamma` or `beta` of `name` stacked `(N, 2s)`, compute dtype."""
        dtype = self.compute_dtype
        return ops.concatenate(
            [
                ops.cast(getattr(self, f"{name}_{kind}_real"), dtype),
                ops.cast(getattr(self, f"{name}_{kind}_imag"), dtype),
            ],
            axis=-1,
        )

    def _transform(self, z, name):
        """`(B, L, 2s)` -> `(B, L, N, 2s)`: `Z * gamma_h + beta_h`."""
        z = ops.expand_dims(z, 2)
        out = cx.multiply(z, self._stacked(name, "scale"))
        if self.use_bias:
            out = out + self._stacked(name, "offset")
        return out

    def _gate(self, query):
        """`U = silu(|X| W_g + b_g)` per head and stacked as the heads'
        outputs, `(B, T, N, 2V)`: the same real gate on both parts."""
        dtype = self.compute_dtype
        logits = ops.matmul(
            ops.cast(cx.modulus(query), dtype),
            ops.cast(self.gate_kernel, dtype),
        )
        if self.gate_bias is not None:
            logits = logits + ops.cast(self.gate_bias, dtype)
        gate = cx.reshape_tail(
            ops.silu(logits), 2, (self.num_heads, self.value_dim)
        )
        return ops.concatenate([gate, gate], axis=-1)

    def call(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
    ):
        self_attention = value is None and key is None
        value = query if value is None else value
        key = value if key is None else key
        masks = dict(
            attention_mask=attention_mask,
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
        )
        self._check_call(query, value, key, masks)
        causal = check.boolean(use_causal_mask, "use_causal_mask")
        mask = self._mask(**masks)
        z = self.shared_activation(self.shared_dense(query))
        z_key = z
        if not (self_attention or key is query):
            z_key = self.shared_activation(self.shared_dense(key))
        v = self.value_activation(self.value_dense(value))
        result = core.complex_dot_product_attention(
            self._transform(z, "query"),
            self._transform(z_key, "key"),
            _to_heads(v, self.num_heads, self.value_dim),
            softmax=self.softmax,
            product=self.product,
            scale=self.scale,
            mask=mask,
            dropout=self.dropout if training else 0.0,
            seed=self.seed_generator,
            return_weights=return_attention_scores,
            chunk_size=self.chunk_size,
            is_causal=causal,
            complex_matmul=self.complex_matmul,
        )
        outputs, scores = result if return_attention_scores else (result, None)
        outputs = outputs * ops.cast(self._gate(query), outputs.dtype)
        width = self.num_heads * self.value_dim
        outputs = self.output_dense(_from_heads(outputs, width))
        if return_attention_scores:
            return outputs, scores
        return outputs

    def compute_output_shape(
        self, query_shape, value_shape=None, key_shape=None
    ):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        query_size = self._check_shapes(query_shape, value_shape, key_shape)[0]
        return tuple(query_shape)[:-1] + (2 * (self.output_dim or query_size),)

    def compute_output_spec(
        self,
        query,
        value=None,
        key=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
    ):
        value = query if value is None else value
        key = value if key is None else key
        masks = dict(
            attention_mask=attention_mask,
            query_mask=query_mask,
            value_mask=value_mask,
            key_mask=key_mask,
        )
        self._check_call(query, value, key, masks)
        check.boolean(use_causal_mask, "use_causal_mask")
        shape = self.compute_output_shape(query.shape, value.shape, key.shape)
        output = keras.KerasTensor(shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        length = value.shape[1]
        scores_shape = (
            query.shape[0],
            self.num_heads,
            query.shape[1],
            None if length is None else 2 * length,
        )
        return output, keras.KerasTensor(scores_shape, self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self._value_dim_arg,
                "expansion": self.expansion,
                "softmax": self.softmax,
                "product": self.product,
                "activation": self.activation,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                "scale": self._scale_arg,
                **weight_options_config(self),
                "seed": self.seed,
                "chunk_size": self.chunk_size,
                "complex_matmul": self.complex_matmul,
            }
        )
        return config
