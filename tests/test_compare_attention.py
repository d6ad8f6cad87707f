"""examples/compare_attention.py: the alternatives to full attention in
place of CAtt, scored over seeds with paired differences (--smoke: two
rows, two seeds, a few seconds of score_music)."""

import json
import os
import re
import runpy

import numpy as np
import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")


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
    return runpy.run_path(os.path.join(EXAMPLES, "compare_attention.py"))


def _paired_two_seeds(ours, theirs, key):
    """The table's cell for two seeds, computed here: the mean of the
    seed-by-seed differences of `key` and its 95% t interval (1 degree
    of freedom: t = 12.706)."""
    d = np.array([a[key] - b[key] for a, b in zip(ours, theirs)])
    half = 12.7062047 * d.std(ddof=1) / np.sqrt(2)
    return f"{d.mean():+.3f} [{d.mean() - half:+.3f}, {d.mean() + half:+.3f}]"


def test_every_row_takes_its_options(example):
    """Each row's options are arguments of its layer's constructor (a
    renamed argument would make the row fail after minutes of training);
    a layer not importable yet (the sparse one while it is written) is
    skipped with the reason, not an error."""
    size = example["SMALL"]
    for name in example["ATTENTIONS"]:
        attention, options = example["row_attention"](name, 64, size)
        reason = example["unavailable"](attention, options)
        assert reason is None or "not importable" in reason, (name, reason)
    reason = example["unavailable"]("low_rank", {"rank": 4, "ranks": 4})
    assert reason == "ComplexLowRankAttention takes no ranks"


@pytest.mark.slow
def test_smoke_pairs_against_catt(example, tmp_path, monkeypatch):
    monkeypatch.setenv("CVATTN_KERAS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    results, skipped = example["main"](
        [
            "--smoke",
            "--attentions",
            "lsh,multi_head",
            "--output",
            str(out),
        ]
    )
    assert not (tmp_path / "cache").exists()  # a temporary render
    assert not skipped
    assert list(results) == ["lsh", "multi_head"]
    assert all([r["seed"] for r in runs] == [0, 1] for runs in results.values())
    text = (out / "compare_attention.md").read_text()
    assert "--smoke --attentions lsh,multi_head --seeds 2" in text
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    names = [row.split(" | ")[0] for row in rows]
    assert names == ["| `lsh`", "| `multi_head`"]
    lsh = rows[0].split(" | ")
    assert lsh[1] == "num_buckets=4, num_hashes=2, chunk_length=16"
    # The paired difference against multi_head, seed by seed, and its 95%
    # t interval, from the runs' numbers.
    for column, key in ((4, "ap"), (6, "held_out_programs_ap")):
        want = _paired_two_seeds(results["lsh"], results["multi_head"], key)
        assert lsh[column] == want
        assert rows[1].split(" | ")[column] == "—"
    assert re.fullmatch(r"\d\.\d{3} \+- \d\.\d{3}", lsh[3])
    record = json.loads((out / "runs.json").read_text())
    assert record["seeds_done"] == 2 and len(record["runs"]) == 4
    assert record["attentions"]["lsh"]["attention"] == "lsh"


@pytest.fixture(scope="module")
def radio_rows(example):
    """examples/_attention_radio.py (`--task radio`), imported the way
    compare_attention.py imports it (its folder is on the path)."""
    import importlib

    return importlib.import_module("_attention_radio")


def test_radio_rows_take_their_options(radio_rows):
    """Every radio row builds per-encoder arguments its layer takes; the
    reference is radio.py's model as it is (no arguments)."""
    assert radio_rows.row_encoders("multi_head", 16) is None
    for name in radio_rows.ATTENTIONS + radio_rows.CONTROLS:
        encoders = radio_rows.row_encoders(name, 16)
        assert radio_rows.check_row(encoders) is None, name
    control = radio_rows.row_encoders("multi_head_no_positions", 16)
    assert control == [({}, True), ({}, True)]  # CAtt, causal, no window
    sparse = radio_rows.row_encoders("sparse", 16)
    assert [o["attention_options"]["window"] for o, _ in sparse] == [8, 9]
    assert radio_rows.describe("sparse", sparse) == (
        "window=8/9, stride=4, global_tokens=1 (causal)"
    )
    low_rank = radio_rows.row_encoders("low_rank", 16)
    assert radio_rows.describe("low_rank", low_rank) == (
        "rank=4, max_length=16 (not causal)"
    )


@pytest.mark.slow
def test_radio_smoke_pairs_against_catt(example, tmp_path):
    """`--task radio --smoke`: two rows, two seeds of radio.py's complex
    model on a few frames (eager, no compilation): the table's paired
    columns are the runs' own differences with their 95% t intervals."""
    out = tmp_path / "out"
    results, skipped = example["main"](
        [
            "--task",
            "radio",
            "--smoke",
            "--attentions",
            "sparse,multi_head",
            "--output",
            str(out),
        ]
    )
    assert not skipped
    assert list(results) == ["sparse", "multi_head"]
    assert all([r["seed"] for r in runs] == [0, 1] for runs in results.values())
    text = (out / "compare_attention.md").read_text()
    assert "--task radio --smoke --attentions sparse,multi_head --seeds 2" in (
        text
    )
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split(" | ")[0] for row in rows] == [
        "| `sparse`",
        "| `multi_head`",
    ]
    sparse = rows[0].split(" | ")
    assert sparse[1] == "window=8/9, stride=4, global_tokens=1 (causal)"
    for column, key in ((4, "mean"), (6, "high")):
        want = _paired_two_seeds(results["sparse"], results["multi_head"], key)
        assert sparse[column] == want
        assert rows[1].split(" | ")[column] == "—"
        values = [r[key] for r in results["sparse"]]
        mean, std = np.mean(values), np.std(values, ddof=1)
        assert sparse[column - 1] == f"{mean:.3f} +- {std:.3f}"
    assert "| +18 |" in text  # the accuracy per SNR
    record = json.loads((out / "runs.json").read_text())
    assert record["task"] == "radio" and record["seeds_done"] == 2
    assert len(record["runs"]) == 4
    encoders = record["attentions"]["sparse"]["encoders"]
    assert [e[0]["attention"] for e in encoders] == ["sparse", "sparse"]
    assert record["attentions"]["multi_head"]["encoders"] is None
