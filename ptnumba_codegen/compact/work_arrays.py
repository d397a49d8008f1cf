"""The work arrays of stock's linear algebra (``_solve_triangular``, ``_cholesky``), written
as IR with numba's pieces: contiguity as numba's array flags test it, new arrays filled
with one value, copies in a given layout. Used by `compact.solve` and `compact.cholesky`."""

from __future__ import annotations

from numba.core import cgutils, types

from ptnumba_codegen.compact import node_intrinsics as ni

LINALG = "pytensor.link.numba.dispatch.linalg."  # stock's linear algebra, whose helpers these replicate


def contiguous(context, builder, aryty, ary, order: str):
    """numba's ``flags.c_contiguous`` (``order="C"``) or ``flags.f_contiguous`` (``"F"``) of a
    vector or matrix: true for an array typed in that layout, else ``is_contiguous`` /
    ``is_fortran`` of ``numpy_support`` at run time (axes of length 0 or 1 skipped)."""
    if aryty.layout == order:
        return cgutils.true_bit
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_value_type(aryty.dtype)))
    shape = cgutils.unpack_tuple(builder, ary.shape, aryty.ndim)
    strides = cgutils.unpack_tuple(builder, ary.strides, aryty.ndim)
    one = shape[0].type(1)
    if aryty.ndim == 1:
        return builder.or_(builder.icmp_signed("<=", shape[0], one), builder.icmp_signed("==", strides[0], itemsize))
    inner, outer = (1, 0) if order == "C" else (0, 1)
    small_in, small_out = (builder.icmp_signed("<=", shape[k], one) for k in (inner, outer))
    only_outer = builder.icmp_signed("==", strides[outer], itemsize)  # the inner axis skipped
    both = builder.and_(builder.icmp_signed("==", strides[inner], itemsize),
                        builder.or_(small_out, builder.icmp_signed("==", builder.mul(strides[inner], shape[inner]),
                                                                   strides[outer])))
    return builder.select(small_in, builder.or_(small_out, only_outer), both)


def filled(context, builder, aryty, shape, value):
    """A new array of ``aryty`` and ``shape``, every element ``value``."""
    out = ni.new_array(context, builder, aryty, shape)
    for_all(context, builder, shape, lambda index: ni.store(context, builder, aryty, out, index, value, aryty.dtype))
    return out


def for_all(context, builder, shape, body):
    """``body(index)`` for every index of ``shape``, last axis fastest."""
    if len(shape) == 1:
        with cgutils.for_range(builder, shape[0]) as loop:
            body([loop.index])
        return
    with cgutils.for_range(builder, shape[0]) as outer:
        with cgutils.for_range(builder, shape[1]) as inner:
            body([outer.index, inner.index])


def copied(context, builder, xty, xs, aryty, shape):
    """A new array of ``aryty`` holding the elements of ``xs`` (of type ``xty``, ``shape``):
    ``x.copy()`` for a C ``aryty``, Fortran's copy for an F one."""
    out = ni.new_array(context, builder, aryty, shape)
    for_all(context, builder, shape,
            lambda index: ni.store(context, builder, aryty, out, index, ni.load(context, builder, xty, xs, index), xty.dtype))
    return out


__all__ = ["LINALG", "contiguous", "copied", "filled", "for_all"]
