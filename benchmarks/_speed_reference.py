"""Ours against the authors' PyTorch attention (`attention_speed.py
--vs-reference PATH`).

The reference is Eilers & Jiang's code: `attention/mha.py`'s
`MultiheadAttention(embed_dim, num_heads, attn_dropout, bias, sm_variante,
device)` of a checkout of https://github.com/richarms/cv_transformer
(`git clone https://github.com/richarms/cv_transformer`; PATH is the
folder holding `attention/` and `layers.py`). It is imported from PATH
(`sys.path`, then `importlib`), never copied. `sm_variante` is the softmax
and the product in one string, as the authors' `attention/transformer.py`
passes it: `real` (CAtt), `abs` (APAtt), `absonly` (AAtt), `naiv` (RIAtt),
followed by `ip` (inner product, `q conj(k)^T`) or `cp` (`q k^T`).

It runs on the CPU in PyTorch's eager mode (`torch.set_num_threads` = the
machine's cores), as the authors' code does, with `attn_dropout=0`, in eval
mode, on the complex64 form of the same input as ours; their
`Complex_Dropout` (whose device defaults to `cuda`) is pointed at the CPU,
and still multiplies the weights by a tensor of ones, as it does in their
model. The forward pass runs under `torch.no_grad()`; forward+backward is
the gradient of `sum |y|^2` with respect to the module's parameters
(`torch.autograd.grad`), as ours differentiates its weights. `--causal`
passes their decoder's mask (`-inf` above the diagonal, complex).

Ours (`ComplexMultiHeadAttention` in the first form of `--forms` that it
takes, compiled as in the other groups) and the reference, for every
variant asked for, are timed round-robin in one group per (shape, jit mode
of ours, pass), so load hits them alike; ratios are medians over rounds of
in-round ratios.
"""

import importlib
import os
import sys
import time

import _speed_candidates as candidates
import numpy as np
from _speed_timing import ratio
from _speed_timing import time_round_robin

SOFTMAX_STRINGS = dict(real="real", abs="abs", absonly="absonly", naive="naiv")


class ReferenceUnavailable(Exception):
    """The reference cannot be timed (the message says why)."""


def load(path):
    """(torch, the reference's `MultiheadAttention` class) imported from the
    checkout at `path`; raises ReferenceUnavailable with a one-line reason
    when torch or the code is missing."""
    try:
        import torch
    except ImportError as error:
        raise ReferenceUnavailable(f"torch is not importable ({error})")
    path = os.path.abspath(path)
    for relative in (os.path.join("attention", "mha.py"), "layers.py"):
        if not os.path.isfile(os.path.join(path, relative)):
            raise ReferenceUnavailable(
                f"{path} holds no {relative}: not a checkout of "
                "https://github.com/richarms/cv_transformer"
            )
    for name in ("attention", "attention.mha", "layers"):
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) or ""
        if module is not None and not _inside(where, path):
            raise ReferenceUnavailable(
                f"a module named {name!r} is already imported from "
                f"{where or 'elsewhere'}"
            )
    sys.path.insert(0, path)
    try:
        mha = importlib.import_module("attention.mha")
    except Exception as error:  # their code, any failure: skip the section
        raise ReferenceUnavailable(
            f"importing attention.mha from {path} failed: "
            f"{type(error).__name__}: {error}"
        )
    finally:
        sys.path.remove(path)
    if not _inside(mha.__file__, path):
        raise ReferenceUnavailable(
            f"attention.mha was imported from {mha.__file__}, not {path}"
        )
    torch.set_num_threads(os.cpu_count() or 1)
    return torch, mha.MultiheadAttention


def _inside(file, folder):
    file, folder = os.path.abspath(file), os.path.abspath(folder)
    return os.path.commonpath([file, folder]) == folder


def reference_step(torch, cls, shape, softmax, product, x, causal, pass_):
    """A zero-argument callable running one pass of the reference module on
    the complex64 form of the stacked input `x` (a NumPy array)."""
    torch.manual_seed(0)
    module = cls(
        shape["features"],
        shape["heads"],
        attn_dropout=0.0,
        bias=True,
        sm_variante=SOFTMAX_STRINGS[softmax]
        + candidates.PRODUCT_NAMES[product],
        device="cpu",
    )
    module.cdropout.device = "cpu"
    module.eval()
    re, im = np.split(np.ascontiguousarray(x, dtype=np.float32), 2, axis=-1)
    z = torch.complex(
        torch.from_numpy(np.ascontiguousarray(re)),
        torch.from_numpy(np.ascontiguousarray(im)),
    )
    mask = None
    if causal:
        length = shape["length"]
        upper = torch.triu(torch.ones(length, length), diagonal=1) == 1
        logits = torch.zeros(length, length).masked_fill(upper, float("-inf"))
        mask = torch.complex(logits, logits)
    parameters = [p for p in module.parameters() if p.requires_grad]

    if pass_ == "forward":

        def step():
            with torch.no_grad():
                module(z, z, z, attn_mask=mask)

    else:

        def step():
            y, _ = module(z, z, z, attn_mask=mask)
            loss = torch.view_as_real(y).square().sum()
            torch.autograd.grad(loss, parameters)

    return step


def bench_reference(args):
    """(rows of ours against the reference, information on the reference);
    (None, {"skipped": why}) after a one-line message when torch or the
    checkout is missing."""
    try:
        torch, cls = load(args.vs_reference)
    except ReferenceUnavailable as reason:
        print(f"\n(--vs-reference: skipped: {reason}.)")
        return None, {"skipped": str(reason)}
    info = dict(
        torch=torch.__version__,
        threads=torch.get_num_threads(),
        path=os.path.abspath(args.vs_reference),
    )
    form = args.layer_form
    rows = []
    for shape_name in args.shapes:
        shape = candidates.SHAPES[shape_name]
        x = candidates.stacked_input(shape)
        x_numpy = x.numpy()
        for jit in args.jit:
            ours = {
                key: candidates.candidate_ours(
                    shape, *key, x, args.causal, form
                )
                for key in _variants(args)
            }
            for pass_ in args.passes:
                started = time.perf_counter()
                functions = {}
                for key in _variants(args):
                    functions[("ours",) + key] = candidates.compiled(
                        ours[key], pass_, jit
                    )
                    functions[("reference",) + key] = reference_step(
                        torch, cls, shape, *key, x_numpy, args.causal, pass_
                    )
                repeats = args.repeats * (2 if pass_ == "forward" else 1)
                timed = time_round_robin(functions, repeats)
                for key in _variants(args):
                    mine, theirs = ("ours",) + key, ("reference",) + key
                    rows.append(
                        dict(
                            shape=shape_name,
                            **shape,
                            jit=jit,
                            pass_=pass_,
                            softmax=key[0],
                            product=key[1],
                            variant=candidates.variant_name(*key),
                            ours_form=form,
                            forms={form: dict(ms=1e3 * timed[mine]["median"])},
                            ours_ms=1e3 * timed[mine]["median"],
                            ours_iqr_ms=1e3 * timed[mine]["iqr"],
                            reference_ms=1e3 * timed[theirs]["median"],
                            reference_iqr_ms=1e3 * timed[theirs]["iqr"],
                            vs_reference=ratio(timed, mine, theirs),
                            reference_over_ours=ratio(timed, theirs, mine),
                        )
                    )
                print(
                    f"  [reference {shape_name}, {pass_}, "
                    f"jit={'on' if jit else 'off'}: "
                    f"{time.perf_counter() - started:.0f} s]",
                    file=sys.stderr,
                )
    return rows, info


def _variants(args):
    return [(s, p) for s in args.softmax for p in args.product]
