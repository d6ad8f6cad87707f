"""The examples' `--qat`: a trained model fine-tuned a few more epochs
with quantization-aware training (`cvattn_keras.quantization`) or, the
control, without it, so that a table separates what fake quantization
gives from what the extra epochs give. A part of the examples, imported
by them."""

import _stats as stats
import keras

import cvattn_keras as cvk


def fine_tuned_copy(model, quantize, calibration, compile_args, fit_args, seed):
    """A copy of `model` (its architecture and weights; `model` is not
    changed) trained further: `keras.utils.set_random_seed(seed)` (the
    batches' order, dropout), with `quantize` its quantization-aware copy
    (`quantize_model`) with the ranges calibrated on `calibration` before
    the first step (not the quantizers' initial [-6, 6]); then
    `copy.compile(**compile_args)` and `copy.fit(**fit_args)` (one line
    an epoch). Returns the copy."""
    keras.utils.set_random_seed(seed)
    copy = keras.models.clone_model(model)
    copy.set_weights(model.get_weights())
    if quantize:
        copy = cvk.quantization.quantize_model(copy)
        cvk.quantization.calibrate(copy, calibration)
    copy.compile(**compile_args)
    copy.fit(verbose=2, **fit_args)
    return copy


def seeds_summary(by_seed, what, reference, digits=4):
    """Lines for `by_seed` (`{"fine-tuned": [...], "QAT": [...]}`, a
    metric `what` by seed): each arm's mean +- sample std, and the
    difference QAT - fine-tuned paired by seed with its 95% t interval
    (the mean alone for one seed); `reference`, the float model's."""
    f = f"{{:.{digits}f}}".format
    lines = [
        f"{what} over {len(by_seed['QAT'])} seed(s) (the float model: "
        f"{f(reference)}):"
    ]
    for label, values in by_seed.items():
        mean, std = stats.mean_std(values)
        spread = "" if std is None else f" +- {f(std)}"
        lines.append(f"  {label}: {f(mean)}{spread}")
    mean, half = stats.paired(by_seed["QAT"], by_seed["fine-tuned"])
    interval = (
        ""
        if half is None
        else (
            f" [{mean - half:+.{digits}f}, {mean + half:+.{digits}f}] (95% t "
            "interval)"
        )
    )
    lines.append(
        f"  QAT - fine-tuned, paired by seed: {mean:+.{digits}f}{interval}"
    )
    return "\n".join(lines)
