"""Small models and layers shared by tests: every building block in one
graph, the norms by name."""

import keras

import cvattn_keras as cvk


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
