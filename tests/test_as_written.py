"""Policy ``as_written``: decisions computed from their cones exactly as written.

The reference is ``Mode(linker="numba", optimizer=None)`` under ``numba__fastmath=False``
(backend ``unoptimized_strict``). Random ties are in test_ties_as_written.py; here: the
seed example and the maintainer's, the structure of the frozen copies (nothing rewrote them, leaves,
nesting, input-only freezing), pickling and caching, other linkers, explain.
"""

import dataclasses
import logging
import math
import pickle
import re

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import SymbolicOp
from pytensor.compile.mode import Mode
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
from pytensor.raise_op import Assert
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.random.op import RandomVariable

import ptnumba_codegen
from conftest import assert_same_bits, compile_fn, final_ir
from ptnumba_codegen.as_written.freeze import INLINED_ATTR, AsWrittenPass
from ptnumba_codegen.as_written.op import AsWritten
from test_seed_and_ir import BV, EXPECTED, WV, XV, YV, ZV, seed_fn

# the maintainer's counter-example (seed thread): exp(a)*exp(c) is rewritten to exp(a + c)
AV = np.array([-2.486104997138254])
CV = np.array([-1.5791369604234018])
MAINT_BV = np.exp(AV) * np.exp(CV)
MAINT_EXPECTED = 0.01715884


def maintainer_fn(backend):
    a, c, b = pt.vectors("a", "c", "b")
    ga = pytensor.grad(pt.minimum(pt.exp(a) * pt.exp(c), b).sum(), a)
    return compile_fn([a, c, b], ga, backend, cache_key="maintainer")


def frozen(fn):
    """The opaque as-written copies of a compiled function."""
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, AsWritten)]


def inlined(fn):
    """(policy, label, kind, cone size, guards, reads) of the copies put back into kernels."""
    return getattr(fn.maker.fgraph, INLINED_ATTR, [])


@pytest.mark.parametrize("backend", ["policy_default", "policy_as_written"])
def test_maintainers_example_is_decided_as_written(backend):
    """`default` decides as written (`as_written` is its alias); `rewritten` decides on
    fast_run's exp(a + c)."""
    assert maintainer_fn("policy_rewritten")(AV, CV, MAINT_BV)[0] == 0.0  # fast_run's exp(a + c)
    ref = maintainer_fn("unoptimized_strict")(AV, CV, MAINT_BV)
    np.testing.assert_allclose(ref, [MAINT_EXPECTED], rtol=1e-6)
    res = maintainer_fn(backend)(AV, CV, MAINT_BV)
    np.testing.assert_allclose(res, [MAINT_EXPECTED], rtol=1e-6)
    np.testing.assert_allclose(res, ref, rtol=1e-12)


@pytest.mark.parametrize("backend", ["policy_default", "policy_as_written", "policy_as_written_opaque"])
def test_seed_example_still_holds(backend):
    fn = seed_fn(backend)
    np.testing.assert_allclose(fn(XV, YV, ZV, WV, BV), [EXPECTED], rtol=1e-10)
    assert frozen(fn) if backend.endswith("opaque") else inlined(fn)


def test_elementwise_copies_are_inlined_into_one_kernel():
    fn = seed_fn("policy_as_written")
    # the gradient's Le and the Minimum it came from read one cone: one shared copy
    assert not frozen(fn) and [r[1] for r in inlined(fn)] == ["Le", "cone of Minimum, Le"]
    [kernel] = [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, Elemwise)]
    text = str(kernel.op)
    assert "le((((i4 * i2) * i1) * i0), i3)" in text, text  # the product as written, in the kernel
    from ptnumba_codegen.backend.plans import plan_node

    classes = dict(zip((i.op_name for i in plan_node(kernel).body.program.instrs), plan_node(kernel).body.classes))
    assert classes["LE"] == "comparison_sensitive"


def test_a_robust_decision_still_gets_its_copy():
    """Sigmoid decides ``>= 0`` robustly (tests/test_robust.py), but a rewrite changes its
    input: at a = 800, c = -800 ``exp(a)*exp(c)`` is NaN as written and ``exp(a + c) = 1``
    after local_mul_exp_to_exp_add. The copy is made anyway; inside it the robust rule
    still lets Sigmoid go, and the Mul whose NaN pattern decides is strict; the Mul passes
    that NaN pattern on as the zero/inf patterns of the exps (0 * inf), which every exp
    variant gets right (the Exp rows of tests/test_robust.py), so the exps go too."""
    a, c = pt.vectors("a", "c")
    out = pt.switch(pt.sigmoid(pt.exp(a) * pt.exp(c)) >= 0, 1.0, -1.0)
    av, cv = np.array([800.0, 1.0, -3.0, np.nan]), np.array([-800.0, 2.0, 0.5, 0.0])
    with np.errstate(all="ignore"):
        ref = compile_fn([a, c], out, "unoptimized_strict", cache_key="robust_copy")(av, cv)
        np.testing.assert_array_equal(ref, [-1.0, 1.0, 1.0, -1.0])
        assert compile_fn([a, c], out, "policy_rewritten", cache_key="robust_copy")(av, cv)[0] == 1.0
        fn = compile_fn([a, c], out, "policy_as_written", cache_key="robust_copy")
        np.testing.assert_array_equal(fn(av, cv), ref)
    assert not frozen(fn) and [r[1] for r in inlined(fn)] == ["Ge"]
    from ptnumba_codegen.backend.plans import plan_node

    [kernel] = [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, Elemwise)]
    body = plan_node(kernel).body
    classes = {i.op_name: k for i, k in zip(body.program.instrs, body.classes, strict=True)}
    assert classes["Sigmoid"] == classes["Exp"] == "transcendental"  # let go by the robust rules
    assert classes["Mul"] == classes["GE"] == "comparison_sensitive"


def test_opaque_copies_yield_to_the_pools_of_their_function(monkeypatch):
    """An opaque copy's kernels are compiled from its inner graph alone; they still do not
    split beside the function's BLAS calls, exactly like the function's other kernels."""
    from ptnumba_codegen.runtime import pools
    from ptnumba_codegen.as_written.lowering import lowering_graph
    from ptnumba_codegen.runtime.threads import ensure_threading
    from ptnumba_codegen.backend.ops import is_policy_op

    ensure_threading()  # may mark OpenBLAS shared; then pretend it is not, with 2 threads
    monkeypatch.setattr(pools, "_SHARED", set())
    monkeypatch.setattr(pools, "POOLS", tuple(dataclasses.replace(p, threads=lambda: 2) for p in pools.POOLS))
    X, beta, x = pt.matrix("X"), pt.vector("beta"), pt.vector("x")
    outs = [X @ beta + x, pt.gt((pt.exp(x) * 2.0).prod(), 1.0)]  # the product keeps the copy opaque
    fn = pytensor.function([X, beta, x], outs, mode=ptnumba_codegen.policy_mode("as_written"))
    [copy] = frozen(fn)
    assert copy.op.outer_pools == ("OpenBLAS",)
    outer = {n.op.yields_to for n in fn.maker.fgraph.toposort() if is_policy_op(n.op)}
    inner = {n.op.yields_to for n in lowering_graph(copy.op).toposort() if is_policy_op(n.op)}
    assert outer == inner == {("OpenBLAS",)}


def test_the_frozen_cone_is_the_graph_as_written_and_the_rest_is_rewritten():
    x, y, z, b = pt.vectors("x", "y", "z", "b")
    p = x * (y * z)
    outs = [pt.le(p, b), p * 2.0]  # p also feeds other math
    fn = compile_fn([x, y, z, b], outs, "policy_as_written_opaque", cache_key="parens")
    [node] = frozen(fn)
    inner = [n for n in node.op.fgraph.toposort()]
    muls = [n for n in inner if isinstance(n.op, Elemwise) and type(n.op.scalar_op).__name__ == "Mul"]
    assert len(muls) == 2 and all(len(m.inputs) == 2 for m in muls)  # x*(y*z): not flattened
    assert node.op.cone_size == 2 and node.op.kind == "decision"
    # outside the cone, fast_run flattened the product into one 3-input Mul (fused)
    rest = [n for n in fn.maker.fgraph.toposort() if n is not node]
    assert any("i0 * i1 * i2" in str(n.op) or "mul(" in str(n.op) or len(n.inputs) >= 3 for n in rest)
    rng = np.random.default_rng(1)
    xv, yv, zv = (rng.uniform(0.5, 2.0, 2000) for _ in range(3))
    bv = np.array([xv[i] * (yv[i] * zv[i]) for i in range(2000)])
    le, twice = fn(xv, yv, zv, bv)
    assert le.all()  # every tie holds as written
    np.testing.assert_allclose(twice, 2 * bv, rtol=1e-15)
    assert not compile_fn([x, y, z, b], outs, "policy_rewritten", cache_key="parens")(xv, yv, zv, bv)[0].all()


def test_ties_at_scale_have_no_flips():
    """Ties at scale: 20,000 elements, thresholds built in written order with libm."""
    rng = np.random.default_rng(20)
    n = 20_000
    x, y, z, b = pt.vectors("x", "y", "z", "b")
    xv, yv, zv = (rng.uniform(0.5, 2.0, n) for _ in range(3))
    cases = [
        ([x, y, z], x * (y * z), [xv, yv, zv], [xv[i] * (yv[i] * zv[i]) for i in range(n)]),
        ([x, y], pt.exp(x) * pt.exp(y), [xv, yv], [math.exp(xv[i]) * math.exp(yv[i]) for i in range(n)]),
    ]
    for k, (ins, p, vals, thresholds) in enumerate(cases):
        bv = np.array(thresholds)
        outs = [pt.eq(p, b), pytensor.grad(pt.minimum(p, b).sum(), ins[0])]
        eq, grad = compile_fn(ins + [b], outs, "policy_as_written", cache_key=("scale", k))(*vals, bv)
        assert eq.all(), f"case {k}: {n - eq.sum()} flips"
        assert (grad != 0).all()
        eq_default, _ = compile_fn(ins + [b], outs, "policy_rewritten", cache_key=("scale", k))(*vals, bv)
        assert (~eq_default).sum() > n // 10  # what the rewrites do without the setting


def test_nested_decisions_read_earlier_results_and_self_comparisons_stay():
    x, y, b = pt.vectors("x", "y", "b")
    p = x * y * 3.0
    m = pt.minimum(p, b)
    outs = [pt.eq(m, p), pt.eq(x, x), m]
    fn = compile_fn([x, y, b], outs, "policy_as_written_opaque", cache_key="nested")
    nodes = frozen(fn)
    labels = sorted(n.op.label for n in nodes)
    assert labels == ["Eq", "Eq", "Minimum"], labels
    [eq_node] = [n for n in nodes if n.op.label == "Eq" and n.op.cone_size > 0]
    assert any(isinstance(i.owner.op, AsWritten) for i in eq_node.inputs if i.owner)  # reads minimum's result
    xv = np.array([1.0, np.nan, 0.5])
    yv = np.array([2.0, 1.0, 3.0])
    bv = np.array([(1.0 * 2.0) * 3.0, 1.0, -1.0])
    ref = compile_fn([x, y, b], outs, "unoptimized_strict", cache_key="nested")(xv, yv, bv)
    res = fn(xv, yv, bv)
    for r, e in zip(res, ref, strict=True):
        assert_same_bits(r, e)
    assert not res[1][1]  # eq(nan, nan) is False as written (a rewrite folds eq(x, x) to True)
    inl = compile_fn([x, y, b], outs, "policy_as_written", cache_key="nested")
    assert sorted(r[1] for r in inlined(inl)) == ["Eq", "Eq", "Minimum"]
    for r, e in zip(inl(xv, yv, bv), ref, strict=True):
        assert_same_bits(r, e)


def test_random_draws_and_inputs_end_cones():
    x, b = pt.vectors("x", "b")
    rng = pytensor.shared(np.random.default_rng(3))
    r = pt.random.normal(0, 1, size=x.shape, rng=rng)
    outs = [pt.le(r * x + 1.0, b), r]
    fn = compile_fn([x, b], outs, "policy_as_written_opaque", cache_key="rv")
    [node] = frozen(fn)
    assert not any(isinstance(n.op, RandomVariable) for n in node.op.fgraph.toposort())
    draws = [n for n in fn.maker.fgraph.toposort() if "normal" in str(n.op).lower()]
    assert len(draws) == 1, draws
    xv = np.linspace(0.5, 2.0, 50)
    le, draws = fn(xv, np.zeros(50))
    np.testing.assert_array_equal(le, draws * xv + 1.0 <= 0.0)  # the same draw on both sides


def test_condition_inputs_and_container_inputs_are_frozen_and_the_node_stays():
    x, y = pt.vectors("x", "y")
    X = pt.matrix("X")
    checked = Assert("x*y must be nonzero")(x, (x * y).prod())  # a float condition, cast to bool
    outs = [checked * 2.0, pt.logsumexp(X * 0.5, axis=1), pytensor.grad(pt.logsumexp(X * 0.5, axis=1).sum(), X)]
    fn = compile_fn([x, y, X], outs, "policy_as_written", cache_key="inputs")
    copies = [(n.op.kind, n.op.label) for n in frozen(fn)] + [(r[2], r[1]) for r in inlined(fn)]
    kinds = sorted((kind, label.split(" of ")[-1].split("{")[0]) for kind, label in copies)
    assert kinds == [("cone", "Prod"), ("decision", "Cast"), ("inputs", "LogSumExp")], kinds
    # the cast's cone holds a Prod: the Prod gets a copy of its own, which the cast (on a
    # native scalar: ScalarFromTensor, not inlined) reads; the copy of LogSumExp's input
    # values is put back: LogSumExp and its gradient are inlined before the kernels are
    # planned (`freeze.INLINED_BEFORE_KERNELS`), so the analysis sees their max decisions
    assert sorted(n.op.label.split("{")[0] for n in frozen(fn)) == ["Cast", "Prod"]
    assert ("inputs", "LogSumExp") in [(r[2], r[1].split(" of ")[-1].split("{")[0]) for r in inlined(fn)]
    assert any(isinstance(n.op, Assert) for n in fn.maker.fgraph.toposort())
    vals = [np.linspace(0.5, 2, 6), np.linspace(1, 2, 6), np.linspace(-3, 3, 12).reshape(3, 4)]
    ref = compile_fn([x, y, X], outs, "unoptimized_strict", cache_key="inputs")(*vals)
    for r, e in zip(fn(*vals), ref, strict=True):
        np.testing.assert_allclose(r, e, rtol=1e-12)
    with pytest.raises(AssertionError, match="nonzero"):
        fn(np.zeros(6), *vals[1:])


def test_rewritten_policy_freezes_nothing_and_default_does():
    fn = seed_fn("policy_rewritten")
    assert not frozen(fn) and not inlined(fn)
    fn = seed_fn("policy_default")  # decides as written: the seed's cone is put back inlined
    assert not frozen(fn) and [r[1] for r in inlined(fn)] == ["Le", "cone of Minimum, Le"]


def test_shapes_are_inferred_through_the_frozen_op():
    x, b = pt.vectors("x", "b")
    m = pt.minimum(x * x * 2.0, b)
    fn = compile_fn([x, b], m.shape, "policy_as_written_opaque", cache_key="shape")
    assert not frozen(fn)  # the shape comes from the inputs; the copy is never computed
    np.testing.assert_array_equal(fn(np.ones(5), np.ones(5)), [5])


def test_pickled_function_and_cache_key():
    fn = maintainer_fn("policy_as_written_opaque")
    [node] = [n for n in frozen(fn) if n.op.cone_size]  # the shared cone (exp, exp, mul)
    op = node.op
    assert pickle.loads(pickle.dumps(op)) == op
    _, key = numba_funcify_and_cache_key(op, node=node)
    assert isinstance(key, str)
    a, c, b = pt.vectors("a", "c", "b")  # a fresh graph gets the same key: the disk cache hits
    ga = pytensor.grad(pt.minimum(pt.exp(a) * pt.exp(c), b).sum(), a)
    [other] = [n for n in frozen(compile_fn([a, c, b], ga, "policy_as_written_opaque")) if n.op.cone_size]
    assert numba_funcify_and_cache_key(other.op, node=other)[1] == key
    again = pickle.loads(pickle.dumps(fn))
    np.testing.assert_array_equal(again(AV, CV, MAINT_BV), fn(AV, CV, MAINT_BV))


def test_other_linkers_run_the_inner_graph():
    a, c, b = pt.vectors("a", "c", "b")
    ga = pytensor.grad(pt.minimum(pt.exp(a) * pt.exp(c), b).sum(), a)
    mode = Mode(linker="cvm", optimizer="fast_run").register((AsWrittenPass("as_written"), -0.005))
    fn = pytensor.function([a, c, b], ga, mode=mode)
    assert frozen(fn)
    np.testing.assert_allclose(fn(AV, CV, MAINT_BV), [MAINT_EXPECTED], rtol=1e-6)


def test_explain_and_log_show_the_frozen_copies(caplog):
    report = ptnumba_codegen.explain(maintainer_fn("policy_as_written_opaque"))
    # the gradient's Le and the Minimum it came from read one cone: one copy, shared
    assert "== as-written cone of Minimum, Le: 3 op(s) in its cone (exp, exp, mul), reads a, c" in report
    assert "== as-written copy of Le: 0 op(s) in its cone (none), reads cone0.0, b" in report
    assert "why: [comparison] as_written in policy as_written" in report
    assert "[policy strict (as written, as_written)]" in report
    assert "2 as-written copies" in report
    report = ptnumba_codegen.explain(maintainer_fn("policy_as_written"))
    assert "== as-written cone of Minimum, Le: 3 op(s) in its cone, reads a, c; inlined into the kernels below" in report
    assert "== as-written copy of Le: 0 op(s) in its cone, reads cone0.0, b; inlined into the kernels below" in report
    assert "2 as-written copies" in report
    report = ptnumba_codegen.explain(maintainer_fn("policy_default"))  # default decides as written
    assert "== as-written cone of Minimum, Le: 3 op(s) in its cone, reads a, c; inlined into the kernels below" in report
    assert "why: [comparison] as_written in policy default" in report
    assert "2 as-written copies" in report
    assert "as-written" not in ptnumba_codegen.explain(maintainer_fn("policy_rewritten"))
    x, b = pt.vectors("x", "b")
    with caplog.at_level(logging.INFO, logger="ptnumba_codegen"):
        pytensor.function([x, b], pt.le(x * 3.0, b), mode=ptnumba_codegen.policy_mode("as_written"))
    assert "policy as_written: 1 decision(s) kept as written (2 ops in their cones)" in caplog.text  # ExpandDims(3.0), Mul


def products(fgraph) -> list:
    """The matrix products of a function graph outside `AsWritten` copies."""
    return [n for n in fgraph.toposort() if any(k in type(getattr(n.op, "core_op", n.op)).__name__ for k in ("Dot", "Gemv", "Gemm", "Matmul"))]


def test_a_product_of_inputs_is_computed_once_as_written_for_cones_and_the_rest():
    """grad(|z - X @ beta|): X @ beta reads inputs only, so it is computed once, as written
    (the reference's own product), for the gradient's sign decision and for everything
    else; the decision's cone then holds elementwise ops only and is inlined."""
    X, beta, z = pt.matrix("X"), pt.vector("beta"), pt.vector("z")
    logp = (-pt.abs(z - X @ beta)).sum()
    outs = [logp, pytensor.grad(logp, beta), pt.sign(z - X @ beta)]
    fn = compile_fn([X, beta, z], outs, "policy_as_written", cache_key="matmul")
    [shared] = frozen(fn)
    assert shared.op.kind == "shared" and shared.op.label == "Matmul", shared.op
    # the product as written, nowhere else: the gradient's X.T @ g is the one other product
    assert len(products(fn.maker.fgraph)) == 1
    assert all(shared not in [c for c, _ in fn.maker.fgraph.clients[i]] for n in products(fn.maker.fgraph) for i in n.inputs)
    assert "Sign" in [r[1] for r in inlined(fn)]
    rng = np.random.default_rng(5)
    Xv, bv = rng.uniform(0.5, 2.0, (40, 3)), rng.uniform(0.5, 2.0, 3)
    zv = Xv @ bv  # BLAS's own product: exact ties for the sign
    ref = compile_fn([X, beta, z], outs, "unoptimized_strict", cache_key="matmul")(Xv, bv, zv)
    res = fn(Xv, bv, zv)
    assert (ref[2] == 0).sum() > 20  # ties as written
    np.testing.assert_array_equal(res[2], ref[2])
    np.testing.assert_allclose(res[1], ref[1], rtol=1e-12)


def test_a_product_of_computed_values_stays_in_its_cones_copy():
    """X @ (b * c * d): the product's input is computed (a rewrite reassociates it), so the
    product is not shared with the rest; it gets an opaque copy of its own, with its cone
    (the decision reads it and is inlined), exact."""
    X, b, c, d, z = pt.matrix("X"), pt.vector("b"), pt.vector("c"), pt.vector("d"), pt.vector("z")
    q = X @ (b * (c * d))
    outs = [pt.le(q, z), (q**2).sum(), q]
    fn = compile_fn([X, b, c, d, z], outs, "policy_as_written", cache_key="matmul_computed")
    assert [(n.op.kind, n.op.label) for n in frozen(fn)] == [("cone", "Matmul in decisions' cones")]
    assert [k for k in inner_ops(fn) if k != "DimShuffle"] == ["Elemwise", "Elemwise", "Blockwise"]  # X @ (b * (c * d))
    assert "Le" in [r[1] for r in inlined(fn)]
    rng = np.random.default_rng(6)
    Xv = rng.uniform(0.5, 2.0, (50, 3))
    bv, cv, dv = (rng.uniform(0.5, 2.0, 3) for _ in range(3))
    ref_fn = compile_fn([X, b, c, d, z], outs, "unoptimized_strict", cache_key="matmul_computed")
    zv = ref_fn(Xv, bv, cv, dv, np.zeros(50))[2]  # the product as written: ties
    ref, res = ref_fn(Xv, bv, cv, dv, zv), fn(Xv, bv, cv, dv, zv)
    assert ref[0].all()
    np.testing.assert_array_equal(res[0], ref[0])
    for r, e in zip(res[1:], ref[1:], strict=True):
        np.testing.assert_allclose(r, e, rtol=1e-12)


def test_decisions_reading_one_cone_share_one_copy():
    """PyMC's ``0 <= p <= 1`` on ``p = sigmoid(X @ beta)``: both checks read one copy of the
    cone, which reads the product computed once as written; the cone and each decision
    are put back into the kernels."""
    X, beta, y = pt.matrix("X"), pt.vector("beta"), pt.vector("y")
    p = pt.sigmoid(X @ beta)
    ok = pt.all(pt.and_(pt.ge(p, 0.0), pt.le(p, 1.0)))
    logp = pt.switch(ok, (y * pt.log(p) + (1 - y) * pt.log1p(-p)).sum(), -np.inf)
    outs = [logp, pytensor.grad(logp, beta), pt.ge(p, 0.5)]
    fn = compile_fn([X, beta, y], outs, "policy_as_written", cache_key="shared_cone")
    assert [(n.op.kind, n.op.label) for n in frozen(fn)] == [("shared", "Matmul")]
    assert sorted(r[1] for r in inlined(fn)) == ["Ge", "Ge", "Le", "cone of Ge, Le, Ge"]
    rng = np.random.default_rng(7)
    Xv, bv = rng.normal(size=(60, 3)), np.array([0.0, 0.0, 0.0])
    Xv[:20] = 0.0  # p = 0.5 exactly: ties for the third output
    yv = (rng.random(60) < 0.5).astype("float64")
    ref = compile_fn([X, beta, y], outs, "unoptimized_strict", cache_key="shared_cone")(Xv, bv, yv)
    res = fn(Xv, bv, yv)
    assert ref[2][:20].all()
    for r, e in zip(res, ref, strict=True):
        np.testing.assert_allclose(r, e, rtol=1e-12)
    np.testing.assert_array_equal(res[2], ref[2])


def inner_ops(fn) -> list[str]:
    """The op class names inside the opaque copies of a compiled function."""
    return [type(n.op).__name__ for c in frozen(fn) for n in c.op.fgraph.toposort()]


def categorical_checks(axis):
    """PyMC's Categorical checks on ``p = softmax(X @ B + a)``: ``0 <= p``, ``p <= 1`` and
    ``|sum(p) - 1| <= tol``, a log-likelihood under them, and ``p <= 0.2``."""
    X, B, a = pt.matrix("X"), pt.matrix("B"), pt.vector("a")
    p = pt.special.softmax(X @ B + a, axis=axis)
    simplex = pt.le(pt.abs(p.sum(axis=axis) - 1.0), 1e-5)
    ok = pt.all(pt.ge(p, 0.0)) & pt.all(pt.le(p, 1.0)) & pt.all(simplex)
    outs = [pt.switch(ok, pt.log(p[:, 0]).sum(), -np.inf), pt.le(p, 0.2), simplex]
    return [X, B, a], outs


def test_an_op_kernels_cannot_hold_gets_one_copy_read_by_every_cone():
    """A softmax over both axes of a matrix: its sum, and the checks' ``sum(p)``, span two
    axes, so neither is put back (`freeze.ONE_AXIS_REDUCERS`). The Softmax and the Sum each
    get one copy (before: each check recomputed the softmax in a copy of its own); the
    checks above them are inlined."""
    inputs, outs = categorical_checks(None)
    fn = compile_fn(inputs, outs, "policy_as_written", cache_key="own_softmax")
    assert inner_ops(fn).count("Softmax") == 1 and inner_ops(fn).count("Sum") == 1, inner_ops(fn)
    assert [n.op.label for n in frozen(fn) if "cones" in n.op.label] == [
        "Softmax{axis=(0, 1)} in decisions' cones",
        "Sum{axes=None} in decisions' cones",
    ]
    assert {"Ge", "Le"} <= {r[1] for r in inlined(fn)}
    rng = np.random.default_rng(8)
    Xv, Bv = rng.normal(size=(40, 3)), rng.normal(size=(3, 5))
    av = np.zeros(5)
    ref = compile_fn(inputs, outs, "unoptimized_strict", cache_key="own_softmax")(Xv, Bv, av)
    res = fn(Xv, Bv, av)
    for r, e in zip(res[1:], ref[1:], strict=True):
        np.testing.assert_array_equal(r, e)
    np.testing.assert_allclose(res[0], ref[0], rtol=1e-12)


def test_a_row_softmax_and_its_row_sum_are_put_back_into_the_kernels():
    """The Categorical's softmax over rows: the Softmax (its max, exp, row sum and divide)
    and the checks' row sum are put back (`freeze.INLINED_SYMBOLIC_OPS`,
    `freeze.ONE_AXIS_REDUCERS`); only the product stays a copy, shared with the rest."""
    inputs, outs = categorical_checks(1)
    fn = compile_fn(inputs, outs, "policy_as_written", cache_key="row_softmax")
    assert [n.op.kind for n in frozen(fn)] == ["shared"], [str(n.op) for n in frozen(fn)]
    assert {"Ge", "Le"} <= {r[1] for r in inlined(fn)}
    rng = np.random.default_rng(8)
    Xv, Bv = rng.normal(size=(40, 3)), rng.normal(size=(3, 5))
    Xv[:15] = 0.0  # rows of equal logits: p == 0.2 exactly, ties for the second output
    av = np.zeros(5)
    ref = compile_fn(inputs, outs, "unoptimized_strict", cache_key="row_softmax")(Xv, Bv, av)
    res = fn(Xv, Bv, av)
    assert ref[1][:15].all()
    for r, e in zip(res[1:], ref[1:], strict=True):
        np.testing.assert_array_equal(r, e)
    np.testing.assert_allclose(res[0], ref[0], rtol=1e-12)


def test_the_rest_of_the_graph_reads_an_own_copy_that_computes_the_same():
    """``s = sum(x * y, axis=(1, 2))`` feeds a decision and the rest: no rewrite changes it,
    so the rest reads the copy (one sum, as written) instead of computing it again (a sum
    over two axes stays opaque, `freeze.ONE_AXIS_REDUCERS`)."""
    x, y, b = pt.tensor3("x"), pt.tensor3("y"), pt.vector("b")
    s = (x * y).sum(axis=(1, 2))
    outs = [pt.le(s, b), s * 2.0]
    fn = compile_fn([x, y, b], outs, "policy_as_written", cache_key="own_sum_read")
    [copy] = frozen(fn)
    assert [type(n.op).__name__ for n in copy.op.fgraph.toposort()] == ["Elemwise", "Sum"]
    rest = [n for n in fn.maker.fgraph.toposort() if not isinstance(n.op, AsWritten)]
    assert not any("reduce" in str(n.op) or "Sum" in str(n.op) for n in rest), rest
    rng = np.random.default_rng(9)
    xv, yv = rng.normal(size=(30, 7, 3)), rng.normal(size=(30, 7, 3))
    ref_fn = compile_fn([x, y, b], outs, "unoptimized_strict", cache_key="own_sum_read")
    bv = ref_fn(xv, yv, np.zeros(30))[1] / 2.0  # the sums as written: ties
    ref, res = ref_fn(xv, yv, bv), fn(xv, yv, bv)
    assert ref[0].all()
    np.testing.assert_array_equal(res[0], ref[0])
    assert_same_bits(res[1], ref[1])


@pytest.mark.parametrize("backend", ["policy_as_written_opaque", "policy_as_written"])
def test_symbolic_ops_in_copies_are_inlined_and_keep_the_references_bits(backend):
    """Softmax, LogSoftmax and LogSumExp in an opaque copy run their inner graphs' ops as
    the reference does, fused and generated strictly; put back into the graph
    (``policy_as_written``: over one axis they are), the same ops in the function's
    kernels: every decision equal to the reference over scales, widths, both axes and
    special values."""
    from ptnumba_codegen.as_written.lowering import lowering_graph

    x = pt.matrix("x")
    bad = []
    for axis in (1, 0):
        p, ls = pt.special.softmax(x * 1.5, axis=axis), pt.special.log_softmax(x * 1.5, axis=axis)
        outs = [pt.le(p, 0.3), pt.ge(ls, -1.2), pt.le(p.sum(axis=axis), 1.0), pt.gt(pt.logsumexp(x * 1.5, axis=axis), 2.0)]
        fn = compile_fn([x], outs, backend, cache_key=f"symbolic_inlined{axis}")
        graphs = [lowering_graph(c.op) for c in frozen(fn)]
        assert not any(isinstance(n.op, SymbolicOp) for g in graphs for n in g.toposort())
        assert bool(graphs) == (backend == "policy_as_written_opaque")
        ref = compile_fn([x], outs, "unoptimized_strict", cache_key=f"symbolic_inlined{axis}")
        rng = np.random.default_rng(10)
        for shape in [(200, 5), (7, 300), (3, 1)]:
            for k in range(12):
                xv = rng.normal(scale=[0.1, 1, 30, 400][k % 4], size=shape)
                if k % 3 == 2:
                    xv.flat[rng.integers(0, xv.size, 3)] = [np.inf, -np.inf, np.nan]
                for i, (r, e) in enumerate(zip(fn(xv), ref(xv), strict=True)):
                    if not np.array_equal(r, e):
                        bad.append((axis, shape, k, i))
    assert not bad, bad


@pytest.mark.parametrize("key", ["grad_clip", "sigmoid_mul", "normal_logp_sum", "logsumexp", "softmax", "grad_minimum"])
def test_as_written_compiles_defaults_graph_where_no_rewrite_touched_a_cone(key):
    """The benchmark's elementwise workloads: where no rewrite changed a decision's cone,
    the inlined copy merges with the rest and ``as_written`` compiles ``rewritten``'s graph,
    kernel for kernel; in the seed's ``x * y * z`` (``grad_minimum``) the rewrite made
    ``mul(x, y, z)``, and the kernel holds the product as written instead."""
    from ptnumba_codegen.tools import workloads

    ops = {b: [str(n.op) for n in workloads.compile_workload(key, b).maker.fgraph.toposort()] for b in ("policy_rewritten", "policy_as_written")}
    assert len(ops["policy_rewritten"]) == len(ops["policy_as_written"])
    assert not any("AsWritten" in op for op in ops["policy_as_written"])
    assert (ops["policy_rewritten"] == ops["policy_as_written"]) == (key != "grad_minimum"), ops


def test_a_cone_read_by_a_later_cone_is_inlined_too():
    """The gamma GLM's ``alpha = exp(a)`` has one shared cone for its two checks; the later
    shared cone of the ``beta = alpha / mu`` checks reads it (`Copies.ends`). The later one
    is put back first, then the earlier one: no cone stays opaque."""
    from pytensor.graph.fg import FunctionGraph

    from ptnumba_codegen.as_written.freeze import Copies, InlineAsWritten, freeze, shared_roots

    a, x = pt.scalar("a"), pt.vector("x")
    alpha = pt.exp(a)
    beta = alpha / pt.exp(x)
    outs = [pt.gt(alpha, 0.0), pt.ge(alpha, 1e-300), pt.ge(beta, 0.0), pt.le(beta, 1e300)]
    fg = FunctionGraph([a, x], outs, clone=False)
    copies = Copies(ptnumba_codegen.load_policy("as_written"), (), shared_roots(fg))
    for node in [o.owner for o in outs]:  # alpha's decisions first, as in the gamma GLM
        freeze(fg, node, copies)
    first, second = copies.nodes
    assert first.outputs[0] in second.inputs  # beta's cone reads alpha's copy
    InlineAsWritten().apply(fg)
    assert not [n for n in fg.apply_nodes if isinstance(n.op, AsWritten)]
    assert sorted(r[2] for r in getattr(fg, INLINED_ATTR)).count("cone") == 2


def scalar_op_counts(fn):
    """How many times each op class appears in the function, kernels' scalar ops included."""
    from collections import Counter

    counts = Counter()
    for node in fn.maker.fgraph.toposort():
        stack = [node.op]
        while stack:
            op = stack.pop()
            counts[type(op).__name__] += 1
            inner = getattr(op, "fgraph", None)
            stack.extend(() if inner is None else (n.op for n in inner.toposort()))
            scalar = getattr(op, "scalar_op", None)
            stack.extend(() if scalar is None else (scalar,))
    return counts


def glm_fn(backend):
    """PyMC's way: parameters sliced and reshaped out of one joined vector, the check
    ``mu >= 0`` on ``mu = exp(alpha + X @ beta)`` and the logp reading the same mu."""
    rng = np.random.default_rng(7)
    joined = pt.vector("joined", shape=(4,))
    alpha = joined[0:1].reshape(())
    beta = joined[1:4].reshape((3,))
    X = pt.constant(rng.normal(size=(50, 3)))
    y = pt.constant(rng.poisson(2.0, size=50).astype("float64"))
    mu = pt.exp(alpha + X @ beta)
    logp = pt.switch(pt.ge(mu, 0.0), y * pt.log(mu) - mu, -np.inf).sum()
    return compile_fn([joined], [logp, pytensor.grad(logp, joined)], backend, cache_key="glm_value_moves")


def test_a_copy_spelled_with_other_value_moves_merges_with_the_rest():
    """The copy reads ``joined[0:1].reshape(())`` where the rewritten rest reads
    ``joined[0]``: the value-move rewrites (`VALUE_MOVE_REWRITES`) spell the copy like the
    rest, merge keeps one ``exp(alpha + X @ beta)``, and the kernels are ``rewritten``'s
    (before, the linear predictor and its exp were computed twice). Decisions and values
    still match the graph as written, at special values included."""
    counts = {b: scalar_op_counts(glm_fn(b)) for b in ("policy_rewritten", "policy_as_written")}
    for name in ("Exp", "Add", "Log", "GE", "Switch", "Reshape", "Subtensor"):
        assert counts["policy_as_written"][name] == counts["policy_rewritten"][name], (name, counts)
    ref, res = glm_fn("unoptimized_strict"), glm_fn("policy_as_written")
    point = np.array([0.3, 0.1, -0.2, 0.05])
    for r, e in zip(res(point), ref(point), strict=True):
        np.testing.assert_allclose(r, e, rtol=1e-12)
    # the decision mu >= 0 shows in the gradient's zeros (the switch's other branch is a
    # constant); the values beside it are the rewritten rest's (log(exp(z)) is z there; at
    # a NaN parameter local_mul_switch_sink gives 0 where the graph as written gives NaN,
    # docs/policies.md "Limits")
    for a0 in (709.0, 710.0, -745.2, -746.0, np.inf, -np.inf):
        point = np.array([a0, 0.1, -0.2, 0.05])
        (_, g), (_, g_ref) = res(point), ref(point)
        assert np.array_equal(g == 0, g_ref == 0), (a0, g, g_ref)


def tiled_gather_fn(backend):
    """A Poisson GLMM on a tiled matrix: ``tile(alpha[None, :], (nyear, 1))`` read at
    ``[year, site]``, the check ``mu >= 0`` on ``mu = exp(...)``, the logp on the same mu."""
    rng = np.random.default_rng(3)
    alpha = pt.vector("alpha", shape=(12,))
    year, site = (pt.constant(rng.integers(0, n, 200)) for n in (5, 12))
    y = pt.constant(rng.poisson(2.0, 200).astype("float64"))
    mu = pt.exp(pt.tile(alpha[None, :], (5, 1))[year, site])
    logp = pt.switch(pt.ge(mu, 0.0), y * pt.log(mu) - mu, -np.inf).sum()
    with pytensor.config.change_flags(on_opt_error="raise"):
        return compile_fn([alpha], [logp, pytensor.grad(logp, alpha)], backend, cache_key="tiled_gather")


def test_a_copy_reading_a_broadcast_by_index_reads_the_value_like_the_rest():
    """The copy reads ``tile(alpha)[year, site]`` where the rewritten rest reads
    ``alpha[site]`` (`local_subtensor_of_alloc`, a value move): spelled like the rest, the
    copy allocates no tiled matrix and gathers by one index, as ``rewritten`` does; the
    decision's zeros and the values are the graph as written's, at special values."""
    counts = {b: scalar_op_counts(tiled_gather_fn(b)) for b in ("policy_rewritten", "policy_default")}
    assert counts["policy_default"]["Alloc"] == counts["policy_rewritten"]["Alloc"], counts
    assert counts["policy_default"]["AdvancedSubtensor"] == counts["policy_rewritten"]["AdvancedSubtensor"]
    ref, res = tiled_gather_fn("unoptimized_strict"), tiled_gather_fn("policy_default")
    point = np.linspace(-1.0, 1.0, 12)
    for r, e in zip(res(point), ref(point), strict=True):
        np.testing.assert_allclose(r, e, rtol=1e-12)
    for a0 in (709.0, 710.0, -745.2, -746.0, np.inf, -np.inf):  # (NaN: docs/policies.md "Limits")
        point[3] = a0
        (_, g), (_, g_ref) = res(point), ref(point)
        assert np.array_equal(g == 0, g_ref == 0), (a0, g, g_ref)


def placed_state_fn(backend):
    """An HMM-like step: ``zeros(2)`` filled by ``set_subtensor`` per state from sums of
    the previous state and a transition matrix, then a decision on the filled vector (the
    max of a logsumexp) and an ``inc_subtensor`` of a gradient-like update."""
    prev, tr = pt.vector("prev", shape=(2,)), pt.matrix("tr", shape=(2, 2))
    state = pt.zeros(2)
    for k in range(2):
        state = pt.set_subtensor(state[k], pt.logsumexp(prev + tr[:, k]))
    state = pt.inc_subtensor(state[0], prev[1] * 0.5)
    out = pt.switch(pt.gt(state.max(), 0.0), state, -state).sum() + pt.logsumexp(state)
    with pytensor.config.change_flags(on_opt_error="raise"):
        return compile_fn([prev, tr], [out, *pytensor.grad(out, [prev, tr])], backend, cache_key="placed_state")


def test_a_cone_through_set_and_inc_subtensor_is_inlined():
    """``set_subtensor``/``inc_subtensor`` with basic indices write values (an inc: one
    addition per element): a cone through them is put back into the kernels
    (`INLINABLE_WRITES`), no opaque copy compiled on its own; the values and the
    gradient's zeros are the graph as written's, at ties and special values."""
    fn = placed_state_fn("policy_default")
    assert not frozen(fn), [n.op for n in frozen(fn)]
    ref = placed_state_fn("unoptimized_strict")
    rng = np.random.default_rng(2)
    cases = [(rng.normal(size=2), rng.normal(size=(2, 2))) for _ in range(20)]
    cases += [(np.array([0.0, 0.0]), np.zeros((2, 2))), (np.array([-np.inf, 1.0]), np.ones((2, 2))),
              (np.array([700.0, -700.0]), np.array([[10.0, -10.0], [-10.0, 10.0]]))]
    for prev, tr in cases:
        for r, e in zip(fn(prev, tr), ref(prev, tr), strict=True):
            np.testing.assert_allclose(r, e, rtol=1e-12)
            assert np.array_equal(np.asarray(r) == 0, np.asarray(e) == 0)


def sliced_tail_fn(backend):
    """PyMC's split of a flat parameter vector: ``x[17:][k]``, each element in a decision."""
    x = pt.vector("x", shape=(22,))
    ys = [x[17:][k] for k in range(5)]
    out = sum(pt.switch(pt.gt(pt.exp(y) * 3.0, 2.0), y, 0.0) for y in ys) + sum(pt.exp(y) * 3.0 for y in ys)
    with pytensor.config.change_flags(on_opt_error="raise"):
        return compile_fn([x], [out, pytensor.grad(out, x)], backend, cache_key="sliced_tail")


def test_merged_slices_of_a_copy_have_constant_bounds_like_the_rest():
    """Put back, a copy's ``x[17:][k]`` is merged into one subtensor whose bounds
    `local_subtensor_merge_slice` writes as index arithmetic on constants; folded
    (`constant_folds.fold_exact`), they are the rest's constant bounds: no all-constant
    Composite reaches PyTensor's `local_inline_composite_constants` (which failed on it with
    a logged traceback, GLM_discrete_choice_correlated) and merge keeps one subtensor per
    element. Bits equal the graph as written, at the decisions' ties and special values."""
    from pytensor.graph.basic import Constant

    fn, ref = sliced_tail_fn("policy_default"), sliced_tail_fn("unoptimized_strict")
    constant_only = [
        n for n in fn.maker.fgraph.apply_nodes if n.inputs and all(isinstance(i, Constant) for i in n.inputs)
    ]
    assert all(type(n.op).__name__ == "Alloc" for n in constant_only), constant_only
    counts = scalar_op_counts(fn)
    assert counts["Subtensor"] == scalar_op_counts(sliced_tail_fn("policy_rewritten"))["Subtensor"], counts
    tie = np.log(2.0 / 3.0)
    for tail in ([tie, tie, 0.0, -1.0, 1.0], [tie, np.nextafter(tie, 1.0), np.nextafter(tie, -1.0), -30.0, 30.0]):
        v = np.concatenate([np.linspace(-1.0, 1.0, 17), tail])
        for r, e in zip(fn(v), ref(v), strict=True):
            assert_same_bits(r, e)
    # at special values the decisions (the gradient's zeros) are the reference's; the values
    # beside them are the rewritten rest's (docs/policies.md "Limits")
    v = np.concatenate([np.linspace(-1.0, 1.0, 17), [np.nan, np.inf, -np.inf, tie, -np.inf]])
    (_, g), (_, g_ref) = fn(v), ref(v)
    assert np.array_equal(g == 0, g_ref == 0), (g, g_ref)


def test_index_arithmetic_folds_only_integer_constants():
    """The fold evaluates integer and boolean ops only; a float op or an integer division
    on constants stays as written."""
    from pytensor.graph.fg import FunctionGraph
    from pytensor.tensor.basic import ScalarFromTensor

    from ptnumba_codegen.as_written.constant_folds import NUMPY_FOLDS
    from ptnumba_codegen.as_written.value_moves import fold_index_arithmetic

    i17, i0, i22 = pt.constant(17), pt.constant(0), pt.constant(22)
    folded = pt.switch(pt.lt(i17, i0), i17 + i22, i17)
    kept = [pt.constant(2.0) * pt.constant(3.0), pt.constant(7) // pt.constant(2), pt.lt(pt.constant(0.5), i0)]
    fg = FunctionGraph([], [folded, ScalarFromTensor()(folded), *kept], clone=True)
    from pytensor.graph.rewriting.basic import in2out

    in2out(fold_index_arithmetic, ignore_newtrees=False).apply(fg)
    assert [type(o.owner.op).__name__ if o.owner else "constant" for o in fg.outputs] == [
        "constant", "constant", "Elemwise", "Elemwise", "Elemwise"
    ]
    assert fg.outputs[0].data == 17 and fg.outputs[1].data == 17
    assert all(isinstance(reason, str) and reason for _when, reason in NUMPY_FOLDS.values())


def test_a_copy_holding_allocdiag_compiles_and_keeps_the_references_bits():
    """``pt.diag`` (AllocDiag, a SymbolicOp) in a decision's cone gets an own copy; only the
    fusible symbolic ops (Softmax, LogSumExp, ...) are inlined into copies: expanding
    AllocDiag never settled (a structural-equation model's copy grew without bound)."""
    from pytensor.tensor.basic import AllocDiag

    from ptnumba_codegen.as_written.lowering import inline_symbolic_ops

    assert not any(issubclass(AllocDiag, t) for t in inline_symbolic_ops.tracks())
    x = pt.vector("x")
    out = pt.switch(pt.gt(pt.diag(pt.exp(x)).sum(axis=0), 1.5), x, 0.0).sum()
    outs = [out, pytensor.grad(out, x)]
    fn, ref = (compile_fn([x], outs, b, cache_key="allocdiag") for b in ("policy_as_written", "unoptimized_strict"))
    assert any("AllocDiag" in n.op.label for n in frozen(fn))
    v = np.array([0.1, 0.5, np.log(1.5), np.nan, -np.inf, np.inf])
    for r, e in zip(fn(v), ref(v), strict=True):
        assert_same_bits(r, e)


def cholesky_checks():
    """PyMC's MvNormal check on the factor of a computed covariance: ``diag(L) > 0`` with
    ``L = cholesky(K)``, ``K = diag(exp(a) * exp(c)) + 0.25`` (fast_run rewrites the
    product to ``exp(a + c)``), a log-likelihood under it, its gradient, ``diag(L) <= b``
    and ``L`` itself."""
    a, c, b, y = pt.vectors("a", "c", "b", "y")
    d = pt.exp(a) * pt.exp(c)
    K = d[:, None] * pt.constant(np.eye(40)) + 0.25
    L = pt.linalg.cholesky(K)
    diag = pt.diagonal(L)
    z = pt.linalg.solve_triangular(L, y, lower=True)
    logp = pt.switch(pt.all(pt.gt(diag, 0.0)), -pt.log(diag).sum() - 0.5 * (z**2).sum(), -np.inf)
    return [a, c, b, y], [logp, pytensor.grad(logp, a), pt.le(diag, b), L]


def cholesky_points():
    rng = np.random.default_rng(11)
    return rng.uniform(-3.0, 3.0, 40), rng.uniform(-3.0, 3.0, 40), rng.normal(size=40)


@pytest.mark.parametrize("backend", ["policy_as_written", "policy_as_written_opaque"])
def test_the_rest_reads_the_cholesky_the_decisions_read(backend):
    """The factor is computed once, as written, for the check and for the rest
    (`decisions.READ_BY_THE_REST`): one Cholesky in the function, in its own copy, which
    holds the factorization alone and reads one copy of ``K``'s cone (put back into the
    kernels when the policy allows); the rest's solves, log-determinant and gradient read
    that factor (before: a second factorization of the rewritten ``K``). Decisions equal
    the graph as written at ties (``b`` is the reference's diagonal and one ulp either
    side, where ``rewritten``'s factor differs), and ``L`` is the reference's, bit for bit."""
    inputs, outs = cholesky_checks()
    fn = compile_fn(inputs, outs, backend, cache_key="cholesky_rest")
    ref = compile_fn(inputs, outs, "unoptimized_strict", cache_key="cholesky_rest")
    default = compile_fn(inputs, outs, "policy_rewritten", cache_key="cholesky_rest")
    def factorizes(node):
        return "Cholesky" in type(getattr(node.op, "core_op", node.op)).__name__

    assert not any(factorizes(n) for n in fn.maker.fgraph.toposort())  # none in the rest
    [factor] = [n for n in frozen(fn) if any(factorizes(m) for m in n.op.fgraph.toposort())]
    assert [type(n.op).__name__ for n in factor.op.fgraph.toposort()] == ["Blockwise"]
    if backend == "policy_as_written":
        assert any(r[1].startswith("inputs of Blockwise{Cholesky") for r in inlined(fn)), inlined(fn)
    av, cv, yv = cholesky_points()
    d = np.diagonal(ref(av, cv, np.zeros(40), yv)[3]).copy()
    flips = 0
    for bv in (d, np.nextafter(d, np.inf), np.nextafter(d, -np.inf)):
        res, exp = fn(av, cv, bv, yv), ref(av, cv, bv, yv)
        np.testing.assert_array_equal(res[2], exp[2])
        assert_same_bits(res[3], exp[3])  # the rest's factor is the one as written
        np.testing.assert_allclose(res[0], exp[0], rtol=1e-12)
        np.testing.assert_allclose(res[1], exp[1], rtol=1e-10)
        flips += (default(av, cv, bv, yv)[2] != exp[2]).sum()
    assert flips > 0  # the ties tell the rewritten factor from the one as written
    # a NaN in K: a NaN factor, the check false, as in the reference
    av[5] = np.nan
    res, exp = fn(av, cv, d, yv), ref(av, cv, d, yv)
    assert np.isnan(exp[3]).any() and exp[0] == -np.inf
    assert_same_bits(res[3], exp[3])
    np.testing.assert_array_equal(res[2], exp[2])
    assert res[0] == exp[0] and np.array_equal(np.isnan(res[1]), np.isnan(exp[1]))
    assert np.array_equal(res[1] == 0, exp[1] == 0)


def test_a_constant_exponent_that_llvm_rewrites_is_decided_as_written():
    """``le(x ** 2.0, b)`` at ties ``b = x * x`` and one ulp either side: the reference
    calls libm's pow(x, 2.0) on an array operand; an inlined copy that fused the constant
    into the kernel would let LLVM rewrite the strict call to ``x * x`` (glibc's pow is not
    correctly rounded) and flip decisions. The copy's pow reads its constant as a value
    (`as_written.libm_operands`)."""
    x, b = pt.vectors("x", "b")
    outs = [pt.le(x**2.0, b)]
    fn, ref = (compile_fn([x, b], outs, k, cache_key="pow_two_tie") for k in ("policy_as_written", "unoptimized_strict"))
    xv = np.random.default_rng(0).gamma(2.0, 1.0, 100_000)
    for bv in (xv * xv, np.nextafter(xv * xv, np.inf), np.nextafter(xv * xv, -np.inf)):
        np.testing.assert_array_equal(fn(xv, bv)[0], ref(xv, bv)[0])


POW_SPECIAL_BASES = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-310, -1e-310, 2.2250738585072014e-308,
     1.7976931348623157e308, -1.7976931348623157e308, 1.0, -1.0, -2.5, -3.0, 0.5, 2.0, 1e-160, 1e160]
)  # fmt: skip
POW_CONSTANT_EXPONENTS = (2.0, -1.0, 0.5, -0.5, 1.0, 0.0, 3.0, -2.0)


def _pow_bases(dtype):
    rng = np.random.default_rng(7)
    with np.errstate(over="ignore"):
        special = POW_SPECIAL_BASES.astype(dtype)
    if dtype == "float32":
        special = np.concatenate([special, np.array([1e-45, -1e-45, 1e-40, 3.4028235e38, 1.1754944e-38], dtype)])
    draws = [rng.gamma(2.0, 1.0, 40_000), -rng.gamma(2.0, 1.0, 2_000), np.exp2(rng.uniform(-1074, 1023, 4_000))]
    with np.errstate(over="ignore"):
        return np.concatenate([np.resize(special, 4_000), *(d.astype(dtype) for d in draws)])


@pytest.mark.parametrize("backend", ["policy_as_written", "policy_as_written_opaque"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("c", POW_CONSTANT_EXPONENTS)
def test_constant_exponents_decide_as_written_at_ties_and_special_values(c, dtype, backend):
    """``x ** c`` for the exponents LLVM rewrites without fast-math (2, -1, 0.5, 1, 0) or
    with (-0.5, 3, -2, which the policy may not give it in a cone), a float32 constant
    (upcast to float64 for a float64 base, as the reference does) or one of the base's
    dtype: every decision equals the graph as written at ties (``b`` is libm's own value
    and one ulp either side) and at +-0, +-inf, NaN, subnormals, huge and negative bases;
    inlined into the kernels and compiled on its own."""
    x, b = pt.vector("x", dtype=dtype), pt.vector("b", dtype=dtype)
    p = x ** pt.constant(c, dtype="float32")
    outs = [pt.le(p, b), pt.ge(p, b), pt.eq(p, b), pt.gt(p, 0.0), pt.isnan(p), pt.isinf(p)]
    key = f"pow_const_{c}_{dtype}"
    fn = compile_fn([x, b], outs, backend, cache_key=key)
    ref = compile_fn([x, b], outs, "unoptimized_strict", cache_key=key)
    assert frozen(fn) or inlined(fn)
    xv = _pow_bases(dtype)
    with np.errstate(all="ignore"):
        pv = np.power(xv, np.asarray(c, dtype=dtype))  # libm's pow (numpy calls it)
        ties = (pv, np.nextafter(pv, np.inf), np.nextafter(pv, -np.inf))
    for bv in (*ties, np.zeros_like(xv), xv):
        for k, (g, w) in enumerate(zip(fn(xv, bv), ref(xv, bv), strict=True)):
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


def test_the_inlined_copy_calls_libm_pow_in_the_final_ir():
    """The constant exponent reaches pow as a value in the final optimized IR (an empty
    asm, hoisted out of the loop): the cone calls pow (libm's, or its exact lanes) and
    has no ``fmul`` standing for ``x * x``; the rest of the graph, outside any cone,
    keeps PyTensor's ``sqr``."""
    from irtools import functions, parse

    x, b = pt.vectors("x", "b")
    outs = [pt.le(x**2.0, b), (x**2.0).sum()]
    fn = compile_fn([x, b], outs, "policy_as_written", cache_key="pow_two_ir", inspect_ir=True)
    assert inlined(fn)
    xv = np.random.default_rng(1).gamma(2.0, 1.0, 1000)
    ref = compile_fn([x, b], outs, "unoptimized_strict", cache_key="pow_two_ir")
    for got, want in zip(fn(xv, xv * xv), ref(xv, xv * xv), strict=True):
        np.testing.assert_allclose(got, want)
    ir_text = final_ir(fn)
    calls = re.findall(r"call [^\n]*@(pow|llvm\.pow\.f64|ptnumba_exact\d+_pow|ptnumba_libm_pow)\(", ir_text)
    assert calls, "the cone's pow was folded"
    assert 'asm "", "=r,0"' in ir_text
    deciding = [f for f in functions(ir_text) if re.search(r"@(pow|llvm\.pow\.f64|ptnumba_exact\d+_pow|ptnumba_libm_pow)\(", f) and "fcmp" in f]
    assert deciding
    for text in deciding:
        for table in parse(text):
            compared = [i for i in table.values() if i.opcode == "fcmp"]
            assert not any(table.get(op) is not None and table[op].opcode == "fmul" for i in compared for op in i.operands)


def test_copies_put_back_leave_no_node_twice():
    """PyMC's stochastic-volatility checks (``lam = exp(-2 * volatility)``, StudentT's
    ``sigma = lam ** -0.5`` and ``sigma ** -2 > 0``, each a decision of its own) are three
    copies reading the same slice of the inputs: put back, their chains merged only in
    part (the MergeFeature attached since merge1 had not scheduled them), and one kernel
    computed the slice's exp and pow twice. `value_moves.fresh_merge` merges them: no two
    nodes of the compiled graph apply the same op to the same inputs."""
    pm = pytest.importorskip("pymc")
    change = np.random.default_rng(0).standard_t(4, 300) * 0.01
    with pm.Model() as model:
        step_size = pm.Exponential("step_size", 10)
        vol = pm.GaussianRandomWalk("volatility", sigma=step_size, shape=300, init_dist=pm.Normal.dist(0, 100))
        nu = pm.Exponential("nu", 0.1)
        pm.StudentT("returns", nu=nu, lam=pm.math.exp(-2 * vol), observed=change)
    fns = {
        p: model.logp_dlogp_function(ravel_inputs=True, mode=ptnumba_codegen.policy_mode(p))._pytensor_function
        for p in ("as_written", "rewritten")
    }
    seen, twice = set(), []
    for node in fns["as_written"].maker.fgraph.toposort():
        key = (node.op, tuple(node.inputs))
        if key in seen:
            twice.append(str(node))
        seen.add(key)
    assert not twice
    assert inlined(fns["as_written"])
    point = np.random.default_rng(1).normal(0.0, 0.3, 302)
    for got, want in zip(fns["as_written"](point), fns["rewritten"](point), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9)


def test_a_copys_pow_is_named_pow_by_policies():
    """`PowAsWritten` is pow for ``[ops.Pow]`` (and no name of its own a policy could use)."""
    from ptnumba_codegen.analysis.program import from_scalar_op
    from ptnumba_codegen.as_written.libm_operands import pow_as_written
    from ptnumba_codegen.policy import known_op_names

    program = from_scalar_op(pow_as_written, ("float64", "float32"), ("float64",))
    assert [i.op_name for i in program.instrs] == ["Pow"]
    assert "Pow" in known_op_names() and "PowAsWritten" not in known_op_names()
