"""Split a large loop nest across numba's threading layer.

Memory-bound kernels (``maximum(x, y) * z``, ``x * y + z``) are limited by what one core
can stream; a second core roughly doubles that. The loop nest is emitted once, in a
*chunk function* ``chunk(state, lo, hi)`` that runs the nest with the outermost axis
restricted to ``[lo, hi)``. The kernel either calls it once on ``[0, n0)`` or hands
``numba_parallel_for`` (numba's own scheduler, whatever layer numba picked: tbb, omp or
workqueue) a gufunc-ABI trampoline that maps chunk numbers to ``[lo, hi)`` ranges.

Results never depend on the split: only loops whose outermost axis is not reduced are
split (``loop.splittable``), so every element and every accumulator is computed by one
thread in the sequential order, and libmvec calls give the same bits in a vector body or
a remainder (``vector_math``). The chunk boundaries of 1-d loops are multiples of 64
elements, so threads never write the same cache line.

When the loop runs split (all at call time): at least ``min_elements`` elements, an
outermost axis of at least 2, more than one thread (``numba.get_num_threads()``, capped
by the policy's ``threads``), the process gate open, and no other split loop running in
this process (a try-lock: a second concurrent caller runs its loop on its own thread, so
numba's workqueue layer, which is not thread-safe, never sees two launches).

The gate closes in a child made by ``fork()``: GNU OpenMP cannot run in a forked child,
and forked workers (PyMC's chains) already use the cores. ``set_parallel_enabled``
reopens or closes it. A chunk that raises is rerun on the calling thread so the
exception is raised with its message; for an inplace loop (inputs already overwritten)
a RuntimeError says so instead.
"""

from __future__ import annotations

import ctypes
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from llvmlite import binding as llvm
from llvmlite import ir
from numba.core import cgutils, types
from numba.np import arrayobj

from ptnumba_codegen.flags import TRANSCENDENTAL
from ptnumba_codegen.lowering.loop import combine
from ptnumba_codegen.lowering.stamp import stamp

GATE_SYMBOL = "ptnumba_codegen_parallel_gate"
_GATE = (ctypes.c_int32 * 2)(1, 0)  # [enabled, busy]
llvm.add_symbol(GATE_SYMBOL, ctypes.addressof(_GATE))

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


def set_parallel_enabled(enabled: bool) -> None:
    """Allow (or forbid) split loops in this process; forked children start forbidden."""
    _GATE[0] = 1 if enabled else 0


def parallel_enabled() -> bool:
    return bool(_GATE[0])


def _close_gate_in_child():
    _GATE[0] = 0
    _GATE[1] = 0


os.register_at_fork(after_in_child=_close_gate_in_child)

_THREADING = None


def ensure_threading() -> bool:
    """Load numba's threading layer (registers ``numba_parallel_for``); False if none loads."""
    global _THREADING
    if _THREADING is None:
        try:
            from numba.np.ufunc.parallel import _launch_threads

            _launch_threads()
            _THREADING = True
        except Exception:  # no usable threading layer: loops stay on the calling thread
            _THREADING = False
    return _THREADING


def _declare(module, name, fnty):
    return cgutils.get_or_insert_function(module, fnty, name)


def _gate(module):
    gv = module.globals.get(GATE_SYMBOL)
    if gv is None:
        gv = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(32), 2), GATE_SYMBOL)
    return gv


def emit_chunked(context, builder, nest, input_values, arrays, outputs, iter_shape, split: Split | None):
    """Emit ``nest`` in a chunk function and the code that runs it, split or not.

    Every splittable loop goes through the chunk function, whatever the policy says about
    threads, so the ``threads`` setting (and the call-time decision) never changes a bit.
    ``split=None``: the chunk function is called on this thread only.

    Full reductions (``x.sum()``) are *blocked*: the outermost axis is cut into blocks whose
    size depends on the shape alone (``block_rows``), each block accumulates from the
    identity into its own partial, and the partials are combined in block order. Threads
    take whole blocks, so the result is the same for any thread count.
    """
    module = builder.module
    spec = nest.spec
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
    c_arrays = {k: arrayobj.make_array(nest.input_types[k])(context, cb, in_vals[k]) for k in arrays}
    c_outputs = []
    for i, (ty, v) in enumerate(zip(nest.output_types, out_vals, strict=True)):
        if i in part_tys:  # this block's accumulator, from the identity
            local = cgutils.alloca_once(cb, context.get_value_type(ty))
            cb.store(context.get_constant(ty, spec.reduce_of(i).identity), local)
            c_outputs.append(local)
        else:
            c_outputs.append(arrayobj.make_array(ty)(context, cb, v))
    inplace = dict(spec.inplace)
    for i, k in inplace.items():  # a destroyed input is its output: one struct for both
        c_outputs[i] = c_arrays[k]
    nest.emit(cb, in_vals, c_arrays, c_outputs, shape, lo, hi)
    if accs:
        block = cb.sdiv(lo, cb.load(field(cb, st, CHUNK)))
        for i in accs:
            cb.store(cb.load(c_outputs[i]), cb.gep(out_vals[i], [i32(0), block]))
    context.call_conv.return_value(cb, context.get_dummy_value())

    # -- the kernel: fill the state
    state = cgutils.alloca_once(builder, state_ty)
    parts = {i: cgutils.alloca_once(builder, part_tys[i]) for i in accs}
    out_state = [parts[i] if i in parts else o._getvalue() for i, o in enumerate(outputs)]
    for k, v in enumerate([*input_values, *out_state, *iter_shape]):
        builder.store(v, field(builder, state, k))
    builder.store(i32(0), field(builder, state, ERR))
    state_p = builder.bitcast(state, i8p)
    n0 = iter_shape[0]
    total = intp(1)
    for length in iter_shape:
        total = builder.mul(total, length)
    if accs:
        rows = block_rows(builder, intp, n0, total)
        builder.store(rows, field(builder, state, CHUNK))
        nblocks = _ceil_div(builder, n0, rows)

    def run_on_this_thread():
        def call(c_lo, c_hi):
            status, _ = context.call_conv.call_function(builder, chunk, types.none, argtys, [state_p, c_lo, c_hi])
            with builder.if_then(status.is_error, likely=False):
                context.call_conv.return_status_propagate(builder, status)

        if not accs:
            call(intp(0), n0)
            return
        with cgutils.for_range(builder, nblocks) as loop:
            c_lo = builder.mul(loop.index, rows)
            c_hi = builder.add(c_lo, rows)
            call(c_lo, builder.select(builder.icmp_signed("<", c_hi, n0), c_hi, n0))

    def combine_partials():
        # In block order, with the accumulator's flags; at most MAX_BLOCKS steps, so the
        # loop stays rolled (unrolling or vectorizing it would only cost compile time).
        for i in accs:
            red, ty = spec.reduce_of(i), acc_types[i]
            with _rolled_loop(builder, nblocks) as index, stamp(builder, red.flags):
                part = builder.load(builder.gep(parts[i], [i32(0), index]))
                builder.store(combine(builder, red.op, ty, builder.load(outputs[i]), part), outputs[i])

    if split is None:
        run_on_this_thread()
        combine_partials()
        return

    # -- trampoline(args, dims, steps, data): the gufunc ABI numba_parallel_for calls
    tramp_ty = ir.FunctionType(ir.VoidType(), [i8p.as_pointer(), intp.as_pointer(), intp.as_pointer(), i8p])
    tramp = ir.Function(module, tramp_ty, module.get_unique_name("ptnumba_split"))
    tramp.linkage = "internal"
    tb = ir.IRBuilder(tramp.append_basic_block("entry"))
    t_args, t_dims, _t_steps, t_data = tramp.args
    first = tb.ptrtoint(tb.load(t_args), intp)  # args[0] = NULL + chunk number * step 1
    count = tb.load(t_dims)
    tst = tb.bitcast(t_data, state_ty.as_pointer())
    clen = tb.load(field(tb, tst, CHUNK))
    t_n0 = tb.load(field(tb, tst, n_in + n_out))
    with cgutils.for_range(tb, count) as loop:
        c_lo = tb.mul(tb.add(first, loop.index), clen)
        c_hi = tb.add(c_lo, clen)
        c_hi = tb.select(tb.icmp_signed("<", c_hi, t_n0), c_hi, t_n0)
        status, _ = context.call_conv.call_function(tb, chunk, types.none, argtys, [t_data, c_lo, c_hi])
        with tb.if_then(status.is_error, likely=False):
            tb.store_atomic(i32(1), field(tb, tst, ERR), "monotonic", 4)
    tb.ret_void()

    # -- the decision
    get_num_threads = _declare(module, "get_num_threads", ir.FunctionType(intp, []))
    gate = _gate(module)
    enabled_p = builder.gep(gate, [i32(0), i32(0)])
    busy_p = builder.gep(gate, [i32(0), i32(1)])
    did_split = cgutils.alloca_once_value(builder, ir.Constant(ir.IntType(1), 0))

    big = builder.and_(
        builder.icmp_signed(">=", total, intp(split.min_elements)),
        builder.icmp_signed(">=", nblocks if accs else n0, intp(2)),
    )
    with builder.if_then(big, likely=False):
        nthreads = builder.call(get_num_threads, [])
        if split.threads > 0:
            cap = intp(split.threads)
            nthreads = builder.select(builder.icmp_signed("<", nthreads, cap), nthreads, cap)
        open_ = builder.icmp_signed("!=", builder.load_atomic(enabled_p, "monotonic", 4), i32(0))
        with builder.if_then(builder.and_(open_, builder.icmp_signed(">", nthreads, intp(1)))):
            got = builder.extract_value(builder.cmpxchg(busy_p, i32(0), i32(1), "acquire", "monotonic"), 1)
            with builder.if_then(got):
                if accs:  # whole blocks (the chunk length is already the block length)
                    nchunks = nblocks
                else:
                    clen = _ceil_div(builder, n0, nthreads)
                    if nd == 1:  # whole cache lines per thread
                        a = intp(CHUNK_ALIGN)
                        clen = builder.mul(_ceil_div(builder, clen, a), a)
                    nchunks = _ceil_div(builder, n0, clen)
                    builder.store(clen, field(builder, state, CHUNK))
                _launch(context, builder, tramp, state_p, nchunks, nthreads)
                builder.store_atomic(i32(0), busy_p, "release", 4)
                builder.store(ir.Constant(ir.IntType(1), 1), did_split)

    failed = builder.icmp_signed("!=", builder.load(field(builder, state, ERR)), i32(0))
    did = builder.load(did_split)
    if inplace:
        with builder.if_then(builder.and_(did, failed), likely=False):
            context.call_conv.return_user_exc(
                builder,
                RuntimeError,
                ("ptnumba_codegen: an inplace loop raised in a worker thread; "
                 "set [parallel] threads = 1 in the policy to see the exception",),
            )
    with builder.if_then(builder.or_(builder.not_(did), failed)):
        run_on_this_thread()
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


def _ceil_div(builder, a, b):
    return builder.sdiv(builder.sub(builder.add(a, b), b.type(1)), b)


def block_rows(builder, intp, n0, total):
    """Rows of the outermost axis per reduction block: about BLOCK_ELEMENTS elements, at
    most MAX_BLOCKS blocks. A function of the shape alone, never of the thread count."""
    safe_n0 = builder.select(builder.icmp_signed(">", n0, intp(0)), n0, intp(1))
    inner = builder.sdiv(total, safe_n0)
    inner = builder.select(builder.icmp_signed(">", inner, intp(0)), inner, intp(1))
    rows = _ceil_div(builder, intp(BLOCK_ELEMENTS), inner)
    least = _ceil_div(builder, safe_n0, intp(MAX_BLOCKS))
    return builder.select(builder.icmp_signed(">", rows, least), rows, least)


def _launch(context, builder, tramp, state_p, nchunks, nthreads):
    """``numba_parallel_for``: chunk numbers 0..nchunks-1 arrive as args[0] (NULL, step 1)."""
    intp = context.get_value_type(types.intp)
    i8p = ir.IntType(8).as_pointer()
    parallel_for = _declare(
        builder.module, "numba_parallel_for", ir.FunctionType(ir.VoidType(), [i8p] * 5 + [intp] * 3)
    )
    args = cgutils.alloca_once_value(builder, ir.Constant(i8p, None))
    dims = cgutils.alloca_once_value(builder, nchunks)
    steps = cgutils.alloca_once_value(builder, intp(1))
    builder.call(
        parallel_for,
        [
            builder.bitcast(tramp, i8p),
            builder.bitcast(args, i8p),
            builder.bitcast(dims, i8p),
            builder.bitcast(steps, i8p),
            state_p,
            intp(0),  # inner_ndim: dims holds the outer count only
            intp(1),  # array_count: args[0] alone is offset per chunk
            nthreads,
        ],
    )


__all__ = ["Split", "emit_chunked", "split_for", "ensure_threading", "parallel_enabled", "set_parallel_enabled"]
