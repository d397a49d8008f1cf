"""Calls of scipy's BLAS by symbol, written as IR: what the compact ``Dot``'s product
(`compact.dot`), its intrinsic (`compact.dot_ir`) and the compact triangular solve
(`compact.solve`) emit; and the binding of scipy's BLAS and LAPACK routines to their symbols
(`bind_routines`), which every compact op calling one names in its record
(`Replica.routines`)."""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types

from ptnumba_codegen.runtime.cython_symbols import bind, symbol_name

BLAS_MODULE = "scipy.linalg.cython_blas"
LAPACK_MODULE = "scipy.linalg.cython_lapack"
# dtype -> the prefix of scipy's BLAS routines for it (dgemm, sgemv, ...: the functions
# stock's `_BLAS` looks up)
ROUTINES = {"float64": "d", "float32": "s"}

LAYOUTS = "CFA"  # numba's array layouts, by the code `layout_code` gives them
SLOW_PATH_FAILED = "ptnumba_codegen: stock's Dot (the slow path of a compact Dot) raised; see the ptnumba_codegen log"


# BLAS routine -> its arguments in order: "flag" (a boolean passed as 'T' or 'N'), "char" (an
# int32 holding a character code: side, uplo, trans, diag), "int" (an int32), "array" (the
# array's data), "one" and "zero" (alpha and beta: constants, not passed by the caller).
# Every argument goes by pointer, as Fortran BLAS takes it.
BLAS_ARGUMENTS = {
    "gemm": ("flag", "flag", "int", "int", "int", "one", "array", "int", "array", "int", "zero", "array", "int"),
    "gemv": ("flag", "int", "int", "one", "array", "int", "array", "int", "zero", "array", "int"),
    "trsm": ("char", "char", "char", "char", "int", "int", "one", "array", "int", "array", "int"),
}


def _blas_value(context, builder, kind, value, ty, fty):
    """One BLAS argument of ``kind`` (`BLAS_ARGUMENTS`) from the caller's value."""
    if kind == "array":  # an array value of numba type ``ty``, or (``ty`` None) its data pointer
        data = value if ty is None else context.make_array(ty)(context, builder, value).data
        return builder.bitcast(data, fty.as_pointer())
    if kind == "flag":  # stock stores ord("T") or ord("N") in an int32
        value = builder.select(value, ir.Constant(ir.IntType(32), ord("T")), ir.Constant(ir.IntType(32), ord("N")))
    elif kind == "char":  # already the int32 stock stores (``val_to_int_ptr(ord(...))``)
        pass
    else:
        value = context.cast(builder, value, ty, types.int32)
    return cgutils.alloca_once_value(builder, value)


def bind_routines(routines: tuple[tuple[str, str], ...]) -> None:
    """Bind each ``(cython module, routine)`` of scipy's, in every dtype of `ROUTINES`, to its
    symbol (`cython_symbols.bind`), so that code calling it by symbol finds it, whether
    compiled now or loaded from numba's cache (not typed again)."""
    for module, routine in routines:
        for prefix in ROUTINES.values():
            bind(module, prefix + routine)


def emit_blas_call(context, builder, routine: str, dtype, passed: list) -> None:
    """`compact.dot.blas_call`'s code, for ``(value, numba type)`` pairs already in hand
    (`compact.dot_ir`'s): the routine of ``dtype`` called by its symbol."""
    symbol = symbol_name(BLAS_MODULE, ROUTINES[str(dtype)] + routine)
    fty = context.get_value_type(dtype)
    passed = iter(passed)
    values = []
    for kind in BLAS_ARGUMENTS[routine]:
        if kind in ("one", "zero"):
            values.append(cgutils.alloca_once_value(builder, ir.Constant(fty, 1.0 if kind == "one" else 0.0)))
        else:
            values.append(_blas_value(context, builder, kind, *next(passed), fty))
    callee = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [v.type for v in values]), symbol)
    builder.call(callee, values)


__all__ = ["BLAS_ARGUMENTS", "BLAS_MODULE", "LAPACK_MODULE", "LAYOUTS", "ROUTINES", "SLOW_PATH_FAILED", "bind_routines",
           "emit_blas_call"]
