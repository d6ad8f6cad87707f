"""Each alternative to full attention in place of CAtt in the music
classifier: held-out transcription scores over seeds, paired against CAtt.

The transcription task of `compare_variants.py --data scores` (its recipe
and defaults: `datasets.score_music`, the train split's 15 minutes cut
into 64-frame windows, the `SMALL` model, 10 epochs of batches of 8,
scored on the test split's held-out works and on them again played by
held-out programs), with every encoder's self-attention
(`music_classifier(attention=..., attention_options=...)`) one of:

- `multi_head`: `ComplexMultiHeadAttention`, CAtt (softmax `real`, the
  inner product), the reference row;
- `low_rank`: `ComplexLowRankAttention(rank=16, max_length=frames)`
  (Linformer: keys and values projected to 16 rows, a quarter of 64);
- `sparse`: `ComplexSparseAttention(window=8, stride=8,
  global_tokens=2)` (the 15 frames |t - s| < 8, every 8th key and the
  first 2 frames as global tokens: at most 25 of 64 keys per query; a row
  whose layer is not importable is skipped, with the reason printed);
- `lsh`: `ComplexLSHAttention(num_buckets=4, num_hashes=2,
  chunk_length=16)` (the Reformer's rule: buckets of about the chunk
  length, 64 / 4 = 16 frames);
- `gated`: `ComplexMultiHeadAttention(gated=True)` (CAtt with a real
  sigmoid gate on each head's output);
- `gated_unit`: `ComplexGatedAttentionUnit(num_heads=1,
  key_dim=embed_dim)` (GAU: one head, its shared `Z` as wide as the
  multi-head attention's queries, `e = 2 d`).

Every row keeps the encoder's softmax and product (CAtt's) and its other
arguments (heads, key width, dropout) where the layer takes them; the
options above win. `--attentions` picks a subset (comma-separated).

Seed by seed, every row is trained and scored (`_variants_runs.
run_transcription`, `keras.utils.set_random_seed(seed)` before each
model); `compare_attention.md` and `runs.json` in `--output` are
rewritten after each run, so that a stopped run leaves what is done. The
table gives the mean +- sample std over the seeds of held-out AP (the
test works, and the held-out programs), note F1, the trainable
parameters and the time per run (training and scoring), and the paired
difference against the `multi_head` row, seed by seed, with its 95% t
interval (`_variants_report.paired`). The test works are fixed: the
intervals cover the variation across seeds, not across works.

On a shared 2-core CPU (other jobs running) a run of the SMALL model
took 55 to 110 s: 25 runs (5 rows x 5 seeds) 30 minutes, so the default
6 rows x 5 seeds about 40 minutes (docs/attention-alternatives.md,
"Accuracy in place of CAtt", has the table).

`--task radio` runs the same rows in the radio example's complex model
instead (modulation recognition, accuracy over SNR): see
`_attention_radio.py`, its options and its recipe.

Run:  python examples/compare_attention.py [--attentions multi_head,lsh]
          [--seeds 5] [--epochs 10] [--frames 64] [--train-minutes 15]
          [--test-minutes 5] [--cache-dir DIR]
          [--output examples/output/compare_attention] [--smoke]
      python examples/compare_attention.py --task radio [--smoke] [...]
"""

import argparse
import json
import os
import shlex
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# cvattn_keras first, before keras imports TensorFlow: it quiets
# TensorFlow's C++ start-up lines (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")
# compare_variants.py's parts and the shared checks, beside this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cvattn_keras as cvk  # noqa: E402

# isort: split
import _arguments as arguments  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from _variants_data import HELD_OUT_PROGRAMS  # noqa: E402
from _variants_data import HELD_OUT_SETS  # noqa: E402
from _variants_data import NOT_COMPARABLE  # noqa: E402
from _variants_data import SCORES  # noqa: E402
from _variants_data import SCORES_SMOKE  # noqa: E402
from _variants_data import SMALL  # noqa: E402
from _variants_data import TINY  # noqa: E402
from _variants_data import load_score_windows  # noqa: E402
from _variants_data import min_frames  # noqa: E402
from _variants_data import stft  # noqa: E402
from _variants_report import _interval  # noqa: E402
from _variants_report import mean_std  # noqa: E402
from _variants_report import paired  # noqa: E402
from _variants_runs import run_transcription  # noqa: E402

from cvattn_keras.layers._attention_choice import attention_class  # noqa: E402

ATTENTIONS = ("multi_head", "low_rank", "sparse", "lsh", "gated", "gated_unit")
"""The rows, in the table's order."""

REFERENCE = "multi_head"
"""The row the paired differences are taken against (CAtt)."""

TASKS = ("music", "radio")

DEFAULT_OUTPUT = os.path.join("examples", "output", "compare_attention")

# The held-out scores of the table: the test works, then the held-out
# programs (`HELD_OUT_SETS`' first).
SETS = (("ap", "test works"), ("held_out_programs_ap", "held-out programs"))


def row_attention(name, frames, size):
    """`(attention, attention_options)` of a row for `frames`-frame
    windows and the model `size`."""
    if name == "multi_head":
        return "multi_head", {}
    if name == "low_rank":
        return "low_rank", {"rank": min(16, frames), "max_length": frames}
    if name == "sparse":
        return "sparse", {"window": 8, "stride": 8, "global_tokens": 2}
    if name == "lsh":
        return "lsh", {"num_buckets": 4, "num_hashes": 2, "chunk_length": 16}
    if name == "gated":
        return "multi_head", {"gated": True}
    if name == "gated_unit":
        return "gated_unit", {"num_heads": 1, "key_dim": size["embed_dim"]}
    raise ValueError(f"unknown attention row {name!r}")


def unavailable(attention, options):
    """Why the layer of `attention` cannot take `options` here, or None:
    not importable yet (a layer being written), or a missing argument."""
    import inspect

    try:
        cls = attention_class(attention)
    except (ImportError, AttributeError) as error:
        return f"its layer is not importable ({type(error).__name__}: {error})"
    accepted = inspect.signature(cls.__init__).parameters
    missing = [key for key in options if key not in accepted]
    if missing:
        return f"{cls.__name__} takes no {', '.join(missing)}"
    return None


def split_task(argv=None):
    """`(task, the other arguments)`: `--task music` (default) or
    `radio`."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--task", choices=TASKS, default=TASKS[0])
    known, rest = parser.parse_known_args(argv)
    return known.task, rest


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--task",
        choices=TASKS,
        default=TASKS[0],
        help="music (default): these options; radio: the radio example's "
        "complex model (`--task radio --help` for its options)",
    )
    parser.add_argument(
        "--attentions",
        type=arguments.names(ATTENTIONS),
        default=list(ATTENTIONS),
        help=f"comma-separated rows (default: all, {','.join(ATTENTIONS)})",
    )
    parser.add_argument(
        "--seeds",
        type=arguments.positive_int,
        default=None,
        help="seeds per row (default 5; 2 with --smoke)",
    )
    parser.add_argument(
        "--epochs",
        type=arguments.positive_int,
        default=None,
        help=f"default {SCORES['epochs']} (1 with --smoke)",
    )
    parser.add_argument(
        "--frames",
        type=arguments.int_at_least(
            min_frames(stft()), "a window of at least one whole STFT frame"
        ),
        default=None,
        help=f"frames per window (default {SCORES['frames']}; 16 with --smoke)",
    )
    parser.add_argument(
        "--train-minutes",
        type=arguments.positive_float,
        default=None,
        help=f"minutes of training audio (default {SCORES['train_minutes']:g})",
    )
    parser.add_argument(
        "--test-minutes",
        type=arguments.positive_float,
        default=None,
        help=f"minutes of held-out audio (default {SCORES['test_minutes']:g})",
    )
    parser.add_argument(
        "--cache-dir",
        type=arguments.output_folder,
        default=None,
        help="score_music's cache_dir (default: its own; with --smoke a "
        "temporary folder)",
    )
    parser.add_argument(
        "--output",
        type=arguments.output_folder,
        default=DEFAULT_OUTPUT,
        help=f"the folder of compare_attention.md and runs.json (default "
        f"{DEFAULT_OUTPUT})",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="seconds: the TINY model, 16-frame windows of a few seconds of "
        "audio, 1 epoch, 2 seeds",
    )
    args = parser.parse_args(argv)
    smoke = SCORES_SMOKE if args.smoke else {}
    defaults = dict(
        seeds=2 if args.smoke else 5,
        epochs=1 if args.smoke else SCORES["epochs"],
        frames=16 if args.smoke else SCORES["frames"],
        train_minutes=smoke.get("train_minutes", SCORES["train_minutes"]),
        test_minutes=smoke.get("test_minutes", SCORES["test_minutes"]),
    )
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.clip_seconds = smoke.get("clip_seconds", SCORES["clip_seconds"])
    transform = stft()
    clip_frames = cvk.stft.frame_count(
        int(round(args.clip_seconds * SCORES["sample_rate"])),
        transform.frame_step,
        transform.fft_length,
        transform.center,
    )
    if args.frames > clip_frames:
        parser.error(
            f"argument --frames: must be at most a clip's {clip_frames} "
            f"frames ({args.clip_seconds:g} s). Received: '{args.frames}'"
        )
    # What compare_variants.py --data scores fills in (its defaults: the
    # training programs, score_music's timbre augmentation, the held-out
    # programs rendered plainly, no held-out SoundFont).
    args.learning_rate = SCORES["learning_rate"]
    args.batch_size = SCORES["batch_size"]
    args.programs = None
    args.held_out_programs = list(HELD_OUT_PROGRAMS)
    args.timbre_augmentation = None
    args.soundfonts = None
    args.held_out_soundfont = None
    args.held_out_augmentation = 0.0
    return args


def command(args):
    """The command line of this run, every setting spelt out."""
    words = ["python", "examples/compare_attention.py"]
    if args.smoke:
        words.append("--smoke")
    words += [
        "--attentions",
        ",".join(args.attentions),
        "--seeds",
        str(args.seeds),
        "--epochs",
        str(args.epochs),
        "--frames",
        str(args.frames),
        "--train-minutes",
        f"{args.train_minutes:g}",
        "--test-minutes",
        f"{args.test_minutes:g}",
    ]
    if os.path.normpath(args.output) != DEFAULT_OUTPUT:
        words += ["--output", args.output]
    return shlex.join(words)


def _options_words(row):
    if not row["options"]:
        return "—"
    return ", ".join(f"{k}={v}" for k, v in row["options"].items())


def table(rows, skipped, args, counts, chance, seeds_done):
    """The markdown table of the runs so far (`rows`: the table's rows
    with their `runs`)."""
    partial = (
        f" (**partial: {seeds_done} of the {args.seeds} seeds asked for**)"
        if seeds_done < args.seeds
        else ""
    )
    size = "TINY" if args.smoke else "SMALL"
    low = SCORES["lowest_note"]
    programs = ", ".join(map(str, HELD_OUT_PROGRAMS))
    caption = (
        "Held-out transcription scores on `score_music`'s test works with "
        "each alternative to full attention as every encoder's "
        "self-attention (`music_classifier(attention=..., "
        "attention_options=...)`, CAtt's softmax and product): "
        f"{counts['train']} training and {counts['test']} test windows of "
        f"{args.frames} frames ({args.train_minutes:g} and "
        f"{args.test_minutes:g} minutes at {SCORES['sample_rate']} Hz, MIDI "
        f"{low} to {low + SCORES['notes'] - 1}), the `{size}` model, "
        f"{args.epochs} epoch{'s' * (args.epochs != 1)}, mean +- sample std "
        f"over {seeds_done} seed(s){partial}. The difference is the mean of "
        f"the paired differences against `{REFERENCE}` (CAtt), seed by seed "
        "on the fixed test works, with its 95% t interval [low, high] over "
        "the seeds (the variation across seeds, not across works). "
        "Held-out programs: the test works played again by General MIDI "
        f"programs absent from training ({programs}). "
        "Note F1 is onset-only at threshold 0.5. A constant predictor's AP "
        f"is the label density, {chance[0]:.3f}; each note's training "
        f"frequency scores {chance[1]:.3f}. Time per run: training and "
        f"scoring, on the machine of the run. `{command(args)}`"
    )
    reference = next(
        (row["runs"] for row in rows if row["name"] == REFERENCE), None
    )
    header = ["attention", "layer options", "seeds"]
    for _, what in SETS:
        header += [f"AP ({what})", f"difference ({what})"]
    header += ["note F1", "trainable parameters", "time per run"]
    lines = [
        caption,
        "",
        NOT_COMPARABLE.format(
            size=size, low=low, high=low + SCORES["notes"] - 1
        ),
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
    ]
    base_seconds = (
        np.mean([r["seconds"] for r in reference]) if reference else None
    )
    for row in rows:
        runs = row["runs"]
        if not runs:
            continue
        cells = [f"`{row['name']}`", _options_words(row), str(len(runs))]
        for key, _ in SETS:
            if not all(key in r for r in runs):
                cells += ["—", "—"]
                continue
            cells.append(mean_std([r[key] for r in runs]))
            cells.append(_difference(runs, reference, key, row["name"]))
        cells.append(mean_std([r["note_f1"] for r in runs]))
        cells.append(f"{runs[0]['parameters']:,}")
        seconds = np.mean([r["seconds"] for r in runs])
        ratio = f" ({seconds / base_seconds:.2f}x)" if base_seconds else ""
        cells.append(f"{seconds:.0f} s{ratio}")
        lines.append("| " + " | ".join(cells) + " |")
    for name, reason in skipped.items():
        lines += ["", f"`{name}` skipped: {reason}."]
    return "\n".join(lines)


def _difference(runs, reference, key, name):
    """The paired difference of `key` against the reference runs over the
    seeds both have, with its interval ("—" for the reference itself or
    fewer than 2 common seeds' interval: the mean alone)."""
    if reference is None or name == REFERENCE:
        return "—"
    ours = {r["seed"]: r for r in runs}
    theirs = {r["seed"]: r for r in reference}
    seeds = sorted(set(ours) & set(theirs))
    if not seeds:
        return "—"
    text = _interval(
        *paired([ours[s] for s in seeds], [theirs[s] for s in seeds], key)
    )
    if len(seeds) < len(ours):
        text += f" ({len(seeds)} seeds)"
    return text


def write_outputs(rows, skipped, args, windows, transform, size, begin):
    """Writes `compare_attention.md` and `runs.json` of the runs so far;
    returns the table."""
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
    seeds_done = min((len(row["runs"]) for row in rows), default=0)
    text = table(rows, skipped, args, counts, chance, seeds_done)
    with open(os.path.join(args.output, "compare_attention.md"), "w") as f:
        f.write(text + "\n")
    record = dict(
        command=command(args),
        wall_seconds=time.perf_counter() - begin,
        seeds_done=seeds_done,
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
            held_out_programs=list(args.held_out_programs),
        ),
        chance=dict(label_density=chance[0], note_frequency_ap=chance[1]),
        attentions={
            row["name"]: dict(
                attention=row["attention"], options=row["options"]
            )
            for row in rows
        },
        skipped=skipped,
        runs=[run for row in rows for run in row["runs"]],
    )
    with open(os.path.join(args.output, "runs.json"), "w") as f:
        json.dump(record, f, indent=1, default=str)
    return text


def main(argv=None):
    task, argv = split_task(argv)
    if task == "radio":
        import _attention_radio

        return _attention_radio.main(argv)
    args = parse_args(argv)
    transform = stft()
    size = TINY if args.smoke else SMALL
    rows, skipped = [], {}
    for name in args.attentions:
        attention, options = row_attention(name, args.frames, size)
        reason = unavailable(attention, options)
        if reason:
            skipped[name] = reason
            print(f"{name}: skipped: {reason}", flush=True)
            continue
        rows.append(
            dict(name=name, attention=attention, options=options, runs=[])
        )
    begin = time.perf_counter()
    with tempfile.TemporaryDirectory() as temporary:
        if args.smoke and args.cache_dir is None:
            # A fresh render of a few seconds, away from the user's cache.
            args.cache_dir = temporary
        windows, test = load_score_windows(args, transform, held_out=True)
    print(
        f"score_music: {len(windows['train'][0])} training and "
        f"{len(windows['test'][0])} test windows of {args.frames} frames"
        + "".join(
            f", {len(windows[n][0])} {w}"
            for n, w in HELD_OUT_SETS
            if n in windows
        )
        + f" ({time.perf_counter() - begin:.0f} s)",
        flush=True,
    )
    config = transform.get_config()
    total, done = args.seeds * len(rows), 0
    text = write_outputs(rows, skipped, args, windows, transform, size, begin)
    # Seed by seed, so that a stopped run has every row's first seeds.
    for seed in range(args.seeds):
        for row in rows:

            def build(row=row):
                return cvk.models.music_classifier(
                    frames=args.frames,
                    notes=SCORES["notes"],
                    stft=config,
                    attention=row["attention"],
                    attention_options=row["options"] or None,
                    **size,
                )

            keras.backend.clear_session()
            scores, seconds, params = run_transcription(
                build, windows, args, seed, test.frame_rate
            )
            done += 1
            row["runs"].append(
                dict(
                    attention=row["name"],
                    seed=seed,
                    parameters=params,
                    seconds=seconds,
                    **scores,
                )
            )
            print(
                f"[{done}/{total}] {row['name']} seed {seed}: AP "
                f"{scores['ap']:.3f}, held-out programs "
                f"{scores.get('held_out_programs_ap', float('nan')):.3f}, "
                f"note F1 {scores['note_f1']:.3f} ({seconds:.0f} s, "
                f"{params:,} parameters)",
                flush=True,
            )
            text = write_outputs(
                rows, skipped, args, windows, transform, size, begin
            )
    print("\n" + text + f"\n\nwritten to {args.output}", flush=True)
    return {row["name"]: row["runs"] for row in rows}, skipped


if __name__ == "__main__":
    main()
