"""New small arrays built without numpy's constructor overloads.

PyTensor's numba ``MakeVector`` returns ``np.array([x0[()], x1[()], ...], dtype=dtype)``,
``TensorFromScalar`` ``np.array(x)``, ``Shape_i`` ``np.asarray(np.shape(x)[i])`` (a
dimension of an input whose shape PyTensor does not know, pm.Data's) and ``ScalarizedJoin``
(a gradient's vector of scalars and vectors) fills ``np.empty(length, dtype=dtype)``. numba compiles ``np.array``'s
overload (and for a list, a list and ``np.empty``'s overload behind it) and ``np.empty``'s
in every cold process, once per argument types: shape vectors of int64, a gradient's
scalars, a scalar's 0-d array.

`CompactMakeVector`, `CompactTensorFromScalar`, `CompactShape_i`, `CompactScalarizedJoin`
and `CompactScalarFromTensor` are the same ops (subclasses: shape inference, gradients and
printing are the stock ones'). Their node functions are numba intrinsics
(`lowering.node_intrinsics`), lowered into the graph's function with no numba compile of
their own: the array is allocated by the code that makes up all of ``np.empty``'s overload
body (`numba_empty_nd`'s, `arrayobj._empty_nd_impl`: the same allocation, checks and numba
type, 'C' layout) and the elements are stored as stock's stores them; an element is converted
to the array's dtype as numba's setitem converts it, which for these nodes is the element's
own (`why_not_compact`). `ScalarFromTensor` loads the 0-d array's item. The same values and
types as stock's (tests/test_compact_arrays.py).
"""

from __future__ import annotations

import copy

import numpy as np
from numba.core import cgutils, types
from numba.np.arrayobj import numpy_empty_nd
from numba.np.numpy_support import from_dtype
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key
from pytensor.tensor.basic import MakeVector, ScalarFromTensor, TensorFromScalar
from pytensor.tensor.rewriting.scalarize import ScalarizedJoin
from pytensor.tensor.shape import Shape_i
from pytensor.tensor.type import TensorType

from ptnumba_codegen.backend.node_keys import cache_key, stock_node_function
from ptnumba_codegen.lowering import node_intrinsics as ni


class CompactMakeVector(MakeVector):
    """``MakeVector`` whose numba function stores its scalars into ``np.empty``'s array."""


class CompactTensorFromScalar(TensorFromScalar):
    """``TensorFromScalar`` whose numba function stores the scalar into a 0-d array."""


class CompactShape_i(Shape_i):
    """``Shape_i`` whose numba function stores the dimension into a 0-d int64 array."""


class CompactScalarFromTensor(ScalarFromTensor):
    """``ScalarFromTensor`` whose numba function is an intrinsic loading the 0-d array's item."""


class CompactScalarizedJoin(ScalarizedJoin):
    """``ScalarizedJoin`` whose numba function fills an array from ``np.empty``'s intrinsic."""


# Printed (dprint, str) as the ops they replace, like the other compact ops; pickled by
# their qualified names.
CompactMakeVector.__name__ = "MakeVector"
CompactTensorFromScalar.__name__ = "TensorFromScalar"
CompactScalarizedJoin.__name__ = "ScalarizedJoin"
CompactScalarFromTensor.__name__ = "ScalarFromTensor"
CompactShape_i.__name__ = "Shape_i"


def compact_scalarized_join(node):
    """The compact op for a ``ScalarizedJoin`` node: a copy of its op (an OpFromGraph: the
    same inner graph, built once by the rewrite) of the compact class."""
    op = copy.copy(node.op)
    op.__class__ = CompactScalarizedJoin
    return op


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


@register_funcify_and_cache_key(CompactMakeVector)
def numba_funcify_CompactMakeVector(op, node, **kwargs):
    """The intrinsic and its cache key (`node_keys.cache_key`: the package's source, the
    length and the dtype)."""
    n, dtype = len(node.inputs), node.outputs[0].type.dtype
    return make_vector_intrinsic(n, dtype, stock_node_function(op, node)), cache_key("CompactMakeVector", "intrinsic", n, dtype)


@register_funcify_and_cache_key(CompactTensorFromScalar)
def numba_funcify_CompactTensorFromScalar(op, node, **kwargs):
    """The intrinsic and its cache key (the package's source and the dtype)."""
    dtype = node.outputs[0].type.dtype
    return tensor_from_scalar_intrinsic(dtype, stock_node_function(op, node)), cache_key("CompactTensorFromScalar", "intrinsic", dtype)


@register_funcify_and_cache_key(CompactShape_i)
def numba_funcify_CompactShape_i(op, node, **kwargs):
    """The intrinsic (for every input type: the call's type says which) and its cache key
    (the package's source and the axis)."""
    return shape_i_intrinsic(op.i, stock_node_function(op, node)), cache_key("CompactShape_i", "intrinsic", op.i)


@register_funcify_and_cache_key(CompactScalarFromTensor)
def numba_funcify_CompactScalarFromTensor(op, node, **kwargs):
    """The intrinsic (for every dtype: the call's type says which) and its cache key."""
    return scalar_from_tensor_intrinsic(stock_node_function(op, node)), cache_key("CompactScalarFromTensor", "intrinsic")


@register_funcify_and_cache_key(CompactScalarizedJoin)
def numba_funcify_CompactScalarizedJoin(op, node, **kwargs):
    """The intrinsic and its cache key: the package's source, the dtype and the number of
    inputs (their types, scalar or vector, are the call's)."""
    dtype = node.outputs[0].type.dtype
    return scalar_join_intrinsic(len(node.inputs), dtype, stock_node_function(op, node)), cache_key("CompactScalarizedJoin", "intrinsic", dtype, len(node.inputs))


__all__ = ["CompactMakeVector", "CompactScalarFromTensor", "CompactScalarizedJoin", "CompactShape_i", "CompactTensorFromScalar", "compact_scalarized_join",
           "c_array", "empty_env", "make_vector_intrinsic", "scalar_from_tensor_intrinsic", "scalar_join_intrinsic", "shape_i_intrinsic", "tensor_from_scalar_intrinsic",
           "why_not_compact"]
