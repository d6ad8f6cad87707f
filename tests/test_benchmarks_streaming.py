"""benchmarks/streaming.py runs end to end with --smoke (a tiny classifier,
float32: 30 to 90 s on 2 shared cores), in a subprocess bounded in time,
and writes the rows its table prints."""

import json
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
]

SCRIPT = os.path.join(
    os.path.dirname(__file__), "..", "benchmarks", "streaming.py"
)


def test_streaming_benchmark_smoke(tmp_path):
    out = tmp_path / "streaming.json"
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    result = subprocess.run(
        [sys.executable, SCRIPT, "--smoke", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| smoke | float32 |" in result.stdout
    results = json.loads(out.read_text())
    assert results["cpus"] and results["command"].endswith(
        f"--smoke --json {out}"
    )
    (row,) = results["rows"]
    assert "error" not in row, row
    assert row["size"] == "smoke" and row["mode"] == "float32"
    # The tiny classifier's state: the STFT's 32 samples, the frame
    # counter and two key/value buffers, all 4-byte.
    assert row["state_bytes"] > 0 and row["state_bytes"] % 4 == 0
    assert row["stream_ms"] > 0 and row["offline_ms"] > 0
    assert row["ratio"] > 0 and row["rtf"] > 0
    # The streaming file's outputs are the Keras offline model's.
    assert row["err"] <= 1e-4 and row["err_median"] <= row["err"]
