"""The six weight options shared by the layers, resolved and serialized."""

import keras
from keras import ops

from cvattn_keras import initializers as cinit

WEIGHT_OPTIONS = (
    "kernel_initializer",
    "bias_initializer",
    "kernel_regularizer",
    "bias_regularizer",
    "kernel_constraint",
    "bias_constraint",
)
_GET = {
    "initializer": cinit.get,
    "regularizer": keras.regularizers.get,
    "constraint": keras.constraints.get,
}
_SERIALIZE = {
    "initializer": keras.initializers.serialize,
    "regularizer": keras.regularizers.serialize,
    "constraint": keras.constraints.serialize,
}


# What `None` means for the initializers: the layers' documented defaults
# (as `keras.layers.Dense(kernel_initializer=None)` gets Dense's default
# Glorot kernel). `None` regularizers and constraints mean none.
DEFAULT_INITIALIZERS = {
    "kernel_initializer": "complex_glorot_uniform",
    "bias_initializer": "zeros",
}


def _kind(name):
    return name.split("_", 1)[1]


def resolve_option(name, identifier):
    """The weight option `name` (one of `WEIGHT_OPTIONS`) resolved from an
    identifier, config or instance. A `None` initializer is the default of
    `DEFAULT_INITIALIZERS`; anything that cannot be resolved is a
    `ValueError` naming the argument."""
    kind = _kind(name)
    if identifier is None and kind == "initializer":
        identifier = DEFAULT_INITIALIZERS[name]
    try:
        return _GET[kind](identifier)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"`{name}` must be a Keras {kind} (an instance, a name or a "
            f"config dict){' or None' if kind != 'initializer' else ''}. "
            f"{str(error).rstrip('.')}. Received: {name}={identifier!r}"
        ) from None


def set_weight_options(layer, **options):
    """Resolves each of `WEIGHT_OPTIONS` (see `resolve_option`) and sets it
    as an attribute of `layer`."""
    for name in WEIGHT_OPTIONS:
        setattr(layer, name, resolve_option(name, options[name]))


def weight_options_config(layer):
    """The serialized `WEIGHT_OPTIONS` of `layer`, for `get_config`."""
    return {
        name: _SERIALIZE[_kind(name)](getattr(layer, name))
        for name in WEIGHT_OPTIONS
    }


def add_complex_weights(layer, kernel_shape, bias_shape):
    """Creates `kernel_real`, `kernel_imag` and, if `layer.use_bias`,
    `bias_real`, `bias_imag` (else `None`) on `layer`, in that order (the
    order of `get_weights`), each part with its own clone of the initializer
    so the parts are drawn independently."""
    for kind, shape in (("kernel", kernel_shape), ("bias", bias_shape)):
        for offset, part in enumerate(("real", "imag")):
            weight = None
            if kind == "kernel" or layer.use_bias:
                weight = layer.add_weight(
                    name=f"{kind}_{part}",
                    shape=shape,
                    initializer=cinit.clone(
                        getattr(layer, f"{kind}_initializer"), offset
                    ),
                    regularizer=getattr(layer, f"{kind}_regularizer"),
                    constraint=getattr(layer, f"{kind}_constraint"),
                )
            setattr(layer, f"{kind}_{part}", weight)


def add_bias(layer, outputs):
    """`outputs` `(..., 2 units)` plus `layer`'s complex bias stacked
    `[bias_real | bias_imag]` in its compute dtype, or `outputs` as they
    are for a layer without one (`use_bias=False`)."""
    if not layer.use_bias:
        return outputs
    bias = ops.concatenate([layer.bias_real, layer.bias_imag], axis=0)
    return outputs + ops.cast(bias, layer.compute_dtype)
