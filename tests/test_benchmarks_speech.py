"""benchmarks/speech_enhancement.py runs end to end with --smoke (a tiny
speech enhancer, float32: about 25 s on 2 shared cores),
in a subprocess bounded in time, writes the rows its table prints, and
counts the tiny model's multiply-accumulates as a hand count does."""

import importlib.util
import json
import math
import os
import subprocess
import sys

import keras
import pytest

pytestmark = [
    pytest.mark.slow,
    # The script converts with TensorFlow whatever the backend: once, in
    # the TensorFlow run, is enough.
    pytest.mark.skipif(
        keras.backend.backend() != "tensorflow",
        reason="a TensorFlow and LiteRT benchmark",
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("ai_edge_litert") is None,
        reason="needs ai-edge-litert (LiteRT)",
    ),
]

SCRIPT = os.path.join(
    os.path.dirname(__file__), "..", "benchmarks", "speech_enhancement.py"
)


def _hand_count():
    """One step of the smoke model (frame 64, hop 32, 8 complex features,
    2 heads of 4, one encoder, a window of 8 frames), real MACs."""
    frame, bins, embed, heads, head, window = 64, 33, 8, 2, 4, 8
    stft = istft = 2 * frame * bins  # (64, 33) real and imaginary kernels
    embedding = mask_dense = 4 * bins * embed  # complex: 4 real MACs
    dense = 6 * 4 * embed * embed  # q, k, v, output, two feed-forward
    # CAtt: Re <q, k> (2H) and real weights times complex values (2V).
    core = heads * window * (2 * head + 2 * head)
    return stft + istft + embedding + mask_dense + dense + core


def test_speech_benchmark_smoke(tmp_path):
    out = tmp_path / "speech.json"
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    result = subprocess.run(
        [sys.executable, SCRIPT, "--smoke", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| ours | float32 |" in result.stdout
    results = json.loads(out.read_text())
    assert results["cpus"] and results["command"].endswith(
        f"--smoke --json {out}"
    )
    assert "onnxruntime" in results["packages"]
    ours = [row for row in results["rows"] if row["model"] == "ours"]
    assert [row["mode"] for row in ours] == ["float32"]
    for row in ours:
        assert "error" not in row, row
        for key in ("latency_ms", "latency_p90_ms", "rtf", "file_kib"):
            assert math.isfinite(row[key]) and row[key] > 0, (key, row)
        assert row["latency_p90_ms"] >= row["latency_ms"]
        assert row["hops_timed"] == 20
        # The STFT's 32 samples, the frame counter, one encoder's keys
        # and values, the ISTFT's tail.
        assert row["state_bytes"] > 0
        assert row["macs_per_step"] == _hand_count() == 12352
        assert sum(row["macs"].values()) == row["macs_per_step"]
        assert row["mac_s"] == 12352 * 16000 / 32
        assert row["params_trainable"] < row["params_all"]
    assert "GTCRN skipped (no --gtcrn)" in results["notes"]
    # Without the speech data set (Debian's audio, the `speech` extra)
    # the script notes why and leaves the quality columns out.
    missing = [n for n in results["notes"] if n.startswith("no quality")]
    if missing:
        pytest.skip(missing[0])
    (noisy,) = [r for r in results["rows"] if r["model"] == "noisy input"]
    for row in [*ours, noisy]:
        assert math.isfinite(row["si_sdr"]), row
        for key in ("pesq", "stoi", "ovrl"):
            assert row[key] is None or math.isfinite(row[key]), (key, row)
    # The float32 stream, aligned, is the Keras model offline.
    assert ours[0]["offline_err"] <= 1e-4
