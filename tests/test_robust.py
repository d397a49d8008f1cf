"""Robust decisions (`ptnumba_codegen.analysis.robust`): a decision whose outcome cannot depend on
how its producer rounds leaves the producer free (vectorized), and still equals stock
strict element for element. Every row of the table is checked at its boundaries: special
values, the underflow/overflow thresholds of libm, their ulp neighbours, random inputs.
"""

from __future__ import annotations

import numpy as np
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest

from conftest import compile_fn, policy_nodes
from ptnumba_codegen.analysis.classify import analyze
from ptnumba_codegen.backend.plans import plan_node
from ptnumba_codegen.lowering.vecmath.libmvec import vector_call_available
from ptnumba_codegen.policy import load_policy
from ptnumba_codegen.analysis.program import from_scalar_op
from ptnumba_codegen.analysis.robust import RULES

F = "float64"


def classes(inputs, outputs, policy=None):
    prog = from_scalar_op(ps.Composite(inputs, outputs), [i.type.dtype for i in inputs])
    relax = None
    if policy is not None:
        from ptnumba_codegen.analysis.classify import relaxable_under

        relax = relaxable_under(prog, policy)
    result = analyze(prog, (), relax)
    return {i.op_name: c for i, c in zip(prog.instrs, result.classes)}, result


# -- the analysis (pure Python) ----------------------------------------------------------


def test_sigmoid_range_checks_leave_sigmoid_free_and_its_input_exact():
    a, b = ps.float64("a"), ps.float64("b")
    s = ps.sigmoid(a - b)
    table, _ = classes([a, b], [ps.and_(ps.ge(s, 0.0), ps.le(s, 1.0))])
    assert table["Sigmoid"] == "transcendental"
    assert table["Sub"] == "comparison_sensitive"  # its NaN pattern decides


def test_a_threshold_inside_the_range_keeps_the_producer_strict():
    a = ps.float64("a")
    table, _ = classes([a], [ps.ge(ps.sigmoid(a), 0.5)])
    assert table["Sigmoid"] == "comparison_sensitive"


def test_general_thresholds_stay_strict_the_seed():
    x, y, z, w, b = (ps.float64(n) for n in "xyzwb")
    table, _ = classes([x, y, z, w, b], [ps.le(ps.mul(x, y, z, w), b)])
    assert table["Mul"] == "comparison_sensitive"


@pytest.mark.parametrize(
    "build, free, exact",
    [
        (lambda x: ps.eq(ps.exp(x * 2.0), 0.0), "Exp", "Mul"),  # underflow: x itself exact
        (lambda x: ps.eq(ps.log(x * 2.0), -np.inf), "Log", "Mul"),  # log == -inf <=> x == 0
        (lambda x: ps.eq(-ps.softplus(x * 2.0), -np.inf), "Softplus", "Mul"),
        (lambda x: ps.isnan(ps.tanh(x * 2.0)), "Tanh", "Mul"),
        (lambda x: ps.eq(ps.log(x + 2.0), np.inf), "Log", "Add"),  # log == inf <=> x == inf
    ],
)
def test_special_value_rules(build, free, exact):
    x = ps.float64("x")
    table, _ = classes([x], [build(x)])
    assert table[free] != "comparison_sensitive"
    assert table[exact] == "comparison_sensitive"


def test_a_product_by_minus_one_negates_exactly_and_others_stay_strict():
    """PyMC's ``-1 * log(x) == -inf``: the product by -1 and the log leave the cone (log ==
    inf asks x == inf); by -2 the product rounds, so it and the log stay strict."""
    x = ps.float64("x")
    table, _ = classes([x], [ps.eq(ps.mul(-1.0, ps.log(x + 2.0)), -np.inf)])
    assert table["Mul"] != "comparison_sensitive" and table["Log"] == "transcendental"
    assert table["Add"] == "comparison_sensitive"  # x + 2 == inf: exact
    table, _ = classes([x], [ps.eq(ps.mul(ps.log(x + 2.0), -1.0), -np.inf)])
    assert table["Log"] == "transcendental"  # either operand order
    table, _ = classes([x], [ps.eq(ps.mul(-2.0, ps.log(x + 2.0)), -np.inf)])
    assert table["Mul"] == "comparison_sensitive" and table["Log"] == "comparison_sensitive"
    y = ps.float64("y")
    table, _ = classes([x, y], [ps.eq(ps.mul(y, ps.log(x)), -np.inf)])
    assert table["Log"] == "comparison_sensitive"  # a computed factor: no rule


def test_rules_do_not_apply_under_flags_that_break_nan_semantics(tmp_path):
    path = tmp_path / "nnan.toml"
    path.write_text('extends = "rewritten"\n[classes.transcendental]\nflags = ["nnan", "afn"]\n')
    a = ps.float64("a")
    graph = ([a], [ps.ge(ps.sigmoid(a), 0.0)])
    assert classes(*graph, policy=load_policy("rewritten"))[0]["Sigmoid"] == "transcendental"
    assert classes(*graph, policy=load_policy(str(path)))[0]["Sigmoid"] == "comparison_sensitive"


def test_every_rule_is_listed_in_the_docs():
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[1] / "docs" / "policies.md").read_text()
    for op_class in RULES:
        assert f"`{op_class.__name__}`" in guide, op_class.__name__


# -- the numbers: every decision equals stock strict ------------------------------------

pytestmark_vm = pytest.mark.skipif(
    not vector_call_available("exp", "float64"), reason="no libmvec / AVX2 on this machine"
)


def _switch_point(f, lo, hi, dtype, n=60):
    """``n`` ulp neighbours each side of where the boolean ``f`` changes on [lo, hi]."""
    a, b = np.array(lo, dtype=dtype)[()], np.array(hi, dtype=dtype)[()]
    fa = f(a)
    while True:
        mid = np.array((float(a) + float(b)) / 2, dtype=dtype)[()]
        if mid in (a, b):
            break
        if f(mid) == fa:
            a = mid
        else:
            b = mid
    return a + np.arange(-n, n + 1, dtype=dtype) * np.spacing(a)


def _exp_is_zero(x):
    with np.errstate(all="ignore"):
        return bool(np.exp(x) == 0)


def _exp_is_inf(x):
    with np.errstate(all="ignore"):
        return bool(np.isinf(np.exp(x)))


def boundary_inputs(dtype: str) -> np.ndarray:
    rng = np.random.default_rng(42)
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -5e-324, 1e-310, -1e-310,
               2.2250738585072014e-308, 1e-300, -1e-300, 1e-40, -1e-40, 1.0, -1.0, 33.3, 37.0,
               -37.0, 18.0, 1e308, -1e308, 3e38, -3e38, 19.1, -19.1, 5.9, 6.0, 26.5, 27.0, -27.0]  # fmt: skip
    under = _switch_point(_exp_is_zero, -800.0 if dtype == "float64" else -110.0, -700.0 if dtype == "float64" else -90.0, dtype)
    over = _switch_point(_exp_is_inf, 700.0 if dtype == "float64" else 80.0, 720.0 if dtype == "float64" else 95.0, dtype)
    with np.errstate(all="ignore"):
        special = np.array(special).astype(dtype)
    mid = rng.uniform(-50, 50, 400).astype(dtype)
    wide = rng.uniform(-800, 800, 400).astype(dtype)
    return np.concatenate([special, under, over, -under, -over, mid, wide]).astype(dtype)


def decision_graph(dtype):
    """Every row of the table, as decisions on one input vector (the producers get an
    input of their own so that nothing but the decision can make them strict)."""
    x = pt.vector("x", dtype=dtype)
    decisions = {
        "sigmoid>=0": pt.ge(pt.sigmoid(x), 0),
        "sigmoid<=1": pt.le(pt.sigmoid(x), 1),
        "sigmoid>-1": pt.gt(pt.sigmoid(x), -1),
        "exp>=0": pt.ge(pt.exp(x), 0),
        "exp==0": pt.eq(pt.exp(x), 0),
        "exp>0": pt.gt(pt.exp(x), 0),
        "exp==inf": pt.eq(pt.exp(x), np.inf),
        "exp!=inf": pt.neq(pt.exp(x), np.inf),
        "softplus>=0": pt.ge(pt.softplus(x), 0),
        "-softplus==-inf": pt.eq(-pt.softplus(x), -np.inf),
        "tanh<=1": pt.le(pt.tanh(x), 1),
        "tanh>=-1": pt.ge(pt.tanh(x), -1),
        "erf<=1": pt.le(pt.erf(x), 1),
        "erfc>=0": pt.ge(pt.erfc(x), 0),
        "erfc<=2": pt.le(pt.erfc(x), 2),
        "log==-inf": pt.eq(pt.log(pt.abs(x)), -np.inf),
        "log==inf": pt.eq(pt.log(pt.abs(x)), np.inf),
        "-1*log==-inf": pt.eq(pt.mul(-1.0, pt.log(pt.abs(x))), -np.inf),
        "isnan(log)": pt.isnan(pt.log(x)),
        "isnan(exp)": pt.isnan(pt.exp(x)),
        "isnan(sigmoid)": pt.isnan(pt.sigmoid(x)),
    }
    return [x], list(decisions.values()), list(decisions)


@pytestmark_vm
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_robust_decisions_equal_stock_strict_at_the_boundaries(dtype):
    ins, outs, names = decision_graph(dtype)
    fn = compile_fn(ins, outs, "policy_rewritten", cache_key=("robust", dtype))
    ref = compile_fn(ins, outs, "stock_strict", cache_key=("robust", dtype))
    vals = boundary_inputs(dtype)
    with np.errstate(all="ignore"):
        got, want = fn(vals), ref(vals)
    for name, g, w in zip(names, got, want, strict=True):
        bad = np.flatnonzero(np.asarray(g) != np.asarray(w))
        assert bad.size == 0, f"{name} {dtype}: differs at x = {vals[bad[:5]]}"
    # the decisions are not all constant: the boundaries are really crossed
    for name in ("exp==0", "exp==inf", "log==-inf", "log==inf", "-1*log==-inf", "isnan(log)", "-softplus==-inf"):
        column = np.asarray(want[names.index(name)])
        assert column.any() and not column.all(), name


@pytestmark_vm
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_producers_of_robust_decisions_are_vectorized(dtype):
    ins, outs, _ = decision_graph(dtype)
    fn = compile_fn(ins, outs, "policy_rewritten", cache_key=("robust", dtype))
    strict_transcendentals, vectorized = [], 0
    for node in policy_nodes(fn):
        body = plan_node(node).body
        for instr, klass, emitter in zip(body.program.instrs, body.classes, body.emitters, strict=True):
            if instr.op_name in ("Sigmoid", "Exp", "Softplus", "Tanh", "Erf", "Erfc", "Log"):
                vectorized += bool(getattr(emitter, "label", None))
                if klass == "comparison_sensitive":
                    strict_transcendentals.append(instr.op_name)
    assert not strict_transcendentals
    assert vectorized >= 7


@pytestmark_vm
def test_a_pymc_style_check_across_nodes_equals_strict():
    """``Check{0 <= p <= 1}`` on ``p = sigmoid(X @ b)``, the gradient using p too: the
    check runs in another node than the math; the decisions equal strict, sigmoid is free."""
    X = pt.matrix("X")
    b = pt.vector("b")
    y = pt.vector("y")
    p = pt.sigmoid(X @ b)
    ok = pt.all(pt.ge(p, 0)) & pt.all(pt.le(p, 1))
    logp = pt.switch(ok, (y * pt.log(p) + (1 - y) * pt.log1p(-p)).sum(), -np.inf)
    outs = [logp, ok, *pt.grad(logp, [b])]
    fn = compile_fn([X, b, y], outs, "policy_rewritten", cache_key="robust_check")
    ref = compile_fn([X, b, y], outs, "stock_strict", cache_key="robust_check")
    rng = np.random.default_rng(3)
    Xv, bv, yv = rng.normal(size=(500, 4)), rng.normal(size=4), rng.integers(0, 2, 500).astype(float)
    for scale in (1.0, 1e3, 1e308):
        bv_s = bv * scale
        with np.errstate(all="ignore"):
            got, want = fn(Xv, bv_s, yv), ref(Xv, bv_s, yv)
        assert bool(got[1]) == bool(want[1])
        for g, w in zip(got, want, strict=True):
            g, w = np.asarray(g, dtype=float), np.asarray(w, dtype=float)
            np.testing.assert_array_equal(np.isfinite(g), np.isfinite(w))
            np.testing.assert_allclose(g[np.isfinite(w)], w[np.isfinite(w)], rtol=1e-9)
    sig = [
        klass
        for node in policy_nodes(fn)
        for instr, klass in zip(plan_node(node).body.program.instrs, plan_node(node).body.classes, strict=True)
        if instr.op_name == "Sigmoid"
    ]
    assert sig and "comparison_sensitive" not in sig
