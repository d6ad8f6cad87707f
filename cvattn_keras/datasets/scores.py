"""Real scores played by sampled instruments: `datasets.score_music`.

A MusicNet stand-in built from the music21 corpus (encoded scores) and the
General MIDI SoundFont that `pretty_midi` ships (`TimGM6mb.sf2`, GPL-2:
read at run time, never copied, and no render is committed). Nothing is
downloaded: both come from the package index (the `music` extra). More
SoundFonts can be given (`soundfonts=`: files on the user's machine, read
at run time; their licences are theirs: Debian's `fluid-soundfont-gm`,
FluidR3_GM, is MIT; `musescore-general-soundfont-lossless`,
MuseScore_General, MIT; `csound-soundfont`'s sf_GMbank public domain, as
Debian's copyright file states); a render made with them derives from
them too.

The corpus subset
-----------------
`score_music_manifest.json` (in the package) is the allow-list: one entry
per work (a chorale, or a quartet movement, or a whole quartet where the
corpus stores it in one file), each with its corpus path, the sha256 of the
file, the composer, the work id, the group it is split by and its split.

- Kept: MusicXML (`.mxl`, `.xml`) of the Bach chorales and of the string
  quartets of Haydn, Mozart and Beethoven in music21's corpus (plus
  Mozart's K. 545 exposition, a keyboard piece). music21's
  `corpus/license.txt` says the encodings are distributed with the
  encoders' permission, and that some may not be used commercially as
  the licences embedded in them say. The only rights text in the kept
  files is a credit in about 360 of the chorales, "PDF (c) 2004
  Margaret Greentree, www.jsbchorales.net - used by permission" (the
  encoder's, for music21's distribution; no restriction of use is
  stated); the quartets carry none. Nothing derived from the files is
  committed or shipped: renders go to a cache on the user's machine.
- Excluded: every Humdrum `.krn` file (the chorales BWV 277, 281 and 366
  are "Copyright 1994, Center for Computer Assisted Research in the
  Humanities" with derivative rights reserved; Beethoven's Op. 18 No. 1
  `.krn` movements are CCARH encodings too and duplicate the `.mxl`
  ones); every collection whose licence limits use (`essenFolksong`:
  permission "for non-commercial distribution and use" only), and the
  rest of the corpus (not needed: other composers and repertories).
- Deduplicated: a chorale present twice (two formats, or the same
  harmonisation under two BWV numbers: the same notes, transposition
  aside) is kept once.
- Split by group, so that no music is in two splits: a quartet (all its
  movements) for the quartets, the chorale's melody for the chorales (the
  same tune harmonised twice stays in one split).

`_make_manifest()` rebuilds the manifest from an installed corpus; the
sha256 of every file is checked when it is read, so a different corpus
is a clear error, not a silently different data set.

The render
----------
See `score_music`. The SoundFont is rendered by a small sample player
written in NumPy (`_soundfont._SoundFont`: SF2 zones by key and velocity,
root key and tuning, loops, the volume envelope; no filters, modulators or
chorus), so that the extra needs no compiled synthesiser: `tinysoundfont`
(the obvious one) requires `pyaudio`, which has no Linux wheel and fails
to build without the PortAudio headers, a system package. The timbre
augmentation (filters, vibrato, tremolo, chorus, envelopes, rooms) is
applied to each part's audio and each clip's mix (`_timbre`).

The modules
-----------
This one holds the render and `score_music`; the corpus and the manifest
are in `_score_corpus`, the cache files in `_score_cache`, the SoundFont
player in `_soundfont`, the instruments' choice and the augmentation in
`_timbre` (none of them imports this one).
"""

import dataclasses
import hashlib
import json
import os

import numpy as np

from cvattn_keras import _validation as check
from cvattn_keras.datasets._score_cache import FORMAT_VERSION
from cvattn_keras.datasets._score_cache import _cache_root
from cvattn_keras.datasets._score_cache import _checksum
from cvattn_keras.datasets._score_cache import _read_cache
from cvattn_keras.datasets._score_cache import _write_atomic
from cvattn_keras.datasets._score_corpus import _MANIFEST
from cvattn_keras.datasets._score_corpus import SPLITS
from cvattn_keras.datasets._score_corpus import _corpus_file
from cvattn_keras.datasets._score_corpus import _corpus_root
from cvattn_keras.datasets._score_corpus import _dependencies
from cvattn_keras.datasets._score_corpus import _make_manifest as _make_manifest
from cvattn_keras.datasets._score_corpus import _manifest
from cvattn_keras.datasets._score_corpus import _score_notes
from cvattn_keras.datasets._score_corpus import _sha256
from cvattn_keras.datasets._soundfont import _SoundFont  # noqa: F401 (tests)
from cvattn_keras.datasets._timbre import _apply_part
from cvattn_keras.datasets._timbre import _check_programs
from cvattn_keras.datasets._timbre import _check_soundfonts
from cvattn_keras.datasets._timbre import _check_strength
from cvattn_keras.datasets._timbre import _choose_programs
from cvattn_keras.datasets._timbre import _clip_effects
from cvattn_keras.datasets._timbre import _equalise
from cvattn_keras.datasets._timbre import _file_sha256
from cvattn_keras.datasets._timbre import _load_soundfonts
from cvattn_keras.datasets._timbre import _part_effects
from cvattn_keras.datasets._timbre import _room
from cvattn_keras.datasets._timbre import _streams

__all__ = ["ScoreMusic", "score_music"]

DEFAULT_MINUTES = {"train": 30.0, "validation": 5.0, "test": 10.0}
# The default strength of the timbre augmentation: on
# `examples/compare_variants.py --data scores`'s recipe (10 epochs), 0.5
# kept CAtt's AP on held-out instruments (0.477, against 0.474 without
# augmentation and 0.456 at 1, 3 seeds; issue 33).
DEFAULT_TIMBRE_AUGMENTATION = 0.5
# The slowest tempo served, in quarter notes per minute.
_MIN_TEMPO = 1.0
# The render's version in the cache key (2: the timbre of issue 33: more
# programs, chosen by range, from their own random streams; the
# augmentation; several SoundFonts). The parsed scores' cache keeps
# FORMAT_VERSION.
_RENDER_VERSION = 2
# The General MIDI programs a part is played with by default (`programs=`
# takes any of the 128): keyboards, organs and accordion, mallets,
# plucked strings, bowed strings, voices, brass, reeds and pipes. Each has
# a preset of its own in TimGM6mb.
PROGRAMS = {
    0: "Acoustic Grand Piano",
    1: "Bright Acoustic Piano",
    4: "Electric Piano 1",
    6: "Harpsichord",
    11: "Vibraphone",
    12: "Marimba",
    16: "Drawbar Organ",
    19: "Church Organ",
    21: "Accordion",
    24: "Acoustic Guitar (nylon)",
    25: "Acoustic Guitar (steel)",
    32: "Acoustic Bass",
    40: "Violin",
    41: "Viola",
    42: "Cello",
    43: "Contrabass",
    45: "Pizzicato Strings",
    46: "Orchestral Harp",
    48: "String Ensemble 1",
    49: "String Ensemble 2",
    52: "Choir Aahs",
    53: "Voice Oohs",
    56: "Trumpet",
    57: "Trombone",
    58: "Tuba",
    60: "French Horn",
    61: "Brass Section",
    64: "Soprano Sax",
    65: "Alto Sax",
    66: "Tenor Sax",
    67: "Baritone Sax",
    68: "Oboe",
    69: "English Horn",
    70: "Bassoon",
    71: "Clarinet",
    72: "Piccolo",
    73: "Flute",
    74: "Recorder",
}
# The MIDI range (lowest, highest sounding note) each program of PROGRAMS
# plays a part in (the instrument's usual compass, rounded; voices a
# choir's bass to soprano): a part is given a program whose range holds
# its 10th to 90th percentile of pitch (see `score_music`). A program not
# listed plays any part.
PROGRAM_RANGES = {
    0: (21, 108),
    1: (21, 108),
    4: (28, 100),
    6: (29, 89),
    11: (53, 89),
    12: (36, 96),
    16: (36, 96),
    19: (24, 96),
    21: (41, 93),
    24: (40, 83),
    25: (40, 83),
    32: (28, 60),
    40: (55, 100),
    41: (48, 91),
    42: (36, 81),
    43: (28, 67),
    45: (28, 96),
    46: (24, 103),
    48: (28, 103),
    49: (28, 103),
    52: (40, 81),
    53: (40, 81),
    56: (54, 82),
    57: (40, 74),
    58: (28, 58),
    60: (34, 77),
    61: (36, 84),
    64: (56, 87),
    65: (49, 81),
    66: (44, 76),
    67: (36, 69),
    68: (58, 91),
    69: (52, 84),
    70: (34, 75),
    71: (50, 91),
    72: (74, 108),
    73: (60, 96),
    74: (60, 96),
}


def _soundfont_path(pretty_midi):
    return os.path.join(os.path.dirname(pretty_midi.__file__), "TimGM6mb.sf2")


def default_soundfont():
    """The path of the SoundFont `score_music` plays by default:
    `pretty_midi`'s `TimGM6mb.sf2` (GPL-2). Give it in `soundfonts=` with
    others to keep it among them."""
    return _soundfont_path(_dependencies()[1])


# ----------------------------------------------------------------------
# The render.
# ----------------------------------------------------------------------


def default_stft():
    """The `layers.ComplexSTFT` that `score_music` aligns its labels to by
    default: `ComplexSTFT(2048, 512, bins=(0, 640), name="stft")`, at 16
    kHz frames of 128 ms every 32 ms (31.25 frames per second), centred,
    the periodic Hann window, 640 bins of 7.8 Hz up to 5 kHz (the
    fundamentals of the piano's whole range, and mir_eval's frequency
    range)."""
    from cvattn_keras.layers import ComplexSTFT

    return ComplexSTFT(2048, 512, bins=(0, 640), name="stft")


def _frame_centres(stft, length, clip_seconds):
    """The centre sample of each of `stft`'s frames of `length` samples
    (the last sample for a centre past the end), as in
    `datasets.synthetic_music`."""
    from cvattn_keras.stft import frame_centres

    centres = frame_centres(
        length, stft.frame_step, stft.fft_length, stft.center, stft.pad_mode
    )
    if centres is None:
        raise ValueError(
            f"`stft` gives no frame of a clip of `clip_seconds` "
            f"({length} samples): it needs at least fft_length="
            f"{stft.fft_length} samples (more than half of that with "
            "pad_mode='reflect'). Received: clip_seconds="
            f"{clip_seconds!r}, stft fft_length={stft.fft_length}"
        )
    return centres


def _render(notes, soundfonts, rng, streams, settings, clips):
    """One work's audio and notes (start and stop samples, MIDI pitch),
    `clips` clips long, humanised with `rng` (the notes, their timing and
    loudness, the noise) and `streams` (the timbre, `_timbre._streams`:
    the instruments, the room and the effects)."""
    rate = settings["sample_rate"]
    strength = settings["timbre_augmentation"]
    bpm = rng.uniform(*settings["tempo"])
    parts = int(notes[:, 3].max()) + 1
    detune = rng.uniform(-1, 1, parts) * settings["detune_cents"]
    loudness = rng.uniform(55, 110, parts)
    jitter = rng.normal(0, settings["jitter_seconds"], len(notes))
    jitter = np.clip(jitter, -3 * settings["jitter_seconds"], None)
    part = notes[:, 3].astype(np.int64)
    velocity = np.round(loudness[part] + rng.normal(0, 8, len(notes)))
    velocity = np.clip(velocity, 20, 127).astype(np.int64)
    snr_db = rng.uniform(*settings["snr_db"])
    programs = _choose_programs(
        streams["programs"], notes, settings["programs"], PROGRAM_RANGES
    )
    fonts = streams["soundfonts"].integers(len(soundfonts), size=parts)
    room = _room(streams["room"], rate, strength)
    effects = _part_effects(streams["parts"], parts, strength)
    microphones = _clip_effects(streams["clips"], clips, strength)
    length = clips * settings["clip_samples"]
    seconds = notes[:, :2] * 60.0 / bpm + jitter[:, None]
    start = np.round(np.maximum(seconds[:, 0], 0.0) * rate).astype(np.int64)
    stop = np.maximum(
        np.round(seconds[:, 1] * rate).astype(np.int64), start + 1
    )
    pitch = notes[:, 2].astype(np.int64)
    low = settings["lowest_note"]
    keep = (pitch >= low) & (pitch < low + settings["notes"]) & (start < length)
    audio = np.zeros(length)
    # Part by part (one part's audio in memory at a time), each through
    # its effects.
    for index in range(parts):
        track = np.zeros(length)
        fx = effects[index]
        for i in np.flatnonzero(keep & (part == index)):
            # Rendered up to the end of the clips only (a note held past
            # them is cut, not rendered whole and then cut).
            wave = soundfonts[fonts[index]].note(
                int(programs[index]),
                int(pitch[i]),
                int(velocity[i]),
                (stop[i] - start[i]) / rate,
                rate,
                detune[index],
                max_samples=int(length - start[i]),
                attack_scale=fx["attack_scale"],
                attack_added=fx["attack_added"],
                release_scale=fx["release_scale"],
            )
            track[start[i] : start[i] + wave.size] += wave
        audio += _apply_part(track, rate, fx) if strength > 0 else track
    wet = np.fft.irfft(
        np.fft.rfft(audio, length + room.size)
        * np.fft.rfft(room, length + room.size),
        length + room.size,
    )
    audio = wet[:length]
    if strength > 0:
        size = settings["clip_samples"]
        for clip, microphone in enumerate(microphones):
            piece = slice(clip * size, (clip + 1) * size)
            audio[piece] = _equalise(audio[piece], rate, microphone)
    power = np.mean(audio**2)
    noise = rng.standard_normal(length) * np.sqrt(power / 10 ** (snr_db / 10))
    audio = audio + noise
    audio *= 0.9 / max(np.max(np.abs(audio)), 1e-12)
    return audio, np.stack([start, np.minimum(stop, length), pitch], -1)[keep]


@dataclasses.dataclass(frozen=True, eq=False)
class ScoreMusic:
    """What `score_music` returns.

    Attributes:
        audio: float32 `(clips, samples)`, in [-1, 1].
        labels: float32 0/1 `(clips, frames, notes)`: note `k` (MIDI
            `lowest_note + k`) sounds at the centre sample of frame `t` of
            `stft`.
        notes: per clip, a list of `(onset_seconds, offset_seconds,
            midi_pitch)` relative to the clip's start (cut to the clip:
            a note held over from the clip before starts at 0), sorted.
        works: per clip, the manifest's work id (e.g. `"bach/bwv308"`).
        sample_rate: Hz.
        frame_rate: frames per second, `sample_rate / stft.frame_step`.
        lowest_note: MIDI number of note 0.
        clip_seconds: seconds per clip.
        split: `"train"`, `"validation"` or `"test"`.
        stft_config: the `get_config()` of the `ComplexSTFT` the labels
            are aligned to (`as_stft` takes it back).

    A waveform model of the labels' frames
    (`models.music_classifier(frames=labels.shape[1], stft=...)`) takes
    `models.waveform_length(stft, frames)` samples, which can be fewer
    than a clip's (the tail past the last frame's centre): cut `audio`
    to that length; the frames and labels are unchanged.
    """

    audio: np.ndarray
    labels: np.ndarray
    notes: list
    works: list
    sample_rate: int
    frame_rate: float
    lowest_note: int
    clip_seconds: float
    split: str
    stft_config: dict


def _pair(value, name, low=-float("inf")):
    """A number `x` as `(x, x)`, or a `(low, high)` pair, finite, ordered,
    above `low`."""
    if check._is_real(value):
        value = (value, value)
    try:
        a, b = value
    except (TypeError, ValueError):
        a = b = None
    if not (check._is_real(a) and check._is_real(b) and low < a <= b):
        bound = "" if low == -float("inf") else f" > {low:g}"
        raise ValueError(
            f"`{name}` must be a finite number{bound} or a pair (low, high) "
            f"of them with low <= high. Received: {name}={value!r}"
        )
    return float(a), float(b)


def _check_arguments(split, minutes, sample_rate, seed, lowest_note, notes):
    if not isinstance(split, str) or split not in SPLITS:
        raise ValueError(
            f"`split` must be one of {SPLITS}. Received: split={split!r}"
        )
    if minutes is not None:
        check.greater_than(minutes, "minutes")
    if not check._is_int(sample_rate) or not 8000 <= sample_rate <= 48000:
        raise ValueError(
            "`sample_rate` must be an int from 8000 to 48000 (Hz). Received: "
            f"sample_rate={sample_rate!r}"
        )
    if not check._is_int(seed) or seed < 0:
        raise ValueError(f"`seed` must be an int >= 0. Received: seed={seed!r}")
    if not check._is_int(lowest_note) or not 0 <= lowest_note <= 127:
        raise ValueError(
            "`lowest_note` must be a MIDI number, an int from 0 to 127. "
            f"Received: lowest_note={lowest_note!r}"
        )
    if not check._is_int(notes) or not 1 <= notes <= 128 - lowest_note:
        raise ValueError(
            f"`notes` must be an int from 1 to 128 - lowest_note = "
            f"{128 - lowest_note} (MIDI notes end at 127). Received: "
            f"notes={notes!r}, lowest_note={lowest_note!r}"
        )
    top = lowest_note + notes - 1
    if 440.0 * 2.0 ** ((top - 69) / 12.0) >= sample_rate / 2:
        raise ValueError(
            f"The highest note, MIDI {top} (`lowest_note + notes - 1`), has "
            f"its fundamental above the Nyquist frequency of `sample_rate` "
            f"({sample_rate / 2:g} Hz): lower `notes` or raise "
            f"`sample_rate`. Received: lowest_note={lowest_note}, "
            f"notes={notes}, sample_rate={sample_rate}"
        )


def score_music(
    split,
    minutes=None,
    sample_rate=16000,
    seed=0,
    cache_dir=None,
    stft=None,
    lowest_note=21,
    notes=88,
    clip_seconds=10.0,
    snr_db=(20.0, 40.0),
    tempo=(60.0, 120.0),
    max_work_seconds=60.0,
    detune_cents=10.0,
    jitter_seconds=0.01,
    programs=None,
    timbre_augmentation=DEFAULT_TIMBRE_AUGMENTATION,
    soundfonts=None,
):
    """Real scores played by sampled instruments: a MusicNet stand-in.

    Works of the music21 corpus (Bach chorales; string quartets of Haydn,
    Mozart and Beethoven; see the manifest, `score_music_manifest.json`,
    456 works) are split by work (a quartet's movements, and the
    harmonisations of one chorale tune, stay together) into `"train"`,
    `"validation"` and `"test"`; no work is in two splits. A split is
    taken in the manifest's order (the composers in turn) until it holds
    `minutes` of audio, at most `max_work_seconds` from the start of each
    work, cut into clips of `clip_seconds` (a work's last partial clip is
    left out; a clip never spans two works).

    Each work is rendered with a General MIDI SoundFont (by default the
    one `pretty_midi` ships, `TimGM6mb.sf2`), humanised from `seed` and
    the work's id (so a work's tempo, instruments and notes are the same
    whatever else is rendered; its noise and level follow the length
    rendered, which `minutes` can cut):
    a tempo in quarter notes per minute drawn from `tempo`, each part a
    detuning drawn from `+-detune_cents` and a loudness (velocity
    55-110), each note a velocity around it and an onset and offset
    jitter (Gaussian, `jitter_seconds`), white noise at an SNR drawn
    from `snr_db`; the audio of each work is then scaled to a peak of
    0.9. Notes outside `lowest_note` to `lowest_note + notes - 1` are
    neither played nor labelled.

    The timbre is drawn from streams of its own, so that the notes, the
    labels, the timing, the velocities and the noise's samples do not
    depend on `programs`, `soundfonts` or `timbre_augmentation` (the same
    works played by other instruments have the same labels):

    - Instruments: each part a General MIDI program drawn uniformly from
      `programs` (default: the 38 of `PROGRAMS`: pianos, electric piano,
      harpsichord, organs, accordion, vibraphone, marimba, guitars, harp,
      acoustic bass, bowed and plucked strings, choir, brass, saxophones,
      double reeds, clarinet, flutes), among those whose range
      (`PROGRAM_RANGES`) holds the part's 10th to 90th percentile of
      pitch (so no tuba plays a soprano line); if none does, among those
      holding its median; if none, among all. A program not in
      `PROGRAM_RANGES` plays any part. Each part also draws one of
      `soundfonts` (uniformly); a SoundFont without a preset for the
      program plays its preset 0.
    - Timbre augmentation, scaled by `timbre_augmentation` (a strength
      from 0 to 1, default 0.5; the draws are the same whatever the
      strength, which scales them; the ranges below are at 1, and at 0.5
      the dB, cents and mixes are halved, the filters' corners and the
      envelope's scales halfway in octaves, the room's ranges halfway):
      per part, an equaliser (a tilt of up to +-3 dB per
      octave about 1 kHz, a bell of up to +-9 dB between 200 Hz and 4 kHz,
      a second-order low-pass from 10 kHz down to 1 kHz and high-pass
      from 20 Hz up to 120 Hz), vibrato (up to +-20 cents at 4-7 Hz),
      tremolo (up to 25% at 3-8 Hz), a chorus (a double delayed 8-20 ms
      and detuned by 3-10 cents, mixed at up to 0.5), the attack scaled
      by 0.5 to 4 and lengthened by up to 40 ms, the release scaled by
      0.5 to 2.8; per work, a room (an exponentially decaying noise
      response) of RT60 0.1-2 s mixed at a wet gain of 0.05-0.6 (at
      strength 0: 0.2-0.8 s and 0.1-0.35); per clip, a microphone's
      equaliser (a tilt of up to +-2 dB per octave, a bell of up to +-6
      dB, a low-pass down to 2 kHz, a high-pass up to 200 Hz). At
      strength 0 the parts and clips are played as the SoundFont plays
      them, in the narrower room.
    - SoundFonts (`soundfonts`): SF2 files with General MIDI presets
      (bank 0) and 16-bit samples (SF3 files, compressed, are refused).
      The player reads zones, tuning, loops and the volume envelope, not
      SF2's filters, modulators or effects, so a SoundFont that relies
      on them (MuseScore_General does) sounds plainer than in FluidSynth.
      On Debian or Ubuntu, `apt install fluid-soundfont-gm` gives
      `/usr/share/sounds/sf2/FluidR3_GM.sf2` (141 MB, MIT),
      `musescore-general-soundfont-lossless` gives
      `/usr/share/sounds/sf2/MuseScore_General_Full.sf2` (489 MB, MIT;
      the `musescore-general-soundfont` packages are SF3, compressed:
      not playable here) and `csound-soundfont` gives
      `/usr/share/sounds/sf2/sf_GMbank.sf2` (4 MB, public domain):

          from cvattn_keras.datasets import scores
          data = score_music("train", soundfonts=[
              scores.default_soundfont(),
              "/usr/share/sounds/sf2/FluidR3_GM.sf2",
          ])

      A held-out SoundFont: train with some, test with another
      (`soundfonts="/usr/share/sounds/sf2/sf_GMbank.sf2"`); held-out
      instruments: train and test with disjoint `programs`
      (`examples/compare_variants.py --data scores` measures both).

    A note sounds on the samples `[start, stop)` from its (jittered)
    onset to its offset, its release tail unlabelled (as MusicNet's
    labels follow the score); the label of frame `t` is 1 for each note
    sounding at the frame's centre sample, `t * frame_step` when
    `stft.center`, `t * frame_step + fft_length // 2` otherwise (a centre
    past the end counts as the last sample): the rule of
    `synthetic_music(output="waveform")`. The frames per clip are
    `cvattn_keras.stft.frame_count(samples, frame_step, fft_length,
    center)`.

    The result is rendered once and cached in `cache_dir` under a key of
    every argument that changes it (and a format version); the parsed
    scores are cached too. A cache file that is unreadable or fails its
    checksum is rebuilt. The same arguments give the same bytes; the key
    holds the sha256 of each SoundFont (not its path). With the defaults
    the three splits (45 minutes) build in about two minutes.

    Args:
        split: `"train"`, `"validation"` or `"test"`.
        minutes: minutes of audio (rounded to whole clips, at least one);
            `None`: the split's default, 30, 5 and 10.
        sample_rate: Hz, an int from 8000 to 48000.
        seed: an int >= 0, for the humanisation.
        cache_dir: where the renders are cached (in its `score_music`
            folder). `None`: `$CVATTN_KERAS_CACHE`, else
            `~/.cache/cvattn_keras`. Keep it outside a repository: the
            renders derive from the corpus and the SoundFonts (TimGM6mb:
            GPL-2; others: their licences).
        stft: the `layers.ComplexSTFT` the labels are aligned to, a layer
            or a dict of its `get_config()`. `None`: `default_stft()`,
            `ComplexSTFT(2048, 512, bins=(0, 640))` (for 16 kHz).
        lowest_note: MIDI number of note 0 (default 21, A0).
        notes: the number of notes labelled (default 88, A0 to C8).
        clip_seconds: seconds per clip, finite: at least one sample
            (`1 / sample_rate`), at most the longest work of the split at
            the slowest `tempo` (and `max_work_seconds`).
        snr_db: the noise's SNR in dB: a number, or a `(low, high)` range
            drawn per work.
        tempo: quarter notes per minute, a number or a `(low, high)` range
            drawn per work, >= 1.
        max_work_seconds: seconds taken from each work at most (at least
            `clip_seconds`); `None`: whole works.
        detune_cents: the largest detuning of a part, finite, >= 0.
        jitter_seconds: the standard deviation of the note timing jitter,
            finite, >= 0.
        programs: the General MIDI programs the parts are drawn from, a
            non-empty sequence of distinct ints 0-127 (a set: the order
            does not matter); `None`: `PROGRAMS`' 38. The old default
            (before issue 33) was `(0, 1, 6, 19, 40, 41, 42, 48)`.
        timbre_augmentation: the strength of the timbre augmentation, a
            number from 0 (none) to 1 (the ranges above), or a bool
            (True: 1, False: 0); default 0.5
            (`DEFAULT_TIMBRE_AUGMENTATION`).
        soundfonts: the SF2 files the parts are played with, a path or a
            non-empty sequence of paths (each part draws one); `None`:
            `default_soundfont()` (`TimGM6mb.sf2`) alone. Give it among
            them to keep it.

    Returns:
        A `ScoreMusic`: `audio`, `labels`, `notes`, `works`,
        `sample_rate`, `frame_rate` and the settings.

    Raises:
        ValueError: an argument out of its range (named, with the value
            received); a highest note above the Nyquist frequency; a clip
            shorter than one frame of `stft`; `minutes` more than the
            split holds; a corpus file whose sha256 differs from the
            manifest's; a SoundFont that is missing, not an SF2 file, or
            SF3 (compressed), named.
        ImportError: without music21 or pretty_midi
            (`pip install "cvattn_keras[music]"`).
    """
    from cvattn_keras.layers.stft import as_stft

    _check_arguments(split, minutes, sample_rate, seed, lowest_note, notes)
    clip_seconds = check.greater_than(clip_seconds, "clip_seconds")
    if clip_seconds * sample_rate < 1:
        raise ValueError(
            "`clip_seconds` must hold at least one sample: clip_seconds >= "
            f"1 / sample_rate = {1 / sample_rate:g} s. Received: "
            f"clip_seconds={clip_seconds!r}, sample_rate={sample_rate}"
        )
    snr_db = _pair(snr_db, "snr_db")
    tempo = _pair(tempo, "tempo", low=0.0)
    if tempo[0] < _MIN_TEMPO:
        # Slower, a quarter note outlasts a minute and sample positions
        # outgrow int64 (1e-9 asked for PiB when notes were rendered
        # whole): nothing a clip could use.
        raise ValueError(
            f"`tempo` must be at least {_MIN_TEMPO:g} quarter note per "
            "minute (a number, or both ends of a (low, high) range). "
            f"Received: tempo={tempo if tempo[0] < tempo[1] else tempo[0]!r}"
        )
    if max_work_seconds is not None and not (
        check._is_real(max_work_seconds) and max_work_seconds >= clip_seconds
    ):
        raise ValueError(
            "`max_work_seconds` must be None or a finite number >= "
            f"clip_seconds ({clip_seconds:g}). Received: "
            f"max_work_seconds={max_work_seconds!r}"
        )
    for name, value in (
        ("detune_cents", detune_cents),
        ("jitter_seconds", jitter_seconds),
    ):
        if not check._is_real(value) or value < 0:
            raise ValueError(
                f"`{name}` must be a finite number >= 0. Received: "
                f"{name}={value!r}"
            )
    programs = _check_programs(programs, PROGRAMS)
    strength = _check_strength(timbre_augmentation)
    if soundfonts is not None:
        soundfonts = _check_soundfonts(soundfonts)
    stft = default_stft() if stft is None else as_stft(stft)
    clip_samples = int(round(clip_seconds * sample_rate))
    works = {work["work"]: work for work in _manifest()["works"]}
    # The seconds each work of the split gives at most, at the slowest
    # tempo (the manifest has each work's length in quarter notes):
    # what a clip and `minutes` can ask, refused before any parsing.
    longest = []
    for work in works.values():
        if work["split"] == split:
            seconds = work["quarters"] * 60.0 / tempo[0]
            if max_work_seconds is not None:
                seconds = min(seconds, max_work_seconds)
            longest.append(seconds)
    if clip_samples > int(max(longest) * sample_rate):
        raise ValueError(
            f"`clip_seconds` must be at most {max(longest):g} s, the "
            f"longest work of the {split!r} split at the slowest `tempo` "
            f"({tempo[0]:g}). Received: clip_seconds={clip_seconds!r}"
        )
    centres = _frame_centres(stft, clip_samples, clip_seconds)
    cache = _cache_root(cache_dir)
    music21, pretty_midi = _dependencies()
    if soundfonts is None:
        soundfonts = [_soundfont_path(pretty_midi)]
    root = _corpus_root(music21)
    if minutes is None:
        minutes = DEFAULT_MINUTES[split]
    # (At most 2**62 clips, however large `minutes` is: refused below.)
    clips = max(1, int(round(min(minutes * 60.0 / clip_seconds, 2.0**62))))
    settings = {
        "format": FORMAT_VERSION,
        "split": split,
        "clips": clips,
        "sample_rate": int(sample_rate),
        "seed": int(seed),
        "lowest_note": int(lowest_note),
        "notes": int(notes),
        "clip_samples": clip_samples,
        "snr_db": snr_db,
        "tempo": tempo,
        "max_work_seconds": (
            None if max_work_seconds is None else float(max_work_seconds)
        ),
        "detune_cents": float(detune_cents),
        "jitter_seconds": float(jitter_seconds),
        "frames": [int(c) for c in centres],
        "manifest": _sha256(_MANIFEST),
        "render": _RENDER_VERSION,
        "programs": programs,
        "timbre_augmentation": strength,
        "soundfonts": [_file_sha256(path) for path in soundfonts],
    }
    key = hashlib.sha256(
        json.dumps(settings, sort_keys=True).encode()
    ).hexdigest()
    path = os.path.join(cache, f"{split}-{key[:24]}.npz")
    arrays = _read_cache(path)
    most = sum(
        int(seconds * sample_rate) // clip_samples for seconds in longest
    )
    if clips > most:
        raise ValueError(
            f"`minutes` asks for {clips} clips of {clip_seconds:g} s; the "
            f"{split!r} split holds at most {most} with these settings. "
            "Lower `minutes` or raise `max_work_seconds`. Received: "
            f"minutes={minutes!r}"
        )
    if arrays is not None:
        for work in sorted(set(arrays["works"].tolist())):
            _corpus_file(works[work], root)
    else:
        arrays = _build(settings, works, root, cache, music21, soundfonts)
        arrays["labels"] = _labels(arrays["notes"], centres, settings)
        arrays["checksum"] = np.array(_checksum(arrays))
        _write_atomic(path, arrays)
    rows = arrays["notes"]
    per_clip = [[] for _ in range(clips)]
    for clip, start, stop, pitch in rows.tolist():
        per_clip[int(clip)].append(
            (start / sample_rate, stop / sample_rate, int(pitch))
        )
    return ScoreMusic(
        audio=arrays["audio"],
        labels=arrays["labels"].astype(np.float32),
        notes=per_clip,
        works=arrays["works"].tolist(),
        sample_rate=int(sample_rate),
        frame_rate=sample_rate / stft.frame_step,
        lowest_note=int(lowest_note),
        clip_seconds=clip_samples / sample_rate,
        split=split,
        stft_config=stft.get_config(),
    )


def _labels(rows, centres, settings):
    """0/1 uint8 `(clips, frames, notes)` from the notes' rows `(clip,
    start, stop, pitch)` (samples from the clip's start)."""
    labels = np.zeros(
        (settings["clips"], centres.size, settings["notes"]), np.uint8
    )
    first = np.searchsorted(centres, rows[:, 1], "left")
    last = np.searchsorted(centres, rows[:, 2], "left")
    for (clip, _, _, pitch), a, b in zip(rows.tolist(), first, last):
        labels[int(clip), a:b, int(pitch) - settings["lowest_note"]] = 1
    return labels


def _build(settings, works, root, cache, music21, soundfont_paths):
    """Renders a split: `{"audio", "notes", "works"}`."""
    soundfonts = _load_soundfonts(soundfont_paths)
    rate, size = settings["sample_rate"], settings["clip_samples"]
    need = settings["clips"]
    audio, rows, names = [], [], []
    for work in works.values():
        if work["split"] != settings["split"]:
            continue
        if len(names) >= need:
            break
        notes = _score_notes(work, root, cache, music21)
        if not notes.size:
            continue
        identity = int(hashlib.sha256(work["work"].encode()).hexdigest(), 16)
        rng = np.random.default_rng([settings["seed"], identity % 2**64])
        # The clips this work gives, at the drawn tempo (drawn again, the
        # same value, by `_render`).
        bpm = np.random.default_rng(
            [settings["seed"], identity % 2**64]
        ).uniform(*settings["tempo"])
        seconds = float(notes[:, 1].max()) * 60.0 / bpm
        if settings["max_work_seconds"] is not None:
            seconds = min(seconds, settings["max_work_seconds"])
        count = min(int(seconds * rate) // size, need - len(names))
        if count < 1:
            continue
        streams = _streams(settings["seed"], identity)
        wave, found = _render(notes, soundfonts, rng, streams, settings, count)
        for clip in range(count):
            low, high = clip * size, (clip + 1) * size
            audio.append(wave[low:high])
            inside = found[(found[:, 0] < high) & (found[:, 1] > low)]
            for start, stop, pitch in inside.tolist():
                rows.append(
                    (
                        len(names),
                        max(start - low, 0),
                        min(stop - low, size),
                        pitch,
                    )
                )
            names.append(work["work"])
    if len(names) < need:
        raise ValueError(
            f"The {settings['split']!r} split holds {len(names)} clips of "
            f"{size / rate:g} s with these settings, fewer than `minutes` "
            f"asks ({need} clips). Lower `minutes` or raise "
            "`max_work_seconds`."
        )
    rows = np.asarray(rows, np.int64).reshape(-1, 4)
    return {
        "audio": np.asarray(audio, np.float32),
        "notes": rows[np.lexsort((rows[:, 3], rows[:, 1], rows[:, 0]))],
        "works": np.asarray(names),
    }
