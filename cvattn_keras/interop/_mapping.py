"""The reference's parameter names for each layer of this library.

A layer maps to groups of reference keys and the library variables they
determine together (`_Group`), each with a `load` (the reference's arrays
to float64 values of the variables) and a `save` (the inverse), and to the
reference's key order. `_layer_mapping` dispatches on the layer's type
(the table in the docstring of `cvattn_keras.interop`); `_models` puts the
layers of a whole model together.
"""

import dataclasses

import keras
import numpy as np

from cvattn_keras import layers as cl
from cvattn_keras.interop._bias import _pair_to_bias
from cvattn_keras.interop._bias import bias_to_pair

# --------------------------------------------------------------------------
# Conversions of single parameters.
# --------------------------------------------------------------------------


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
    if getattr(layer, "gated", False):
        raise ValueError(
            f"{_describe(layer)} is gated (gated=True); the reference's "
            "MultiheadAttention has no gate for `gate_kernel`, `gate_bias`."
        )
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
