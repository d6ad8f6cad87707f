"""Peak memory of one attention candidate (`attention_speed.py --memory`).

As in `attention_memory.py` (whose reader of `/proc/self/status` this
uses), each candidate runs in its own subprocess, which reports the peak
resident memory of the whole process (`VmHWM`: Python, TensorFlow and the
XLA compiler included). The subprocess builds the layer, resets the peak
to the current resident memory (writing 5 to `/proc/self/clear_refs`, Linux
4.0 and later; where that fails the peak also counts the eager build call),
then runs the compiled step twice (compiling, then once more) and reports
the peak and the resident memory before the step (`base`), in MiB.

Run by `attention_speed.py`; by hand:
    python benchmarks/_speed_memory.py --child '{"level": "layer", ...}'
with the keys of `measure`'s spec (see `_speed_candidates.
candidate_from_spec`) plus `pass_` and `jit`.
"""

import json
import os
import subprocess
import sys

KIB_PER_MIB = 1024


def measure(spec, timeout=900):
    """Runs one candidate in a subprocess: {peak_mib, base_mib, reset,
    first_s} or {error}. `spec`: a dict accepted by
    `_speed_candidates.candidate_from_spec`, plus `pass_` and `jit`."""
    # Imported here, not at the top: the child runs this file, and sets
    # KERAS_BACKEND (when run by hand) before anything imports Keras.
    from cvattn_keras.export._subprocess import run_python

    arguments = [os.path.abspath(__file__), "--child", json.dumps(spec)]
    try:
        done = run_python(arguments, timeout, {"TF_CPP_MIN_LOG_LEVEL": "3"})
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {done.returncode}: {' | '.join(tail)}"}
    return json.loads(lines[-1])


def _reset_peak():
    """Resets VmHWM to the current resident memory; False if impossible."""
    try:
        with open("/proc/self/clear_refs", "w") as file:
            file.write("5")
    except OSError:
        return False
    return True


def _child(spec):
    import time

    import _speed_candidates as candidates
    from _speed_timing import block
    from attention_memory import _peak_and_current_kib

    candidate = candidates.candidate_from_spec(spec)
    step = candidates.compiled(candidate, spec["pass_"], spec["jit"])
    reset = _reset_peak()
    _, base = _peak_and_current_kib()
    start = time.perf_counter()
    block(step())
    first = time.perf_counter() - start
    block(step())
    peak, _ = _peak_and_current_kib()
    print(
        json.dumps(
            dict(
                peak_mib=peak / KIB_PER_MIB,
                base_mib=base / KIB_PER_MIB,
                reset=reset,
                first_s=first,
            )
        )
    )


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--child":
        raise SystemExit(__doc__)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    _child(json.loads(sys.argv[2]))
