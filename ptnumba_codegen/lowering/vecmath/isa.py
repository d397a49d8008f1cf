"""ISA and vector-function helpers shared by the vector lowerings (`libmvec`, `lane_calls`,
`exact_lanes`): the JIT target's features and libmvec ISA letter, lanes per vector, and
the attributes every vector function declaration gets."""

from __future__ import annotations

import contextlib
import contextvars
import functools

from llvmlite import ir

ISA_BITS = {"d": 256, "e": 512}


def target_features() -> set[str]:
    from numba.core import config

    return set(_features(config.CPU_FEATURES))


@functools.cache
def _features(configured: str | None) -> tuple[str, ...]:
    """numba's target features (``NUMBA_CPU_FEATURES``, else the host's): asking LLVM for
    the host's is slow, and planning and emitting a model's kernels ask many times."""
    from numba.core.codegen import get_host_cpu_features

    return tuple((configured if configured is not None else get_host_cpu_features()).split(","))


def host_isa() -> str | None:
    """libmvec ISA letter for numba's JIT target: 'e' (AVX-512), 'd' (AVX2) or None."""
    features = target_features()
    if "+avx512f" in features:
        return "e"
    if "+avx2" in features:
        return "d"
    return None


# The ISA of the kernel being planned or emitted, where it is narrower than the host's
# (`row_isa`, `kernel_isa`); None: the host's.
_KERNEL_ISA: contextvars.ContextVar[str | None] = contextvars.ContextVar("ptnumba_kernel_isa", default=None)


def target_isa() -> str | None:
    """libmvec ISA letter the vector calls being planned or emitted use: the host's
    (`host_isa`), or the narrower one `kernel_isa` set for this kernel."""
    host = host_isa()
    narrowed = _KERNEL_ISA.get()
    if narrowed is not None and host is not None and ISA_BITS[narrowed] < ISA_BITS[host]:
        return narrowed
    return host


@contextlib.contextmanager
def kernel_isa(isa: str | None):
    """Plan or emit one kernel's vector calls at ``isa`` (None, or the host's: unchanged)."""
    token = _KERNEL_ISA.set(isa)
    try:
        yield
    finally:
        _KERNEL_ISA.reset(token)


# Where a kernel's vector calls use fewer lanes than the host's widest vectors. A row loop
# (`loop.row_loop_length`: an innermost axis of static length, 8 to 63) runs each row as
# whole vectors, one per iteration, plus a remainder the loop vectorizer leaves scalar:
# each remaining element calls the scalar wrapper, which does a whole vector's work for
# one value (the same bits at every position). A row of 12 doubles on AVX-512 costs 1
# vector call and 4 whole-vector scalar calls, 5 calls' work; AVX2's 4 lanes, which an
# AVX-512 machine runs as well, cost 3. (frailty_coxph's (3770, 12) kernel:
# CHANGELOG.md, "Rows that do not fill AVX-512's vectors".)
NARROWER_ISA = {"e": "d"}


def _row_calls(length: int, lanes: int) -> int:
    """Whole-vector calls a row of ``length`` costs: its full vectors plus one scalar
    wrapper call (a whole vector's work) per remaining element."""
    return length // lanes + length % lanes


def row_isa(row_length: int | None, dtype: str = "float64") -> str | None:
    """The ISA for a kernel whose row loop has ``row_length`` elements (None: no row loop):
    the narrower ISA when its rows cost fewer whole-vector calls, else None (the host's)."""
    host = host_isa()
    narrow = NARROWER_ISA.get(host)
    if narrow is None or row_length is None:
        return None
    wide = lane_count(host, dtype)
    if row_length <= wide or row_length % wide == 0:
        return None
    if _row_calls(row_length, lane_count(narrow, dtype)) < _row_calls(row_length, wide):
        return narrow
    return None


def lane_count(isa: str, dtype: str) -> int:
    return ISA_BITS[isa] // (32 if dtype == "float32" else 64)


def mark_pure(fn: ir.Function):
    # llvmlite whitelists attribute names; the underlying set accepts any (LLVM 22 prints
    # readnone as memory(none)).
    for attr in ("nounwind", "readnone", "willreturn"):
        set.add(fn.attributes, attr)


def keep_alive(module: ir.Module, fn: ir.Function):
    """Append ``fn`` to ``@llvm.compiler.used`` so its declaration survives until vectorization."""
    ptr = ir.IntType(8).as_pointer()
    old = module.globals.get("llvm.compiler.used")
    elems = list(old.initializer.constant) if old is not None else []
    if old is not None:
        del module.globals["llvm.compiler.used"]
        module.scope._useset.discard("llvm.compiler.used")
    elems.append(fn.bitcast(ptr))
    arr = ir.ArrayType(ptr, len(elems))
    gv = ir.GlobalVariable(module, arr, "llvm.compiler.used")
    gv.linkage = "appending"
    gv.section = "llvm.metadata"
    gv.initializer = ir.Constant(arr, elems)


def isa_reason(row_length: int, isa: str, dtype: str = "float64") -> str:
    """Why a kernel's vector calls use ``isa`` (for explain)."""
    host = host_isa()
    wide, narrow = lane_count(host, dtype), lane_count(isa, dtype)
    return (
        f"{narrow} lanes ({isa}), not the host's {wide} ({host}): a row of {row_length} costs "
        f"{_row_calls(row_length, narrow)} whole-vector calls at {narrow} lanes, "
        f"{_row_calls(row_length, wide)} at {wide} (its remainder runs one element per call)"
    )


__all__ = [
    "ISA_BITS", "NARROWER_ISA", "host_isa", "isa_reason", "keep_alive", "kernel_isa", "lane_count", "mark_pure", "row_isa",
    "target_features", "target_isa",
]
