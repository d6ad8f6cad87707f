"""Complex activations on stacked `[real | imag]` tensors.

| name                 | f(z)                                           |
| -------------------- | ---------------------------------------------- |
| `split_leaky_relu`   | LeakyReLU(Re z) + i LeakyReLU(Im z), slope 0.01 |
|                      | (the reference implementation's "CReLU")       |
| `crelu`              | ReLU(Re z) + i ReLU(Im z) (Trabelsi's CReLU)   |
| `modrelu`            | ReLU(abs(z) + b) z / abs(z), learnable real b   |
| `zrelu`              | z if 0 <= arg z <= pi/2, else 0 (Guberman)     |
| `cardioid`           | (1 + cos(arg z)) / 2 * z (Virtue et al.)       |

At z = 0 every function gives 0 with a finite gradient. The moduli and
phases (`modrelu`, `cardioid`) use the scaled modulus of
`cvattn_keras.complex.modulus_and_sign`, correct over the whole float range
(`modrelu` of 2e19 is 2e19, `cardioid` of 1e-19 is 1e-19 in float32), and
compute in float32 for half-precision inputs. `modrelu` has a
learnable bias and is a layer (`cvattn_keras.layers.ModReLU`); the others are
functions here and layers via `cvattn_keras.layers.ComplexActivation`.
"""

import keras
from keras import ops

from cvattn_keras import complex as cx

__all__ = [
    "ACTIVATIONS",
    "cardioid",
    "crelu",
    "get",
    "modrelu",
    "split_leaky_relu",
    "zrelu",
]


def split_leaky_relu(x, negative_slope=0.01):
    """LeakyReLU on the real and imaginary parts separately.

    This is what the reference implementation calls "CReLU"
    (`-1 - 2i -> -0.01 - 0.02i`); named here for what it computes.
    """
    return ops.leaky_relu(x, negative_slope=negative_slope)


def crelu(x):
    """ReLU on the real and imaginary parts separately (Trabelsi et al.)."""
    return ops.relu(x)


def _in_float32(fn):
    """Computes `fn` in float32 for half-precision inputs (its modulus,
    sign and gain), casting the result back to the input's dtype."""

    def wrapper(x, *args):
        dtype = keras.backend.standardize_dtype(x.dtype)
        if dtype in ("float16", "bfloat16"):
            args = [ops.cast(a, "float32") for a in args]
            return ops.cast(fn(ops.cast(x, "float32"), *args), dtype)
        return fn(x, *args)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


@_in_float32
def modrelu(x, bias):
    """`ReLU(|z| + b) * z / |z|`: the modulus shifted by the real `bias`
    `(E,)` and rectified, the phase kept (Arjovsky et al., 2016). The bias
    multiplies through the phase; it is not added to z (a bug some
    libraries ship)."""
    magnitude, phase = cx.modulus_and_sign(x)
    scale = ops.relu(magnitude + bias)  # (..., E)
    return phase * ops.concatenate([scale, scale], axis=-1)


def zrelu(x):
    """`z` where both parts are non-negative (phase in [0, pi/2]), else 0."""
    re, im = cx.split(x)
    # A select of constants rather than a cast of the bool: the same 0/1,
    # and no float CAST left in a full-integer TFLite file.
    keep = ops.cast(
        ops.where(ops.logical_and(re >= 0, im >= 0), 1.0, 0.0), x.dtype
    )
    return x * ops.concatenate([keep, keep], axis=-1)


@_in_float32
def cardioid(x):
    """`(1 + cos(arg z)) / 2 * z`: passes z at phase 0, blocks it at pi."""
    cosine = cx.split(cx.sign(x))[0]  # Re(z / |z|), 0 at z = 0
    gain = 0.5 * (1.0 + cosine)
    return x * ops.concatenate([gain, gain], axis=-1)


ACTIVATIONS = {
    "split_leaky_relu": split_leaky_relu,
    "crelu": crelu,
    "zrelu": zrelu,
    "cardioid": cardioid,
}
"""The parameter-free activations by name (name -> function), as `get`
takes them.
"""


def get(identifier):
    """A parameter-free activation by name (or a callable, returned as is).

    Raises:
        ValueError: for an unknown name, listing the valid ones.
    """
    if callable(identifier):
        return identifier
    if isinstance(identifier, str) and identifier.lower() in ACTIVATIONS:
        return ACTIVATIONS[identifier.lower()]
    hint = (
        " 'modrelu' has a learnable bias: use cvattn_keras.layers.ModReLU."
        if identifier == "modrelu"
        else ""
    )
    raise ValueError(
        f"Unknown complex activation. Valid: {sorted(ACTIVATIONS)}.{hint} "
        f"Received: activation={identifier!r}"
    )
