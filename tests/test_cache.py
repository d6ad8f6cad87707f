"""Cached decoding: ComplexMultiHeadAttention(cache=...),
ComplexTransformerDecoder(self/cross_attention_cache=...) and
`models.generate(cache=True)` against the uncached computations.

Tolerances: the cached and uncached paths compute the same sums, but the
projections of one step and of the whole sequence are matmuls of different
shapes (and XLA fuses the compiled loop differently), so they agree up to
float32 rounding: 1e-5 absolute on outputs of order 1 (a few ulps after
two or three layers), 1e-5 on the logits of the small generator too."""

import re

import keras
import numpy as np
import pytest
from backend_utils import to_numpy

from cvattn_keras import models
from cvattn_keras.layers import ComplexMultiHeadAttention
from cvattn_keras.layers import ComplexTransformerDecoder

ATOL = 1e-5
VARIANTS = [
    (softmax, product)
    for softmax in ("real", "abs", "absonly", "naive")
    for product in ("inner", "bilinear")
]
B, T, S, N, H = 2, 4, 5, 2, 3


def _stepwise(layer, x, **kwargs):
    """Calls `layer` one step of `x` at a time with a growing cache."""
    cache = keras.ops.zeros((x.shape[0], 2, x.shape[1], N, 2 * H))
    outputs = []
    for t in range(x.shape[1]):
        step = x[:, t : t + 1]
        out, cache = layer(
            step, step, cache=cache, cache_update_index=t, **kwargs
        )
        outputs.append(to_numpy(out))
    return np.concatenate(outputs, axis=1), cache


@pytest.mark.parametrize("softmax,product", VARIANTS)
def test_attention_cached_steps_equal_causal_attention(rng, softmax, product):
    x = rng.standard_normal((B, T, 2 * 4)).astype("float32")
    layer = ComplexMultiHeadAttention(N, H, softmax=softmax, product=product)
    full = to_numpy(layer(x, x, use_causal_mask=True))
    stepped, cache = _stepwise(layer, x, use_causal_mask=True)
    np.testing.assert_allclose(stepped, full, atol=ATOL)
    # The cache holds the projected keys and values of every step.
    assert tuple(cache.shape) == (B, 2, T, N, 2 * H)
    assert np.all(np.any(to_numpy(cache) != 0, axis=(3, 4)))


@pytest.mark.parametrize("softmax", ["abs", "naive"])
def test_attention_cache_with_rotary_positions(rng, softmax):
    # The new keys and the queries rotate by their absolute positions.
    x = rng.standard_normal((B, T, 2 * 4)).astype("float32")
    layer = ComplexMultiHeadAttention(
        N, H, softmax=softmax, rotary_max_wavelength=100.0
    )
    full = to_numpy(layer(x, x, use_causal_mask=True))
    stepped, _ = _stepwise(layer, x, use_causal_mask=True)
    np.testing.assert_allclose(stepped, full, atol=ATOL)


def test_attention_cache_chunks_mask_the_unfilled_rows(rng):
    # Without a causal mask, a chunk attends to every filled row and no
    # other: here rows [0, 5) of a cache of 7, after writing 3 then 2.
    x = rng.standard_normal((B, 5, 8)).astype("float32")
    layer = ComplexMultiHeadAttention(N, H, softmax="naive")
    cache = keras.ops.zeros((B, 2, 7, N, 2 * H))
    _, cache = layer(x[:, :3], x[:, :3], cache=cache, cache_update_index=0)
    out, scores, cache = layer(
        x[:, 3:],
        x[:, 3:],
        cache=cache,
        cache_update_index=3,
        return_attention_scores=True,
    )
    np.testing.assert_allclose(
        to_numpy(out), to_numpy(layer(x[:, 3:], x)), atol=ATOL
    )
    scores = to_numpy(scores)
    assert scores.shape == (B, N, 2, 2 * 7)
    # [Re | Im] of 7 keys: the unfilled rows 5 and 6 get weight 0.
    np.testing.assert_array_equal(scores[..., [5, 6, 12, 13]], 0.0)


@pytest.mark.parametrize("softmax,product", [("real", "inner"), ("abs", "cp")])
def test_attention_static_cache_reuses_keys_and_values(rng, softmax, product):
    # Cross-attention: the encoder's keys/values computed once (index 0),
    # then reused (index None; the value passed is ignored).
    query = rng.standard_normal((B, T, 8)).astype("float32")
    memory = rng.standard_normal((B, S, 6)).astype("float32")
    layer = ComplexMultiHeadAttention(N, H, softmax=softmax, product=product)
    full = to_numpy(layer(query, memory))
    cache = keras.ops.zeros((B, 2, S, N, 2 * H))
    first, cache = layer(
        query[:, :1], memory, cache=cache, cache_update_index=0
    )
    np.testing.assert_allclose(to_numpy(first), full[:, :1], atol=ATOL)
    again, same = layer(query, memory * 0.0, cache=cache)
    np.testing.assert_allclose(to_numpy(again), full, atol=ATOL)
    np.testing.assert_array_equal(to_numpy(same), to_numpy(cache))


def test_attention_cache_bad_input(rng):
    x = rng.standard_normal((B, 1, 8)).astype("float32")
    layer = ComplexMultiHeadAttention(N, H)
    cache = np.zeros((B, 2, T, N, 2 * H), "float32")
    layer(x, x)
    with pytest.raises(ValueError, match="cache_update_index=0"):
        layer(x, x, cache_update_index=0)
    for index in (-1, T):
        with pytest.raises(ValueError, match=f"cache_update_index={index}"):
            layer(x, x, cache=cache, cache_update_index=index)
    with pytest.raises(ValueError, match="cache_update_index=1.0"):
        layer(x, x, cache=cache, cache_update_index=1.0)
    for shape in (
        (B, 3, T, N, 2 * H),
        (B, 2, T, N + 1, 2 * H),
        (B, 2, T, N, 2 * H + 2),
        (B + 1, 2, T, N, 2 * H),
        (B, 2, T, N * 2 * H),
    ):
        with pytest.raises(ValueError, match=r"cache\.shape"):
            layer(x, x, cache=np.zeros(shape, "float32"), cache_update_index=0)
    wide = ComplexMultiHeadAttention(N, H, value_dim=H + 1)
    with pytest.raises(ValueError, match="value_dim"):
        wide(x, x, cache=cache, cache_update_index=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_cached_steps_equal_full_decoding(rng, norm_first):
    x = rng.standard_normal((B, T, 8)).astype("float32")
    memory = rng.standard_normal((B, S, 8)).astype("float32")
    decoder = ComplexTransformerDecoder(
        N, key_dim=H, norm_first=norm_first, softmax="abs", product="cp"
    )
    full = to_numpy(decoder(x, memory))
    self_cache = keras.ops.zeros((B, 2, T, N, 2 * H))
    cross_cache = keras.ops.zeros((B, 2, S, N, 2 * H))
    outputs = []
    for t in range(T):
        out, self_cache, cross_cache = decoder(
            x[:, t : t + 1],
            memory,
            self_attention_cache=self_cache,
            self_attention_cache_update_index=t,
            cross_attention_cache=cross_cache,
            cross_attention_cache_update_index=0 if t == 0 else None,
        )
        outputs.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, atol=ATOL)
    out, (self_scores, cross_scores), *caches = decoder(
        x[:, :1],
        memory,
        self_attention_cache=self_cache,
        self_attention_cache_update_index=0,
        cross_attention_cache=cross_cache,
        return_attention_scores=True,
    )
    assert tuple(self_scores.shape) == (B, N, 1, 2 * T)
    assert tuple(cross_scores.shape) == (B, N, 1, 2 * S)
    assert len(caches) == 2


def test_decoder_only_cache(rng):
    x = rng.standard_normal((B, T, 8)).astype("float32")
    decoder = ComplexTransformerDecoder(N, softmax="naive")
    full = to_numpy(decoder(x))
    cache = keras.ops.zeros((B, 2, T, N, 4))
    outputs = []
    for t in range(T):
        out, cache = decoder(
            x[:, t : t + 1],
            self_attention_cache=cache,
            self_attention_cache_update_index=t,
        )
        outputs.append(to_numpy(out))
    np.testing.assert_allclose(np.concatenate(outputs, 1), full, atol=ATOL)


def test_decoder_cache_bad_input(rng):
    x = rng.standard_normal((B, 1, 8)).astype("float32")
    memory = rng.standard_normal((B, S, 8)).astype("float32")
    decoder = ComplexTransformerDecoder(N, key_dim=H)
    decoder(x, memory)
    cache = np.zeros((B, 2, T, N, 2 * H), "float32")
    with pytest.raises(ValueError, match="cross_attention_cache=None"):
        decoder(x, memory, self_attention_cache=cache)
    with pytest.raises(ValueError, match="self_attention_cache_update_index"):
        decoder(x, memory, self_attention_cache_update_index=0)
    with pytest.raises(ValueError, match="decoder_padding_mask"):
        decoder(
            x,
            memory,
            decoder_padding_mask=np.ones((B, 1), bool),
            self_attention_cache=cache,
            self_attention_cache_update_index=0,
            cross_attention_cache=np.zeros((B, 2, S, N, 2 * H), "float32"),
        )
    with pytest.raises(ValueError, match="cache_update_index=9"):
        decoder(
            x,
            memory,
            self_attention_cache=cache,
            self_attention_cache_update_index=9,
            cross_attention_cache=np.zeros((B, 2, S, N, 2 * H), "float32"),
        )


def _generator(softmax="real", product="inner"):
    return models.music_generator(
        source_frames=5,
        target_frames=4,
        bins=10,
        notes=3,
        embed_dim=8,
        num_heads=2,
        num_layers=1,
        head_dim=8,
        frontend_filters=(2, 4),
        frontend_kernel_sizes=(3, 3),
        softmax=softmax,
        product=product,
    )


def _check_generate(model, spectra, feedback, steps=None, jit_compile=False):
    """Cached against full recompute. Uncompiled by default: the loop is
    the same, and an XLA compilation per model costs seconds (one test
    compiles)."""
    notes, logits = models.generate(
        model, spectra, feedback=feedback, steps=steps, jit_compile=jit_compile
    )
    full_notes, full_logits = models.generate(
        model, spectra, feedback=feedback, steps=steps, cache=False
    )
    assert logits.shape == full_logits.shape
    np.testing.assert_allclose(logits, full_logits, atol=ATOL)
    np.testing.assert_array_equal(notes, full_notes)
    # The notes are the logits thresholded, as without a cache.
    np.testing.assert_array_equal(notes, (logits > 0).astype("float32"))
    return notes, logits


@pytest.fixture(scope="module")
def generator():
    """One generator for the tests of its compiled loop: `generate` keeps
    the loop per model, so they share one compilation (seconds)."""
    keras.utils.set_random_seed(1234)
    return _generator()


def test_generate_cached_equals_full_recompute(rng, generator):
    spectra = rng.standard_normal((3, 5, 20)).astype("float32")
    # (Whether the random model's notes vary depends on the backend's
    # initial weights; the logits are compared either way.)
    _check_generate(generator, spectra, "notes", jit_compile=True)


def test_generate_checks_its_input_on_every_call(rng, generator):
    """Issue 22, item 4: once its loop was compiled, `generate` took
    spectra of other shapes silently ((3, 40, 20) gave logits) or failed
    inside (TypeError for (3, 5, 18)); only the first call, and
    `cache=False`, raised the shape error."""
    spectra = rng.standard_normal((3, 5, 20)).astype("float32")
    # The loop of test_generate_cached_equals_full_recompute (the same
    # arguments): compiled, traced for (3, 5, 20).
    _, logits = models.generate(generator, spectra)
    bad = [(3, 40, 20), (3, 5, 18), (3, 5), (3, 5, 20, 1), (0, 5, 20)]
    for shape in bad:
        for cache in (True, False):
            with pytest.raises(
                ValueError, match=re.escape(f"spectra.shape={shape}")
            ):
                models.generate(
                    generator, np.zeros(shape, "float32"), cache=cache
                )
    with pytest.raises(ValueError, match="must be real"):
        models.generate(generator, spectra.astype("complex64"))
    for steps in (2.0, True, 0):
        with pytest.raises(ValueError, match=f"steps={steps!r}"):
            models.generate(generator, spectra, steps=steps)
    with pytest.raises(ValueError, match="threshold='0.5'"):
        models.generate(generator, spectra, threshold="0.5")
    with pytest.raises(ValueError, match="must be a float array"):
        models.generate(generator, np.full((3, 5, 20), "x"))
    with pytest.raises(ValueError, match="model of type str"):
        models.generate("generator", spectra)
    # The loop still runs, with the same result.
    np.testing.assert_array_equal(
        models.generate(generator, spectra)[1], logits
    )


# Every variant through the whole model once, under TensorFlow: the
# decoding loop is backend-neutral code (test_generate_cached_equals_full_
# recompute runs it on every backend), every variant's cached attention is
# tested on every backend above, and under JAX each model costs 15-30 s.
@pytest.mark.slow
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("softmax,product", VARIANTS)
def test_generate_cached_equals_full_recompute_every_variant(
    rng, softmax, product
):
    spectra = rng.standard_normal((3, 5, 20)).astype("float32")
    model = _generator(softmax, product)
    for feedback in models.FEEDBACKS:
        _check_generate(model, spectra, feedback)


@pytest.mark.slow
def test_generate_cached_on_a_loaded_model(rng, tmp_path):
    spectra = rng.standard_normal((2, 5, 20)).astype("float32")
    _generator("naive", "bilinear").save(tmp_path / "generator.keras")
    loaded = keras.saving.load_model(tmp_path / "generator.keras")
    _check_generate(loaded, spectra, "logits", steps=3)


def test_generate_cache_argument():
    with pytest.raises(ValueError, match="cache='yes'"):
        models.generate(_generator(), np.zeros((1, 5, 20)), cache="yes")
    with pytest.raises(ValueError, match="jit_compile=1"):
        models.generate(_generator(), np.zeros((1, 5, 20)), jit_compile=1)
