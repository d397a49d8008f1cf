"""Where the generator keeps what it computes once per machine, not once per process.

Four things are worth keeping across processes besides the kernels PyTensor caches (issue
20: a warm process compiled its model 0.5-1 s slower under the policy than stock): the
exact-lanes self-check's verdicts (`lowering.vecmath.check_cache`), the overflow-guard probes' verdicts (`as_written.guard_verdicts`), the split-loop
runtime's object code (`runtime.runtime_cache`) and the libm data the exact lanes and every
kernel's cache key name (`lowering.vecmath.libm_data_cache`). All live beside PyTensor's numba kernel
cache (``NUMBA_CACHE_PATH``), each under its own subdirectory, and only while
``pytensor.config.numba__cache`` is on: turning the kernel cache off turns them off too, and
pointing it elsewhere moves them. Every file is written atomically (a reader sees the old
file or the new one) and every failure to read or write is a miss, never an error.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def directory(subdir: str) -> Path | None:
    """``subdir`` beside PyTensor's numba cache, or None while that cache is off."""
    import pytensor
    import pytensor.link.numba.cache as numba_cache

    if not pytensor.config.numba__cache:
        return None
    return Path(numba_cache.NUMBA_CACHE_PATH) / subdir


def read(path: Path) -> bytes | None:
    """The file's bytes, or None if it cannot be read."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def read_record(directory: Path | None, path_in: Callable[[Path], Path], loads: Callable[[bytes], object],
                fmt: int, key: dict) -> dict | None:
    """The record (a dict with ``format`` and ``key``) stored in ``path_in(directory)``,
    decoded by ``loads``; None when the cache is off, the file is missing or cannot be
    decoded, or was written in another format or for another key."""
    raw = None if directory is None else read(path_in(directory))
    if raw is None:
        return None
    try:
        record = loads(raw)
        if not isinstance(record, dict) or record.get("format") != fmt or record.get("key") != key:
            return None
    except Exception:  # a damaged file is a miss
        return None
    return record


def write(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` atomically (creating its directory); False on failure."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True


def file_digest(path: str) -> str:
    """sha256 of the file at ``path`` (``unreadable: ...`` when it cannot be read); read
    once per process while the file's identity (device, inode, size, mtime) stays."""
    try:
        st = os.stat(path)
    except OSError as err:
        return f"unreadable: {err}"
    return _digest(path, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=64)
def _digest(path: str, identity: tuple) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as err:
        return f"unreadable: {err}"


def digest(text: str) -> str:
    """A short stable name for a key's canonical text."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


__all__ = ["digest", "directory", "file_digest", "read", "write"]
