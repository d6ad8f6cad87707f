"""Quantization-aware training (`cvattn_keras.quantization`): the fake
quantization against a NumPy model of TensorFlow's nudged 8-bit grid, the
ranges it tracks, `quantize_model` / `strip` / `calibrate` on a small
complex model, the `.keras` round trip, the refusals, and (TensorFlow) the
integer file that takes the trained ranges.

Tolerances: the fake quantization 1e-6 absolute (float32 arithmetic on
values of order 1, against the same formula in float64); a calibrated
QAT model within 0.15 of the float model's peak (8-bit rounding at four
points compounds through the encoder: 0.09 measured on TensorFlow, 0.10
on JAX).
"""

import os
import runpy

import keras
import numpy as np
import pytest

import cvattn_keras as cvk
from cvattn_keras import layers as cl
from cvattn_keras import quantization as cq


def _nudged_fake_quant(x, low, high, bits=8):
    """TensorFlow's FakeQuantWithMinMaxVars in float64: the range widened
    to hold 0, its zero point rounded to a level, values clipped to the
    nudged range and rounded to its levels, halves up (floor(v + 0.5),
    as TensorFlow rounds)."""
    low, high = min(low, 0.0), max(high, 0.0)
    levels = 2**bits - 1
    scale = (high - low) / levels
    zero = np.clip(np.floor(-low / scale + 0.5), 0, levels)
    nudged_low, nudged_high = -zero * scale, (levels - zero) * scale
    clipped = np.clip(x, nudged_low, nudged_high)
    steps = np.floor((clipped - nudged_low) / scale + 0.5)
    return steps * scale + nudged_low


def _model():
    keras.utils.set_random_seed(0)
    x = keras.Input((6, 8))
    h = cl.ComplexDense(4)(x)
    h = cl.ComplexTransformerEncoder(2, key_dim=2)(h)
    return keras.Model(x, keras.layers.Dense(3)(h))


def _data(seed=0, count=16):
    return np.random.default_rng(seed).normal(size=(count, 6, 8))


def test_fake_quant_is_tensorflows_nudged_grid():
    layer = cq.FakeQuant()
    # Random values (a grid would put values on the levels' midpoints,
    # where float32 and float64 may round apart).
    x = np.random.default_rng(0).uniform(-3, 5, 400).astype("float32")
    layer(x[:1])  # builds
    layer.range_min.assign(-1.3)
    layer.range_max.assign(2.9)
    got = keras.ops.convert_to_numpy(layer(x))
    want = _nudged_fake_quant(x.astype("float64"), -1.3, 2.9)
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert len(np.unique(got)) <= 256
    # A range without 0 is widened to hold it.
    layer.range_min.assign(0.5)
    got = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(
        got, _nudged_fake_quant(x.astype("float64"), 0.5, 2.9), atol=1e-6
    )


def test_ranges_follow_training_batches():
    layer = cq.FakeQuant(momentum=0.75)
    first = np.array([[-2.0, 1.0, 4.0]], "float32")
    layer(first, training=True)
    assert float(layer.range_min) == -2.0 and float(layer.range_max) == 4.0
    layer(np.array([[-6.0, 0.0, 8.0]], "float32"), training=True)
    np.testing.assert_allclose(
        [float(layer.range_min), float(layer.range_max)],
        [0.75 * -2 + 0.25 * -6, 0.75 * 4 + 0.25 * 8],
        rtol=1e-6,
    )
    # Inference leaves it alone.
    layer(np.array([[-100.0, 100.0]], "float32"), training=False)
    assert float(layer.range_max) == pytest.approx(5.0)


def test_quantize_model_wraps_shares_and_strips():
    model = _model()
    qat = cq.quantize_model(model)
    assert qat.name == f"{model.name}_qat"
    wrapped = [layer for layer in qat.layers[1:]]
    assert all(isinstance(w, cq.QuantizeWrapper) for w in wrapped)
    # The weights are the float model's own.
    assert [w.layer for w in wrapped] == model.layers[1:]
    # The model's input is quantized once, by the first layer.
    assert wrapped[0].quantize_inputs == (0,)
    assert all(w.quantize_inputs == () for w in wrapped[1:])
    x = _data()
    cq.calibrate(qat, x)
    first = wrapped[0].input_quantizers[0]
    assert float(first.range_min) == pytest.approx(x.min(), rel=1e-6)
    assert float(first.range_max) == pytest.approx(x.max(), rel=1e-6)
    want = keras.ops.convert_to_numpy(model(x))
    got = keras.ops.convert_to_numpy(qat(x))
    error = np.abs(got - want).max() / np.abs(want).max()
    assert 0 < error < 0.15
    # keras.ops nodes between layers stay as they are (calibrated), and a
    # built Sequential model quantizes too.
    y = keras.Input((6, 8))
    with_ops = keras.Model(y, keras.layers.Dense(8)(y) + 0.5 * y)
    assert isinstance(cq.quantize_model(with_ops).layers[1], cq.QuantizeWrapper)
    sequential = keras.Sequential([keras.Input((6, 8)), keras.layers.Dense(3)])
    assert isinstance(
        cq.quantize_model(sequential).layers[0], cq.QuantizeWrapper
    )
    stripped = cq.strip(qat)
    assert stripped.layers[1:] == model.layers[1:]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(stripped(x)), want)


def test_a_nested_model_is_quantized_layer_by_layer():
    """A functional model called as a layer (radio.py's per-token model in
    its frame classifier) has its own layers wrapped, calibrated and
    stripped, not only its output."""
    inner = _model()
    frames = keras.Input((6, 8))
    outer = keras.Model(frames, inner(frames)[:, -1])
    qat = cq.quantize_model(outer)
    (nested,) = [
        layer for layer in qat.layers if isinstance(layer, keras.Model)
    ]
    assert nested.name == f"{inner.name}_qat"
    assert [w.layer for w in nested.layers[1:]] == inner.layers[1:]
    x = _data()
    cq.calibrate(qat, x)
    first = nested.layers[1].input_quantizers[0]
    assert float(first.range_max) == pytest.approx(x.max(), rel=1e-6)
    want = keras.ops.convert_to_numpy(outer(x))
    got = keras.ops.convert_to_numpy(qat(x))
    # The same rounding as the inner model quantized alone.
    alone = cq.calibrate(cq.quantize_model(inner), x)
    np.testing.assert_allclose(
        got, keras.ops.convert_to_numpy(alone(x))[:, -1], atol=1e-6
    )
    assert 0 < np.abs(got - want).max() < 0.15 * np.abs(want).max()
    stripped = cq.strip(qat)
    (plain,) = [
        layer for layer in stripped.layers if isinstance(layer, keras.Model)
    ]
    assert plain.layers[1:] == inner.layers[1:]
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(stripped(x)), want)


def test_a_wrapper_saved_before_the_points_rounds_outputs_only():
    """A `QuantizeWrapper` config without `num_points` (saved before the
    rounding inside the layers existed) loads and runs as then: its
    batch norm and kernels as in the float model, its output rounded."""
    model = _bn_model("trabelsi")
    inputs = _data().astype("float32")
    for layer in model.layers[1:]:
        config = cq.QuantizeWrapper(layer, name="w").get_config()
        config.pop("num_points")
        config["layer"] = layer
        old = cq.QuantizeWrapper(**config)
        assert old.num_points is None and not old.point_quantizers
        want = keras.ops.convert_to_numpy(layer(inputs))
        low, high = float(want.min()), float(want.max())
        quantizer = old.output_quantizers[0]
        quantizer.build(None)
        quantizer.range_min.assign(low)
        quantizer.range_max.assign(high)
        got = keras.ops.convert_to_numpy(old(inputs))
        inputs = want  # the float model's input to the next layer
        np.testing.assert_allclose(
            got,
            _nudged_fake_quant(want.astype("float64"), low, high),
            atol=1e-5,
        )


@pytest.mark.slow
def test_trains_and_round_trips_through_keras_file(tmp_path):
    qat = cq.quantize_model(_model())
    x, y = _data(), _data(1)[..., :3]
    before = [v.numpy().copy() for v in qat.trainable_variables]
    qat.compile(keras.optimizers.Adam(1e-2), "mse")
    history = qat.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    after = [keras.ops.convert_to_numpy(v) for v in qat.trainable_variables]
    assert any(np.abs(a - b).max() > 0 for a, b in zip(after, before))
    ranges = [
        float(q.range_max) for w in qat.layers[1:] for q in w._quantizers()
    ]
    assert all(np.isfinite(ranges)) and min(ranges) != 6.0
    path = str(tmp_path / "qat.keras")
    qat.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(x)),
        keras.ops.convert_to_numpy(qat(x)),
        atol=1e-6,
    )


def _bn_model(convention):
    """A complex model whose every weight and norm the QAT model rounds as
    its integer file does: complex dense, batch norm (trained a little,
    so that its moving statistics are not the initial ones), complex
    dense."""
    keras.utils.set_random_seed(0)
    x = keras.Input((6, 8))
    h = cl.ComplexDense(4)(x)
    h = cl.ComplexBatchNormalization(convention=convention)(h)
    model = keras.Model(x, cl.ComplexDense(2)(h))
    model.compile("adam", "mse")
    model.fit(_data(), np.zeros((16, 6, 4)), epochs=2, verbose=0)
    return model


def _file_error_in_steps(qat, data, tmp_path):
    """|file - QAT model| of a QAT model's full_int8 file (calibrated on
    `data`) on `data`, one sample a call, in steps of the output's int8
    grid (the last wrapper's output range)."""
    path = str(tmp_path / "qat.tflite")
    cvk.export.export_tflite(
        qat, path, quantization="full_int8", representative_data=data
    )
    got = np.asarray(cvk.export.predict_tflite(path, qat, data, batch_size=1))
    want = keras.ops.convert_to_numpy(qat(data))
    last = qat.layers[-1].output_quantizers[0]
    low = min(float(last.range_min), 0.0)
    step = (max(float(last.range_max), 0.0) - low) / 255
    return np.abs(got - want) / step


def _rounding_applied(layers_axes, run, weights_once):
    """`run()` within `quantization_aware` and without, then with each
    layer's kernel parts rounded in NumPy (one scale per output channel:
    `max |w| / 127` over its `axes`, `(layer, axes)` in `layers_axes`):
    `(got, float_out, want)`."""
    from cvattn_keras import _tracing

    with _tracing.for_export(weights_once=weights_once):
        with _tracing.quantization_aware(lambda t: t):
            got = keras.ops.convert_to_numpy(run())
        float_out = keras.ops.convert_to_numpy(run())
        for layer, axes in layers_axes:
            real, imag = (
                keras.ops.convert_to_numpy(w).astype("float64")
                for w in (layer.kernel_real, layer.kernel_imag)
            )
            peak = np.maximum(np.abs(real), np.abs(imag))
            scale = peak.max(axis=axes, keepdims=True) / 127
            layer.kernel_real.assign(np.round(real / scale) * scale)
            layer.kernel_imag.assign(np.round(imag / scale) * scale)
        want = keras.ops.convert_to_numpy(run())
    return got, float_out, want


def test_kernels_take_the_files_per_channel_grid():
    """Within `quantization_aware`, a complex kernel's parts are rounded
    to int8 symmetric levels with one scale per output channel over both
    parts (max |w| / 127), as the converter stores them; elsewhere they
    are unchanged."""
    from cvattn_keras import _tracing

    rng = np.random.default_rng(0)
    real, imag = rng.normal(size=(2, 5, 3, 4)).astype("float32")
    imag[..., 1] *= 10  # a channel whose scale the imaginary part sets
    tensors = [keras.ops.convert_to_tensor(part) for part in (real, imag)]
    got = _tracing.quantize_kernel(*tensors)
    assert got[0] is tensors[0] and got[1] is tensors[1]
    with _tracing.quantization_aware(lambda x: x):
        got = _tracing.quantize_kernel(*tensors)
    peak = np.maximum(np.abs(real), np.abs(imag)).max(axis=(0, 1))
    scale = peak.astype("float64") / 127
    for part, want_part in zip(got, (real, imag)):
        levels = np.round(want_part / scale)
        assert np.abs(levels).max() <= 127
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(part), levels * scale, atol=1e-6
        )


@pytest.mark.parametrize("weights_once", [False, True])
def test_conv1d_applies_the_rounded_kernel(weights_once):
    """`ComplexConv1D` within `quantization_aware` (training's block form,
    and the weights-once form of the export) computes with its kernel
    rounded to the per-channel grid: the same as the layer given that
    kernel, rounded in NumPy."""

    keras.utils.set_random_seed(0)
    layer = cl.ComplexConv1D(3, 2, padding="causal")
    x = _data()[:4]
    layer(x)
    got, float_out, want = _rounding_applied(
        [(layer, (0, 1))], lambda: layer(x), weights_once
    )
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(got - float_out).max() > 1e-4  # the rounding shows


@pytest.mark.parametrize("weights_once", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
def test_conv2d_applies_the_rounded_kernel(transposed, weights_once):
    """`ComplexConv2D` and `ComplexConv2DTranspose` within
    `quantization_aware` compute with the kernel rounded per output
    channel: the last axis of a convolution's `(kh, kw, C, F)`, axis 2 of
    a transposed convolution's `(kh, kw, F, C)` (the TFLite weights' first
    axis after the converter's transpose, where it keeps one scale per
    channel)."""

    keras.utils.set_random_seed(0)
    kind = cl.ComplexConv2DTranspose if transposed else cl.ComplexConv2D
    layer = kind(3, 2, strides=2 if transposed else 1, padding="same")
    x = np.random.default_rng(1).normal(size=(2, 4, 4, 4))
    layer(x)
    assert layer.kernel_real.shape[2 if transposed else 3] == 3  # outputs
    axes = (0, 1, 3) if transposed else (0, 1, 2)
    got, float_out, want = _rounding_applied(
        [(layer, axes)], lambda: layer(x), weights_once
    )
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(got - float_out).max() > 1e-4  # the rounding shows


@pytest.mark.parametrize("convention", ["trabelsi", "reference"])
def test_batch_norm_rounds_its_inference_ops_and_stays_frozen(
    convention, tmp_path
):
    """A batch norm inside a QAT model rounds each op of its inference
    formulation (the means' subtraction, each product of the 2x2
    whitening and scale, the bias, the concatenation: 15 points, 9 with
    the reference's composed matrix) and keeps its moving statistics in
    training (frozen, as the file's constants)."""
    model = _bn_model(convention)
    qat = cq.quantize_model(model)
    norm = qat.layers[2]
    assert norm.num_points == {"trabelsi": 15, "reference": 9}[convention]
    x = _data()
    cq.calibrate(qat, x)
    assert all(float(q.seen) > 0 for q in norm.point_quantizers)
    # Calibration sees the tensors unrounded (the kernels on their grid):
    # the last point, the norm's output, spans that output's range.
    from cvattn_keras import _tracing

    with _tracing.quantization_aware(lambda t: t):
        out = norm.layer(qat.layers[1].layer(x))
    out = keras.ops.convert_to_numpy(out)
    last = norm.point_quantizers[-1]
    assert float(last.range_min) == pytest.approx(out.min(), rel=1e-5)
    assert float(last.range_max) == pytest.approx(out.max(), rel=1e-5)
    # The norm's output is a point already: no second range there.
    assert norm.output_quantizers[0].seen.numpy() == 0
    moving = [
        v.numpy().copy()
        for v in norm.layer.non_trainable_variables
        if "moving" in v.path
    ]
    scale = [v.numpy().copy() for v in norm.layer.trainable_variables]
    assert moving and scale
    kernel_before = keras.ops.convert_to_numpy(
        qat.layers[1].layer.kernel_real
    ).copy()
    qat.compile(keras.optimizers.Adam(1e-2), "mse")
    qat.fit(x, _data(1)[..., :4], batch_size=8, epochs=1, verbose=0)
    after = [
        keras.ops.convert_to_numpy(v)
        for v in norm.layer.non_trainable_variables
        if "moving" in v.path
    ]
    for a, b in zip(after, moving):
        np.testing.assert_array_equal(a, b)
    trained = [
        keras.ops.convert_to_numpy(v) for v in norm.layer.trainable_variables
    ]
    assert any(np.abs(a - b).max() > 0 for a, b in zip(trained, scale))
    # The rounded kernels pass their gradient straight through.
    dense = qat.layers[1].layer
    assert (
        np.abs(
            keras.ops.convert_to_numpy(dense.kernel_real) - kernel_before
        ).max()
        > 0
    )
    # The points and their ranges survive a .keras round trip.
    path = str(tmp_path / "bn_qat.keras")
    qat.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.layers[2].num_points == norm.num_points
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(x)),
        keras.ops.convert_to_numpy(qat(x)),
        atol=1e-6,
    )


def test_refusals_name_the_reason():
    class Subclassed(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(ValueError, match="subclassed"):
        cq.quantize_model(Subclassed())
    x = keras.Input((4,))
    mixed = keras.Model(
        x, keras.layers.Dense(2, dtype="mixed_float16", name="half")(x)
    )
    with pytest.raises(ValueError, match="'half' computes in float16"):
        cq.quantize_model(mixed)
    qat = cq.quantize_model(_model())
    with pytest.raises(ValueError, match="quantization-aware already"):
        cq.quantize_model(qat)
    shared = keras.layers.Dense(2, name="shared")
    twice = keras.Model(x, shared(x) + shared(keras.layers.Dense(4)(x)))
    with pytest.raises(ValueError, match="'shared' is called 2 times"):
        cq.quantize_model(twice)
    for bad in (1, 17, 8.0, True):
        with pytest.raises(ValueError, match="num_bits"):
            cq.quantize_model(_model(), num_bits=bad)
    with pytest.raises(ValueError, match="momentum"):
        cq.FakeQuant(momentum=1.0)
    with pytest.raises(ValueError, match="no FakeQuant"):
        cq.calibrate(_model(), _data())

    class Framed(keras.layers.Layer):
        """A batch norm over frames that needs 2 of them."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.norm = cl.ComplexBatchNormalization()

        def call(self, x):
            if x.shape[1] is not None and x.shape[1] < 2:
                raise ValueError("needs 2 frames")
            return self.norm(x)

    frames = keras.Input((None, 8))
    with pytest.raises(ValueError, match="'framed'.*zeros of shapes"):
        cq.quantize_model(keras.Model(frames, Framed(name="framed")(frames)))


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_full_int8_file_takes_the_trained_ranges(tmp_path):
    """The file's input and output take the QAT model's ranges (its
    `FakeQuantWithMinMaxVars` ops), the tensors inside the layers the
    calibration's. Refused in a mode it was not trained for."""
    ai_edge_litert = pytest.importorskip("ai_edge_litert.interpreter")
    qat = cq.quantize_model(_model())
    x = _data().astype("float32")
    cq.calibrate(qat, x)
    path = str(tmp_path / "qat.tflite")
    # Calibration data of three times the range: where the file took it
    # (and not the trained ranges), the scales below would be 3x theirs.
    cvk.export.export_tflite(
        qat,
        path,
        quantization="full_int8",
        representative_data=3 * x,
        batch_size=1,
    )
    interpreter = ai_edge_litert.Interpreter(model_path=path)
    runner = interpreter.get_signature_runner()
    (inputs,) = runner.get_input_details().values()
    (outputs,) = runner.get_output_details().values()
    for detail, quantizer in (
        (inputs, qat.layers[1].input_quantizers[0]),
        (outputs, qat.layers[-1].output_quantizers[0]),
    ):
        low = min(float(quantizer.range_min), 0.0)
        high = max(float(quantizer.range_max), 0.0)
        scale, _ = detail["quantization"]
        assert scale == pytest.approx((high - low) / 255, rel=1e-5)
    # Calibrated on the training data, the file follows the QAT model to
    # 0.15 of its peak (the layers' inner tensors are calibrated, not
    # trained: several levels apart).
    cvk.export.export_tflite(
        qat, path, quantization="full_int8", representative_data=x
    )
    got = np.asarray(cvk.export.predict_tflite(path, qat, x, batch_size=1))
    want = keras.ops.convert_to_numpy(qat(x))
    assert np.abs(got - want).max() <= 0.15 * np.abs(want).max()
    with pytest.raises(ValueError, match="quantization-aware"):
        cvk.export.export_tflite(
            qat, str(tmp_path / "x.tflite"), quantization="int16x8"
        )


@pytest.mark.tensorflow_only
@pytest.mark.slow
@pytest.mark.parametrize("convention", ["trabelsi", "reference"])
def test_file_follows_a_model_it_rounds_everywhere(tmp_path, convention):
    """Where the QAT model rounds every tensor the file rounds (the complex
    kernels on the file's per-channel grid, the batch norm's every op),
    the full_int8 file follows it within 2 of its output's quantization
    steps (measured: 1 to 2 over 4 seeds; the file's integer kernels
    rescale with fixed-point multipliers, where the QAT model rounds in
    float32), and within one step for 98% of the outputs (measured: 98.6
    to 100%)."""
    qat = cq.quantize_model(_bn_model(convention))
    x = _data(count=64).astype("float32")
    cq.calibrate(qat, x)
    error = _file_error_in_steps(qat, x, tmp_path)
    assert error.max() <= 2.01
    assert (error > 1.01).mean() <= 0.02


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_train_music_qat_smoke(tmp_path, capsys):
    """`train_music.py --qat 1 --qat-seeds 2`: a control fine-tuned without
    fake quantization and the QAT model, each as a full_int8 file (the
    only calibrated mode asked for: none, so full_int8 alone), scored on
    LiteRT in qat_modes.md, with each arm's AP over the two seeds and
    their paired difference; the first seed's files exist and hold no
    float input."""
    from ai_edge_litert.interpreter import Interpreter

    examples = os.path.join(os.path.dirname(__file__), "..", "examples")
    main = runpy.run_path(os.path.join(examples, "train_music.py"))["main"]
    main(
        ["--smoke", "--qat", "1", "--qat-seeds", "2", "--modes", "float32"]
        + ["--output", str(tmp_path)]
    )
    out = capsys.readouterr().out
    assert "QAT model (seed 1): AP" in out
    lines = (tmp_path / "qat_modes.md").read_text().splitlines()
    rows = [line for line in lines if line.startswith("|")][2:]
    names = [row.split("|")[1].strip() for row in rows]
    assert names == ["fine-tuned full_int8", "QAT full_int8"]
    for row in rows:
        assert 0 <= float(row.split("|")[4]) <= 1, row
    summary = lines[len(rows) + 3 :]
    assert summary[0].startswith("full_int8 files, held-out AP over 2 seed")
    for line, label in zip(summary[1:3], ("fine-tuned", "QAT")):
        mean, std = line.split(":")[1].split("+-")
        assert line.strip().startswith(label)
        assert 0 <= float(mean) <= 1 and float(std) >= 0, line
    assert "paired by seed" in summary[3] and "95% t interval" in summary[3]
    for name in ("finetuned", "qat"):
        path = tmp_path / f"music_classifier_{name}_full_int8.tflite"
        details = Interpreter(model_path=str(path)).get_input_details()
        assert [d["dtype"].__name__ for d in details] == ["int8"]


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_file_follows_a_2d_convolution_model_within_one_step(tmp_path):
    """Complex 2-D convolutions, a transposed one between them (the U-Net's
    layers): with their kernels on the file's per-channel grid (a
    transposed kernel's on its axis 2), the full_int8 file follows the
    QAT model within one step of its output's grid (measured: 1.00 over 3
    seeds; 2.00 on 2 of them with the transposed kernel's scales taken on
    the wrong axis)."""
    keras.utils.set_random_seed(0)
    x = keras.Input((8, 8, 4))
    h = cl.ComplexConv2D(3, 3, strides=2, padding="same")(x)
    h = cl.ComplexConv2DTranspose(4, 2, strides=2, padding="same")(h)
    model = keras.Model(x, cl.ComplexConv2D(2, 3, padding="same")(h))
    qat = cq.quantize_model(model)
    data = np.random.default_rng(0).normal(size=(64, 8, 8, 4))
    data = data.astype("float32")
    cq.calibrate(qat, data)
    error = _file_error_in_steps(qat, data, tmp_path)
    assert error.max() <= 1.01


def test_front_end_and_encoder_round_their_inner_tensors():
    """A QAT model rounds inside the front end (each convolution's output,
    each activation's but the last, and its batch norms' 9 points each)
    and inside a transformer block (each norm's output, each sublayer's
    output and residual sum, the feed-forward's hidden layer and its
    activation: 8 points, pre- or post-norm): `calibrate` gives each of
    those ranges data."""
    keras.utils.set_random_seed(0)
    x = keras.Input((6, 32))
    h = cl.ComplexFrequencyFrontEnd(
        filters=(2, 4), kernel_sizes=(3, 3), strides=(2, 2)
    )(x)
    h = cl.ComplexDense(8)(h)
    h = cl.ComplexTransformerEncoder(2, key_dim=4, intermediate_dim=16)(h)
    h = cl.ComplexTransformerEncoder(
        2, key_dim=4, intermediate_dim=16, norm_first=True
    )(h)
    qat = cq.quantize_model(keras.Model(x, cl.ComplexDense(2)(h)))
    wrappers = [w for w in qat.layers if isinstance(w, cq.QuantizeWrapper)]
    # front end: 2 convolutions + 1 activation + 2 batch norms of the
    # reference convention (the front end's default), 9 points each.
    assert [w.num_points for w in wrappers] == [2 + 1 + 2 * 9, 0, 8, 8, 0]
    data = np.random.default_rng(0).normal(size=(16, 6, 32))
    cq.calibrate(qat, data)
    for wrapper in wrappers:
        for quantizer in wrapper.point_quantizers:
            # Seen, and set from data (not the initial [-6, 6]; an
            # untrained batch norm's off-diagonal products are all 0).
            low, high = float(quantizer.range_min), float(quantizer.range_max)
            assert float(quantizer.seen) > 0, (wrapper.name, quantizer.name)
            assert low <= high and (low, high) != (-6.0, 6.0)
    # The outputs of the post-norm block and the pre-norm block are their
    # last points (a norm's output, a residual sum): no second range.
    post, pre = wrappers[2], wrappers[3]
    assert float(post.output_quantizers[0].seen) == 0
    assert float(pre.output_quantizers[0].seen) == 0


@pytest.mark.tensorflow_only
@pytest.mark.slow
def test_file_follows_the_front_end_within_four_steps(tmp_path):
    """The front end with its convolutions' and activations' outputs
    rounded (besides its kernels and batch norms): its full_int8 file
    follows the QAT model within 4 steps of the output's grid, 0.83 on
    average (measured over 3 seeds: max 4, mean 0.66 to 0.83; without
    those points max 5 to 8, mean 1.04 to 1.31)."""
    keras.utils.set_random_seed(0)
    x = keras.Input((6, 32))
    h = cl.ComplexFrequencyFrontEnd(
        filters=(2, 4), kernel_sizes=(3, 3), strides=(2, 2)
    )(x)
    h = cl.ComplexDense(8)(h)
    model = keras.Model(x, cl.ComplexDense(2)(h))
    data = np.random.default_rng(0).normal(size=(64, 6, 32))
    data = data.astype("float32")
    model.compile("adam", "mse")
    model.fit(data, np.zeros((64, 6, 4)), epochs=2, verbose=0)
    qat = cq.quantize_model(model)
    cq.calibrate(qat, data)
    error = _file_error_in_steps(qat, data, tmp_path)
    assert error.max() <= 4.01
    assert error.mean() <= 0.9


@pytest.mark.parametrize("weights_once", [False, True])
def test_attention_projects_with_rounded_kernels(weights_once):
    """`ComplexMultiHeadAttention`'s query, key, value and output
    projections within `quantization_aware` use their kernels on the
    file's per-channel grid (the dense's last axis, before the heads'
    reshape): the same as the layer given those kernels, rounded in
    NumPy."""

    keras.utils.set_random_seed(0)
    layer = cl.ComplexMultiHeadAttention(2, key_dim=3)
    x = np.random.default_rng(1).normal(size=(2, 5, 8))
    layer(x, x)
    denses = [
        layer.query_dense,
        layer.key_dense,
        layer.value_dense,
        layer.output_dense,
    ]
    got, float_out, want = _rounding_applied(
        [(dense, 0) for dense in denses], lambda: layer(x, x), weights_once
    )
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(got - float_out).max() > 1e-4  # the rounding shows


def test_a_tensor_is_rounded_once():
    """Within `quantization_aware`, `quantize` of a tensor that a point
    returned already returns it as it is (a tensor rounded twice would
    have two ranges in the file)."""
    from cvattn_keras import _tracing

    calls = []

    def hook(x):
        calls.append(x)
        return x * 1.0

    x = keras.ops.ones((2,))
    with _tracing.quantization_aware(hook):
        y = _tracing.quantize(x)
        assert _tracing.quantize(y) is y
        assert _tracing.quantize(x) is y  # the same tensor, one range
        _tracing.quantize(x + 1.0)
    assert len(calls) == 2
    # A hook that returns its input (the dry run that counts the points,
    # `calibrate`) sees the same points.
    calls.clear()
    with _tracing.quantization_aware(lambda t: calls.append(t) or t):
        h = x * 2.0
        _tracing.quantize(h) + _tracing.quantize(h)
        _tracing.quantize(x + 1.0)
    assert len(calls) == 2
