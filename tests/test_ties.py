"""Ties: random n-ary products and sums feeding decisions, at thresholds equal to the
value the strict backend computes. Under the default policy every decision (boolean
outputs, the branch taken, the zero pattern of gradients) must equal stock numba with
fastmath off, element for element; values must agree to 1e-12 relative.

Each hypothesis example draws a batch of graphs compiled into one function (compiles
are the expensive part), so 30 examples check 300 graphs.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import assert_no_fallback, compile_fn

GRAPHS_PER_EXAMPLE = 10
N = 48
DECISIONS = ("minimum", "maximum", "clip", "le", "lt", "ge", "gt", "eq", "neq", "switch")

graph_spec = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["product", "sum"]),
        "steps": st.lists(st.sampled_from(["mul", "div", "add", "sub"]), min_size=2, max_size=4),
        "decision": st.sampled_from(DECISIONS),
        "swap": st.booleans(),  # threshold on the left or the right
    }
)


def expression(spec, xs):
    acc = xs[0]
    for step, x in zip(spec["steps"], xs[1:]):
        if spec["kind"] == "product" and step in ("add", "sub"):
            step = "mul" if step == "add" else "div"  # products mix in divisions
        if spec["kind"] == "sum" and step in ("mul", "div"):
            step = "add" if step == "mul" else "sub"  # sums mix in subtractions
        acc = {"mul": acc * x, "div": acc / x, "add": acc + x, "sub": acc - x}[step]
    return acc


def decide(spec, p, b, xs):
    name = spec["decision"]
    lhs, rhs = (b, p) if spec["swap"] else (p, b)
    if name in ("minimum", "maximum"):
        return getattr(pt, name)(lhs, rhs)
    if name == "clip":
        return pt.clip(p, -1e9, b) if not spec["swap"] else pt.clip(p, b, 1e9)
    if name == "switch":
        return pt.switch(pt.le(lhs, rhs), xs[0] * 3.0 + 10.0, -xs[1] * 2.0 - 10.0)
    return getattr(pt, name)(lhs, rhs)


def build_batch(specs):
    """All graphs of one example: decision outputs, gradients and the bare expressions."""
    xs_all, bs, decisions, grads, exprs = [], [], [], [], []
    for spec in specs:
        xs = [pt.vector(f"x{len(xs_all)}_{i}") for i in range(len(spec["steps"]) + 1)]
        b = pt.vector(f"b{len(bs)}")
        p = expression(spec, xs)
        d = decide(spec, p, b, xs)
        decisions.append(d)
        if d.dtype.startswith("float"):
            grads.extend(pytensor.grad(d.sum(), [xs[0], b]))
        xs_all.extend(xs)
        bs.append(b)
        exprs.append(p)
    return xs_all, bs, decisions, grads, exprs


def data_for(specs, xs, rng):
    vals = {}
    for x in xs:
        v = rng.uniform(0.5, 2.0, N)
        v *= rng.choice([-1.0, 1.0], N) if rng.random() < 0.3 else 1.0
        vals[x] = v
    return vals


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(specs=st.lists(graph_spec, min_size=GRAPHS_PER_EXAMPLE, max_size=GRAPHS_PER_EXAMPLE), seed=st.integers(0, 2**32 - 1))
def test_decisions_at_ties_match_stock_strict(specs, seed):
    rng = np.random.default_rng(seed)
    xs, bs, decisions, grads, exprs = build_batch(specs)
    xvals = data_for(specs, xs, rng)

    # thresholds: the expression as the strict backend computes it, nudged by one ulp on a third
    expr_fn = compile_fn(xs, exprs, "stock_strict", on_unused_input="ignore")
    thresholds = [np.asarray(t).copy() for t in expr_fn(*(xvals[x] for x in xs))]
    for t in thresholds:
        t[1::3] = np.nextafter(t[1::3], np.inf)
        t[2::6] = np.nextafter(t[2::6], -np.inf)

    outputs = decisions + grads
    args = [xvals[x] for x in xs] + thresholds
    ref_fn = compile_fn(xs + bs, outputs, "stock_strict", on_unused_input="ignore")
    fn = compile_fn(xs + bs, outputs, "policy_rewritten", on_unused_input="ignore")
    assert_no_fallback(fn)
    ref, res = ref_fn(*args), fn(*args)

    ties = sum(int(np.sum(t == e)) for t, e in zip(thresholds, expr_fn(*(xvals[x] for x in xs))))
    assert ties > 0  # the batch really contains exact ties

    for k, (a, b) in enumerate(zip(res, ref, strict=True)):
        label = f"output {k} of {[s['decision'] for s in specs]}"
        assert a.dtype == b.dtype, label
        if a.dtype.kind == "b":
            np.testing.assert_array_equal(a, b, err_msg=label)
            continue
        np.testing.assert_array_equal(a == 0, b == 0, err_msg=f"zero pattern, {label}")
        np.testing.assert_array_equal(np.sign(a), np.sign(b), err_msg=f"branch, {label}")
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0, err_msg=label)
