"""Options that several layers (and the model builders) take with one
meaning: the attention options of `ComplexMultiHeadAttention` that the
transformer blocks pass on to it, and the feed-forward activation by name
(a complex activation or `"modrelu"`)."""

from cvattn_keras import _validation as check
from cvattn_keras import activations
from cvattn_keras import attention as core
from cvattn_keras import complex as cx
from cvattn_keras.layers.activations import ComplexActivation
from cvattn_keras.layers.activations import ModReLU

ATTENTION_OPTIONS = (
    "seed",
    "rotary_max_wavelength",
    "chunk_size",
    "complex_matmul",
    "sliding_window",
)
"""The options resolved by `resolve_attention_options`, in the order of
the layers' configs."""


def resolve_attention_options(
    seed, rotary_max_wavelength, chunk_size, complex_matmul, sliding_window
):
    """The `ATTENTION_OPTIONS` validated (a `ValueError` naming the
    argument otherwise), as a dict in that order."""
    return {
        "seed": check.seed(seed),
        "rotary_max_wavelength": check.greater_than(
            rotary_max_wavelength, "rotary_max_wavelength", 1.0, True
        ),
        "chunk_size": core.resolve_chunk_size(chunk_size),
        "complex_matmul": cx.resolve_complex_matmul(complex_matmul),
        "sliding_window": core.resolve_sliding_window(sliding_window),
    }


def set_options(layer, options):
    """Sets each of `options` (a dict) as an attribute of `layer`."""
    for name, value in options.items():
        setattr(layer, name, value)


def attention_options_config(layer):
    """The `ATTENTION_OPTIONS` of `layer`, for `get_config`."""
    return {name: getattr(layer, name) for name in ATTENTION_OPTIONS}


def check_activation(activation):
    """The name of a complex activation (`cvattn_keras.activations`) or
    `"modrelu"`, lowercased; anything else is a `ValueError` naming the
    argument (an unknown name: one listing the names)."""
    if not isinstance(activation, str):
        raise ValueError(
            "`activation` must be the name of a complex activation or "
            f"'modrelu'. Received: activation={activation!r}"
        )
    activation = activation.lower()
    if activation != "modrelu":
        activations.get(activation)  # raises for unknown names
    return activation


def activation_layer(activation, **kwargs):
    """The layer of a name checked by `check_activation`: `ModReLU` (a
    learnable bias) for `"modrelu"`, else `ComplexActivation`; `kwargs`
    are base `Layer` arguments."""
    if activation == "modrelu":
        return ModReLU(**kwargs)
    return ComplexActivation(activation, **kwargs)
