"""Where the generator keeps what it computes once per machine, not once per process.

Five things are worth keeping across processes besides the kernels PyTensor caches (a warm
process would otherwise pay for them at every compile where stock pays nothing). `CACHES`
names every one: its directory, its file format and what one file holds, and the module
that keeps it; each of those modules reads and writes through its row (`DiskCache`).

======================================  ======  ======  ==========================================  ===================================
directory                               format  coding  one file holds, keyed by                    kept by
======================================  ======  ======  ==========================================  ===================================
``ptnumba_codegen_exact_lanes``         1       json    an exact-lanes self-check's verdict, by     `lowering.vecmath.check_cache`
                                                        `check_cache.CheckKey`
``ptnumba_codegen_libm_data``           1       pickle  the libm data found for one table, by       `lowering.vecmath.libm_data_cache`
                                                        `libm_data_cache.DataKey`
``ptnumba_codegen_runtime``             1       pickle  the thread-chunk runtime's object code, by  `runtime.runtime_cache`
                                                        `runtime_cache.RuntimeKey`
``ptnumba_codegen_guard_verdicts``      2       pickle  an overflow-guard probe's "nothing to       `as_written.guard_verdicts`
                                                        guard", by the cone's full text
``ptnumba_codegen_rewritten_graphs``    2       pickle  a function's rewritten graph, by the        `passes.rewritten_graphs`
                                                        given graph's and the rewrites' full text
======================================  ======  ======  ==========================================  ===================================

All live beside PyTensor's numba kernel cache (``NUMBA_CACHE_PATH``), each under its own
directory, and only while ``pytensor.config.numba__cache`` is on: turning the kernel cache
off turns them off too, and pointing it elsewhere moves them. A file is a record: a dict
with the cache's ``format``, the full ``key`` it was written for (compared on read: a
digest collision is a miss) and the row's own fields. Every file is written atomically (a
reader sees the old file or the new one) and every failure to read or write is a miss,
never an error. Bump a row's format when its record's layout or its key's spelling changes.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
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


def key_digest(key) -> str:
    """A short stable name for a key record (a dataclass of plain fields)."""
    return digest(json.dumps(dataclasses.asdict(key), sort_keys=True))


@dataclass(frozen=True)
class Coding:
    """How a cache's records are stored: the files' suffix, the encoder, the decoder."""

    suffix: str
    dumps: Callable[[dict], bytes]
    loads: Callable[[bytes], object]


CODINGS = {
    "json": Coding(".json", lambda record: json.dumps(record, sort_keys=True).encode(), json.loads),
    "pickle": Coding(".pkl", lambda record: pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL), pickle.loads),
}


@dataclass(frozen=True)
class DiskCache:
    """One row of `CACHES`: a kind of record kept across processes (see the module doc)."""

    subdir: str
    format: int
    coding: str  # a key of `CODINGS`
    holds: str
    kept_by: str

    def directory(self) -> Path | None:
        """Where its files live now (None while PyTensor's numba cache is off)."""
        return directory(self.subdir)

    def path(self, directory: Path, name: str) -> Path:
        """The file of the record named ``name`` (a key's digest, with a readable prefix)."""
        return directory / f"{name}{CODINGS[self.coding].suffix}"

    def record(self, key: dict, **fields) -> dict:
        return {"format": self.format, "key": key, **fields}

    def load(self, directory: Path | None, name: str, key: dict) -> dict | None:
        """The record ``name`` written for ``key`` (see `read_record`), or None."""
        return read_record(directory, lambda d: self.path(d, name), CODINGS[self.coding].loads, self.format, key)

    def store(self, directory: Path | None, name: str, key: dict, **fields) -> bool:
        """Write the record ``name`` for ``key`` with ``fields``; False when it was not written."""
        if directory is None:
            return False
        return self.write(directory, name, CODINGS[self.coding].dumps(self.record(key, **fields)))

    def write(self, directory: Path, name: str, data: bytes) -> bool:
        """Write a record its keeper encoded itself (`passes.rewritten_graphs`: its own pickler)."""
        return write(self.path(directory, name), data)


EXACT_LANES_VERDICTS = DiskCache("ptnumba_codegen_exact_lanes", 1, "json", "an exact-lanes self-check's verdict",
                                 "lowering.vecmath.check_cache")
LIBM_DATA = DiskCache("ptnumba_codegen_libm_data", 1, "pickle", "the libm data found for one table",
                      "lowering.vecmath.libm_data_cache")
CHUNK_RUNTIME = DiskCache("ptnumba_codegen_runtime", 1, "pickle", "the thread-chunk runtime's object code",
                          "runtime.runtime_cache")
GUARD_VERDICTS = DiskCache("ptnumba_codegen_guard_verdicts", 2, "pickle", "an overflow-guard probe's verdict",
                           "as_written.guard_verdicts")
REWRITTEN_GRAPHS = DiskCache("ptnumba_codegen_rewritten_graphs", 2, "pickle", "a function's rewritten graph",
                             "passes.rewritten_graphs")
CACHES: tuple[DiskCache, ...] = (EXACT_LANES_VERDICTS, LIBM_DATA, CHUNK_RUNTIME, GUARD_VERDICTS, REWRITTEN_GRAPHS)


__all__ = ["CACHES", "CHUNK_RUNTIME", "CODINGS", "EXACT_LANES_VERDICTS", "GUARD_VERDICTS", "LIBM_DATA", "REWRITTEN_GRAPHS",
           "Coding", "DiskCache", "digest", "directory", "file_digest", "key_digest", "read", "read_record", "write"]
