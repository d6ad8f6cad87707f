"""cvattn_keras: complex-valued attention for Keras 3 in real arithmetic.

Every complex tensor is stored as real channels, `[real | imag]` on the last
axis (see `cvattn_keras.complex`), and every complex operation is explicit
real arithmetic, so models train under any Keras backend, compile with XLA,
use mixed precision and convert to TFLite with builtin ops.
"""

__version__ = "0.1.0"

# First, before any submodule imports Keras (and so TensorFlow): quiets
# TensorFlow's C++ start-up lines under `python -m cvattn_keras...` or
# CVATTN_KERAS_QUIET_STARTUP=1, and does nothing otherwise.
from cvattn_keras import _startup

_startup.quiet_startup_if_asked()

from cvattn_keras import activations  # noqa: E402
from cvattn_keras import attention  # noqa: E402
from cvattn_keras import complex  # noqa: E402
from cvattn_keras import datasets  # noqa: E402
from cvattn_keras import distribution  # noqa: E402
from cvattn_keras import export  # noqa: E402
from cvattn_keras import initializers  # noqa: E402
from cvattn_keras import interop  # noqa: E402
from cvattn_keras import layers  # noqa: E402
from cvattn_keras import metrics  # noqa: E402
from cvattn_keras import models  # noqa: E402
from cvattn_keras import quantization  # noqa: E402
from cvattn_keras import streaming  # noqa: E402
from cvattn_keras.complex import from_stacked  # noqa: E402
from cvattn_keras.complex import to_stacked  # noqa: E402

__all__ = [
    "activations",
    "attention",
    "complex",
    "datasets",
    "distribution",
    "export",
    "from_stacked",
    "initializers",
    "interop",
    "layers",
    "metrics",
    "models",
    "quantization",
    "streaming",
    "to_stacked",
]
