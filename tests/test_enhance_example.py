"""examples/enhance.py: a WAV file through a tiny speech enhancer, offline
in Keras, hop by hop in Keras and on LiteRT, at the model's rate and
resampled; and what it refuses, in one line."""

import os
import runpy
import subprocess
import sys
import wave

import numpy as np
import pytest

pytestmark = pytest.mark.slow

EXAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "examples", "enhance.py"
)
FRAME, HOP = 64, 32
# The output's 16-bit rounding, and float32 error.
TOLERANCE = 2 / 32768 + 1e-4


@pytest.fixture(autouse=True)
def _environment_restored():
    """The example sets variables when it loads (`TF_CPP_MIN_LOG_LEVEL`,
    `CVATTN_KERAS_QUIET_STARTUP`): they must not leak into later tests."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def example():
    return runpy.run_path(EXAMPLE)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny enhancer: its model, its `.keras` file, its streaming
    `.tflite` file."""
    import keras

    import cvattn_keras as cvk

    keras.utils.set_random_seed(7)
    folder = tmp_path_factory.mktemp("enhancer")
    model = cvk.models.speech_enhancer(
        frame_length=FRAME,
        frame_step=HOP,
        embed_dim=8,
        num_heads=2,
        num_layers=1,
        sliding_window=4,
    )
    model.save(folder / "enhancer.keras")
    stream = folder / "enhancer_stream.tflite"
    cvk.export.export_tflite(
        cvk.streaming.to_streaming(model), str(stream), batch_size=1
    )
    return model, str(folder / "enhancer.keras"), str(stream)


def _write_wav(path, x, rate):
    """`x` `(frames, channels)` in [-1, 1] as 16-bit PCM; returns the
    samples as written."""
    q = np.clip(np.round(x * 32768), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(x.shape[1])
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(q.tobytes())
    return q.astype(np.float32) / 32768


def _read_wav(path):
    with wave.open(str(path), "rb") as f:
        assert f.getsampwidth() == 2
        rate, channels = f.getframerate(), f.getnchannels()
        data = np.frombuffer(f.readframes(f.getnframes()), "<i2")
    return data.reshape(-1, channels).astype(np.float32) / 32768, rate


def _noisy(rng, frames, channels=1):
    t = np.arange(frames)[:, None] / 16000
    tone = 0.3 * np.sin(2 * np.pi * 440 * t * (1 + np.arange(channels)))
    return (tone + 0.05 * rng.standard_normal((frames, channels))).clip(
        -0.9, 0.9
    )


def _offline(model, x):
    """The model on `x` `(frames, channels)` at 16 kHz, padded in NumPy
    with `FRAME` zeros at the start and enough at the end, cropped."""
    n = len(x)
    back = FRAME + (-(FRAME + n)) % HOP
    padded = np.pad(x.T, ((0, 0), (FRAME, back))).astype(np.float32)
    y = np.asarray(model.predict_on_batch(padded))
    return y[:, FRAME : FRAME + n].T


def test_offline_at_the_model_rate(example, files, tmp_path, rng, capsys):
    """16 kHz in: the model on the padded samples, cropped, in 16 bits."""
    model, keras_file, _ = files
    x = _write_wav(tmp_path / "noisy.wav", _noisy(rng, 1000), 16000)
    out = tmp_path / "clean.wav"
    example["main"](
        [str(tmp_path / "noisy.wav"), "--model", keras_file]
        + ["--output", str(out)]
    )
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert "16000 Hz" in line and "offline" in line, line
    assert "real-time factor" in line, line
    y, rate = _read_wav(out)
    assert rate == 16000 and y.shape == (1000, 1)
    want = _offline(model, x)
    assert np.abs(want).max() > 0.01  # not trivially zero
    np.testing.assert_allclose(y, want, atol=TOLERANCE)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "clean.wav",
        "noisy.wav",
    ]


def test_offline_resampled_keeps_rate_length_and_channels(
    example, files, tmp_path, rng
):
    """44.1 kHz stereo in: each channel resampled to 16 kHz by soxr,
    enhanced, resampled back; 44.1 kHz stereo of the same length out."""
    soxr = pytest.importorskip("soxr", reason="resampling needs soxr")
    model, keras_file, _ = files
    x = _write_wav(tmp_path / "noisy.wav", _noisy(rng, 2205, 2), 44100)
    out = tmp_path / "clean.wav"
    example["main"](
        [str(tmp_path / "noisy.wav"), "--model", keras_file]
        + ["--output", str(out)]
    )
    y, rate = _read_wav(out)
    assert rate == 44100 and y.shape == x.shape
    down = soxr.resample(x, 44100, 16000, quality="HQ")
    back = soxr.resample(_offline(model, down), 16000, 44100, quality="HQ")
    want = np.zeros_like(x)
    want[: min(len(x), len(back))] = back[: len(x)]
    np.testing.assert_allclose(y, want, atol=TOLERANCE)


def test_streams_equal_the_offline_route(example, files, tmp_path, rng):
    """Hop by hop (Keras, stereo; LiteRT, mono): the offline route's
    samples everywhere, edges included (the stream is primed with the
    zeros the offline route pads with), time-aligned."""
    model, keras_file, tflite_file = files
    for channels, route in ((2, keras_file), (1, tflite_file)):
        x = _write_wav(
            tmp_path / "noisy.wav", _noisy(rng, 1111, channels), 16000
        )
        argv = [str(tmp_path / "noisy.wav"), "--model", route]
        argv += ["--output", str(tmp_path / "clean.wav"), "--overwrite"]
        if route == keras_file:
            argv.append("--stream")
        else:
            argv += ["--threads", "1"]
        y = example["main"](argv)
        written, rate = _read_wav(tmp_path / "clean.wav")
        assert rate == 16000 and written.shape == x.shape
        want = _offline(model, x)
        np.testing.assert_allclose(y, want, atol=1e-3, err_msg=route)
        np.testing.assert_allclose(written, want, atol=1e-3 + TOLERANCE)


def test_stream_aligns_when_the_hop_does_not_divide_the_frame(example, rng):
    """Frame 64, hop 24: the priming puts the stream's frames where the
    offline route's are, so the two routes still agree everywhere."""
    import cvattn_keras as cvk

    model = cvk.models.speech_enhancer(
        frame_length=64,
        frame_step=24,
        embed_dim=8,
        num_heads=2,
        num_layers=1,
        sliding_window=4,
    )
    x = _noisy(rng, 250, 2).T.astype(np.float32)
    stft = model.get_layer("stft")
    want = example["KerasOffline"](model, stft)(x)
    got = example["KerasStream"](model, stft)(x)
    assert got.shape == want.shape == x.shape
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_tflite_frame_length_is_read_and_checked(
    example, files, tmp_path, rng, capsys
):
    """The file's frame length comes from its STFT state; a
    `--frame-length` that disagrees is refused."""
    _, _, tflite_file = files
    _write_wav(tmp_path / "noisy.wav", _noisy(rng, 300), 16000)
    argv = [str(tmp_path / "noisy.wav"), "--model", tflite_file]
    argv += ["--output", str(tmp_path / "clean.wav")]
    y = example["main"]([*argv, "--frame-length", str(FRAME)])
    assert y.shape == (300, 1)
    assert f"frames of {FRAME}, hop {HOP}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit:
        example["main"]([*argv, "--overwrite", "--frame-length", "512"])
    assert exit.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"has frame_length {FRAME}" in line, line


def test_reads_float_wav(example, tmp_path):
    """IEEE float WAV (format 3), which Python's `wave` refuses."""
    x = np.array([[0.5, -0.25], [0.125, 1.0], [-1.0, 0.0]], "<f4")
    path = tmp_path / "float.wav"
    path.write_bytes(_float_wav(x.tobytes(), rate=22050, channels=2))
    got, rate = example["read_wav"](str(path))
    assert rate == 22050
    np.testing.assert_array_equal(got, x)


def _float_wav(data, rate=16000, channels=1):
    import struct

    fmt = struct.pack(
        "<HHIIHH", 3, channels, rate, rate * 4 * channels, 4 * channels, 32
    )
    body = b"WAVEfmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


@pytest.fixture(scope="module")
def plain_tflite(tmp_path_factory):
    """A `.tflite` file that is not a streaming file."""
    import keras

    import cvattn_keras as cvk

    path = tmp_path_factory.mktemp("plain") / "plain.tflite"
    model = keras.Sequential([keras.Input((HOP,)), keras.layers.Dense(HOP)])
    cvk.export.export_tflite(model, str(path), batch_size=1)
    return str(path)


CASES = [
    ("missing_input", 2, "no such file"),
    ("directory_input", 1, "Is a directory"),
    ("not_a_wav", 1, "not a WAV file"),
    ("empty", 1, "holds no samples"),
    ("non_finite", 1, "non-finite samples"),
    ("missing_model", 2, "no such file"),
    ("other_suffix", 2, "not a .keras or .tflite file"),
    ("garbage_keras", 1, "not a Keras model file"),
    ("garbage_tflite", 1, "not a TFLite model"),
    ("plain_tflite", 1, "not a streaming file"),
    ("no_output_folder", 2, "no folder"),
    ("output_exists", 2, "--overwrite"),
    ("threads_with_keras", 2, "--threads goes with a .tflite model"),
    ("no_soxr", 1, 'pip install "cvattn-keras[speech]"'),
]


@pytest.mark.parametrize("case, status, message", CASES)
def test_refuses_in_one_line(
    example,
    files,
    tmp_path,
    rng,
    capsys,
    monkeypatch,
    request,
    case,
    status,
    message,
):
    """Exit status 2 (the command line) or 1 (the files), one line on
    stderr, no traceback, nothing written."""
    _, keras_file, _ = files
    noisy, model = tmp_path / "noisy.wav", keras_file
    output = tmp_path / "clean.wav"
    _write_wav(noisy, _noisy(rng, 500), 16000)
    extra = []
    if case == "missing_input":
        noisy = tmp_path / "absent.wav"
    elif case == "directory_input":
        noisy = tmp_path / "folder.wav"
        noisy.mkdir()
    elif case == "not_a_wav":
        noisy.write_bytes(b"ID3\x03" + bytes(200))
    elif case == "empty":
        _write_wav(noisy, np.zeros((0, 1)), 16000)
    elif case == "non_finite":
        data = np.array([0.1, np.nan, 0.2], "<f4").tobytes()
        noisy.write_bytes(_float_wav(data))
    elif case == "missing_model":
        model = str(tmp_path / "absent.keras")
    elif case == "other_suffix":
        model = str(tmp_path / "model.h5")
        (tmp_path / "model.h5").write_bytes(b"")
    elif case == "garbage_keras":
        model = str(tmp_path / "garbage.keras")
        (tmp_path / "garbage.keras").write_bytes(b"not a zip file")
    elif case == "garbage_tflite":
        model = str(tmp_path / "garbage.tflite")
        (tmp_path / "garbage.tflite").write_bytes(b"not a flatbuffer")
    elif case == "plain_tflite":
        model = request.getfixturevalue("plain_tflite")
    elif case == "no_output_folder":
        output = tmp_path / "absent" / "clean.wav"
    elif case == "output_exists":
        output.write_bytes(b"keep me")
    elif case == "threads_with_keras":
        extra = ["--threads", "2"]
    elif case == "no_soxr":
        _write_wav(noisy, _noisy(rng, 500), 8000)
        monkeypatch.setitem(sys.modules, "soxr", None)  # import fails
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as exit:
        example["main"](
            [str(noisy), "--model", model, "--output", str(output), *extra]
        )
    assert exit.value.code == status
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert message in line, line
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before


def test_help_in_a_subprocess():
    """`--help` says that a `.tflite` file streams."""
    result = subprocess.run(
        [sys.executable, EXAMPLE, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    text = " ".join(result.stdout.split())
    assert "--stream implied" in text and "--overwrite" in text, text
