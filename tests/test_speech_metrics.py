"""Tests of the speech-enhancement metrics: SI-SDR and SNR against
independent NumPy computations and worked values; PESQ, STOI and DNSMOS
against their packages called directly (skipped without them), their
ordering on more and less noise, and every bad input."""

import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from cvattn_keras import metrics

RATE = 16000


def _missing(module):
    return importlib.util.find_spec(module) is None


needs_pesq = pytest.mark.skipif(
    _missing("pesq"), reason='pesq not installed (pip install ".[speech]")'
)
needs_pystoi = pytest.mark.skipif(
    _missing("pystoi"), reason='pystoi not installed (pip install ".[speech]")'
)
needs_speechmos = pytest.mark.skipif(
    _missing("speechmos") or _missing("librosa") or _missing("onnxruntime"),
    reason='speechmos, librosa or onnxruntime not installed (pip install ".'
    '[speech]")',
)


def voiced(seconds=3.0, rate=RATE, pitch=160.0):
    """A speech-like clip PESQ accepts: a harmonic series (1/k amplitudes,
    below 0.45 of the rate) on a pitch gliding +-40 Hz around `pitch`,
    under syllable-like bursts (2 a second, squared half-sines) with 0.2 s
    of silence at each end; peak 0.3."""
    t = np.arange(int(seconds * rate)) / rate
    f0 = pitch + 40 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    harmonics = range(1, int(0.45 * rate / (pitch + 40)) + 1)
    clip = sum(np.sin(k * phase) / k for k in harmonics)
    envelope = np.clip(np.sin(2 * np.pi * 2.0 * t), 0, None) ** 2
    envelope *= (t > 0.2) & (t < seconds - 0.2)
    clip = envelope * clip
    return 0.3 * clip / np.max(np.abs(clip))


def with_noise(clip, snr_db, seed=0):
    """`clip` plus white noise at `snr_db` dB below it."""
    noise = np.random.default_rng(seed).standard_normal(clip.shape)
    gain = np.linalg.norm(clip) / np.linalg.norm(noise) * 10 ** (-snr_db / 20)
    return clip + gain * noise


@pytest.fixture(scope="module")
def speech():
    """A clean clip and two noisy versions (30 dB and 5 dB SNR)."""
    clean = voiced()
    return clean, with_noise(clean, 30.0, seed=1), with_noise(clean, 5.0, 2)


# ----------------------------------------------------------------------
# SI-SDR
# ----------------------------------------------------------------------


def si_sdr_lstsq(reference, estimate):
    """The definition, computed another way: the least-squares fit of the
    zero-mean estimate by a multiple of the zero-mean reference
    (`np.linalg.lstsq`), in complex128 to take another code path."""
    reference = (reference - reference.mean()).astype(np.complex128)
    estimate = (estimate - estimate.mean()).astype(np.complex128)
    scale = np.linalg.lstsq(reference[:, None], estimate, rcond=None)[0]
    target = reference * scale[0]
    residual = estimate - target
    return 10 * np.log10(np.vdot(target, target).real) - 10 * np.log10(
        np.vdot(residual, residual).real
    )


def si_sdr_correlation(reference, estimate):
    """The closed form: with rho the correlation coefficient of the two
    clips, SI-SDR = 10 log10(rho^2 / (1 - rho^2))."""
    rho = np.corrcoef(reference, estimate)[0, 1]
    return 10 * np.log10(rho**2 / (1 - rho**2))


def random_pairs(count=4, length=2000, seed=0):
    rng = np.random.default_rng(seed)
    reference = rng.standard_normal((count, length)) + 0.3
    noise = rng.standard_normal((count, length))
    levels = np.array([0.01, 0.3, 1.0, 3.0])[:count, None]
    return reference, 0.7 * reference + levels * noise - 0.2


def test_si_sdr_matches_least_squares_and_the_closed_form():
    reference, estimate = random_pairs()
    for clean, enhanced in zip(reference, estimate):
        value = metrics.si_sdr(clean, enhanced)
        assert isinstance(value, float)
        np.testing.assert_allclose(
            value, si_sdr_lstsq(clean, enhanced), rtol=1e-10
        )
        np.testing.assert_allclose(
            value, si_sdr_correlation(clean, enhanced), rtol=1e-9
        )


def test_si_sdr_batch_equals_each_row():
    reference, estimate = random_pairs()
    batch = metrics.si_sdr(reference, estimate)
    assert isinstance(batch, np.ndarray)
    assert batch.dtype == np.float64 and batch.shape == (4,)
    rows = [metrics.si_sdr(r, e) for r, e in zip(reference, estimate)]
    np.testing.assert_array_equal(batch, rows)
    # float32 input is computed in float64, from the float32 values.
    np.testing.assert_allclose(
        metrics.si_sdr(reference.astype(np.float32), estimate),
        metrics.si_sdr(reference.astype(np.float32).astype(float), estimate),
        rtol=1e-12,
    )
    # Lists work too.
    assert metrics.si_sdr(list(reference[0]), list(estimate[0])) == rows[0]


def test_si_sdr_ignores_gain_and_offset():
    reference, estimate = random_pairs()
    value = metrics.si_sdr(reference, estimate)
    for other in (3 * estimate, estimate + 5.0, -0.01 * estimate + 1e3):
        np.testing.assert_allclose(
            metrics.si_sdr(reference, other), value, rtol=1e-9
        )
    # And the reference's gain and offset.
    np.testing.assert_allclose(
        metrics.si_sdr(1e-3 * reference - 2.0, estimate), value, rtol=1e-9
    )


def test_si_sdr_known_value():
    """Reference plus noise orthogonal to its zero-mean part, at a known
    power: exactly 10 log10(power ratio), whatever the estimate's gain."""
    rng = np.random.default_rng(3)
    reference = voiced(seconds=0.5)
    centred = reference - reference.mean()
    noise = rng.standard_normal(reference.size)
    noise -= noise.mean()
    noise -= np.dot(noise, centred) / np.dot(centred, centred) * centred
    noise *= np.linalg.norm(centred) / np.linalg.norm(noise) * 10**-0.6
    for gain in (1.0, 0.25, 4.0):
        value = metrics.si_sdr(reference, gain * (reference + noise))
        np.testing.assert_allclose(value, 12.0, rtol=1e-12)


def test_si_sdr_edge_values_are_documented_infinities():
    reference = voiced(seconds=0.5)
    assert metrics.si_sdr(reference, reference) == np.inf
    # A scaled copy: the float64 rounding floor, far above any real score.
    assert 250 < metrics.si_sdr(reference, 3 * reference) < np.inf
    # Silent, constant and orthogonal estimates recover nothing: -inf.
    orthogonal = np.tile([1.0, -1.0], 4)
    assert metrics.si_sdr(np.tile([1.0, 1.0, -1.0, -1.0], 2), orthogonal) == (
        -np.inf
    )
    for nothing in (np.zeros_like(reference), np.full_like(reference, 0.1)):
        assert metrics.si_sdr(reference, nothing) == -np.inf
    batch = metrics.si_sdr(
        np.stack([reference] * 3),
        np.stack([reference, 0 * reference, with_noise(reference, 20)]),
    )
    assert batch[0] == np.inf and batch[1] == -np.inf
    assert not np.any(np.isnan(batch))
    np.testing.assert_allclose(batch[2], 20.0, atol=0.1)


def test_si_sdr_extreme_levels_stay_finite():
    reference, estimate = random_pairs(count=1)
    value = metrics.si_sdr(reference, estimate)
    for scale in (1e-305, 1e300):
        np.testing.assert_allclose(
            metrics.si_sdr(scale * reference, scale * estimate),
            value,
            rtol=1e-9,
        )


# ----------------------------------------------------------------------
# SNR
# ----------------------------------------------------------------------


def test_snr_worked_example():
    # ||(3, 4)||^2 = 25; the error (0, 1) has energy 1: 10 log10(25).
    value = metrics.snr([3.0, 4.0], [3.0, 5.0])
    assert isinstance(value, float)
    np.testing.assert_allclose(value, 13.979400086720377, rtol=1e-14)
    # A 10 % gain error is -20 dB of noise.
    reference = voiced(seconds=0.5)
    np.testing.assert_allclose(
        metrics.snr(reference, 1.1 * reference), 20.0, rtol=1e-12
    )


def test_snr_matches_the_formula_per_row():
    reference, estimate = random_pairs()
    expected = [
        10 * np.log10(np.sum(r**2) / np.sum((e - r) ** 2))
        for r, e in zip(reference, estimate)
    ]
    batch = metrics.snr(reference, estimate)
    assert batch.dtype == np.float64 and batch.shape == (4,)
    np.testing.assert_allclose(batch, expected, rtol=1e-12)
    np.testing.assert_allclose(
        [metrics.snr(r, e) for r, e in zip(reference, estimate)],
        batch,
        rtol=1e-15,
    )
    # Not scale-invariant, but the same for a common scale, however large.
    for scale in (1e-305, 1e300):
        np.testing.assert_allclose(
            metrics.snr(scale * reference, scale * estimate), batch, rtol=1e-9
        )


def test_snr_edge_values():
    reference = voiced(seconds=0.5)
    assert metrics.snr(reference, reference) == np.inf
    assert metrics.snr(reference, np.zeros_like(reference)) == 0.0
    # A constant (nonzero) reference is fine for SNR.
    assert metrics.snr(np.ones(4), np.full(4, 0.9)) == pytest.approx(20.0)


# ----------------------------------------------------------------------
# PESQ, STOI, DNSMOS against their packages
# ----------------------------------------------------------------------


@needs_pesq
def test_pesq_equals_the_package_and_orders_noise(speech):
    import pesq as pesq_package

    clean, light, heavy = speech
    ours = metrics.pesq(np.stack([clean] * 3), np.stack([clean, light, heavy]))
    assert ours.dtype == np.float64 and ours.shape == (3,)
    theirs = [pesq_package.pesq(RATE, clean, x, "wb") for x in speech]
    np.testing.assert_array_equal(ours, theirs)
    assert ours[0] > ours[1] > ours[2]
    value = metrics.pesq(clean, light, mode="nb")
    assert isinstance(value, float)
    assert value == pesq_package.pesq(RATE, clean, light, "nb")
    # Narrow-band at 8 kHz.
    clean8 = voiced(rate=8000)
    noisy8 = [with_noise(clean8, snr, seed=4) for snr in (30.0, 5.0)]
    ours8 = [metrics.pesq(clean8, x, 8000, "nb") for x in noisy8]
    assert ours8 == [pesq_package.pesq(8000, clean8, x, "nb") for x in noisy8]
    assert ours8[0] > ours8[1]


@needs_pesq
def test_pesq_errors_become_value_errors(speech):
    clean, light, _ = speech
    noise = np.random.default_rng(5).standard_normal(clean.size)
    # The ITU code finds no utterance in a reference far below the estimate.
    with pytest.raises(ValueError, match="no utterance in `reference`"):
        metrics.pesq(1e-30 * clean, noise)
    with pytest.raises(ValueError, match=r"`estimate` in row 1.*silent"):
        metrics.pesq(np.stack([clean, clean]), np.stack([light, 0 * clean]))
    with pytest.raises(ValueError, match="`estimate`"):
        metrics.pesq(clean, 1e-30 * light)
    # Shorter than a quarter second; exactly a quarter second is scored.
    with pytest.raises(ValueError, match="quarter second.*4000 samples"):
        metrics.pesq(clean[8000:11999], light[8000:11999])
    assert metrics.pesq(clean[8000:12000], light[8000:12000]) > 1
    with pytest.raises(ValueError, match="`mode`.*mode='xb'"):
        metrics.pesq(clean, light, mode="xb")
    with pytest.raises(ValueError, match="`sample_rate`.*sample_rate=8000"):
        metrics.pesq(clean, light, sample_rate=8000)  # wide-band
    for rate in (44100, 16000.0, True, "16000"):
        with pytest.raises(ValueError, match="`sample_rate`"):
            metrics.pesq(clean, light, sample_rate=rate, mode="nb")


@needs_pystoi
def test_stoi_equals_the_package_and_orders_noise(speech):
    import pystoi

    clean, light, heavy = speech
    ours = metrics.stoi(np.stack([clean] * 3), np.stack([clean, light, heavy]))
    assert ours.dtype == np.float64 and ours.shape == (3,)
    theirs = [pystoi.stoi(clean, x, RATE) for x in speech]
    np.testing.assert_array_equal(ours, theirs)
    assert ours[0] > ours[1] > ours[2]
    # Extended STOI dithers with NumPy's global generator: equal up to it.
    value = metrics.stoi(clean, heavy, extended=True)
    assert isinstance(value, float)
    expected = pystoi.stoi(clean, heavy, RATE, extended=True)
    np.testing.assert_allclose(value, expected, rtol=1e-9)
    assert metrics.stoi(clean, light, extended=True) > value
    # Any rate: resampled to 10 kHz.
    clean8 = voiced(rate=8000)
    noisy8 = with_noise(clean8, 5.0)
    assert metrics.stoi(clean8, noisy8, 8000) == pystoi.stoi(
        clean8, noisy8, 8000
    )


@needs_pystoi
def test_stoi_errors(speech):
    clean, light, heavy = speech
    # pystoi warns and returns 1e-5 below 30 frames: a ValueError here.
    # A reference silent but for a 0.1-s burst keeps about 7 frames.
    burst = np.zeros_like(clean)
    burst[18000:19600] = clean[18000:19600]
    with pytest.raises(ValueError, match="`reference` in row 1 is too short"):
        metrics.stoi(np.stack([clean, burst]), np.stack([light, light]))
    # Below 4097 samples at 10 kHz (pystoi would crash or warn); the noisy
    # clip has no silent frame.
    for length in (2, 300, 5000, 6553):
        with pytest.raises(ValueError, match="`reference` is too short"):
            metrics.stoi(heavy[:length], light[:length])
    assert metrics.stoi(heavy[:6554], light[:6554]) > 0
    for rate in (0, -16000, 16000.0, None):
        with pytest.raises(ValueError, match="`sample_rate`"):
            metrics.stoi(clean, light, sample_rate=rate)
    with pytest.raises(ValueError, match="`extended`"):
        metrics.stoi(clean, light, extended="yes")


@needs_speechmos
def test_dnsmos_equals_the_package(speech):
    import speechmos
    from speechmos import dnsmos as speechmos_dnsmos

    # The ONNX models ship in the wheel: nothing to download.
    models = pathlib.Path(speechmos.__file__).parent / "dnsmos_models"
    assert (models / "sig_bak_ovr.onnx").is_file()
    assert (models / "model_v8.onnx").is_file()
    # DNSMOS scores 9 s per clip (about a second on 2 cores): three runs.
    clean, _, heavy = speech
    ours = metrics.dnsmos(clean)
    assert list(ours) == ["sig", "bak", "ovrl", "p808"]
    assert all(isinstance(value, float) for value in ours.values())
    theirs = speechmos_dnsmos.run(clean, RATE)
    assert ours == {key: float(theirs[f"{key}_mos"]) for key in ours}
    # White noise at 5 dB: a worse background.
    assert metrics.dnsmos(heavy)["bak"] < ours["bak"]


@needs_speechmos
def test_dnsmos_scores_each_row(monkeypatch):
    """A batch is speechmos' `run` on each row, gathered per score (a
    stand-in `run` here: the real one takes a second a clip)."""
    from speechmos import dnsmos as speechmos_dnsmos

    def run(clip, rate):
        assert clip.ndim == 1 and clip.dtype == np.float64 and rate == RATE
        level = np.float32(np.max(np.abs(clip)))
        return {
            "ovrl_mos": 1 + level,
            "sig_mos": 2 + level,
            "bak_mos": 3 + level,
            "p808_mos": 4 + level,
        }

    monkeypatch.setattr(speechmos_dnsmos, "run", run)
    clips = np.array([[0.5, -0.25], [0.0, 0.0], [-1.0, 0.75]], np.float32)
    ours = metrics.dnsmos(clips)
    levels = np.array([0.5, 0.0, 1.0])
    expected = {"sig": 2, "bak": 3, "ovrl": 1, "p808": 4}
    assert list(ours) == list(expected)
    for key, offset in expected.items():
        assert ours[key].dtype == np.float64 and ours[key].shape == (3,)
        np.testing.assert_array_equal(ours[key], offset + levels)


def test_dnsmos_bad_inputs():
    """Checked before speechmos is imported."""
    clean = voiced(seconds=0.5)
    with pytest.raises(ValueError, match=r"\[-1, 1\].*peak of 1\.5"):
        metrics.dnsmos(5 * clean)
    with pytest.raises(ValueError, match=r"row\(s\) \[1\]"):
        metrics.dnsmos(np.stack([clean, 5 * clean]))
    with pytest.raises(ValueError, match="`sample_rate`.*16000"):
        metrics.dnsmos(clean, sample_rate=8000)
    for bad in ([], np.zeros((2, 0)), [np.nan, 0.0], np.zeros((1, 1, 8))):
        with pytest.raises(ValueError, match="`estimate`"):
            metrics.dnsmos(bad)


# ----------------------------------------------------------------------
# Bad inputs, for every metric that takes a reference
# ----------------------------------------------------------------------

PAIRED = {
    "si_sdr": metrics.si_sdr,
    "snr": metrics.snr,
    "pesq": metrics.pesq,
    "stoi": metrics.stoi,
}
GOOD = voiced(seconds=1.0)


@pytest.mark.parametrize("metric", PAIRED)
@pytest.mark.parametrize(
    "reference, estimate, pattern",
    [
        (GOOD, GOOD[:-1], r"same shape.*\(16000,\).*\(15999,\)"),
        (GOOD[None], GOOD, r"same shape.*\(1, 16000\).*\(16000,\)"),
        (np.where(GOOD > 0.2, np.nan, GOOD), GOOD, "`reference` must be fin"),
        (GOOD, np.where(GOOD > 0.2, np.inf, GOOD), "`estimate` must be fin"),
        (np.zeros_like(GOOD), GOOD, "`reference` must not be silent"),
        (
            np.stack([GOOD, 0 * GOOD]),
            np.stack([GOOD, GOOD]),
            r"`reference` must not be silent.*row\(s\) \[1\]",
        ),
        ([], [], r"`reference` must not be empty.*\(0,\)"),
        (np.zeros((3, 0)), np.zeros((3, 0)), "`reference` must not be empty"),
        (GOOD, GOOD[None, None], r"`estimate` must be a clip.*\(1, 1, "),
        (np.zeros(()), np.zeros(()), r"`reference` must be a clip.*\(\)"),
        (GOOD + 0j, GOOD, "`reference` must be real.*complex128"),
        (GOOD, ["a"] * GOOD.size, "`estimate` must be real"),
        ([[1.0, 2.0], [3.0]], GOOD, "`reference` must be real.*ragged"),
    ],
)
def test_bad_inputs_name_the_argument(metric, reference, estimate, pattern):
    # The checks run before the packages are imported: no skip needed.
    with pytest.raises(ValueError, match=pattern):
        PAIRED[metric](reference, estimate)


def test_si_sdr_rejects_a_constant_reference():
    with pytest.raises(ValueError, match="`reference` must not be.*constant"):
        metrics.si_sdr(np.full(100, 0.5), GOOD[:100])


@pytest.mark.parametrize(
    "metric, module",
    [
        (lambda: metrics.pesq(GOOD, GOOD), "pesq"),
        (lambda: metrics.stoi(GOOD, GOOD), "pystoi"),
        (lambda: metrics.dnsmos(GOOD), "speechmos"),
    ],
)
def test_missing_packages_say_how_to_install(monkeypatch, metric, module):
    for name in list(sys.modules):
        if name == module or name.startswith(module + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # import fails
    with pytest.raises(ImportError, match=r'pip install "cvattn-keras\[spe'):
        metric()
