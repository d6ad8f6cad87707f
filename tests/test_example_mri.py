"""examples/mri_reconstruction.py runs end to end with --smoke (seconds):
every model and seed scored, the paired differences, the exported
files verified on LiteRT (and ONNX Runtime when the extra is installed),
the figure and the JSON."""

import json
import math
import os
import runpy

import keras
import pytest

pytestmark = pytest.mark.slow

EXAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "examples", "mri_reconstruction.py"
)
MODELS = (
    "complex_transformer",
    "real_transformer",
    "complex_unet",
    "real_unet",
)
METRICS = ("psnr", "ssim", "nmse", "phase_error")


@pytest.fixture(autouse=True)
def _environment_restored():
    """The example sets variables when it loads (`TF_CPP_MIN_LOG_LEVEL`,
    `CVATTN_KERAS_QUIET_STARTUP`); run in this process, they must not
    leak into later tests and their subprocesses."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _finite(*values):
    return all(math.isfinite(v) for v in values)


def _models():
    """Every model on TensorFlow (20 s); on JAX and torch the transformer
    pair only: JAX compiles each new model's steps, and every exported
    file converts in a TensorFlow subprocess there, so that all four took
    60-80 s (the U-Nets' builders are tested on every backend in
    test_image_models.py)."""
    if keras.backend.backend() == "tensorflow":
        return MODELS
    return MODELS[:2]


def test_smoke_run_writes_finite_results(tmp_path):
    main = runpy.run_path(EXAMPLE)["main"]
    models = _models()
    # --qat on TensorFlow only (its files convert in a subprocess on the
    # other backends: 10 s each).
    tensorflow = keras.backend.backend() == "tensorflow"
    returned = main(
        ["--smoke", "--out", str(tmp_path), "--models", ",".join(models)]
        + (["--qat", "1"] if tensorflow else [])
    )
    output = json.loads((tmp_path / "mri_reconstruction.json").read_text())
    assert output["results"] == json.loads(json.dumps(returned["results"]))
    result = output["results"]["4x"]
    assert set(result["models"]) == set(models)
    assert _finite(*(result["zero_filled"][k] for k in METRICS))
    for name in models:
        runs = result["models"][name]
        assert [r["seed"] for r in runs] == [0, 1]
        for run in runs:
            assert _finite(*(run[k] for k in METRICS)), (name, run)
            assert run["parameters"] > 0 and run["loss"]
        for key in METRICS:
            mean, std = result["summary"][name][key]
            assert _finite(mean, std)
    # Two seeds: each pair's difference has a finite 95% interval.
    pairs = {"complex_transformer - real_transformer"}
    if "complex_unet" in models:
        pairs.add("complex_unet - real_unet")
    assert set(result["differences"]) == pairs
    for difference in result["differences"].values():
        for key in METRICS:
            mean, half = difference[key]
            assert _finite(mean, half) and half >= 0

    exported = output["exported"]
    assert exported["model"] in ("complex_transformer", "complex_unet")
    assert os.path.isfile(exported["keras"]["model_path"])
    # --smoke's modes: float32 and full_int8 (both convert every model).
    rows = {r["mode"]: r for r in exported["tflite"]}
    assert set(rows) == {"float32", "full_int8"}
    for row in rows.values():
        assert row["builtin_only"], row
        assert _finite(*(row[k] for k in METRICS), row["latency_ms"])
        assert os.path.getsize(row["path"]) > 0
    # The float32 file computes what Keras does (float32 rounding through
    # two DFTs of 32 points and a small network).
    assert rows["float32"]["max_abs_error"] < 1e-4
    assert abs(rows["float32"]["psnr_change"]) < 0.01
    assert exported["integer_mode"] == "full_int8"
    onnx = exported["onnx"]
    if "skipped" in onnx:
        assert "onnx" in onnx["skipped"]
    else:
        assert onnx["max_rel_error"] < 1e-4 and os.path.getsize(onnx["path"])
    if tensorflow:
        # --qat 1: the control and the QAT model, a full_int8 file each,
        # scored on LiteRT beside the post-training file.
        qat = exported["qat"]
        assert [r["mode"] for r in qat["rows"]] == [
            "fine-tuned 1 epochs, full_int8",
            "QAT 1 epochs, full_int8",
        ]
        for row in qat["rows"]:
            assert row["builtin_only"] and os.path.getsize(row["path"]) > 0
            assert _finite(*(row[k] for k in METRICS), row["psnr_change"])
        assert {k: len(v) for k, v in qat["psnr"].items()} == {
            "fine-tuned": 1,
            "QAT": 1,
        }
        table = (tmp_path / "mri_reconstruction.md").read_text()
        assert "| TFLite QAT 1 epochs, full_int8 |" in table
        assert "QAT - fine-tuned, paired by seed" in table
    assert (tmp_path / "mri_reconstruction.png").stat().st_size > 0
    assert "complex - real" in (tmp_path / "mri_reconstruction.md").read_text()


def test_bad_arguments_exit_with_a_message(capsys):
    main = runpy.run_path(EXAMPLE)["main"]
    for argv, message in (
        (["--models", "complex_vit"], "--models"),
        (["--modes", "int4"], "--modes"),
        (["--acceleration", "0.5"], "--acceleration"),
        (["--seeds", "0"], "--seeds"),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err
