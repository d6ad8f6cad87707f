"""The corpus of `datasets.score_music`: music21's scores, parsed to
notes, and the manifest (`score_music_manifest.json`) that allow-lists
and splits them (see `cvattn_keras.datasets.scores` for the rules)."""

import hashlib
import json
import os
import warnings

import numpy as np

from cvattn_keras.datasets._score_cache import FORMAT_VERSION
from cvattn_keras.datasets._score_cache import _checksum
from cvattn_keras.datasets._score_cache import _read_cache
from cvattn_keras.datasets._score_cache import _write_atomic

SPLITS = ("train", "validation", "test")
_MANIFEST = os.path.join(os.path.dirname(__file__), "score_music_manifest.json")
_EXTRA = 'pip install "cvattn_keras[music]"'


def _dependencies():
    """`(music21, pretty_midi)`, or an ImportError naming the extra."""
    try:
        import music21
        import pretty_midi
    except ImportError as error:
        raise ImportError(
            "score_music needs music21 and pretty_midi (for its SoundFont), "
            f"in the `music` extra: {_EXTRA}"
        ) from error
    return music21, pretty_midi


def _corpus_root(music21):
    return os.path.dirname(os.path.abspath(music21.corpus.__file__))


def _parse_notes(path, music21):
    """The notes of a score file, float64 `(N, 4)`: onset and offset in
    quarter notes, MIDI pitch, part index; tied notes merged, grace notes
    and unpitched (percussion) notes left out; sorted."""
    with warnings.catch_warnings():
        # music21 warns about encodings it repairs while reading (e.g. a
        # MusicXMLWarning on an odd measure); its own, not ours.
        warnings.filterwarnings("ignore", module=r"music21(\.|$)")
        score = music21.converter.parse(
            path, forceSource=True, storePickle=False
        )
        rows = []
        for part_index, part in enumerate(score.parts):
            tied = {}  # MIDI pitch -> the row a tie continues
            elements = part.flatten().getElementsByClass(("Note", "Chord"))
            for element in elements:
                length = float(element.quarterLength)
                if element.duration.isGrace or length <= 0:
                    continue
                onset = float(element.offset)
                members = element.notes if element.isChord else (element,)
                for note in members:
                    midi = int(note.pitch.midi)
                    tie = note.tie if note.tie is not None else element.tie
                    tie = None if tie is None else tie.type
                    if tie in ("stop", "continue") and midi in tied:
                        rows[tied[midi]][1] = onset + length
                    else:
                        rows.append([onset, onset + length, midi, part_index])
                        tied[midi] = len(rows) - 1
                    if tie not in ("start", "continue"):
                        tied.pop(midi, None)
    notes = np.asarray(rows, np.float64).reshape(-1, 4)
    return notes[np.lexsort((notes[:, 2], notes[:, 3], notes[:, 0]))]


def _sha256(path):
    with open(path, "rb") as file:
        return hashlib.sha256(file.read()).hexdigest()


def _unit(text):
    """A number in [0, 1) from the sha256 of `text` (a fixed shuffle)."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) / 16**12


# The quartets' split, by quartet (all movements together): about 6:1:2 of
# the groups of each composer that has enough of them.
_QUARTET_SPLITS = {
    "beethoven/opus18no1": "train",
    "beethoven/opus18no3": "train",
    "beethoven/opus59no1": "train",
    "beethoven/opus59no3": "train",
    "beethoven/opus74": "train",
    "beethoven/opus133": "train",
    "beethoven/opus18no4": "validation",
    "beethoven/opus18no5": "test",
    "beethoven/opus59no2": "test",
    "beethoven/opus132": "test",
    "haydn/opus1no1": "train",
    "haydn/opus74no1": "test",
    "mozart/k80": "train",
    "mozart/k155": "train",
    "mozart/k545": "train",
    "mozart/k156": "validation",
    "mozart/k458": "test",
}
_EXCLUDED = [
    {
        "paths": "*.krn (bach/bwv277, bwv281, bwv366; beethoven/opus18no1)",
        "why": "Humdrum encodings of the Center for Computer Assisted "
        "Research in the Humanities (CCARH): 'Copyright 1994, CCARH ... "
        "Rights to all derivative electronic formats reserved'; the "
        "opus18no1 movements are also in the kept .mxl files",
    },
    {
        "paths": "essenFolksong/*",
        "why": "licensed 'for non-commercial distribution and use' only "
        "(essenFolksong/license.txt)",
    },
    {
        "paths": "bach/choraleAnalyses/*",
        "why": "Roman-numeral analyses, not scores",
    },
    {
        "paths": "all other composers and collections",
        "why": "not needed: the kept works are MusicNet's composers that "
        "the corpus has (Bach, Beethoven, Haydn, Mozart)",
    },
]


def _make_manifest(root=None):
    """The manifest's dict, made from the corpus at `root` (default: the
    installed music21's). Parses every candidate (about a minute); run
    it and write `score_music_manifest.json` when the corpus changes:

        import json
        from cvattn_keras.datasets import scores as s
        with open(s._MANIFEST, "w") as file:
            json.dump(s._make_manifest(), file, indent=1)
    """
    music21, _ = _dependencies()
    root = root or _corpus_root(music21)
    candidates = []
    for composer in ("bach", "beethoven", "haydn", "mozart"):
        for folder, _, files in sorted(os.walk(os.path.join(root, composer))):
            relative = os.path.relpath(folder, root).replace(os.sep, "/")
            if "choraleAnalyses" in relative:
                continue
            for name in sorted(files):
                if name.endswith((".mxl", ".xml")):
                    candidates.append((composer, f"{relative}/{name}"))
    works, seen = [], set()
    for composer, path in candidates:
        notes = _parse_notes(os.path.join(root, path), music21)
        if not notes.size:
            continue
        # Identical notes, transposition aside: the same work.
        content = notes[:, :3] - [notes[0, 0], notes[0, 0], notes[:, 2].min()]
        content = np.unique(np.round(content, 6), axis=0).tobytes()
        if content in seen:
            continue
        seen.add(content)
        stem = path.rsplit(".", 1)[0]
        if composer == "bach":
            # The tune: the intervals of the highest part's first pitches.
            parts = np.unique(notes[:, 3])
            means = [notes[notes[:, 3] == p, 2].mean() for p in parts]
            top = notes[notes[:, 3] == parts[int(np.argmax(means))], 2]
            top = top[np.r_[True, np.diff(top) != 0]][:12]
            tune = hashlib.sha256(np.diff(top).tobytes()).hexdigest()[:10]
            group = f"bach/tune-{tune}"
        else:
            group = stem.split("/movement")[0]
        works.append(
            {
                "path": path,
                "sha256": _sha256(os.path.join(root, path)),
                "composer": composer,
                "work": stem,
                "group": group,
                "quarters": float(notes[:, 1].max()),
            }
        )
    for work in works:
        if work["composer"] == "bach":
            share = _unit(work["group"])
            work["split"] = (
                "train"
                if share < 6 / 9
                else "validation"
                if share < 7 / 9
                else "test"
            )
        else:
            work["split"] = _QUARTET_SPLITS[work["group"]]
    # The order a split is taken in: composers in turn, each composer's
    # works in a fixed shuffle, so that any prefix mixes them.
    ordered = []
    for split in SPLITS:
        queues = {}
        for work in sorted(works, key=lambda w: _unit(w["work"])):
            if work["split"] == split:
                queues.setdefault(work["composer"], []).append(work)
        while any(queues.values()):
            for composer in sorted(queues):
                if queues[composer]:
                    ordered.append(queues[composer].pop(0))
    return {
        "format": 1,
        "music21": music21.__version__,
        "corpus": "music21/corpus (paths relative to it)",
        "excluded": _EXCLUDED,
        "works": ordered,
    }


def _manifest():
    with open(_MANIFEST, encoding="utf-8") as file:
        return json.load(file)


def _corpus_file(work, root):
    """The path of a manifest entry, its sha256 checked."""
    path = os.path.join(root, *work["path"].split("/"))
    try:
        found = _sha256(path)
    except OSError as error:
        found = f"unreadable ({type(error).__name__}: {error})"
    if found != work["sha256"]:
        raise ValueError(
            f"The music21 corpus differs from the one score_music's manifest "
            f"was made from: {path} should have sha256 {work['sha256']}, it "
            f"has {found}. Install the music21 version the manifest names, "
            "or rebuild the manifest (`datasets.scores._make_manifest`)."
        )
    return path


def _score_notes(work, root, cache, music21):
    """The parsed notes of a manifest entry (`_parse_notes`), cached by the
    file's sha256."""
    # Keyed by the parser's version too: another music21 may parse the
    # same file differently.
    parser = music21.__version__
    path = os.path.join(
        cache, "parsed", f"v{FORMAT_VERSION}-{parser}-{work['sha256']}.npz"
    )
    arrays = _read_cache(path)
    if arrays is None:
        notes = _parse_notes(_corpus_file(work, root), music21)
        arrays = {"notes": notes}
        arrays["checksum"] = np.array(_checksum(arrays))
        _write_atomic(path, arrays)
    return arrays["notes"]
