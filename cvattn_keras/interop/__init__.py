"""Weights of the reference PyTorch implementation (Eilers & Jiang's code).

`load_reference_state_dict` loads a reference `state_dict` (its parameter
names mapped to torch tensors or NumPy arrays) into the matching object of
this library, and `reference_state_dict` is the inverse: NumPy arrays in
the reference's names, shapes and dtypes, which the reference module takes
with `load_state_dict`. Nothing here imports torch: tensors are recognised
by their `detach`/`cpu`/`numpy` methods. The command line
`python -m cvattn_keras.interop CHECKPOINT.pt OUT.keras --model classifier`
turns a `torch.save`d checkpoint into a `.keras` file (it needs torch).

Mappings (library object -> reference module; reference names relative
to the object being loaded):

- `ComplexDense` -> `ComplexLinear`: `kernel_real` = `Linear_real.weight`
  transposed, `kernel_imag` = `Linear_img.weight` transposed (weights are
  `[out, in]` there); `bias_real` = `b_r - b_i`, `bias_imag` = `b_r + b_i`
  of `b_r` = `Linear_real.bias`, `b_i` = `Linear_img.bias`.
- `ComplexConv1D` (kernel `(k, in, out)`) -> `Complex_Conv1d`:
  `Conv_real.weight`, `Conv_imag.weight` `[out, in, k]`, biases as above.
- `ComplexBatchNormalization(convention="reference")` ->
  `Complex_BatchNorm1d`: `w0, w1, w2` = `weights[:, 0, k, 0]` (float32
  `(C, 1, 3, 1)`); `bias_real + i bias_imag` = `bias` (complex64
  `(1, C, 1)`); `moving_mean_real + i moving_mean_imag` = `running_mean`
  (complex64 `(1, C, 1)`, untrained `(C,)`); `moving_whitening_rr, _ri,
  _ir, _ii` = `running_cov[0, c]` = `[[rr, ri], [ir, ii]]` (float32
  `(1, C, 2, 2)`, R the inverse square root; untrained the identity
  `(C, C)`).
- `ComplexLayerNormalization` (whitening) -> `Complex_LayerNorm`:
  `w0, w1, w2` = `weights[:, k, 0]` (float32 `(E, 3, 1)`), `bias_real +
  i bias_imag` = `bias` (complex64 `(1, 1, E)`).
- `ComplexMultiHeadAttention` -> `MultiheadAttention`: `query_dense`,
  `key_dense`, `value_dense`, `output_dense` -> `in_proj_q`, `in_proj_k`,
  `in_proj_v`, `out_proj`.
- `ComplexTransformerEncoder` -> `TransformerEncoderLayer`:
  `self_attention` -> `self_attn`, `feedforward_in` -> `linear1`,
  `feedforward_out` -> `linear2`, `self_attention_norm` ->
  `layer_norms.0`, `feedforward_norm` -> `layer_norms.1`.
- `ComplexTransformerDecoder` -> `TransformerDecoderLayer`:
  `self_attention` -> `self_attn` (causal), `cross_attention` -> `attn`,
  `feedforward_in`, `feedforward_out` -> `linear1`, `linear2`,
  `self_attention_norm`, `cross_attention_norm`, `feedforward_norm` ->
  `layer_norms.0`, `layer_norms.1`, `layer_norms.2`.
- `RealReadout` -> `final_out`, an `nn.Linear(2, 1)` over (Re, Im):
  `kernel` (2,) = `weight[0]` of `(1, 2)`, `bias` () = `bias[0]` of `(1,)`.
- `ComplexFrequencyFrontEnd` -> the front end `nn.Sequential`:
  `convolutions[b]` -> `{3b}`, `norms[b]` -> `{3b + 1}`.
- a `music_classifier` model -> `Transformer_Pred`: `frontend` -> `conv`,
  `embedding` -> `in_embedding`, `encoder_{i}` -> `encoder.layers.{i}`,
  `head_dense` -> `output_linear_1`, `head_notes` -> `output_linear_2`,
  `note_logits` -> `final_out`.
- a `music_generator` model -> `Transformer_Generation`: `frontend` ->
  `conv_src`, `embedding` -> `in_embedding_src`, `note_embedding` ->
  `in_embedding_tgt`, `encoder_{i}` -> `encoder.layers.{i}`, `decoder_{i}`
  -> `decoder.layers.{i}`, and the classifier's head.

A model is recognised by its layers' names and types, not by the function
that built it.

Only weights travel. What the reference fixes in its constructors (the
number of heads, strides, the attention variant, dropout rates) is not in
a state dict: the object must be built with the same values (the model
builders' defaults are the reference's; the command line takes them as
options). An object whose variables cannot mean what the reference's
parameters mean is a `ValueError`: a `ComplexBatchNormalization` of the
Trabelsi convention, a naive or RMS layer norm, a norm with only one of
`center` and `scale` (the reference has both or neither), a decoder
without cross-attention.

The redundant bias pair. `ComplexLinear` and `Complex_Conv1d` add
`b_r` and `b_i` so that the effective complex bias is
`(b_r - b_i) + i (b_r + b_i)`; the loader computes it in float64 and
rounds once to the variables' float32 (the nearest float32 to the exact
value). The inverse cannot always be exact: for `bias_real = 1 + 2**-23`,
`bias_imag = 1` no float32 pair `(b_r, b_i)` has these rounded sum and
difference. `reference_state_dict` searches the float32 neighbours of
`((x + y) / 2, (y - x) / 2)` (two units in the last place either way) for
a pair that loads back bit-exactly, and takes the candidate nearest to
the target otherwise. Measured over 200,000 random biases each: every
bias that came from a reference checkpoint (any bias the loader can
produce) has such a pair and the search finds it, so reference ->
library -> reference -> library is bitwise exact, whatever the scales.
Of arbitrary float32 biases (e.g. trained in Keras) about half have no
exact pair: 50.9% are exact for independent standard-normal parts, 2.8%
when the two parts' scales differ by up to 1e40, 100% for zero biases
(the initial ones); the others load back within one unit in the last
place of the larger of `|bias_real|`, `|bias_imag|` (the smaller part
can lose relative precision: the reference's parametrisation cannot
represent it).
"""

import dataclasses

import keras
import numpy as np

from cvattn_keras import layers as cl

__all__ = [
    "LoadResult",
    "bias_to_pair",
    "load_reference_state_dict",
    "model_kind",
    "reference_state_dict",
]

# The float32 neighbours searched per part of a bias pair: -2 ... +2 units
# in the last place (every loader-produced bias needed at most 1).
_BIAS_SEARCH_ULPS = 2

BATCH_NORM_STATISTICS = ("trained", "untrained")

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


# --------------------------------------------------------------------------
# Conversions of single parameters.
# --------------------------------------------------------------------------


def _pair_to_bias(b_r, b_i):
    """The loader's effective bias `(b_r - b_i, b_r + b_i)`, in float64 (the
    caller rounds once to the variables' dtype)."""
    b_r = np.asarray(b_r, np.float64)
    b_i = np.asarray(b_i, np.float64)
    return b_r - b_i, b_r + b_i


def _loads_to(b_r, b_i, dtype):
    real, imag = _pair_to_bias(b_r, b_i)
    return real.astype(dtype), imag.astype(dtype)


def _step(values, count):
    """`values` moved by `count` float32 units in the last place."""
    direction = np.float32(np.inf if count > 0 else -np.inf)
    for _ in range(abs(count)):
        values = np.nextafter(values, direction).astype(np.float32)
    return values


def bias_to_pair(bias_real, bias_imag):
    """A float32 pair `(b_r, b_i)` for the reference's `Linear_real.bias`
    and `Linear_img.bias` whose effective bias `(b_r - b_i, b_r + b_i)`,
    computed in float64 and rounded to float32, is `(bias_real,
    bias_imag)` bit for bit wherever such a pair exists (see the module
    docstring); elsewhere the searched pair that loads nearest to it
    (within one unit in the last place of the larger part).

    Returns `(b_r, b_i, exact)`, `exact` a boolean array: where the pair
    loads back bit-exactly.
    """
    x = np.asarray(bias_real, np.float32)
    y = np.asarray(bias_imag, np.float32)
    wide_x, wide_y = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        base_r = ((wide_x + wide_y) / 2).astype(np.float32)
        base_i = ((wide_y - wide_x) / 2).astype(np.float32)
    b_r, b_i = base_r.copy(), base_i.copy()
    exact = np.zeros(x.shape, bool)
    # Elsewhere the candidate with the smallest error, in units in the last
    # place of each part (the larger of the two).
    unit_x = np.spacing(np.abs(x)).astype(np.float64)
    unit_y = np.spacing(np.abs(y)).astype(np.float64)
    best = np.full(x.shape, np.inf)
    span = range(-_BIAS_SEARCH_ULPS, _BIAS_SEARCH_ULPS + 1)
    # Nearest candidates first.
    offsets = sorted(
        ((a, b) for a in span for b in span),
        key=lambda p: abs(p[0]) + abs(p[1]),
    )
    with np.errstate(over="ignore", invalid="ignore"):
        for a, b in offsets:
            if exact.all():
                break
            cand_r, cand_i = _step(base_r, a), _step(base_i, b)
            got_x, got_y = _loads_to(cand_r, cand_i, np.float32)
            error = np.maximum(
                np.abs(got_x.astype(np.float64) - x) / unit_x,
                np.abs(got_y.astype(np.float64) - y) / unit_y,
            )
            hit = (
                ~exact
                & (got_x.view(np.uint32) == x.view(np.uint32))
                & (got_y.view(np.uint32) == y.view(np.uint32))
            )
            better = ~exact & (hit | (error < best))
            b_r[better], b_i[better] = cand_r[better], cand_i[better]
            best = np.where(better, error, best)
            exact |= hit
    return b_r, b_i, exact


def _identity(array):
    return [array.astype(np.float64)]


def _transpose(array):
    return [array.astype(np.float64).T]


def _conv_kernel(array):
    # Reference [out, in, k] -> ours (k, in, out).
    return [np.transpose(array.astype(np.float64), (2, 1, 0))]


def _complex_parts(array):
    array = array.astype(np.complex128).reshape(-1)
    return [array.real, array.imag]


# --------------------------------------------------------------------------
# The mapping: groups of reference keys <-> groups of variables.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class _Key:
    name: str
    shapes: tuple  # accepted shapes; the first is the one written
    complex: bool  # the reference's dtype: complex64 or float32
    labels: tuple = ()  # what each accepted shape is, for messages


@dataclasses.dataclass
class _Group:
    """Reference keys and the library variables they determine together.

    `load(arrays, shapes)` turns the received arrays into one float64 array
    per variable (or raises `_Mismatch`); `save(values)` turns the
    variables' values into the reference's arrays, one per key.
    """

    keys: list
    variables: list  # [(path, variable)]
    load: object
    save: object


class _Mismatch(Exception):
    pass


def _var(layer, name, path):
    variable = getattr(layer, name, None)
    if variable is None:
        raise ValueError(
            f"{_describe(layer)} has no variable `{name}`; it cannot hold "
            "the reference's parameters."
        )
    return (f"{path}{name}", variable)


def _describe(layer):
    return f"{type(layer).__name__} {getattr(layer, 'name', '')!r}".strip()


def _check_built(layer):
    if not getattr(layer, "built", False):
        raise ValueError(
            f"{_describe(layer)} is not built: call it on an input (or "
            "build it) before loading or reading reference weights."
        )


def _shape(variable):
    return tuple(int(d) for d in variable.shape)


def _single(key, variable, load, save):
    return _Group(
        [key], [variable], lambda arrays: load(arrays[0]), lambda v: [save(v)]
    )


def _linear_like(layer, prefix, path, real_module, imag_module, conv):
    """ComplexDense <-> ComplexLinear, ComplexConv1D <-> Complex_Conv1d."""
    _check_built(layer)
    kernel_real = _var(layer, "kernel_real", path)
    kernel_imag = _var(layer, "kernel_imag", path)
    shape = _shape(kernel_real[1])
    if conv:
        ref_shape = (shape[2], shape[1], shape[0])
        load, save = _conv_kernel, lambda v: np.transpose(v[0], (2, 1, 0))
    else:
        ref_shape = (shape[1], shape[0])
        load, save = _transpose, lambda v: v[0].T
    groups = []
    keys = []
    for module, variable in (
        (real_module, kernel_real),
        (imag_module, kernel_imag),
    ):
        key = _Key(f"{prefix}{module}.weight", (ref_shape,), False)
        groups.append(_single(key, variable, load, save))
        keys.append(key.name)
    if layer.use_bias:
        bias_real = _var(layer, "bias_real", path)
        bias_imag = _var(layer, "bias_imag", path)
        units = (ref_shape[0],)
        pair = [
            _Key(f"{prefix}{real_module}.bias", (units,), False),
            _Key(f"{prefix}{imag_module}.bias", (units,), False),
        ]

        def save_bias(values):
            b_r, b_i, _ = bias_to_pair(*values)
            return [b_r, b_i]

        groups.append(
            _Group(
                pair,
                [bias_real, bias_imag],
                lambda arrays: list(_pair_to_bias(*arrays)),
                save_bias,
            )
        )
        keys.insert(1, pair[0].name)
        keys.append(pair[1].name)
    return groups, keys


def _dense(layer, prefix, path):
    return _linear_like(layer, prefix, path, "Linear_real", "Linear_img", False)


def _conv(layer, prefix, path):
    return _linear_like(layer, prefix, path, "Conv_real", "Conv_imag", True)


def _affine_flags(layer):
    """(scale, center) of a norm, which must be both or neither."""
    scale, center = bool(layer.scale), bool(layer.center)
    if scale != center:
        raise ValueError(
            f"{_describe(layer)} has scale={scale}, center={center}; the "
            "reference's norms have both the scale and the bias "
            "(`elementwise_affine=True`) or neither. Build it with "
            "scale and center equal."
        )
    return scale


def _scale_group(layer, key_name, ref_shape, path, index):
    """`weights` -> w0, w1, w2: `index(weights, k)` is the k-th."""
    variables = [_var(layer, f"w{k}", path) for k in range(3)]
    key = _Key(key_name, (ref_shape,), False)

    def load(arrays):
        return [index(arrays[0].astype(np.float64), k) for k in range(3)]

    def save(values):
        weights = np.zeros(ref_shape, np.float32)
        for k, value in enumerate(values):
            index(weights, k)[...] = value
        return [weights]

    return _Group([key], variables, load, save)


def _complex_group(layer, key_name, ref_shapes, labels, names, path):
    """A complex reference tensor <-> a (real, imag) pair of variables."""
    variables = [_var(layer, name, path) for name in names]
    key = _Key(key_name, ref_shapes, True, labels)
    return _Group(
        [key],
        variables,
        lambda arrays: _complex_parts(arrays[0]),
        lambda values: [
            (values[0] + 1j * values[1])
            .astype(np.complex64)
            .reshape(ref_shapes[0])
        ],
    )


def _layer_norm(layer, prefix, path):
    _check_built(layer)
    if getattr(layer, "method", None) != "whitening":
        raise ValueError(
            f"{_describe(layer)} is not the paper's whitening layer norm "
            f"(method={getattr(layer, 'method', None)!r}); the reference's "
            "`Complex_LayerNorm` needs `ComplexLayerNormalization("
            'method="whitening")`.'
        )
    if not _affine_flags(layer):
        return [], []
    features = _shape(layer.w0)[0]
    groups = [
        _scale_group(
            layer,
            f"{prefix}weights",
            (features, 3, 1),
            path,
            lambda w, k: w[:, k, 0],
        ),
        _complex_group(
            layer,
            f"{prefix}bias",
            ((1, 1, features),),
            (),
            ("bias_real", "bias_imag"),
            path,
        ),
    ]
    return groups, [f"{prefix}weights", f"{prefix}bias"]


def _batch_norm(layer, prefix, path, statistics="trained"):
    _check_built(layer)
    if getattr(layer, "convention", "trabelsi") != "reference":
        raise ValueError(
            f"{_describe(layer)} uses the Trabelsi convention, whose "
            "variables (a moving covariance, the scale G) cannot reproduce "
            "the reference's `Complex_BatchNorm1d` (which stores R, the "
            "inverse square root, and scales by R sqrtm(Gamma)). Build it "
            'with `ComplexBatchNormalization(convention="reference")` '
            '(`ComplexFrequencyFrontEnd(batch_norm_convention="reference")`'
            ", the default)."
        )
    channels = _shape(layer.moving_mean_real)[0]
    groups, keys = [], []
    if _affine_flags(layer):
        groups.append(
            _scale_group(
                layer,
                f"{prefix}weights",
                (channels, 1, 3, 1),
                path,
                lambda w, k: w[:, 0, k, 0],
            )
        )
        groups.append(
            _complex_group(
                layer,
                f"{prefix}bias",
                ((1, channels, 1),),
                (),
                ("bias_real", "bias_imag"),
                path,
            )
        )
        keys += [f"{prefix}weights", f"{prefix}bias"]
    trained = statistics == "trained"
    mean_shapes = ((1, channels, 1), (channels,))
    cov_shapes = ((1, channels, 2, 2), (channels, channels))
    labels = ("trained", "untrained placeholder")
    if not trained:
        mean_shapes, cov_shapes, labels = (
            mean_shapes[::-1],
            cov_shapes[::-1],
            labels[::-1],
        )
    mean = _complex_group(
        layer,
        f"{prefix}running_mean",
        mean_shapes,
        labels,
        ("moving_mean_real", "moving_mean_imag"),
        path,
    )
    names = [f"moving_whitening_{e}" for e in ("rr", "ri", "ir", "ii")]
    cov_key = _Key(f"{prefix}running_cov", cov_shapes, False, labels)

    def load_cov(arrays):
        array = arrays[0].astype(np.float64)
        if array.ndim == 2:  # the untrained placeholder: must be I
            if not np.array_equal(array, np.eye(channels)):
                raise _Mismatch(
                    "an untrained placeholder (C, C) must be the identity "
                    "the reference creates (it holds no statistics)"
                )
            eye = np.ones(channels), np.zeros(channels)
            return [eye[0], eye[1], eye[1], eye[0]]
        return [array[0, :, i, j] for i in (0, 1) for j in (0, 1)]

    def save_cov(values):
        if trained:
            array = np.zeros((1, channels, 2, 2), np.float32)
            for n, (i, j) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
                array[0, :, i, j] = values[n]
            return [array]
        return [np.eye(channels, dtype=np.float32)]

    cov = _Group(
        [cov_key], [_var(layer, n, path) for n in names], load_cov, save_cov
    )
    if not trained:
        # The placeholders cannot hold statistics: only the initial ones
        # (mean 0, R = I) may be written that way.
        mean.save = _untrained_mean_save(layer, channels, mean.save)
        cov.save = _untrained_cov_save(layer, save_cov)
    groups += [mean, cov]
    keys += [f"{prefix}running_mean", f"{prefix}running_cov"]
    return groups, keys


def _not_initial(layer):
    return ValueError(
        f"{_describe(layer)} has moving statistics other than the initial "
        "ones (mean 0, R = I), which the reference's untrained placeholders "
        "(running_mean (C,), running_cov (C, C)) cannot hold. Use "
        'batch_norm_statistics="trained" and run one training-mode forward '
        "pass on the reference module before `load_state_dict` (its buffers "
        "then have the trained shapes)."
    )


def _untrained_mean_save(layer, channels, save):
    def run(values):
        if np.any(values[0] != 0) or np.any(values[1] != 0):
            raise _not_initial(layer)
        return [np.zeros((channels,), np.complex64)]

    return run


def _untrained_cov_save(layer, save):
    def run(values):
        rr, ri, ir, ii = values
        if (
            np.any(rr != 1)
            or np.any(ii != 1)
            or np.any(ri != 0)
            or np.any(ir != 0)
        ):
            raise _not_initial(layer)
        return save(values)

    return run


def _readout(layer, prefix, path):
    _check_built(layer)
    kernel = _var(layer, "kernel", path)
    bias = _var(layer, "bias", path)
    groups = [
        _single(
            _Key(f"{prefix}weight", ((1, 2),), False),
            kernel,
            lambda a: [a.astype(np.float64)[0]],
            lambda v: v[0].reshape(1, 2),
        ),
        _single(
            _Key(f"{prefix}bias", ((1,),), False),
            bias,
            lambda a: [a.astype(np.float64).reshape(())],
            lambda v: v[0].reshape(1),
        ),
    ]
    return groups, [f"{prefix}weight", f"{prefix}bias"]


def _nested(parts):
    """Concatenates the (groups, keys) of several sub-mappings."""
    groups, keys = [], []
    for sub_groups, sub_keys in parts:
        groups += sub_groups
        keys += sub_keys
    return groups, keys


def _attention(layer, prefix, path):
    _check_built(layer)
    return _nested(
        _dense(getattr(layer, attr), f"{prefix}{module}.", f"{path}{attr}.")
        for attr, module in (
            ("query_dense", "in_proj_q"),
            ("key_dense", "in_proj_k"),
            ("value_dense", "in_proj_v"),
            ("output_dense", "out_proj"),
        )
    )


def _transformer(layer, prefix, path):
    _check_built(layer)
    if getattr(layer, "normalization", "whitening") != "whitening":
        raise ValueError(
            f"{_describe(layer)} uses normalization="
            f"{layer.normalization!r}; the reference's layers use the "
            'whitening layer norm (normalization="whitening").'
        )
    decoder = isinstance(layer, cl.ComplexTransformerDecoder)
    if decoder and layer.cross_attention is None:
        raise ValueError(
            f"{_describe(layer)} was built without an `encoder_sequence`, "
            "so it has no cross-attention; the reference's decoder layer "
            "always has one (`attn`). Build it with the encoder's shape."
        )
    if decoder:
        attentions = [
            ("self_attention", "self_attn"),
            ("cross_attention", "attn"),
        ]
        norms = ["self_attention_norm", "cross_attention_norm"]
    else:
        attentions = [("self_attention", "self_attn")]
        norms = ["self_attention_norm"]
    norms.append("feedforward_norm")
    parts = [
        _attention(getattr(layer, attr), f"{prefix}{module}.", f"{path}{attr}.")
        for attr, module in attentions
    ]
    parts += [
        _dense(getattr(layer, attr), f"{prefix}{module}.", f"{path}{attr}.")
        for attr, module in (
            ("feedforward_in", "linear1"),
            ("feedforward_out", "linear2"),
        )
    ]
    parts += [
        _layer_norm(
            getattr(layer, attr), f"{prefix}layer_norms.{i}.", f"{path}{attr}."
        )
        for i, attr in enumerate(norms)
    ]
    return _nested(parts)


def _is_frontend(layer):
    frontend = getattr(cl, "ComplexFrequencyFrontEnd", None)
    if frontend is not None and isinstance(layer, frontend):
        return True
    return isinstance(getattr(layer, "convolutions", None), list) and (
        isinstance(getattr(layer, "norms", None), list)
    )


def _frontend(layer, prefix, path, options):
    _check_built(layer)
    parts = []
    for b, (conv, norm) in enumerate(zip(layer.convolutions, layer.norms)):
        parts.append(
            _conv(conv, f"{prefix}{3 * b}.", f"{path}convolutions.{b}.")
        )
        parts.append(
            _batch_norm(
                norm,
                f"{prefix}{3 * b + 1}.",
                f"{path}norms.{b}.",
                options["batch_norm_statistics"],
            )
        )
    return _nested(parts)


def _layer_mapping(layer, prefix, path, options):
    """(groups, keys) of one layer, or `None` for an unsupported type."""
    if isinstance(layer, cl.ComplexDense):
        return _dense(layer, prefix, path)
    if isinstance(layer, cl.ComplexConv1D):
        return _conv(layer, prefix, path)
    if isinstance(layer, cl.ComplexBatchNormalization):
        return _batch_norm(
            layer, prefix, path, options["batch_norm_statistics"]
        )
    if isinstance(layer, cl.ComplexLayerNormalization):
        return _layer_norm(layer, prefix, path)
    if isinstance(layer, cl.ComplexMultiHeadAttention):
        return _attention(layer, prefix, path)
    if isinstance(
        layer, (cl.ComplexTransformerEncoder, cl.ComplexTransformerDecoder)
    ):
        return _transformer(layer, prefix, path)
    if isinstance(layer, cl.RealReadout):
        return _readout(layer, prefix, path)
    if isinstance(layer, keras.layers.Layer) and _is_frontend(layer):
        return _frontend(layer, prefix, path, options)
    return None


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


# --------------------------------------------------------------------------
# Loading.
# --------------------------------------------------------------------------


def _to_numpy(value):
    """A NumPy array from a NumPy array, a torch tensor (duck-typed: no
    torch import) or anything `np.asarray` takes."""
    if all(hasattr(value, a) for a in ("detach", "cpu", "numpy")):
        tensor = value.detach().cpu()
        for method in ("resolve_conj", "resolve_neg"):
            if hasattr(tensor, method):
                tensor = getattr(tensor, method)()
        # NumPy has no bfloat16, float8 or complex32 (torch's chalf):
        # widen them first (exactly: complex32 to complex64, the others to
        # float32).
        dtype = str(getattr(tensor, "dtype", ""))
        if "complex32" in dtype or "chalf" in dtype:
            tensor = tensor.cfloat()
        elif "bfloat16" in dtype or "float8" in dtype:
            tensor = tensor.float()
        return np.asarray(tensor.numpy())
    return np.asarray(value)


def _dtype_name(complex_):
    return "complex (complex64)" if complex_ else "real (float32)"


def _check_array(key, value):
    """The array for `key`, or a mismatch message."""
    try:
        array = _to_numpy(value)
    except Exception as error:  # anything that is not array-like
        return None, f"not an array or tensor ({type(value).__name__}: {error})"
    if array.dtype.kind not in "fc":
        return None, (
            f"expected a {_dtype_name(key.complex)} tensor, received "
            f"dtype {array.dtype}"
        )
    if key.complex != (array.dtype.kind == "c"):
        return None, (
            f"expected a {_dtype_name(key.complex)} tensor, received a "
            f"{'complex' if array.dtype.kind == 'c' else 'real'} one "
            f"({array.dtype})"
        )
    if tuple(array.shape) not in key.shapes:
        expected = " or ".join(
            f"{shape}" + (f" ({label})" if label else "")
            for shape, label in zip(
                key.shapes, key.labels or ("",) * len(key.shapes)
            )
        )
        return None, (
            f"expected shape {expected}, received {tuple(array.shape)}"
        )
    return array, None


@dataclasses.dataclass(frozen=True)
class LoadResult:
    """What `load_reference_state_dict` did.

    Attributes:
        loaded: dict, each loaded reference key -> the tuple of library
            variable paths it set (attribute paths from the object loaded,
            e.g. `"encoder_0.self_attention.query_dense.kernel_real"`).
            The two keys of a bias pair both list both bias variables.
        missing: reference keys the object needs that were not given.
        unexpected: given keys the object has no place for.
        mismatched: `(key, problem)` pairs: a wrong shape or dtype (the
            message names the expected and the received), or a partner of
            a bias pair missing.
        parameters: the number of real numbers loaded.
    """

    loaded: dict
    missing: tuple
    unexpected: tuple
    mismatched: tuple
    parameters: int

    def __str__(self):
        lines = [
            f"{key} -> {', '.join(paths)}" for key, paths in self.loaded.items()
        ]
        lines.append(
            f"loaded {len(self.loaded)} reference tensors "
            f"({self.parameters:,} real numbers, batch-norm statistics"
            " included)"
        )
        lines += _problem_lines(self.missing, self.unexpected, self.mismatched)
        return "\n".join(lines)


def _problem_lines(missing, unexpected, mismatched):
    lines = []
    if missing:
        lines.append(f"missing keys ({len(missing)}): {', '.join(missing)}")
    if unexpected:
        lines.append(
            f"unexpected keys ({len(unexpected)}): {', '.join(unexpected)}"
        )
    for key, problem in mismatched:
        lines.append(f"mismatch {key}: {problem}")
    return lines


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


def _prefix_hint(missing, unexpected):
    """A suggested `prefix` when the given keys look like the expected ones
    behind a common prefix."""
    counts = {}
    for key in missing[:20]:
        for other in unexpected:
            if other.endswith("." + key):
                candidate = other[: -len(key)]
                counts[candidate] = counts.get(candidate, 0) + 1
    if not counts:
        return ""
    best = max(counts, key=counts.get)
    return (
        f" The given keys look like the expected ones behind the prefix "
        f"{best!r}: pass prefix={best!r} (e.g. a whole model's checkpoint "
        "loaded into one of its layers, or a `module.` of DataParallel)."
    )


def load_reference_state_dict(
    model_or_layer, state_dict, strict=True, prefix=""
):
    """Loads a reference `state_dict` into a model or layer of this library.

    The weights are the reference's; its arithmetic also needs the layer
    norms without epsilon: build the model with `layer_norm_epsilon=0`
    (`music_classifier`, `music_generator`; the command line's default)
    or the layer with `ComplexLayerNormalization(epsilon=0)`. With the
    builders' default 1e-5 the outputs differ by about `1e-5 / variance`,
    most of the remaining difference.

    Args:
        model_or_layer: a built object with a reference counterpart (see
            the module docstring's table): a layer, or a model built by
            `music_classifier` / `music_generator` (recognised by its
            layers' names and types).
        state_dict: a mapping from the reference's parameter names,
            relative to the module that corresponds to `model_or_layer`
            (`"encoder.layers.0.self_attn.in_proj_q.Linear_real.weight"`
            for a model, `"Linear_real.weight"` for a `ComplexDense`), to
            torch tensors or NumPy arrays (any float or complex precision,
            also torch's bfloat16, float8 and complex32, widened exactly;
            the loader computes in float64 and rounds once to the
            variables' dtype). The reference's complex parameters (the
            norms' `bias`, the batch norm's `running_mean`) must be
            complex and its real ones real: the other kind is a mismatch,
            never a silent cast. A batch norm's buffers may have the
            trained shapes or the untrained placeholders' (`(C,)` and the
            identity `(C, C)`, which load as mean 0 and R = I).
        strict: if `True` (default), any missing key, unexpected key or
            mismatch (shape or dtype) raises one `ValueError` listing them
            all, and nothing is loaded; a checkpoint of the other model
            kind (a generator's into a classifier or the reverse) raises a
            `ValueError` saying so. If `False`, what matches is loaded
            and the rest is reported in the result.
        prefix: only keys starting with `prefix` are considered, with it
            removed (`"encoder.layers.0."` to load one layer of a whole
            model's checkpoint, `"module."` for a DataParallel one).

    Returns:
        A `LoadResult`: the loaded keys and the variables each one set, and
        what was missing, unexpected or mismatched (empty when strict).

    Raises:
        ValueError: as above, and for an object without a reference
            counterpart, an unbuilt one, or one whose variables cannot
            hold the reference's parameters (a Trabelsi-convention batch
            norm, a naive layer norm, ...).
    """
    if not hasattr(state_dict, "keys") or not hasattr(state_dict, "items"):
        raise ValueError(
            "`state_dict` must be a mapping from the reference's parameter "
            "names to tensors or arrays. Received: "
            f"state_dict of type {type(state_dict).__name__}"
        )
    if not isinstance(prefix, str):
        raise ValueError(
            f"`prefix` must be a string. Received: prefix={prefix!r}"
        )
    if not isinstance(strict, bool):
        raise ValueError(
            f"`strict` must be True or False. Received: strict={strict!r}"
        )
    kind, groups, order = _mapping(
        model_or_layer, {"batch_norm_statistics": "trained"}
    )
    given = {}
    for key, value in state_dict.items():
        if not isinstance(key, str):
            raise ValueError(
                "The keys of `state_dict` must be strings (the reference's "
                f"parameter names). Received the key {key!r}"
            )
        if key.startswith(prefix):
            given[key[len(prefix) :]] = value
    if strict and kind is not None:
        message = _kind_error(kind, given)
        if message:
            raise ValueError(message)
    expected = {key.name for group in groups for key in group.keys}
    unexpected = [key for key in given if key not in expected]
    missing, mismatched, updates, loaded = [], [], [], {}
    for group in groups:
        arrays, problems = [], []
        for key in group.keys:
            if key.name not in given:
                missing.append(key.name)
                continue
            array, problem = _check_array(key, given[key.name])
            if problem:
                problems.append((key.name, problem))
            arrays.append(array)
        if not problems and len(arrays) == len(group.keys):
            try:
                values = group.load(arrays)
            except _Mismatch as error:
                problems.append((group.keys[0].name, str(error)))
        mismatched += problems
        if problems or len(arrays) != len(group.keys):
            for key in group.keys:
                if key.name in given and key.name not in dict(problems):
                    others = [k.name for k in group.keys if k is not key]
                    mismatched.append(
                        (
                            key.name,
                            f"not loaded: it makes one parameter with "
                            f"{', '.join(others)}, which is missing or "
                            "mismatched",
                        )
                    )
            continue
        paths = tuple(path for path, _ in group.variables)
        for (path, variable), value in zip(group.variables, values):
            value = np.asarray(value)
            if value.shape != _shape(variable):  # an internal invariant
                raise RuntimeError(
                    f"interop computed shape {value.shape} for {path}, "
                    f"whose shape is {_shape(variable)}"
                )
            updates.append((variable, value))
        for key in group.keys:
            loaded[key.name] = paths
    rank = {name: i for i, name in enumerate(order)}
    missing.sort(key=rank.get)
    mismatched.sort(key=lambda item: rank.get(item[0], 0))
    if strict and (missing or unexpected or mismatched):
        lines = _problem_lines(missing, unexpected, mismatched)
        raise ValueError(
            f"The state dict does not fit {_describe(model_or_layer)} "
            f"(strict=True): "
            + "; ".join(lines)
            + "."
            + _prefix_hint(missing, unexpected)
        )
    count = 0
    for variable, value in updates:
        variable.assign(
            value.astype(keras.backend.standardize_dtype(variable.dtype))
        )
        count += value.size
    loaded = {name: loaded[name] for name in order if name in loaded}
    return LoadResult(
        loaded=loaded,
        missing=tuple(missing),
        unexpected=tuple(unexpected),
        mismatched=tuple(mismatched),
        parameters=count,
    )


# --------------------------------------------------------------------------
# Saving.
# --------------------------------------------------------------------------


def reference_state_dict(model_or_layer, batch_norm_statistics="trained"):
    """The weights of `model_or_layer` as a reference `state_dict`.

    Args:
        model_or_layer: as for `load_reference_state_dict`.
        batch_norm_statistics: the shapes of the batch norms'
            `running_mean` and `running_cov`. `"trained"` (default):
            `(1, C, 1)` and `(1, C, 2, 2)`, the shapes a reference module
            has after one training step (run one training-mode forward
            pass on it before `load_state_dict`, as the reference's
            scripts do before loading). `"untrained"`: the placeholders of
            a fresh module, `(C,)` zeros and the identity `(C, C)`; they
            cannot hold statistics, so this is a `ValueError` unless every
            batch norm still has its initial ones (mean 0, R = I).

    Returns:
        A dict from the reference's parameter names (in the order of its
        modules' `state_dict`) to NumPy arrays in its shapes and dtypes:
        float32, complex64 for its complex parameters. Each pair
        `Linear_real.bias`, `Linear_img.bias` (and the convolutions')
        is chosen to load back bit-exactly where possible (see the module
        docstring).
    """
    if batch_norm_statistics not in BATCH_NORM_STATISTICS:
        raise ValueError(
            "`batch_norm_statistics` must be one of "
            f"{list(BATCH_NORM_STATISTICS)}. Received: "
            f"batch_norm_statistics={batch_norm_statistics!r}"
        )
    _, groups, order = _mapping(
        model_or_layer, {"batch_norm_statistics": batch_norm_statistics}
    )
    result = {}
    for group in groups:
        values = [
            keras.ops.convert_to_numpy(variable).astype(np.float32)
            for _, variable in group.variables
        ]
        arrays = group.save(values)
        for key, array in zip(group.keys, arrays):
            dtype = np.complex64 if key.complex else np.float32
            result[key.name] = np.ascontiguousarray(array, dtype=dtype)
    return {name: result[name] for name in order}
