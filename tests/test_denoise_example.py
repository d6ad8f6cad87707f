"""`examples/denoise.py` (issue 40): trains, scores, exports and streams
with --smoke; refuses bad arguments before any work. The smoke run needs
Debian's recordings and the `speech` extra (installed by .ci/run) and
skips without them, saying what is missing."""

import importlib.util
import json
import os
import runpy

import numpy as np
import pytest

from cvattn_keras import datasets

pytestmark = pytest.mark.slow

EXAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "examples", "denoise.py"
)
PACKAGES = ("G722", "pesq", "pystoi", "speechmos", "scipy", "matplotlib")


@pytest.fixture(autouse=True)
def _environment_restored():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _main():
    return runpy.run_path(EXAMPLE)["main"]


def _speech_or_skip():
    missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"needs {missing} (pip install '.[examples,speech]')")
    try:
        datasets.noisy_speech("test", num_examples=1)
    except FileNotFoundError as error:
        pytest.skip(f"needs Debian's recordings: {error}")


def test_denoise_smoke(tmp_path):
    _speech_or_skip()
    out = tmp_path / "denoise"
    code = _main()(
        ["--smoke", "--output", str(out), "--modes", "float32,full_int8"]
    )
    assert code == 0
    for name in (
        "speech_enhancer.keras",
        "speech_enhancer_stream.tflite",
        "speech_enhancer_stream_full_int8.tflite",
        "denoise.md",
        "denoise.png",
    ):
        assert (out / name).exists(), name
    result = json.loads((out / "denoise.json").read_text())
    assert set(result["runs"]) == {"complex", "magnitude", "real"}
    for runs in result["runs"].values():
        assert len(runs) == 2
        for run in runs:
            # STOI is NaN when no clip holds 30 frames of speech (two
            # smoke clips); the others are always defined.
            assert np.isfinite(
                [run["scores"][k] for k in ("si_sdr", "pesq")]
            ).all()
            assert isinstance(run["scores"]["stoi"], float)
    complex_params = result["runs"]["complex"][0]["trainable"]
    real_params = result["runs"]["real"][0]["trainable"]
    assert abs(real_params - complex_params) <= 0.05 * complex_params
    assert set(result["streams"]) == {"float32", "full_int8"}
    table = (out / "denoise.md").read_text()
    assert "Paired difference complex minus magnitude" in table
    assert "Paired difference complex minus real" in table
    assert "by noise" in table


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--seeds", "0"], "--seeds"),
        (["--epochs", "-1"], "--epochs"),
        (["--learning-rate", "nan"], "--learning-rate"),
        (["--learning-rate", "0"], "--learning-rate"),
        (["--models", "complex,cnn"], "--models"),
        (["--modes", "int16x8"], "--modes"),
        (["--dnsmos-examples", "-2"], "--dnsmos-examples"),
    ],
)
def test_denoise_refuses_bad_arguments(tmp_path, capsys, argv, words):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        _main()(argv + ["--output", str(out)])
    assert exit_info.value.code == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


def test_denoise_refuses_an_output_that_is_a_file(tmp_path, capsys):
    path = tmp_path / "file"
    path.write_text("")
    with pytest.raises(SystemExit) as exit_info:
        _main()(["--output", str(path)])
    assert exit_info.value.code == 2
    assert "--output" in capsys.readouterr().err


def test_denoise_qat_smoke(tmp_path):
    """--qat 1: the first complex model fine-tuned with and without
    quantization-aware training, each one's full_int8 stream file scored
    hop by hop, each arm's SI-SDR and PESQ by seed with their paired
    difference (over several seeds: test_quantization.py's music smoke)."""
    _speech_or_skip()
    out = tmp_path / "denoise"
    code = _main()(
        ["--smoke", "--output", str(out), "--models", "complex"]
        + ["--seeds", "1", "--modes", "float32,full_int8", "--qat", "1"]
        + ["--dnsmos-examples", "0"]
    )
    assert code == 0
    result = json.loads((out / "denoise.json").read_text())
    assert list(result["streams"]) == [
        "float32",
        "full_int8",
        "fine-tuned 1 epochs, full_int8",
        "QAT 1 epochs, full_int8",
    ]
    for name in ("finetuned", "qat"):
        assert (
            out / f"speech_enhancer_{name}_stream_full_int8.tflite"
        ).exists()
    for key in ("si_sdr", "pesq"):
        by_seed = result["qat"][key]
        assert {k: len(v) for k, v in by_seed.items()} == {
            "fine-tuned": 1,
            "QAT": 1,
        }
        assert np.isfinite(by_seed["QAT"] + by_seed["fine-tuned"]).all()
    table = (out / "denoise.md").read_text()
    assert "| complex, seed 0, stream file QAT 1 epochs, full_int8" in table
    assert table.count("QAT - fine-tuned, paired by seed") == 2
