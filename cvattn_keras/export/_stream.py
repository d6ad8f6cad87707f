"""`TFLiteStream`: a streaming `.tflite` file (exported from
`cvattn_keras.streaming.to_streaming`) run hop by hop on LiteRT, the state
carried between calls as a device app carries it."""

import re

import numpy as np

from cvattn_keras.export._arguments import _check_path
from cvattn_keras.export._arguments import _check_positive
from cvattn_keras.export._litert import _dequantize
from cvattn_keras.export._litert import _ordered_outputs
from cvattn_keras.export._litert import _quantization
from cvattn_keras.export._litert import _quantize
from cvattn_keras.export._litert import _runner
from cvattn_keras.export._reading import _check_tflite_file
from cvattn_keras.streaming import _stack_steps

_STATE = re.compile(r"state_(\d+)_.*")


def _as_carried(array):
    """Float outputs as float32 (dequantized ones come as float64),
    integer ones (the frame counter) as they are."""
    array = np.asarray(array)
    return array.astype("float32") if array.dtype.kind == "f" else array


class TFLiteStream:
    """Runs a streaming `.tflite` file one chunk at a time on LiteRT.

    The file's inputs are `chunk` and the states `state_NN_...` (as
    `to_streaming` names them), its outputs `output_0, ...`: the frame's
    outputs, then the new states in the inputs' order. `step` feeds a
    chunk with the state the step before returned and keeps the new one;
    in an integer file (`full_int8`, `int16x8`) each state is dequantized
    as it comes out and quantized with the input's scale as it goes back
    in (what an app does with two tensors of different scales).

    Args:
        path: the streaming `.tflite` file.
        batch_size: the number of parallel streams, for a file with a
            dynamic batch (`None`: the file's static batch, or 1).
        num_threads: LiteRT CPU threads (`None`: LiteRT's default).

    Example:
        ```python
        stream = cvattn_keras.streaming.to_streaming(model)
        export_tflite(stream, "stream.tflite", batch_size=1)
        runner = TFLiteStream("stream.tflite")
        for hop in microphone_hops():          # (1, frame_step) each
            notes = runner.step(hop)           # (1, 1, notes)
        ```
    """

    def __init__(self, path, batch_size=None, num_threads=None):
        self.path = _check_path(path)
        _check_tflite_file(self.path)
        batch_size = _check_positive(batch_size, "batch_size")
        self._runner = _runner(self.path, num_threads)
        details = self._runner.get_input_details()
        states = sorted(
            (int(m.group(1)), name)
            for name in details
            if (m := _STATE.fullmatch(name))
        )
        if "chunk" not in details or len(states) != len(details) - 1:
            raise ValueError(
                f"{self.path!r} is not a streaming file: its inputs are "
                f"{sorted(details)}, not 'chunk' and 'state_NN_...' (export "
                "`cvattn_keras.streaming.to_streaming(model)`)."
            )
        self._details = details
        self._states = [name for _, name in states]
        static = int(details["chunk"]["shape_signature"][0])
        if static > 0 and batch_size not in (None, static):
            raise ValueError(
                f"{self.path!r} has a static batch of {static}; "
                f"`batch_size` must be None or {static}. Received: "
                f"batch_size={batch_size}"
            )
        self.batch_size = static if static > 0 else (batch_size or 1)
        self.chunk_shape = (self.batch_size,) + tuple(
            int(d) for d in details["chunk"]["shape"][1:]
        )
        self.reset()

    def reset(self):
        """Back to the zero state (a new stream)."""
        self.state = []
        for name in self._states:
            detail = self._details[name]
            dtype = np.dtype(detail["dtype"])
            if _quantization(detail) is not None or dtype.kind == "f":
                dtype = np.dtype("float32")  # carried as floats
            shape = tuple(int(d) for d in detail["shape"][1:])
            self.state.append(np.zeros((self.batch_size,) + shape, dtype))

    def _input(self, name, array):
        detail = self._details[name]
        if _quantization(detail) is not None and np.issubdtype(
            np.dtype(detail["dtype"]), np.integer
        ):
            return _quantize(array, detail)
        return array.astype(detail["dtype"])

    def step(self, chunk):
        """The outputs of one chunk (`chunk_shape`): one array, or a list
        for a model with several outputs, as floats."""
        chunk = np.asarray(chunk, "float32")
        if chunk.shape != self.chunk_shape:
            raise ValueError(
                f"A chunk of {self.path!r} has shape {self.chunk_shape} "
                f"(batch {self.batch_size}). Received: chunk.shape="
                f"{chunk.shape}"
            )
        if len(self.state) != len(self._states):
            raise ValueError(
                f"{self.path!r} carries {len(self._states)} state arrays "
                f"({self._states}). Received: {len(self.state)}"
            )
        feed = {"chunk": self._input("chunk", chunk)}
        for name, array in zip(self._states, self.state):
            want = (self.batch_size,) + tuple(
                int(d) for d in self._details[name]["shape"][1:]
            )
            if np.shape(array) != want:
                raise ValueError(
                    f"State {name!r} of {self.path!r} has shape {want}. "
                    f"Received: an array of shape {np.shape(array)} (is "
                    "`state` in the file's input order?)"
                )
            feed[name] = self._input(name, np.asarray(array))
        results = self._runner(**feed)
        details = self._runner.get_output_details()
        outputs = _ordered_outputs(
            {
                name: _as_carried(_dequantize(value, details[name]))
                for name, value in results.items()
            }
        )
        count = len(outputs) - len(self.state)
        self.state = outputs[count:]
        return outputs[0] if count == 1 else outputs[:count]

    def run(self, chunks):
        """`step` over `chunks` `(steps, *chunk_shape)`, outputs stacked
        on axis 1 (a frame's `(B, 1, ...)` squeezed first), as
        `cvattn_keras.streaming.run_stream`."""
        steps = []
        for chunk in chunks:
            out = self.step(chunk)
            steps.append(out if isinstance(out, list) else [out])
        stacked = _stack_steps(steps)
        return stacked[0] if len(stacked) == 1 else stacked
