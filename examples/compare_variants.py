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

The script is this file (the command line and its checks) and three
parts beside it, imported from its folder: `_variants_data.py` (the
settings, the STFT, the windows of score_music), `_variants_runs.py` (the
runs of each task) and `_variants_report.py` (the tables and their
statistics).
"""

import argparse
import math
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# cvattn_keras first, before keras imports TensorFlow: it quiets
# TensorFlow's C++ start-up lines (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")
# The parts of this script, beside it (run as a script or by runpy).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cvattn_keras as cvk  # noqa: E402

# isort: split
from _variants_data import GENERATION  # noqa: E402
from _variants_data import GENERATION_TRAININGS  # noqa: E402
from _variants_data import HELD_OUT_PROGRAMS  # noqa: E402
from _variants_data import SCORES  # noqa: E402
from _variants_data import SCORES_SMOKE  # noqa: E402
from _variants_data import TRAIN_PROGRAMS  # noqa: E402
from _variants_data import WINDOWS  # noqa: E402
from _variants_data import WINDOWS_SMOKE  # noqa: E402
from _variants_data import generation_split  # noqa: E402
from _variants_data import min_frames  # noqa: E402
from _variants_data import smallest_frames  # noqa: E402
from _variants_data import stft  # noqa: E402
from _variants_runs import run_scores  # noqa: E402
from _variants_runs import run_streaming  # noqa: E402
from _variants_runs import run_synthetic  # noqa: E402

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


def check_streaming_args(parser, args):
    """Fills in the defaults of `--data scores --streaming` and checks
    them; the STFT."""
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
    return transform


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
            return run_streaming(args, check_streaming_args(parser, args))
        if args.windows is not None:
            parser.error("--windows applies to --streaming only")
        return run_scores(args, check_score_args(parser, args))
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
    if args.smoke:
        args.epochs, args.seeds, args.samples = 1, 1, 40
        args.variants = args.variants or ["realip", "abscp"]
    return run_synthetic(args)


if __name__ == "__main__":
    main()
