"""Quiet TensorFlow's C++ start-up lines, for this package's commands.

Importing TensorFlow (and its first device query) prints log lines from
C++ static initialisers that read like errors on a machine without a GPU
("failed call to cuInit", "Could not find cuda drivers", ...). They are
written to file descriptor 2 before absl reads `TF_CPP_MIN_LOG_LEVEL`,
so neither that variable nor `sys.stderr` can hide them: only a
redirect of fd 2 around the import does.

`quiet_tensorflow_import()` does that redirect: fd 2 goes to a temporary
file while TensorFlow is imported and `tf.config.list_physical_devices
("GPU")` runs, then every captured line is written back to `sys.stderr`
except the known-benign ones of `BENIGN` (so real errors, warnings and
tracebacks still show); if the import fails, everything captured is
written back before the error propagates.

`cvattn_keras/__init__.py` calls `quiet_startup_if_asked()` first thing.
It acts only when asked, since a library must not touch the fd 2 of a
user's program by default:

- the process was started as a command of this package,
  `python -m cvattn_keras...` (the export and interop command lines);
- or the environment variable `CVATTN_KERAS_QUIET_STARTUP` is `"1"` (the
  examples and benchmarks set it);

and never when that variable is `"0"`: the way to see everything, for
instance when a command dies while TensorFlow starts (a crash inside the
import, such as an abort, loses what was captured).

A command also gets `TF_CPP_MIN_LOG_LEVEL` `"2"` unless it is set (what
the command lines ask for, which they cannot do themselves under `-m`:
the package is imported before their `__main__`). Nothing is done when
TensorFlow is already imported or the Keras backend (as Keras chooses it:
`KERAS_BACKEND`, else `keras.json`, else TensorFlow) is not TensorFlow.

Standard library only, and no module-level import of TensorFlow or Keras:
this runs before either is imported.
"""

import glob
import json
import os
import sys
import tempfile

ENVIRONMENT_VARIABLE = "CVATTN_KERAS_QUIET_STARTUP"

# Substrings of the start-up lines dropped: TensorFlow's, printed on every
# import on a machine without a GPU or TensorRT, none of them actionable.
BENIGN = (
    # absl, before `absl::InitializeLog()`.
    "All log messages before absl::InitializeLog() is called are written "
    "to STDERR",
    # oneDNN (numerics may differ in the last bits).
    "oneDNN custom operations are on",
    # XLA's plugins registered twice (TensorFlow and a second copy).
    "Unable to register cuDNN factory",
    "Unable to register cuFFT factory",
    "Unable to register cuBLAS factory",
    "computation placer already registered",
    # The CPU instructions a source build could use (two lines).
    "This TensorFlow binary is optimized to use available CPU instructions",
    "To enable the following instructions",
    "TF-TRT Warning: Could not find TensorRT",
)

# The CUDA stubs' lines: benign only where the machine has no NVIDIA
# device (`/dev/nvidia0`, ...); where it has one, a failing cuInit is a
# broken driver, worth seeing.
BENIGN_WITHOUT_GPU = (
    "Could not find cuda drivers on your machine, GPU will not be used",
    "failed call to cuInit",
)


def has_nvidia_device():
    """Whether the machine may have a GPU for CUDA: an NVIDIA device node
    (`/dev/nvidia<N>`) or WSL 2's GPU device (`/dev/dxg`)."""
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/dxg")


# Whether `quiet_tensorflow_import` redirected fd 2 in this process (for
# the tests: the hook must not run unless asked).
redirected = False


def filter_benign(text, gpu=False):
    """`text` without its lines that contain one of `BENIGN`, or one of
    `BENIGN_WITHOUT_GPU` unless `gpu` (line ends kept)."""
    benign = BENIGN if gpu else BENIGN + BENIGN_WITHOUT_GPU
    return "".join(
        line
        for line in text.splitlines(keepends=True)
        if not any(known in line for known in benign)
    )


def started_as_command(orig_argv=None):
    """Whether the interpreter was started as `python [options] -m
    cvattn_keras...` (from `sys.orig_argv`, or `orig_argv`)."""
    if orig_argv is None:
        orig_argv = getattr(sys, "orig_argv", [])
    arguments = list(orig_argv[1:])
    position = 0
    while position < len(arguments):
        argument = arguments[position]
        position += 1
        if argument == "--check-hash-based-pycs":
            position += 1  # its mode
            continue
        if argument.startswith("--"):
            continue
        if argument == "-" or not argument.startswith("-"):
            return False  # a script or stdin: what follows is its own
        # Short options, which may be combined (`-Bm name`, `-mname`).
        for index, flag in enumerate(argument[1:], start=2):
            if flag not in "cmWX":
                continue
            value = argument[index:]
            if not value and position < len(arguments):
                value = arguments[position]
                position += 1
            if flag == "c":
                return False
            if flag == "m":
                return value == "cvattn_keras" or value.startswith(
                    "cvattn_keras."
                )
            break  # -W or -X and its value
    return False


def keras_backend():
    """The backend Keras will use: `KERAS_BACKEND`, else the `backend` of
    its `keras.json` (in `KERAS_HOME`, else `~/.keras`), else
    `"tensorflow"`."""
    backend = os.environ.get("KERAS_BACKEND")
    if backend:
        return backend
    home = os.environ.get("KERAS_HOME") or os.path.join(
        os.path.expanduser("~"), ".keras"
    )
    try:
        with open(os.path.join(home, "keras.json"), encoding="utf-8") as f:
            backend = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        backend = None
    return backend if isinstance(backend, str) and backend else "tensorflow"


def _flush():
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def _write_back(text):
    if text and sys.stderr is not None:
        sys.stderr.write(text)
        _flush()


def quiet_tensorflow_import():
    """Imports TensorFlow and lists its GPUs with fd 2 redirected to a
    temporary file, then writes back to `sys.stderr` what was captured
    but the lines `filter_benign` drops (all of it if the import fails,
    before the error propagates). Does nothing (returns False) if
    TensorFlow is already imported, the Keras backend is not TensorFlow,
    or fd 2 cannot be redirected; returns True when it redirected."""
    global redirected
    if "tensorflow" in sys.modules or keras_backend() != "tensorflow":
        return False
    try:
        capture = tempfile.TemporaryFile()
    except OSError:
        return False
    with capture:
        _flush()
        try:
            saved = os.dup(2)
        except OSError:  # no fd 2 (a windowed program): nothing to quiet
            return False
        try:
            os.dup2(capture.fileno(), 2)
        except OSError:
            os.close(saved)
            return False
        try:
            try:
                redirected = True
                import tensorflow as tf

                tf.config.list_physical_devices("GPU")
            finally:
                _flush()
                os.dup2(saved, 2)
                os.close(saved)
        except BaseException:
            capture.seek(0)
            _write_back(capture.read().decode("utf-8", "replace"))
            raise
        capture.seek(0)
        _write_back(
            filter_benign(
                capture.read().decode("utf-8", "replace"),
                gpu=has_nvidia_device(),
            )
        )
    return True


def quiet_startup_if_asked():
    """`quiet_tensorflow_import()` when this process is a `python -m
    cvattn_keras...` command or `CVATTN_KERAS_QUIET_STARTUP` is `"1"`;
    nothing when the variable is `"0"` (the way to see everything, e.g.
    when a command dies while TensorFlow starts: a crash inside the
    import, such as an abort, loses what was captured) or otherwise.

    A command also gets `TF_CPP_MIN_LOG_LEVEL=2` unless it is set (what
    the command lines asked for, which their `__main__` cannot do: the
    package is imported first), under TensorFlow only; a script that sets
    the variable keeps TensorFlow's log level as it is."""
    asked = os.environ.get(ENVIRONMENT_VARIABLE)
    if asked == "0":
        return False
    command = started_as_command()
    if asked != "1" and not command:
        return False
    if command and keras_backend() == "tensorflow":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return quiet_tensorflow_import()
