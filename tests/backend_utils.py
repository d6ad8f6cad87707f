"""Backend-neutral test helpers: gradients on TensorFlow, JAX and PyTorch.

Kept apart from `numpy_reference.py`, which holds only NumPy references.
"""

import keras
import numpy as np
from keras import ops

# JAX: compiled gradients of plain functions, by (function, loss, kwargs),
# so that a property test calling the same function recompiles only for
# new shapes.
_JITTED = {}


def _default_loss(y):
    """A loss that weights every output differently (a plain sum can hide
    a wrong gradient whose entries cancel)."""
    y = ops.convert_to_tensor(y)
    size = int(np.prod(y.shape))
    weights = ops.reshape(
        ops.cast(ops.arange(1, size + 1), y.dtype), tuple(y.shape)
    )
    return ops.sum(y * weights / size)


def value_and_gradients(fn, x, layer=None, loss=None, **call_kwargs):
    """Calls `fn(x, **call_kwargs)` and differentiates `loss(y)` (default:
    `_default_loss`).

    Args:
        fn: a function of `x`, or a layer (then pass it as `layer` too to
            also get the gradients of its trainable variables).
        x: a NumPy array.
        layer: optional built layer whose trainable variables to
            differentiate; `fn` must be that layer.
        loss: optional scalar function of the output.

    Returns:
        `(y, grad_x, grad_variables)` as NumPy arrays (`grad_variables` is a
        list, empty without `layer`).
    """
    loss = loss or _default_loss
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(x)
        variables = list(layer.trainable_variables) if layer else []
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x, **call_kwargs)
            value = loss(y)
        grads = tape.gradient(value, [x] + variables)
        grads = [
            np.zeros(v.shape) if g is None else ops.convert_to_numpy(g)
            for g, v in zip(grads, [x] + variables)
        ]
        return ops.convert_to_numpy(y), grads[0], grads[1:]
    if backend == "jax":
        import jax

        x = jax.numpy.asarray(x)
        if layer is None:
            key = (fn, loss, tuple(sorted(call_kwargs.items())))
            if key not in _JITTED:

                def plain(x):
                    y = fn(x, **call_kwargs)
                    return loss(y), y

                _JITTED[key] = jax.jit(jax.value_and_grad(plain, has_aux=True))
            (_, y), gx = _JITTED[key](x)
            return np.asarray(y), np.asarray(gx), []
        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def stateless(trainable, x):
            y, _ = layer.stateless_call(
                trainable, non_trainable, x, **call_kwargs
            )
            return loss(y), y

        (_, y), (gv, gx) = jax.value_and_grad(
            stateless, argnums=(0, 1), has_aux=True
        )(trainable, x)
        return np.asarray(y), np.asarray(gx), [np.asarray(g) for g in gv]
    if backend == "torch":
        import torch

        x = ops.convert_to_tensor(x)
        x.requires_grad_(True)
        variables = (
            [v.value for v in layer.trainable_variables] if layer else []
        )
        for v in variables:
            v.grad = None
        y = fn(x, **call_kwargs)
        loss(y).backward()
        grads = [x.grad] + [v.grad for v in variables]
        grads = [
            np.zeros(tuple(t.shape)) if g is None else g.detach().cpu().numpy()
            for g, t in zip(grads, [x] + variables)
        ]
        with torch.no_grad():
            y = ops.convert_to_numpy(y.detach())
        return y, grads[0], grads[1:]
    raise NotImplementedError(f"No gradient helper for backend {backend}")


def gradient(fn, x, loss=None):
    """The gradient of `loss(fn(x))` with respect to `x`, as NumPy."""
    return value_and_gradients(fn, x, loss=loss)[1]


def numpy(x):
    return np.asarray(ops.convert_to_numpy(x))
