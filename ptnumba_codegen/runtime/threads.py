"""The process-wide half of split loops: the gate, numba's threading layer, and one
compiled helper every kernel calls.

``ptnumba_codegen_try_split(chunk, state, n0, total, min_elements, cap, rows, align,
clen_slot, err_slot, stats)`` decides at call time whether a loop runs split and, if so,
runs it:

- no (returns 0): fewer than ``min_elements`` elements or a split axis below 2 (tested
  first: nothing but the ``chunk_requests`` count is touched before; kernels test it
  themselves and do not call the helper then), a block count below 2, one thread
  (``numba.get_num_threads()``, capped by ``cap`` when > 0), the gate closed, or another split loop running in this process (a try-lock, so numba's workqueue
  layer, which is not thread-safe, never sees two launches);
- not now (returns 3): the loop could split, but the kernel's own measurements say one
  thread is faster here (see below); the kernel runs the chunk, times it and reports
  the time with ``ptnumba_codegen_split_record(stats, cycles, total)``;
- yes (returns 1, or 2 if a chunk raised: the kernel then reruns on its own thread to
  raise the exception): chunks of ``rows`` rows (blocked reductions) or about
  ``n0 / threads`` rows rounded up to ``align``, handed to ``numba_parallel_for`` through a
  gufunc-ABI trampoline that calls ``chunk(state, lo, hi)`` (numba's calling convention).

*Measured, not guessed.* Whether splitting pays depends on what else runs on the cores:
another sampler chain calling the same logp, a BLAS or XLA pool still spinning after its
call, a virtual machine's slow wake-ups. Each kernel keeps ``stats`` (a static
``[4 x i64]``: cycles per element split and on one thread, as moving averages, and a
call count). Its first eligible call runs on one thread, the second split; after that
it splits only when splitting measured at least ``CHUNKS_MARGIN`` faster, and every
``EXPLORE_EVERY``-th call runs the other way once to refresh that estimate. A result never
depends on the choice (split and unsplit loops run the same machine code per element and
per block), only the time does.

Compiling this once per process, instead of a trampoline and a decision in every kernel,
keeps the kernels' compile time down.

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

from ptnumba_codegen._version import GENERATOR_DIGEST, GENERATOR_VERSION
from ptnumba_codegen.runtime import runtime_cache
from ptnumba_codegen.runtime.shared_blas import PENDING_SYMBOL, share_blas_pool, sharing_wanted, unshare_in_child

GATE_SYMBOL = "ptnumba_codegen_parallel_gate"
# The LLVM symbols keep their first names (every chunked kernel's IR calls them, and
# tests and users grep the final IR for them); the Python names say chunks.
TRY_CHUNKS = "ptnumba_codegen_try_split"
RECORD = "ptnumba_codegen_split_record"
# Split only when splitting measured at least this much faster (cycles per element).
CHUNKS_MARGIN = 0.9
# Every EXPLORE_EVERY-th eligible call runs the way not preferred, to refresh its estimate.
EXPLORE_EVERY = 256
# Weight of a new sample in the moving averages.
EMA_WEIGHT = 0.25
# TRY_CHUNKS outcomes
NOT_CHUNKED, CHUNKS_DONE, CHUNK_RAISED, MEASURE_ONE_THREAD = 0, 1, 2, 3
# A chunk axis shorter than this never splits (and a loop below its threshold never asks).
MIN_CHUNK_AXIS = 2
# [enabled, busy, split launches so far, BLAS lock, requests so far (calls of TRY_CHUNKS)]
_GATE = (ctypes.c_int32 * 5)(1, 0, 0, 0, 0)
llvm.add_symbol(GATE_SYMBOL, ctypes.addressof(_GATE))

I8P = ir.IntType(8).as_pointer()
I32 = ir.IntType(32)
I64 = ir.IntType(64)
DBL = ir.DoubleType()
STATS_TYPE = ir.ArrayType(I64, 4)  # [split cycles/element (double bits), one-thread ditto, calls, -]
# try_split(chunk, state, n0, total, min_elements, cap, rows, align, clen_slot, err_slot, stats)
TRY_CHUNKS_TYPE = ir.FunctionType(
    I32, [I8P, I8P, I64, I64, I64, I64, I64, I64, I64.as_pointer(), I32.as_pointer(), I64.as_pointer()]
)
# record(stats, cycles, total): one one-thread run of the kernel took ``cycles``
RECORD_TYPE = ir.FunctionType(ir.VoidType(), [I64.as_pointer(), I64, I64])


def set_parallel_enabled(enabled: bool) -> None:
    """Allow (or forbid) split loops in this process; forked children start forbidden."""
    _GATE[0] = 1 if enabled else 0


def parallel_enabled() -> bool:
    return bool(_GATE[0])


def chunk_launches() -> int:
    """How many loops this process has run split so far (for tests and diagnostics)."""
    return _GATE[2]


def chunk_requests() -> int:
    """How many times kernels of this process have asked the helper whether to split (a
    loop below its kernel's threshold does not ask; for tests and diagnostics)."""
    return _GATE[4]


def _close_gate_in_child():
    _GATE[0] = 0
    _GATE[1] = 0
    _GATE[3] = 0  # a BLAS call another thread of the parent was making is not the child's
    unshare_in_child()  # OpenBLAS re-creates its own pool after a fork; GNU OpenMP cannot


os.register_at_fork(after_in_child=_close_gate_in_child)

_STATE: dict = {}

# GNU OpenMP's idle workers spin GOMP_SPINCOUNT PAUSE loops after every parallel region
# before they sleep: 300,000 by default, milliseconds of a core (PAUSE takes ~140 cycles on
# Skylake), long enough to take a core from the BLAS call, the other sampler chain or the
# JAX function that runs next. Unless the user chose (OMP_WAIT_POLICY or GOMP_SPINCOUNT
# set), numba's OpenMP pool is started spinning OMP_SPIN_COUNT loops (well under a
# millisecond): enough to catch the next kernel of the same logp call. libgomp reads the
# variable once, when it is loaded; if something loaded it before numba's pool, its setting
# stays.
OMP_SPIN_COUNT = "10000"


def _libgomp_loaded() -> bool:
    try:
        with open("/proc/self/maps") as maps:
            return any("libgomp" in line for line in maps)
    except OSError:
        return False


def _quiet_omp_spin() -> None:
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ or _libgomp_loaded():
        return
    os.environ["GOMP_SPINCOUNT"] = OMP_SPIN_COUNT


def ensure_threading() -> bool:
    """Load numba's threading layer and compile the helper once; False if either fails
    (loops then stay on the calling thread)."""
    if "ok" not in _STATE:
        blas_shared = sharing_wanted()  # read before the try: a typo in its switch raises
        try:
            from numba.np.ufunc.parallel import _launch_threads

            import numba

            _quiet_omp_spin()
            _launch_threads()  # registers numba_parallel_for and get_num_threads
            # the BLAS callback needs GNU OpenMP (see _build_blas_callback)
            with_blas = numba.threading_layer() == "omp" and _omp_symbols()
            _STATE["library"] = _compile_runtime(with_blas)
            for symbol in (TRY_CHUNKS, RECORD):
                llvm.add_symbol(symbol, _STATE["library"].get_pointer_to_function(symbol))
            _STATE["ok"] = True
            if with_blas and blas_shared:
                share_blas_pool(_STATE["library"].get_pointer_to_function(BLAS_CALLBACK))
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


def read_cycles(b):
    """The CPU's cycle counter (``rdtsc`` on x86)."""
    fn = b.module.globals.get("llvm.readcyclecounter")
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(I64, []), "llvm.readcyclecounter")
    return b.call(fn, [])


def _stat(b, stats, k):
    return b.gep(stats, [I32(k)])


def _load_average(b, stats, k):
    return b.bitcast(b.load_atomic(_stat(b, stats, k), "monotonic", 8), DBL)


def _update_average(b, stats, k, cycles, total):
    """stats[k] = moving average of cycles per element (the first sample taken as is)."""
    sample = b.fdiv(b.uitofp(cycles, DBL), b.sitofp(b.select(b.icmp_signed(">", total, I64(0)), total, I64(1)), DBL))
    old = _load_average(b, stats, k)
    blended = b.fadd(old, b.fmul(b.fsub(sample, old), DBL(EMA_WEIGHT)))
    new = b.select(b.fcmp_ordered("==", old, DBL(0.0)), sample, blended)
    b.store_atomic(b.bitcast(new, I64), _stat(b, stats, k), "monotonic", 8)


# OpenBLAS's caller-managed threading (openblas_set_threads_callback_function, OpenBLAS >=
# 0.3.28): callback(sync, dojob, numjobs, jobdata_elsize, jobdata, dojob_data) must run
# dojob(i, jobdata + i * elsize, dojob_data) for every i < numjobs, then return.
BLAS_CALLBACK = "ptnumba_codegen_blas_callback"
OMP_IN_PARALLEL = "ptnumba_codegen_omp_in_parallel"  # libgomp's omp_in_parallel (see _omp_symbols)


def _omp_symbols() -> bool:
    """Make libgomp's ``omp_in_parallel`` callable from the runtime (numba loads libgomp
    privately, out of the JIT's reach). False if libgomp is not loaded."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libgomp" in line and "/" in line}
    except OSError:
        return False
    for path in sorted(paths):
        try:
            fn = ctypes.CDLL(path).omp_in_parallel
        except (OSError, AttributeError):
            continue
        llvm.add_symbol(OMP_IN_PARALLEL, ctypes.cast(fn, ctypes.c_void_p).value)
        return True
    return False
DOJOB_TYPE = ir.FunctionType(ir.VoidType(), [I32, I8P, I32])
BLAS_CALLBACK_TYPE = ir.FunctionType(ir.VoidType(), [I32, DOJOB_TYPE.as_pointer(), I32, I64, I8P, I32])


def _build_blas_callback(mod, parallel_for):
    """``ptnumba_codegen_blas_callback``: OpenBLAS's parallel jobs on numba's threads.

    The jobs of one call must run *concurrently*: level-3 jobs (gemm) wait for each other's
    packed panels, so running them one after the other would never return. GNU OpenMP
    gives a parallel region as many threads as asked, from any calling thread, so each call
    is one region of ``numjobs`` threads (`shared_blas` only installs this over numba's
    ``omp`` layer). One BLAS call at a time runs its jobs (a spin lock, ``gate[3]``):
    OpenBLAS gives job i the per-thread buffer i, so two calls must not overlap. OpenBLAS
    partitions the work before the callback sees it, so the bits never depend on where the
    jobs ran.
    """
    from numba.core import cgutils

    job_ty = ir.LiteralStructType([DOJOB_TYPE.as_pointer(), I8P, I64, I32])  # dojob, jobdata, elsize, dojob_data
    sched_yield = ir.Function(mod, ir.FunctionType(I32, []), "sched_yield")
    omp_in_parallel = ir.Function(mod, ir.FunctionType(I32, []), OMP_IN_PARALLEL)
    gate = mod.globals[GATE_SYMBOL]

    def run_jobs(b, job, first, count):
        dojob, data, elsize, extra = (b.load(b.gep(job, [I32(0), I32(k)])) for k in range(4))
        with cgutils.for_range(b, count) as loop:
            index = b.add(first, loop.index)
            b.call(dojob, [b.trunc(index, I32), b.gep(data, [b.mul(index, elsize)]), extra])

    tramp = _build_blas_trampoline(mod, job_ty, run_jobs)

    fn = ir.Function(mod, BLAS_CALLBACK_TYPE, BLAS_CALLBACK)
    _sync, dojob, numjobs, elsize, jobdata, extra = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    job = b.alloca(job_ty)
    for k, v in enumerate((dojob, jobdata, elsize, extra)):
        b.store(v, b.gep(job, [I32(0), I32(k)]))
    n = b.sext(numjobs, I64)
    blas_lock = b.gep(gate, [I32(0), I32(3)])
    _spin_lock(fn, b, blas_lock, sched_yield)  # the BLAS lock, held for the call
    in_region = b.icmp_signed("!=", b.call(omp_in_parallel, []), I32(0))
    several = b.icmp_signed(">=", n, I64(2))
    with b.if_then(b.and_(several, in_region), likely=False):
        # inside a parallel region (a numba prange calling np.dot): a nested region would
        # get one thread, so start the jobs' threads here
        _run_jobs_on_new_threads(mod, b, job, job_ty, n, run_jobs)
    with b.if_else(b.and_(several, b.not_(in_region))) as (pooled, one):
        with pooled:  # one thread per job, all at once
            a_args, a_dims, a_steps = _gufunc_arrays(b, n)
            b.call(
                parallel_for,
                [b.bitcast(tramp, I8P), b.bitcast(a_args, I8P), b.bitcast(a_dims, I8P), b.bitcast(a_steps, I8P),
                 b.bitcast(job, I8P), I64(0), I64(1), n],
            )
        with one:
            with b.if_then(b.not_(several)):
                run_jobs(b, job, I64(0), n)
    b.store_atomic(I32(0), blas_lock, "release", 4)
    b.ret_void()


def _build_blas_trampoline(mod, job_ty, run_jobs):
    """``trampoline(args, dims, steps, job)``: job numbers arrive as args[0] (NULL, step 1)."""
    tramp, b = _gufunc_trampoline(mod, "ptnumba_codegen_blas_trampoline")
    args, dims, _steps, data = tramp.args
    run_jobs(b, b.bitcast(data, job_ty.as_pointer()), b.ptrtoint(b.load(args), I64), b.load(dims))
    b.ret_void()
    return tramp


def _spin_lock(fn, b, lock, sched_yield):
    """Take ``lock`` (an i32, 0 = free): spin, yielding the core, until this thread has it."""
    spin, locked = fn.append_basic_block("spin"), fn.append_basic_block("locked")
    b.branch(spin)
    b.position_at_end(spin)
    got = b.extract_value(b.cmpxchg(lock, I32(0), I32(1), "acquire", "monotonic"), 1)
    with b.if_then(b.not_(got)):
        b.call(sched_yield, [])
    b.cbranch(got, locked, spin)
    b.position_at_end(locked)


def _gufunc_trampoline(mod, name):
    """An internal function of ``parallel_for``'s gufunc ABI, ``(args, dims, steps, data)``,
    and a builder at its entry."""
    tramp = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I8P.as_pointer(), I64.as_pointer(), I64.as_pointer(), I8P]), name)
    tramp.linkage = "internal"
    return tramp, ir.IRBuilder(tramp.append_basic_block("entry"))


def _gufunc_arrays(b, count):
    """The (args, dimensions, steps) arrays of a ``parallel_for`` call running ``count``
    items of a gufunc that takes no arrays."""
    a_args = b.alloca(I8P)
    b.store(ir.Constant(I8P, None), a_args)
    a_dims = b.alloca(I64)
    b.store(count, a_dims)
    a_steps = b.alloca(I64)
    b.store(I64(1), a_steps)
    return a_args, a_dims, a_steps


def _run_jobs_on_new_threads(mod, b, job, job_ty, n, run_jobs):
    """Jobs 1..n-1 on threads started for them (pthread_create), job 0 here, then join."""
    pthread_create = ir.Function(mod, ir.FunctionType(I32, [I64.as_pointer(), I8P, I8P, I8P]), "pthread_create")
    pthread_join = ir.Function(mod, ir.FunctionType(I32, [I64, I8P.as_pointer()]), "pthread_join")
    task_ty = ir.LiteralStructType([job_ty.as_pointer(), I64])  # the job, its index
    thunk = mod.globals.get("ptnumba_codegen_blas_thunk")
    if thunk is None:
        thunk = ir.Function(mod, ir.FunctionType(I8P, [I8P]), "ptnumba_codegen_blas_thunk")
        thunk.linkage = "internal"
        tb = ir.IRBuilder(thunk.append_basic_block("entry"))
        task = tb.bitcast(thunk.args[0], task_ty.as_pointer())
        run_jobs(tb, tb.load(tb.gep(task, [I32(0), I32(0)])), tb.load(tb.gep(task, [I32(0), I32(1)])), I64(1))
        tb.ret(ir.Constant(I8P, None))
    tasks = b.alloca(task_ty, size=n)
    handles = b.alloca(I64, size=n)
    from numba.core import cgutils

    with cgutils.for_range(b, b.sub(n, I64(1))) as loop:
        i = b.add(loop.index, I64(1))
        task = b.gep(tasks, [i])
        b.store(job, b.gep(task, [I32(0), I32(0)]))
        b.store(i, b.gep(task, [I32(0), I32(1)]))
        b.call(pthread_create, [b.gep(handles, [i]), ir.Constant(I8P, None), b.bitcast(thunk, I8P), b.bitcast(task, I8P)])
    run_jobs(b, job, I64(0), I64(1))
    with cgutils.for_range(b, b.sub(n, I64(1))) as loop:
        i = b.add(loop.index, I64(1))
        b.call(pthread_join, [b.load(b.gep(handles, [i])), ir.Constant(I8P.as_pointer(), None)])


def _compile_runtime(with_blas: bool):
    """The runtime library: from an earlier process's object code (`runtime_cache`), else
    built and compiled here, and stored for the next process."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    key = runtime_cache.runtime_key(f"{GENERATOR_VERSION}:{GENERATOR_DIGEST}", with_blas)
    directory = runtime_cache.CACHE.directory()
    with global_compiler_lock:
        library = runtime_cache.load(directory, key, codegen)
        if library is None:
            library = _build_runtime(with_blas)
            runtime_cache.store(directory, key, library)
    return library


def _build_runtime(with_blas: bool):
    from numba.core.registry import cpu_target

    library = cpu_target.target_context.codegen().create_library("ptnumba_codegen_split_runtime")
    library.enable_object_caching()  # its object code can be stored (`runtime_cache`)
    mod = library.create_ir_module("ptnumba_codegen_split_runtime")
    gate = ir.GlobalVariable(mod, ir.ArrayType(I32, len(_GATE)), GATE_SYMBOL)
    get_num_threads = ir.Function(mod, ir.FunctionType(I64, []), "get_num_threads")
    parallel_for = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I8P] * 5 + [I64] * 3), "numba_parallel_for")
    tramp = _build_chunk_trampoline(mod)
    _build_try_chunks(mod, gate, get_num_threads, parallel_for, tramp)
    _build_record(mod)
    if with_blas:
        _build_blas_callback(mod, parallel_for)

    library.add_ir_module(mod)
    library.finalize()
    return library


JOB_TYPE = ir.LiteralStructType([I8P, I8P, I64, I64, I32.as_pointer()])  # chunk, state, clen, n0, err
CHUNK_TYPE = ir.FunctionType(I32, [I8P, I8P.as_pointer(), I8P, I64, I64])  # numba's calling convention


def _build_chunk_trampoline(mod):
    """``trampoline(args, dims, steps, job)``: the chunks ``args[0] .. args[0] + dims[0]``
    (chunk numbers arrive as args[0], NULL, step 1), each ``chunk(state, lo, hi)``; a chunk
    that fails sets the job's error flag."""
    tramp, b = _gufunc_trampoline(mod, "ptnumba_codegen_split_trampoline")
    args, dims, _steps, data = tramp.args
    job = b.bitcast(data, JOB_TYPE.as_pointer())
    fields = [b.load(b.gep(job, [I32(0), I32(k)])) for k in range(5)]
    chunk, state, clen, n0, err = fields
    chunk = b.bitcast(chunk, CHUNK_TYPE.as_pointer())
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
    return tramp


def _build_try_chunks(mod, gate, get_num_threads, parallel_for, tramp):
    """``ptnumba_codegen_try_split``: the call-time decision (module docstring) and, when
    it says yes, the chunks run on numba's threads through ``tramp``."""
    fn = ir.Function(mod, TRY_CHUNKS_TYPE, TRY_CHUNKS)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    chunk, state, n0, total, min_elements, cap, rows, align, clen_slot, err_slot, stats = fn.args
    no = fn.append_basic_block("no")
    with b.goto_block(no):
        b.ret(I32(NOT_CHUNKED))
    one_thread = fn.append_basic_block("one_thread")
    with b.goto_block(one_thread):
        b.ret(I32(MEASURE_ONE_THREAD))

    def require(cond, otherwise=no):
        yes = fn.append_basic_block("yes")
        b.cbranch(cond, yes, otherwise)
        b.position_at_end(yes)

    b.atomic_rmw("add", b.gep(gate, [I32(0), I32(4)]), I32(1), "monotonic")  # chunk_requests()
    # kernels test this first themselves (lowering.chunks: below_threshold) and do not ask
    require(b.and_(b.icmp_signed(">=", total, min_elements), b.icmp_signed(">=", n0, I64(MIN_CHUNK_AXIS))))
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
    _require_measured_choice(b, stats, require, one_thread)
    busy = b.gep(gate, [I32(0), I32(1)])
    require(b.extract_value(b.cmpxchg(busy, I32(0), I32(1), "acquire", "monotonic"), 1))
    _install_pending_blas(b)
    b.store(clen, clen_slot)
    b.store(I32(0), err_slot)
    job = b.alloca(JOB_TYPE)
    for k, v in enumerate((chunk, state, clen, n0, err_slot)):
        b.store(v, b.gep(job, [I32(0), I32(k)]))
    a_args, a_dims, a_steps = _gufunc_arrays(b, nchunks)
    start = read_cycles(b)
    b.call(
        parallel_for,
        [b.bitcast(tramp, I8P), b.bitcast(a_args, I8P), b.bitcast(a_dims, I8P), b.bitcast(a_steps, I8P),
         b.bitcast(job, I8P), I64(0), I64(1), nthreads],
    )
    _update_average(b, stats, 0, b.sub(read_cycles(b), start), total)
    b.atomic_rmw("add", b.gep(gate, [I32(0), I32(2)]), I32(1), "monotonic")
    b.store_atomic(I32(0), busy, "release", 4)
    failed = b.icmp_signed("!=", b.load_atomic(err_slot, "monotonic", 4), I32(0))
    b.ret(b.select(failed, I32(CHUNK_RAISED), I32(CHUNKS_DONE)))


def _install_pending_blas(b):
    """Before a parallel launch: ``setter(callback)`` if `shared_blas` armed one, once (the
    launch holds the busy lock, so one thread at a time gets here)."""
    mod = b.module
    pending = mod.globals.get(PENDING_SYMBOL) or ir.GlobalVariable(mod, ir.ArrayType(I8P, 2), PENDING_SYMBOL)
    slot = b.gep(pending, [I32(0), I32(0)])
    setter = b.load_atomic(slot, "acquire", 8)
    with b.if_then(b.icmp_unsigned("!=", setter, ir.Constant(I8P, None)), likely=False):
        callback = b.load(b.gep(pending, [I32(0), I32(1)]))
        b.store_atomic(ir.Constant(I8P, None), slot, "release", 8)
        b.call(b.bitcast(setter, ir.FunctionType(ir.VoidType(), [I8P]).as_pointer()), [callback])


def _require_measured_choice(b, stats, require, one_thread):
    """Go on (split) only if the kernel's measurements say so: one thread first, split
    second, then the faster (with a margin), the other way once every EXPLORE_EVERY calls;
    else branch to ``one_thread`` (run there, timed)."""
    calls = b.load_atomic(_stat(b, stats, 2), "monotonic", 8)
    b.store_atomic(b.add(calls, I64(1)), _stat(b, stats, 2), "monotonic", 8)
    chunked_cost, one_cost = _load_average(b, stats, 0), _load_average(b, stats, 1)
    require(b.fcmp_ordered("!=", one_cost, DBL(0.0)), one_thread)
    prefer = b.fcmp_ordered("<", b.fmul(chunked_cost, DBL(1.0 / CHUNKS_MARGIN)), one_cost)
    explore = b.icmp_signed("==", b.urem(calls, I64(EXPLORE_EVERY)), I64(EXPLORE_EVERY - 1))
    unmeasured = b.fcmp_ordered("==", chunked_cost, DBL(0.0))
    require(b.or_(unmeasured, b.xor(prefer, explore)), one_thread)


def _build_record(mod):
    """``ptnumba_codegen_split_record(stats, cycles, total)``: one one-thread run's time."""
    rec = ir.Function(mod, RECORD_TYPE, RECORD)
    b = ir.IRBuilder(rec.append_basic_block("entry"))
    _update_average(b, rec.args[0], 1, rec.args[1], rec.args[2])
    b.ret_void()


__all__ = ["RECORD", "RECORD_TYPE", "STATS_TYPE", "TRY_CHUNKS", "TRY_CHUNKS_TYPE", "ceil_div", "read_cycles", "ensure_threading", "parallel_enabled", "set_parallel_enabled", "smin", "chunk_launches", "chunk_requests"]
