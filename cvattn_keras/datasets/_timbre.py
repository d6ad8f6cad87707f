"""The timbre of `datasets.score_music`: which instrument plays a part,
and the augmentation of its sound (see `score_music`'s docstring).

Every draw comes from its own stream, seeded by the work (`_streams`), so
that the notes, their timing and their loudness (the main stream of
`scores._render`) do not depend on the programs, the SoundFonts or the
augmentation: the same works rendered with other instruments have the
same labels, and the room and effects drawn for them are the same too.

- `_choose_programs`: a General MIDI program per part, drawn among those
  whose range holds the part's pitches.
- `_part_effects` and `_apply_part`: per part, an equaliser (a tilt in
  dB per octave, a bell, a low-pass and a high-pass), vibrato, tremolo
  and a chorus (a detuned, delayed double), and the envelope's attack
  and release scaled (`_SoundFont.note`'s arguments).
- `_room`: a room (RT60 and wet gain wider with the strength).
- `_clip_effects` and `_equalise`: per clip, a microphone's equaliser
  (tilt, bell, low-pass, high-pass) on the mix.
- The checks of `score_music`'s `programs`, `timbre_augmentation` and
  `soundfonts`, and the SoundFonts' loading and hashing.

The strength, from 0 to 1, scales every drawn effect; 0 leaves the sound
as the SoundFont plays it, in a room as before (RT60 0.2-0.8 s). The
random numbers drawn do not depend on the strength: a stronger setting
scales the same effects, it does not draw others.
"""

import hashlib
import os

import numpy as np

from cvattn_keras import _validation as check
from cvattn_keras.datasets._soundfont import _SoundFont

# The sub-streams of a work's seed: programs, SoundFonts, room, parts,
# clips (the main stream, the notes', is `[seed, work]` itself).
_PROGRAMS, _SOUNDFONTS, _ROOM, _PARTS, _CLIPS = 1, 2, 3, 4, 5
# Zero-padding of a filtered signal, in seconds: longer than the smooth
# filters' responses, so that the FFT's circular convolution does not
# wrap one end onto the other.
_PAD_SECONDS = 0.25


def _streams(seed, work_identity):
    """`{name: Generator}` of a work's timbre draws."""
    base = [int(seed), int(work_identity) % 2**64]
    return {
        name: np.random.default_rng(base + [index])
        for name, index in (
            ("programs", _PROGRAMS),
            ("soundfonts", _SOUNDFONTS),
            ("room", _ROOM),
            ("parts", _PARTS),
            ("clips", _CLIPS),
        )
    }


def _fits(program, low, high, ranges):
    bottom, top = ranges.get(program, (0, 127))
    return bottom <= low and high <= top


def _choose_programs(rng, notes, programs, ranges):
    """A program of `programs` (sorted) for each part of `notes` (rows
    `(onset, offset, pitch, part)`): drawn uniformly among those whose
    range (`ranges[program]`, MIDI `(low, high)`; a program without one
    plays anything) holds the part's 10th to 90th percentile of pitch;
    if none does, among those holding its median; if none, among all.
    One draw per part."""
    part = notes[:, 3].astype(np.int64)
    chosen = []
    for index in range(int(part.max()) + 1):
        pitches = notes[part == index, 2]
        fit = list(programs)
        if pitches.size:
            low, middle, high = np.percentile(pitches, [10, 50, 90])
            fit = [p for p in programs if _fits(p, low, high, ranges)] or [
                p for p in programs if _fits(p, middle, middle, ranges)
            ]
            fit = fit or list(programs)
        chosen.append(fit[int(rng.integers(len(fit)))])
    return np.asarray(chosen, np.int64)


def _room(rng, sample_rate, strength):
    """A room: an exponentially decaying noise burst (RT60 0.2-0.8 s at
    strength 0, 0.1-2 s at 1), mixed in at a drawn wet gain (0.1-0.35 at
    strength 0, 0.05-0.6 at 1), by FFT convolution."""
    u = rng.uniform(size=2)
    rt60 = (0.2 - 0.1 * strength) + u[0] * (0.6 + 1.3 * strength)
    wet = (0.1 - 0.05 * strength) + u[1] * (0.25 + 0.3 * strength)
    t = np.arange(int(rt60 * sample_rate)) / sample_rate
    response = rng.standard_normal(t.size) * np.exp(-6.9 * t / rt60)
    response *= wet / np.sqrt(np.sum(response**2))
    response[0] += 1.0  # the direct sound
    return response


def _equaliser(u, strength, tilt, bell, lowest, highest):
    """An equaliser's settings from 6 uniforms `u`: a tilt of up to
    `+-tilt` dB per octave about 1 kHz, a bell of up to `+-bell` dB at
    200 Hz to 4 kHz (0.5 to 1.5 octaves wide), a low-pass from 10 kHz
    down to `lowest` Hz and a high-pass from 20 Hz up to `highest` Hz
    (second order, log-uniform), all scaled by `strength`."""
    return dict(
        tilt=strength * tilt * (2 * u[0] - 1),
        bell_hz=200.0 * 20.0 ** u[1],
        bell_db=strength * bell * (2 * u[2] - 1),
        bell_octaves=0.5 + u[3],
        lowpass_hz=10000.0 * (lowest / 10000.0) ** (strength * u[4]),
        highpass_hz=20.0 * (highest / 20.0) ** (strength * u[5]),
    )


def _part_effects(rng, parts, strength):
    """Per part, the drawn effects (a dict each; 21 uniforms a part
    whatever the strength)."""
    effects = []
    for _ in range(parts):
        u = rng.uniform(size=21)
        effects.append(
            dict(
                equaliser=_equaliser(u[:6], strength, 3.0, 9.0, 1000.0, 120.0),
                vibrato_cents=strength * 20.0 * u[6],
                vibrato_hz=4.0 + 3.0 * u[7],
                vibrato_phase=2 * np.pi * u[8],
                tremolo=strength * 0.25 * u[9],
                tremolo_hz=3.0 + 5.0 * u[10],
                tremolo_phase=2 * np.pi * u[11],
                chorus=strength * 0.5 * u[12],
                chorus_seconds=0.008 + 0.012 * u[13],
                chorus_hz=0.1 + 0.5 * u[14],
                chorus_cents=3.0 + 7.0 * u[15],
                chorus_phase=2 * np.pi * u[16],
                attack_scale=2.0 ** (strength * (3.0 * u[17] - 1.0)),
                attack_added=strength * 0.04 * u[18],
                release_scale=2.0 ** (strength * (2.5 * u[19] - 1.0)),
                # (u[20]: spare, so that an effect added later keeps the
                # draws of the others.)
            )
        )
    return effects


def _clip_effects(rng, clips, strength):
    """Per clip, a microphone's equaliser (6 uniforms a clip)."""
    return [
        _equaliser(rng.uniform(size=6), strength, 2.0, 6.0, 2000.0, 200.0)
        for _ in range(clips)
    ]


def _fast_length(n):
    """The smallest 2^a 3^b 5^c >= n (a fast FFT length)."""
    best = 1 << max(int(n - 1).bit_length(), 0)
    three = 1
    while three < best:
        five = three
        while five < best:
            size = five
            while size < n:
                size *= 2
            best = min(best, size)
            five *= 5
        three *= 3
    return best


def _equaliser_gain(
    freqs, tilt, bell_hz, bell_db, bell_octaves, lowpass_hz, highpass_hz
):
    """The equaliser's (real, zero-phase) amplitude gain at `freqs` Hz."""
    octaves = np.log2(np.maximum(freqs, 50.0) / 1000.0)
    db = np.clip(tilt * octaves, -12.0, 12.0)
    width = bell_octaves / 2.0
    bell = np.log2(np.maximum(freqs, 1.0) / bell_hz) / width
    db = db + bell_db * np.exp(-0.5 * bell**2)
    gain = 10.0 ** (db / 20.0)
    gain = gain / np.sqrt(1.0 + (freqs / lowpass_hz) ** 4)
    ratio = (freqs / highpass_hz) ** 2
    return gain * ratio / np.sqrt(1.0 + ratio**2)


def _equalise(x, sample_rate, settings):
    """`x` through the equaliser `settings` (`_equaliser`'s dict), by FFT,
    zero-padded."""
    n = _fast_length(x.size + int(_PAD_SECONDS * sample_rate))
    gain = _equaliser_gain(np.fft.rfftfreq(n, 1.0 / sample_rate), **settings)
    return np.fft.irfft(np.fft.rfft(x, n) * gain, n)[: x.size]


def _delayed(x, delay):
    """`x(t - delay(t))`, `delay` in samples (>= 0) per output sample, by
    linear interpolation; zero before the start."""
    position = np.arange(x.size) - delay
    index = np.floor(position).astype(np.int64)
    fraction = position - index
    # padded[k + 1] is x[k], padded[0] the silence before the start.
    padded = np.concatenate([[0.0], x])
    here = padded[np.clip(index + 1, 0, x.size)]
    ahead = padded[np.clip(index + 2, 0, x.size)]
    return here + fraction * (ahead - here)


def _modulated_delay(size, sample_rate, base_seconds, cents, hz, phase):
    """A delay in samples, `base + D (1 + sin(2 pi hz t + phase))`, whose
    rate of change bends the pitch by up to `+-cents` (`D = (2^(cents /
    1200) - 1) / (2 pi hz)` seconds)."""
    t = np.arange(size) / sample_rate
    depth = (2.0 ** (cents / 1200.0) - 1.0) / (2 * np.pi * hz)
    return sample_rate * (
        base_seconds + depth * (1.0 + np.sin(2 * np.pi * hz * t + phase))
    )


def _apply_part(x, sample_rate, effects):
    """One part's audio with its effects (`_part_effects`'s dict): vibrato,
    tremolo, the equaliser, then the chorus. The envelope's are applied by
    the player."""
    if effects["vibrato_cents"] > 0:
        x = _delayed(
            x,
            _modulated_delay(
                x.size,
                sample_rate,
                0.0,
                effects["vibrato_cents"],
                effects["vibrato_hz"],
                effects["vibrato_phase"],
            ),
        )
    if effects["tremolo"] > 0:
        t = np.arange(x.size) / sample_rate
        x = x * (
            1.0
            + effects["tremolo"]
            * np.sin(
                2 * np.pi * effects["tremolo_hz"] * t + effects["tremolo_phase"]
            )
        )
    x = _equalise(x, sample_rate, effects["equaliser"])
    if effects["chorus"] > 0:
        x = x + effects["chorus"] * _delayed(
            x,
            _modulated_delay(
                x.size,
                sample_rate,
                effects["chorus_seconds"],
                effects["chorus_cents"],
                effects["chorus_hz"],
                effects["chorus_phase"],
            ),
        )
    return x


# ----------------------------------------------------------------------
# The arguments.
# ----------------------------------------------------------------------


def _check_programs(programs, default):
    """`programs` as a sorted list of distinct ints 0-127 (None: those of
    `default`)."""
    if programs is None:
        return sorted(default)
    message = (
        "`programs` must be a non-empty sequence of distinct General MIDI "
        "program numbers, ints from 0 to 127 (`datasets.scores.PROGRAMS` "
        f"names the default ones). Received: programs={programs!r}"
    )
    if isinstance(programs, (str, bytes)) or check._is_int(programs):
        raise ValueError(message)
    try:
        values = list(programs)
    except TypeError:
        raise ValueError(message) from None
    if (
        not values
        or not all(check._is_int(v) and 0 <= v <= 127 for v in values)
        or len(set(int(v) for v in values)) != len(values)
    ):
        raise ValueError(message)
    return sorted(int(v) for v in values)


def _check_strength(timbre_augmentation):
    """The augmentation's strength, a float in [0, 1] (True: 1, False: 0)."""
    if isinstance(timbre_augmentation, bool):
        return float(timbre_augmentation)
    if not check._is_real(timbre_augmentation) or not (
        0 <= timbre_augmentation <= 1
    ):
        raise ValueError(
            "`timbre_augmentation` must be a number from 0 (none) to 1 (the "
            "full augmentation), or a bool (True: 1, False: 0). Received: "
            f"timbre_augmentation={timbre_augmentation!r}"
        )
    return float(timbre_augmentation)


def _check_soundfonts(soundfonts):
    """`soundfonts` (not None) as a list of paths of SF2 files, each
    checked to exist and to start as an SF2 file does."""
    if isinstance(soundfonts, (str, os.PathLike)):
        soundfonts = [soundfonts]
    try:
        paths = [os.fspath(path) for path in soundfonts]
    except TypeError:
        paths = None
    if not paths or any(isinstance(path, bytes) for path in paths):
        raise ValueError(
            "`soundfonts` must be None, the path of an SF2 file or a "
            "non-empty sequence of them. Received: "
            f"soundfonts={soundfonts!r}"
        )
    seen = set()
    for path in paths:
        if not os.path.isfile(path):
            raise ValueError(
                f"`soundfonts`: no such file: {path}. Received: "
                f"soundfonts={soundfonts!r}"
            )
        with open(path, "rb") as file:
            head = file.read(12)
        if head[:4] != b"RIFF" or head[8:12] != b"sfbk":
            raise ValueError(
                f"`soundfonts`: {path} is not a SoundFont 2 (.sf2) file (no "
                "RIFF 'sfbk' header). Received: "
                f"soundfonts={soundfonts!r}"
            )
        real = os.path.realpath(path)
        if real in seen:
            raise ValueError(
                f"`soundfonts` names {path} twice. Received: "
                f"soundfonts={soundfonts!r}"
            )
        seen.add(real)
    return paths


def _load_soundfonts(paths):
    """The `_SoundFont` of each path; a file that cannot be read as one is
    a `ValueError` naming `soundfonts`."""
    loaded = []
    for path in paths:
        try:
            loaded.append(_SoundFont(path))
        except ValueError as error:
            raise ValueError(
                f"`soundfonts`: {error}. Received: soundfonts={paths!r}"
            ) from None
    return loaded


_HASHES = {}


def _file_sha256(path):
    """The sha256 of a file, read in chunks (SoundFonts reach 500 MB),
    remembered for this process by path, size and modification time."""
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 22), b""):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]
