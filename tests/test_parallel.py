"""Loops split across threads (policy ``[parallel]``) give the unsplit loop's bits.

Two policies compile every graph: ``split`` (threshold 1 element, so every splittable
loop with an outer axis >= 2 runs on numba's threads) and ``one_thread`` (``threads = 1``).
They must agree bit for bit with each other and with the ``split`` kernel run with the
process gate closed (the same machine code, never split), and with the C backend to 1e-12
(1e-10 for sums, whose blocked order differs from the C loop's).
"""

from __future__ import annotations

import multiprocessing
import re

import numba

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.scalar import basic as ps
from pytensor.scalar.loop import ScalarLoop
from pytensor.tensor.elemwise import Elemwise

import ptnumba_codegen
from conftest import assert_same_bits, policy_nodes

SPLIT = '[parallel]\nthreads = "auto"\nmin_elements = 1\n'
ONE_THREAD = "[parallel]\nthreads = 1\n"

_FNS: dict = {}


@pytest.fixture(scope="module")
def policies(tmp_path_factory):
    d = tmp_path_factory.mktemp("parallel_policies")
    out = {}
    for name, base, table in (
        ("split", "rewritten", SPLIT),
        ("one_thread", "rewritten", ONE_THREAD),
        ("split_strict", "strict", SPLIT),
    ):
        path = d / f"{name}.toml"
        path.write_text(f'extends = "{base}"\n{table}')
        out[name] = str(path)
    return out


def compiled(name, build, policy_path, backend, inspect_ir=False):
    key = (name, backend, inspect_ir)
    if key not in _FNS:
        inputs, outputs = build()
        if backend == "c":
            mode = Mode(linker="cvm", optimizer="fast_run")
        else:
            mode = ptnumba_codegen.policy_mode(policy_path)
        flags = {"numba__cache": False} if inspect_ir else {}
        with pytensor.config.change_flags(**flags):
            _FNS[key] = pytensor.function(inputs, outputs, mode=mode)
    return _FNS[key]


def _vec3(expr):
    def build():
        x, y, z = pt.vectors("x", "y", "z")
        return [x, y, z], expr(x, y, z)

    return build


def _mat(expr):
    def build():
        X = pt.matrix("X")
        return [X], expr(X)

    return build


VECTOR_GRAPHS = {
    "max_mul": _vec3(lambda x, y, z: pt.maximum(x, y) * z),
    "fma": _vec3(lambda x, y, z: x * y + z),
    "exp_fma": _vec3(lambda x, y, z: pt.exp(x) * y + z),
    "tanh_erf": _vec3(lambda x, y, z: pt.tanh(x) + pt.erf(y) - z),
    "sigmoid_switch": _vec3(lambda x, y, z: pt.switch(x > 0, pt.log(x), pt.sigmoid(y)) * z),
    "two_outputs": _vec3(lambda x, y, z: [pt.exp(x) * y, (x > y) & (z < 0)]),
    "inplace_after_cumsum": _vec3(lambda x, y, z: pt.exp(pt.cumsum(x)) * y + z),
    "logp_sum": _vec3(lambda x, y, z: (-0.5 * ((x - y) / pt.exp(z)) ** 2 - z).sum()),
    "sum_and_elemwise": _vec3(lambda x, y, z: [x * y, (x * y).sum(), pt.max(x * z)]),
    "int_sum": _vec3(lambda x, y, z: pt.cast(pt.floor(x * 100), "int64").sum() + pt.all(y < z)),
}
REDUCTIONS = {"logp_sum", "sum_and_elemwise", "int_sum", "sum_all", "logsumexp_rows", "softmax_rows", "max_rows"}
MATRIX_GRAPHS = {
    "softmax_rows": _mat(lambda X: pt.special.softmax(X, axis=-1)),
    "logsumexp_rows": _mat(lambda X: pt.logsumexp(X, axis=1)),
    "sum_axis0": _mat(lambda X: pt.exp(X).sum(axis=0)),
    "sum_all": _mat(lambda X: pt.exp(X).sum()),
    "max_rows": _mat(lambda X: pt.max(X * X, axis=1)),
}
LENGTHS = (1, 7, 63, 64, 65, 129, 1000, 100_003)
SHAPES = ((1, 5), (2, 1), (3, 1000), (1001, 7), (300, 301))


def _vector_inputs(n, seed):
    rng = np.random.default_rng(seed)
    x, y, z = (rng.normal(scale=3, size=n) for _ in range(3))
    x[::17] = np.nan
    y[::23] = -np.inf
    x[5::31] = 0.0
    return x, y, z


def _as_list(result):
    return list(result) if isinstance(result, list | tuple) else [result]


def _check(name, build, args, policies):
    split = compiled(name, build, policies["split"], "split")
    single = compiled(name, build, policies["one_thread"], "one_thread")
    ref = compiled(name, build, None, "c")
    res_split, res_single, res_ref = (f(*[a.copy() for a in args]) for f in (split, single, ref))
    ptnumba_codegen.set_parallel_enabled(False)  # the same kernel, never split
    try:
        res_closed = split(*[a.copy() for a in args])
    finally:
        ptnumba_codegen.set_parallel_enabled(True)
    for a, b, c, d in zip(*map(_as_list, (res_split, res_single, res_ref, res_closed)), strict=True):
        assert_same_bits(a, d)
        assert_same_bits(a, b)
        if np.asarray(c).dtype.kind == "f":
            # atol: cancellation in x - z; rtol: a sum's order differs from the C loop's
            rtol = 1e-10 if name in REDUCTIONS else 1e-12
            np.testing.assert_allclose(a, c, rtol=rtol, atol=1e-13, equal_nan=True)
        else:
            np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("name", sorted(VECTOR_GRAPHS))
def test_split_vectors_equal_one_thread_bit_for_bit(policies, name):
    for n in LENGTHS:
        _check(name, VECTOR_GRAPHS[name], _vector_inputs(n, n), policies)
    # a strided view and a negative stride
    x, y, z = _vector_inputs(30_001, 1)
    _check(name, VECTOR_GRAPHS[name], (x[::3], y[::3], z[::3]), policies)
    _check(name, VECTOR_GRAPHS[name], (x[::-1], y[::-1], z[::-1]), policies)


@pytest.mark.parametrize("name", sorted(MATRIX_GRAPHS))
def test_split_matrices_equal_one_thread_bit_for_bit(policies, name):
    rng = np.random.default_rng(7)
    for shape in SHAPES:
        X = rng.normal(scale=30, size=shape)
        X.flat[::13] = -np.inf
        _check(name, MATRIX_GRAPHS[name], (X,), policies)
        _check(name, MATRIX_GRAPHS[name], (np.asfortranarray(X),), policies)


def test_the_inplace_graph_really_runs_inplace(policies):
    fn = compiled("inplace_after_cumsum", VECTOR_GRAPHS["inplace_after_cumsum"], policies["split"], "split")
    assert any(n.op.destroy_map for n in policy_nodes(fn))


@pytest.mark.parametrize(
    "name, policy, splits",
    [
        ("max_mul", "split", True),
        ("softmax_rows", "split", True),
        ("max_rows", "split", True),
        ("sum_all", "split", True),  # blocked: the policy lets the sum reassociate
        ("sum_axis0", "split", True),  # split along axis 1: each column is summed by one thread
        ("sum_all", "split_strict", False),  # a strict sum keeps its sequential order
    ],
)
def test_final_ir_calls_the_split_helper_only_where_splitting_is_exact(policies, name, policy, splits):
    build = {**VECTOR_GRAPHS, **MATRIX_GRAPHS}[name]
    fn = compiled(name, build, policies[policy], policy, inspect_ir=True)
    n_args = len(fn.maker.fgraph.inputs)
    args = [np.ones(10) for _ in range(n_args)] if name in VECTOR_GRAPHS else [np.ones((4, 5))]
    fn(*args)
    ir = "\n".join(fn.vm.jit_fn.inspect_llvm().values())
    assert ("@ptnumba_codegen_try_split" in ir) == splits
    single = compiled(name, build, policies["one_thread"], "one_thread", inspect_ir=True)
    single(*args)
    assert "@ptnumba_codegen_try_split" not in "\n".join(single.vm.jit_fn.inspect_llvm().values())


def _loop_graph():
    x = pt.vector("x")
    n = pt.vector("n", dtype="int64")
    xs = ps.float64("xs")
    loop = ScalarLoop(init=[xs], update=[xs * 1.5 + 0.25])
    return [n, x], Elemwise(loop)(n, x)


def test_an_exception_in_a_worker_thread_is_raised_with_its_message(policies):
    split = compiled("scalar_loop", _loop_graph, policies["split"], "split")
    single = compiled("scalar_loop", _loop_graph, policies["one_thread"], "one_thread")
    n = np.arange(100_000, dtype="int64") % 5
    x = np.linspace(-1, 1, 100_000)
    assert_same_bits(split(n, x), single(n, x))
    n[90_000] = -1
    with pytest.raises(ValueError, match="termination condition"):
        split(n, x)


def _child(fn, args, expected, queue):
    try:
        same = np.array_equal(fn(*args), expected, equal_nan=True)
        queue.put((ptnumba_codegen.parallel_enabled(), bool(same)))
    except Exception as err:  # pragma: no cover - reported to the parent
        queue.put(repr(err))


def test_forked_children_run_split_kernels_on_one_thread(policies):
    fn = compiled("max_mul", VECTOR_GRAPHS["max_mul"], policies["split"], "split")
    args = _vector_inputs(200_000, 3)
    expected = fn(*args)  # the parent has run a split loop (GNU OpenMP is initialized)
    assert ptnumba_codegen.parallel_enabled()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(fn, args, expected, queue))
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0, f"child died with exit code {proc.exitcode}"
    assert queue.get(timeout=10) == (False, True)
    assert ptnumba_codegen.parallel_enabled()  # the parent's gate is untouched


def test_closed_gate_keeps_results(policies):
    fn = compiled("exp_fma", VECTOR_GRAPHS["exp_fma"], policies["split"], "split")
    args = _vector_inputs(50_000, 4)
    expected = fn(*args)
    ptnumba_codegen.set_parallel_enabled(False)
    try:
        assert_same_bits(fn(*args), expected)
    finally:
        ptnumba_codegen.set_parallel_enabled(True)


def test_static_shapes_below_the_threshold_get_no_chunk_code(policies):
    small = pt.tensor("small", shape=(1000,))
    large = pt.tensor("large", shape=(70_000,))
    with pytensor.config.change_flags(numba__cache=False):
        fn = pytensor.function(
            [small, large],
            [pt.exp(small).sum(), pt.exp(large).sum()],
            mode=ptnumba_codegen.policy_mode("rewritten"),
        )
    s, lv = np.linspace(0, 1, 1000), np.linspace(0, 1, 70_000)
    res = fn(s, lv)
    ir = "\n".join(fn.vm.jit_fn.inspect_llvm().values())
    # the large sum only (dso_local: `runtime.own_copies`)
    assert len(re.findall(r"^define linkonce_odr (?:dso_local )?i32 @ptnumba_chunk_", ir, re.M)) == 1
    np.testing.assert_allclose(res, [np.exp(s).sum(), np.exp(lv).sum()], rtol=1e-12)


def test_explain_reports_the_thread_decision(policies):
    fn = compiled("logp_sum", VECTOR_GRAPHS["logp_sum"], policies["split"], "split")
    assert "threads: split in shape-fixed blocks along axis 0 from 1 elements" in ptnumba_codegen.explain(fn)
    strict = compiled("sum_all", MATRIX_GRAPHS["sum_all"], policies["split_strict"], "split_strict")
    assert "threads: never split: every axis is reduced, of length 1 or short by its type, or a full reduction must keep its order" in (
        ptnumba_codegen.explain(strict)
    )


def _row_graph():
    R = pt.row("R")  # static shape (1, None): the split axis is 1
    return [R], [pt.exp(R) * 2 - R, pt.exp(R).sum(), (R * R).sum(axis=0)]


def test_row_vectors_split_along_their_long_axis(policies):
    split = compiled("row", _row_graph, policies["split"], "split")
    single = compiled("row", _row_graph, policies["one_thread"], "one_thread")
    assert "along axis 1" in ptnumba_codegen.explain(split)
    R = np.random.default_rng(5).normal(size=(1, 100_003))
    ptnumba_codegen.set_parallel_enabled(False)
    try:
        closed = split(R)
    finally:
        ptnumba_codegen.set_parallel_enabled(True)
    for a, b, c, ref in zip(split(R), single(R), closed, [np.exp(R) * 2 - R, np.exp(R).sum(), (R * R).sum(axis=0)]):
        assert_same_bits(a, b)
        assert_same_bits(a, c)
        np.testing.assert_allclose(a, ref, rtol=1e-10)


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two threads")
def test_the_first_eligible_call_runs_on_one_thread_and_the_second_split(policies):
    from ptnumba_codegen.runtime.threads import chunk_launches

    # constants no other test uses: a kernel of its own, with fresh statistics
    fn = compiled("measured", _vec3(lambda x, y, z: x * 1.2345 + y * z - 6.789), policies["split"], "split")
    args = _vector_inputs(100_000, 3)
    before = chunk_launches()
    first = fn(*args)
    assert chunk_launches() == before  # one thread, measured
    second = fn(*args)
    assert chunk_launches() == before + 1  # split, measured
    assert_same_bits(first, second)
    for _ in range(10):  # then whichever measured faster: the same bits either way
        assert_same_bits(fn(*args), first)


@pytest.mark.parametrize("preset", [None, "123"])
def test_numbas_openmp_pool_spins_briefly_unless_the_user_chose(preset):
    import os
    import subprocess
    import sys

    from ptnumba_codegen.runtime.threads import OMP_SPIN_COUNT

    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    if preset is not None:
        env["GOMP_SPINCOUNT"] = preset
    code = (
        "import os, numba, ptnumba_codegen.runtime.threads as r\n"
        "assert r.ensure_threading()\n"
        "print(numba.threading_layer(), os.environ.get('GOMP_SPINCOUNT'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    layer, spin = out.stdout.split()
    if layer != "omp":
        pytest.skip(f"numba's threading layer is {layer}, not GNU OpenMP")
    assert spin == (preset or OMP_SPIN_COUNT)


def test_short_static_axes_are_not_split_and_keep_their_trip_count():
    """The gradient of 2 mixture components summed over rows: splitting the 2 columns gives
    at most 2 chunks and hides their trip count from LLVM (the chunk runs ``[lo, hi)``).
    Not split, the nest is emitted inline with every static length (no chunk function)."""
    from ptnumba_codegen.lowering.loop import MIN_CHUNK_LENGTH, Reduce, LoopSpec, chunk_axis

    def spec(shape):
        red = Reduce("Add", (0,), 0.0, "float64", (), False)
        bc = tuple(n == 1 for n in shape)
        return LoopSpec(2, (bc, bc), (bc, (True, bc[1])), ("float64", "float64"), reduces=(None, red), static_shape=shape)

    assert chunk_axis(spec((None, 2))) is None
    assert chunk_axis(spec((None, MIN_CHUNK_LENGTH - 1))) is None
    assert chunk_axis(spec((None, MIN_CHUNK_LENGTH))) == 1
    assert chunk_axis(spec((None, None))) == 1
    n = 70_000
    g0, xx = pt.tensor("g0", shape=(None, 2)), pt.tensor("xx", shape=(None, 2))
    mx, g1 = pt.tensor("mx", shape=(None, 1)), pt.tensor("g1", shape=(None, 1))
    g = g0 + pt.eq(xx, mx) * g1
    with pytensor.config.change_flags(numba__cache=False):
        fn = pytensor.function([g0, g1, mx, xx], [g, g.sum(0)], mode=ptnumba_codegen.policy_mode("rewritten"))
    rng = np.random.default_rng(1)
    G0, G1, MX = rng.normal(size=(n, 2)), rng.normal(size=(n, 1)), rng.normal(size=(n, 1))
    XX = np.concatenate([MX, MX - 1], axis=1)
    got = fn(G0, G1, MX, XX)
    want = G0 + (XX == MX) * G1
    np.testing.assert_array_equal(got[0], want)
    np.testing.assert_allclose(got[1], want.sum(0), rtol=1e-12)
    assert "threads: never split" in ptnumba_codegen.explain(fn)
    ir = "\n".join(fn.vm.jit_fn.inspect_llvm().values())
    assert "@ptnumba_chunk_" not in ir
