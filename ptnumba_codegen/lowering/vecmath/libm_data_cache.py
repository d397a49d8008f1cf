"""The libm data `libm_data` finds, on disk, so a second process does not search for it.

Every process under the policy needs the libm constants and tables of ``exp``, ``log`` and
``pow`` (`libm_data.glibc_exp_data` and friends): the kernels' cache keys name them
(`exact_lanes.cache_key`) and the self-check's key hashes them. Finding them scans the
mapped libm file for tables of the right shape, per function, in every process: without
the result on disk a warm compile pays what stock does not. What is found depends only on
what `DataKey` records: which table, the libm file (path and content digest), the
generator's own source (the search) and numpy (the scan). One pickle per key, named by the
key's digest, holds the full key and the result (the found record, or the reason it was
not found); a missing, unreadable, malformed or foreign file, or one holding another type,
is a miss: the caller searches and rewrites it. Its directory and format: `CACHE`, its row
of `runtime.disk_cache.CACHES` (beside PyTensor's numba cache, while it is on).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptnumba_codegen import _version
from ptnumba_codegen.runtime import disk_cache

CACHE = disk_cache.LIBM_DATA


@dataclass(frozen=True)
class DataKey:
    """Everything one search's result depends on."""

    table: str  # "exp", "log", "pow"
    generator: str  # generator version and source digest
    libm: str  # the libm file searched: path and content digest
    numpy: str  # numpy's version (the scan)

    def digest(self) -> str:
        return disk_cache.key_digest(self)

    def file_name(self) -> str:
        return f"{self.table}-{self.digest()}"


def data_key(table: str, path: str) -> DataKey:
    return DataKey(table, f"{_version.GENERATOR_VERSION}:{_version.GENERATOR_DIGEST}", f"{path}:{disk_cache.file_digest(path)}", np.__version__)


def path_for(directory: Path, key: DataKey) -> Path:
    return CACHE.path(directory, key.file_name())


def load(directory: Path | None, key: DataKey, kind: type):
    """The result stored for ``key`` (a ``kind`` or a reason string), or None on any miss."""
    record = CACHE.load(directory, key.file_name(), dataclasses.asdict(key))
    if record is None:
        return None
    data = record.get("data")
    return data if isinstance(data, kind | str) else None


def store(directory: Path | None, key: DataKey, data) -> bool:
    """Write ``data`` for ``key``; False when it could not be written."""
    return CACHE.store(directory, key.file_name(), dataclasses.asdict(key), data=data)


def found(table: str, path: str, kind: type, search: Callable[[str], object]):
    """``search(path)``'s result for ``table``, read from disk when an earlier process
    stored it (and stored now otherwise)."""
    directory = CACHE.directory()
    if directory is None:
        return search(path)
    key = data_key(table, path)
    data = load(directory, key, kind)
    if data is None:
        data = search(path)
        store(directory, key, data)
    return data


__all__ = ["CACHE", "DataKey", "data_key", "found", "load", "path_for", "store"]
