"""Keras layers on stacked complex tensors ([real | imag] on the last axis)."""

from cvattn_keras.layers.activations import ComplexActivation
from cvattn_keras.layers.activations import ModReLU
from cvattn_keras.layers.attention import ComplexMultiHeadAttention
from cvattn_keras.layers.batch_normalization import ComplexBatchNormalization
from cvattn_keras.layers.conversion import ComplexFromReal
from cvattn_keras.layers.conversion import ComplexModulus
from cvattn_keras.layers.conversion import RealReadout
from cvattn_keras.layers.convolution import ComplexConv1D
from cvattn_keras.layers.convolution_2d import ComplexConv2D
from cvattn_keras.layers.convolution_2d import ComplexConv2DTranspose
from cvattn_keras.layers.dense import ComplexDense
from cvattn_keras.layers.dropout import ComplexDropout
from cvattn_keras.layers.embeddings import ComplexRotaryEmbedding
from cvattn_keras.layers.embeddings import SinusoidalPositionalEncoding
from cvattn_keras.layers.fourier import ComplexDataConsistency
from cvattn_keras.layers.fourier import ComplexFFT2D
from cvattn_keras.layers.frontend import ComplexFrequencyFrontEnd
from cvattn_keras.layers.gau import ComplexGatedAttentionUnit
from cvattn_keras.layers.low_rank import ComplexLowRankAttention
from cvattn_keras.layers.lsh import ComplexLSHAttention
from cvattn_keras.layers.masks import ComplexCompression
from cvattn_keras.layers.masks import ComplexMask
from cvattn_keras.layers.masks import ComplexScale
from cvattn_keras.layers.normalization import ComplexLayerNormalization
from cvattn_keras.layers.normalization import ComplexRMSNormalization
from cvattn_keras.layers.patches import ComplexPatchEmbedding
from cvattn_keras.layers.patches import ComplexPatchUnembedding
from cvattn_keras.layers.pooling import ComplexAveragePooling2D
from cvattn_keras.layers.pooling import ComplexMaxPooling2D
from cvattn_keras.layers.pooling import ComplexUpSampling2D
from cvattn_keras.layers.sparse import ComplexSparseAttention
from cvattn_keras.layers.stft import ComplexISTFT
from cvattn_keras.layers.stft import ComplexSTFT
from cvattn_keras.layers.transformer import ComplexTransformerDecoder
from cvattn_keras.layers.transformer import ComplexTransformerEncoder

__all__ = [
    "ComplexActivation",
    "ComplexAveragePooling2D",
    "ComplexBatchNormalization",
    "ComplexCompression",
    "ComplexConv1D",
    "ComplexConv2D",
    "ComplexConv2DTranspose",
    "ComplexDataConsistency",
    "ComplexDense",
    "ComplexDropout",
    "ComplexFFT2D",
    "ComplexFrequencyFrontEnd",
    "ComplexFromReal",
    "ComplexGatedAttentionUnit",
    "ComplexISTFT",
    "ComplexLayerNormalization",
    "ComplexLSHAttention",
    "ComplexLowRankAttention",
    "ComplexMask",
    "ComplexMaxPooling2D",
    "ComplexModulus",
    "ComplexMultiHeadAttention",
    "ComplexPatchEmbedding",
    "ComplexPatchUnembedding",
    "ComplexRMSNormalization",
    "ComplexRotaryEmbedding",
    "ComplexSTFT",
    "ComplexScale",
    "ComplexSparseAttention",
    "ComplexTransformerDecoder",
    "ComplexTransformerEncoder",
    "ComplexUpSampling2D",
    "ModReLU",
    "RealReadout",
    "SinusoidalPositionalEncoding",
]
