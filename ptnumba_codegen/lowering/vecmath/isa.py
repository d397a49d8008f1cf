"""ISA and vector-function helpers shared by the vector lowerings (`libmvec`, `lane_calls`,
`exact_lanes`): the JIT target's features and libmvec ISA letter, lanes per vector, and
the attributes every vector function declaration gets."""

from __future__ import annotations

import functools

from llvmlite import ir

ISA_BITS = {"d": 256, "e": 512}


def target_features() -> set[str]:
    from numba.core import config

    return set(_features(config.CPU_FEATURES))


@functools.cache
def _features(configured: str | None) -> tuple[str, ...]:
    """numba's target features (``NUMBA_CPU_FEATURES``, else the host's): asking LLVM for
    the host's costs about 2 ms, and planning and emitting a model's kernels ask ~50 times."""
    from numba.core.codegen import get_host_cpu_features

    return tuple((configured if configured is not None else get_host_cpu_features()).split(","))


def target_isa() -> str | None:
    """libmvec ISA letter for numba's JIT target: 'e' (AVX-512), 'd' (AVX2) or None."""
    features = target_features()
    if "+avx512f" in features:
        return "e"
    if "+avx2" in features:
        return "d"
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


__all__ = ["ISA_BITS", "keep_alive", "lane_count", "mark_pure", "target_features", "target_isa"]
