"""Transcribe a WAV file with an exported waveform model, on LiteRT.

Reads `AUDIO.wav` (PCM, 8/16/24/32-bit, any channels: mixed to mono) with
the standard library's `wave`, resamples it to the model's rate if needed
(band-limited, by FFT), cuts it into the windows the file takes, runs the
`.tflite` file from `examples/train_music.py` (any quantization mode) on
the LiteRT interpreter, and decodes the frames' note probabilities into
notes. It writes, next to each other in `--output`:

- `AUDIO.notes.csv`: one note per row, `onset_seconds, offset_seconds,
  midi_pitch, peak_probability` (what `mir_eval.transcription` reads);
- `AUDIO.mid`: the same notes as a standard MIDI file (format 0, 120 bpm,
  velocity from the peak probability);
- `AUDIO.png`: the piano roll of the probabilities with the notes drawn.

The decoding: a note is a run of at least `--min-frames` consecutive
frames whose probability exceeds `--threshold`, from the start of its
first frame to the end of its last (frame `t` spans `frame_step` samples
around its centre).

What the file takes (sample rate, samples per window, hop, lowest note)
comes from the JSON that `train_music.py` writes beside it
(`music_classifier.json`; `--description` names another).

Run:  python examples/train_music.py            # writes the model files
      python examples/transcribe.py AUDIO.wav \\
          --model examples/output/music_classifier.tflite
"""

import argparse
import json
import os
import struct
import time
import wave

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Quiets TensorFlow's C++ start-up lines when cvattn_keras imports it
# (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

import numpy as np  # noqa: E402

import cvattn_keras as cvk  # noqa: E402

# ----------------------------------------------------------------------
# Audio in.
# ----------------------------------------------------------------------


def read_wav(path):
    """`(samples, sample_rate)`: float32 mono in [-1, 1] from a PCM WAV."""
    try:
        with wave.open(path, "rb") as f:
            channels, width = f.getnchannels(), f.getsampwidth()
            rate, data = f.getframerate(), f.readframes(f.getnframes())
    except (wave.Error, EOFError) as error:
        raise ValueError(
            f"{path!r} is not a PCM WAV file that Python's `wave` reads "
            f"({error}); convert it, e.g. `ffmpeg -i IN -c:a pcm_s16le "
            "OUT.wav`."
        ) from None
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
    return x.reshape(-1, channels).mean(axis=1), rate


def resample(x, rate, target):
    """`x` at `target` Hz: its spectrum cut (or zero-extended) at the lower
    Nyquist frequency, one FFT of the whole signal."""
    if rate == target:
        return x
    length = int(round(len(x) * target / rate))
    spectrum = np.fft.rfft(x.astype(np.float64))
    bins = length // 2 + 1
    kept = np.zeros(bins, complex)
    kept[: min(bins, len(spectrum))] = spectrum[:bins]
    return (np.fft.irfft(kept, length) * length / len(x)).astype(np.float32)


def windows(x, samples, frames, frame_step):
    """`x` cut into `(windows, samples)`: window `k` starts at sample `k *
    frames * frame_step`, so its frames follow the previous window's
    (zeros after the end)."""
    stride = frames * frame_step
    count = max(1, -(-len(x) // stride))
    padded = np.zeros((count - 1) * stride + samples, np.float32)
    padded[: len(x)] = x
    return np.stack([padded[k * stride :][:samples] for k in range(count)])


# ----------------------------------------------------------------------
# The file on LiteRT.
# ----------------------------------------------------------------------


def run_file(path, batch, threads=1):
    """The file's float outputs for the float `batch`: the input quantized
    and the output dequantized when the file is integer-only."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(
        model_path=path, num_threads=threads
    ).get_signature_runner()
    ((name, detail),) = runner.get_input_details().items()
    ((out_name, out_detail),) = runner.get_output_details().items()
    static = detail["shape_signature"][0]
    step = static if static > 0 else len(batch)
    results = []
    for start in range(0, len(batch), step):
        chunk = batch[start : start + step]
        if len(chunk) < step:  # a static batch: pad, drop the padding
            chunk = np.concatenate(
                [chunk, np.zeros((step - len(chunk),) + chunk.shape[1:])]
            )
        chunk = _quantize(chunk, detail)
        out = runner(**{name: chunk})[out_name]
        results.append(_dequantize(out, out_detail)[: len(batch) - start])
    return np.concatenate(results)


def _scale(detail):
    scales = detail["quantization_parameters"]["scales"]
    zeros = detail["quantization_parameters"]["zero_points"]
    return (float(scales[0]), int(zeros[0])) if len(scales) else None


def _quantize(x, detail):
    dtype = np.dtype(detail["dtype"])
    if not np.issubdtype(dtype, np.integer) or _scale(detail) is None:
        return x.astype(dtype)
    scale, zero = _scale(detail)
    info = np.iinfo(dtype)
    q = np.round(x / scale) + zero
    return np.clip(q, info.min, info.max).astype(dtype)


def _dequantize(y, detail):
    if not np.issubdtype(y.dtype, np.integer) or _scale(detail) is None:
        return y.astype(np.float32)
    scale, zero = _scale(detail)
    return (scale * (y.astype(np.float64) - zero)).astype(np.float32)


# ----------------------------------------------------------------------
# Frames to notes, notes out.
# ----------------------------------------------------------------------


def decode(probabilities, threshold, min_frames, spec):
    """Notes `(onset_s, offset_s, midi_pitch, peak_probability)` from
    frame probabilities `(frames, notes)`: `cvattn_keras.metrics.
    frames_to_notes` (runs of at least `min_frames` frames above
    `threshold`, each from its first frame's start to its last frame's
    end) with each note's highest probability."""
    rate, step = spec["sample_rate"], spec["frame_step"]
    start = (spec["first_centre"] - step / 2) / rate  # frame 0's start
    notes = []
    for onset, offset, pitch in cvk.metrics.frames_to_notes(
        probabilities,
        rate / step,
        threshold,
        min_frames,
        spec["lowest_note"],
        start,
    ):
        first = round((onset - start) * rate / step)
        last = round((offset - start) * rate / step)
        note = probabilities[first:last, pitch - spec["lowest_note"]]
        notes.append((max(0.0, onset), offset, pitch, float(note.max())))
    return notes


def write_csv(path, notes):
    with open(path, "w") as f:
        f.write("onset_seconds,offset_seconds,midi_pitch,peak_probability\n")
        for onset, offset, pitch, peak in notes:
            f.write(f"{onset:.4f},{offset:.4f},{pitch},{peak:.3f}\n")


def _variable_length(value):
    """MIDI's variable-length quantity: 7 bits per byte, high bit on all
    but the last."""
    out = [value & 0x7F]
    value >>= 7
    while value:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(reversed(out))


def write_midi(path, notes, ticks_per_quarter=480):
    """A format-0 standard MIDI file at 120 bpm (`ticks_per_quarter` * 2
    ticks per second) on channel 1."""
    per_second = 2 * ticks_per_quarter
    events = []  # (tick, order: note-offs first, bytes)
    for onset, offset, pitch, peak in notes:
        velocity = int(np.clip(round(127 * peak), 1, 127))
        on, off = round(onset * per_second), round(offset * per_second)
        events.append((on, 1, bytes([0x90, pitch, velocity])))
        events.append((max(off, on + 1), 0, bytes([0x80, pitch, 0])))
    track = bytearray(b"\x00\xff\x51\x03\x07\xa1\x20")  # 500,000 us/quarter
    tick = 0
    for when, _, message in sorted(events):
        track += _variable_length(when - tick) + message
        tick = when
    track += b"\x00\xff\x2f\x00"  # end of track
    with open(path, "wb") as f:
        f.write(b"MThd" + struct.pack(">IHHH", 6, 0, 1, ticks_per_quarter))
        f.write(b"MTrk" + struct.pack(">I", len(track)) + track)


def save_roll(path, probabilities, notes, spec, title):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    rate, step = spec["sample_rate"], spec["frame_step"]
    first = spec["first_centre"] - step / 2
    seconds = (first + len(probabilities) * step) / rate
    low = spec["lowest_note"]
    figure, axes = plt.subplots(figsize=(12, 4))
    image = axes.imshow(
        probabilities.T,
        aspect="auto",
        origin="lower",
        cmap="Greys",
        vmin=0,
        vmax=1,
        extent=(first / rate, seconds, low - 0.5, low + spec["notes"] - 0.5),
    )
    for onset, offset, pitch, _ in notes:
        axes.add_patch(
            matplotlib.patches.Rectangle(
                (onset, pitch - 0.4),
                offset - onset,
                0.8,
                fill=False,
                edgecolor="tab:red",
                linewidth=1,
            )
        )
    axes.set(title=title, xlabel="seconds", ylabel="MIDI note")
    figure.colorbar(image, ax=axes, label="probability")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)


# ----------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audio", help="a PCM WAV file")
    parser.add_argument("--model", required=True, help="the .tflite file")
    parser.add_argument(
        "--description",
        default=None,
        help="what the file takes (default: MODEL's .json beside it)",
    )
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--min-frames", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", default=None, help="default: AUDIO's")
    args = parser.parse_args(argv)
    if not 0 < args.threshold < 1:
        parser.error(
            f"--threshold must be in (0, 1). Received: {args.threshold}"
        )
    if args.min_frames < 1:
        parser.error(f"--min-frames must be >= 1. Received: {args.min_frames}")
    if args.description is None:
        args.description = os.path.splitext(args.model)[0] + ".json"
    if not os.path.exists(args.description):
        parser.error(
            f"{args.description!r} (what the file takes) does not exist: "
            "train_music.py --input waveform writes it beside the model; "
            "pass --description."
        )
    return args


def main(argv=None):
    args = parse_args(argv)
    with open(args.description) as f:
        spec = json.load(f)
    if spec.get("input") != "waveform":
        raise SystemExit(
            f"{args.model!r} takes {spec.get('input')!r}, not a waveform: "
            "train with examples/train_music.py --input waveform."
        )
    x, rate = read_wav(args.audio)
    x = resample(x, rate, spec["sample_rate"])
    batch = windows(x, spec["samples"], spec["frames"], spec["frame_step"])
    start = time.perf_counter()
    logits = run_file(args.model, batch, args.threads)
    seconds = time.perf_counter() - start
    frames = -(-len(x) // spec["frame_step"])  # those that hear the audio
    logits = logits.reshape(-1, spec["notes"])[:frames]
    probabilities = 1 / (1 + np.exp(-logits.astype(np.float64)))
    notes = decode(probabilities, args.threshold, args.min_frames, spec)

    duration = len(x) / spec["sample_rate"]
    output = args.output or os.path.dirname(os.path.abspath(args.audio))
    os.makedirs(output, exist_ok=True)
    stem = os.path.join(
        output, os.path.splitext(os.path.basename(args.audio))[0]
    )
    write_csv(stem + ".notes.csv", notes)
    write_midi(stem + ".mid", notes)
    save_roll(
        stem + ".png",
        probabilities,
        notes,
        spec,
        f"{os.path.basename(args.audio)}: {len(notes)} notes "
        f"(threshold {args.threshold})",
    )
    print(
        f"{args.audio}: {duration:.2f} s at {rate} Hz"
        + (
            f" (resampled to {spec['sample_rate']} Hz)"
            if rate != spec["sample_rate"]
            else ""
        )
        + f", {len(batch)} window(s) of {spec['samples']} samples, "
        f"{len(probabilities)} frames\n"
        f"LiteRT, {args.threads} thread(s): {seconds * 1000:.1f} ms, "
        f"real-time factor {seconds / duration:.4f}\n"
        f"{len(notes)} notes -> {stem}.notes.csv, {stem}.mid, {stem}.png"
    )
    for onset, offset, pitch, peak in notes[:5]:
        print(f"  {onset:7.3f} - {offset:7.3f} s  MIDI {pitch}  p={peak:.2f}")
    if len(notes) > 5:
        print(f"  ... ({len(notes) - 5} more)")
    return notes


if __name__ == "__main__":
    main()
