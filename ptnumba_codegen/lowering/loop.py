"""The loop emitter: broadcasting checks, output allocation, the loop nest, the
per-element loads and stores around the scalar body, and reduction accumulators.

One emitter serves every kernel node type: plain elemwise loops, loops with native
scalar inputs (ScalarizedElemwise), fused reductions (FusedElemwise) and plain
reductions (CAReduce, where the body is the identity). Shape checks reuse PyTensor's
``compute_itershape`` so runtime broadcast errors are the stock backend's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, replace

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.np import arrayobj
from pytensor.link.numba.dispatch.vectorize_codegen import compute_itershape
from pytensor.scalar import basic as ps
from pytensor.tensor.math import MulWithoutZeros

from ptnumba_codegen.lowering.stamp import stamp
from ptnumba_codegen.lowering.visit_order import (
    NO_ZERO,
    fix_zero_sign,
    first_zero_in_lanes,
    is_dense,
    permuted_view,
    stock_weights,
    zero_key,
)


@dataclass(frozen=True)
class Reduce:
    """An output accumulated over ``axes`` (kept with size 1 in the loop's output buffer)."""

    op: str  # Add, Mul, MulWithoutZeros, Maximum, Minimum, AND, OR, XOR (ZeroKey: internal)
    axes: tuple[int, ...]
    identity: object  # a Python scalar, already valid in acc_dtype
    acc_dtype: str
    flags: tuple[str, ...]  # fast-math flags of the accumulating instructions
    scalar_acc: bool  # every axis reduced: accumulate in a register, return a scalar


@dataclass(frozen=True)
class LoopSpec:
    """Everything static about one loop (part of the cache key)."""

    ndim: int
    input_bc: tuple[tuple[bool, ...] | None, ...]  # None marks a native scalar input
    output_bc: tuple[tuple[bool, ...], ...]  # reduced axes are True (keepdims)
    output_dtypes: tuple[str, ...]  # stored dtype: the accumulator's for reductions
    inplace: tuple[tuple[int, int], ...] = ()  # (output index, input index)
    reduces: tuple[Reduce | None, ...] | None = None
    static_size: int | None = None  # elements of the iteration space, when the types fix it
    # the order the stock backend visits reduced elements in (see visit_order): "c" (its
    # elemwise loop: logical order) or "careduce" (CAReduce: by decreasing |stride|)
    visit: str = "c"
    static_shape: tuple[int | None, ...] | None = None  # its lengths the types fix (None: unknown)
    # elements of the iteration space by the graph's shape inference where the types leave a
    # length unknown (`analysis.inferred_shapes`); read by `chunks.chunk_decision` only
    size_bound: int | None = None

    def reduce_of(self, i) -> Reduce | None:
        return None if self.reduces is None else self.reduces[i]

    def output_types(self, input_types) -> list[types.Type]:
        inplace = dict(self.inplace)
        out = []
        for i, dt in enumerate(self.output_dtypes):
            red = self.reduce_of(i)
            if red is not None and red.scalar_acc:
                out.append(numba.from_dtype(np.dtype(dt)))
            elif i in inplace:
                out.append(input_types[inplace[i]])
            else:
                out.append(types.Array(numba.from_dtype(np.dtype(dt)), self.ndim, "C"))
        return out


class _AliasScopes:
    """Scoped-noalias metadata: inputs never alias outputs except a destroyed input."""

    def __init__(self, builder, n_outputs, inplace):
        mod = builder.module
        domain = mod.add_metadata([], self_ref=True)
        input_scope = mod.add_metadata([domain], self_ref=True)
        out_scopes = [mod.add_metadata([domain], self_ref=True) for _ in range(n_outputs)]
        self.input_set = mod.add_metadata([input_scope])
        self.output_set = mod.add_metadata(out_scopes)
        self.out_alias = [mod.add_metadata([s]) for s in out_scopes]
        self.out_noalias = [
            mod.add_metadata([input_scope, *(o for o in out_scopes if o is not s)]) for s in out_scopes
        ]
        self.destroyed = {inp: out for out, inp in inplace}

    def tag_load(self, instr, input_index):
        out = self.destroyed.get(input_index)
        if out is None:
            instr.set_metadata("alias.scope", self.input_set)
            instr.set_metadata("noalias", self.output_set)
        else:
            self.tag_output(instr, out)

    def tag_output(self, instr, output_index):
        instr.set_metadata("alias.scope", self.out_alias[output_index])
        instr.set_metadata("noalias", self.out_noalias[output_index])


def _item_pointer(context, builder, array, array_type, indices, static=None):
    """The element's address. ``static`` (per axis: the length the types fix, or None)
    replaces the shape a contiguous array's address is computed from: LLVM then knows
    every stride (a row of 2 mixture components is 16 bytes), unrolls the short axis and
    vectorizes the long one with interleaved loads, instead of versioning the loop on a
    unit stride it never has and running every vector call one lane at a time."""
    shape = cgutils.unpack_tuple(builder, array.shape)
    if static is not None and array_type.layout in "CF":
        shape = [n if fixed is None else context.get_constant(types.intp, fixed) for n, fixed in zip(shape, static, strict=True)]
    return cgutils.get_item_pointer2(
        context,
        builder,
        array.data,
        shape,
        cgutils.unpack_tuple(builder, array.strides),
        array_type.layout,
        indices,
        False,  # wraparound
        False,  # boundscheck
    )


def combine(builder, op: str, ty: types.Type, left, right, keyed: bool = False):
    """One accumulation step with stock semantics (max/min propagate NaN): `REDUCERS`' row."""
    reducer = REDUCERS.get(op)
    if reducer is None:
        raise NotImplementedError(op)
    return reducer.step(builder, ty, left, right, keyed)


def _arith(float_op: str, int_op: str):
    def step(builder, ty, left, right, keyed):
        return getattr(builder, float_op if isinstance(ty, types.Float) else int_op)(left, right)

    return step


def _mul_without_zeros(builder, ty, left, right, keyed):
    """stock: zeros are skipped (the product of the non-zeros)"""
    is_float = isinstance(ty, types.Float)
    zero = ir.Constant(left.type, 0.0 if is_float else 0)
    is_zero = (lambda v: builder.fcmp_ordered("==", v, zero)) if is_float else (lambda v: builder.icmp_signed("==", v, zero))
    prod = builder.fmul(left, right) if is_float else builder.mul(left, right)
    return builder.select(is_zero(left), right, builder.select(is_zero(right), left, prod))


def _bitwise(name: str):
    def step(builder, ty, left, right, keyed):
        return getattr(builder, name)(left, right)

    return step


def _zero_key(builder, ty, left, right, keyed):
    """the first zero seen (visit_order): the smallest key, unsigned"""
    return builder.select(builder.icmp_unsigned("<", right, left), right, left)


def _extremum(op: str):
    """A float max/min is stock's select (``right`` only if larger, or NaN: the first of
    equal values wins), or, ``keyed``, ``llvm.maximum``/``minimum``: its value, with the
    sign of a zero result restored from a zero key (``with_zero_keys``)."""
    cmp = "<" if op == "Maximum" else ">"

    def step(builder, ty, left, right, keyed):
        is_float = isinstance(ty, types.Float)
        if is_float and keyed:
            # IEEE-754-2019 maximum/minimum: NaN-propagating, exact, and LLVM vectorizes
            # their reductions. They differ from stock's select only in the sign of a
            # zero result (max(-0.0, +0.0) = +0.0), which the zero key restores.
            return builder.call(_min_max_intrinsic(builder.module, op, left.type), [left, right])
        if is_float:
            take = builder.or_(builder.fcmp_ordered(cmp, left, right), builder.fcmp_unordered("uno", right, right))
            return builder.select(take, right, left)
        if isinstance(ty, types.Boolean) or (isinstance(ty, types.Integer) and not ty.signed):
            # a bool is an i1: signed, True would be -1 and max(True, False) False
            take = builder.icmp_unsigned(cmp, left, right)
        else:
            take = builder.icmp_signed(cmp, left, right)
        return builder.select(take, right, left)

    return step


def _min_max_intrinsic(module, op: str, ty):
    name = f"llvm.{'maximum' if op == 'Maximum' else 'minimum'}.{'f32' if isinstance(ty, ir.FloatType) else 'f64'}"
    fn = module.globals.get(name)
    if fn is None:  # declare_intrinsic gives these a one-argument signature
        fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), name)
    return fn


@dataclass(frozen=True)
class Reducer:
    """A row of `REDUCERS`: how one accumulation step is emitted, and what its result
    depends on."""

    step: Callable  # (builder, numba type, accumulator, value, keyed) -> new accumulator
    scalar_ops: tuple[type, ...] = ()  # the scalar ops of reductions lowered with it
    order_free: bool = False  # the result does not depend on the operands' order (max/min with their zero key)
    extremum: bool = False  # max/min: a float one gets a zero key (`with_zero_keys`)
    rounds_in_order: bool = False  # a float sum/product: rounds in visit order unless reassoc


# Reduce.op -> its reducer (ZeroKey: the hidden key of a float max/min, `with_zero_keys`)
REDUCERS: dict[str, Reducer] = {
    "Add": Reducer(_arith("fadd", "add"), (ps.Add,), rounds_in_order=True),
    "Mul": Reducer(_arith("fmul", "mul"), (ps.Mul,), rounds_in_order=True),
    "MulWithoutZeros": Reducer(_mul_without_zeros, (MulWithoutZeros,), rounds_in_order=True),
    "Maximum": Reducer(_extremum("Maximum"), (ps.Maximum, ps.ScalarMaximum), order_free=True, extremum=True),
    "Minimum": Reducer(_extremum("Minimum"), (ps.Minimum, ps.ScalarMinimum), order_free=True, extremum=True),
    "AND": Reducer(_bitwise("and_"), (ps.AND,), order_free=True),
    "OR": Reducer(_bitwise("or_"), (ps.OR,), order_free=True),
    "XOR": Reducer(_bitwise("xor"), (ps.XOR,), order_free=True),
    "ZeroKey": Reducer(_zero_key, order_free=True),
}

# the scalar op class of a reduction (exactly) -> its Reduce.op
SCALAR_REDUCERS: dict[type, str] = {cls: name for name, r in REDUCERS.items() for cls in r.scalar_ops}

# Accumulations whose result does not depend on the order of the operands (max/min with
# their zero key).
ORDER_FREE = tuple(name for name, r in REDUCERS.items() if r.order_free)


def may_reorder(red: Reduce) -> bool:
    """Whether ``red``'s accumulation may run in any order without changing a bit it must
    keep: integer and boolean accumulators; float sums/products with ``reassoc``; AND/OR/XOR
    and the zero key. Not float max/min (their NaN and zero-sign tie-breaks are a chain of
    compares and selects whose reordered form is not checked here)."""
    if not np.issubdtype(np.dtype(red.acc_dtype), np.floating):
        return True
    reducer = REDUCERS[red.op]
    if reducer.rounds_in_order:
        return "reassoc" in red.flags
    return not reducer.extremum


@dataclass(frozen=True)
class HintFacts:
    """What `FORCE_VECTORIZE_WHEN` reads about one loop nest."""

    spec: LoopSpec
    vector_calls: bool = False  # the body calls vector functions
    written_layouts: tuple[str, ...] = ()  # the numba layout ('C', 'F', 'A') of each array written in place
    opaque_calls: bool = False  # the body calls a function the vectorizer cannot widen (`PlannedBody.calls_opaque`)


# When the innermost loop of a nest carries LLVM's `llvm.loop.vectorize.enable` hint,
# overriding the vectorizer's cost model. Every row must hold; each with its reason. The
# hint goes only where LLVM can honour it: one it cannot is printed on the process's
# stderr ("warning: ... loop not vectorized: the optimizer was unable to perform the
# requested transformation", with the reason as a "remark"), which a user must never see.
FORCE_VECTORIZE_WHEN: tuple[tuple[str, Callable[[HintFacts], bool]], ...] = (
    # A body with vector calls (libmvec, exact lanes) computes each element through a
    # scalar wrapper of the vector function (so an element's bits do not depend on its
    # position): left scalar, every element costs a whole vector call. The cost model
    # sees a short inner axis (12 columns of a Cox model's (3770, 12) log-likelihood) and
    # says "not beneficial", and the kernel ran slower than stock's.
    ("the body calls vector functions", lambda f: f.vector_calls),
    # A row of a few elements, fixed by the types (a mixture's (n, 3), a zero-inflated
    # model's (n, 2)): LLVM unrolls it whole and vectorizes the loop around it; the hint
    # on the short loop keeps that from happening (an (n, 2) kernel ran slower with it).
    ("the innermost axis is not short by its type", lambda f: not _short_innermost(f.spec)),
    # A forced hint lets LLVM reorder every reduction of the loop, strict ones included
    # (LoopVectorizationLegality::canVectorizeFPMath allows reordering under it): only
    # when each reduction may run in any order (`may_reorder`).
    (
        "every reduction may be reordered",
        lambda f: all(may_reorder(r) for r in f.spec.reduces or () if r is not None),
    ),
    # An array written in place typed 'A' (a diagonal or transposed view, a sliced
    # intermediate: the branch of `kernel.KernelImpl.contiguous_or_not` for one that is
    # not C-contiguous at run time) is addressed by a stride in bytes read from the array:
    # its load and store have no constant stride, LLVM does not vectorize the loop
    # whatever the hint says, and LLVM prints the unmet hint on stderr (after loop
    # strength reduction, numba's second optimization of the module also reports "value that
    # could not be identified as reduction is used outside the loop": the pointer stepped
    # by that stride is no induction it knows). 'F' arrays written in place (a solve's
    # result) print nothing; arrays only read are copied contiguous first when the body
    # calls vector functions (`kernel.KernelImpl.read_inputs`).
    ("no array written in place is typed 'A'", lambda f: "A" not in f.written_layouts),
    # A call LLVM has no vector form of keeps the loop scalar ("call instruction cannot be
    # vectorized"): a libm function numba calls by name (lgamma in a strict cone, where
    # it has no lane form, beside lane calls of log: a gammainc gradient's body;
    # `libmvec.CALLED_BY_NAME`), a stock function. LLVM would print the unmet hint.
    ("the body calls nothing the vectorizer cannot widen", lambda f: not f.opaque_calls),
)


SHORT_ROW = 8  # a static innermost length below this is left to LLVM (see FORCE_VECTORIZE_WHEN)


def _short_innermost(spec: LoopSpec) -> bool:
    length = spec.static_shape[-1] if spec.static_shape else None
    return length is not None and length < SHORT_ROW


def force_vectorize(facts: HintFacts) -> bool:
    return all(rule(facts) for _why, rule in FORCE_VECTORIZE_WHEN)


# Elements a staged innermost loop computes before it accumulates them (`staged_outputs`).
STAGE_BLOCK = 64


def staged_outputs(facts: HintFacts, keys) -> tuple[int, ...]:
    """The outputs a loop accumulates in a second pass over each block of its innermost
    axis: float sums and products that must add in index order (no ``reassoc``) and that
    reduce that axis, when the body calls vector functions.

    Such a reduction keeps the innermost loop scalar (it may not be reordered,
    `FORCE_VECTORIZE_WHEN`), and a scalar loop computes every element through the scalar
    wrapper of a vector function: a whole vector call per element (a softmax's row sums
    in the cone of a Categorical's check). Staged, a first loop over the block computes
    the body, vectorized, and keeps the staged outputs' values; a second adds them in
    index order. Each element gets the same bits (the wrapper's are the vector
    function's, whatever the element's position) and each accumulator the same additions
    in the same order. Not with zero keys (a float max/min in the same loop), nor where
    the innermost axis is short by its type (`_short_innermost`), nor where the vector
    hint could not hold for the first loop."""
    spec = facts.spec
    if not facts.vector_calls or keys or spec.reduces is None or spec.ndim == 0 or _short_innermost(spec):
        return ()
    innermost = spec.ndim - 1
    staged = tuple(
        i
        for i, red in enumerate(spec.reduces)
        if red is not None and innermost in red.axes and not may_reorder(red) and REDUCERS[red.op].rounds_in_order
    )
    if not staged:
        return ()
    rest = tuple(None if i in staged else red for i, red in enumerate(spec.reduces))
    return staged if force_vectorize(replace(facts, spec=replace(spec, reduces=rest))) else ()


def with_zero_keys(spec: LoopSpec) -> tuple[LoopSpec, dict[int, int]]:
    """``spec`` plus one hidden int64 accumulator (a ``ZeroKey`` reduction over the same
    axes) per float max/min reduction whose innermost loop reduces (a full reduction, or
    the last axis that can be longer than 1 is reduced), and ``{key output: value output}``.

    Those are horizontal reductions: ``llvm.maximum`` and a ``umin`` of keys vectorize,
    stock's select does not. Elsewhere the inner loop runs over kept elements and the
    select vectorizes as it is."""
    keys: dict[int, int] = {}
    if spec.reduces is None:
        return spec, keys
    arrays = [bc for bc in spec.input_bc if bc is not None]
    long_axes = [d for d in range(spec.ndim) if not all(bc[d] for bc in arrays)]
    bcs, dtypes, reduces = list(spec.output_bc), list(spec.output_dtypes), list(spec.reduces)
    for i, red in enumerate(spec.reduces):
        if red is None or not REDUCERS[red.op].extremum or np.dtype(red.acc_dtype).kind != "f":
            continue
        if red.scalar_acc or (long_axes and long_axes[-1] in red.axes):
            keys[len(dtypes)] = i
            bcs.append(spec.output_bc[i])
            dtypes.append("int64")
            reduces.append(Reduce("ZeroKey", red.axes, NO_ZERO, "int64", (), red.scalar_acc))
    if not keys:
        return spec, keys
    return replace(spec, output_bc=tuple(bcs), output_dtypes=tuple(dtypes), reduces=tuple(reduces)), keys


def stock_order_slots(spec: LoopSpec) -> tuple[int, ...]:
    """The axes a CAReduce must visit in stock's runtime order to round like it: those of
    a float sum/product without ``reassoc`` that can be longer than 1, when there are two
    or more of them (else the order is already stock's)."""
    if spec.visit != "careduce" or spec.reduces is None:
        return ()
    red = spec.reduces[0]  # a CAReduce has one (plus its zero key for max/min)
    if not REDUCERS[red.op].rounds_in_order or np.dtype(red.acc_dtype).kind != "f":
        return ()
    if "reassoc" in red.flags:
        return ()
    slots = tuple(d for d in red.axes if not spec.input_bc[0][d])
    return slots if len(slots) >= 2 else ()


def flat_spec(spec: LoopSpec) -> LoopSpec | None:
    """The 1-d loop over every element of an N-d loop (N >= 2) without broadcasting and
    without reductions, or None."""
    if spec.ndim < 2 or any(r is not None for r in (spec.reduces or ())):
        return None
    if any(any(bc) for bc in spec.input_bc if bc is not None) or any(any(bc) for bc in spec.output_bc):
        return None
    return LoopSpec(
        ndim=1,
        input_bc=tuple(None if bc is None else (False,) for bc in spec.input_bc),
        output_bc=((False,),) * len(spec.output_dtypes),
        output_dtypes=spec.output_dtypes,
        inplace=spec.inplace,
        static_size=spec.static_size,
        static_shape=(spec.static_size,),
        size_bound=spec.size_bound,
    )


def blockable(red: Reduce) -> bool:
    """A full reduction that may be summed in blocks: exact in any order (max/min, bit ops,
    integer add/mul), or a float accumulation the policy lets reassociate."""
    if not red.scalar_acc:
        return False
    if REDUCERS[red.op].order_free or np.dtype(red.acc_dtype).kind in "iub":
        return True
    return "reassoc" in red.flags


def chunk_axis(spec: LoopSpec) -> int | None:
    """The axis a loop may be cut into chunks along, run across threads without changing a
    bit (the chunk axis), or None.

    Every element is computed once, by one thread. A partial reduction is safe when the
    chunk axis is not one it reduces over (each thread owns whole output elements); a full
    reduction when it is ``blockable`` (blocks fixed by the shape, combined in order). The
    axis is the first one that is neither reduced nor statically of length 1 (a row vector
    ``(1, N)`` splits along N) nor shorter than `MIN_CHUNK_LENGTH` by its type: the chunk
    function runs the chunk axis over ``[lo, hi)``, so LLVM does not know its trip count;
    the 2 columns of a mixture's gradient would become a loop vectorized 8 wide that never
    runs its vector body, under a scalar loop over the rows, for at most 2 chunks.
    """
    arrays = [bc for bc in spec.input_bc if bc is not None]
    if spec.ndim == 0 or not arrays:
        return None
    reduced = set()
    for i in range(len(spec.output_dtypes)):
        red = spec.reduce_of(i)
        if red is None:
            continue
        if red.scalar_acc:
            if not blockable(red):
                return None
        else:
            reduced.update(red.axes)
    static = spec.static_shape or (None,) * spec.ndim
    for d in range(spec.ndim):
        if d in reduced or all(bc[d] for bc in arrays):
            continue
        if static[d] is not None and static[d] < MIN_CHUNK_LENGTH:
            continue
        return d
    return None


# An axis shorter than this by its type is never the chunk axis (`chunk_axis`).
MIN_CHUNK_LENGTH = 64


def emit_loop(
    context,
    builder,
    spec: LoopSpec,
    input_types,
    input_values,
    body: Callable[[object, list], list],
    body_output_types,
    run_nest: Callable | None = None,
    vector_calls: bool = False,
    opaque_calls: bool = False,
):
    """Emit the whole kernel. ``body(builder, scalars) -> scalars`` emits one element;
    ``vector_calls``: it calls vector functions; ``opaque_calls``: it calls a function
    the vectorizer cannot widen (both read by `FORCE_VECTORIZE_WHEN`).

    ``run_nest(context, builder, nest, input_values, arrays, outputs, iter_shape)`` emits
    the code running the loop nest (``chunks.emit_chunked``: in a chunk function, maybe
    run in chunks across threads); by default the nest is emitted inline.
    Returns the LLVM value of the kernel's result (one output, or a tuple).
    """
    n_results = len(spec.output_dtypes)
    spec, keys = with_zero_keys(spec)
    body_output_types = [*body_output_types, *(types.int64 for _ in keys)]
    spec, input_types, input_values = _in_stock_order(context, builder, spec, input_types, input_values)
    arrays = {
        k: arrayobj.make_array(ty)(context, builder, val)
        for k, (ty, val, bc) in enumerate(zip(input_types, input_values, spec.input_bc, strict=True))
        if bc is not None
    }
    iter_shape = _iteration_shape(context, builder, spec, arrays)
    output_types = spec.output_types(input_types)
    outputs = _allocate_outputs(context, builder, spec, output_types, arrays, iter_shape)
    if not spec.inplace:
        builder.function.args[0].add_attribute("noalias")

    written = tuple(input_types[inp].layout for _out, inp in spec.inplace)
    facts = HintFacts(spec, vector_calls, written, opaque_calls)
    nest = LoopNest(context, spec, input_types, output_types, body, body_output_types, keys,
                    force_vectorize(facts), staged_outputs(facts, keys))
    if run_nest is not None:
        run_nest(context, builder, nest, input_values, arrays, outputs, iter_shape)
    else:
        zero = context.get_constant(types.intp, 0)
        nest.emit(builder, input_values, arrays, outputs, iter_shape, zero, iter_shape[0] if iter_shape else None, 0)

    for k, i in keys.items():  # a zero max/min takes the sign of the first zero seen
        _restore_zero_sign(context, builder, spec, arrays, input_types, outputs, output_types, i, k)
    return _results(context, builder, spec, outputs, output_types, n_results)


def _in_stock_order(context, builder, spec: LoopSpec, input_types, input_values):
    """``(spec, input_types, input_values)`` with the reduced axes a CAReduce must visit in
    stock's order (`stock_order_slots`) permuted in a view of its input."""
    slots = stock_order_slots(spec)
    if not slots:
        return spec, input_types, input_values
    input_types, input_values = list(input_types), list(input_values)
    first = arrayobj.make_array(input_types[0])(context, builder, input_values[0])
    input_types[0], view, _shape = permuted_view(context, builder, input_types[0], first, slots)
    input_values[0] = view._getvalue()
    if spec.static_shape is not None:  # the permuted axes' lengths are known at run time only
        spec = replace(spec, static_shape=tuple(None if d in slots else n for d, n in enumerate(spec.static_shape)))
    return spec, input_types, input_values


def _iteration_shape(context, builder, spec: LoopSpec, arrays) -> list:
    """The broadcast shape of the input arrays (stock's checks and errors), with the
    lengths the types fix as constants (`_checked_static_shape`)."""
    if arrays:
        iter_shape = compute_itershape(
            context,
            builder,
            [cgutils.unpack_tuple(builder, a.shape) for a in arrays.values()],
            tuple(spec.input_bc[k] for k in arrays),
            None,
        )
    else:
        iter_shape = [context.get_constant(types.intp, 1)] * spec.ndim
    return _checked_static_shape(context, builder, spec, iter_shape)


def _allocate_outputs(context, builder, spec: LoopSpec, output_types, arrays, iter_shape) -> list:
    """Array structs (fresh, or the destroyed input), or alloca'd accumulators for full
    reductions; a partial reduction's buffer is filled with its identity."""
    one = context.get_constant(types.intp, 1)
    inplace = dict(spec.inplace)
    outputs = []
    for i, (ty, bc) in enumerate(zip(output_types, spec.output_bc, strict=True)):
        red = spec.reduce_of(i)
        if red is not None and red.scalar_acc:
            acc = cgutils.alloca_once(builder, context.get_value_type(ty))
            builder.store(context.get_constant(ty, red.identity), acc)
            outputs.append(acc)
        elif i in inplace:
            outputs.append(arrays[inplace[i]])
        else:
            shape = [one if b else length for length, b in zip(iter_shape, bc, strict=True)]
            array = arrayobj._empty_nd_impl(context, builder, ty, shape)
            if red is not None:
                _fill(context, builder, array, ty, shape, red.identity)
            outputs.append(array)
    return outputs


def _restore_zero_sign(context, builder, spec: LoopSpec, arrays, input_types, outputs, output_types, i, k):
    """Output ``i`` (a float max/min) takes the sign of the first zero seen, from its zero
    key ``k``; a full CAReduce of a dense N-d input first rescans stock's 8 lanes."""
    red = spec.reduce_of(i)
    if red.scalar_acc and spec.visit == "careduce" and spec.ndim >= 2:
        # a dense input: stock runs 8 lanes, whose first zero the rescan finds
        x = arrays[0]
        shape = cgutils.unpack_tuple(builder, x.shape)
        strides = cgutils.unpack_tuple(builder, x.strides)
        if input_types[0].layout in "CF":
            dense = cgutils.true_bit
        else:
            dense = is_dense(builder, shape, strides, x.itemsize, stock_weights(builder, shape, strides))
        zero = builder.fcmp_ordered("==", builder.load(outputs[i]), ir.Constant(context.get_value_type(output_types[i]), 0.0))
        with builder.if_then(builder.and_(dense, zero), likely=False):
            total = context.get_constant(types.intp, 1)
            for length in shape:
                total = builder.mul(total, length)
            builder.store(first_zero_in_lanes(context, builder, x, input_types[0].dtype, total), outputs[k])
    _fix_zero_signs(context, builder, red, outputs[i], outputs[k], output_types[i])


def _results(context, builder, spec: LoopSpec, outputs, output_types, n_results):
    """The kernel's result: accumulators loaded, arrays returned (a destroyed input's
    reference counted again), zero-key buffers released; one value or a tuple."""
    inplace = dict(spec.inplace)
    values = []
    for i, (out, ty) in enumerate(zip(outputs, output_types, strict=True)):
        red = spec.reduce_of(i)
        if red is not None and red.scalar_acc:
            values.append(builder.load(out))
            continue
        value = out._getvalue()
        if i in inplace:
            context.nrt.incref(builder, ty, value)
        if i >= n_results:  # a zero-key buffer: done with it
            context.nrt.decref(builder, ty, value)
        values.append(value)
    values, output_types = values[:n_results], output_types[:n_results]
    if len(values) == 1:
        return values[0]
    return context.make_tuple(builder, types.Tuple(output_types), values)


def _fix_zero_signs(context, builder, red, value, key, ty):
    if red.scalar_acc:
        builder.store(fix_zero_sign(builder, builder.load(value), builder.load(key)), value)
        return
    n = context.get_constant(types.intp, 1)
    for length in cgutils.unpack_tuple(builder, value.shape):
        n = builder.mul(n, length)
    with cgutils.for_range(builder, n) as loop:  # both buffers are fresh, C-contiguous
        vp = builder.gep(value.data, [loop.index])
        kp = builder.gep(key.data, [loop.index])
        builder.store(fix_zero_sign(builder, builder.load(vp), builder.load(kp)), vp)


def static_lengths(context, builder, spec: LoopSpec, iter_shape) -> list:
    """``iter_shape`` with the lengths the types fix as constants: LLVM then knows the
    trip count of a short axis (a softmax over 5 classes) and unrolls it, so the long
    axis becomes the vectorized loop instead of leaving every element to the scalar
    remainder.

    A row loop's axis (`row_loop_length`) gets its length hidden (`_row_trip_count`): given
    the constant, LLVM unrolls a row of 8 to 16 elements with a small body whole and
    vectorizes the loop around it, reading every input at the row's stride with gathers
    (slower than stock on a structural-equation model's (263, 12) kernel and a Cox model's
    (3770, 12) check); left a loop, its row is read as contiguous vectors, as stock's
    is. Addresses still use every static length (`_item_pointer`)."""
    static = spec.static_shape or (None,) * len(iter_shape)
    row = len(iter_shape) - 1 if row_loop_length(spec.static_shape) is not None else None
    lengths = []
    for d, (length, fixed) in enumerate(zip(iter_shape, static, strict=True)):
        if fixed is None:
            lengths.append(length)
        elif d == row:
            lengths.append(_row_trip_count(context, builder, fixed))
        else:
            lengths.append(context.get_constant(types.intp, fixed))
    return lengths


def _checked_static_shape(context, builder, spec: LoopSpec, iter_shape) -> list:
    """`static_lengths`, after checking at run time that the arrays have every length their
    types fix (addresses are computed from them)."""
    static = spec.static_shape or (None,) * len(iter_shape)
    for d, (runtime, fixed) in enumerate(zip(iter_shape, static, strict=True)):
        if fixed is None:
            continue
        const = context.get_constant(types.intp, fixed)
        with builder.if_then(builder.icmp_signed("!=", runtime, const), likely=False):
            context.call_conv.return_user_exc(
                builder, ValueError, (f"ptnumba_codegen: axis {d} does not have the static length {spec.static_shape[d]} of its type",)
            )
    return static_lengths(context, builder, spec, iter_shape)


def _row_trip_count(context, builder, length: int):
    """A row loop's trip count: ``length`` as a multiple of its largest power-of-two
    divisor, the quotient hidden from LLVM's value propagation (an empty inline asm). LLVM
    does not know the row's length, so does not unroll it whole, but knows a 12 is a
    multiple of 4, so a loop of 4-lane vectors has no scalar remainder to emit."""
    step = length & -length
    quotient = context.get_constant(types.intp, length // step)
    hidden = builder.asm(ir.FunctionType(quotient.type, [quotient.type]), "", "=r,0", [quotient], side_effect=False)
    return builder.mul(hidden, context.get_constant(types.intp, step), flags=["nuw", "nsw"])


@dataclass
class LoopNest:
    """The loop nest over the iteration space, one axis restricted to ``[lo, hi)``.

    Emitted inline in the kernel, or once in a chunk function the threads call.
    """

    context: object
    spec: LoopSpec
    input_types: tuple
    output_types: list
    body: Callable[[object, list], list]
    body_output_types: list
    keys: dict = None  # {zero-key output: its max/min output} (with_zero_keys)
    vectorize: bool = False  # the innermost loop carries the force hint (`FORCE_VECTORIZE_WHEN`)
    staged: tuple = ()  # outputs accumulated in a second pass over blocks of the innermost axis (`staged_outputs`)

    @property
    def keyed(self) -> set[int]:
        return set((self.keys or {}).values())

    def _rank_fn(self, builder, arrays, iter_shape):
        """``rank(builder, indices)``: the element's position in the stock order."""
        layout = self.input_types[0].layout if self.spec.visit == "careduce" else "C"
        if layout == "A":  # stock's order is decided at run time, by the strides
            x = arrays[0]
            weights = stock_weights(builder, cgutils.unpack_tuple(builder, x.shape), cgutils.unpack_tuple(builder, x.strides))
        else:  # logical order (an elemwise loop, a C array) or memory order (an F array)
            weights, w = [], self.context.get_constant(types.intp, 1)
            for length in reversed(iter_shape) if layout == "C" else iter_shape:
                weights.append(w)
                w = builder.mul(w, length)
            if layout == "C":
                weights.reverse()

        def rank(b, indices):
            p = self.context.get_constant(types.intp, 0)
            for index, weight in zip(indices, weights, strict=True):
                p = b.add(p, b.mul(index, weight))
            return p

        return rank

    def _loops(self, builder, iter_shape, lo, hi, axis: int) -> list:
        """One counted loop per axis, ``axis`` over ``[lo, hi)``; the innermost may carry
        the force hint (`FORCE_VECTORIZE_WHEN`)."""
        innermost = len(iter_shape) - 1
        return [
            counted_loop(
                builder,
                hi if d == axis else length,
                start=lo if d == axis else None,
                vectorize=self.vectorize and d == innermost,
                whole_vectors=d == innermost and row_loop_length(self.spec.static_shape) is not None,
            )
            for d, length in enumerate(iter_shape)
        ]

    def emit(self, builder, input_values, arrays, outputs, iter_shape, lo, hi, axis: int):
        """The nest with axis ``axis`` restricted to ``[lo, hi)``."""
        if self.staged:
            self._emit_staged(builder, input_values, arrays, outputs, iter_shape, lo, hi, axis)
            return
        scopes = _AliasScopes(builder, len(outputs), self.spec.inplace)
        rank = self._rank_fn(builder, arrays, iter_shape) if self.keys else None
        loops = self._loops(builder, iter_shape, lo, hi, axis)
        indices = [loop.__enter__().index for loop in loops]
        results = list(self.body(builder, self._load_inputs(builder, input_values, arrays, indices, scopes)))
        if self.keys:
            results += [None] * len(self.keys)  # computed below, from the value stored
        self._store_results(builder, outputs, indices, results, scopes, rank(builder, indices) if rank else None)
        for loop in reversed(loops):
            loop.__exit__(None, None, None)

    def _load_inputs(self, builder, input_values, arrays, indices, scopes) -> list:
        """Every input's element at ``indices`` (a native scalar input as it is)."""
        context, spec = self.context, self.spec
        zero = context.get_constant(types.intp, 0)
        scalars = []
        for k, (ty, val, bc) in enumerate(zip(self.input_types, input_values, spec.input_bc, strict=True)):
            if bc is None:
                scalars.append(val)
                continue
            idx = [zero if b else i for i, b in zip(indices, bc, strict=True)]
            raw = builder.load(_item_pointer(context, builder, arrays[k], ty, idx, _static_dims(spec, bc)))
            scopes.tag_load(raw, k)
            scalars.append(context.data_model_manager[ty.dtype].from_data(builder, raw))
        return scalars

    def _output_pointer(self, builder, out, i, indices):
        """Output ``i``'s element at ``indices`` (its reduced axes at 0)."""
        context, spec = self.context, self.spec
        zero = context.get_constant(types.intp, 0)
        bc = spec.output_bc[i]
        idx = [zero if b else j for j, b in zip(indices, bc, strict=True)]
        return _item_pointer(context, builder, out, self.output_types[i], idx, _static_dims(spec, bc))

    def _store_results(self, builder, outputs, indices, results, scopes, position, skip=()):
        """Store or accumulate every output's value of one element, but those in ``skip``."""
        context, spec = self.context, self.spec
        accumulated = {}
        for i, (out, ty, val, val_ty) in enumerate(
            zip(outputs, self.output_types, results, self.body_output_types, strict=True)
        ):
            if i in skip:
                continue
            red = spec.reduce_of(i)
            if i in (self.keys or {}):
                val = zero_key(builder, accumulated[self.keys[i]], position)
            if red is not None and red.scalar_acc:
                with stamp(builder, red.flags):
                    val = context.cast(builder, val, val_ty, ty)
                    accumulated[i] = val
                    keyed = i in self.keyed
                    builder.store(combine(builder, red.op, ty, builder.load(acc_ptr := out), val, keyed), acc_ptr)
                continue
            ptr = self._output_pointer(builder, out, i, indices)
            model = context.data_model_manager[ty.dtype]
            if red is not None:
                with stamp(builder, red.flags):
                    val = context.cast(builder, val, val_ty, ty.dtype)
                    accumulated[i] = val
                    old = builder.load(ptr)
                    scopes.tag_output(old, i)
                    val = combine(builder, red.op, ty.dtype, model.from_data(builder, old), val, i in self.keyed)
            scopes.tag_output(builder.store(model.as_data(builder, val), ptr), i)

    def _emit_staged(self, builder, input_values, arrays, outputs, iter_shape, lo, hi, axis: int):
        """The nest whose innermost axis runs in blocks of `STAGE_BLOCK` elements: a loop
        over the block computes the body (vectorized, every output but the staged ones
        stored or accumulated as usual, the staged ones' values kept on the stack), then a
        loop adds the kept values to each staged accumulator in index order
        (`staged_outputs`)."""
        context, spec = self.context, self.spec
        intp = types.intp
        scopes = _AliasScopes(builder, len(outputs), spec.inplace)
        innermost = len(iter_shape) - 1
        outer = [
            counted_loop(builder, hi if d == axis else length, start=lo if d == axis else None)
            for d, length in enumerate(iter_shape[:-1])
        ]
        outer_indices = [loop.__enter__().index for loop in outer]
        acc_types = {i: self.output_types[i] if spec.reduce_of(i).scalar_acc else self.output_types[i].dtype
                     for i in self.staged}
        kept = {i: cgutils.alloca_once(builder, context.get_value_type(ty), size=STAGE_BLOCK, name=f"staged{i}")
                for i, ty in acc_types.items()}
        first = lo if axis == innermost else context.get_constant(intp, 0)
        length = builder.sub(hi, lo) if axis == innermost else iter_shape[-1]
        block = context.get_constant(intp, STAGE_BLOCK)
        n_blocks = builder.sdiv(builder.add(length, context.get_constant(intp, STAGE_BLOCK - 1)), block)
        with counted_loop(builder, n_blocks) as blocks:
            offset = builder.mul(blocks.index, block)
            start = builder.add(first, offset)
            count = builder.select(builder.icmp_signed("<", builder.sub(length, offset), block),
                                   builder.sub(length, offset), block)
            with counted_loop(builder, count, vectorize=True) as element:
                indices = [*outer_indices, builder.add(start, element.index)]
                results = list(self.body(builder, self._load_inputs(builder, input_values, arrays, indices, scopes)))
                self._store_results(builder, outputs, indices, results, scopes, None, skip=self.staged)
                for i in self.staged:
                    with stamp(builder, spec.reduce_of(i).flags):
                        val = context.cast(builder, results[i], self.body_output_types[i], acc_types[i])
                    builder.store(val, builder.gep(kept[i], [element.index]))
            for i in self.staged:
                red = spec.reduce_of(i)
                ty = acc_types[i]
                model = context.data_model_manager[ty]
                ptr = outputs[i] if red.scalar_acc else self._output_pointer(builder, outputs[i], i, [*outer_indices, start])
                acc = cgutils.alloca_once_value(builder, builder.load(ptr) if red.scalar_acc else model.from_data(builder, builder.load(ptr)))
                with counted_loop(builder, count) as element, stamp(builder, red.flags):
                    value = builder.load(builder.gep(kept[i], [element.index]))
                    builder.store(combine(builder, red.op, ty, builder.load(acc), value), acc)
                total = builder.load(acc)
                builder.store(total if red.scalar_acc else model.as_data(builder, total), ptr)
        for loop in reversed(outer):
            loop.__exit__(None, None, None)


@contextmanager
def counted_loop(builder, count, start=None, vectorize: bool = False, whole_vectors: bool = False):
    """numba's ``cgutils.for_range`` over ``[start, count)``, whose latch (the branch back
    to the loop's condition) carries ``llvm.loop.vectorize.enable`` when ``vectorize``, and
    ``llvm.loop.interleave.count`` 1 when ``whole_vectors`` (`row_loop_length`)."""
    with cgutils.for_range(builder, count, start) as loop:
        yield loop
    module = builder.module
    hints = []
    if vectorize:
        hints.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.IntType(1)(1)]))
    if whole_vectors:
        hints.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"), ir.IntType(32)(1)]))
    if hints:
        _value, latch_block = loop.index.incomings[-1]  # the incremented index's block
        latch_block.terminator.set_metadata("llvm.loop", module.add_metadata(hints, self_ref=True))


# A static innermost length at least SHORT_ROW and below this is a "row loop" (`row_loop_length`):
# short enough for LLVM to unroll whole when it knows the trip count (its full-unroll
# threshold, about 300 instructions' cost, covers a small body's rows of up to ~40), long
# enough to be read as vectors. Longer rows keep the constant trip count and interleaving.
ROW_LOOP_LIMIT = 64


def row_loop_length(static_shape) -> int | None:
    """The static length of an innermost axis run as a loop of whole vectors (None: not
    such a row). Its trip count stays a run-time value (`static_lengths`) and it is not
    interleaved: the vectorizer would run two vectors per iteration, and a row of 12 at 4
    lanes would leave 4 elements to the scalar remainder, each a whole vector call through
    the scalar wrapper when the body calls vector functions (as in frailty_coxph's kernel).
    `isa.row_isa` counts a row's calls on that basis."""
    length = static_shape[-1] if static_shape else None
    if length is None or not SHORT_ROW <= length < ROW_LOOP_LIMIT:
        return None
    return length


def _static_dims(spec: LoopSpec, bc) -> tuple[int | None, ...] | None:
    """The lengths an array with broadcast pattern ``bc`` has by the types (1 where it
    broadcasts), or None. `_checked_static_shape` has checked them at run time."""
    if spec.static_shape is None:
        return None
    return tuple(1 if b else fixed for fixed, b in zip(spec.static_shape, bc, strict=True))


def _fill(context, builder, array, array_type, shape, value):
    """Pre-fill a fresh C-contiguous buffer with a reduction identity."""
    n = context.get_constant(types.intp, 1)
    for length in shape:
        n = builder.mul(n, length)
    ident = context.get_constant(array_type.dtype, value)
    elem = array.data.type.pointee
    if ident.type != elem:  # bool: i1 value, i8 in memory
        ident = builder.zext(ident, elem)
    with cgutils.for_range(builder, n) as loop:
        builder.store(ident, builder.gep(array.data, [loop.index]))


__all__ = ["HintFacts", "LoopNest", "LoopSpec", "Reduce", "blockable", "combine", "emit_loop", "flat_spec", "chunk_axis"]
