"""The paper's experiment: every attention variant and a real baseline
under one training budget, over several seeds.

Trains `music_classifier` with each of the 8 softmax x product variants and
`real_music_classifier` (real attention of comparable size) on the same
`synthetic_music` data, each for the same number of epochs, for each seed;
writes a markdown table of held-out micro-averaged AP (mean +- sample std
over seeds) and training time.

`--data scores` runs it on real music: `datasets.score_music` (music21
scores played by a SoundFont; the `music` extra), trained on its train
split and scored on its test split (held-out works), at a recipe scaled to
a 2-core CPU (see `SCORES`): 8 kHz audio, MIDI 36-95, `stft()` (512
points, hop 256, 128 bins), 15 minutes of training audio cut into 440
windows of `--frames` 64 frames (labels on the windows' own STFT frames;
`cut_windows`), 10 epochs of batches of 8, the `SMALL` model. The models
take the waveform (their first layer the STFT, frozen). Two tasks
(`--task`, default both):

- transcription: every variant and the real baseline, scored with
  `metrics.transcription_scores` (AP, frame precision / recall /
  accuracy, onset note F1 at threshold 0.5);
- generation, the paper's protocol: `music_generator` with every complex
  variant, and the real baseline `models.real_music_generator`, reads
  the first 43/64 of a
  window's frames and decodes the notes of the rest; it is evaluated by
  `models.generate(..., feedback="logits")` on the test windows, the
  generated frames scored as above. The table adds the AP with
  `feedback="notes"` and of teacher forcing. It is
  trained the way it is evaluated (`--generation-training logits`,
  default): `models.FeedbackTraining` runs the decoder twice
  (`--generation-passes 2`), on the true previous notes
  (`models.shift_right`), then on the first pass's fed-back logits, the
  loss on the second; and a transcription of the source frames from the
  encoder's output is a second loss (`--source-weight 3`). Trained with
  teacher forcing alone (`--generation-training teacher --source-weight
  0`, the paper's training), a generator learns to carry the true previous
  frame on and barely reads the audio: generating from its own outputs it
  switches nothing on, and scores at each note's training frequency
  (CAtt 0.130 AP against 0.144, teacher-forced 0.841, 5 seeds; trained
  the default way 0.199 ± 0.009, 10 seeds, and the real baseline 0.200;
  docs/models.md).

Held-out timbres (`--data scores`, transcription): training and the usual
test set play each part with a program of `TRAIN_PROGRAMS` (`--programs`;
score_music's timbre augmentation at `--timbre-augmentation`, default 0.5),
and the test works are played again by `HELD_OUT_PROGRAMS`
(`--held-out-programs`: electric piano, marimba, accordion, guitars, voice,
horn, oboe, bassoon, flute, absent from training) and, with
`--held-out-soundfont PATH`, by another SoundFont: the same notes and
labels (score_music draws the timbre apart), rendered plainly
(`--held-out-augmentation`, default 0: the same held-out sets whatever
the training's timbre, so that recipes compare on them), so the table's
AP (held-out programs), AP (held-out SoundFont) and their gaps (test AP
minus held-out AP, paired by seed) are the cost of timbres never heard,
and the variants are ranked on each set. The extra test render is
`--test-minutes` again (cached).

`--data scores --streaming`, what causality costs (a model that streams
frame by frame must attend causally, over a window): transcription only,
the model of `--variants` (default `realip`, CAtt) and the real baseline,
each bidirectional with sinusoidal positions (the paper's models, as
above), bidirectional with rotary positions, and causal with a sliding
window of W frames for each of `--windows` (default 16 32 64; rotary, the
configuration `streaming.to_streaming` streams). Each causal model is
scored on the test windows and again streamed: its weights run over each
whole test clip, so that every frame sees its full window of past frames.
The table gives held-out AP (mean +- sample std over seeds) and the paired
difference by seed, causal minus bidirectional with the same (rotary)
positions, rotary minus sinusoidal, with its 95% t interval. The real
baseline with a window is `real_music_classifier(sliding_window=W)`:
`keras.layers.MultiHeadAttention(sliding_window=W)` called with
`use_causal_mask=True`, the band t - W < s <= t of
`ComplexMultiHeadAttention(sliding_window=W)`, and rotary positions by
`models.RealRotaryAttention`. It writes `streaming.md` and `runs.json`,
rewritten after each seed (all models seed by seed), so that a run stopped
early leaves the seeds done, labelled partial.

It writes a markdown table per task (mean +- sample std over seeds, and
the paired differences against the real baseline with their 95% t
intervals) and a JSON of every run's numbers under `--output` (a
folder). Measured on a shared
2-core CPU (other jobs running): a transcription run of one variant, 8
epochs, 39 s (held-out AP 0.47; the label density is 0.057), a generation
run 55 s; the default run (9 x 3 transcription and 9 x 3 generation
models, 10 epochs) about 50 minutes. The numbers are not comparable to
MusicNet's (see the tables).

Run:  python examples/compare_variants.py [--epochs 10] [--seeds 3]
          [--output examples/output/compare_variants.md] [--smoke]
      python examples/compare_variants.py --data scores
          [--task transcription|generation|both] [--epochs N] [--seeds 3]
          [--frames 64] [--train-minutes M] [--test-minutes M]
          [--programs N ...] [--held-out-programs N ...]
          [--timbre-augmentation S] [--soundfonts PATH ...]
          [--held-out-soundfont PATH]
          [--generation-training logits|notes|teacher]
          [--generation-passes 2] [--source-weight 3] [--teacher-rate 0]
          [--output examples/output/compare_variants_scores] [--smoke]
      python examples/compare_variants.py --data scores --streaming
          [--windows 16 32 64] [--variants realip] [--seeds 3] ...
          [--output examples/output/compare_variants_streaming] [--smoke]
"""

import argparse
import json
import math
import os
import shlex
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# cvattn_keras first, before keras imports TensorFlow: it quiets
# TensorFlow's C++ start-up lines (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

import cvattn_keras as cvk  # noqa: E402

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402

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


def train(build, data, epochs, seed, batch_size=32, run_eagerly=False):
    (x, y), (x_test, y_test) = data
    keras.utils.set_random_seed(seed)
    model = build()
    model.compile(
        keras.optimizers.Adam(2e-3),
        keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[cvk.metrics.MicroAveragedPrecision()],
        # --smoke: eagerly, where tracing and compiling would take most of
        # the seconds.
        run_eagerly=run_eagerly,
    )
    start = time.perf_counter()
    model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0)
    seconds = time.perf_counter() - start
    return model.evaluate(x_test, y_test, verbose=0)[1], seconds, model


# ----------------------------------------------------------------------
# --data scores
# ----------------------------------------------------------------------

# The render and the recipe of `--data scores`, scaled to a 2-core CPU:
# 8 kHz audio, the 60 notes C2 (MIDI 36) to B6 (1976 Hz, below the 4 kHz
# Nyquist frequency), 10.24-s clips (5 windows of 64 frames), `stft()`'s
# frames. The defaults of the options take about 45 minutes in all (see
# the module's docstring).
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


def sigmoid(logits):
    """Probabilities of logits, without overflow."""
    return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(logits, np.float64)))


def predict(model, x, batch_size=256):
    """`model.predict` of an array (or a dict of them) in batches of one
    size (the last one padded): one compilation."""
    arrays = x if isinstance(x, dict) else {None: x}
    count = len(next(iter(arrays.values())))
    batch_size = min(batch_size, count)
    padded = -(-count // batch_size) * batch_size
    arrays = {
        key: np.concatenate([a, np.zeros_like(a[: padded - count])])
        for key, a in arrays.items()
    }
    x = arrays if isinstance(x, dict) else arrays[None]
    return model.predict(x, batch_size=batch_size, verbose=0)[:count]


def trainable(model):
    """The trainable parameters (the frozen STFT's kernels, most of
    `count_params()` at this size, and the norms' statistics left out)."""
    return int(sum(np.prod(w.shape) for w in model.trainable_weights))


def _compile(model, args):
    # --smoke: eagerly, one step of a tiny model, where tracing and
    # compiling the step would take most of the seconds.
    model.compile(
        keras.optimizers.Adam(args.learning_rate),
        keras.losses.BinaryCrossentropy(from_logits=True),
        run_eagerly=args.smoke,
    )


def run_transcription(build, windows, args, seed, frame_rate):
    """Trains one classifier, returns its scores on the test windows."""
    (x, y), (x_test, y_test) = windows["train"], windows["test"]
    keras.utils.set_random_seed(seed)
    model = build()
    _compile(model, args)
    start = time.perf_counter()
    model.fit(x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=0)
    logits = predict(model, x_test)
    scores = cvk.metrics.transcription_scores(
        y_test,
        sigmoid(logits),
        frame_rate,
        lowest_note=SCORES["lowest_note"],
    )
    for name, _ in HELD_OUT_SETS:
        if name in windows:
            x_other, y_other = windows[name]
            other = cvk.metrics.transcription_scores(
                y_other,
                sigmoid(predict(model, x_other)),
                frame_rate,
                lowest_note=SCORES["lowest_note"],
            )
            scores.update({f"{name}_{k}": v for k, v in other.items()})
            scores[f"{name}_gap"] = scores["ap"] - other["ap"]
    return scores, time.perf_counter() - start, trainable(model)


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


def generation_trainer(model, args, seed):
    """The model that `run_generation` fits, compiled: the generator
    itself (`--generation-training teacher --source-weight 0`, the paper's
    training), else `models.FeedbackTraining` around it: with
    `--generation-passes` decoder passes, the later ones on the last one's
    fed-back logits or notes (`--generation-training`), `--teacher-rate`
    (one pass, teacher forcing, with `teacher`), and with `--source-weight`
    > 0 the source frames' transcription as a second loss of that
    weight."""
    loss = keras.losses.BinaryCrossentropy(from_logits=True)
    weights = None
    trainer = model
    feeds_back = args.generation_training != "teacher"
    if feeds_back or args.source_weight > 0:
        trainer = cvk.models.FeedbackTraining(
            model,
            passes=args.generation_passes if feeds_back else 1,
            feedback=args.generation_training if feeds_back else "logits",
            teacher_rate=args.teacher_rate,
            source_notes=args.source_weight > 0,
            seed=seed,
        )
        if args.source_weight > 0:
            loss = {"notes": loss, "source_notes": loss}
            weights = {"notes": 1.0, "source_notes": args.source_weight}
    trainer.compile(
        keras.optimizers.Adam(args.learning_rate),
        loss,
        loss_weights=weights,
        # --smoke: eagerly (see _compile).
        run_eagerly=args.smoke,
    )
    return trainer


def run_generation(build, windows, args, seed, frame_rate, transform):
    """Trains one generator on the windows' source and target frames as
    `--generation-training` says (`generation_trainer`); returns the
    scores of `generate(..., feedback="logits")` (the paper's protocol) on
    the test windows' target frames, the AP of `generate(...,
    feedback="notes")`, and the AP of the teacher-forced logits (the true
    previous frames fed in: what teacher forcing optimises; the gap to the
    generated AP is the cost of feeding back the model's own outputs)."""
    source, _ = generation_split(args.frames)
    samples = cvk.models.waveform_length(transform, source)
    (x, y), (x_test, y_test) = windows["train"], windows["test"]
    keras.utils.set_random_seed(seed)
    model = build()
    trainer = generation_trainer(model, args, seed)
    start = time.perf_counter()
    target = y[:, source:]
    labels = target
    if args.source_weight > 0:
        labels = {"notes": target, "source_notes": y[:, :source]}
    trainer.fit(
        {
            "waveform": x[:, :samples],
            "previous_notes": cvk.models.shift_right(target),
        },
        labels,
        epochs=args.epochs,
        batch_size=args.batch_size,
        verbose=0,
    )
    generated = {}
    # The real generator decodes without the cache (whole-model calls).
    cache = isinstance(
        model.get_layer("decoder_0"), cvk.layers.ComplexTransformerDecoder
    )
    for feedback in cvk.models.FEEDBACKS:
        # Uncompiled: one call per model, where XLA's compilation would
        # cost more than it saves.
        generated[feedback] = cvk.models.generate(
            model,
            x_test[:, :samples],
            feedback=feedback,
            cache=cache,
            jit_compile=False,
        )[1]
    scores = cvk.metrics.transcription_scores(
        y_test[:, source:],
        sigmoid(generated["logits"]),
        frame_rate,
        lowest_note=SCORES["lowest_note"],
    )
    scores["ap_notes_fed_back"] = cvk.metrics.average_precision(
        y_test[:, source:], sigmoid(generated["notes"])
    )
    forced = predict(
        model,
        {
            "waveform": x_test[:, :samples],
            "previous_notes": cvk.models.shift_right(y_test[:, source:]),
        },
    )
    scores["ap_teacher_forced"] = cvk.metrics.average_precision(
        y_test[:, source:], sigmoid(forced)
    )
    return scores, time.perf_counter() - start, trainable(model)


def score_models(variants, size, args, transform):
    """`{task: [(label, build), ...]}` of the tasks asked for."""
    notes = SCORES["notes"]
    source, target = generation_split(args.frames)
    models = {}
    if args.task in ("transcription", "both"):
        runs = []
        for softmax, product in variants:
            runs.append(
                (
                    f"{softmax} / {product}",
                    lambda s=softmax, p=product: cvk.models.music_classifier(
                        frames=args.frames,
                        notes=notes,
                        stft=transform.get_config(),
                        softmax=s,
                        product=p,
                        **size,
                    ),
                )
            )
        runs.append(
            (
                REAL_BASELINE,
                lambda: cvk.models.real_music_classifier(
                    frames=args.frames,
                    notes=notes,
                    stft=transform.get_config(),
                    **real_size(size),
                ),
            )
        )
        models["transcription"] = runs
    if args.task in ("generation", "both"):
        models["generation"] = [
            (
                f"{softmax} / {product}",
                lambda s=softmax, p=product: cvk.models.music_generator(
                    source_frames=source,
                    target_frames=target,
                    notes=notes,
                    stft=transform.get_config(),
                    softmax=s,
                    product=p,
                    **size,
                ),
            )
            for softmax, product in variants
        ] + [
            (
                REAL_BASELINE,
                lambda: cvk.models.real_music_generator(
                    source_frames=source,
                    target_frames=target,
                    notes=notes,
                    stft=transform.get_config(),
                    **real_size(size),
                ),
            )
        ]
    return models


def score_command(args):
    """The command line of this run, every setting spelt out."""
    words = ["python", "examples/compare_variants.py", "--data", "scores"]
    if args.smoke:
        words.append("--smoke")
    words += [
        "--task",
        args.task,
        "--epochs",
        str(args.epochs),
        "--seeds",
        str(args.seeds),
        "--frames",
        str(args.frames),
        "--train-minutes",
        f"{args.train_minutes:g}",
        "--test-minutes",
        f"{args.test_minutes:g}",
    ]
    if args.variants:
        words += ["--variants", *args.variants]
    for flag, value in (
        ("--programs", args.programs),
        ("--held-out-programs", args.held_out_programs),
    ):
        default = TRAIN_PROGRAMS if flag == "--programs" else HELD_OUT_PROGRAMS
        if value is not None and tuple(value) != default:
            words += [flag, *map(str, value)]
    if args.timbre_augmentation is not None:
        words += ["--timbre-augmentation", f"{args.timbre_augmentation:g}"]
    if args.soundfonts:
        words += ["--soundfonts", *args.soundfonts]
    if args.held_out_soundfont:
        words += ["--held-out-soundfont", args.held_out_soundfont]
    if args.held_out_augmentation:
        words += ["--held-out-augmentation", f"{args.held_out_augmentation:g}"]
    if args.task != "transcription" and not getattr(args, "streaming", False):
        words += ["--generation-training", args.generation_training]
        if args.generation_training != "teacher":
            words += [
                "--generation-passes",
                str(args.generation_passes),
                "--teacher-rate",
                f"{args.teacher_rate:g}",
            ]
        words += ["--source-weight", f"{args.source_weight:g}"]
    if getattr(args, "streaming", False):
        words += ["--streaming", "--windows", *map(str, args.windows)]
    return shlex.join(words)


def generation_training_words(args):
    """How the generators were trained, in words (the table's caption)."""
    if args.generation_training == "teacher":
        words = "trained with teacher forcing (on the 0/1 previous notes)"
    else:
        words = (
            f"trained with `models.FeedbackTraining`: "
            f"{args.generation_passes} decoder passes, the first on the true "
            "previous notes, each later one on the last one's fed-back "
            f"{args.generation_training}"
        )
    if args.teacher_rate and args.generation_training != "teacher":
        words += (
            f" (each frame the true one with probability {args.teacher_rate:g})"
        )
    if args.source_weight > 0:
        words += (
            ", and a transcription of the source frames from the encoder's "
            f"output as a second loss of weight {args.source_weight:g}"
        )
    return words


def score_table(task, rows, args, counts, chance):
    """The markdown table of one task: mean +- sample std per metric."""
    source, target = generation_split(args.frames)
    low = SCORES["lowest_note"]
    what = (
        "transcription of every frame"
        if task == "transcription"
        else f"generation of the last {target} frames from the first "
        f"{source}, {generation_training_words(args)}, generated feeding "
        'back the logits (`generate(feedback="logits")`, the paper\'s '
        'protocol; "notes fed back": `feedback="notes"`)'
    )
    caption = (
        f"Held-out scores on `score_music`'s test works, {what}: "
        f"{counts['train']} training and {counts['test']} test windows of "
        f"{args.frames} frames ({args.train_minutes:g} and "
        f"{args.test_minutes:g} minutes at {SCORES['sample_rate']} Hz, "
        f"MIDI {low} to {low + SCORES['notes'] - 1}), {args.epochs} "
        f"epoch{'s' * (args.epochs != 1)}, "
        f"mean +- sample std over {args.seeds} seed(s); note F1 is onset-only, "
        f"threshold 0.5. A constant predictor's AP is the label density, "
        f"{chance[0]:.3f}; each note's frequency in the training windows "
        f"as its probability scores {chance[1]:.3f}. "
        f"`{score_command(args)}`"
    )
    lines = [caption, ""]
    if task == "generation":
        lines += [REAL_GENERATOR, ""]
    metrics = METRICS + (GENERATION_METRICS if task == "generation" else ())
    held_out = [
        (name, what)
        for name, what in HELD_OUT_SETS
        if all(f"{name}_ap" in run for _, runs in rows for run in runs)
    ]
    for name, what in held_out:
        metrics += (
            (f"{name}_ap", f"AP ({what})"),
            (f"{name}_gap", f"gap ({what})"),
        )
    if held_out:
        lines += [held_out_caption(args, held_out), ""]
    lines += [
        NOT_COMPARABLE.format(
            size="TINY" if args.smoke else "SMALL",
            low=low,
            high=low + SCORES["notes"] - 1,
        ),
        "",
        "| variant (softmax / product) | "
        + " | ".join(name for _, name in metrics)
        + " | trainable parameters | time per run (train + score) |",
        "| --- |" + " --- |" * (len(metrics) + 2),
    ]
    for label, runs in rows:
        cells = [mean_std([r[key] for r in runs]) for key, _ in metrics]
        seconds = np.mean([r["seconds"] for r in runs])
        lines.append(
            f"| {label} | " + " | ".join(cells) + f" | "
            f"{runs[0]['parameters']:,} | {seconds:.0f} s |"
        )
    if held_out:
        lines += ["", ranking(rows, [("ap", "test works")] + held_out)]
    differences = paired_lines(task, rows, held_out, chance[1])
    if differences:
        lines += ["", *differences]
    return "\n".join(lines)


def mean_std(values):
    """`"mean +- std"` of the values over the seeds, the sample std
    (ddof=1); the mean alone for one seed."""
    if len(values) < 2:
        return f"{np.mean(values):.3f}"
    return f"{np.mean(values):.3f} +- {np.std(values, ddof=1):.3f}"


def paired_lines(task, rows, held_out, frequency_ap):
    """The paired per-seed differences, each with its 95% t interval:
    every variant against the real baseline (on the test works and every
    held-out set), paired by the runs' `seed` (the seeds both rows have),
    and for generation every generator against the AP of each note's
    training frequency (a constant, so the interval is the AP's own). The
    test works are fixed: the intervals cover the variation across seeds
    (initialisation, batches, dropout), not across works."""
    reference = dict(rows).get(REAL_BASELINE)
    lines = []
    keys = [("ap", "test works")] + [
        (f"{name}_ap", what) for name, what in held_out
    ]
    for label, runs in rows:
        if reference is None or label == REAL_BASELINE:
            continue
        ours = {r["seed"]: r for r in runs}
        theirs = {r["seed"]: r for r in reference}
        seeds = sorted(set(ours) & set(theirs))
        if len(seeds) < 2:
            continue
        cells = [
            f"{what} "
            + _interval(
                *paired(
                    [ours[s] for s in seeds], [theirs[s] for s in seeds], key
                )
            )
            for key, what in keys
        ]
        common = ""
        if len(seeds) < max(len(ours), len(theirs)):
            common = " (the seeds both rows have)"
        lines.append(
            f"Paired AP difference {label} minus the {REAL_BASELINE}, seed "
            f"by seed on the fixed test works (mean over {len(seeds)} "
            f"seeds{common} [95% t interval]): " + "; ".join(cells) + "."
        )
    if task == "generation":
        for label, runs in rows:
            if len(runs) < 2:
                continue
            constant = [dict(ap=frequency_ap) for _ in runs]
            lines.append(
                f"AP of {label} minus the AP of each note's training "
                f"frequency ({frequency_ap:.3f}), over {len(runs)} seeds "
                f"[95% t interval]: "
                f"{_interval(*paired(runs, constant, 'ap'))}."
            )
    return lines


def held_out_caption(args, held_out):
    """What the held-out columns are."""
    train = args.programs or TRAIN_PROGRAMS
    text = (
        "Held-out timbres (transcription only): the same test works, with "
        "the same notes and labels, played by instruments absent from "
        f"training. Training and the test works: General MIDI programs "
        f"{', '.join(map(str, train))}"
    )
    if any(name == "held_out_programs" for name, _ in held_out):
        text += (
            "; held-out programs: "
            f"{', '.join(map(str, args.held_out_programs))}"
        )
    if any(name == "held_out_soundfont" for name, _ in held_out):
        name = os.path.basename(args.held_out_soundfont)
        text += f"; held-out SoundFont: {name} (the training programs)"
    strength = args.timbre_augmentation
    if strength is None:
        strength = cvk.datasets.scores.DEFAULT_TIMBRE_AUGMENTATION
    return (
        text + f"; timbre augmentation {strength:g} (training and the test "
        f"works), {args.held_out_augmentation:g} (the held-out sets). The "
        "gap is the test AP minus the held-out AP, paired by seed (mean +- "
        "std)."
    )


def ranking(rows, sets):
    """One line per test set: the variants by mean AP, best first."""
    lines = []
    for name, what in sets:
        key = "ap" if name == "ap" else f"{name}_ap"
        means = sorted(
            ((np.mean([r[key] for r in runs]), label) for label, runs in rows),
            reverse=True,
        )
        lines.append(
            f"Ranking by AP on the {what}: "
            + " > ".join(f"{label} ({mean:.3f})" for mean, label in means)
            + "."
        )
    return "\n".join(lines)


def check_score_args(parser, args):
    """Fills in the defaults of `--data scores` and checks them."""
    if args.task is None:
        args.task = "both"
    for name in ("epochs", "frames", "train_minutes", "test_minutes"):
        if getattr(args, name) is None:
            setattr(args, name, SCORES[name])
    args.clip_seconds = SCORES["clip_seconds"]
    if args.smoke:
        args.epochs, args.seeds = 1, 1
        args.variants = args.variants or ["realip", "abscp"]
        args.frames = 16
        args.train_minutes = SCORES_SMOKE["train_minutes"]
        args.test_minutes = SCORES_SMOKE["test_minutes"]
        args.clip_seconds = SCORES_SMOKE["clip_seconds"]
    args.learning_rate = SCORES["learning_rate"]
    args.batch_size = SCORES["batch_size"]
    check_timbre_args(parser, args)
    for name in ("epochs", "seeds"):
        if getattr(args, name) < 1:
            parser.error(
                f"--{name} must be at least 1. Received: --{name} "
                f"{getattr(args, name)}"
            )
    for name in ("train_minutes", "test_minutes"):
        if not getattr(args, name) > 0:
            parser.error(
                f"--{name.replace('_', '-')} must be > 0. Received: "
                f"{getattr(args, name)}"
            )
    transform = stft()
    least = smallest_frames(transform, args.task)
    if args.frames < least:
        parser.error(
            f"--frames {args.frames} is too few for the model's front end: "
            f"its STFT needs windows of at least one whole frame "
            f"({transform.fft_length} samples: {min_frames(transform)} "
            f"frames of hop {transform.frame_step})"
            + (
                ""
                if args.task == "transcription"
                else ", the generation's source (the first 43/64 of the "
                "frames) too"
            )
            + f". Use --frames {least} or more. Received: --frames "
            f"{args.frames}"
        )
    clip_frames = cvk.stft.frame_count(
        int(round(args.clip_seconds * SCORES["sample_rate"])),
        transform.frame_step,
        transform.fft_length,
        transform.center,
    )
    if args.frames > clip_frames:
        parser.error(
            f"--frames {args.frames} is more than a clip's {clip_frames} "
            f"frames ({args.clip_seconds:g} s)"
        )
    check_generation_args(parser, args)
    return transform


def check_generation_args(parser, args):
    """Fills in the defaults of the generators' training (`GENERATION`)
    and checks them."""
    given = [
        flag
        for flag, value in (
            ("--generation-passes", args.generation_passes),
            ("--teacher-rate", args.teacher_rate),
        )
        if value is not None
    ]
    if args.generation_training == "teacher" and given:
        parser.error(
            f"{', '.join(given)} "
            f"{'apply' if len(given) > 1 else 'applies'} to "
            "--generation-training logits or notes only (teacher forcing "
            "runs one pass on the true previous notes). Received: "
            "--generation-training teacher"
        )
    for name, value in GENERATION.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    _, target = generation_split(args.frames)
    if not 1 <= args.generation_passes <= target:
        parser.error(
            f"--generation-passes must be from 1 to the {target} generated "
            f"frames. Received: --generation-passes {args.generation_passes}"
        )
    if not (math.isfinite(args.source_weight) and args.source_weight >= 0):
        parser.error(
            "--source-weight must be a finite number >= 0. Received: "
            f"--source-weight {args.source_weight:g}"
        )
    if not 0 <= args.teacher_rate < 1:
        parser.error(
            "--teacher-rate must be in [0, 1). Received: --teacher-rate "
            f"{args.teacher_rate:g}"
        )


def check_timbre_args(parser, args):
    """The held-out programs (default HELD_OUT_PROGRAMS; none with an
    empty --held-out-programs) must be disjoint from the training ones;
    the other arguments are score_music's to check."""
    if args.held_out_programs is None:
        args.held_out_programs = list(HELD_OUT_PROGRAMS)
    for flag, value in (
        ("--programs", args.programs),
        ("--held-out-programs", args.held_out_programs),
    ):
        if value and (
            not all(0 <= p <= 127 for p in value)
            or len(set(value)) < len(value)
        ):
            parser.error(
                f"{flag} takes distinct General MIDI programs, 0 to 127. "
                f"Received: {flag} {' '.join(map(str, value))}"
            )
    if args.held_out_augmentation is None:
        args.held_out_augmentation = 0.0
    for flag, strength in (
        ("--timbre-augmentation", args.timbre_augmentation),
        ("--held-out-augmentation", args.held_out_augmentation),
    ):
        if strength is not None and not 0 <= strength <= 1:
            parser.error(
                f"{flag} must be from 0 to 1. Received: {flag} {strength:g}"
            )
    train = set(args.programs or TRAIN_PROGRAMS)
    shared = sorted(train & set(args.held_out_programs))
    if shared:
        parser.error(
            "--held-out-programs must be absent from training (--programs, "
            f"default {' '.join(map(str, TRAIN_PROGRAMS))}). Received: "
            f"--held-out-programs {' '.join(map(str, args.held_out_programs))}"
            f" (shared: {' '.join(map(str, shared))})"
        )
    if args.held_out_soundfont and args.soundfonts:
        same = {os.path.realpath(p) for p in args.soundfonts}
        if os.path.realpath(args.held_out_soundfont) in same:
            parser.error(
                "--held-out-soundfont must not be one of --soundfonts. "
                f"Received: --held-out-soundfont {args.held_out_soundfont}"
            )


def run_scores(args, parser):
    """`--data scores`: see the module's docstring."""
    transform = check_score_args(parser, args)
    if args.output is None:
        args.output = os.path.join(
            "examples", "output", "compare_variants_scores"
        )
    variants = parse_variants(args.variants)
    size = TINY if args.smoke else SMALL
    with tempfile.TemporaryDirectory() as temporary:
        if args.smoke and args.cache_dir is None:
            # A fresh render of a few seconds, away from the user's cache.
            args.cache_dir = temporary
        start = time.perf_counter()
        windows, test = load_score_windows(
            args, transform, held_out=args.task != "generation"
        )
    print(
        f"score_music: {len(windows['train'][0])} training and "
        f"{len(windows['test'][0])} test windows of {args.frames} frames"
        + "".join(
            f", {len(windows[name][0])} {what}"
            for name, what in HELD_OUT_SETS
            if name in windows
        )
        + f" ({time.perf_counter() - start:.0f} s)",
        flush=True,
    )
    frame_rate = test.frame_rate
    models = score_models(variants, size, args, transform)
    total = args.seeds * sum(len(runs) for runs in models.values())
    results = {task: [] for task in models}
    done = 0
    for task, runs in models.items():
        for label, build in runs:
            per_seed = []
            for seed in range(args.seeds):
                keras.backend.clear_session()
                if task == "transcription":
                    scores, seconds, params = run_transcription(
                        build, windows, args, seed, frame_rate
                    )
                else:
                    scores, seconds, params = run_generation(
                        build, windows, args, seed, frame_rate, transform
                    )
                done += 1
                per_seed.append(
                    dict(
                        variant=label,
                        seed=seed,
                        parameters=params,
                        seconds=seconds,
                        **scores,
                    )
                )
                print(
                    f"[{done}/{total}] {task} {label} seed {seed}: "
                    + ", ".join(
                        f"{name} {scores[key]:.3f}"
                        for key, name in METRICS
                        + GENERATION_METRICS
                        + tuple(
                            (f"{n}_ap", f"AP ({w})") for n, w in HELD_OUT_SETS
                        )
                        if key in scores
                    )
                    + f" ({seconds:.0f} s)",
                    flush=True,
                )
            results[task].append((label, per_seed))
    os.makedirs(args.output, exist_ok=True)
    counts = {split: len(windows[split][0]) for split in windows}
    tables = {}
    source, _ = generation_split(args.frames)
    for task, rows in results.items():
        cut = 0 if task == "transcription" else source
        y_test = windows["test"][1][:, cut:]
        prior = windows["train"][1][:, cut:].mean(axis=(0, 1))
        chance = (
            float(np.mean(y_test)),
            cvk.metrics.average_precision(
                y_test, np.broadcast_to(prior, y_test.shape)
            ),
        )
        tables[task] = score_table(task, rows, args, counts, chance)
        with open(os.path.join(args.output, f"{task}.md"), "w") as f:
            f.write(tables[task] + "\n")
        print("\n" + tables[task], flush=True)
    record = dict(
        command=score_command(args),
        settings=dict(
            SCORES,
            epochs=args.epochs,
            seeds=args.seeds,
            frames=args.frames,
            train_minutes=args.train_minutes,
            test_minutes=args.test_minutes,
            clip_seconds=args.clip_seconds,
            windows=counts,
            stft=transform.get_config(),
            size=size,
            programs=list(args.programs or TRAIN_PROGRAMS),
            held_out_programs=list(args.held_out_programs),
            timbre_augmentation=args.timbre_augmentation,
            soundfonts=args.soundfonts,
            held_out_soundfont=args.held_out_soundfont,
            held_out_augmentation=args.held_out_augmentation,
        ),
        **{
            task: [run for _, runs in rows for run in runs]
            for task, rows in results.items()
        },
    )
    with open(os.path.join(args.output, "runs.json"), "w") as f:
        json.dump(record, f, indent=1, default=str)
    print(f"\nwritten to {args.output}")
    return {task: dict(rows) for task, rows in results.items()}


def parse_variants(names):
    if names:
        return [cvk.attention.parse_variant(v) for v in names]
    return [
        (softmax, product)
        for product in cvk.attention.PRODUCTS
        for softmax in cvk.attention.SOFTMAX_VARIANTS
    ]


# ----------------------------------------------------------------------
# --data scores --streaming: what causality costs
# ----------------------------------------------------------------------

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


def streaming_configs(variants, size, args, transform):
    """The runs of `--streaming`, per model: bidirectional with sinusoidal
    positions (the paper's; the rows of the transcription table), then
    with rotary positions, then causal with each window (rotary). Each
    is `dict(model, attention, window, positions, reference, build)`,
    `build(frames)` a new model (`frames=None`: any length), `reference`
    the `(window, positions)` its paired difference is taken against
    (`None` for the first)."""
    config = transform.get_config()
    families = [
        (
            f"{softmax} / {product}",
            lambda frames, window, positions, s=softmax, p=product: (
                cvk.models.music_classifier(
                    frames=frames,
                    notes=SCORES["notes"],
                    stft=config,
                    softmax=s,
                    product=p,
                    sliding_window=window,
                    positions=positions,
                    **size,
                )
            ),
        )
        for softmax, product in variants
    ]
    families.append(
        (
            "real baseline",
            lambda frames, window, positions: cvk.models.real_music_classifier(
                frames=frames,
                notes=SCORES["notes"],
                stft=config,
                sliding_window=window,
                positions=positions,
                **real_size(size),
            ),
        )
    )
    runs = []
    for model, build in families:
        settings = [
            (None, "sinusoidal", None),
            (None, "rotary", (None, "sinusoidal")),
        ] + [(w, "rotary", (None, "rotary")) for w in args.windows]
        for window, positions, reference in settings:
            runs.append(
                dict(
                    model=model,
                    attention="bidirectional"
                    if window is None
                    else f"causal, W = {window}",
                    window=window,
                    positions=positions,
                    reference=reference,
                    build=lambda frames, b=build, w=window, p=positions: b(
                        frames, w, p
                    ),
                )
            )
    return runs


def run_streaming_one(run, windows, clips, args, seed, frame_rate):
    """Trains one model of `--streaming`; its scores on the test windows
    and, causal, streamed over the whole test clips (`clips`: the audio
    and each test window's `(clip, first frame)`)."""
    (x, y), (x_test, y_test) = windows["train"], windows["test"]
    keras.utils.set_random_seed(seed)
    model = run["build"](args.frames)
    _compile(model, args)
    start = time.perf_counter()
    model.fit(x, y, epochs=args.epochs, batch_size=args.batch_size, verbose=0)

    def score(logits):
        return cvk.metrics.transcription_scores(
            y_test,
            sigmoid(logits),
            frame_rate,
            lowest_note=SCORES["lowest_note"],
        )

    scores = score(predict(model, x_test))
    if run["window"] is not None:
        whole = run["build"](None)
        whole.set_weights(model.get_weights())
        audio, where = clips
        logits = predict(whole, audio)
        streamed = np.stack([logits[c, f : f + args.frames] for c, f in where])
        scores.update({f"{k}_streamed": v for k, v in score(streamed).items()})
    return scores, time.perf_counter() - start, trainable(model)


def paired(runs, references, key):
    """The paired difference `runs - references` of `key` over the seeds:
    `(mean, half width of its 95% t interval)`; `nan` width for one
    seed."""
    from scipy import stats

    d = np.array([r[key] for r in runs]) - [r[key] for r in references]
    if len(d) < 2:
        return float(d.mean()), float("nan")
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return float(d.mean()), float(half)


def _interval(mean, half):
    if np.isnan(half):
        return f"{mean:+.3f}"
    return f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"


def streaming_summary(configs, results):
    """Per run: the mean and std of AP (windows, streamed) over the seeds
    and the paired differences against its reference."""
    found = {
        (c["model"], c["window"], c["positions"]): r
        for c, r in zip(configs, results)
    }
    rows = []
    for config, runs in zip(configs, results):
        row = dict(
            model=config["model"],
            attention=config["attention"],
            window=config["window"],
            positions=config["positions"],
            seeds=len(runs),
            parameters=runs[0]["parameters"],
            seconds=float(np.mean([r["seconds"] for r in runs])),
        )
        for key in ("ap", "note_f1", "ap_streamed"):
            if key in runs[0]:
                values = [r[key] for r in runs]
                row[key] = (
                    float(np.mean(values)),
                    float(np.std(values, ddof=min(1, len(values) - 1))),
                )
        if config["reference"] is not None:
            window, positions = config["reference"]
            reference = found[(config["model"], window, positions)]
            row["reference"] = (
                "bidirectional, " + positions
                if window is None
                else f"causal, W = {window}"
            )
            row["difference"] = paired(runs, reference, "ap")
            if "ap_streamed" in runs[0]:
                streamed = [dict(ap=r["ap_streamed"]) for r in runs]
                row["difference_streamed"] = paired(streamed, reference, "ap")
        rows.append(row)
    return rows


def streaming_table(rows, args, counts, chance, seeds):
    """The markdown table of `--streaming` over the first `seeds` of
    `args.seeds` (a partial table while the run goes on)."""
    partial = (
        f" (**partial: {seeds} of the {args.seeds} seeds asked for**)"
        if seeds < args.seeds
        else ""
    )
    caption = (
        "Held-out AP on `score_music`'s test works (transcription of every "
        f"frame): {counts['train']} training and {counts['test']} test "
        f"windows of {args.frames} frames ({args.train_minutes:g} and "
        f"{args.test_minutes:g} minutes), {args.epochs} "
        f"epoch{'s' * (args.epochs != 1)}, mean +- sample std over {seeds} "
        f"seed(s){partial}; the difference is the mean of the paired "
        f"differences (the same seed, `keras.utils.set_random_seed`) against "
        f"the row named, with its 95% t interval over the seeds "
        f"[low, high]. A constant predictor's "
        f"AP is {chance[0]:.3f}; each note's training frequency scores "
        f"{chance[1]:.3f}. `{score_command(args)}`"
    )
    lines = [
        caption,
        "",
        STREAMING_CAVEATS.format(clip=args.clip_seconds),
        "",
        "| model | attention | positions | AP (windows) | difference "
        "(windows) | AP (streamed) | difference (streamed) | against "
        "| note F1 (windows) | trainable parameters | time per run |",
        "| --- |" + " --- |" * 10,
    ]
    dash = "—"
    for row in rows:
        cells = [
            row["model"],
            row["attention"],
            row["positions"],
            "{:.3f} +- {:.3f}".format(*row["ap"]),
            _interval(*row["difference"]) if "difference" in row else dash,
            "{:.3f} +- {:.3f}".format(*row["ap_streamed"])
            if "ap_streamed" in row
            else dash,
            _interval(*row["difference_streamed"])
            if "difference_streamed" in row
            else dash,
            row.get("reference", dash),
            "{:.3f} +- {:.3f}".format(*row["note_f1"]),
            f"{row['parameters']:,}",
            f"{row['seconds']:.0f} s",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_streaming(args, parser):
    """`--data scores --streaming`: what causality costs (see the
    module's docstring)."""
    if args.task not in (None, "transcription"):
        parser.error(
            "--streaming compares transcription only. Received: --task "
            f"{args.task}"
        )
    args.task = "transcription"
    requested = args.variants
    transform = check_score_args(parser, args)
    # CAtt by default (check_score_args' smoke default is for the variants'
    # table).
    args.variants = requested or ["realip"]
    if args.windows is None:
        args.windows = list(WINDOWS_SMOKE if args.smoke else WINDOWS)
    if any(w < 1 for w in args.windows):
        parser.error(
            f"--windows must be positive. Received: --windows "
            f"{' '.join(map(str, args.windows))}"
        )
    if args.output is None:
        args.output = os.path.join(
            "examples", "output", "compare_variants_streaming"
        )
    variants = parse_variants(args.variants)
    size = TINY if args.smoke else SMALL
    begin = time.perf_counter()
    with tempfile.TemporaryDirectory() as temporary:
        if args.smoke and args.cache_dir is None:
            args.cache_dir = temporary
        windows, test = load_score_windows(args, transform)
    _, _, where = cut_windows(test.audio, test.labels, transform, args.frames)
    clips = (test.audio, where)
    print(
        f"score_music: {len(windows['train'][0])} training and "
        f"{len(windows['test'][0])} test windows of {args.frames} frames, "
        f"{len(test.audio)} test clips "
        f"({time.perf_counter() - begin:.0f} s)",
        flush=True,
    )
    configs = streaming_configs(variants, size, args, transform)
    results = [[] for _ in configs]
    total, done = args.seeds * len(configs), 0
    # Seed by seed, so that an interrupted run has every model's first
    # seeds (runs.json is rewritten after each seed).
    for seed in range(args.seeds):
        for config, runs in zip(configs, results):
            keras.backend.clear_session()
            scores, seconds, params = run_streaming_one(
                config, windows, clips, args, seed, test.frame_rate
            )
            done += 1
            runs.append(
                dict(
                    model=config["model"],
                    attention=config["attention"],
                    window=config["window"],
                    positions=config["positions"],
                    seed=seed,
                    parameters=params,
                    seconds=seconds,
                    **scores,
                )
            )
            print(
                f"[{done}/{total}] {config['model']}, "
                f"{config['attention']}, {config['positions']}, seed "
                f"{seed}: AP {scores['ap']:.3f}"
                + (
                    f", streamed {scores['ap_streamed']:.3f}"
                    if "ap_streamed" in scores
                    else ""
                )
                + f" ({seconds:.0f} s)",
                flush=True,
            )
        table, record = _streaming_outputs(
            configs, results, args, windows, transform, size, begin
        )
    print("\n" + table + f"\n\nwritten to {args.output}", flush=True)
    return record


def _streaming_outputs(configs, results, args, windows, transform, size, t0):
    """Writes `streaming.md` and `runs.json` of the seeds so far."""
    os.makedirs(args.output, exist_ok=True)
    counts = {split: len(windows[split][0]) for split in windows}
    y_test = windows["test"][1]
    prior = windows["train"][1].mean(axis=(0, 1))
    chance = (
        float(np.mean(y_test)),
        cvk.metrics.average_precision(
            y_test, np.broadcast_to(prior, y_test.shape)
        ),
    )
    rows = streaming_summary(configs, results)
    table = streaming_table(rows, args, counts, chance, len(results[0]))
    with open(os.path.join(args.output, "streaming.md"), "w") as f:
        f.write(table + "\n")
    record = dict(
        command=score_command(args),
        wall_seconds=time.perf_counter() - t0,
        seeds_done=len(results[0]),
        settings=dict(
            SCORES,
            epochs=args.epochs,
            seeds=args.seeds,
            frames=args.frames,
            windows=list(args.windows),
            train_minutes=args.train_minutes,
            test_minutes=args.test_minutes,
            clip_seconds=args.clip_seconds,
            counts=counts,
            stft=transform.get_config(),
            size=size,
            real_size=real_size(size),
            rotary_max_wavelength=ROTARY_WAVELENGTH,
        ),
        chance=dict(label_density=chance[0], note_frequency_ap=chance[1]),
        summary=rows,
        runs=[run for runs in results for run in runs],
    )
    with open(os.path.join(args.output, "runs.json"), "w") as f:
        json.dump(record, f, indent=1, default=str)
    return table, record


# ----------------------------------------------------------------------


SCORE_ONLY = (
    "task",
    "frames",
    "train_minutes",
    "test_minutes",
    "cache_dir",
    "windows",
    "programs",
    "held_out_programs",
    "timbre_augmentation",
    "soundfonts",
    "held_out_soundfont",
    "held_out_augmentation",
    "generation_training",
    "generation_passes",
    "source_weight",
    "teacher_rate",
)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data",
        default=None,
        help="'scores': datasets.score_music (the music extra); default: "
        "the built-in synthetic_music",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help=f"default: 10 (synthetic), {SCORES['epochs']} (scores)",
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--samples",
        type=int,
        default=None,
        help="training samples of synthetic_music (default 1024; not with "
        "--data scores, whose size is --train-minutes)",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="the table's file (default: examples/output/"
        "compare_variants.md); with --data scores a folder for the tables "
        "and runs.json (default: examples/output/compare_variants_scores)",
    )
    parser.add_argument(
        "--variants",
        nargs="*",
        default=None,
        help="compound names such as realip absonlycp (default: all 8)",
    )
    parser.add_argument(
        "--task",
        choices=("transcription", "generation", "both"),
        default=None,
        help="--data scores: the tasks run (default: both)",
    )
    parser.add_argument(
        "--frames",
        type=int,
        default=None,
        help=f"--data scores: frames per window (default {SCORES['frames']})",
    )
    parser.add_argument(
        "--train-minutes",
        type=float,
        default=None,
        help="--data scores: minutes of training audio (default "
        f"{SCORES['train_minutes']:g})",
    )
    parser.add_argument(
        "--test-minutes",
        type=float,
        default=None,
        help="--data scores: minutes of held-out audio (default "
        f"{SCORES['test_minutes']:g})",
    )
    parser.add_argument(
        "--cache-dir",
        default=None,
        help="--data scores: score_music's cache_dir (default: its own; "
        "with --smoke a temporary folder)",
    )
    parser.add_argument(
        "--streaming",
        action="store_true",
        help="--data scores: what causality costs: the model of --variants "
        "(default realip, CAtt) and the real baseline, bidirectional "
        "(sinusoidal and rotary positions) against causal sliding windows "
        "(--windows), transcription only",
    )
    parser.add_argument(
        "--windows",
        type=int,
        nargs="+",
        default=None,
        help="--streaming: the causal windows in frames (default "
        f"{' '.join(map(str, WINDOWS))})",
    )
    parser.add_argument(
        "--programs",
        type=int,
        nargs="+",
        default=None,
        help="--data scores: the General MIDI programs of training and the "
        "test works (default: score_music's PROGRAMS without the held-out "
        f"ones: {' '.join(map(str, TRAIN_PROGRAMS))})",
    )
    parser.add_argument(
        "--held-out-programs",
        type=int,
        nargs="*",
        default=None,
        help="--data scores: the programs the test works are played by "
        "again, absent from training (default "
        f"{' '.join(map(str, HELD_OUT_PROGRAMS))}; none: no such column)",
    )
    parser.add_argument(
        "--timbre-augmentation",
        type=float,
        default=None,
        help="--data scores: score_music's timbre_augmentation, 0 to 1 "
        "(default: its default, "
        f"{cvk.datasets.scores.DEFAULT_TIMBRE_AUGMENTATION:g})",
    )
    parser.add_argument(
        "--soundfonts",
        nargs="+",
        default=None,
        help="--data scores: the SF2 files of training and the test works "
        "(default: score_music's, TimGM6mb)",
    )
    parser.add_argument(
        "--held-out-soundfont",
        default=None,
        help="--data scores: an SF2 file the test works are played by "
        "again (the training programs), e.g. "
        "/usr/share/sounds/sf2/FluidR3_GM.sf2",
    )
    parser.add_argument(
        "--held-out-augmentation",
        type=float,
        default=None,
        help="--data scores: the timbre augmentation of the held-out "
        "renders (default 0: plain, the same sets whatever the training)",
    )
    parser.add_argument(
        "--generation-training",
        choices=GENERATION_TRAININGS,
        default=None,
        help="--data scores: how the generators are trained: 'teacher' "
        "(teacher forcing alone, the paper's), 'logits' or 'notes' "
        "(models.FeedbackTraining, feeding back that; default "
        f"{GENERATION['generation_training']})",
    )
    parser.add_argument(
        "--generation-passes",
        type=int,
        default=None,
        help="--data scores: FeedbackTraining's decoder passes (default "
        f"{GENERATION['generation_passes']})",
    )
    parser.add_argument(
        "--source-weight",
        type=float,
        default=None,
        help="--data scores: the weight of the source frames' "
        "transcription loss in FeedbackTraining (0: none; default "
        f"{GENERATION['source_weight']:g})",
    )
    parser.add_argument(
        "--teacher-rate",
        type=float,
        default=None,
        help="--data scores: FeedbackTraining's teacher_rate (default "
        f"{GENERATION['teacher_rate']:g})",
    )
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    if args.data is not None and args.data != "scores":
        parser.error(
            "--data takes 'scores' (datasets.score_music); leave it out for "
            "the built-in synthetic_music (MusicNet's features: "
            f"examples/train_music.py --data). Received: --data {args.data}"
        )
    if args.data == "scores":
        if args.samples is not None:
            parser.error(
                "--samples sizes synthetic_music; --data scores takes "
                f"--train-minutes. Received: --samples {args.samples}"
            )
        if args.streaming:
            return run_streaming(args, parser)
        if args.windows is not None:
            parser.error("--windows applies to --streaming only")
        return run_scores(args, parser)
    given = [
        "--" + name.replace("_", "-")
        for name in SCORE_ONLY
        if getattr(args, name) is not None
    ] + ["--streaming"] * args.streaming
    if given:
        parser.error(
            f"{', '.join(given)} "
            f"{'apply' if len(given) > 1 else 'applies'} to --data scores "
            "only. Received without --data scores."
        )
    if args.epochs is None:
        args.epochs = 10
    if args.samples is None:
        args.samples = 1024
    if args.output is None:
        args.output = os.path.join("examples", "output", "compare_variants.md")
    size = SMALL
    if args.smoke:
        args.epochs, args.seeds, args.samples = 1, 1, 40
        args.variants = args.variants or ["realip", "abscp"]
        size = TINY
    x, y = cvk.datasets.synthetic_music(
        num_samples=args.samples + args.samples // 4, seed=1234
    )
    split = args.samples
    data = (x[:split], y[:split]), (x[split:], y[split:])
    shape = dict(frames=x.shape[1], bins=x.shape[2] // 2, notes=y.shape[2])

    variants = parse_variants(args.variants)
    runs = [(f"{s} / {p}", s, p) for s, p in variants]
    runs.append(("real baseline", None, None))
    rows = []
    for label, softmax, product in runs:
        if softmax is None:

            def build():
                return cvk.models.real_music_classifier(
                    **shape, **real_size(size)
                )
        else:

            def build():
                return cvk.models.music_classifier(
                    **shape, softmax=softmax, product=product, **size
                )

        scores, times = [], []
        for seed in range(args.seeds):
            ap, seconds, model = train(
                build, data, args.epochs, seed, run_eagerly=args.smoke
            )
            scores.append(ap)
            times.append(seconds)
        rows.append(
            (
                label,
                np.mean(scores),
                np.std(scores, ddof=min(1, len(scores) - 1)),
                np.mean(times),
                model.count_params(),
            )
        )
        print(
            f"{label:20s} AP {rows[-1][1]:.3f} +- {rows[-1][2]:.3f}  "
            f"{rows[-1][3]:.0f} s/run",
            flush=True,
        )

    lines = [
        f"Held-out micro-averaged AP on synthetic_music ({args.samples} "
        f"training samples, {args.epochs} epochs, {args.seeds} seeds; "
        f"`python examples/compare_variants.py --epochs {args.epochs} "
        f"--seeds {args.seeds}`)",
        "",
        "| variant (softmax / product) | AP (mean +- sample std) | parameters "
        "| train time per run |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {label} | {mean:.3f} +- {std:.3f} | {params:,} | {sec:.0f} s |"
        for label, mean, std, sec, params in rows
    ]
    table = "\n".join(lines)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        f.write(table + "\n")
    print("\n" + table + f"\n\nwritten to {args.output}")
    return rows


if __name__ == "__main__":
    main()
