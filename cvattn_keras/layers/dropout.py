"""ComplexDropout: one Bernoulli mask for both parts of each feature."""

import keras

from cvattn_keras import _validation as check
from cvattn_keras import complex as cx


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexDropout(keras.layers.Layer):
    """Drops whole complex features: the real and imaginary parts of a
    feature are kept or zeroed together and scaled by `1 / (1 - rate)`.

    A real `Dropout` on stacked channels would drop the two parts
    independently, changing the phase of the features it half-drops.

    Args:
        rate: float in [0, 1), the fraction of complex features to drop.
        seed: int or None, for reproducible masks.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(..., 2 * E)` stacked.

        training: dropout is active only when `True`.
    """

    def __init__(self, rate, seed=None, **kwargs):
        rate = check.rate(rate, "rate")
        seed = check.seed(seed)
        super().__init__(**kwargs)
        self.supports_masking = True
        self.rate = rate
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def build(self, input_shape):
        cx.check_even(input_shape[-1], "input_shape[-1]", input_shape)

    def call(self, inputs, training=False):
        if not training or self.rate == 0:
            return inputs
        return cx.dropout(inputs, self.rate, seed=self.seed_generator)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
