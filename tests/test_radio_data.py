"""Tests of `datasets.radio_modulation` (NumPy only, any backend): the
layouts, determinism and disjoint splits, balanced sets, and each
impairment against its definition, computed here with NumPy (the
root-raised-cosine pulse, the carrier offset and phase, the sample-rate
and timing offsets, the fading taps, the SNR, the analog modulations)."""

import numpy as np
import pytest

from cvattn_keras import datasets
from cvattn_keras.datasets import radio

FS = 200_000.0  # the nominal sample rate
AUDIO_RATE = 44_100.0
# Every impairment off: the frames are the modulated signals themselves.
OFF = dict(
    frequency_offset=0.0,
    phase_offset=False,
    sample_rate_offset=0.0,
    timing_offset=False,
    fading=None,
    noise=False,
)
LINEAR = {
    "BPSK": np.array([1, -1]),
    "QPSK": np.exp(1j * np.pi * (2 * np.arange(4) + 1) / 4),
    "8PSK": np.exp(2j * np.pi * np.arange(8) / 8),
    "PAM4": np.array([-3, -1, 1, 3]) / np.sqrt(5),
    "QAM16": (
        (np.arange(4)[:, None] * 2 - 3) + 1j * (np.arange(4)[None] * 2 - 3)
    ).ravel()
    / np.sqrt(10),
    "QAM64": (
        (np.arange(8)[:, None] * 2 - 7) + 1j * (np.arange(8)[None] * 2 - 7)
    ).ravel()
    / np.sqrt(42),
}


def _rrc(t, beta):
    """The root-raised-cosine pulse at `t` symbols (unnormalised), from
    its closed form and its limits at t = 0 and |t| = 1 / (4 beta)."""
    t = np.asarray(t, np.float64)
    out = np.empty_like(t)
    for i, x in np.ndenumerate(t):
        if x == 0:
            out[i] = 1 - beta + 4 * beta / np.pi
        elif beta > 0 and abs(abs(x) - 1 / (4 * beta)) < 1e-12:
            out[i] = (beta / np.sqrt(2)) * (
                (1 + 2 / np.pi) * np.sin(np.pi / (4 * beta))
                + (1 - 2 / np.pi) * np.cos(np.pi / (4 * beta))
            )
        else:
            out[i] = (
                np.sin(np.pi * x * (1 - beta))
                + 4 * beta * x * np.cos(np.pi * x * (1 + beta))
            ) / (np.pi * x * (1 - (4 * beta * x) ** 2))
    return out


def _taps(sps, beta, span=16):
    pulse = _rrc(np.arange(-span * sps // 2, span * sps // 2 + 1) / sps, beta)
    return pulse / np.sqrt(np.sum(pulse**2))


def _matched_symbols(frame, sps, beta):
    """The matched filter's output at the symbol instants `j sps` for the
    symbols whose filter window lies inside the frame: `(j, values)`."""
    taps = _taps(sps, beta)
    half = len(taps) // 2
    filtered = np.convolve(frame, taps[::-1], mode="full")[half:-half]
    j = np.arange(half // sps, (len(frame) - half) // sps)
    return j, filtered[j * sps]


def _scale(got, want):
    """The least-squares complex factor c minimising |got - c want|."""
    return np.vdot(want, got) / np.vdot(want, want)


# ----------------------------------------------------------------------
# Layout, determinism, splits.
# ----------------------------------------------------------------------


def test_shapes_dtypes_and_layouts():
    frames = datasets.radio_modulation(
        "validation", num_frames=6, frame_length=64, seed=3
    )
    assert len(frames) == 6
    for name in ("iq", "clean"):
        field = getattr(frames, name)
        assert field.shape == (6, 64) and field.dtype == np.complex64
    assert frames.labels.shape == (6,) and frames.labels.dtype == np.int32
    assert frames.snr_db.dtype == np.float32
    for name in ("frequency_offset", "phase", "sample_rate_offset"):
        assert getattr(frames, name).shape == (6,)
        assert getattr(frames, name).dtype == np.float32
    assert frames.timing_offset.dtype == np.float32
    assert frames.channel_taps.shape == (6, 3)
    assert frames.channel_taps.dtype == np.complex64
    assert frames.audio_start.dtype == np.int64
    assert frames.classes == datasets.RADIOML_CLASSES
    assert frames.path_delays == (0.0, 0.9, 1.7)
    assert (frames.split, frames.seed, frames.samples_per_symbol) == (
        "validation",
        3,
        8,
    )
    # tokens: token t holds samples 8t .. 8t + 7, real parts then
    # imaginary parts (synthetic_modulation's x).
    tokens = frames.tokens(8)
    assert tokens.shape == (6, 8, 16) and tokens.dtype == np.float32
    z = frames.iq.reshape(6, 8, 8)
    np.testing.assert_array_equal(tokens[..., :8], z.real)
    np.testing.assert_array_equal(tokens[..., 8:], z.imag)
    stacked = frames.stacked()
    assert stacked.shape == (6, 64, 2) and stacked.dtype == np.float32
    np.testing.assert_array_equal(stacked[..., 0], frames.iq.real)
    np.testing.assert_array_equal(stacked[..., 1], frames.iq.imag)
    with pytest.raises(ValueError, match="token_length=5"):
        frames.tokens(5)


def test_deterministic_and_splits_disjoint():
    kwargs = dict(num_frames=40, frame_length=32, seed=7)
    a = datasets.radio_modulation("train", **kwargs)
    b = datasets.radio_modulation("train", **kwargs)
    for name in ("iq", "clean", "labels", "snr_db", "phase", "channel_taps"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    others = [
        datasets.radio_modulation("validation", **kwargs),
        datasets.radio_modulation("test", **kwargs),
        datasets.radio_modulation("train", **dict(kwargs, seed=8)),
    ]
    for other in others:
        # Disjoint streams: no frame, noise draw or phase of one appears
        # in the other.
        assert not np.any(np.isin(a.phase, other.phase))
        noise = a.iq - a.clean
        assert not np.any(np.isin(noise.real, (other.iq - other.clean).real))


def test_balanced_sets_count_every_class_at_every_snr():
    classes, snrs = ("QPSK", "WBFM", "GFSK"), (-20, 0, 18)
    frames = datasets.radio_modulation(
        "test",
        frames_per_class_and_snr=4,
        classes=classes,
        snr_db=snrs,
        frame_length=16,
    )
    assert len(frames) == 3 * 3 * 4 and frames.classes == classes
    for label in range(3):
        for snr in snrs:
            chosen = (frames.labels == label) & (frames.snr_db == snr)
            assert chosen.sum() == 4
    # Shuffled: not in (class, SNR) order.
    assert np.any(np.diff(frames.labels) < 0)
    analog = frames.labels == 1
    assert np.all(frames.audio_start[analog] >= 0)
    assert np.all(frames.audio_start[~analog] == -1)


def test_uniform_draws_stay_on_the_grid():
    frames = datasets.radio_modulation(
        "train", num_frames=300, snr_db=(-4, 2), frame_length=8
    )
    assert set(np.unique(frames.snr_db)) == {-4.0, 2.0}
    assert set(np.unique(frames.labels)) == set(range(11))
    # The impairments' ranges (the defaults: 500 Hz and 50 Hz at 200 kHz).
    assert np.all(np.abs(frames.frequency_offset) <= 500 / FS)
    assert np.all(np.abs(frames.sample_rate_offset) <= 50 / FS)
    assert np.all((frames.phase >= 0) & (frames.phase < 2 * np.pi + 1e-6))
    # The timing offset: uniform in [0, samples_per_symbol), a frame
    # starting anywhere in a symbol. Over 300 draws, the first and the
    # last eighth of the range are each missed with probability
    # (7/8)^300 < 1e-17.
    for sps, frame in ((8, frames), (4, None)):
        if frame is None:
            frame = datasets.radio_modulation(
                "train", num_frames=300, frame_length=8, samples_per_symbol=4
            )
        tau = frame.timing_offset
        assert np.all((tau >= 0) & (tau < sps))
        assert tau.min() < sps / 8 and tau.max() > 7 * sps / 8


def test_switching_an_impairment_off_keeps_everything_else():
    kwargs = dict(num_frames=30, frame_length=32, seed=2)
    full = datasets.radio_modulation("train", **kwargs)
    less = datasets.radio_modulation(
        "train", **kwargs, sample_rate_offset=0.0, fading=None
    )
    for name in ("labels", "snr_db", "phase", "frequency_offset"):
        np.testing.assert_array_equal(getattr(full, name), getattr(less, name))
    np.testing.assert_array_equal(full.timing_offset, less.timing_offset)
    np.testing.assert_array_equal(full.audio_start, less.audio_start)
    assert np.all(less.sample_rate_offset == 0)
    assert np.all(less.channel_taps == 1) and less.path_delays == (0.0,)
    # The same noise draws at the same SNRs (the clean frames differ).
    # (float32 rounding of iq, up to about 40 at -20 dB: 40 * 2^-24.)
    np.testing.assert_allclose(
        full.iq - full.clean, less.iq - less.clean, atol=1e-5
    )
    # The noise alone switched off: the same clean frames.
    quiet = datasets.radio_modulation("train", **kwargs, noise=False)
    np.testing.assert_array_equal(quiet.clean, full.clean)
    np.testing.assert_array_equal(quiet.iq, quiet.clean)


@pytest.mark.parametrize("reference", ["average", "frame"])
def test_a_single_fading_path_scales_the_same_signal(reference):
    # Every other impairment off: a single path of gain g at delay 0
    # multiplies the very signal that fading=None gives, by g ("average")
    # or by its phase g / |g| ("frame", the frame rescaled to unit power).
    kwargs = dict(
        OFF, num_frames=22, frame_length=64, path_delays=(0.0,), seed=5
    )
    kwargs.update(path_gains=(1.0,), snr_reference=reference)
    plain = datasets.radio_modulation("train", **kwargs)
    faded = datasets.radio_modulation(
        "train", **dict(kwargs, fading="rayleigh")
    )
    np.testing.assert_array_equal(plain.labels, faded.labels)
    g = faded.channel_taps[:, 0].astype(complex)
    assert np.ptp(np.abs(g)) > 0.5  # drawn: magnitudes differ
    gain = g if reference == "average" else g / np.abs(g)
    want = gain[:, None] * plain.clean.astype(complex)
    # float32 frames: 1e-5 of amplitudes up to a few units.
    np.testing.assert_allclose(faded.clean, want, rtol=0, atol=1e-5 * 4)


# ----------------------------------------------------------------------
# The pulse and the pure modulations.
# ----------------------------------------------------------------------


@pytest.mark.parametrize("beta", [0.35, 0.25, 0.5])
def test_rrc_pulse_and_zero_isi_at_symbol_instants(beta):
    got = radio._rrc(8, beta)
    # 0.25 puts the formula's singular point 1 / (4 beta) on a tap.
    np.testing.assert_allclose(got, _taps(8, beta), rtol=0, atol=1e-12)
    assert np.sum(got**2) == pytest.approx(1, abs=1e-12)
    # The pulse convolved with itself is the raised cosine: zero at every
    # nonzero multiple of the symbol period. Truncating the pulse to 16
    # symbols leaves at most 2e-3 there (0.35: 1.8e-3).
    cosine = np.convolve(got, got)
    centre = len(got) - 1
    assert cosine[centre] == pytest.approx(1, abs=1e-12)
    lags = centre + 8 * np.concatenate([np.arange(-16, 0), np.arange(1, 17)])
    assert np.max(np.abs(cosine[lags])) < 2e-3


@pytest.mark.parametrize("name", sorted(LINEAR))
def test_linear_modulations_are_rrc_shaped_constellations(name):
    frames = datasets.radio_modulation(
        "train", num_frames=3, classes=(name,), frame_length=512, **OFF
    )
    np.testing.assert_array_equal(frames.iq, frames.clean)
    points = LINEAR[name]
    seen = set()
    for frame in frames.clean.astype(np.complex128):
        j, values = _matched_symbols(frame, 8, 0.35)
        # Scaled to unit mean power, decided, then scaled again by least
        # squares against the decisions (the frame's 48 symbols' power is
        # not exactly the constellation's).
        values = values / np.sqrt(np.mean(np.abs(values) ** 2))
        nearest = np.abs(values[:, None] - points).argmin(axis=1)
        values = values / _scale(values, points[nearest])
        # Every matched-filter sample lies within a quarter of the
        # smallest distance between points of its point: the truncated
        # pulse's ISI is about 1e-2 (a sum of 16 terms below 2e-3).
        distance = np.abs(values[:, None] - points[None, :])
        nearest = distance.argmin(axis=1)
        pairs = np.abs(points[:, None] - points[None, :])
        smallest = np.min(pairs[pairs > 0])
        assert np.max(distance.min(axis=1)) < 0.25 * smallest, name
        seen.update(nearest.tolist())
        # The frame IS sqrt(sps) sum_j a_j p(n - j sps), the pulse from
        # the closed form here: rebuild it from the decided symbols j
        # (those inside the frame and its tails) and compare in the middle.
        symbols = points[nearest]
        pulse = _taps(8, 0.35)
        rebuilt = np.zeros(len(frame) + len(pulse), complex)
        for k, a in zip(j, symbols):
            rebuilt[k * 8 : k * 8 + len(pulse)] += a * pulse
        rebuilt = rebuilt[len(pulse) // 2 : len(pulse) // 2 + len(frame)]
        inner = slice((j[0] + 8) * 8, (j[-1] - 8) * 8)
        c = _scale(frame[inner], rebuilt[inner])
        error = np.abs(frame[inner] - c * rebuilt[inner])
        # float32 frames: 1e-5 of the unit mean power's amplitude.
        assert np.max(error) < 1e-5 and abs(np.angle(c)) < 1e-6, name
    # The constellation's points (QAM16: 16 of them) among 144 symbols
    # (a QAM64 point is missed with probability (63/64)^144 = 0.1).
    if len(points) <= 16:
        assert seen == set(range(len(points))), name
    else:
        assert len(seen) > 48


def test_cpfsk_and_gfsk_are_continuous_phase():
    frames = datasets.radio_modulation(
        "train",
        num_frames=4,
        classes=("CPFSK", "GFSK"),
        frame_length=256,
        **OFF,
    )
    for frame, label in zip(frames.clean.astype(complex), frames.labels):
        np.testing.assert_allclose(np.abs(frame), 1, atol=1e-5)
        # The phase is 0 at sample 0 (no phase offset).
        assert abs(np.angle(frame[0])) < 1e-5
        step = np.angle(frame[1:] * np.conj(frame[:-1]))
        if frames.classes[label] == "CPFSK":
            # Index 0.5: +-pi 0.5 / 8 per sample, constant over a symbol
            # (symbol j on samples 8j .. 8j + 7: steps into 8j+1 .. 8j+7).
            np.testing.assert_allclose(np.abs(step), np.pi / 16, atol=1e-5)
            within = step.reshape(-1)[: 31 * 8].reshape(31, 8)[:, :7]
            assert np.all(np.abs(np.diff(within, axis=1)) < 1e-5)
        else:
            # Index 0.8 / pi: the step into sample n is pi h / 8 times the
            # NRZ bits (+-1 on symbol j's samples 8j .. 8j + 7) through a
            # Gaussian filter of BT 0.35 (std sqrt(ln 2) / (2 pi BT)
            # symbols), taps over +-2 symbols summing to 1. The bits are
            # decided from the step mid-symbol (an isolated bit keeps
            # 0.81 of its pulse there, its neighbours take at most 0.19).
            h = 0.8 / np.pi
            k = np.pi * h / 8
            bits = np.sign(step[8 * np.arange(1, 32) + 3])  # samples 8j+4
            nrz = np.concatenate([[0] * 8, np.repeat(bits, 8)])
            sigma = np.sqrt(np.log(2)) / (2 * np.pi * 0.35) * 8
            m = np.arange(-16, 17)
            gauss = np.exp(-0.5 * (m / sigma) ** 2)
            gauss /= gauss.sum()
            n = np.arange(3 * 8, 29 * 8)  # 16 samples from unknown bits
            want = k * np.array([gauss @ nrz[i - m] for i in n])
            # float32 phases: 1e-5 rad.
            np.testing.assert_allclose(step[n - 1], want, atol=1e-5)
            # Not rectangular: the steps vary within symbols.
            within = step[n[0] - 1 : n[-1]].reshape(-1, 8)
            assert np.max(np.ptp(within, axis=1)) > 0.5 * k


# ----------------------------------------------------------------------
# The channel, each impairment against its definition.
# ----------------------------------------------------------------------


def test_known_frequency_offset_recovered():
    frames = datasets.radio_modulation(
        "test",
        num_frames=12,
        classes=("BPSK",),
        frame_length=1024,
        **dict(OFF, frequency_offset=0.0025),
    )
    assert np.ptp(frames.frequency_offset) > 1e-3  # drawn, not constant
    # Squaring BPSK removes the symbols' signs: a line at twice the
    # offset. A 65,536-point FFT resolves it to 1 / 131,072 cycles per
    # sample per bin of the offset; 2e-5 allows two bins and the line's
    # distortion by the modulation.
    square = frames.clean.astype(complex) ** 2
    spectrum = np.abs(np.fft.fft(square, 2**16, axis=1))
    found = np.fft.fftfreq(2**16)[spectrum.argmax(axis=1)] / 2
    np.testing.assert_allclose(found, frames.frequency_offset, atol=2e-5)


def test_known_phase_recovered():
    frames = datasets.radio_modulation(
        "test",
        num_frames=10,
        classes=("AM-DSB", "BPSK"),
        frame_length=256,
        **dict(OFF, phase_offset=True),
    )
    assert np.ptp(frames.phase) > 1  # drawn
    for frame, label, phase in zip(frames.clean, frames.labels, frames.phase):
        if frames.classes[label] == "AM-DSB":
            # The envelope 1 + 0.5 a(t) > 0 is real: every sample has the
            # carrier's phase (float32's angle: 1e-5).
            want = np.exp(1j * phase)
            np.testing.assert_allclose(frame / np.abs(frame), want, atol=1e-5)
        else:
            # BPSK squared is real and positive on average: 2 phi.
            found = np.angle(np.mean(frame.astype(complex) ** 2)) / 2
            error = np.angle(np.exp(2j * (found - phase))) / 2
            assert abs(error) < 1e-5  # float32's phase


@pytest.mark.parametrize("level", [0.2, 0.9])
def test_sample_rate_and_timing_offsets_resample_the_waveform(level):
    # WBFM of a constant audio level is a tone of 0.375 level cycles per
    # sample, phase 0 at sample 0: s(t) = exp(j 2 pi f t). Sampled at
    # t_n = n (1 + delta) + tau, with the largest offset allowed (1%:
    # 10 samples of drift over 1024).
    audio = np.full(4000, level)
    frames = datasets.radio_modulation(
        "test",
        num_frames=6,
        classes=("WBFM",),
        frame_length=1024,
        audio=audio,
        **dict(OFF, sample_rate_offset=0.01, timing_offset=True),
    )
    assert np.ptp(frames.sample_rate_offset) > 1e-3
    f = 75_000 / FS * level
    n = np.arange(1024)
    t = n[None] * (1 + frames.sample_rate_offset[:, None].astype(float))
    t += frames.timing_offset[:, None]
    want = np.exp(2j * np.pi * f * t)
    # The interpolator's error (6e-4 up to 0.4 cycles per sample) and
    # float32's.
    np.testing.assert_allclose(frames.clean, want, rtol=0, atol=1e-3)


def test_sample_rate_offset_of_an_rrc_signal_is_the_ideal_waveform():
    kwargs = dict(num_frames=2, classes=("QPSK",), frame_length=1024, seed=4)
    plain = datasets.radio_modulation("test", **kwargs, **OFF)
    moved = datasets.radio_modulation(
        "test",
        **kwargs,
        **dict(OFF, sample_rate_offset=0.01, timing_offset=True),
    )
    points = LINEAR["QPSK"]
    pulse_at = 8  # the pulse spans +-8 symbols
    for frame, other, delta, tau in zip(
        plain.clean.astype(complex),
        moved.clean.astype(complex),
        moved.sample_rate_offset.astype(float),
        moved.timing_offset.astype(float),
    ):
        # The symbols (the same draws in both), decided from the plain
        # frame; the waveform sum_j a_j p(t - 8 j) from the closed form,
        # at t_n = n (1 + delta) + tau, where every symbol it needs is
        # known.
        j, values = _matched_symbols(frame, 8, 0.35)
        symbols = points[np.abs(values[:, None] - points).argmin(axis=1)]
        n = np.arange(1024)
        t = n * (1 + delta) + tau
        inner = (t > (j[0] + pulse_at) * 8) & (t < (j[-1] - pulse_at) * 8)
        lag = t[inner, None] / 8 - j[None, :]  # in symbols
        pulse = np.where(np.abs(lag) <= 8, _rrc(lag, 0.35), 0)
        want = pulse @ symbols
        got = other[inner]
        c = _scale(got, want)
        # The windowed-sinc interpolator's error in this band (below 0.085
        # cycles per sample: 2e-4) and the truncation: the pulse steps
        # from p(8 symbols) = 2.8e-3 p(0) to 0 at each end, which no
        # band-limited interpolator follows. Two such steps (the symbols
        # 8 before and 8 after) bound the error: 6e-3, 1.5e-3 rms.
        error = np.abs(got - c * want)
        assert np.max(error) < 6e-3 and np.sqrt(np.mean(error**2)) < 1.5e-3
        # Both frames have unit power, over stretches of the signal that
        # differ by the drift and the timing offset (up to 10 + 8 of 1024
        # samples): 1%.
        assert abs(c - 1) < 1e-2


@pytest.mark.parametrize("fading", ["rician", "rayleigh"])
def test_fading_tap_statistics(fading):
    frames = datasets.radio_modulation(
        "train",
        num_frames=4000,
        classes=("BPSK",),
        frame_length=8,
        fading=fading,
        rician_k=4.0,
        noise=False,
    )
    taps = frames.channel_taps.astype(complex)
    gains = np.array([1.0, 0.8, 0.3])
    # Each path's expected power is gains^2 / sum(gains^2). |g|^2 of a
    # Rayleigh tap is exponential (std = mean): over 4,000 frames the
    # mean's relative std is 1.6%, smaller for the Rician tap; 7% is
    # over 4 standard deviations.
    power = np.mean(np.abs(taps) ** 2, axis=0)
    np.testing.assert_allclose(power, gains**2 / np.sum(gains**2), rtol=0.07)
    # The K factor: line-of-sight power |E g|^2 over the scattered
    # variance. The estimate's relative std is about 3% here; 15%.
    first = taps[:, 0]
    scattered = np.var(first)
    if fading == "rician":
        k = np.abs(np.mean(first)) ** 2 / scattered
        assert k == pytest.approx(4.0, rel=0.15)
        assert abs(np.angle(np.mean(first))) < 0.05  # line of sight, phase 0
    # Zero-mean scattered taps: |mean| within 4 standard errors.
    others = taps if fading == "rayleigh" else taps[:, 1:]
    for column in others.T:
        assert np.abs(np.mean(column)) < 4 * np.sqrt(np.var(column) / 4000)


@pytest.mark.parametrize("reference", ["average", "frame"])
def test_frames_go_through_their_fading_taps(reference):
    # A tone exp(j 2 pi f t) (unit power) through paths g_k at delays d_k
    # is the tone times H = sum_k g_k exp(-j 2 pi f d_k): as it is with
    # snr_reference="average" (the channel's gain kept), normalised to
    # unit power with "frame".
    level = 0.4
    frames = datasets.radio_modulation(
        "train",
        num_frames=8,
        classes=("WBFM",),
        frame_length=256,
        audio=np.full(3000, level),
        snr_reference=reference,
        **dict(OFF, fading="rician"),
    )
    f = 75_000 / FS * level
    n = np.arange(256)
    delays = np.array(frames.path_delays)
    response = frames.channel_taps.astype(complex) @ np.exp(
        -2j * np.pi * f * delays
    )
    if reference == "frame":
        response = response / np.abs(response)
    assert np.ptp(np.abs(response)) > 0.3 or reference == "frame"
    want = np.exp(2j * np.pi * f * n)[None] * response[:, None]
    # The interpolator's error (6e-4 of the amplitude, below 2 here).
    np.testing.assert_allclose(frames.clean, want, rtol=0, atol=1.5e-3)


@pytest.mark.parametrize(
    "reference, fading", [("frame", "rician"), ("average", None)]
)
def test_measured_snr_matches_the_requested_one(reference, fading):
    # Every frame at its SNR: "frame" normalises the faded frame; with
    # "average" and no fading the channel has unit gain (the carrier has
    # unit modulus). Per frame, the noise's power is estimated from frame_length
    # complex samples: a relative std of 1 / sqrt(1024) = 3.1%, 0.14 dB;
    # 128 samples would give 0.38 dB, too close to the 0.5 dB asked.
    snrs = (-20, -6, 0, 10, 18)
    frames = datasets.radio_modulation(
        "validation",
        frames_per_class_and_snr=6,
        classes=("8PSK", "AM-SSB", "CPFSK"),
        snr_db=snrs,
        frame_length=1024,
        fading=fading,
        snr_reference=reference,
    )
    clean = frames.clean.astype(complex)
    noise = frames.iq.astype(complex) - clean
    np.testing.assert_allclose(
        np.mean(np.abs(clean) ** 2, axis=1), 1, atol=1e-5
    )
    measured = 10 * np.log10(
        np.mean(np.abs(clean) ** 2, axis=1)
        / np.mean(np.abs(noise) ** 2, axis=1)
    )
    assert np.max(np.abs(measured - frames.snr_db)) < 0.5
    # Averaged over the 18 frames of an SNR: 0.14 / sqrt(18) = 0.03 dB.
    for snr in snrs:
        chosen = frames.snr_db == snr
        assert abs(np.mean(measured[chosen]) - snr) < 0.12
    # White and circular: real and imaginary parts of equal power.
    ratio = np.mean(noise.real**2) / np.mean(noise.imag**2)
    assert ratio == pytest.approx(1, abs=0.05)


def test_average_snr_lets_fades_lower_a_frames_snr():
    # snr_reference="average" (the default), Rayleigh fading: the noise
    # keeps its variance 10^(-snr/10) after the channel, while a frame's
    # clean power is the channel's gain for it, 1 in expectation.
    count = 3000
    frames = datasets.radio_modulation(
        "train",
        num_frames=count,
        snr_db=0,
        frame_length=32,
        fading="rayleigh",
        seed=11,
    )
    power = np.mean(np.abs(frames.clean.astype(complex)) ** 2, axis=1)
    # The mean over frames: each frame's power is about exponential (the
    # paths lie within a fraction of a symbol): the mean's standard error
    # is its std / sqrt(3000), about 1.8%; within 4 standard errors.
    error = np.std(power) / np.sqrt(count)
    assert abs(np.mean(power) - 1) < 4 * error
    # Deep fades kept, not normalised away (an exponential's 10th
    # percentile is 0.105; "frame" would put every frame at 1).
    assert np.percentile(power, 10) < 0.5 and np.percentile(power, 90) > 1.5
    # The noise at its fixed level: unit variance at 0 dB, estimated from
    # 96,000 complex samples (a relative std of 0.3%; 2%).
    noise = (frames.iq - frames.clean).astype(complex)
    assert np.mean(np.abs(noise) ** 2) == pytest.approx(1, rel=0.02)
    # The same frames with "frame": every clean frame at unit power.
    fixed = datasets.radio_modulation(
        "train",
        num_frames=count,
        snr_db=0,
        frame_length=32,
        fading="rayleigh",
        seed=11,
        snr_reference="frame",
    )
    fixed_power = np.mean(np.abs(fixed.clean.astype(complex)) ** 2, axis=1)
    np.testing.assert_allclose(fixed_power, 1, atol=1e-5)
    np.testing.assert_array_equal(fixed.channel_taps, frames.channel_taps)


# ----------------------------------------------------------------------
# The analog modulations follow the audio.
# ----------------------------------------------------------------------


def _audio(u):
    """The test audio at `u` audio samples (44.1 kHz): two tones of whole
    cycles per second, so the FFT's Hilbert transform is exact."""
    theta1 = 2 * np.pi * 440 * u / AUDIO_RATE + 0.3
    theta2 = 2 * np.pi * 1234 * u / AUDIO_RATE
    return 0.8 * np.sin(theta1) + 0.1 * np.sin(theta2), (theta1, theta2)


def test_analog_modulations_follow_the_audio():
    audio, _ = _audio(np.arange(44100))
    frames = datasets.radio_modulation(
        "test",
        frames_per_class_and_snr=3,
        classes=("AM-DSB", "AM-SSB", "WBFM"),
        snr_db=10,
        frame_length=1024,
        audio=audio,
        **OFF,
    )
    n = np.arange(1024)
    for frame, label, start in zip(
        frames.clean.astype(complex), frames.labels, frames.audio_start
    ):
        # Sample n of the frame is the audio at start + n 44.1 / 200.
        a, (theta1, theta2) = _audio(start + n * AUDIO_RATE / FS)
        name = frames.classes[label]
        if name == "AM-DSB":  # 1 + 0.5 a, up to the normalisation
            want = 1 + 0.5 * a
        elif name == "AM-SSB":  # a + j H(a); H(sin) = -cos
            want = -0.8j * np.exp(1j * theta1) - 0.1j * np.exp(1j * theta2)
        else:
            # WBFM: the phase steps by 2 pi 0.375 a per sample.
            step = np.angle(frame[1:] * np.conj(frame[:-1])) / (2 * np.pi)
            np.testing.assert_allclose(step, 0.375 * a[1:], atol=1e-4)
            continue
        c = _scale(frame, want)
        # The interpolator's error at these low frequencies (< 1e-4) and
        # float32's; the amplitude 1 + 0.5 a is at least 0.55.
        np.testing.assert_allclose(frame, c * want, atol=2e-4)
        assert abs(np.angle(c)) < 1e-4


def test_builtin_music_is_band_limited_and_never_silent():
    audio = radio._music(0, 0).real
    assert len(audio) == 2**19
    assert np.max(np.abs(audio)) == pytest.approx(1, abs=1e-9)
    # Below 4 kHz: notes up to 880 Hz with four harmonics (the attacks'
    # corners leak a little).
    power = np.abs(np.fft.rfft(audio)) ** 2
    hz = np.fft.rfftfreq(len(audio), 1 / AUDIO_RATE)
    assert np.sum(power[hz > 4000]) < 1e-4 * np.sum(power)
    # Some note is always sounding: no millisecond (44 samples) below
    # -60 dB of full scale.
    window = np.convolve(audio**2, np.ones(44) / 44, mode="valid")
    assert np.min(window) > 1e-6
    assert not np.array_equal(audio[:1000], radio._music(0, 1).real[:1000])


# ----------------------------------------------------------------------
# Bad arguments.
# ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(split="dev"), "split"),
        (dict(num_frames=None), "num_frames"),
        (dict(frames_per_class_and_snr=2), "frames_per_class_and_snr"),
        (dict(num_frames=0), "num_frames"),
        (dict(classes=("BPSK", "FM")), "classes"),
        (dict(classes=()), "classes"),
        (dict(classes=("BPSK", "BPSK")), "classes"),
        (dict(classes="BPSK"), "classes"),
        (dict(snr_db=(-22, 0)), "snr_db"),
        (dict(snr_db=(0, 32)), "snr_db"),
        (dict(snr_db=float("nan")), "snr_db"),
        (dict(snr_db=()), "snr_db"),
        (dict(frame_length=100), "frame_length"),
        (dict(samples_per_symbol=1), "samples_per_symbol"),
        (dict(rolloff=1.5), "rolloff"),
        (dict(rolloff=-0.1), "rolloff"),
        (dict(frequency_offset=float("inf")), "frequency_offset"),
        (dict(frequency_offset=-0.001), "frequency_offset"),
        (dict(sample_rate_offset=float("nan")), "sample_rate_offset"),
        (dict(sample_rate_offset=-1e-4), "sample_rate_offset"),
        (dict(phase_offset=1), "phase_offset"),
        (dict(timing_offset="yes"), "timing_offset"),
        (dict(fading="rice"), "fading"),
        (dict(rician_k=-1.0), "rician_k"),
        (dict(rician_k=float("inf")), "rician_k"),
        (dict(path_delays=(0.0, -1.0, 1.0)), "path_delays"),
        (dict(path_delays=(0.0, float("nan"), 1.0)), "path_delays"),
        (dict(path_gains=(1.0, 0.5)), "path_gains"),
        (dict(path_gains=(0.0, 0.0, 0.0)), "path_gains"),
        (dict(path_gains=(1.0, float("inf"), 0.3)), "path_gains"),
        (dict(path_gains=(1.0, float("nan"), 0.3)), "path_gains"),
        (dict(frame_length=0), "frame_length"),
        (dict(samples_per_symbol=2.5), "samples_per_symbol"),
        (dict(snr_reference="x"), "snr_reference"),
        (dict(snr_reference=None), "snr_reference"),
        (dict(noise=None), "noise"),
        (dict(audio=np.zeros((10, 10))), "audio"),
        (dict(audio=np.full(20, 0.5)), "audio"),
        (dict(audio=np.array([0.1, np.nan] * 200)), "audio"),
        (dict(audio=np.full(400, 2.0)), "audio"),
        (dict(audio=np.full(400, 0.5 + 0.1j)), "audio"),
        (dict(seed=-1), "seed"),
        (dict(seed=1.5), "seed"),
    ],
)
def test_bad_arguments_raise_naming_them(kwargs, name):
    arguments = dict(split="train", num_frames=2, frame_length=16)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=f"`{name}`") as info:
        datasets.radio_modulation(**arguments)
    assert f"{name}=" in str(info.value)
