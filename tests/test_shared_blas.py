"""OpenBLAS's parallel jobs on numba's threads (`lowering.shared_blas`): the same bits as
OpenBLAS's own pool, from several threads at once, in a forked child, and split loops
beside BLAS again."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import threading

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import ptnumba_codegen
from conftest import compile_fn
from ptnumba_codegen.runtime import shared_blas
from ptnumba_codegen.runtime.threads import ensure_threading
from ptnumba_codegen.settings import SHARE_BLAS

pytestmark = pytest.mark.skipif(
    not (ensure_threading() and shared_blas.blas_pool_shared()),
    reason="no OpenBLAS with caller-managed threading (>= 0.3.28) here",
)



@pytest.fixture(autouse=True, scope="module")
def _installed():
    """These tests run BLAS through the callback: install it without waiting for a split."""
    assert shared_blas.install_now()


SHAPES = [((3000, 200), (200,)), ((200, 3000), (3000,)), ((400, 300), (300, 250)), ((2000, 11), (11, 5))]


@numba.njit(nogil=True)
def _products(a, b):
    return np.dot(a, b), np.dot(a.T, a)


def _operands(dtype="float64"):
    rng = np.random.default_rng(8)
    return [(rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)) for sa, sb in SHAPES]


_REFERENCE = """
import numba, numpy as np, pickle, sys
sys.path.insert(0, {tests!r})
from test_shared_blas import _operands, _products
out = [[_products(a, b) for a, b in _operands(dt)] for dt in ("float64", "float32")]
sys.stdout.buffer.write(pickle.dumps(out))
"""


def test_dot_products_keep_openblas_own_bits():
    import pickle

    env = {**os.environ, SHARE_BLAS.env: "0"}
    code = _REFERENCE.format(tests=os.path.dirname(__file__))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode()
    reference = pickle.loads(done.stdout)
    for dt, ref in zip(("float64", "float32"), reference, strict=True):
        for (a, b), (want_ab, want_aa) in zip(_operands(dt), ref, strict=True):
            got_ab, got_aa = _products(a, b)
            np.testing.assert_array_equal(got_ab, want_ab)
            np.testing.assert_array_equal(got_aa, want_aa)


def test_blas_from_several_threads_at_once():
    ops = _operands()
    expected = [_products(a, b) for a, b in ops]
    errors, results = [], {}

    def work(k):
        try:
            for _ in range(15):
                for j, (a, b) in enumerate(ops):
                    got = _products(a, b)
                    results.setdefault((k, j), []).append(
                        np.array_equal(got[0], expected[j][0]) and np.array_equal(got[1], expected[j][1])
                    )
        except Exception as err:  # pragma: no cover - reported below
            errors.append(repr(err))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not errors, errors
    assert results and all(all(v) for v in results.values())


def _child(queue):
    try:
        a, b = _operands()[2]
        queue.put(bool(np.allclose(_products(a, b)[0], a @ b, rtol=1e-12)))
    except Exception as err:  # pragma: no cover
        queue.put(repr(err))


def test_a_forked_child_runs_blas_on_its_own_thread():
    a, b = _operands()[2]
    _products(a, b)  # the parent has run pooled BLAS jobs
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,))
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0, f"child died with exit code {proc.exitcode}"
    assert queue.get(timeout=10) is True


@contextlib.contextmanager
def unshared():
    """OpenBLAS with its own threads again, for the duration."""
    from ptnumba_codegen.runtime.threads import BLAS_CALLBACK, _STATE

    shared_blas.unshare_blas_pool()
    try:
        yield
    finally:
        shared_blas.share_blas_pool(_STATE["library"].get_pointer_to_function(BLAS_CALLBACK))
        shared_blas.install_now()
    assert shared_blas.installed()


def _dot_graph():
    X = pt.matrix("X")
    b = pt.vector("b")
    return [X, b], pt.exp(X @ b) * 2.0 + 1.0


def test_loops_beside_a_shared_blas_split_again():
    inputs, out = _dot_graph()
    fn = compile_fn(inputs, out, "policy_rewritten", cache_key="shared_blas_split")
    assert "OpenBLAS" not in ptnumba_codegen.explain(fn)
    rng = np.random.default_rng(2)
    Xv, bv = rng.standard_normal((100_000, 4)), rng.standard_normal(4)
    np.testing.assert_allclose(fn(Xv, bv), np.exp(Xv @ bv) * 2.0 + 1.0, rtol=1e-12)


def test_loops_beside_openblas_own_pool_yield_unless_it_has_one_thread():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    inputs, out = _dot_graph()
    with unshared():
        yielding = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode("rewritten"))
        with threadpoolctl.threadpool_limits(1, user_api="blas"):
            single = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode("rewritten"))
    assert "never split: the function runs ops on OpenBLAS's threads" in ptnumba_codegen.explain(yielding)
    assert "split along axis 0" in ptnumba_codegen.explain(single)


def test_blas_inside_a_numba_prange_runs_its_jobs_on_threads_of_their_own():
    """Inside a parallel region a nested region would get one thread, and level-3 jobs
    wait for each other: the callback starts threads for them instead."""

    @numba.njit(parallel=True)
    def batched(As, B):
        out = np.empty((As.shape[0], As.shape[1], B.shape[1]))
        for i in numba.prange(As.shape[0]):
            out[i] = np.dot(As[i], B)
        return out

    rng = np.random.default_rng(4)
    As, B = rng.standard_normal((4, 400, 300)), rng.standard_normal((300, 250))
    got = batched(As, B)
    for i in range(4):
        np.testing.assert_array_equal(got[i], _products(As[i], B)[0])


_FIRST_SPLIT = """
import numpy as np, pytensor, pytensor.tensor as pt, ptnumba_codegen
from ptnumba_codegen.runtime import shared_blas, threads
X, b = pt.matrix("X"), pt.vector("b")
fn = pytensor.function([X, b], pt.exp(X @ b) * 2.0 + 1.0, mode=ptnumba_codegen.policy_mode("rewritten"))
small = np.random.default_rng(0).standard_normal((300, 40)), np.ones(40)
for _ in range(5):
    fn(*small)
before = (shared_blas.blas_pool_shared(), shared_blas.installed(), threads.chunk_launches())
big = np.random.default_rng(1).standard_normal((400_000, 4)), np.ones(4)
for _ in range(6):
    out = fn(*big)
ok = bool(np.allclose(out, np.exp(big[0] @ big[1]) * 2.0 + 1.0, rtol=1e-12))
print("RESULT", *before, shared_blas.installed(), threads.chunk_launches(), ok)
"""


def test_openblas_keeps_its_pool_until_a_loop_splits():
    """Armed when the runtime starts, installed just before the first split loop: a
    function whose loops have not split leaves OpenBLAS its own workers (a parallel region
    per small BLAS call costs more), and the first split hands them to numba's threads."""
    from conftest import second_process_line

    words = second_process_line(_FIRST_SPLIT, [], "RESULT").split()[1:]
    armed, installed_before, launches_before, installed_after, launches_after, ok = words
    assert (armed, installed_before, launches_before) == ("True", "False", "0")
    assert int(launches_after) > 0, "no loop split (one thread here?)"
    assert installed_after == "True" and ok == "True"
