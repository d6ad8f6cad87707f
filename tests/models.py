"""Small models shared by tests (every building block in one graph) and
backend-neutral helpers: gradients, compilation, conversion to NumPy."""

import keras
import numpy as np

import cvattn_keras as cvk


def all_blocks_model():
    """Conv1D front-end, every norm, activation and encoding, an encoder and
    a decoder with a padded memory, and a ComplexDense head."""
    layers = cvk.layers
    signal = keras.Input((8, 6), name="signal")
    memory = keras.Input((5, 8), name="memory")
    x = layers.ComplexConv1D(4, 3, padding="same")(signal)
    x = layers.ComplexBatchNormalization()(x)
    x = layers.ModReLU(bias_initializer="random_normal")(x)
    x = layers.ComplexActivation("cardioid")(x)
    x = layers.ComplexDropout(0.1)(x)
    x = layers.SinusoidalPositionalEncoding()(x)
    x = layers.ComplexRotaryEmbedding()(x)
    x = layers.ComplexRMSNormalization(complex_scale=True)(x)
    x = layers.ComplexLayerNormalization(method="naive")(x)
    x = layers.ComplexActivation("zrelu")(x)
    x = layers.ComplexActivation("crelu")(x)
    x = layers.ComplexTransformerEncoder(2, softmax="abs")(x)
    x = layers.ComplexTransformerDecoder(2, norm_first=True)(
        x, keras.layers.Masking()(memory)
    )
    return keras.Model([signal, memory], layers.ComplexDense(2)(x))


def all_blocks_inputs(rng):
    inputs = [
        cvk.to_stacked(
            rng.standard_normal((3, 8, 3)) + 1j * rng.standard_normal((3, 8, 3))
        ),
        cvk.to_stacked(
            rng.standard_normal((3, 5, 4)) + 1j * rng.standard_normal((3, 5, 4))
        ),
    ]
    inputs[1][0, 3:] = 0  # padding
    return inputs


# ----------------------------------------------------------------------
# Backend-neutral helpers (gradients, compilation) for the tests.
# ----------------------------------------------------------------------


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
