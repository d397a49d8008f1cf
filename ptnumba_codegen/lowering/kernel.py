"""Turn a (LoopSpec, PlannedBody) pair into a function numba can call.

The kernel is a Python function numba types with a Python typer (`own_library.typed_call`):
for the caller's argument types, `KernelImpl.choose` writes the kernel's entry (run the
loop, finish the outputs: `IR_FINISHES`) as IR into a code library of its own, compiled
with fast-math off, so numba's own fastmath pass never touches it and no caller's flags
are inherited: the policy alone sets every flag. An entry that needs more than that
(copies of strided inputs, the flat twin's branch, squeezed views of partial reductions)
is generated Python source (`KernelImpl.make`), compiled by numba with ``fastmath=False``.

Both are built while the caller is typed (the whole PyTensor function, at its first call),
so an exception in our codegen would be the user's: an entry whose emission raises (or
whose loop's dry run does, for a generated entry) is the stock kernel's instead, and the
reason is recorded.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.core.errors import TypingError
from numba.core.registry import cpu_target
from numba.extending import intrinsic, overload
from numba.np import arrayobj
from numpy.lib.stride_tricks import as_strided

from ptnumba_codegen.lowering.base import define, numba_type
from ptnumba_codegen.lowering.body import PlannedBody, emit_body
from ptnumba_codegen.lowering.loop import LoopSpec, emit_loop, flat_spec
from ptnumba_codegen.lowering.chunks import emit_chunked, chunk_decision
from ptnumba_codegen.lowering.entry import EntryInlining, inline_into_caller
from ptnumba_codegen.lowering.view_ir import squeezed_view, view_type
from ptnumba_codegen.lowering.own_library import (
    ChosenCall,
    OwnFunction,
    as_dispatcher,
    build_own_function,
    dispatcher_call,
    own_call,
    typed_call,
)
from ptnumba_codegen.runtime.threads import ensure_threading

log = logging.getLogger("ptnumba_codegen")

KERNEL_JIT_OPTIONS = {
    "fastmath": False,  # explicit: the policy alone decides every flag of this kernel
    "error_model": "numpy",
    "no_cpython_wrapper": True,
    "no_cfunc_wrapper": True,
}


@dataclass(frozen=True)
class Finish:
    """How one raw loop output becomes the node's output: `FINISHES`' row for ``kind``."""

    kind: str  # a key of FINISHES: "as_is" | "squeeze" | "scalar" | "array0d"
    out_dtype: str = ""
    kept_axes: tuple[int, ...] = ()
    cast: bool = False  # squeeze: the accumulator dtype differs from the output's

    def expr(self, raw: str) -> str:
        """The Python expression turning ``raw`` (the loop's output) into the node's."""
        dt = "np.bool_" if self.out_dtype == "bool" else f"np.{self.out_dtype}"
        return FINISHES[self.kind](self, raw, dt)


def _as_is(finish: Finish, raw: str, dt: str) -> str:
    return raw


def _squeeze(finish: Finish, raw: str, dt: str) -> str:
    shape = "".join(f"{raw}.shape[{k}], " for k in finish.kept_axes)
    strides = "".join(f"{raw}.strides[{k}], " for k in finish.kept_axes)
    view = f"as_strided({raw}, shape=({shape}), strides=({strides}))"
    return f"{view}.astype({dt})" if finish.cast else view


def _scalar(finish: Finish, raw: str, dt: str) -> str:
    return f"{dt}({raw})"


def _array0d(finish: Finish, raw: str, dt: str) -> str:
    return f"array0d({raw}, {dt})"


@intrinsic
def array0d(typingctx, value, dtype):
    """``np.array(value, dtype=dtype)`` for a scalar ``value``: a new 0-d C array (numba's
    allocation, as ``np.empty``'s) holding ``value`` converted to ``dtype`` as ``np.array``
    converts it, without compiling ``np.array``'s overload per dtype."""
    if not isinstance(value, types.Number | types.Boolean) or not isinstance(dtype, types.NumberClass):
        return None
    aryty = types.Array(dtype.instance_type, 0, "C")

    def codegen(context, builder, sig, args):
        return new_array0d(context, builder, aryty, args[0], value)

    return aryty(value, dtype), codegen


def new_array0d(context, builder, aryty: types.Array, value, value_type):
    """A new 0-d C array of ``aryty`` (numba's allocation) holding ``value`` converted to its dtype."""
    ary = arrayobj._empty_nd_impl(context, builder, aryty, [])
    arrayobj.store_item(context, builder, aryty, context.cast(builder, value, value_type, aryty.dtype), ary.data)
    return ary._getvalue()


# Finish.kind -> (finish, raw, numpy dtype name) -> the Python expression of the node's output
FINISHES: dict[str, Callable[[Finish, str, str], str]] = {
    "as_is": _as_is,  # the loop's output buffer is the node's output
    "squeeze": _squeeze,  # a partial reduction keeps reduced axes with length 1: a view without them (cast if acc dtype differs)
    "scalar": _scalar,  # a full reduction to a scalar type: the register accumulator as a numpy scalar of the output dtype
    "array0d": _array0d,  # a full reduction to a 0-d tensor: the register accumulator in a 0-d array of the output dtype
}


@dataclass(frozen=True)
class IRFinish:
    """A `Finish` written as IR in an entry of its own (`KernelImpl.own_entry`): the output's
    numba type from the raw output's, and the emission; both as numba types and lowers the
    Python expression `FINISHES` writes for it."""

    type: Callable  # (finish, raw numba type) -> output numba type
    emit: Callable  # (context, builder, finish, raw value, raw numba type) -> output value


def _finish_scalar(context, builder, finish: Finish, raw, raw_type):
    return context.cast(builder, raw, raw_type, numba_type(finish.out_dtype))


def _finish_array0d(context, builder, finish: Finish, raw, raw_type):
    return new_array0d(context, builder, types.Array(numba_type(finish.out_dtype), 0, "C"), raw, raw_type)


def _squeeze_type(finish: Finish, raw_type):
    return view_type(raw_type, len(finish.kept_axes))  # as_strided's (reshape_unchecked's)


def _finish_squeeze(context, builder, finish: Finish, raw, raw_type):
    """The generated entry's ``as_strided(raw, shape=(kept lengths), strides=(kept
    strides))``: a call of numba's ``as_strided`` as its compiled overload is called, written
    as IR (`view_ir`), then raw's reference given back, as numba does when ``raw`` dies."""
    return squeezed_view(context, builder, raw_type, raw, finish.kept_axes)


# Finish.kind -> its IR form; a kind not here keeps the generated Python entry, and so does
# a "squeeze" with a cast (``.astype``)
IR_FINISHES: dict[str, IRFinish] = {
    "as_is": IRFinish(lambda finish, raw_type: raw_type, lambda context, builder, finish, raw, raw_type: raw),
    "scalar": IRFinish(lambda finish, raw_type: numba_type(finish.out_dtype), _finish_scalar),  # np.<dtype>(raw)
    "array0d": IRFinish(lambda finish, raw_type: types.Array(numba_type(finish.out_dtype), 0, "C"), _finish_array0d),  # `array0d`
    "squeeze": IRFinish(_squeeze_type, _finish_squeeze),  # not cast (a cast keeps the generated entry)
}


# what keeps a kernel's generated Python entry (`KernelImpl.make`, compiled by numba's
# pipeline) instead of the entry written as IR (`KernelImpl.own_entry`) -> why. The first
# three are what the IR entry does not write; the last is a choice, for bits.
GENERATED_ENTRY_WHEN: dict[str, str] = {
    "copied_inputs": (
        "strided inputs are copied contiguous first, or tested for contiguity at run time "
        "(a body with vector calls)"
    ),
    "flat_twin": "the entry branches to the 1-d loop over every element when the arrays are contiguous",
    "unwritten_finish": "an output is finished as a squeezed view cast to another dtype, which IR_FINISHES does not write",
    "reordered_reduction_in_entry": (
        "its loop nest is emitted in the entry itself and reduces under a flag that lets LLVM "
        "reorder the sum (reassoc), and its outputs take no form of MIRRORED_ENTRIES: LLVM may "
        "inline the entry into its caller and optimize the nest again there, so the sum's last "
        "bits depend on the code around the nest, and a plain IR entry's is not the generated "
        "entry's (it has no reference counts around the loop and gets inlined where the "
        "generated one was not: bayesian_var_ireland's logp moved by one ulp)"
    ),
}
IR_ENTRY = "written as IR in a code library of its own (own_library), with no numba pipeline"

# An entry whose nest holds a reorderable float reduction (the last reason above) is written
# as IR after all when its outputs take one of these forms: the IR entry then takes and
# gives back references where numba's generated entry does (each array input before the loop
# and after it; the array output that many times right after), LLVM sees the same function
# (it inlines it or not, and optimizes the nest, as before) and the final IR is the generated
# entry's (tests/test_own_library.py compares them). form -> (the array output's reference
# pairs, why).
MIRRORED_ENTRIES: dict[str, tuple[int, str]] = {
    "scalars": (0, "every output a scalar: numba's entry references only its array inputs, around the loop"),
    "scalars_and_one_array": (
        3,
        "scalars and one array output as the loop leaves it: numba's entry also takes and gives "
        "back the array's reference three times (the output tuple's item, the returned tuple, "
        "the return value)",
    ),
    "scalars_and_views": (
        0,
        "scalars and squeezed views of partial sums: the view is numba's as_strided, called as "
        "the generated entry calls its compiled overload (written as IR: view_ir), which gives "
        "the generated entry's IR with no reference pairs of its own",
    ),
    "scalars_and_arrays": (
        3,
        "scalars and several array outputs as the loop leaves them: numba's entry takes and gives "
        "back each array's reference three times, as for one",
    ),
}


@dataclass(frozen=True)
class EntryChoice:
    """How a kernel's entry was compiled for one signature (`explain` reports it)."""

    input_types: tuple
    generated_because: str | None  # a key of `GENERATED_ENTRY_WHEN`; None: the IR entry
    mirrored: str | None = None  # a key of `MIRRORED_ENTRIES`: the IR entry with numba's references

    def describe(self) -> str:
        if self.generated_because is None and self.mirrored is not None:
            return f"entry {IR_ENTRY}, with the generated entry's references ({self.mirrored}: {MIRRORED_ENTRIES[self.mirrored][1]})"
        if self.generated_because is None:
            return f"entry {IR_ENTRY}"
        reason = GENERATED_ENTRY_WHEN[self.generated_because]
        return f"entry generated as Python and compiled by numba ({self.generated_because}: {reason})"


REORDERING_REDUCE_FLAGS = frozenset({"reassoc", "fast"})


def dry_run(emit, arg_types) -> str | None:
    """Run ``emit(context, builder, args)`` into a throwaway function of ``arg_types``:
    None, or the generator's exception as a reason. Subroutines compiled on the way
    (python rules, stock calls) are cached, so the real emission reuses them."""
    context = dry_run_context()
    module = ir.Module("ptnumba_dry_run")
    fn = ir.Function(module, context.call_conv.get_function_type(types.none, arg_types), "dry_run")
    context.call_conv.decorate_function(fn, [f"a{k}" for k in range(len(arg_types))], arg_types)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    library = context.codegen().create_library("ptnumba_dry_run")
    try:
        with context.push_code_library(library):
            raw = context.call_conv.get_arguments(fn)
            emit(context, builder, list(context.get_arg_packer(arg_types).from_arguments(builder, raw)))
    except Exception as err:  # noqa: BLE001  (any failure of the generator)
        return f"{type(err).__name__}: {err}".splitlines()[0][:300]
    return None


@functools.cache
def dry_run_context():
    """numba's CPU context as the kernel's compile sees it (NRT on, numpy error model)."""
    from numba.core.callconv import create_error_model

    base = cpu_target.target_context
    return base.subtarget(enable_nrt=True, error_model=create_error_model("numpy", base))


def call_stock(fallback, reason: str):
    """The overload impl calling the stock kernel ``fallback(reason)`` returns."""
    stock = fallback(reason)

    def impl(*inputs):
        return stock(*inputs)

    return impl


# The forwarder's IR is the one numba lowers for ``def impl(*inputs): return fn(*inputs)``
# (numba's overload of a forwarding function, the form numba compiles `compiled_or_stock` to):
# references to the array inputs taken before the call and given back after it, then the
# result's reference taken and given back once (its assignment and its return). LLVM then
# sees the same function, inlines it or not and optimizes the callee's code as it does the
# overload's: the final IR is the overload's (tests/test_own_library.py compares them; a
# plain call moved bayesian_var_ireland's logp by one ulp).
FORWARDER_RESULT_PAIRS = 1


def _implementation_in_ir(impl_in_ir, name: str, typingctx, inputs: tuple):
    """(signature, call) of ``impl_in_ir`` (`compiled_or_stock`) for ``inputs``, or (None,
    None) where there is none or it does not apply: numba compiles the function then."""
    if impl_in_ir is None:
        return None, None
    try:
        return_type, call = impl_in_ir(typingctx, inputs)
    except Exception as err:  # noqa: BLE001  (what it does not write: numba compiles fn)
        log.debug("%s: numba compiles the stock implementation (%s: %s)", name, type(err).__name__, err)
        return None, None
    return return_type(types.StarArgTuple.from_types(inputs)), call


def compiled_or_stock(fn: Callable, fallback, name: str, n_inputs: int, impl_in_ir=None):
    """``fn`` (a function numba compiles: the stock loop around our scalar core, an indexed
    kernel's inner graph) behind a compile check. Our part of it is checked by its own dry
    run, the code around it is not: numba types and compiles ``fn`` (a dispatcher, or a
    function it overloads) for the caller's argument types while the caller is typed, and
    any failure makes the node's kernel the stock one (``fallback(reason)``) instead of an
    exception at the function's first call.

    A Python function of ``n_inputs`` arguments that numba calls as a `typed_call`: ``fn`` is
    called from a forwarder written as IR in a library of its own, with no numba pipeline
    (`FORWARDER_RESULT_PAIRS`).

    ``impl_in_ir(typingctx, inputs) -> (return type, call(context, builder, [inputs tuple]))``:
    ``fn``'s implementation written as IR (`backend.stock_loop_ir`), called by the forwarder
    instead of numba's compile of it; where it raises, numba compiles ``fn`` as before."""
    keep: list = [fn]  # numba's Dispatcher type refers to a dispatcher weakly

    def choose(typingctx, input_types) -> ChosenCall | None:
        inputs = tuple(input_types)
        try:
            signature, call = _implementation_in_ir(impl_in_ir, name, typingctx, inputs)
            if call is None:
                fnty = typingctx.resolve_value_type(fn)
                signature = typingctx.resolve_function_type(fnty, inputs, {})
                if signature is None:
                    raise TypingError(f"{name}: no signature of {fn} for {inputs}")
                call = context_call(fnty, signature)

            def emit(context, builder, args):
                # numba's entry block holds only the stack slots (calls add theirs there)
                body = builder.append_basic_block("B0")
                builder.branch(body)
                builder.position_at_end(body)
                for ty, a in zip(inputs, args, strict=True):
                    context.nrt.incref(builder, ty, a)
                call_args = list(args)
                if len(signature.args) == 1 and isinstance(signature.args[0], types.StarArgTuple):
                    call_args = [context.make_tuple(builder, signature.args[0], call_args)]  # ``*inputs``
                result = call(context, builder, call_args)
                for ty, a in zip(inputs, args, strict=True):
                    context.nrt.decref(builder, ty, a)
                for _ in range(FORWARDER_RESULT_PAIRS):
                    context.nrt.incref(builder, signature.return_type, result)
                    context.nrt.decref(builder, signature.return_type, result)
                return result

            own = build_own_function(dry_run_context(), name, signature.return_type(*inputs), emit)
        except Exception as err:  # noqa: BLE001  (any failure of the code around our core)
            return stock_call(typingctx, fallback, name, err, inputs, keep)
        return own_call(own)

    params = ", ".join(f"x{k}" for k in range(n_inputs))
    kernel = define(f"def {name}({params}):\n    return fn({params})\n", fn=fn)
    typed_call(kernel, n_inputs, choose)
    return kernel


def context_call(fnty, signature):
    """``call(context, builder, args)``: numba's call of ``fnty`` (compiled for ``signature``)."""
    return lambda context, builder, args: context.get_function(fnty, signature)(builder, args)


def make_loop(spec: LoopSpec, planned: PlannedBody, name: str, chunked: bool = False, chunking=None) -> LoopKernel:
    """The loop nest and the scalar body: its emission and the intrinsic running it."""
    body_types = [numba_type(d) for d in planned.program.output_dtypes]
    run_nest = functools.partial(emit_chunked, chunking=chunking) if chunked else None

    def emit(context, builder, input_types, values):
        return emit_loop(
            context,
            builder,
            spec,
            input_types,
            values,
            lambda b, scalars: emit_body(context, b, planned, scalars),
            body_types,
            run_nest=run_nest,
            vector_calls=planned.uses_vector_math,
            opaque_calls=planned.calls_opaque,
        )

    @intrinsic
    def loop(typingctx, inputs):
        if not isinstance(inputs, types.BaseTuple):
            raise TypingError(f"{name} expects a tuple of inputs, got {inputs}")
        input_types = tuple(inputs.types)
        for ty, bc in zip(input_types, spec.input_bc, strict=True):
            if (bc is None) == isinstance(ty, types.Array):
                raise TypingError(f"{name}: input type {ty} does not match the kernel spec")
        out_types = spec.output_types(input_types)
        ret = out_types[0] if len(out_types) == 1 else types.Tuple(out_types)

        def codegen(context, builder, sig, args):
            values = [builder.extract_value(args[0], i) for i in range(len(input_types))]
            return emit(context, builder, input_types, values)

        return ret(inputs), codegen

    return LoopKernel(loop, emit, "chunk_function" if chunked else "entry")


@dataclass(frozen=True)
class LoopKernel:
    """A kernel's loop: the intrinsic a generated entry calls, the emission itself
    (``emit(context, builder, input_types, values)``, for an entry written as IR), and where
    its nest is emitted (a key of `entry.INLINE_ENTRY_WHEN`)."""

    intrinsic: object
    emit: Callable
    nest_in: str

    def dry_run(self, input_types) -> str | None:
        return dry_run(lambda c, b, args: self.emit(c, b, input_types, args), input_types)


def build_kernel(
    spec: LoopSpec,
    planned: PlannedBody,
    python_impl: Callable,
    finish: tuple[Finish, ...] | None = None,
    name: str = "policy_kernel",
    parallel=None,
    fallback=None,
    yields_to: tuple[str, ...] = (),
    on_entry=None,
):
    """Return a Python function (``python_impl`` without JIT) whose numba overload is the loop.

    ``fallback(reason)`` (optional) returns the stock kernel, used if the dry run fails.
    ``on_entry(EntryChoice)`` (optional) is told how each signature's entry was compiled.

    ``parallel`` (the policy's ``Parallel``) lets large loops run in chunks across threads,
    unless the function runs ops on other thread pools (``yields_to``, see `pools`). Every
    loop that can be chunked is emitted the same way whatever ``parallel`` says, so the
    thread setting never changes a result bit; a body that calls stock functions is
    neither (they may need the GIL), nor a loop whose static shape is below the threshold.
    """
    loop = _loop_for(spec, planned, name, parallel, yields_to)
    # N-d loops over same-shape arrays with vector calls also get a 1-d loop over every
    # element, run when the arrays are C-contiguous: LLVM vectorizes the innermost loop
    # only, and a short innermost axis (5 classes) would leave every element to the
    # scalar remainder, where each vector call does one lane's work (same bits, a vector's cost).
    flat = flat_spec(spec) if planned.uses_vector_math else None
    loop_flat = None if flat is None else _loop_for(flat, planned, name, parallel, yields_to)
    finish = finish or tuple(Finish("as_is") for _ in spec.output_dtypes)

    n_in = len(spec.input_bc)
    params = ", ".join(f"a{k}" for k in range(n_in))
    kernel = define(f"def {name}({params}):\n    return python_impl({params})\n", python_impl=python_impl)
    # A strided input keeps LLVM from vectorizing the loop; with libmvec calls inside, every
    # element then pays a whole vector call, while a contiguous copy costs one pass over memory.
    entry = EntryInlining.of(tuple(lp.nest_in for lp in (loop, loop_flat) if lp is not None))
    # the generated Python entry (`KernelImpl.make`), for the types the IR entry does not cover
    python_entry = define(f"def {name}(*inputs):\n    return python_impl(*inputs)\n", python_impl=python_impl)
    impl = KernelImpl(name, spec, finish, loop, loop_flat, planned.uses_vector_math, fallback, entry.inline, python_entry, on_entry)
    overload(python_entry, jit_options=KERNEL_JIT_OPTIONS)(lambda *inputs: impl.make(inputs))
    typed_call(kernel, n_in, impl.choose)
    return kernel


def _loop_for(spec: LoopSpec, planned: PlannedBody, name: str, parallel, yields_to):
    """The loop intrinsic of ``spec``, through a chunk function when `chunk_decision` says."""
    chunked, chunking, _why = chunk_decision(spec, planned, parallel, yields_to)
    if chunking is not None and not ensure_threading():
        chunking = None
    return make_loop(spec, planned, name, chunked, chunking)


@dataclass(frozen=True)
class KernelImpl:
    """The overload's implementation for the caller's input types, as generated Python
    source: read the inputs (maybe as contiguous copies), call the loop (or its flat twin),
    finish the outputs (`Finish`). Or the stock kernel, when the dry run fails."""

    name: str
    spec: LoopSpec
    finish: tuple[Finish, ...]
    loop: LoopKernel
    loop_flat: LoopKernel | None  # its 1-d twin over every element (`flat_spec`)
    copy_strided: bool  # strided inputs are copied contiguous first (bodies with vector calls)
    fallback: Callable | None
    inline: bool = False  # the impl asks to be inlined into its caller (`entry.EntryInlining`)
    python_entry: Callable | None = None  # a function whose numba overload is `make`
    on_entry: Callable[[EntryChoice], None] | None = None  # told how each signature's entry was compiled

    @property
    def n_out(self) -> int:
        return len(self.spec.output_dtypes)

    def choose(self, typingctx, input_types) -> ChosenCall | None:
        """The call of this kernel for ``input_types``: its entry written as IR in a library of
        its own (`own_library`) when the entry only calls the loop and finishes scalars or
        arrays; else the generated Python entry (`make`: copies of strided inputs, the flat
        twin's branch, squeezed views), numba's overload of ``python_entry``. An IR entry
        whose emission raises is the stock kernel's, decided here, while the caller is typed."""
        input_types = tuple(input_types)
        because = self.generated_entry_because(input_types)
        mirrored = self.mirrored_form(input_types) if because == "reordered_reduction_in_entry" else None
        if mirrored is not None:
            because = None
        try:
            own = self.own_entry(input_types, mirrored) if because is None else None
        except Exception as err:  # noqa: BLE001  (any failure of the generator)
            if self.fallback is None:
                raise
            return stock_call(typingctx, self.fallback, self.name, err, input_types, self._keep)
        if self.on_entry is not None:
            self.on_entry(EntryChoice(input_types, because, mirrored))
        if own is None:
            return self.generated_call(typingctx, input_types)
        return own_call(own)

    def generated_call(self, typingctx, input_types: tuple) -> ChosenCall | None:
        """The call of ``python_entry``'s overload (``*inputs``: numba passes them as one tuple)."""
        fnty = typingctx.resolve_value_type(self.python_entry)
        signature = typingctx.resolve_function_type(fnty, input_types, {})
        if signature is None:
            return None

        def emit(context, builder, args):
            packed = context.make_tuple(builder, signature.args[0], args)
            return context.get_function(fnty, signature)(builder, [packed])

        return ChosenCall(signature.return_type, emit)

    @functools.cached_property
    def _keep(self) -> list:
        return []  # dispatchers this kernel calls (numba's Dispatcher type refers to them weakly)

    def generated_entry_because(self, input_types) -> str | None:
        """The key of `GENERATED_ENTRY_WHEN` that keeps this kernel's generated entry for
        ``input_types``, or None: `own_entry` writes it."""
        _lines, loop_types, _names, in_place_strided = self.read_inputs(input_types)
        if tuple(loop_types) != tuple(input_types) or in_place_strided:
            return "copied_inputs"
        arrays = [ty for ty in loop_types if isinstance(ty, types.Array)]
        if self.loop_flat is not None and arrays and all(ty.layout in "CF" for ty in arrays):
            return "flat_twin"
        if not all(f.kind in IR_FINISHES and not (f.kind == "squeeze" and f.cast) for f in self.finish):
            return "unwritten_finish"
        reordered = any(
            r is not None and np.dtype(r.acc_dtype).kind in "fc" and REORDERING_REDUCE_FLAGS & set(r.flags)
            for r in self.spec.reduces or ()
        )
        if reordered and "entry" in (self.loop.nest_in, self.loop_flat and self.loop_flat.nest_in):
            return "reordered_reduction_in_entry"
        return None

    def mirrored_form(self, input_types) -> str | None:
        """The key of `MIRRORED_ENTRIES` this kernel's outputs take for ``input_types``, or None."""
        kinds = [f.kind for f in self.finish]
        arrays = [isinstance(ty, types.Array) for ty in self.spec.output_types(input_types)]
        if all(k == "scalar" for k in kinds):
            return "scalars"
        as_left = all(k == ("as_is" if a else "scalar") for k, a in zip(kinds, arrays, strict=True))
        if self.n_out > 1 and sum(arrays) == 1 and as_left:
            return "scalars_and_one_array"
        if self.n_out > 1 and sum(arrays) > 1 and as_left:
            return "scalars_and_arrays"
        if "squeeze" in kinds and all(k in ("scalar", "squeeze") for k in kinds):
            return "scalars_and_views"
        return None

    def own_entry(self, input_types: tuple, mirrored: str | None = None) -> OwnFunction:
        """The entry as IR: the loop, then each raw output finished (`IR_FINISHES`); with
        numba's references around the loop when ``mirrored`` (a key of `MIRRORED_ENTRIES`)."""
        raw_types = self.spec.output_types(input_types)
        out_types = [IR_FINISHES[f.kind].type(f, ty) for f, ty in zip(self.finish, raw_types, strict=True)]
        ret = out_types[0] if self.n_out == 1 else types.Tuple(out_types)

        def emit(context, builder, args):
            mirror = mirrored is not None and context.enable_nrt
            held = [(ty, a) for ty, a in zip(input_types, args, strict=True) if isinstance(ty, types.Array)] if mirror else []
            for ty, a in held:
                context.nrt.incref(builder, ty, a)
            raw = self.loop.emit(context, builder, input_types, args)
            if mirror:
                for ty, a in held:
                    context.nrt.decref(builder, ty, a)
                pairs = MIRRORED_ENTRIES[mirrored][0]
                for i, ty in enumerate(raw_types):
                    if isinstance(ty, types.Array):
                        value = raw if self.n_out == 1 else builder.extract_value(raw, i)
                        for _ in range(pairs):
                            context.nrt.incref(builder, ty, value)
                            context.nrt.decref(builder, ty, value)
            if self.n_out == 1:
                return IR_FINISHES[self.finish[0].kind].emit(context, builder, self.finish[0], raw, raw_types[0])
            outs = [
                IR_FINISHES[f.kind].emit(context, builder, f, builder.extract_value(raw, i), ty)
                for i, (f, ty) in enumerate(zip(self.finish, raw_types, strict=True))
            ]
            return context.make_tuple(builder, ret, outs)

        return build_own_function(dry_run_context(), self.name, ret(*input_types), emit, inline=self.inline)

    def make(self, input_types):
        """The impl function for ``input_types``."""
        lines, loop_types, names, in_place_strided = self.read_inputs(input_types)
        # A destroyed input typed 'A' is usually contiguous (an ExpandDims of a fresh
        # array, PyMC's `log(sum(exp(...)))[:, None]`), but a nest over 'A' arrays has
        # run-time strides LLVM does not vectorize: every vector call then does one lane's
        # work (a (1e5, 1) Log made 1e5 8-wide log calls). When it is C-contiguous at run
        # time it runs typed 'C' (`np.ascontiguousarray` returns the same array, no copy).
        contiguous_types = tuple(ty.copy(layout="C") if k in in_place_strided else ty for k, ty in enumerate(loop_types))
        problem = None
        if self.fallback is not None:
            problem = self.dry_runs(tuple(loop_types))
            if problem is None and in_place_strided:
                problem = self.dry_runs(contiguous_types)
        if problem is not None:
            return call_stock(self.fallback, f"{self.name} failed to compile: {problem}")
        if in_place_strided:
            lines += self.contiguous_or_not(in_place_strided, contiguous_types, tuple(loop_types), names)
        else:
            lines += self.call_lines(tuple(loop_types), names)
        return self.define(lines)

    def read_inputs(self, input_types):
        """(lines binding ``a0, a1, ...``, the loop's input types, the names, the destroyed
        inputs typed 'A' that are never copied because they are written in place)."""
        destroyed = {inp for _out, inp in self.spec.inplace}
        lines, loop_types, names = [], [], []
        in_place_strided = []  # destroyed inputs typed 'A': never copied (written in place)
        for k, ty in enumerate(input_types):
            strided = isinstance(ty, types.Array) and ty.layout == "A" and ty.ndim > 0
            if self.copy_strided and strided and k not in destroyed:
                lines.append(f"a{k} = np.ascontiguousarray(inputs[{k}])")
                loop_types.append(ty.copy(layout="C"))
            else:
                lines.append(f"a{k} = inputs[{k}]")
                loop_types.append(ty)
                if self.copy_strided and strided:
                    in_place_strided.append(k)
            names.append(f"a{k}")
        return lines, loop_types, names, in_place_strided

    def contiguous_or_not(self, in_place_strided, contiguous_types, loop_types, names) -> list[str]:
        """The loop typed 'C' when the destroyed 'A' inputs are C-contiguous, else as typed."""
        c_names = [f"c{k}" if k in in_place_strided else v for k, v in enumerate(names)]
        test = " and ".join(f"a{k}.flags.c_contiguous" for k in in_place_strided)
        lines = [f"if {test}:"]
        lines += [f"    c{k} = np.ascontiguousarray(a{k})" for k in in_place_strided]
        lines += [f"    {line}" for line in self.call_lines(contiguous_types, c_names)]
        lines.append("else:")
        lines += [f"    {line}" for line in self.call_lines(loop_types, names)]
        return lines

    def dry_runs(self, loop_types):
        """The generator's problem with the loop (or its flat twin) for these types, or None."""
        problem = self.loop.dry_run(loop_types)
        if problem is None and self.loop_flat is not None:
            flat_types = tuple(t.copy(ndim=1, layout="C") if isinstance(t, types.Array) else t for t in loop_types)
            problem = self.loop_flat.dry_run(flat_types)
        return problem

    def call_lines(self, types_, names) -> list[str]:
        """The lines setting ``raw``: the flat loop when every array is C-contiguous and of
        one shape (arrays typed contiguous only: numba reshapes no other), else the nest."""
        args = "".join(f"{v}, " for v in names)
        arrays = [k for k, ty in enumerate(types_) if isinstance(ty, types.Array)]
        if self.loop_flat is None or not arrays or not all(types_[k].layout in "CF" for k in arrays):
            return [f"raw = loop(({args}))"]
        first = names[arrays[0]]
        same = " and ".join([f"{names[k]}.flags.c_contiguous" for k in arrays] + [f"{names[k]}.shape == {first}.shape" for k in arrays[1:]])
        flat_args = "".join(f"{v}.reshape({v}.size), " if k in arrays else f"{v}, " for k, v in enumerate(names))
        inplace = dict(self.spec.inplace)
        n_out = self.n_out
        reshaped = [
            names[inplace[i]] if i in inplace else f"{r}.reshape({first}.shape)"
            for i, r in enumerate(["flat"] if n_out == 1 else [f"flat[{i}]" for i in range(n_out)])
        ]
        return [
            f"if {same}:",
            f"    flat = loop_flat(({flat_args}))",
            f"    raw = {reshaped[0] if n_out == 1 else '(' + ', '.join(reshaped) + ',)'}",
            "else:",
            f"    raw = loop(({args}))",
        ]

    def returned(self) -> str:
        """The returned expression: every raw output finished."""
        raw = ["raw"] if self.n_out == 1 else [f"raw[{i}]" for i in range(self.n_out)]
        outs = [f.expr(r) for f, r in zip(self.finish, raw, strict=True)]
        return outs[0] if self.n_out == 1 else f"({', '.join(outs)},)"

    def define(self, lines: list[str]):
        """``impl(*inputs)``: ``lines``, then the finished outputs returned."""
        lines = ["inline_into_caller()", *lines] if self.inline else lines
        body = "".join(f"    {line}\n" for line in lines)
        src = f"def impl(*inputs):\n{body}    return {self.returned()}\n"
        env = {"loop": self.loop.intrinsic, "loop_flat": self.loop_flat and self.loop_flat.intrinsic, "np": np, "as_strided": as_strided,
               "inline_into_caller": inline_into_caller, "array0d": array0d}
        exec(compile(src, f"<{self.name}>", "exec"), env)
        return env["impl"]


def stock_call(typingctx, fallback: Callable, name: str, err: Exception, input_types: tuple, keep: list) -> ChosenCall | None:
    """The call of ``fallback(reason)``'s stock kernel, for a kernel whose IR emission raised
    ``err`` while its caller was typed (the reason is recorded by ``fallback``)."""
    problem = f"{type(err).__name__}: {err}".splitlines()[0][:300]
    stock = as_dispatcher(fallback(f"{name} failed to compile: {problem}"), len(input_types))
    return dispatcher_call(typingctx, stock, input_types, keep)


def build_scalar_kernel(planned: PlannedBody, python_impl: Callable, name: str = "policy_scalar", fallback=None):
    """A kernel for scalar ops applied to native scalars: the body alone, no loop.

    A Python function (``python_impl`` without JIT) that numba calls as a `typed_call`: for
    the caller's argument types the body is written as IR in a code library of its own
    (`own_library`), with no numba pipeline; a body whose emission raises is
    ``fallback(reason)``'s stock kernel, decided while the caller is typed. The body reads
    its inputs through a tuple of them, as it did inside numba's overload (whose intrinsic
    took the tuple): LLVM then ranks a sum's operands, and regroups it under ``reassoc``,
    as before (read straight from the arguments, stochastic volatility's gradient moved by
    2.4e-12; `tests/test_own_library.py` compares the final IR of both forms)."""
    out_types = [numba_type(d) for d in planned.program.output_dtypes]
    in_types = [numba_type(d) for d in planned.program.input_dtypes]
    ret = out_types[0] if len(out_types) == 1 else types.Tuple(out_types)
    keep: list = []  # stock dispatchers called (numba's Dispatcher type refers to them weakly)

    def emit(context, builder, input_types, args):
        values = [context.cast(builder, a, ty, want) for a, ty, want in zip(args, input_types, in_types, strict=True)]
        return emit_body(context, builder, planned, values)

    def choose(typingctx, input_types) -> ChosenCall | None:
        inputs = tuple(input_types)
        if len(inputs) != len(in_types):
            raise TypingError(f"{name} expects {len(in_types)} scalars, got {inputs}")

        def body(context, builder, args):
            packed = context.make_tuple(builder, types.Tuple(inputs), list(args))
            outs = emit(context, builder, inputs, [builder.extract_value(packed, i) for i in range(len(inputs))])
            return outs[0] if len(outs) == 1 else context.make_tuple(builder, ret, outs)

        try:
            own = build_own_function(dry_run_context(), name, ret(*inputs), body)
        except Exception as err:  # noqa: BLE001  (any failure of the generator)
            if fallback is None:
                raise
            return stock_call(typingctx, fallback, name, err, inputs, keep)
        return own_call(own)

    # Named parameters, not ``*inputs``: PyTensor's indexed loop (`vectorize_codegen`) packs
    # the arguments of a star-args core into a tuple straight from the loaded array
    # elements, whose booleans are numba's data form (i8), not the value form (i1).
    params = ", ".join(f"x{k}" for k in range(len(in_types)))
    kernel = define(f"def {name}({params}):\n    return python_impl({params})\n", python_impl=python_impl)
    typed_call(kernel, len(in_types), choose)
    return kernel
