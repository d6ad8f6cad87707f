"""TFLite / LiteRT export with builtin ops only, ONNX export
(`export_onnx`, `verify_onnx` on ONNX Runtime; the optional extra `onnx`),
and parity verification.

A model made of this library's layers holds no complex dtype, so it converts
with `TFLITE_BUILTINS` alone: no Flex delegate, no custom ops. This module
is the only one that uses TensorFlow directly; it imports TensorFlow only
inside `export_tflite`, so the rest of the library does not pull TensorFlow
in on other backends.

    import cvattn_keras as cvk

    cvk.export.export_tflite(model, "model.tflite", quantization="float16")
    print(cvk.export.verify_tflite("model.tflite", model, sample_inputs))

Conversion needs TensorFlow. Under another Keras backend (JAX, torch),
`export_tflite` saves the model to a temporary `.keras` file (which is
backend-independent) and converts it in a subprocess that runs this
package's command line under `KERAS_BACKEND=tensorflow`; verification runs
on LiteRT under any backend.

Full-integer files (`quantization="full_int8"` or `"int16x8"`) for NPUs,
DSPs and the Edge TPU are always converted in such a subprocess (under
every backend): TensorFlow 2.21's quantizer can crash the whole process
(a segmentation fault) on some graphs, which must not take the caller
down with it.

`batch_size=` (and `sequence_length=`) give a graph of static shapes, with
no shape arithmetic, as GPU delegates and NPUs need;
`cvattn_keras.export.gpu.check_gpu_compatibility` (also in
`verify_tflite`'s report) lists what the TFLite GPU delegate would leave
to the CPU.

From the shell (under any `KERAS_BACKEND`): `python -m cvattn_keras.export
MODEL.keras OUT.tflite [--quantize float16|dynamic_int8|int8|full_int8|
int16x8] [--representative-data FILE.npz|random] [--static-batch N]
[--static-length L] [--verify] [--overwrite]` (the calibrated modes need
`--representative-data`; `--verify` exits with status 3 when the error is
far above the mode's usual one, `EXPECTED_MAX_REL_ERROR`).
"""

# The implementation lives in private modules, one concern each:
# `_modes` (the quantization modes and their usual errors), `_errors`,
# `_report` (`TFLiteReport`), `_arguments` (argument checks, input
# signature), `_calibration` (representative data), `_conversion`
# (`export_tflite`), `_subprocess` (the TensorFlow subprocess), `_files`
# (the atomic writer), `_reading` (a file's ops and sizes) and `_litert`
# (`predict_tflite`, `verify_tflite`).

from cvattn_keras.export import gpu
from cvattn_keras.export._conversion import export_tflite
from cvattn_keras.export._errors import FloatFallbackError
from cvattn_keras.export._errors import ONNXUnsupportedOpsError
from cvattn_keras.export._errors import UnsupportedOpsError
from cvattn_keras.export._litert import predict_tflite
from cvattn_keras.export._litert import verify_tflite
from cvattn_keras.export._modes import EXPECTED_MAX_REL_ERROR
from cvattn_keras.export._modes import QUANTIZATIONS
from cvattn_keras.export._reading import file_sizes
from cvattn_keras.export._report import TensorInfo
from cvattn_keras.export._report import TFLiteReport
from cvattn_keras.export._stream import TFLiteStream
from cvattn_keras.export._subprocess import SUBPROCESS_TIMEOUT
from cvattn_keras.export.generator import export_generator_tflite
from cvattn_keras.export.generator import generate_tflite
from cvattn_keras.export.gpu import check_gpu_compatibility
from cvattn_keras.export.onnx import ONNX_OPSETS
from cvattn_keras.export.onnx import ONNX_QUANTIZATIONS
from cvattn_keras.export.onnx import ONNXReport
from cvattn_keras.export.onnx import export_onnx
from cvattn_keras.export.onnx import verify_onnx

__all__ = [
    "EXPECTED_MAX_REL_ERROR",
    "FloatFallbackError",
    "ONNXReport",
    "ONNXUnsupportedOpsError",
    "ONNX_OPSETS",
    "ONNX_QUANTIZATIONS",
    "QUANTIZATIONS",
    "SUBPROCESS_TIMEOUT",
    "TFLiteReport",
    "TFLiteStream",
    "TensorInfo",
    "UnsupportedOpsError",
    "check_gpu_compatibility",
    "export_generator_tflite",
    "export_tflite",
    "file_sizes",
    "generate_tflite",
    "export_onnx",
    "gpu",
    "predict_tflite",
    "verify_onnx",
    "verify_tflite",
]
