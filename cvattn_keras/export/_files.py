"""Output files, written as `open(path, "wb")` would write them, but whole
or not at all.

Every file that `cvattn_keras.export` writes (`export_tflite`,
`export_generator_tflite`, `python -m cvattn_keras.export`) goes through
`check_output` (before any conversion: the errors come first and fast) and
`write_atomically` (after it), which keep `open()`'s semantics:

- a new file gets the mode `0o666 & ~umask` (0644 under umask 022), as
  `open()` creates it (a directory's default ACL applies as it would);
- an existing file keeps its mode (and its group where the process may
  set it);
- a symbolic link is written through: its target is replaced, the link
  stays a link (a dangling link's target is created, as `open()` would);
- a missing directory is an error, as for `open()` (and `model.save`):
  no directory is created.

The data goes to a temporary file next to the target (`.NAME.XXXX.partial`,
removed on any failure), which then replaces the target in one rename, so
a reader never sees a partial file. (A rename gives the target a new
inode: hard links to the old file keep the old data, as with any atomic
writer.)
"""

import os
import secrets
import stat


class OutputExistsError(FileExistsError, ValueError):
    """The output file exists and `overwrite=False` (a `FileExistsError`
    and, as every bad argument of this library, a `ValueError`)."""


class OutputPathError(OSError, ValueError):
    """The output path cannot be written: its directory is missing, is not
    a directory or is not writable (an `OSError` and, as every bad argument
    of this library, a `ValueError`)."""


def check_path(path, argument="path", suffix=".tflite"):
    """`path` as a `str`, or a `ValueError` unless it is a file path
    ending in `suffix`."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(
            f"`{argument}` must be a file path ending in {suffix!r}. "
            f"Received: {argument}={path!r}"
        )
    path = os.fspath(path)
    if not isinstance(path, str) or not path.endswith(suffix):
        raise ValueError(
            f"`{argument}` must end in {suffix!r}. Received: "
            f"{argument}={path!r}"
        )
    return path


def check_output(path, overwrite, argument="path", suffix=".tflite"):
    """Checks an output path as `open(path, "wb")` would, before any work:
    returns `path` as a `str`.

    Raises:
        ValueError: `path` is not a path ending in `suffix`, or `overwrite`
            is not a bool.
        OutputPathError: `path` (or a symbolic link's target) is a
            directory or another non-regular file, or its directory is
            missing, not a directory, or not writable.
        OutputExistsError: the file exists and `overwrite` is False.
    """
    path = check_path(path, argument, suffix)
    if not isinstance(overwrite, bool):
        raise ValueError(
            f"`overwrite` must be True or False. Received: "
            f"overwrite={overwrite!r}"
        )
    target = os.path.realpath(path)
    through = (
        f" (a symbolic link to {target!r})" if os.path.islink(path) else ""
    )
    if os.path.isdir(target):
        raise OutputPathError(
            f"`{argument}` is a directory{through}; give the {suffix} file "
            f"to write. Received: {argument}={path!r}"
        )
    if os.path.exists(target) and not os.path.isfile(target):
        raise OutputPathError(
            f"`{argument}`{through} exists and is not a regular file (a "
            f"device, a pipe or a socket), which this writer would replace. "
            f"Received: {argument}={path!r}"
        )
    directory = os.path.dirname(target)
    if not os.path.exists(directory):
        raise OutputPathError(
            f"The directory {directory!r} of `{argument}`{through} does not "
            f"exist; create it first. Received: {argument}={path!r}"
        )
    if not os.path.isdir(directory):
        raise OutputPathError(
            f"{directory!r}, the directory of `{argument}`{through}, is not "
            f"a directory. Received: {argument}={path!r}"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputPathError(
            f"The directory {directory!r} of `{argument}`{through} is not "
            f"writable. Received: {argument}={path!r}"
        )
    if os.path.exists(target) and not overwrite:
        raise OutputExistsError(
            f"{path!r} already exists and `overwrite=False`: it was kept. "
            "Pass overwrite=True to replace it."
        )
    return path


def _temporary(directory, name, mode, suffix=""):
    """A new file `.NAME.XXXXXXXX.partial` (and `suffix`) in `directory`,
    opened for writing with `mode` (less the umask): `(descriptor,
    path)`."""
    for _ in range(100):
        candidate = os.path.join(
            directory, f".{name}.{secrets.token_hex(4)}.partial{suffix}"
        )
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        flags |= getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
        try:
            return os.open(candidate, flags, mode), candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary file name in {directory!r}")


def _existing(path, target, overwrite):
    """The `os.stat` of `target` (what `path` names), or `None` if there
    is none; raises if it may not be replaced."""
    try:
        existing = os.stat(target)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(existing.st_mode):
        raise OutputPathError(
            f"{path!r} exists and is not a regular file; it was kept."
        )
    if not overwrite:
        raise OutputExistsError(
            f"{path!r} already exists and `overwrite=False`: it was kept. "
            "Pass overwrite=True to replace it."
        )
    return existing


def _commit(temporary, target, path, existing, overwrite):
    """Gives the complete file `temporary` the mode (and group) of the
    `existing` target, if any, and renames it over `target`."""
    if existing is not None:
        try:  # the group (the owner only where the process may)
            os.chown(temporary, existing.st_uid, existing.st_gid)
        except OSError:
            try:
                os.chown(temporary, -1, existing.st_gid)
            except OSError:
                pass
        os.chmod(temporary, stat.S_IMODE(existing.st_mode))
    if overwrite:
        os.replace(temporary, target)
        return
    try:
        # Fails if the target appeared meanwhile: no race.
        os.link(temporary, target)
    except FileExistsError:
        raise OutputExistsError(
            f"{path!r} already exists and `overwrite=False`: it was kept. "
            "Pass overwrite=True to replace it."
        ) from None
    except OSError:  # a file system without hard links
        if os.path.exists(target):
            raise OutputExistsError(
                f"{path!r} already exists and `overwrite=False`: it was "
                "kept. Pass overwrite=True to replace it."
            ) from None
        os.replace(temporary, target)


def write_atomically(path, data, overwrite=True):
    """Writes the bytes `data` to `path` whole or not at all, with the
    semantics of `open(path, "wb")` (see this module's docstring): the
    mode of a new file from the umask, an existing file's mode kept, a
    symbolic link written through to its target.

    With `overwrite=False` an existing target is never replaced (checked
    atomically where the file system has hard links), and
    `OutputExistsError` is raised.
    """
    target = os.path.realpath(path)
    existing = _existing(path, target, overwrite)
    # A new file: 0o666 less the umask, applied by the kernel, as open()
    # does. An existing one: private until its own mode is set.
    handle, temporary = _temporary(
        *os.path.split(target), 0o666 if existing is None else 0o600
    )
    try:
        with os.fdopen(handle, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        _commit(temporary, target, path, existing, overwrite)
    finally:
        if os.path.lexists(temporary):
            os.remove(temporary)


def reserve_temporary(path, suffix):
    """A new empty file `.NAME.XXXXXXXX.partial` + `suffix` next to what
    `path` names (in the directory of `os.path.realpath(path)`), created
    as `open()` creates a file (its mode from the umask): a writer fills
    it, and `replace_with` renames it over `path` once it is complete and
    checked. Its path is returned; the caller removes it on failure."""
    handle, temporary = _temporary(
        *os.path.split(os.path.realpath(path)), 0o666, suffix
    )
    os.close(handle)
    return temporary


def replace_with(temporary, path, overwrite=True):
    """Renames the complete file `temporary` over what `path` names, as
    `write_atomically` does (an existing file's mode and group kept, a
    symbolic link written through), for writers that produce a file
    themselves (`model.save`): `temporary` must be in the directory of
    `os.path.realpath(path)` and was created by `open()` (its mode from
    the umask). On failure `temporary` is left to the caller.
    """
    target = os.path.realpath(path)
    existing = _existing(path, target, overwrite)
    _commit(temporary, target, path, existing, overwrite)
