"""The exact-lanes self-check's verdicts on disk, so a second process does not redo them.

`exact_lanes.status` compiles each exact vector form and compares it with libm on a few
hundred thousand probes, per entry and process: without the verdict on disk every warm
compile would pay that again. The verdict depends only on what `CheckKey` records: the
generator's own source (the vector code, the probes, the check), the libm data it was built
from, the libm file and the C library it is compared with, the CPU and the feature set the
check compiled for, LLVM and numpy (the probes' generator). One JSON file per key, named by
the key's digest, holds the full key and the verdict; a file that is missing, unreadable,
malformed or for another key reads as no verdict, and the caller runs the check again and
rewrites it. Its directory and format: `CACHE`, its row of `runtime.disk_cache.CACHES`
(beside PyTensor's numba cache, while it is on).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ptnumba_codegen.runtime import disk_cache

CACHE = disk_cache.EXACT_LANES_VERDICTS


@dataclass(frozen=True)
class CheckKey:
    """Everything one self-check's verdict depends on."""

    symbol: str
    lanes: int
    generator: str  # generator version and source digest
    data: str  # digest of the libm data the vector code is built from
    libm: str  # the libm file the check compares with: path and content digest
    libc: str  # the C library's version string
    cpu: str  # the host CPU name the check compiles for
    features: str  # the target features it compiles with, sorted
    toolchain: str  # llvmlite/LLVM and numpy versions

    def digest(self) -> str:
        return disk_cache.key_digest(self)

    def file_name(self) -> str:
        return f"{self.symbol}-{self.lanes}-{self.digest()}"


@dataclass(frozen=True)
class Verdict:
    """A self-check's result: whether the entry is usable, and why."""

    ok: bool
    why: str


def default_directory() -> Path | None:
    """Where verdicts live now (None while PyTensor's numba cache is off)."""
    return CACHE.directory()


def path_for(directory: Path, key: CheckKey) -> Path:
    return CACHE.path(directory, key.file_name())


def load(directory: Path | None, key: CheckKey) -> Verdict | None:
    """The verdict stored for ``key``, or None (no directory, no file, or a file that is
    unreadable, malformed or written for another key)."""
    record = CACHE.load(directory, key.file_name(), dataclasses.asdict(key))
    if record is None:
        return None
    ok, why = record.get("ok"), record.get("why")
    if not isinstance(ok, bool) or not isinstance(why, str):
        return None
    return Verdict(ok, why)


def store(directory: Path | None, key: CheckKey, verdict: Verdict) -> bool:
    """Write ``verdict`` for ``key``; False when it could not be written (the verdict then
    lives in this process only)."""
    return CACHE.store(directory, key.file_name(), dataclasses.asdict(key), ok=verdict.ok, why=verdict.why)


__all__ = ["CACHE", "CheckKey", "Verdict", "default_directory", "load", "path_for", "store"]
