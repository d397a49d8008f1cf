"""Node functions that are numba intrinsics: lowered straight into the function calling them.

A node function numba compiles is one more run of numba's whole pipeline in every cold
process (bytecode analysis, type inference, lowering, its own LLVM module optimized, then
linked into the graph's and optimized again), even for a node that only moves a few
elements (CHANGELOG.md, "Small nodes as intrinsics"). An intrinsic has no pipeline of
its own: numba types the call with the typer below and the codegen writes the node's IR into
the caller's function, where LLVM optimizes it once, with the caller.

Only nodes that move values are lowered so (`compact.arrays`, `compact.views`,
`compact.subtensor`, `compact.join`, `compact.advanced`'s gathers):
loads, stores, allocation, views, whose values are the same bits whatever optimizes them;
and increments (`compact.increments`, `compact.advanced`'s scatters), whose
each ``+=`` is one operation on two loaded elements, in stock's order, carrying the caller's
fast-math flags as stock's function carries the same setting: nothing LLVM can regroup.
(A view inside the graph's function could let LLVM regroup a reassociable sum around it;
reassociating kernels are optimized in libraries of their own, `own_library`, which the
graph's code does not reach.)

The helpers are numba's own lowering pieces, the ones its ``np.empty``, ``getitem`` and
``setitem`` implementations use: `numba.np.arrayobj._empty_nd_impl` (allocation),
`cgutils.get_item_pointer` (indexing without wraparound, as a non-negative index is),
`arrayobj.load_item` / `arrayobj.store_item` (the data model: a bool is a byte in memory),
``context.cast`` (setitem's conversion of the stored value to the array's dtype).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np import arrayobj

from ptnumba_codegen.lowering.kernel import define, dry_run
from ptnumba_codegen.lowering.own_library import as_dispatcher, dispatcher_call

log = logging.getLogger("ptnumba_codegen")


def node_intrinsic(name: str, n_args: int, typer: Callable, stock: Callable):
    """The node function ``name(a0, ...)``: an intrinsic when the generator can lower the call,
    else a call of ``stock()`` (the stock node function, a numba dispatcher, built only then).

    ``typer(typingctx, arg_types)`` returns ``(signature, emit)``, where ``emit(context,
    builder, args)`` returns the result, or None when these types are not the node's. Before
    numba uses it, ``emit`` runs into a throwaway function (`kernel.dry_run`); if the typer or
    that run raises, the call is stock's, so an error of the generator is a per-node fallback
    decided while the caller is typed, never an exception at its first call."""
    built = []  # the stock dispatcher, kept alive (numba's Dispatcher type refers to it weakly)

    def choose(typingctx, arg_types):
        try:
            got = typer(typingctx, arg_types)
            problem = None if got is None else dry_run(lambda c, b, args: got[1](c, b, args), arg_types)
        except Exception as err:  # noqa: BLE001  (any failure of the generator)
            got, problem = None, f"{type(err).__name__}: {err}"
        if got is not None and problem is None:
            signature, emit = got
            return signature, lambda context, builder, sig, args: emit(context, builder, list(args))
        if problem is not None:
            log.info("%s falls back to the stock node function: %s", name, problem)
        if not built:
            built.append(as_dispatcher(stock(), n_args))
        call = dispatcher_call(typingctx, built[0], tuple(arg_types), built)
        if call is None:
            return None
        return call.return_type(*arg_types), lambda context, builder, sig, args: call.emit(context, builder, list(args))

    return fixed_arity_intrinsic(name, n_args, choose)


def fixed_arity_intrinsic(name: str, n_args: int, typer: Callable):
    """An intrinsic ``name(a0, ..., a{n_args-1})``: ``typer(typingctx, arg_types)`` returns
    ``(signature, codegen)`` or None, as an intrinsic's definition does. Named parameters,
    not ``*args``: numba packs star arguments into a tuple the codegen would have to unpack,
    and PyTensor's graph calls a node function with its inputs one by one."""
    params = ", ".join(f"a{k}" for k in range(n_args))
    src = f"def {name}(typingctx{', ' if n_args else ''}{params}):\n    return typer(typingctx, ({params}{',' if n_args else ''}))\n"
    return intrinsic(define(src, typer=typer))


def new_array(context, builder, aryty: types.Array, shape: list[ir.Value]):
    """A new C array of ``aryty`` (numba's allocation, as ``np.empty``'s) of ``shape``."""
    return arrayobj._empty_nd_impl(context, builder, aryty, shape)


def array_struct(context, builder, aryty: types.Array, value: ir.Value):
    return context.make_array(aryty)(context, builder, value)


def load(context, builder, aryty: types.Array, ary, index: list[ir.Value]) -> ir.Value:
    """``ary[index]`` for non-negative indices (an empty ``index`` for a 0-d array)."""
    return arrayobj.load_item(context, builder, aryty, cgutils.get_item_pointer(context, builder, aryty, ary, index))


def store(context, builder, aryty: types.Array, ary, index: list[ir.Value], value: ir.Value, value_type) -> None:
    """``ary[index] = value``, converted to the array's dtype as numba's setitem converts it."""
    converted = context.cast(builder, value, value_type, aryty.dtype)
    arrayobj.store_item(context, builder, aryty, converted, cgutils.get_item_pointer(context, builder, aryty, ary, index))


def element(context, builder, ty, value) -> tuple:
    """``(value, numba type)`` of one element: a 0-d array's item, or the scalar itself."""
    if isinstance(ty, types.Array):
        return load(context, builder, ty, array_struct(context, builder, ty, value), []), ty.dtype
    return value, ty


def is_element(ty) -> bool:
    return (isinstance(ty, types.Array) and ty.ndim == 0) or isinstance(ty, types.Number | types.Boolean)


def intp(context, value: int) -> ir.Value:
    return context.get_constant(types.intp, value)


__all__ = ["array_struct", "element", "is_element", "fixed_arity_intrinsic", "intp", "load", "new_array", "node_intrinsic", "store"]
