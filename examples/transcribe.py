"""Transcribe a WAV file with an exported waveform model, on LiteRT.

Reads `AUDIO.wav` (PCM, 8/16/24/32-bit, any channels: mixed to mono) with
the standard library's `wave`, resamples it to the model's rate if needed
(python-soxr, in the `music` extra), cuts it into the windows the file
takes, runs the
`.tflite` file from `examples/train_music.py` (any quantization mode) on
the LiteRT interpreter, and decodes the frames' note probabilities into
notes. It writes, next to each other in `--output`:

- `AUDIO.notes.csv`: one note per row, `onset_seconds, offset_seconds,
  midi_pitch, peak_probability` (what `mir_eval.transcription` reads);
- `AUDIO.mid`: the same notes as a standard MIDI file, written by
  pretty_midi (in the `music` extra; 120 bpm, piano, velocity from the
  peak probability);
- `AUDIO.png`: the piano roll of the probabilities with the notes drawn
  (matplotlib, in the `examples` extra).

Each file is written beside its final name and renamed into place once
all three are written: a run that fails leaves no file behind. A file
that cannot be transcribed (missing, not a PCM WAV, shorter than one
frame) and an `--output` that cannot be a folder end the run with one
line on stderr naming the file and the problem, and exit status 2.

The decoding: a note is a run of at least `--min-frames` consecutive
frames whose probability exceeds `--threshold`, from the start of its
first frame to the end of its last (frame `t` spans `frame_step` samples
around its centre).

What the file takes (sample rate, samples per window, hop, lowest note)
comes from the JSON that `train_music.py` writes beside it
(`music_classifier.json`; `--description` names another).

`--stream` runs the streaming file of `train_music.py --streaming W`
(`music_classifier_stream.tflite`, described by
`music_classifier_stream.json`) exactly as a microphone would feed it:
the WAV file is read in blocks of `--block` samples (default: one hop's
worth at the file's rate), resampled block by block
(`soxr.ResampleStream`), cut into hops of the file's chunk size, and each
hop goes through `cvattn_keras.export.TFLiteStream.step` with the state
carried. After the last sample the stream is fed silence until every
frame that hears the file is out (what a microphone would go on
sending). Step `k` gives frame `k - warmup_steps` (the steps before
are discarded); frame `f` covers the samples `[f * hop, f * hop +
fft_length)`. Each note is printed as it is decided: its onset when its
probability first exceeds `--threshold` for `--min-frames` frames, its
offset at the first frame below, each with its latency:

- algorithmic: from the first sample of the frame the event is in (the
  note's first frame, or the first frame below the threshold) to the last
  sample of the hop whose step decided it, `(fft_length + (decided -
  event frame) * hop) / rate` when the hop divides `fft_length` (in
  general `(warmup_steps + 1 + decided - event frame) * hop / rate`): the
  wait that the frame's span, the warm-up and `--min-frames` cost, with
  instant compute;
- input: how much later than that last sample the hop was complete
  (`--block` and the resampler's filter delay; 0 at the model's rate with
  blocks of one hop);
- compute: the measured time of the step that decided it (and, at the
  end, the median and worst per hop and the real-time factor).

The notes written (CSV, MIDI, roll) are those printed, decoded as the
offline mode decodes its frames.

Live microphone input is not offered (the `sounddevice` package would
serve it, but needs the PortAudio system library on Linux); feeding its
blocks to `stream_notes` is the same loop.

Run:  python examples/train_music.py            # writes the model files
      python examples/transcribe.py AUDIO.wav \\
          --model examples/output/music_classifier.tflite
      python examples/train_music.py --streaming 16 --frame-step 128
      python examples/transcribe.py AUDIO.wav --stream \\
          --model examples/output/music_classifier_stream.tflite
"""

import argparse
import json
import os
import sys
import time
import wave

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Quiets TensorFlow's C++ start-up lines when cvattn_keras imports it
# (see cvattn_keras/_startup.py).
os.environ.setdefault("CVATTN_KERAS_QUIET_STARTUP", "1")

import numpy as np  # noqa: E402

import cvattn_keras as cvk  # noqa: E402

# The examples' shared argument checks and WAV samples, beside this file
# (on sys.path when run as a script; added when loaded with runpy, as the
# tests do).
if os.path.dirname(os.path.abspath(__file__)) not in sys.path:
    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
import _arguments as arguments  # noqa: E402
import _wav  # noqa: E402


class Refused(Exception):
    """What cannot be transcribed: `main` prints it as one line on stderr
    and exits with status 2."""


def _extra(module, extra, purpose):
    """`module` imported, or `Refused` naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise Refused(
            f"{purpose} needs {module}, in the {extra!r} extra: "
            f"pip install 'cvattn_keras[{extra}]'"
        ) from None


# ----------------------------------------------------------------------
# Audio in.
# ----------------------------------------------------------------------


def read_wav(path):
    """`(samples, sample_rate)`: float32 mono in [-1, 1] from a PCM WAV.

    Raises:
        Refused: naming `path` and the problem when it is missing, a
            folder, unreadable or not a PCM WAV that Python's `wave`
            reads (a float WAV, a header without its data chunk).
    """
    try:
        with wave.open(path, "rb") as f:
            channels, width = f.getnchannels(), f.getsampwidth()
            rate, data = f.getframerate(), f.readframes(f.getnframes())
    except OSError as error:  # missing, a folder, no permission
        raise Refused(f"{path}: {error.strerror or error}") from None
    except (wave.Error, EOFError) as error:
        raise Refused(
            f"{path}: not a PCM WAV file that Python's `wave` reads "
            f"({error or 'the file ends early'}); convert it, e.g. "
            "`ffmpeg -i IN -c:a pcm_s16le OUT.wav`"
        ) from None
    if width not in _wav.WIDTHS:
        raise Refused(f"{path}: {8 * width}-bit samples are not read")
    return _wav.pcm_samples(data, channels, width).mean(axis=1), rate


# Why python-soxr: it is the resampler librosa uses by default (and
# torchaudio's sox backend wraps the same libsoxr), a maintained binary
# wheel that needs only NumPy, band-limited with a linear-phase filter,
# and the same filter runs chunk by chunk (`soxr.ResampleStream`, exactly
# the whole-file result), which a stream needs and one FFT of the whole
# file cannot do (its edges also ring: the FFT treats the file as
# periodic). scipy's `resample_poly` would also do, but has no stream
# state to carry from one chunk to the next.


def resample(x, rate, target):
    """`x` (1-D) at `target` Hz, by python-soxr ("HQ": 20-bit, linear
    phase), about `len(x) * target / rate` samples."""
    if rate == target:
        return x
    soxr = _extra("soxr", "music", "resampling to the model's rate")
    return soxr.resample(
        np.asarray(x, np.float32), rate, target, quality="HQ"
    ).astype(np.float32)


def resample_chunks(chunks, rate, target):
    """Yields the resampled chunks of the 1-D `chunks` (an iterable, e.g.
    a stream read block by block): together, the same samples as
    `resample` of the concatenated signal."""
    if rate == target:
        yield from (np.asarray(c, np.float32) for c in chunks)
        return
    soxr = _extra("soxr", "music", "resampling to the model's rate")
    stream = soxr.ResampleStream(rate, target, 1, "float32", "HQ")
    for chunk in chunks:
        yield stream.resample_chunk(np.asarray(chunk, np.float32))
    yield stream.resample_chunk(np.zeros(0, np.float32), last=True)


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
# The streaming file, hop by hop.
# ----------------------------------------------------------------------


class NoteTracker:
    """Decides notes frame by frame, as they arrive: a note's onset once
    its probability has exceeded `threshold` for `min_frames` frames, its
    offset at the first frame below (the runs of
    `cvattn_keras.metrics.frames_to_notes`, decided online).

    `frame(f, probabilities)` returns the events that frame decides:
    `("on", pitch, first_frame, peak)` and `("off", pitch, first_frame,
    stop_frame, peak)` (`stop_frame` the first frame below); `finish()`
    ends the notes still sounding after the last frame."""

    def __init__(self, notes, threshold, min_frames, lowest_note):
        self.threshold, self.min_frames = threshold, min_frames
        self.lowest_note = lowest_note
        self.start = [None] * notes  # the current run's first frame
        self.peak = [0.0] * notes
        self.frames = 0

    def frame(self, f, probabilities):
        events = []
        for n, p in enumerate(probabilities):
            pitch = self.lowest_note + n
            if p > self.threshold:
                if self.start[n] is None:
                    self.start[n], self.peak[n] = f, 0.0
                self.peak[n] = max(self.peak[n], float(p))
                if f - self.start[n] + 1 == self.min_frames:
                    events.append(("on", pitch, self.start[n], self.peak[n]))
            elif self.start[n] is not None:
                if f - self.start[n] >= self.min_frames:
                    events.append(
                        ("off", pitch, self.start[n], f, self.peak[n])
                    )
                self.start[n] = None
        self.frames = f + 1
        return events

    def finish(self):
        events = []
        for n, first in enumerate(self.start):
            if first is not None and self.frames - first >= self.min_frames:
                events.append(
                    (
                        "off",
                        self.lowest_note + n,
                        first,
                        self.frames,
                        self.peak[n],
                    )
                )
            self.start[n] = None
        return events


def hops(blocks, rate, spec):
    """The model's hops `(hop_samples, input_samples)` from `blocks` of
    samples at `rate` (an iterable, as a microphone gives them):
    resampled block by block, cut into `spec["chunk"]` samples, each with
    the count of input samples read when it was complete; then silence
    until every frame that hears the input is out."""
    hop, read = spec["chunk"], [0]

    def counted():
        for block in blocks:
            read[0] += len(block)
            yield block

    buffer, total = np.zeros(0, np.float32), 0
    for piece in resample_chunks(counted(), rate, spec["sample_rate"]):
        buffer = np.concatenate([buffer, piece])
        total += len(piece)
        while len(buffer) >= hop:
            yield buffer[:hop], read[0]
            buffer = buffer[hop:]
    # The frames that hear the input, ceil(total / hop), are out after
    # warmup_steps more steps.
    steps = -(-total // hop) + spec["warmup_steps"]
    done = (total - len(buffer)) // hop
    padded = np.zeros((steps - done) * hop, np.float32)
    padded[: len(buffer)] = buffer
    for k in range(steps - done):
        yield padded[k * hop : (k + 1) * hop], read[0]


def stream_notes(runner, blocks, rate, spec, threshold, min_frames, say):
    """Runs the streaming file (`runner`, a `TFLiteStream`) over `blocks`
    of samples at `rate`, hop by hop; calls `say(line)` for each note as
    it is decided. Returns `(notes, probabilities, seconds)`: the notes
    `(onset_s, offset_s, midi_pitch, peak)` as `decode` gives them, the
    frames' probabilities `(frames, notes)` and each step's compute
    seconds."""
    model_rate, hop = spec["sample_rate"], spec["chunk"]
    warmup = spec["warmup_steps"]
    start = (spec["first_centre"] - hop / 2) / model_rate  # frame 0's start
    tracker = NoteTracker(
        spec["notes"], threshold, min_frames, spec["lowest_note"]
    )
    notes, rows, seconds, delays = [], [], [], []
    compute = 0.0

    def report(event, step, input_delay, end=False):
        kind, pitch, first = event[:3]
        # The event's frame: the note's first, or the first below.
        frame = first if kind == "on" else event[3]
        decided = step - warmup
        algorithmic = (warmup + 1 + decided - frame) * hop / model_rate
        at = (step + 1) * hop / model_rate
        onset = max(0.0, start + first * hop / model_rate)
        if kind == "on":
            what = f"on   MIDI {pitch:3d}  {onset:7.3f} s"
        else:
            offset = start + event[3] * hop / model_rate
            notes.append((onset, offset, pitch, event[4]))
            what = f"off  MIDI {pitch:3d}  {onset:7.3f} - {offset:7.3f} s"
        if end:  # sounding when the input ended
            say(f"  {what}  p={event[-1]:.2f}  at the end of the input")
            return
        say(
            f"  {what}  p={event[-1]:.2f}  decided at {at:7.3f} s: "
            f"algorithmic {1000 * algorithmic:.1f} ms, input "
            f"{1000 * input_delay:.1f} ms, compute {1000 * compute:.2f} ms"
        )

    step = -1
    for step, (samples, read) in enumerate(hops(blocks, rate, spec)):
        begin = time.perf_counter()
        logits = runner.step(samples[None])
        compute = time.perf_counter() - begin
        seconds.append(compute)
        # How long after the hop's last sample the hop was complete:
        # input read / input rate against the hop's end at the model's
        # rate (never below 0: the silence after the end is not waited
        # for).
        delay = max(0.0, read / rate - (step + 1) * hop / model_rate)
        delays.append(delay)
        if step < warmup:
            continue  # before the first frame
        p = 1 / (1 + np.exp(-np.asarray(logits, np.float64).reshape(-1)))
        rows.append(p)
        for event in tracker.frame(step - warmup, p):
            report(event, step, delay)
    for event in tracker.finish():
        report(event, step, 0.0, end=True)
    notes.sort(key=lambda n: (n[0], n[2]))
    probabilities = np.array(rows).reshape(-1, spec["notes"])
    return notes, probabilities, np.array(seconds), np.array(delays)


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


def write_midi(path, notes):
    """A standard MIDI file of `notes`, written by pretty_midi: 120 bpm,
    one piano part, velocity from the peak probability."""
    pretty_midi = _extra("pretty_midi", "music", "writing MIDI")
    midi = pretty_midi.PrettyMIDI(initial_tempo=120.0, resolution=480)
    piano = pretty_midi.Instrument(program=0, name="transcription")
    for onset, offset, pitch, peak in notes:
        velocity = int(np.clip(round(127 * peak), 1, 127))
        piano.notes.append(
            pretty_midi.Note(velocity, int(pitch), onset, offset)
        )
    midi.instruments.append(piano)
    midi.write(path)


def save_roll(path, probabilities, notes, spec, title):
    matplotlib = _extra("matplotlib", "examples", "drawing the piano roll")

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
    figure.savefig(path, dpi=80, format="png")
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
    parser.add_argument("--threshold", type=arguments.fraction, default=0.5)
    parser.add_argument("--min-frames", type=arguments.positive_int, default=1)
    parser.add_argument("--threads", type=arguments.positive_int, default=1)
    parser.add_argument("--output", default=None, help="default: AUDIO's")
    parser.add_argument(
        "--stream",
        action="store_true",
        help="MODEL is a streaming file (train_music.py --streaming): feed "
        "it hop by hop as a microphone would, printing each note as it is "
        "decided with its latency",
    )
    parser.add_argument(
        "--block",
        type=arguments.positive_int,
        default=None,
        help="with --stream: samples read at a time at the file's rate, "
        "as a microphone's buffer (default: one hop's worth)",
    )
    args = parser.parse_args(argv)
    if args.block is not None and not args.stream:
        parser.error("--block goes with --stream")
    if not os.path.isfile(args.model):
        parser.error(f"--model {args.model}: no such file")
    if args.description is None:
        args.description = os.path.splitext(args.model)[0] + ".json"
    if not os.path.isfile(args.description):
        writer = "--streaming W" if args.stream else "--input waveform"
        parser.error(
            f"{args.description!r} (what the file takes) does not exist: "
            f"train_music.py {writer} writes it beside the model; pass "
            "--description."
        )
    return args


_SPEC_KEYS = (
    "input",
    "sample_rate",
    "samples",
    "frames",
    "frame_step",
    "first_centre",
    "lowest_note",
    "notes",
)


_STREAM_KEYS = (
    "input",
    "sample_rate",
    "chunk",
    "fft_length",
    "warmup_steps",
    "first_centre",
    "lowest_note",
    "notes",
)


def read_description(path, stream=False):
    """The JSON that says what the model file takes, checked: an offline
    file's, or with `stream` a streaming file's."""
    try:
        with open(path) as f:
            spec = json.load(f)
    except (OSError, ValueError) as error:
        raise Refused(f"{path}: not a model description ({error})") from None
    if isinstance(spec, dict) and bool(spec.get("stream")) != stream:
        raise Refused(
            f"{path}: describes "
            + (
                "a streaming file: pass --stream"
                if spec.get("stream")
                else "an offline file, not a streaming one: train with "
                "examples/train_music.py --streaming W"
            )
        )
    keys = _STREAM_KEYS if stream else _SPEC_KEYS
    missing = [k for k in keys if not isinstance(spec, dict) or k not in spec]
    if missing:
        raise Refused(f"{path}: not a model description (no {missing[0]!r})")
    if spec["input"] != "waveform":
        raise Refused(
            f"{path}: the model takes {spec['input']!r}, not a waveform: "
            "train with examples/train_music.py --input waveform"
        )
    return spec


def output_folder(output):
    """`output`, a folder that exists or can be made (nothing made yet)."""
    problem = arguments.folder_problem(output)
    if problem:
        raise Refused(f"--output {output}: {problem}")
    return output


def write_all(stem, writers):
    """Each `writers[suffix](path)` writes `stem + suffix`: into a hidden
    file beside it first, renamed into place once every one is written,
    so a failure leaves neither new files nor a new folder behind."""
    folder = os.path.dirname(stem) or "."
    made = []  # the folders this call makes, the deepest first
    probe = os.path.abspath(folder)
    while not os.path.exists(probe):
        made.append(probe)
        probe = os.path.dirname(probe)
    os.makedirs(folder, exist_ok=True)
    partial = {
        suffix: os.path.join(
            folder, f".{os.path.basename(stem)}{suffix}.partial"
        )
        for suffix in writers
    }
    try:
        for suffix, write in writers.items():
            write(partial[suffix])
        for suffix, path in partial.items():
            os.replace(path, stem + suffix)
    except BaseException:
        for path in partial.values():
            if os.path.exists(path):
                os.remove(path)
        for path in made:
            os.rmdir(path)
        raise


def main(argv=None):
    args = parse_args(argv)
    try:
        return transcribe(args)
    except Refused as error:
        print(f"transcribe.py: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def transcribe(args):
    spec = read_description(args.description, args.stream)
    output = output_folder(
        args.output or os.path.dirname(os.path.abspath(args.audio))
    )
    # What each output needs, before any work.
    _extra("pretty_midi", "music", "writing MIDI")
    _extra("matplotlib", "examples", "drawing the piano roll")
    x, rate = read_wav(args.audio)
    if not len(x):
        raise Refused(f"{args.audio}: the file holds no samples")
    # Less than one frame of the model's: nothing to hear.
    if len(x) * spec["sample_rate"] < spec["frame_step"] * rate:
        raise Refused(
            f"{args.audio}: {len(x)} sample(s) at {rate} Hz "
            f"({1000 * len(x) / rate:.3g} ms) is shorter than one frame "
            f"of the model ({spec['frame_step']} samples at "
            f"{spec['sample_rate']} Hz)"
        )
    if rate != spec["sample_rate"]:
        _extra("soxr", "music", "resampling to the model's rate")
    stem = os.path.join(
        output, os.path.splitext(os.path.basename(args.audio))[0]
    )
    if args.stream:
        return transcribe_stream(args, spec, x, rate, stem, output)
    x = resample(x, rate, spec["sample_rate"])
    batch = windows(x, spec["samples"], spec["frames"], spec["frame_step"])
    start = time.perf_counter()
    try:
        logits = run_file(args.model, batch, args.threads)
    except (ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[:1] or [type(error).__name__]
        raise Refused(f"{args.model}: LiteRT cannot run it ({first[0]})")
    seconds = time.perf_counter() - start
    frames = -(-len(x) // spec["frame_step"])  # those that hear the audio
    logits = logits.reshape(-1, spec["notes"])[:frames]
    probabilities = 1 / (1 + np.exp(-logits.astype(np.float64)))
    notes = decode(probabilities, args.threshold, args.min_frames, spec)

    duration = len(x) / spec["sample_rate"]
    title = (
        f"{os.path.basename(args.audio)}: {len(notes)} notes "
        f"(threshold {args.threshold})"
    )
    write_outputs(stem, notes, probabilities, spec, title, output)
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


def write_outputs(stem, notes, probabilities, spec, title, output):
    """The CSV, MIDI file and piano roll at `stem` (in the folder
    `output`), all or none."""
    try:
        write_all(
            stem,
            {
                ".notes.csv": lambda path: write_csv(path, notes),
                ".mid": lambda path: write_midi(path, notes),
                ".png": lambda path: save_roll(
                    path, probabilities, notes, spec, title
                ),
            },
        )
    except OSError as error:
        raise Refused(f"--output {output}: {error.strerror or error}") from None


def transcribe_stream(args, spec, x, rate, stem, output):
    """`--stream`: `x` (the file's samples at `rate`) fed block by block
    to the streaming file, each note printed as it is decided."""
    try:
        runner = cvk.export.TFLiteStream(args.model, num_threads=args.threads)
    except (ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[:1] or [type(error).__name__]
        raise Refused(f"{args.model}: {first[0]}") from None
    if runner.chunk_shape != (1, spec["chunk"]):
        raise Refused(
            f"{args.model}: takes chunks of shape {runner.chunk_shape}, not "
            f"(1, {spec['chunk']}) as {args.description} says"
        )
    hop, model_rate = spec["chunk"], spec["sample_rate"]
    block = args.block or max(1, round(hop * rate / model_rate))
    print(
        f"{args.audio}: {len(x) / rate:.2f} s at {rate} Hz, read in blocks "
        f"of {block} samples"
        + (f", resampled to {model_rate} Hz" if rate != model_rate else "")
        + f"; hops of {hop} samples ({1000 * hop / model_rate:.1f} ms), "
        f"frames of {spec['fft_length']} samples "
        f"({1000 * spec['fft_length'] / model_rate:.1f} ms), "
        f"{spec['warmup_steps']} warm-up step(s)"
    )
    blocks = (x[i : i + block] for i in range(0, len(x), block))
    try:
        notes, probabilities, seconds, delays = stream_notes(
            runner,
            blocks,
            rate,
            spec,
            args.threshold,
            args.min_frames,
            print,
        )
    except (ValueError, RuntimeError) as error:
        first = str(error).strip().splitlines()[:1] or [type(error).__name__]
        raise Refused(f"{args.model}: LiteRT cannot run it ({first[0]})")
    title = (
        f"{os.path.basename(args.audio)}, streamed: {len(notes)} notes "
        f"(threshold {args.threshold})"
    )
    write_outputs(stem, notes, probabilities, spec, title, output)
    duration = len(x) / rate
    print(
        f"{len(seconds)} hops, {len(probabilities)} frames; LiteRT, "
        f"{args.threads} thread(s): {1000 * np.median(seconds):.3f} ms per "
        f"hop (median; worst {1000 * seconds.max():.3f} ms), real-time "
        f"factor {seconds.sum() / duration:.4f}; input delay (--block, "
        f"resampler) {1000 * np.median(delays):.1f} ms median, "
        f"{1000 * delays.max():.1f} ms worst\n"
        f"{len(notes)} notes -> {stem}.notes.csv, {stem}.mid, {stem}.png"
    )
    return notes


if __name__ == "__main__":
    main()
