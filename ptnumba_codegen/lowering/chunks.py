"""Split a large loop nest across numba's threading layer: the per-kernel half.

Memory-bound kernels (``maximum(x, y) * z``, ``x * y + z``) are limited by what one core
can stream; a second core roughly doubles that. The loop nest is emitted once, in a
*chunk function* ``chunk(state, lo, hi)`` that runs the nest with the split axis
(``loop.split_axis``) restricted to ``[lo, hi)``. The kernel asks the process-wide helper
(``runtime.threads.TRY_SPLIT``) to run the chunks on numba's threads; when it declines (small
loop, one thread, gate closed, another split running) or a chunk raised, the kernel calls
the chunk on its own thread.

Results never depend on the split: only loops whose split axis is not reduced are
split, or full reductions in shape-fixed blocks (``loop.split_axis``), so every element and
every accumulator is computed by one thread in the same order, and libmvec calls give the
same bits in a vector body or a remainder (``vecmath.libmvec``). The chunk boundaries of 1-d
loops are multiples of 64 elements, so threads never write the same cache line. A chunk
that raises is rerun on the calling thread so the exception is raised with its message;
for an inplace loop (inputs already overwritten) a RuntimeError says so instead.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir
from numba.core import cgutils, types
from numba.np import arrayobj

from ptnumba_codegen.flags import TRANSCENDENTAL
from ptnumba_codegen.lowering.loop import combine, split_axis, static_lengths
from ptnumba_codegen.runtime.threads import (
    MEASURE_ONE_THREAD,
    NOT_SPLIT,
    RECORD,
    RECORD_TYPE,
    SPLIT_DONE,
    SPLIT_RAISED,
    STATS_TYPE,
    TRY_SPLIT,
    TRY_SPLIT_TYPE,
    ceil_div,
    read_cycles,
    smin,
)
from ptnumba_codegen.lowering.stamp import stamp
from ptnumba_codegen.runtime.pools import yield_reason

CHUNK_ALIGN = 64  # elements: 1-d chunk boundaries fall on whole cache lines
# Splitting costs about 3 us (waking the threads); a transcendental call costs several
# plain operations, so loops with them split from fewer elements (measured on 2 cores:
# max(x,y)*z breaks even near 32k elements, exp(x)*y+z near 6k, tanh(x)+erf(y) near 2k).
TRANSCENDENTAL_WEIGHT = 4
# Full reductions are cut into blocks of about this many elements (at most MAX_BLOCKS
# blocks): the partial sums' order depends on the shape only, never on the threads.
BLOCK_ELEMENTS = 16384
MAX_BLOCKS = 64


@dataclass(frozen=True)
class Split:
    """The static part of the decision: the thread cap and the element threshold."""

    threads: int  # 0: numba.get_num_threads(); else at most this many
    min_elements: int


def split_for(parallel, planned) -> Split:
    """The policy's ``[parallel]`` applied to one body (heavier bodies split earlier)."""
    heavy = sum(1 for klass in planned.classes if klass == TRANSCENDENTAL)
    return Split(parallel.threads, max(1, parallel.min_elements // (1 + TRANSCENDENTAL_WEIGHT * heavy)))


def split_decision(spec, planned, parallel, yields_to=()) -> tuple[bool, Split | None, str]:
    """``(chunked, split, why)`` for one kernel: whether its loop goes through a chunk
    function, the static part of the split decision (None: never split), and why.
    ``yields_to``: the other thread pools of the kernel's function (`pools`)."""
    axis = split_axis(spec)
    if axis is None:
        return False, None, "never split: every axis is reduced, of length 1 or short by its type, or a full reduction must keep its order"
    if planned.stock_keys:
        return False, None, "never split: the body calls a stock function"
    if parallel is None:
        return True, None, "never split: no policy"
    split = split_for(parallel, planned)
    if spec.static_size is not None and spec.static_size < split.min_elements:
        return False, None, f"never split: its static size {spec.static_size} is below {split.min_elements} elements"
    if not parallel.enabled:
        return True, None, "never split: threads = 1"
    if yields_to:
        return True, None, f"never split: {yield_reason(yields_to)}"
    blocked = any(r is not None and r.scalar_acc for r in (spec.reduces or ()))
    cap = "numba.get_num_threads()" if split.threads == 0 else f"at most {split.threads}"
    how = f"in shape-fixed blocks along axis {axis}" if blocked else f"along axis {axis}"
    return True, split, f"split {how} from {split.min_elements} elements, on {cap} threads"


def emit_chunked(context, builder, nest, input_values, arrays, outputs, iter_shape, split: Split | None):
    """Emit ``nest`` in a chunk function and the code that runs it, split or not.

    Every splittable loop goes through the chunk function, whatever the policy says about
    threads, so the ``threads`` setting (and the call-time decision) never changes a bit.
    ``split=None``: the chunk function is called on this thread only.

    Full reductions (``x.sum()``) are *blocked*: the split axis is cut into blocks whose
    size depends on the shape alone (``block_rows``), each block accumulates from the
    identity into its own partial, and the partials are combined in block order. Threads
    take whole blocks, so the result is the same for any thread count.
    """
    module = builder.module
    spec = nest.spec
    axis = split_axis(spec)
    intp = context.get_value_type(types.intp)
    i32 = ir.IntType(32)
    i8p = ir.IntType(8).as_pointer()
    accs = [i for i in range(len(outputs)) if spec.reduce_of(i) is not None and spec.reduce_of(i).scalar_acc]
    acc_types = {i: nest.output_types[i] for i in accs}
    part_tys = {i: ir.ArrayType(context.get_value_type(acc_types[i]), MAX_BLOCKS) for i in accs}

    # -- the state the chunk function reads: every input, every output (a partials array
    # for an accumulator), the iteration shape, the chunk length, an error flag
    out_fields = [part_tys[i].as_pointer() if i in part_tys else o._getvalue().type for i, o in enumerate(outputs)]
    fields = [v.type for v in input_values] + out_fields + [intp] * len(iter_shape) + [intp, i32]
    state_ty = ir.LiteralStructType(fields)
    n_in, n_out, nd = len(input_values), len(outputs), len(iter_shape)
    CHUNK, ERR = n_in + n_out + nd, n_in + n_out + nd + 1

    def field(b, state, k):
        return b.gep(state, [i32(0), i32(k)])

    # -- chunk(state, lo, hi): the loop nest, numba's calling convention (errors propagate)
    argtys = [types.voidptr, types.intp, types.intp]
    chunk = ir.Function(module, context.call_conv.get_function_type(types.none, argtys), f"ptnumba_chunk_{uuid.uuid4().hex}")
    # Not internal: LLVM then cannot specialize the chunk on its call sites (lo = 0 when
    # never split), so split and unsplit kernels run the very same machine code. The name
    # is unique: linkonce_odr definitions of one name are merged across modules.
    chunk.linkage = "linkonce_odr"
    chunk.attributes.add("noinline")
    context.call_conv.decorate_function(chunk, ["state", "lo", "hi"], argtys)
    cb = ir.IRBuilder(chunk.append_basic_block("entry"))
    raw_state, lo, hi = context.call_conv.get_arguments(chunk)
    st = cb.bitcast(raw_state, state_ty.as_pointer())
    values = [cb.load(field(cb, st, k)) for k in range(n_in + n_out + nd)]
    in_vals, out_vals, shape = values[:n_in], values[n_in : n_in + n_out], values[n_in + n_out :]
    shape = static_lengths(context, spec, shape)  # the chunk cannot see the kernel's constants
    c_arrays = {k: arrayobj.make_array(nest.input_types[k])(context, cb, in_vals[k]) for k in arrays}
    c_outputs = []
    for i, (ty, v) in enumerate(zip(nest.output_types, out_vals, strict=True)):
        if i in part_tys:  # the accumulator of the block being run
            c_outputs.append(cgutils.alloca_once(cb, context.get_value_type(ty)))
        else:
            c_outputs.append(arrayobj.make_array(ty)(context, cb, v))
    inplace = dict(spec.inplace)
    for i, k in inplace.items():  # a destroyed input is its output: one struct for both
        c_outputs[i] = c_arrays[k]
    if not accs:
        nest.emit(cb, in_vals, c_arrays, c_outputs, shape, lo, hi, axis)
    else:  # every block of [lo, hi) from the identity, into its own partial
        rows = cb.load(field(cb, st, CHUNK))
        with cgutils.for_range(cb, ceil_div(cb, hi, rows), start=cb.sdiv(lo, rows)) as block:
            b_lo = cb.mul(block.index, rows)
            b_hi = smin(cb, cb.add(b_lo, rows), hi)
            for i in accs:
                cb.store(context.get_constant(acc_types[i], spec.reduce_of(i).identity), c_outputs[i])
            nest.emit(cb, in_vals, c_arrays, c_outputs, shape, b_lo, b_hi, axis)
            for i in accs:
                cb.store(cb.load(c_outputs[i]), cb.gep(out_vals[i], [i32(0), block.index]))
    context.call_conv.return_value(cb, context.get_dummy_value())

    # -- the kernel: fill the state
    state = cgutils.alloca_once(builder, state_ty)
    parts = {i: cgutils.alloca_once(builder, part_tys[i]) for i in accs}
    out_state = [parts[i] if i in parts else o._getvalue() for i, o in enumerate(outputs)]
    for k, v in enumerate([*input_values, *out_state, *iter_shape]):
        builder.store(v, field(builder, state, k))
    builder.store(i32(0), field(builder, state, ERR))
    state_p = builder.bitcast(state, i8p)
    n0 = iter_shape[axis]  # the split axis: "rows" below are its indices
    total = intp(1)
    for length in iter_shape:
        total = builder.mul(total, length)
    if accs:
        rows = block_rows(builder, intp, n0, total)
        builder.store(rows, field(builder, state, CHUNK))
        nblocks = ceil_div(builder, n0, rows)

    def run_on_this_thread():  # every row (every block, in order) on this thread
        status, _ = context.call_conv.call_function(builder, chunk, types.none, argtys, [state_p, intp(0), n0])
        with builder.if_then(status.is_error, likely=False):
            context.call_conv.return_status_propagate(builder, status)

    def combine_partials():
        # In block order, with the accumulator's flags; at most MAX_BLOCKS steps, so the
        # loop stays rolled (unrolling or vectorizing it would only cost compile time).
        for i in accs:
            red, ty = spec.reduce_of(i), acc_types[i]
            with _rolled_loop(builder, nblocks) as index, stamp(builder, red.flags):
                part = builder.load(builder.gep(parts[i], [i32(0), index]))
                # every float max/min accumulator in a register has its zero key (keyed)
                builder.store(combine(builder, red.op, ty, builder.load(outputs[i]), part, keyed=True), outputs[i])

    if split is None:
        run_on_this_thread()
        combine_partials()
        return

    # -- the helper decides and, if it splits, runs the chunks on numba's threads; the
    # kernel's timing statistics (split_runtime: measured, not guessed) live in a global
    stats = ir.GlobalVariable(module, STATS_TYPE, f"ptnumba_split_stats_{uuid.uuid4().hex}")
    stats.linkage = "internal"
    stats.initializer = ir.Constant(STATS_TYPE, None)
    stats_p = builder.gep(stats, [i32(0), i32(0)])
    try_split = cgutils.get_or_insert_function(module, TRY_SPLIT_TYPE, TRY_SPLIT)
    # below the split threshold the helper would answer NOT_SPLIT: it is not asked (a
    # small kernel called every step of a Scan saves the call and the cycle counter)
    asked = builder.basic_block
    with builder.if_then(builder.icmp_signed(">=", total, intp(split.min_elements)), likely=False):
        called = builder.call(
            try_split,
            [
                builder.bitcast(chunk, i8p),
                state_p,
                n0,
                total,
                intp(split.min_elements),
                intp(split.threads),
                rows if accs else intp(0),
                intp(CHUNK_ALIGN if axis == nd - 1 else 1),  # the innermost axis: whole cache lines
                field(builder, state, CHUNK),
                field(builder, state, ERR),
                stats_p,
            ],
        )
        calling = builder.basic_block
    outcome = builder.phi(called.type)
    outcome.add_incoming(i32(NOT_SPLIT), asked)
    outcome.add_incoming(called, calling)
    if inplace:
        with builder.if_then(builder.icmp_signed("==", outcome, i32(SPLIT_RAISED)), likely=False):
            context.call_conv.return_user_exc(
                builder,
                RuntimeError,
                (
                    (
                        "ptnumba_codegen: an inplace loop raised in a worker thread; "
                        "set [parallel] threads = 1 in the policy to see the exception"
                    ),
                ),
            )
    with builder.if_then(builder.icmp_signed("!=", outcome, i32(SPLIT_DONE))):
        measured, unmeasured = builder.icmp_signed("==", outcome, i32(MEASURE_ONE_THREAD)), builder.basic_block
        with builder.if_then(measured, likely=False):
            cycles, counting = read_cycles(builder), builder.basic_block
        start = builder.phi(cycles.type)
        start.add_incoming(cycles.type(0), unmeasured)
        start.add_incoming(cycles, counting)
        run_on_this_thread()
        with builder.if_then(measured):
            record = cgutils.get_or_insert_function(module, RECORD_TYPE, RECORD)
            builder.call(record, [stats_p, builder.sub(read_cycles(builder), start), total])
    combine_partials()


@contextmanager
def _rolled_loop(builder, count):
    """``for index in range(count)`` that LLVM must neither unroll nor vectorize."""
    module = builder.module
    pre = builder.basic_block
    cond = builder.append_basic_block("rolled.cond")
    body = builder.append_basic_block("rolled.body")
    end = builder.append_basic_block("rolled.end")
    builder.branch(cond)
    builder.position_at_end(cond)
    index = builder.phi(count.type)
    index.add_incoming(count.type(0), pre)
    builder.cbranch(builder.icmp_signed("<", index, count), body, end)
    builder.position_at_end(body)
    yield index
    index.add_incoming(builder.add(index, count.type(1)), builder.basic_block)
    hints = [module.add_metadata([ir.MetaDataString(module, h)]) for h in ("llvm.loop.unroll.disable",)]
    hints.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.IntType(1)(0)]))
    builder.branch(cond).set_metadata("llvm.loop", module.add_metadata(hints, self_ref=True))
    builder.position_at_end(end)


def block_rows(builder, intp, n0, total):
    """Indices of the split axis per reduction block: about BLOCK_ELEMENTS elements, at
    most MAX_BLOCKS blocks. A function of the shape alone, never of the thread count."""
    safe_n0 = builder.select(builder.icmp_signed(">", n0, intp(0)), n0, intp(1))
    inner = builder.sdiv(total, safe_n0)
    inner = builder.select(builder.icmp_signed(">", inner, intp(0)), inner, intp(1))
    rows = ceil_div(builder, intp(BLOCK_ELEMENTS), inner)
    least = ceil_div(builder, safe_n0, intp(MAX_BLOCKS))
    return builder.select(builder.icmp_signed(">", rows, least), rows, least)


__all__ = ["Split", "emit_chunked", "split_decision", "split_for"]
