"""Tests of ComplexConv2D and ComplexConv2DTranspose against NumPy
complex128 convolutions written here: a window sum for the convolution, a
scatter-add for the transposed one (Keras' Conv2D and Conv2DTranspose
arithmetic, padding and output sizes).

Tolerances: float32 outputs of order 1 that sum at most a few dozen
products, checked against complex128 at 1e-5 absolute (a few float32
ulps per term; measured at most about 1e-6 for every form)."""

import keras
import numpy as np
import numpy_reference as ref
import pytest
from backend_utils import compiled
from backend_utils import to_numpy
from backend_utils import value_and_gradients
from keras import ops

import cvattn_keras as cvk
from cvattn_keras import _tracing
from cvattn_keras.layers import ComplexConv2D
from cvattn_keras.layers import ComplexConv2DTranspose

ATOL = 1e-5  # float32 against complex128, see the module docstring


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


def _spans(kernel_shape, dilation):
    return [d * (k - 1) + 1 for k, d in zip(kernel_shape, dilation)]


def _numpy_conv2d(x, kernel, bias, strides, dilation, padding):
    """x (B, H, W, C), kernel (kh, kw, C, F) complex: Keras Conv2D's
    cross-correlation, "same" padding split as TensorFlow does (the
    extra pixel after)."""
    strides, dilation = _pair(strides), _pair(dilation)
    spans = _spans(kernel.shape[:2], dilation)
    if padding == "same":
        pads = []
        for size, stride, span in zip(x.shape[1:3], strides, spans):
            total = max((-(-size // stride) - 1) * stride + span - size, 0)
            pads.append((total // 2, total - total // 2))
        x = np.pad(x, ((0, 0), *pads, (0, 0)))
    rows, cols = [
        (size - span) // stride + 1
        for size, span, stride in zip(x.shape[1:3], spans, strides)
    ]
    y = np.zeros((x.shape[0], rows, cols, kernel.shape[-1]), complex)
    for p in range(rows):
        for q in range(cols):
            top, left = p * strides[0], q * strides[1]
            window = x[
                :,
                top : top + spans[0] : dilation[0],
                left : left + spans[1] : dilation[1],
            ]  # (B, kh, kw, C)
            y[:, p, q] = np.einsum("bhwc,hwcf->bf", window, kernel)
    return y + bias


def _numpy_conv2d_transpose(
    x, kernel, bias, strides, dilation, padding, output_padding
):
    """x (B, H, W, C), kernel (kh, kw, F, C) complex (Keras' layout):
    Conv2DTranspose as a scatter-add. Input pixel (i, j) adds
    x[i, j] W[a, b] to the uncropped output's pixel (i s_h + a d_h,
    j s_w + b d_w); Keras' output size and TensorFlow's crop (half the
    excess before, rounded down) place the output in it."""
    strides, dilation = _pair(strides), _pair(dilation)
    extras = (None, None) if output_padding is None else _pair(output_padding)
    spans = _spans(kernel.shape[:2], dilation)
    sizes, crops = [], []
    for size, stride, span, extra in zip(x.shape[1:3], strides, spans, extras):
        full = (size - 1) * stride + span
        if padding == "valid":
            extra = max(span, stride) - span if extra is None else extra
            sizes.append(full + extra)
            crops.append(0)
        else:
            out = size * stride if extra is None else full - span + span % 2
            out += 0 if extra is None else extra
            sizes.append(out)
            crops.append(max(full - out, 0) // 2)
    y = np.zeros((x.shape[0], *sizes, kernel.shape[2]), complex)
    for i in range(x.shape[1]):
        for j in range(x.shape[2]):
            for a in range(kernel.shape[0]):
                for b in range(kernel.shape[1]):
                    r = i * strides[0] + a * dilation[0] - crops[0]
                    c = j * strides[1] + b * dilation[1] - crops[1]
                    if 0 <= r < sizes[0] and 0 <= c < sizes[1]:
                        y[:, r, c] += x[:, i, j] @ kernel[a, b].T
    return y + bias


def _complex(layer, kind):
    real = to_numpy(getattr(layer, f"{kind}_real"))
    return real + 1j * to_numpy(getattr(layer, f"{kind}_imag"))


def _random_weights(layer, shape, rng):
    """Builds `layer` for inputs of `shape` and sets its weights from
    `rng` (standard normal, scaled by the kernel's fan-in): faster than
    the initializers under JAX, which compile their random draws for
    every new shape."""
    layer.build(shape)
    fan_in = np.prod(layer.kernel_real.shape[:-1])
    layer.set_weights(
        [
            rng.standard_normal(w.shape) * (fan_in**-0.5 if w.ndim > 1 else 1)
            for w in layer.weights
        ]
    )
    return layer


def _every_form(make, x, rng):
    """The outputs of the block and Gauss forms, and of the weights-once
    form traced for export, of layers `make(form)` sharing one set of
    random weights, as complex128."""
    block = _random_weights(make("block"), x.shape, rng)
    outputs = {"block": block(x)}
    with _tracing.for_export():
        outputs["once"] = block(x)
    gauss = make("gauss")
    gauss.build(x.shape)
    gauss.set_weights(block.get_weights())
    outputs["gauss"] = gauss(x)
    return block, {
        form: cvk.from_stacked(to_numpy(y), "complex128")
        for form, y in outputs.items()
    }


CONV_CASES = [
    # (kernel_size, strides, dilation_rate, padding, image (H, W))
    (3, 1, 1, "valid", (7, 6)),
    ((3, 2), (2, 1), 1, "same", (7, 6)),
    ((2, 3), 1, (2, 1), "valid", (6, 7)),
    (3, (2, 3), 1, "valid", (8, 9)),
    ((1, 3), 1, (1, 2), "same", (5, 6)),
    ((4, 2), 3, 1, "same", (7, 5)),
]


@pytest.mark.parametrize(
    "kernel_size, strides, dilation, padding, image", CONV_CASES
)
def test_conv_matches_numpy_in_every_form(
    rng, kernel_size, strides, dilation, padding, image
):
    x = ref.random_complex(rng, (2, *image, 3))
    stacked = cvk.to_stacked(x)

    def make(form):
        return ComplexConv2D(
            4,
            kernel_size,
            strides=strides,
            padding=padding,
            dilation_rate=dilation,
            kernel_initializer="zeros",
            complex_matmul=form,
        )

    layer, outputs = _every_form(make, stacked, rng)
    assert layer.kernel_real.shape == _pair(kernel_size) + (3, 4)
    assert layer.bias_imag.shape == (4,)
    expected = _numpy_conv2d(
        x,
        _complex(layer, "kernel"),
        _complex(layer, "bias"),
        strides,
        dilation,
        padding,
    )
    assert layer.compute_output_shape(stacked.shape) == expected.shape[:3] + (
        8,
    )
    for form, y in outputs.items():
        assert y.shape == expected.shape, form
        np.testing.assert_allclose(y, expected, atol=ATOL, err_msg=form)


TRANSPOSE_CASES = [
    # (kernel_size, strides, padding, output_padding, dilation, image)
    (3, 1, "valid", None, 1, (4, 5)),
    (3, 2, "same", None, 1, (4, 5)),
    ((3, 2), (2, 3), "valid", None, 1, (3, 4)),
    ((2, 3), 2, "same", 1, 1, (3, 4)),
    (2, (3, 2), "valid", (2, 1), 1, (3, 2)),
    ((1, 2), 3, "valid", None, 1, (2, 3)),  # stride > kernel: zero rows
    ((3, 2), 1, "same", None, (2, 1), (5, 4)),
    (4, (2, 3), "same", (1, 2), 1, (3, 3)),
    (3, (2, 3), "same", (0, 1), 1, (3, 3)),
]


@pytest.mark.parametrize(
    "kernel_size, strides, padding, output_padding, dilation, image",
    TRANSPOSE_CASES,
)
def test_transpose_matches_numpy_in_every_form(
    rng, kernel_size, strides, padding, output_padding, dilation, image
):
    x = ref.random_complex(rng, (2, *image, 3))
    stacked = cvk.to_stacked(x)

    def make(form):
        return ComplexConv2DTranspose(
            4,
            kernel_size,
            strides=strides,
            padding=padding,
            output_padding=output_padding,
            dilation_rate=dilation,
            kernel_initializer="zeros",
            complex_matmul=form,
        )

    layer, outputs = _every_form(make, stacked, rng)
    assert layer.kernel_real.shape == _pair(kernel_size) + (4, 3)  # Keras'
    expected = _numpy_conv2d_transpose(
        x,
        _complex(layer, "kernel"),
        _complex(layer, "bias"),
        strides,
        dilation,
        padding,
        output_padding,
    )
    # The sizes are Keras' Conv2DTranspose's.
    real = keras.layers.Conv2DTranspose(
        4,
        kernel_size,
        strides=strides,
        padding=padding,
        output_padding=output_padding,
        dilation_rate=dilation,
    )
    assert tuple(real.compute_output_shape(x.shape)) == expected.shape
    assert layer.compute_output_shape(stacked.shape) == expected.shape[:3] + (
        8,
    )
    for form, y in outputs.items():
        assert y.shape == expected.shape, form
        np.testing.assert_allclose(y, expected, atol=ATOL, err_msg=form)


@pytest.mark.parametrize("cls", [ComplexConv2D, ComplexConv2DTranspose])
def test_unknown_height_and_width(rng, cls):
    """`(None, None)` images: the symbolic shape keeps them unknown, and
    one model takes two sizes, with the eager shapes its
    `compute_output_shape` gives."""
    layer = cls(2, (3, 2), strides=(1, 2), padding="same")
    inputs = keras.Input((None, None, 6))
    outputs = layer(inputs)
    assert tuple(outputs.shape) == (None, None, None, 4)
    model = keras.Model(inputs, outputs)
    for image in ((5, 7), (4, 4)):
        x = cvk.to_stacked(ref.random_complex(rng, (1, *image, 3)))
        y = model(x)
        assert tuple(y.shape) == layer.compute_output_shape(x.shape)


CONV_ARGUMENTS = [
    (dict(filters=0, kernel_size=3), "filters=0"),
    (dict(filters=2, kernel_size=0), "kernel_size=0"),
    (dict(filters=2, kernel_size=(3, 0)), "kernel_size=\\(3, 0\\)"),
    (dict(filters=2, kernel_size=(3, 3, 3)), "kernel_size=\\(3, 3, 3\\)"),
    (dict(filters=2, kernel_size=2.5), "kernel_size=2.5"),
    (dict(filters=2, kernel_size="3"), "kernel_size='3'"),
    (dict(filters=2, kernel_size=True), "kernel_size=True"),
    (dict(filters=2, kernel_size=3, strides=(1, -1)), "strides=\\(1, -1\\)"),
    (dict(filters=2, kernel_size=3, dilation_rate=0), "dilation_rate=0"),
    (dict(filters=2, kernel_size=3, padding="full"), "padding='full'"),
    (dict(filters=2, kernel_size=3, padding="causal"), "padding='causal'"),
    (
        dict(filters=2, kernel_size=3, strides=(1, 2), dilation_rate=(2, 1)),
        "dilation_rate=\\(2, 1\\)",
    ),
    (dict(filters=2, kernel_size=3, complex_matmul="x"), "complex_matmul='x'"),
    (
        dict(filters=2, kernel_size=3, kernel_initializer="nope"),
        "kernel_initializer='nope'",
    ),
]


@pytest.mark.parametrize("cls", [ComplexConv2D, ComplexConv2DTranspose])
def test_padding_in_any_case(cls):
    """As Keras' Conv2D (and the pooling layers): "SAME" is "same"."""
    layer = cls(2, 3, padding="SAME")
    assert layer.padding == "same" and layer.get_config()["padding"] == "same"


@pytest.mark.parametrize("kwargs, match", CONV_ARGUMENTS)
@pytest.mark.parametrize("cls", [ComplexConv2D, ComplexConv2DTranspose])
def test_bad_arguments(cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        cls(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(output_padding=-1), "output_padding=-1"),
        (dict(output_padding=(1, 2, 3)), "output_padding=\\(1, 2, 3\\)"),
        (dict(output_padding=1), "output_padding=\\(1, 1\\), strides"),
        (dict(strides=(2, 3), output_padding=(1, 3)), "output_padding"),
        # "same", an even kernel and no extra row: H' = (H - 1) s, which
        # TensorFlow's kernel rejects.
        (
            dict(
                kernel_size=(3, 2), strides=2, padding="same", output_padding=0
            ),
            "output_padding=\\(0, 0\\), kernel_size=\\(3, 2\\)",
        ),
    ],
)
def test_bad_output_padding(kwargs, match):
    kwargs = {"kernel_size": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        ComplexConv2DTranspose(2, **kwargs)
    # Not an argument of the convolution: Keras' base layer refuses it.
    with pytest.raises(ValueError, match="output_padding"):
        ComplexConv2D(2, 3, output_padding=0)


@pytest.mark.parametrize("cls", [ComplexConv2D, ComplexConv2DTranspose])
def test_odd_channels_and_rank(cls):
    with pytest.raises(ValueError, match="input_shape\\[-1\\]=5"):
        cls(2, 1)(np.zeros((1, 4, 4, 5), "float32"))
    with pytest.raises(ValueError, match="batch, height, width"):
        cls(2, 1).build((1, 4, 6))
    with pytest.raises(ValueError, match="known last axis"):
        cls(2, 1).build((1, 4, 4, None))


@pytest.mark.parametrize(
    "image, kernel_size, dilation, text",
    [
        ((2, 5), 3, 1, "3 x 3 pixels.*an image of 2 x 5"),
        ((5, 2), (1, 3), 1, "1 x 3 pixels.*an image of 5 x 2"),
        ((4, 9), (3, 2), (2, 1), "5 x 2 pixels.*an image of 4 x 9"),
    ],
)
def test_valid_image_smaller_than_the_kernel(
    image, kernel_size, dilation, text
):
    """A ValueError naming the image and the dilated kernel: when built
    symbolically, in `compute_output_shape`, eagerly (nothing built), and
    for a size known only when a variable-size model is called."""

    def make():
        return ComplexConv2D(2, kernel_size, dilation_rate=dilation)

    shape = (1, *image, 4)
    with pytest.raises(ValueError, match=text):
        make()(keras.Input(shape[1:]))
    with pytest.raises(ValueError, match=text):
        make().compute_output_shape(shape)
    layer = make()
    with pytest.raises(ValueError, match=text):
        layer(np.zeros(shape, "float32"))
    assert not layer.weights
    inputs = keras.Input((None, None, 4))
    model = keras.Model(inputs, make()(inputs))
    with pytest.raises(ValueError, match=text):
        model(np.zeros(shape, "float32"))
    # "same" takes any size; so does the transposed convolution.
    assert (
        ComplexConv2D(2, kernel_size, padding="same")(
            np.zeros(shape, "float32")
        ).shape[1:3]
        == image
    )
    ComplexConv2DTranspose(2, kernel_size)(np.zeros(shape, "float32"))


def test_config_and_keras_file(rng, tmp_path):
    """Every argument in the config (tuples, regularizers, the form),
    and a model of both layers loads from a `.keras` file with
    `safe_mode=True`, computing the same."""
    conv = ComplexConv2D(
        3,
        (3, 2),
        strides=(2, 1),
        padding="same",
        kernel_regularizer="l2",
        bias_initializer="random_normal",
        complex_matmul="gauss",
        name="conv",
    )
    up = ComplexConv2DTranspose(
        2,
        (2, 3),
        strides=(2, 1),
        padding="same",
        output_padding=(1, 0),
        use_bias=False,
        name="up",
    )
    for layer in (conv, up):
        clone = type(layer).from_config(layer.get_config())
        assert clone.get_config() == layer.get_config()
    config = up.get_config()
    assert config["output_padding"] == (1, 0) and config["strides"] == (2, 1)
    assert "output_padding" not in conv.get_config()
    inputs = keras.Input((6, 5, 4))
    model = keras.Model(inputs, up(conv(inputs)))
    x = cvk.to_stacked(ref.random_complex(rng, (2, 6, 5, 2)))
    expected = to_numpy(model(x))
    path = tmp_path / "conv2d.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(to_numpy(loaded(x)), expected)
    layer = loaded.get_layer("up")
    assert isinstance(layer, ComplexConv2DTranspose)
    assert layer.bias_real is None and layer.output_padding == (1, 0)
    assert loaded.get_layer("conv").complex_matmul == "gauss"


@pytest.mark.skipif(
    keras.backend.backend() == "torch", reason="no XLA on the torch backend"
)
def test_compiles_under_xla(rng):
    """A forward pass compiled by XLA equals the eager one (rounding
    only: XLA may reorder the float32 sums), and `fit` compiles with
    `jit_compile=True`."""
    inputs = keras.Input((6, 6, 4))
    x = ComplexConv2D(3, 3, strides=2, padding="same")(inputs)
    x = ComplexConv2D(3, 3, padding="same", complex_matmul="gauss")(x)
    outputs = ComplexConv2DTranspose(2, 3, strides=2, padding="same")(x)
    model = keras.Model(inputs, outputs)
    data = cvk.to_stacked(ref.random_complex(rng, (4, 6, 6, 2)))
    eager = to_numpy(model(data))
    xla = to_numpy(compiled(model)(data))
    np.testing.assert_allclose(xla, eager, rtol=1e-5, atol=1e-6)
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    history = model.fit(data, np.zeros_like(data), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("cls", [ComplexConv2D, ComplexConv2DTranspose])
@pytest.mark.parametrize("form", ["block", "gauss"])
def test_mixed_precision(rng, policy, cls, form):
    """Outputs in the compute dtype, variables float32, values those of
    float32 within the half type's rounding: 2^-11 (float16) or 2^-8
    (bfloat16) relative per operand, after sums of 12 products of
    order-1 terms about 2e-2 of the output's scale in bfloat16; 3e-2
    covers both."""
    x = cvk.to_stacked(ref.random_complex(rng, (2, 5, 4, 2)))
    options = dict(strides=(1, 2), padding="same", kernel_initializer="zeros")
    reference = _random_weights(cls(3, (2, 3), **options), x.shape, rng)
    expected = to_numpy(reference(x))
    layer = cls(3, (2, 3), complex_matmul=form, dtype=policy, **options)
    layer.build(x.shape)
    layer.set_weights(reference.get_weights())
    y = layer(x)
    compute = policy.split("_")[1]
    assert keras.backend.standardize_dtype(y.dtype) == compute
    assert {
        keras.backend.standardize_dtype(w.dtype) for w in layer.weights
    } == {"float32"}
    y = to_numpy(ops.cast(y, "float32"))
    scale = np.abs(expected).max()
    np.testing.assert_allclose(y, expected, atol=3e-2 * scale)


@pytest.mark.parametrize("cls", [ComplexConv2D, ComplexConv2DTranspose])
@pytest.mark.parametrize("form", ["block", "gauss"])
def test_zero_input_gives_finite_gradients(rng, cls, form):
    """A zero image: output the bias, finite gradients with respect to
    the input and every weight (the kernels' gradients are zero: they
    multiply zeros)."""
    layer = cls(
        2,
        3,
        strides=2,
        padding="same",
        kernel_initializer="zeros",
        complex_matmul=form,
    )
    x = np.zeros((1, 4, 5, 6), "float32")
    _random_weights(layer, x.shape, rng)
    for bias in (layer.bias_real, layer.bias_imag):
        bias.assign(np.ones(bias.shape, "float32"))
    y, grad_x, grads = value_and_gradients(layer, x, layer=layer)
    np.testing.assert_array_equal(y, np.ones_like(y))
    assert np.isfinite(grad_x).all() and np.abs(grad_x).max() > 0
    assert len(grads) == 4
    assert all(np.isfinite(g).all() for g in grads)
    np.testing.assert_array_equal(grads[0], 0.0)  # kernel_real
    np.testing.assert_array_equal(grads[1], 0.0)  # kernel_imag
