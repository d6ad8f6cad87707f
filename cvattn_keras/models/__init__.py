"""Model builders, one module per family.

- `models.music`: the paper's MusicNet models (`music_classifier`,
  `music_generator`) and a real-valued baseline (`real_music_classifier`);
- `models.generation`: `generate`, autoregressive decoding with a
  `music_generator` model, and `shift_right` (teacher forcing).
"""

from cvattn_keras.models.generation import FEEDBACKS
from cvattn_keras.models.generation import generate
from cvattn_keras.models.generation import shift_right
from cvattn_keras.models.music import FRONTEND_FILTERS
from cvattn_keras.models.music import FRONTEND_KERNEL_SIZES
from cvattn_keras.models.music import music_classifier
from cvattn_keras.models.music import music_generator
from cvattn_keras.models.music import real_music_classifier
from cvattn_keras.models.music import waveform_length

__all__ = [
    "FEEDBACKS",
    "FRONTEND_FILTERS",
    "FRONTEND_KERNEL_SIZES",
    "generate",
    "music_classifier",
    "music_generator",
    "real_music_classifier",
    "shift_right",
    "waveform_length",
]
