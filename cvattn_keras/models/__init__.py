"""Model builders, one module per family.

- `models.music`: the paper's MusicNet models (`music_classifier`,
  `music_generator`);
- `models.real_music`: their real-valued baselines of comparable size,
  `real_music_classifier` (also causal over a sliding window) and
  `real_music_generator` (with its decoder layer,
  `RealTransformerDecoder`);
- `models.generation`: `generate`, autoregressive decoding with a
  `music_generator` model, `shift_right` (teacher forcing), and
  `FeedbackTraining` (training on the model's own fed-back outputs, as
  `generate` decodes; `feedback_inputs`);
- `models.images`: image reconstruction from undersampled k-space (MRI),
  with data consistency: `mri_transformer` (a complex vision transformer
  with CAtt), `complex_unet`, and real-valued baselines of about the same
  parameter count (`real_mri_transformer`, `real_unet`);
- `models.speech`: speech enhancement from samples to samples,
  `speech_enhancer` (a causal sliding-window complex transformer writing a
  bounded complex or magnitude mask), `real_speech_enhancer` (its real
  baseline) and `SpeechEnhancementLoss`.
"""

from cvattn_keras.models.generation import FEEDBACKS
from cvattn_keras.models.generation import FeedbackTraining
from cvattn_keras.models.generation import feedback_inputs
from cvattn_keras.models.generation import generate
from cvattn_keras.models.generation import shift_right
from cvattn_keras.models.images import MASKS
from cvattn_keras.models.images import complex_unet
from cvattn_keras.models.images import mri_transformer
from cvattn_keras.models.images import real_mri_transformer
from cvattn_keras.models.images import real_unet
from cvattn_keras.models.music import FRONTEND_FILTERS
from cvattn_keras.models.music import FRONTEND_KERNEL_SIZES
from cvattn_keras.models.music import music_classifier
from cvattn_keras.models.music import music_generator
from cvattn_keras.models.music import waveform_length
from cvattn_keras.models.real_music import RealTransformerDecoder
from cvattn_keras.models.real_music import real_music_classifier
from cvattn_keras.models.real_music import real_music_generator
from cvattn_keras.models.speech import RealRotaryAttention
from cvattn_keras.models.speech import SpeechEnhancementLoss
from cvattn_keras.models.speech import real_speech_enhancer
from cvattn_keras.models.speech import speech_enhancer

__all__ = [
    "FEEDBACKS",
    "FRONTEND_FILTERS",
    "FRONTEND_KERNEL_SIZES",
    "FeedbackTraining",
    "RealRotaryAttention",
    "RealTransformerDecoder",
    "SpeechEnhancementLoss",
    "MASKS",
    "complex_unet",
    "feedback_inputs",
    "generate",
    "mri_transformer",
    "music_classifier",
    "music_generator",
    "real_mri_transformer",
    "real_music_classifier",
    "real_music_generator",
    "real_speech_enhancer",
    "real_unet",
    "shift_right",
    "speech_enhancer",
    "waveform_length",
]
