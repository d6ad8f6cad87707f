"""`compare_variants.py`'s runs: the models of each task, trained and
scored seed by seed (`run_synthetic`, `run_scores`, `run_streaming`). A
part of the example, imported by it."""

import json
import os
import tempfile
import time

import keras
import numpy as np
from _variants_data import GENERATION_METRICS
from _variants_data import HELD_OUT_SETS
from _variants_data import METRICS
from _variants_data import REAL_BASELINE
from _variants_data import ROTARY_WAVELENGTH
from _variants_data import SCORES
from _variants_data import SMALL
from _variants_data import TINY
from _variants_data import TRAIN_PROGRAMS
from _variants_data import cut_windows
from _variants_data import generation_split
from _variants_data import load_score_windows
from _variants_data import parse_variants
from _variants_data import real_size
from _variants_report import score_command
from _variants_report import score_table
from _variants_report import streaming_summary
from _variants_report import streaming_table

import cvattn_keras as cvk


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


def run_synthetic(args):
    """The default data, the built-in `synthetic_music`: every variant
    and the real baseline trained `--seeds` times; writes the table to
    `--output` and returns its rows."""
    size = TINY if args.smoke else SMALL
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


def run_scores(args, transform):
    """`--data scores`: see `compare_variants.py`'s docstring. `args` are
    checked and filled in (`check_score_args`)."""
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


def run_streaming(args, transform):
    """`--data scores --streaming`: what causality costs (see
    `compare_variants.py`'s docstring). `args` are checked and filled in
    (`check_streaming_args`)."""
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
