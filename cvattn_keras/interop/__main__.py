"""Command line: a reference PyTorch checkpoint to a `.keras` model.

    python -m cvattn_keras.interop CHECKPOINT.pt OUT.keras \\
        --model classifier|generator --variant realip [size options]

Reads a `torch.save`d state dict of the reference's `Transformer_Pred`
(`--model classifier`) or `Transformer_Generation` (`--model generator`)
with `torch.load(..., map_location="cpu", weights_only=True)` (a dict that
wraps it under "state_dict", "model_state_dict" or "model" is unwrapped),
builds the matching model with `cvattn_keras.models.music_classifier` /
`music_generator`, loads the weights strictly with
`cvattn_keras.interop.load_reference_state_dict`, saves it as `.keras` and
prints what it loaded (reference key -> library variables). Then
`python -m cvattn_keras.export OUT.keras OUT.tflite` takes it to TFLite.

The sizes are read from the checkpoint's shapes: the front end's blocks
(filters, kernel sizes), `embed_dim`, `num_layers`, `intermediate_dim`,
`head_dim` and `notes`. What a state dict does not hold comes from the
options: `--variant` (the reference's `sm_variante`, e.g. `realip`,
required), `--num-heads` (default 8), `--bins` (default: 2048 when it fits
the checkpoint; the strided front end makes several bin counts fit, so
another one must be given), `--frames` (classifier, default 64),
`--source-frames`, `--target-frames` (generator, defaults 43 and 21).

`--layer-norm-epsilon` (default 0) is the epsilon of the model's layer
norms. The default 0 is the reference's arithmetic (its LayerNorm has
none): the converted model computes what the authors' code computes, which
is what a conversion is for, and stays NaN-safe on constant tokens (see
`cvattn_keras.layers.ComplexLayerNormalization`). 1e-5 (the builders'
default) gives smaller gradients near constant tokens, for training from
the converted weights; it moves the outputs by about `epsilon / variance`
relative, most of the difference from the reference.

OUT is written to a temporary file beside it, then renamed: an existing
OUT (with `--overwrite`) is replaced only by a complete file. A symbolic
link OUT is followed (its target is written).

Needs torch (`pip install ".[torch]"`). Errors print one line,
`error: ...`, and exit with status 2: a missing, unreadable or directory
checkpoint, a file that is not a state dict, an existing OUT without
`--overwrite`, an OUT that is a directory or in a missing directory (or
under a file), an OUT that cannot be written, an unknown variant, torch
not installed, a checkpoint that does not fit the model.
"""

import argparse
import os
import sys
import uuid

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from cvattn_keras import _validation as check  # noqa: E402
from cvattn_keras import attention  # noqa: E402
from cvattn_keras import interop  # noqa: E402
from cvattn_keras import models  # noqa: E402
from cvattn_keras.export._files import replace_with  # noqa: E402

# Keys under which training scripts often wrap a state dict.
WRAPPER_KEYS = ("state_dict", "model_state_dict", "model")

DEFAULT_BINS = 2048
DEFAULT_NUM_HEADS = 8


class CommandError(Exception):
    """A one-line error for the user (exit status 2)."""


def _epsilon_argument(text):
    """argparse type: a finite float >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(
            f"must be a finite number >= 0, received {text!r}"
        )
    return value


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m cvattn_keras.interop",
        description=(
            "Convert a checkpoint of the reference PyTorch code "
            "(Transformer_Pred / Transformer_Generation state dict) to a "
            ".keras model."
        ),
    )
    parser.add_argument("checkpoint", help="the torch.save'd state dict")
    parser.add_argument("output", help="the .keras file to write")
    parser.add_argument(
        "--model",
        required=True,
        choices=("classifier", "generator"),
        help="Transformer_Pred (classifier) or Transformer_Generation",
    )
    parser.add_argument(
        "--variant",
        required=True,
        help="the reference's sm_variante: realip, absip, absonlyip, "
        "naivip, realcp, abscp, absonlycp, naivcp",
    )
    parser.add_argument(
        "--bins",
        type=check.positive_int_argument,
        help="frequency bins per frame (default 2048 if it fits)",
    )
    parser.add_argument(
        "--frames", type=check.positive_int_argument, default=64
    )
    parser.add_argument(
        "--source-frames", type=check.positive_int_argument, default=43
    )
    parser.add_argument(
        "--target-frames", type=check.positive_int_argument, default=21
    )
    parser.add_argument(
        "--num-heads",
        type=check.positive_int_argument,
        default=DEFAULT_NUM_HEADS,
    )
    parser.add_argument(
        "--layer-norm-epsilon",
        type=_epsilon_argument,
        default=0.0,
        help="epsilon of the layer norms (default 0: the reference's "
        "arithmetic; 1e-5 for training)",
    )
    parser.add_argument(
        "--prefix",
        default="",
        help="a prefix of every key to remove (e.g. 'module.')",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing OUT"
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="print only the summary, not every key",
    )
    return parser


def _os_reason(error):
    """The reason of an `OSError`, without its file name."""
    return error.strerror or str(error) or type(error).__name__


def check_checkpoint(path):
    """`path` is a readable regular file, or a `CommandError`."""
    if os.path.isdir(path):
        raise CommandError(f"the checkpoint {path} is a directory, not a file")
    if not os.path.exists(path):
        link = (
            f" (a broken symbolic link to {os.readlink(path)})"
            if os.path.islink(path)
            else ""
        )
        raise CommandError(f"no such checkpoint file: {path}{link}")
    if not os.path.isfile(path):
        raise CommandError(f"the checkpoint {path} is not a regular file")
    try:
        with open(path, "rb") as file:
            file.read(1)
    except OSError as error:
        raise CommandError(
            f"cannot read the checkpoint {path}: {_os_reason(error)}"
        ) from None


def check_output(path, overwrite):
    """The file that writing `path` writes (a symbolic link's target), or a
    `CommandError`: a directory, an existing file without `overwrite`, a
    missing or unwritable directory."""
    if not path.endswith(".keras"):
        raise CommandError(
            f"the output must be a .keras file. Received: {path}"
        )
    target = os.path.realpath(path)
    link = f" (a symbolic link to {target})" if os.path.islink(path) else ""
    if os.path.isdir(target):
        raise CommandError(f"the output {path}{link} is a directory")
    if os.path.lexists(target):
        if not overwrite:
            raise CommandError(
                f"{path}{link} exists; pass --overwrite to replace it"
            )
        if not os.path.isfile(target):
            raise CommandError(f"the output {path}{link} is not a regular file")
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        what = "not a directory" if os.path.exists(folder) else "missing"
        raise CommandError(
            f"cannot write {path}{link}: its directory {folder} is {what}"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise CommandError(
            f"cannot write {path}{link}: no permission to write in {folder}"
        )
    return target


def save_model(model, path, target, overwrite=True):
    """Saves `model` to `target` (what `path` names) through a temporary
    file beside it, renamed over `target` when complete (an existing
    file's mode kept, as `cvattn_keras.export` writes; without
    `overwrite`, a file that appeared meanwhile is kept). Raises
    `CommandError` for any error of the save."""
    folder, name = os.path.split(target)
    partial = os.path.join(folder, f".{name}.{uuid.uuid4().hex[:8]}.keras")
    try:
        model.save(partial)
        # As open() would: an existing file's mode and group kept.
        replace_with(partial, target, overwrite=overwrite)
    except OSError as error:
        raise CommandError(
            f"cannot write {path}: {_os_reason(error)}"
        ) from None
    except Exception as error:  # Keras' own errors: one line, no traceback
        first = str(error).strip().splitlines()[0] if str(error) else ""
        raise CommandError(
            f"cannot write {path}: {type(error).__name__}: {first}"
        ) from None
    finally:
        if os.path.lexists(partial):  # a failed save's remains
            try:
                os.remove(partial)
            except OSError:
                pass


def read_checkpoint(path):
    """The state dict in the `torch.save` file `path`, values as torch
    tensors (a dict wrapping it under one of `WRAPPER_KEYS` is
    unwrapped). Raises `CommandError`."""
    check_checkpoint(path)
    try:
        import torch
    except ImportError:
        raise CommandError(
            "reading a PyTorch checkpoint needs torch, which is not "
            'installed: pip install ".[torch]" (or pip install torch)'
        ) from None
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for bad files
        first = str(error).strip().splitlines()[0] if str(error) else ""
        raise CommandError(
            f"{path} is not a readable torch.save file "
            f"({type(error).__name__}: {first})"
        ) from None
    return unwrap_state_dict(data, path)


def _is_tensor(value):
    return all(hasattr(value, a) for a in ("shape", "dtype", "numpy"))


def unwrap_state_dict(data, path="the checkpoint"):
    """`data` if it is a state dict (a mapping from names to tensors),
    else the state dict it wraps under one of `WRAPPER_KEYS`."""
    if not isinstance(data, dict):
        raise CommandError(
            f"{path} does not hold a state dict (a dict from parameter "
            f"names to tensors) but a {type(data).__name__}"
        )
    if data and all(_is_tensor(v) for v in data.values()):
        return data
    for key in WRAPPER_KEYS:
        inner = data.get(key)
        if isinstance(inner, dict) and inner:
            if all(_is_tensor(v) for v in inner.values()):
                return inner
    bad = next((f"{k!r}: {type(v).__name__}" for k, v in data.items()), "empty")
    raise CommandError(
        f"{path} does not hold a state dict: its values are not all "
        f"tensors ({bad}), and it wraps none under {list(WRAPPER_KEYS)}"
    )


def _shape(state_dict, key):
    if key not in state_dict:
        raise CommandError(
            f"the checkpoint has no {key!r}: it is not a state dict of the "
            "reference model asked for"
        )
    return tuple(int(d) for d in state_dict[key].shape)


def _count_layers(state_dict, stem):
    indices = set()
    for key in state_dict:
        parts = key.split(".")
        if key.startswith(f"{stem}.layers.") and parts[2].isdigit():
            indices.add(int(parts[2]))
    if indices != set(range(len(indices))):
        raise CommandError(
            f"the checkpoint's {stem} layers are not numbered 0..N-1: "
            f"{sorted(indices)}"
        )
    return len(indices)


def _bins_range(lengths_out, kernels, stride):
    """All input bin counts giving `lengths_out` bins after the blocks."""
    low = high = lengths_out
    for kernel in reversed(kernels):
        low = stride * (low - 1) + kernel
        high = stride * (high - 1) + kernel + stride - 1
    return low, high


def _frontend_length(bins, kernels, stride):
    for kernel in kernels:
        if bins < kernel:
            return 0
        bins = (bins - kernel) // stride + 1
    return bins


def infer_sizes(state_dict, kind, bins=None, num_heads=DEFAULT_NUM_HEADS):
    """The builder arguments that a reference checkpoint determines (and
    `bins`, checked against it). Raises `CommandError`."""
    message = interop._kind_error(kind, state_dict, strict_hint=False)
    if message:
        raise CommandError(message)
    generator = kind == "generator"
    conv = "conv_src" if generator else "conv"
    embedding = "in_embedding_src" if generator else "in_embedding"
    filters, kernels, channels = [], [], 1
    while f"{conv}.{3 * len(filters)}.Conv_real.weight" in state_dict:
        out, inp, kernel = _shape(
            state_dict, f"{conv}.{3 * len(filters)}.Conv_real.weight"
        )
        if inp != channels:
            raise CommandError(
                f"the front end's block {len(filters)} reads {inp} channels "
                f"where the previous block gives {channels}"
            )
        filters.append(out)
        kernels.append(kernel)
        channels = out
    if not filters:
        raise CommandError(
            f"the checkpoint has no front end ({conv}.0.Conv_real.weight): "
            "it is not a state dict of the reference model asked for"
        )
    embed_dim, flat = _shape(state_dict, f"{embedding}.Linear_real.weight")
    head_dim, _ = _shape(state_dict, "output_linear_1.Linear_real.weight")
    notes, _ = _shape(state_dict, "output_linear_2.Linear_real.weight")
    num_layers = _count_layers(state_dict, "encoder")
    if generator:
        decoders = _count_layers(state_dict, "decoder")
        if decoders != num_layers:
            raise CommandError(
                f"the checkpoint has {num_layers} encoder and {decoders} "
                "decoder layers; music_generator builds as many of each"
            )
        _, tgt_in = _shape(state_dict, "in_embedding_tgt.Linear_real.weight")
        if tgt_in != notes:
            raise CommandError(
                f"in_embedding_tgt reads {tgt_in} notes but the head "
                f"writes {notes}; music_generator uses one number"
            )
    intermediate_dim = None
    if num_layers:
        intermediate_dim, _ = _shape(
            state_dict, "encoder.layers.0.linear1.Linear_real.weight"
        )
    stride = 2  # the reference's, fixed in its constructor
    if flat % filters[-1]:
        raise CommandError(
            f"{embedding} reads {flat} features, not a multiple of the "
            f"front end's {filters[-1]} channels"
        )
    length = flat // filters[-1]
    low, high = _bins_range(length, kernels, stride)
    if bins is None:
        if not low <= DEFAULT_BINS <= high:
            raise CommandError(
                f"the checkpoint's front end fits {low}..{high} bins per "
                "frame (not the reference's 2048): pass --bins"
            )
        bins = DEFAULT_BINS
    elif _frontend_length(bins, kernels, stride) != length:
        raise CommandError(
            f"--bins {bins} does not fit the checkpoint: its front end "
            f"fits {low}..{high} bins per frame"
        )
    if embed_dim % num_heads:
        raise CommandError(
            f"--num-heads {num_heads} does not divide the checkpoint's "
            f"embed_dim {embed_dim}"
        )
    return dict(
        bins=bins,
        notes=notes,
        embed_dim=embed_dim,
        num_heads=num_heads,
        num_layers=num_layers,
        intermediate_dim=intermediate_dim,
        head_dim=head_dim,
        frontend_filters=tuple(filters),
        frontend_kernel_sizes=tuple(kernels),
        frontend_strides=stride,
    )


def convert(args):
    """Does the work of `main`; returns the summary text."""
    target = check_output(args.output, args.overwrite)
    check_checkpoint(args.checkpoint)
    try:
        softmax, product = attention.parse_variant(args.variant)
    except ValueError as error:
        raise CommandError(f"--variant: {error}") from None
    state_dict = read_checkpoint(args.checkpoint)
    if args.prefix:
        state_dict = {
            k[len(args.prefix) :]: v
            for k, v in state_dict.items()
            if k.startswith(args.prefix)
        }
    sizes = infer_sizes(state_dict, args.model, args.bins, args.num_heads)
    try:
        options = dict(
            softmax=softmax,
            product=product,
            layer_norm_epsilon=args.layer_norm_epsilon,
            **sizes,
        )
        if args.model == "classifier":
            model = models.music_classifier(frames=args.frames, **options)
        else:
            model = models.music_generator(
                source_frames=args.source_frames,
                target_frames=args.target_frames,
                **options,
            )
        result = interop.load_reference_state_dict(model, state_dict)
    except ValueError as error:
        raise CommandError(str(error)) from None
    save_model(model, args.output, target, overwrite=args.overwrite)
    described = ", ".join(
        f"{name}={value}"
        for name, value in sizes.items()
        if name != "frontend_strides"
    )
    lines = [] if args.quiet else str(result).splitlines()[:-1]
    lines.append(
        f"loaded {len(result.loaded)} reference tensors "
        f"({result.parameters:,} real numbers) into {model.name} "
        f"(variant {args.variant}: softmax={softmax!r}, "
        f"product={product!r}; {described}; "
        f"layer_norm_epsilon={args.layer_norm_epsilon:g})"
    )
    lines.append(f"saved {args.output}")
    return "\n".join(lines)


def main(argv=None):
    """Runs the command; returns the exit status (0, or 2 on an error)."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:  # argparse's own errors and --help
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        print(convert(args))
    except CommandError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # any other file-system error: one line too
        where = f" ({error.filename})" if error.filename else ""
        print(f"error: {_os_reason(error)}{where}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
