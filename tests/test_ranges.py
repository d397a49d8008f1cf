"""Forward intervals (`ptnumba_codegen.analysis.ranges`, `graph_ranges`): a predicate fixed on a
value's interval needs only the value's NaN pattern. What it buys: PyMC's Categorical
checks ``0 <= p <= 1`` and ``|sum(p) - 1| <= 1e-5`` on softmax rows leave the exps free.
What it must never do: decide differently from stock strict -- at ties, at the
overflow/underflow thresholds, on NaN/inf rows -- or treat a predicate on a *sum* as a
predicate on its terms (``sum(tanh(x)) <= 1`` is not ``tanh(x) <= 1``).
"""

from __future__ import annotations

import math

import numpy as np
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest

from conftest import compile_fn, policy_nodes
from ptnumba_codegen.analysis.classify import analyze
from ptnumba_codegen.backend.plans import plan_node
from ptnumba_codegen.lowering.vecmath.libmvec import vector_call_available
from ptnumba_codegen.analysis.program import from_scalar_op
from ptnumba_codegen.analysis.ranges import (
    Reduced,
    program_ranges,
    reduced_range,
    reduction_needs,
    settle,
)
from ptnumba_codegen.analysis.robust import EXACT, NAN, cmp

INF = math.inf
needs_vm = pytest.mark.skipif(not vector_call_available("exp", "float64"), reason="no libmvec / AVX2")


# -- pure Python: the rules ---------------------------------------------------------------


def test_settle_fixes_predicates_on_intervals_and_keeps_the_nan_pattern_when_it_decides():
    assert settle(cmp("ge", 0.0), (0.0, 1.0)) == NAN  # NaN >= 0 is false, the rest true
    assert settle(cmp("le", 1.0), (0.0, 1.0)) == NAN
    assert settle(cmp("eq", INF), (0.0, 1.0)) is None  # false for NaN too: nothing needed
    assert settle(cmp("ne", 2.0), (0.0, 1.0)) is None  # true for NaN and for every value
    assert settle(cmp("gt", -1.0), (0.0, 1.0)) == NAN  # true for every value, false for NaN
    assert settle(cmp("le", 0.5), (0.0, 1.0)) == cmp("le", 0.5)  # inside: undecided
    assert settle(cmp("eq", 1.0), (0.0, 1.0)) == cmp("eq", 1.0)  # an end point is reachable
    assert settle(EXACT, (0.0, 1.0)) == EXACT


def _program(inputs, outputs):
    return from_scalar_op(ps.Composite(inputs, outputs), [i.type.dtype for i in inputs])


def test_x_minus_its_max_is_nonpositive_only_for_the_same_elements():
    x, m = ps.float64("x"), ps.float64("m")
    prog = _program([x, m], [ps.exp(x - m)])
    sub, exp = (i.outputs[0] for i in prog.instrs)
    related = program_ranges(prog, (("max_of", 0, 1, (1,)),)).ranges
    assert related[sub] == (-INF, 0.0)
    assert related[exp][0] == 0.0 and 1.0 <= related[exp][1] < 1.0 + 1e-8
    assert sub not in program_ranges(prog, ()).ranges  # no relation: nothing known
    assert sub not in program_ranges(prog, (("max_of", 1, 0, (1,)),)).ranges  # m - max(m)? no


def test_a_quotient_by_the_sum_of_its_numerators_is_in_0_1():
    e, s = ps.float64("e"), ps.float64("s")
    prog = _program([e, s], [e / s])
    [div] = [i.outputs[0] for i in prog.instrs]
    facts = program_ranges(prog, (("range", 0, 0.0, 1.0), ("sum_of", 0, 1, (1,))))
    assert facts.ranges[div] == (0.0, 1.0) and facts.normalized[div] == ((1,), 1.0)
    # a numerator that may be negative: no bound
    assert div not in program_ranges(prog, (("range", 0, -1.0, 1.0), ("sum_of", 0, 1, (1,)))).ranges


def test_the_sum_of_normalized_terms_is_one_within_ulps_only_when_the_sum_cannot_overflow():
    lo, hi = reduced_range("add", (0.0, 1.0), 5, numerator_hi=1.0)
    assert 1 - 1e-14 < lo < 1 < hi < 1 + 1e-14
    # e up to inf (no max trick): sum(e) may overflow and e / inf = 0, so no bound at 1
    lo, hi = reduced_range("add", (0.0, 1.0), 5, numerator_hi=INF)
    assert lo == 0.0 and hi >= 5.0
    assert reduced_range("add", (0.0, 1.0), None, numerator_hi=1.0) == (0.0, INF)  # K unknown


def test_a_predicate_on_a_sum_is_not_a_predicate_on_its_terms():
    tanh_sum = Reduced("add", (-1.0, 1.0), 8, reduced_range("add", (-1.0, 1.0), 8))
    assert reduction_needs({cmp("le", 1.0)}, tanh_sum) == {EXACT}
    assert reduction_needs({NAN}, tanh_sum) == {NAN}  # bounded terms: no inf - inf
    unbounded = Reduced("add", (-INF, INF), None, (-INF, INF))
    assert reduction_needs({NAN}, unbounded) == {EXACT}  # inf - inf, overflow: exact
    nonneg = Reduced("add", (0.0, INF), None, (0.0, INF))
    assert reduction_needs({NAN, cmp("eq", 0.0)}, nonneg) == {NAN, cmp("eq", 0.0)}
    assert reduction_needs({cmp("ge", 0.0)}, nonneg) == {NAN}
    assert reduction_needs({cmp("eq", 0.0)}, Reduced("mul", (0.0, 1.0), 4, (-INF, INF))) == {EXACT}


def test_strict_arithmetic_passes_a_nan_pattern_on_instead_of_exact_inputs():
    a, b = ps.float64("a"), ps.float64("b")
    prog = _program([a, b], [ps.le(abs(a - 1.0), 1e-5)])
    facts = (("range", 0, 1 - 1e-14, 1 + 1e-14),)
    result = analyze(prog, (), None, facts)
    assert result.needs[prog.inputs[0]] == {NAN}  # |a - 1| <= 1e-5 is fixed on a's interval
    assert set(result.classes) == {"comparison_sensitive"}  # the ops themselves stay strict
    # without the interval the decision needs a exactly
    assert analyze(prog, (), None, ()).needs[prog.inputs[0]] == {EXACT}


# -- against stock strict ---------------------------------------------------------------


def test_sum_of_tanh_compared_with_one_equals_strict_at_ties():
    """A tie of a sum: libm's tanh values of each row add up to exactly 1.0; another tanh
    within its budget moves the sum across. The reduction keeps tanh strict."""
    x = pt.matrix("x")
    decide = pt.le(pt.tanh(x).sum(axis=1), 1.0)
    fn = compile_fn([x], decide, "policy_rewritten", cache_key="tanh_sum_tie")
    ref = compile_fn([x], decide, "stock_strict", cache_key="tanh_sum_tie")
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(3000):
        a = rng.uniform(0.01, 0.2, 7)
        b = math.atanh(1 - sum(math.tanh(v) for v in a))
        for _ in range(6):  # walk b by ulps onto the tie
            s = sum(math.tanh(v) for v in a) + math.tanh(b)
            if s == 1.0:
                break
            b = math.nextafter(b, -INF if s > 1 else INF)
        rows.append([*a, b])
    X = np.array(rows)
    np.testing.assert_array_equal(fn(X), ref(X))
    want = ref(X)
    assert want.any() and not want.all()  # both sides of the tie are taken
    [tanh] = [
        k
        for n in policy_nodes(fn)
        for i, k in zip(plan_node(n).body.program.instrs, plan_node(n).body.classes, strict=True)
        if i.op_name == "Tanh"
    ]
    assert tanh == "comparison_sensitive"


def categorical_graph(n_classes: int = 5, tol: float = 1.001e-05, max_trick: bool = True):
    """PyMC's Categorical logp on softmax rows, with its parameter checks, and gradients."""
    x = pt.tensor("x", shape=(None, n_classes))
    y = pt.lvector("y")
    if max_trick:
        p = pt.special.softmax(x, axis=-1)
    else:
        e = pt.exp(x) * 2.0  # (a bare exp(x) / sum(exp(x)) is rewritten to the softmax)
        p = e / e.sum(axis=-1, keepdims=True)
    ok = pt.all(pt.ge(p, 0)) & pt.all(pt.le(p, 1))
    s = p.sum(axis=-1)
    ok = ok & pt.all(pt.le(pt.abs(s - 1), tol) & ~(pt.isnan(s) | pt.isinf(s)))
    logp = pt.switch(ok, pt.log(p[pt.arange(y.shape[0]), y]).sum(), -np.inf)
    return [x, y], [ok, logp, pt.grad(logp, x)]


def categorical_rows(n_classes: int, rng) -> np.ndarray:
    """Rows at every boundary: NaN, +-inf entries, all -inf, huge, the exp underflow
    threshold of the differences, ties of the max, and plain random rows."""
    special = [
        [np.nan] + [0.0] * (n_classes - 1),
        [np.inf] + [0.0] * (n_classes - 1),
        [-np.inf] + [0.0] * (n_classes - 1),
        [-np.inf] * n_classes,
        [np.inf] * n_classes,
        [1e308, -1e308] + [0.0] * (n_classes - 2),
        [709.0, 709.5] + [700.0] * (n_classes - 2),
        [0.0, -745.13321910194122] + [-745.1332191019411] * (n_classes - 2),
        [0.0, -708.4] + [-744.44] * (n_classes - 2),
        [3.0] * n_classes,
        [0.0] + [-1e-300] * (n_classes - 1),
    ]
    thresholds = -745.1332191019411 + np.arange(-40, 41) * np.spacing(745.0)
    under = np.zeros((thresholds.size, n_classes))
    under[:, 1:] = thresholds[:, None]
    plain = rng.normal(0, 3, (400, n_classes))
    wide = rng.uniform(-800, 800, (200, n_classes))
    return np.concatenate([np.array(special, dtype=float), under, plain, wide])


def _check_rows_one_by_one(fn, ref, X, rng):
    """Each row on its own (the check is a reduction over all rows: one NaN row decides
    for the whole batch), then the plain rows as one batch."""
    y = rng.integers(0, X.shape[1], 1)
    for row in X:
        with np.errstate(all="ignore"):
            got, want = fn(row[None], y), ref(row[None], y)
        assert bool(got[0]) == bool(want[0]), row
        for g, w in zip(got[1:], want[1:], strict=True):
            g, w = np.asarray(g, dtype=float), np.asarray(w, dtype=float)
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=str(row))
            np.testing.assert_array_equal(np.isinf(g), np.isinf(w), err_msg=str(row))
            np.testing.assert_array_equal(g == 0, w == 0, err_msg=str(row))
            finite = np.isfinite(w)
            np.testing.assert_allclose(g[finite], w[finite], rtol=1e-9, atol=1e-300)


def _exp_classes(fn) -> list[str]:
    return [
        k
        for n in policy_nodes(fn)
        for i, k in zip(plan_node(n).body.program.instrs, plan_node(n).body.classes, strict=True)
        if i.op_name == "Exp"
    ]


@needs_vm
def test_categorical_checks_on_softmax_rows_equal_strict_and_leave_exp_free():
    ins, outs = categorical_graph()
    fn = compile_fn(ins, outs, "policy_rewritten", cache_key="categorical")
    ref = compile_fn(ins, outs, "stock_strict", cache_key="categorical")
    rng = np.random.default_rng(11)
    X = categorical_rows(5, rng)
    _check_rows_one_by_one(fn, ref, X, rng)
    y = rng.integers(0, 5, 400)
    got, want = fn(X[-600:-200], y), ref(X[-600:-200], y)
    assert bool(got[0]) and bool(want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-9, atol=1e-300)
    classes = _exp_classes(fn)
    assert classes and "comparison_sensitive" not in classes


@needs_vm
@pytest.mark.parametrize(
    "variant, why",
    [
        (dict(max_trick=False), "no max trick: sum(exp(x)) can overflow, e / inf = 0"),
        (dict(tol=1e-17), "a tolerance below the rounding of the sums"),
    ],
)
def test_categorical_checks_that_depend_on_rounding_keep_exp_strict(variant, why):
    ins, outs = categorical_graph(**variant)
    fn = compile_fn(ins, outs, "policy_rewritten", cache_key=("categorical", tuple(variant.items())))
    ref = compile_fn(ins, outs, "stock_strict", cache_key=("categorical", tuple(variant.items())))
    rng = np.random.default_rng(12)
    X = categorical_rows(5, rng)
    _check_rows_one_by_one(fn, ref, X[:120], rng)
    assert "comparison_sensitive" in _exp_classes(fn), why


def test_a_scatter_add_output_holds_the_targets_values_not_the_bodys():
    """``inc_subtensor(t[idx], exp(x))`` is t plus exps: no [0, inf] interval for it, so a
    decision on it (``>= 0``, a tie when t = -exp(x)) keeps exp strict."""
    from ptnumba_codegen.analysis.graph_ranges import graph_facts

    x, t, idx = pt.vector("x"), pt.vector("t"), pt.lvector("idx")
    out = pt.inc_subtensor(t[idx], pt.exp(x))
    fn = compile_fn([x, idx, t], [out, pt.ge(out, 0)], "policy_rewritten", cache_key="scatter_range")
    ref = compile_fn([x, idx, t], [out, pt.ge(out, 0)], "stock_strict", cache_key="scatter_range")
    [kernel] = [n for n in fn.maker.fgraph.toposort() if getattr(n.op, "indexed_outputs", None)]
    assert graph_facts(fn.maker.fgraph).vars.get(kernel.outputs[0]) is None
    assert "comparison_sensitive" in _exp_classes(fn)
    xv = np.random.default_rng(2).uniform(-3, 3, 500)
    tv = -np.exp(xv) * (1 + np.random.default_rng(3).integers(-2, 3, 500) * 2.0**-52)  # ties, ulps off
    ix = np.arange(500)
    got, want = fn(xv, ix, tv), ref(xv, ix, tv)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])
    assert want[1].any() and not want[1].all()


def test_no_nan_pattern_passes_through_ops_whose_strict_flags_drop_nan_semantics(tmp_path):
    """Under a policy whose comparison-sensitive class carries ``nnan``, a strict Sub may
    fold away the NaN it would pass on: its operands are needed exactly again."""
    from ptnumba_codegen.analysis.classify import relaxable_under
    from ptnumba_codegen.policy import load_policy

    path = tmp_path / "nnan_strict.toml"
    path.write_text('extends = "rewritten"\n[classes.comparison_sensitive]\nflags = ["nnan"]\n')
    a = ps.float64("a")
    prog = _program([a], [ps.le(abs(a - 1.0), 1e-5)])
    facts = (("range", 0, 1 - 1e-14, 1 + 1e-14),)
    default = analyze(prog, (), relaxable_under(prog, load_policy("rewritten")), facts)
    assert default.needs[prog.inputs[0]] == {NAN}
    nnan = analyze(prog, (), relaxable_under(prog, load_policy(str(path))), facts)
    assert nnan.needs[prog.inputs[0]] == {EXACT}
