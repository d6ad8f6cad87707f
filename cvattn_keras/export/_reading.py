"""What a `.tflite` file holds, read from its flatbuffer without running
it: whether it is one (`_check_tflite_file`), its operators, its sizes
(`file_sizes`) and its quantization mode."""

import os

from cvattn_keras.export._arguments import _check_path


def _check_tflite_file(path):
    """Raises a `ValueError` naming `path` unless it is a TFLite
    flatbuffer (file identifier `TFL3` at bytes 4-8)."""
    if os.path.isdir(path):
        raise ValueError(
            f"`path` is a directory, not a .tflite file. Received: "
            f"path={path!r}"
        )
    if not os.path.exists(path):
        raise ValueError(f"No such file: path={path!r}")
    with open(path, "rb") as f:
        head = f.read(8)
    if not head:
        raise ValueError(f"{path!r} is empty, not a TFLite model.")
    if len(head) < 8 or head[4:8] != b"TFL3":
        raise ValueError(
            f"{path!r} is not a TFLite model (no 'TFL3' flatbuffer "
            "identifier); give a file written by export_tflite."
        )


def _file_ops(path):
    """The operator names in a `.tflite` file, read from its flatbuffer:
    builtin operators by their enum name, custom ones (Flex included) by
    their custom code, e.g. `"FlexComplex"`. Returns `(ops, non_builtin)`.
    """
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        try:
            flatbuffer = schema.ModelT.InitFromPackedBuf(f.read(), 0)
        except Exception as error:
            raise ValueError(
                f"{path!r} is not a valid TFLite model (its flatbuffer "
                f"does not parse: {type(error).__name__}: {error})."
            ) from None
    builtin_names = {
        code: name
        for name, code in vars(schema.BuiltinOperator).items()
        if not name.startswith("_")
    }
    ops, non_builtin = set(), set()
    for subgraph in flatbuffer.subgraphs or []:
        for operator in subgraph.operators or []:
            code = flatbuffer.operatorCodes[operator.opcodeIndex]
            # Codes above 127 live in `builtinCode` only (schema v3a).
            builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
            if builtin == schema.BuiltinOperator.CUSTOM:
                name = code.customCode.decode()
                non_builtin.add(name)
            else:
                name = builtin_names.get(builtin, f"BUILTIN_{builtin}")
            ops.add(name)
    return tuple(sorted(ops)), tuple(sorted(non_builtin))


def file_sizes(path):
    """`(size_bytes, weight_bytes)` of a `.tflite` file: its size, and the
    bytes of the buffers that its constant tensors read (weights, biases
    and the other constants, each buffer once however many tensors share
    it; without the metadata buffers). `size_bytes - weight_bytes` is the
    rest: the format's metadata, names and graph.

    Raises:
        ValueError: if `path` is not a TFLite flatbuffer.
    """
    from ai_edge_litert import schema_py_generated as schema

    path = _check_path(path)
    _check_tflite_file(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        tflite = schema.Model.GetRootAs(data, 0)
        used = set()
        for s in range(tflite.SubgraphsLength()):
            subgraph = tflite.Subgraphs(s)
            for t in range(subgraph.TensorsLength()):
                used.add(subgraph.Tensors(t).Buffer())
        weight_bytes = 0
        for index in used:
            if index <= 0 or index >= tflite.BuffersLength():
                continue  # 0: the empty buffer of every runtime tensor
            buffer = tflite.Buffers(index)
            # Files over 2 GB keep buffers after the flatbuffer (offset,
            # size); the others inline (data).
            if buffer.Offset() > 1:
                weight_bytes += buffer.Size()
            else:
                weight_bytes += buffer.DataLength()
    except Exception as error:
        raise ValueError(
            f"{path!r} is not a valid TFLite model (its flatbuffer does not "
            f"parse: {type(error).__name__}: {error})."
        ) from None
    return len(data), weight_bytes


def _file_quantization(path):
    """The quantization mode of a `.tflite` file, read from the types of
    its tensors: int16 activations -> `"int16x8"`; int8 activations ->
    `"full_int8"`, or `"int8"` where float activations remain (its float
    inputs and outputs); int8 constants only -> `"dynamic_int8"`; float16
    constants -> `"float16"`; otherwise `"float32"`."""
    from ai_edge_litert import schema_py_generated as schema

    with open(path, "rb") as f:
        data = f.read()
    types = schema.TensorType
    activations, constants = set(), set()
    try:
        tflite = schema.Model.GetRootAs(data, 0)
        for s in range(tflite.SubgraphsLength()):
            subgraph = tflite.Subgraphs(s)
            for t in range(subgraph.TensorsLength()):
                tensor = subgraph.Tensors(t)
                index = tensor.Buffer()
                constant = 0 < index < tflite.BuffersLength() and (
                    tflite.Buffers(index).DataLength() > 0
                    or tflite.Buffers(index).Offset() > 1
                )
                (constants if constant else activations).add(tensor.Type())
    except Exception as error:
        raise ValueError(
            f"{path!r} is not a valid TFLite model (its flatbuffer does not "
            f"parse: {type(error).__name__}: {error})."
        ) from None
    if types.INT16 in activations:
        return "int16x8"
    if activations & {types.INT8, types.UINT8}:
        return "int8" if types.FLOAT32 in activations else "full_int8"
    if constants & {types.INT8, types.UINT8}:
        return "dynamic_int8"
    if types.FLOAT16 in constants:
        return "float16"
    return "float32"
