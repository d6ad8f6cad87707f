"""A streaming `.tflite` file stepped through LiteRT's interpreter tensors,
for `streaming.py` and `speech_enhancement.py`.

`TFLiteStream` (in `cvattn_keras.export`) is what an app uses; the
benchmarks step a file themselves where it cannot (a state of size 0, as a
`ComplexSTFT` whose frames do not overlap keeps, cannot be read back
through LiteRT's signature runner: "Invalid tensor size") and to time
`Invoke` alone, without the Python around it.
"""

import time

import numpy as np


def error_text(error):
    """An exception as one line of at most 300 characters: its type, its
    first line and its last (the converter's last line usually names what
    failed)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(lines) > 1:
        text += " ... " + lines[-1]
    text = f"{type(error).__name__}: {text}"
    return text if len(text) <= 300 else text[:297] + "..."


def to_file(array, detail):
    """`array` in the dtype of the input `detail` (quantized for an integer
    input with a scale)."""
    dtype = np.dtype(detail["dtype"])
    scale, zero_point = detail["quantization"]
    if np.issubdtype(dtype, np.integer) and scale:
        info = np.iinfo(dtype)
        q = np.round(np.asarray(array, "float64") / scale) + zero_point
        return np.clip(q, info.min, info.max).astype(dtype)
    return np.asarray(array).astype(dtype)


def from_file(array, detail):
    """An output of the file as floats (dequantized when it is integer
    with a scale)."""
    scale, zero_point = detail["quantization"]
    if np.issubdtype(array.dtype, np.integer) and scale:
        return (scale * (array.astype("float64") - zero_point)).astype(
            "float32"
        )
    return array


def _ordered(details, names):
    """`details` of `names` in the order of their number (`state_NN_...`,
    `output_N`)."""
    return [
        details[name]
        for name in sorted(names, key=lambda name: int(name.split("_")[1]))
    ]


class Stepper:
    """A streaming file (inputs `chunk` and `state_NN_...`) hop by hop on
    one LiteRT thread, as `TFLiteStream` runs it: `step(chunk)` returns
    the chunk's first output (floats) and keeps the new state; `seconds`
    holds each step's `Invoke`; `state_bytes` is the size of the states
    in the file's dtypes; `reset()` goes back to the zero state."""

    def __init__(self, path):
        from ai_edge_litert.interpreter import Interpreter

        self._interpreter = Interpreter(model_path=path, num_threads=1)
        self._runner = self._interpreter.get_signature_runner()
        inputs = self._runner.get_input_details()
        outputs = self._runner.get_output_details()
        self._wrapper = self._runner._interpreter_wrapper
        self._graph = self._runner._subgraph_index
        self._wrapper.AllocateTensors(self._graph)
        self._chunk = inputs["chunk"]
        self._states = _ordered(inputs, [n for n in inputs if n != "chunk"])
        self._outputs = _ordered(outputs, list(outputs))
        self.state_bytes = sum(
            int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
            for d in self._states
        )
        self.seconds = []
        self.reset()

    def reset(self):
        self.state = [
            np.zeros(d["shape"], "float32")
            if d["quantization"][0] or np.dtype(d["dtype"]).kind == "f"
            else np.zeros(d["shape"], d["dtype"])
            for d in self._states
        ]

    def step(self, chunk):
        wrapper, graph = self._wrapper, self._graph
        wrapper.SetTensor(
            self._chunk["index"], to_file(chunk, self._chunk), graph
        )
        for detail, array in zip(self._states, self.state):
            if array.size:  # LiteRT refuses to set an empty tensor
                wrapper.SetTensor(
                    detail["index"], to_file(array, detail), graph
                )
        start = time.perf_counter()
        wrapper.Invoke(graph)
        self.seconds.append(time.perf_counter() - start)
        results = [
            from_file(wrapper.GetTensor(d["index"], graph), d)
            if np.prod(d["shape"])
            else np.zeros(d["shape"], "float32")
            for d in self._outputs
        ]
        count = len(results) - len(self.state)
        self.state = results[count:]
        return results[0]
