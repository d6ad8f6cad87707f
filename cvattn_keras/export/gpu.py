"""Which operators of a `.tflite` file the TFLite / LiteRT GPU delegate
would run, and which would fall back to the CPU, read from the file alone.

TensorFlow's own analyzer (`tf.lite.experimental.Analyzer.analyze(...,
gpu_compatibility=True)`) is no help in TensorFlow 2.21: it answers
"compatible" even for Flex and TOPK_V2 operators. This module writes the
delegate's rules down instead and checks every operator of the file
against them:

- the operator must be one the delegate has a kernel for (`GPU_OPS`, with
  each operator's own constraints);
- every runtime (non-constant) tensor an operator reads or writes must
  have a static shape (no `-1` in its `shape_signature`: the delegate
  compiles its kernels for fixed shapes), a rank of at most 4 (the
  delegate lays tensors out as BHWC: "Tensor dimensions must be less than
  5") and a float32 or float16 dtype (bool where a comparison, a logical
  operator, a select or a cast produces or reads it; int32 only into or
  out of a cast).

Sources (rules restated in our own words, no code copied):

- `tensorflow/lite/tools/versioning/gpu_compatibility.cc`
  (https://github.com/tensorflow/tensorflow/blob/master/tensorflow/lite/
  tools/versioning/gpu_compatibility.cc), `CheckGpuDelegateCompatibility`:
  the supported builtin operators and their per-operator constraints
  (moved there from `IsSupported` of
  `tensorflow/lite/delegates/gpu/common/model_builder.cc`).
- `tensorflow/lite/delegates/gpu/common/model_builder.cc`,
  `IsAllAllowedTensors` / `GetOpsToReplace`: runtime tensors must be
  float32 or float16 (int8 / uint8 only with the delegate's quantized
  model support), and the rank limit of 4.
- The LiteRT documentation "GPU delegates for LiteRT", section "GPU ML
  operations support" (https://ai.google.dev/edge/litert/performance/gpu):
  the delegate runs 16-bit and 32-bit float models; unsupported operators
  run on the CPU, with a CPU-GPU synchronisation at every boundary.

The check reads the flatbuffer with `ai_edge_litert`'s schema; it needs
neither TensorFlow nor a GPU. It is conservative where the sources are: an
operator this table does not list is reported as falling back.
"""

import dataclasses
import os

__all__ = [
    "GPU_OPS",
    "GpuCompatibility",
    "GpuFallback",
    "check_gpu_compatibility",
]

_FLOATS = frozenset({"FLOAT32", "FLOAT16"})
_MAX_RANK = 4

# Operators whose runtime tensors may be bool: comparisons write it,
# logical operators read and write it, selects read it as the condition,
# casts read or write it (gpu_compatibility.cc: CAST and SELECT_V2 accept
# bool explicitly).
_BOOL_OK = frozenset(
    {
        "CAST",
        "EQUAL",
        "NOT_EQUAL",
        "GREATER",
        "GREATER_EQUAL",
        "LESS",
        "LESS_EQUAL",
        "LOGICAL_AND",
        "SELECT",
        "SELECT_V2",
    }
)


@dataclasses.dataclass(frozen=True)
class _Tensor:
    name: str
    dtype: str  # TFLite TensorType name, e.g. "FLOAT32"
    shape: tuple
    signature: tuple  # shape_signature (-1: dynamic), or the shape
    const: bool

    @property
    def rank(self):
        return len(self.shape)


@dataclasses.dataclass(frozen=True)
class _Operator:
    name: str
    inputs: tuple  # _Tensor, optional inputs left out
    outputs: tuple
    options: object  # the schema's builtin options object, or None

    @property
    def runtime_inputs(self):
        return [t for t in self.inputs if not t.const]

    @property
    def const_inputs(self):
        return [t for t in self.inputs if t.const]


# ----------------------------------------------------------------------
# Per-operator constraints (gpu_compatibility.cc). Each returns `None`
# when the operator is supported, else the reason it is not.
# ----------------------------------------------------------------------


def _any(op):
    return None


def _unary(op):
    # Elementwise with one operand: one runtime input, no constant.
    if len(op.runtime_inputs) != 1 or op.const_inputs:
        return "one runtime input and no constant input required"
    return None


def _binary(op):
    # Elementwise with two operands: two runtime inputs, or one runtime
    # input and one constant.
    if len(op.runtime_inputs) + len(op.const_inputs) != 2 or (
        not op.runtime_inputs
    ):
        return "two operands, at least one of them a runtime tensor, required"
    return None


def _broadcastable(a, b):
    for x, y in zip(reversed(a.shape), reversed(b.shape)):
        if x != y and x != 1 and y != 1:
            return False
    return True


def _add(op):
    if len(op.inputs) != 2:
        return "ADD takes exactly two inputs"
    if not _broadcastable(*op.inputs):
        return (
            f"cannot broadcast {list(op.inputs[0].shape)} with "
            f"{list(op.inputs[1].shape)}"
        )
    return None


def _mul(op):
    if len(op.inputs) != 2:
        return "MUL takes exactly two inputs"
    a, b = op.inputs
    if a.rank == b.rank:
        # One operand must be at least as large as the other on every
        # axis (no outer-product broadcasting).
        smaller_a = any(x < y for x, y in zip(a.shape, b.shape))
        smaller_b = any(y < x for x, y in zip(a.shape, b.shape))
        if smaller_a and smaller_b:
            return (
                "MUL broadcasts both operands (an outer product: "
                f"{list(a.shape)} x {list(b.shape)})"
            )
    elif not _broadcastable(a, b):
        return f"cannot broadcast {list(a.shape)} with {list(b.shape)}"
    return None


def _const_int32_axes(op):
    if len(op.runtime_inputs) != 1:
        return "one runtime input required"
    if len(op.inputs) < 2 or not op.inputs[1].const:
        return "the axes must be a constant"
    if op.inputs[1].dtype != "INT32":
        return "the axes must be int32"
    return None


def _one_runtime_input(op):
    if len(op.runtime_inputs) != 1:
        return (
            f"one runtime input required, got {len(op.runtime_inputs)} "
            "(a shape or permutation computed at run time is not supported)"
        )
    return None


def _fully_connected(op):
    options = op.options
    if getattr(options, "weightsFormat", 0) != 0:
        return "only the default weights format is supported"
    if len(op.runtime_inputs) > 2:
        return "at most two runtime inputs"
    if op.inputs and op.inputs[0].const:
        return "a constant input (not weights) is not supported"
    if getattr(options, "keepNumDims", False) and (
        op.inputs[0].rank != op.outputs[0].rank
    ):
        return "keep_num_dims with a change of rank is not supported"
    return None


def _batch_matmul(op):
    if len(op.inputs) != 2 or len(op.outputs) != 1:
        return "two inputs and one output required"
    return None


def _softmax(op):
    if getattr(op.options, "beta", 1.0) != 1.0:
        return "beta != 1 is not supported"
    return None


def _strided_slice(op):
    options = op.options
    for mask in ("ellipsisMask", "newAxisMask", "shrinkAxisMask"):
        if getattr(options, mask, 0):
            return f"{mask} is not supported"
    if len(op.inputs) < 4:
        return "four inputs required"
    if op.inputs[0].rank not in (3, 4):
        return f"the input must have rank 3 or 4, not {op.inputs[0].rank}"
    return None


def _slice(op):
    if len(op.inputs) < 3:
        return "three inputs required"
    if op.inputs[0].rank not in (3, 4):
        return f"the input must have rank 3 or 4, not {op.inputs[0].rank}"
    return None


def _gather(op):
    if op.inputs[0].dtype == "INT32":
        return "int32 data are not supported"
    if op.inputs[1].rank != 1 or op.inputs[1].dtype != "INT32":
        return "the indices must be a 1-D int32 tensor"
    return None


def _cast(op):
    source, target = op.inputs[0].dtype, op.outputs[0].dtype
    if source == "BOOL" and target in _FLOATS:
        return None
    if source in _FLOATS and target == "BOOL":
        return None
    if source in ("FLOAT32", "INT32") and target in ("FLOAT32", "INT32"):
        return None
    return f"cast from {source} to {target} is not supported"


def _select(op):
    if len(op.inputs) != 3:
        return "three inputs required"
    condition, *branches = op.inputs
    if condition.dtype not in _FLOATS | {"BOOL"}:
        return "the condition must be bool or float"
    output = op.outputs[0].shape
    for branch in branches:
        if branch.dtype not in _FLOATS:
            return "both branches must be float"
        scalar = branch.rank == 0 or (branch.rank == 1 and branch.shape[0] <= 1)
        if branch.shape != output and not scalar:
            return (
                "each branch must have the output's shape or be a scalar "
                f"(got {list(branch.shape)} for {list(output)})"
            )
        if branch.const and branch.rank == 2:
            return "a constant 2-D branch is not supported"
    return None


def _pad(op):
    if len(op.runtime_inputs) != 1 or len(op.inputs) < 2:
        return "one runtime input and constant paddings required"
    paddings = op.inputs[1].shape
    if len(paddings) != 2 or paddings[0] not in (3, 4) or paddings[1] != 2:
        return f"paddings must be 3x2 or 4x2, not {list(paddings)}"
    return None


def _dequantize(op):
    if op.inputs[0].dtype == "INT16":
        return "dequantization from int16 is not supported"
    return None


def _add_n(op):
    if len(op.inputs) != 2:
        return "ADD_N supports exactly two inputs"
    return None


def _conv(op):
    if len(op.runtime_inputs) > 2 or len(op.outputs) != 1:
        return "one or two runtime inputs and one output required"
    return None


_UNARY = (
    "ABS CEIL COS ELU EXP FLOOR GELU LOG LOGISTIC NEG RSQRT SIGN SIN SQRT "
    "SQUARE TANH"
).split()
_BINARY = (
    "ATAN2 DIV EQUAL FLOOR_DIV FLOOR_MOD GREATER GREATER_EQUAL LOGICAL_AND "
    "LESS LESS_EQUAL MAXIMUM MINIMUM NOT_EQUAL POW SQUARED_DIFFERENCE SUB"
).split()

# The builtin operators the GPU delegate has kernels for (gpu_compatibility
# .cc, CheckGpuDelegateCompatibility): name -> (constraint in words,
# checker). Everything else, e.g. SHAPE, BROADCAST_TO, BROADCAST_ARGS,
# EXPAND_DIMS, SQUEEZE, ZEROS_LIKE, FILL, RANGE, REDUCE_ANY, GATHER_ND,
# TOPK_V2, ARG_MAX and every custom (Flex) operator, runs on the CPU.
GPU_OPS = {
    **{name: ("one runtime input, no constant", _unary) for name in _UNARY},
    **{
        name: ("two operands, at least one a runtime tensor", _binary)
        for name in _BINARY
    },
    "ADD": ("two inputs, broadcastable", _add),
    "MUL": ("two inputs, broadcastable, no outer product", _mul),
    "ADD_N": ("exactly two inputs", _add_n),
    "AVERAGE_POOL_2D": ("positive kernel and strides", _any),
    "MAX_POOL_2D": ("positive kernel and strides", _any),
    "BATCH_MATMUL": ("two inputs, one output", _batch_matmul),
    "CAST": ("bool <-> float, float32 <-> int32", _cast),
    "CONCATENATION": ("any axis", _any),
    "CONV_2D": ("one or two runtime inputs", _conv),
    "DEPTHWISE_CONV_2D": ("rank-4 input, filter and output", _conv),
    "TRANSPOSE_CONV": ("positive strides", _conv),
    "CUMSUM": ("float data, constant int32 axis", _any),
    "DENSIFY": ("constant input", _any),
    "DEPTH_TO_SPACE": ("block size > 1", _any),
    "SPACE_TO_DEPTH": ("block size > 1", _any),
    "DEQUANTIZE": ("not from int16", _dequantize),
    "QUANTIZE": ("one runtime input", _one_runtime_input),
    "EMBEDDING_LOOKUP": ("1-D ids, float32 or int8 table", _any),
    "DYNAMIC_UPDATE_SLICE": ("1-D int32 start indices", _any),
    "FULLY_CONNECTED": (
        "default weights format, at most two runtime inputs",
        _fully_connected,
    ),
    "GATHER": ("non-int32 data, 1-D int32 indices", _gather),
    "HARD_SWISH": ("one runtime input", _one_runtime_input),
    "LEAKY_RELU": ("any", _any),
    "PRELU": ("any", _any),
    "RELU": ("any", _any),
    "RELU6": ("any", _any),
    "RELU_N1_TO_1": ("any", _any),
    "LSTM": ("basic or full kernel, tanh/sigmoid activation", _any),
    "MEAN": ("one runtime input, constant int32 axes", _const_int32_axes),
    "SUM": ("one runtime input, constant int32 axes", _const_int32_axes),
    "REDUCE_MAX": ("one runtime input, constant int32 axes", _const_int32_axes),
    "REDUCE_MIN": ("one runtime input, constant int32 axes", _const_int32_axes),
    "REDUCE_PROD": (
        "one runtime input, constant int32 axes",
        _const_int32_axes,
    ),
    "ONE_HOT": ("int32 indices, constant scalar on/off values", _any),
    "PACK": ("any", _any),
    "PAD": ("constant 3x2 or 4x2 paddings", _pad),
    "PADV2": ("constant 3x2 or 4x2 paddings", _pad),
    "MIRROR_PAD": ("reflect mode, constant 3x2 or 4x2 paddings", _pad),
    "RESHAPE": ("one runtime input (constant new shape)", _one_runtime_input),
    "RESIZE_BILINEAR": ("one runtime input", _one_runtime_input),
    "RESIZE_NEAREST_NEIGHBOR": ("one runtime input", _one_runtime_input),
    "SELECT": ("float branches of the output's shape or scalar", _select),
    "SELECT_V2": ("float branches of the output's shape or scalar", _select),
    "SLICE": ("rank-3 or rank-4 input", _slice),
    "SOFTMAX": ("beta = 1", _softmax),
    "SPLIT": ("any", _any),
    "SPLIT_V": ("any", _any),
    "STRIDED_SLICE": (
        "rank-3 or rank-4 input, no ellipsis/new-axis/shrink-axis mask",
        _strided_slice,
    ),
    "TILE": ("one runtime input", _one_runtime_input),
    "TRANSPOSE": (
        "one runtime input (constant permutation)",
        _one_runtime_input,
    ),
}
"""The builtin TFLite operators that the GPU delegate has kernels for:
name -> (the constraint in words, its checker). Every other operator
runs on the CPU.
"""


@dataclasses.dataclass(frozen=True)
class GpuFallback:
    """One operator that the GPU delegate would leave to the CPU.

    Attributes:
        op: the operator, e.g. `"SHAPE"`.
        index: its position in the file's main subgraph.
        reason: why, in words.
        tensor: the name of the tensor at fault (else the operator's first
            output), which names the layer that emits it
            (`model/layer/op`).
    """

    op: str
    index: int
    reason: str
    tensor: str

    def __str__(self):
        return f"{self.op} #{self.index} ({self.tensor}): {self.reason}"


@dataclasses.dataclass(frozen=True)
class GpuCompatibility:
    """Whether the GPU delegate would run the whole file.

    Attributes:
        compatible: True when no operator falls back to the CPU.
        fallbacks: the `GpuFallback`s, in graph order.
        num_ops: the number of operators in the file.
    """

    compatible: bool
    fallbacks: tuple
    num_ops: int

    def summary(self):
        """The fallbacks grouped as `{(op, reason): count}`."""
        counts = {}
        for fallback in self.fallbacks:
            key = (fallback.op, fallback.reason)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def __str__(self):
        if self.compatible:
            return f"compatible (all {self.num_ops} ops)"
        lines = [
            f"not compatible: {len(self.fallbacks)} of {self.num_ops} ops "
            "fall back to the CPU"
        ]
        first = {}
        for fallback in self.fallbacks:
            first.setdefault((fallback.op, fallback.reason), fallback.tensor)
        for (op, reason), count in sorted(self.summary().items()):
            lines.append(
                f"  {count} x {op}: {reason}, e.g. {first[op, reason]}"
            )
        return "\n".join(lines)


def _read(path):
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        model = schema.ModelT.InitFromPackedBuf(f.read(), 0)
    op_names = {
        code: name
        for name, code in vars(schema.BuiltinOperator).items()
        if not name.startswith("_")
    }
    type_names = {
        code: name
        for name, code in vars(schema.TensorType).items()
        if not name.startswith("_")
    }
    return model, op_names, type_names


def _is_const(model, tensor):
    buffer = model.buffers[tensor.buffer] if model.buffers else None
    if buffer is None:
        return False
    data = getattr(buffer, "data", None)
    return (data is not None and len(data) > 0) or getattr(
        buffer, "size", 0
    ) > 0


def _tensors(model, subgraph, indices, type_names):
    tensors = []
    for index in indices if indices is not None else []:
        if index < 0:  # an optional input left out
            continue
        t = subgraph.tensors[index]
        shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
        signature = (
            tuple(int(d) for d in t.shapeSignature)
            if t.shapeSignature is not None and len(t.shapeSignature)
            else shape
        )
        tensors.append(
            _Tensor(
                name=(t.name or b"").decode(errors="replace"),
                dtype=type_names.get(t.type, f"TYPE_{t.type}"),
                shape=shape,
                signature=signature,
                const=_is_const(model, t),
            )
        )
    return tuple(tensors)


def _operators(path):
    model, op_names, type_names = _read(path)
    subgraph = model.subgraphs[0]
    operators = []
    dequantized = set()  # outputs of DEQUANTIZE on a constant
    for operator in subgraph.operators or []:
        code = model.operatorCodes[operator.opcodeIndex]
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        name = op_names.get(builtin, f"BUILTIN_{builtin}")
        if name == "CUSTOM":
            name = (code.customCode or b"").decode(errors="replace")
        inputs = _tensors(model, subgraph, operator.inputs, type_names)
        inputs = tuple(
            dataclasses.replace(t, const=True) if t.name in dequantized else t
            for t in inputs
        )
        outputs = _tensors(model, subgraph, operator.outputs, type_names)
        if name == "DEQUANTIZE" and inputs and inputs[0].const:
            dequantized.update(t.name for t in outputs)
        operators.append(
            _Operator(name, inputs, outputs, operator.builtinOptions)
        )
    return operators


def _tensor_problem(op):
    """`(reason, tensor name)` when the operator's runtime tensors keep it
    off the GPU, else None."""
    runtime = op.runtime_inputs + list(op.outputs)
    for t in runtime:
        if any(d < 0 for d in t.signature):
            return "dynamic shape (the delegate needs static shapes)", t.name
    for t in runtime:
        if t.rank > _MAX_RANK:
            return (
                f"rank-{t.rank} tensor (the delegate handles rank <= "
                f"{_MAX_RANK})",
                t.name,
            )
    allowed = set(_FLOATS)
    if op.name in _BOOL_OK:
        allowed.add("BOOL")
    if op.name == "CAST":
        allowed.add("INT32")
    for t in runtime:
        if t.dtype not in allowed:
            return (
                f"{t.dtype.lower()} tensor (the delegate runs float32 and "
                "float16 tensors)",
                t.name,
            )
    return None


def check_gpu_compatibility(path):
    """Checks a `.tflite` file's operators against the GPU delegate's rules
    (see the module docstring and `GPU_OPS`).

    Args:
        path: the `.tflite` file.

    Returns:
        A `GpuCompatibility`: `compatible` and the `fallbacks`, each with
        the operator, its index, the reason and its output tensor's name.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        raise ValueError(
            f"`path` must be an existing .tflite file. Received: path={path!r}"
        )
    fallbacks = []
    operators = _operators(path)
    for index, op in enumerate(operators):
        if op.name == "DEQUANTIZE" and op.inputs and op.inputs[0].const:
            # Dequantized constants (float16 weights): the delegate drops
            # these nodes and reads the weights as constants.
            continue
        tensor = op.outputs[0].name if op.outputs else ""
        if op.name not in GPU_OPS:
            reason = "not supported by the GPU delegate"
        else:
            problem = _tensor_problem(op)
            if problem is not None:
                reason, tensor = problem
            else:
                reason = GPU_OPS[op.name][1](op)
        if reason:
            fallbacks.append(GpuFallback(op.name, index, reason, tensor))
    return GpuCompatibility(
        compatible=not fallbacks,
        fallbacks=tuple(fallbacks),
        num_ops=len(operators),
    )
