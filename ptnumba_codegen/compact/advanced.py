"""Integer-vector gathers and scatters (``x[idx]``, ``x[rows, cols] = v``, their gradients'
``inc_subtensor``) as intrinsics lowered into their caller.

PyTensor's numba ``AdvancedSubtensor``/``AdvancedIncSubtensor`` with integer index vectors
is a function generated per index pattern (``vector_integer_advanced_indexing`` in PyTensor's
dispatch): broadcast the index vectors together (``np.broadcast_shapes``, ``np.broadcast_to``),
then ``out = np.empty(...)`` and a loop ``out[i, ...] = x[idx0[i], ..., ...]`` for a gather;
``z = x.copy()`` (or ``z = x`` in place), a check that the update broadcasts onto the indexed
shape (``np.broadcast_to(y, update_shape)``, whose result it discards) and a loop
``z[idx0[i], ..., ...] += y[...]`` (or ``=``) in index order for a scatter, so that a repeated
index accumulates. Each is one more run of numba's pipeline per pattern and types in every
cold process, with ``np.broadcast_shapes``', ``np.broadcast_to``'s and ``np.empty``'s
overloads behind it (the hierarchical and Gaussian-process models of the catalogue;
CHANGELOG.md, "Cold compile: stock node functions compiled as intrinsics").

The compact ops (`ADVANCED_SUBTENSOR`, `ADVANCED_INC_SUBTENSOR`: subclasses, so shape
inference, gradients and printing are PyTensor's) take the nodes whose indices are
integer vectors on the leading axes, in order (`why_not_compact`): what hierarchical models'
``x[group]`` and packed triangular matrices' ``x[rows, cols]`` are. Their node function is an
intrinsic (`advanced_intrinsic`) writing stock's function into its caller from numba's own
pieces, in stock's order:

- the index vectors' common length with ``np.broadcast_shapes``' test and message (several
  vectors), each read at 0 where its length is 1 (``np.broadcast_to``'s zero stride);
- a gather: numba's ``np.empty`` allocation, C order;
- a scatter: numba's ``x.copy()`` (C order) or ``x`` in place; the tests numba's
  ``_can_broadcast`` makes on the update, with its messages (`compact.increments.broadcast_checks`);
  a 0-d update read once (stock's ``y.item()``);
- per position ``i``, in order: the indices, then numba's basic indexing of ``x`` by them
  (negative indices count from the end, as stock's ``getitem``), then the trailing elements
  in C order, copied, or ``+=`` as numba lowers it for the two dtypes then the store's cast
  (`compact.increments.increment_intrinsic`'s store), the update read as stock's source reads
  it (index 0 along a dimension statically 1, the loop index or 0 by its run-time length
  where unknown).

One difference, where stock has no answer: an index out of bounds raises numba's
``IndexError`` (stock compiles these functions without bounds checks: it reads or writes
outside the array). Every other case keeps the stock op, and the stock function is the
intrinsic's fallback where these types are not the node's.
"""

from __future__ import annotations

import operator

from numba.core import cgutils, types
from numba.core.imputils import impl_ret_borrowed
from numba.np import arrayobj
from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor
from pytensor.tensor.type import integer_dtypes

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.increments import broadcast_checks, update_index
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource
from ptnumba_codegen.compact.subtensor import SUBTENSOR_DISPATCH

SHAPES_MESSAGE = "shape mismatch: objects cannot be broadcast to a single shape"  # numba's np.broadcast_shapes


def _index_inputs(node) -> list:
    return node.inputs[1:] if isinstance(node.op, AdvancedSubtensor) else node.inputs[2:]


FULL_SLICE = slice(None, None, None)


def leading_slices(op) -> int:
    """How many full slices (``:``) come before the index vectors in ``op``'s index list."""
    s = 0
    while s < len(op.idx_list) and op.idx_list[s] == FULL_SLICE:
        s += 1
    return s


def why_not_compact(node) -> str | None:
    """Why ``node`` keeps the stock op, or None: its indices must be integer vectors, one per
    axis of ``x`` after any number of full slices (``x[idx]``, ``x[rows, cols]``, ``x[:, idx]``),
    in order, and a scatter must add every repeated index (PyTensor's ``ignore_duplicates``
    is numpy's ``x[idx] += y``, which stock compiles otherwise)."""
    indices = _index_inputs(node)
    s = leading_slices(node.op)
    if tuple(node.op.idx_list) != (FULL_SLICE,) * s + tuple(range(len(indices))):
        return f"its index list {node.op.idx_list} is not full slices then one index vector per axis"
    if s + len(indices) > node.inputs[0].type.ndim:
        return "more indices than dimensions"
    for idx in indices:
        if idx.type.ndim != 1 or idx.type.dtype not in integer_dtypes:
            return f"index {idx.type} is not an integer vector"
    op = node.op
    if isinstance(op, AdvancedIncSubtensor) and not op.set_instead_of_inc and op.ignore_duplicates:
        return "an increment ignoring repeated indices"
    return None


def _common_length(context, builder, lengths: list):
    """``np.broadcast_shapes`` of the index vectors' shapes ``(n,)``, with numba's test and
    message: the length other than 1, all equal."""
    one = ni.intp(context, 1)
    r = one
    for n in lengths:
        is_one = builder.icmp_signed("==", n, one)
        mismatch = builder.and_(
            builder.and_(builder.not_(is_one), builder.icmp_signed("!=", r, one)), builder.icmp_signed("!=", r, n)
        )
        with builder.if_then(mismatch, likely=False):
            context.call_conv.return_user_exc(builder, ValueError, (SHAPES_MESSAGE,))
        r = builder.select(is_one, r, n)
    return r


def _full_slice(context, builder):
    """``slice(None)`` as numba builds it for a positive step: ``0``, its largest integer, ``1``."""
    helper = context.make_helper(builder, types.slice2_type)
    helper.start = ni.intp(context, 0)
    helper.stop = ni.intp(context, (1 << (types.intp.bitwidth - 1)) - 1)
    helper.step = ni.intp(context, 1)
    return helper._getvalue()


def _moved_to(values: list, position: int) -> list:
    """``values`` with its first item moved to ``position``: stock's axis order of the index
    group after ``position`` full slices (its ``transpose`` of the gathered buffer, its read
    of the update)."""
    return [*values[1 : position + 1], values[0], *values[position + 1 :]]


def _transposed_view(context, builder, out_type, buffer, buffer_type, position: int):
    """The view of the C ``buffer`` (index group first) with that axis moved to
    ``position``: stock's ``out_buffer.transpose(final_axis_order)``."""
    shape = cgutils.unpack_tuple(builder, buffer.shape, buffer_type.ndim)
    strides = cgutils.unpack_tuple(builder, buffer.strides, buffer_type.ndim)
    view = context.make_array(out_type)(context, builder)
    arrayobj.populate_array(
        view,
        data=buffer.data,
        shape=cgutils.pack_array(builder, _moved_to(shape, position)),
        strides=cgutils.pack_array(builder, _moved_to(strides, position)),
        itemsize=buffer.itemsize,
        meminfo=buffer.meminfo,
        parent=buffer.parent,
    )
    return view


def advanced_intrinsic(n_indices: int, stock, scatter: dict | None = None, leading: int = 0):
    """``advanced_subtensor(x, idx_0, ...)``, or with ``scatter`` (``inplace``,
    ``set_instead_of_inc``, ``y_static``: the update's static shape)
    ``advanced_inc_subtensor(x, y, idx_0, ...)``: stock's function (see the module) as an
    intrinsic, the index vectors after ``leading`` full slices; ``stock()`` where these types
    are not the node's."""
    k, s = n_indices, leading
    n_front = 1 if scatter is None else 2

    def typer(typingctx, arg_types):
        xty, idx_types = arg_types[0], arg_types[n_front:]
        if not isinstance(xty, types.Array) or len(idx_types) != k or xty.ndim < s + k:
            return None
        if not all(isinstance(t, types.Array) and t.ndim == 1 and isinstance(t.dtype, types.Integer) for t in idx_types):
            return None
        index_types = (types.slice2_type,) * s + tuple(t.dtype for t in idx_types)
        if scatter is None:
            zty, yty, add = xty, None, None
            buffer_type = types.Array(xty.dtype, 1 + xty.ndim - k, "C")
            # stock returns the buffer transposed, the index group moved after the slices
            out_type = buffer_type if s == 0 else buffer_type.copy(layout="A")
        else:
            yty = arg_types[1]
            if not isinstance(yty, types.Array) or yty.ndim != len(scatter["y_static"]) or yty.ndim > 1 + xty.ndim - k:
                return None
            if scatter["inplace"] and not xty.mutable:
                return None
            zty = xty if scatter["inplace"] else xty.copy(layout="C", readonly=False)
            add = None
            if not scatter["set_instead_of_inc"]:
                add = typingctx.resolve_function_type(operator.iadd, (zty.dtype, yty.dtype), {})
                if add is None:
                    return None
            out_type = zty
        # the trailing elements of x[s_0, ..., s_k-1]: a view of x, or an element
        row = typingctx.resolve_function_type(operator.getitem, (zty, types.BaseTuple.from_types(index_types)), {})
        if row is None:
            return None
        row_type = row.return_type if isinstance(row.return_type, types.Array) else zty.copy(ndim=0)

        def write(context, builder, r_ptr, value, value_type):
            if add is not None:
                old = arrayobj.load_item(context, builder, row_type, r_ptr)
                operands = [context.cast(builder, old, row_type.dtype, add.args[0]), context.cast(builder, value, value_type, add.args[1])]
                value, value_type = context.get_function(operator.iadd, add)(builder, operands), add.return_type
            arrayobj.store_item(context, builder, row_type, context.cast(builder, value, value_type, row_type.dtype), r_ptr)

        def emit(context, builder, args):
            x, idx_values = args[0], args[n_front:]
            idxs = [ni.array_struct(context, builder, t, v) for t, v in zip(idx_types, idx_values, strict=True)]
            lengths = [cgutils.unpack_tuple(builder, a.shape, 1)[0] for a in idxs]
            n = lengths[0] if k == 1 else _common_length(context, builder, lengths)
            zero, one = ni.intp(context, 0), ni.intp(context, 1)
            if scatter is None:
                z = x
            else:
                z = x if scatter["inplace"] else arrayobj._array_copy(context, builder, zty(xty), [x])
            zs = ni.array_struct(context, builder, zty, z)
            x_shape = cgutils.unpack_tuple(builder, zs.shape, zty.ndim)
            rest = [*x_shape[:s], *x_shape[s + k :]]  # the dimensions each index position carries
            if scatter is None:
                out = ni.new_array(context, builder, buffer_type, [n, *rest])
                out_shape = cgutils.unpack_tuple(builder, out.shape, buffer_type.ndim)
                out_strides = cgutils.unpack_tuple(builder, out.strides, buffer_type.ndim)
            else:
                ys = ni.array_struct(context, builder, yty, args[1])
                if yty.ndim == 0:
                    item = ni.load(context, builder, yty, ys, [])
                else:
                    broadcast_checks(context, builder, _moved_to([n, *rest], s), yty, ys)
                    y_shape = cgutils.unpack_tuple(builder, ys.shape, yty.ndim)
                    y_strides = cgutils.unpack_tuple(builder, ys.strides, yty.ndim)
            slices = [_full_slice(context, builder) for _ in range(s)]
            with cgutils.for_range(builder, n) as outer:
                i = outer.index
                scalars = list(slices)
                for t, a, length in zip(idx_types, idxs, lengths, strict=True):
                    at = i if k == 1 else builder.select(builder.icmp_signed("==", length, one), zero, i)
                    scalars.append(ni.load(context, builder, t, a, [at]))
                data, shape, strides = arrayobj.basic_indexing(
                    context, builder, zty, zs, index_types, scalars, boundscheck=True
                )
                with cgutils.loop_nest(builder, shape, context.get_value_type(types.intp)) as inner:
                    r_ptr = cgutils.get_item_pointer2(context, builder, data, shape, strides, row_type.layout, inner)
                    if scatter is None:
                        o_ptr = cgutils.get_item_pointer2(context, builder, out.data, out_shape, out_strides, "C", [i, *inner])
                        arrayobj.store_item(context, builder, buffer_type, arrayobj.load_item(context, builder, row_type, r_ptr), o_ptr)
                    elif yty.ndim == 0:
                        write(context, builder, r_ptr, item, yty.dtype)
                    else:
                        y_index = update_index(builder, _moved_to([i, *inner], s), scatter["y_static"], y_shape, zero, one)
                        y_ptr = cgutils.get_item_pointer2(context, builder, ys.data, y_shape, y_strides, yty.layout, y_index)
                        write(context, builder, r_ptr, arrayobj.load_item(context, builder, yty, y_ptr), yty.dtype)
            if scatter is None:
                return (out if s == 0 else _transposed_view(context, builder, out_type, out, buffer_type, s))._getvalue()
            if scatter["inplace"]:
                return impl_ret_borrowed(context, builder, zty, z)
            return z  # the copy's new reference

        return out_type(*arg_types), emit

    name = "advanced_subtensor" if scatter is None else "advanced_inc_subtensor"
    return ni.node_intrinsic(name, n_front + k, typer, stock)


def gather_intrinsic(n_indices: int, leading: int, stock):
    """`advanced_intrinsic` of a gather: ``advanced_subtensor(x, idx_0, ...)``."""
    return advanced_intrinsic(n_indices, stock, leading=leading)


def scatter_intrinsic(n_indices: int, leading: int, inplace: bool, set_instead: bool, y_static: tuple, stock):
    """`advanced_intrinsic` of a scatter: ``advanced_inc_subtensor(x, y, idx_0, ...)``."""
    return advanced_intrinsic(
        n_indices, stock, {"inplace": inplace, "set_instead_of_inc": set_instead, "y_static": y_static}, leading
    )


# stock's function for both (`vector_integer_advanced_indexing` for the nodes the compact ops take)
STOCK = StockSource(
    functions=(SUBTENSOR_DISPATCH + "numba_funcify_AdvancedSubtensor", SUBTENSOR_DISPATCH + "vector_integer_advanced_indexing"),
    digests={"03d28d5b9931de06": SUPPORTED_PYTENSOR},
)

ADVANCED_SUBTENSOR = Replica(
    stock_op="pytensor.tensor.subtensor:AdvancedSubtensor",
    reason="a numba function of its own per index pattern and types (x[idx], x[rows, cols]), which compiles "
    "np.broadcast_shapes', np.broadcast_to's and np.empty's overloads besides; the compact one is an "
    "intrinsic inside its caller making stock's index broadcast, allocation and copy loop with numba's "
    "own pieces",
    source=STOCK,
    params=lambda op, node: (len(node.inputs) - 1, leading_slices(op)),  # the index vectors, the slices before them
    intrinsic=gather_intrinsic,
    takes=why_not_compact,
)

ADVANCED_INC_SUBTENSOR = Replica(
    stock_op="pytensor.tensor.subtensor:AdvancedIncSubtensor",
    reason="the same for a scatter (a gradient's inc_subtensor of x[idx], a packed matrix's set), which "
    "compiles x.copy()'s and np.broadcast_to's implementations besides; the compact one is an "
    "intrinsic making stock's copy, _can_broadcast's test and loop in index order (a repeated index "
    "adds up) with numba's own pieces",
    source=STOCK,
    # the index vectors, the op's props and the update's static shape (which stock's source spells out)
    params=lambda op, node: (
        len(node.inputs) - 2, leading_slices(op), op.inplace, op.set_instead_of_inc, tuple(node.inputs[1].type.shape)
    ),
    intrinsic=scatter_intrinsic,
    takes=why_not_compact,
)


__all__ = ["ADVANCED_INC_SUBTENSOR", "ADVANCED_SUBTENSOR", "SHAPES_MESSAGE", "advanced_intrinsic", "gather_intrinsic",
           "scatter_intrinsic", "why_not_compact"]
