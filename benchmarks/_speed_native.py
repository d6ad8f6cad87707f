"""The native peer of `attention_speed.py`: the same complex attention (and
complex dense layer) written with native complex64 TensorFlow ops, as the
reference PyTorch code writes it, fed complex64 inputs."""

import numpy as np
import tensorflow as tf


class NativeComplexAttention(tf.Module):
    """Complex multi-head attention in native complex64 TensorFlow ops: the
    formulation of the reference PyTorch code (complex projections, complex
    score matmul, softmax on the real part or the modulus)."""

    def __init__(self, features, heads, softmax, product, seed=0):
        super().__init__()
        self.heads, self.head_dim = heads, features // heads
        self.softmax, self.product = softmax, product
        rng = np.random.default_rng(seed)
        scale = (2.0 * features) ** -0.5

        def complex_variable(shape, name):
            parts = rng.standard_normal((2,) + shape) * scale
            value = (parts[0] + 1j * parts[1]).astype(np.complex64)
            return tf.Variable(value, name=name)

        self.kernels = [
            complex_variable((features, features), f"kernel_{n}")
            for n in "qkvo"
        ]
        self.biases = [
            complex_variable((features,), f"bias_{n}") for n in "qkvo"
        ]

    def _split_heads(self, x):  # (B, L, E) -> (B, N, L, H)
        shape = tf.shape(x)
        x = tf.reshape(x, (shape[0], shape[1], self.heads, self.head_dim))
        return tf.transpose(x, (0, 2, 1, 3))

    def __call__(self, z, causal=False):  # z: (B, T, E) complex64
        (wq, wk, wv, wo), (bq, bk, bv, bo) = self.kernels, self.biases
        q = self._split_heads(tf.matmul(z, wq) + bq)
        k = self._split_heads(tf.matmul(z, wk) + bk)
        v = self._split_heads(tf.matmul(z, wv) + bv)
        out = native_core(q, k, v, self.softmax, self.product, causal)
        out = tf.transpose(out, (0, 2, 1, 3))  # (B, T, N, H)
        return tf.matmul(tf.reshape(out, tf.shape(z)), wo) + bo


def native_core(q, k, v, softmax, product, causal=False):
    """Complex attention of per-head complex64 `(B, N, T, H)` tensors."""
    scale = tf.constant(q.shape[-1] ** -0.5, tf.complex64)
    if product == "inner":  # q conj(k)^T
        a = tf.matmul(q, k, adjoint_b=True) * scale
    else:  # q k^T
        a = tf.matmul(q, k, transpose_b=True) * scale
    mask = None
    if causal:
        ones = tf.ones((tf.shape(q)[2], tf.shape(k)[2]), tf.bool)
        mask = tf.linalg.band_part(ones, -1, 0)

    def masked_softmax(logits):
        if mask is not None:
            logits = tf.where(mask, logits, tf.constant(-1e30, logits.dtype))
        return tf.nn.softmax(logits, axis=-1)

    if softmax == "real":
        w = tf.cast(masked_softmax(tf.math.real(a)), tf.complex64)
    elif softmax == "naive":
        w = tf.complex(
            masked_softmax(tf.math.real(a)), masked_softmax(tf.math.imag(a))
        )
    else:
        modulus = tf.abs(a)
        w = tf.cast(masked_softmax(modulus), tf.complex64)
        if softmax == "abs":  # sgn(A) = A / |A|, 0 at 0
            w = w * tf.math.divide_no_nan(a, tf.cast(modulus, a.dtype))
    return tf.matmul(w, v)


def native_input(x):
    """Stacked `[Re | Im]` float32 -> complex64."""
    re, im = tf.split(x, 2, axis=-1)
    return tf.complex(re, im)


def candidate_native(shape, softmax, product, x, causal):
    module = NativeComplexAttention(
        shape["features"], shape["heads"], softmax, product
    )
    return dict(
        call=lambda z: module(z, causal=causal),
        inputs=(native_input(x),),
        variables=list(module.trainable_variables),
    )


def candidate_native_dense(features, x):
    rng = np.random.default_rng(0)
    parts = rng.standard_normal((2, features, features)) / np.sqrt(features)
    kernel = tf.Variable((parts[0] + 1j * parts[1]).astype(np.complex64))
    bias = tf.Variable(tf.zeros((features,), tf.complex64))
    return dict(
        call=lambda z: tf.matmul(z, kernel) + bias,
        inputs=(native_input(x),),
        variables=[kernel, bias],
    )


def candidate_core_native(softmax, product, qkv, causal):
    def to_native(t):  # (B, L, N, 2H) stacked -> (B, N, L, H) complex64
        re, im = tf.split(t, 2, axis=-1)
        return tf.transpose(tf.complex(re, im), (0, 2, 1, 3))

    return dict(
        call=lambda q, k, v: native_core(q, k, v, softmax, product, causal),
        inputs=tuple(to_native(t) for t in qkv),
    )
