"""The stock loop of an indexed kernel written as IR, with no numba pipeline of its own.

An indexed FusedElemwise whose body calls no vector formula keeps PyTensor's loop
(`plans.plan_indexed_fused`: ``_vectorized`` with indexed reads and writes, around the
generator's scalar core). Stock compiles it as the overload of a function it generates,
``fused_elemwise_impl``: numba's whole pipeline in every cold process, with the helpers it
calls (``as_strided`` squeezing a reduced output, ``scalar_core`` putting native scalar
inputs first), for every kernel (CHANGELOG.md, "The stock loop of an indexed kernel and
squeezed views as IR").

Here that function is written as numba lowers it, in a code library of its own
(`own_library.build_own_function`), called where the forwarder of `kernel.compiled_or_stock`
called the compiled overload:

- the ``_vectorized`` call is PyTensor's own intrinsic, typed by its own typer with the
  literals the generated function passes (read from the overload's implementation: its
  closure or its globals) and lowered by its own codegen: the same loop, the same indexing,
  the same accumulation;
- the library is compiled with the overload's fast-math flags (``_jit_options``: numba's
  fast-math pass over its own module only, as for the compiled overload);
- each output is finished as the generated function finishes it (`OutputFinish`): as it
  comes, the element of a full reduction (``as_strided(raw, shape=(), strides=())[()]``,
  cast to the output's dtype), or a view of its kept axes (``as_strided`` as IR, `view_ir`);
- ``scalar_core`` (native scalar inputs first) is a forwarder written as IR too.

What it does not write (a cast of a squeezed view, another shape of implementation) raises,
and the forwarder calls the compiled overload as before; so does every call where PyTensor's
source of what it replicates (`STOCK_LOOP`) is not the recorded one. The loop is PyTensor's codegen in
both, so the values are the same bits (tests/test_stock_loop_ir.py compares them with the
compiled overload's, and counts what numba compiles).
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import numpy as np
from numba.core import cgutils, types
from numba.core.cpu_options import FastMathOptions
from numba.core.dispatcher import Dispatcher
from numba.core.typing import signature
from pytensor.link.numba.dispatch import vectorize_codegen
from pytensor.scalar import ScalarType
from pytensor.tensor.elemwise import Elemwise

from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, StockSource
from ptnumba_codegen.lowering.base import Unsupported, define, numba_type
from ptnumba_codegen.lowering.kernel import dry_run_context
from ptnumba_codegen.lowering.view_ir import as_strided_call, squeezed_view, view_type
from ptnumba_codegen.lowering.own_library import ChosenCall, build_own_function, call_own_function, typed_call

# the names the overload's implementation reads (closure or globals), in ``_vectorized``'s order
VECTORIZED_ARGUMENTS = (
    "core_op_fn",
    "input_bc_patterns_enc",
    "output_bc_patterns_enc",
    "output_dtypes_enc",
    "inplace_pattern_enc",
    None,  # allow_core_scalar: True
    None,  # constant_inputs: the native scalar inputs
    None,  # outer_inputs: the arrays
    "core_output_shapes",
    None,  # size: NO_SIZE
    "indexed_inputs_enc",
    "indexed_outputs_enc",
    "reduce_outputs_enc",
    "core_handles_out",
)
STOCK_CORE_NAME = "scalar_core"  # stock's forwarder putting native scalar inputs first

_ELEMWISE = "pytensor.link.numba.dispatch.elemwise:"
_VECTORIZE = "pytensor.link.numba.dispatch.vectorize_codegen:"
# What this module replicates: the function FusedElemwise's overload generates (its scalar
# positions and output finishes), the call of ``_vectorized`` in it (`VECTORIZED_ARGUMENTS`),
# the overload's jit options; and their digest in the supported PyTensors.
STOCK_LOOP = StockSource(
    functions=(_ELEMWISE + "numba_funcify_FusedElemwise", _ELEMWISE + "_build_reduce_impl_src",
               _VECTORIZE + "_vectorized._defn", _VECTORIZE + "_jit_options"),
    digests={"856e872ef5add403": SUPPORTED_PYTENSOR},
)


@functools.cache
def _stock_loop_problem() -> str | None:
    return STOCK_LOOP.problem()


@dataclass(frozen=True)
class OutputFinish:
    """How the generated function finishes one raw output (stock's ``post_specs`` entry)."""

    kept_axes: tuple[int, ...] | None  # None: the output as the loop leaves it
    out_dtype: str = ""
    cast: bool = False
    scalar: bool = False


@dataclass(frozen=True)
class StockLoopShape:
    """What the generated function does around ``_vectorized``: which inputs are native
    scalars (passed first, as constants) and how each output is finished."""

    scalar_positions: tuple[int, ...]
    finishes: tuple[OutputFinish, ...]
    n_inputs: int  # the inner Elemwise's inputs (the scalar core's arguments)

    @property
    def generated(self) -> bool:
        """Stock generates the function's source (else its overload returns ``_vectorized``)."""
        return bool(self.scalar_positions) or any(f.kept_axes is not None for f in self.finishes)


def stock_loop_shape(op, node) -> StockLoopShape:
    """``numba_funcify_FusedElemwise``'s ``scalar_positions`` and ``post_specs`` for ``op``."""
    [el] = [n for n in op.fgraph.apply_nodes if isinstance(n.op, Elemwise)]
    n_in, n_out = len(el.inputs), len(el.outputs)
    scalars = tuple(i for i, inp in enumerate(node.inputs[:n_in]) if isinstance(inp.type, ScalarType))
    finishes = []
    for i, (spec, inner_out) in enumerate(zip(op.reduced_outputs or (None,) * n_out, el.outputs, strict=True)):
        if spec is None:
            finishes.append(OutputFinish(None))
            continue
        _reduce, axes, _identity, acc_dtype = spec
        kept = tuple(d for d in range(inner_out.type.ndim) if d not in axes)
        out_dtype = node.outputs[i].type.dtype
        finishes.append(OutputFinish(kept, out_dtype, np.dtype(acc_dtype) != np.dtype(out_dtype),
                                     isinstance(node.outputs[i].type, ScalarType)))
    return StockLoopShape(scalars, tuple(finishes), n_in)


def _implementation(typingctx, fn, inputs):
    """The Python function stock's overload of ``fn`` returns for ``inputs`` (not compiled)."""
    fnty = typingctx.resolve_value_type(fn)
    templates = [t for t in getattr(fnty, "templates", ()) if hasattr(t, "_overload_func")]
    if len(templates) != 1:
        raise Unsupported(f"{fn} is not one overload")
    return templates[0]._overload_func(*inputs)


def _read_names(impl) -> dict:
    names = dict(impl.__globals__)
    if impl.__closure__:
        names.update(zip(impl.__code__.co_freevars, (c.cell_contents for c in impl.__closure__), strict=True))
    missing = [n for n in VECTORIZED_ARGUMENTS if n is not None and n not in names]
    if missing:
        raise Unsupported(f"the stock implementation does not read {missing}")
    return names


def _fast_context(context, fast: bool):
    """The context the overload is compiled with: its flags (``_jit_options``) on its own module."""
    flags = vectorize_codegen._jit_options()["fastmath"] if fast else False
    return context.subtarget(fastmath=FastMathOptions(flags if flags else False))


def _scalar_core_forwarder(core, order: tuple[int, ...]):
    """``def scalar_core(*ordered): return core(*inputs)`` as a `typed_call` (no pipeline):
    ``order[k]`` is the position in ``core``'s arguments of the forwarder's k-th. One per
    typing of the loop, kept by numba's typing registry as every `typed_call` is (not cached
    here: a cache keyed by ``core`` would keep each kernel's core alive for the process)."""

    def choose(typingctx, arg_types) -> ChosenCall | None:
        fnty = typingctx.resolve_value_type(core)
        inner_types = [None] * len(order)
        for k, position in enumerate(order):
            inner_types[position] = arg_types[k]
        signature = typingctx.resolve_function_type(fnty, tuple(inner_types), {})
        if signature is None:
            return None

        def emit(context, builder, args):
            inner = [None] * len(order)
            for k, position in enumerate(order):
                inner[position] = args[k]
            return context.get_function(fnty, signature)(builder, inner)

        own = build_own_function(dry_run_context(), STOCK_CORE_NAME, signature.return_type(*arg_types), emit)
        return ChosenCall(signature.return_type, lambda context, builder, args: call_own_function(context, builder, own, args))

    params = ", ".join(f"a{k}" for k in range(len(order)))
    forwarder = define(f"def {STOCK_CORE_NAME}({params}):\n    raise NotImplementedError\n")
    typed_call(forwarder, len(order), choose)
    return forwarder


def _core(names: dict, shape: StockLoopShape):
    core = names["core_op_fn"]
    if not shape.scalar_positions:
        return core
    if not (isinstance(core, Dispatcher) and core.py_func.__name__ == STOCK_CORE_NAME):
        raise Unsupported("the stock core is not its scalar_core forwarder")
    inner = core.py_func.__globals__.get("core_op_fn")
    if inner is None:
        raise Unsupported("scalar_core reads no core_op_fn")
    arrays = [i for i in range(shape.n_inputs) if i not in shape.scalar_positions]
    return _scalar_core_forwarder(inner, (*shape.scalar_positions, *arrays))


def _literal_type(typingctx, name: str, value):
    if name == "core_output_shapes":
        return typingctx.resolve_value_type(value)
    return types.literal(value)


def _finished_type(finish: OutputFinish, raw_type):
    """The type of one output as the generated function finishes it."""
    if finish.kept_axes is None:
        return raw_type
    if finish.scalar:
        return numba_type(finish.out_dtype) if finish.cast else raw_type.dtype
    if finish.cast:
        raise Unsupported("a squeezed view cast to another dtype (the generated function's astype/np.array)")
    return view_type(raw_type, len(finish.kept_axes))


def _finish(context, builder, finish: OutputFinish, raw, raw_type):
    """One output as the generated function finishes it (of `_finished_type`)."""
    if finish.kept_axes is None:
        return raw
    if finish.scalar:  # ``as_strided(raw, shape=(), strides=())[()]``: raw's one element
        view = as_strided_call(context, builder, raw_type, raw, [], [])
        view_ty = view_type(raw_type, 0)
        getitem = context.get_function(operator.getitem, signature(view_ty.dtype, view_ty, types.Tuple(())))
        value = getitem(builder, [view, context.make_tuple(builder, types.Tuple(()), [])])
        context.nrt.decref(builder, view_ty, view)  # the temporary view dies
        context.nrt.decref(builder, raw_type, raw)
        if finish.cast:  # ``np.<dtype>(...)``
            return context.cast(builder, value, raw_type.dtype, _finished_type(finish, raw_type))
        return value
    # ``as_strided(raw, shape=kept, strides=kept)``, then raw dies
    return squeezed_view(context, builder, raw_type, raw, finish.kept_axes)


def implementation_in_ir(fn, op, node, fast: bool):
    """``impl_in_ir(typingctx, inputs) -> (return type, emit(context, builder, args))`` for
    `kernel.compiled_or_stock`: stock's overload of ``fn`` (the indexed kernel's loop)
    written as IR; it raises `Unsupported` where it does not apply."""

    def impl_in_ir(typingctx, inputs: tuple):
        if _stock_loop_problem() is not None:
            raise Unsupported(f"the stock loop's source is not the one written here: {_stock_loop_problem()}")
        shape = stock_loop_shape(op, node)  # here: what it cannot read raises to the caller's fallback
        impl = _implementation(typingctx, fn, inputs)
        names = _read_names(impl)
        scalar_types = tuple(inputs[p] for p in shape.scalar_positions)
        array_positions = tuple(p for p in range(len(inputs)) if p not in shape.scalar_positions)
        array_types = tuple(inputs[p] for p in array_positions)
        core = _core(names, shape)
        typingctx.refresh()  # a forwarder registered now (numba loads its typing registries lazily)
        constants_type = types.BaseTuple.from_types(scalar_types) if shape.generated else types.Tuple(())
        if shape.generated:
            outer_type = types.BaseTuple.from_types(array_types)
        else:
            outer_type = types.StarArgTuple.from_types(array_types)
        arg_types = []
        for k, name in enumerate(VECTORIZED_ARGUMENTS):
            if name == "core_op_fn":
                arg_types.append(typingctx.resolve_value_type(core))
            elif name is not None:
                arg_types.append(_literal_type(typingctx, name, names[name]))
            else:
                arg_types.append({5: types.literal(True), 6: constants_type, 7: outer_type, 9: types.none}[k])
        signature, codegen = vectorize_codegen._vectorized._defn(typingctx, *arg_types)
        raw_types = list(signature.return_type) if len(shape.finishes) > 1 else [signature.return_type]
        finished_types = [_finished_type(f, t) for f, t in zip(shape.finishes, raw_types, strict=True)]
        return_type = finished_types[0] if len(finished_types) == 1 else types.BaseTuple.from_types(finished_types)
        star_type = types.StarArgTuple.from_types(inputs)

        def body(context, builder, args):
            [star] = args
            context.nrt.incref(builder, star_type, star)  # numba's: the argument's variable
            values = cgutils.unpack_tuple(builder, star, len(inputs))
            call_args = []
            for k, (name, ty) in enumerate(zip(VECTORIZED_ARGUMENTS, arg_types, strict=True)):
                if k == 6:
                    call_args.append(context.make_tuple(builder, ty, [values[p] for p in shape.scalar_positions]))
                elif k == 7:
                    call_args.append(context.make_tuple(builder, ty, [values[p] for p in array_positions]))
                elif name == "core_output_shapes":
                    call_args.append(context.get_constant_generic(builder, ty, names[name]))
                else:
                    call_args.append(context.get_dummy_value())
            raw = codegen(context, builder, signature, call_args)
            context.nrt.decref(builder, star_type, star)  # its last use
            raws = cgutils.unpack_tuple(builder, raw, len(raw_types)) if len(raw_types) > 1 else [raw]
            outs = [_finish(context, builder, f, r, t) for f, r, t in zip(shape.finishes, raws, raw_types, strict=True)]
            return outs[0] if len(outs) == 1 else context.make_tuple(builder, return_type, outs)

        own = build_own_function(_fast_context(dry_run_context(), fast), "fused_elemwise_impl",
                                 return_type(star_type), body)

        def emit(context, builder, call_args):
            return call_own_function(context, builder, own, call_args)

        return return_type, emit

    return impl_in_ir


__all__ = ["STOCK_LOOP", "OutputFinish", "StockLoopShape", "VECTORIZED_ARGUMENTS", "implementation_in_ir",
           "stock_loop_shape"]
