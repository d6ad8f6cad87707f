"""What `verify_tflite` reports: `TensorInfo` (one input or output of a
file) and `TFLiteReport` (sizes, ops, errors against Keras, latency, the
GPU delegate's verdict), with the text helpers of its table."""

import dataclasses

from cvattn_keras.export._modes import _CALIBRATED


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One input or output of a `.tflite` file, as the interpreter sees it.

    Attributes:
        name: the signature name (the model's input name, or `output_0`,
            `output_1`, ...).
        dtype: e.g. `"float32"`, `"int8"`, `"bool"`.
        shape: the file's shape; `-1` marks a dynamic dimension.
        scale, zero_point: the affine quantization of an integer tensor
            (`real = scale * (q - zero_point)`); `None` for a tensor that is
            not quantized.
    """

    name: str
    dtype: str
    shape: tuple
    scale: float = None
    zero_point: int = None

    def __str__(self):
        shape = "x".join("?" if d < 0 else str(d) for d in self.shape)
        text = f"{self.name}: {self.dtype}[{shape}]"
        if self.scale is not None:
            text += f" scale {self.scale:.6g} zero point {self.zero_point}"
        return text


class _Bounded:
    """What `TFLiteReport` and `ONNXReport` share: `within_expected`,
    from their `max_rel_error` and `expected_max_rel_error`."""

    @property
    def within_expected(self):
        """Whether `max_rel_error` is within `expected_max_rel_error`
        (`True` where no bound is known)."""
        if self.expected_max_rel_error is None:
            return True
        return bool(self.max_rel_error <= self.expected_max_rel_error)


@dataclasses.dataclass
class TFLiteReport(_Bounded):
    """What `verify_tflite` measured.

    Attributes:
        path: the `.tflite` file.
        size_bytes: its size.
        weight_bytes: the bytes of its constant tensors (weights, biases,
            quantization-free constants such as shapes), each buffer
            counted once however many tensors share it.
        rest_bytes: (a property) `size_bytes - weight_bytes`: the format's
            metadata, the tensor names and the graph.
        ops: the operators in the file, sorted.
        non_builtin_ops: those that are not TFLite builtins (Flex or custom).
        max_abs_error: the largest |LiteRT - Keras| over all outputs (the
            outputs of an integer file dequantized first).
        max_rel_error: `max_abs_error` divided by the largest |Keras output|
            (a scale-free figure that, unlike an elementwise ratio, does not
            blow up on outputs near 0).
        median_latency_ms: the median time of one inference on the
            verified batch (set inputs, invoke, read outputs), with
            LiteRT's default CPU delegate (XNNPACK).
        batch_size: the batch the figures were measured on.
        inputs, outputs: a `TensorInfo` per input and output of the file:
            name, dtype, shape (`-1`: dynamic), and the scale and zero
            point of an integer (quantized) tensor.
        gpu: a `gpu.GpuCompatibility`: whether the TFLite GPU delegate
            would run every op (`gpu.compatible`) and, if not, which ops
            fall back to the CPU and why (`gpu.fallbacks`).
        quantization: the file's mode, read from its tensors' types:
            `"float32"`, `"float16"`, `"dynamic_int8"`, `"int8"`,
            `"full_int8"` or `"int16x8"` (a dynamic_int8 file whose
            weights all stayed float, as the converter leaves tensors under
            1,024 elements, reads as float32, and computes as one).
        expected_max_rel_error: the bound of that mode's usual
            `max_rel_error` (`EXPECTED_MAX_REL_ERROR`, raised to
            `ROUNDING_MARGIN` (10) times the Keras model's own rounding
            floor where that is larger: how far its outputs move when its
            float inputs move by one unit in the last place, relative to
            the largest output; about 1e-7 for most models, 3e-4 for an
            uncentred `ComplexISTFT`, which divides its edge samples by a
            near-zero window envelope), or the one given to
            `verify_tflite`.
        within_expected: (a property) whether `max_rel_error` is within
            it; `warning` (a property) is then `None`, otherwise one line
            that says the error is far outside the mode's usual one, which
            `str(report)` prints last.
    """

    path: str
    size_bytes: int
    ops: tuple
    non_builtin_ops: tuple
    max_abs_error: float
    max_rel_error: float
    median_latency_ms: float
    batch_size: int
    inputs: tuple = ()
    outputs: tuple = ()
    gpu: object = None
    weight_bytes: int = None
    quantization: str = None
    expected_max_rel_error: float = None

    @property
    def builtin_only(self):
        return not self.non_builtin_ops

    @property
    def warning(self):
        """`None`, or one line saying that the error is far outside the
        mode's usual error (`within_expected` is False) and what to check.
        """
        if self.within_expected:
            return None
        mode = self.quantization
        hint = (
            "the calibration inputs were unlike the verified ones (random "
            "ones, or another scale): calibrate on typical inputs "
            "(representative_data; on the command line --representative-"
            "data FILE.npz) and verify on such inputs"
            if mode in _CALIBRATED
            else "was the file exported from this model?"
        )
        return (
            f"max rel error {self.max_rel_error:.3g} is far above the "
            f"usual error of {mode} files (bound "
            f"{self.expected_max_rel_error:g}): "
            f"{hint}; a deep model with random weights can exceed it too "
            "(docs/deploy.md)"
        )

    @property
    def rest_bytes(self):
        if self.weight_bytes is None:
            return None
        return self.size_bytes - self.weight_bytes

    def __str__(self):
        flagged = ", ".join(self.non_builtin_ops) or "none"
        sizes = _sizes_text(self.size_bytes, self.weight_bytes)
        lines = [
            f"TFLite file      {self.path}",
            f"size             {sizes}",
            f"ops              {', '.join(self.ops)}",
            f"non-builtin ops  {flagged}",
        ]
        lines += [f"input            {info}" for info in self.inputs]
        lines += [f"output           {info}" for info in self.outputs]
        lines += [
            f"max abs error    {self.max_abs_error:.3g} (vs Keras)",
            f"max rel error    {self.max_rel_error:.3g} "
            "(abs error / max |output|)" + _expected_text(self),
            f"median latency   {self.median_latency_ms:.3f} ms "
            f"(batch {self.batch_size})",
        ]
        if self.gpu is not None:
            lines.append(f"GPU delegate     {_gpu_text(self)}")
        if self.warning is not None:
            lines.append(f"WARNING          {self.warning}")
        return "\n".join(lines)


def _gpu_text(report):
    """The GPU delegate's verdict: in full for a file of static input
    shapes (one meant for the delegate); in one line for a file with a
    dynamic input dimension, whose shape arithmetic always falls back
    (`report.gpu` still lists every fallback)."""
    gpu = report.gpu
    dynamic = any(-1 in tuple(info.shape) for info in report.inputs)
    if gpu.compatible or not dynamic:
        return str(gpu)
    return (
        f"not compatible: {len(gpu.fallbacks)} of {gpu.num_ops} ops fall "
        "back to the CPU (a dynamic-shape file: export with batch_size= "
        "for the delegate; print(report.gpu) lists them)"
    )


def _expected_text(report):
    """`"; usual for full_int8: <= 0.15"` (and `", FAR ABOVE"`)."""
    if report.expected_max_rel_error is None:
        return ""
    text = (
        f"; {report.quantization} files usually <= "
        f"{report.expected_max_rel_error:g}"
    )
    return text if report.within_expected else text + ": FAR ABOVE"


def _kib(size):
    return f"{size / 1024:.1f} KiB"


def _sizes_text(size_bytes, weight_bytes):
    """`"549.0 KiB (weight data 240.3 KiB, rest 308.7 KiB)"`."""
    if weight_bytes is None:
        return _kib(size_bytes)
    return (
        f"{_kib(size_bytes)} (weight data {_kib(weight_bytes)}, "
        f"rest {_kib(size_bytes - weight_bytes)})"
    )
