"""Tests of the stacked layout and complex arithmetic (cvattn_keras.complex)."""

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import cvattn_keras as cvk
from cvattn_keras import complex as cx


def _z(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def test_to_stacked_layout_is_real_parts_then_imaginary_parts():
    z = np.array([[1 + 2j, 3 - 4j, -5 + 0.5j]])
    x = cvk.to_stacked(z)
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x, [[1, 3, -5, 2, -4, 0.5]])


def test_to_stacked_from_stacked_round_trip_numpy(rng):
    z = _z(rng, (2, 3, 5))
    x = cvk.to_stacked(z, dtype="float64")
    assert x.shape == (2, 3, 10)
    back = cvk.from_stacked(x, dtype="complex128")
    np.testing.assert_array_equal(back, z)
    assert cvk.from_stacked(x).dtype == np.complex64


def test_to_stacked_from_stacked_round_trip_tensor(rng):
    z = _z(rng, (4, 6)).astype(np.complex64)
    x = cvk.to_stacked(tf.constant(z))
    assert tf.is_tensor(x) and x.dtype == tf.float32
    np.testing.assert_array_equal(cvk.from_stacked(x), z)


def test_real_input_has_zero_imaginary_part():
    np.testing.assert_array_equal(cvk.to_stacked([1.0, 2.0]), [1, 2, 0, 0])


@pytest.mark.parametrize(
    "call",
    [
        lambda: cvk.from_stacked(np.zeros((2, 3))),
        lambda: cx.split(np.zeros((4, 5))),
        lambda: cx.split(tf.zeros((4, 5))),
        lambda: cx.interleaved_to_stacked(np.zeros(3)),
        lambda: cx.stacked_to_pairs(np.zeros((2, 7))),
        lambda: cx.modulus(tf.zeros((1, 3))),
    ],
)
def test_odd_last_axis_is_a_value_error(call):
    with pytest.raises(ValueError, match="even number of channels"):
        call()


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="dtype"):
        cvk.from_stacked(np.zeros(4), dtype="float32")
    with pytest.raises(ValueError, match="numeric"):
        cvk.to_stacked(np.array(["a", "b"]))
    with pytest.raises(ValueError, match="trailing axis of size 2"):
        cx.pairs_to_stacked(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="same shape"):
        cx.merge(np.zeros((2, 3)), np.zeros((2, 4)))


def test_split_and_merge_are_inverse(rng):
    x = rng.standard_normal((3, 8)).astype("float32")
    re, im = cx.split(tf.constant(x))
    np.testing.assert_array_equal(re, x[:, :4])
    np.testing.assert_array_equal(im, x[:, 4:])
    np.testing.assert_array_equal(cx.merge(re, im), x)


@pytest.mark.parametrize("as_tensor", [False, True])
def test_interleaved_and_pairs_converters(rng, as_tensor):
    z = _z(rng, (2, 3, 4))
    stacked = cvk.to_stacked(z)
    # Independent constructions of the other two layouts.
    pairs = np.stack([z.real, z.imag], axis=-1).astype("float32")
    interleaved = pairs.reshape(2, 3, 8)
    wrap = tf.constant if as_tensor else (lambda a: a)
    np.testing.assert_array_equal(cx.stacked_to_pairs(wrap(stacked)), pairs)
    np.testing.assert_array_equal(cx.pairs_to_stacked(wrap(pairs)), stacked)
    np.testing.assert_array_equal(
        cx.stacked_to_interleaved(wrap(stacked)), interleaved
    )
    np.testing.assert_array_equal(
        cx.interleaved_to_stacked(wrap(interleaved)), stacked
    )
    if not as_tensor:
        assert isinstance(cx.stacked_to_interleaved(stacked), np.ndarray)


def test_arithmetic_matches_numpy(rng):
    a, b = _z(rng, (5, 3)), _z(rng, (5, 3))
    xa, xb = tf.constant(cvk.to_stacked(a)), tf.constant(cvk.to_stacked(b))
    tol = dict(rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        cvk.from_stacked(cx.multiply(xa, xb)), a * b, **tol
    )
    np.testing.assert_allclose(
        cvk.from_stacked(cx.conjugate(xa)), np.conj(a), **tol
    )
    np.testing.assert_allclose(cvk.from_stacked(cx.times_i(xa)), 1j * a, **tol)
    np.testing.assert_allclose(cx.modulus(xa), np.abs(a), **tol)
    np.testing.assert_allclose(
        cvk.from_stacked(cx.sign(xa)), a / np.abs(a), **tol
    )


def test_block_kernel_is_the_complex_product(rng):
    x, w = _z(rng, (4, 3)), _z(rng, (3, 5))
    kernel = cx.block_kernel(
        tf.constant(w.real, tf.float32), tf.constant(w.imag, tf.float32)
    )
    assert tuple(kernel.shape) == (6, 10)
    y = ops.matmul(tf.constant(cvk.to_stacked(x)), kernel)
    np.testing.assert_allclose(cvk.from_stacked(y), x @ w, rtol=1e-5, atol=1e-5)


def test_modulus_and_sign_at_zero_are_zero_with_zero_gradient():
    x = tf.constant([[0.0, 3.0, 0.0, 4.0]])  # z = [0, 3 + 4i]
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        magnitude = cx.modulus(x)
        phase = cx.sign(x)
    np.testing.assert_allclose(magnitude, [[0.0, 5.0]])
    np.testing.assert_allclose(phase, [[0.0, 0.6, 0.0, 0.8]], atol=1e-7)
    grad_m = tape.gradient(magnitude, x).numpy()
    grad_s = tape.gradient(phase, x).numpy()
    assert np.all(np.isfinite(grad_m)) and np.all(np.isfinite(grad_s))
    # d|z|/d(re, im) at z = 3 + 4i is (re, im) / |z|; at z = 0 it is 0.
    np.testing.assert_allclose(grad_m, [[0.0, 0.6, 0.0, 0.8]], atol=1e-7)
    assert grad_s[0, 0] == 0 and grad_s[0, 2] == 0


def test_scaled_modulus_and_sign_agree_with_numpy(rng):
    z = _z(rng, (4, 5)) * np.logspace(-3, 3, 5)  # small to large moduli
    z[0, 0] = 0
    x = tf.constant(cvk.to_stacked(z))
    for scaled in (False, True):
        magnitude, phase = cx.modulus_and_sign(x, scaled=scaled)
        np.testing.assert_allclose(magnitude, np.abs(z), rtol=1e-6)
        expected = np.where(np.abs(z) > 0, z / np.maximum(np.abs(z), 1e-300), 0)
        np.testing.assert_allclose(
            cvk.from_stacked(phase), expected, rtol=1e-6, atol=1e-7
        )


def test_scaled_modulus_has_zero_gradient_at_zero():
    x = tf.constant([[0.0, 3.0, 0.0, -4.0]])  # z = [0, 3 - 4i]
    with tf.GradientTape() as tape:
        tape.watch(x)
        magnitude, phase = cx.modulus_and_sign(x, scaled=True)
        loss = tf.reduce_sum(magnitude) + tf.reduce_sum(phase)
    grad = tape.gradient(loss, x).numpy()
    assert np.all(np.isfinite(grad))
    assert grad[0, 0] == 0 and grad[0, 2] == 0
    np.testing.assert_allclose(magnitude, [[0.0, 5.0]])
