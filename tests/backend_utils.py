"""Backend-neutral test helpers for TensorFlow, JAX and PyTorch: gradients,
compilation, conversion to NumPy.

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


def gradients(fn, inputs, variables=()):
    """`(loss, input_grads, variable_grads)` of the scalar `fn(*inputs)` on
    whichever backend Keras runs, as NumPy arrays (a gradient the graph
    does not reach is zeros, as JAX reports it).

    Args:
        fn: callable of the inputs returning a scalar tensor; it may call
            built layers, whose `variables` are differentiated too.
        inputs: list of NumPy arrays (float).
        variables: Keras variables (e.g. `layer.trainable_variables`).
    """
    backend = keras.backend.backend()
    variables = list(variables)
    if backend == "tensorflow":
        import tensorflow as tf

        tensors = [tf.convert_to_tensor(x) for x in inputs]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            loss = fn(*tensors)
        grads = tape.gradient(loss, tensors + variables)
    elif backend == "jax":
        import jax

        def wrapped(xs, values):
            with keras.StatelessScope(
                state_mapping=list(zip(variables, values))
            ):
                return fn(*xs)

        values = [v.value for v in variables]
        xs = [jax.numpy.asarray(x) for x in inputs]
        # Compiled: one XLA compilation instead of one per eager op.
        loss, (gx, gv) = jax.jit(jax.value_and_grad(wrapped, argnums=(0, 1)))(
            xs, values
        )
        grads = list(gx) + list(gv)
    elif backend == "torch":
        import torch

        tensors = [
            torch.tensor(np.asarray(x), requires_grad=True) for x in inputs
        ]
        loss = fn(*tensors)
        grads = torch.autograd.grad(
            loss, tensors + [v.value for v in variables], allow_unused=True
        )
    else:  # pragma: no cover
        raise NotImplementedError(f"no gradients for backend {backend}")
    targets = list(inputs) + variables
    grads = [
        np.zeros(np.shape(t)) if g is None else to_numpy(g)
        for g, t in zip(grads, targets)
    ]
    return float(to_numpy(loss)), grads[: len(inputs)], grads[len(inputs) :]


def to_numpy(x):
    """A tensor, variable or array of any backend as a NumPy array (a
    torch tensor that requires grad is detached first)."""
    if hasattr(x, "detach"):
        x = x.detach()
    return np.asarray(keras.ops.convert_to_numpy(x))


def compiled(fn):
    """`fn` compiled by the backend's compiler: XLA through
    `tf.function(jit_compile=True)` on TensorFlow, `jax.jit` on JAX; `None`
    on a backend without one here (torch: the test skips)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=True)
    if backend == "jax":
        import jax

        return jax.jit(fn)
    return None


def has_float64():
    """Whether the backend computes in float64 (JAX only with x64 on)."""
    if keras.backend.backend() != "jax":
        return True
    import jax

    return bool(jax.config.jax_enable_x64)
