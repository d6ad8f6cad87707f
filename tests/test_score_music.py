"""`datasets.score_music`: real scores played by sampled instruments.

Small renders (a few clips of a few seconds) in a temporary cache."""

import glob
import hashlib
import json
import os
import shutil
import sys

import numpy as np
import pytest

pytest.importorskip("music21")
pytest.importorskip("pretty_midi")

from cvattn_keras import datasets  # noqa: E402
from cvattn_keras.datasets import scores as _score_music  # noqa: E402
from cvattn_keras.layers import ComplexSTFT  # noqa: E402
from cvattn_keras.stft import frame_count  # noqa: E402

SMALL = {"minutes": 0.2, "clip_seconds": 4.0}  # 3 clips of 4 s


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("score_music_cache"))


@pytest.fixture(scope="module")
def train(cache):
    return datasets.score_music("train", cache_dir=cache, **SMALL)


def _sha(data):
    return hashlib.sha256(
        data.audio.tobytes() + data.labels.tobytes()
    ).hexdigest()


def _expected_labels(data, stft):
    """The labels from the returned notes, by NumPy: each note sounding at
    each frame's centre sample."""
    samples = data.audio.shape[1]
    frames = frame_count(samples, stft.frame_step, stft.fft_length, stft.center)
    offset = 0 if stft.center else stft.fft_length // 2
    centres = np.minimum(
        np.arange(frames) * stft.frame_step + offset, samples - 1
    )
    notes = data.labels.shape[-1]
    labels = np.zeros((len(data.notes), frames, notes), np.float32)
    for clip, clip_notes in enumerate(data.notes):
        for onset, offset_seconds, pitch in clip_notes:
            start = round(onset * data.sample_rate)
            stop = round(offset_seconds * data.sample_rate)
            on = (centres >= start) & (centres < stop)
            labels[clip, on, pitch - data.lowest_note] = 1.0
    return labels


def test_shapes_dtypes_and_frame_alignment(train):
    stft = _score_music.default_stft()
    samples = int(4.0 * 16000)
    frames = frame_count(samples, 512, 2048, True)
    assert train.audio.shape == (3, samples)
    assert train.audio.dtype == np.float32
    assert train.labels.shape == (3, frames, 88)
    assert train.labels.dtype == np.float32
    assert train.sample_rate == 16000 and train.frame_rate == 16000 / 512
    assert train.lowest_note == 21 and train.split == "train"
    assert len(train.notes) == len(train.works) == 3
    assert train.stft_config["frame_step"] == 512
    np.testing.assert_array_equal(train.labels, _expected_labels(train, stft))
    for clip in train.notes:
        assert clip == sorted(clip, key=lambda n: (n[0], n[2]))
        for onset, offset, pitch in clip:
            assert 0 <= onset < offset <= 4.0 and 21 <= pitch <= 108


def test_labels_follow_another_stft(cache):
    # Not centred, from a config dict: the centres move by fft_length // 2.
    config = ComplexSTFT(1024, 256, center=False).get_config()
    data = datasets.score_music(
        "validation", cache_dir=cache, stft=config, **SMALL
    )
    stft = ComplexSTFT(1024, 256, center=False)
    frames = frame_count(data.audio.shape[1], 256, 1024, False)
    assert data.labels.shape == (3, frames, 88)
    assert data.frame_rate == 16000 / 256
    np.testing.assert_array_equal(data.labels, _expected_labels(data, stft))


def test_audio_and_labels_are_plausible(train):
    from cvattn_keras.metrics import transcription_scores

    assert np.all(np.isfinite(train.audio))
    assert np.max(np.abs(train.audio)) <= 1.0
    assert np.all(np.sqrt(np.mean(train.audio**2, axis=1)) > 0.02)
    assert set(np.unique(train.labels)) <= {0.0, 1.0}
    # About 1 to 8 notes at a time in four-part music.
    assert 1.0 < train.labels.sum(-1).mean() < 8.0
    scores = transcription_scores(
        train.labels, train.labels, train.frame_rate, lowest_note=21
    )
    assert all(value == 1.0 for value in scores.values()), scores


def test_deterministic_and_cached(train, cache, tmp_path):
    fresh = datasets.score_music("train", cache_dir=str(tmp_path), **SMALL)
    cached = datasets.score_music("train", cache_dir=cache, **SMALL)
    assert _sha(fresh) == _sha(train) == _sha(cached)
    assert fresh.notes == train.notes and fresh.works == train.works
    other = datasets.score_music(
        "train", cache_dir=str(tmp_path), seed=1, **SMALL
    )
    assert _sha(other) != _sha(train)
    # A damaged cache file is rebuilt, to the same bytes.
    for path in glob.glob(str(tmp_path / "score_music" / "train-*.npz")):
        with open(path, "r+b") as file:
            file.seek(200)
            file.write(b"\0" * 64)
    again = datasets.score_music("train", cache_dir=str(tmp_path), **SMALL)
    assert _sha(again) == _sha(train)


def test_no_work_in_two_splits(cache):
    seen = {}
    for split in _score_music.SPLITS:
        data = datasets.score_music(split, cache_dir=cache, **SMALL)
        seen[split] = set(data.works)
    assert not seen["train"] & seen["validation"]
    assert not seen["train"] & seen["test"]
    assert not seen["validation"] & seen["test"]
    works = _score_music._manifest()["works"]
    groups = {}
    for work in works:
        groups.setdefault(work["group"], set()).add(work["split"])
    assert all(len(splits) == 1 for splits in groups.values())


def test_manifest_follows_the_licence_rule():
    works = _score_music._manifest()["works"]
    paths = [work["path"] for work in works]
    assert not [p for p in paths if p.endswith(".krn")]
    assert not [p for p in paths if p.startswith("essenFolksong/")]
    assert {work["composer"] for work in works} == {
        "bach",
        "beethoven",
        "haydn",
        "mozart",
    }
    # One entry per work.
    for key in ("path", "work", "sha256"):
        values = [work[key] for work in works]
        assert len(values) == len(set(values)), key


def test_tampered_corpus_file_is_refused(monkeypatch, tmp_path):
    import music21

    root = _score_music._corpus_root(music21)
    first = next(
        w for w in _score_music._manifest()["works"] if w["split"] == "test"
    )
    copy = tmp_path / "corpus" / first["path"]
    copy.parent.mkdir(parents=True)
    shutil.copy(os.path.join(root, first["path"]), copy)
    with open(copy, "ab") as file:
        file.write(b"\n")
    monkeypatch.setattr(
        _score_music, "_corpus_root", lambda _: str(tmp_path / "corpus")
    )
    with pytest.raises(ValueError, match="sha256"):
        datasets.score_music("test", cache_dir=str(tmp_path / "cache"), **SMALL)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"split": "dev"}, "split"),
        ({"split": None}, "split"),
        ({"minutes": 0}, "minutes"),
        ({"minutes": -1.0}, "minutes"),
        ({"minutes": float("nan")}, "minutes"),
        ({"sample_rate": 16000.0}, "sample_rate"),
        ({"sample_rate": 4000}, "sample_rate"),
        ({"sample_rate": 8000, "notes": 88}, "sample_rate"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"stft": "hann"}, "stft"),
        ({"stft": {"frame_length": -3}}, "stft"),
        ({"lowest_note": 128}, "lowest_note"),
        ({"lowest_note": -1}, "lowest_note"),
        ({"notes": 0}, "notes"),
        ({"lowest_note": 100, "notes": 30}, "notes"),
        ({"clip_seconds": 0}, "clip_seconds"),
        (
            {
                "clip_seconds": 0.05,
                "stft": ComplexSTFT(2048, 512, center=False),
            },
            "clip_seconds",
        ),
        ({"snr_db": (30, 20)}, "snr_db"),
        ({"snr_db": "loud"}, "snr_db"),
        ({"tempo": 0}, "tempo"),
        ({"max_work_seconds": 1.0}, "max_work_seconds"),
        ({"detune_cents": -1}, "detune_cents"),
        ({"jitter_seconds": float("inf")}, "jitter_seconds"),
        ({"cache_dir": 3}, "cache_dir"),
        ({"minutes": 1e6, "clip_seconds": 4.0}, "minutes"),
        ({"minutes": 1e308}, "minutes"),
        # Issue 31: a 0-sample clip (ZeroDivisionError), a tempo that asked
        # NumPy for 3.4 PiB (MemoryError), a clip longer than any work.
        ({"clip_seconds": 1e-6}, "clip_seconds"),
        ({"tempo": 1e-9}, "tempo"),
        ({"tempo": (1e-9, 100)}, "tempo"),
        ({"tempo": 0.5}, "tempo"),
        ({"clip_seconds": 1e6, "max_work_seconds": None}, "clip_seconds"),
    ],
)
def test_bad_arguments(kwargs, name, tmp_path):
    kwargs = {"split": "validation", "cache_dir": str(tmp_path), **kwargs}
    with pytest.raises(ValueError, match=f"`{name}`"):
        datasets.score_music(**kwargs)


def test_range_that_can_be_served_is_named(tmp_path):
    kwargs = {"split": "validation", "cache_dir": str(tmp_path)}
    with pytest.raises(ValueError, match=r">= 1 / sample_rate = 6.25e-05 s"):
        datasets.score_music(clip_seconds=1e-6, **kwargs)
    with pytest.raises(ValueError, match="at least 1 quarter note per"):
        datasets.score_music(tempo=1e-9, **kwargs)
    with pytest.raises(ValueError, match=r"at most [0-9.]+ s, the longest"):
        datasets.score_music(clip_seconds=1e6, max_work_seconds=None, **kwargs)


def test_no_note_is_rendered_past_its_clip(monkeypatch, tmp_path):
    """At 1 quarter note per minute a note holds for minutes: each is
    rendered up to the end of the clips only (two of 2 s here), the
    same samples as a whole render cut."""
    sizes = []
    note = _score_music._SoundFont.note

    def recorded(self, *args, **kwargs):
        wave = note(self, *args, **kwargs)
        sizes.append(wave.size)
        return wave

    monkeypatch.setattr(_score_music._SoundFont, "note", recorded)
    data = datasets.score_music(
        "validation",
        minutes=0.05,
        clip_seconds=2.0,
        tempo=1,
        cache_dir=str(tmp_path),
    )
    assert data.audio.shape == (2, 32000) and np.abs(data.audio).max() > 0
    assert sizes and max(sizes) <= 64000
    monkeypatch.undo()
    soundfont = _score_music._SoundFont(
        _score_music._soundfont_path(pytest.importorskip("pretty_midi"))
    )
    whole = soundfont.note(40, 60, 100, 3.0, 16000)
    cut = soundfont.note(40, 60, 100, 3.0, 16000, max_samples=1000)
    np.testing.assert_array_equal(cut, whole[:1000])


def test_missing_extra_names_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "music21", None)
    with pytest.raises(ImportError, match=r"cvattn_keras\[music\]"):
        datasets.score_music("train", cache_dir=str(tmp_path), **SMALL)


def test_manifest_ships_as_json():
    with open(_score_music._MANIFEST, encoding="utf-8") as file:
        manifest = json.load(file)
    assert manifest["music21"] and manifest["excluded"]


def test_no_network_access(monkeypatch, tmp_path):
    """A fresh build (parsing, rendering, caching) with sockets refused."""
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network access refused by the test")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    data = datasets.score_music(
        "validation", minutes=0.05, clip_seconds=2.0, cache_dir=str(tmp_path)
    )
    assert data.audio.shape[0] >= 1 and np.abs(data.audio).max() > 0
