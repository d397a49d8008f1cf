"""A generator failure while numba compiles a kernel (the function's first call) becomes a
fallback of that node to the stock kernel, with the reason recorded: the user gets stock's
result, not the exception."""

import logging

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest

import ptnumba_codegen
from conftest import assert_no_fallback, assert_same_bits, compile_fn, policy_nodes
from ptnumba_codegen.lowering import rules


@pytest.fixture
def broken_exp(monkeypatch):
    """Exp's rule plans fine, then raises inside the kernel's codegen."""

    def plan(t):
        def emit(context, builder, args, flags):
            raise RuntimeError("injected codegen failure")

        return emit

    plan.kind = "broken"
    monkeypatch.setitem(rules.RULES, ps.Exp, plan)


def _compile(inputs, outputs):
    # never into PyTensor's disk cache: a later run must not load this stock fallback
    with pytensor.config.change_flags(numba__cache=False):
        return pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode("rewritten"))


def test_a_codegen_error_falls_back_to_stock_with_the_reason(broken_exp, caplog):
    x, y = pt.vectors("x", "y")
    outs = [pt.exp(x) * y + 1.0, (x - y).sum()]
    fn = _compile([x, y], outs)
    v = [np.linspace(-2, 2, 11), np.linspace(1, 3, 11)]
    with caplog.at_level(logging.INFO, logger="ptnumba_codegen"):
        res = fn(*v)  # the first call compiles: no exception
    ref = compile_fn([x, y], outs, "stock_strict", cache_key="fallback_ref")(*v)
    for a, b in zip(res, ref, strict=True):
        assert_same_bits(a, b)

    reasons = {str(n.op): ptnumba_codegen.fallback_reason(n) for n in policy_nodes(fn)}
    broken = [r for r in reasons.values() if r]
    assert len(broken) == 1 and "RuntimeError: injected codegen failure" in broken[0], reasons
    assert sum(r is None for r in reasons.values()) == len(reasons) - 1  # the sum is ours
    logged = [r.getMessage() for r in caplog.records if "falls back to the stock kernel" in r.getMessage()]
    assert any("injected codegen failure" in m for m in logged), logged
    report = ptnumba_codegen.explain(fn)
    assert "FALLBACK to the stock kernel (at compile time)" in report and "injected codegen failure" in report


def test_explain_compiles_first_so_the_fallback_shows_before_any_call(broken_exp):
    x = pt.vector("x")
    fn = _compile([x], pt.exp(x) * 2.0)
    assert "injected codegen failure" in ptnumba_codegen.explain(fn)
    np.testing.assert_allclose(fn(np.array([0.0, 1.0])), [2.0, 2 * np.e])


def test_a_scalar_kernel_falls_back_too(broken_exp):
    x = ps.float64("x")
    fn = _compile([x], ps.exp(x) * 2.0)
    assert fn(1.0) == pytest.approx(2 * np.e, rel=1e-15)
    [node] = [n for n in policy_nodes(fn) if ptnumba_codegen.fallback_reason(n)]
    assert "injected codegen failure" in ptnumba_codegen.fallback_reason(node)


def _glmm_graph():
    """A GLMM's residual: a gather, native scalars (one float32) and a boolean indicator
    vector in one indexed FusedElemwise, whose loop is PyTensor's around the generator's
    scalar core: it compiles and runs, with no ``Can only insert i1 ... got i8`` at the first
    call."""
    a, y = pt.vectors("a", "y")
    b, s = pt.scalars("b", "s")
    f32 = pt.scalar("f", dtype="float32")
    idx = pt.lvector("idx")
    ind = pt.vector("ind", dtype="bool")
    inputs = [a, b, idx, s, f32, ind, y]
    outs = [
        ((y - a[idx] * f32 - b * ind + s) ** 2).sum(),
        ((y - a[idx] * f32 - pt.switch(ind, b, s)) ** 2).sum(),
    ]
    outs += pytensor.grad(outs[0] + outs[1], [a, b, s])
    rng = np.random.default_rng(0)
    values = [rng.normal(size=10), 0.3, rng.integers(0, 10, 50), 0.7, np.float32(1.5), rng.random(50) < 0.5, rng.normal(size=50)]
    return inputs, outs, values


@pytest.mark.parametrize("policy", ["strict", "rewritten"])
def test_an_indexed_loop_with_a_boolean_vector_runs_our_core(policy):
    inputs, outs, values = _glmm_graph()
    fn = compile_fn(inputs, outs, f"policy_{policy}", cache_key="glmm_bool")
    res = fn(*values)
    ref = compile_fn(inputs, outs, "stock_strict", cache_key="glmm_bool")(*values)
    assert_no_fallback(fn)
    for r, e in zip(res, ref, strict=True):
        if policy == "strict":
            assert_same_bits(r, e)
        else:
            np.testing.assert_allclose(r, e, rtol=1e-12)


def test_a_failure_around_our_core_falls_back_at_compile_time(monkeypatch):
    """The stock indexing loop around a generated scalar core fails to compile: the node's
    kernel becomes the stock one when numba compiles the function, never an exception."""
    from pytensor.link.numba.dispatch import vectorize_codegen

    make_loop_call = vectorize_codegen.make_loop_call

    def broken(typingctx, context, builder, core_func, *args, **kwargs):
        if "policy_" in str(core_func):  # our scalar core, not the stock fallback's
            raise TypeError("injected failure around the scalar core")
        return make_loop_call(typingctx, context, builder, core_func, *args, **kwargs)

    monkeypatch.setattr(vectorize_codegen, "make_loop_call", broken)
    inputs, outs, values = _glmm_graph()
    fn = _compile(inputs, outs)
    res = fn(*values)  # the first call compiles: no exception
    ref = compile_fn(inputs, outs, "stock_strict", cache_key="glmm_bool")(*values)
    for r, e in zip(res, ref, strict=True):
        assert_same_bits(r, e)
    reasons = [ptnumba_codegen.fallback_reason(n) for n in policy_nodes(fn)]
    around = [r for r in reasons if r and "policy_stock_loop failed to compile" in r]
    assert around and all("injected failure around the scalar core" in r for r in around), reasons
