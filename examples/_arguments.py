"""The checks the examples' command lines share, as argparse `type=`
callables: a bad value is refused while the command line is parsed, before
any work, as one `prog: error: argument --flag: ... Received: 'value'` line
after the usage, exit status 2.

An example imports it from its own folder (run as a script, that folder is
already on `sys.path`; loaded with `runpy`, as the tests do, it is added):

    sys.path.append(os.path.dirname(os.path.abspath(__file__)))
    import _arguments as arguments

    parser.add_argument("--epochs", type=arguments.positive_int)
    parser.add_argument("--learning-rate", type=arguments.positive_float)
    parser.add_argument("--out", type=arguments.output_folder)

Standard library only: it is imported before anything heavy is used.
"""

import argparse
import math
import os


def _refuse(requirement, text):
    return argparse.ArgumentTypeError(f"{requirement}. Received: {text!r}")


def int_at_least(minimum, why=None):
    """A type for ints `>= minimum` (`why`, if given, says why in the
    message)."""
    requirement = f"must be an int >= {minimum}" + (f" ({why})" if why else "")

    def check(text):
        try:
            value = int(text)
        except ValueError:
            raise _refuse(requirement, text) from None
        if value < minimum:
            raise _refuse(requirement, text)
        return value

    check.__name__ = f"int_at_least_{minimum}"
    return check


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def ints_at_least(minimum, why=None):
    """A type for a comma-separated tuple of ints, each `>= minimum`."""
    one = int_at_least(minimum)
    requirement = f"must be comma-separated ints >= {minimum}"
    requirement += f" ({why})" if why else ""

    def check(text):
        try:
            return tuple(one(part) for part in text.split(","))
        except argparse.ArgumentTypeError:
            raise _refuse(requirement, text) from None

    check.__name__ = f"ints_at_least_{minimum}"
    return check


def _bound(value):
    return f"{value:g}" if isinstance(value, float) else str(value)


def float_in(low=None, high=None, low_open=False, high_open=False, why=None):
    """A type for finite numbers within `low` and `high` (either may be
    None: no bound), each bound included unless `*_open` (NaN and the
    infinities are always refused)."""
    if low is not None and high is not None:
        left, right = "(" if low_open else "[", ")" if high_open else "]"
        where = f"in {left}{_bound(low)}, {_bound(high)}{right}"
    elif low is not None:
        where = f"{'>' if low_open else '>='} {_bound(low)}"
    elif high is not None:
        where = f"{'<' if high_open else '<='} {_bound(high)}"
    else:
        where = ""
    requirement = f"must be a finite number {where}".rstrip()
    requirement += f" ({why})" if why else ""

    def check(text):
        try:
            value = float(text)
        except ValueError:
            raise _refuse(requirement, text) from None
        inside = math.isfinite(value)
        if inside and low is not None:
            inside = value > low if low_open else value >= low
        if inside and high is not None:
            inside = value < high if high_open else value <= high
        if not inside:
            raise _refuse(requirement, text)
        return value

    check.__name__ = "float_in"
    return check


positive_float = float_in(0, low_open=True)
non_negative_float = float_in(0)
fraction = float_in(0, 1, low_open=True, high_open=True)


def names(allowed, words=None):
    """A type for a comma-separated list of names from `allowed` (in the
    order given, each once); `words` maps whole texts to lists (e.g.
    `{"none": []}`)."""
    allowed, words = list(allowed), dict(words or {})
    requirement = f"must list names from {', '.join(allowed)}"
    requirement += "".join(f" or be {w!r}" for w in words)

    def check(text):
        if text in words:
            return list(words[text])
        chosen = [n.strip() for n in text.split(",") if n.strip()]
        if not chosen or any(n not in allowed for n in chosen):
            raise _refuse(requirement, text)
        return list(dict.fromkeys(chosen))

    check.__name__ = "names"
    return check


def folder_problem(path):
    """Why `path` cannot be a folder to write into, or None: it is a file,
    it lies under a file, or the folder it would be made in is not
    writable (nothing is made here)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{probe} is a file, not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def output_folder(text):
    """A type for a folder to write into: one that exists or can be made
    (`folder_problem`)."""
    problem = folder_problem(text)
    if problem:
        raise _refuse(problem, text)
    return text


def checked_by(function):
    """A type from a library check: `function(text)`, its `ValueError`
    (which names the argument and the value) refused as it is."""

    def check(text):
        try:
            return function(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    check.__name__ = getattr(function, "__name__", "checked_by")
    return check
