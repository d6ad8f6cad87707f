"""Small models and layers shared by tests: every building block in one
graph, every attention variant under every mask in another, the norms by
name."""

import keras
import numpy_reference as ref

import cvattn_keras as cvk
from cvattn_keras import attention as att


def all_blocks_model():
    """The frequency front end (reference batch norms), a Conv1D, every
    norm, activation and encoding, an encoder and a decoder with a padded
    memory, and a ComplexDense head."""
    layers = cvk.layers
    signal = keras.Input((8, 24), name="signal")
    memory = keras.Input((5, 8), name="memory")
    # 12 bins -> 5 -> 3: 3 channels x 3 bins per frame.
    x = layers.ComplexFrequencyFrontEnd((2, 3), (4, 3), (2, 1))(signal)
    x = layers.ComplexConv1D(4, 3, padding="same")(x)
    x = layers.ComplexBatchNormalization()(x)
    x = layers.ModReLU(bias_initializer="random_normal")(x)
    x = layers.ComplexActivation("cardioid")(x)
    x = layers.ComplexDropout(0.1)(x)
    x = layers.SinusoidalPositionalEncoding()(x)
    x = layers.ComplexRotaryEmbedding()(x)
    x = layers.ComplexRMSNormalization(complex_scale=True)(x)
    x = layers.ComplexLayerNormalization(method="naive")(x)
    x = layers.ComplexActivation("zrelu")(x)
    x = layers.ComplexActivation("crelu")(x)
    x = layers.ComplexTransformerEncoder(2, softmax="abs")(x)
    x = layers.ComplexTransformerDecoder(2, norm_first=True)(
        x, keras.layers.Masking()(memory)
    )
    return keras.Model([signal, memory], layers.ComplexDense(2)(x))


def all_blocks_inputs(rng):
    inputs = [
        cvk.to_stacked(
            rng.standard_normal((3, 8, 12))
            + 1j * rng.standard_normal((3, 8, 12))
        ),
        cvk.to_stacked(
            rng.standard_normal((3, 5, 4)) + 1j * rng.standard_normal((3, 5, 4))
        ),
    ]
    inputs[1][0, 3:] = 0  # padding
    return inputs


def all_variants_model():
    """Every softmax variant with both products, each a cross-attention
    under every kind of mask at once: causal (top-left aligned, T != S),
    a Keras mask (`Masking` on the memory) and explicit masks from a bool
    input (a `value_mask`, or an `attention_mask` `(B, 1, S)`); the
    "naive" inner-product layer also returns its scores. Lengths and batch
    are dynamic."""
    query = keras.Input((None, 6), name="query")
    memory = keras.Input((None, 4), name="memory")
    keep = keras.Input((None,), dtype="bool", name="keep")
    x = cvk.layers.ComplexDense(4, name="embed")(query)
    masked_memory = keras.layers.Masking(name="memory_mask")(memory)
    scores = None
    for i, (softmax, product) in enumerate(
        (s, p) for s in att.SOFTMAX_VARIANTS for p in att.PRODUCTS
    ):
        layer = cvk.layers.ComplexMultiHeadAttention(
            2, 3, softmax=softmax, product=product, name=f"{softmax}_{product}"
        )
        if i % 2:
            masks = dict(value_mask=keep)
        else:
            masks = dict(attention_mask=keras.ops.expand_dims(keep, 1))
        y = layer(
            x,
            masked_memory,
            use_causal_mask=True,
            return_attention_scores=i == 6,
            **masks,
        )
        if i == 6:  # "naive", "inner": its scores, Re and Im
            y, scores = y
        x = keras.layers.Add()([x, y])
    return keras.Model([query, memory, keep], [x, scores])


def all_variants_inputs(rng, batch, length, keys):
    query = cvk.to_stacked(ref.random_complex(rng, (batch, length, 3)))
    memory = cvk.to_stacked(ref.random_complex(rng, (batch, keys, 2)))
    memory[1, keys - 2 :] = 0  # padding: masked by the Keras mask
    memory[-1] = 0  # nothing to attend to: a zero output, no NaN
    keep = rng.random((batch, keys)) < 0.7
    keep[0] = False  # every key masked explicitly in the first sample
    return [query, memory, keep]


# The complex norms by the names `numpy_reference.norm_at_init` takes.
NORMS = ["batch", "layer", "layer-biased", "naive", "rms"]


def norm_layer(name):
    """A fresh norm layer of this library by name (see `NORMS`)."""
    layers = cvk.layers
    return {
        "batch": lambda: layers.ComplexBatchNormalization(),
        "layer": lambda: layers.ComplexLayerNormalization(),
        "layer-biased": lambda: layers.ComplexLayerNormalization(
            estimator="biased"
        ),
        "naive": lambda: layers.ComplexLayerNormalization(method="naive"),
        "rms": lambda: layers.ComplexRMSNormalization(),
    }[name]()
