"""The examples refuse a bad command line before any work (issue 42): the
usage and one `error:` line naming the flag and the value on stderr, exit
status 2, nothing on stdout, nothing written. Each example's argument
parser is called in this process (a run would import TensorFlow, 5 to 10
s a process); two whole runs in a subprocess check that `main` parses
before it starts (no banner, no folder, no traceback). And the shared
checks themselves (`examples/_arguments.py`, `examples/_wav.py`)."""

import argparse
import functools
import os
import runpy
import subprocess
import sys
import wave

import numpy as np
import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..")
EXAMPLES = os.path.join(ROOT, "examples")
FILE = "<FILE>"  # replaced by the path of an existing file
UNDER_FILE = "<FILE>/new"  # a folder that would lie under that file
OUT = "<OUT>"  # replaced by a folder that does not exist yet


@pytest.fixture(autouse=True)
def _environment_restored():
    """The examples set variables when they load (`TF_CPP_MIN_LOG_LEVEL`,
    `CVATTN_KERAS_QUIET_STARTUP`): they must not leak into later tests."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@functools.cache
def _module(name):
    return runpy.run_path(os.path.join(EXAMPLES, name))


def _parser(script):
    """The function each example's `main` calls first with its argv."""
    return _module(script)["parse" if script in PARSE else "parse_args"]


PARSE = ("radio.py", "denoise.py")
# The arguments each example is given besides the case's (its output
# folder, and what it requires).
BASE = {
    "radio.py": ["--out", OUT],
    "mri_reconstruction.py": ["--out", OUT],
    "train_music.py": ["--output", OUT],
    "denoise.py": ["--output", OUT],
    "enhance.py": ["in.wav", "--model", "m.keras", "--output", OUT + "/y.wav"],
    "transcribe.py": ["in.wav", "--model", "m.tflite", "--output", OUT],
    "modulation.py": [],
    "quickstart.py": ["--save", OUT + "/model.keras"],
    "train_distributed.py": ["--checkpoint-dir", OUT],
    "compare_attention.py": ["--output", OUT],
}

# (script, argv, what the message names besides the value: None for the
# first flag of argv, the value).
CASES = [
    # Defect 3: trained and wrote NaN results.
    ("radio.py", ["--learning-rate", "nan"], "--learning-rate", "nan"),
    ("radio.py", ["--learning-rate", "0"], "--learning-rate", "0"),
    ("radio.py", ["--learning-rate", "-1"], "--learning-rate", "-1"),
    # Defect 4: trained with it and wrote every file.
    ("mri_reconstruction.py", ["--learning-rate", "-1"], None, "-1"),
    ("mri_reconstruction.py", ["--learning-rate", "nan"], None, "nan"),
    ("mri_reconstruction.py", ["--learning-rate", "0"], None, "0"),
    # Defect 6: a FileExistsError traceback.
    ("radio.py", ["--out", FILE], "--out", FILE),
    ("mri_reconstruction.py", ["--out", FILE], "--out", FILE),
    ("mri_reconstruction.py", ["--output", FILE], "--out", FILE),
    ("train_music.py", ["--output", FILE], "--output", FILE),
    ("radio.py", ["--out", UNDER_FILE], "--out", FILE),
    ("denoise.py", ["--output", UNDER_FILE], "--output", FILE),
    # Defect 7: a traceback after the banner. The images: >= 16
    # (synthetic_mri's smallest), multiples of the patch size (4; 8 with
    # --smoke) and of the U-Nets' 2 ** (depth - 1) (4; 2 with --smoke).
    ("mri_reconstruction.py", ["--image-size", "7"], None, "7"),
    ("mri_reconstruction.py", ["--image-size", "0"], None, "0"),
    (
        "mri_reconstruction.py",
        ["--image-size", "18"],
        ("--image-size", "a multiple of 4"),
        "18",
    ),
    (
        "mri_reconstruction.py",
        ["--smoke", "--image-size", "20"],
        ("--image-size", "a multiple of 8"),
        "20",
    ),
    ("mri_reconstruction.py", ["--cascades", "0"], None, "0"),
    # Its other values, before any work too.
    ("mri_reconstruction.py", ["--acceleration", "nan"], None, "nan"),
    (
        "mri_reconstruction.py",
        ["--image-size", "16", "--acceleration", "12"],
        "--acceleration",
        "12",
    ),
    ("mri_reconstruction.py", ["--batch-size", "0"], None, "0"),
    ("radio.py", ["--data-seed", "-1"], None, "-1"),
    ("radio.py", ["--stream-snr", "inf"], None, "inf"),
    ("radio.py", ["--models", "complex,cnn2"], None, "complex,cnn2"),
    ("radio.py", ["--windows", "8,0"], None, "8,0"),
    ("train_music.py", ["--learning-rate", "0"], None, "0"),
    ("train_music.py", ["--epochs", "0"], None, "0"),
    ("train_music.py", ["--samples", "-4"], None, "-4"),
    ("train_music.py", ["--seed", "-1"], None, "-1"),
    ("train_music.py", ["--softmax", "softer"], None, "softer"),
    ("train_music.py", ["--frame-step", "0", "--streaming", "4"], None, "0"),
    ("denoise.py", ["--learning-rate", "inf"], None, "inf"),
    ("denoise.py", ["--data-seed", "-1"], None, "-1"),
    ("enhance.py", ["--threads", "0"], None, "0"),
    ("enhance.py", ["--frame-length", "-512"], None, "-512"),
    ("enhance.py", ["--model-rate", "0"], None, "0"),
    ("transcribe.py", ["--threshold", "1"], None, "1"),
    ("transcribe.py", ["--threshold", "nan"], None, "nan"),
    ("transcribe.py", ["--min-frames", "0"], None, "0"),
    ("transcribe.py", ["--stream", "--block", "0"], None, "0"),
    ("modulation.py", ["--epochs", "0"], None, "0"),
    # a quarter of the samples for each test set: at least 4
    ("modulation.py", ["--samples", "3"], None, "3"),
    ("modulation.py", ["--seed", "-1"], None, "-1"),
    ("quickstart.py", ["--noise", "nan"], None, "nan"),
    ("quickstart.py", ["--noise", "-1"], None, "-1"),
    ("quickstart.py", ["--samples", "0"], None, "0"),
    ("quickstart.py", ["--product", "outer"], None, "outer"),
    ("train_distributed.py", ["--devices", "0"], None, "0"),
    ("train_distributed.py", ["--dropout", "1"], None, "1"),
    ("train_distributed.py", ["--learning-rate", "nan"], None, "nan"),
    ("train_distributed.py", ["--checkpoint-dir", FILE], None, FILE),
    ("compare_attention.py", ["--attentions", "lsh,linear"], None, "linear"),
    ("compare_attention.py", ["--seeds", "0"], None, "0"),
    # fewer than a whole STFT frame (3), more than a clip's 321 frames
    ("compare_attention.py", ["--frames", "2"], None, "2"),
    ("compare_attention.py", ["--frames", "400"], None, "400"),
    ("compare_attention.py", ["--output", FILE], None, FILE),
    # --qat where it would do nothing: refused, not ignored.
    ("mri_reconstruction.py", ["--qat", "1", "--modes", "none"], None, "none"),
    (
        "mri_reconstruction.py",
        ["--qat", "1", "--models", "real_unet"],
        None,
        "real_unet",
    ),
    ("denoise.py", ["--qat", "1", "--models", "real"], None, "real"),
    ("train_music.py", ["--qat-seeds", "3"], None, "--qat"),
]


def _fill(argv, tmp_path):
    """`argv` with the file and folder placeholders replaced."""
    (tmp_path / "file").write_text("")
    paths = {FILE: str(tmp_path / "file"), OUT: str(tmp_path / "out")}
    for placeholder, path in paths.items():
        argv = [a.replace(placeholder, path) for a in argv]
    return argv


def _one_error_line(err, words, usage=True):
    """The `error:` line of argparse's `usage ... prog: error: ...`: the
    last line, the only one, holding each of `words`; with `usage`, the
    lines before it are the usage's."""
    lines = err.strip().splitlines()
    assert lines and "Traceback" not in err, err
    errors = [line for line in lines if ": error: " in line]
    assert errors == lines[-1:], err
    if usage:
        assert all(line.startswith(("usage:", " ")) for line in lines[:-1])
    assert all(word in errors[0] for word in words), errors[0]


@pytest.mark.parametrize(
    "script, argv, words, value",
    CASES,
    ids=[f"{c[0][:-3]}{' '.join(c[1])}" for c in CASES],
)
def test_refuses_before_any_work(tmp_path, capsys, script, argv, words, value):
    if words is None:
        words = [a for a in argv if a not in ("--smoke", "--stream")][:1]
    words = _fill([*words, value], tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        _parser(script)(_fill(argv + BASE[script], tmp_path))
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    assert not out
    _one_error_line(err, words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize(
    "script, argv, check",
    [
        ("radio.py", ["--learning-rate", "1e-3"], ("learning_rate", 1e-3)),
        ("radio.py", ["--modes", ""], ("modes", [])),
        ("radio.py", [], ("models", ["complex", "real", "cnn"])),
        ("radio.py", ["--models", "cnn,real,cnn"], ("models", ["cnn", "real"])),
        ("radio.py", ["--windows", "16,16"], ("windows", (16, 16))),
        ("mri_reconstruction.py", ["--image-size", "20"], ("image_size", 20)),
        ("mri_reconstruction.py", ["--smoke"], ("image_size", 32)),
        ("mri_reconstruction.py", ["--modes", "none"], ("modes", [])),
        (
            "mri_reconstruction.py",
            ["--acceleration", "4", "8.5"],
            ("acceleration", [4.0, 8.5]),
        ),
        ("train_music.py", ["--modes", "all"], ("modes", None)),
        ("train_music.py", ["--softmax", "CAtt"], ("softmax", "real")),
        ("transcribe.py", ["--threshold", "0.3"], ("threshold", 0.3)),
        ("train_distributed.py", ["--dropout", "0"], ("dropout", 0.0)),
        ("quickstart.py", ["--noise", "0"], ("noise", 0.0)),
        ("modulation.py", ["--samples", "4"], ("samples", 4)),
        (
            "compare_attention.py",
            ["--attentions", "lsh,multi_head,lsh"],
            ("attentions", ["lsh", "multi_head"]),
        ),
        ("compare_attention.py", ["--smoke"], ("seeds", 2)),
        ("compare_attention.py", [], ("frames", 64)),
    ],
)
def test_takes_good_values(tmp_path, script, argv, check):
    if script == "transcribe.py":  # it checks the files exist
        for name in ("in.wav", "m.tflite", "m.json"):
            (tmp_path / name).write_text("")
        base = [str(tmp_path / "in.wav"), "--model", str(tmp_path / "m.tflite")]
    else:
        base = _fill(BASE[script], tmp_path)
    args = _parser(script)(argv + base)
    name, want = check
    if want is None:  # every mode
        want = list(_module(script)["MODES"])
    assert getattr(args, name) == want
    assert not (tmp_path / "out").exists()


# Two whole runs: `main` refuses before its banner and before it makes
# its output folder (mri_reconstruction.py imports TensorFlow: 5 to 10 s;
# train_distributed.py imports it only in its workers). --smoke: were the
# check missing, a short run.
@pytest.mark.parametrize(
    "script, argv, words",
    [
        (
            "mri_reconstruction.py",
            ["--smoke", "--image-size", "7", "--out", OUT],
            ("--image-size", "7"),
        ),
        ("train_distributed.py", ["--devices", "0"], ("--devices", "0")),
    ],
)
def test_main_refuses_in_a_subprocess(tmp_path, script, argv, words):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONWARNINGS="ignore")
    run = subprocess.run(
        [sys.executable, os.path.join("examples", script)]
        + _fill(argv, tmp_path),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert not run.stdout
    # (TensorFlow may log a line of its own when it starts.)
    _one_error_line(run.stderr, _fill(list(words), tmp_path), usage=False)
    assert run.stderr.strip().splitlines()[-1].startswith(f"{script}: error:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


# ----------------------------------------------------------------------
# The shared checks.
# ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def arguments():
    return runpy.run_path(os.path.join(EXAMPLES, "_arguments.py"))


@pytest.mark.parametrize(
    "name, good, bad",
    [
        ("positive_int", {"1": 1, "12": 12}, ["0", "-3", "1.5", "x", ""]),
        ("non_negative_int", {"0": 0, "7": 7}, ["-1", "nan", "2e3"]),
        (
            "positive_float",
            {"1e-3": 1e-3, "2": 2.0},
            ["0", "-0.0", "-1", "nan", "inf", "-inf", "x"],
        ),
        ("non_negative_float", {"0": 0.0, "0.5": 0.5}, ["-1e-9", "nan"]),
        ("fraction", {"0.5": 0.5, "1e-9": 1e-9}, ["0", "1", "nan", "2"]),
    ],
)
def test_shared_numbers(arguments, name, good, bad):
    check = arguments[name]
    for text, value in good.items():
        got = check(text)
        assert got == value and type(got) is type(value)
    for text in bad:
        with pytest.raises(argparse.ArgumentTypeError) as error:
            check(text)
        assert str(error.value).endswith(f"Received: {text!r}")


def test_shared_ranges_say_their_bounds(arguments):
    between = arguments["float_in"](-20, 30, why="dB")
    assert between("-20") == -20.0 and between("30") == 30.0
    with pytest.raises(argparse.ArgumentTypeError) as error:
        between("30.5")
    assert str(error.value) == (
        "must be a finite number in [-20, 30] (dB). Received: '30.5'"
    )
    at_least = arguments["int_at_least"](32, "two windows")
    with pytest.raises(argparse.ArgumentTypeError) as error:
        at_least("31")
    assert str(error.value) == (
        "must be an int >= 32 (two windows). Received: '31'"
    )


def test_shared_names(arguments):
    check = arguments["names"](("a", "b", "c"), {"none": []})
    assert check("c, a,c") == ["c", "a"]
    assert check("none") == []
    for text in ("", ",", "a,d", "A"):
        with pytest.raises(argparse.ArgumentTypeError) as error:
            check(text)
        assert str(error.value) == (
            f"must list names from a, b, c or be 'none'. Received: {text!r}"
        )


def test_shared_output_folder(arguments, tmp_path):
    check = arguments["output_folder"]
    (tmp_path / "file").write_text("")
    for path in (tmp_path, tmp_path / "new", tmp_path / "new" / "deeper"):
        assert check(str(path)) == str(path)
    for path in (tmp_path / "file", tmp_path / "file" / "new"):
        with pytest.raises(argparse.ArgumentTypeError, match="is a file"):
            check(str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_shared_checked_by(arguments):
    def even(text):
        if int(text) % 2:
            raise ValueError(f"`n` must be even. Received: n={text}")
        return int(text)

    check = arguments["checked_by"](even)
    assert check("4") == 4
    with pytest.raises(argparse.ArgumentTypeError, match="n=3"):
        check("3")


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_shared_pcm_samples(tmp_path, rng, width):
    """`pcm_samples` of a file Python's `wave` wrote from known integers:
    the integers over 2 ** (8 width - 1) (8-bit: offset by 128), frames in
    rows; a frame cut short at the end dropped."""
    pcm_samples = runpy.run_path(os.path.join(EXAMPLES, "_wav.py"))[
        "pcm_samples"
    ]
    full = 2 ** (8 * width - 1)
    q = rng.integers(-full, full, size=(50, 2), dtype=np.int64)
    little = (q.reshape(-1, 1) >> (8 * np.arange(width))) & 0xFF
    if width == 1:
        little = (q.reshape(-1, 1) + 128) & 0xFF
    with wave.open(str(tmp_path / "x.wav"), "wb") as f:
        f.setnchannels(2)
        f.setsampwidth(width)
        f.setframerate(8000)
        f.writeframes(little.astype(np.uint8).tobytes())
    with wave.open(str(tmp_path / "x.wav"), "rb") as f:
        data = f.readframes(f.getnframes())
    got = pcm_samples(data + b"\x01", 2, width)
    assert got.dtype == np.float32 and got.shape == (50, 2)
    np.testing.assert_array_equal(got, (q / full).astype(np.float32))
