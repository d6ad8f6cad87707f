"""How the layers trace their graph: for training and inference (the
default), or for a TFLite file.

`cvattn_keras.export` traces models inside `for_export`. The layers then
pick formulations that compute the same numbers but suit the converter and
the integer kernels:

- `weights_once()`: complex kernels are applied so that the converter keeps
  `W_r` and `W_i` once, instead of folding them into a block kernel
  `[[W_r, W_i], [-W_i, W_r]]` that stores every real weight twice.
- `plain_statistics()`: the normalizations compute their statistics
  without the power-of-two rescaling that guards float training against
  overflow (its CEIL / FLOOR / POW ops have no integer kernels); only for
  the calibrated modes, whose ranges are bounded by calibration anyway.

- `exporting()`: True throughout `for_export`; complex products then
  never take Gauss's three-product form (`complex.use_gauss`).
- `float_activations()`: False for the calibrated (integer) modes: a
  `ComplexSTFT` keeps its FFT (the builtin RFFT2D) only in float files.
- `float16_weights()`: True for float16 files, whose converter stores
  every float constant in float16: a `ComplexSTFT` on RFFT2D then stores
  its window in two float16-exact parts, to compute in float32.
- `lookup_masks()`: masks become 0/1 multipliers by a table lookup
  (`GATHER` of `[0, 1]` at the mask cast to int32) instead of a select
  (`SELECT_V2`), which TFLite's 16-bit activation mode lacks; only for
  int16x8 files (the GPU delegate takes 1-D gather indices only).

Quantization-aware training (`cvattn_keras.quantization`) has its own
context, `quantization_aware(hook)`, in which the layers trace their
integer formulation (`plain_statistics()` True, batch norms on their
moving statistics) and pass every tensor that an integer file rounds
through `quantize(x)`, which calls `hook`; elsewhere `quantize` returns
its argument.

Outside `for_export` all are False but `float_activations()`. Masking has
its own, public, context: `cvattn_keras.attention.portable_masking`, which
`for_export` does not set.
"""

import contextlib
import contextvars

_EXPORTING = contextvars.ContextVar("exporting", default=False)
_WEIGHTS_ONCE = contextvars.ContextVar("weights_once", default=False)
_PLAIN_STATISTICS = contextvars.ContextVar("plain_statistics", default=False)
_LOOKUP_MASKS = contextvars.ContextVar("lookup_masks", default=False)
_FLOAT_ACTIVATIONS = contextvars.ContextVar("float_activations", default=True)
_FLOAT16_WEIGHTS = contextvars.ContextVar("float16_weights", default=False)
# False within `cvattn_keras.attention.portable_masking` (public, set by the
# exporter): masked scores are then never filled with a constant near the
# float limit, and negations are products with -1 (`complex.negative`).
_FILL_MASKED = contextvars.ContextVar("fill_masked", default=True)
# The fake quantization of `quantization.QuantizeWrapper` (None outside it).
_QUANTIZE = contextvars.ContextVar("quantize", default=None)


def exporting():
    """Whether the layers trace for a TFLite file (inside `for_export`):
    they then keep the block or weights-once forms of complex products,
    never Gauss's three-product form (`complex.use_gauss`)."""
    return _EXPORTING.get()


def weights_once():
    """Whether complex kernels should be applied without a block kernel."""
    return _WEIGHTS_ONCE.get()


def plain_statistics():
    """Whether normalizations should skip their power-of-two rescaling."""
    return _PLAIN_STATISTICS.get()


def float_activations():
    """Whether the file being traced computes in float (float32, float16
    and dynamic_int8 files; False for the calibrated, integer modes):
    `ComplexSTFT(implementation="fft")` may then keep its FFT (RFFT2D)."""
    return _FLOAT_ACTIVATIONS.get()


def float16_weights():
    """Whether the file being traced stores its float constants in
    float16 (float16 files)."""
    return _FLOAT16_WEIGHTS.get()


def fill_masked():
    """Whether masked scores may be filled with a constant near the float
    limit (False within `attention.portable_masking`)."""
    return _FILL_MASKED.get()


def portable():
    """Whether `attention.portable_masking` is in effect."""
    return not _FILL_MASKED.get()


def lookup_masks():
    """Whether masks should become 0/1 by a table lookup (int16x8 files)."""
    return _LOOKUP_MASKS.get()


@contextlib.contextmanager
def for_export(
    plain_statistics=False,
    weights_once=True,
    lookup_masks=False,
    float_activations=True,
    float16_weights=False,
):
    """Within this context, layers trace for a TFLite file:
    `weights_once()` is `weights_once`, `plain_statistics()` is
    `plain_statistics`, `lookup_masks()` is `lookup_masks`,
    `float_activations()` is `float_activations` and `float16_weights()`
    is `float16_weights`."""
    tokens = (
        _WEIGHTS_ONCE.set(bool(weights_once)),
        _PLAIN_STATISTICS.set(bool(plain_statistics)),
        _EXPORTING.set(True),
        _LOOKUP_MASKS.set(bool(lookup_masks)),
        _FLOAT_ACTIVATIONS.set(bool(float_activations)),
        _FLOAT16_WEIGHTS.set(bool(float16_weights)),
    )
    try:
        yield
    finally:
        _FLOAT16_WEIGHTS.reset(tokens[5])
        _FLOAT_ACTIVATIONS.reset(tokens[4])
        _LOOKUP_MASKS.reset(tokens[3])
        _EXPORTING.reset(tokens[2])
        _PLAIN_STATISTICS.reset(tokens[1])
        _WEIGHTS_ONCE.reset(tokens[0])


def quantize(x):
    """`x` where an integer file rounds it: through the hook of
    `quantization_aware` (a `FakeQuant` of the `QuantizeWrapper` calling
    the layer), else `x` itself. (A list of tensors: see
    `quantize_concatenated`.)"""
    hook = _QUANTIZE.get()
    return x if hook is None else hook(x)


def quantize_concatenated(parts):
    """`parts` concatenated on the last axis, the result a `quantize`
    point: the parts are not points of their own, as TFLite's
    CONCATENATION keeps one scale for its inputs and output."""
    from keras import ops

    return quantize(ops.concatenate(list(parts), axis=-1))


def quantize_kernel(kernel_real, kernel_imag, axis=-1):
    """A complex kernel's parts as an integer file stores them, within
    `quantization_aware`: int8, symmetric, one scale per output channel
    (`axis`: the last, or a transposed convolution's 2) over both parts
    (`max |w| / 127`, as the converter quantizes a FULLY_CONNECTED's,
    CONV_2D's or TRANSPOSE_CONV's weights, whichever of the block or
    weights-once forms it stores), with a straight-through gradient;
    elsewhere the parts themselves."""
    if _QUANTIZE.get() is None:
        return kernel_real, kernel_imag
    from keras import ops

    rank = len(kernel_real.shape)
    axis = axis % rank
    axes = tuple(a for a in range(rank) if a != axis)
    peak = ops.maximum(
        ops.max(ops.abs(kernel_real), axis=axes, keepdims=True),
        ops.max(ops.abs(kernel_imag), axis=axes, keepdims=True),
    )
    scale = ops.maximum(peak, 1e-30) / 127.0

    def rounded(kernel):
        grid = ops.round(kernel / scale) * scale
        return kernel + ops.stop_gradient(grid - kernel)

    return rounded(kernel_real), rounded(kernel_imag)


def quantizing():
    """Whether the layers trace within `quantization_aware`: batch norms
    then use their moving statistics, in training too (frozen, as their
    integer kernels see them)."""
    return _QUANTIZE.get() is not None


@contextlib.contextmanager
def quantization_aware(hook):
    """Within this context, `quantize(x)` is `hook(x)`, and the layers
    trace their integer formulation (`plain_statistics()` is True). A
    tensor that `hook` returned already is returned as it is: a tensor
    rounded twice (a projection's output that its caller rounds again)
    would have two ranges in the file."""
    # id of a tensor passed or returned -> the rounded tensor; the keys'
    # tensors kept alive so that their ids stay theirs. Both ids count, so
    # that a hook that returns its input (a dry run, `calibrate`) and one
    # that returns a new tensor (training) see the same points.
    rounded, alive = {}, []

    def once(x):
        if id(x) in rounded:
            return rounded[id(x)]
        y = hook(x)
        rounded[id(x)] = rounded[id(y)] = y
        alive.extend((x, y))
        return y

    tokens = (_QUANTIZE.set(once), _PLAIN_STATISTICS.set(True))
    try:
        yield
    finally:
        _PLAIN_STATISTICS.reset(tokens[1])
        _QUANTIZE.reset(tokens[0])
