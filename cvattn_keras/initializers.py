"""Initializers for the real and imaginary parts of complex weights."""

import keras

__all__ = ["ComplexGlorotUniform", "get", "clone"]


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexGlorotUniform(keras.initializers.VarianceScaling):
    """Glorot uniform for one part (real or imaginary) of a complex kernel.

    Draws from `U(-limit, limit)` with `limit = sqrt(3 / (fan_in + fan_out))`,
    fans counted in complex units: real Glorot with each part scaled by
    `1/sqrt(2)`. The complex weight `W = W_r + i W_i`, with both parts drawn
    independently, then has `E|W|^2 = 2 / (fan_in + fan_out)`, the variance
    of real Glorot (Trabelsi et al., "Deep Complex Networks", 2018, §3.6).

    Args:
        seed: an int or `None`. A seeded initializer returns the same values
            at every call; the layers of this library derive a distinct seed
            for each part (see `clone`).
    """

    def __init__(self, seed=None):
        super().__init__(
            scale=0.5, mode="fan_avg", distribution="uniform", seed=seed
        )

    def get_config(self):
        return {"seed": self._init_seed}


_ALIASES = {"complex_glorot_uniform": ComplexGlorotUniform}


def get(identifier):
    """Resolves an initializer: this library's names, then Keras' own."""
    if isinstance(identifier, str) and identifier.lower() in _ALIASES:
        return _ALIASES[identifier.lower()]()
    return keras.initializers.get(identifier)


def clone(initializer, seed_offset=0):
    """A fresh copy of `initializer`, with its integer seed shifted.

    Keras initializers return the same values at every call when seeded, and
    an unseeded one picks its seed once at construction; sharing one
    instance between the real and imaginary kernels would make both parts
    identical. A copy made from the config draws a new seed when unseeded;
    when seeded, `seed + seed_offset` keeps runs reproducible while giving
    each part different values.
    """
    config = initializer.get_config()
    if isinstance(config.get("seed"), int) and seed_offset:
        config = dict(config, seed=config["seed"] + seed_offset)
    return type(initializer).from_config(config)
