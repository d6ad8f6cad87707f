"""A SoundFont (SF2) sample player in NumPy, for `datasets.score_music`.

`_SoundFont` reads an SF2 file's presets (bank 0, General MIDI) and plays
them note by note: SF2 zones by key and velocity, root key and tuning,
loops, the volume envelope; no filters, modulators or chorus (the timbre
augmentation of `datasets.score_music` is `_timbre`'s, applied to each
part's audio). Written here so that the `music` extra needs no compiled
synthesiser (see `cvattn_keras.datasets.scores`). 16-bit samples only:
an SF3 file (Ogg Vorbis compressed samples) is refused.
"""

import struct

import numpy as np

# Generator numbers of the SF2 2.04 specification.
_START, _END, _LOOP_START, _LOOP_END = 0, 1, 2, 3
_START_COARSE, _END_COARSE = 4, 12
_LOOP_START_COARSE, _LOOP_END_COARSE = 45, 50
_DELAY, _ATTACK, _HOLD, _DECAY, _SUSTAIN, _RELEASE = 33, 34, 35, 36, 37, 38
_KEY_TO_HOLD, _KEY_TO_DECAY = 39, 40
_INSTRUMENT, _KEY_RANGE, _VEL_RANGE = 41, 43, 44
_ATTENUATION, _COARSE_TUNE, _FINE_TUNE = 48, 51, 52
_SAMPLE_ID, _SAMPLE_MODES, _SCALE_TUNING, _ROOT_KEY = 53, 54, 56, 58
_DEFAULTS = {
    _DELAY: -12000,
    _ATTACK: -12000,
    _HOLD: -12000,
    _DECAY: -12000,
    _RELEASE: -12000,
    _SCALE_TUNING: 100,
    _ROOT_KEY: -1,
}
# Added to the instrument's value when a preset zone sets them (the sample
# addresses, ranges and modes are the instrument's alone).
_ADDITIVE = (
    _DELAY,
    _ATTACK,
    _HOLD,
    _DECAY,
    _SUSTAIN,
    _RELEASE,
    _KEY_TO_HOLD,
    _KEY_TO_DECAY,
    _ATTENUATION,
    _COARSE_TUNE,
    _FINE_TUNE,
)
_MAX_RELEASE = 1.5  # seconds of release tail rendered at most
# sfSampleType's bit for Ogg Vorbis compressed samples (SF3, MuseScore's
# extension of SF2).
_COMPRESSED = 0x10


def _chunks(data, start, stop):
    """`{id: (start, stop)}` of the RIFF chunks in `data[start:stop]`, the
    LIST chunks by their type."""
    found = {}
    while start + 8 <= stop:
        name, size = struct.unpack_from("<4sI", data, start)
        body = start + 8
        if name == b"LIST":
            found[data[body : body + 4]] = (body + 4, body + size)
        else:
            found[name] = (body, body + size)
        start = body + size + (size & 1)
    return found


class _SoundFont:
    """The presets of an SF2 file, played note by note.

    `note(program, key, velocity, seconds, sample_rate, cents)` gives the
    mono float64 waveform of one note: every zone of the General MIDI
    program (bank 0) covering the key and velocity plays its sample,
    resampled (linear interpolation) to the pitch (`scaleTuning`, the
    root key, coarse and fine tuning, the sample's correction, and
    `cents`), looped as the zone says, under the volume envelope (delay,
    attack, hold, decay to sustain, and the release after `seconds`,
    rendered for at most 1.5 s) and the attenuation; velocity scales the
    amplitude by `(velocity / 127) ** 2` (SF2's default velocity curve,
    about). A key no zone covers is played by the nearest zone; a program
    the file has no preset for is played by its preset 0 (or its lowest
    program without one). With `max_samples`, only the first
    `max_samples` samples are rendered (the same samples: a note held
    past a clip's end costs no more than the clip). `attack_scale`,
    `attack_added` (seconds) and `release_scale` change the envelope:
    attack `attack * attack_scale + attack_added`, release `release *
    release_scale` (at most 1.5 s).

    The samples stay 16-bit in memory (a 500 MB SoundFont takes 500 MB,
    not four times that as float64). A file that is not an SF2 raises a
    `ValueError` naming it.
    """

    def __init__(self, path):
        with open(path, "rb") as file:
            data = file.read()
        if data[:4] != b"RIFF" or data[8:12] != b"sfbk":
            raise ValueError(f"{path} is not a SoundFont 2 file")
        try:
            self._parse(data)
        except (KeyError, IndexError, struct.error) as error:
            raise ValueError(
                f"{path} is not a readable SoundFont 2 file "
                f"({type(error).__name__}: {error})"
            ) from None
        compressed = [h for h in self.headers[:-1] if h[9] & _COMPRESSED]
        if compressed:
            raise ValueError(
                f"{path} has compressed samples ({len(compressed)}: an SF3 "
                "file); only SF2's 16-bit samples can be played"
            )
        if not self.presets:
            raise ValueError(f"{path} has no preset in bank 0 (General MIDI)")
        self.fallback = 0 if 0 in self.presets else min(self.presets)

    def _parse(self, data):
        top = _chunks(data, 12, len(data))
        sdta = _chunks(data, *top[b"sdta"])
        pdta = _chunks(data, *top[b"pdta"])
        start, stop = sdta[b"smpl"]
        # int16, a view of the file's bytes; scaled by 1 / 32768 as read.
        self.samples = np.frombuffer(data, "<i2", (stop - start) // 2, start)

        def records(name, fmt):
            start, stop = pdta[name]
            size = struct.calcsize(fmt)
            return [
                struct.unpack_from(fmt, data, offset)
                for offset in range(start, stop, size)
            ]

        phdr = records(b"phdr", "<20sHHHIII")
        pbag = records(b"pbag", "<HH")
        pgen = records(b"pgen", "<Hh")
        inst = records(b"inst", "<20sH")
        ibag = records(b"ibag", "<HH")
        igen = records(b"igen", "<Hh")
        self.headers = records(b"shdr", "<20sIIIIIBbHH")

        def zones(bags, gens, first, last, terminal):
            """The generator dicts of bags `first:last`, each with the
            global zone's defaults."""
            out, shared = [], {}
            for index in range(first, last):
                zone = {}
                for oper, amount in gens[bags[index][0] : bags[index + 1][0]]:
                    if oper in (_KEY_RANGE, _VEL_RANGE):
                        amount &= 0xFFFF
                        amount = (amount & 0xFF, amount >> 8)
                    zone[oper] = amount
                if terminal in zone:
                    out.append({**shared, **zone})
                elif index == first:
                    shared = zone
            return out

        self.instruments = [
            zones(ibag, igen, inst[i][1], inst[i + 1][1], _SAMPLE_ID)
            for i in range(len(inst) - 1)
        ]
        self.presets = {}
        for i, header in enumerate(phdr[:-1]):
            if header[2] == 0:  # bank 0: General MIDI
                self.presets[header[1]] = zones(
                    pbag, pgen, header[3], phdr[i + 1][3], _INSTRUMENT
                )

    def _zones(self, program, key, velocity):
        """`[(instrument generators, preset generators)]` playing `key`."""
        found, near = [], []
        for preset in self.presets.get(program) or self.presets[self.fallback]:
            for zone in self.instruments[preset[_INSTRUMENT]]:
                keys = zone.get(_KEY_RANGE, (0, 127))
                keys = (
                    max(keys[0], preset.get(_KEY_RANGE, (0, 127))[0]),
                    min(keys[1], preset.get(_KEY_RANGE, (0, 127))[1]),
                )
                vels = zone.get(_VEL_RANGE, (0, 127))
                if not vels[0] <= velocity <= vels[1]:
                    continue
                if keys[0] <= key <= keys[1]:
                    found.append((zone, preset))
                distance = max(keys[0] - key, key - keys[1])
                near.append((distance, len(near), (zone, preset)))
        if found or not near:
            return found
        best = min(near)[0]
        return [pair for d, _, pair in near if d == best]

    def note(
        self,
        program,
        key,
        velocity,
        seconds,
        sample_rate,
        cents=0.0,
        max_samples=None,
        attack_scale=1.0,
        attack_added=0.0,
        release_scale=1.0,
    ):
        envelope = (attack_scale, attack_added, release_scale)
        parts = []
        for zone, preset in self._zones(program, key, velocity):

            def gen(oper, zone=zone, preset=preset):
                value = zone.get(oper, _DEFAULTS.get(oper, 0))
                if oper in _ADDITIVE:
                    value += preset.get(oper, 0)
                return value

            parts.append(
                self._play(
                    gen,
                    key,
                    velocity,
                    seconds,
                    sample_rate,
                    cents,
                    max_samples,
                    envelope,
                )
            )
        if not parts:
            return np.zeros(0)
        length = max(p.size for p in parts)
        out = np.zeros(length)
        for p in parts:
            out[: p.size] += p
        return out

    def _play(
        self,
        gen,
        key,
        velocity,
        seconds,
        sample_rate,
        cents,
        max_samples,
        envelope=(1.0, 0.0, 1.0),
    ):
        name, start, end, loop_start, loop_end, rate, root, correction = (
            self.headers[gen(_SAMPLE_ID)][:8]
        )
        start += gen(_START) + 32768 * gen(_START_COARSE)
        end += gen(_END) + 32768 * gen(_END_COARSE)
        loop_start += gen(_LOOP_START) + 32768 * gen(_LOOP_START_COARSE)
        loop_end += gen(_LOOP_END) + 32768 * gen(_LOOP_END_COARSE)
        if gen(_ROOT_KEY) >= 0:
            root = gen(_ROOT_KEY)
        elif root > 127:
            root = 60
        pitch = (
            gen(_SCALE_TUNING) * (key - root)
            + 100 * gen(_COARSE_TUNE)
            + gen(_FINE_TUNE)
            + correction
            + cents
        )
        step = 2.0 ** (pitch / 1200.0) * rate / sample_rate

        def timecents(oper, key_scale=None):
            value = gen(oper)
            if key_scale is not None:
                value += gen(key_scale) * (60 - key)
            return 2.0 ** (max(value, -12000) / 1200.0)

        attack_scale, attack_added, release_scale = envelope
        delay = timecents(_DELAY)
        attack = timecents(_ATTACK) * attack_scale + attack_added
        hold = timecents(_HOLD, _KEY_TO_HOLD)
        decay = timecents(_DECAY, _KEY_TO_DECAY)
        release = min(timecents(_RELEASE) * release_scale, _MAX_RELEASE)
        sustain_db = min(max(gen(_SUSTAIN), 0), 1440) / 10.0
        held = max(seconds, 0.0)
        total = (held + release) * sample_rate
        # The first `max_samples` only: each sample depends on its time
        # and the note's, not on how many follow.
        if max_samples is not None:
            total = min(total, max_samples)
        total = int(np.ceil(total))
        t = np.arange(total) / sample_rate
        # Attenuation in dB over time: attack as a linear amplitude ramp,
        # hold, then the decay at 100 dB per `decay` seconds down to the
        # sustain level, and the release at 100 dB per `release` seconds
        # from the level reached at note off.
        after = np.maximum(t - delay - attack - hold, 0.0)
        db = np.minimum(after * 100.0 / decay, sustain_db)
        level_off = min(
            max(held - delay - attack - hold, 0.0) * 100.0 / decay, sustain_db
        )
        off = t >= held
        db[off] = level_off + (t[off] - held) * 100.0 / release
        gain = 10.0 ** (-db / 20.0)
        ramp = np.clip((t - delay) / max(attack, 1e-6), 0.0, 1.0)
        gain *= ramp
        gain *= 10.0 ** (-min(max(gen(_ATTENUATION), 0), 1440) / 200.0)
        gain *= (velocity / 127.0) ** 2
        # The sample, read at `step` per output sample.
        position = np.arange(total) * step
        mode = gen(_SAMPLE_MODES) & 3
        loop = loop_end - loop_start
        if mode in (1, 3) and loop > 1 and start <= loop_start < loop_end:
            first = loop_start - start
            wrap = position >= loop_end - start
            position[wrap] = first + (position[wrap] - first) % loop
            limit = loop_end - start
        else:
            limit = end - start - 1
            gain[position >= limit] = 0.0
            position = np.minimum(position, limit)
        index = np.floor(position).astype(np.int64)
        fraction = position - index
        here = self.samples[start + np.minimum(index, limit)] / 32768.0
        ahead = self.samples[start + np.minimum(index + 1, limit)] / 32768.0
        return (here + fraction * (ahead - here)) * gain
