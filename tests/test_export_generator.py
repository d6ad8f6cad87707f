"""Tests of the generator export (cvattn_keras.export.generator): one
`.tflite` file with `encode` and `decode_step` signatures, and the whole
greedy decoding on the LiteRT interpreter through them.

Tolerances: the float32 file decodes as `models.generate` does up to
float32 rounding (measured 5.4e-7 on logits of order 1, two layers; the
projections of one frame and of the sequence are matmuls of different
shapes, as in tests/test_cache.py): 1e-5 absolute, the cached decoding's
bound. Quantized files, relative to the largest logit: float16 weights
measured 6.3e-4, bound 4e-3; dynamic_int8 (int8 weights: the head's first
kernel here) measured 8.2e-3, bound 4e-2 (about 5x, as in
tests/test_export.py).

Each conversion takes several seconds (more under load), so the files are
module fixtures of tiny generators. Under a backend other than TensorFlow
the export goes through a TensorFlow subprocess: only the first file's
tests run there (`test_generation_on_litert_equals_keras_every_backend`),
the others are `tensorflow_only`.
"""

import os

import keras
import numpy as np
import pytest

from cvattn_keras import models
from cvattn_keras.export._reading import _file_ops
from cvattn_keras.export.generator import DECODE_INPUTS
from cvattn_keras.export.generator import DECODE_OUTPUTS
from cvattn_keras.export.generator import ENCODE_INPUTS
from cvattn_keras.export.generator import ENCODE_OUTPUTS
from cvattn_keras.export.generator import _describe
from cvattn_keras.export.generator import export_generator_tflite
from cvattn_keras.export.generator import generate_tflite

ATOL = 1e-5
TOLERANCE = {"float16": 4e-3, "dynamic_int8": 4e-2}
SOURCE, TARGET, BINS, NOTES, EMBED, HEADS = 5, 4, 10, 6, 8, 2


def _generator(softmax="real", product="inner", num_layers=2, head_dim=8):
    return models.music_generator(
        source_frames=SOURCE,
        target_frames=TARGET,
        bins=BINS,
        notes=NOTES,
        embed_dim=EMBED,
        num_heads=HEADS,
        num_layers=num_layers,
        head_dim=head_dim,
        frontend_filters=(2, 4),
        frontend_kernel_sizes=(3, 3),
        softmax=softmax,
        product=product,
    )


def _spectra(batch, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((batch, SOURCE, 2 * BINS)).astype("float32")


@pytest.fixture(scope="module")
def real_file(tmp_path_factory):
    """CAtt, two decoder layers, the defaults (batch 1, max_frames =
    target_frames)."""
    keras.utils.set_random_seed(11)
    model = _generator("real", "inner", num_layers=2)
    path = tmp_path_factory.mktemp("generator") / "real.tflite"
    return model, export_generator_tflite(model, path)


@pytest.fixture(scope="module")
def abs_file(tmp_path_factory):
    """APAtt with the bilinear product, one layer, a static batch of 2 and
    3 frames at most; a head of 128 complex features, whose first kernel
    (8 x 128 per real part) dynamic_int8 quantizes."""
    keras.utils.set_random_seed(12)
    model = _generator("abs", "bilinear", num_layers=1, head_dim=128)
    path = tmp_path_factory.mktemp("generator") / "abs.tflite"
    return model, export_generator_tflite(
        model, path, batch_size=2, max_frames=3
    )


def _check_same_decoding(model, path, spectra, feedback, **kwargs):
    """LiteRT's decoding against Keras' full recompute (today's model)."""
    notes, logits = generate_tflite(path, spectra, feedback=feedback, **kwargs)
    want_notes, want_logits = models.generate(
        model, spectra, feedback=feedback, cache=False, **kwargs
    )
    assert logits.shape == want_logits.shape
    assert logits.dtype == np.float32 and notes.dtype == np.float32
    np.testing.assert_allclose(logits, want_logits, atol=ATOL)
    np.testing.assert_array_equal(notes, want_notes)
    return logits


@pytest.mark.slow
@pytest.mark.parametrize("feedback", models.FEEDBACKS)
def test_generation_on_litert_equals_keras_every_backend(real_file, feedback):
    model, path = real_file
    # 3 sequences through a file of batch 1: three decodings.
    logits = _check_same_decoding(model, path, _spectra(3), feedback)
    assert np.ptp(logits) > 0.1  # a test that could fail


@pytest.fixture(scope="module")
def waveform_file(tmp_path_factory):
    """A generator built with `stft=`: its STFT (20 points, hop 5, bins 1
    to 10) in the file, whose `encode` takes the waveform."""
    from cvattn_keras.layers import ComplexSTFT

    keras.utils.set_random_seed(13)
    model = models.music_generator(
        source_frames=SOURCE,
        target_frames=TARGET,
        notes=NOTES,
        embed_dim=EMBED,
        num_heads=HEADS,
        num_layers=1,
        head_dim=8,
        frontend_filters=(2, 4),
        frontend_kernel_sizes=(3, 3),
        stft=ComplexSTFT(20, 5, bins=(1, 11), name="stft"),
    )
    path = tmp_path_factory.mktemp("generator") / "waveform.tflite"
    return model, export_generator_tflite(model, path)


@pytest.mark.slow
@pytest.mark.tensorflow_only  # the JAX subprocess route: real_file's test
@pytest.mark.parametrize("feedback", models.FEEDBACKS)
def test_waveform_generation_on_litert_equals_keras(waveform_file, feedback):
    model, path = waveform_file
    samples = models.waveform_length(model.get_layer("stft"), SOURCE)
    assert model.input_shape[0] == (None, samples) == (None, 20)
    waveforms = np.random.default_rng(1).standard_normal((2, samples))
    logits = _check_same_decoding(
        model, path, waveforms.astype("float32"), feedback
    )
    assert np.ptp(logits) > 0.1
    encode = _describe(path)["encode"]["inputs"]
    assert encode == {"waveform": ((1, samples), "float32")}
    with pytest.raises(ValueError, match=r"\(B, 20\).*'waveform'"):
        generate_tflite(path, waveforms[:, :19])
    with pytest.raises(ValueError, match="source_frames=4"):
        export_generator_tflite(model, path, source_frames=4)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_signatures_names_shapes_dtypes_and_builtin_ops(real_file, abs_file):
    layers, memory = 2, SOURCE
    cache = (2, memory, HEADS, 2 * (EMBED // HEADS))
    for (_, path), batch, frames, layers in (
        (real_file, 1, TARGET, 2),
        (abs_file, 2, 3, 1),
    ):
        ops, non_builtin = _file_ops(path)
        assert non_builtin == ()
        assert not any(op.startswith("Flex") for op in ops)
        assert "DYNAMIC_UPDATE_SLICE" in ops  # the cache update
        assert "SHAPE" not in ops  # static shapes, no shape arithmetic
        signatures = _describe(path)
        assert set(signatures) == {"encode", "decode_step"}
        encode, decode = signatures["encode"], signatures["decode_step"]
        assert tuple(encode["inputs"]) == tuple(sorted(ENCODE_INPUTS))
        assert set(encode["outputs"]) == set(ENCODE_OUTPUTS)
        assert set(decode["inputs"]) == set(DECODE_INPUTS)
        assert set(decode["outputs"]) == set(DECODE_OUTPUTS)
        f32 = "float32"
        cross = ((batch, layers) + cache, f32)
        assert encode["inputs"]["spectra"] == ((batch, SOURCE, 2 * BINS), f32)
        assert encode["outputs"]["encoder_states"] == (
            (batch, SOURCE, 2 * EMBED),
            f32,
        )
        assert encode["outputs"]["cross_cache"] == cross
        self_cache = (
            (batch, layers, 2, frames, HEADS, 2 * (EMBED // HEADS)),
            f32,
        )
        assert decode["inputs"] == {
            "cross_cache": cross,
            "self_cache": self_cache,
            "previous_notes": ((batch, 1, NOTES), f32),
            "index": ((), "int32"),
        }
        assert decode["outputs"] == {
            "logits": ((batch, 1, NOTES), f32),
            "self_cache": self_cache,
        }


@pytest.mark.slow
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("feedback", models.FEEDBACKS)
def test_generation_on_litert_equals_keras_static_batch(abs_file, feedback):
    model, path = abs_file
    # 3 sequences through a file of batch 2: the second chunk is padded.
    # The file decodes max_frames = 3 frames at most.
    _check_same_decoding(model, path, _spectra(3, seed=1), feedback, steps=3)
    # Fewer steps, and another threshold (its feedback included).
    _check_same_decoding(
        model, path, _spectra(2, seed=2), feedback, steps=2, threshold=0.3
    )


@pytest.mark.slow
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("mode", ["float16", "dynamic_int8"])
def test_quantized_generators_decode_within_tolerance(abs_file, tmp_path, mode):
    model, path = abs_file
    quantized = export_generator_tflite(
        model,
        tmp_path / f"{mode}.tflite",
        quantization=mode,
        batch_size=2,
        max_frames=3,
    )
    assert _file_ops(quantized)[1] == ()
    stored = "FLOAT16" if mode == "float16" else "INT8"
    assert _tensor_types(quantized)[stored] > 0
    spectra = _spectra(2, seed=3)
    _, logits = generate_tflite(quantized, spectra, feedback="logits")
    _, want = models.generate(
        model, spectra, feedback="logits", steps=3, cache=False
    )
    error = np.max(np.abs(logits - want)) / np.max(np.abs(want))
    # See the module docstring.
    assert error <= TOLERANCE[mode], error


def _tensor_types(path):
    """How many tensors of each type (`"FLOAT32"`, `"INT8"`, ...) the
    file holds."""
    from ai_edge_litert import schema_py_generated as schema

    names = {
        code: name
        for name, code in vars(schema.TensorType).items()
        if not name.startswith("_")
    }
    with open(path, "rb") as f:
        model = schema.ModelT.InitFromPackedBuf(f.read(), 0)
    counts = {name: 0 for name in names.values()}
    for subgraph in model.subgraphs:
        for tensor in subgraph.tensors:
            counts[names[tensor.type]] += 1
    return counts


def test_bad_export_arguments(tmp_path):
    generator = _generator(num_layers=1)
    path = tmp_path / "g.tflite"
    classifier = models.music_classifier(
        frames=5,
        bins=BINS,
        notes=NOTES,
        embed_dim=EMBED,
        num_heads=HEADS,
        num_layers=1,
        head_dim=8,
        frontend_filters=(2, 4),
        frontend_kernel_sizes=(3, 3),
    )
    with pytest.raises(ValueError, match="`model` must be a generator"):
        export_generator_tflite(classifier, path)
    with pytest.raises(ValueError, match="`model` must be"):
        export_generator_tflite("generator.keras", path)
    for value in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match=f"batch_size={value}"):
            export_generator_tflite(generator, path, batch_size=value)
    for value in (0, -2, 2.0, TARGET + 1):
        with pytest.raises(ValueError, match=f"max_frames={value}"):
            export_generator_tflite(generator, path, max_frames=value)
    with pytest.raises(ValueError, match="source_frames=6"):
        export_generator_tflite(generator, path, source_frames=6)
    for mode in ("int8", "full_int8", "int16x8"):
        with pytest.raises(ValueError, match="calibrat"):
            export_generator_tflite(generator, path, quantization=mode)
    with pytest.raises(ValueError, match="quantization='int4'"):
        export_generator_tflite(generator, path, quantization="int4")
    with pytest.raises(ValueError, match="tflite"):
        export_generator_tflite(generator, tmp_path / "g.keras")
    path.write_bytes(b"kept")
    with pytest.raises(FileExistsError):
        export_generator_tflite(generator, path, overwrite=False)
    assert path.read_bytes() == b"kept"
    assert not os.path.exists(tmp_path / "g.keras")


def test_bad_generate_arguments(tmp_path):
    not_tflite = tmp_path / "g.tflite"
    not_tflite.write_bytes(b"0123456789")
    with pytest.raises(ValueError, match="not a TFLite model"):
        generate_tflite(not_tflite, _spectra(1))
    with pytest.raises(ValueError, match="No such file"):
        generate_tflite(tmp_path / "missing.tflite", _spectra(1))
    with pytest.raises(ValueError, match="feedback='argmax'"):
        generate_tflite(not_tflite, _spectra(1), feedback="argmax")
    with pytest.raises(ValueError, match="threshold=1"):
        generate_tflite(not_tflite, _spectra(1), threshold=1)


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_bad_generate_arguments_on_a_file(abs_file):
    _, path = abs_file
    for steps in (0, 4, 1.0):
        with pytest.raises(ValueError, match=f"steps={steps}"):
            generate_tflite(path, _spectra(2), steps=steps)
    for shape in ((2, SOURCE + 1, 2 * BINS), (0, SOURCE, 2 * BINS), (3, 4)):
        with pytest.raises(ValueError, match=r"spectra\.shape"):
            generate_tflite(path, np.zeros(shape, "float32"))
