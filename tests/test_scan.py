"""Scan under the policy: inner graphs get the policy's kernels, Scans of 0-d kernels run as
one loop over native scalars (`backend.scalar_scan`), and both agree with stock numba
strict: decisions exactly (ties in the inner graph included), values within a tight
tolerance."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.scan.op import Scan

from ptnumba_codegen.backend.dispatch import fallback_reason
from ptnumba_codegen.backend.ops import is_policy_op
from ptnumba_codegen.tools.scan_workloads import WORKLOADS
from tests.conftest import compile_fn

RTOL = 1e-11


def scans(fn):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, Scan)]


def kernel_nodes(fgraph):
    """The inner nodes that are kernels (not the boundary copies Scan inserts)."""
    return [n for n in fgraph.toposort() if type(n.op).__name__ not in ("DeepCopyOp", "ScalarFromTensor", "TensorFromScalar")]


def workload_fn(key, backend):
    w = WORKLOADS[key]
    inputs, outputs = w.build()
    return compile_fn(inputs, outputs, backend, cache_key=f"scan-{key}")


def assert_close(res, ref, rtol=RTOL):
    for r, e in zip(res, ref, strict=True):
        np.testing.assert_allclose(np.asarray(r), np.asarray(e), rtol=rtol, atol=0)


@pytest.mark.parametrize("key", ["garch", "lv", "hmm"])
def test_workloads_agree_with_stock_strict(key):
    values = WORKLOADS[key].make_inputs()
    ref = workload_fn(key, "stock_strict")(*values)
    res = workload_fn(key, "policy_rewritten")(*values)
    assert_close(res, ref)


@pytest.mark.parametrize("key", ["garch", "lv"])
def test_scalar_scans_compile_as_policy_loops(key):
    fn = workload_fn(key, "policy_rewritten")
    found = scans(fn)
    assert len(found) == 2  # the recursion and its gradient
    for node in found:
        assert is_policy_op(node.op), node.op
        assert fallback_reason(node) is None
        inner = kernel_nodes(node.op.fgraph)
        assert inner and all(is_policy_op(n.op) for n in inner), [n.op for n in inner]
    # and stock stays stock
    assert not any(is_policy_op(n.op) for n in scans(workload_fn(key, "stock_strict")))


def test_vector_scan_inner_graph_gets_policy_kernels():
    """The HMM's state is a vector: the Scan keeps the stock loop, its inner kernels are
    the policy's."""
    fn = workload_fn("hmm", "policy_rewritten")
    found = scans(fn)
    assert found
    for node in found:
        assert not is_policy_op(node.op)
        assert "not a 0-d number" in fallback_reason(node)
        inner = [n for n in kernel_nodes(node.op.fgraph) if type(n.op).__name__ in ("Elemwise", "FusedElemwise", "CAReduce", "Sum", "Max")]
        assert inner and all(is_policy_op(n.op) for n in inner), [n.op for n in inner]


# --- ties in the inner graph -------------------------------------------------------------


def _tie_graph():
    """A carried product p_t = p_{t-1} r_t (it keeps the step inside the Scan) and, each
    step, minimum(p_t*y*z*w, b): the seed example's decision in the inner graph."""
    r, y, z, w, b = xs = pt.vectors("r", "y", "z", "w", "b")
    p0 = pt.dscalar("p0")

    def step(r, y, z, w, b, p):
        p_new = p * r
        return p_new, pt.minimum(p_new * y * z * w, b)

    _, m = pytensor.scan(step, sequences=xs, outputs_info=[p0, None], return_updates=False)
    total = m.sum()
    return [*xs, p0], [total, *pytensor.grad(total, [y, b])]


def _tie_values(n=64, seed=0):
    rng = np.random.default_rng(seed)
    r = rng.uniform(0.9, 1.1, n)
    y, z = (rng.uniform(0.5, 1.5, n) for _ in range(2))
    w = rng.uniform(100, 500, n)
    p = np.cumprod(r)  # p_t = p_{t-1} * r_t from p0 = 1, one rounding a step, as the Scan
    b = ((p * y) * z) * w  # exactly the left-associated product: every element a tie
    return [r, y, z, w, b, np.array(1.0)]


@pytest.fixture(scope="module")
def tie_results():
    inputs, outputs = _tie_graph()
    values = _tie_values()
    return {
        b: (compile_fn(inputs, outputs, b, cache_key="scan-tie"), compile_fn(inputs, outputs, b, cache_key="scan-tie")(*values))
        for b in ("stock_strict", "stock_fast", "policy_rewritten")
    }


def test_tie_in_scan_decides_as_stock_strict(tie_results):
    _, ref = tie_results["stock_strict"]
    fn, res = tie_results["policy_rewritten"]
    assert all(is_policy_op(n.op) for n in scans(fn))  # the scalar loop decided
    # the decision: which of the product and b the minimum (and its gradient) took
    np.testing.assert_array_equal(res[1] == 0, ref[1] == 0)
    np.testing.assert_array_equal(res[2] == 0, ref[2] == 0)
    assert_close(res, ref)


def test_tie_graph_is_a_real_tie(tie_results):
    """Strict takes the product at every tie; stock's fast flags flip some of them."""
    _, ref = tie_results["stock_strict"]
    assert (ref[2] == 0).all() and (ref[1] != 0).all()
    _, fast = tie_results["stock_fast"]
    assert (fast[1] == 0).any()


# --- buffer layouts: taps, nit-sot, truncated storage, n_steps 0 and 1 ------------------


@pytest.fixture(scope="module")
def layout_fns():
    n = pt.iscalar("n")
    x0, x1, c = pt.dscalars("x0", "x1", "c")
    seq = pt.dvector("seq")

    def step(s, xm2, xm1, c):
        nxt = 0.5 * xm1 - 0.3 * xm2 + c * pt.tanh(s)
        return nxt, nxt * nxt  # mit-sot, nit-sot

    (xs, sq) = pytensor.scan(
        step,
        sequences=[seq],
        outputs_info=[dict(initial=pt.stack([x0, x1]), taps=[-2, -1]), None],
        non_sequences=[c],
        n_steps=n,
        return_updates=False,
    )
    last = xs[-1]  # only the last value: PyTensor truncates the buffer (circular storage)
    outs = [xs, sq, last, pytensor.grad(xs.sum() + sq.sum(), [x0, x1, c])[2]]
    both = {b: compile_fn([n, x0, x1, c, seq], outs, b, cache_key="scan-layout") for b in ("stock_strict", "policy_rewritten")}
    last_only = {b: compile_fn([n, x0, x1, c, seq], [last], b, cache_key="scan-layout-last") for b in ("stock_strict", "policy_rewritten")}
    return both, last_only


@pytest.mark.parametrize("steps", [1, 2, 7, 40])
def test_taps_nitsot_truncation_agree(layout_fns, steps):
    both, last_only = layout_fns
    seq = np.linspace(-1, 2, 40)
    args = (np.int32(steps), 0.3, -0.7, 1.3, seq)
    for fns in (both, last_only):
        assert any(is_policy_op(n.op) for n in scans(fns["policy_rewritten"]))
        assert_close(fns["policy_rewritten"](*args), fns["stock_strict"](*args))


def test_node_that_fails_to_compile_runs_stock(monkeypatch):
    """A kernel whose body fails (forced here) runs the stock kernel for that node, on 0-d
    arrays, inside the scalar loop; the results stay stock strict's."""
    import ptnumba_codegen.lowering.kernel as kernel

    monkeypatch.setattr(kernel, "dry_run", lambda emit, types: "forced by the test")
    w = WORKLOADS["garch"]
    inputs, outputs = w.build()
    fn = compile_fn(inputs, outputs, "policy_rewritten", inspect_ir=True)  # no disk cache
    values = w.make_inputs()
    res = fn(*values)
    assert all(is_policy_op(n.op) for n in scans(fn))
    ref = workload_fn("garch", "stock_strict")(*values)
    assert_close(res, ref, rtol=1e-9)  # stock kernels of the default policy's flag sets
