"""What the attention's full and chunked paths share, below both
(`cvattn_keras.attention` re-exports the public names): the variant and
product names and their aliases, mask shapes, and the check of per-head
shapes."""

from keras import ops

from cvattn_keras import _validation as check
from cvattn_keras import complex as cx

SOFTMAX_VARIANTS = ("real", "abs", "absonly", "naive")
"""The `softmax` variants, by their canonical names (`parse_variant` and
`resolve_softmax` also take the paper's and the reference's names).
"""
PRODUCTS = ("inner", "bilinear")
"""The `product` variants, by their canonical names (`resolve_product`
also takes `"ip"` and `"cp"`).
"""

_SOFTMAX_ALIASES = {
    "real": "real",
    "catt": "real",
    "abs": "abs",
    "apatt": "abs",
    "absonly": "absonly",
    "aatt": "absonly",
    "naive": "naive",
    "naiv": "naive",
    "riatt": "naive",
}
_PRODUCT_ALIASES = {
    "inner": "inner",
    "ip": "inner",
    "bilinear": "bilinear",
    "cp": "bilinear",
}


def resolve_softmax(name):
    """The canonical softmax variant for `name`.

    Accepts `"real"`, `"abs"`, `"absonly"`, `"naive"`, the paper's names
    `"CAtt"`, `"APAtt"`, `"AAtt"`, `"RIAtt"` and the reference spelling
    `"naiv"`, in any case.

    Raises:
        ValueError: for any other value, listing the valid names.
    """
    key = name.lower() if isinstance(name, str) else None
    if key not in _SOFTMAX_ALIASES:
        hint = ""
        if key is not None and key.endswith(("ip", "cp")):
            hint = (
                " For a compound reference string such as 'realip', use "
                "`cvattn_keras.attention.parse_variant`."
            )
        raise ValueError(
            f"Unknown softmax variant. Valid: {list(SOFTMAX_VARIANTS)}, or "
            f"the paper's names ['CAtt', 'APAtt', 'AAtt', 'RIAtt'] or "
            f"'naiv', in any case.{hint} Received: softmax={name!r}"
        )
    return _SOFTMAX_ALIASES[key]


def resolve_product(name):
    """The canonical product for `name`: `"inner"`/`"ip"` or
    `"bilinear"`/`"cp"`, in any case.

    Raises:
        ValueError: for any other value, listing the valid names.
    """
    key = name.lower() if isinstance(name, str) else None
    if key not in _PRODUCT_ALIASES:
        raise ValueError(
            f"Unknown product. Valid: {list(PRODUCTS)}, or the reference "
            f"spellings ['ip', 'cp'], in any case. Received: product={name!r}"
        )
    return _PRODUCT_ALIASES[key]


def parse_variant(name):
    """Splits a reference `sm_variante` string into `(softmax, product)`.

    The reference implementation names a variant by one string, the softmax
    followed by `"ip"` (inner product) or `"cp"` (bilinear product):
    `realip absip absonlyip naivip realcp abscp absonlycp naivcp`. Any
    softmax alias of `resolve_softmax` may stand before the suffix, in any
    case.

    Examples:
        >>> parse_variant("absonlycp")
        ('absonly', 'bilinear')
        >>> parse_variant("CAttip")
        ('real', 'inner')
    """
    valid = (
        "one of ['realip', 'absip', 'absonlyip', 'naivip', 'realcp', "
        "'abscp', 'absonlycp', 'naivcp'] (any softmax alias before the "
        "suffix, in any case)"
    )
    if not isinstance(name, str) or name.lower()[-2:] not in ("ip", "cp"):
        raise ValueError(
            "A compound variant is a softmax name followed by 'ip' or 'cp', "
            f"{valid}; the product suffix is missing. Received: {name!r}"
        )
    if len(name) == 2:
        raise ValueError(
            f"The compound variant {name!r} has the product suffix but no "
            f"softmax name before it; a compound variant is {valid}. "
            f"Received: {name!r}"
        )
    try:
        softmax = resolve_softmax(name[:-2])
    except ValueError as error:
        raise ValueError(
            f"The compound variant {name!r} does not start with a softmax "
            f"name. {error}"
        ) from None
    return softmax, resolve_product(name[-2:])


def expand_mask(mask):
    """A mask of rank 2 `(T, S)`, 3 `(B, T, S)` or 4 `(B, N, T, S)` ->
    boolean, rank 4, broadcastable to `(B, N, T, S)`; `None` stays `None`."""
    if mask is None:
        return None
    mask = ops.cast(mask, "bool")
    rank = len(mask.shape)
    if rank == 2:  # (T, S)
        return ops.expand_dims(mask, (0, 1))
    if rank == 3:  # (B, T, S)
        return ops.expand_dims(mask, 1)
    if rank == 4:  # (B, N, T, S)
        return mask
    raise ValueError(
        "`mask` must have rank 2 (T, S), 3 (B, T, S) or 4 (B, N, T, S). "
        f"Received: mask.shape={tuple(mask.shape)}"
    )


def check_mask_shape(mask_shape, target, name, layout):
    """Raises a `ValueError` naming `name` unless a mask of static shape
    `mask_shape` broadcasts to `target`: the same rank, and each axis 1,
    unknown (`None`) or equal to the target's. `layout` names the target's
    axes, e.g. `"(B, T, S)"`. Unknown sizes are not checked (they are
    only known when the graph runs), nor are symbolic ones
    (`torch.export`, `jax.export`: `_validation.static_size`)."""
    shape = check.static_shape(mask_shape)
    target = check.static_shape(target)
    if len(shape) != len(target) or any(
        size not in (None, 1) and want is not None and size != want
        for size, want in zip(shape, target)
    ):
        raise ValueError(
            f"`{name}` must have a shape that broadcasts to {layout} = "
            f"{target}. Received: {name}.shape={shape}"
        )


def check_shapes(query, key, value):
    """Raises unless `query` `(B, T, N, 2H)`, `key` `(B, S, N, 2H)` and
    `value` `(B, S, N, 2V)` agree where their static shapes are known
    (symbolic sizes are not compared: `_validation.static_size`)."""
    shapes = {
        "query": check.static_shape(query.shape),
        "key": check.static_shape(key.shape),
        "value": check.static_shape(value.shape),
    }
    received = ", ".join(f"{n}.shape={s}" for n, s in shapes.items())
    if any(len(shape) != 4 for shape in shapes.values()):
        raise ValueError(
            "`query`, `key` and `value` must have rank 4, (B, T, N, 2H), "
            f"(B, S, N, 2H) and (B, S, N, 2V). Received: {received}"
        )

    def agree(*sizes):
        known = {size for size in sizes if size is not None}
        return len(known) <= 1

    if shapes["key"][-1] != shapes["query"][-1]:
        raise ValueError(
            "`query` (B, T, N, 2H) and `key` (B, S, N, 2H) must have the "
            f"same head width. Received: {received}"
        )
    for what, axis, names in (
        ("batch size (axis 0)", 0, ("query", "key", "value")),
        ("number of heads (axis 2)", 2, ("query", "key", "value")),
        ("length (axis 1)", 1, ("key", "value")),
    ):
        if not agree(*(shapes[name][axis] for name in names)):
            raise ValueError(
                f"{', '.join(f'`{n}`' for n in names)} must have the same "
                f"{what}. Received: {received}"
            )
    cx.check_even(shapes["value"][-1], "value.shape[-1]")


def resolve_sliding_window(window, name="sliding_window"):
    """Validates a `sliding_window` argument: `None` or a positive int."""
    return check.positive_int(window, name, allow_none=True)


def allowed_positions(rows, cols, causal, window):
    """Where query positions `rows` `(T, 1)` may see key positions `cols`
    `(1, S)` (int32 tensors): `s <= t` if `causal`; within a sliding
    `window`, `t - window < s` (and `s < t + window` without `causal`).
    A bool `(T, S)` tensor, or `None` when nothing is excluded."""
    masks = []
    if causal:
        masks.append(ops.greater_equal(rows, cols))
    if window is not None:
        masks.append(ops.greater(cols, rows - window))
        if not causal:
            masks.append(ops.less(cols, rows + window))
    return all_of(masks)


def all_of(masks):
    """The logical and of a list of broadcastable bool masks, or `None`
    for an empty list."""
    if not masks:
        return None
    merged = masks[0]
    for mask in masks[1:]:
        merged = ops.logical_and(merged, mask)
    return merged
