"""Split kernels called from several threads at once, as nutpie calls the compiled logp:
without the GIL, from its own chain threads.

A PyTensor function holds the GIL while it runs, so the tests call the numba function
underneath it (``fn.vm.jit_fn``, what nutpie wraps in a ``numba.cfunc``) through a
``numba.njit(nogil=True)`` wrapper: the kernels then really run at the same time. Only one
split loop at a time gets numba's threads (the try-lock in ``runtime/threads.py``);
the others run their loop on the calling thread. Whether an eligible call splits is the
kernel's measured choice, but every ``EXPLORE_EVERY``-th call takes the other way, so
more calls than that per kernel make sure split loops ran while other threads were in the
same kernel (``chunk_launches`` counts them). Either way the bits must be those of a call
made alone, no call may hang (threads are joined with a timeout) and the process must
survive; a kernel that raises must raise in every thread that called it and leave the
next call working.

The try-lock matters on numba's ``workqueue`` threading layer (not thread-safe: two
launches at once abort the process); ``omp`` (this machine's default) and ``tbb`` accept
concurrent launches. The last test reruns this file in a subprocess on ``workqueue``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.scalar import basic as ps
from pytensor.scalar.loop import ScalarLoop
from pytensor.tensor.elemwise import Elemwise

import ptnumba_codegen
from conftest import assert_same_bits
from ptnumba_codegen.runtime.threads import _GATE, EXPLORE_EVERY, chunk_launches

LAYER_VAR = "NUMBA_THREADING_LAYER"
N_THREADS = 4
CALLS = 2 * EXPLORE_EVERY // N_THREADS + 8  # per thread: 2 explorations per kernel at least
N = 100_000
TIMEOUT_S = 120

_FNS: dict = {}


@pytest.fixture(scope="module")
def split_mode(tmp_path_factory):
    path = tmp_path_factory.mktemp("concurrency") / "split.toml"
    path.write_text('extends = "rewritten"\n[parallel]\nthreads = "auto"\nmin_elements = 1\n')
    return ptnumba_codegen.policy_mode(path)


def nogil_caller(name, build, mode):
    """A ``numba.njit(nogil=True)`` function calling the compiled graph's numba function."""
    if name not in _FNS:
        inputs, outputs = build()
        fn = pytensor.function(inputs, outputs, mode=mode)
        assert "threads: split" in ptnumba_codegen.explain(fn), "the kernel should split"
        jit_fn = fn.vm.jit_fn
        if len(inputs) == 3:
            caller = numba.njit(nogil=True)(lambda a, b, c: jit_fn(a, b, c))
        else:
            caller = numba.njit(nogil=True)(lambda a, b: jit_fn(a, b))
        _FNS[name] = caller
    return _FNS[name]


def _logp_graph():
    x, y, z = pt.vectors("x", "y", "z")
    # an elementwise output and a full sum split in shape-fixed blocks
    return [x, y, z], [pt.exp(x) * y + z, (-0.5 * ((x - y) / pt.exp(z)) ** 2 - z).sum()]


def _loop_graph():
    n = pt.vector("n", dtype="int64")
    x = pt.vector("x")
    xs = ps.float64("xs")
    return [n, x], Elemwise(ScalarLoop(init=[xs], update=[xs * 1.5 + 0.25]))(n, x)


def run_in_threads(jobs):
    """``jobs[k] = (call, check)``: thread k runs ``call()`` CALLS times, all threads
    released at once, and hands each result (or exception) to ``check``, which asserts.
    Fails on any failed check, on a thread still running after TIMEOUT_S (daemon threads:
    a deadlock fails the test, not the run), and if no loop was split meanwhile."""
    launches = chunk_launches()
    barrier = threading.Barrier(len(jobs))
    failures = [[] for _ in jobs]
    done = [0] * len(jobs)

    def work(k):
        call, check = jobs[k]
        barrier.wait()
        for i in range(CALLS):
            try:
                result = call()
            except Exception as err:  # noqa: BLE001  (handed to check)
                result = err
            try:
                check(result)
            except AssertionError as err:
                failures[k].append(f"thread {k}, call {i}: {str(err)[:300]}")
                if len(failures[k]) >= 3:
                    return
            done[k] += 1

    threads = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S)
    stuck = [k for k, t in enumerate(threads) if t.is_alive()]
    assert not stuck, f"threads {stuck} still running after {TIMEOUT_S} s: deadlock"
    assert not any(failures), [f for per_thread in failures for f in per_thread]
    assert done == [CALLS] * len(jobs)
    assert _GATE[1] == 0, "the split try-lock was left taken"
    assert chunk_launches() > launches, "no loop was split: the test did not exercise splitting"
    assert ptnumba_codegen.parallel_enabled()
    if os.environ.get(LAYER_VAR) in ("workqueue", "omp", "tbb"):
        assert numba.threading_layer() == os.environ[LAYER_VAR]


def same_bits_as(expected):
    def check(result):
        assert not isinstance(result, Exception), repr(result)
        for got, want in zip(result, expected, strict=True):
            assert_same_bits(got, want)

    return check


def raises(match):
    def check(result):
        assert isinstance(result, ValueError) and match in str(result), repr(result)

    return check


def _inputs(seed):
    rng = np.random.default_rng(seed)
    x, y, z = (rng.normal(scale=2, size=N) for _ in range(3))
    x[::97] = np.nan
    return x, y, z


def test_split_kernels_from_several_threads_give_the_single_call_bits(split_mode):
    call = nogil_caller("logp", _logp_graph, split_mode)
    args = [_inputs(seed) for seed in range(N_THREADS)]
    expected = [call(*a) for a in args]  # one call at a time
    run_in_threads([(lambda a=a: call(*a), same_bits_as(e)) for a, e in zip(args, expected, strict=True)])


def test_raising_kernels_from_several_threads(split_mode):
    """Every other thread raises (in a worker chunk: ScalarLoop's negative count, or the
    shape check), the others compute; then plain calls work."""
    loop = nogil_caller("loop", _loop_graph, split_mode)
    logp = nogil_caller("logp", _logp_graph, split_mode)
    n = np.arange(N, dtype="int64") % 5
    x = np.linspace(-1, 1, N)
    bad_n = n.copy()
    bad_n[N - 1000] = -1  # in the last chunk: raised on a worker thread when split
    good = _inputs(7)
    expected_loop, expected_logp = loop(n, x), logp(*good)
    jobs = [
        (lambda: loop(n, x), same_bits_as(expected_loop)),
        (lambda: loop(bad_n, x), raises("termination condition")),
        (lambda: logp(*good), same_bits_as(expected_logp)),
        (lambda: logp(good[0], good[1][:5], good[2]), raises("incompatible shape")),
    ] * (N_THREADS // 2)
    run_in_threads(jobs)
    # the process survived (and run_in_threads saw the try-lock released): calls work again
    same_bits_as(expected_loop)(loop(n, x))
    with pytest.raises(ValueError, match="termination condition"):
        loop(bad_n, x)
    same_bits_as(expected_logp)(logp(*good))


@pytest.mark.skipif(os.environ.get(LAYER_VAR) == "workqueue", reason="already on workqueue")
def test_the_same_on_numba_workqueue_layer():
    env = {**os.environ, LAYER_VAR: "workqueue"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", __file__, "-q", "-p", "no:cacheprovider", "-k", "not workqueue"],
        cwd=Path(__file__).resolve().parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 passed" in proc.stdout, proc.stdout[-3000:]
