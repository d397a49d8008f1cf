"""A function whose IR the generator writes itself, in a code library of its own, called from
the IR of whoever calls it.

A kernel's entry (read the inputs, run the loop, finish the outputs) as generated Python
source that numba compiles as an overload costs one run of numba's whole pipeline per
kernel in every cold process (bytecode analysis, type inference, lowering) for a function
whose IR is a call of the loop and a few casts (CHANGELOG.md, "Kernel entries without
numba's pipeline"). Here the entry's IR is emitted directly, while the caller is
typed, into a module of its own:

- its library is optimized alone and linked into the caller's as numba links a compiled
  function's (the caller's final module optimizes it again, as it does a numba function's);
- numba's fast-math pass rewrites the caller's own module only (`CPUContext.post_lowering`),
  never this one: the entry is emitted with the kernel's context (fast-math off, numpy's
  error model, NRT on, `kernel.dry_run_context`), so the policy alone sets every flag;
- emitting it is the compile check, no dry run apart: an exception is raised to the typer,
  which gives the node the stock kernel instead, decided while the caller is typed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.core.dispatcher import Dispatcher
from numba.core.imputils import lower_builtin
from numba.core.typing.templates import Signature
from numba.extending import type_callable

from ptnumba_codegen.lowering.base import define

_serial = itertools.count()


@dataclass(frozen=True)
class OwnFunction:
    """A function defined in its own finalized code library, with numba's calling convention."""

    library: object  # numba CodeLibrary
    symbol: str
    signature: Signature


def build_own_function(context, name: str, signature: Signature, emit: Callable, inline: bool = False) -> OwnFunction:
    """Define ``name`` of ``signature`` in a new library: ``emit(context, builder, args)``
    writes its body and returns the value it returns. ``inline``: the function asks LLVM to
    inline it into its callers (``alwaysinline``, `entry.EntryInlining`)."""
    symbol = f"ptnumba_entry.{name}.{next(_serial)}"
    library = context.codegen().create_library(symbol)
    module = library.create_ir_module(symbol)
    arg_types = tuple(signature.args)
    fn = cgutils.get_or_insert_function(module, context.call_conv.get_function_type(signature.return_type, arg_types), symbol)
    context.call_conv.decorate_function(fn, [f"a{k}" for k in range(len(arg_types))], arg_types)
    if inline:
        fn.attributes.add("alwaysinline")
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    with context.push_code_library(library):
        raw = context.call_conv.get_arguments(fn)
        args = list(context.get_arg_packer(arg_types).from_arguments(builder, raw))
        result = emit(context, builder, args)
        # the value form to the return form (a boolean is an i8 there), as numba's ``return``
        context.call_conv.return_value(builder, context.get_return_value(builder, signature.return_type, result))
        context.post_lowering(module, library)
    library.add_ir_module(module)
    library.finalize()
    return OwnFunction(library, symbol, signature)


def call_own_function(context, builder, own: OwnFunction, args):
    """Call ``own`` from ``builder``'s function and link its library into the caller's; an
    exception it raises is propagated to the caller's caller, as numba's own calls do."""
    context.active_code_library.add_linking_library(own.library)
    arg_types = tuple(own.signature.args)
    fnty = context.call_conv.get_function_type(own.signature.return_type, arg_types)
    fn = cgutils.get_or_insert_function(builder.module, fnty, own.symbol)
    context.call_conv.decorate_function(fn, [f"a{k}" for k in range(len(arg_types))], arg_types)
    status, result = context.call_conv.call_function(builder, fn, own.signature.return_type, arg_types, list(args))
    with cgutils.if_unlikely(builder, status.is_error):
        context.call_conv.return_status_propagate(builder, status)
    return result


@dataclass(frozen=True)
class ChosenCall:
    """How numba calls a node function for one tuple of argument types: the return type and
    ``emit(context, builder, args) -> value`` (a call of an `OwnFunction`, or of a dispatcher)."""

    return_type: types.Type
    emit: Callable


def own_call(own: OwnFunction) -> ChosenCall:
    """The call of ``own`` (`call_own_function`), as a typed call's choice."""
    return ChosenCall(own.signature.return_type, lambda context, builder, args: call_own_function(context, builder, own, args))


def typed_call(fn: Callable, n_args: int, choose: Callable) -> None:
    """Make numba type and lower calls of the Python function ``fn(a0, ..., a{n_args-1})``
    with ``choose(typingctx, arg_types) -> ChosenCall | None``, asked once per argument types
    (numba's type inference may resolve a call several times). ``fn`` stays an ordinary
    Python function outside numba. No pipeline runs for the call itself: the template is a
    Python typer and the lowering is ``ChosenCall.emit``."""
    chosen: dict[tuple, ChosenCall | None] = {}

    def resolve(typingctx, arg_types: tuple) -> ChosenCall | None:
        if arg_types not in chosen:
            chosen[arg_types] = choose(typingctx, arg_types)
        return chosen[arg_types]

    params = ", ".join(f"a{k}" for k in range(n_args))

    @type_callable(fn)
    def _typing(typingctx):
        # named parameters: a star parameter would make numba pack the arguments in a tuple
        return define_typer(params, lambda arg_types: getattr(resolve(typingctx, arg_types), "return_type", None))

    @lower_builtin(fn, types.VarArg(types.Any))
    def _lower(context, builder, sig, args):
        return chosen[tuple(sig.args)].emit(context, builder, list(args))


def define_typer(params: str, typer: Callable):
    """``lambda a0, ...: typer((a0, ...))`` with named parameters (numba binds a typer's own)."""
    return define(f"def typer_of_args({params}):\n    return typer(({params}{',' if params else ''}))\n", typer=typer)


def as_dispatcher(fn: Callable, n_args: int, **jit_options):
    """``fn`` if numba compiles it as a dispatcher, else a jitted function calling it (an
    overloaded Python function, as some stock node functions are)."""
    if isinstance(fn, Dispatcher):
        return fn
    params = ", ".join(f"x{k}" for k in range(n_args))
    return njit(**jit_options)(define(f"def stock_node({params}):\n    return fn({params})\n", fn=fn))


def dispatcher_call(typingctx, dispatcher, arg_types: tuple, keep: list) -> ChosenCall | None:
    """The call of a numba dispatcher (compiled for ``arg_types`` now, while the caller is
    typed). ``keep`` holds the dispatcher alive: numba's Dispatcher type refers to it weakly."""
    if not any(d is dispatcher for d in keep):
        keep.append(dispatcher)
    fnty = types.Dispatcher(dispatcher)
    signature = typingctx.resolve_function_type(fnty, tuple(arg_types), {})
    if signature is None:
        return None

    def emit(context, builder, args):
        return context.get_function(fnty, signature)(builder, args)

    return ChosenCall(signature.return_type, emit)


__all__ = ["ChosenCall", "OwnFunction", "as_dispatcher", "build_own_function", "call_own_function", "dispatcher_call",
           "own_call", "typed_call"]
