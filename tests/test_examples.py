"""Every example runs end to end with --smoke (seconds each)."""

import os
import runpy

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


def _main(name):
    return runpy.run_path(os.path.join(EXAMPLES, name))["main"]


def test_quickstart():
    error = _main("quickstart.py")(["--smoke"])
    assert error < 1e-4


def test_train_music(tmp_path):
    ap = _main("train_music.py")(["--smoke", "--output", str(tmp_path)])
    assert 0 <= ap <= 1
    for name in (
        "music_classifier.keras",
        "music_classifier.tflite",
        "music_classifier_full_int8.tflite",
        "train_music.png",
    ):
        assert (tmp_path / name).stat().st_size > 0
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


def test_compare_variants(tmp_path):
    table = tmp_path / "table.md"
    rows = _main("compare_variants.py")(["--smoke", "--output", str(table)])
    assert [row[0] for row in rows] == [
        "real / inner",
        "abs / bilinear",
        "real baseline",
    ]
    assert "| real baseline |" in table.read_text()


def test_modulation():
    results = _main("modulation.py")(["--smoke"])
    assert set(results) == {"complex", "real"}
