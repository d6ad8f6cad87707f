"""Round-robin timing for `attention_speed.py`.

Candidates of one group are zero-argument callables; they are timed in
interleaved rounds so that load which comes and goes hits them alike, and a
ratio of two candidates is the median over rounds of the ratio of their
times in the same round.
"""

import statistics
import time


def time_round_robin(functions, repeats, warmup=2):
    """Median seconds per call of each function, timed in interleaved
    rounds (rotating the order) so that load changes hit all alike.

    Returns {name: dict(median, iqr, first, samples)}, `first` being the
    first call (tracing and compilation included) and `samples` the time of
    each round."""
    first = {}
    for name, function in functions.items():
        start = time.perf_counter()
        block(function())
        first[name] = time.perf_counter() - start
        for _ in range(warmup):
            block(function())
    times = {name: [] for name in functions}
    names = list(functions)
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            block(functions[name]())
            times[name].append(time.perf_counter() - start)
    result = {}
    for name, samples in times.items():
        quartiles = statistics.quantiles(samples, n=4) if repeats > 1 else []
        result[name] = dict(
            median=statistics.median(samples),
            iqr=(quartiles[2] - quartiles[0]) if quartiles else 0.0,
            first=first[name],
            samples=samples,
        )
    return result


def ratio(timed, numerator, denominator):
    """The median over rounds of the time ratio of two functions timed in
    the same round: robust to load that changes between rounds."""
    pairs = zip(timed[numerator]["samples"], timed[denominator]["samples"])
    return statistics.median(a / b for a, b in pairs)


def block(outputs):
    """Waits for the outputs: reads one element of every tensor (TensorFlow
    runs ops asynchronously only on accelerators, but the read makes the
    wait explicit). `None` (a candidate that already waited, such as the
    PyTorch reference on CPU) is skipped."""
    if outputs is None:
        return
    if isinstance(outputs, (list, tuple)):
        for output in outputs:
            block(output)
    elif isinstance(outputs, dict):
        for output in outputs.values():
            block(output)
    else:
        outputs.numpy().flat[0]
