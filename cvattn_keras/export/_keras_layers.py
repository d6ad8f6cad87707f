"""Keras layers traced in integer-friendly forms for a calibrated file.

Keras' `LayerNormalization` computes `x * inv + (-mean * inv + beta)`: the
negation converts to TFLite's NEG, which has no int8 or int16 kernel, so a
model with one had no `full_int8` or `int16x8` file (and its `int8` file
kept a float op). Under `integer_layer_normalization()` it computes the
same value as `(x - mean) * inv + beta`, the variance the mean of
`(x - mean)**2` (SQUARED_DIFFERENCE for int8, a product for int16
activations, where SQUARED_DIFFERENCE has no kernel; SUB, MUL, ADD, MEAN
and RSQRT have both). The form is only
used while the export traces a model for a calibrated mode; training and
the layer's saved config are untouched.
"""

import contextlib

import keras
from keras import ops


def _layer_normalization(layer, inputs, squared_difference):
    """`keras.layers.LayerNormalization`'s value without a negation (its
    `rms_scaling` form has none: that one is left to Keras)."""
    x = ops.cast(inputs, "float32")
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    axes = sorted(a % len(x.shape) for a in axes)
    mean = ops.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    if squared_difference:  # one op, lower int8 error (0.023 vs 0.030)
        variance = ops.mean(ops.square(x - mean), axis=axes, keepdims=True)
    else:  # SQUARED_DIFFERENCE has no int16 kernel: a product
        variance = ops.mean(centered * centered, axis=axes, keepdims=True)
    inv = ops.rsqrt(variance + layer.epsilon)
    shape = [1] * len(x.shape)
    for axis in axes:
        shape[axis] = x.shape[axis]
    if layer.gamma is not None:
        inv = inv * ops.reshape(ops.cast(layer.gamma, x.dtype), shape)
    outputs = centered * inv
    if layer.beta is not None:
        outputs = outputs + ops.reshape(ops.cast(layer.beta, x.dtype), shape)
    return ops.cast(outputs, layer.compute_dtype)


@contextlib.contextmanager
def integer_layer_normalization(squared_difference=True):
    """Within this context, `keras.layers.LayerNormalization` (not its
    subclasses, whose `call` may differ) traces without a negation; its
    variance through SQUARED_DIFFERENCE (int8), or with
    `squared_difference=False` as a product (int16 activations)."""
    original = keras.layers.LayerNormalization.call

    def call(self, inputs):
        if type(self) is not keras.layers.LayerNormalization or getattr(
            self, "rms_scaling", False
        ):
            return original(self, inputs)
        return _layer_normalization(self, inputs, squared_difference)

    keras.layers.LayerNormalization.call = call
    try:
        yield
    finally:
        keras.layers.LayerNormalization.call = original
