"""numba's ``as_strided`` written as IR: a view with given shape and strides, no compile.

A squeezed view of a partial reduction (a kernel's ``squeeze`` finish, the stock loop's
reduced outputs) is ``as_strided(raw, shape=kept, strides=kept)``. numba compiles its
overload (``as_strided_impl`` and two helpers) once per array type in every cold process
(CHANGELOG.md, "The stock loop of an indexed kernel and squeezed views as IR"). What it
compiles to is numba's ``reshape_unchecked``:
an array of ``raw``'s meminfo, data and itemsize with the new shape and strides, no parent,
its reference taken (``impl_ret_borrowed``).

Here that is a ``linkonce_odr`` function of the caller's module with numba's calling
convention, called as numba calls the compiled overload (``call_internal``), as
`formula_ir` does for the stock formulas: LLVM meets an opaque call where it met the linked
one and inlines it when it optimizes the whole module. The final IR is the compiled
overload's: tests/test_own_library.py compares kernels with partial sums against their
generated entries (which call the compiled overload), tests/test_stock_loop_ir.py the stock
loop's reduced outputs against the compiled ``fused_elemwise_impl``.
"""

from __future__ import annotations

import re

from llvmlite import ir
from numba.core import cgutils, types
from numba.np import arrayobj


def view_type(raw_type: types.Array, ndim: int) -> types.Array:
    """The type of ``as_strided(raw, ...)`` with ``ndim`` axes (``reshape_unchecked``'s)."""
    return raw_type.copy(ndim=ndim, layout="A")


def _as_strided_function(context, module, raw_type: types.Array, ndim: int) -> ir.Function:
    out_type = view_type(raw_type, ndim)
    tuple_type = types.UniTuple(types.intp, ndim)
    arg_types = [raw_type, tuple_type, tuple_type]
    symbol = "ptnumba_codegen.as_strided." + re.sub(r"[^A-Za-z0-9_]+", "_", f"{raw_type}.{ndim}")
    fn = module.globals.get(symbol)
    if fn is not None:
        return fn
    call_conv = context.call_conv
    fn = ir.Function(module, call_conv.get_function_type(out_type, arg_types), symbol)
    fn.linkage = "linkonce_odr"  # as numba links a library's functions into its callers
    call_conv.decorate_function(fn, ["x", "shape", "strides"], arg_types)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    x, shape, strides = context.get_arg_packer(arg_types).from_arguments(builder, call_conv.get_arguments(fn))
    ary = context.make_array(raw_type)(context, builder, x)
    out = context.make_array(out_type)(context, builder)
    arrayobj.populate_array(
        out,
        data=ary.data,
        shape=cgutils.unpack_tuple(builder, shape, ndim),
        strides=cgutils.unpack_tuple(builder, strides, ndim),
        itemsize=ary.itemsize,
        meminfo=ary.meminfo,
    )
    value = out._getvalue()
    context.nrt.incref(builder, out_type, value)  # reshape_unchecked's impl_ret_borrowed
    call_conv.return_value(builder, context.get_return_value(builder, out_type, value))
    return fn


def as_strided_call(context, builder, raw_type: types.Array, raw, shape: list, strides: list):
    """``as_strided(raw, shape=tuple(shape), strides=tuple(strides))`` as numba calls its
    compiled overload: the view (a new reference), ``raw``'s own reference untouched."""
    ndim = len(shape)
    tuple_type = types.UniTuple(types.intp, ndim)
    fn = _as_strided_function(context, builder.module, raw_type, ndim)
    args = [raw, context.make_tuple(builder, tuple_type, shape), context.make_tuple(builder, tuple_type, strides)]
    out_type = view_type(raw_type, ndim)
    status, view = context.call_conv.call_function(builder, fn, out_type, [raw_type, tuple_type, tuple_type], args)
    with cgutils.if_unlikely(builder, status.is_error):
        context.call_conv.return_status_propagate(builder, status)
    return view


def squeezed_view(context, builder, raw_type: types.Array, raw, kept_axes: tuple):
    """``as_strided(raw, shape=kept lengths, strides=kept strides)`` (`as_strided_call`), then
    ``raw``'s reference given back, as numba does when ``raw`` dies: the view of a partial
    reduction's keepdims output without its reduced axes."""
    ary = context.make_array(raw_type)(context, builder, raw)
    shape = cgutils.unpack_tuple(builder, ary.shape, raw_type.ndim)
    strides = cgutils.unpack_tuple(builder, ary.strides, raw_type.ndim)
    view = as_strided_call(context, builder, raw_type, raw, [shape[a] for a in kept_axes], [strides[a] for a in kept_axes])
    context.nrt.decref(builder, raw_type, raw)
    return view


__all__ = ["as_strided_call", "squeezed_view", "view_type"]
