"""Weights of the reference PyTorch implementation (Eilers & Jiang's code).

`load_reference_state_dict` loads a reference `state_dict` (its parameter
names mapped to torch tensors or NumPy arrays) into the matching object of
this library, and `reference_state_dict` is the inverse: NumPy arrays in
the reference's names, shapes and dtypes, which the reference module takes
with `load_state_dict`. Nothing here imports torch: tensors are recognised
by their `detach`/`cpu`/`numpy` methods. The command line
`python -m cvattn_keras.interop CHECKPOINT.pt OUT.keras --model classifier`
turns a `torch.save`d checkpoint into a `.keras` file (it needs torch).

Mappings (library object -> reference module; reference names relative
to the object being loaded):

- `ComplexDense` -> `ComplexLinear`: `kernel_real` = `Linear_real.weight`
  transposed, `kernel_imag` = `Linear_img.weight` transposed (weights are
  `[out, in]` there); `bias_real` = `b_r - b_i`, `bias_imag` = `b_r + b_i`
  of `b_r` = `Linear_real.bias`, `b_i` = `Linear_img.bias`.
- `ComplexConv1D` (kernel `(k, in, out)`) -> `Complex_Conv1d`:
  `Conv_real.weight`, `Conv_imag.weight` `[out, in, k]`, biases as above.
- `ComplexBatchNormalization(convention="reference")` ->
  `Complex_BatchNorm1d`: `w0, w1, w2` = `weights[:, 0, k, 0]` (float32
  `(C, 1, 3, 1)`); `bias_real + i bias_imag` = `bias` (complex64
  `(1, C, 1)`); `moving_mean_real + i moving_mean_imag` = `running_mean`
  (complex64 `(1, C, 1)`, untrained `(C,)`); `moving_whitening_rr, _ri,
  _ir, _ii` = `running_cov[0, c]` = `[[rr, ri], [ir, ii]]` (float32
  `(1, C, 2, 2)`, R the inverse square root; untrained the identity
  `(C, C)`).
- `ComplexLayerNormalization` (whitening) -> `Complex_LayerNorm`:
  `w0, w1, w2` = `weights[:, k, 0]` (float32 `(E, 3, 1)`), `bias_real +
  i bias_imag` = `bias` (complex64 `(1, 1, E)`).
- `ComplexMultiHeadAttention` -> `MultiheadAttention`: `query_dense`,
  `key_dense`, `value_dense`, `output_dense` -> `in_proj_q`, `in_proj_k`,
  `in_proj_v`, `out_proj`.
- `ComplexTransformerEncoder` -> `TransformerEncoderLayer`:
  `self_attention` -> `self_attn`, `feedforward_in` -> `linear1`,
  `feedforward_out` -> `linear2`, `self_attention_norm` ->
  `layer_norms.0`, `feedforward_norm` -> `layer_norms.1`.
- `ComplexTransformerDecoder` -> `TransformerDecoderLayer`:
  `self_attention` -> `self_attn` (causal), `cross_attention` -> `attn`,
  `feedforward_in`, `feedforward_out` -> `linear1`, `linear2`,
  `self_attention_norm`, `cross_attention_norm`, `feedforward_norm` ->
  `layer_norms.0`, `layer_norms.1`, `layer_norms.2`.
- `RealReadout` -> `final_out`, an `nn.Linear(2, 1)` over (Re, Im):
  `kernel` (2,) = `weight[0]` of `(1, 2)`, `bias` () = `bias[0]` of `(1,)`.
- `ComplexFrequencyFrontEnd` -> the front end `nn.Sequential`:
  `convolutions[b]` -> `{3b}`, `norms[b]` -> `{3b + 1}`.
- a `music_classifier` model -> `Transformer_Pred`: `frontend` -> `conv`,
  `embedding` -> `in_embedding`, `encoder_{i}` -> `encoder.layers.{i}`,
  `head_dense` -> `output_linear_1`, `head_notes` -> `output_linear_2`,
  `note_logits` -> `final_out`.
- a `music_generator` model -> `Transformer_Generation`: `frontend` ->
  `conv_src`, `embedding` -> `in_embedding_src`, `note_embedding` ->
  `in_embedding_tgt`, `encoder_{i}` -> `encoder.layers.{i}`, `decoder_{i}`
  -> `decoder.layers.{i}`, and the classifier's head.

A model is recognised by its layers' names and types, not by the function
that built it.

Only weights travel. What the reference fixes in its constructors (the
number of heads, strides, the attention variant, dropout rates) is not in
a state dict: the object must be built with the same values (the model
builders' defaults are the reference's; the command line takes them as
options). An object whose variables cannot mean what the reference's
parameters mean is a `ValueError`: a `ComplexBatchNormalization` of the
Trabelsi convention, a naive or RMS layer norm, a norm with only one of
`center` and `scale` (the reference has both or neither), a decoder
without cross-attention.

The redundant bias pair. `ComplexLinear` and `Complex_Conv1d` add
`b_r` and `b_i` so that the effective complex bias is
`(b_r - b_i) + i (b_r + b_i)`; the loader computes it in float64 and
rounds once to the variables' float32 (the nearest float32 to the exact
value). The inverse cannot always be exact: for `bias_real = 1 + 2**-23`,
`bias_imag = 1` no float32 pair `(b_r, b_i)` has these rounded sum and
difference. `reference_state_dict` searches the float32 neighbours of
`((x + y) / 2, (y - x) / 2)` (two units in the last place either way) for
a pair that loads back bit-exactly, and takes the candidate nearest to
the target otherwise. Measured over 200,000 random biases each: every
bias that came from a reference checkpoint (any bias the loader can
produce) has such a pair and the search finds it, so reference ->
library -> reference -> library is bitwise exact, whatever the scales.
Of arbitrary float32 biases (e.g. trained in Keras) about half have no
exact pair: 50.9% are exact for independent standard-normal parts, 2.8%
when the two parts' scales differ by up to 1e40, 100% for zero biases
(the initial ones); the others load back within one unit in the last
place of the larger of `|bias_real|`, `|bias_imag|` (the smaller part
can lose relative precision: the reference's parametrisation cannot
represent it).
"""

# `_kind_error` (used by `__main__`) and `BATCH_NORM_STATISTICS` (the
# values of `reference_state_dict(batch_norm_statistics=...)`) stay
# importable from here, outside `__all__`.
from cvattn_keras.interop._bias import bias_to_pair
from cvattn_keras.interop._loading import LoadResult
from cvattn_keras.interop._loading import load_reference_state_dict
from cvattn_keras.interop._models import _kind_error  # noqa: F401
from cvattn_keras.interop._models import model_kind
from cvattn_keras.interop._saving import BATCH_NORM_STATISTICS  # noqa: F401
from cvattn_keras.interop._saving import reference_state_dict

__all__ = [
    "LoadResult",
    "bias_to_pair",
    "load_reference_state_dict",
    "model_kind",
    "reference_state_dict",
]
