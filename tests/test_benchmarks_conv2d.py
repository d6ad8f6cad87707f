"""benchmarks/conv2d_speed.py runs end to end with --smoke (8 x 8 images
of 4 complex channels, XLA on, 2 repeats: 10 to 30 s on 2 shared cores),
in a subprocess bounded in time, and writes the rows its table prints."""

import importlib.util
import json
import os
import subprocess
import sys

import keras
import pytest

pytestmark = [
    pytest.mark.slow,
    # The script times the layers under TensorFlow whatever the backend:
    # once, in the TensorFlow run, is enough.
    pytest.mark.skipif(
        keras.backend.backend() != "tensorflow",
        reason="a TensorFlow benchmark",
    ),
]

SCRIPT = os.path.join(
    os.path.dirname(__file__), "..", "benchmarks", "conv2d_speed.py"
)


def test_conv2d_benchmark_smoke(tmp_path):
    out = tmp_path / "conv2d.json"
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    result = subprocess.run(
        [sys.executable, SCRIPT, "--smoke", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| smoke | 2, 8x8, 4->4 | fwd | on |" in result.stdout
    assert "| smoke | 2, 8x8, 4->4 | fwd+bwd | on |" in result.stdout
    results = json.loads(out.read_text())
    assert results["environment"]["cpus"]
    assert results["command"].endswith(f"--smoke --json {out}")
    rows = results["rows"]
    assert [row["pass_"] for row in rows] == ["forward", "backward"]
    # The Keras candidates, and the native ones whose framework installs
    # (both do in the test extra).
    names = ["real", "block", "gauss"]
    for framework in ("jax", "torch"):
        if importlib.util.find_spec(framework):
            names += [f"{framework}_c64", f"{framework}_f32"]
    for row in rows:
        assert row["size"] == "smoke" and row["jit"] is True
        assert row["auto"] == "block"  # 4 channels: far below Gauss's size
        for name in names:
            assert row[f"{name}_ms"] > 0 and row[f"{name}_vs_real"] > 0, name
        assert row["real_vs_real"] == 1.0
