"""Positional encodings for stacked complex sequences `(B, T, ..., 2E)`."""

import keras
from keras import ops

from cvattn_keras import _validation as check
from cvattn_keras import complex as cx


def _check_wavelength(max_wavelength):
    return check.greater_than(max_wavelength, "max_wavelength", bound=1.0)


def sinusoidal_encoding(length, features, max_wavelength=10000.0, start=0):
    """The reference's real encoding `(length, features)`, float32:
    `PE[p, 2j] = sin(p / w^(j / (E/2)))`, `PE[p, 2j+1] = cos(...)`,
    positions from `start` (Vaswani et al., 2017)."""
    # dtype given: Keras' torch backend cannot infer it from a symbolic
    # length (a SymInt under torch.export).
    positions = ops.cast(ops.arange(length, dtype="int32"), "float32")
    positions = positions + ops.cast(start, "float32")  # (T,)
    index = ops.arange(features)  # (E,)
    pair = ops.cast(index // 2, "float32")
    inverse = ops.power(max_wavelength, -pair / (features / 2.0))
    angles = positions[:, None] * inverse[None, :]  # (T, E)
    is_even = ops.equal(index % 2, 0)[None, :]
    return ops.where(is_even, ops.sin(angles), ops.cos(angles))


class _PositionEncoding(keras.layers.Layer):
    """What the two encodings share: the constructor (`max_wavelength`,
    masks passed through), the check of the stacked input's shape
    (`_layout`: of rank 3 exactly, or at least 3 where it has `...`),
    the output shape and the config."""

    _layout = "(batch, length, 2E)"

    def __init__(self, max_wavelength=10000, **kwargs):
        self.max_wavelength = _check_wavelength(max_wavelength)
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        rank = len(input_shape)
        wrong_rank = rank < 3 if "..." in self._layout else rank != 3
        if wrong_rank or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects {self._layout} with a "
                f"known last axis. Received: {tuple(input_shape)}"
            )
        cx.check_even(input_shape[-1], "input_shape[-1]", input_shape)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        return {**super().get_config(), "max_wavelength": self.max_wavelength}


@keras.saving.register_keras_serializable(package="cvattn_keras")
class SinusoidalPositionalEncoding(_PositionEncoding):
    """Adds the reference's sinusoidal encoding to the real part.

    The Eilers & Jiang reference adds the real Vaswani encoding (sin and cos
    interleaved over the E complex features) to the real parts only and
    leaves the imaginary parts unchanged. For E = 4, position 1 adds
    `[0.841471, 0.540302, 0.010000, 0.999950]`.

    Args:
        max_wavelength: the base `w` of the wavelengths. Defaults to 10000.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(B, T, 2E)` stacked.

        start_index: the position of the first step (for decoding one step
            at a time). Defaults to 0.
    """

    def call(self, inputs, start_index=0):
        features = inputs.shape[-1] // 2
        encoding = sinusoidal_encoding(
            ops.shape(inputs)[1], features, self.max_wavelength, start_index
        )
        encoding = ops.cast(encoding, inputs.dtype)
        zeros = ops.zeros_like(encoding)
        return inputs + ops.concatenate([encoding, zeros], axis=-1)[None]


@keras.saving.register_keras_serializable(package="cvattn_keras")
class ComplexRotaryEmbedding(_PositionEncoding):
    """Complex rotary position encoding: feature `j` at position `p` is
    multiplied by `exp(i p theta_j)`, `theta_j = max_wavelength^(-j/E)`.

    A complex feature is already a 2-D rotation plane, so this is RoPE
    (Su et al., 2021) without pairing channels. Applied to queries and keys,
    it makes the inner-product score depend on relative position only:
    `<q_p e^{ip theta}, k_s e^{is theta}> = <q_p, k_s> e^{i(p - s) theta}`.
    Apply it to projected, per-head queries and keys `(B, T, N, 2H)` (or any
    `(B, T, ..., 2E)`): the sequence is axis 1, features the last axis.

    Args:
        max_wavelength: the base of the frequencies. Defaults to 10000.
        **kwargs: base `Layer` arguments.

    Call arguments:
        inputs: `(B, T, ..., 2E)` stacked.

        start_index: the position of the first step. Defaults to 0.
    """

    _layout = "(batch, length, ..., 2E)"

    def call(self, inputs, start_index=0):
        features = inputs.shape[-1] // 2
        length = ops.shape(inputs)[1]  # symbolic under torch.export
        positions = ops.cast(ops.arange(length, dtype="int32"), "float32")
        positions = positions + ops.cast(start_index, "float32")  # (T,)
        exponent = ops.cast(ops.arange(features), "float32") / features
        theta = ops.power(self.max_wavelength, -exponent)  # (E,)
        angles = positions[:, None] * theta[None, :]  # (T, E)
        rotation = ops.concatenate([ops.cos(angles), ops.sin(angles)], -1)
        # (T, 2E) -> (1, T, 1, ..., 2E): broadcast over batch and any axes
        # between length and features (heads).
        middle = (1,) * (len(inputs.shape) - 3)
        rotation = ops.reshape(rotation, (1, -1) + middle + (2 * features,))
        return cx.multiply(inputs, ops.cast(rotation, inputs.dtype))
