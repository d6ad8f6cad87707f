"""What the layers built around a `ComplexMultiHeadAttention` sublayer
(`ComplexLowRankAttention`, `ComplexSparseAttention`) share: its arguments
mirrored as their own attributes, and its projections as theirs."""

import keras

_MIRRORED = (
    "num_heads",
    "key_dim",
    "value_dim",
    "softmax",
    "product",
    "dropout",
    "use_bias",
    "output_dim",
    "scale",
    "seed",
    "complex_matmul",
)


class AttentionWrapper(keras.layers.Layer):
    """A layer whose `self.attention` is a `ComplexMultiHeadAttention`
    (which validated the arguments, naming each)."""

    def _mirror_attention(self):
        """The sublayer's resolved arguments as this layer's attributes."""
        for name in _MIRRORED:
            setattr(self, name, getattr(self.attention, name))

    # The projections onto and from the heads, the sublayer's.
    @property
    def query_dense(self):
        """The query projection (`ComplexDense`), once built."""
        return self.attention.query_dense

    @property
    def key_dense(self):
        """The key projection (`ComplexDense`)."""
        return self.attention.key_dense

    @property
    def value_dense(self):
        """The value projection (`ComplexDense`)."""
        return self.attention.value_dense

    @property
    def output_dense(self):
        """The output projection (`ComplexDense`)."""
        return self.attention.output_dense
