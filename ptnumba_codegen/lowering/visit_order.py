"""The order in which the stock backend visits a reduction's elements, where it shows.

Two things depend on that order under strict IEEE semantics:

* **float sums and products without ``reassoc``**: the rounding of every partial sum;
* **float max/min**: which zero a ``max`` over ``-0.0`` and ``+0.0`` returns. The stock
  step is ``acc = x if (acc < x) | isnan(x) else acc``: the zero seen *first* wins
  (``1 / x.max()`` is ``-inf`` or ``+inf`` depending on it).

The stock orders (``pytensor/link/numba/dispatch/elemwise.py``, ``vectorize_codegen.py``):

* FusedElemwise (elemwise loop) reductions: logical C order of the iteration space;
* CAReduce, at run time: the axes sorted by decreasing absolute stride (numba's argsort of
  ``ndim`` <= 15 values is an insertion sort, so stable: ties put the higher axis first),
  visited lexicographically. For a C-contiguous input that is the logical order, for an
  F-contiguous one the memory order. A full max/min of a dense (no gaps, no negative
  stride) input with ``ndim >= 2`` runs 8 interleaved lanes over memory: lane ``j`` takes
  the positions ``p < n - n % 8`` with ``p % 8 == j``; the lanes are combined in lane order,
  then the remaining ``n % 8`` elements in order.

The generator's loop nest stays in logical order (contiguous, vectorizable). Where the
order matters it either visits a permuted view (`permuted_view`: a CAReduce float sum
without ``reassoc``, only when two or more reduced axes can be longer than 1), or, for
max/min, keeps the fast NaN-propagating ``llvm.maximum``/``minimum`` for the value and a
second, order-free accumulator, the *zero key*: the smallest ``(position << 1) | sign``
over the zeros seen, ``position`` being the element's rank in the stock order
(`positions`). A zero result then takes the sign of the first zero (`fix_zero_sign`).
Keys are global positions, so blocks and threads combine them with a plain minimum and
the result never depends on how the loop was split.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types

NO_ZERO = -1  # the zero key before anything is seen (all ones: the largest, unsigned)
LANES = 8  # stock's lane count for a full max/min of a dense input
MAX_STOCK_LOOPS = 50  # stock's MAX_CAREDUCE_LOOPS: past it, partial reductions regroup sums


def _abs(builder, v):
    return builder.select(builder.icmp_signed("<", v, v.type(0)), builder.neg(v), v)


def _before(builder, strides, a: int, b: int):
    """i1: axis ``a`` is visited before (outside of) axis ``b`` in the stock order."""
    sa, sb = strides[a], strides[b]
    gt = builder.icmp_signed(">", sa, sb)
    if a < b:
        return gt
    return builder.or_(gt, builder.icmp_signed("==", sa, sb))


def stock_weights(builder, shape, strides, axes=None):
    """Per axis, the weight of its index in the element's rank in the stock order: the
    product of the lengths of the axes visited inside it. ``axes`` restricts the order to
    those axes (the others get weight 0)."""
    abs_strides = [_abs(builder, s) for s in strides]
    axes = range(len(shape)) if axes is None else axes
    one = shape[0].type(1) if shape else ir.IntType(64)(1)
    weights = []
    for a in range(len(shape)):
        if a not in axes:
            weights.append(one.type(0))
            continue
        w = one
        for b in axes:
            if b != a:
                w = builder.mul(w, builder.select(_before(builder, abs_strides, a, b), shape[b], one))
        weights.append(w)
    return weights


def is_dense(builder, shape, strides, itemsize, weights):
    """Stock's ``_is_non_reversed_dense``: every axis longer than 1 has the stride of a
    gap-free layout in the stock order (negative strides are not dense)."""
    ok = cgutils.true_bit
    for length, stride, weight in zip(shape, strides, weights, strict=True):
        fits = builder.icmp_signed("==", stride, builder.mul(weight, itemsize))
        long = builder.icmp_signed(">", length, length.type(1))
        ok = builder.and_(ok, builder.or_(builder.not_(long), fits))
    return ok


def first_zero_in_lanes(context, builder, array, dtype, total):
    """The zero key of the first zero in stock's 8-lane order over a dense ``array`` of
    ``total`` elements (memory order: lane ``j`` holds the positions ``p % 8 == j`` below
    ``total - total % 8``, then the remainder follows). Run only when the result is a zero,
    so some element is one."""
    intp = total.type
    data = builder.bitcast(array.data, context.get_data_type(dtype).as_pointer())
    limit = builder.sub(total, builder.srem(total, intp(LANES)))
    per_lane = builder.sdiv(limit, intp(LANES))
    safe = builder.select(builder.icmp_signed(">", per_lane, intp(0)), per_lane, intp(1))
    key = cgutils.alloca_once_value(builder, intp(NO_ZERO))
    index = cgutils.alloca_once_value(builder, intp(0))
    cond = builder.append_basic_block("lanes.cond")
    body = builder.append_basic_block("lanes.body")
    end = builder.append_basic_block("lanes.end")
    builder.branch(cond)
    builder.position_at_end(cond)
    q = builder.load(index)
    more = builder.and_(
        builder.icmp_signed("<", q, total), builder.icmp_signed("==", builder.load(key), intp(NO_ZERO))
    )
    builder.cbranch(more, body, end)
    builder.position_at_end(body)
    # the q-th element in lane order: lane q // per_lane, its (q % per_lane)-th element
    in_lanes = builder.icmp_signed("<", q, limit)
    lane_pos = builder.add(builder.mul(builder.srem(q, safe), intp(LANES)), builder.sdiv(q, safe))
    position = builder.select(in_lanes, lane_pos, q)
    value = builder.load(builder.gep(data, [position]))
    found = zero_key(builder, value, q)
    is_zero = builder.icmp_unsigned("<", found, intp(1 << 62))
    builder.store(builder.select(is_zero, found, builder.load(key)), key)
    builder.store(builder.add(q, intp(1)), index)
    builder.branch(cond)
    builder.position_at_end(end)
    return builder.load(key)


def zero_key(builder, value, rank):
    """``(rank << 1) | signbit(value)``, plus bit 62 when ``value`` is not a zero: a plain
    unsigned minimum then finds the first zero. (Not a select: LLVM vectorizes a ``umin``
    reduction, not a conditional one.)"""
    int_ty = ir.IntType(32 if isinstance(value.type, ir.FloatType) else 64)
    bits = builder.bitcast(value, int_ty)
    sign = builder.lshr(bits, int_ty(int_ty.width - 1))
    sign = builder.zext(sign, rank.type) if int_ty.width < rank.type.width else sign
    key = builder.or_(builder.shl(rank, rank.type(1)), sign)
    not_zero = builder.fcmp_unordered("!=", value, ir.Constant(value.type, 0.0))
    return builder.or_(key, builder.shl(builder.zext(not_zero, rank.type), rank.type(62)))


def fix_zero_sign(builder, value, key):
    """A zero ``value`` takes the sign recorded in ``key`` (the first zero's)."""
    negative = builder.trunc(key, ir.IntType(1))
    zero = builder.select(negative, ir.Constant(value.type, -0.0), ir.Constant(value.type, 0.0))
    return builder.select(builder.fcmp_ordered("==", value, ir.Constant(value.type, 0.0)), zero, value)


def permuted_view(context, builder, array_type, array, slots):
    """A view of ``array`` whose axes at ``slots`` (ascending) hold the same axes in stock
    order (outermost first); the other axes stay. Returns (type, struct, shape)."""
    shape = cgutils.unpack_tuple(builder, array.shape)
    strides = cgutils.unpack_tuple(builder, array.strides)
    abs_strides = [_abs(builder, s) for s in strides]
    # rank of each slot's axis among the slots: how many of them come before it
    ranks = {}
    for a in slots:
        r = shape[0].type(0)
        for b in slots:
            if b != a:
                r = builder.add(r, builder.zext(_before(builder, abs_strides, b, a), r.type))
        ranks[a] = r
    new_shape, new_strides = list(shape), list(strides)
    for k, slot in enumerate(slots):
        length, stride = shape[slots[0]], strides[slots[0]]
        for a in slots:
            here = builder.icmp_signed("==", ranks[a], ranks[a].type(k))
            length = builder.select(here, shape[a], length)
            stride = builder.select(here, strides[a], stride)
        new_shape[slot], new_strides[slot] = length, stride
    view_type = types.Array(array_type.dtype, array_type.ndim, "A")
    view = context.make_array(view_type)(context, builder)
    cgutils.copy_struct(view, array)
    view.shape = cgutils.pack_array(builder, new_shape)
    view.strides = cgutils.pack_array(builder, new_strides)
    return view_type, view, new_shape


__all__ = [
    "NO_ZERO",
    "fix_zero_sign",
    "first_zero_in_lanes",
    "is_dense",
    "permuted_view",
    "stock_weights",
    "zero_key",
]
