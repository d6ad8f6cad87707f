"""The layers on the JAX and PyTorch backends, when installed.

Layer code uses `keras.ops` only; this runs `backend_smoke.py` (parity of
every variant against NumPy, value heads unlike key heads, one key, the
all-blocks model's fit and `.keras` round trip) in a subprocess per
backend, whatever backend the suite itself runs under. A backend that is
not installed (torch, in the project's test environment) is skipped, and
so is every backend when `CVATTN_KERAS_BACKENDS_TESTED_SEPARATELY` is set:
`.ci/run` sets it because it runs the whole suite under JAX and PyTorch
itself."""

import importlib.util
import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "backend_smoke.py")


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend, module", [("jax", "jax"), ("torch", "torch")]
)
def test_backend(backend, module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    if os.environ.get("CVATTN_KERAS_BACKENDS_TESTED_SEPARATELY"):
        pytest.skip(f"the suite runs under {backend} separately (.ci/run)")
    env = dict(os.environ, KERAS_BACKEND=backend)
    result = subprocess.run(
        [sys.executable, SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"backend {backend}:" in result.stdout
