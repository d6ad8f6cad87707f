"""benchmarks/qat_gap.py runs end to end on a tiny waveform classifier
(its `score_music` clips need the `music` extra): the QAT file against
its QAT model, the post-training file, and `--per-layer`, each quantized
layer's output found in the file."""

import json
import math
import os
import runpy

import keras
import pytest

import cvattn_keras as cvk

pytestmark = [
    pytest.mark.slow,
    # The script exports and runs TFLite files: once, under TensorFlow.
    pytest.mark.skipif(
        keras.backend.backend() != "tensorflow",
        reason="a TensorFlow benchmark",
    ),
]

SCRIPT = os.path.join(
    os.path.dirname(__file__), "..", "benchmarks", "qat_gap.py"
)


@pytest.fixture(autouse=True)
def _environment_restored():
    """The script sets variables when it loads (`TF_CPP_MIN_LOG_LEVEL`,
    `CVATTN_KERAS_QUIET_STARTUP`): they must not leak."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_qat_gap_smoke(tmp_path, capsys):
    pytest.importorskip("music21", reason="score_music: the music extra")
    pytest.importorskip("pretty_midi", reason="score_music: the music extra")
    keras.utils.set_random_seed(0)
    model = cvk.models.music_classifier(
        frames=8,
        stft=cvk.layers.ComplexSTFT(256, 256, center=False, name="stft"),
        notes=4,
        embed_dim=8,
        num_heads=2,
        num_layers=1,
        head_dim=8,
        frontend_filters=(2, 4),
        frontend_kernel_sizes=(6, 3),
    )
    path = str(tmp_path / "tiny.keras")
    model.save(path)
    out = tmp_path / "gap.json"
    main = runpy.run_path(SCRIPT)["main"]
    result = main(
        ["--model", path, "--calibration", "2", "--held-out", "2"]
        + ["--post-training", "--per-layer", "1", "--json", str(out)]
    )
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    files = result["files"]
    assert set(files) == {"QAT (calibrated)", "post-training"}
    apart = files["QAT (calibrated)"]["file_vs_qat"]
    assert 0 <= apart["mean_steps"] <= apart["max_steps"]
    assert 0 <= apart["beyond_one_step"] <= 1
    layers = result["per_layer"]
    # Every quantized layer's output is found in the file; the STFT's
    # (one convolution with its kernel on the grid, from the quantized
    # input) within one step.
    assert len(layers) == 9 and all("total" in row for row in layers.values())
    assert layers["quant_stft"]["total"]["max_steps"] <= 1.01
    for row in layers.values():
        for errors in row.values():
            assert math.isfinite(errors["max_steps"])
            assert 0 <= errors["mean_steps"] <= errors["max_steps"] + 1e-9
    assert "own" in layers["quant_encoder_0"]
    printed = capsys.readouterr().out
    assert "| quant_encoder_0 |" in printed
