"""Other thread pools a compiled function runs on, and when split loops yield to them.

Pure Python over the function graph (no numba). A split loop runs on numba's threading
layer (GNU OpenMP here). Other ops of the same function may run on pools of their own:
numba's ``Dot`` and PyTensor's linear algebra call scipy's OpenBLAS, whose worker threads
keep spinning (``sched_yield`` in a loop, about 2**28 cycles) after every call. On a
machine with few cores the two pools then take the cores from each other: a logistic
regression's logp+dlogp (two ``Dot`` and three elementwise kernels) ran several times
slower split than on one thread (CHANGELOG.md, "Figures behind design choices"). So a
function whose graph (inner graphs included) holds an op of a pool in `POOLS`, while that
pool has more than one thread, never splits its loops; the kernels are otherwise the same
(split and unsplit loops give the same bits anyway).

Where OpenBLAS lets the caller run its jobs (OpenBLAS >= 0.3.28), they run on numba's
threads instead (`runtime.shared_blas`): one pool, nothing to yield to. Otherwise, with
``threadpoolctl`` installed, a pool limited to one thread (``OPENBLAS_NUM_THREADS=1``,
``threadpool_limits(1, "blas")`` before compiling) is not yielded to. Without it, the pool's
size is unknown and the loops yield.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytensor.tensor.blas import BatchedDot
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.math import Dot


def _blas_threads() -> int | None:
    """The largest thread count of the process's BLAS libraries (None: unknown)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    counts = [info.get("num_threads") or 0 for info in threadpool_info() if info.get("user_api") == "blas"]
    return max(counts) if counts else None


@dataclass(frozen=True)
class Pool:
    """A thread pool other ops run on: which ops, and why split loops yield to it."""

    name: str
    ops: tuple[type, ...]  # op classes (or the core op of a Blockwise) that run on it
    modules: tuple[str, ...]  # every op defined in these modules runs on it
    reason: str
    threads: Callable[[], int | None]  # its current size (None: unknown, assume > 1)

    def runs(self, op) -> bool:
        if isinstance(op, Blockwise):
            op = op.core_op
        if isinstance(op, self.ops):
            return True
        module = type(op).__module__
        return any(module == m or module.startswith(m + ".") for m in self.modules)


POOLS: tuple[Pool, ...] = (
    Pool(
        name="OpenBLAS",
        ops=(Dot, BatchedDot),
        modules=("pytensor.tensor.slinalg", "pytensor.tensor.nlinalg", "pytensor.tensor.linalg", "pytensor.tensor.blas"),
        reason="its workers spin after every call and take the cores split loops need",
        threads=_blas_threads,
    ),
)


def _ops(fgraph):
    for node in fgraph.apply_nodes:
        yield node.op
        inner = getattr(node.op, "fgraph", None)
        if inner is not None and hasattr(inner, "apply_nodes"):
            yield from _ops(inner)


# Pools whose work runs on numba's threads too (`runtime.shared_blas`): nothing to yield to.
_SHARED: set[str] = set()


def set_shared(name: str, shared: bool) -> None:
    (_SHARED.add if shared else _SHARED.discard)(name)


def pools_used(fgraph) -> tuple[str, ...]:
    """Names of the pools of `POOLS` that ops of ``fgraph`` (inner graphs included) run on."""
    return tuple(pool.name for pool in POOLS if any(pool.runs(op) for op in _ops(fgraph)))


def pools_to_yield_to(fgraph, also_used: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Names of the pools of `POOLS` that ops of ``fgraph`` run on (or that are named in
    ``also_used``: an as-written copy's inner graph lists the pools of the function it is
    part of), that keep threads of their own and that have (or may have) more than one: the
    function's loops do not split."""
    used = set(also_used)
    found = []
    for pool in POOLS:
        if pool.name in _SHARED:
            continue
        if pool.name in used or any(pool.runs(op) for op in _ops(fgraph)):
            threads = pool.threads()
            if threads is None or threads > 1:
                found.append(pool.name)
    return tuple(found)


def yield_reason(pools: tuple[str, ...]) -> str:
    reasons = {p.name: p.reason for p in POOLS}
    return "; ".join(f"the function runs ops on {name}'s threads ({reasons.get(name, '')})" for name in pools)
