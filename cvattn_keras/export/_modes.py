"""The quantization modes of `export_tflite` and the error that a file of
each mode usually shows (`EXPECTED_MAX_REL_ERROR`, for `verify_tflite`)."""

QUANTIZATIONS = (
    None,
    "float16",
    "dynamic_int8",
    "int8",
    "full_int8",
    "int16x8",
)
"""The modes of `export_tflite(quantization=...)`; `None` is a float32
file.
"""

# The modes calibrated on `representative_data`, and the full-integer ones
# among them (integer inputs and outputs, no float kernel allowed).
_CALIBRATED = ("int8", "full_int8", "int16x8")
_FULL_INTEGER = ("full_int8", "int16x8")

# The largest `max_rel_error` (`verify_tflite`) that a file of each mode
# usually shows: about 2 to 3 times the largest error measured on this
# library's models, calibrated and verified on inputs of one distribution
# (docs/deploy.md, "Verification"): float32 8e-7, float16 6.8e-4,
# dynamic_int8 2.5e-2, int8 and full_int8 3.6e-2 to 6e-2 (one layer, the
# two-layer benchmark, the tiny music classifier), int16x8 7e-3 to
# 1.7e-2. Beyond it the report warns (`TFLiteReport.within_expected`) and
# `python -m cvattn_keras.export --verify` exits with status 3.
EXPECTED_MAX_REL_ERROR = {
    "float32": 1e-4,
    "float16": 1e-2,
    "dynamic_int8": 0.1,
    "int8": 0.15,
    "full_int8": 0.15,
    "int16x8": 0.05,
}
"""The largest `max_rel_error` (`verify_tflite`, `verify_onnx`) that a
file of each mode usually shows, by mode name (`"float32"` for no
quantization). Beyond it the report warns
(`TFLiteReport.within_expected`).
"""
