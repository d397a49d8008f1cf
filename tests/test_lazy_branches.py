"""Calls a Switch drops are computed only where it keeps them (`lowering.lazy_branches`):
under strict the same bits as computing them everywhere (and as stock strict); under
default the decisions of stock strict, and values within the fast-math arithmetic's
reach (LLVM contracts and reassociates the flagged arithmetic around the branch)."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import ptnumba_codegen
from conftest import compile_fn
from ptnumba_codegen.backend.plans import plan_node
from ptnumba_codegen.lowering import lazy_branches
from ptnumba_codegen.lowering.lazy_branches import ALWAYS, needed_when
from ptnumba_codegen.backend.ops import is_policy_op
from ptnumba_codegen.analysis.program import from_scalar_op


def _censored_like():
    """PyMC's censored normal in small: a lower-tail formula with erfcx (a stock call)
    for z < -1, erfc otherwise, kept only on censored rows; the gradient shares erfcx."""
    y, mu = pt.vectors("y", "mu")
    z = y - mu
    lcdf = pt.switch(pt.lt(z, -1.0), pt.log(pt.erfcx(-z / np.sqrt(2.0)) / 2.0) - z**2 / 2.0, pt.log1p(-pt.erfc(z / np.sqrt(2.0)) / 2.0))
    logp = pt.switch(pt.le(y, -1.0), lcdf, -0.5 * z**2)
    total = logp.sum()
    return [y, mu], [total, *pytensor.grad(total, [mu])]


def _values():
    rng = np.random.default_rng(11)
    y = rng.normal(size=600)
    y[::3] = -1.0  # censored rows (the Switch's tie: y == -1 is censored)
    mu = rng.normal(0.0, 1.5, size=600)
    mu[:40] = y[:40] + 1.0  # z == -1 exactly: the tie of the inner Switch
    mu[40:45] = [np.inf, -np.inf, np.nan, 40.0, -40.0]
    y[45:48] = [np.nan, np.inf, -np.inf]
    return y, mu


def _lazy_instrs(fn):
    out = {}
    for node in fn.maker.fgraph.toposort():
        if not is_policy_op(node.op):
            continue
        body = plan_node(node).body
        for k, f in body.lazy.items():
            out.setdefault(type(body.program.instrs[k].op).__name__, []).append(f)
    return out


@pytest.mark.parametrize("policy", ["policy_rewritten", "policy_strict"])
def test_lazy_calls_keep_every_bit_and_every_decision(policy, monkeypatch):
    ins, outs = _censored_like()
    fn = compile_fn(ins, outs, policy, cache_key="lazy_censored")
    lazy = _lazy_instrs(fn)
    assert "Erfcx" in lazy, lazy  # the stock call is branched around
    assert "only computed when" in ptnumba_codegen.explain(fn)
    vals = _values()
    got = fn(*vals)
    # the same kernels with every call computed everywhere: the same bits
    monkeypatch.setattr(lazy_branches, "LAZY_WHEN", (*lazy_branches.LAZY_WHEN, (lambda *a: False, "off")))
    eager = compile_fn(ins, outs, policy, cache_key="lazy_censored_eager")
    assert not _lazy_instrs(eager)
    for a, b in zip(got, eager(*vals), strict=True):
        if policy == "policy_strict":  # no flags: LLVM may not reassociate across the branch
            np.testing.assert_array_equal(np.asarray(a).view(np.uint64), np.asarray(b).view(np.uint64))
        else:  # the arithmetic after a lazy call is fast-math: LLVM's choices follow the CFG
            np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
            np.testing.assert_allclose(a, b, rtol=1e-14)
    ref = compile_fn(ins, outs, "stock_strict", cache_key="lazy_censored")(*vals)
    for a, e in zip(got, ref, strict=True):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(e))
        np.testing.assert_array_equal(a == 0, e == 0)
        np.testing.assert_allclose(a, e, rtol=1e-12)
    if policy == "policy_strict":  # strict is stock strict bit for bit, lazily or not
        for a, e in zip(got, ref, strict=True):
            np.testing.assert_array_equal(np.asarray(a).view(np.uint64), np.asarray(e).view(np.uint64))


def test_needed_when_follows_switch_arms_through_shared_values():
    """erfcx(x) feeds the true arm of switch(c2, ., 0) inside the true arm of
    switch(c1, ., log(x)), and again the false arm of switch(c3, 0, .): it is needed
    under (c1 & c2) | !c3; log(x) only under !c1; c2 under c1; c1 and c3 always."""
    from pytensor.scalar import basic as ps
    from pytensor.scalar.math import erfcx

    x = ps.float64("x")
    c1, c2, c3 = ps.gt(x, 0.0), ps.lt(x, 3.0), ps.gt(x, 5.0)
    e = erfcx(x)
    out1 = ps.switch(c1, ps.switch(c2, e, 0.0), ps.log(x))
    out2 = ps.switch(c3, 0.0, e * 2.0)
    comp = ps.Composite([x], [out1, out2])
    program = from_scalar_op(comp, ["float64"], ["float64", "float64"])
    need = needed_when(program)
    by_op = {}
    for k, instr in enumerate(program.instrs):
        by_op.setdefault(type(instr.op).__name__, []).append((k, instr))
    [(ke, _)] = by_op["Erfcx"]
    [(kl, _)] = by_op["Log"]
    gt = [i.outputs[0] for _, i in by_op["GT"]]
    [lt] = [i.outputs[0] for _, i in by_op["LT"]]
    # which GT is c1 (compared with 0) and which c3 (with 5): by the Switch that uses them
    switch_conds = [i.inputs[0] for _, i in by_op["Switch"]]
    assert set(switch_conds) == {*gt, lt}
    c1v = next(i.inputs[0] for _, i in by_op["Switch"] if i.inputs[2] == program.instrs[kl].outputs[0])
    c3v = next(v for v in gt if v != c1v)
    assert need[ke] == frozenset({frozenset({(c1v, True), (lt, True)}), frozenset({(c3v, False)})})
    assert need[kl] == frozenset({frozenset({(c1v, False)})})
    producer = program.producers()
    assert need[producer[c1v]] == need[producer[c3v]] == ALWAYS
    assert need[producer[lt]] == frozenset({frozenset({(c1v, True)})})  # c2 decides inside c1's arm only
