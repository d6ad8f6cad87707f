"""The paper's models on waveforms: `stft=` in the builders (issue 19).

A waveform model is the spectra model with a `ComplexSTFT` as its first
layer, so each test compares it with the spectra model of the same weights
fed a NumPy complex128 STFT of the same waveform (`numpy_reference.stft`),
or with the reference's formulas (`reference_model`) for ported weights.
"""

import keras
import numpy as np
import numpy_reference
import pytest
import reference_model as ref
from backend_utils import to_numpy

from cvattn_keras import interop
from cvattn_keras import models
from cvattn_keras import stft as sf
from cvattn_keras.layers import ComplexISTFT
from cvattn_keras.layers import ComplexSTFT

# A small architecture over 24 bins: the front end 24 -> 11 -> 5 bins.
SMALL = dict(
    notes=5,
    embed_dim=8,
    num_heads=2,
    num_layers=1,
    head_dim=8,
    frontend_filters=(3, 4),
    frontend_kernel_sizes=(4, 3),
)
# 64-point frames, hop 16, bins 2..26 (24 complex bins).
STFT = dict(frame_length=64, frame_step=16, bins=(2, 26))

# float32 through the STFT (a 64-term sum) and a small model, relative to
# the largest output: a few float32 roundings per operation (measured
# below 2e-6); the interop test goes through the reference's formulas
# with their own roundings, as tests/test_interop.py's MODEL_TOL.
TOL = 2e-5
MODEL_TOL = 1e-4


def _rel(got, want):
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _stacked(z):
    return np.concatenate([z.real, z.imag], axis=-1).astype(np.float32)


def _numpy_spectra(x, stft):
    """The model's spectra of waveforms `x`, from NumPy in complex128."""
    return numpy_reference.stft(
        np.asarray(x, np.float64),
        stft.frame_length,
        stft.frame_step,
        stft.fft_length,
        stft.center,
        stft.pad_mode,
        stft.bins,
    )


def _waveform(rng, batch, samples):
    return rng.standard_normal((batch, samples)).astype(np.float32)


def _spectra_twin(model, builder, **kwargs):
    """The spectra model of `model`'s architecture with its weights (the
    STFT's kernels left out)."""
    twin = builder(**kwargs)
    stft_weights = len(model.get_layer("stft").weights)
    twin.set_weights(model.get_weights()[stft_weights:])
    return twin


@pytest.mark.parametrize(
    "builder", [models.music_classifier, models.real_music_classifier]
)
def test_classifier_on_waveforms_is_the_spectra_model_on_their_stft(
    rng, builder
):
    kwargs = dict(frames=9, **SMALL)
    if builder is models.real_music_classifier:
        kwargs.update(embed_dim=8, head_dim=8)
    model = builder(stft=ComplexSTFT(name="stft", **STFT), **kwargs)
    assert model.input.name == "waveform"
    assert model.layers[1].name == "stft"
    # 1 + L // 16 = 9 frames from L = 8 * 16 samples.
    assert model.input_shape == (None, 128)
    assert model.output_shape == (None, 9, 5)
    x = _waveform(rng, 3, 128)
    twin = _spectra_twin(model, builder, bins=24, **kwargs)
    want = to_numpy(twin(_stacked(_numpy_spectra(x, model.layers[1]))))
    got = to_numpy(model(x))
    assert _rel(got, want) < TOL


def test_generator_on_waveforms_decodes_as_the_spectra_model(rng):
    kwargs = dict(source_frames=6, target_frames=3, **SMALL)
    model = models.music_generator(
        stft=dict(ComplexSTFT(**STFT).get_config(), name="stft"), **kwargs
    )
    assert [i.name for i in model.inputs] == ["waveform", "previous_notes"]
    assert model.input_shape[0] == (None, 80)
    twin = _spectra_twin(model, models.music_generator, bins=24, **kwargs)
    x = _waveform(rng, 2, 80)
    spectra = _stacked(_numpy_spectra(x, model.get_layer("stft")))
    previous = (rng.uniform(size=(2, 3, 5)) > 0.5).astype(np.float32)
    got = to_numpy(model([x, previous]))
    want = to_numpy(twin([spectra, previous]))
    assert _rel(got, want) < TOL
    _, logits = models.generate(model, x, feedback="logits", cache=True)
    _, twin_logits = models.generate(twin, spectra, feedback="logits")
    assert _rel(logits, twin_logits) < TOL


@pytest.mark.parametrize(
    "stft",
    [
        dict(frame_length=64, frame_step=16),
        dict(frame_length=63, frame_step=16),
        dict(frame_length=48, frame_step=16, fft_length=65),
        dict(frame_length=64, frame_step=16, center=False),
        dict(frame_length=64, frame_step=64, center=False),
        dict(frame_length=64, frame_step=16, pad_mode="reflect"),
    ],
)
def test_waveform_length_is_the_fewest_samples_for_the_frames(stft):
    layer = ComplexSTFT(**stft)
    for frames in (4, 10):
        length = models.waveform_length(layer, frames)
        count = sf.frame_count(
            length, layer.frame_step, layer.fft_length, layer.center
        )
        fewer = sf.frame_count(
            length - 1, layer.frame_step, layer.fft_length, layer.center
        )
        assert count == frames and fewer == frames - 1, (length, stft)
        assert tuple(layer(np.zeros((1, length), "float32")).shape)[1] == (
            frames
        )
    if layer.pad_mode == "reflect":
        # 17 samples at least, which make 2 frames.
        with pytest.raises(ValueError, match=r"reflect.*frames=1"):
            models.waveform_length(layer, 1)


def test_variable_length_waveform_model(rng):
    model = models.music_classifier(
        frames=None, stft=ComplexSTFT(**STFT), **SMALL
    )
    assert model.input_shape == (None, None)
    for samples, frames in ((128, 9), (200, 13)):
        assert tuple(model(_waveform(rng, 2, samples)).shape) == (2, frames, 5)


def test_waveform_model_round_trips_a_keras_file(rng, tmp_path):
    model = models.music_classifier(
        frames=9, stft=ComplexSTFT(trainable=True, **STFT), **SMALL
    )
    stft = model.layers[1]
    # Learned kernels travel with the file.
    stft.kernel_real.assign(to_numpy(stft.kernel_real) * 1.5)
    x = _waveform(rng, 2, 128)
    path = str(tmp_path / "waveform.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded.layers[1], ComplexSTFT)
    np.testing.assert_array_equal(to_numpy(loaded(x)), to_numpy(model(x)))


def test_a_trainable_stft_learns_inside_the_model(rng):
    model = models.music_classifier(
        frames=9, stft=ComplexSTFT(trainable=True, **STFT), **SMALL
    )
    kernel = model.layers[1].kernel_real
    assert any(w is kernel for w in model.trainable_weights)
    before = to_numpy(kernel).copy()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    y = (rng.uniform(size=(4, 9, 5)) > 0.5).astype(np.float32)
    model.fit(_waveform(rng, 4, 128), y, epochs=1, verbose=0)
    assert np.all(np.isfinite(to_numpy(kernel)))
    assert not np.array_equal(to_numpy(kernel), before)


def test_a_frozen_stft_stays_the_dft_when_trained(rng):
    model = models.music_classifier(frames=9, stft=ComplexSTFT(**STFT), **SMALL)
    stft = model.layers[1]
    assert not any(w is stft.kernel_real for w in model.trainable_weights)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = _waveform(rng, 4, 128)
    y = (rng.uniform(size=(4, 9, 5)) > 0.5).astype(np.float32)
    model.fit(x, y, epochs=1, verbose=0)
    got = to_numpy(stft(x))
    want = _stacked(_numpy_spectra(x, stft))
    assert _rel(got, want) < 1e-5


def test_reference_checkpoint_loads_into_a_waveform_model(rng):
    # interop maps the reference's weights by layer name; the STFT has
    # none and keeps its DFT.
    sd = ref.random_model(rng, "classifier", 24, (3, 4), (4, 3), 8, 1, 8, 5)
    model = models.music_classifier(frames=9, stft=ComplexSTFT(**STFT), **SMALL)
    interop.load_reference_state_dict(model, sd)
    x = _waveform(rng, 2, 128)
    src = _numpy_spectra(x, model.layers[1])
    want = ref.classifier(sd, src, SMALL["num_heads"])
    assert _rel(to_numpy(model(x, training=False)), want) < MODEL_TOL
    assert interop.model_kind(model) == "classifier"


def test_bad_stft_arguments_name_the_argument():
    with pytest.raises(ValueError, match=r"`stft` must be .*ComplexSTFT"):
        models.music_classifier(stft="hann", **SMALL)
    with pytest.raises(ValueError, match=r"`stft` must be .*ComplexISTFT"):
        models.music_classifier(stft=ComplexISTFT(**STFT), **SMALL)
    with pytest.raises(ValueError, match=r"the STFT's 24 bins.*bins=32$"):
        models.music_classifier(bins=32, stft=ComplexSTFT(**STFT), **SMALL)
    with pytest.raises(ValueError, match=r"frames"):
        models.music_classifier(frames=0, stft=ComplexSTFT(**STFT), **SMALL)
    with pytest.raises(ValueError, match=r"bins"):
        models.music_classifier(bins=0, **SMALL)
    with pytest.raises(ValueError, match=r"frame_step"):
        models.music_classifier(stft=dict(frame_length=8, frame_step=9))
