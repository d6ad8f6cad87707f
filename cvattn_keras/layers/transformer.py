"""Complex transformer encoder and decoder layers (Eilers & Jiang, 2023)."""

import keras

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import attention as core
from cvattn_keras import initializers as cinit
from cvattn_keras.layers._attention_choice import attention_class
from cvattn_keras.layers._attention_choice import check_attention
from cvattn_keras.layers._attention_masks import (
    check_attention_mask_shape as _check_attention_mask_shape,
)
from cvattn_keras.layers._attention_masks import mask_shape as _mask_shape
from cvattn_keras.layers._options import activation_layer
from cvattn_keras.layers._options import attention_options_config
from cvattn_keras.layers._options import check_activation
from cvattn_keras.layers._options import resolve_attention_options
from cvattn_keras.layers._options import set_options
from cvattn_keras.layers._weights import resolve_option
from cvattn_keras.layers.attention import ComplexMultiHeadAttention
from cvattn_keras.layers.dense import ComplexDense
from cvattn_keras.layers.dropout import ComplexDropout
from cvattn_keras.layers.normalization import ComplexLayerNormalization
from cvattn_keras.layers.normalization import ComplexRMSNormalization
from cvattn_keras.layers.normalization import _features

_NORMALIZATIONS = ("whitening", "naive", "rms")
"""The `normalization` choices of the transformer layers."""


def _check_layer_norm_epsilon(value, normalization):
    """A finite epsilon, >= 0 for the layer norms ("whitening", "naive":
    0 is the reference's arithmetic, see `ComplexLayerNormalization`), > 0
    for "rms"."""
    if normalization == "rms":
        return check.greater_than(value, "layer_norm_epsilon")
    if not check._is_real(value) or value < 0:
        raise ValueError(
            "`layer_norm_epsilon` must be a finite number >= 0 (> 0 with "
            f'normalization="rms"). Received: layer_norm_epsilon={value!r}'
        )
    return float(value)


class _ComplexTransformerBlock(keras.layers.Layer):
    """What the encoder and the decoder share: arguments, residual
    sublayers with post- or pre-norm, and the feed-forward network."""

    # Calls `_tracing.quantize` in quantization-aware training (counted by
    # `quantization.quantize_model`).
    _quantization_points = True

    def __init__(
        self,
        num_heads,
        intermediate_dim=None,
        key_dim=None,
        softmax="real",
        product="inner",
        dropout=0.0,
        attention_dropout=0.0,
        activation="split_leaky_relu",
        norm_first=False,
        normalization="whitening",
        layer_norm_epsilon=1e-5,
        kernel_initializer="complex_glorot_uniform",
        bias_initializer="zeros",
        seed=None,
        rotary_max_wavelength=None,
        chunk_size="auto",
        complex_matmul="auto",
        sliding_window=None,
        attention="multi_head",
        attention_options=None,
        **kwargs,
    ):
        num_heads = check.positive_int(num_heads, "num_heads")
        options = resolve_attention_options(
            seed,
            rotary_max_wavelength,
            chunk_size,
            complex_matmul,
            sliding_window,
        )
        attention_options = check_attention(
            attention, attention_options, options
        )
        intermediate_dim = check.positive_int(
            intermediate_dim, "intermediate_dim", allow_none=True
        )
        key_dim = check.positive_int(key_dim, "key_dim", allow_none=True)
        dropout = check.rate(dropout, "dropout")
        attention_dropout = check.rate(attention_dropout, "attention_dropout")
        activation = check_activation(activation)
        if normalization not in _NORMALIZATIONS:
            raise ValueError(
                f"`normalization` must be one of {list(_NORMALIZATIONS)}. "
                f"Received: normalization={normalization!r}"
            )
        layer_norm_epsilon = _check_layer_norm_epsilon(
            layer_norm_epsilon, normalization
        )
        super().__init__(**kwargs)
        self.supports_masking = True
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.key_dim = key_dim
        self.softmax = core.resolve_softmax(softmax)
        self.product = core.resolve_product(product)
        self.dropout = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.activation = activation
        self.norm_first = bool(norm_first)
        self.normalization = normalization
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.kernel_initializer = resolve_option(
            "kernel_initializer", kernel_initializer
        )
        self.bias_initializer = resolve_option(
            "bias_initializer", bias_initializer
        )
        set_options(self, options)
        self.attention = attention
        self.attention_options = attention_options

    def _features(self, shape):
        features = _features(shape, type(self).__name__)
        if self.key_dim is None and features % self.num_heads:
            raise ValueError(
                f"Without `key_dim`, the {features} complex features must "
                f"divide among num_heads={self.num_heads}; pass `key_dim`."
            )
        return features

    def _common(self, name):
        return dict(
            dtype=self.dtype_policy,
            name=name,
        )

    # Each sublayer's salt: seeded initializers and dropouts get distinct
    # derived seeds, so no two sublayers start with the same weights.
    _SALTS = {
        "self_attention": 1,
        "cross_attention": 2,
        "feedforward_in": 3,
        "feedforward_out": 4,
        "feedforward_dropout": 5,
    }

    def _initializers(self, name):
        salt = self._SALTS[name]
        return dict(
            kernel_initializer=cinit.clone(self.kernel_initializer, salt),
            bias_initializer=cinit.clone(self.bias_initializer, salt),
        )

    def _seed(self, name):
        return None if self.seed is None else self.seed + self._SALTS[name]

    def _attention(self, features, name):
        if name == "self_attention" and (
            self.attention != "multi_head" or self.attention_options
        ):
            return self._other_attention(features, name)
        window = self.sliding_window if name == "self_attention" else None
        return ComplexMultiHeadAttention(
            self.num_heads,
            self.key_dim or features // self.num_heads,
            softmax=self.softmax,
            product=self.product,
            dropout=self.attention_dropout,
            rotary_max_wavelength=self.rotary_max_wavelength,
            chunk_size=self.chunk_size,
            complex_matmul=self.complex_matmul,
            sliding_window=window,
            seed=self._seed(name),
            **self._initializers(name),
            **self._common(name),
        )

    def _other_attention(self, features, name):
        """The self-attention of `attention` with `attention_options`: the
        block's attention arguments that its constructor takes, then the
        options (which win)."""
        import inspect

        cls = attention_class(self.attention)
        arguments = dict(
            num_heads=self.num_heads,
            key_dim=self.key_dim or features // self.num_heads,
            softmax=self.softmax,
            product=self.product,
            dropout=self.attention_dropout,
            rotary_max_wavelength=self.rotary_max_wavelength,
            chunk_size=self.chunk_size,
            complex_matmul=self.complex_matmul,
            sliding_window=self.sliding_window,
            seed=self._seed(name),
            **self._initializers(name),
        )
        accepted = inspect.signature(cls.__init__).parameters
        arguments = {
            key: value for key, value in arguments.items() if key in accepted
        }
        arguments.update(self.attention_options)
        return cls(**arguments, **self._common(name))

    def _norm(self, name):
        if self.normalization == "rms":
            return ComplexRMSNormalization(
                self.layer_norm_epsilon, **self._common(name)
            )
        return ComplexLayerNormalization(
            self.layer_norm_epsilon,
            method=self.normalization,
            **self._common(name),
        )

    def _build_self_attention(self, shape):
        """Builds the self-attention and its norm on `shape`; returns the
        complex features."""
        features = self._features(shape)
        self.self_attention = self._attention(features, "self_attention")
        self.self_attention.build(shape, shape)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.self_attention_norm.build(shape)
        return features

    def _build_feedforward(self, shape, features):
        width = self.intermediate_dim or features
        self.feedforward_in = ComplexDense(
            width,
            complex_matmul=self.complex_matmul,
            **self._initializers("feedforward_in"),
            **self._common("feedforward_in"),
        )
        self.feedforward_activation = activation_layer(
            self.activation, **self._common("feedforward_activation")
        )
        self.feedforward_dropout = ComplexDropout(
            self.dropout,
            seed=self._seed("feedforward_dropout"),
            **self._common("feedforward_dropout"),
        )
        self.feedforward_out = ComplexDense(
            features,
            complex_matmul=self.complex_matmul,
            **self._initializers("feedforward_out"),
            **self._common("feedforward_out"),
        )
        self.feedforward_norm = self._norm("feedforward_norm")
        inner = tuple(shape)[:-1] + (2 * width,)
        self.feedforward_in.build(shape)
        self.feedforward_activation.build(inner)
        self.feedforward_dropout.build(inner)
        self.feedforward_out.build(inner)
        self.feedforward_norm.build(shape)

    def _check_masks(self, padding, attention_masks):
        """Raises a `ValueError` naming the argument for a mask whose static
        shape does not fit. `padding` maps argument names to `(mask,
        sequence_shape, layout)`, `(B, T)` or `(B, S)` masks of that
        sequence; `attention_masks` maps names to `(mask, query_shape,
        value_shape)`, masks of shape `(B, T, S)` (or `(T, S)`,
        `(B, num_heads, T, S)`)."""
        for name, (mask, shape, layout) in padding.items():
            if mask is not None:
                core.check_mask_shape(
                    _mask_shape(mask), tuple(shape)[:2], name, layout
                )
        for name, (mask, query_shape, value_shape) in attention_masks.items():
            if mask is not None:
                _check_attention_mask_shape(
                    _mask_shape(mask),
                    query_shape,
                    value_shape,
                    self.num_heads,
                    name,
                )

    def _residual(self, x, norm, sublayer):
        """`norm(x + sublayer(x))` (post-norm, the reference) or
        `x + sublayer(norm(x))` (pre-norm). `sublayer` may return
        `(output, scores)`; the scores are passed through."""
        # Quantization-aware training rounds the norm's output, the
        # sublayer's and the residual sum, as an integer file does
        # (`_tracing.quantize`).
        quantize = _tracing.quantize
        result = sublayer(quantize(norm(x)) if self.norm_first else x)
        output, scores = result if isinstance(result, tuple) else (result, None)
        x = quantize(x + quantize(output))
        return (x if self.norm_first else quantize(norm(x))), scores

    def _feedforward(self, x, training):
        x = _tracing.quantize(self.feedforward_in(x))
        x = _tracing.quantize(self.feedforward_activation(x))
        x = self.feedforward_dropout(x, training=training)
        return self.feedforward_out(x)  # a point: `_residual` rounds it

    def _feedforward_residual(self, x, training):
        """The last sublayer: the feed-forward network in its residual."""
        x, _ = self._residual(
            x,
            self.feedforward_norm,
            lambda h: self._feedforward(h, training),
        )
        return x

    def _scores_spec(self, query_shape, keys_shape):
        """The attention weights' spec, `(B, num_heads, T, 2S)`."""
        length = keys_shape[1]
        return keras.KerasTensor(
            (
                query_shape[0],
                self.num_heads,
                query_shape[1],
                None if length is None else 2 * length,
            ),
            self.compute_dtype,
        )

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "key_dim": self.key_dim,
            "softmax": self.softmax,
            "product": self.product,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "activation": self.activation,
            "norm_first": self.norm_first,
            "normalization": self.normalization,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(
                self.kernel_initializer
            ),
            "bias_initializer": keras.initializers.serialize(
                self.bias_initializer
            ),
            **attention_options_config(self),
            "attention": self.attention,
            "attention_options": dict(self.attention_options),
        }


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexTransformerEncoder(_ComplexTransformerBlock):
    """A complex transformer encoder layer on stacked `(B, T, 2E)`.

    The reference structure (post-norm): `x = LN(x + MHA(x, x, x))`, then
    `x = LN(x + Lin(Drop(act(Lin(x)))))`, with no dropout on the residual
    branches and no final norm.

    Args:
        num_heads: positive int, attention heads.
        intermediate_dim: complex width of the feed-forward network.
            Defaults to E, the input's (the reference: E -> E -> E).
        key_dim: complex width of each head. Defaults to `E // num_heads`.
        softmax: the attention variant's softmax (see
            `ComplexMultiHeadAttention`). Defaults to `"real"`.
        product: the attention variant's product (see
            `ComplexMultiHeadAttention`). Defaults to `"inner"`.
        dropout: dropout rate after the feed-forward activation (one mask
            per complex feature). Defaults to 0.
        attention_dropout: dropout rate on the attention weights. Defaults
            to 0 (the reference's MusicNet models use 0.1).
        activation: the feed-forward activation: a name from
            `cvattn_keras.activations` or `"modrelu"`. Defaults to
            `"split_leaky_relu"`, the reference's "CReLU".
        norm_first: pre-norm (`x + f(norm(x))`) if `True`; the reference is
            post-norm (`norm(x + f(x))`, default).
        normalization: `"whitening"` (the paper's, default), `"naive"` or
            `"rms"`.
        layer_norm_epsilon: epsilon of the normalizations. Default `1e-5`;
            0 (not with `normalization="rms"`) for the reference's
            arithmetic, see `ComplexLayerNormalization`.
        kernel_initializer: of every projection. Defaults to
            `"complex_glorot_uniform"` (also for `None`).
        bias_initializer: of every projection. Defaults to `"zeros"` (also
            for `None`).
        seed: int or None, for the dropouts.
        rotary_max_wavelength: complex rotary position encoding in every
            attention (see `ComplexMultiHeadAttention`); `None` (default)
            for none.
        chunk_size: `"auto"` (default), `None` or a positive int: every
            attention's keys in blocks (see `ComplexMultiHeadAttention`).
        complex_matmul: `"auto"` (default), `"gauss"` or `"block"`: the
            form of every complex product, the attention's and the
            feed-forward network's (see `ComplexDense`); `"gauss"` where
            matmuls dominate (accelerators), `"auto"` picks by width.
        sliding_window: `None` (default) or a positive int `W`: the
            self-attention is causal and sees the last `W` positions only
            (`use_causal_mask` is then implied), so that the block streams
            (`cvattn_keras.streaming.to_streaming`).
        attention: the self-attention's layer: `"multi_head"` (default,
            `ComplexMultiHeadAttention`), or one of the alternatives of
            docs/attention-alternatives.md: `"low_rank"`
            (`ComplexLowRankAttention`), `"sparse"`
            (`ComplexSparseAttention`), `"lsh"` (`ComplexLSHAttention`),
            `"gated_unit"` (`ComplexGatedAttentionUnit`). It takes the
            arguments above that its constructor has (`num_heads`,
            `key_dim`, `softmax`, ...; `rotary_max_wavelength` and
            `sliding_window` are refused for the alternatives), then
            `attention_options`.
        attention_options: `None` or a dict of the self-attention layer's
            own constructor arguments (`{"rank": 32, "max_length": 256}`
            for `"low_rank"`; `{"gated": True}` for `"multi_head"`),
            saved in the config (plain values only).
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(B, T, 2E)`.

        padding_mask: optional boolean `(B, T)`, `True` for real tokens.
            Keras masks on `inputs` (`Masking`, `mask_zero=True`) are used
            when it is not given.

        attention_mask: optional boolean `(B, T, T)`, `True` = attend.

        use_causal_mask: causal self-attention. Defaults to `False`
            (`True` whatever is passed when `sliding_window` is set).

        return_attention_scores: also return the attention weights
            `(B, num_heads, T, 2T)`.

        training: whether dropout is active.
    """

    def build(self, inputs_shape):
        features = self._build_self_attention(inputs_shape)
        self._build_feedforward(inputs_shape, features)

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        use_causal_mask=False,
        return_attention_scores=False,
        training=None,
    ):
        self._check_encoder_masks(inputs.shape, padding_mask, attention_mask)
        masks = _self_attention_masks(padding_mask)

        def attend(x):
            return self.self_attention(
                x,
                x,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask
                or self.sliding_window is not None,
                return_attention_scores=return_attention_scores,
                training=training,
                **masks,
            )

        x, scores = self._residual(inputs, self.self_attention_norm, attend)
        x = self._feedforward_residual(x, training)
        return (x, scores) if return_attention_scores else x

    def _check_encoder_masks(self, shape, padding_mask, attention_mask):
        self._check_masks(
            {"padding_mask": (padding_mask, shape, "(B, T)")},
            {"attention_mask": (attention_mask, shape, shape)},
        )

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)

    def compute_output_spec(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        return_attention_scores=False,
        **kwargs,
    ):
        self._check_encoder_masks(inputs.shape, padding_mask, attention_mask)
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        return output, self._scores_spec(inputs.shape, inputs.shape)


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexTransformerDecoder(_ComplexTransformerBlock):
    """A complex transformer decoder layer on stacked tensors.

    The reference structure (post-norm): causal self-attention, then
    cross-attention to the encoder's output, then the feed-forward network,
    each in a residual branch followed by a LayerNorm. Without
    `encoder_sequence` (at build and call) there is no cross-attention: a
    decoder-only block.

    Args:
        num_heads: positive int, attention heads.
        intermediate_dim: as in `ComplexTransformerEncoder`.
        key_dim: as in `ComplexTransformerEncoder`.
        softmax: as in `ComplexTransformerEncoder`.
        product: as in `ComplexTransformerEncoder`.
        dropout: as in `ComplexTransformerEncoder`.
        attention_dropout: as in `ComplexTransformerEncoder`.
        activation: as in `ComplexTransformerEncoder`.
        norm_first: as in `ComplexTransformerEncoder`.
        normalization: as in `ComplexTransformerEncoder`.
        layer_norm_epsilon: as in `ComplexTransformerEncoder`.
        kernel_initializer: as in `ComplexTransformerEncoder`.
        bias_initializer: as in `ComplexTransformerEncoder`.
        seed: as in `ComplexTransformerEncoder`.
        rotary_max_wavelength: as in `ComplexTransformerEncoder`.
        chunk_size: as in `ComplexTransformerEncoder`.
        complex_matmul: as in `ComplexTransformerEncoder`.
        sliding_window: `None` (default) or a positive int `W`: the
            self-attention sees the last `W` positions only (see
            `ComplexMultiHeadAttention`); the cross-attention is not
            windowed.
        attention: the self-attention's layer (see
            `ComplexTransformerEncoder`); the cross-attention is
            `ComplexMultiHeadAttention`.
        attention_options: `None` or a dict of the self-attention layer's
            own constructor arguments (see `ComplexTransformerEncoder`).
        **kwargs: base `Layer` arguments.

    Call arguments:
        decoder_sequence: `(B, T, 2E)`.

        encoder_sequence: optional `(B, S, 2Ee)`.

        decoder_padding_mask, encoder_padding_mask: optional boolean
            `(B, T)` / `(B, S)`, `True` for real tokens. The first masks the
            self-attention, the second the keys of the cross-attention.
            Keras masks on the inputs do the same when these are not given.

        self_attention_mask: optional boolean `(B, T, T)`.

        cross_attention_mask: optional boolean `(B, T, S)`.

        use_causal_mask: causal self-attention. Defaults to `True`.

        return_attention_scores: also return the weights of the
            self-attention `(B, N, T, 2T)` and of the cross-attention
            `(B, N, T, 2S)` (or `None`), as a tuple.

        training: whether dropout is active.

        self_attention_cache: optional key/value cache of the
            self-attention, `(B, 2, T_max, num_heads, 2 * key_dim)` (see
            `ComplexMultiHeadAttention`), for decoding a few steps at a
            time as keras-hub's `TransformerDecoder`.

        self_attention_cache_update_index: int or int tensor, the position
            of `decoder_sequence`'s first step: its keys and values are
            written there, and with `use_causal_mask` step `t` attends to
            the cached positions `<= index + t`. `None` uses the cache as
            it is.

        cross_attention_cache: optional key/value cache of the
            cross-attention, `(B, 2, S, num_heads, 2 * key_dim)`. Given
            with a cross-attention iff `self_attention_cache` is.

        cross_attention_cache_update_index: `0` to compute the encoder's
            keys and values into the cache, `None` (default) to reuse it
            (`encoder_sequence` is then not read).

    With caches, the attention masks span the cache's length (`T_max`,
    `S`), and `decoder_padding_mask` is not accepted (the padding of the
    earlier, cached steps is unknown here: pass a `self_attention_mask`
    `(B, T, T_max)` instead).

    Returns:
        `outputs` `(B, T, 2E)`; then `(self_scores, cross_scores)` when
        `return_attention_scores`; then, with caches, the self-attention's
        updated cache and, with a cross-attention, the cross-attention's:
        `outputs`, `(outputs, scores)`, `(outputs, self_cache[,
        cross_cache])` or `(outputs, scores, self_cache[, cross_cache])`.
    """

    def build(self, decoder_sequence_shape, encoder_sequence_shape=None):
        shape = decoder_sequence_shape
        features = self._build_self_attention(shape)
        self.cross_attention = self.cross_attention_norm = None
        if encoder_sequence_shape is not None:
            self.cross_attention = self._attention(features, "cross_attention")
            self.cross_attention.build(shape, encoder_sequence_shape)
            self.cross_attention_norm = self._norm("cross_attention_norm")
            self.cross_attention_norm.build(shape)
        self._build_feedforward(shape, features)

    def call(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        use_causal_mask=True,
        return_attention_scores=False,
        training=None,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        cross_attention_cache_update_index=None,
    ):
        if (encoder_sequence is None) != (self.cross_attention is None):
            raise ValueError(
                "The decoder was built "
                + ("with" if self.cross_attention is not None else "without")
                + " an `encoder_sequence` and must be called the same way."
            )
        self._check_arguments(locals())
        # As Keras masks would: the decoder's padding masks its
        # self-attention (queries and keys), the encoder's the keys of the
        # cross-attention.
        self_masks = _self_attention_masks(decoder_padding_mask)
        options = dict(
            return_attention_scores=return_attention_scores,
            training=training,
        )
        caches = {}

        def cached(name, layer, cache, **kwargs):
            """Calls `layer`, keeps its cache in `caches[name]` and returns
            the output, with the scores if asked."""
            if cache is None:
                return layer(**kwargs, **options)
            *result, caches[name] = layer(cache=cache, **kwargs, **options)
            return tuple(result) if len(result) > 1 else result[0]

        def attend_self(x):
            return cached(
                "self",
                self.self_attention,
                self_attention_cache,
                query=x,
                value=x,
                attention_mask=self_attention_mask,
                use_causal_mask=use_causal_mask,
                cache_update_index=self_attention_cache_update_index,
                **self_masks,
            )

        x, self_scores = self._residual(
            decoder_sequence, self.self_attention_norm, attend_self
        )
        cross_scores = None
        if encoder_sequence is not None:
            cross_masks = {}
            if encoder_padding_mask is not None:
                cross_masks["value_mask"] = encoder_padding_mask
            if cross_attention_cache is not None:
                # The rotary encoding (if any) places the queries at the
                # positions of the decoded steps, as without a cache.
                cross_masks["query_start_index"] = (
                    self_attention_cache_update_index
                )

            def attend_encoder(x):
                return cached(
                    "cross",
                    self.cross_attention,
                    cross_attention_cache,
                    query=x,
                    value=encoder_sequence,
                    attention_mask=cross_attention_mask,
                    cache_update_index=cross_attention_cache_update_index,
                    **cross_masks,
                )

            x, cross_scores = self._residual(
                x, self.cross_attention_norm, attend_encoder
            )
        x = self._feedforward_residual(x, training)
        outputs = [x]
        if return_attention_scores:
            outputs.append((self_scores, cross_scores))
        outputs.extend(
            caches[name] for name in ("self", "cross") if name in caches
        )
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _check_arguments(self, arguments):
        """The checks of `call` and `compute_output_spec`: `arguments`
        are theirs by name (their `locals()`)."""
        arguments = {k: v for k, v in arguments.items() if k != "self"}
        self._check_caches(**arguments)
        self._check_decoder_masks(**arguments)

    def _check_caches(
        self,
        encoder_sequence,
        decoder_padding_mask,
        self_attention_cache,
        self_attention_cache_update_index,
        cross_attention_cache,
        cross_attention_cache_update_index,
        **_,
    ):
        """Raises a `ValueError` naming the argument for caches that do not
        go together (the shapes and indices are checked by the attention
        layers)."""
        received = (
            f"Received: self_attention_cache="
            f"{_describe(self_attention_cache)}, cross_attention_cache="
            f"{_describe(cross_attention_cache)}"
        )
        if encoder_sequence is None and cross_attention_cache is not None:
            raise ValueError(
                "`cross_attention_cache` needs a cross-attention: this "
                "decoder was built without an `encoder_sequence`. " + received
            )
        if encoder_sequence is not None and (
            (self_attention_cache is None) != (cross_attention_cache is None)
        ):
            raise ValueError(
                "`self_attention_cache` and `cross_attention_cache` must both "
                "be given or both be `None` in a decoder with a "
                "cross-attention. " + received
            )
        for name, index, cache in (
            (
                "self_attention_cache_update_index",
                self_attention_cache_update_index,
                self_attention_cache,
            ),
            (
                "cross_attention_cache_update_index",
                cross_attention_cache_update_index,
                cross_attention_cache,
            ),
        ):
            if index is not None and cache is None:
                raise ValueError(
                    f"`{name}` must be `None` without its cache. Received: "
                    f"{name}={index!r}"
                )
        if (
            self_attention_cache is not None
            and decoder_padding_mask is not None
        ):
            raise ValueError(
                "`decoder_padding_mask` cannot be used with a "
                "`self_attention_cache` (the padding of the cached steps is "
                "unknown); pass a `self_attention_mask` (B, T, T_max) "
                "instead. Received: decoder_padding_mask.shape="
                f"{tuple(_mask_shape(decoder_padding_mask))}"
            )

    def _check_decoder_masks(
        self,
        decoder_sequence,
        encoder_sequence,
        decoder_padding_mask,
        encoder_padding_mask,
        self_attention_mask,
        cross_attention_mask,
        self_attention_cache,
        cross_attention_cache,
        **_,
    ):
        decoder_shape = decoder_sequence.shape
        encoder_shape = None
        if encoder_sequence is not None:
            encoder_shape = encoder_sequence.shape
        # With caches, the keys span the caches' lengths.
        keys_shape = _cached_keys_shape(decoder_shape, self_attention_cache)
        padding = {
            "decoder_padding_mask": (
                decoder_padding_mask,
                decoder_shape,
                "(B, T)",
            )
        }
        attention = {
            "self_attention_mask": (
                self_attention_mask,
                decoder_shape,
                keys_shape,
            )
        }
        if encoder_shape is not None:
            encoder_shape = _cached_keys_shape(
                encoder_shape, cross_attention_cache
            )
            padding["encoder_padding_mask"] = (
                encoder_padding_mask,
                encoder_shape,
                "(B, S)",
            )
            attention["cross_attention_mask"] = (
                cross_attention_mask,
                decoder_shape,
                encoder_shape,
            )
        self._check_masks(padding, attention)

    def compute_output_shape(
        self, decoder_sequence_shape, encoder_sequence_shape=None
    ):
        return tuple(decoder_sequence_shape)

    def compute_output_spec(
        self,
        decoder_sequence,
        encoder_sequence=None,
        decoder_padding_mask=None,
        encoder_padding_mask=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        return_attention_scores=False,
        self_attention_cache=None,
        self_attention_cache_update_index=None,
        cross_attention_cache=None,
        cross_attention_cache_update_index=None,
        **kwargs,
    ):
        self._check_arguments(locals())
        shape = decoder_sequence.shape
        outputs = [keras.KerasTensor(shape, dtype=self.compute_dtype)]
        if return_attention_scores:
            cross = None
            if encoder_sequence is not None:
                cross = self._scores_spec(
                    shape,
                    _cached_keys_shape(
                        encoder_sequence.shape, cross_attention_cache
                    ),
                )
            self_scores = self._scores_spec(
                shape, _cached_keys_shape(shape, self_attention_cache)
            )
            outputs.append((self_scores, cross))
        for cache in (self_attention_cache, cross_attention_cache):
            if cache is not None:
                outputs.append(keras.KerasTensor(cache.shape, cache.dtype))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _cached_keys_shape(sequence_shape, cache):
    """The shape of the attended keys: the sequence's, or with a cache
    `(B, S_max, ...)` from the cache `(B, 2, S_max, N, 2H)`."""
    if cache is None:
        return tuple(sequence_shape)
    shape = tuple(cache.shape)
    return (shape[0], shape[2] if len(shape) > 2 else None) + tuple(
        sequence_shape
    )[2:]


def _self_attention_masks(padding_mask):
    """A sequence's padding as the masks of its self-attention (queries
    and keys), as Keras masks would."""
    if padding_mask is None:
        return {}
    return dict(query_mask=padding_mask, value_mask=padding_mask)


def _describe(tensor):
    """`None`, or a tensor by its shape (for error messages)."""
    if tensor is None:
        return "None"
    return f"<tensor of shape {tuple(_mask_shape(tensor))}>"
