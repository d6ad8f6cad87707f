"""Enhance a WAV file with a speech enhancer: a `.keras` model or a
streaming `.tflite` file.

Reads `NOISY.wav` (PCM, 8/16/24/32-bit, with the standard library's
`wave`; or IEEE float, 32/64-bit, read from its RIFF chunks), resamples it
to the model's rate (`--model-rate`, 16 kHz by default: what
`cvattn_keras.models.speech_enhancer` is trained at; a model file does
not record its rate) with python-soxr, enhances it, resamples it back and
writes `OUT.wav`: 16-bit PCM at the input's rate, with its length and its
channels (each channel is enhanced on its own, as one item of a batch:
the model is mono).

The routes (`--model`):

- a `.keras` file (`speech_enhancer`, or any waveform-to-waveform model
  whose first layer is a `ComplexSTFT(center=False)` named `stft`):
  offline, the whole file at once. The inverse STFT divides the first and
  last `frame_length - frame_step` samples of its output by a partial
  window envelope (edge artefacts), so the samples are padded with
  `frame_length` zeros at the start (`F`: rounded up to whole hops) and at
  least `frame_length` at the end (up to `(length - frame_length) %
  frame_step == 0`, which keeps every sample), and the output is cropped
  back: it has the input's length and is time-aligned with it.
- a `.keras` file with `--stream`: `cvattn_keras.streaming.to_streaming`
  of it, fed one hop (`frame_step` samples) at a time in Keras.
- a streaming `.tflite` file (exported from `to_streaming(model)`:
  inputs `chunk` and `state_NN_...`; `--stream` is implied): fed one hop
  at a time on LiteRT (`cvattn_keras.export.TFLiteStream`), as a
  microphone would feed it. `frame_step` is the chunk's length;
  `frame_length` is read from the STFT's state (`state_NN_stft_samples`
  holds its last `frame_length - frame_step` samples), or given with
  `--frame-length` for a file whose STFT is named otherwise.

A stream is primed with `frame_length` samples of silence before the
first sample (what the offline route pads with; when the hop does not
divide `frame_length`, `2 * F - frame_length` with `F` as above, so that
its frames fall where the offline route's do: a device feeds them once at
start-up, which costs compute, not latency), then fed the signal, its
last hop zero-padded, then zeros until its last sample is out; the
outputs of the warm-up steps (`ceil(frame_length / frame_step) - 1`) and
of the priming are dropped, and the rest cropped to the input's length:
time-aligned with the input (the algorithmic delay, `frame_length`
samples, removed). A streamed output is then the offline output, sample
for sample, to float rounding: the two routes differ only in how they
run (without the priming, a stream's first `frame_length - frame_step`
samples would be zeros, and its next few frames would differ from the
offline route's, whose attention window holds the padding's frames).

The output is written whole or not at all: into a hidden temporary file
in OUT's folder, renamed over OUT once written. An existing OUT is
replaced only with `--overwrite`.

What cannot be enhanced ends the run with one line on stderr and nothing
written: exit status 2 for the command line (a missing input or model
file, an output folder that does not exist, an existing OUT without
`--overwrite`, a model file of another kind, an option out of range),
1 for what the files hold (not a WAV file this reads, no samples,
non-finite samples, a model file that is not a model or not a streaming
file, a missing python-soxr, a failed write).

It prints one line: the input's rate, channels and seconds, the route,
and the real-time factor (the enhancement's seconds, resampling
included and loading excluded, over the audio's seconds; a Keras route's
includes its first call's tracing, which dominates a short file).

Run:  python examples/enhance.py NOISY.wav --model enhancer.keras \\
          --output clean.wav
      python examples/enhance.py NOISY.wav --model enhancer_stream.tflite \\
          --output clean.wav --threads 2
"""

import argparse
import os
import re
import struct
import sys
import tempfile
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

MODEL_RATE = 16000  # speech_enhancer's rate; a model file does not say


class Refused(Exception):
    """What cannot be enhanced: `main` prints it as one line on stderr
    and exits with `status` (2: the command line; 1: the files)."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


def _first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


# ----------------------------------------------------------------------
# Audio in and out.
# ----------------------------------------------------------------------


def read_wav(path):
    """`(samples, rate)`: float32 `(frames, channels)` in [-1, 1] from a
    PCM WAV (`wave`) or an IEEE float WAV (read from its chunks).

    Raises:
        Refused: naming `path` and the problem.
    """
    try:
        with wave.open(path, "rb") as f:
            channels, width = f.getnchannels(), f.getsampwidth()
            rate, data = f.getframerate(), f.readframes(f.getnframes())
    except OSError as error:  # a folder, no permission
        raise Refused(f"{path}: {error.strerror or error}") from None
    except wave.Error as error:
        if "unknown format" not in str(error):
            raise Refused(
                f"{path}: not a WAV file that this reads ({error}); "
                "convert it, e.g. `ffmpeg -i IN -c:a pcm_s16le OUT.wav`"
            ) from None
        return _read_float_wav(path)
    except EOFError:
        raise Refused(f"{path}: not a WAV file (it ends early)") from None
    if width not in _wav.WIDTHS or not channels:
        raise Refused(f"{path}: {8 * width}-bit samples are not read")
    return _wav.pcm_samples(data, channels, width), rate


# WAVE_FORMAT_EXTENSIBLE's sub-format GUID for IEEE float, after its
# first two bytes (the format tag).
_FLOAT_GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")


def _read_float_wav(path):
    """An IEEE float WAV (format 3, or extensible with a float sub-format;
    32 or 64-bit), which Python's `wave` does not read."""

    def refuse(problem):
        return Refused(f"{path}: not a WAV file that this reads ({problem})")

    with open(path, "rb") as f:
        riff = f.read()
    if riff[:4] != b"RIFF" or riff[8:12] != b"WAVE":
        raise refuse("no RIFF/WAVE header")
    fmt, data, at = None, None, 12
    while at + 8 <= len(riff):
        name, size = (
            riff[at : at + 4],
            struct.unpack("<I", riff[at + 4 : at + 8])[0],
        )
        body = riff[at + 8 : at + 8 + size]
        if name == b"fmt ":
            fmt = body
        elif name == b"data":
            data = body
        at += 8 + size + size % 2
    if fmt is None or len(fmt) < 16 or data is None:
        raise refuse("no fmt or data chunk")
    tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", fmt[:16])
    if tag == 0xFFFE and len(fmt) >= 40 and fmt[26:40] == _FLOAT_GUID_TAIL:
        tag = struct.unpack("<H", fmt[24:26])[0]
    if tag != 3 or bits not in (32, 64) or not channels:
        raise refuse(f"format {tag}, {bits}-bit: neither PCM nor float")
    width = bits // 8
    data = data[: len(data) // (channels * width) * channels * width]
    x = np.frombuffer(data, "<f4" if width == 4 else "<f8")
    return x.astype(np.float32).reshape(-1, channels), rate


def write_wav(path, y, rate):
    """`y` `(frames, channels)` as 16-bit PCM, whole or not at all: into a
    hidden file beside `path`, renamed over it once written."""
    q = np.clip(np.round(np.asarray(y, np.float64) * 32768), -32768, 32767)
    folder = os.path.dirname(os.path.abspath(path))
    fd, partial = tempfile.mkstemp(
        prefix=f".{os.path.basename(path)}.", suffix=".partial", dir=folder
    )
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # a new file's mode, not mkstemp's
        with os.fdopen(fd, "wb") as raw, wave.open(raw, "wb") as f:
            f.setnchannels(y.shape[1])
            f.setsampwidth(2)
            f.setframerate(rate)
            f.writeframes(q.astype("<i2").tobytes())
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        raise


def _soxr():
    try:
        import soxr
    except ImportError:
        raise Refused(
            'resampling needs python-soxr: pip install "cvattn-keras[speech]"'
        ) from None
    return soxr


def resample(x, rate, target, length=None):
    """`x` `(frames, channels)` at `target` Hz by python-soxr ("HQ":
    linear phase), cut or zero-padded to `length` frames when given."""
    if rate != target:
        x = _soxr().resample(
            np.ascontiguousarray(x, np.float32), rate, target, quality="HQ"
        )
    x = np.asarray(x, np.float32)
    if length is not None and len(x) != length:
        x = np.pad(x[:length], ((0, max(0, length - len(x))), (0, 0)))
    return x


# ----------------------------------------------------------------------
# The routes: each maps (channels, samples) to (channels, samples).
# ----------------------------------------------------------------------


def _front(frame_length, frame_step):
    """The zeros before the signal: `frame_length`, rounded up to whole
    hops (what a stream's STFT implies before its first sample)."""
    return -(-frame_length // frame_step) * frame_step


def offline_input(x, frame_length, frame_step):
    """`x` `(channels, n)` padded for the offline model: `_front` zeros
    before, at least `frame_length` after, up to `(length -
    frame_length) % frame_step == 0`. The output's samples `[front,
    front + n)` are `x`'s."""
    front = _front(frame_length, frame_step)
    n = x.shape[1]
    back = frame_length + (-(front + n)) % frame_step
    return np.pad(x, ((0, 0), (front, back))).astype(np.float32), front


def stream_chunks(x, frame_length, frame_step):
    """`x` `(channels, n)` as the hops a primed stream takes, `(steps,
    channels, frame_step)`, and the index of `x[0]`'s output sample in
    the steps' concatenated outputs: the priming zeros, the signal, then
    zeros until its last sample is out after the warm-up steps.

    The priming, `2 * front - frame_length` zeros (`frame_length` when
    the hop divides it), puts the first frame that a stream keeps (its
    first after the warm-up, `ceil(frame_length / frame_step) - 1`
    steps) at `-front`, where the offline route's first frame is: the
    same frames, the same outputs."""
    front = _front(frame_length, frame_step)
    priming = 2 * front - frame_length
    # A stream's output for its input sample t is its output sample t +
    # frame_length - frame_step (the warm-up's included).
    offset = priming + frame_length - frame_step
    steps = -(-(offset + x.shape[1]) // frame_step)
    signal = np.zeros((x.shape[0], steps * frame_step), np.float32)
    signal[:, priming : priming + x.shape[1]] = x
    chunks = signal.reshape(x.shape[0], steps, frame_step)
    return chunks.transpose(1, 0, 2), offset


def _crop(outputs, offset, n):
    """Steps' outputs `(steps, channels, frame_step)` to `(channels, n)`."""
    joined = np.concatenate(list(outputs), axis=-1)
    return joined[:, offset : offset + n]


class KerasOffline:
    route = "offline (Keras)"

    def __init__(self, model, stft):
        self.model = model
        self.frame_length, self.frame_step = stft.fft_length, stft.frame_step

    def __call__(self, x):
        padded, front = offline_input(x, self.frame_length, self.frame_step)
        y = np.asarray(self.model.predict_on_batch(padded))
        return y[:, front : front + x.shape[1]]


class KerasStream:
    route = "stream (Keras, hop by hop)"

    def __init__(self, model, stft):
        self.stream = cvk.streaming.to_streaming(model)
        self.frame_length, self.frame_step = stft.fft_length, stft.frame_step

    def __call__(self, x):
        chunks, offset = stream_chunks(x, self.frame_length, self.frame_step)
        # run_stream feeds (B, steps, hop) one step at a time.
        out, _ = cvk.streaming.run_stream(
            self.stream, chunks.transpose(1, 0, 2)
        )
        return _crop(np.asarray(out).transpose(1, 0, 2), offset, x.shape[1])


class LiteRTStream:
    def __init__(self, runner, frame_length, threads):
        self.runner = runner
        self.frame_step = runner.chunk_shape[1]
        self.frame_length = frame_length
        self.route = f"stream (LiteRT, hop by hop, {threads} thread(s))"

    def __call__(self, x):
        chunks, offset = stream_chunks(x, self.frame_length, self.frame_step)
        channels = []
        for c in range(x.shape[0]):  # the file's batch is 1
            self.runner.reset()
            hops = [self.runner.step(hop[c : c + 1]) for hop in chunks]
            channels.append(_crop(hops, offset, x.shape[1])[0])
        return np.stack(channels)


_STFT_STATE = re.compile(r"state_\d+_stft_samples")


def load_enhancer(args):
    """The route for `args.model` (checked to exist, with a known
    suffix)."""
    path = args.model
    if path.endswith(".tflite"):
        try:
            runner = cvk.export.TFLiteStream(path, num_threads=args.threads)
        except (ValueError, RuntimeError) as error:
            raise Refused(f"{path}: {_first_line(error)}") from None
        if len(runner.chunk_shape) != 2 or runner.chunk_shape[0] != 1:
            raise Refused(
                f"{path}: takes chunks of shape {runner.chunk_shape}, not "
                "one hop of samples (1, frame_step): not a waveform stream"
            )
        hop = runner.chunk_shape[1]
        stored = [
            runner._details[name]["shape"][1:]
            for name in runner._states
            if _STFT_STATE.fullmatch(name)
        ]
        frame_length = args.frame_length
        if len(stored) == 1 and len(stored[0]) == 1:
            found = hop + int(stored[0][0])
            if frame_length not in (None, found):
                raise Refused(
                    f"--frame-length {frame_length}: {path} has "
                    f"frame_length {found} (its STFT state's samples "
                    "plus a hop)",
                    2,
                )
            frame_length = found
        elif frame_length is None:
            raise Refused(
                f"{path}: no STFT state (state_NN_stft_samples) to read "
                "the frame length from: pass --frame-length",
                2,
            )
        if frame_length < 2 * hop:
            raise Refused(
                f"--frame-length {frame_length}: must be at least twice "
                f"{path}'s hop ({hop})",
                2,
            )
        return LiteRTStream(runner, frame_length, args.threads or 1)
    import keras

    try:
        model = keras.saving.load_model(path)
    except Exception as error:  # a zip that is not a model, garbage
        raise Refused(
            f"{path}: not a Keras model file ({_first_line(error)})"
        ) from None
    try:
        stft = model.get_layer("stft")
    except ValueError:
        stft = None
    if (
        not isinstance(stft, cvk.layers.ComplexSTFT)
        or stft.center
        or len(model.inputs) != 1
        or len(model.input_shape) != 2
        or len(model.outputs) != 1
        or len(model.output_shape) != 2
    ):
        raise Refused(
            f"{path}: not a waveform enhancer (samples to samples, with a "
            "ComplexSTFT(center=False) named 'stft' first), e.g. "
            "cvattn_keras.models.speech_enhancer"
        )
    if args.stream:
        try:
            return KerasStream(model, stft)
        except ValueError as error:
            raise Refused(f"{path}: {_first_line(error)}") from None
    if model.input_shape[1] is not None:
        raise Refused(
            f"{path}: takes exactly {model.input_shape[1]} samples; use "
            "--stream, or rebuild it with samples=None"
        )
    return KerasOffline(model, stft)


# ----------------------------------------------------------------------


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] + " (see the module docstring)"
    )
    parser.add_argument("noisy", help="the WAV file to enhance")
    parser.add_argument(
        "--model",
        required=True,
        help="a .keras model (offline; --stream: hop by hop) or a "
        "streaming .tflite file (hop by hop on LiteRT: --stream implied)",
    )
    parser.add_argument(
        "--output", required=True, help="the 16-bit WAV file to write"
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="run a .keras model hop by hop (cvattn_keras.streaming); "
        "implied by a .tflite model",
    )
    parser.add_argument(
        "--threads",
        type=arguments.positive_int,
        default=None,
        help="LiteRT CPU threads, for a .tflite model (default 1)",
    )
    parser.add_argument(
        "--frame-length",
        type=arguments.positive_int,
        default=None,
        help="a .tflite model's STFT frame length (default: read from its "
        "STFT state; 512 for speech_enhancer)",
    )
    parser.add_argument(
        "--model-rate",
        type=arguments.positive_int,
        default=MODEL_RATE,
        help=f"the model's sample rate in Hz (default {MODEL_RATE}: "
        "speech_enhancer's; a model file does not record it)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing OUTPUT (otherwise an error)",
    )
    return parser.parse_args(argv)


def check_args(args):
    """Refused (status 2) for a command line that cannot run."""
    tflite = args.model.endswith(".tflite")
    if not (tflite or args.model.endswith(".keras")):
        raise Refused(f"--model {args.model}: not a .keras or .tflite file", 2)
    if not os.path.exists(args.model):
        raise Refused(f"--model {args.model}: no such file", 2)
    if not os.path.exists(args.noisy):
        raise Refused(f"{args.noisy}: no such file", 2)
    if args.threads is not None and not tflite:
        raise Refused("--threads goes with a .tflite model", 2)
    if args.frame_length is not None and not tflite:
        raise Refused(
            "--frame-length goes with a .tflite model (a .keras model's "
            "is read from its 'stft' layer)",
            2,
        )
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        raise Refused(f"--output {args.output}: no folder {folder}", 2)
    if os.path.isdir(args.output):
        raise Refused(f"--output {args.output}: is a folder", 2)
    if os.path.exists(args.output) and not args.overwrite:
        raise Refused(
            f"--output {args.output}: exists (pass --overwrite to replace it)",
            2,
        )
    args.stream = args.stream or tflite


def main(argv=None):
    args = parse_args(argv)
    try:
        return enhance(args)
    except Refused as error:
        print(f"enhance.py: error: {error}", file=sys.stderr)
        raise SystemExit(error.status) from None


def enhance(args):
    """Enhances `args.noisy` into `args.output`; returns the enhanced
    samples as written (before quantization), `(frames, channels)`."""
    check_args(args)
    x, rate = read_wav(args.noisy)
    if not x.size:
        raise Refused(f"{args.noisy}: the file holds no samples")
    if not np.isfinite(x).all():
        raise Refused(f"{args.noisy}: holds non-finite samples (NaN or inf)")
    if rate != args.model_rate:
        _soxr()  # before any work
    enhancer = load_enhancer(args)

    start = time.perf_counter()
    noisy = resample(x, rate, args.model_rate)
    enhanced = enhancer(noisy.T).T
    y = resample(enhanced, args.model_rate, rate, length=len(x))
    seconds = time.perf_counter() - start
    if not np.isfinite(y).all():
        raise Refused(f"{args.model}: gave non-finite samples")
    try:
        write_wav(args.output, y, rate)
    except OSError as error:
        raise Refused(
            f"--output {args.output}: {error.strerror or error}"
        ) from None
    duration = len(x) / rate
    print(
        f"{args.noisy}: {rate} Hz, {x.shape[1]} channel(s), "
        f"{duration:.2f} s"
        + (
            f" (enhanced at {args.model_rate} Hz)"
            if rate != args.model_rate
            else ""
        )
        + f"; {enhancer.route}, frames of {enhancer.frame_length}, hop "
        f"{enhancer.frame_step}; {seconds:.3f} s, real-time factor "
        f"{seconds / duration:.4f} -> {args.output}"
    )
    return y


if __name__ == "__main__":
    main()
