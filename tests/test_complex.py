"""Tests of the stacked layout and complex arithmetic (cvattn_keras.complex)."""

import keras
import numpy as np
import pytest
from backend_utils import gradient
from backend_utils import has_float64
from backend_utils import to_numpy
from keras import ops

import cvattn_keras as cvk
from cvattn_keras import complex as cx

tensor = ops.convert_to_tensor


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
    x = cvk.to_stacked(tensor(z))
    assert ops.is_tensor(x)
    assert keras.backend.standardize_dtype(x.dtype) == "float32"
    np.testing.assert_array_equal(cvk.from_stacked(x), z)


def test_real_input_has_zero_imaginary_part():
    np.testing.assert_array_equal(cvk.to_stacked([1.0, 2.0]), [1, 2, 0, 0])


@pytest.mark.parametrize(
    "call",
    [
        lambda: cvk.from_stacked(np.zeros((2, 3))),
        lambda: cx.split(np.zeros((4, 5))),
        lambda: cx.split(ops.zeros((4, 5))),
        lambda: cx.interleaved_to_stacked(np.zeros(3)),
        lambda: cx.stacked_to_pairs(np.zeros((2, 7))),
        lambda: cx.modulus(ops.zeros((1, 3))),
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
    re, im = cx.split(tensor(x))
    np.testing.assert_array_equal(to_numpy(re), x[:, :4])
    np.testing.assert_array_equal(to_numpy(im), x[:, 4:])
    np.testing.assert_array_equal(to_numpy(cx.merge(re, im)), x)


@pytest.mark.parametrize("as_tensor", [False, True])
def test_interleaved_and_pairs_converters(rng, as_tensor):
    z = _z(rng, (2, 3, 4))
    stacked = cvk.to_stacked(z)
    # Independent constructions of the other two layouts.
    pairs = np.stack([z.real, z.imag], axis=-1).astype("float32")
    interleaved = pairs.reshape(2, 3, 8)
    wrap = tensor if as_tensor else (lambda a: a)
    np.testing.assert_array_equal(
        to_numpy(cx.stacked_to_pairs(wrap(stacked))), pairs
    )
    np.testing.assert_array_equal(
        to_numpy(cx.pairs_to_stacked(wrap(pairs))), stacked
    )
    np.testing.assert_array_equal(
        to_numpy(cx.stacked_to_interleaved(wrap(stacked))), interleaved
    )
    np.testing.assert_array_equal(
        to_numpy(cx.interleaved_to_stacked(wrap(interleaved))), stacked
    )
    if not as_tensor:
        assert isinstance(cx.stacked_to_interleaved(stacked), np.ndarray)


def test_arithmetic_matches_numpy(rng):
    a, b = _z(rng, (5, 3)), _z(rng, (5, 3))
    xa, xb = tensor(cvk.to_stacked(a)), tensor(cvk.to_stacked(b))
    tol = dict(rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        cvk.from_stacked(cx.multiply(xa, xb)), a * b, **tol
    )
    np.testing.assert_allclose(
        cvk.from_stacked(cx.conjugate(xa)), np.conj(a), **tol
    )
    np.testing.assert_allclose(cvk.from_stacked(cx.times_i(xa)), 1j * a, **tol)
    np.testing.assert_allclose(to_numpy(cx.modulus(xa)), np.abs(a), **tol)
    np.testing.assert_allclose(
        cvk.from_stacked(cx.sign(xa)), a / np.abs(a), **tol
    )


def test_block_kernel_is_the_complex_product(rng):
    x, w = _z(rng, (4, 3)), _z(rng, (3, 5))
    kernel = cx.block_kernel(
        tensor(w.real.astype("float32")), tensor(w.imag.astype("float32"))
    )
    assert tuple(kernel.shape) == (6, 10)
    y = ops.matmul(tensor(cvk.to_stacked(x)), kernel)
    np.testing.assert_allclose(cvk.from_stacked(y), x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scaled", [True, False])
def test_modulus_and_sign_at_zero_are_zero_with_zero_gradient(scaled):
    x = np.array([[0.0, 3.0, 0.0, 4.0]], "float32")  # z = [0, 3 + 4i]
    magnitude, phase = cx.modulus_and_sign(x, scaled=scaled)
    np.testing.assert_allclose(to_numpy(magnitude), [[0.0, 5.0]])
    np.testing.assert_allclose(
        to_numpy(phase), [[0.0, 0.6, 0.0, 0.8]], atol=1e-7
    )

    def mod(x):
        return cx.modulus_and_sign(x, scaled=scaled)[0]

    def sgn(x):
        return cx.modulus_and_sign(x, scaled=scaled)[1]

    grad_m = gradient(mod, x, loss=ops.sum)
    grad_s = gradient(sgn, x, loss=ops.sum)
    assert np.all(np.isfinite(grad_m)) and np.all(np.isfinite(grad_s))
    # d|z|/d(re, im) at z = 3 + 4i is (re, im) / |z|; at z = 0 it is 0.
    np.testing.assert_allclose(grad_m, [[0.0, 0.6, 0.0, 0.8]], atol=1e-7)
    assert grad_s[0, 0] == 0 and grad_s[0, 2] == 0


def test_scaled_modulus_and_sign_agree_with_numpy(rng):
    z = _z(rng, (4, 5)) * np.logspace(-3, 3, 5)  # small to large moduli
    z[0, 0] = 0
    x = tensor(cvk.to_stacked(z))
    for scaled in (False, True):
        magnitude, phase = cx.modulus_and_sign(x, scaled=scaled)
        np.testing.assert_allclose(to_numpy(magnitude), np.abs(z), rtol=1e-6)
        expected = np.where(np.abs(z) > 0, z / np.maximum(np.abs(z), 1e-300), 0)
        np.testing.assert_allclose(
            cvk.from_stacked(phase), expected, rtol=1e-6, atol=1e-7
        )


# Issue 11, item 4: in float32 a squared modulus overflows above ~1.8e19
# and underflows below ~1e-19. The defaults (modulus, sign,
# modulus_and_sign) must be right over the whole float range.
EXTREMES = np.array(
    [[2e19, 1e-19, 3e19 + 4e19j, 3e-30 - 4e-30j, 1e38 + 1e38j, 0j]]
)


def test_modulus_and_sign_at_float32_extremes():
    x = cvk.to_stacked(EXTREMES)
    z = cvk.from_stacked(x, "complex128")  # the float32 values exactly
    # rtol 2e-7: a few float32 roundings (eps 1.2e-7) of an exact result.
    np.testing.assert_allclose(to_numpy(cx.modulus(x)), np.abs(z), rtol=2e-7)
    expected = np.where(z != 0, z / np.where(z != 0, np.abs(z), 1), 0)
    np.testing.assert_allclose(
        cvk.from_stacked(cx.sign(x), "complex128"), expected, atol=2e-7
    )
    magnitude, phase = cx.modulus_and_sign(x)
    np.testing.assert_array_equal(to_numpy(magnitude), to_numpy(cx.modulus(x)))
    grad = gradient(cx.modulus, x, loss=ops.sum)
    assert np.all(np.isfinite(grad))


@pytest.mark.parametrize("policy", ["float16", "bfloat16"])
def test_half_precision_moduli_compute_in_float32(policy):
    """|300|^2 overflows float16; |1e-4|^2 underflows it. The modulus of a
    half-precision tensor is computed in float32 and returned in the
    input's dtype (or `dtype`)."""
    z = np.array([[300 + 0j, 1e-4 + 0j, 3 + 4j]])
    x = ops.cast(cvk.to_stacked(z), policy)
    magnitude = cx.modulus(x)
    assert keras.backend.standardize_dtype(magnitude.dtype) == policy
    # rtol 8e-3: one rounding to bfloat16 (2^-8 relative) at most.
    np.testing.assert_allclose(
        to_numpy(ops.cast(magnitude, "float32")), [[300, 1e-4, 5]], rtol=8e-3
    )
    full, _ = cx.modulus_and_sign(x, dtype="float32")
    assert keras.backend.standardize_dtype(full.dtype) == "float32"


@pytest.mark.parametrize(
    "fn, expected",
    [
        (cx.modulus, [5.0, 1.0]),
        (cx.sign, [0.6, 1.0, 0.8, 0.0]),
        (cx.conjugate, [3.0, 1.0, -4.0, 0.0]),
        (cx.times_i, [-4.0, 0.0, 3.0, 1.0]),
        (lambda x: cx.multiply(x, x), [-7.0, 1.0, 24.0, 0.0]),
        (lambda x: cx.modulus_and_sign(x)[0], [5.0, 1.0]),
    ],
)
def test_arithmetic_accepts_lists_and_numpy(fn, expected):
    """Issue 11, item 13: `modulus` on a Python list was an AttributeError,
    while `split` accepts lists."""
    z = [3, 1, 4, 0]  # 3 + 4i, 1: ints, as a user would type them
    for x in (z, tuple(z), np.array(z, "float32")):
        np.testing.assert_allclose(to_numpy(fn(x)), expected, atol=1e-6)


@pytest.mark.parametrize("scaled", [True, False])
def test_modulus_and_sign_in_float64(scaled):
    """float64 in, float64 out, at float64 precision (the float32-only
    constants of the scaled division once broke this)."""
    if not has_float64():
        pytest.skip("JAX without jax_enable_x64 has no float64")
    z = np.array([[3 + 4j, 1e-200 - 2e-200j, 0, 7e150 + 1e150j]])
    x = ops.convert_to_tensor(cvk.to_stacked(z, "float64"), "float64")
    magnitude, phase = cx.modulus_and_sign(x, scaled=scaled)
    assert keras.backend.standardize_dtype(magnitude.dtype) == "float64"
    assert keras.backend.standardize_dtype(phase.dtype) == "float64"
    if scaled:  # the plain form squares: 1e-200 and 7e150 leave the range
        expected = np.abs(z)
        np.testing.assert_allclose(to_numpy(magnitude), expected, rtol=1e-15)
        sign = np.where(
            expected > 0, z / np.where(expected > 0, expected, 1), 0
        )
        np.testing.assert_allclose(
            cvk.from_stacked(to_numpy(phase), "complex128"), sign, atol=1e-15
        )
    else:
        np.testing.assert_allclose(to_numpy(magnitude)[0, 0], 5.0, rtol=1e-15)
