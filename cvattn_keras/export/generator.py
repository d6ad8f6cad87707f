"""On-device generation: a `music_generator` as one `.tflite` file with an
`encode` and a `decode_step` signature, and the decoding loop on LiteRT.

    from cvattn_keras.export.generator import export_generator_tflite
    from cvattn_keras.export.generator import generate_tflite

    export_generator_tflite(model, "generator.tflite")
    notes, logits = generate_tflite("generator.tflite", spectra)

The file decodes as `cvattn_keras.models.generate(..., cache=True)` does:
the encoder runs once, then the decoder decodes one frame per call with
key/value caches. Its signatures (B = `batch_size`, L decoder layers,
S encoder frames, T = `max_frames`, N heads of `key_dim` H, E features;
float32 but `index`, and the caches and encoder states in the model's
compute dtype, float32 unless it runs under mixed precision):

- `encode`: `spectra` `(B, S, 2 * bins)` (`waveform` `(B, samples)` for
  a model built with `stft=`, its STFT in the file) ->
  `encoder_states` `(B, S, 2E)` (the encoder's output) and
  `cross_cache` `(B, L, 2, S, N, 2H)` (every decoder's cross-attention
  keys and values, computed once here instead of at every step);
- `decode_step`: `cross_cache`, `self_cache` `(B, L, 2, T, N, 2H)` (zeros
  before the first step), `previous_notes` `(B, 1, notes)` (zeros at the
  first step, then the previous step's notes or logits) and `index` (an
  int32 scalar, the frame decoded, from 0 to T - 1) -> `logits`
  `(B, 1, notes)` of that frame and `self_cache`, the cache with the
  frame's keys and values written at row `index`, to feed to the next
  call.

Shapes are static (no shape arithmetic, no dynamic dimension), the ops
TFLite builtins only. The caches are keras-hub's layout: keys and values
stacked on axis 2, each head `[Re | Im]` on the last axis.

Conversion needs TensorFlow: under another Keras backend the model is saved
to a temporary `.keras` file and converted in a subprocess under
`KERAS_BACKEND=tensorflow`, as `export_tflite` does.
"""

import argparse
import json
import os
import sys
import tempfile
import warnings

import keras
import numpy as np

from cvattn_keras import _tracing
from cvattn_keras import _validation as check
from cvattn_keras import attention as core
from cvattn_keras import layers as cl
from cvattn_keras import models
from cvattn_keras.export._arguments import _check_model
from cvattn_keras.export._arguments import _check_output
from cvattn_keras.export._arguments import _check_path
from cvattn_keras.export._conversion import _raise_unsupported
from cvattn_keras.export._conversion import _write
from cvattn_keras.export._errors import UnsupportedOpsError
from cvattn_keras.export._modes import QUANTIZATIONS
from cvattn_keras.export._reading import _check_tflite_file
from cvattn_keras.export._subprocess import convert_saved_copy
from cvattn_keras.models import generation

__all__ = [
    "DECODE_INPUTS",
    "DECODE_OUTPUTS",
    "ENCODE_INPUTS",
    "ENCODE_OUTPUTS",
    "GENERATOR_QUANTIZATIONS",
    "export_generator_tflite",
    "generate_tflite",
]

# The signatures' input and output names.
ENCODE_INPUTS = ("spectra",)
"""The input names of the encoding signature."""
ENCODE_OUTPUTS = ("encoder_states", "cross_cache")
"""The output names of the encoding signature."""
DECODE_INPUTS = ("cross_cache", "self_cache", "previous_notes", "index")
"""The input names of the decoding step's signature."""
DECODE_OUTPUTS = ("logits", "self_cache")
"""The output names of the decoding step's signature."""

# The modes that need no calibration data. The calibrated ones would have
# to be calibrated on the decoding step's inputs (caches at every step) as
# well as on spectra; they are not offered for generators.
GENERATOR_QUANTIZATIONS = (None, "float16", "dynamic_int8")
"""The modes of `export_generator_tflite(quantization=...)`: those that
need no calibration data.
"""

# The layers that the decoding step uses, by name (as `models.generate`).
_STEP_LAYERS = (
    "notes_as_complex",
    "note_embedding",
    "target_positions",
    "decoder_0",
    "head_dense",
    "head_act",
    "head_dropout",
    "head_notes",
    "note_logits",
)


# ----------------------------------------------------------------------
# Arguments.
# ----------------------------------------------------------------------


def _check_generator(model):
    """Raises a `ValueError` naming `model` unless it is a
    `music_generator` model (two inputs, the decoding step's layers)."""
    if not isinstance(model, keras.Model):
        raise ValueError(
            "`model` must be a `music_generator` keras.Model. Received: "
            f"model of type {type(model).__name__}"
        )
    inputs = _check_model(model)
    names = {layer.name for layer in model.layers}
    missing = [name for name in _STEP_LAYERS if name not in names]
    if len(inputs) != 2 or missing:
        raise ValueError(
            "`model` must be a generator built by "
            "`cvattn_keras.models.music_generator` (inputs `spectra` and "
            "`previous_notes`, layers "
            f"{list(_STEP_LAYERS)}). Received: model {model.name!r} with "
            f"{len(inputs)} input(s)"
            + (f", without layer(s) {missing}" if missing else "")
        )
    decoders = generation._decoder_layers(model)
    self_shapes, cross_shapes = set(), set()
    for decoder in decoders:
        if decoder.cross_attention is None:
            raise ValueError(
                f"`model`'s layer {decoder.name!r} has no cross-attention: "
                "a generator's decoders attend to the encoder. Received: "
                f"model {model.name!r}"
            )
        for attention, shapes in (
            (decoder.self_attention, self_shapes),
            (decoder.cross_attention, cross_shapes),
        ):
            if attention.value_dim != attention.key_dim:
                raise ValueError(
                    "A cache holds keys and values stacked, so every "
                    "attention needs `value_dim == key_dim`. Received: "
                    f"layer {decoder.name!r}/{attention.name} with "
                    f"key_dim={attention.key_dim}, "
                    f"value_dim={attention.value_dim}"
                )
            shapes.add((attention.num_heads, 2 * attention.key_dim))
    if len(self_shapes) > 1 or len(cross_shapes) > 1:
        raise ValueError(
            "The caches of all decoder layers are stacked in one tensor, "
            "so every decoder needs the same `num_heads` and `key_dim`. "
            f"Received: model {model.name!r} with (num_heads, 2 * key_dim) "
            f"{sorted(self_shapes | cross_shapes)}"
        )
    return decoders


def _source_shape(model, source_frames):
    """The encoder input's shape without the batch: `(S, 2 * bins)`, or
    `(samples,)` for a model built with `stft=` (its samples from
    `source_frames` frames, by `models.waveform_length`)."""
    shape = tuple(model.inputs[0].shape)[1:]
    waveform = len(shape) == 1
    length = shape[0]
    what = "waveforms" if waveform else "spectra"
    if source_frames is None:
        if length is None:
            raise ValueError(
                f"`model` takes {what} of any length; give the number of "
                "source frames in the file as `source_frames`. Received: "
                "source_frames=None"
            )
        return shape
    wanted = source_frames
    if waveform:
        stfts = [
            layer for layer in model.layers if isinstance(layer, cl.ComplexSTFT)
        ]
        if len(stfts) != 1:
            raise ValueError(
                "A generator that takes waveforms needs one ComplexSTFT "
                "among its layers (`music_generator(stft=...)`) to tell "
                f"the samples of `source_frames`. Received: model "
                f"{model.name!r} with {len(stfts)}"
            )
        wanted = models.waveform_length(stfts[0], source_frames)
    if length is not None and wanted != length:
        frames = f"{length} samples" if waveform else f"input length {length}"
        raise ValueError(
            f"`source_frames` must give the model's {frames} (or be "
            f"None). Received: source_frames={source_frames}"
        )
    return (wanted,) + shape[1:]


def _layout(model, batch_size, max_frames, source_frames):
    """The signatures' static shapes, as a dict of name -> shape (the
    encoder's input under its name, `spectra` or `waveform`)."""
    decoders = _check_generator(model)
    batch_size = check.positive_int(batch_size, "batch_size")
    _, target_frames, notes = model.inputs[1].shape
    source_frames = check.positive_int(source_frames, "source_frames", True)
    source = (batch_size,) + _source_shape(model, source_frames)
    if max_frames is None:
        if target_frames is None:
            raise ValueError(
                "`model` decodes any number of frames; give the file's "
                "maximum as `max_frames`. Received: max_frames=None"
            )
        max_frames = target_frames
    max_frames = check.positive_int(max_frames, "max_frames")
    if target_frames is not None and max_frames > target_frames:
        raise ValueError(
            f"`max_frames` must be in [1, {target_frames}] (the model's "
            "target_frames: the positions it was built for). Received: "
            f"max_frames={max_frames}"
        )
    encoder = generation._CachedDecoding(model, 1, "logits", 0.0).encoder
    memory = encoder.compute_output_spec(keras.KerasTensor(source))
    memory_length = memory.shape[1]
    first = decoders[0]
    self_heads = (
        first.self_attention.num_heads,
        2 * first.self_attention.key_dim,
    )
    cross_heads = (
        first.cross_attention.num_heads,
        2 * first.cross_attention.key_dim,
    )
    layers = len(decoders)
    return {
        _source_name(model): source,
        "encoder_states": tuple(memory.shape),
        "cross_cache": (batch_size, layers, 2, memory_length) + cross_heads,
        "self_cache": (batch_size, layers, 2, max_frames) + self_heads,
        "previous_notes": (batch_size, 1, notes),
        "index": (),
        "logits": (batch_size, 1, notes),
    }


def _source_name(model):
    """The `encode` signature's input: `waveform` for a model built with
    `stft=`, `spectra` otherwise."""
    return "waveform" if len(model.inputs[0].shape) == 2 else "spectra"


# ----------------------------------------------------------------------
# Export.
# ----------------------------------------------------------------------


def export_generator_tflite(
    model,
    path,
    quantization=None,
    batch_size=1,
    max_frames=None,
    source_frames=None,
    overwrite=True,
):
    """Writes a `music_generator` as one `.tflite` file with the signatures
    `encode` and `decode_step` (see this module's docstring for their
    inputs and outputs), for decoding with key/value caches on the device.

    The layers are traced as `export_tflite` traces them (portable masking,
    each complex weight stored once), with static shapes, and converted
    with TFLite builtin ops alone. `generate_tflite` runs the whole
    decoding on LiteRT through the two signatures. The file is written
    whole or not at all.

    Args:
        model: a `cvattn_keras.models.music_generator` model (also one
            loaded from a `.keras` file): inputs `spectra` and
            `previous_notes`, and its layer names.
        path: the output file; must end in `.tflite`.
        quantization: `None` (float32), `"float16"` (float16 weights) or
            `"dynamic_int8"` (int8 weights, dynamic-range activations).
            The calibrated modes of `export_tflite` (`"int8"`,
            `"full_int8"`, `"int16x8"`) are not offered here: they would
            need calibration on the decoding step's caches too.
        batch_size: positive int, the file's static batch (default 1).
        max_frames: positive int, the frames the file decodes at most
            (the self-attention cache's length), at most the model's
            `target_frames`; defaults to `target_frames`.
        source_frames: the encoder's frames (the spectra's length, or
            the frames of a waveform model's STFT, whose samples follow
            by `models.waveform_length`), needed only for a model built
            with `source_frames=None`; otherwise None or the model's.
        overwrite: whether to replace an existing file at `path`.

    Returns:
        The path of the written file.

    Raises:
        ValueError: bad arguments: a model that is not a generator (e.g. a
            classifier), a non-positive `batch_size` or `max_frames`, a
            `max_frames` above `target_frames`, an unknown or calibrated
            `quantization`, an existing file with `overwrite=False`.
        UnsupportedOpsError: an op with no TFLite builtin kernel.
    """
    path = _check_output(path, overwrite)
    if quantization not in GENERATOR_QUANTIZATIONS:
        calibrated = quantization in QUANTIZATIONS
        raise ValueError(
            f"`quantization` must be one of {list(GENERATOR_QUANTIZATIONS)} "
            "for a generator"
            + (
                " (the calibrated modes would need calibration data for the "
                "decoding step's caches, which export_generator_tflite does "
                "not collect)"
                if calibrated
                else ""
            )
            + f". Received: quantization={quantization!r}"
        )
    shapes = _layout(model, batch_size, max_frames, source_frames)
    if keras.backend.backend() != "tensorflow":
        flatbuffer = _convert_in_subprocess(
            model,
            quantization,
            shapes["self_cache"],
            shapes["encoder_states"][1],
        )
    else:
        flatbuffer = _convert(model, quantization, shapes)
    _write(path, flatbuffer, overwrite)
    return path


def _convert(model, quantization, shapes):
    """The `.tflite` flatbuffer with both signatures, converted in this
    process (the TensorFlow backend)."""
    import tensorflow as tf
    from tensorflow.lite.python.convert_phase import ConverterError

    ops = keras.ops
    decoding = generation._CachedDecoding(model, 1, "logits", 0.0)
    memory_shape = shapes["encoder_states"]

    def encode_source(source):
        memory = decoding.encoder(source, training=False)
        caches = decoding.cross_caches(memory)
        return {
            "encoder_states": memory,
            "cross_cache": ops.stack(caches, axis=1),
        }

    # The signature's input takes the argument's name.
    def encode_spectra(spectra):
        return encode_source(spectra)

    def encode_waveform(waveform):
        return encode_source(waveform)

    source = _source_name(model)
    encode = encode_waveform if source == "waveform" else encode_spectra

    def decode_step(cross_cache, self_cache, previous_notes, index):
        layers = self_cache.shape[1]
        # Not read: the cross-attention caches hold the encoder's keys and
        # values (the converter drops this constant).
        memory = ops.zeros(memory_shape, decoding.decoders[0].compute_dtype)
        logits, caches = decoding.step(
            previous_notes,
            index,
            memory,
            [self_cache[:, i] for i in range(layers)],
            [cross_cache[:, i] for i in range(layers)],
        )
        return {
            "logits": ops.cast(logits, "float32"),
            "self_cache": ops.stack(caches, axis=1),
        }

    cache_dtype = keras.backend.standardize_dtype(
        decoding.decoders[0].compute_dtype
    )

    def spec(name, dtype="float32"):
        return tf.TensorSpec(shapes[name], dtype, name=name)

    # A module that holds the variables (and nothing to trace), saved with
    # the two signatures: faster than an ExportArchive, which traces the
    # tracked model's own functions too.
    module = tf.Module()
    module.weights = [variable.value for variable in model.variables]
    with tempfile.TemporaryDirectory() as saved_model:
        with (
            core.portable_masking(),
            _tracing.for_export(
                plain_statistics=False,
                float16_weights=quantization == "float16",
            ),
        ):
            signatures = {
                "encode": tf.function(
                    encode, input_signature=[spec(source)], autograph=False
                ).get_concrete_function(),
                "decode_step": tf.function(
                    decode_step,
                    input_signature=[
                        spec("cross_cache", cache_dtype),
                        spec("self_cache", cache_dtype),
                        spec("previous_notes"),
                        spec("index", "int32"),
                    ],
                    autograph=False,
                ).get_concrete_function(),
            }
        tf.saved_model.save(module, saved_model, signatures=signatures)
        converter = tf.lite.TFLiteConverter.from_saved_model(
            saved_model, signature_keys=["encode", "decode_step"]
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantization is not None:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantization == "float16":
            converter.target_spec.supported_types = [tf.float16]
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings(
                    "ignore",
                    message=r"(?s).*tf\.lite\.Interpreter is deprecated",
                )
                return converter.convert()
        except ConverterError as error:
            _raise_unsupported(error, model)


# ----------------------------------------------------------------------
# Conversion under another backend: a TensorFlow subprocess.
# ----------------------------------------------------------------------

_CHILD = (
    "import sys; from cvattn_keras.export.generator import _main; "
    "sys.exit(_main(sys.argv[1:]))"
)


def _convert_in_subprocess(model, quantization, self_cache, source_frames):
    """The file with both signatures, converted from a saved copy of
    `model` by `_main` in a TensorFlow subprocess."""

    def arguments(directory, model_path, output, error_file):
        command = [
            "-c",
            _CHILD,
            model_path,
            output,
            "--batch-size",
            str(self_cache[0]),
            "--max-frames",
            str(self_cache[3]),
            "--source-frames",
            str(source_frames),
            "--error-file",
            error_file,
        ]
        if quantization is not None:
            command += ["--quantize", quantization]
        return command

    return convert_saved_copy(
        model,
        arguments,
        "export_generator_tflite",
        "Export under KERAS_BACKEND=tensorflow.",
    )


def _main(argv):
    """The subprocess's entry: load a `.keras` generator and export it."""
    parser = argparse.ArgumentParser(prog="export_generator_tflite")
    parser.add_argument("model")
    parser.add_argument("output")
    parser.add_argument("--quantize", default=None)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--max-frames", type=int, default=None)
    parser.add_argument("--source-frames", type=int, default=None)
    parser.add_argument("--error-file", default=None)
    args = parser.parse_args(argv)

    def record(failure):
        if args.error_file:
            with open(args.error_file, "w") as f:
                json.dump(failure, f)
        print(f"error: {failure.get('message', failure)}", file=sys.stderr)
        return 1

    import cvattn_keras  # noqa: F401  (registers the layers)

    try:
        # Our own file, just written by the parent process.
        model = keras.saving.load_model(args.model, safe_mode=False)
    except Exception as error:
        return record({"kind": "load", "message": str(error)})
    try:
        export_generator_tflite(
            model,
            args.output,
            quantization=args.quantize,
            batch_size=args.batch_size,
            max_frames=args.max_frames,
            source_frames=args.source_frames,
        )
    except UnsupportedOpsError as error:
        return record(
            {
                "kind": "unsupported",
                "ops": error.ops,
                "layers": error.layers,
                "details": error.details,
            }
        )
    except ValueError as error:
        return record({"kind": "value", "message": str(error)})
    except Exception as error:
        return record(
            {"kind": "other", "message": f"{type(error).__name__}: {error}"}
        )
    return 0


# ----------------------------------------------------------------------
# Generation on LiteRT.
# ----------------------------------------------------------------------


# LiteRT interpreters of recently used files, by (path, modification
# time, size, threads): building one and preparing its CPU delegate costs
# more than decoding a short sequence.
_INTERPRETERS = {}
_KEPT_INTERPRETERS = 4


def _runners(path, num_threads):
    """The `encode` and `decode_step` signature runners of `path`."""
    path = _check_path(path)
    _check_tflite_file(path)
    status = os.stat(path)
    key = (os.path.realpath(path), status.st_mtime_ns, status.st_size)
    key += (num_threads,)
    if key in _INTERPRETERS:
        return _INTERPRETERS[key]
    from ai_edge_litert.interpreter import Interpreter

    try:
        interpreter = Interpreter(model_path=path, num_threads=num_threads)
    except (RuntimeError, ValueError) as error:
        raise ValueError(
            f"LiteRT cannot load {path!r} (files of export_generator_tflite "
            f"hold builtin ops only): {error}"
        ) from None
    signatures = interpreter.get_signature_list()
    if not {"encode", "decode_step"} <= set(signatures):
        raise ValueError(
            f"{path!r} has signatures {sorted(signatures)}, not 'encode' "
            "and 'decode_step': give a file written by "
            "export_generator_tflite."
        )
    runners = (
        interpreter.get_signature_runner("encode"),
        interpreter.get_signature_runner("decode_step"),
    )
    while len(_INTERPRETERS) >= _KEPT_INTERPRETERS:
        _INTERPRETERS.pop(next(iter(_INTERPRETERS)))
    _INTERPRETERS[key] = runners
    return runners


def generate_tflite(
    path,
    spectra,
    threshold=0.5,
    steps=None,
    feedback="notes",
    num_threads=None,
):
    """Greedy decoding on the LiteRT interpreter with a file written by
    `export_generator_tflite`: `encode` once, then `decode_step` once per
    frame, feeding back the notes or logits as
    `cvattn_keras.models.generate` does (same arguments, same outputs up
    to float32 rounding).

    Args:
        path: the `.tflite` file.
        spectra: `(B, source_frames, 2 * bins)`, or the waveforms `(B,
            samples)` of a file exported from a model built with `stft=`
            (its `encode` input is then `waveform`), any B: decoded in
            chunks of the file's batch size (the last chunk padded with
            zeros).
        threshold: probability above which a note is on.
        steps: frames to decode, at most the file's `max_frames` (its
            default).
        feedback: `"notes"` (the thresholded notes) or `"logits"` (the raw
            logits) fed back as the next frame's previous notes.
        num_threads: LiteRT CPU threads (`None`: LiteRT's default).

    The interpreters of the last few files (per `num_threads`) are kept,
    so later calls on the same file skip loading it.

    Returns:
        `(notes, logits)`, each `(B, steps, notes)` float32 NumPy arrays.
    """
    if feedback not in models.FEEDBACKS:
        raise ValueError(
            f"`feedback` must be one of {list(models.FEEDBACKS)}. "
            f"Received: feedback={feedback!r}"
        )
    if not 0 < threshold < 1:
        raise ValueError(
            f"`threshold` must be in (0, 1). Received: threshold={threshold}"
        )
    encode, decode = _runners(path, num_threads)
    ((source, detail),) = encode.get_input_details().items()
    spectra_shape = tuple(detail["shape"])
    decode_inputs = decode.get_input_details()
    cache_shape = tuple(decode_inputs["self_cache"]["shape"])
    cache_dtype = decode_inputs["self_cache"]["dtype"]
    notes_shape = tuple(decode_inputs["previous_notes"]["shape"])
    batch, max_frames = spectra_shape[0], cache_shape[3]
    steps = max_frames if steps is None else steps
    if (
        isinstance(steps, bool)
        or not isinstance(steps, (int, np.integer))
        or not 1 <= steps <= max_frames
    ):
        raise ValueError(
            f"`steps` must be an int in [1, {max_frames}] (the file's "
            f"max_frames). Received: steps={steps!r}"
        )
    spectra = np.asarray(keras.ops.convert_to_numpy(spectra), np.float32)
    if (
        spectra.ndim != len(spectra_shape)
        or spectra.shape[1:] != spectra_shape[1:]
        or not len(spectra)
    ):
        wanted = ", ".join(["B"] + [str(d) for d in spectra_shape[1:]])
        raise ValueError(
            f"`spectra` must have shape ({wanted}) with B >= 1 (the file's "
            f"{source!r} input). Received: spectra.shape={spectra.shape}"
        )
    cut = np.log(threshold / (1 - threshold))
    count = len(spectra)
    logits = np.zeros((count, steps, notes_shape[2]), np.float32)
    for start in range(0, count, batch):
        chunk = spectra[start : start + batch]
        size = len(chunk)
        if size < batch:
            pad = np.zeros((batch - size,) + chunk.shape[1:], np.float32)
            chunk = np.concatenate([chunk, pad])
        cross_cache = encode(**{source: chunk})["cross_cache"]
        self_cache = np.zeros(cache_shape, cache_dtype)
        previous = np.zeros(notes_shape, np.float32)
        for index in range(steps):
            out = decode(
                cross_cache=cross_cache,
                self_cache=self_cache,
                previous_notes=previous,
                index=np.array(index, np.int32),
            )
            self_cache, step = out["self_cache"], out["logits"]
            logits[start : start + size, index] = step[:size, 0]
            previous = (
                (step > cut).astype(np.float32) if feedback == "notes" else step
            )
    return (logits > cut).astype(np.float32), logits


def _describe(path):
    """`{signature: {"inputs": {name: (shape, dtype)}, "outputs": ...}}`
    of a generator file (for reports and tests)."""
    encode, decode = _runners(path, None)
    described = {}
    for name, runner in (("encode", encode), ("decode_step", decode)):
        described[name] = {
            kind: {
                key: (
                    tuple(int(d) for d in detail["shape"]),
                    np.dtype(detail["dtype"]).name,
                )
                for key, detail in details.items()
            }
            for kind, details in (
                ("inputs", runner.get_input_details()),
                ("outputs", runner.get_output_details()),
            )
        }
    return described
