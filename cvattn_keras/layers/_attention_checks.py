"""The static checks of `ComplexMultiHeadAttention`'s call arguments: its
key/value cache and index, and the shapes of its masks (the layer's
`_check_cache` and `_check_masks` call these)."""

import numpy as np

from cvattn_keras import _validation as check
from cvattn_keras import attention as core
from cvattn_keras.layers._attention_masks import check_attention_mask_shape
from cvattn_keras.layers._attention_masks import mask_shape


def keys_shape(value_shape, cache):
    """`(B, S)`: the attended keys' batch and length, the cache's `S_max`
    when there is a cache."""
    if cache is None:
        return tuple(value_shape)[:2]
    shape = tuple(cache.shape)
    return shape[0], shape[2]


def check_cache(layer, cache, cache_update_index, query_shape, value_shape):
    """Raises a `ValueError` naming the argument for a cache of the wrong
    shape for `layer` (its `num_heads`, `key_dim`, `value_dim`), or a static
    `cache_update_index` out of its range `[0, S_max - S_new]` (`S_new` the
    length of `value`). A tensor index is not checked (its value is only
    known when it runs)."""
    if cache is None:
        if cache_update_index is not None:
            raise ValueError(
                "`cache_update_index` must be `None` when `cache` is "
                "`None`. Received: cache=None, "
                f"cache_update_index={cache_update_index!r}"
            )
        return
    shape = check.static_shape(cache.shape)
    if layer.value_dim != layer.key_dim:
        raise ValueError(
            "A `cache` holds keys and values stacked, so it needs "
            "`value_dim == key_dim`. Received: "
            f"key_dim={layer.key_dim}, value_dim={layer.value_dim}, "
            f"cache.shape={shape}"
        )
    expected = (
        check.static_size(tuple(query_shape)[0]),
        2,
        None,
        layer.num_heads,
        2 * layer.key_dim,
    )
    if len(shape) != 5 or any(
        size is not None and want is not None and size != want
        for size, want in zip(shape, expected)
    ):
        layout = ", ".join("S_max" if e is None else str(e) for e in expected)
        raise ValueError(
            "`cache` must have shape (B, 2, S_max, num_heads, "
            f"2 * key_dim) = ({layout}). Received: cache.shape={shape}"
        )
    if cache_update_index is None:
        return
    index = cache_update_index
    if isinstance(index, np.ndarray) and index.ndim == 0:
        index = index.item()
    if isinstance(index, (bool, np.bool_, float, np.floating)):
        raise ValueError(
            "`cache_update_index` must be an int or an int tensor. "
            f"Received: cache_update_index={cache_update_index!r}"
        )
    if not isinstance(index, (int, np.integer)):
        return  # a tensor: checked when it runs, not here
    new, length = check.static_size(tuple(value_shape)[1]), shape[2]
    high = None if None in (new, length) else length - new
    if index < 0 or (high is not None and index > high):
        raise ValueError(
            "`cache_update_index` must be in [0, S_max - S_new] = "
            f"[0, {'S_max - S_new' if high is None else high}] "
            f"(S_max={length}, the cache's length; S_new={new}, the "
            f"value's). Received: cache_update_index={int(index)}"
        )


def check_masks(
    num_heads,
    query_shape,
    value_shape,
    query_mask=None,
    value_mask=None,
    key_mask=None,
    attention_mask=None,
):
    """Raises a `ValueError` naming the mask whose static shape does not
    fit the inputs: `query_mask` `(B, T)`, `value_mask` and `key_mask`
    `(B, S)`, `attention_mask` as `check_attention_mask_shape` (with
    `num_heads` heads)."""
    batch, length = tuple(query_shape)[:2]
    keys = tuple(value_shape)[1]
    for name, mask, target, layout in (
        ("query_mask", query_mask, (batch, length), "(B, T)"),
        ("value_mask", value_mask, (batch, keys), "(B, S)"),
        ("key_mask", key_mask, (batch, keys), "(B, S)"),
    ):
        if mask is not None:
            core.check_mask_shape(mask_shape(mask), target, name, layout)
    if attention_mask is not None:
        check_attention_mask_shape(
            mask_shape(attention_mask),
            query_shape,
            value_shape,
            num_heads,
            "attention_mask",
        )
