"""The on-disk cache of `datasets.score_music`: atomic `.npz` writes and
checksummed reads (a damaged file reads as missing, and is rebuilt)."""

import hashlib
import os
import tempfile
import zlib

import numpy as np

FORMAT_VERSION = 1


def _cache_root(cache_dir):
    if cache_dir is None:
        cache_dir = os.environ.get("CVATTN_KERAS_CACHE") or os.path.join(
            os.path.expanduser("~"), ".cache", "cvattn_keras"
        )
    try:
        cache_dir = os.fspath(cache_dir)
    except TypeError:
        raise ValueError(
            "`cache_dir` must be a path or None. Received: "
            f"cache_dir={cache_dir!r}"
        ) from None
    return os.path.join(cache_dir, "score_music")


def _write_atomic(path, arrays):
    """`np.savez` to a temporary file beside `path`, then renamed."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    handle, temporary = tempfile.mkstemp(
        dir=os.path.dirname(path), suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as file:
            np.savez(file, **arrays)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def _checksum(arrays):
    digest = hashlib.sha256()
    for name in sorted(arrays):
        if name != "checksum":
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    return digest.hexdigest()


def _read_cache(path):
    """The arrays of a cache file, or None when it is missing, unreadable or
    fails its checksum (then it is rebuilt)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zlib.error, KeyError):
        return None
    except Exception:  # a damaged zip: zipfile.BadZipFile and the like
        return None
    if str(arrays.get("checksum")) != _checksum(arrays):
        return None
    return arrays
