"""Keras layers on stacked complex tensors ([real | imag] on the last axis)."""

from cvattn_keras.layers.attention import ComplexMultiHeadAttention
from cvattn_keras.layers.dense import ComplexDense

__all__ = ["ComplexDense", "ComplexMultiHeadAttention"]
