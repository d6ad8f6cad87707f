"""The transformer layers' choice of self-attention layer (`attention=`,
`attention_options=`)."""

import importlib

_ATTENTIONS = {
    "multi_head": ("attention", "ComplexMultiHeadAttention"),
    "low_rank": ("low_rank", "ComplexLowRankAttention"),
    "sparse": ("sparse", "ComplexSparseAttention"),
    "lsh": ("lsh", "ComplexLSHAttention"),
    "gated_unit": ("gau", "ComplexGatedAttentionUnit"),
}
"""The `attention` choices of the transformer layers: the self-attention's
layer (its module under `cvattn_keras.layers`, and its class)."""

# The attention options that only `ComplexMultiHeadAttention` takes.
_MULTI_HEAD_ONLY = ("rotary_max_wavelength", "sliding_window")


def attention_class(name):
    module, cls = _ATTENTIONS[name]
    return getattr(
        importlib.import_module(f"cvattn_keras.layers.{module}"), cls
    )


def check_attention(attention, attention_options, options):
    """`attention` one of `_ATTENTIONS`, `attention_options` `None` or a
    dict with string keys; another layer than multi-head attention with
    `rotary_max_wavelength` or `sliding_window` is refused. Returns the
    options as a new dict."""
    if not isinstance(attention, str) or attention not in _ATTENTIONS:
        raise ValueError(
            f"`attention` must be one of {list(_ATTENTIONS)}. "
            f"Received: attention={attention!r}"
        )
    if attention_options is None:
        attention_options = {}
    if not isinstance(attention_options, dict) or not all(
        isinstance(key, str) for key in attention_options
    ):
        raise ValueError(
            "`attention_options` must be None or a dict of the attention "
            "layer's constructor arguments by name. Received: "
            f"attention_options={attention_options!r}"
        )
    if attention != "multi_head":
        for name in _MULTI_HEAD_ONLY:
            if options.get(name) is not None:
                raise ValueError(
                    f"`{name}` is an option of the multi-head attention; "
                    f'attention="{attention}" does not take it. Received: '
                    f"{name}={options[name]!r}"
                )
    return dict(attention_options)
