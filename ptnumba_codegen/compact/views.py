"""``DimShuffle``'s view built in one function, without numba's ``as_strided``.

PyTensor's numba ``DimShuffle`` makes its view in one of three ways, each a numba
function calling others, each compiled in every cold process:

- to a 0-d array (``new_order == ()``): ``as_strided(x, shape=(), strides=())`` after a
  size check: numba's ``as_strided`` overload, which compiles two helpers of its own
  (``get_shape``, ``get_strides``) before its body, ``reshape_unchecked``;
- from a 0-d array: ``as_strided(np.asarray(x), ...)`` with a shape of ones and strides
  of zeros;
- otherwise: a loop over the new order filling shape and stride tuples one element at a
  time (``tuple_setitem``), the squeeze checks, then a strided view typed with the layout
  the shuffle preserves, behind an overload of its own.

The compact ``DimShuffle`` (`DIMSHUFFLE`) is the same op (a subclass: shape inference,
gradient, printing are DimShuffle's). Its numba function makes the same view the same way with what the node
fixes spelled out: the same checks in the same order with the same message, the view by
numba's own ``reshape_unchecked`` where stock's ``as_strided`` ends there, and by one
intrinsic (`shuffled_view`) elsewhere, which reads the shape and strides the new order
names and types the view as stock's does (PyTensor's own layout rule,
``_dimshuffle_out_layout``, looked up when a view is typed). The same data, shape, strides, owner and numba type as
stock's (tests/test_compact_views.py). A shuffle that drops no axis of an array checks
nothing, and its node function is `shuffled_view` itself, lowered into the graph's function;
one of an array that drops axes is `checked_view`, stock's checks and the view, lowered there
too, and so is one of a 0-d array (`compact.node_intrinsics`: no run of numba's pipeline
for any of them).
"""

from __future__ import annotations

import functools

import numpy as np
from numba.core import cgutils, types
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic
from numba.np.arrayobj import reshape_unchecked
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.utils import compile_function_src

from ptnumba_codegen.compact.node_intrinsics import node_intrinsic
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource, stock_name

SQUEEZE_MESSAGE = "DimShuffle: Attempting to squeeze axes with size not equal to one"  # stock's
ELEMWISE = "pytensor.link.numba.dispatch.elemwise:"
OUT_LAYOUT = ELEMWISE + "_dimshuffle_out_layout"  # PyTensor's layout rule for the view


@functools.cache
def shuffled_view(new_order: tuple[int, ...], unit_axes: frozenset[int]):
    """The intrinsic ``view(x)``: ``x``'s data with the shape and strides ``new_order``
    names (-1: a new axis of length 1 and stride 0), typed as stock's strided view."""

    @intrinsic
    def view(typingctx, arr):
        if not isinstance(arr, types.Array):
            return None
        out_type = view_type(arr, new_order, unit_axes)

        def codegen(context, builder, signature, args):
            return view_of(context, builder, signature.args[0], out_type, args[0], new_order)

        return out_type(arr), codegen

    return view


def view_type(arr: types.Array, new_order: tuple[int, ...], unit_axes: frozenset[int]) -> types.Array:
    """The numba type of stock's view: its strided view's (PyTensor's own layout rule), or
    ``reshape_unchecked``'s for a view of no axis (``new_order == ()``) or of a 0-d array."""
    if new_order == () or arr.ndim == 0:
        return arr.copy(ndim=len(new_order), layout="A")
    return types.Array(arr.dtype, len(new_order), stock_name(OUT_LAYOUT)(arr.layout, new_order, unit_axes))


def view_of(context, builder, in_type, out_type, value, new_order: tuple[int, ...]):
    """The view's IR: the input's data, owner and itemsize, the shape and strides
    ``new_order`` names (-1: length 1, stride 0); a borrowed reference, as numba's views."""
    in_array = context.make_array(in_type)(context, builder, value)
    old_shape = cgutils.unpack_tuple(builder, in_array.shape)
    old_strides = cgutils.unpack_tuple(builder, in_array.strides)
    one, zero = context.get_constant(types.intp, 1), context.get_constant(types.intp, 0)
    intp_t = context.get_value_type(types.intp)
    out_array = context.make_array(out_type)(context, builder)
    context.populate_array(
        out_array,
        data=in_array.data,
        shape=cgutils.pack_array(builder, [one if o == -1 else old_shape[o] for o in new_order], ty=intp_t),
        strides=cgutils.pack_array(builder, [zero if o == -1 else old_strides[o] for o in new_order], ty=intp_t),
        itemsize=in_array.itemsize,
        meminfo=in_array.meminfo,
        parent=in_array.parent,
    )
    return impl_ret_borrowed(context, builder, out_type, out_array._getvalue())


def squeeze_checks(context, builder, in_type, value, axes) -> None:
    """Stock's check of a dropped axis, in its order: a length other than 1 raises
    ``ValueError(SQUEEZE_MESSAGE)`` (for a view of no axis stock checks ``x.size == 1``,
    which fails exactly when some length is not 1)."""
    in_array = context.make_array(in_type)(context, builder, value)
    shape = cgutils.unpack_tuple(builder, in_array.shape)
    one = context.get_constant(types.intp, 1)
    for axis in axes:
        with builder.if_then(builder.icmp_signed("!=", shape[axis], one), likely=False):
            context.call_conv.return_user_exc(builder, ValueError, (SQUEEZE_MESSAGE,))


def checked_view(input_ndim: int, new_order: tuple[int, ...], drop: tuple[int, ...], unit_axes: frozenset[int],
                 stock):
    """The node function of a shuffle that drops axes (stock's checks, then the view) or of a
    0-d array (a view of length-1 axes with stride 0, as stock's ``reshape_unchecked`` of
    ``np.asarray(x)``, which is ``x`` for an array): a node intrinsic lowered into the graph's
    function (`node_intrinsics`); ``stock()`` (the compact function numba compiles) if the
    generator cannot lower it (a scalar where stock's ``np.asarray`` makes an array)."""

    def typer(typingctx, arg_types):
        (arr,) = arg_types
        if not isinstance(arr, types.Array) or arr.ndim != input_ndim:
            return None
        out_type = view_type(arr, new_order, unit_axes)

        def emit(context, builder, args):
            squeeze_checks(context, builder, arr, args[0], drop)
            return view_of(context, builder, arr, out_type, args[0], new_order)

        return out_type(arr), emit

    return node_intrinsic("dimshuffle", 1, typer, stock)


def dimshuffle_source(op, unit_axes: frozenset[int]) -> tuple[str, dict]:
    """The compact function's source and globals for ``op`` (stock's three cases)."""
    new_order = tuple(op._new_order)
    env = {"np": np, "reshape_unchecked": reshape_unchecked, "MESSAGE": SQUEEZE_MESSAGE}
    if new_order == ():
        lines = ["def dimshuffle(x):", "    if not x.size == 1:", "        raise ValueError(MESSAGE)",
                 "    return reshape_unchecked(x, (), ())"]
    elif op.input_ndim == 0:
        env |= {"shape": (1,) * len(new_order), "strides": (0,) * len(new_order)}
        lines = ["def dimshuffle(x):", "    return reshape_unchecked(np.asarray(x), shape, strides)"]
    else:
        env["view"] = shuffled_view(new_order, unit_axes)
        lines = ["def dimshuffle(x):"]
        for d in op.drop:
            lines += [f"    if x.shape[{d}] != 1:", "        raise ValueError(MESSAGE)"]
        lines.append("    return view(x)")
    return "\n".join(lines) + "\n", env


def shuffle_params(op, node) -> tuple:
    """The record's params: the input's rank, the new order, the dropped axes and the
    input's statically unit axes (sorted), as stock's function and key have them."""
    unit_axes = tuple(axis for axis, length in enumerate(node.inputs[0].type.shape) if length == 1)
    return op.input_ndim, tuple(op._new_order), tuple(op.drop), unit_axes


def dimshuffle_function(op, node, **kwargs):
    """``() ->`` `checked_view`'s fallback: `dimshuffle_source` compiled by numba."""
    src, env = dimshuffle_source(op, frozenset(shuffle_params(op, node)[3]))

    def build():
        return numba_basic.numba_njit(compile_function_src(src, "dimshuffle", env))

    return build


def dimshuffle_node_function(input_ndim: int, new_order: tuple[int, ...], drop: tuple[int, ...],
                             unit_axes: tuple[int, ...], fallback):
    """The view. A shuffle that drops no axis of an array checks nothing: its node function is
    `shuffled_view` itself, lowered into its caller; any other is `checked_view`, the checks and
    the view lowered there (`node_intrinsics`): no numba compile of its own either way."""
    if input_ndim > 0 and new_order and not drop:
        return shuffled_view(new_order, frozenset(unit_axes))
    return checked_view(input_ndim, new_order, drop, frozenset(unit_axes), fallback)


DIMSHUFFLE = Replica(
    stock_op="pytensor.tensor.elemwise:DimShuffle",
    reason="its view goes through numba's as_strided (an overload compiling two helpers) or a loop "
    "of tuple_setitem behind an overload of its own; the compact one reads the axes the node "
    "fixes in one intrinsic, or calls as_strided's own reshape_unchecked",
    source=StockSource(
        functions=(ELEMWISE + "numba_funcify_DimShuffle", OUT_LAYOUT, ELEMWISE + "_make_strided_view"),
        digests={"c4555d9b18687ed2": SUPPORTED_PYTENSOR},
    ),
    params=shuffle_params,
    intrinsic=dimshuffle_node_function,
    fallback=dimshuffle_function,
)


__all__ = ["DIMSHUFFLE", "SQUEEZE_MESSAGE", "checked_view", "dimshuffle_function", "dimshuffle_node_function",
           "dimshuffle_source", "shuffle_params", "shuffled_view", "squeeze_checks", "view_of", "view_type"]
