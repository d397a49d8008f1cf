"""The split-loop runtime's object code on disk, so a second process does not compile it.

`threads.ensure_threading` builds one LLVM module per process (the chunk trampoline, the
call-time decision, the BLAS callback) and compiles it: without its object code on disk
every warm compile that has a loop which may split would pay that again. Its machine code
depends only on what `RuntimeKey` records: the generator's source, whether the BLAS callback
is in it, the CPU and features numba compiles for, numba and llvmlite/LLVM. The library is
stored as numba stores its own cached functions (`serialize_using_object_code`: object code
plus the bitcode other modules link against) and loaded with
``codegen.unserialize_library``; its external symbols (numba's ``numba_parallel_for``, the
gate, libgomp's ``omp_in_parallel``) are resolved when it is loaded, in this process, as for
a fresh compile. A file that is missing, unreadable, malformed or for another key is a miss:
the caller compiles and rewrites it. Its directory and format: `CACHE`, its row of
`disk_cache.CACHES`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ptnumba_codegen.runtime import disk_cache

CACHE = disk_cache.CHUNK_RUNTIME


@dataclass(frozen=True)
class RuntimeKey:
    """Everything the runtime library's machine code depends on."""

    generator: str  # generator version and source digest
    with_blas: bool  # the BLAS callback is part of it
    cpu: str  # numba's target CPU
    features: str  # numba's target features
    toolchain: str  # numba, llvmlite and LLVM versions

    def digest(self) -> str:
        return disk_cache.key_digest(self)

    def file_name(self) -> str:
        return f"runtime-{self.digest()}"


def runtime_key(generator: str, with_blas: bool) -> RuntimeKey:
    """The key of this process's runtime (numba's own target CPU and features)."""
    import llvmlite
    import numba
    from llvmlite import binding as llvm
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features

    cpu = config.CPU_NAME or llvm.get_host_cpu_name()
    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else get_host_cpu_features()
    return RuntimeKey(
        generator=generator,
        with_blas=with_blas,
        cpu=cpu,
        features=",".join(sorted(features.split(","))),
        toolchain=f"numba {numba.__version__}, llvmlite {llvmlite.__version__}, LLVM {llvm.llvm_version_info}",
    )


def path_for(directory: Path, key: RuntimeKey) -> Path:
    return CACHE.path(directory, key.file_name())


def load(directory: Path | None, key: RuntimeKey, codegen):
    """The library stored for ``key``, loaded into ``codegen``; None on any miss."""
    record = CACHE.load(directory, key.file_name(), dataclasses.asdict(key))
    if record is None:
        return None
    try:
        name, kind, (obj, bitcode) = record["library"]
        if kind != "object" or not isinstance(obj, bytes) or not isinstance(bitcode, bytes):
            return None
        return codegen.unserialize_library((name, kind, (obj, bitcode)))
    except Exception:  # a damaged file is a miss: compile again
        return None


def store(directory: Path | None, key: RuntimeKey, library) -> bool:
    """Write ``library`` (compiled with object caching on) for ``key``; False on failure."""
    if directory is None:
        return False
    try:
        state = library.serialize_using_object_code()
    except Exception:
        return False
    return CACHE.store(directory, key.file_name(), dataclasses.asdict(key), library=state)


__all__ = ["CACHE", "RuntimeKey", "load", "path_for", "runtime_key", "store"]
