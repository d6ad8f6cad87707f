"""What the real baselines' builders share: their post-norm encoder
layer."""

import keras


def encoder_layer(
    x, attention, prefix, intermediate_dim, dropout, epsilon, **call_args
):
    """A post-norm real encoder layer on `(B, T, E)` `x`, the complex
    encoder's order: `attention(x, x, **call_args)` (the caller's
    self-attention layer, `{prefix}_attention`), add, `LayerNormalization`
    (`{prefix}_norm_1`); `Dense(intermediate_dim or E)` (`{prefix}_in`),
    LeakyReLU(0.01), dropout, `Dense(E)` (`{prefix}_out`), add,
    `LayerNormalization` (`{prefix}_norm_2`), both norms of `epsilon`."""
    layers = keras.layers
    width = x.shape[-1]
    h = attention(x, x, **call_args)
    x = layers.LayerNormalization(epsilon=epsilon, name=f"{prefix}_norm_1")(
        layers.Add()([x, h])
    )
    h = layers.Dense(intermediate_dim or width, name=f"{prefix}_in")(x)
    h = layers.LeakyReLU(0.01)(h)
    h = layers.Dropout(dropout)(h)
    h = layers.Dense(width, name=f"{prefix}_out")(h)
    return layers.LayerNormalization(epsilon=epsilon, name=f"{prefix}_norm_2")(
        layers.Add()([x, h])
    )
