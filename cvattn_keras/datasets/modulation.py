"""`synthetic_modulation`: radio IQ sequences of standard digital
modulations with a random carrier phase, frequency offset and noise,
labelled by modulation (stacked `[real | imag]`, float32)."""

import numpy as np

from cvattn_keras.datasets._checks import _check_positive
from cvattn_keras.datasets._checks import _finite_range
from cvattn_keras.datasets._checks import _non_negative_finite
from cvattn_keras.datasets._checks import _non_negative_int

__all__ = ["MODULATIONS", "synthetic_modulation"]

MODULATIONS = ("bpsk", "qpsk", "8psk", "16qam", "64qam", "gfsk")
"""The modulations of `synthetic_modulation`; a label is an index into
its `modulations`.
"""


def _psk(order, symbols, offset=0.0):
    return np.exp(1j * (2 * np.pi * symbols / order + offset))


def _qam(order, symbols):
    side = int(round(np.sqrt(order)))
    levels = 2 * np.arange(side) - (side - 1)  # ..., -3, -1, 1, 3, ...
    points = levels[symbols % side] + 1j * levels[symbols // side]
    return points / np.sqrt(2 * (side**2 - 1) / 3)  # unit mean power


def _gfsk(bits, samples_per_symbol, bt=0.5, index=0.5):
    """Gaussian-filtered FSK: frequency pulses of +-1, Gaussian filter of
    bandwidth-time `bt`, modulation index `index`.

    `bits` `(rows, symbols)` -> `(rows, symbols * samples_per_symbol)`:
    the frequency at sample `t` is `sum_m g[m] p[t - m]` over the
    filter's taps `g[m]`, `|m| <= 2 samples_per_symbol` (centred, summing
    to 1), and the pulses `p` (0 outside the signal); the phase is its
    running sum times `pi index / samples_per_symbol`. (`np.convolve(...,
    mode="same")` centres on the longer of its operands: the filter
    itself when the signal is at most four symbols long.)
    """
    pulses = np.repeat(2.0 * bits - 1.0, samples_per_symbol, axis=-1)
    delay = 2 * samples_per_symbol  # the taps' centre
    span = np.arange(-delay, delay + 1)
    sigma = np.sqrt(np.log(2)) / (2 * np.pi * bt) * samples_per_symbol
    taps = np.exp(-0.5 * (span / sigma) ** 2)
    taps /= taps.sum()
    # Windows of the zero-padded pulses, one per output sample, centred on
    # it: (rows, samples, taps). The taps are symmetric (no flip needed).
    padded = np.pad(pulses, ((0, 0), (delay, delay)))
    windows = np.lib.stride_tricks.sliding_window_view(
        padded, taps.size, axis=-1
    )
    smooth = windows @ taps
    phase = np.pi * index * np.cumsum(smooth, axis=-1) / samples_per_symbol
    return np.exp(1j * phase)


def synthetic_modulation(
    num_samples=1200,
    length=128,
    token_length=8,
    modulations=MODULATIONS,
    samples_per_symbol=4,
    snr_db=(5.0, 20.0),
    phase_range=(0.0, 2 * np.pi),
    max_frequency_offset=0.002,
    seed=0,
):
    """Complex baseband IQ sequences of digital modulations.

    Each sample draws a modulation uniformly, random symbols (rectangular
    pulses of `samples_per_symbol`; GFSK is filtered in frequency), a carrier
    phase uniform in `phase_range`, a frequency offset uniform in
    `+-max_frequency_offset` cycles per sample, and white complex Gaussian
    noise at an SNR uniform in `snr_db`. Signals have unit mean power. The
    `length` samples are cut into `length / token_length` tokens of
    `token_length` complex samples: the sequence an attention model reads.

    Args:
        num_samples: the number of sequences.
        length: complex samples per sequence, a multiple of
            `token_length`.
        token_length: complex samples per token.
        modulations: distinct names from `MODULATIONS`; the label is the
            index.
        samples_per_symbol: positive int.
        snr_db: `(low, high)` in dB, finite, `low <= high`.
        phase_range: `(low, high)` carrier phases in radians, finite,
            `low <= high`.
        max_frequency_offset: cycles per sample, finite, >= 0.
        seed: the random seed, an int >= 0.

    Returns:
        `(x, y)`: `x` float32 `(num_samples, length // token_length,
        2 * token_length)` stacked, `y` int32 `(num_samples,)`.

    Raises:
        ValueError: an argument out of the range above.
    """
    _check_positive(
        num_samples=num_samples,
        length=length,
        token_length=token_length,
        samples_per_symbol=samples_per_symbol,
    )
    if length % token_length:
        raise ValueError(
            "`length` must be a multiple of `token_length`. Received: "
            f"length={length}, token_length={token_length}"
        )
    if isinstance(modulations, str):
        unknown = [modulations]
    else:
        try:
            modulations = tuple(modulations)
        except TypeError:
            modulations = unknown = None
        else:
            unknown = [m for m in modulations if m not in MODULATIONS]
    if unknown or not modulations or len(set(modulations)) < len(modulations):
        raise ValueError(
            f"`modulations` must be a sequence of distinct names from "
            f"{list(MODULATIONS)}. Received: modulations={modulations!r}"
        )
    snr_db = _finite_range(snr_db, "snr_db")
    phase_range = _finite_range(phase_range, "phase_range")
    _non_negative_finite(max_frequency_offset, "max_frequency_offset")
    _non_negative_int(seed, "seed")
    rng = np.random.default_rng(seed)
    symbols_per_sample = -(-length // samples_per_symbol)
    labels = rng.integers(len(modulations), size=num_samples)
    signals = np.zeros((num_samples, length), np.complex128)
    for index, name in enumerate(modulations):
        rows = np.flatnonzero(labels == index)
        if rows.size == 0:
            continue
        shape = (rows.size, symbols_per_sample)
        if name == "gfsk":
            bits = rng.integers(2, size=shape)
            wave = _gfsk(bits, samples_per_symbol)
        else:
            order = {"bpsk": 2, "qpsk": 4, "8psk": 8, "16qam": 16, "64qam": 64}
            symbols = rng.integers(order[name], size=shape)
            if name.endswith("qam"):
                points = _qam(order[name], symbols)
            else:
                points = _psk(
                    order[name], symbols, np.pi / 4 * (name == "qpsk")
                )
            wave = np.repeat(points, samples_per_symbol, axis=-1)
        signals[rows] = wave[:, :length]
    n = np.arange(length)
    phase = rng.uniform(*phase_range, size=(num_samples, 1))
    offset = rng.uniform(-1, 1, size=(num_samples, 1)) * max_frequency_offset
    signals *= np.exp(1j * (2 * np.pi * offset * n + phase))
    snr = 10.0 ** (rng.uniform(*snr_db, size=(num_samples, 1)) / 10.0)
    noise = rng.standard_normal((2, num_samples, length))
    signals += (noise[0] + 1j * noise[1]) / np.sqrt(2 * snr)
    tokens = signals.reshape(num_samples, length // token_length, token_length)
    x = np.concatenate([tokens.real, tokens.imag], axis=-1)
    return x.astype(np.float32), labels.astype(np.int32)
