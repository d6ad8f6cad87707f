"""The timed groups of `attention_speed.py`: attention (layer or core),
ComplexDense, the sweep over T and LiteRT.

Every function takes the parsed command line (`args`) and returns rows
(dicts) that the tables print and `--json` writes. A row's `ours_*` fields
are those of the first form of `--forms` (`ours_form`); `forms` holds the
time and ratios of every form timed, keyed by form, and
`complex_matmul_argument` says whether the form was passed to the layer
(False where the library has no `complex_matmul` argument: its default).
"""

import os
import sys
import tempfile
import time

import _speed_candidates as candidates
import _speed_memory
import keras
import numpy as np
from _speed_native import candidate_core_native
from _speed_native import candidate_native
from _speed_native import candidate_native_dense
from _speed_timing import ratio
from _speed_timing import time_round_robin

import cvattn_keras as cvk


def announce_forms(args):
    """Prints a one-line note for each level that cannot time every form
    of `--forms`; returns {level: the forms it times}."""
    levels = list(args.level) + ([] if args.no_dense else ["dense"])
    usable = {}
    for level in levels:
        usable[level], note = candidates.usable_forms(level, args.forms)
        if note:
            print(note)
    return usable


def layer_form(args):
    """The form of ours in the sweep and the reference comparison: the first
    of `--forms` that the layer can time."""
    return candidates.usable_forms("layer", args.forms)[0][0]


# --------------------------------------------------------------------------
# Attention: the whole layer, or the core alone.
# --------------------------------------------------------------------------


def attention_candidates(level, shape, args, forms):
    """The candidates of one group: the limit (and, for the core, the
    FLOP floor of the complex-weight variants), ours in every form and
    native for every variant asked for."""
    causal = args.causal
    if level == "layer":
        x = candidates.stacked_input(shape)
        group = {"limit": candidates.candidate_limit(shape, x, causal)}
        ours, native = candidates.candidate_ours, candidate_native
        data = x
    else:
        qkv = candidates.core_inputs(shape)
        group = {
            "limit": candidates.candidate_core_limit(qkv, causal),
            "floor": candidates.candidate_core_limit(qkv, causal, True),
        }
        data = qkv

        def ours(shape, softmax, product, qkv, causal, form):
            return candidates.candidate_core_ours(
                softmax, product, qkv, causal, form
            )

        def native(shape, softmax, product, qkv, causal):
            return candidate_core_native(softmax, product, qkv, causal)

    for softmax in args.softmax:
        for product in args.product:
            key = (softmax, product)
            for form in forms:
                group[("ours",) + key + (form,)] = ours(
                    shape, softmax, product, data, causal, form
                )
            group[("native",) + key] = native(
                shape, softmax, product, data, causal
            )
    return group


def bench_attention(args, level, forms):
    """Rows of ours / limit / native times for every shape, jit mode, pass,
    variant and form; `level` is "layer" (ComplexMultiHeadAttention against
    keras.layers.MultiHeadAttention) or "core" (complex_dot_product_attention
    against keras.ops.dot_product_attention, on projected per-head
    tensors)."""
    argument = candidates.supports_forms(candidates.form_targets()[level])
    rows = []
    for shape_name in args.shapes:
        shape = candidates.SHAPES[shape_name]
        for jit in args.jit:
            group = attention_candidates(level, shape, args, forms)
            for pass_ in args.passes:
                functions = {
                    name: candidates.compiled(c, pass_, jit)
                    for name, c in group.items()
                }
                started = time.perf_counter()
                # Forward passes are cheap: twice the rounds.
                repeats = args.repeats * (2 if pass_ == "forward" else 1)
                timed = time_round_robin(functions, repeats)
                limit = timed["limit"]["median"]
                floor = timed.get("floor", {}).get("median")
                for softmax in args.softmax:
                    for product in args.product:
                        key = (softmax, product)
                        per_form = {}
                        for form in forms:
                            name = ("ours",) + key + (form,)
                            per_form[form] = dict(
                                ms=1e3 * timed[name]["median"],
                                iqr_ms=1e3 * timed[name]["iqr"],
                                vs_limit=ratio(timed, name, "limit"),
                                vs_floor=floor and ratio(timed, name, "floor"),
                            )
                        name = ("ours",) + key + (forms[0],)
                        ours = per_form[forms[0]]
                        native = timed[("native",) + key]["median"]
                        max_ratio, min_speedup = candidates.targets(
                            softmax, product, pass_, shape_name
                        )
                        speedup = ratio(timed, ("native",) + key, name)
                        rows.append(
                            dict(
                                level=level,
                                shape=shape_name,
                                **shape,
                                jit=jit,
                                pass_=pass_,
                                softmax=softmax,
                                product=product,
                                variant=candidates.variant_name(*key),
                                ours_form=forms[0],
                                complex_matmul_argument=argument,
                                ours_ms=ours["ms"],
                                ours_iqr_ms=ours["iqr_ms"],
                                limit_ms=1e3 * limit,
                                limit_iqr_ms=1e3 * timed["limit"]["iqr"],
                                floor_ms=floor and 1e3 * floor,
                                native_ms=1e3 * native,
                                vs_limit=ours["vs_limit"],
                                vs_floor=ours["vs_floor"],
                                native_over_ours=speedup,
                                target_vs_limit=max_ratio,
                                target_speedup=min_speedup,
                                met=ours["vs_limit"] <= max_ratio
                                and (
                                    min_speedup is None
                                    or speedup >= min_speedup
                                ),
                                forms=per_form,
                            )
                        )
                print(
                    f"  [{level} {shape_name}, {pass_}, "
                    f"jit={'on' if jit else 'off'}: "
                    f"{time.perf_counter() - started:.0f} s]",
                    file=sys.stderr,
                )
                if args.memory:
                    add_memory(rows, level, shape, pass_, jit, args, forms)
    return rows


def add_memory(rows, level, shape, pass_, jit, args, forms):
    """Adds `memory` = {ours: {form: peak}, limit: peak} to the rows of one
    group (the last rows appended), one subprocess per candidate."""
    started = time.perf_counter()
    base = dict(level=level, shape=shape, causal=args.causal)
    base.update(pass_=pass_, jit=jit, softmax=None, product=None, form=None)
    limit = _speed_memory.measure(dict(base, kind="limit"))
    count = len(args.softmax) * len(args.product)
    for row in rows[-count:]:
        ours = {
            form: _speed_memory.measure(
                dict(
                    base,
                    kind="ours",
                    softmax=row["softmax"],
                    product=row["product"],
                    form=form,
                )
            )
            for form in forms
        }
        row["memory"] = dict(ours=ours, limit=limit)
    print(
        f"  [memory {level} {shape['length']}, {pass_}: "
        f"{time.perf_counter() - started:.0f} s]",
        file=sys.stderr,
    )


# --------------------------------------------------------------------------
# ComplexDense.
# --------------------------------------------------------------------------


def bench_dense(args, forms):
    argument = candidates.supports_forms(candidates.form_targets()["dense"])
    rows = []
    for shape_name in args.shapes:
        shape = candidates.SHAPES[shape_name]
        x = candidates.stacked_input(shape)
        features = shape["features"]
        for jit in args.jit:
            group = {
                ("ours", form): candidates.candidate_dense(
                    candidates.complex_dense(features, form), x
                )
                for form in forms
            }
            group["real"] = candidates.candidate_dense(
                keras.layers.Dense(2 * features), x
            )
            group["native"] = candidate_native_dense(features, x)
            for pass_ in args.passes:
                functions = {
                    name: candidates.compiled(c, pass_, jit)
                    for name, c in group.items()
                }
                timed = time_round_robin(functions, 4 * args.repeats)
                per_form = {
                    form: dict(
                        ms=1e3 * timed[("ours", form)]["median"],
                        iqr_ms=1e3 * timed[("ours", form)]["iqr"],
                        vs_real=ratio(timed, ("ours", form), "real"),
                    )
                    for form in forms
                }
                ours = per_form[forms[0]]
                rows.append(
                    dict(
                        shape=shape_name,
                        tokens=shape["batch"] * shape["length"],
                        features=features,
                        jit=jit,
                        pass_=pass_,
                        ours_form=forms[0],
                        complex_matmul_argument=argument,
                        ours_ms=ours["ms"],
                        real_ms=1e3 * timed["real"]["median"],
                        native_ms=1e3 * timed["native"]["median"],
                        vs_real=ours["vs_real"],
                        native_over_ours=ratio(
                            timed, "native", ("ours", forms[0])
                        ),
                        target=candidates.dense_target(shape_name, pass_, jit),
                        met=ours["vs_real"]
                        <= candidates.dense_target(shape_name, pass_, jit),
                        forms=per_form,
                    )
                )
    return rows


# --------------------------------------------------------------------------
# The sweep over T.
# --------------------------------------------------------------------------


def bench_sweep(args):
    """Forward time against T (batch 1, E = 128, 4 heads) for CAtt and
    APAtt (inner product; ours in `args.layer_form`), the limit,
    and native complex64."""
    rows = []
    jit = args.jit[0]
    form = args.layer_form
    lengths = []
    length = 128
    while length <= args.sweep_max:
        lengths.append(length)
        length *= 2
    for length in lengths:
        shape = dict(batch=1, length=length, features=128, heads=4)
        x = candidates.stacked_input(shape)
        group = {"limit": candidates.candidate_limit(shape, x, False)}
        for softmax in ("real", "abs"):
            group[f"ours {softmax}"] = candidates.candidate_ours(
                shape, softmax, "inner", x, False, form
            )
            group[f"native {softmax}"] = candidate_native(
                shape, softmax, "inner", x, False
            )
        functions = {
            name: candidates.compiled(c, "forward", jit)
            for name, c in group.items()
        }
        repeats = max(5, args.repeats * 256 // max(length, 256))
        timed = time_round_robin(functions, repeats, warmup=1)
        rows.append(
            dict(length=length, jit=jit, repeats=repeats, ours_form=form)
            | {name: 1e3 * t["median"] for name, t in timed.items()}
            | {
                f"{name} / limit": ratio(timed, name, "limit")
                for name in ("ours real", "ours abs")
            }
        )
        print(f"  [sweep T={length}]", file=sys.stderr)
    return rows


# --------------------------------------------------------------------------
# LiteRT.
# --------------------------------------------------------------------------


def bench_tflite(args):
    """LiteRT latency of an exported CAtt model vs an exported real MHA
    model of twice the width, batch 1, paper shape."""
    shape = candidates.SHAPES["paper"]
    heads, features = shape["heads"], shape["features"]
    inputs = keras.Input((shape["length"], 2 * features))
    catt = keras.Model(
        inputs,
        cvk.layers.ComplexMultiHeadAttention(heads, features // heads)(
            inputs, inputs
        ),
    )
    real = keras.Model(
        inputs,
        keras.layers.MultiHeadAttention(heads, 2 * features // heads)(
            inputs, inputs
        ),
    )
    sample = np.random.default_rng(0).standard_normal(
        (1, shape["length"], 2 * features)
    )
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for name, model in (("CAtt ip (ours)", catt), ("real MHA", real)):
            path = cvk.export.export_tflite(
                model, os.path.join(directory, "model.tflite")
            )
            report = cvk.export.verify_tflite(
                path, model, sample.astype("float32"), num_runs=args.tflite_runs
            )
            rows.append(
                dict(
                    model=name,
                    size_kib=report.size_bytes / 1024,
                    median_latency_ms=report.median_latency_ms,
                    max_abs_error=report.max_abs_error,
                    builtin_only=report.builtin_only,
                )
            )
    return rows
