"""Every example runs end to end with --smoke (seconds each)."""

import os
import runpy

import numpy as np
import pytest

pytestmark = pytest.mark.slow

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


@pytest.fixture(autouse=True)
def _environment_restored():
    """The examples set variables when they load (`TF_CPP_MIN_LOG_LEVEL`,
    `CVATTN_KERAS_QUIET_STARTUP`); run in this process, they must not leak
    into later tests and their subprocesses."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def _main(name):
    return runpy.run_path(os.path.join(EXAMPLES, name))["main"]


def test_quickstart():
    error = _main("quickstart.py")(["--smoke"])
    assert error < 1e-4


def _write_wav(path, x, rate, width=2):
    """`x` in [-1, 1] as a mono PCM WAV of `width` bytes per sample."""
    import wave

    import numpy as np

    full = 2.0 ** (8 * width - 1)
    q = np.clip(np.round(x * full), -full, full - 1).astype("<i4")
    if width == 1:
        data = (q + 128).astype(np.uint8).tobytes()
    elif width == 3:
        data = q.view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    else:
        data = q.astype({2: "<i2", 4: "<i4"}[width]).tobytes()
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(width)
        f.setframerate(rate)
        f.writeframes(data)


def test_train_music_then_transcribe(tmp_path):
    """The default run trains from waveforms; its file transcribes a WAV
    on LiteRT as the Keras model does."""
    import json

    import keras
    import numpy as np

    import cvattn_keras as cvk

    ap = _main("train_music.py")(["--smoke", "--output", str(tmp_path)])
    assert 0 <= ap <= 1
    for name in (
        "music_classifier.keras",
        "music_classifier.tflite",
        "music_classifier_full_int8.tflite",
        "train_music.png",
    ):
        assert (tmp_path / name).stat().st_size > 0
    spec = json.loads((tmp_path / "music_classifier.json").read_text())
    assert spec["input"] == "waveform" and spec["sample_rate"] == 4000
    model = keras.saving.load_model(tmp_path / "music_classifier.keras")
    assert model.input.name == "waveform"
    assert model.input_shape == (None, spec["samples"])

    # 2.5 windows of music at 8 kHz: resampled to the model's 4 kHz.
    audio, _ = cvk.datasets.synthetic_music(
        num_samples=1,
        frames=160,
        bins=128,
        sample_rate=8000,
        seed=3,
        output="waveform",
    )
    x = 0.5 * audio[0] / np.abs(audio[0]).max()
    _write_wav(tmp_path / "clip.wav", x, 8000)
    transcribe = runpy.run_path(os.path.join(EXAMPLES, "transcribe.py"))
    notes = transcribe["main"](
        [
            str(tmp_path / "clip.wav"),
            "--model",
            str(tmp_path / "music_classifier.tflite"),
            "--threshold",
            "0.3",
        ]
    )
    # The same decoding of the Keras model's probabilities.
    resampled = transcribe["resample"](
        transcribe["read_wav"](str(tmp_path / "clip.wav"))[0], 8000, 4000
    )
    windows = transcribe["windows"](
        resampled, spec["samples"], spec["frames"], spec["frame_step"]
    )
    assert windows.shape == (3, spec["samples"])
    logits = keras.ops.convert_to_numpy(model(windows)).reshape(-1, 24)
    probabilities = 1 / (1 + np.exp(-logits[:80].astype(np.float64)))
    want = transcribe["decode"](probabilities, 0.3, 1, spec)
    assert [n[:3] for n in notes] == [n[:3] for n in want]
    np.testing.assert_allclose(
        [n[3] for n in notes], [n[3] for n in want], atol=1e-4
    )
    for suffix in (".notes.csv", ".mid", ".png"):
        assert (tmp_path / f"clip{suffix}").stat().st_size > 0
    rows = (tmp_path / "clip.notes.csv").read_text().splitlines()
    assert rows[0] == "onset_seconds,offset_seconds,midi_pitch,peak_probability"
    assert len(rows) == len(notes) + 1
    # The modes table: one row per smoke mode, AP measured on LiteRT.
    table = (tmp_path / "tflite_modes.md").read_text().splitlines()
    assert [row.split("|")[1].strip() for row in table[2:]] == [
        "float32",
        "full_int8",
    ]
    for row in table[2:]:
        assert 0 <= float(row.split("|")[4]) <= 1, row


def test_train_music_figure_keeps_every_title_inside(rng):
    """Each panel's title (and the figure's) lies inside the canvas."""
    module = runpy.run_path(os.path.join(EXAMPLES, "train_music.py"))
    history = {
        key: list(rng.random(3))
        for key in (
            "loss",
            "val_loss",
            "micro_average_precision",
            "val_micro_average_precision",
        )
    }
    truth = rng.random((64, 128)) > 0.9
    figure = module["draw_figure"](
        history, rng.random((64, 64)), truth, truth, "CAtt, held-out AP 0.5"
    )
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    canvas = figure.bbox
    texts = [axes.title for axes in figure.axes if axes.get_title()]
    texts.append(figure._suptitle)
    assert len(texts) == 5
    for text in texts:
        box = text.get_window_extent(renderer)
        assert canvas.x0 <= box.x0 and box.x1 <= canvas.x1, text.get_text()
        assert canvas.y0 <= box.y0 and box.y1 <= canvas.y1, text.get_text()
    from matplotlib import pyplot as plt

    plt.close(figure)


def test_train_music_on_musicnet_files(tmp_path, rng):
    """--data reads the MusicNet layout (here a tiny file)."""
    import numpy as np

    x = rng.standard_normal((10, 64, 2 * 2048)).astype("float32")
    y = (rng.random((10, 64, 128)) > 0.95).astype("float32")
    np.savez(tmp_path / "musicnet.npz", x=x, y=y)
    ap = _main("train_music.py")(
        [
            "--smoke",
            "--data",
            str(tmp_path / "musicnet.npz"),
            "--output",
            str(tmp_path),
            "--modes",
            "none",
        ]
    )
    assert 0 <= ap <= 1


def test_train_music_reads_scores(tmp_path, monkeypatch):
    """--data scores: score_music's train split and its test works as the
    held-out data, the model's STFT from its config (a few seconds of
    render in a fresh cache; the training is the waveform run's, tested
    above)."""
    monkeypatch.setenv("CVATTN_KERAS_CACHE", str(tmp_path / "cache"))
    module = runpy.run_path(os.path.join(EXAMPLES, "train_music.py"))
    args = module["parse_args"](["--smoke", "--data", "scores"])
    assert args.input == "waveform"
    (x, y), (x_test, y_test), stft, audio = module["load_data"](args)
    assert audio == dict(sample_rate=16000, lowest_note=21)
    # 3-s clips, 48,000 samples: 1 + 48000 // 512 = 94 centred frames,
    # which the model takes from 93 * 512 samples (the tail is cut).
    frames = 1 + 48000 // stft.frame_step
    assert y.shape[1:] == y_test.shape[1:] == (frames, 88)
    assert x.dtype == "float32" and x.shape[1] == x_test.shape[1] == 47616
    assert tuple(stft(x[:1]).shape) == (1, frames, 2 * stft.num_bins)
    import cvattn_keras as cvk

    model = cvk.models.music_classifier(
        frames=frames,
        stft=stft,
        notes=88,
        embed_dim=8,
        num_heads=2,
        num_layers=1,
        head_dim=8,
        frontend_filters=(2,),
        frontend_kernel_sizes=(3,),
    )
    assert model.input_shape == (None, x.shape[1])
    with pytest.raises(SystemExit):
        module["parse_args"](["--data", "scores", "--input", "spectra"])


def test_no_example_above_the_line_limit():
    """Issue 42: the examples and their parts keep the library's rule for
    modules (tests/test_package_structure.py), at most 900 lines."""
    long = {}
    for name in sorted(os.listdir(EXAMPLES)):
        if name.endswith(".py"):
            with open(os.path.join(EXAMPLES, name)) as f:
                count = len(f.read().splitlines())
            if count > 900:
                long[name] = count
    assert not long, f"examples above 900 lines: {long}"


def _variants_part(part):
    """The names of `examples/_variants_{part}.py`, a part of
    compare_variants.py, imported as the script imports it (from its
    folder)."""
    import importlib
    import sys

    folder = os.path.abspath(EXAMPLES)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return vars(importlib.import_module(f"_variants_{part}"))


def test_compare_variants(tmp_path):
    table = tmp_path / "table.md"
    rows = _main("compare_variants.py")(["--smoke", "--output", str(table)])
    assert [row[0] for row in rows] == [
        "real / inner",
        "abs / bilinear",
        "real baseline",
    ]
    assert "| real baseline |" in table.read_text()


_SCORE_METRICS = ("AP", "frame P", "frame R", "frame acc.", "note F1")
_SCORE_KEYS = (
    "ap",
    "frame_precision",
    "frame_recall",
    "frame_accuracy",
    "note_f1",
)


def test_compare_variants_on_scores_smoke(tmp_path, monkeypatch):
    """--data scores --smoke: both tasks on a few seconds of score_music
    (rendered in a temporary folder, the user's cache untouched), a table
    per task with every metric and the not-comparable sentence, and the
    JSON of the runs."""
    import json
    import re

    monkeypatch.setenv("CVATTN_KERAS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    results = _main("compare_variants.py")(
        ["--data", "scores", "--smoke", "--output", str(out)]
    )
    assert not (tmp_path / "cache").exists()
    variants = ["real / inner", "abs / bilinear"]
    assert list(results["transcription"]) == variants + ["real baseline"]
    assert list(results["generation"]) == variants + ["real baseline"]
    for task, rows in results.items():
        text = (out / f"{task}.md").read_text()
        assert "These numbers are not comparable to MusicNet's: " in text
        assert "--data scores --smoke" in text
        lines = text.splitlines()
        header = next(line for line in lines if line.startswith("| variant"))
        assert all(f"| {name} |" in header for name in _SCORE_METRICS)
        table = [line for line in lines if line.startswith("| ")][2:]
        assert [line.split(" | ")[0] for line in table] == [
            "| " + label for label in rows
        ]
        for line in table:
            # One seed: the means alone (no std). Generation: and the AP
            # with the notes fed back and of teacher forcing;
            # transcription: the AP on the held-out programs and its gap
            # (issue 33).
            extra = 2
            cells = line.split(" | ")[1:]
            # and the parameters and the time
            assert len(cells) == len(_SCORE_METRICS) + extra + 2
            cells = cells[: len(_SCORE_METRICS) + extra]
            assert all(re.fullmatch(r"-?\d\.\d{3}", c) for c in cells)
            # Only the gap (test minus held-out AP) can be negative.
            scores = cells if task == "generation" else cells[:-1]
            assert all(0 <= float(c) <= 1 for c in scores)
            assert -1 <= float(cells[-1]) <= 1
    text = (out / "generation.md").read_text()
    assert "`models.real_music_generator`" in text
    assert "| AP (notes fed back) | AP (teacher forced) |" in text
    assert (
        "--generation-training logits --generation-passes 2 --teacher-rate 0 "
        "--source-weight 3"
    ) in text
    text = (out / "transcription.md").read_text()
    assert "| AP (held-out programs) | gap (held-out programs) |" in text
    assert "Ranking by AP on the held-out programs: " in text
    record = json.loads((out / "runs.json").read_text())
    for task, count in (("transcription", 3), ("generation", 3)):
        assert len(record[task]) == count
        for run in record[task]:
            for key in _SCORE_KEYS:
                assert 0 <= run[key] <= 1
    for run in record["transcription"]:
        assert 0 <= run["held_out_programs_ap"] <= 1
        assert run["held_out_programs_gap"] == (
            run["ap"] - run["held_out_programs_ap"]
        )
    for key in ("ap_teacher_forced", "ap_notes_fed_back"):
        assert 0 <= record["generation"][0][key] <= 1


def test_compare_variants_windows_follow_score_labels(tmp_path):
    """The windows of --data scores start on a multiple of the hop, their
    labels are score_music's at the windows' own STFT frames (recomputed
    from its notes), and the STFT of a window is the clip's there."""
    import keras
    import numpy as np

    import cvattn_keras as cvk

    module = _variants_part("data")
    stft = module["stft"]()
    scores = module["SCORES"]
    data = cvk.datasets.score_music(
        "test",
        minutes=0.07,
        sample_rate=scores["sample_rate"],
        lowest_note=scores["lowest_note"],
        notes=scores["notes"],
        clip_seconds=2.048,
        stft=stft,
        cache_dir=str(tmp_path),
    )
    frames, hop, rate = 16, stft.frame_step, data.sample_rate
    x, y, where = module["cut_windows"](data.audio, data.labels, stft, frames)
    length = cvk.models.waveform_length(stft, frames)
    assert x.shape == (len(where), length) and len(where) == 8
    assert y.shape == (len(where), frames, scores["notes"])
    # Where the STFT centres the window's frames (the last one on sample
    # `length`, one past the window's end: `waveform_length` is the fewest
    # samples that make `frames` frames).
    centres = np.arange(frames) * hop
    assert stft.center and length == centres[-1]
    assert keras.ops.convert_to_numpy(stft(x[:1])).shape[1] == frames
    clip_centres = cvk.stft.frame_centres(
        data.audio.shape[1], hop, stft.fft_length, stft.center, stft.pad_mode
    )
    spectra = keras.ops.convert_to_numpy(stft(data.audio))
    inside = (centres >= stft.fft_length // 2) & (
        centres + stft.fft_length // 2 <= length
    )
    assert inside.sum() >= frames - 2 * (stft.fft_length // hop)
    for i, (clip, first) in enumerate(where):
        assert first % frames == 0
        start = first * hop
        # The window's frame t is the clip's frame first + t.
        np.testing.assert_array_equal(
            start + centres, clip_centres[first : first + frames]
        )
        np.testing.assert_array_equal(x[i], data.audio[clip, start:][:length])
        want = np.zeros((frames, scores["notes"]), np.float32)
        for onset, offset, pitch in data.notes[clip]:
            on, off = round(onset * rate), round(offset * rate)
            sounding = (start + centres >= on) & (start + centres < off)
            want[sounding, pitch - scores["lowest_note"]] = 1
        np.testing.assert_array_equal(y[i], want)
        window = keras.ops.convert_to_numpy(stft(x[i : i + 1]))[0]
        np.testing.assert_allclose(
            window[inside],
            spectra[clip, first : first + frames][inside],
            atol=1e-3 * np.abs(spectra[clip]).max(),
        )
    assert y.sum() > 0


def test_compare_variants_held_out_windows(tmp_path):
    """The held-out timbres of --data scores: the test works again, with
    the same labels and windows, played by the held-out programs (other
    audio)."""
    import argparse

    import numpy as np

    module = _variants_part("data")
    assert not set(module["TRAIN_PROGRAMS"]) & set(module["HELD_OUT_PROGRAMS"])
    args = argparse.Namespace(
        train_minutes=0.1,
        test_minutes=0.07,
        clip_seconds=2.048,
        frames=16,
        batch_size=8,
        cache_dir=str(tmp_path),
        programs=None,
        held_out_programs=[4, 12, 60],
        timbre_augmentation=0.5,
        soundfonts=None,
        held_out_soundfont=None,
        held_out_augmentation=0.0,
    )
    windows, test = module["load_score_windows"](
        args, module["stft"](), held_out=True
    )
    assert set(windows) == {"train", "test", "held_out_programs"}
    (x, y), (x_held, y_held) = windows["test"], windows["held_out_programs"]
    np.testing.assert_array_equal(y_held, y)
    assert x_held.shape == x.shape and np.abs(x_held - x).max() > 0.01
    assert y.sum() > 0


def test_compare_variants_rejects_bad_input(capsys):
    main = _main("compare_variants.py")
    for argv, message in (
        (["--data", "musicnet.npz"], "--data takes 'scores'"),
        (["--data", "scores", "--frames", "2"], "too few for the model's"),
        (
            ["--data", "scores", "--task", "transcription", "--frames", "1"],
            "--frames 3 or more",
        ),
        (["--frames", "64"], "--frames applies to --data scores only"),
        (["--data", "scores", "--samples", "9"], "--samples sizes"),
        (["--programs", "0"], "--programs applies to --data scores only"),
        (
            ["--data", "scores", "--held-out-programs", "4", "40"],
            "--held-out-programs must be absent from training",
        ),
        (
            ["--data", "scores", "--programs", "0", "200"],
            "--programs takes distinct General MIDI programs",
        ),
        (
            ["--data", "scores", "--timbre-augmentation", "2"],
            "--timbre-augmentation must be from 0 to 1",
        ),
        (
            ["--data", "scores", "--generation-passes", "22"],
            "--generation-passes must be from 1 to the 21 generated frames",
        ),
        (
            ["--data", "scores", "--teacher-rate", "1"],
            "--teacher-rate must be in [0, 1). Received: --teacher-rate 1",
        ),
        (
            ["--data", "scores", "--source-weight", "-1"],
            "--source-weight must be a finite number >= 0",
        ),
        (
            ["--data", "scores", "--generation-training", "sampled"],
            "invalid choice: 'sampled'",
        ),
        (
            ["--generation-passes", "2"],
            "--generation-passes applies to --data scores only",
        ),
        (
            ["--data", "scores", "--generation-training", "teacher"]
            + ["--generation-passes", "2"],
            "--generation-passes applies to --generation-training logits",
        ),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err


def test_compare_variants_streaming_smoke(tmp_path, monkeypatch):
    """--data scores --streaming --smoke: CAtt and the real baseline,
    bidirectional (sinusoidal, rotary) and causal; the causal ones also
    streamed over whole clips; the paired differences against the row
    each names; the table and runs.json."""
    import json
    import math

    monkeypatch.setenv("CVATTN_KERAS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    record = _main("compare_variants.py")(
        ["--data", "scores", "--streaming", "--smoke", "--output", str(out)]
    )
    assert not (tmp_path / "cache").exists()
    settings = [
        ("bidirectional", "sinusoidal", None),
        ("bidirectional", "rotary", "bidirectional, sinusoidal"),
        ("causal, W = 4", "rotary", "bidirectional, rotary"),
    ]
    rows = record["summary"]
    assert [(r["model"], r["attention"], r["positions"]) for r in rows] == [
        (model, attention, positions)
        for model in ("real / inner", "real baseline")
        for attention, positions, _ in settings
    ]
    for row, (attention, _, reference) in zip(rows, settings * 2):
        assert row.get("reference") == reference
        assert ("ap_streamed" in row) == (attention != "bidirectional")
        assert 0 <= row["ap"][0] <= 1
        if reference is not None:
            mean, half = row["difference"]
            assert abs(mean) <= 1 and math.isnan(half)  # one seed
    assert record["seeds_done"] == 1 and len(record["runs"]) == 6
    text = (out / "streaming.md").read_text()
    assert "--streaming --windows 4" in text
    assert "| causal, W = 4 | rotary |" in text
    assert "partial" not in text
    saved = json.loads((out / "runs.json").read_text())["summary"]
    assert [r["attention"] for r in saved] == [r["attention"] for r in rows]
    assert saved[2]["ap_streamed"] == list(rows[2]["ap_streamed"])


def test_compare_variants_paired_lines():
    """The score tables' statistics: the sample std (the mean alone for
    one seed), and the paired differences against the real baseline
    (paired by seed) and each note's frequency, with 95% t intervals,
    against NumPy and SciPy."""
    from scipy import stats

    def interval(d):
        low, high = stats.t.interval(
            0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d)
        )
        return f"{d.mean():+.3f} [{low:+.3f}, {high:+.3f}]"

    module = _variants_part("report")
    assert module["mean_std"]([0.5]) == "0.500"
    assert module["mean_std"]([0.4, 0.6]) == "0.500 +- 0.141"
    rng = np.random.default_rng(0)
    ap, ap_real, shift = rng.random((3, 10))
    ours = [
        dict(seed=s, ap=ap[s], held_out_programs_ap=ap[s] - shift[s])
        for s in range(10)
    ]
    # In another order: paired by the seed, not by the position.
    real = [
        dict(seed=s, ap=ap_real[s], held_out_programs_ap=ap_real[s])
        for s in reversed(range(10))
    ]
    rows = [("real / inner", ours), ("real baseline", real)]
    held_out = [("held_out_programs", "held-out programs")]
    lines = module["paired_lines"]("generation", rows, held_out, 0.25)
    assert len(lines) == 3  # one pair; each row against the frequency
    assert lines[0].startswith(
        "Paired AP difference real / inner minus the real baseline, seed "
        "by seed on the fixed test works (mean over 10 seeds [95% t "
        "interval]): "
    )
    assert f"test works {interval(ap - ap_real)}" in lines[0]
    assert f"held-out programs {interval(ap - shift - ap_real)}" in lines[0]
    assert interval(ap - 0.25) in lines[1]
    assert lines[2].startswith("AP of real baseline minus the AP of each ")
    assert interval(ap_real - 0.25) in lines[2]

    # Seeds the rows do not share are left out, and the line says so.
    lines = module["paired_lines"](
        "transcription", [("real / inner", ours[:6]), rows[1]], [], 0.25
    )
    assert len(lines) == 1
    assert "(mean over 6 seeds (the seeds both rows have) " in lines[0]
    assert interval(ap[:6] - ap_real[:6]) in lines[0]
    # One seed: no interval.
    one_seed = [("real / inner", ours[:1]), ("real baseline", real[:1])]
    assert module["paired_lines"]("generation", one_seed, [], 0.2) == []


def test_compare_variants_paired_interval():
    """The streaming table's paired difference and its 95% t interval."""
    module = _variants_part("report")
    mean, half = module["paired"](
        [dict(ap=0.5), dict(ap=0.6), dict(ap=0.7)],
        [dict(ap=0.4), dict(ap=0.4), dict(ap=0.4)],
        "ap",
    )
    # d = 0.1, 0.2, 0.3: mean 0.2, t(0.975, 2) = 4.303 * 0.1 / sqrt(3).
    assert np.isclose(mean, 0.2) and np.isclose(half, 0.24843, atol=1e-4)


def test_compare_variants_streaming_rejects_bad_input(capsys):
    main = _main("compare_variants.py")
    for argv, message in (
        (["--streaming"], "--streaming applies to --data scores only"),
        (
            ["--data", "scores", "--streaming", "--task", "generation"],
            "--streaming compares transcription only",
        ),
        (
            ["--data", "scores", "--streaming", "--windows", "0"],
            "--windows must be positive",
        ),
        (["--data", "scores", "--windows", "8"], "--windows applies to"),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err


def test_modulation():
    results = _main("modulation.py")(["--smoke"])
    assert set(results) == {"complex", "real"}


def test_radio(tmp_path):
    """`examples/radio.py --smoke`: every model trained and scored per SNR,
    the best exported and scored on LiteRT, with a QAT and a fine-tuned
    full_int8 file each (`--qat 1`), the complex classifier streamed on
    LiteRT equal to its Keras stream."""
    result = _main("radio.py")(
        ["--smoke", "--qat", "1", "--out", str(tmp_path)]
    )
    assert set(result["runs"]) == {"complex", "real", "cnn"}
    snrs = sorted(result["summary"]["complex"]["per_snr"])
    assert snrs == [float(s) for s in range(-20, 20, 2)]
    # The best model on validation, and the complex one when another wins:
    # each exports in both modes (the real transformer's full_int8 too,
    # since the export traces Keras' LayerNormalization without its NEG).
    rows = [r for r in result["exported"] if r["model"] == "complex"]
    assert [r["mode"] for r in rows] == [
        "float32",
        "full_int8",
        "fine-tuned 1 epochs, full_int8",
        "QAT 1 epochs, full_int8",
    ]
    assert (tmp_path / "radio_complex_qat_full_int8.tflite").exists()
    for row in result["exported"]:
        assert "error" not in row, row
        assert 0.0 <= row["mean"] <= 1.0
    live = result["live"]
    # float32 LiteRT against the Keras stream, and against the frame
    # classifier on the last 16 tokens (the same function: the windows 8
    # and 9 make each decision depend on 16 tokens): rounding only (the
    # streaming tests hold 1e-5 relative on larger models).
    assert live["error_vs_keras_stream"] < 1e-4
    assert live["error_vs_frames"] < 1e-4
    assert (tmp_path / "radio.json").exists()
    assert (tmp_path / "radio_complex_stream.tflite").exists()


def test_radio_refuses_bad_arguments(capsys):
    main = _main("radio.py")
    for argv, message in (
        (["--models", "transformer"], "argument --models: must list names"),
        (["--modes", "int4"], "argument --modes: must list names"),
        (["--seeds", "0"], "argument --seeds: must be an int >= 1"),
        (
            ["--stream-tokens", "8"],
            "argument --stream-tokens: must be an int >= 32",
        ),
        (
            ["--stream-snr", "40"],
            "argument --stream-snr: must be a finite number in [-20, 30]",
        ),
        (["--batch-size", "0"], "argument --batch-size: must be an int >= 1"),
        (["--qat", "0"], "argument --qat: must be an int >= 1"),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        assert message in capsys.readouterr().err


def test_examples_log_one_line_per_epoch_when_redirected():
    """Every `fit`, `evaluate` and `predict` in the examples passes
    `verbose`: 0, 2, or an expression that asks `sys.stdout.isatty()`
    (Keras' default, "auto", draws a progress bar, thousands of control
    characters an epoch in a redirected log)."""
    import ast
    import glob

    bad = []
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.py"))):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("fit", "evaluate", "predict")
            ):
                continue
            where = f"{os.path.basename(path)}:{node.lineno}"
            given = [k.value for k in node.keywords if k.arg == "verbose"]
            if not given:
                bad.append(f"{where} (no verbose)")
                continue
            (value,) = given
            quiet = isinstance(value, ast.Constant) and value.value in (0, 2)
            asks = any(
                isinstance(n, ast.Attribute) and n.attr == "isatty"
                for n in ast.walk(value)
            )
            if not (quiet or asks):
                bad.append(f"{where} (verbose={ast.unparse(value)})")
    assert not bad, bad


def _transcribe():
    return runpy.run_path(os.path.join(EXAMPLES, "transcribe.py"))


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_transcribe_reads_pcm_wav(tmp_path, rng, width):
    import numpy as np

    x = np.clip(0.3 * rng.standard_normal(500), -0.99, 0.99)
    _write_wav(tmp_path / "x.wav", x, 16000, width)
    got, rate = _transcribe()["read_wav"](str(tmp_path / "x.wav"))
    assert rate == 16000 and got.dtype == np.float32
    # Quantization to `width` bytes: half a step of 2 / 2**(8 width).
    np.testing.assert_allclose(got, x, atol=1.01 / 2.0 ** (8 * width - 1))


def test_transcribe_resamples_without_edge_ringing():
    """python-soxr: a tone that does not fit the file a whole number of
    times (one FFT of the file rang there: 0.34 off throughout) is exact
    25 ms from either end."""
    import numpy as np

    pytest.importorskip("soxr")
    frequency, n = 440.5, 8123
    x = np.sin(2 * np.pi * frequency * np.arange(n) / 8000 + 0.3)
    got = _transcribe()["resample"](x, 8000, 4000)
    assert abs(len(got) - n / 2) <= 1 and got.dtype == np.float32
    want = np.sin(2 * np.pi * frequency * np.arange(len(got)) / 4000 + 0.3)
    np.testing.assert_allclose(got[100:-100], want[100:-100], atol=1e-4)


def test_transcribe_resamples_a_stream(rng):
    """Chunk by chunk, the whole file's samples."""
    import numpy as np

    pytest.importorskip("soxr")
    transcribe = _transcribe()
    x = rng.standard_normal(5000).astype(np.float32)
    chunks = np.array_split(x, [7, 1000, 1001, 3333])
    got = np.concatenate(
        list(transcribe["resample_chunks"](chunks, 44100, 16000))
    )
    np.testing.assert_allclose(
        got, transcribe["resample"](x, 44100, 16000), atol=1e-6
    )


def test_transcribe_decodes_runs_of_frames():
    import numpy as np

    spec = dict(sample_rate=100, frame_step=10, first_centre=5, lowest_note=60)
    p = np.zeros((8, 3))
    p[1:4, 0] = [0.6, 0.9, 0.7]  # frames 1-3: 0.1 to 0.4 s
    p[5, 0] = 0.8  # one frame: dropped with min_frames=2
    p[6:8, 2] = 0.55  # to the end: 0.6 to 0.8 s
    p[2, 1] = 0.5  # not above the threshold
    notes = _transcribe()["decode"](p, 0.5, 2, spec)
    assert notes == [(0.1, 0.4, 60, 0.9), (0.6, 0.8, 62, 0.55)]
    assert len(_transcribe()["decode"](p, 0.5, 1, spec)) == 3


def test_transcribe_writes_a_midi_file(tmp_path):
    """By pretty_midi: the notes read back, to a tick (1/960 s)."""
    pretty_midi = pytest.importorskip("pretty_midi")
    notes = [(0.0, 0.5, 60, 1.0), (0.25, 1.0, 64, 0.5), (1.2, 1.3, 48, 0.0)]
    _transcribe()["write_midi"](str(tmp_path / "x.mid"), notes)
    midi = pretty_midi.PrettyMIDI(str(tmp_path / "x.mid"))
    assert midi.get_tempo_changes()[1].tolist() == [120.0]
    (piano,) = midi.instruments
    got = sorted((n.start, n.end, n.pitch, n.velocity) for n in piano.notes)
    want = [(0.0, 0.5, 60, 127), (0.25, 1.0, 64, 64), (1.2, 1.3, 48, 1)]
    for g, w in zip(got, want, strict=True):
        assert g[2:] == w[2:]
        assert abs(g[0] - w[0]) <= 1 / 960 and abs(g[1] - w[1]) <= 1 / 960


def _transcribe_inputs(tmp_path):
    """A model file (never run: every refusal comes first), its
    description, and the folder the outputs would go to."""
    import json

    (tmp_path / "model.tflite").write_bytes(b"not run")
    spec = dict(
        input="waveform",
        sample_rate=4000,
        samples=1024,
        frames=16,
        frame_step=64,
        first_centre=0,
        lowest_note=48,
        notes=24,
    )
    (tmp_path / "model.json").write_text(json.dumps(spec))
    (tmp_path / "out").mkdir()
    return [
        "--model",
        str(tmp_path / "model.tflite"),
        "--output",
        str(tmp_path / "out"),
    ]


def _wav_header(rate=8000, width=2, fmt=1, frames=0):
    import struct

    data = frames * width
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data)
        + b"WAVEfmt "
        + struct.pack(
            "<IHHIIHH", 16, fmt, 1, rate, rate * width, width, 8 * width
        )
        + b"data"
        + struct.pack("<I", data)
    )


@pytest.mark.parametrize(
    "case, message",
    [
        ("empty", "holds no samples"),
        ("one_sample", "shorter than one frame"),
        ("missing", "No such file"),
        ("directory", "Is a directory"),
        ("output_under_a_file", "is a file, not a folder"),
        ("not_riff", "not a PCM WAV"),
        ("header_only", "not a PCM WAV"),
        ("float", "not a PCM WAV"),
    ],
)
def test_transcribe_refuses_in_one_line(tmp_path, capsys, case, message):
    """Exit 2, one line on stderr naming the file and the problem, and
    no output written (each case was a traceback)."""
    import numpy as np

    argv = _transcribe_inputs(tmp_path)
    audio = tmp_path / "in.wav"
    named = str(audio)
    if case == "empty":
        _write_wav(audio, np.zeros(0), 8000)
    elif case == "one_sample":
        _write_wav(audio, np.full(1, 0.5), 8000)
    elif case == "directory":
        audio.mkdir()
    elif case == "output_under_a_file":
        _write_wav(audio, np.zeros(4000), 8000)
        (tmp_path / "file").write_text("")
        argv[-1] = named = str(tmp_path / "file" / "out")
    elif case == "not_riff":
        audio.write_bytes(b"ID3\x03" + bytes(200))
    elif case == "header_only":
        audio.write_bytes(_wav_header()[:36])
    elif case == "float":
        audio.write_bytes(_wav_header(width=4, fmt=3, frames=2) + bytes(8))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit:
        _transcribe()["main"]([str(audio), *argv])
    assert exit.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert named in line and message in line, line
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_transcribe_names_the_extra_it_needs(tmp_path, capsys, monkeypatch):
    """Without pretty_midi (or soxr), the `music` extra, before any work."""
    import sys

    import numpy as np

    argv = _transcribe_inputs(tmp_path)
    _write_wav(tmp_path / "in.wav", np.zeros(4000), 8000)
    for module in ("pretty_midi", "soxr"):
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, module, None)  # import fails
            with pytest.raises(SystemExit):
                _transcribe()["main"]([str(tmp_path / "in.wav"), *argv])
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"needs {module}, in the 'music' extra" in line, line
    assert not list((tmp_path / "out").iterdir())


def test_transcribe_writes_all_or_nothing(tmp_path):
    """A writer that fails leaves neither the files written before it
    nor the folder made for them."""

    def fail(path):
        raise OSError(28, "No space left on device")

    stem = str(tmp_path / "new" / "clip")
    with pytest.raises(OSError, match="No space"):
        _transcribe()["write_all"](
            stem,
            {
                ".notes.csv": lambda path: open(path, "w").close(),
                ".mid": fail,
            },
        )
    assert not list(tmp_path.iterdir())


def test_train_music_streaming_then_transcribe_stream(tmp_path, capsys):
    """`train_music.py --streaming` exports a streaming file that LiteRT
    runs as the Keras stream does; `transcribe.py --stream` feeds a WAV
    file hop by hop through it: its frame probabilities are the offline
    model's wherever a frame's window lies inside one of the offline
    windows, and the notes it prints and writes are those the same
    frames decode to."""
    import json

    import keras
    import numpy as np

    import cvattn_keras as cvk

    window = 8
    _main("train_music.py")(
        [
            "--smoke",
            "--streaming",
            str(window),
            "--frame-step",
            "128",
            "--modes",
            "none",
            "--output",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert "Keras stream vs offline model after the warm-up" in out
    spec = json.loads((tmp_path / "music_classifier.json").read_text())
    stream_spec = json.loads(
        (tmp_path / "music_classifier_stream.json").read_text()
    )
    assert stream_spec["stream"] and stream_spec["chunk"] == 128
    assert stream_spec["fft_length"] == 256
    assert stream_spec["warmup_steps"] == 1
    assert stream_spec["inputs"][0] == "chunk"
    assert all(n.startswith("state_") for n in stream_spec["inputs"][1:])
    # The streaming table: float32 only (--modes none), LiteRT equal to
    # the Keras stream.
    (row,) = (tmp_path / "stream_modes.md").read_text().splitlines()[2:]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[0] == "float32" and float(cells[2]) <= 1e-4, row
    assert 0 <= float(cells[3]) <= 1, row

    # 3 s of music at 8 kHz, resampled to the model's 4 kHz: 96 frames,
    # a window of 63 and part of the next.
    audio, _ = cvk.datasets.synthetic_music(
        num_samples=1,
        frames=96,
        bins=128,
        sample_rate=8000,
        seed=3,
        output="waveform",
    )
    _write_wav(
        tmp_path / "clip.wav", 0.5 * audio[0] / np.abs(audio).max(), 8000
    )
    transcribe = runpy.run_path(os.path.join(EXAMPLES, "transcribe.py"))
    stream_file = str(tmp_path / "music_classifier_stream.tflite")
    notes = transcribe["main"](
        [
            str(tmp_path / "clip.wav"),
            "--stream",
            "--model",
            stream_file,
            "--threshold",
            "0.3",
            "--block",
            "300",  # blocks that are not hops
            "--output",
            str(tmp_path / "stream"),
        ]
    )
    printed = capsys.readouterr().out.splitlines()
    offs = [line for line in printed if line.startswith("  off ")]
    ons = [line for line in printed if line.startswith("  on ")]
    assert notes and len(offs) == len(ons) == len(notes)
    decided = [line for line in ons if "decided at" in line]
    assert decided and all("algorithmic 64.0 ms" in line for line in ons)
    rows = (tmp_path / "stream" / "clip.notes.csv").read_text().splitlines()
    assert len(rows) == len(notes) + 1
    for suffix in (".mid", ".png"):
        assert (tmp_path / "stream" / f"clip{suffix}").stat().st_size > 0

    # The reference: the offline model on the windows offline
    # transcription cuts (frames W - 1 and later of each window see only
    # frames inside it, as the stream's do), the Keras stream elsewhere.
    x = transcribe["resample"](
        transcribe["read_wav"](str(tmp_path / "clip.wav"))[0], 8000, 4000
    )
    frames = -(-len(x) // 128)
    model = keras.saving.load_model(tmp_path / "music_classifier.keras")
    windows = transcribe["windows"](
        x, spec["samples"], spec["frames"], spec["frame_step"]
    )
    offline = keras.ops.convert_to_numpy(model(windows))
    offline = offline.reshape(-1, spec["notes"])[:frames]
    stream = cvk.streaming.to_streaming(model)
    hops = np.zeros((frames + 1) * 128, "float32")
    hops[: len(x)] = x
    keras_stream, _ = cvk.streaming.run_stream(
        stream, hops.reshape(1, frames + 1, 128)
    )
    keras_stream = keras_stream[0, 1:]  # after the warm-up step
    inside = np.arange(frames) % spec["frames"] >= window - 1
    inside[: spec["frames"]] = True
    assert inside.sum() < frames  # some frames see across windows
    np.testing.assert_allclose(
        keras_stream[inside], offline[inside], rtol=1e-5, atol=1e-5
    )
    reference = 1 / (1 + np.exp(-keras_stream.astype(np.float64)))

    # The file's probabilities, fed exactly as --stream feeds it.
    runner = cvk.export.TFLiteStream(stream_file, num_threads=1)
    blocks = [x[i : i + 150] for i in range(0, len(x), 150)]
    again, probabilities, seconds, _ = transcribe["stream_notes"](
        runner, blocks, 4000, stream_spec, 0.3, 1, lambda line: None
    )
    assert probabilities.shape == (frames, spec["notes"])
    assert len(seconds) == frames + 1
    np.testing.assert_allclose(probabilities, reference, atol=1e-4)
    assert again == notes
    want = transcribe["decode"](reference, 0.3, 1, stream_spec)
    assert [n[:3] for n in notes] == [n[:3] for n in want]
    np.testing.assert_allclose(
        [n[3] for n in notes], [n[3] for n in want], atol=1e-4
    )


class _Replay:
    """A stand-in for `TFLiteStream`: step k returns `logits[k]`."""

    def __init__(self, logits):
        self.logits, self.steps = logits, 0

    def step(self, chunk):
        assert chunk.shape == (1, 4)
        self.steps += 1
        return self.logits[self.steps - 1][None, None]


def test_transcribe_stream_decides_notes_as_frames_come(rng):
    """The online decisions are the offline decoding's notes, each onset
    decided `min_frames - 1` frames after the note's first frame."""
    import numpy as np

    transcribe = _transcribe()
    spec = dict(
        sample_rate=100,
        chunk=4,
        frame_step=4,
        fft_length=8,
        warmup_steps=1,
        first_centre=4,
        lowest_note=60,
        notes=3,
    )
    probabilities = rng.uniform(size=(40, 3))
    logits = np.log(probabilities / (1 - probabilities))
    # 40 frames: 160 samples, 41 steps (one of warm-up, discarded).
    replay = _Replay(np.concatenate([np.zeros((1, 3)), logits]))
    lines = []
    notes, got, _, delays = transcribe["stream_notes"](
        replay,
        [np.ones(50)] * 3 + [np.ones(10)],
        100,
        spec,
        0.5,
        2,
        lines.append,
    )
    assert replay.steps == 41
    # Hop k is complete once the block holding its last sample is read.
    ends = 4 * np.arange(1, 42)
    read = np.minimum(-(-ends // 50) * 50, 160)
    np.testing.assert_allclose(delays, np.maximum(0, (read - ends) / 100))
    np.testing.assert_allclose(got, probabilities)
    want = transcribe["decode"](probabilities, 0.5, 2, spec)
    assert [n[:3] for n in notes] == [n[:3] for n in want]
    np.testing.assert_allclose([n[3] for n in notes], [n[3] for n in want])
    ons = [line for line in lines if line.startswith("  on ")]
    assert len(ons) == len(notes)
    # The frame's span (80 ms) and one more hop (40 ms) for min_frames=2.
    assert all("algorithmic 120.0 ms" in line for line in ons)


def test_train_music_streaming_arguments(tmp_path, monkeypatch, capsys):
    """--streaming W trains on an uncentred STFT: score_music's labels
    follow its frames; --frame-step overlaps them; bad values are
    refused in one line."""
    monkeypatch.setenv("CVATTN_KERAS_CACHE", str(tmp_path / "cache"))
    module = runpy.run_path(os.path.join(EXAMPLES, "train_music.py"))
    args = module["parse_args"](
        ["--smoke", "--data", "scores", "--streaming", "8"]
    )
    (x, y), (x_test, y_test), stft, _ = module["load_data"](args)
    assert not stft.center and (stft.fft_length, stft.frame_step) == (
        2048,
        512,
    )
    # 3-s clips, 48,000 samples: 1 + (48000 - 2048) // 512 = 90 uncentred
    # frames, from 2048 + 89 * 512 samples.
    assert y.shape[1:] == y_test.shape[1:] == (90, 88)
    assert x.shape[1] == x_test.shape[1] == 2048 + 89 * 512
    args = module["parse_args"](
        ["--smoke", "--streaming", "4", "--frame-step", "64"]
    )
    assert args.streaming == 4 and args.frame_step == 64
    for argv, message in (
        (["--streaming", "0"], "argument --streaming: must be an int >= 1"),
        (["--frame-step", "128"], "--frame-step goes with --streaming"),
        (["--streaming", "4", "--frame-step", "100"], "must divide"),
        (
            ["--streaming", "4", "--frame-step", "128", "--input", "spectra"],
            "--frame-step sets the model's STFT",
        ),
    ):
        with pytest.raises(SystemExit):
            module["parse_args"](argv)
        assert message in capsys.readouterr().err, argv
