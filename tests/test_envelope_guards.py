"""Envelope guards (`ptnumba_codegen.as_written.envelope_guards`): a decision constant in a
box of its float inputs is not recomputed as written while the inputs are in the box.

The graph is the catalogue's malaria HSGP model in small: an HSGP-like basis
``phi = 0.73 * sin(w1 * (X0 + 3)) * sin(w2 * (X1 + 3))`` times coefficients ``beta``,
plus an intercept, under a Binomial-style ``0 <= sigmoid(eta) <= 1`` check. Without the
guard the check's cone holds an opaque strict copy of ``phi @ beta`` (phi recomputed
with scalar libm sin). The reference is ``Mode(linker="numba", optimizer=None)`` under
``numba__fastmath=False`` (backend ``unoptimized_strict``).
"""

import math
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.math import Dot

from conftest import compile_fn
from ptnumba_codegen.analysis.envelope import Fact, evaluate
from ptnumba_codegen.as_written import envelope_guards
from ptnumba_codegen.as_written.op import AsWritten, EnvelopeGuarded
from ptnumba_codegen.passes.pass_errors import PassErrorWarning

N, K = 12, 64
RNG = np.random.default_rng(21)
W1 = np.linspace(0.3, 4.0, K)
W2 = np.linspace(0.5, 3.0, K)[::-1].copy()


def hsgp_graph():
    X = pt.matrix("X", shape=(None, 2))
    beta = pt.vector("beta", shape=(K,))
    b0 = pt.scalar("b0")
    phi = 0.73 * pt.sin(W1 * (X[:, 0:1] + 3.0)) * pt.sin(W2 * (X[:, 1:2] + 3.0))
    eta = b0 + phi @ beta
    p = pt.sigmoid(eta)
    ok = pt.and_(pt.ge(p, 0), pt.le(p, 1))
    logp = pt.switch(ok, -pt.softplus(-eta), -np.inf).sum()
    return [X, beta, b0], [ok, logp]


def hsgp_fn(backend):
    inputs, outputs = hsgp_graph()
    return compile_fn(inputs, outputs, backend, cache_key="envelope_hsgp")


def inputs(scale=1.0):
    X = RNG.uniform(-5, 5, size=(N, 2))
    return X, RNG.normal(size=K) * scale, np.float64(RNG.normal())


def same_decisions(args):
    ref = hsgp_fn("unoptimized_strict")(*args)
    res = hsgp_fn("policy_as_written")(*args)
    np.testing.assert_array_equal(res[0], ref[0])  # the check, element for element
    assert np.isneginf(res[1]) == np.isneginf(ref[1])
    return ref


def is_dot(op) -> bool:
    return isinstance(getattr(op, "core_op", op), Dot)


def guard_nodes(fn):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, EnvelopeGuarded)]


def in_box(args) -> bool:
    """Whether the guard of the as-written function takes its fast path for ``args``."""
    fn = hsgp_fn("policy_as_written")
    [guard] = guard_nodes(fn)
    values = dict(zip(fn.maker.fgraph.inputs, args, strict=True))
    n = guard.op.n_inner
    return guard.op.inside([values[v] for v in guard.inputs[n : n + guard.op.n_checks]])


def test_no_strict_dot_copy_runs_eagerly():
    fn = hsgp_fn("policy_as_written")
    copies = [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, AsWritten) and not isinstance(n.op, EnvelopeGuarded)]
    dots = [n for n in copies if any(is_dot(m.op) for m in n.op.fgraph.toposort())]
    assert dots == []
    [guard] = guard_nodes(fn)
    # the strict copy of phi @ beta is in the guard's slow path only
    inner = [m for m in guard.op.fgraph.toposort() if isinstance(m.op, AsWritten)]
    assert any(is_dot(c.op) for m in inner for c in m.op.fgraph.toposort())
    assert set(guard.op.outcomes) == {True}


def test_inside_the_box_decisions_equal_the_reference():
    for _ in range(5):
        args = inputs()
        assert in_box(args)
        same_decisions(args)


@pytest.mark.parametrize("value", [1e306, -1e306, 1.7e308, np.inf, -np.inf, np.nan])
def test_outside_the_box_the_strict_copy_decides(value):
    X, beta, b0 = inputs()
    beta[3] = value
    assert not in_box((X, beta, b0))
    same_decisions((X, beta, b0))
    beta[5] = -value
    same_decisions((X, beta, b0))
    same_decisions((X, beta, np.float64(value)))
    X[2, 0] = value
    same_decisions((X, inputs()[1], b0))


def order_dependent_inputs():
    """beta such that row 0's products are +c, +c, +c, -c, -c, -c (c = 0.9e308): summed in
    order the dot product overflows to +inf, summed in pairs (+c - c) it is 0; with
    b0 = -inf, eta is NaN (the check fails) in the one order and -inf in the other."""
    X, _, _ = inputs()
    phi0 = 0.73 * np.sin(W1 * (X[0, 0] + 3.0)) * np.sin(W2 * (X[0, 1] + 3.0))
    k = np.sort(np.argsort(-np.abs(phi0))[:6])  # in index order, whatever RNG's state
    beta = np.zeros(K)
    beta[k] = np.array([1, 1, 1, -1, -1, -1]) * 0.9e308 / phi0[k]
    return X, beta, np.float64(-np.inf), phi0


def test_summation_order_matters_and_the_reference_order_is_kept():
    X, beta, b0, phi0 = order_dependent_inputs()
    products = phi0 * beta
    in_order = math.inf if np.isinf(np.cumsum(products[products != 0])).any() else 0.0
    pairs = products[products > 0] + products[products < 0]
    assert np.isinf(in_order) and np.isfinite(pairs.sum())  # the two orders really differ
    assert not in_box((X, beta, b0))
    same_decisions((X, beta, b0))  # in whichever order the reference's BLAS sums


def test_a_too_loose_guard_is_caught(monkeypatch):
    """Widen the run-time box to everything but NaN: beta = (inf, -inf) gives a NaN
    product, the reference's check fails, the loosened guard says it holds."""
    init = EnvelopeGuarded.__init__

    def loose(self, fgraph, policy, bounds, *args, **kwargs):
        init(self, fgraph, policy, tuple(math.inf for _ in bounds), *args, **kwargs)

    monkeypatch.setattr(EnvelopeGuarded, "__init__", loose)
    inputs_, outputs = hsgp_graph()
    fn = compile_fn(inputs_, outputs, "policy_as_written")  # no cache_key: a new function
    assert all(b == math.inf for b in guard_nodes(fn)[0].op.bounds)
    X, beta, b0 = inputs()
    beta[3], beta[5] = np.inf, -np.inf
    ref = hsgp_fn("unoptimized_strict")(X, beta, b0)
    assert not ref[0].all()
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(fn(X, beta, b0)[0], ref[0])


# -- the analysis ------------------------------------------------------------------------------


def test_sums_bound_cancellation_absolutely():
    # add(y, 1e20, -1e20) for y in [0, 1e4] is 0 or 16384 in floats (1e20's ulp is
    # 16384): the interval must hold what rounding gives, not only the exact [0, 1e4]
    x = pt.scalar("x")
    out = pt.add(pt.sqr(x), 1e20, -1e20)
    [fact] = evaluate([out], {x: 100.0})
    rounded = (np.float64(9000.0) + 1e20) - 1e20
    assert rounded == 16384.0 and fact.lo <= 0.0 and rounded <= fact.hi and not fact.nan


def test_float32_is_not_reasoned_about():
    x = pt.vector("x", dtype="float32")
    [fact] = evaluate([pt.sigmoid(x) >= 0], {x: 10.0})
    assert fact.constant() is None


def test_sin_of_an_infinite_input_may_be_nan():
    x = pt.vector("x")
    [fact] = evaluate([pt.sin(pt.exp(x))], {x: 1000.0})
    assert fact.nan  # exp(1000) is inf, sin(inf) is NaN
    [fact] = evaluate([pt.le(pt.sigmoid(pt.sin(x) * 3.0), 1)], {x: 1e300})
    assert fact == Fact(1.0, 1.0, False)


def test_exp_near_underflow_may_be_zero():
    x = pt.vector("x")
    [fact] = evaluate([pt.eq(pt.exp(x), 0)], {x: 700.0})
    assert fact.constant() == 0.0
    [fact] = evaluate([pt.eq(pt.exp(x), 0)], {x: 740.0})  # exp(-740) is subnormal
    assert fact.constant() is None


def test_masked_readers_need_a_false_mask():
    x, g = pt.vector("x"), pt.vector("g")
    mask = pt.eq(pt.exp(x), 0)
    masked = mask * pt.neq(g, 0)
    fg = pytensor.graph.fg.FunctionGraph([x, g], [masked], clone=False)
    decision = masked.owner.inputs[1]
    assert envelope_guards._masked_readers(fg, decision, {x: 100.0, g: 1.0}) == [masked]
    assert envelope_guards._masked_readers(fg, decision, {x: 1e300, g: 1.0}) is None


def test_a_dot_product_bounds_k_terms():
    # each product is finite, their sum over K = 1000 terms overflows: maybe inf - inf
    A = pt.matrix("A", shape=(None, 1000))
    b = pt.vector("b", shape=(1000,))
    [fact] = evaluate([A @ b], {A: 1e154, b: 1e154})
    assert fact.nan
    [fact] = evaluate([A @ b], {A: 1e100, b: 1e100})
    assert not fact.nan and fact.hi >= 1000 * 1e200


def test_a_sum_of_positive_terms_keeps_its_lower_bound():
    # 3 + x*x >= 3 (PyMC's HSGP: pow(3 + ..., -2.5) needs a base away from 0)
    x = pt.scalar("x")
    [fact] = evaluate([3.0 + pt.sqr(x)], {x: 100.0})
    assert 2.99 < fact.lo <= 3.0


def test_the_log_of_a_zero_is_minus_infinity():
    # libm's log(0) is -inf where math.log raises: an input the analysis bounds to [0, 0]
    x = pt.vector("x")
    [fact] = evaluate([pt.log(pt.sqr(x) * 0.0)], {x: 100.0})
    assert fact == Fact(-math.inf, -math.inf, False)
    [fact] = evaluate([pt.exp(pt.log(pt.sqr(x) * 0.0))], {x: 100.0})
    assert fact.constant() == 0.0


def log_of_zero_graph():
    """A decision reading an opaque copy (a product of computed operands) and the log of a
    value that is 0 (PyMC's Truncated logp at ``lower=0``, test_truncated_multiple_rngs)."""
    X, b, y = pt.matrix("X", shape=(None, 8)), pt.vector("b", shape=(8,)), pt.vector("y")
    eta = pt.sin(X * 3.0) @ b
    ok = pt.le(pt.sigmoid(eta) + pt.exp(pt.log(pt.sqr(y) * 0.0)), 2.0)
    return [X, b, y], [ok, pt.switch(ok, eta, 0.0).sum()]


def test_a_decision_reading_the_log_of_a_zero_is_guarded():
    # the analysis raised (math domain error): no guard, a PassErrorWarning, the copy
    # recomputed at every call
    with warnings.catch_warnings(), pytensor.config.change_flags(on_opt_error="raise"):
        warnings.simplefilter("error", PassErrorWarning)
        fn = compile_fn(*log_of_zero_graph(), "policy_default")
    ref = compile_fn(*log_of_zero_graph(), "unoptimized_strict")
    [guard] = guard_nodes(fn)
    assert guard.op.outcomes == (True,)
    rng = np.random.default_rng(4)
    for X, b, y in [
        (rng.normal(size=(5, 8)), rng.normal(size=8), rng.normal(size=5)),
        (np.full((2, 8), 1e200), np.ones(8), np.zeros(2)),  # outside the box: the slow path
    ]:
        got, want = fn(X, b, y), ref(X, b, y)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_the_guard_pickles():
    import pickle

    [guard] = guard_nodes(hsgp_fn("policy_as_written"))
    copy = pickle.loads(pickle.dumps(guard.op))
    assert copy == guard.op and hash(copy) == hash(guard.op)
    assert copy.bounds == guard.op.bounds and copy.outcomes == guard.op.outcomes


def test_a_draw_is_never_put_behind_a_guard():
    # the slow path runs only sometimes: a draw or an in-place update there would too
    x = pt.vector("x")
    rng = pytensor.shared(np.random.default_rng(0))
    draw = pt.random.normal(x, rng=rng)
    assert envelope_guards._runs_once(draw.owner)
    assert not envelope_guards._runs_once(pt.exp(x).owner)


# --- the slow path compiled on demand (settings.SLOW_PATH) -------------------------------


def out_of_box_inputs():
    X, beta, b0 = inputs()
    beta[3] = np.inf
    return X, beta, b0


def check_decisions(fn, args):
    ref = hsgp_fn("unoptimized_strict")(*args)
    res = fn(*args)
    np.testing.assert_array_equal(res[0], ref[0])
    assert np.isneginf(res[1]) == np.isneginf(ref[1])


def test_the_slow_path_is_compiled_when_a_call_first_leaves_the_box():
    """The function's IR calls the slow path by name and holds none of it (no libm sin:
    only the slow path's strict basis calls it); nothing of it runs or compiles until a
    call leaves the box; then the decisions are the reference's."""
    from conftest import final_ir
    from ptnumba_codegen.as_written import lowering
    from ptnumba_codegen.runtime import python_callbacks

    fn = compile_fn(*hsgp_graph(), "policy_as_written", inspect_ir=True)
    [guard] = guard_nodes(fn)
    symbol = lowering.SLOW_PATH_SYMBOLS[guard]
    args = inputs()
    assert in_box(args)
    check_decisions(fn, args)
    ir = final_ir(fn)
    assert f"@{symbol}(" in ir
    assert "@sin(" not in ir and "@llvm.sin" not in ir
    entry = python_callbacks._REGISTERED[symbol]
    assert entry.fn.signatures == []  # the slow path's dispatcher has compiled nothing
    calls = python_callbacks.calls(symbol)
    check_decisions(fn, out_of_box_inputs())
    assert python_callbacks.calls(symbol) == calls + 1 and len(entry.fn.signatures) == 1


def test_a_raising_slow_path_raises_in_the_call(monkeypatch):
    from ptnumba_codegen.as_written import lowering
    from ptnumba_codegen.runtime import python_callbacks

    fn = hsgp_fn("policy_as_written")
    [guard] = guard_nodes(fn)
    entry = python_callbacks._REGISTERED[lowering.SLOW_PATH_SYMBOLS[guard]]

    def broken(*values):
        raise FloatingPointError("slow path")

    monkeypatch.setattr(entry, "fn", broken)
    with pytest.raises(RuntimeError, match="envelope guard's slow path"):
        fn(*out_of_box_inputs())
    monkeypatch.undo()
    check_decisions(fn, out_of_box_inputs())


def test_the_linked_slow_path_decides_the_same(monkeypatch):
    from ptnumba_codegen.as_written import lowering
    from ptnumba_codegen.settings import SLOW_PATH

    monkeypatch.setenv(SLOW_PATH.env, "linked")
    fn = compile_fn(*hsgp_graph(), "policy_as_written")
    [guard] = guard_nodes(fn)
    assert guard not in lowering.SLOW_PATH_SYMBOLS
    check_decisions(fn, out_of_box_inputs())
    check_decisions(fn, inputs())


SLOW_PATH_PROBE = r"""
import sys
from pathlib import Path
import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
sys.path.insert(0, sys.argv[2])
numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
from test_envelope_guards import hsgp_graph, guard_nodes
from conftest import compile_fn
from ptnumba_codegen.as_written import lowering
from ptnumba_codegen.runtime import python_callbacks
args = np.load(Path(sys.argv[1]) / "args.npz")
with pytensor.config.change_flags(numba__cache=True):
    fn = compile_fn(*hsgp_graph(), "policy_as_written")
    ok, logp = fn(args["X"], args["beta"], args["b0"])
[guard] = guard_nodes(fn)
calls = python_callbacks.calls(lowering.SLOW_PATH_SYMBOLS[guard])
print("PROBE", calls, ok.astype(int).tolist(), float(logp))
"""


def test_a_second_process_binds_the_cached_functions_call(tmp_path):
    """The function on PyTensor's disk cache refers to the slow path by name only: a second
    process loads it, binds the name again and gets the same decisions outside the box."""
    from pathlib import Path

    from conftest import second_process_line

    X, beta, b0 = out_of_box_inputs()
    np.savez(tmp_path / "args.npz", X=X, beta=beta, b0=b0)
    tests = Path(__file__).parent
    cold = second_process_line(SLOW_PATH_PROBE, [tmp_path, tests], "PROBE")
    warm = second_process_line(SLOW_PATH_PROBE, [tmp_path, tests], "PROBE")
    assert cold == warm
    assert cold.split()[1] == "1"
    ref = hsgp_fn("unoptimized_strict")(X, beta, b0)
    assert cold.split(" ", 2)[2].startswith(str(ref[0].astype(int).tolist()))
