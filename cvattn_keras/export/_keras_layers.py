"""Keras layers traced in integer-friendly forms for a calibrated file.

Keras' `Softmax` with a mask (the masked softmax of `MultiHeadAttention`:
`use_causal_mask`, padding; its fused `ops.dot_product_attention` path
likewise) fills the masked scores with -1e9 before the softmax: in an int8 or
int16 file that constant swamps the scores' calibrated range, so every attended
score rounds to the same level and the attention turns uniform (the radio
example's real transformer scored 15% instead of 45% in full_int8). Under
`integer_keras_layers()` a masked Softmax over the last axis takes the
library's portable form (`attention._masked_softmax` under `portable_masking`:
scores shifted by the row's largest attended one, the mask a 0/1 multiplier),
the same value except where a row has nothing to attend (0 there, not Keras'
uniform weights).

Keras' `LayerNormalization` computes `x * inv + (-mean * inv + beta)`: the
negation converts to TFLite's NEG, which has no int8 or int16 kernel, so a
model with one had no `full_int8` or `int16x8` file (and its `int8` file
kept a float op). Under `integer_keras_layers()` it computes the
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


def _masked_softmax(layer, inputs, mask):
    """`keras.layers.Softmax`'s value on a mask, by the library's portable
    masked softmax, or `None` where that form does not apply (another
    axis than the last)."""
    from cvattn_keras import attention as core

    axis = layer.axis
    if isinstance(axis, (list, tuple)):
        axis = axis[0] if len(axis) == 1 else None
    if axis is None or axis % len(inputs.shape) != len(inputs.shape) - 1:
        return None
    if keras.backend.standardize_dtype(mask.dtype) != "bool":
        mask = ops.greater(mask, 0.5)
    logits = ops.cast(inputs, "float32")
    weights = core._masked_softmax(logits, mask)  # the mask broadcasts
    return ops.cast(weights, layer.compute_dtype)


@contextlib.contextmanager
def integer_keras_layers(squared_difference=True):
    """Within this context, `keras.layers.LayerNormalization` traces
    without a negation (its variance through SQUARED_DIFFERENCE, or with
    `squared_difference=False` as a product, for int16 activations), a
    masked `keras.layers.Softmax` over the last axis without its -1e9
    fill (call it under `attention.portable_masking`), and
    `keras.layers.MultiHeadAttention` through that Softmax (its explicit
    path) rather than `ops.dot_product_attention`. Not the subclasses of
    the norm and the softmax, whose `call` may differ."""
    norm_call = keras.layers.LayerNormalization.call
    softmax_call = keras.layers.Softmax.call
    attention_call = keras.layers.MultiHeadAttention._compute_attention

    def norm(self, inputs):
        if type(self) is not keras.layers.LayerNormalization or getattr(
            self, "rms_scaling", False
        ):
            return norm_call(self, inputs)
        return _layer_normalization(self, inputs, squared_difference)

    def softmax(self, inputs, mask=None):
        if type(self) is keras.layers.Softmax and mask is not None:
            weights = _masked_softmax(self, inputs, mask)
            if weights is not None:
                return weights
        return softmax_call(self, inputs, mask=mask)

    def attention(self, query, key, value, *args, **kwargs):
        # Keras' fused path (`ops.dot_product_attention`, taken unless the
        # scores are asked for) masks inside the op: asking for them takes
        # the explicit path, through the Softmax above.
        names = ("attention_mask", "training", "return_attention_scores")
        kwargs.update(zip(names, args))
        if getattr(self, "_flash_attention", False):
            return attention_call(self, query, key, value, **kwargs)
        wanted = kwargs.get("return_attention_scores", False)
        kwargs["return_attention_scores"] = True
        output, scores = attention_call(self, query, key, value, **kwargs)
        return output, scores if wanted else None

    keras.layers.LayerNormalization.call = norm
    keras.layers.Softmax.call = softmax
    keras.layers.MultiHeadAttention._compute_attention = attention
    try:
        yield
    finally:
        keras.layers.LayerNormalization.call = norm_call
        keras.layers.Softmax.call = softmax_call
        keras.layers.MultiHeadAttention._compute_attention = attention_call
