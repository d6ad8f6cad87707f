"""cvattn_keras: complex-valued attention for Keras 3 in real arithmetic.

Every complex tensor is stored as real channels, `[real | imag]` on the last
axis (see `cvattn_keras.complex`), and every complex operation is explicit
real arithmetic, so models train under any Keras backend, compile with XLA,
use mixed precision and convert to TFLite with builtin ops.
"""

__version__ = "0.1.0"

from cvattn_keras import activations
from cvattn_keras import attention
from cvattn_keras import complex
from cvattn_keras import datasets
from cvattn_keras import distribution
from cvattn_keras import export
from cvattn_keras import initializers
from cvattn_keras import interop
from cvattn_keras import layers
from cvattn_keras import metrics
from cvattn_keras import models
from cvattn_keras.complex import from_stacked
from cvattn_keras.complex import to_stacked

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
    "to_stacked",
]
