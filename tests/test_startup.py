"""`cvattn_keras._startup`: TensorFlow's benign C++ start-up lines hidden
when asked (`python -m cvattn_keras...`, CVATTN_KERAS_QUIET_STARTUP=1),
real errors kept, and fd 2 left alone otherwise."""

import os
import subprocess
import sys

import pytest

from cvattn_keras import _startup

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_NOISE = """\
WARNING: All log messages before absl::InitializeLog() is called are \
written to STDERR
I0000 00:00:1.0 11351 port.cc:153] oneDNN custom operations are on. You \
may see slightly different numerical results.
I0000 00:00:1.0 11351 cudart_stub.cc:31] Could not find cuda drivers on \
your machine, GPU will not be used.
E0000 00:00:1.0 11351 cuda_platform.cc:52] failed call to cuInit: \
INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
E0000 00:00:1.0 1 cuda_dnn.cc:8310] Unable to register cuDNN factory: \
Attempting to register factory for plugin cuDNN when one has already been \
registered
E0000 00:00:1.0 1 cuda_fft.cc:485] Unable to register cuFFT factory: x
E0000 00:00:1.0 1 cuda_blas.cc:1418] Unable to register cuBLAS factory: x
W0000 00:00:1.0 1 computation_placer.cc:177] computation placer already \
registered. Please check linkage and avoid linking the same target more \
than once.
I0000 00:00:1.0 1 cpu_feature_guard.cc:227] This TensorFlow binary is \
optimized to use available CPU instructions in performance-critical \
operations.
To enable the following instructions: AVX2 FMA, in other operations, \
rebuild TensorFlow with the appropriate compiler flags.
W0000 00:00:1.0 1 py_utils.cc:38] TF-TRT Warning: Could not find TensorRT
"""
_REAL = """\
E0000 00:00:1.0 11351 some_file.cc:12] real failure: the disk is on fire
Traceback (most recent call last):
  File "<string>", line 1, in <module>
ImportError: libcudart.so.12: cannot open shared object file
"""


def test_filter_drops_the_benign_lines_and_keeps_the_rest():
    assert _startup.filter_benign(_NOISE) == ""
    assert _startup.filter_benign(_NOISE + _REAL + _NOISE) == _REAL
    assert _startup.filter_benign("no newline at the end") == (
        "no newline at the end"
    )


def test_cuda_driver_lines_are_kept_on_a_machine_with_a_gpu():
    """Where an NVIDIA device exists, a failing cuInit is a broken driver:
    its line stays."""
    cuinit = (
        "E0000 00:00:1.0 1 cuda_platform.cc:52] failed call to cuInit: "
        "INTERNAL: CUDA error\n"
    )
    assert _startup.filter_benign(cuinit) == ""
    assert _startup.filter_benign(cuinit, gpu=True) == cuinit
    assert _startup.filter_benign(_NOISE, gpu=True) == "".join(
        line
        for line in _NOISE.splitlines(keepends=True)
        if any(known in line for known in _startup.BENIGN_WITHOUT_GPU)
    )


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["python", "-m", "cvattn_keras.export", "--help"], True),
        (["python", "-m", "cvattn_keras"], True),
        (["python", "-X", "dev", "-Bmcvattn_keras.interop"], True),
        (["python", "-W", "ignore", "-m", "cvattn_keras.export"], True),
        (["python", "-m", "cvattn_keras_fork"], False),
        (["python", "-m", "pytest", "-m", "cvattn_keras.export"], False),
        (["python", "script.py", "-m", "cvattn_keras.export"], False),
        (["python", "-c", "pass", "-m", "cvattn_keras.export"], False),
        (["python"], False),
    ],
)
def test_started_as_command(argv, expected):
    assert _startup.started_as_command(argv) is expected


def _import_in_subprocess(quiet):
    """Runs `import cvattn_keras` in a fresh interpreter under TensorFlow;
    returns (stdout, stderr)."""
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env.pop(_startup.ENVIRONMENT_VARIABLE, None)
    if quiet:
        env[_startup.ENVIRONMENT_VARIABLE] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        [_REPO, *filter(None, [env.get("PYTHONPATH")])]
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import cvattn_keras; print(cvattn_keras._startup.redirected)",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr


@pytest.mark.tensorflow_only(reason="quiets TensorFlow's import")
def test_quiet_import_prints_no_benign_line():
    redirected, stderr = _import_in_subprocess(quiet=True)
    assert redirected == "True"
    for benign in _startup.BENIGN + _startup.BENIGN_WITHOUT_GPU:
        assert benign not in stderr


@pytest.mark.tensorflow_only(reason="quiets TensorFlow's import")
def test_not_asked_leaves_fd_2_alone():
    redirected, _ = _import_in_subprocess(quiet=False)
    assert redirected == "False"


@pytest.mark.parametrize(
    "variable, command, backend, quiets, log_level",
    [
        (None, False, "tensorflow", False, None),  # a user's program
        ("1", False, "tensorflow", True, None),  # an example: level kept
        (None, True, "tensorflow", True, "2"),  # python -m cvattn_keras...
        (None, True, "jax", True, None),  # a command under JAX: level kept
        ("0", True, "tensorflow", False, None),  # "0": never
    ],
)
def test_when_the_hook_acts_and_what_it_sets(
    monkeypatch, variable, command, backend, quiets, log_level
):
    calls = []
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    if variable is None:
        monkeypatch.delenv(_startup.ENVIRONMENT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(_startup.ENVIRONMENT_VARIABLE, variable)
    monkeypatch.setattr(_startup, "started_as_command", lambda: command)
    monkeypatch.setattr(_startup, "keras_backend", lambda: backend)
    monkeypatch.setattr(
        _startup, "quiet_tensorflow_import", lambda: calls.append(1) or True
    )
    assert _startup.quiet_startup_if_asked() is quiets
    assert len(calls) == int(quiets)
    assert os.environ.get("TF_CPP_MIN_LOG_LEVEL") == log_level
