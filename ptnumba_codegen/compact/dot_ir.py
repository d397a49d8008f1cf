"""`compact.dot`'s product as an intrinsic lowered into its caller.

The compact ``Dot``'s product (`compact.dot._product_source`) is a numba function shared by
every node of a dtype, but still one run of numba's pipeline per process with its helpers
(``blas_operand``, ``leading_dim``, ``fill_zero``) and ``np.empty``'s overload behind it, in
the catalogue's models with a design matrix (frailty, occupancy, the HSGP models;
CHANGELOG.md, "Cold compile: stock node functions compiled as intrinsics").
`dot_intrinsic` writes the same function into its caller, branch for branch, with numba's
allocation and the same calls:

- ``out = np.empty((M, N))`` (C), stock's ``ValueError`` where the contracted lengths differ;
- nothing more for an empty output; zeros for an empty contraction;
- where no axis is reversed: gemm for M, N >= 2 and both operands readable in place
  (`_operand`: stock's ``_blas_operand``, by the operand's numba layout where every array
  is typed C or F, else its generic choice; the leading dimension 0 where stock would
  copy); gemv where M or N is 1, the matrix readable in place and, along a contraction
  longer than 1, the vector's stride a positive multiple of the
  item size (the output zeroed first where PyTensor's gemv setting says). Which operand is
  gemv's matrix follows stock's two paths: with every array typed C or F, stock swaps the
  operands for its row-major output before choosing, so a 1 x 1 product takes y as the
  matrix; with an 'A'-typed operand it takes x;
- everywhere else stock's own function, through the same Python callback as the compiled
  product (`compact.dot.SlowPath`), with the layouts numba typed the operands with.

Products with a dimension of 1 are what a state-space model's Kalman filter makes at every
step of its `Scan` (one observed series: ``(1, k) @ (k, 1)``, ``(k, 1) @ (1, k)``); the
Python callback there costs more than the step.

The BLAS routines, their arguments (by pointer, ints as int32, flags as 'T'/'N') and the
callback are `compact.dot`'s (`emit_blas_call`, `python_callbacks.emit_call`): the same calls,
so the same bits (tests/test_compact_dot.py, every branch against stock strict).
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types

from ptnumba_codegen.compact.blas_calls import LAYOUTS, SLOW_PATH_FAILED, emit_blas_call
from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.runtime import python_callbacks

MISMATCH_MESSAGE = "gemm: operands have mismatched contraction dimensions"  # compact.dot._product_source's


def _leading_dim(builder, c, unit_stride, other_stride, unit_extent, other_extent):
    """``compact.dot.leading_dim``: the leading dimension BLAS walks the matrix with, or 0."""
    item, one, zero = c["item"], c["one"], c["zero"]
    bad_unit = builder.and_(builder.icmp_signed("!=", unit_extent, one), builder.icmp_signed("!=", unit_stride, item))
    at_least_one = builder.select(builder.icmp_signed(">", unit_extent, one), unit_extent, one)
    bad_other = builder.or_(builder.icmp_signed("<=", other_stride, zero),
                            builder.icmp_signed("!=", builder.srem(other_stride, item), zero))
    ld = builder.sdiv(other_stride, item)
    fits = builder.select(builder.icmp_signed(">=", ld, unit_extent), ld, zero)
    inner = builder.select(bad_other, zero, fits)
    return builder.select(bad_unit, zero, builder.select(builder.icmp_signed("==", other_extent, one), at_least_one, inner))


def _blas_operand(builder, c, shape, strides):
    """``compact.dot.blas_operand``: (transposed, int32 leading dimension; 0 where stock copies)."""
    i32 = ir.IntType(32)
    column_major = builder.trunc(_leading_dim(builder, c, strides[0], strides[1], shape[0], shape[1]), i32)
    row_major = builder.trunc(_leading_dim(builder, c, strides[1], strides[0], shape[1], shape[0]), i32)
    has_column = builder.icmp_signed("!=", column_major, ir.Constant(i32, 0))
    return builder.not_(has_column), builder.select(has_column, column_major, row_major)


def _operand(builder, c, layout, shape, strides):
    """Stock's ``_blas_operand`` for an operand it types ``layout``: a C array is its own
    transpose with leading dimension max(1, columns), an F array is read as it is with
    max(1, rows) (``_blas_operand_impl``); 'A' is the generic choice (`_blas_operand`)."""
    i32 = ir.IntType(32)
    if layout in ("C", "F"):
        extent = shape[1] if layout == "C" else shape[0]
        ld = builder.trunc(builder.select(builder.icmp_signed(">", extent, c["one"]), extent, c["one"]), i32)
        return ir.Constant(ir.IntType(1), layout == "C"), ld
    return _blas_operand(builder, c, shape, strides)


def _fill_zero(context, builder, out_type, out, shape) -> None:
    with cgutils.loop_nest(builder, shape, context.get_value_type(types.intp)) as index:
        ni.store(context, builder, out_type, out, list(index), context.get_constant(types.int64, 0), types.int64)


def dot_intrinsic(dtype: str, zero_y_first: bool, slow_symbol: str, stock):
    """``dot(x, y)`` of two ``dtype`` matrices: the compact product (see the module) as an
    intrinsic; ``stock()`` (the compact numba function) for other types."""
    nb_dtype = types.float64 if dtype == "float64" else types.float32

    def typer(typingctx, arg_types):
        xty, yty = arg_types
        if not all(isinstance(t, types.Array) and t.ndim == 2 and t.dtype == nb_dtype for t in arg_types):
            return None
        out_type = types.Array(nb_dtype, 2, "C")
        intp = types.intp

        def emit(context, builder, args):
            x, y = args
            xs, ys = ni.array_struct(context, builder, xty, x), ni.array_struct(context, builder, yty, y)
            M, K = cgutils.unpack_tuple(builder, xs.shape, 2)
            K2, N = cgutils.unpack_tuple(builder, ys.shape, 2)
            sx = cgutils.unpack_tuple(builder, xs.strides, 2)
            sy = cgutils.unpack_tuple(builder, ys.strides, 2)
            c = {"item": ni.intp(context, context.get_abi_sizeof(context.get_value_type(nb_dtype))),
                 "one": ni.intp(context, 1), "zero": ni.intp(context, 0), "two": ni.intp(context, 2)}
            one, zero, two = c["one"], c["zero"], c["two"]
            # stock's two paths: with every array typed C or F it reads each operand by its
            # type; otherwise its stride normalization (slices in some branches) types every
            # operand 'A', and each is read by `_blas_operand_generic`
            typed_path = xty.layout in ("C", "F") and yty.layout in ("C", "F")
            layouts = (xty.layout, yty.layout) if typed_path else ("A", "A")
            out = ni.new_array(context, builder, out_type, [M, N])
            out_shape = [M, N]
            with builder.if_then(builder.icmp_signed("!=", K2, K), likely=False):
                context.call_conv.return_user_exc(builder, ValueError, (MISMATCH_MESSAGE,))
            def compare(op):
                return lambda a, b: builder.icmp_signed(op, a, b)

            lt, gt, ge, eq = compare("<"), compare(">"), compare(">="), compare("==")
            fn = builder.function
            done = fn.append_basic_block("dot.done")
            blocks = {name: fn.append_basic_block(f"dot.{name}") for name in
                      ("nonempty", "zeros", "contracted", "fast", "gemm", "gemm_call", "gemv", "gemv_call", "slow")}
            builder.cbranch(builder.or_(eq(M, zero), eq(N, zero)), done, blocks["nonempty"])

            builder.position_at_end(blocks["nonempty"])
            builder.cbranch(eq(K, zero), blocks["zeros"], blocks["contracted"])
            builder.position_at_end(blocks["zeros"])
            _fill_zero(context, builder, out_type, out, out_shape)
            builder.branch(done)

            builder.position_at_end(blocks["contracted"])
            reversed_axis = builder.or_(
                builder.or_(builder.and_(gt(M, one), lt(sx[0], zero)), builder.and_(gt(K, one), lt(sx[1], zero))),
                builder.or_(builder.and_(gt(K, one), lt(sy[0], zero)), builder.and_(gt(N, one), lt(sy[1], zero))),
            )
            builder.cbranch(reversed_axis, blocks["slow"], blocks["fast"])

            builder.position_at_end(blocks["fast"])
            # M, N >= 2: gemm; otherwise M or N is 1 (neither is 0 here): gemv
            builder.cbranch(builder.and_(ge(M, two), ge(N, two)), blocks["gemm"], blocks["gemv"])

            builder.position_at_end(blocks["gemm"])
            x_trans, ldx = _operand(builder, c, layouts[0], [M, K], sx)
            y_trans, ldy = _operand(builder, c, layouts[1], [K, N], sy)
            i32_zero = ir.Constant(ir.IntType(32), 0)
            readable = builder.and_(builder.icmp_signed("!=", ldx, i32_zero), builder.icmp_signed("!=", ldy, i32_zero))
            builder.cbranch(readable, blocks["gemm_call"], blocks["slow"])
            builder.position_at_end(blocks["gemm_call"])
            i32 = types.int32
            emit_blas_call(context, builder, "gemm", nb_dtype, [
                (builder.not_(y_trans), types.boolean), (builder.not_(x_trans), types.boolean),
                (N, intp), (M, intp), (K, intp), (y, yty), (ldy, i32), (x, xty), (ldx, i32), (out._getvalue(), out_type), (N, intp),
            ])
            builder.branch(done)

            builder.position_at_end(blocks["gemv"])
            # stock's "column" product (x the matrix, y the vector): N == 1, and with every
            # array typed C or F (stock's operands swapped for its row-major output) M >= 2 too
            column = eq(N, one)
            if typed_path:
                column = builder.and_(column, ge(M, two))
            x_trans, ldx = _operand(builder, c, layouts[0], [M, K], sx)
            y_trans, ldy = _operand(builder, c, layouts[1], [K, N], sy)
            trans, ld = builder.select(column, x_trans, y_trans), builder.select(column, ldx, ldy)
            # the vector's stride along the contraction: any, and passed as 1, for K == 1
            step = builder.select(column, sy[0], sx[1])
            single = eq(K, one)
            step = builder.select(single, c["item"], step)
            length = builder.select(column, M, N)
            ok = builder.and_(builder.and_(builder.icmp_signed("!=", ld, i32_zero), gt(step, zero)),
                              eq(builder.srem(step, c["item"]), zero))
            builder.cbranch(ok, blocks["gemv_call"], blocks["slow"])
            builder.position_at_end(blocks["gemv_call"])
            if zero_y_first:
                _fill_zero(context, builder, out_type, out, out_shape)
            across = builder.icmp_unsigned("==", trans, column)
            rows = builder.select(across, K, length)
            cols = builder.select(across, length, K)
            # the matrix and the vector operand (numba's array structs are the same for every layout)
            matrix, vector = builder.select(column, x, y), builder.select(column, y, x)
            emit_blas_call(context, builder, "gemv", nb_dtype, [
                (across, types.boolean), (rows, intp), (cols, intp), (matrix, xty), (ld, i32), (vector, xty),
                (builder.sdiv(step, c["item"]), intp), (out._getvalue(), out_type), (one, intp)])
            builder.branch(done)

            builder.position_at_end(blocks["slow"])
            codes = [context.get_constant(types.int64, LAYOUTS.index(t.layout)) for t in (xty, yty)]
            any_layout = [t.copy(layout="A") for t in (xty, yty)]
            status = python_callbacks.emit_call(builder, slow_symbol, [
                (x, any_layout[0]), (y, any_layout[1]), (codes[0], types.int64), (codes[1], types.int64), (out._getvalue(), out_type)])
            with builder.if_then(builder.icmp_signed("!=", status, ir.Constant(status.type, 0)), likely=False):
                context.call_conv.return_user_exc(builder, RuntimeError, (SLOW_PATH_FAILED,))
            builder.branch(done)

            builder.position_at_end(done)
            return out._getvalue()

        return out_type(*arg_types), emit

    return ni.node_intrinsic("dot", 2, typer, stock)


__all__ = ["MISMATCH_MESSAGE", "dot_intrinsic"]
