"""The process-wide half of split loops: the gate, numba's threading layer, and one
compiled helper every kernel calls.

``ptnumba_codegen_try_split(chunk, state, n0, total, min_elements, cap, rows, align,
clen_slot, err_slot)`` decides at call time whether a loop runs split and, if so, runs it:

- no: fewer than ``min_elements`` elements, a split axis or block count below 2, one
  thread (``numba.get_num_threads()``, capped by ``cap`` when > 0), the gate closed, or
  another split loop running in this process (a try-lock, so numba's workqueue layer,
  which is not thread-safe, never sees two launches);
- yes: chunks of ``rows`` rows (blocked reductions) or about ``n0 / threads`` rows
  rounded up to ``align``, handed to ``numba_parallel_for`` through a gufunc-ABI
  trampoline that calls ``chunk(state, lo, hi)`` (numba's calling convention).

It returns 0 (not split: the kernel runs the chunk on its own thread), 1 (done) or 2 (a
chunk raised; the kernel reruns on its own thread to raise the exception). Compiling this
once per process, instead of a trampoline and a decision in every kernel, keeps the
kernels' compile time down.

The gate closes in a child made by ``fork()``: GNU OpenMP cannot run in a forked child,
and forked workers (PyMC's chains) already use the cores. ``set_parallel_enabled`` opens
or closes it by hand.
"""

from __future__ import annotations

import ctypes
import logging
import os

from llvmlite import binding as llvm
from llvmlite import ir

GATE_SYMBOL = "ptnumba_codegen_parallel_gate"
TRY_SPLIT = "ptnumba_codegen_try_split"
_GATE = (ctypes.c_int32 * 2)(1, 0)  # [enabled, busy]
llvm.add_symbol(GATE_SYMBOL, ctypes.addressof(_GATE))

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
# try_split(chunk, state, n0, total, min_elements, cap, rows, align, clen_slot, err_slot)
TRY_SPLIT_TYPE = ir.FunctionType(I32, [I8P, I8P, I64, I64, I64, I64, I64, I64, I64.as_pointer(), I32.as_pointer()])


def set_parallel_enabled(enabled: bool) -> None:
    """Allow (or forbid) split loops in this process; forked children start forbidden."""
    _GATE[0] = 1 if enabled else 0


def parallel_enabled() -> bool:
    return bool(_GATE[0])


def _close_gate_in_child():
    _GATE[0] = 0
    _GATE[1] = 0


os.register_at_fork(after_in_child=_close_gate_in_child)

_STATE: dict = {}


def ensure_threading() -> bool:
    """Load numba's threading layer and compile the helper once; False if either fails
    (loops then stay on the calling thread)."""
    if "ok" not in _STATE:
        try:
            from numba.np.ufunc.parallel import _launch_threads

            _launch_threads()  # registers numba_parallel_for and get_num_threads
            _STATE["library"] = _compile_runtime()
            llvm.add_symbol(TRY_SPLIT, _STATE["library"].get_pointer_to_function(TRY_SPLIT))
            _STATE["ok"] = True
        except Exception as err:  # no usable threading layer: say so once, stay correct
            logging.getLogger("ptnumba_codegen").warning(
                "loops will not be split across threads: %s: %s", type(err).__name__, err
            )
            _STATE["ok"] = False
    return _STATE["ok"]


def ceil_div(b, x, y):
    """``ceil(x / y)`` for non-negative ``x`` and positive ``y`` (signed integers)."""
    return b.sdiv(b.sub(b.add(x, y), y.type(1)), y)


def smin(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def _compile_runtime():
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        return _build_runtime()


def _build_runtime():
    from numba.core.registry import cpu_target

    library = cpu_target.target_context.codegen().create_library("ptnumba_codegen_split_runtime")
    mod = library.create_ir_module("ptnumba_codegen_split_runtime")
    gate = ir.GlobalVariable(mod, ir.ArrayType(I32, 2), GATE_SYMBOL)
    get_num_threads = ir.Function(mod, ir.FunctionType(I64, []), "get_num_threads")
    parallel_for = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I8P] * 5 + [I64] * 3), "numba_parallel_for")
    job_ty = ir.LiteralStructType([I8P, I8P, I64, I64, I32.as_pointer()])  # chunk, state, clen, n0, err
    chunk_ty = ir.FunctionType(I32, [I8P, I8P.as_pointer(), I8P, I64, I64]).as_pointer()

    # -- trampoline(args, dims, steps, job): chunk numbers arrive as args[0] (NULL, step 1)
    tramp = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I8P.as_pointer(), I64.as_pointer(), I64.as_pointer(), I8P]), "ptnumba_codegen_split_trampoline")
    tramp.linkage = "internal"
    b = ir.IRBuilder(tramp.append_basic_block("entry"))
    args, dims, _steps, data = tramp.args
    job = b.bitcast(data, job_ty.as_pointer())
    fields = [b.load(b.gep(job, [I32(0), I32(k)])) for k in range(5)]
    chunk, state, clen, n0, err = fields
    chunk = b.bitcast(chunk, chunk_ty)
    first = b.ptrtoint(b.load(args), I64)
    count = b.load(dims)
    retslot = b.alloca(I64)
    excslot = b.alloca(I8P)
    loop_bb, body_bb, done_bb = (tramp.append_basic_block(n) for n in ("loop", "body", "done"))
    entry_bb = b.basic_block
    b.branch(loop_bb)
    b.position_at_end(loop_bb)
    c = b.phi(I64)
    c.add_incoming(I64(0), entry_bb)
    b.cbranch(b.icmp_signed("<", c, count), body_bb, done_bb)
    b.position_at_end(body_bb)
    lo = b.mul(b.add(first, c), clen)
    hi = smin(b, b.add(lo, clen), n0)
    status = b.call(chunk, [b.bitcast(retslot, I8P), excslot, state, lo, hi])
    ok = b.or_(b.icmp_signed("==", status, I32(0)), b.icmp_signed("==", status, I32(-2)))  # OK, NONE
    with b.if_then(b.not_(ok), likely=False):
        b.store_atomic(I32(1), err, "monotonic", 4)
    c.add_incoming(b.add(c, I64(1)), b.basic_block)
    b.branch(loop_bb)
    b.position_at_end(done_bb)
    b.ret_void()

    # -- try_split
    fn = ir.Function(mod, TRY_SPLIT_TYPE, TRY_SPLIT)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    chunk, state, n0, total, min_elements, cap, rows, align, clen_slot, err_slot = fn.args
    no = fn.append_basic_block("no")
    with b.goto_block(no):
        b.ret(I32(0))

    def require(cond):
        yes = fn.append_basic_block("yes")
        b.cbranch(cond, yes, no)
        b.position_at_end(yes)

    require(b.and_(b.icmp_signed(">=", total, min_elements), b.icmp_signed(">=", n0, I64(2))))
    nthreads = b.call(get_num_threads, [])
    nthreads = b.select(b.icmp_signed(">", cap, I64(0)), smin(b, nthreads, cap), nthreads)
    require(b.icmp_signed(">=", nthreads, I64(2)))
    even = ceil_div(b, n0, nthreads)
    even = b.mul(ceil_div(b, even, align), align)
    clen = b.select(b.icmp_signed(">", rows, I64(0)), rows, even)
    nchunks = ceil_div(b, n0, clen)
    require(b.icmp_signed(">=", nchunks, I64(2)))
    enabled = b.load_atomic(b.gep(gate, [I32(0), I32(0)]), "monotonic", 4)
    require(b.icmp_signed("!=", enabled, I32(0)))
    busy = b.gep(gate, [I32(0), I32(1)])
    require(b.extract_value(b.cmpxchg(busy, I32(0), I32(1), "acquire", "monotonic"), 1))
    b.store(clen, clen_slot)
    b.store(I32(0), err_slot)
    job = b.alloca(job_ty)
    for k, v in enumerate((chunk, state, clen, n0, err_slot)):
        b.store(v, b.gep(job, [I32(0), I32(k)]))
    a_args = b.alloca(I8P)
    b.store(ir.Constant(I8P, None), a_args)
    a_dims = b.alloca(I64)
    b.store(nchunks, a_dims)
    a_steps = b.alloca(I64)
    b.store(I64(1), a_steps)
    b.call(
        parallel_for,
        [b.bitcast(tramp, I8P), b.bitcast(a_args, I8P), b.bitcast(a_dims, I8P), b.bitcast(a_steps, I8P),
         b.bitcast(job, I8P), I64(0), I64(1), nthreads],
    )
    b.store_atomic(I32(0), busy, "release", 4)
    failed = b.icmp_signed("!=", b.load_atomic(err_slot, "monotonic", 4), I32(0))
    b.ret(b.select(failed, I32(2), I32(1)))

    library.add_ir_module(mod)
    library.finalize()
    return library


__all__ = ["TRY_SPLIT", "TRY_SPLIT_TYPE", "ceil_div", "ensure_threading", "parallel_enabled", "set_parallel_enabled", "smin"]
