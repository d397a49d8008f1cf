"""Run a large loop nest in chunks across numba's threading layer: the per-kernel half.

Memory-bound kernels (``maximum(x, y) * z``, ``x * y + z``) are limited by what one core
can stream; a second core roughly doubles that. The loop nest is emitted once, in a
*chunk function* ``chunk(state, lo, hi)`` that runs the nest with the chunk axis
(``loop.chunk_axis``) restricted to ``[lo, hi)``. The kernel asks the process-wide helper
(``runtime.threads.TRY_CHUNKS``) to run the chunks on numba's threads; when it declines (one
thread, gate closed, another split running) or a chunk raised, the kernel calls the chunk
on its own thread. A loop below the helper's element threshold (known to the kernel: the
threshold is a constant of its body) calls the chunk at once without asking: the helper
would decline without a side effect, and a small kernel called every step of a Scan
saves the call.

Results never depend on the chunks: only loops whose chunk axis is not reduced are
split, or full reductions in shape-fixed blocks (``loop.chunk_axis``), so every element and
every accumulator is computed by one thread in the same order, and libmvec calls give the
same bits in a vector body or a remainder (``vecmath.libmvec``). The chunk boundaries of 1-d
loops are multiples of 64 elements, so threads never write the same cache line. A chunk
that raises is rerun on the calling thread so the exception is raised with its message;
for an inplace loop (inputs already overwritten) a RuntimeError says so instead.
"""

from __future__ import annotations

import math
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import ir
from numba.core import cgutils, types
from numba.np import arrayobj

from ptnumba_codegen.analysis.classify import is_transcendental
from ptnumba_codegen.analysis.inferred_shapes import broadcast_lengths
from ptnumba_codegen.analysis.kernel_programs import kernel_core, node_program
from ptnumba_codegen.flags import TRANSCENDENTAL
from ptnumba_codegen.lowering.loop import combine, chunk_axis, static_lengths
from ptnumba_codegen.runtime.threads import (
    MEASURE_ONE_THREAD,
    MIN_CHUNK_AXIS,
    RECORD,
    RECORD_TYPE,
    CHUNKS_DONE,
    CHUNK_RAISED,
    STATS_TYPE,
    TRY_CHUNKS,
    TRY_CHUNKS_TYPE,
    ceil_div,
    read_cycles,
    smin,
)
from ptnumba_codegen.lowering.stamp import stamp
from ptnumba_codegen.runtime.pools import yield_reason

CHUNK_ALIGN = 64  # elements: 1-d chunk boundaries fall on whole cache lines
# Splitting has a fixed cost (waking the threads); a transcendental call costs several
# plain operations, so loops with them split from fewer elements (where splitting breaks
# even was measured on 2 cores for plain and for transcendental bodies).
TRANSCENDENTAL_WEIGHT = 4
# Full reductions are cut into blocks of about this many elements (at most MAX_BLOCKS
# blocks): the partial sums' order depends on the shape only, never on the threads.
BLOCK_ELEMENTS = 16384
MAX_BLOCKS = 64

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)
CHUNK_ARGTYPES = [types.voidptr, types.intp, types.intp]  # chunk(state, lo, hi)
LARGE_ARGTYPES = [types.voidptr, types.intp, types.intp, types.intp]  # large(state, n0, total, rows): `emit_large_path`


@dataclass(frozen=True)
class Chunking:
    """The static part of the decision: the thread cap and the element threshold."""

    threads: int  # 0: numba.get_num_threads(); else at most this many
    min_elements: int


def chunking_for(parallel, planned) -> Chunking:
    """The policy's ``[parallel]`` applied to one body (heavier bodies split earlier)."""
    heavy = sum(1 for klass in planned.classes if klass == TRANSCENDENTAL)
    return Chunking(parallel.threads, max(1, parallel.min_elements // (1 + TRANSCENDENTAL_WEIGHT * heavy)))


def may_chunk(node, parallel, size_bound: int | None = None) -> bool:
    """Whether a kernel node's loop could ever run on threads under ``parallel`` (the
    graph-level bound the pass asks before starting the thread runtime): False only when its
    iteration space, the broadcast of every array it reads or writes, has a static size
    (an axis is static when some array's length on it is, other than 1)
    below the lowest threshold `chunking_for` could give its body (every instruction of a
    transcendental op outside every comparison cone). Small models then never start the
    runtime (nor pay its compile).
    ``size_bound``: the iteration space's elements by the graph's shape inference, which
    stands in for the types where they leave a length unknown (`analysis.inferred_shapes`)."""
    if not parallel.enabled:
        return False
    dims = broadcast_lengths([v.type.shape for v in (*node.inputs, *node.outputs) if hasattr(v.type, "shape")])
    if dims is None:  # some axis's length the types leave unknown
        if size_bound is None:
            return True
        dims = [size_bound]
    if kernel_core(node) is None:  # a reduction alone: no transcendental
        heavy = 0
    else:
        try:
            # at most this many instructions of the transcendental class (`classify.natural_class`)
            heavy = sum(1 for instr in node_program(node).instrs if is_transcendental(instr.op))
        except Exception:  # noqa: BLE001 (no program: decide as if it could split)
            return True
    return math.prod(dims) >= max(1, parallel.min_elements // (1 + TRANSCENDENTAL_WEIGHT * heavy))


def chunk_decision(spec, planned, parallel, yields_to=()) -> tuple[bool, Chunking | None, str]:
    """``(chunked, chunking, why)`` for one kernel: whether its loop goes through a chunk
    function, the static part of the decision to run it on threads (None: never), and why.
    ``yields_to``: the other thread pools of the kernel's function (`pools`)."""
    axis = chunk_axis(spec)
    if axis is None:
        return False, None, "never split: every axis is reduced, of length 1 or short by its type, or a full reduction must keep its order"
    if planned.stock_keys:
        return False, None, "never split: the body calls a stock function"
    if parallel is None:
        return True, None, "never split: no policy"
    chunking = chunking_for(parallel, planned)
    if spec.static_size is not None and spec.static_size < chunking.min_elements:
        return False, None, f"never split: its static size {spec.static_size} is below {chunking.min_elements} elements"
    if spec.size_bound is not None and spec.size_bound < chunking.min_elements:
        # the chunk function stays (the code a call below the threshold runs today): the
        # same loop and the same bits as without the bound, and no thread runtime needed
        return True, None, (
            f"never split: {spec.size_bound} elements by the graph's shape inference, "
            f"below {chunking.min_elements}"
        )
    if not parallel.enabled:
        return True, None, "never split: threads = 1"
    if yields_to:
        return True, None, f"never split: {yield_reason(yields_to)}"
    blocked = any(r is not None and r.scalar_acc for r in (spec.reduces or ()))
    cap = "numba.get_num_threads()" if chunking.threads == 0 else f"at most {chunking.threads}"
    how = f"in shape-fixed blocks along axis {axis}" if blocked else f"along axis {axis}"
    return True, chunking, f"split {how} from {chunking.min_elements} elements, on {cap} threads"


def emit_chunked(context, builder, nest, input_values, arrays, outputs, iter_shape, chunking: Chunking | None):
    """Emit ``nest`` in a chunk function and the code that runs it, split or not.

    Every loop with a chunk axis goes through the chunk function, whatever the policy says about
    threads, so the ``threads`` setting (and the call-time decision) never changes a bit.
    ``chunking=None``: the chunk function is called on this thread only.

    Full reductions (``x.sum()``) are *blocked*: the chunk axis is cut into blocks whose
    size depends on the shape alone (``block_rows``), each block accumulates from the
    identity into its own partial, and the partials are combined in block order. Threads
    take whole blocks, so the result is the same for any thread count.
    """
    chunks = Chunks.of(context, nest, input_values, outputs, iter_shape)
    chunk = chunks.emit_function(builder.module, arrays)
    state, parts = chunks.fill_state(builder, input_values, outputs, iter_shape)
    state_p = builder.bitcast(state, I8P)
    n0 = iter_shape[chunks.axis]  # the chunk axis: "rows" below are its indices
    total = chunks.intp(1)
    for length in iter_shape:
        total = builder.mul(total, length)
    rows = nblocks = None
    if chunks.accs:
        rows = block_rows(builder, chunks.intp, n0, total)
        builder.store(rows, chunks.field(builder, state, chunks.CHUNK))
        nblocks = ceil_div(builder, n0, rows)
    if chunking is None:
        chunks.run_on_this_thread(builder, chunk, state_p, n0)
        chunks.combine_partials(builder, outputs, parts, nblocks)
        return
    with builder.if_else(chunks.below_threshold(builder, n0, total, chunking), likely=True) as (small, large):
        with small:  # the helper would decline without a side effect: not asked
            chunks.run_on_this_thread(builder, chunk, state_p, n0)
        with large:
            large_fn = chunks.emit_large_path(builder.module, chunk, chunking)
            args = [state_p, n0, total, rows if rows is not None else chunks.intp(0)]
            status, _ = context.call_conv.call_function(builder, large_fn, types.none, LARGE_ARGTYPES, args)
            with builder.if_then(status.is_error, likely=False):
                context.call_conv.return_status_propagate(builder, status)
    chunks.combine_partials(builder, outputs, parts, nblocks)


@dataclass(frozen=True)
class Chunks:
    """One kernel's chunk function and the state it reads: every input, every output (a
    partials array for a full reduction's accumulator), the iteration shape, the chunk
    length (``CHUNK``), an error flag (``ERR``)."""

    context: object
    nest: object  # the loop.LoopNest
    axis: int  # the chunk axis (``loop.chunk_axis``)
    accs: list[int]  # the outputs accumulated in a register (blocked full reductions)
    acc_types: dict
    part_tys: dict  # accumulator output -> the LLVM array of its blocks' partials
    state_ty: ir.LiteralStructType
    n_in: int
    n_out: int
    nd: int

    @classmethod
    def of(cls, context, nest, input_values, outputs, iter_shape):
        spec = nest.spec
        accs = [i for i in range(len(outputs)) if spec.reduce_of(i) is not None and spec.reduce_of(i).scalar_acc]
        acc_types = {i: nest.output_types[i] for i in accs}
        part_tys = {i: ir.ArrayType(context.get_value_type(acc_types[i]), MAX_BLOCKS) for i in accs}
        intp = context.get_value_type(types.intp)
        out_fields = [part_tys[i].as_pointer() if i in part_tys else o._getvalue().type for i, o in enumerate(outputs)]
        fields = [v.type for v in input_values] + out_fields + [intp] * len(iter_shape) + [intp, I32]
        state_ty = ir.LiteralStructType(fields)
        return cls(context, nest, chunk_axis(spec), accs, acc_types, part_tys, state_ty, len(input_values), len(outputs), len(iter_shape))

    @property
    def intp(self):
        return self.context.get_value_type(types.intp)

    @property
    def CHUNK(self) -> int:  # noqa: N802  (a field index, like ERR)
        return self.n_in + self.n_out + self.nd

    @property
    def ERR(self) -> int:  # noqa: N802
        return self.n_in + self.n_out + self.nd + 1

    @staticmethod
    def field(b, state, k):
        return b.gep(state, [I32(0), I32(k)])

    def emit_function(self, module, arrays):
        """``chunk(state, lo, hi)``: the loop nest, numba's calling convention (errors propagate)."""
        context, spec = self.context, self.nest.spec
        chunk = ir.Function(module, context.call_conv.get_function_type(types.none, CHUNK_ARGTYPES), f"ptnumba_chunk_{uuid.uuid4().hex}")
        # Not internal: LLVM then cannot specialize the chunk on its call sites (lo = 0 when
        # never split), so split and unsplit kernels run the very same machine code. The name
        # is unique: linkonce_odr definitions of one name are merged across modules.
        chunk.linkage = "linkonce_odr"
        chunk.attributes.add("noinline")
        context.call_conv.decorate_function(chunk, ["state", "lo", "hi"], CHUNK_ARGTYPES)
        cb = ir.IRBuilder(chunk.append_basic_block("entry"))
        raw_state, lo, hi = context.call_conv.get_arguments(chunk)
        st = cb.bitcast(raw_state, self.state_ty.as_pointer())
        n_in, n_out = self.n_in, self.n_out
        values = [cb.load(self.field(cb, st, k)) for k in range(n_in + n_out + self.nd)]
        in_vals, out_vals, shape = values[:n_in], values[n_in : n_in + n_out], values[n_in + n_out :]
        shape = static_lengths(context, cb, spec, shape)  # the chunk cannot see the kernel's constants
        c_arrays = {k: arrayobj.make_array(self.nest.input_types[k])(context, cb, in_vals[k]) for k in arrays}
        c_outputs = self._chunk_outputs(cb, out_vals, c_arrays)
        if not self.accs:
            self.nest.emit(cb, in_vals, c_arrays, c_outputs, shape, lo, hi, self.axis)
        else:
            self._emit_blocks(cb, st, in_vals, c_arrays, c_outputs, out_vals, shape, lo, hi)
        context.call_conv.return_value(cb, context.get_dummy_value())
        return chunk

    def _chunk_outputs(self, cb, out_vals, c_arrays) -> list:
        """The outputs as the chunk sees them: arrays, an alloca'd accumulator per block
        partial, and a destroyed input's struct for its output (one struct for both)."""
        c_outputs = []
        for i, (ty, v) in enumerate(zip(self.nest.output_types, out_vals, strict=True)):
            if i in self.part_tys:  # the accumulator of the block being run
                c_outputs.append(cgutils.alloca_once(cb, self.context.get_value_type(ty)))
            else:
                c_outputs.append(arrayobj.make_array(ty)(self.context, cb, v))
        for i, k in dict(self.nest.spec.inplace).items():
            c_outputs[i] = c_arrays[k]
        return c_outputs

    def _emit_blocks(self, cb, st, in_vals, c_arrays, c_outputs, out_vals, shape, lo, hi):
        """Every block of [lo, hi) from the identity, into its own partial."""
        spec = self.nest.spec
        rows = cb.load(self.field(cb, st, self.CHUNK))
        with cgutils.for_range(cb, ceil_div(cb, hi, rows), start=cb.sdiv(lo, rows)) as block:
            b_lo = cb.mul(block.index, rows)
            b_hi = smin(cb, cb.add(b_lo, rows), hi)
            for i in self.accs:
                cb.store(self.context.get_constant(self.acc_types[i], spec.reduce_of(i).identity), c_outputs[i])
            self.nest.emit(cb, in_vals, c_arrays, c_outputs, shape, b_lo, b_hi, self.axis)
            for i in self.accs:
                cb.store(cb.load(c_outputs[i]), cb.gep(out_vals[i], [I32(0), block.index]))

    def emit_large_path(self, module, chunk, chunking):
        """``large(state, n0, total, rows)``: the path above the threshold (ask the helper; run
        here, timed when asked, if it declined or a chunk raised), a ``noinline`` function of
        its own: the entry inlined into its caller (`entry`) is then the threshold test and
        the direct chunk call, small enough not to keep LLVM from inlining its caller."""
        context = self.context
        fn = ir.Function(module, context.call_conv.get_function_type(types.none, LARGE_ARGTYPES), f"ptnumba_large_{uuid.uuid4().hex}")
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        context.call_conv.decorate_function(fn, ["state", "n0", "total", "rows"], LARGE_ARGTYPES)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        state_p, n0, total, rows = context.call_conv.get_arguments(fn)
        state = b.bitcast(state_p, self.state_ty.as_pointer())
        outcome, stats_p = self.try_on_threads(b, chunk, state, state_p, n0, total, rows, chunking)
        with b.if_then(b.icmp_signed("!=", outcome, I32(CHUNKS_DONE))):
            self.run_timed_if_asked(b, outcome, stats_p, total, chunk, state_p, n0)
        context.call_conv.return_value(b, context.get_dummy_value())
        return fn

    def fill_state(self, builder, input_values, outputs, iter_shape):
        """The kernel's state struct, filled, and the partials arrays of the accumulators."""
        state = cgutils.alloca_once(builder, self.state_ty)
        parts = {i: cgutils.alloca_once(builder, self.part_tys[i]) for i in self.accs}
        out_state = [parts[i] if i in parts else o._getvalue() for i, o in enumerate(outputs)]
        for k, v in enumerate([*input_values, *out_state, *iter_shape]):
            builder.store(v, self.field(builder, state, k))
        builder.store(I32(0), self.field(builder, state, self.ERR))
        return state, parts

    def run_on_this_thread(self, builder, chunk, state_p, n0):
        """Every row (every block, in order) on this thread."""
        context = self.context
        status, _ = context.call_conv.call_function(builder, chunk, types.none, CHUNK_ARGTYPES, [state_p, self.intp(0), n0])
        with builder.if_then(status.is_error, likely=False):
            context.call_conv.return_status_propagate(builder, status)

    def combine_partials(self, builder, outputs, parts, nblocks):
        """The blocks' partials into each accumulator, in block order, with its flags; at
        most MAX_BLOCKS steps, so the loop stays rolled (unrolling or vectorizing it would
        only cost compile time)."""
        for i in self.accs:
            red, ty = self.nest.spec.reduce_of(i), self.acc_types[i]
            with _rolled_loop(builder, nblocks) as index, stamp(builder, red.flags):
                part = builder.load(builder.gep(parts[i], [I32(0), index]))
                # every float max/min accumulator in a register has its zero key (keyed)
                builder.store(combine(builder, red.op, ty, builder.load(outputs[i]), part, keyed=True), outputs[i])

    def below_threshold(self, builder, n0, total, chunking: Chunking):
        """The helper's first test, negated: fewer than ``min_elements`` elements (the same
        constant the call passes) or a chunk axis shorter than 2. The helper then returns
        NOT_CHUNKED before it reads or writes the gate, the kernel's statistics or its
        state, so running the chunk here without asking it (nor reading the cycle counter)
        is the same run: the same chunk on ``[0, n0)``, the same bits, the same decisions
        for later calls. A Scan step's small kernels save the call."""
        intp = self.intp
        few = builder.icmp_signed("<", total, intp(chunking.min_elements))
        return builder.or_(few, builder.icmp_signed("<", n0, intp(MIN_CHUNK_AXIS)))

    def try_on_threads(self, builder, chunk, state, state_p, n0, total, rows, chunking: Chunking):
        """The call asking the process-wide helper to run the chunks on numba's threads:
        ``(outcome, the kernel's statistics)``."""
        module, intp = builder.module, self.intp
        # the kernel's timing statistics (runtime.threads: measured, not guessed) live in a global
        stats = ir.GlobalVariable(module, STATS_TYPE, f"ptnumba_split_stats_{uuid.uuid4().hex}")
        stats.linkage = "internal"
        stats.initializer = ir.Constant(STATS_TYPE, None)
        stats_p = builder.gep(stats, [I32(0), I32(0)])
        try_chunks = cgutils.get_or_insert_function(module, TRY_CHUNKS_TYPE, TRY_CHUNKS)
        outcome = builder.call(
            try_chunks,
            [
                builder.bitcast(chunk, I8P),
                state_p,
                n0,
                total,
                intp(chunking.min_elements),
                intp(chunking.threads),
                rows if self.accs else intp(0),
                intp(CHUNK_ALIGN if self.axis == self.nd - 1 else 1),  # the innermost axis: whole cache lines
                self.field(builder, state, self.CHUNK),
                self.field(builder, state, self.ERR),
                stats_p,
            ],
        )
        if self.nest.spec.inplace:
            self._raise_if_a_worker_raised(builder, outcome)

        return outcome, stats_p

    def run_timed_if_asked(self, builder, outcome, stats_p, total, chunk, state_p, n0):
        """`run_on_this_thread`, timed and recorded when the helper asked for a one-thread measurement."""
        start = read_cycles(builder)
        self.run_on_this_thread(builder, chunk, state_p, n0)
        with builder.if_then(builder.icmp_signed("==", outcome, I32(MEASURE_ONE_THREAD))):
            record = cgutils.get_or_insert_function(builder.module, RECORD_TYPE, RECORD)
            builder.call(record, [stats_p, builder.sub(read_cycles(builder), start), total])

    def _raise_if_a_worker_raised(self, builder, outcome):
        """An inplace loop cannot be rerun (its inputs are overwritten): say so instead."""
        with builder.if_then(builder.icmp_signed("==", outcome, I32(CHUNK_RAISED)), likely=False):
            self.context.call_conv.return_user_exc(
                builder,
                RuntimeError,
                (
                    (
                        "ptnumba_codegen: an inplace loop raised in a worker thread; "
                        "set [parallel] threads = 1 in the policy to see the exception"
                    ),
                ),
            )


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
    """Indices of the chunk axis per reduction block: about BLOCK_ELEMENTS elements, at
    most MAX_BLOCKS blocks. A function of the shape alone, never of the thread count."""
    safe_n0 = builder.select(builder.icmp_signed(">", n0, intp(0)), n0, intp(1))
    inner = builder.sdiv(total, safe_n0)
    inner = builder.select(builder.icmp_signed(">", inner, intp(0)), inner, intp(1))
    rows = ceil_div(builder, intp(BLOCK_ELEMENTS), inner)
    least = ceil_div(builder, safe_n0, intp(MAX_BLOCKS))
    return builder.select(builder.icmp_signed(">", rows, least), rows, least)


__all__ = ["Chunking", "chunk_decision", "chunking_for", "emit_chunked"]
