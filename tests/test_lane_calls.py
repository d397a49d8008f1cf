"""Lane calls (lowering/lane_calls.py): strict libm calls inside loops that vectorize.

Every lane must give scalar libm's bits, so a decision on a lane-called value equals
stock strict's at ties, and policy ``strict`` stays stock strict bit for bit, at the
branch points of stock's formulas (softplus: -37, 18, 33.3) and special values."""

from __future__ import annotations

import re

import numpy as np
import pytensor.tensor as pt
import pytest

from conftest import compile_fn, final_ir
from ptnumba_codegen.lowering.vecmath.exact_lanes import available as exact_available
from ptnumba_codegen.lowering.vecmath.libmvec import target_isa

pytestmark = pytest.mark.skipif(target_isa() is None, reason="no AVX2 / AVX-512 target")

FUNCS = {
    "exp": pt.exp,
    "log": pt.log,
    "log1p": pt.log1p,
    "expm1": pt.expm1,
    "tanh": pt.tanh,
    "sin": pt.sin,
    "cos": pt.cos,
    "softplus": pt.softplus,
    "sigmoid": pt.sigmoid,
    "erf": pt.erf,
    "erfc": pt.erfc,  # a probit link's comparison cone
}


def _values():
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 709.78, 709.79, -745.2, -745.1]
    edges = []
    for e in (-37.0, 18.0, 33.3, 1e-5, -1.0, 1.0, 0.84375, 1.25, 6.0, 28.0, -6.0):  # and erf's/erfc's
        edges += [np.nextafter(e, -np.inf), e, np.nextafter(e, np.inf)]
    rng = np.random.default_rng(3)
    rand = np.concatenate([rng.standard_normal(3000) * 20, rng.uniform(-1, 1, 1000)])
    return np.concatenate([special, edges, rand, -np.abs(rand)])


def _neighbour(vals, c):
    """A vector call outside every cone, fed by every value so it fuses into their kernel
    (lane calls are used only in bodies that also call vector functions)."""
    total = vals[0]
    for v in vals[1:]:
        total = total + v
    return pt.exp(c + 1e-3 * total)


def _graph(x, b, c):
    vals = [f(x) for f in FUNCS.values()]
    decisions = [pt.le(v, b) for v in vals]
    return [*decisions, _neighbour(vals, c)]


def test_decisions_on_lane_calls_equal_stock_strict_at_ties():
    x, b, c = pt.vectors("x", "b", "c")
    xv = _values()
    cv = np.linspace(-3, 3, xv.size)
    from conftest import policy_nodes

    fn = compile_fn([x, b, c], _graph(x, b, c), "policy_rewritten", cache_key="lane_calls", inspect_ir=True)
    ref = compile_fn([x, b, c], _graph(x, b, c), "stock_strict", cache_key="lane_calls")
    vals = compile_fn([x], [f(x) for f in FUNCS.values()], "stock_strict", cache_key="lane_calls_vals")(xv)
    for name, v in zip(FUNCS, vals, strict=True):
        bv = np.where(np.arange(xv.size) % 2 == 0, v, np.nextafter(v, -np.inf))  # ties and just below
        got, want = fn(xv, bv, cv), ref(xv, bv, cv)
        k = list(FUNCS).index(name)
        assert np.array_equal(got[k], want[k]), name
    assert len(policy_nodes(fn)) == 1  # one kernel: the cones and the vector call
    ir = final_ir(fn)
    for sym in ("exp", "log", "log1p", "expm1", "tanh", "sin", "cos", "erf", "erfc"):
        kind = "exact" if exact_available(sym, "float64") else "lanes"  # exact_lanes: libm's exp on vectors
        assert re.search(rf"<\d+ x double> @ptnumba_{kind}\d+_{sym}\(", ir), f"{sym} is not called in a vector loop"


def test_lane_called_values_are_stock_strict_bit_for_bit():
    """The values in the cones, returned as they are next to a vectorized neighbour: the
    bits of stock strict (NaN and zero signs too), at the formulas' branch points."""
    x, b, c = pt.vectors("x", "b", "c")
    vals = [f(x) for f in FUNCS.values()]
    outs = [*vals, *[pt.le(v, b) for v in vals], _neighbour(vals, c)]
    xv = _values()
    bv, cv = np.zeros_like(xv), np.linspace(-3, 3, xv.size)
    fn = compile_fn([x, b, c], outs, "policy_rewritten", cache_key="lane_calls_values", inspect_ir=True)
    got = fn(xv, bv, cv)
    want = compile_fn([x], vals, "stock_strict", cache_key="lane_calls_vals")(xv)
    for name, g, w in zip(FUNCS, got[: len(FUNCS)], want, strict=True):
        assert g.dtype == w.dtype, name
        assert np.array_equal(g.view(np.uint64), w.view(np.uint64)), name
    assert "ptnumba_lanes" in final_ir(fn)


def test_bodies_without_vector_calls_keep_the_stock_calls():
    """Lane calls pay only where the loop has vector calls to gain: under strict (no
    budget, no vector calls) the plan keeps stock's emitters, unless a lane call is exact
    vector code itself (exact_lanes: libm's exp and log), which pays alone."""
    from conftest import policy_nodes
    from ptnumba_codegen.backend.plans import plan_node

    x = pt.vector("x")
    exact = {k for k in ("exp", "log") if exact_available(k, "float64")}
    per_lane = {k: f for k, f in FUNCS.items() if k not in ("exp", "sigmoid", "softplus", *exact)}
    fn = compile_fn([x], [f(x) for f in per_lane.values()], "policy_strict", cache_key="lane_calls_strict")
    labels = [getattr(e, "label", None) for n in policy_nodes(fn) for e in plan_node(n).body.emitters]
    assert labels and not any(labels), labels
    if exact_available("exp", "float64"):
        fn = compile_fn([x], [pt.exp(x) * x], "policy_strict", cache_key="lane_calls_strict_exp")
        emitters = [e for n in policy_nodes(fn) for e in plan_node(n).body.emitters]
        assert any(getattr(e, "pays_alone", False) and e.label.startswith("libm lanes exp") for e in emitters)
