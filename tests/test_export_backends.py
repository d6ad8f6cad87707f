"""Export from any Keras backend (issue 9, Build item 6).

Under a backend other than TensorFlow, `export_tflite` saves the model and
converts it in a `KERAS_BACKEND=tensorflow` subprocess; the file is then
verified on LiteRT against *this* backend's model, so a file that differs
from it fails. `python -m cvattn_keras.export` works whatever
`KERAS_BACKEND` the environment sets. CI runs this file under TensorFlow
and JAX; the subprocess-route tests run where the backend is not
TensorFlow.
"""

import os
import subprocess
import sys

import keras
import numpy as np
import numpy_reference as ref
import pytest

import cvattn_keras as cvk
from cvattn_keras import attention as att
from cvattn_keras.export._subprocess import _raise_subprocess_error

pytestmark = pytest.mark.slow

BACKEND = keras.backend.backend()

other_backend_only = pytest.mark.skipif(
    BACKEND == "tensorflow",
    reason="the TensorFlow subprocess route is taken only under other backends",
)

FLOAT32_TOLERANCE = 1e-5  # as tests/test_export.py: float32 kernels
INT8_TOLERANCE = 0.15  # relative; as tests/test_export.py's int8 bound


def _all_variants_model():
    """Every softmax x product variant in one model: causal
    self-attention, then cross-attention on a `Masking`-padded memory."""
    query = keras.Input((5, 6), name="query")
    memory = keras.Input((7, 4), name="memory")
    padded = keras.layers.Masking()(memory)
    x = cvk.layers.ComplexDense(4)(query)
    for softmax in att.SOFTMAX_VARIANTS:
        for product in att.PRODUCTS:
            x = cvk.layers.ComplexMultiHeadAttention(
                2, 3, softmax=softmax, product=product
            )(x, x, use_causal_mask=True)
            x = cvk.layers.ComplexMultiHeadAttention(
                2, 3, softmax=softmax, product=product
            )(x, padded)
    return keras.Model([query, memory], cvk.layers.ComplexDense(2)(x))


def _all_variants_inputs(rng, batch=3):
    query = cvk.to_stacked(ref.random_complex(rng, (batch, 5, 3)))
    memory = cvk.to_stacked(ref.random_complex(rng, (batch, 7, 2)))
    memory[1, 4:] = 0  # padding
    memory[2] = 0  # nothing to attend to
    return [query.astype("float32"), memory.astype("float32")]


@other_backend_only
def test_export_under_this_backend_matches_its_model(rng, tmp_path):
    """The issue's example: CAtt exported under JAX differed by 4.8."""
    model = _all_variants_model()
    path = cvk.export.export_tflite(model, tmp_path / "m.tflite")
    report = cvk.export.verify_tflite(path, model, _all_variants_inputs(rng))
    assert report.builtin_only, report
    assert report.max_abs_error <= FLOAT32_TOLERANCE, report


def _masked_model():
    frames = keras.Input((6, 8), name="frames")
    padding = keras.Input((6,), dtype="bool", name="padding")
    x = cvk.layers.ComplexDense(8)(frames)
    x = cvk.layers.ComplexMultiHeadAttention(2, 4)(x, x, value_mask=padding)
    return keras.Model([frames, padding], x)


def test_int8_export_calibrates_on_a_callable_with_a_bool_input(tmp_path):
    """Under other backends the samples go to the subprocess as .npz."""
    rng = np.random.default_rng(0)
    frames = rng.standard_normal((32, 6, 8)).astype("float32")
    padding = rng.random((32, 6)) < 0.8
    padding[:, 0] = True

    def samples():  # a callable, as TFLite's converter takes
        for i in range(32):
            yield [frames[i : i + 1], padding[i : i + 1]]

    model = _masked_model()
    path = cvk.export.export_tflite(
        model,
        tmp_path / "m.tflite",
        quantization="int8",
        representative_data=samples,
        num_calibration_samples=16,
    )
    report = cvk.export.verify_tflite(path, model, [frames[:8], padding[:8]])
    assert "QUANTIZE" in report.ops  # calibrated: integer kernels in use
    assert report.max_rel_error <= INT8_TOLERANCE, report


class _Unregistered(keras.layers.Layer):
    """Not registered for serialization: the subprocess cannot load it."""

    def call(self, x):
        return x * 2.0


@other_backend_only
def test_a_model_the_subprocess_cannot_load_is_a_clear_error(tmp_path):
    inputs = keras.Input((4,), name="x")
    model = keras.Model(inputs, _Unregistered()(inputs))
    path = tmp_path / "m.tflite"
    with pytest.raises(ValueError, match="KERAS_BACKEND=tensorflow"):
        cvk.export.export_tflite(model, path)
    assert not path.exists()


@other_backend_only
def test_no_tensorflow_installed_is_a_clear_error(tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec

    def without_tensorflow(name, *args, **kwargs):
        return None if name == "tensorflow" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_tensorflow)
    inputs = keras.Input((3, 4), name="x")
    model = keras.Model(inputs, cvk.layers.ComplexDense(2)(inputs))
    with pytest.raises(ValueError, match="pip install tensorflow"):
        cvk.export.export_tflite(model, tmp_path / "m.tflite")


def test_subprocess_failures_become_the_same_errors(tmp_path):
    """What `export_tflite` raises from the subprocess's error record."""
    import json

    error_file = tmp_path / "error.json"
    done = subprocess.CompletedProcess([], 1, "", "")
    record = {
        "kind": "unsupported",
        "ops": ["Erfinv"],
        "layers": ["erf"],
        "details": ["tf.Erfinv(tensor<?x4xf32>) -> (tensor<?x4xf32>)"],
    }
    error_file.write_text(json.dumps(record))
    with pytest.raises(cvk.export.UnsupportedOpsError) as info:
        _raise_subprocess_error(done, str(error_file), "jax")
    assert info.value.ops == ["Erfinv"] and info.value.layers == ["erf"]
    assert not info.value.involves_complex
    error_file.write_text(json.dumps({"kind": "value", "message": "bad"}))
    with pytest.raises(ValueError, match="bad"):
        _raise_subprocess_error(done, str(error_file), "jax")
    os.remove(error_file)
    done = subprocess.CompletedProcess([], 1, "", "some\nlast line")
    with pytest.raises(RuntimeError, match="last line"):
        _raise_subprocess_error(done, str(error_file), "jax")


@pytest.mark.parametrize("environment_backend", ["jax", "tensorflow"])
def test_command_line_works_whatever_keras_backend_is_set(
    tmp_path, environment_backend
):
    inputs = keras.Input((3, 4), name="x")
    model = keras.Model(inputs, cvk.layers.ComplexDense(2)(inputs))
    keras_path = tmp_path / "m.keras"
    model.save(keras_path)
    out = tmp_path / "m.tflite"
    env = dict(os.environ, KERAS_BACKEND=environment_backend)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cvattn_keras.export",
            str(keras_path),
            str(out),
            "--verify",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a bound: the command takes about 10 s
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "non-builtin ops  none" in done.stdout
    report = cvk.export.verify_tflite(out, model, np.ones((2, 3, 4)))
    assert report.max_abs_error <= FLOAT32_TOLERANCE, report
