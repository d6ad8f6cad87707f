"""cvattn_keras.interop: reference state dicts in and out.

Each mapping is checked against tests/reference_model.py, a NumPy
complex128 forward of the reference modules written from their formulas
and applied to the reference-named state dict itself (never to our
variables). State dicts are random, in the reference's names, shapes and
dtypes (reference-semantics.md, "The MusicNet models and their state
dicts"); the reference code is not needed.
"""

import os
import sys

import keras
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

import numpy_reference  # noqa: E402
import reference_model as ref  # noqa: E402

from cvattn_keras import interop  # noqa: E402
from cvattn_keras import layers as cl  # noqa: E402
from cvattn_keras import models  # noqa: E402
from cvattn_keras.interop import __main__ as cli  # noqa: E402
from cvattn_keras.interop import _bias  # noqa: E402

# float32 layers against complex128 formulas: a few float32 roundings per
# operation through at most ~15 chained operations (a whole small model),
# relative to the output's largest entry.
LAYER_TOL = 2e-5
MODEL_TOL = 1e-4

SMALL = dict(
    bins=64,
    notes=6,
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=12,
    frontend_filters=(3, 4),
    frontend_kernel_sizes=(6, 3),
)


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _stack(z):
    """complex (..., n) -> float32 (..., 2n) [Re | Im]."""
    return np.concatenate([z.real, z.imag], -1).astype(np.float32)


def _unstack(x):
    x = np.asarray(x, np.float64)
    n = x.shape[-1] // 2
    return x[..., :n] + 1j * x[..., n:]


def _complex_normal(rng, shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def _rel(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _weights(obj):
    return [_np(w) for w in obj.weights]


def _classifier(**kwargs):
    return models.music_classifier(frames=5, **{**SMALL, **kwargs})


def _generator(**kwargs):
    return models.music_generator(
        source_frames=5, target_frames=4, **{**SMALL, **kwargs}
    )


def _random_model_sd(rng, kind):
    return ref.random_model(
        rng,
        kind,
        SMALL["bins"],
        SMALL["frontend_filters"],
        SMALL["frontend_kernel_sizes"],
        SMALL["embed_dim"],
        SMALL["num_layers"],
        SMALL["head_dim"],
        SMALL["notes"],
    )


# ---------------------------------------------------------------------------
# Each mapping against the reference formulas.
# ---------------------------------------------------------------------------


def test_dense_is_complex_linear(rng):
    sd = ref.random_linear(rng, 5, 3)
    layer = cl.ComplexDense(3)
    layer.build((None, 4, 10))
    result = interop.load_reference_state_dict(layer, sd)
    assert result.loaded["Linear_real.weight"] == ("kernel_real",)
    assert result.loaded["Linear_img.bias"] == ("bias_real", "bias_imag")
    x = _complex_normal(rng, (2, 4, 5))
    got = _unstack(_np(layer(_stack(x))))
    assert _rel(got, ref.complex_linear(sd, "", x)) < LAYER_TOL
    # The effective bias, not b_r + i b_i; rtol 1e-6: one float32 rounding
    # of the float64 sum (2^-24 relative).
    b_r, b_i = sd["Linear_real.bias"], sd["Linear_img.bias"]
    np.testing.assert_allclose(_np(layer.bias_real), b_r - b_i, rtol=1e-6)
    np.testing.assert_allclose(_np(layer.bias_imag), b_r + b_i, rtol=1e-6)


def test_conv_is_complex_conv1d(rng):
    sd = ref.random_conv(rng, 2, 4, 3)
    layer = cl.ComplexConv1D(4, 3, strides=2)
    layer.build((None, 11, 4))
    interop.load_reference_state_dict(layer, sd)
    x = _complex_normal(rng, (2, 2, 11))  # the reference's (N, C, L)
    got = _np(layer(_stack(np.transpose(x, (0, 2, 1)))))  # (N, L', 2C)
    want = ref.complex_conv1d(sd, "", x, 2)  # (N, C', L')
    assert _rel(_unstack(got), np.transpose(want, (0, 2, 1))) < LAYER_TOL


def _reference_batch_norm(channels):
    layer = cl.ComplexBatchNormalization(
        momentum=0.5, epsilon=1e-9, convention="reference"
    )
    layer.build((None, 7, 2 * channels))
    return layer


def test_batch_norm_inference_is_reference(rng):
    sd = ref.random_batch_norm(rng, 3)
    layer = _reference_batch_norm(3)
    interop.load_reference_state_dict(layer, sd)
    x = 2 * _complex_normal(rng, (4, 3, 7)) + 0.5  # (N, C, L)
    got = _np(layer(_stack(np.transpose(x, (0, 2, 1))), training=False))
    want = ref.batch_norm(sd, "", x)
    assert _rel(_unstack(got), np.transpose(want, (0, 2, 1))) < LAYER_TOL
    # R is the reference's running_cov[0, c] = [[rr, ri], [ir, ii]].
    cov = sd["running_cov"][0]
    assert np.array_equal(_np(layer.moving_whitening_ri), cov[:, 0, 1])
    assert np.array_equal(_np(layer.moving_whitening_ii), cov[:, 1, 1])


def test_batch_norm_untrained_placeholders_load_as_initial(rng):
    sd = ref.random_batch_norm(rng, 3, trained=False)
    layer = _reference_batch_norm(3)
    for v in layer.non_trainable_weights:
        v.assign(v + 0.25)
    interop.load_reference_state_dict(layer, sd)
    assert np.array_equal(_np(layer.moving_mean_real), np.zeros(3))
    assert np.array_equal(_np(layer.moving_whitening_rr), np.ones(3))
    assert np.array_equal(_np(layer.moving_whitening_ir), np.zeros(3))
    out = interop.reference_state_dict(layer, "untrained")
    assert out["running_mean"].shape == (3,)
    assert np.array_equal(out["running_cov"], np.eye(3))


def test_layer_norm_is_reference(rng):
    sd = ref.random_layer_norm(rng, 6)
    layer = cl.ComplexLayerNormalization()
    layer.build((None, 4, 12))
    interop.load_reference_state_dict(layer, sd)
    x = _complex_normal(rng, (2, 4, 6)) * 3 + (1 - 2j)
    got = _unstack(_np(layer(_stack(x))))
    # The library adds epsilon 1e-5 to variances of order 9: ~1e-6 relative.
    assert _rel(got, ref.layer_norm(sd, "", x)) < LAYER_TOL


@pytest.mark.parametrize(
    "tokens, expected", numpy_reference.LAYER_NORM_FIXTURES
)
def test_layer_norm_fixtures_at_initial_parameters(tokens, expected):
    # The fixtures of reference-semantics.md, through a reference-named
    # state dict at the reference's initial parameters (1, 1, 0), bias 0.
    sd = {
        "weights": np.tile(np.array([1, 1, 0], np.float32), (4, 1))[..., None],
        "bias": np.zeros((1, 1, 4), np.complex64),
    }
    x = np.array([tokens], np.complex128)
    want = ref.layer_norm(sd, "", x)[0]
    # The fixtures are printed to 6 decimals.
    np.testing.assert_allclose(want, expected, atol=2e-6)
    layer = cl.ComplexLayerNormalization()
    layer.build((None, 8))
    interop.load_reference_state_dict(layer, sd)
    # epsilon 1e-5 on variances of order 1.
    np.testing.assert_allclose(
        _unstack(_np(layer(_stack(x))))[0], expected, atol=2e-5
    )
    # epsilon 0, the reference's arithmetic: to the printed digits.
    exact = cl.ComplexLayerNormalization(epsilon=0)
    exact.build((None, 8))
    interop.load_reference_state_dict(exact, sd)
    np.testing.assert_allclose(
        _unstack(_np(exact(_stack(x))))[0], expected, atol=2e-6
    )


def test_layer_norm_epsilon_zero_is_the_reference_arithmetic(rng):
    """Issue 22, item 12: the reference's LayerNorm has no epsilon; ours
    with epsilon 0 computes the same (float32 rounding), where 1e-5 moves
    tokens of variance 1e-4 by about 5%."""
    sd = ref.random_layer_norm(rng, 6)
    x = _complex_normal(rng, (2, 4, 6)) * 0.01 + (1 - 2j)
    want = ref.layer_norm(sd, "", x)
    errors = {}
    for epsilon in (0.0, 1e-5):
        layer = cl.ComplexLayerNormalization(epsilon=epsilon)
        layer.build((None, 4, 12))
        interop.load_reference_state_dict(layer, sd)
        errors[epsilon] = _rel(_unstack(_np(layer(_stack(x)))), want)
    # Measured ~3e-6 (the offset 1 - 2j costs float32 digits) and 0.02.
    assert errors[0.0] < LAYER_TOL
    assert errors[1e-5] > 100 * errors[0.0]


def test_ported_model_with_epsilon_zero_is_closer_to_the_reference(rng):
    """Issue 22, item 12: with the reference's arithmetic, the rest of the
    difference is float32 rounding (measured 4e-7 to 1.5e-6 over seeds,
    against 1.8e-6 to 2.9e-6 with epsilon 1e-5)."""
    sd = _random_model_sd(rng, "classifier")
    src = _complex_normal(rng, (3, 5, SMALL["bins"]))
    want = ref.classifier(sd, src, SMALL["num_heads"])
    errors = {}
    for epsilon in (0.0, 1e-5):
        model = _classifier(layer_norm_epsilon=epsilon)
        interop.load_reference_state_dict(model, sd)
        got = _np(model(_stack(src), training=False))
        errors[epsilon] = _rel(got, want)
    assert errors[0.0] < 1e-5 and errors[0.0] < errors[1e-5]


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_half_precision_torch_tensors_load(rng):
    """Issue 22, item 7: torch's complex32 was "not an array or tensor
    (Got unsupported ScalarType ComplexHalf)"; float16, bfloat16 and
    complex32 load as their exact float32 / complex64 values."""
    torch = pytest.importorskip("torch")
    sd = ref.random_layer_norm(rng, 6)
    layer = cl.ComplexLayerNormalization()
    layer.build((None, 12))
    for real, complex_ in (
        (torch.float16, torch.complex32),
        (torch.bfloat16, torch.complex32),
        (torch.float32, torch.complex64),
    ):
        half = {
            "weights": torch.from_numpy(sd["weights"]).to(real),
            "bias": torch.from_numpy(sd["bias"]).to(complex_),
        }
        interop.load_reference_state_dict(layer, half)
        # The same numbers, widened exactly.
        assert np.array_equal(
            _np(layer.w0), half["weights"].float().numpy()[:, 0, 0]
        )
        bias = half["bias"].to(torch.complex64).numpy().reshape(-1)
        assert np.array_equal(_np(layer.bias_real), bias.real)
        assert np.array_equal(_np(layer.bias_imag), bias.imag)


@pytest.mark.parametrize(
    "variant",
    ["realip", "absip", "absonlyip", "naivip", "realcp", "naivcp"],
)
def test_attention_is_reference(rng, variant):
    from cvattn_keras.attention import parse_variant

    softmax, product = parse_variant(variant)
    sd = ref.random_attention(rng, 8)
    layer = cl.ComplexMultiHeadAttention(2, 4, softmax=softmax, product=product)
    layer.build((None, 5, 16), (None, 3, 16))
    result = interop.load_reference_state_dict(layer, sd)
    assert result.loaded["in_proj_k.Linear_real.weight"] == (
        "key_dense.kernel_real",
    )
    q, kv = _complex_normal(rng, (2, 5, 8)), _complex_normal(rng, (2, 3, 8))
    got = _unstack(_np(layer(_stack(q), _stack(kv))))
    want = ref.attention(sd, "", q, kv, kv, 2, variant, causal=False)
    assert _rel(got, want) < LAYER_TOL


def test_encoder_layer_is_reference(rng):
    sd = ref.random_encoder_layer(rng, 8)
    layer = cl.ComplexTransformerEncoder(2)
    layer.build((None, 5, 16))
    interop.load_reference_state_dict(layer, sd)
    x = _complex_normal(rng, (2, 5, 8))
    got = _unstack(_np(layer(_stack(x))))
    want = ref.encoder_layer(sd, "", x, 2, "realip")
    assert _rel(got, want) < LAYER_TOL * 5  # two norms, seven products


def test_decoder_layer_is_reference_and_causal(rng):
    sd = ref.random_decoder_layer(rng, 8)
    layer = cl.ComplexTransformerDecoder(2)
    layer.build((None, 4, 16), (None, 6, 16))
    result = interop.load_reference_state_dict(layer, sd)
    assert result.loaded["layer_norms.1.weights"][0].startswith(
        "cross_attention_norm."
    )
    assert result.loaded["attn.out_proj.Linear_real.weight"] == (
        "cross_attention.output_dense.kernel_real",
    )
    x, enc = _complex_normal(rng, (2, 4, 8)), _complex_normal(rng, (2, 6, 8))
    got = _unstack(_np(layer(_stack(x), _stack(enc))))
    want = ref.decoder_layer(sd, "", x, enc, 2, "realip")
    assert _rel(got, want) < LAYER_TOL * 5
    # Causal: the first token does not see the others.
    x2 = x.copy()
    x2[:, 1:] += 5
    first = ref.decoder_layer(sd, "", x2, enc, 2, "realip")[:, 0]
    np.testing.assert_allclose(first, want[:, 0], rtol=1e-12)


def test_readout_is_final_out(rng):
    sd = {
        "weight": np.array([[0.7, -1.3]], np.float32),
        "bias": np.array([0.25], np.float32),
    }
    layer = cl.RealReadout()
    layer.build((None, 6))
    interop.load_reference_state_dict(layer, sd)
    x = _complex_normal(rng, (4, 3))
    want = 0.7 * x.real - 1.3 * x.imag + 0.25
    # Three float32 operations: a few 2^-24 relative.
    np.testing.assert_allclose(_np(layer(_stack(x))), want, rtol=1e-5)


def test_frontend_is_reference(rng):
    sd = ref.random_frontend(rng, (3, 4), (6, 3))
    layer = cl.ComplexFrequencyFrontEnd((3, 4), (6, 3))
    layer.build((None, 5, 128))
    result = interop.load_reference_state_dict(layer, sd)
    assert result.loaded["3.Conv_imag.weight"] == (
        "convolutions.1.kernel_imag",
    )
    assert result.loaded["4.running_cov"][0] == ("norms.1.moving_whitening_rr")
    x = _complex_normal(rng, (2, 5, 64))
    got = _unstack(_np(layer(_stack(x), training=False)))
    want = ref.frontend(sd, "", x, 2)
    assert got.shape == want.shape == (2, 5, 4 * 14)  # 64 -> 30 -> 14 bins
    assert _rel(got, want) < LAYER_TOL


def _model_parity(kind, rng):
    sd = _random_model_sd(rng, kind)
    src = _complex_normal(rng, (3, 5, SMALL["bins"]))
    if kind == "classifier":
        model = _classifier()
        interop.load_reference_state_dict(model, sd)
        got = _np(model(_stack(src), training=False))
        want = ref.classifier(sd, src, SMALL["num_heads"])
    else:
        model = _generator()
        interop.load_reference_state_dict(model, sd)
        tgt = (rng.uniform(size=(3, 4, SMALL["notes"])) > 0.5).astype(float)
        previous = models.shift_right(tgt)  # the reference shifts inside
        got = _np(model([_stack(src), previous], training=False))
        want = ref.generator(sd, src, tgt, SMALL["num_heads"])
    return _rel(got, want)


@pytest.mark.parametrize("kind", ["classifier", "generator"])
def test_whole_model_is_reference(rng, kind):
    # Measured up to 1.2e-5 over seeds (float32 through a whole model);
    # MODEL_TOL leaves a margin of about 8.
    assert _model_parity(kind, rng) < MODEL_TOL


def test_model_kind_from_layers():
    assert interop.model_kind(_classifier()) == "classifier"
    assert interop.model_kind(_generator()) == "generator"


# ---------------------------------------------------------------------------
# Round trips.
# ---------------------------------------------------------------------------


def test_reference_state_dict_names_shapes_dtypes(rng):
    model = _generator()
    out = interop.reference_state_dict(model)
    sd = _random_model_sd(rng, "generator")
    assert list(out) == list(sd)  # the reference's key order
    for key, array in out.items():
        assert isinstance(array, np.ndarray)
        assert array.shape == sd[key].shape, key
        assert array.dtype == sd[key].dtype, key


def test_library_to_reference_to_library_is_exact(rng):
    # Random weights in every variable, biases loaded from a reference
    # checkpoint (as a ported model's are): everything back bit for bit.
    model = _classifier()
    interop.load_reference_state_dict(
        model, _random_model_sd(rng, "classifier")
    )
    for v in model.weights:
        if "bias" not in v.path:
            v.assign(rng.standard_normal(v.shape).astype(np.float32))
    fresh = _classifier()
    interop.load_reference_state_dict(
        fresh, interop.reference_state_dict(model)
    )
    for a, b in zip(_weights(model), _weights(fresh)):
        assert np.array_equal(a, b)


def test_reference_to_library_to_reference(rng):
    sd = _random_model_sd(rng, "generator")
    model = _generator()
    interop.load_reference_state_dict(model, sd)
    out = interop.reference_state_dict(model)
    again = _generator()
    interop.load_reference_state_dict(again, out)
    for a, b in zip(_weights(model), _weights(again)):
        assert np.array_equal(a, b)
    for key in sd:
        if key.endswith("Linear_real.bias") or key.endswith("Conv_real.bias"):
            # The redundant pair: another pair, the same effective bias.
            other = key.replace("_real.bias", "_img.bias").replace(
                "Conv_img", "Conv_imag"
            )
            want = _bias._loads_to(sd[key], sd[other], np.float32)
            got = _bias._loads_to(out[key], out[other], np.float32)
            assert all(np.array_equal(g, w) for g, w in zip(got, want))
        elif not key.endswith(("_img.bias", "Conv_imag.bias")):
            assert np.array_equal(out[key], sd[key]), key


def test_bias_pair_search_rates(rng):
    # Every bias a reference checkpoint can give (the loader's images) has
    # an exact pair, found; arbitrary float32 biases about half the time.
    n = 20000
    b = rng.standard_normal((2, n)) * 10.0 ** rng.uniform(-20, 20, (2, n))
    images = _bias._loads_to(
        b[0].astype(np.float32), b[1].astype(np.float32), np.float32
    )
    *_, exact = interop.bias_to_pair(*images)
    assert exact.all()
    x, y = rng.standard_normal((2, n)).astype(np.float32)
    b_r, b_i, exact = interop.bias_to_pair(x, y)
    assert 0.45 < exact.mean() < 0.56  # measured 0.509 over 200,000
    got = _bias._loads_to(b_r, b_i, np.float32)
    assert np.array_equal(got[0][exact], x[exact])
    assert np.array_equal(got[1][exact], y[exact])
    # Elsewhere within one unit in the last place of the larger part.
    unit = np.spacing(np.maximum(np.abs(x), np.abs(y)))
    for g, want in zip(got, (x, y)):
        assert np.all(np.abs(g - want) <= unit)
    # No pair exists: 1 + 2^-23, 1.
    x, y = np.float32([1 + 2**-23]), np.float32([1])
    assert not interop.bias_to_pair(x, y)[2][0]
    # Zero biases (the initial ones) are exact.
    assert interop.bias_to_pair(np.zeros(3), np.zeros(3))[2].all()


def test_torch_tensors_and_torch_save_round_trip(rng, tmp_path):
    torch = pytest.importorskip("torch")
    model = _classifier()
    sd = _random_model_sd(rng, "classifier")
    tensors = {k: torch.from_numpy(v.copy()) for k, v in sd.items()}
    tensors["in_embedding.Linear_real.weight"].requires_grad_(True)
    interop.load_reference_state_dict(model, tensors)
    path = tmp_path / "sd.pt"
    torch.save(
        {
            k: torch.from_numpy(v)
            for k, v in interop.reference_state_dict(model).items()
        },
        path,
    )
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    assert loaded["conv.1.bias"].dtype == torch.complex64
    fresh = _classifier()
    interop.load_reference_state_dict(fresh, loaded)
    for a, b in zip(_weights(model), _weights(fresh)):
        assert np.array_equal(a, b)


# ---------------------------------------------------------------------------
# Bad input.
# ---------------------------------------------------------------------------


def _dense():
    layer = cl.ComplexDense(3)
    layer.build((None, 10))
    return layer


def test_missing_unexpected_and_shape_in_one_error(rng):
    sd = ref.random_linear(rng, 5, 3)
    del sd["Linear_img.weight"]
    sd["Linear_real.weight"] = sd["Linear_real.weight"][:, :4]
    sd["extra.weight"] = np.zeros(2, np.float32)
    layer = _dense()
    before = _weights(layer)
    with pytest.raises(ValueError) as info:
        interop.load_reference_state_dict(layer, sd)
    message = str(info.value)
    assert "missing keys (1): Linear_img.weight" in message
    assert "unexpected keys (1): extra.weight" in message
    assert (
        "Linear_real.weight: expected shape (3, 5), received (3, 4)" in message
    )
    # Nothing was loaded.
    assert all(np.array_equal(a, b) for a, b in zip(before, _weights(layer)))


def test_not_strict_loads_what_fits(rng):
    sd = ref.random_linear(rng, 5, 3)
    del sd["Linear_img.bias"]
    sd["extra"] = np.zeros(2, np.float32)
    layer = _dense()
    result = interop.load_reference_state_dict(layer, sd, strict=False)
    assert set(result.loaded) == {"Linear_real.weight", "Linear_img.weight"}
    assert result.missing == ("Linear_img.bias",)
    assert result.unexpected == ("extra",)
    assert result.mismatched[0][0] == "Linear_real.bias"
    assert "missing or mismatched" in result.mismatched[0][1]
    np.testing.assert_array_equal(
        _np(layer.kernel_real), sd["Linear_real.weight"].T
    )


def test_real_for_complex_and_complex_for_real(rng):
    layer = cl.ComplexLayerNormalization()
    layer.build((None, 8))
    sd = ref.random_layer_norm(rng, 4)
    real_bias = dict(sd, bias=sd["bias"].real.copy())
    with pytest.raises(ValueError, match="bias: expected a complex"):
        interop.load_reference_state_dict(layer, real_bias)
    complex_weights = dict(sd, weights=sd["weights"].astype(np.complex64))
    with pytest.raises(ValueError, match="weights: expected a real"):
        interop.load_reference_state_dict(layer, complex_weights)
    ints = dict(sd, weights=np.ones((4, 3, 1), np.int64))
    with pytest.raises(ValueError, match="received dtype int64"):
        interop.load_reference_state_dict(layer, ints)


def test_checkpoint_of_the_other_model_kind(rng):
    with pytest.raises(ValueError, match="Transformer_Generation.*classifier"):
        interop.load_reference_state_dict(
            _classifier(), _random_model_sd(rng, "generator")
        )
    with pytest.raises(ValueError, match="Transformer_Pred.*generator"):
        interop.load_reference_state_dict(
            _generator(), _random_model_sd(rng, "classifier")
        )
    # Not strict: the parts they share (encoder, head) load.
    model = _classifier()
    result = interop.load_reference_state_dict(
        model, _random_model_sd(rng, "generator"), strict=False
    )
    assert "encoder.layers.0.self_attn.in_proj_q.Linear_real.weight" in (
        result.loaded
    )
    assert "conv.0.Conv_real.weight" in result.missing


def test_objects_that_cannot_hold_the_reference():
    norm = cl.ComplexBatchNormalization()  # Trabelsi convention
    norm.build((None, 6))
    with pytest.raises(ValueError, match='convention="reference"'):
        interop.reference_state_dict(norm)
    naive = cl.ComplexLayerNormalization(method="naive")
    naive.build((None, 6))
    with pytest.raises(ValueError, match="whitening"):
        interop.load_reference_state_dict(naive, {})
    with pytest.raises(ValueError, match="is not built"):
        interop.reference_state_dict(cl.ComplexDense(3))
    with pytest.raises(ValueError, match="no reference counterpart"):
        interop.reference_state_dict(keras.layers.Dense(3))
    decoder = cl.ComplexTransformerDecoder(2)
    decoder.build((None, 4, 16))
    with pytest.raises(ValueError, match="no cross-attention"):
        interop.reference_state_dict(decoder)
    inputs = keras.Input((4,))
    other = keras.Model(inputs, keras.layers.Dense(2, name="embedding")(inputs))
    with pytest.raises(ValueError, match="no layer 'frontend'"):
        interop.load_reference_state_dict(other, {})
    with pytest.raises(ValueError, match="must be a mapping"):
        interop.load_reference_state_dict(_dense(), [("a", 1)])


def test_untrained_statistics_only_when_initial(rng):
    layer = _reference_batch_norm(3)
    interop.load_reference_state_dict(layer, ref.random_batch_norm(rng, 3))
    with pytest.raises(ValueError, match="other than the initial"):
        interop.reference_state_dict(layer, batch_norm_statistics="untrained")
    with pytest.raises(ValueError, match="batch_norm_statistics"):
        interop.reference_state_dict(layer, batch_norm_statistics="fresh")
    bad = ref.random_batch_norm(rng, 3, trained=False)
    bad["running_cov"] = 2 * bad["running_cov"]
    with pytest.raises(ValueError, match="must be the identity"):
        interop.load_reference_state_dict(layer, bad)


def test_prefix_and_its_hint(rng):
    sd = ref.random_model(rng, "classifier", 64, (3, 4), (6, 3), 8, 1, 12, 6)
    layer = cl.ComplexTransformerEncoder(2)
    layer.build((None, 5, 16))
    with pytest.raises(ValueError, match="prefix='encoder.layers.0.'"):
        interop.load_reference_state_dict(layer, sd)
    result = interop.load_reference_state_dict(
        layer, sd, prefix="encoder.layers.0."
    )
    assert len(result.loaded) == 4 * 4 + 2 * 4 + 2 * 2


# ---------------------------------------------------------------------------
# The command line.
# ---------------------------------------------------------------------------


def _run(args, capsys):
    status = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_errors(tmp_path, capsys):
    out = tmp_path / "m.keras"
    args = ["--model", "classifier", "--variant", "realip"]
    status, _, err = _run([tmp_path / "none.pt", out, *args], capsys)
    assert status == 2 and "no such checkpoint file" in err
    text = tmp_path / "text.pt"
    text.write_text("not a checkpoint")
    out.write_text("already here")
    status, _, err = _run([text, out, *args], capsys)
    assert status == 2 and "exists; pass --overwrite" in err
    status, _, err = _run(
        [text, out, "--model", "classifier", "--variant", "real"], capsys
    )
    assert status == 2 and "exists" in err
    out.unlink()
    status, _, err = _run(
        [text, out, "--model", "classifier", "--variant", "realxp"], capsys
    )
    assert status == 2 and "--variant" in err
    assert "Traceback" not in err
    pytest.importorskip("torch")
    status, _, err = _run([text, out, *args], capsys)
    assert status == 2 and "not a readable torch.save file" in err


def _one_error_line(status, err):
    """Exit status 2 and one `error: ...` line, no traceback."""
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_cli_file_system_errors(tmp_path, capsys):
    """Issue 22, item 5: an OUT that is a directory (with --overwrite), a
    broken symbolic link or under a file raised IsADirectoryError,
    FileNotFoundError, NotADirectoryError from `model.save` (a traceback,
    exit status 1), after the whole conversion; a checkpoint that is a
    directory was "no such checkpoint file"."""
    checkpoint = tmp_path / "ckpt.pt"
    checkpoint.write_text("not a checkpoint")
    args = ["--model", "classifier", "--variant", "realip"]
    folder = tmp_path / "folder.keras"
    folder.mkdir()
    text = tmp_path / "file.txt"
    text.write_text("a file")
    dangling = tmp_path / "dangling.keras"
    dangling.symlink_to(tmp_path / "missing" / "m.keras")
    out = tmp_path / "m.keras"
    link_to_folder = tmp_path / "link.keras"
    link_to_folder.symlink_to(folder)
    cases = [
        ([checkpoint, folder, *args], "folder.keras is a directory"),
        ([checkpoint, folder, *args, "--overwrite"], "is a directory"),
        ([checkpoint, link_to_folder, *args, "--overwrite"], "is a directory"),
        (
            [checkpoint, dangling, *args, "--overwrite"],
            "missing/m.keras): its directory",
        ),
        ([checkpoint, text / "m.keras", *args], "file.txt is not a director"),
        ([checkpoint, tmp_path / "no" / "m.keras", *args], "is missing"),
        ([tmp_path, out, *args], "is a directory, not a file"),
        ([tmp_path / "none.pt", out, *args], "no such checkpoint file"),
        ([dangling, out, *args], "a broken symbolic link to"),
        ([checkpoint, out, *args, "--layer-norm-epsilon", "-1"], "epsilon"),
    ]
    for argv, match in cases:
        status, _, err = _run(argv, capsys)
        if "--layer-norm-epsilon" in argv:  # argparse: usage, then error
            assert status == 2 and match in err, err
            continue
        assert match in _one_error_line(status, err), err
    assert not out.exists() and folder.is_dir()


def test_cli_permission_errors(tmp_path, capsys, monkeypatch):
    """A directory without write permission and an unreadable checkpoint.
    Permissions do not bind root: as root, the same refusals are
    simulated (`os.access` and `open` as the command sees them)."""
    checkpoint = tmp_path / "ckpt.pt"
    checkpoint.write_text("not a checkpoint")
    args = ["--model", "classifier", "--variant", "realip"]
    locked = tmp_path / "locked"
    locked.mkdir()
    unreadable = tmp_path / "unreadable.pt"
    unreadable.write_text("secret")
    if getattr(os, "geteuid", lambda: 0)() == 0:

        def access(path, mode):
            return os.path.basename(path) != "locked"

        def open_(path, *args, **kwargs):
            if os.path.basename(path) == "unreadable.pt":
                raise PermissionError(13, "Permission denied", str(path))
            return open(path, *args, **kwargs)

        monkeypatch.setattr(cli.os, "access", access)
        monkeypatch.setattr(cli, "open", open_, raising=False)
    locked.chmod(0o500)
    unreadable.chmod(0o000)
    try:
        status, _, err = _run([checkpoint, locked / "m.keras", *args], capsys)
        assert "no permission to write" in _one_error_line(status, err)
        status, _, err = _run([unreadable, tmp_path / "m.keras", *args], capsys)
        line = _one_error_line(status, err)
        assert "cannot read the checkpoint" in line
        assert "Permission denied" in line
    finally:
        locked.chmod(0o700)
        unreadable.chmod(0o600)


def test_cli_save_errors_are_one_line(tmp_path):
    """What `model.save` raises at the end (the directory gone, a full
    disk, ...) is a `CommandError`, and leaves no partial file."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    gone = tmp_path / "gone" / "m.keras"
    with pytest.raises(cli.CommandError, match="cannot write m.keras: "):
        cli.save_model(model, "m.keras", str(gone))
    out = tmp_path / "m.keras"
    out.write_text("old")
    cli.save_model(model, "m.keras", str(out))
    assert keras.saving.load_model(out).count_params() == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.keras"]


def test_cli_save_keeps_the_mode_and_the_link(tmp_path):
    """The converted file is written as `open()` would write it: an
    existing file keeps its mode, a symbolic link stays a link to the
    file it names."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    out = tmp_path / "m.keras"
    out.write_text("old")
    out.chmod(0o640)
    cli.save_model(model, "m.keras", str(out))
    assert (out.stat().st_mode & 0o777) == 0o640
    assert keras.saving.load_model(out).count_params() == 3
    link = tmp_path / "link.keras"
    link.symlink_to(out.name)
    cli.save_model(model, "link.keras", os.path.realpath(link))
    assert link.is_symlink() and os.readlink(link) == out.name
    assert (out.stat().st_mode & 0o777) == 0o640
    # Without --overwrite, a file that appeared after the checks is kept.
    out.write_text("appeared")
    with pytest.raises(cli.CommandError, match="cannot write m.keras: "):
        cli.save_model(model, "m.keras", str(out), overwrite=False)
    assert out.read_text() == "appeared"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "link.keras",
        "m.keras",
    ]


def test_cli_not_a_state_dict(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    path = tmp_path / "list.pt"
    torch.save([torch.zeros(2)], path)
    out = tmp_path / "m.keras"
    status, _, err = _run(
        [path, out, "--model", "classifier", "--variant", "realip"], capsys
    )
    assert status == 2 and "does not hold a state dict" in err
    torch.save({"epoch": 3, "optimizer": {"lr": 1e-4}}, path)
    status, _, err = _run(
        [path, out, "--model", "classifier", "--variant", "realip"], capsys
    )
    assert status == 2 and "does not hold a state dict" in err
    assert not out.exists()


@pytest.mark.slow
def test_cli_converts_a_checkpoint(rng, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    sd = _random_model_sd(rng, "classifier")
    path = tmp_path / "ckpt.pt"
    torch.save(
        {
            "epoch": 7,
            "state_dict": {k: torch.from_numpy(v) for k, v in sd.items()},
        },
        path,
    )
    # A symbolic link to a file still to be written (its target is).
    out = tmp_path / "model.keras"
    (tmp_path / "models").mkdir()
    out.symlink_to(tmp_path / "models" / "ported.keras")
    args = [path, out, "--model", "classifier", "--variant", "realip"]
    status, _, err = _run([*args, "--bins", "64", "--num-heads", "3"], capsys)
    assert status == 2 and "does not divide" in err
    status, _, err = _run(args, capsys)  # 64 bins: not 2048
    assert status == 2 and "pass --bins" in err
    status, text, err = _run(
        [*args, "--bins", "64", "--frames", "5", "--num-heads", "2"], capsys
    )
    assert status == 0, err
    assert "conv.4.running_cov -> frontend.norms.1.moving_whitening_rr" in text
    assert "loaded 58 reference tensors" in text
    assert "layer_norm_epsilon=0" in text
    assert out.is_symlink() and (tmp_path / "models" / "ported.keras").exists()
    model = keras.saving.load_model(out)
    # The default: the reference's arithmetic (issue 22, item 12).
    assert model.get_layer("encoder_0").layer_norm_epsilon == 0
    src = _complex_normal(rng, (2, 5, 64))
    got = _np(model(_stack(src), training=False))
    assert _rel(got, ref.classifier(sd, src, 2)) < 1e-5
    if keras.backend.backend() == "tensorflow":
        # The second command: the converted model to TFLite, verified on
        # LiteRT (a reference checkpoint reaches a phone in two commands).
        from cvattn_keras.export.__main__ import main as export_main

        tflite = tmp_path / "model.tflite"
        assert export_main([str(out), str(tflite), "--verify"]) == 0
        assert tflite.stat().st_size > 0


@pytest.mark.slow
@pytest.mark.tensorflow_only  # the export step converts with TensorFlow
def test_two_commands_from_a_checkpoint_to_tflite(
    rng, tmp_path, monkeypatch, capsys
):
    """The README's path, also where torch is not installed: the interop
    command (its torch.load replaced by a reader of the same state dict as
    NumPy arrays), then the export command with --verify."""
    from cvattn_keras.export.__main__ import main as export_main

    sd = _random_model_sd(rng, "generator")
    checkpoint = tmp_path / "ckpt.pt"
    checkpoint.write_bytes(b"stands in for a torch.save file")
    monkeypatch.setattr(cli, "read_checkpoint", lambda path: dict(sd))
    out = tmp_path / "model.keras"
    command = [checkpoint, out, "--model", "generator", "--variant", "realip"]
    sizes = ["--bins", "64", "--source-frames", "5", "--target-frames", "4"]
    status, text, err = _run([*command, *sizes, "--num-heads", "2"], capsys)
    assert status == 0, err
    assert f"loaded {len(sd)} reference tensors" in text
    tflite = tmp_path / "model.tflite"
    assert export_main([str(out), str(tflite), "--verify"]) == 0
    report = capsys.readouterr().out
    assert "non-builtin ops  none" in report, report
