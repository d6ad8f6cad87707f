"""The errors of a conversion that TFLite builtins cannot express:
`UnsupportedOpsError` (an op with no builtin kernel) and
`FloatFallbackError` (a full-integer file that would keep float ops)."""

import re

# TensorFlow ops that exist only for complex dtypes.
_COMPLEX_OPS = {"Angle", "Complex", "ComplexAbs", "Conj", "Imag", "Real"}


class UnsupportedOpsError(ValueError):
    """The model needs operations that TFLite has no builtin kernel for,
    or that its converter could not lower to one.

    Attributes:
        ops: the TensorFlow op names, e.g. `["Complex"]`.
        layers: the names of the model's layers that emit them, where the
            converter's locations name them.
        details: the converter's one-line description of each failing op
            (its operand and result types and attributes).
        involves_complex: whether a complex dtype is among the failing
            ops' operands or results, or an op exists only for complex
            dtypes (then complex values are the cause).
    """

    def __init__(self, ops, layers, details=()):
        self.ops = list(ops)
        self.layers = list(layers)
        self.details = [line.strip() for line in details if line.strip()]
        self.involves_complex = bool(_COMPLEX_OPS & set(self.ops)) or any(
            "complex<" in line for line in self.details
        )
        where = (
            f" They come from layer(s) {self.layers}." if self.layers else ""
        )
        if self.involves_complex:
            cause = (
                " They operate on complex dtypes, which TFLite builtins do "
                "not support: keep complex values as stacked real channels "
                "(cvattn_keras.complex) and use this library's layers."
            )
        elif any(
            re.search(r"new_axis_mask = [1-9]", line) for line in self.details
        ):
            cause = (
                " A strided slice that inserts axes (`x[:, None]`) into a "
                "tensor with more than one unknown dimension cannot be "
                "lowered: use `keras.ops.expand_dims` (or a reshape) there."
            )
        else:
            cause = (
                " Rewrite that computation with operations that TFLite "
                "supports as builtins."
            )
        shown = "; ".join(self.details[:4])
        super().__init__(
            f"The model uses TensorFlow op(s) {self.ops} that TFLite's "
            f"converter could not lower to builtin kernels.{where}{cause} "
            "cvattn_keras exports builtin ops only (no Flex delegate)."
            + (f" Converter details: {shown}" if shown else "")
        )


class FloatFallbackError(UnsupportedOpsError):
    """A full-integer conversion (`"full_int8"`, `"int16x8"`) met operators
    with no integer kernel: the converter left them float (full_int8) or
    refused them (int16x8), and an NPU, DSP or Edge TPU could not run
    them. No file is written.

    Attributes:
        ops: the TFLite operators that stayed float, e.g. `["CEIL", "NEG"]`.
        layers: the model's layers (`outer/inner` for a layer inside a
            layer) whose tensors they compute.
        details: one line per float operator: `OP -> tensor name` (for
            int16x8, `OP: no int16 activation kernel`).
        quantization: the mode that was asked for.
    """

    def __init__(self, ops, layers, details=(), quantization="full_int8"):
        ValueError.__init__(self)
        self.ops = list(ops)
        self.layers = list(layers)
        self.details = list(details)
        self.involves_complex = False
        self.quantization = quantization
        where = (
            f" They compute tensors of layer(s) {self.layers}."
            if self.layers
            else ""
        )
        shown = "; ".join(self.details[:6])
        self.args = (
            f"quantization={quantization!r} needs an integer kernel for "
            f"every operator, but {self.ops} have none in this converter "
            "(they would stay float, which integer-only accelerators cannot "
            f"run); no file was written.{where} Use quantization='int8' "
            "(integer kernels with a float fallback) for this model, or "
            "rewrite those computations with integer-friendly ops."
            + (f" Float ops: {shown}" if shown else ""),
        )


class ONNXUnsupportedOpsError(UnsupportedOpsError):
    """The model needs operations that tf2onnx could not map to standard
    ONNX ops (it writes them as nodes of the TensorFlow op's name, which
    ONNX Runtime refuses), or a complex tensor; no file is written.

    Attributes:
        ops: the unmapped op names, e.g. `["Complex", "Imag"]`.
        layers: the model's layers (`outer/inner` for nested ones) whose
            nodes they are, where the node names tell.
        details: one line per unmapped node (`OP -> node name`) or complex
            tensor.
        involves_complex: whether complex values are among the causes.
    """

    def __init__(self, ops, layers, details=(), involves_complex=None):
        ValueError.__init__(self)
        self.ops = list(ops)
        self.layers = list(layers)
        self.details = list(details)
        self.involves_complex = (
            bool(_COMPLEX_OPS & set(self.ops))
            if involves_complex is None
            else bool(involves_complex or _COMPLEX_OPS & set(self.ops))
        )
        where = (
            f" They come from layer(s) {self.layers}." if self.layers else ""
        )
        cause = (
            " ONNX has no complex operators: keep complex values as "
            "stacked real channels (cvattn_keras.complex) and use this "
            "library's layers."
            if self.involves_complex
            else " Rewrite that computation with operations that ONNX "
            "supports (keras.ops on real tensors)."
        )
        shown = "; ".join(self.details[:6])
        self.args = (
            f"The model uses TensorFlow op(s) {self.ops} that tf2onnx "
            "could not convert to standard ONNX ops (default domain); no "
            f"file was written.{where}{cause}"
            + (f" Details: {shown}" if shown else ""),
        )
