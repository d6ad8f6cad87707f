"""PCM WAV samples as floats, for the examples that read audio
(`enhance.py`, `transcribe.py`); each opens the file and words its own
refusals (`enhance.py` also reads float WAVs, `transcribe.py` refuses
them)."""

import numpy as np

WIDTHS = (1, 2, 3, 4)
"""The sample widths read, in bytes: unsigned 8-bit, 16, 24 and 32-bit
signed."""


def pcm_samples(data, channels, width):
    """float32 `(frames, channels)` in [-1, 1] from the bytes of a PCM
    WAV's data chunk (`width` in `WIDTHS`), little-endian as WAV is; a
    frame cut short at the end (a truncated file) is dropped."""
    data = data[: len(data) // (channels * width) * channels * width]
    if width == 1:  # unsigned 8-bit
        x = (np.frombuffer(data, np.uint8).astype(np.float32) - 128) / 128
    elif width == 3:  # 24-bit little-endian: widen to 32
        raw = np.frombuffer(data, np.uint8).reshape(-1, 3)
        wide = np.zeros((len(raw), 4), np.uint8)
        wide[:, 1:] = raw
        x = wide.view("<i4")[:, 0].astype(np.float32) / 2.0**31
    else:
        dtype = {2: "<i2", 4: "<i4"}[width]
        x = np.frombuffer(data, dtype).astype(np.float32)
        x /= 2.0 ** (8 * width - 1)
    return x.reshape(-1, channels)
