"""`compare_variants.py`'s tables: the command line of a run, the
markdown tables of `--data scores` and `--streaming`, their statistics
(mean +- sample std, paired differences with 95% t intervals), the
held-out timbres' caption and ranking. A part of the example, imported by
it."""

import os
import shlex

import numpy as np
from _variants_data import GENERATION_METRICS
from _variants_data import HELD_OUT_PROGRAMS
from _variants_data import HELD_OUT_SETS
from _variants_data import METRICS
from _variants_data import NOT_COMPARABLE
from _variants_data import REAL_BASELINE
from _variants_data import REAL_GENERATOR
from _variants_data import SCORES
from _variants_data import STREAMING_CAVEATS
from _variants_data import TRAIN_PROGRAMS
from _variants_data import generation_split

import cvattn_keras as cvk


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
