"""A triangular solve (``SolveTriangular``) as an intrinsic lowered into its caller.

PyTensor's numba ``SolveTriangular`` is ``_solve_triangular``'s overload: shape checks, a
scan of the diagonal for a zero, a work copy of ``B`` in the layout BLAS needs, and
``trsm`` through a pointer looked up at run time from an object-mode block. numba compiles
it per pair of argument types with a dozen overloads behind it (``np.zeros_like``,
``np.full_like``, ``np.asfortranarray``, the work-array helpers, the ``trsm`` wrapper and
its pointer lookup, twice), for each signature, in the GP, LKJ, VAR and SEM models of the
catalogue (CHANGELOG.md, "Linear algebra as intrinsics").

The compact ``SolveTriangular`` (`SOLVE_TRIANGULAR`: a subclass, shape inference, gradient,
printing are the op's) takes the nodes whose operands need no cast (`why_not_compact`), where
stock's implementation is the one replicated (its record's digest of the functions' source:
another PyTensor keeps the stock op). Its node function is an intrinsic
writing the overload's steps, in its order, into the caller:

- ``A.shape[0] != B.shape[0]``, then a non-square ``A``: scipy's ``LinAlgError`` with stock's
  messages;
- an empty ``B``: zeros of ``B``'s shape; a zero on ``A``'s diagonal (unless
  ``unit_diagonal``): NaNs; both in the layout of the other results;
- ``A``: passed as its transpose, with ``uplo`` flipped, when C-contiguous (its type says
  so, or numba's ``is_contiguous`` at run time), read as it is when F-contiguous, else copied
  to Fortran's layout first (``np.asfortranarray``);
- ``B``: a C-typed matrix is solved in its own layout (``side='R'``), anything else in
  Fortran's (``side='L'``), in a copy unless the op may overwrite ``B``, ``B`` is writable
  and already in that layout (numba's ``is_fortran``/``is_contiguous`` at run time where its
  type does not say);
- scipy's ``trsm`` for the dtype, called by its symbol (`blas_calls`), with stock's
  arguments.

So the values are stock's bits: copies are copies, and the one floating-point computation is
the same BLAS routine with the same arguments, on a buffer in the same layout. The result is
typed in the layout every path makes it in (`result_type`). Operands that are not arrays of
one BLAS dtype call the stock node function (`node_intrinsics.node_intrinsic`).
tests/test_compact_solve.py compares values, overwritten operands, result types and errors
with stock's on every case above.
"""

from __future__ import annotations

import functools

from llvmlite import ir
from numba.core import cgutils, types
from scipy import linalg

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.blas_calls import BLAS_MODULE, ROUTINES, emit_blas_call
from ptnumba_codegen.compact.replica import Replica, StockSource
from ptnumba_codegen.compact.work_arrays import LINALG, contiguous, copied, filled

I32 = ir.IntType(32)
NOT_CONFORMING = "Dimensions of A and B do not conform"  # stock's `_solve_check_input_shapes`
NOT_SQUARE = "Last 2 dimensions of A must be square"


def why_not_compact(node) -> str | None:
    """Why ``node`` keeps the stock op, or None (a matrix ``A``, a vector or matrix ``B``,
    both of the output's dtype, one BLAS has)."""
    a, b = node.inputs
    out = node.outputs[0].type.dtype
    if a.type.ndim != 2 or b.type.ndim not in (1, 2):
        return f"operands of {a.type.ndim} and {b.type.ndim} dimensions"
    if out not in ROUTINES:
        return f"dtype {out} (BLAS routines: {', '.join(ROUTINES)})"
    if a.type.dtype != out or b.type.dtype != out:
        return "an operand is cast first (stock's astype)"
    return None


def result_type(bty: types.Array) -> types.Array:
    """The result's type: the layout every path of the overload makes it in, ``B``'s own when
    ``B`` is a C matrix, else Fortran's (a vector is C).

    numba types stock's node function the same (tests/test_compact_solve.py), so the result's
    readers are compiled as they are when they read stock's result (typed ``A`` here, LLVM
    regrouped a sum downstream of the LKJ model's solve, and its gradient lost stock's bits)."""
    layout = "C" if bty.ndim == 1 or bty.layout == "C" else "F"
    return types.Array(bty.dtype, bty.ndim, layout)


def solve_intrinsic(lower: bool, unit_diagonal: bool, overwrite_b: bool, stock):
    """``solve_triangular(A, B)``: stock's overload as an intrinsic; ``stock()`` for other types."""

    def typer(typingctx, arg_types):
        aty, bty = arg_types
        if not (isinstance(aty, types.Array) and isinstance(bty, types.Array)):
            return None
        if aty.ndim != 2 or bty.ndim not in (1, 2) or aty.dtype != bty.dtype or str(aty.dtype) not in ROUTINES:
            return None
        rty = result_type(bty)

        overwrite = overwrite_b and bty.mutable  # a readonly B is always copied (the work-array helpers)

        def emit(context, builder, args):
            return _emit(context, builder, aty, bty, rty, args, lower, unit_diagonal, overwrite)

        return rty(*arg_types), emit

    return ni.node_intrinsic("solve_triangular", 2, typer, stock)


def _emit(context, builder, aty, bty, rty, args, lower, unit_diagonal, overwrite_b):
    row_major = bty.ndim == 2 and bty.layout == "C"  # stock's solve_in_row_major_frame
    a, b = args
    As, Bs = ni.array_struct(context, builder, aty, a), ni.array_struct(context, builder, bty, b)
    a_shape = cgutils.unpack_tuple(builder, As.shape, 2)
    b_shape = cgutils.unpack_tuple(builder, Bs.shape, bty.ndim)
    n32 = builder.trunc(a_shape[1], I32)  # _N = np.int32(A.shape[-1])
    for bad, message in ((builder.icmp_signed("!=", a_shape[0], b_shape[0]), NOT_CONFORMING),
                         (builder.icmp_signed("!=", a_shape[0], a_shape[1]), NOT_SQUARE)):
        with builder.if_then(bad, likely=False):
            context.call_conv.return_user_exc(builder, linalg.LinAlgError, (message,))
    result = cgutils.alloca_once(builder, context.get_value_type(rty))
    size = functools.reduce(builder.mul, b_shape)
    dtype = context.get_value_type(bty.dtype)
    with builder.if_else(builder.icmp_signed("==", size, size.type(0))) as (empty, nonempty):
        with empty:
            zeros = filled(context, builder, rty, b_shape, ir.Constant(dtype, 0.0))._getvalue()
            builder.store(zeros, result)
        with nonempty:
            zero_pivot = cgutils.false_bit if unit_diagonal else _zero_on_diagonal(context, builder, aty, As, a_shape[0])
            with builder.if_else(zero_pivot, likely=False) as (singular, regular):
                with singular:
                    nan = ir.Constant(dtype, float("nan"))
                    nans = filled(context, builder, rty, b_shape, nan)._getvalue()
                    builder.store(nans, result)
                with regular:
                    work = _solve(context, builder, aty, bty, rty, As, Bs, b, b_shape, n32, lower, unit_diagonal,
                                  overwrite_b, row_major)
                    builder.store(work, result)
    return builder.load(result)


def _zero_on_diagonal(context, builder, aty, As, n):
    """stock's ``_has_zero_on_diagonal``: a loop over ``A[i, i]``, stopping at the first zero."""
    found = cgutils.alloca_once_value(builder, cgutils.false_bit)
    with cgutils.for_range(builder, n) as loop:
        value = ni.load(context, builder, aty, As, [loop.index, loop.index])
        with builder.if_then(builder.fcmp_ordered("==", value, ir.Constant(value.type, 0.0))):
            builder.store(cgutils.true_bit, found)
            loop.do_break()
    return builder.load(found)


def _solve(context, builder, aty, bty, rty, As, Bs, b, b_shape, n32, lower, unit_diagonal, overwrite_b, row_major):
    """The work array, solved in place by ``trsm``: its value (a new reference)."""
    transposed = contiguous(context, builder, aty, As, "C")  # A_f_is_transposed = A.flags.c_contiguous
    lower_now = builder.xor(transposed, cgutils.true_bit if lower else cgutils.false_bit)

    def char(flag, yes: str, no: str):
        return builder.select(flag, I32(ord(yes)), I32(ord(no)))

    a_data, a_copy = _fortran_operand(context, builder, aty, As, transposed)
    work = cgutils.alloca_once(builder, context.get_value_type(rty))
    if row_major:  # _c_work_array: B itself when it may be overwritten, else B.copy()
        reuse = cgutils.true_bit if overwrite_b else cgutils.false_bit
    elif overwrite_b:  # np.ascontiguousarray(B) / np.asfortranarray(B[:, ::1]): B if already so
        reuse = contiguous(context, builder, bty, Bs, "C" if bty.ndim == 1 else "F")
    else:  # B.copy() / _copy_to_fortran_order(B) / the readonly copy loop
        reuse = cgutils.false_bit
    with builder.if_else(reuse) as (itself, a_copy_of_b):
        with itself:  # numba returns an argument (or a view of it) as a new reference
            context.nrt.incref(builder, bty, b)
            builder.store(b, work)  # the same struct: checked contiguous in the result's layout
        with a_copy_of_b:
            builder.store(copied(context, builder, bty, Bs, rty, b_shape)._getvalue(), work)
    ws = ni.array_struct(context, builder, rty, builder.load(work))
    if row_major:
        nrhs = builder.trunc(b_shape[1], I32)
        side, transa, m, n, ldb = I32(ord("R")), char(transposed, "N", "T"), nrhs, n32, nrhs
    else:
        nrhs = I32(1) if bty.ndim == 1 else builder.trunc(b_shape[1], I32)
        side, transa, m, n, ldb = I32(ord("L")), char(transposed, "T", "N"), n32, nrhs, n32
    emit_blas_call(context, builder, "trsm", aty.dtype, [
        (side, types.int32), (char(lower_now, "L", "U"), types.int32), (transa, types.int32),
        (I32(ord("U") if unit_diagonal else ord("N")), types.int32), (m, types.int32), (n, types.int32),
        (a_data, None), (n32, types.int32), (ws.data, None), (ldb, types.int32),
    ])
    if a_copy is not None:  # A_f dies
        context.nrt.decref(builder, a_copy[0], builder.load(a_copy[1]))
    return builder.load(work)


def _fortran_operand(context, builder, aty, As, transposed):
    """``A_f``'s data: ``A`` itself when F-contiguous or read transposed, else
    ``np.asfortranarray(A)``'s copy; and (type, slot) of that copy to give back (None when
    ``A``'s type makes it never needed)."""
    keep = builder.or_(contiguous(context, builder, aty, As, "F"), transposed)
    if aty.layout in "CF":
        return As.data, None
    fty = types.Array(aty.dtype, 2, "F")
    slot = cgutils.alloca_once_value(builder, context.get_constant_null(fty))  # meminfo NULL: decref does nothing
    data = cgutils.alloca_once_value(builder, As.data)
    with builder.if_then(builder.not_(keep)):
        copy = copied(context, builder, aty, As, fty, cgutils.unpack_tuple(builder, As.shape, 2))
        builder.store(copy._getvalue(), slot)
        builder.store(copy.data, data)
    return builder.load(data), (fty, slot)


SOLVE_TRIANGULAR = Replica(
    stock_op="pytensor.tensor.linalg:SolveTriangular",
    reason="_solve_triangular's overload: a numba function per pair of operand types with a dozen overloads "
    "behind it (zeros_like, full_like, the work-array copies, the trsm wrapper and its object-mode "
    "pointer lookup); the compact one is an intrinsic inside its caller making the same checks, "
    "copies and trsm call (by symbol) with numba's own pieces",
    source=StockSource(
        functions=(
            LINALG + "solvers.triangular:solve_triangular_impl", LINALG + "solvers.triangular:_has_zero_on_diagonal",
            LINALG + "solvers.utils:_solve_check_input_shapes", LINALG + "utils:_c_work_array_impl",
            LINALG + "utils:_fortran_work_array_impl", LINALG + "utils:_full_fortran_order_impl",
            LINALG + "solvers.dispatch:numba_funcify_SolveTriangular",
        ),
        digests={"14c8ecd6307e26a6": ("3.3.8",)},
        elsewhere={
            version: "its solve copies B through _copy_to_fortran_order_even_if_1d and chooses layouts at run "
            "time, not through the work-array helpers whose layouts the compact solve replicates"
            for version in ("3.3.6", "3.3.7")
        },
    ),
    params=lambda op, node: (op.lower, op.unit_diagonal, op.overwrite_b),
    intrinsic=solve_intrinsic,
    takes=why_not_compact,
    routines=((BLAS_MODULE, "trsm"),),
)


__all__ = ["NOT_CONFORMING", "NOT_SQUARE", "SOLVE_TRIANGULAR", "result_type", "solve_intrinsic", "why_not_compact"]
