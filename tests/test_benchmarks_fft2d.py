"""benchmarks/fft2d_forms.py runs end to end with --smoke (8 x 8 images,
XLA on, 2 repeats: about 10 s on 2 shared cores), in a subprocess bounded
in time, checks each form against numpy's fft2 and writes the rows its
table prints."""

import json
import os
import subprocess
import sys

import keras
import pytest

pytestmark = [
    pytest.mark.slow,
    # The script times TensorFlow whatever the backend: once, in the
    # TensorFlow run, is enough.
    pytest.mark.skipif(
        keras.backend.backend() != "tensorflow",
        reason="a TensorFlow benchmark",
    ),
]

SCRIPT = os.path.join(
    os.path.dirname(__file__), "..", "benchmarks", "fft2d_forms.py"
)


def test_fft2d_benchmark_smoke(tmp_path):
    out = tmp_path / "fft2d.json"
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    result = subprocess.run(
        [sys.executable, SCRIPT, "--smoke", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| smoke | 2, 8x8 | fwd | on |" in result.stdout
    assert "| smoke | 2, 8x8 | fwd+bwd | on |" in result.stdout
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2
    for row in rows:
        assert row["block_ms"] > 0 and row["gauss_over_block"] > 0
