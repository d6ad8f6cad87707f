"""`compare_attention.py --task radio`: each alternative to full attention
in place of CAtt in the radio example's complex model, accuracy over SNR
and seeds, paired against CAtt.

The model, the data, training and scoring are radio.py's (imported):
`complex_model` (a `ComplexDense` embedding of 16 tokens of 8 IQ samples,
two `ComplexTransformerEncoder`s of 32 complex features and 4 heads, a
real head; the frame's decision is its last token's), trained on
`datasets.radio_modulation`'s eleven classes at every SNR from -20 to 18
dB (each frame scaled to unit mean power) with radio.py's `train` (Adam,
cosine decay, batches of 128, learning rate 3e-3) and scored on the test
split per SNR (`predict`, `per_snr`). Only the encoders' self-attention
changes from row to row (`complex_model(encoders=...)`):

- `multi_head`: radio.py's model as it is, the reference: CAtt with
  causal sliding windows of the last 8 and 9 tokens (so that the last
  token's output depends on exactly the frame's 16 tokens, what lets it
  stream) and rotary positions;
- `gated`: the same, `ComplexMultiHeadAttention(gated=True)`;
- `sparse`: `ComplexSparseAttention(window=8 / 9, stride=4,
  global_tokens=1)`, causal: each encoder's window as CAtt's, plus every
  4th token (`4 = sqrt(16)`, the Sparse Transformer's stride) and the
  first token as a global one;
- `lsh`: `ComplexLSHAttention(num_buckets=4, num_hashes=2,
  chunk_length=4)`, causal: the Reformer's rule (buckets of about the
  chunk length, 16 / 4 = 4 tokens) on 16 tokens;
- `low_rank`: `ComplexLowRankAttention(rank=4, max_length=16)` (keys and
  values projected to a quarter of the tokens), NOT causal: Linformer's
  projection mixes every token, and the layer refuses causal use;
- `gated_unit`: `ComplexGatedAttentionUnit(num_heads=1, key_dim=32)`,
  causal (GAU's one head, its shared `Z` as wide as the 4 heads'
  queries, `e = 2d`; it takes no window).

What differs besides the attention, and why:

- The alternatives take neither `sliding_window` nor
  `rotary_max_wavelength` (the encoder refuses both for them): their
  only positional information is the causal mask's (and low rank's
  learned per-position projections); `multi_head` and `gated` keep
  radio's rotary positions.
- The causal alternatives (sparse, LSH, GAU) see the whole frame from
  the last token already in one encoder (no window; sparse's window
  reaches 8 or 9 tokens, its stride and global token beyond), CAtt's
  last token only through both; low rank, not causal, lets every
  token see the whole frame in both encoders. The decision is the last
  token's, which sees every token in any case, so none of them sees
  data CAtt does not; but these models do not stream as radio's does.
- Sparse and LSH need the sequence length when traced: every model of a
  row other than the reference takes exactly 16 tokens.

A control row, run only when named (`--attentions
multi_head,multi_head_no_positions`): `multi_head_no_positions`,
`ComplexMultiHeadAttention` causal over the whole frame with neither
window nor rotary positions, the setting the causal alternatives
without a window (LSH, GAU) are held to: it tells what their layer
costs from what the missing positions cost.

Every encoder keeps CAtt's softmax and product and its other arguments
where the layer takes them; the options above win. The data is one draw
(`--data-seed`); seed by seed every row is trained and scored
(`keras.utils.set_random_seed(seed)` before each model). No validation
split is scored (radio.py's only picks the model it exports).

The recipe, scaled from radio.py's (200 training frames per class and
SNR, 10 epochs) to fit 6 rows x 5 seeds into about 45 minutes on a
shared 2-core CPU: 50 training frames per class and SNR (11 000 frames),
5 epochs, 100 test frames per class and SNR (22 000), as radio.py.
Reported: the accuracy averaged over every SNR (RadioML's headline
figure) and over 0-18 dB, mean +- sample std over the seeds, the paired
difference against `multi_head` seed by seed with its 95% t interval
(`_variants_report.paired`), parameters and time per run (training and
scoring); and the accuracy per SNR. `compare_attention.md` and
`runs.json` in `--output` are rewritten after each run.

On a shared 2-core CPU (other jobs running) the defaults' 30 runs took
38 minutes, 58 to 100 s a run (CAtt 66 s); at this recipe CAtt reaches
about 30% over every SNR, against radio.py's 39% with its own
(docs/attention-alternatives.md, "Radio", has the table).

Run:  python examples/compare_attention.py --task radio
          [--attentions multi_head,lsh] [--seeds 5] [--epochs 5]
          [--train-per-cell 50] [--test-per-cell 100] [--data-seed 0]
          [--output examples/output/compare_attention_radio] [--smoke]
"""

import argparse
import inspect
import json
import os
import shlex
import time

import _arguments as arguments
import keras
import numpy as np
import radio
from _variants_report import mean_std
from compare_attention import ATTENTIONS
from compare_attention import REFERENCE
from compare_attention import _difference
from compare_attention import unavailable

DEFAULT_OUTPUT = os.path.join("examples", "output", "compare_attention_radio")

RECIPE = dict(seeds=5, epochs=5, train_per_cell=50, test_per_cell=100)
"""The defaults (radio.py's: 200 training frames per cell, 10 epochs)."""

SMOKE = dict(seeds=2, epochs=1, train_per_cell=1, test_per_cell=1)

_DEFAULTS = inspect.signature(radio.complex_model).parameters
WIDTH = _DEFAULTS["width"].default
HEADS = _DEFAULTS["heads"].default
WINDOWS = (8, 9)  # radio.py's default windows

CONTROLS = ("multi_head_no_positions",)
"""Rows run only when named in `--attentions` (see the docstring)."""


def row_encoders(name, tokens, windows=WINDOWS):
    """Per encoder `(arguments, causal)` of row `name` for
    `radio.complex_model(encoders=...)`; `None` for the reference
    (radio.py's model as it is)."""
    if name == "multi_head":
        return None
    if name == "multi_head_no_positions":
        return [(dict(), True) for _ in windows]
    if name == "gated":
        rotary = radio.ROTARY_WAVELENGTH
        return [
            (
                dict(
                    sliding_window=w,
                    rotary_max_wavelength=rotary,
                    attention_options={"gated": True},
                ),
                False,  # causal: implied by the window
            )
            for w in windows
        ]
    if name == "low_rank":
        options = [dict(rank=max(1, tokens // 4), max_length=tokens)]
        return _encoders("low_rank", options * len(windows), causal=False)
    if name == "sparse":
        options = [dict(window=w, stride=4, global_tokens=1) for w in windows]
        return _encoders("sparse", options, causal=True)
    if name == "lsh":
        options = [dict(num_buckets=4, num_hashes=2, chunk_length=4)]
        return _encoders("lsh", options * len(windows), causal=True)
    if name == "gated_unit":
        options = [dict(num_heads=1, key_dim=WIDTH)]
        return _encoders("gated_unit", options * len(windows), causal=True)
    raise ValueError(f"unknown attention row {name!r}")


def _encoders(attention, options, causal):
    return [
        (dict(attention=attention, attention_options=dict(o)), causal)
        for o in options
    ]


def describe(name, encoders, windows=WINDOWS):
    """The row's options in words, one value per encoder joined by `/`
    where they differ, and whether it is causal."""
    if encoders is None:
        slash = "/".join(map(str, windows))
        return f"sliding_window={slash}, rotary positions (causal)"
    if name == "multi_head_no_positions":
        return "no window, no positions (causal)"
    values = {}
    for arguments_, _ in encoders:
        options = dict(arguments_.get("attention_options", {}))
        if "sliding_window" in arguments_:
            options["sliding_window"] = arguments_["sliding_window"]
        for key, value in options.items():
            values.setdefault(key, []).append(value)
    words = [
        f"{key}={v[0]}"
        if len(set(v)) == 1
        else f"{key}={'/'.join(map(str, v))}"
        for key, v in values.items()
    ]
    if "sliding_window" in values:
        words.append("rotary positions")
    causal = all(c or "sliding_window" in a for a, c in encoders)
    return ", ".join(words) + (" (causal)" if causal else " (not causal)")


def check_row(encoders):
    """Why a row cannot be built here (its layer not importable, an
    option its layer does not take), or None."""
    for arguments_, _ in encoders or []:
        reason = unavailable(
            arguments_.get("attention", "multi_head"),
            arguments_.get("attention_options", {}),
        )
        if reason:
            return reason
    return None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="compare_attention.py --task radio",
        description=__doc__.splitlines()[0],
    )
    positive = arguments.positive_int
    parser.add_argument(
        "--attentions",
        type=arguments.names(ATTENTIONS + CONTROLS),
        default=list(ATTENTIONS),
        help=f"comma-separated rows (default: all, {','.join(ATTENTIONS)}; "
        f"also {','.join(CONTROLS)})",
    )
    for flag, what in (
        ("--seeds", "seeds per row"),
        ("--epochs", "epochs"),
        ("--train-per-cell", "training frames per class and SNR"),
        ("--test-per-cell", "test frames per class and SNR"),
    ):
        key = flag[2:].replace("-", "_")
        parser.add_argument(
            flag,
            type=positive,
            default=None,
            help=f"{what} (default {RECIPE[key]}; {SMOKE[key]} with --smoke)",
        )
    parser.add_argument("--batch-size", type=positive, default=128)
    parser.add_argument(
        "--learning-rate", type=arguments.positive_float, default=3e-3
    )
    parser.add_argument(
        "--data-seed", type=arguments.non_negative_int, default=0
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
        help="seconds: 1 frame per class and SNR, 1 epoch, 2 seeds",
    )
    args = parser.parse_args(argv)
    for key, value in (SMOKE if args.smoke else RECIPE).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.run_eagerly = args.smoke  # radio.train's: no compilation
    return args


def command(args):
    """The command line of this run, every setting spelt out."""
    words = ["python", "examples/compare_attention.py", "--task", "radio"]
    if args.smoke:
        words.append("--smoke")
    words += ["--attentions", ",".join(args.attentions)]
    for key in ("seeds", "epochs", "train_per_cell", "test_per_cell"):
        words += ["--" + key.replace("_", "-"), str(getattr(args, key))]
    if args.batch_size != 128 or args.learning_rate != 3e-3:
        words += ["--batch-size", str(args.batch_size)]
        words += ["--learning-rate", f"{args.learning_rate:g}"]
    if args.data_seed:
        words += ["--data-seed", str(args.data_seed)]
    if os.path.normpath(args.output) != DEFAULT_OUTPUT:
        words += ["--output", args.output]
    return shlex.join(words)


def table(rows, skipped, args, counts, seeds_done):
    """The markdown of the runs so far: the summary table, then the
    accuracy per SNR."""
    partial = (
        f" (**partial: {seeds_done} of the {args.seeds} seeds asked for**)"
        if seeds_done < args.seeds
        else ""
    )
    caption = (
        "Modulation recognition accuracy (fraction of frames right) on "
        "`radio_modulation`'s test split with each alternative to full "
        "attention as both encoders' self-attention of radio.py's complex "
        "model (`complex_model(encoders=...)`, CAtt's softmax and product; "
        f"{WIDTH} complex features, {HEADS} heads, 16 tokens of "
        f"{radio.TOKEN} IQ samples, the last token's decision): "
        f"{counts['train']} training frames ({args.train_per_cell} per "
        f"class and SNR, 11 classes, -20 to 18 dB), {counts['test']} test "
        f"frames ({args.test_per_cell} per class and SNR), data seed "
        f"{args.data_seed}, {args.epochs} epoch{'s' * (args.epochs != 1)} "
        f"of batches of {args.batch_size} (Adam, cosine decay from "
        f"{args.learning_rate:g}), mean +- sample std over {seeds_done} "
        f"seed(s){partial}. Accuracy averaged over every SNR and over 0-18 "
        "dB. The difference is the mean of the paired differences against "
        f"`{REFERENCE}` (CAtt), seed by seed on the one test draw, with its "
        "95% t interval [low, high] over the seeds. Chance is 1/11 = "
        "0.091. Time per run: training and scoring, on the machine of the "
        f"run. `{command(args)}`"
    )
    reference = next(
        (row["runs"] for row in rows if row["name"] == REFERENCE), None
    )
    header = ["attention", "layer options", "seeds"]
    header += ["accuracy (every SNR)", "difference (every SNR)"]
    header += ["accuracy (0-18 dB)", "difference (0-18 dB)"]
    header += ["trainable parameters", "time per run"]
    lines = [
        caption,
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
    ]
    base_seconds = (
        np.mean([r["seconds"] for r in reference]) if reference else None
    )
    done = [row for row in rows if row["runs"]]
    for row in done:
        runs = row["runs"]
        cells = [f"`{row['name']}`", row["words"], str(len(runs))]
        for key in ("mean", "high"):
            cells.append(mean_std([r[key] for r in runs]))
            cells.append(_difference(runs, reference, key, row["name"]))
        cells.append(f"{runs[0]['parameters']:,}")
        seconds = np.mean([r["seconds"] for r in runs])
        ratio = f" ({seconds / base_seconds:.2f}x)" if base_seconds else ""
        cells.append(f"{seconds:.0f} s{ratio}")
        lines.append("| " + " | ".join(cells) + " |")
    for name, reason in skipped.items():
        lines += ["", f"`{name}` skipped: {reason}."]
    if done:
        summary = {
            row["name"]: dict(
                per_snr={
                    s: radio.mean_std([r["per_snr"][s] for r in row["runs"]])
                    for s in row["runs"][0]["per_snr"]
                },
                mean=radio.mean_std([r["mean"] for r in row["runs"]]),
                high=radio.mean_std([r["high"] for r in row["runs"]]),
            )
            for row in done
        }
        lines += [
            "",
            "Accuracy (%) per SNR, mean ± std over the seeds:",
            "",
            radio.snr_table(summary, [row["name"] for row in done]),
        ]
    return "\n".join(lines)


def write_outputs(rows, skipped, args, counts, begin):
    """Writes `compare_attention.md` and `runs.json` of the runs so far;
    returns the markdown."""
    os.makedirs(args.output, exist_ok=True)
    seeds_done = min((len(row["runs"]) for row in rows), default=0)
    text = table(rows, skipped, args, counts, seeds_done)
    with open(os.path.join(args.output, "compare_attention.md"), "w") as f:
        f.write(text + "\n")
    record = dict(
        task="radio",
        command=command(args),
        wall_seconds=time.perf_counter() - begin,
        seeds_done=seeds_done,
        settings=dict(
            {k: v for k, v in vars(args).items() if k != "attentions"},
            frames=counts,
            width=WIDTH,
            windows=list(WINDOWS),
        ),
        attentions={
            row["name"]: dict(encoders=row["encoders"], words=row["words"])
            for row in rows
        },
        skipped=skipped,
        runs=[run for row in rows for run in row["runs"]],
    )
    with open(os.path.join(args.output, "runs.json"), "w") as f:
        json.dump(record, f, indent=1, default=str)
    return text


def main(argv=None):
    args = parse_args(argv)
    begin = time.perf_counter()
    data = radio.load(
        dict(train=args.train_per_cell, test=args.test_per_cell),
        args.data_seed,
    )
    classes = len(data["train"].classes)
    tokens = data["train"].iq.shape[1] // radio.TOKEN
    x_train, x_test = (radio.inputs_of("complex", d) for d in data.values())
    counts = {split: len(frames) for split, frames in data.items()}
    print(
        f"radio_modulation: {counts['train']} training and {counts['test']} "
        f"test frames of {tokens} tokens ({time.perf_counter() - begin:.0f} "
        "s)",
        flush=True,
    )
    rows, skipped = [], {}
    for name in args.attentions:
        encoders = row_encoders(name, tokens)
        reason = check_row(encoders)
        if reason:
            skipped[name] = reason
            print(f"{name}: skipped: {reason}", flush=True)
            continue
        words = describe(name, encoders)
        rows.append(dict(name=name, encoders=encoders, words=words, runs=[]))
    total, done = args.seeds * len(rows), 0
    # radio.py's batched argmax over the model's calls (not Model.predict,
    # whose `verbose` test_examples checks in every example).
    predict_frames = radio.predict
    text = write_outputs(rows, skipped, args, counts, begin)
    # Seed by seed, so that a stopped run has every row's first seeds.
    for seed in range(args.seeds):
        for row in rows:
            keras.backend.clear_session()
            keras.utils.set_random_seed(seed)
            _, model = radio.complex_model(
                tokens, classes, windows=WINDOWS, encoders=row["encoders"]
            )
            start = time.perf_counter()
            radio.train(model, x_train, data["train"].labels, None, args, seed)
            scores = radio.per_snr(predict_frames(model, x_test), data["test"])
            seconds = time.perf_counter() - start
            parameters = int(
                sum(np.prod(w.shape) for w in model.trainable_weights)
            )
            done += 1
            row["runs"].append(
                dict(
                    attention=row["name"],
                    seed=seed,
                    parameters=parameters,
                    seconds=seconds,
                    **scores,
                )
            )
            print(
                f"[{done}/{total}] {row['name']} seed {seed}: accuracy "
                f"{scores['mean']:.3f} (0-18 dB {scores['high']:.3f}; "
                f"{seconds:.0f} s, {parameters:,} parameters)",
                flush=True,
            )
            text = write_outputs(rows, skipped, args, counts, begin)
    print("\n" + text + f"\n\nwritten to {args.output}", flush=True)
    return {row["name"]: row["runs"] for row in rows}, skipped
