"""Ties against the graph as written, under the ``as_written`` policy.

The reference is ``Mode(linker="numba", optimizer=None)`` under ``numba__fastmath=False``
(each op on its own, libm): backend ``unoptimized_strict`` of conftest. Random expression
trees (nested parentheses, n-ary products and sums mixed with divisions and subtractions,
exp/sqrt/log factors) feed minimum/maximum/clip/comparisons/switch; the thresholds are the
expression evaluated in written order with Python floats and ``math`` (libm), nudged by an
ulp on a third of the elements. Every decision, every branch and every gradient zero
pattern must equal the reference, values to 1e-12 relative.

Each hypothesis example compiles one batch of graphs into one function per backend
(compiles are the expensive part).
"""

from __future__ import annotations

import math

import numpy as np
import pytensor
import pytensor.tensor as pt
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from conftest import compile_fn

GRAPHS_PER_EXAMPLE = 12
N = 40
DECISIONS = ("minimum", "maximum", "clip", "le", "lt", "ge", "gt", "eq", "neq", "switch", "rowsum_le", "rowsum_minimum")
ROW = 8  # rowsum decisions: the expression reshaped to rows of ROW, summed along them
UNARY = ("exp", "sqrt", "log")

# An expression tree: ("x",) a leaf (each leaf its own input, so no gradient cancels
# algebraically), (op, left, right) a binary op in written order, ("nary", op, [children])
# one n-ary Mul/Add node, (fn, child) a unary function.


@st.composite
def trees(draw, depth=2):
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return ("x",)
    kind = draw(st.sampled_from(["binary", "binary", "nary", "unary"]))
    if kind == "unary":
        return (draw(st.sampled_from(UNARY)), draw(trees(depth=depth - 1)))
    if kind == "nary":
        op = draw(st.sampled_from(["mul", "add"]))
        return ("nary", op, draw(st.lists(trees(depth=depth - 1), min_size=3, max_size=3)))
    op = draw(st.sampled_from(["mul", "div", "add", "sub", "mul", "div"]))
    return (op, draw(trees(depth=depth - 1)), draw(trees(depth=depth - 1)))


def n_leaves(tree) -> int:
    if tree[0] == "x":
        return 1
    if tree[0] == "nary":
        return sum(map(n_leaves, tree[2]))
    return sum(n_leaves(t) for t in tree[1:])


graph_spec = st.fixed_dictionaries(
    {
        # a product-like root keeps values away from cancellation
        "tree": st.tuples(st.sampled_from(["mul", "div"]), trees(), trees()),
        "decision": st.sampled_from(DECISIONS),
        "swap": st.booleans(),
    }
)

BINARY_PT = {"mul": lambda a, b: a * b, "div": lambda a, b: a / b, "add": lambda a, b: a + b, "sub": lambda a, b: a - b}
BINARY_PY = BINARY_PT  # Python floats: the same IEEE operations, in the same order


def _safe(fn, arg, lib):
    """exp/sqrt/log on a domain-safe argument: sqrt(|a|), log(|a| + 0.5), exp(a / 4)."""
    if fn == "sqrt":
        return lib["sqrt"](lib["abs"](arg))
    if fn == "log":
        return lib["log"](lib["abs"](arg) + 0.5)
    return lib["exp"](arg / 4.0)


PT_LIB = {"exp": pt.exp, "sqrt": pt.sqrt, "log": pt.log, "abs": pt.abs}
PY_LIB = {"exp": math.exp, "sqrt": math.sqrt, "log": math.log, "abs": abs}


def build(tree, leaves):
    """The tree as a pytensor graph; ``leaves`` is an iterator over its inputs."""
    head = tree[0]
    if head == "x":
        return next(leaves)
    if head == "nary":
        return getattr(pt, tree[1])(*(build(t, leaves) for t in tree[2]))
    if head in UNARY:
        return _safe(head, build(tree[1], leaves), PT_LIB)
    left = build(tree[1], leaves)
    return BINARY_PT[head](left, build(tree[2], leaves))


def evaluate(tree, leaves):
    """The tree in written order on Python floats (n-ary nodes left to right, like numba)."""
    head = tree[0]
    if head == "x":
        return next(leaves)
    if head == "nary":
        vals = [evaluate(t, leaves) for t in tree[2]]
        acc = vals[0]
        for v in vals[1:]:
            acc = acc * v if tree[1] == "mul" else acc + v
        return acc
    if head in UNARY:
        return _safe(head, evaluate(tree[1], leaves), PY_LIB)
    left = evaluate(tree[1], leaves)
    return BINARY_PY[head](left, evaluate(tree[2], leaves))


def decide(spec, p, b, xs):
    name = spec["decision"]
    if name.startswith("rowsum"):
        p, b = p.reshape((-1, ROW)).sum(axis=1), b[::ROW]
        name = name.removeprefix("rowsum_")
    lhs, rhs = (b, p) if spec["swap"] else (p, b)
    if name in ("minimum", "maximum"):
        return getattr(pt, name)(lhs, rhs)
    if name == "clip":
        return pt.clip(p, -1e300, b) if not spec["swap"] else pt.clip(p, b, 1e300)
    if name == "switch":
        return pt.switch(pt.le(lhs, rhs), xs[0] * 3.0 + 10.0, -xs[1] * 2.0 - 10.0)
    return getattr(pt, name)(lhs, rhs)


def batch(specs, rng):
    """(inputs, outputs, values) of one batch: decisions, their gradients, the expressions."""
    inputs, outputs, values, exprs, thresholds = [], [], [], [], []
    for k, spec in enumerate(specs):
        xs = [pt.vector(f"x{k}_{i}") for i in range(max(2, n_leaves(spec["tree"])))]
        b = pt.vector(f"b{k}")
        p = build(spec["tree"], iter(xs))
        d = decide(spec, p, b, xs)
        xv = [rng.uniform(0.5, 2.0, N) * (rng.choice([-1.0, 1.0], N) if rng.random() < 0.3 else 1.0) for _ in xs]
        with np.errstate(all="ignore"):
            bv = np.array([evaluate(spec["tree"], iter([float(v[j]) for v in xv])) for j in range(N)])
            if spec["decision"].startswith("rowsum"):
                for r in range(0, N, ROW):
                    acc = 0.0
                    for v in bv[r : r + ROW]:
                        acc += float(v)
                    bv[r] = acc
        bv[1::3] = np.nextafter(bv[1::3], np.inf)
        bv[2::6] = np.nextafter(bv[2::6], -np.inf)
        outputs.append(d)
        if d.dtype.startswith("float"):
            outputs.extend(pytensor.grad(d.sum(), [xs[0], b], disconnected_inputs="ignore"))
        exprs.append(p)
        inputs.extend([*xs, b])
        values.extend([*xv, bv])
        thresholds.append(bv)
    return inputs, outputs, values, exprs, thresholds


# no shrinking: every shrink step is two numba compiles
SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@SETTINGS
@given(specs=st.lists(graph_spec, min_size=GRAPHS_PER_EXAMPLE, max_size=GRAPHS_PER_EXAMPLE), seed=st.integers(0, 2**32 - 1))
def test_decisions_at_ties_match_the_graph_as_written(specs, seed):
    rng = np.random.default_rng(seed)
    inputs, outputs, values, exprs, thresholds = batch(specs, rng)
    ref_fn = compile_fn(inputs, outputs + exprs, "unoptimized_strict", on_unused_input="ignore")
    backend = "policy_as_written" if seed % 2 else "policy_as_written_opaque"
    fn = compile_fn(inputs, outputs, backend, on_unused_input="ignore")
    with np.errstate(all="ignore"):
        ref_all = ref_fn(*values)
        res = fn(*values)
    ref, ref_exprs = ref_all[: len(outputs)], ref_all[len(outputs) :]

    # the premise: Python's written-order evaluation is the reference's, bit for bit
    ties = 0
    for k, (e, b) in enumerate(zip(ref_exprs, thresholds, strict=True)):
        if specs[k]["decision"].startswith("rowsum"):
            sums = e.reshape(-1, ROW).sum(axis=1)  # numpy's pairwise sum: a tie check only
            ties += int(np.sum(np.isclose(sums, b[::ROW], rtol=1e-14)))
            continue
        np.testing.assert_array_equal(e[0::3], b[0::3], err_msg=f"written order of graph {k}: {specs[k]['tree']}")
        ties += int(np.sum(e == b))
    assert ties >= GRAPHS_PER_EXAMPLE * N // 3

    for k, (a, b) in enumerate(zip(res, ref, strict=True)):
        label = f"output {k} of {[s['decision'] for s in specs]} ({backend})"
        assert a.dtype == b.dtype, label
        if a.dtype.kind == "b":
            np.testing.assert_array_equal(a, b, err_msg=label)
            continue
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=f"nan pattern, {label}")
        np.testing.assert_array_equal(a == 0, b == 0, err_msg=f"zero pattern, {label}")
        np.testing.assert_array_equal(np.sign(a), np.sign(b), err_msg=f"branch, {label}")
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0, equal_nan=True, err_msg=label)
