"""The reference's models: `Transformer_Pred` and `Transformer_Generation`.

A model built by `music_classifier` or `music_generator` is recognised by
its layers' names and types (`model_kind`) and mapped, layer by layer, to
the reference's module names, in the order of its `state_dict`. `_mapping`
is the entry point for any object, a model or a layer; `_kind_error`
tells a checkpoint of the other model kind by its top-level module names.
"""

import keras

from cvattn_keras import layers as cl
from cvattn_keras.interop._mapping import _is_frontend
from cvattn_keras.interop._mapping import _layer_mapping
from cvattn_keras.interop._mapping import _nested

# Top-level module names of the reference models, for telling one kind of
# checkpoint from the other.
_CLASSIFIER_ONLY = ("conv", "in_embedding")
_GENERATOR_ONLY = (
    "conv_src",
    "in_embedding_src",
    "in_embedding_tgt",
    "decoder",
)
_REFERENCE_CLASS = {
    "classifier": "Transformer_Pred",
    "generator": "Transformer_Generation",
}


_SUPPORTED = (
    "ComplexDense, ComplexConv1D, ComplexBatchNormalization "
    '(convention="reference"), ComplexLayerNormalization, '
    "ComplexMultiHeadAttention, ComplexTransformerEncoder, "
    "ComplexTransformerDecoder, RealReadout, ComplexFrequencyFrontEnd, "
    "and the models of music_classifier and music_generator"
)


def _numbered(layers, stem):
    found = []
    while f"{stem}_{len(found)}" in layers:
        found.append(layers[f"{stem}_{len(found)}"])
    return found


def model_kind(model):
    """`"classifier"` or `"generator"`: which reference model `model`
    corresponds to, told by its layers' names and types (those of
    `music_classifier` and `music_generator`). A `ValueError` listing what
    is missing for a model that is neither."""
    return _model_layers(model)[0]


def _model_layers(model):
    layers = {layer.name: layer for layer in model.layers}
    generator = "note_embedding" in layers or "decoder_0" in layers
    kind = "generator" if generator else "classifier"
    wanted = {
        "frontend": _is_frontend,
        "embedding": lambda x: isinstance(x, cl.ComplexDense),
        "encoder_0": lambda x: isinstance(x, cl.ComplexTransformerEncoder),
        "head_dense": lambda x: isinstance(x, cl.ComplexDense),
        "head_notes": lambda x: isinstance(x, cl.ComplexDense),
        "note_logits": lambda x: isinstance(x, cl.RealReadout),
    }
    if generator:
        wanted["note_embedding"] = lambda x: isinstance(x, cl.ComplexDense)
        wanted["decoder_0"] = lambda x: isinstance(
            x, cl.ComplexTransformerDecoder
        )
    problems = []
    for name, test in wanted.items():
        if name not in layers:
            problems.append(f"no layer {name!r}")
        elif not test(layers[name]):
            problems.append(
                f"layer {name!r} is a {type(layers[name]).__name__}"
            )
    if problems:
        raise ValueError(
            f"The model {model.name!r} is not one of the reference's models "
            f"(as built by music_{kind}): {'; '.join(problems)}. Supported: "
            f"{_SUPPORTED}. Received layers: {sorted(layers)}"
        )
    bad = [
        layer.name
        for layer in _numbered(layers, "encoder")
        if not isinstance(layer, cl.ComplexTransformerEncoder)
    ] + [
        layer.name
        for layer in _numbered(layers, "decoder")
        if not isinstance(layer, cl.ComplexTransformerDecoder)
    ]
    if bad:
        raise ValueError(
            f"The model {model.name!r} has layers {bad} that are not "
            "transformer layers of the matching kind."
        )
    return kind, layers


def _model_mapping(model, options):
    kind, layers = _model_layers(model)
    generator = kind == "generator"
    head = [
        ("head_dense", "output_linear_1."),
        ("note_logits", "final_out."),
        ("head_notes", "output_linear_2."),
    ]
    if generator:
        pairs = [
            ("frontend", "conv_src."),
            ("embedding", "in_embedding_src."),
            ("note_embedding", "in_embedding_tgt."),
        ]
    else:
        pairs = [("frontend", "conv."), ("embedding", "in_embedding.")]
    # The reference's module order (its state_dict's key order).
    pairs += head
    pairs += [
        (layer.name, f"encoder.layers.{i}.")
        for i, layer in enumerate(_numbered(layers, "encoder"))
    ]
    if generator:
        pairs += [
            (layer.name, f"decoder.layers.{i}.")
            for i, layer in enumerate(_numbered(layers, "decoder"))
        ]
    parts = [
        _layer_mapping(layers[name], prefix, f"{name}.", options)
        for name, prefix in pairs
    ]
    return kind, _nested(parts)


def _mapping(obj, options):
    """`(kind, groups, keys)`; `kind` is "classifier"/"generator" for
    models, else `None`."""
    if isinstance(obj, keras.Model) and not _is_frontend(obj):
        kind, (groups, keys) = _model_mapping(obj, options)
        return kind, groups, keys
    if isinstance(obj, keras.layers.Layer):
        mapping = _layer_mapping(obj, "", "", options)
        if mapping is not None:
            return None, mapping[0], mapping[1]
    raise ValueError(
        f"There is no reference counterpart for {type(obj).__name__}. "
        f"Supported: {_SUPPORTED}. Received: {obj!r}"
    )


def _kind_error(kind, keys, strict_hint=True):
    """A message when `keys` are a checkpoint of the other model kind."""
    tops = {key.split(".", 1)[0] for key in keys}
    other = "generator" if kind == "classifier" else "classifier"
    foreign = _GENERATOR_ONLY if kind == "classifier" else _CLASSIFIER_ONLY
    own = _CLASSIFIER_ONLY if kind == "classifier" else _GENERATOR_ONLY
    found = sorted(tops & set(foreign))
    if not found or tops & set(own):
        return None
    return (
        f"The state dict is a checkpoint of the reference's "
        f"{_REFERENCE_CLASS[other]} (a {other}: it has keys "
        f"{', '.join(f'{t}.*' for t in found)}), but the model is a "
        f"{kind} (the reference's {_REFERENCE_CLASS[kind]}). Load it into "
        f"a model built by cvattn_keras.models.music_{other}"
        + (
            ", or pass strict=False to load only the parts they share."
            if strict_hint
            else "."
        )
    )
