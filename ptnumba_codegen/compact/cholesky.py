"""A Cholesky factor (``Cholesky``) as an intrinsic lowered into its caller.

PyTensor's numba ``Cholesky`` is ``_cholesky``'s overload: a work copy of ``A`` in the
layout LAPACK needs, ``potrf`` through a pointer looked up at run time from an object-mode
block, NaNs where it fails, and the other triangle zeroed. numba compiles it per argument
type with the work-array helpers, ``np.full_like`` and the ``potrf`` wrapper and its pointer
lookup behind it, per signature, in the catalogue's GP models (CHANGELOG.md,
"Linear algebra as intrinsics").

The compact ``Cholesky`` (`CHOLESKY`: a subclass, shape inference, gradient, printing are the
op's) takes the nodes whose input needs no cast (`why_not_compact`), where stock's
implementation is the one replicated (its record's digest of the functions' source: another
PyTensor keeps the stock op). Its node function is an intrinsic
writing the overload's steps, in its order, into the caller:

- an empty ``A``: zeros of its shape; then a non-square ``A``: scipy's ``LinAlgError`` with
  stock's message;
- a C-typed ``A`` is factored as its transpose (Fortran's view of its buffer) with ``uplo``
  flipped, in a C copy unless the op may overwrite ``A`` (and ``A`` is writable); any other
  in a Fortran copy, or in ``A`` itself when it may be overwritten and is Fortran-contiguous
  at run time (numba's ``is_fortran``);
- scipy's ``potrf`` for the dtype, called by its symbol; NaNs if it reports a failure, else
  the other triangle zeroed, column by column as stock does.

So the values are stock's bits: copies are copies, and the factor is the same LAPACK routine
on the same buffer layout with the same arguments. The result is typed in the layout every
path makes it in (C for a C-typed ``A``, else Fortran's), as numba types stock's: the same
array, read as `compact.solve` explains. tests/test_compact_cholesky.py compares values,
errors and overwritten inputs with stock's.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.np import arrayobj
from scipy import linalg

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.blas_calls import LAPACK_MODULE, ROUTINES
from ptnumba_codegen.compact.replica import Replica, StockSource
from ptnumba_codegen.compact.work_arrays import LINALG, contiguous, copied, filled
from ptnumba_codegen.runtime.cython_symbols import symbol_name

I32 = ir.IntType(32)
NOT_SQUARE = "Last 2 dimensions of A must be square"  # stock's message


def why_not_compact(node) -> str | None:
    """Why ``node`` keeps the stock op, or None (a matrix of the output's dtype, one LAPACK has)."""
    (a,) = node.inputs
    out = node.outputs[0].type.dtype
    if a.type.ndim != 2:
        return f"a {a.type.ndim}-d input"
    if out not in ROUTINES:
        return f"dtype {out} (LAPACK routines: {', '.join(ROUTINES)})"
    if a.type.dtype != out:
        return "the input is cast first (stock's astype)"
    return None


def result_type(aty: types.Array) -> types.Array:
    """The factor's type: C for a C-typed ``A`` (the transpose of a Fortran factor), else
    Fortran, as numba types stock's node function."""
    return types.Array(aty.dtype, 2, "C" if aty.layout == "C" else "F")


def cholesky_intrinsic(lower: bool, overwrite_a: bool, stock):
    """``cholesky(A)``: stock's overload as an intrinsic; ``stock()`` for other types."""

    def typer(typingctx, arg_types):
        (aty,) = arg_types
        if not isinstance(aty, types.Array) or aty.ndim != 2 or str(aty.dtype) not in ROUTINES:
            return None
        rty = result_type(aty)
        overwrite = overwrite_a and aty.mutable  # a readonly A is always copied (the work-array helpers)

        def emit(context, builder, args):
            return _emit(context, builder, aty, rty, args[0], lower, overwrite)

        return rty(*arg_types), emit

    return ni.node_intrinsic("cholesky", 1, typer, stock)


def _transposed_view(context, builder, rty, value):
    """``x.T`` of a C matrix: the same buffer, shape and strides reversed, typed F."""
    xs = ni.array_struct(context, builder, rty, value)
    fty = types.Array(rty.dtype, 2, "F")
    view = context.make_array(fty)(context, builder)
    shape = cgutils.unpack_tuple(builder, xs.shape, 2)[::-1]
    strides = cgutils.unpack_tuple(builder, xs.strides, 2)[::-1]
    arrayobj.populate_array(view, data=xs.data, shape=shape, strides=strides, itemsize=xs.itemsize, meminfo=xs.meminfo)
    return fty, view


def _emit(context, builder, aty, rty, a, lower, overwrite):
    transposed = aty.layout == "C"  # stock chooses it from the type
    As = ni.array_struct(context, builder, aty, a)
    shape = cgutils.unpack_tuple(builder, As.shape, 2)
    result = cgutils.alloca_once(builder, context.get_value_type(rty))
    dtype = context.get_value_type(aty.dtype)
    with builder.if_else(builder.icmp_signed("==", builder.mul(shape[0], shape[1]), shape[0].type(0))) as (empty, nonempty):
        with empty:
            builder.store(filled(context, builder, rty, shape, ir.Constant(dtype, 0.0))._getvalue(), result)
        with nonempty:
            n32 = builder.trunc(shape[1], I32)  # _N = np.int32(A.shape[-1])
            with builder.if_then(builder.icmp_signed("!=", shape[0], builder.sext(n32, shape[0].type)), likely=False):
                context.call_conv.return_user_exc(builder, linalg.LinAlgError, (NOT_SQUARE,))
            builder.store(_factor(context, builder, aty, rty, As, a, shape, n32, dtype, lower != transposed,
                                  transposed, overwrite), result)
    return builder.load(result)


def _factor(context, builder, aty, rty, As, a, shape, n32, dtype, lower_f, transposed, overwrite):
    """The work array factored in place (a new reference, of ``rty``)."""
    if transposed:  # _c_work_array(A, overwrite): A itself, or A.copy()
        reuse = cgutils.true_bit if overwrite else cgutils.false_bit
    elif overwrite:  # _fortran_work_array: np.asfortranarray(A[:, ::1]), A when already Fortran
        reuse = contiguous(context, builder, aty, As, "F")
    else:
        reuse = cgutils.false_bit
    work = cgutils.alloca_once(builder, context.get_value_type(rty))
    with builder.if_else(reuse) as (itself, a_copy):
        with itself:  # numba returns an argument as a new reference
            context.nrt.incref(builder, aty, a)
            builder.store(a, work)
        with a_copy:
            builder.store(copied(context, builder, aty, As, rty, shape)._getvalue(), work)
    fty, view = _transposed_view(context, builder, rty, builder.load(work)) if transposed else (rty, None)
    fs = view if transposed else ni.array_struct(context, builder, rty, builder.load(work))
    info = cgutils.alloca_once_value(builder, I32(0))
    args = [cgutils.alloca_once_value(builder, I32(ord("L" if lower_f else "U"))),
            cgutils.alloca_once_value(builder, n32),
            builder.bitcast(fs.data, dtype.as_pointer()),
            cgutils.alloca_once_value(builder, n32),
            info]
    symbol = symbol_name(LAPACK_MODULE, ROUTINES[str(aty.dtype)] + "potrf")
    potrf = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [v.type for v in args]), symbol)
    builder.call(potrf, args)
    n = shape[1]
    with builder.if_else(builder.icmp_signed("!=", builder.load(info), I32(0)), likely=False) as (failed, factored):
        with failed:  # np.full_like(A_copy, np.nan): a new array in the result's layout
            nans = filled(context, builder, rty, shape, ir.Constant(dtype, float("nan")))._getvalue()
            context.nrt.decref(builder, rty, builder.load(work))
            builder.store(nans, work)
        with factored:
            _zero_other_triangle(context, builder, fty, fs, n, lower_f)
    return builder.load(work)


def _zero_other_triangle(context, builder, fty, fs, n, lower_f):
    """Stock's loops: above the diagonal of a lower factor (column ``j``, rows ``i < j``),
    below it of an upper one, of the Fortran view LAPACK wrote."""
    zero = ir.Constant(context.get_value_type(fty.dtype), 0.0)
    with cgutils.for_range(builder, n) as col:
        j = col.index
        if lower_f:
            with cgutils.for_range(builder, j) as row:
                ni.store(context, builder, fty, fs, [row.index, j], zero, fty.dtype)
        else:
            with cgutils.for_range_slice(builder, builder.add(j, j.type(1)), n, j.type(1)) as (i, _):
                ni.store(context, builder, fty, fs, [i, j], zero, fty.dtype)


CHOLESKY = Replica(
    stock_op="pytensor.tensor.linalg:Cholesky",
    reason="_cholesky's overload: a numba function per input type with the work-array helpers, np.full_like "
    "and the potrf wrapper and its object-mode pointer lookup behind it; the compact one is an intrinsic "
    "inside its caller making the same copy, potrf call (by symbol) and zeroing with numba's own pieces",
    source=StockSource(
        functions=(
            LINALG + "decomposition.cholesky:cholesky_impl", LINALG + "utils:_c_work_array_impl",
            LINALG + "utils:_fortran_work_array_impl", LINALG + "utils:_full_fortran_order_impl",
            LINALG + "decomposition.dispatch:numba_funcify_Cholesky",
        ),
        digests={"d0bc4ff65344d7d9": ("3.3.8",)},
        elsewhere={
            version: "its Cholesky copies A through numba's _copy_to_fortran_order, not through the "
            "work-array helpers whose layouts the compact factor replicates"
            for version in ("3.3.6", "3.3.7")
        },
    ),
    params=lambda op, node: (op.lower, op.overwrite_a),
    intrinsic=cholesky_intrinsic,
    takes=why_not_compact,
    routines=((LAPACK_MODULE, "potrf"),),
)


__all__ = ["CHOLESKY", "NOT_SQUARE", "cholesky_intrinsic", "result_type", "why_not_compact"]
