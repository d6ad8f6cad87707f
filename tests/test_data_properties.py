"""Property tests of the generated data: every label is audible."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from cvattn_keras import datasets

# A labelled frame's fundamental must show at least this magnitude within
# two bins of its own bin (the Hann main lobe). A steady sine of amplitude
# 0.3 (the quietest note) shows 0.3 sqrt(2 bins) / 4 >= 0.3 there; a note
# 60 dB down at the start of a frame and decaying within it still shows
# about 2e-4 in the worst case of these ranges (200 Hz, 128 bins, the
# fastest decay); the smallest seen over these examples is 8e-3. Without
# the 60 dB cut, long slow frames give 1e-6 and less: the test fails.
FLOOR = 1e-5


def fundamental_bins(lowest_note, notes, bins, sample_rate):
    f0 = 440.0 * 2.0 ** ((lowest_note + np.arange(notes) - 69) / 12.0)
    return np.rint(f0 / (sample_rate / (2 * bins))).astype(int)


def neighbourhood_peak(x, bins, centre):
    spectra = np.abs(x[..., :bins] + 1j * x[..., bins:])
    low, high = max(0, centre - 2), min(bins, centre + 3)
    return spectra[..., low:high].max(axis=-1)


@settings(derandomize=True, max_examples=25, deadline=None)
@given(
    bins=st.sampled_from([8, 16, 64, 128]),
    sample_rate=st.integers(200, 16000),
    harmonics=st.integers(1, 4),
    frames=st.integers(1, 16),
    below_top=st.integers(0, 40),
    seed=st.integers(0, 1000),
)
def test_a_lone_note_is_heard_in_every_labelled_frame(
    bins, sample_rate, harmonics, frames, below_top, seed
):
    top = datasets.highest_audible_note(bins, sample_rate)
    note = max(0, top - below_top)
    x, y = datasets.synthetic_music(
        num_samples=3,
        frames=frames,
        bins=bins,
        notes=1,
        lowest_note=note,
        sample_rate=sample_rate,
        harmonics=harmonics,
        notes_per_sample=2,
        noise=0.0,
        seed=seed,
    )
    (centre,) = fundamental_bins(note, 1, bins, sample_rate)
    assert centre <= bins - 1
    peak = neighbourhood_peak(x, bins, centre)
    on = y[..., 0] > 0
    assert on.any()
    assert peak[on].min() >= FLOOR, peak[on].min()
    # Nothing sounds where nothing is labelled (no noise, one note).
    assert np.abs(x[~on]).max(initial=0.0) < 1e-6


@settings(derandomize=True, max_examples=15, deadline=None)
@given(
    bins=st.sampled_from([16, 64, 128]),
    sample_rate=st.integers(1000, 16000),
    notes=st.integers(1, 48),
    seed=st.integers(0, 1000),
)
def test_every_labelled_note_is_heard_up_to_the_highest(
    bins, sample_rate, notes, seed
):
    """Many notes, the highest one at the limit: every labelled (frame,
    note) has energy at its fundamental."""
    top = datasets.highest_audible_note(bins, sample_rate)
    lowest = max(0, top - notes + 1)
    notes = top - lowest + 1
    x, y = datasets.synthetic_music(
        num_samples=4,
        frames=8,
        bins=bins,
        notes=notes,
        lowest_note=lowest,
        sample_rate=sample_rate,
        noise=0.0,
        seed=seed,
    )
    centres = fundamental_bins(lowest, notes, bins, sample_rate)
    assert centres.max() <= bins - 1
    for note, centre in enumerate(centres):
        on = y[..., note] > 0
        if on.any():
            peak = neighbourhood_peak(x, bins, centre)
            assert peak[on].min() >= FLOOR, (note, peak[on].min())


@pytest.mark.parametrize(
    "bins, sample_rate, expected", [(128, 4000, 95), (2048, 44100, 136)]
)
def test_highest_audible_note(bins, sample_rate, expected):
    top = datasets.highest_audible_note(bins, sample_rate)
    assert top == expected
    limit = (bins - 0.5) * sample_rate / (2 * bins)
    assert 440 * 2 ** ((top - 69) / 12) < limit <= 440 * 2 ** ((top - 68) / 12)
