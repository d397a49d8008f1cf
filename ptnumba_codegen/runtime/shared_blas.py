"""One thread pool for loops and BLAS: OpenBLAS's parallel jobs run on numba's threads.

numba's ``Dot`` and PyTensor's linear algebra call the OpenBLAS of scipy's wheel. Its
worker threads spin (``sched_yield`` in a loop, ~2**28 cycles) after every
call, so on a machine with few cores they take the cores from whatever runs next -- a
split loop, another sampler chain, another process: a model's logp+dlogp ran many times
slower (CHANGELOG.md, "Figures behind design choices").

OpenBLAS (>= 0.3.28) lets the caller run its parallel jobs:
``openblas_set_threads_callback_function(callback)``. `share_blas_pool` installs the
split runtime's callback (``threads.BLAS_CALLBACK``), which runs each call's jobs
concurrently, one GNU OpenMP parallel region per call, one BLAS call at a time (only over
numba's ``omp`` threading layer, which gives a region as many threads as asked from any
thread: level-3 jobs wait for each other, so they cannot run one after the other).
OpenBLAS partitions the work before the callback sees it, so every result keeps its bits;
only where the jobs run changes. OpenBLAS's own workers then fall asleep for good. A
child made by ``fork()`` gives OpenBLAS its own threads back (GNU OpenMP cannot run in it).

It is armed once per process, when the split runtime starts (the first policy kernel that
may split), and installed by the runtime itself just before the process's first split loop
(`PENDING_SYMBOL`): until a loop splits, numba's threads are idle and OpenBLAS's own pool
takes nothing from them, while a parallel region per small BLAS call costs more than
OpenBLAS's own workers (a structural-equation model's small triangular solves, cut into
two jobs, cost more per call through the callback). Once
installed, it applies to every caller of that OpenBLAS in the process, stock kernels and
``scipy.linalg`` included: their jobs then run on numba's threads (``NUMBA_NUM_THREADS``,
not `set_parallel_enabled`, which is about split loops). Opt out with
``PTNUMBA_CODEGEN_SHARE_BLAS=0`` in the environment, or `unshare_blas_pool`.
"""

from __future__ import annotations

import ctypes
import logging

from llvmlite import binding as llvm

from ptnumba_codegen.runtime.pools import set_shared
from ptnumba_codegen.settings import SHARE_BLAS

SETTERS = ("scipy_openblas_set_threads_callback_function", "openblas_set_threads_callback_function")

# An armed installation, [setter, callback] (or nulls): the split runtime calls
# setter(callback) and clears it just before its first parallel launch
# (`threads._install_pending_blas`).
PENDING_SYMBOL = "ptnumba_codegen_blas_share"
_PENDING = (ctypes.c_void_p * 2)(None, None)
llvm.add_symbol(PENDING_SYMBOL, ctypes.addressof(_PENDING))

_STATE: dict = {}
log = logging.getLogger("ptnumba_codegen")


def _scipy_openblas():
    """``(ctypes setter, library path)`` of the OpenBLAS scipy.linalg calls, or None."""
    try:
        import scipy.linalg.cython_blas  # noqa: F401  (loads the library numba's Dot calls)
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    infos = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
    infos.sort(key=lambda i: "scipy.libs" not in i.get("filepath", ""))  # scipy's own first
    for info in infos:
        try:
            lib = ctypes.CDLL(info["filepath"])
        except OSError:
            continue
        for name in SETTERS:
            setter = getattr(lib, name, None)
            if setter is not None:
                setter.argtypes = [ctypes.c_void_p]
                setter.restype = None
                return setter, info["filepath"]
    return None


def sharing_wanted() -> bool:
    """Whether the process lets its OpenBLAS jobs run on numba's threads (`SHARE_BLAS`)."""
    return SHARE_BLAS.value() == "1"


def share_blas_pool(callback_address: int) -> bool:
    """Run OpenBLAS's parallel jobs through ``callback_address`` from the process's first
    split loop on (armed now, installed by the runtime then); False if it cannot."""
    if not sharing_wanted():
        return False
    if _STATE.get("path"):
        return True
    found = _scipy_openblas()
    if found is None:
        log.info("OpenBLAS keeps its own threads: no caller-managed threading (OpenBLAS < 0.3.28?)")
        return False
    setter, path = found
    _STATE.update(setter=setter, path=path)
    _PENDING[1] = callback_address
    _PENDING[0] = ctypes.cast(setter, ctypes.c_void_p).value
    _mark(True)
    log.info("OpenBLAS (%s) runs its parallel jobs on numba's threads from the first split loop on", path)
    return True


def install_now() -> bool:
    """Install an armed callback at once (as the first split loop would); False if none is."""
    if not _STATE.get("path"):
        return False
    if _PENDING[0]:
        _PENDING[0] = None
        _STATE["setter"](_PENDING[1])
    return True


def installed() -> bool:
    """OpenBLAS's jobs run on numba's threads now (armed, and a loop has split since)."""
    return bool(_STATE.get("path")) and not _PENDING[0]


def unshare_blas_pool() -> None:
    """Give OpenBLAS its own threads back."""
    _PENDING[0] = None
    setter = _STATE.pop("setter", None)
    _STATE.pop("path", None)
    if setter is not None:
        setter(None)
    _mark(False)


def unshare_in_child() -> None:
    """After ``fork()``: OpenBLAS's own pool again (its fork handler rebuilds it)."""
    if _STATE.get("setter") is not None:
        unshare_blas_pool()


def blas_pool_shared() -> bool:
    """OpenBLAS's jobs run on numba's threads, or will from the first split loop on (split
    loops then need not yield to its pool: `pools.pools_to_yield_to`)."""
    return bool(_STATE.get("path"))


def _mark(shared: bool) -> None:
    set_shared("OpenBLAS", shared)
