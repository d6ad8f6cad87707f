"""Built-in complex datasets (deterministic from a seed) and the MusicNet
loader, one module per family. Every complex array is returned in the
stacked layout `[real | imag]` on the last axis, float32.

- `synthetic_music` (`datasets.music`): a MusicNet-like transcription
  task: polyphonic harmonic notes, complex STFT frames, multi-hot note
  labels per frame; or (`output="waveform"`) the audio itself with the
  labels aligned to the frames of a `ComplexSTFT` (`synthetic_music_stft`
  gives the one that reproduces the spectra).
- `synthetic_modulation` (`datasets.modulation`): radio IQ sequences of
  standard digital modulations with random carrier phase, frequency offset
  and noise, labelled by modulation.
- `radio_modulation` (`datasets.radio`): a modulation-recognition set of
  the field's design (RadioML 2016.10a's eleven classes, pulse shaping,
  carrier, sample-rate and timing offsets, multipath fading, an SNR grid;
  simulated, not RadioML's data), frames of complex IQ in a
  `RadioFrames`.
- `score_music` (`datasets.scores`): real scores (music21's corpus: Bach
  chorales, Haydn, Mozart and Beethoven quartets) played by sampled
  instruments (a General MIDI SoundFont), humanised, as audio with note
  labels aligned to a `ComplexSTFT`'s frames: a MusicNet stand-in (the
  `music` extra).
- `synthetic_mri` (`datasets.images`): simulated accelerated MRI:
  complex phantoms of the Shepp-Logan family with smooth phase maps,
  their noisy k-space (numpy's order), fastMRI-like column masks and
  the zero-filled reconstructions (a `SyntheticMRI`).
- `noisy_speech` (`datasets.speech`): speech enhancement from audio that
  Debian ships (Asterisk's G.722 prompts in en/es/fr, codec2's speech
  files; music-on-hold, babble, coloured noise, hum and noise bursts, an
  optional simulated room) at SNRs of -5 to 20 dB, 16 kHz, in a
  `NoisySpeech` (the `speech` extra and the Debian packages).
- `load_musicnet` (`datasets.music`): MusicNet features as preprocessed by
  the Complex Transformer pipeline (64 frames x [Re(2048) | Im(2048)], 128
  notes).
"""

from cvattn_keras.datasets.images import SyntheticMRI
from cvattn_keras.datasets.images import synthetic_mri
from cvattn_keras.datasets.modulation import MODULATIONS
from cvattn_keras.datasets.modulation import synthetic_modulation
from cvattn_keras.datasets.music import highest_audible_note
from cvattn_keras.datasets.music import load_musicnet
from cvattn_keras.datasets.music import synthetic_music
from cvattn_keras.datasets.music import synthetic_music_stft
from cvattn_keras.datasets.radio import RADIO_AUDIO_RATE
from cvattn_keras.datasets.radio import RADIO_SAMPLE_RATE
from cvattn_keras.datasets.radio import RADIOML_CLASSES
from cvattn_keras.datasets.radio import RADIOML_SNRS
from cvattn_keras.datasets.radio import RadioFrames
from cvattn_keras.datasets.radio import radio_modulation
from cvattn_keras.datasets.scores import ScoreMusic
from cvattn_keras.datasets.scores import score_music
from cvattn_keras.datasets.speech import SPEECH_NOISES
from cvattn_keras.datasets.speech import NoisySpeech
from cvattn_keras.datasets.speech import noisy_speech

__all__ = [
    "MODULATIONS",
    "RADIOML_CLASSES",
    "RADIOML_SNRS",
    "RADIO_AUDIO_RATE",
    "RADIO_SAMPLE_RATE",
    "SPEECH_NOISES",
    "NoisySpeech",
    "RadioFrames",
    "ScoreMusic",
    "SyntheticMRI",
    "highest_audible_note",
    "load_musicnet",
    "noisy_speech",
    "radio_modulation",
    "score_music",
    "synthetic_modulation",
    "synthetic_mri",
    "synthetic_music",
    "synthetic_music_stft",
]
