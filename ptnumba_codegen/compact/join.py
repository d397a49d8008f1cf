"""``Join`` filled inside its caller, without a numba function of its own.

PyTensor's numba ``Join`` is a function generated per axis and looped dimensions: the
length of the joined axis summed over the inputs, every other dimension checked against
the first input's, ``out = np.empty(shape, dtype)``, then one loop nest per input copying
its elements to ``out[..., j + off, ...]`` (dimensions the output's type fixes at length 1
are not looped: index 0). numba compiles it, and ``np.empty``'s overload behind it, in
every cold process (the core catalogue models with a join: a gradient's or a Scan's
concatenation; CHANGELOG.md, "Cold compile: stock node functions compiled as intrinsics").

The compact ``Join`` (`JOIN`) is the same op (a subclass: shape inference, gradient, printing are Join's).
Its node function is an intrinsic (`compact.node_intrinsics`) that writes the same steps
into its caller with numba's own pieces: the sums and checks in stock's order with stock's
message, the allocation of ``np.empty`` (`node_intrinsics.new_array`), and the copies as
numba's item loads and stores, each element converted to the output's dtype as numba's
setitem converts it. It moves values, no arithmetic on them (tests/test_compact_join.py).
"""

from __future__ import annotations

import numpy as np
from numba.core import cgutils, types
from numba.np import arrayobj
from numba.np.numpy_support import from_dtype

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource

MISMATCH_MESSAGE = "all the input array dimensions except for the concatenation axis must match exactly"  # stock's


def why_not_compact(node) -> str | None:
    """Why ``node`` (a ``Join``) keeps the stock op, or None: an integer ``axis`` of the op
    (PyTensor's Join; the tensors are its only inputs)."""
    axis = getattr(node.op, "axis", None)
    if not isinstance(axis, int) or not node.inputs:
        return f"its axis is not a property of the op ({axis!r})"
    ndim = node.outputs[0].type.ndim
    if any(v.type.ndim != ndim for v in node.inputs):
        return "an input of another rank than the output"
    return None


def join_intrinsic(axis: int, n_inputs: int, out_dtype: str, static_shape: tuple, stock):
    """``join(t0, t1, ...)``: stock's generated function (see above) lowered into the
    caller; ``stock()`` where these types are not the node's."""
    ndim = len(static_shape)
    looped = [d for d in range(ndim) if d == axis or static_shape[d] != 1]

    def typer(typingctx, arg_types):
        if len(arg_types) != n_inputs or not all(isinstance(t, types.Array) and t.ndim == ndim for t in arg_types):
            return None
        out_type = types.Array(from_dtype(np.dtype(out_dtype)), ndim, "C")
        if not all(typingctx.can_convert(t.dtype, out_type.dtype) for t in arg_types):
            return None

        def emit(context, builder, args):
            arrays = [ni.array_struct(context, builder, t, v) for t, v in zip(arg_types, args, strict=True)]
            shapes = [cgutils.unpack_tuple(builder, a.shape, ndim) for a in arrays]
            total = shapes[0][axis]
            for shape in shapes[1:]:
                total = builder.add(total, shape[axis])
            for shape in shapes[1:]:
                for d in range(ndim):
                    if d == axis:
                        continue
                    with builder.if_then(builder.icmp_signed("!=", shape[d], shapes[0][d]), likely=False):
                        context.call_conv.return_user_exc(builder, ValueError, (MISMATCH_MESSAGE,))
            out_shape = [total if d == axis else shapes[0][d] for d in range(ndim)]
            out = ni.new_array(context, builder, out_type, out_shape)
            out_dims = cgutils.unpack_tuple(builder, out.shape, ndim)
            out_strides = cgutils.unpack_tuple(builder, out.strides, ndim)
            zero = ni.intp(context, 0)
            off = zero
            intp_t = context.get_value_type(types.intp)
            for ty, array, shape in zip(arg_types, arrays, shapes, strict=True):
                strides = cgutils.unpack_tuple(builder, array.strides, ndim)
                with cgutils.loop_nest(builder, [shape[d] for d in looped], intp_t) as loop:
                    at = dict(zip(looped, loop, strict=True))
                    src = [at.get(d, zero) for d in range(ndim)]
                    dst = [builder.add(at[d], off) if d == axis else at.get(d, zero) for d in range(ndim)]
                    value = arrayobj.load_item(
                        context, builder, ty, cgutils.get_item_pointer2(context, builder, array.data, shape, strides, ty.layout, src)
                    )
                    stored = context.cast(builder, value, ty.dtype, out_type.dtype)
                    arrayobj.store_item(
                        context, builder, out_type, stored,
                        cgutils.get_item_pointer2(context, builder, out.data, out_dims, out_strides, "C", dst),
                    )
                off = builder.add(off, shape[axis])
            return out._getvalue()

        return out_type(*arg_types), emit

    return ni.node_intrinsic("join", n_inputs, typer, stock)


def join_params(op, node) -> tuple:
    """The record's params: the axis, the inputs' count, the output's dtype and static shape."""
    out = node.outputs[0].type
    return op.axis, len(node.inputs), out.dtype, tuple(out.shape)


JOIN = Replica(
    stock_op="pytensor.tensor.basic:Join",
    reason="a numba function of its own per axis and looped dimensions, which compiles np.empty's overload "
    "besides; the compact one is an intrinsic inside its caller making stock's checks, allocation "
    "and copies with numba's own pieces",
    source=StockSource(
        functions=("pytensor.link.numba.dispatch.tensor_basic:numba_funcify_Join",),
        digests={"5639be9a1adbdde0": SUPPORTED_PYTENSOR},
    ),
    params=join_params,
    intrinsic=join_intrinsic,
    takes=why_not_compact,
)


__all__ = ["JOIN", "MISMATCH_MESSAGE", "join_intrinsic", "join_params", "why_not_compact"]
