"""The exact-lanes self-check's verdicts on disk, so a second process does not redo them.

`exact_lanes.status` compiles each exact vector form and compares it with libm on a few
hundred thousand probes: 0.3 to 0.8 s per process (issue 20: a warm compile paid it every
time). The verdict depends only on what `CheckKey` records: the generator's own source (the
vector code, the probes, the check), the libm data it was built from, the libm file and the
C library it is compared with, the CPU and the feature set the check compiled for, LLVM and
numpy (the probes' generator). One JSON file per key, named by the key's digest, holds the
full key and the verdict; a file that is missing, unreadable, malformed or for another key
reads as no verdict, and the caller runs the check again and rewrites it.

The files live next to PyTensor's numba kernel cache (``NUMBA_CACHE_PATH``, under
`SUBDIR`), and only while ``pytensor.config.numba__cache`` is on: turning the kernel cache
off turns this one off too, and pointing it elsewhere moves both.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

FORMAT = 1  # bump when the file layout changes
SUBDIR = "ptnumba_codegen_exact_lanes"


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
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Verdict:
    """A self-check's result: whether the entry is usable, and why."""

    ok: bool
    why: str


def file_digest(path: str) -> str:
    """sha256 of the file at ``path`` (``unreadable: ...`` when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as err:
        return f"unreadable: {err}"


def default_directory() -> Path | None:
    """Where verdicts live now: beside PyTensor's numba cache, None while it is off."""
    import pytensor
    import pytensor.link.numba.cache as numba_cache

    if not pytensor.config.numba__cache:
        return None
    return Path(numba_cache.NUMBA_CACHE_PATH) / SUBDIR


def path_for(directory: Path, key: CheckKey) -> Path:
    return directory / f"{key.symbol}-{key.lanes}-{key.digest()}.json"


def load(directory: Path | None, key: CheckKey) -> Verdict | None:
    """The verdict stored for ``key``, or None (no directory, no file, or a file that is
    unreadable, malformed or written for another key)."""
    if directory is None:
        return None
    try:
        record = json.loads(path_for(directory, key).read_text())
        if record["format"] != FORMAT or record["key"] != dataclasses.asdict(key):
            return None
        ok, why = record["ok"], record["why"]
        if not isinstance(ok, bool) or not isinstance(why, str):
            return None
        return Verdict(ok, why)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store(directory: Path | None, key: CheckKey, verdict: Verdict) -> bool:
    """Write ``verdict`` for ``key`` (atomically: a reader sees the old file or the new one);
    False when it could not be written (the verdict then lives in this process only)."""
    if directory is None:
        return False
    record = {"format": FORMAT, "key": dataclasses.asdict(key), "ok": verdict.ok, "why": verdict.why}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(record, f, sort_keys=True)
            os.replace(tmp, path_for(directory, key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True


__all__ = ["FORMAT", "SUBDIR", "CheckKey", "Verdict", "default_directory", "file_digest", "load", "path_for", "store"]
