"""New small arrays built without numpy's constructor overloads.

PyTensor's numba ``MakeVector`` returns ``np.array([x0[()], x1[()], ...], dtype=dtype)``,
``TensorFromScalar`` ``np.array(x)``, ``Shape_i`` ``np.asarray(np.shape(x)[i])`` (a
dimension of an input whose shape PyTensor does not know, pm.Data's) and ``ScalarizedJoin``
(a gradient's vector of scalars and vectors) fills ``np.empty(length, dtype=dtype)``. numba compiles ``np.array``'s
overload (and for a list, a list and ``np.empty``'s overload behind it) and ``np.empty``'s
in every cold process, once per argument types: shape vectors of int64, a gradient's
scalars, a scalar's 0-d array.

Their compact ops (`MAKE_VECTOR`, `TENSOR_FROM_SCALAR`, `SHAPE_I`, `SCALARIZED_JOIN`,
`SCALAR_FROM_TENSOR`) are the same ops (subclasses: shape inference, gradients and printing
are the stock ones'). Their node functions are numba intrinsics (`compact.node_intrinsics`), lowered into the graph's function with no numba compile of
their own: the array is allocated by the code that makes up all of ``np.empty``'s overload
body (`numba_empty_nd`'s, `arrayobj._empty_nd_impl`: the same allocation, checks and numba
type, 'C' layout) and the elements are stored as stock's stores them; an element is converted
to the array's dtype as numba's setitem converts it, which for these nodes is the element's
own (`why_not_compact`). `ScalarFromTensor` loads the 0-d array's item. The same values and
types as stock's (tests/test_compact_arrays.py).
"""

from __future__ import annotations

import numpy as np
from numba.core import cgutils, types
from numba.np.arrayobj import numpy_empty_nd
from numba.np.numpy_support import from_dtype
from pytensor.tensor.type import TensorType

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource

TENSOR_BASIC = "pytensor.link.numba.dispatch.tensor_basic:"


def why_not_compact(node) -> str | None:
    """Why ``node`` (a ``MakeVector``) keeps the stock op, or None: every input a 0-d
    tensor of the output's dtype (what ``make_node`` builds), at least one."""
    if not node.inputs:
        return "no inputs: stock types np.array of an empty list"
    dtype = node.outputs[0].type.dtype
    for inp in node.inputs:
        if not (isinstance(inp.type, TensorType) and inp.type.ndim == 0 and inp.type.dtype == dtype):
            return f"input {inp.type} is not a 0-d tensor of {dtype}"
    return None


def c_array(dtype: str, ndim: int) -> types.Array:
    """numba's type of a new C array of ``dtype`` and rank ``ndim`` (``np.empty``'s)."""
    return types.Array(from_dtype(np.dtype(dtype)), ndim, "C")


def empty_env(dtype: str, ndim: int) -> dict:
    """The globals a generated function needs to call ``numpy_empty_nd(shape, dtype, retty)``
    for a new C array of ``dtype`` and rank ``ndim`` (``np.empty``'s body, not its overload)."""
    return {"numpy_empty_nd": numpy_empty_nd, "dtype": np.dtype(dtype), "retty": c_array(dtype, ndim)}


def make_vector_intrinsic(n: int, dtype: str, stock):
    """``makevector(x0, ..., x{n-1})``: a new C vector of ``dtype`` holding the elements
    (``stock()``: the stock node function, `node_intrinsics.node_intrinsic`)."""
    retty = c_array(dtype, 1)

    def typer(typingctx, arg_types):
        if not all(ni.is_element(t) for t in arg_types):
            return None

        def emit(context, builder, args):
            out = ni.new_array(context, builder, retty, [ni.intp(context, n)])
            for k, (ty, value) in enumerate(zip(arg_types, args, strict=True)):
                ni.store(context, builder, retty, out, [ni.intp(context, k)], *ni.element(context, builder, ty, value))
            return out._getvalue()

        return retty(*arg_types), emit

    return ni.node_intrinsic("makevector", n, typer, stock)


def tensor_from_scalar_intrinsic(dtype: str, stock):
    """``tensor_from_scalar(x)``: a new 0-d C array of ``dtype`` holding ``x``."""
    retty = c_array(dtype, 0)

    def typer(typingctx, arg_types):
        if not ni.is_element(arg_types[0]):
            return None

        def emit(context, builder, args):
            out = ni.new_array(context, builder, retty, [])
            ni.store(context, builder, retty, out, [], *ni.element(context, builder, arg_types[0], args[0]))
            return out._getvalue()

        return retty(*arg_types), emit

    return ni.node_intrinsic("tensor_from_scalar", 1, typer, stock)


def shape_i_intrinsic(i: int, stock):
    """``shape_i(x)``: dimension ``i`` of the array ``x`` in a new 0-d C array of int64
    (stock's ``np.asarray(np.shape(x)[i])``)."""
    retty = c_array("int64", 0)

    def typer(typingctx, arg_types):
        (xty,) = arg_types
        if not isinstance(xty, types.Array) or not 0 <= i < xty.ndim:
            return None

        def emit(context, builder, args):
            xs = ni.array_struct(context, builder, xty, args[0])
            dim = cgutils.unpack_tuple(builder, xs.shape, xty.ndim)[i]
            out = ni.new_array(context, builder, retty, [])
            ni.store(context, builder, retty, out, [], dim, types.intp)
            return out._getvalue()

        return retty(*arg_types), emit

    return ni.node_intrinsic("shape_i", 1, typer, stock)


def scalar_from_tensor_intrinsic(stock):
    """``scalar_from_tensor(x)``: ``x[()]``, the item of a 0-d array, of its dtype."""

    def typer(typingctx, arg_types):
        (aryty,) = arg_types
        if not (isinstance(aryty, types.Array) and aryty.ndim == 0):
            return None

        def emit(context, builder, args):
            return ni.load(context, builder, aryty, ni.array_struct(context, builder, aryty, args[0]), [])

        return aryty.dtype(aryty), emit

    return ni.node_intrinsic("scalar_from_tensor", 1, typer, stock)


def scalar_join_intrinsic(n: int, dtype: str, stock):
    """``scalar_join(i0, ...)``: a new C vector of ``dtype``, each scalar input one element
    and each vector input its elements, in order (stock's ``scalar_join``)."""
    retty = c_array(dtype, 1)

    def typer(typingctx, arg_types):
        if not all(ni.is_element(t) or (isinstance(t, types.Array) and t.ndim == 1) for t in arg_types):
            return None

        def emit(context, builder, args):
            vectors, sizes = {}, []
            for k, (ty, value) in enumerate(zip(arg_types, args, strict=True)):
                if isinstance(ty, types.Array) and ty.ndim == 1:
                    vectors[k] = ni.array_struct(context, builder, ty, value)
                    sizes.append(cgutils.unpack_tuple(builder, vectors[k].shape, 1)[0])
                else:
                    sizes.append(ni.intp(context, 1))
            length = ni.intp(context, 0)
            for size in sizes:
                length = builder.add(length, size)
            out = ni.new_array(context, builder, retty, [length])
            offset = ni.intp(context, 0)
            for k, (ty, value) in enumerate(zip(arg_types, args, strict=True)):
                if k in vectors:
                    with cgutils.for_range(builder, sizes[k]) as loop:
                        item = ni.load(context, builder, ty, vectors[k], [loop.index])
                        ni.store(context, builder, retty, out, [builder.add(offset, loop.index)], item, ty.dtype)
                else:
                    ni.store(context, builder, retty, out, [offset], *ni.element(context, builder, ty, value))
                offset = builder.add(offset, sizes[k])
            return out._getvalue()

        return retty(*arg_types), emit

    return ni.node_intrinsic("scalar_join", n, typer, stock)


MAKE_VECTOR = Replica(
    stock_op="pytensor.tensor.basic:MakeVector",
    reason="np.array of a list: numba compiles the list, np.array's overload and np.empty's behind it, "
    "per argument types; the compact one is an intrinsic storing the scalars into an array from "
    "np.empty's own allocation inside its caller",
    source=StockSource(
        functions=(TENSOR_BASIC + "numba_funcify_MakeVector",),
        digests={"10c4bac1d5a5b3d9": SUPPORTED_PYTENSOR},
    ),
    params=lambda op, node: (len(node.inputs), node.outputs[0].type.dtype),
    intrinsic=make_vector_intrinsic,
    takes=why_not_compact,
)

TENSOR_FROM_SCALAR = Replica(
    stock_op="pytensor.tensor.basic:TensorFromScalar",
    reason="np.array of a scalar: np.array's overload, compiled per dtype; the compact one is an "
    "intrinsic storing the scalar into a 0-d array from np.empty's own allocation inside its caller",
    source=StockSource(
        functions=(TENSOR_BASIC + "numba_funcify_TensorFromScalar",),
        digests={"25af4c29df4ba5dc": SUPPORTED_PYTENSOR},
    ),
    params=lambda op, node: (node.outputs[0].type.dtype,),
    intrinsic=tensor_from_scalar_intrinsic,
)

SHAPE_I = Replica(
    stock_op="pytensor.tensor.shape:Shape_i",
    reason="np.asarray(np.shape(x)[i]): a numba function of its own per axis and input type, with "
    "np.asarray's overload compiled behind it; the compact one is an intrinsic storing the "
    "dimension into a 0-d array from np.empty's own allocation inside its caller",
    source=StockSource(
        functions=("pytensor.link.numba.dispatch.shape:numba_funcify_Shape_i",),
        digests={"efaa13c9b759b4b4": SUPPORTED_PYTENSOR},
    ),
    params=lambda op, node: (op.i,),  # for every input type: the call's type says which
    intrinsic=shape_i_intrinsic,
)

SCALAR_FROM_TENSOR = Replica(
    stock_op="pytensor.tensor.basic:ScalarFromTensor",
    reason="a numba function of its own per dtype (x[()]), one more pipeline and LLVM module; the "
    "compact one is an intrinsic loading the item inside its caller (compact.node_intrinsics)",
    source=StockSource(
        functions=(TENSOR_BASIC + "numba_funcify_ScalarFromTensor",),
        digests={"e57dac0e171ecd38": SUPPORTED_PYTENSOR},
    ),
    params=lambda op, node: (),  # for every dtype: the call's type says which
    intrinsic=scalar_from_tensor_intrinsic,
)

SCALARIZED_JOIN = Replica(
    stock_op="pytensor.tensor.rewriting.scalarize:ScalarizedJoin",
    reason="fills np.empty(length, dtype): np.empty's overload, compiled per dtype; the compact one "
    "is an intrinsic filling an array from np.empty's own allocation inside its caller",
    source=StockSource(
        functions=(TENSOR_BASIC + "numba_funcify_ScalarizedJoin",),
        digests={"8b83b2ab13365693": SUPPORTED_PYTENSOR},
    ),
    # the inputs' count (their types, scalar or vector, are the call's) and the dtype
    params=lambda op, node: (len(node.inputs), node.outputs[0].type.dtype),
    intrinsic=scalar_join_intrinsic,
    rebuilt_by="copy",
)


__all__ = ["MAKE_VECTOR", "SCALARIZED_JOIN", "SCALAR_FROM_TENSOR", "SHAPE_I", "TENSOR_FROM_SCALAR", "c_array",
           "empty_env", "make_vector_intrinsic", "scalar_from_tensor_intrinsic", "scalar_join_intrinsic",
           "shape_i_intrinsic", "tensor_from_scalar_intrinsic", "why_not_compact"]
