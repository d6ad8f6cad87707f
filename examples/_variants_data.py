"""`compare_variants.py`'s settings and data: the model sizes, the
recipe of `--data scores` (`SCORES`), its held-out timbres, the
generators' training (`GENERATION`) and the causal windows of
`--streaming` (`WINDOWS`), the STFT, and `score_music`'s clips cut into
windows. A part of the example, imported by it (see its docstring)."""

import math

import numpy as np

import cvattn_keras as cvk

# The reference architecture scaled down to the data's 128 bins, as in
# train_music.py.
SMALL = dict(
    embed_dim=32,
    num_heads=4,
    num_layers=2,
    head_dim=64,
    frontend_filters=(8, 16, 16),
    frontend_kernel_sizes=(6, 3, 3),
)


TINY = dict(
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(4, 8),
    frontend_kernel_sizes=(6, 3),
)


def real_size(complex_size):
    """sqrt(2) times as wide (rounded to the heads): about the same number
    of parameters as the complex model."""
    heads = complex_size["num_heads"]
    return dict(
        complex_size,
        embed_dim=heads
        * round(math.sqrt(2) * complex_size["embed_dim"] / heads),
        head_dim=round(math.sqrt(2) * complex_size["head_dim"]),
        frontend_filters=tuple(
            round(math.sqrt(2) * f) for f in complex_size["frontend_filters"]
        ),
    )


# The render and the recipe of `--data scores`, scaled to a 2-core CPU:
# 8 kHz audio, the 60 notes C2 (MIDI 36) to B6 (1976 Hz, below the 4 kHz
# Nyquist frequency), 10.24-s clips (5 windows of 64 frames), `stft()`'s
# frames. The defaults of the options take about 45 minutes in all (see
# compare_variants.py's docstring).
SCORES = dict(
    sample_rate=8000,
    lowest_note=36,
    notes=60,
    clip_seconds=10.24,
    epochs=10,
    train_minutes=15.0,
    test_minutes=5.0,
    frames=64,
    learning_rate=2e-3,
    batch_size=8,
)


# --smoke: seconds in all (a few seconds of audio, 16-frame windows).
SCORES_SMOKE = dict(train_minutes=0.1, test_minutes=0.07, clip_seconds=2.048)


# The paper's generation split of its 64 frames: 43 source, 21 target.
SOURCE_SHARE = 43 / 64


METRICS = (
    ("ap", "AP"),
    ("frame_precision", "frame P"),
    ("frame_recall", "frame R"),
    ("frame_accuracy", "frame acc."),
    ("note_f1", "note F1"),
)


# The generation table's extra columns: the AP of generating with the
# thresholded notes fed back, and of teacher forcing.
GENERATION_METRICS = (
    ("ap_notes_fed_back", "AP (notes fed back)"),
    ("ap_teacher_forced", "AP (teacher forced)"),
)


# Held-out timbres (issue 33): the test works are rendered again with
# General MIDI programs absent from training, one or two of each family
# (electric piano, marimba, accordion, nylon and steel guitars, voice
# oohs, French horn, oboe, bassoon, flute; in TimGM6mb none shares a
# sample with a training program but the horn's top zone, above its
# range), and, with --held-out-soundfont, by another SoundFont. Training
# uses the rest of `score_music`'s default programs.
HELD_OUT_PROGRAMS = (4, 12, 21, 24, 25, 53, 60, 68, 70, 73)


TRAIN_PROGRAMS = tuple(
    p
    for p in sorted(cvk.datasets.scores.PROGRAMS)
    if p not in HELD_OUT_PROGRAMS
)


# The transcription table's extra columns: AP on each held-out test set
# and the paired gap, test AP minus held-out AP, by seed.
HELD_OUT_SETS = (
    ("held_out_programs", "held-out programs"),
    ("held_out_soundfont", "held-out SoundFont"),
)


NOT_COMPARABLE = (
    "These numbers are not comparable to MusicNet's: the audio is a "
    "synthetic rendering of scores (music21's Bach chorales and string "
    "quartets played by a General MIDI SoundFont, humanised, in a "
    "simulated room), not recordings; the model (the scaled-down `{size}` "
    "size) and the recipe (minutes of audio at 8 kHz, a few epochs) are "
    "scaled to a CPU; and the split (score_music's works, held out by "
    "work) and the note range (MIDI {low} to {high}) differ from "
    "MusicNet's."
)


# The real-valued model's row, which the paired differences are taken
# against.
REAL_BASELINE = "real baseline"


REAL_GENERATOR = (
    "The real baseline is `models.real_music_generator`: "
    "`real_music_classifier`'s encoder and a decoder of real layers "
    "(`RealTransformerDecoder`), sqrt(2) times as wide as the complex "
    "model, trained the same way; it decodes without `generate`'s cache."
)


# How `--data scores` trains its generators (`--generation-training`):
# "teacher", teacher forcing (with `--source-weight 0` the paper's
# training, and this example's before issue 33); "logits" or "notes",
# `models.FeedbackTraining` feeding back that, as `generate` does. Teacher
# forcing alone learns to carry the true previous frame on and barely reads
# the audio (its first generated frame scores about each note's
# frequency), so that generating from its own outputs scores below that
# frequency; see `generation_trainer`.
GENERATION_TRAININGS = ("teacher", "logits", "notes")


GENERATION = dict(
    generation_training="logits",
    generation_passes=2,
    source_weight=3.0,
    teacher_rate=0.0,
)


# The causal windows compared with bidirectional attention: a window of W
# frames is W / 31.25 s of context per layer (0.5, 1.0 and 2.0 s).
WINDOWS = (16, 32, 64)


# --smoke: 16-frame windows.
WINDOWS_SMOKE = (4,)


# The rotary positions of `music_classifier(positions="rotary")` and
# `real_music_classifier(positions="rotary")`: `rotary_max_wavelength=
# 10000` (written in runs.json).
ROTARY_WAVELENGTH = 10000.0


STREAMING_CAVEATS = (
    "Each causal model is scored twice: on the test windows, as the "
    "bidirectional ones are (its frame t sees only frames max(0, t - W + 1) "
    "to t of the window), and *streamed*: the same weights run over each "
    "whole test clip ({clip:g} s), scored on the same frames, so that every "
    "frame sees up to W frames of its past (through the stacked encoders, "
    "up to 2W - 1), as it would in a stream (`streaming.to_streaming`; "
    "the encoders' rotary positions are relative, so a longer input is the "
    "same model). Both runs keep the recipe's centred STFT, whose 512-point "
    "frames look 256 samples (32 ms) ahead whatever the attention; a "
    "streaming model takes `ComplexSTFT(center=False)`. No look-ahead: "
    "`sliding_window` offers none."
)


def stft():
    """The STFT of `--data scores` at 8 kHz: 512 points (64 ms, the
    periodic Hann window) every 256 samples (31.25 frames per second, as
    `score_music`'s default), centred, the first 128 bins (15.6 Hz apart,
    up to 1.98 kHz: the fundamentals of every note up to B6; below C4 two
    fundamentals can share a bin, and their harmonics tell them apart).
    128 bins are what `SMALL`'s front end was sized for (128 -> 62 -> 30
    -> 14 bins); 256 (a 1024-point STFT) would double its cost."""
    return cvk.layers.ComplexSTFT(512, 256, bins=(0, 128), name="stft")


def min_frames(transform):
    """The fewest frames a window (and a generation source) may have: a
    waveform of at least one whole STFT frame, `fft_length` samples."""
    return 1 + -(-transform.fft_length // transform.frame_step)


def smallest_frames(transform, task):
    """The fewest `--frames` of `task`: a window of at least one whole STFT
    frame, and with generation a source of one too and a target frame."""
    least = min_frames(transform)
    frames = least
    while task != "transcription" and (
        generation_split(frames)[0] < least or generation_split(frames)[1] < 1
    ):
        frames += 1
    return frames


def generation_split(frames):
    """`(source_frames, target_frames)` of a `frames`-frame window: the
    paper's 43 + 21 of 64, scaled."""
    source = int(round(frames * SOURCE_SHARE))
    return source, frames - source


def cut_windows(audio, labels, transform, frames):
    """Clips `(clips, samples)` and their labels `(clips, clip_frames,
    notes)` at `transform`'s frames -> windows `(windows, samples)` and
    `(windows, frames, notes)`, clip by clip, and each window's `(clip,
    first frame)`.

    Window `w` of a clip starts at its frame `f = w * frames`, sample
    `f * frame_step` (a multiple of the hop), and holds
    `waveform_length(transform, frames)` samples: the transform of the
    window puts its frame `t` where the clip's frame `f + t` is (centred
    on sample `(f + t) * frame_step`, plus `fft_length // 2` without
    centring), so the labels of frames `f` to `f + frames - 1` are the
    window's. Only whole windows inside the clip are taken."""
    hop = transform.frame_step
    length = cvk.models.waveform_length(transform, frames)
    starts = [
        f
        for f in range(0, labels.shape[1] - frames + 1, frames)
        if f * hop + length <= audio.shape[1]
    ]
    x = [audio[:, f * hop : f * hop + length] for f in starts]
    y = [labels[:, f : f + frames] for f in starts]
    where = [(c, f) for c in range(len(audio)) for f in starts]
    x = np.stack(x, 1).reshape(-1, length) if starts else audio[:0, :length]
    y = np.stack(y, 1).reshape((-1, frames) + labels.shape[2:])
    return x, y, where


def timbre_kwargs(args):
    """score_music's timbre arguments of the training render (and the usual
    test set): `--programs`, `--timbre-augmentation`, `--soundfonts`."""
    kwargs = dict(programs=args.programs or TRAIN_PROGRAMS)
    if args.timbre_augmentation is not None:
        kwargs["timbre_augmentation"] = args.timbre_augmentation
    if args.soundfonts:
        kwargs["soundfonts"] = args.soundfonts
    return kwargs


def load_score_windows(args, transform, held_out=False):
    """score_music's train and test splits (held-out works) cut into
    windows: `{"train": (x, y), "test": (x, y)}` and the test split's
    `ScoreMusic`. With `held_out`, the test works again with held-out
    timbres (the same labels: score_music draws the timbre apart):
    `"held_out_programs"` (`--held-out-programs`) and, with
    `--held-out-soundfont`, `"held_out_soundfont"` (the training
    programs), both at `--held-out-augmentation` (default 0: plain
    renders, the same sets whatever the training's timbre)."""
    windows, test = {}, None
    timbre = timbre_kwargs(args)
    renders = [("train", "train", timbre), ("test", "test", timbre)]
    plain = dict(timbre, timbre_augmentation=args.held_out_augmentation)
    if held_out and args.held_out_programs:
        programs = dict(plain, programs=args.held_out_programs)
        renders.append(("held_out_programs", "test", programs))
    if held_out and args.held_out_soundfont:
        soundfont = dict(plain, soundfonts=[args.held_out_soundfont])
        renders.append(("held_out_soundfont", "test", soundfont))
    for name, split, kwargs in renders:
        minutes = args.train_minutes if split == "train" else args.test_minutes
        data = cvk.datasets.score_music(
            split,
            minutes=minutes,
            sample_rate=SCORES["sample_rate"],
            lowest_note=SCORES["lowest_note"],
            notes=SCORES["notes"],
            clip_seconds=args.clip_seconds,
            stft=transform,
            seed=0,
            cache_dir=args.cache_dir,
            **kwargs,
        )
        x, y, _ = cut_windows(data.audio, data.labels, transform, args.frames)
        if not len(x):
            raise ValueError(
                f"--frames {args.frames} is more than a clip's "
                f"{data.labels.shape[1]} frames"
            )
        if split == "train" and len(x) > args.batch_size:
            # Whole batches only: a last, smaller batch would compile the
            # training step a second time (seconds per run).
            keep = len(x) // args.batch_size * args.batch_size
            x, y = x[:keep], y[:keep]
        windows[name] = (x, y)
        if name == "test":
            test = data
    return windows, test


def parse_variants(names):
    if names:
        return [cvk.attention.parse_variant(v) for v in names]
    return [
        (softmax, product)
        for product in cvk.attention.PRODUCTS
        for softmax in cvk.attention.SOFTMAX_VARIANTS
    ]
