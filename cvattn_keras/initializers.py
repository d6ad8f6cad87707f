"""Initializers for the real and imaginary parts of complex weights.

Each initializer here draws one part (real or imaginary) of a complex kernel;
the layers call it once per part, with independent draws. The complex
variance `E|W|^2` is the sum of the two parts' variances, and fans count
complex features:

| name                     | per part                 | E abs(W)^2           |
| ------------------------ | ------------------------ | ------------------ |
| complex_glorot_uniform   | U, var 1 / (fi + fo)     | 2 / (fi + fo)      |
| complex_glorot_normal    | truncated N, same var    | 2 / (fi + fo)      |
| complex_he_uniform       | U, var 1 / fi            | 2 / fi             |
| complex_he_normal        | truncated N, same var    | 2 / fi             |
| complex_rayleigh         | r cos(t), r ~ Rayleigh(s), t ~ U(-pi, pi) | 2 s^2 |

`complex_rayleigh` is Trabelsi et al.'s: modulus Rayleigh with
`s = 1 / sqrt(fi + fo)` ("glorot") or `1 / sqrt(fi)` ("he"), uniform
phase. Drawing each part as `r cos(t)` from its own `(r, t)` gives
independent N(0, s^2) parts, which is exactly a Rayleigh modulus with a
uniform phase for the complex weight. (The Deep Complex Networks code
omits the square root in `s`.)
"""

import math

import keras
import numpy as np

__all__ = [
    "ComplexGlorotNormal",
    "ComplexGlorotUniform",
    "ComplexHeNormal",
    "ComplexHeUniform",
    "ComplexRayleigh",
    "clone",
    "get",
]


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


def _variance_scaling(name, scale, mode, distribution, doc):
    """A registered VarianceScaling subclass with fixed arguments."""

    def __init__(self, seed=None):
        keras.initializers.VarianceScaling.__init__(
            self, scale=scale, mode=mode, distribution=distribution, seed=seed
        )

    def get_config(self):
        return {"seed": self._init_seed}

    cls = type(
        name,
        (keras.initializers.VarianceScaling,),
        {
            "__init__": __init__,
            "get_config": get_config,
            "__doc__": doc,
            "__module__": __name__,
        },
    )
    return keras.saving.register_keras_serializable(package="cvattn_keras")(cls)


ComplexGlorotNormal = _variance_scaling(
    "ComplexGlorotNormal",
    0.5,
    "fan_avg",
    "truncated_normal",
    "Glorot (truncated) normal for one part of a complex kernel: "
    "E|W|^2 = 2 / (fan_in + fan_out).",
)
"""Glorot (truncated) normal for one part of a complex kernel:
`E|W|^2 = 2 / (fan_in + fan_out)`. A class, `ComplexGlorotNormal(seed=None)`:
`ComplexGlorotUniform` with a truncated normal of the same variance.
"""
ComplexHeUniform = _variance_scaling(
    "ComplexHeUniform",
    1.0,
    "fan_in",
    "uniform",
    "He uniform for one part of a complex kernel: E|W|^2 = 2 / fan_in.",
)
"""He uniform for one part of a complex kernel: `E|W|^2 = 2 / fan_in`. A
class, `ComplexHeUniform(seed=None)`: `U(-limit, limit)` with `limit =
sqrt(3 / fan_in)`, fans counted in complex units.
"""
ComplexHeNormal = _variance_scaling(
    "ComplexHeNormal",
    1.0,
    "fan_in",
    "truncated_normal",
    "He (truncated) normal for one part of a complex kernel: "
    "E|W|^2 = 2 / fan_in.",
)
"""He (truncated) normal for one part of a complex kernel: `E|W|^2 = 2 /
fan_in`. A class, `ComplexHeNormal(seed=None)`: `ComplexHeUniform` with a
truncated normal of the same variance.
"""


def _fans(shape):
    """`(fan_in, fan_out)` of a kernel `(..., in, out)`: the leading axes
    (a convolution's window) multiply both."""
    if len(shape) < 2:
        size = shape[0] if shape else 1
        return size, size
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexRayleigh(keras.initializers.Initializer):
    """One part of a complex kernel with a Rayleigh modulus and a uniform
    phase (Trabelsi et al., "Deep Complex Networks", 2018, §3.6).

    Returns `r cos(t)` with `r ~ Rayleigh(s)`, `t ~ U(-pi, pi)`, and
    `s = 1 / sqrt(fan_in + fan_out)` (`criterion="glorot"`) or
    `1 / sqrt(fan_in)` (`"he"`), so `E|W|^2 = 2 s^2` over both parts.

    Args:
        criterion: `"glorot"` (default) or `"he"`.
        seed: int or None.
    """

    def __init__(self, criterion="glorot", seed=None):
        if criterion not in ("glorot", "he"):
            raise ValueError(
                "`criterion` must be 'glorot' or 'he'. "
                f"Received: criterion={criterion!r}"
            )
        self.criterion = criterion
        self.seed = seed
        # Like Keras' initializers: the same values at every call, from the
        # seed or, unseeded, from one drawn now (a clone draws another).
        self._call_seed = (
            seed if seed is not None else int(np.random.randint(2**31 - 1))
        )

    def __call__(self, shape, dtype=None):
        fan_in, fan_out = _fans(tuple(shape))
        fans = fan_in + fan_out if self.criterion == "glorot" else fan_in
        sigma = 1.0 / math.sqrt(fans)
        generator = keras.random.SeedGenerator(self._call_seed)
        # Inverse CDF of the Rayleigh distribution; 1 - u avoids log(0).
        u = keras.random.uniform(shape, seed=generator, dtype=dtype)
        modulus = sigma * keras.ops.sqrt(-2.0 * keras.ops.log(1.0 - u))
        phase = keras.random.uniform(
            shape, -math.pi, math.pi, seed=generator, dtype=dtype
        )
        return modulus * keras.ops.cos(phase)

    def get_config(self):
        return {"criterion": self.criterion, "seed": self.seed}


_ALIASES = {
    "complex_glorot_uniform": ComplexGlorotUniform,
    "complex_glorot_normal": ComplexGlorotNormal,
    "complex_he_uniform": ComplexHeUniform,
    "complex_he_normal": ComplexHeNormal,
    "complex_rayleigh": ComplexRayleigh,
}


def get(identifier):
    """Resolves an initializer: this library's names, then Keras' own."""
    if isinstance(identifier, str) and identifier.lower() in _ALIASES:
        return _ALIASES[identifier.lower()]()
    return keras.initializers.get(identifier)


def clone(initializer, salt=0):
    """A fresh copy of `initializer`; an integer seed is mixed with `salt`.

    Keras initializers return the same values at every call when seeded, and
    an unseeded one picks its seed once at construction; sharing one
    instance between the real and imaginary kernels (or between sublayers)
    would make them identical. A copy made from the config draws a new seed
    when unseeded. When seeded, `salt=0` keeps the seed and any other salt
    derives a distinct, reproducible one by a multiplicative hash, so that
    neither the parts of one layer nor layers seeded `s` and `s + 1` share
    values.
    """
    config = initializer.get_config()
    seed = config.get("seed")
    if isinstance(seed, int) and salt:
        mixed = (seed * 1_000_003 + salt * 7_919 + 0x9E3779B1) % 2**31
        config = dict(config, seed=mixed)
    return type(initializer).from_config(config)
