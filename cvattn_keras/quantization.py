"""Quantization-aware training (QAT) for integer TFLite files.

`quantize_model(model)` returns a copy of a functional model (the same
weights, shared) in which every layer's float outputs, and the model's
float inputs where a wrapped layer takes them, pass through a
`FakeQuant`: the value is rounded to the 8-bit grid of a range that the
layer tracks (its batch's min and max, averaged over training steps),
with a straight-through gradient. Inside the wrapped layers, in their
integer formulation (`_tracing.quantization_aware`):

- the complex kernels (`ComplexDense`, `ComplexConv1D`, `ComplexConv2D`,
  `ComplexConv2DTranspose`, and the layers built on them) take the file's
  int8 grid: symmetric, one scale per output channel
  (`_tracing.quantize_kernel`);
- `ComplexBatchNormalization` rounds each op of its inference formulation
  (`_tracing.quantize` points, a `FakeQuant` each) and keeps its moving
  statistics (frozen, as the file's constants);
- `ComplexFrequencyFrontEnd` rounds each convolution's output and each
  activation's but the last; the transformer blocks each norm's output,
  each sublayer's output and residual sum, and the feed-forward's hidden
  layer and activation.

Trained a few epochs so, the weights learn to live with the rounding that
an integer file applies at those points.

`export.export_tflite(qat_model, path, quantization="full_int8",
representative_data=...)` then writes a file whose tensors at the fake
quantization points take the learned ranges (TensorFlow's converter reads
them from the `FakeQuantWithMinMaxVars` ops); the other tensors inside a
layer (the attention's scores and softmax, a layer norm's statistics)
are calibrated on `representative_data`, as in post-training
quantization. So QAT here serves the 8-bit modes (`int8`, `full_int8`);
`strip(qat_model)` gives back the float model with the trained weights
(for `to_streaming`, or for the other modes).

Where a model rounds no tensor the file does not (complex kernels and
batch norms), its file follows it within 2 quantization steps of the
output, within one for complex 2-D convolutions
(tests/test_quantization.py); a transformer's within a few steps on
average and dozens at worst (benchmarks/qat_gap.py, docs/deploy.md): the
layer norms' statistics and the attention's scores and softmax are not
rounded yet (fake quantization on a norm's every op made the
converter's scale-sharing ops, concatenation and maximum, fail, or did
not bring the file closer while the statistics stayed unrounded).
"""

import keras
from keras import ops

from cvattn_keras import _tracing

__all__ = [
    "FakeQuant",
    "QuantizeWrapper",
    "calibrate",
    "quantize_model",
    "strip",
]

# TensorFlow Model Optimization's activation quantizer starts from this
# range until the first batch is seen.
_INITIAL_RANGE = 6.0


@keras.saving.register_keras_serializable(package="cvattn_keras")
class FakeQuant(keras.layers.Layer):
    """Fake quantization with a tracked range: `x` rounded to the
    `2**num_bits` levels of `[min, max]` (the range widened to hold 0, as
    TFLite's zero point needs), with a straight-through gradient inside the
    range (`keras.quantizers.fake_quant_with_min_max_vars`, which is
    TensorFlow's `FakeQuantWithMinMaxVars` on that backend: the op the
    TFLite converter turns into the tensor's quantization parameters).

    In training, the range follows the batch: the first batch sets it,
    later ones move it by `1 - momentum` towards their own min and max.
    `calibrate(model, data)` sets it from data without training (the
    union of the batches' ranges).

    Args:
        num_bits: int in [2, 16], the levels' bits (8 for int8 files).
        momentum: float in [0, 1), the weight of the old range per step.
    """

    def __init__(self, num_bits=8, momentum=0.99, **kwargs):
        super().__init__(**kwargs)
        if (
            isinstance(num_bits, bool)
            or not isinstance(num_bits, int)
            or not 2 <= num_bits <= 16
        ):
            raise ValueError(
                "`num_bits` must be an int in [2, 16]. Received: "
                f"num_bits={num_bits!r}"
            )
        if (
            isinstance(momentum, bool)
            or not isinstance(momentum, (int, float))
            or not 0 <= momentum < 1
        ):
            raise ValueError(
                "`momentum` must be a float in [0, 1). Received: "
                f"momentum={momentum!r}"
            )
        self.num_bits = num_bits
        self.momentum = float(momentum)
        self.supports_masking = True
        self._observing = False  # set by `calibrate`

    def build(self, input_shape):
        self.range_min = self.add_weight(
            shape=(),
            initializer=keras.initializers.Constant(-_INITIAL_RANGE),
            trainable=False,
            name="range_min",
            dtype="float32",
        )
        self.range_max = self.add_weight(
            shape=(),
            initializer=keras.initializers.Constant(_INITIAL_RANGE),
            trainable=False,
            name="range_max",
            dtype="float32",
        )
        self.seen = self.add_weight(
            shape=(),
            initializer="zeros",
            trainable=False,
            name="seen",
            dtype="float32",
        )

    def _track(self, x, momentum):
        """Moves the range towards `x`'s by `1 - momentum` (`None`: widens
        it to hold `x`); the first batch sets it."""
        low = ops.cast(ops.min(x), "float32")
        high = ops.cast(ops.max(x), "float32")
        first = ops.cast(ops.equal(self.seen, 0.0), "float32")
        if momentum is None:
            low = ops.minimum(low, self.range_min + first * 1e30)
            high = ops.maximum(high, self.range_max - first * 1e30)
        else:
            keep = momentum * (1.0 - first)
            low = keep * self.range_min + (1.0 - keep) * low
            high = keep * self.range_max + (1.0 - keep) * high
        self.range_min.assign(low)
        self.range_max.assign(high)
        self.seen.assign(self.seen + 1.0)

    def call(self, x, training=None):
        if self._observing:
            # `calibrate` sees the tensors unrounded (the kernels stay on
            # their grid), as the TFLite converter calibrates a float
            # graph.
            self._track(x, None)
            return x
        if training:
            self._track(x, self.momentum)
        return self._fake(x)

    def _fake(self, x):
        low = ops.minimum(ops.cast(self.range_min, "float32"), 0.0)
        high = ops.maximum(ops.cast(self.range_max, "float32"), 0.0)
        # A range of zero width (a tensor that was always 0) keeps 0.
        high = ops.maximum(high, low + 1e-6)
        return keras.quantizers.fake_quant_with_min_max_vars(
            x, low, high, num_bits=self.num_bits
        )

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(num_bits=self.num_bits, momentum=self.momentum)
        return config


def _keeps_scale(layer):
    """Layers that only move values (TFLite gives their output the input's
    quantization: a second range there breaks conversion with "same scale
    constraint"), and dropout (the identity in a file)."""
    from cvattn_keras.layers.dropout import ComplexDropout

    return isinstance(
        layer,
        (
            keras.layers.Reshape,
            keras.layers.Flatten,
            keras.layers.Permute,
            keras.layers.RepeatVector,
            keras.layers.Cropping1D,
            keras.layers.Cropping2D,
            keras.layers.MaxPooling1D,
            keras.layers.MaxPooling2D,
            keras.layers.GlobalMaxPooling1D,
            keras.layers.GlobalMaxPooling2D,
            keras.layers.Dropout,
            keras.layers.SpatialDropout1D,
            keras.layers.SpatialDropout2D,
            ComplexDropout,
        ),
    )


def _is_float(tensor):
    return "float" in str(getattr(tensor, "dtype", ""))


@keras.saving.register_keras_serializable(package="cvattn_keras")
class QuantizeWrapper(keras.layers.Wrapper):
    """`layer` with its float outputs (and, with `quantize_inputs`, its
    positional float inputs) through a `FakeQuant` each; the wrapped
    layer's weights are its own (shared with the model it came from). The
    layer runs within `_tracing.quantization_aware`: its integer
    formulation, its complex kernels on the file's grid, and its
    `_tracing.quantize` points each through a `FakeQuant` of their own
    (an output that is a point already takes no second one).

    Args:
        layer: the Keras layer.
        num_outputs: how many outputs `layer` returns (flattened).
        quantize_inputs: tuple of the positional inputs' indices to fake
            quantize (the model's own inputs, fed to this layer).
        num_bits: the `FakeQuant`s' bits.
        momentum: the `FakeQuant`s' momentum.
        num_points: how many `_tracing.quantize` points `layer` passes
            (counted by `quantize_model` with a dry run); `None` (a
            wrapper saved before the points existed) runs `layer` as
            then: its outputs rounded, nothing inside.
    """

    def __init__(
        self,
        layer,
        num_outputs=1,
        quantize_inputs=(),
        num_bits=8,
        momentum=0.99,
        num_points=None,
        **kwargs,
    ):
        super().__init__(layer, **kwargs)
        self.num_outputs = int(num_outputs)
        self.num_points = None if num_points is None else int(num_points)
        self.quantize_inputs = tuple(int(i) for i in quantize_inputs)
        self.num_bits = num_bits
        self.momentum = momentum
        self.output_quantizers = [
            FakeQuant(num_bits, momentum, name=f"output_{i}")
            for i in range(self.num_outputs)
        ]
        self.input_quantizers = [
            FakeQuant(num_bits, momentum, name=f"input_{i}")
            for i in self.quantize_inputs
        ]
        self.point_quantizers = [
            FakeQuant(num_bits, momentum, name=f"point_{i}")
            for i in range(self.num_points or 0)
        ]

    def build(self, *args, **kwargs):
        for quantizer in self._quantizers():
            if not quantizer.built:
                quantizer.build(None)
        self.built = True

    def _quantizers(self):
        return [
            *self.input_quantizers,
            *self.point_quantizers,
            *self.output_quantizers,
        ]

    def call(self, *args, training=None, **kwargs):
        args = list(args)
        for index, quantizer in zip(
            self.quantize_inputs, self.input_quantizers
        ):
            if index < len(args) and _is_float(args[index]):
                args[index] = quantizer(args[index], training=training)
        if self.layer._call_has_training_arg:
            kwargs["training"] = training
        points = iter(self.point_quantizers)

        def point(x):
            quantizer = next(points, None)
            if quantizer is None:
                raise self._points_error("more")
            point_outputs.append(quantizer(x, training=training))
            return point_outputs[-1]

        point_outputs = []  # kept alive, so that their ids stay theirs
        if self.num_points is None:
            outputs = self.layer(*args, **kwargs)
        else:
            with _tracing.quantization_aware(point):
                outputs = self.layer(*args, **kwargs)
        if self.num_points is not None and len(point_outputs) < self.num_points:
            # The later points' ranges would be taken by other tensors.
            raise self._points_error("fewer")
        # An output that is a point's already (a norm's last concatenation)
        # keeps that point's range: a second fake quantization there would
        # give the file's tensor two ranges.
        points_out = {id(tensor) for tensor in point_outputs}
        flat = keras.tree.flatten(outputs)
        quantized = [
            quantizer(tensor, training=training)
            if _is_float(tensor) and id(tensor) not in points_out
            else tensor
            for tensor, quantizer in zip(flat, self.output_quantizers)
        ]
        return keras.tree.pack_sequence_as(outputs, quantized)

    def _points_error(self, which):
        return ValueError(
            f"Layer {self.layer.name!r} passed {which} quantization points "
            f"than the {self.num_points} counted when it was wrapped (its "
            "integer formulation depends on the input's shape or on a "
            "branch): quantize the model again for these inputs."
        )

    def compute_output_spec(self, *args, **kwargs):
        kwargs.pop("training", None)
        return self.layer.compute_output_spec(*args, **kwargs)

    def compute_output_shape(self, *args, **kwargs):
        return self.layer.compute_output_shape(*args, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_outputs=self.num_outputs,
            quantize_inputs=list(self.quantize_inputs),
            num_bits=self.num_bits,
            momentum=self.momentum,
            num_points=self.num_points,
        )
        return config


def _has_points(layer):
    """Whether `layer` (or a layer inside it) calls `_tracing.quantize`:
    its class says so with `_quantization_points = True` (the batch norm,
    the front end, the transformer blocks)."""
    return any(
        getattr(type(inner), "_quantization_points", False)
        for inner in layer._flatten_layers(include_self=True)
    )


def _count_points(layer, node):
    """How many tensors `layer` passes to `_tracing.quantize` in its
    integer formulation: a dry run on zeros of its node's shapes (an
    unknown dimension taken as 1), for a layer that has points."""
    if not _has_points(layer):
        return 0
    count = 0

    def point(x):
        nonlocal count
        count += 1
        return x

    def concrete(value):
        if isinstance(value, keras.KerasTensor):
            shape = tuple(1 if d is None else d for d in value.shape)
            return ops.zeros(shape, value.dtype)
        return value

    args = keras.tree.map_structure(concrete, list(node.arguments.args))
    kwargs = keras.tree.map_structure(concrete, dict(node.arguments.kwargs))
    try:
        with _tracing.quantization_aware(point):
            layer(*args, **kwargs)
    except Exception as error:
        shapes = [tuple(a.shape) for a in args if hasattr(a, "shape")]
        raise ValueError(
            f"`quantize_model` counts the rounding points of layer "
            f"{layer.name!r} by calling it on zeros of shapes {shapes} (an "
            f"unknown dimension taken as 1), which failed: {error}. Give "
            "the model's inputs known shapes."
        ) from error
    return count


def _check_model(model):
    if not isinstance(model, keras.Model):
        raise ValueError(
            "`model` must be a functional or Sequential keras.Model. "
            f"Received: {type(model).__name__}"
        )
    if isinstance(model, keras.Sequential):
        if not model.built:
            raise ValueError(
                "`model` must be built (call it once, or give it an Input) "
                f"before quantizing. Received: an unbuilt Sequential "
                f"{model.name!r}"
            )
    elif not hasattr(model, "_nodes_by_depth"):
        raise ValueError(
            "`quantize_model` rebuilds the model's graph, which a "
            "subclassed model does not expose: build it with the "
            "functional API (keras.Input ... keras.Model(inputs, outputs)). "
            f"Received: model {model.name!r} of class "
            f"{type(model).__name__}"
        )
    for layer in model._flatten_layers(include_self=False):
        policy = getattr(layer, "dtype_policy", None)
        if policy is not None and policy.compute_dtype != "float32":
            raise ValueError(
                "`quantize_model` trains with float32 fake quantization "
                "(an integer file starts from float32 ranges): layer "
                f"{layer.name!r} computes in {policy.compute_dtype} "
                f"(policy {policy.name!r}). Build the model under the "
                "'float32' policy."
            )
        if isinstance(layer, QuantizeWrapper):
            raise ValueError(
                f"`model` {model.name!r} is quantization-aware already "
                f"(layer {layer.name!r}). Call `strip(model)` first."
            )
    for nodes in _nodes_by_layer(model).values():
        if len(nodes) > 1:
            name = nodes[0].operation.name
            raise ValueError(
                f"`quantize_model` gives each layer one range per output, "
                f"but layer {name!r} is called {len(nodes)} times in "
                f"`model` {model.name!r} (a shared layer): its calls would "
                "share ranges. Give each call its own layer."
            )


def _is_nested(layer):
    """A functional model called as a layer of another (a Sequential one
    is wrapped whole, as any layer)."""
    return isinstance(layer, keras.Model) and hasattr(layer, "_nodes_by_depth")


def _quantizers(model):
    """Every `FakeQuant` of a `quantize_model` copy, nested models
    included."""
    found = []
    for layer in model.layers:
        if isinstance(layer, QuantizeWrapper):
            found += layer._quantizers()
        elif _is_nested(layer):
            found += _quantizers(layer)
    return found


def _nodes_by_layer(model):
    """`model`'s own nodes (not those of other models its layers were
    called in), by the id of their layer, in graph order."""
    functional = getattr(model, "_functional", None) or model
    nodes = {}
    for depth in sorted(functional._nodes_by_depth, reverse=True):
        for node in functional._nodes_by_depth[depth]:
            nodes.setdefault(id(node.operation), []).append(node)
    return nodes


def quantize_model(model, num_bits=8, momentum=0.99):
    """A quantization-aware copy of a functional (or built Sequential)
    `model`: every layer wrapped in a `QuantizeWrapper` (its float outputs,
    and the model's float inputs it takes, fake-quantized to `num_bits`),
    the weights shared with `model` (a functional model called as a layer
    is quantized so, layer by layer); not the layers that only move values
    (reshape, flatten, permute, cropping, max pooling) or drop them out,
    whose output keeps its input's quantization in a file (a model input
    that only such a layer takes stays calibrated), nor `keras.ops` nodes
    of the graph (`x + y` between layers: calibrated). Compile and train
    it as any model; export it with `export.export_tflite(...,
    quantization="full_int8")` (or `"int8"`), or `strip` it.

    Raises a `ValueError` for a subclassed model (no graph to rebuild), a
    layer under a mixed-precision policy, a layer called more than once
    (its calls would share ranges), or a model quantized already.
    """
    _check_model(model)
    FakeQuant(num_bits, momentum)  # checks the arguments, by name
    model_inputs = {id(t) for t in model.inputs}
    nodes = _nodes_by_layer(model)

    def wrap(layer):
        if not isinstance(layer, keras.layers.Layer) or _keeps_scale(layer):
            return layer  # a keras.ops node, or a layer that moves values
        if id(layer) not in nodes:
            return layer
        if _is_nested(layer):
            # A functional model called as a layer (a per-token model in
            # a frame classifier): its own layers wrapped, each with its
            # ranges, and its inputs quantized by its first layers.
            return quantize_model(layer, num_bits, momentum)
        (node,) = nodes[id(layer)]  # one: _check_model refused more
        arguments = list(node.arguments.args)
        quantize_inputs = tuple(
            i
            for i, argument in enumerate(arguments)
            if id(argument) in model_inputs and _is_float(argument)
        )
        outputs = keras.tree.flatten(node.outputs)
        return QuantizeWrapper(
            layer,
            num_outputs=len(outputs),
            quantize_inputs=quantize_inputs,
            num_bits=num_bits,
            momentum=momentum,
            num_points=_count_points(layer, node),
            name=f"quant_{layer.name}",
        )

    qat = keras.models.clone_model(model, clone_function=wrap)
    qat.name = f"{model.name}_qat"
    return qat


def strip(model):
    """The float model inside a `quantize_model` copy: each
    `QuantizeWrapper` replaced by the layer it wraps (the trained weights,
    shared), for `streaming.to_streaming` or a float or post-training
    export."""
    if not isinstance(model, keras.Model):
        raise ValueError(
            f"`model` must be a keras.Model. Received: {type(model).__name__}"
        )

    def unwrap(layer):
        if isinstance(layer, QuantizeWrapper):
            return layer.layer
        return strip(layer) if _is_nested(layer) else layer

    stripped = keras.models.clone_model(model, clone_function=unwrap)
    if model.name.endswith("_qat"):
        stripped.name = model.name[: -len("_qat")]
    return stripped


def calibrate(model, data, batch_size=32):
    """Sets every `FakeQuant` range of a `quantize_model` copy from `data`
    (an array, or a list of arrays, one per input): the union of the
    ranges seen, batch by batch, without training, each tensor taken
    before any rounding of activations (the complex kernels on their
    int8 grid), as the converter calibrates. Returns `model`."""
    quantizers = _quantizers(model)
    if not quantizers:
        raise ValueError(
            f"`model` {model.name!r} has no FakeQuant: quantize it with "
            "`quantize_model` first."
        )
    arrays = data if isinstance(data, (list, tuple)) else [data]
    count = len(arrays[0])
    for quantizer in quantizers:
        quantizer.seen.assign(0.0)
        quantizer._observing = True
    try:
        for start in range(0, count, batch_size):
            batch = [array[start : start + batch_size] for array in arrays]
            model(batch if len(batch) > 1 else batch[0], training=False)
    finally:
        for quantizer in quantizers:
            quantizer._observing = False
    return model
