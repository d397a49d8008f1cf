"""Every kernel node type is generated under the policy, and sensitivity crosses
node boundaries (a value compared in one node is strict where it is computed)."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.scalar.basic import ScalarOp
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.rewriting.scalarize import ScalarCAReduce, ScalarizedElemwise

import ptnumba_codegen
from conftest import compile_fn, final_ir
from test_seed_and_ir import BV as SEED_BV
from test_seed_and_ir import EXPECTED
from test_seed_and_ir import WV as SEED_WV
from test_seed_and_ir import XV as SEED_XV
from test_seed_and_ir import YV as SEED_YV
from test_seed_and_ir import ZV as SEED_ZV
from irtools import parse
from ptnumba_codegen.flags import PYTENSOR_FLAGS
from ptnumba_codegen.backend.ops import is_policy_op

KERNEL_TYPES = (Elemwise, FusedElemwise, ScalarizedElemwise, CAReduce, ScalarCAReduce, ScalarOp)

rng = np.random.default_rng(7)
XV, YV, ZV, WV = (rng.uniform(0.5, 2.0, 33) for _ in range(4))
BV = ((XV * YV) * ZV) * WV  # exact ties with the left-associated product
MV = rng.standard_normal((6, 9))


def sequential_sum(v):
    acc = 0.0
    for e in v:
        acc += e
    return acc


def vecs():
    return pt.vectors("x", "y", "z", "w", "b")


def table_graphs():
    x, y, z, w, b = vecs()
    X = pt.matrix("X")
    c = pt.vector("c")
    return {
        "sq_diff_sum": ([x, y], ((x - y) ** 2).sum(), [XV, YV]),
        "grad_minimum_x_b": ([x, y, z, w, b], pytensor.grad(pt.minimum(x * y * z * w, b).sum(), [x, b]), [XV, YV, ZV, WV, BV]),
        "grad_clip": ([x, y, z, w, b], pytensor.grad(pt.clip(x * y * z * w, -1e9, b[0]).sum(), x), [SEED_XV, SEED_YV, SEED_ZV, SEED_WV, SEED_BV]),
        "logsumexp": ([X], pt.logsumexp(X, axis=1), [MV]),
        "logsumexp_grad": ([X], pytensor.grad(pt.logsumexp(X, axis=1).sum(), X), [MV]),
        "softmax": ([X], pt.special.softmax(X, axis=-1), [MV]),
        "x_over_sum": ([x], x / x.sum(), [XV]),
        "gammainc_grad": ([x, y], pytensor.grad(pt.gammainc(x, y).sum(), x), [XV * 3, YV * 2]),
        "eq_sum": ([x, y, z, w, b], pt.eq(x * y * z * w, b).sum(), [XV, YV, ZV, WV, BV]),
        "le_sum": ([x, y, z, w, b], (x * y * z * w <= b).sum(), [XV, YV, ZV, WV, BV]),
        "eq_dot_sum": ([x, y, c], pt.eq((x * y).sum(), c[0]), [XV, YV, np.array([sequential_sum(XV * YV)])]),
        "careduces": ([X], [X.max(), X.min(axis=0), X.sum(axis=1), pt.prod(X, axis=0), (X > 0).all(axis=1), (X > 1).any()], [MV]),
    }


GRAPHS = table_graphs()


def compiled(name, backend):
    ins, out, _ = GRAPHS[name]
    return compile_fn(ins, out, backend, cache_key=("table", name))


def as_list(res):
    return list(res) if isinstance(res, list | tuple) else [res]


@pytest.mark.parametrize("name", list(GRAPHS))
def test_every_float_kernel_is_generated_and_matches_stock_strict(name):
    fn = compiled(name, "policy_rewritten")
    kernels = [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, KERNEL_TYPES)]
    assert kernels
    for node in kernels:
        assert is_policy_op(node.op), f"{type(node.op).__name__} was not handed to the generator"
        assert ptnumba_codegen.fallback_reason(node) is None, (node, ptnumba_codegen.fallback_reason(node))
    _, _, vals = GRAPHS[name]
    ref = as_list(compiled(name, "stock_strict")(*vals))
    res = as_list(fn(*vals))
    for a, b in zip(res, ref, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype.kind in "biu":
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_array_equal(a == 0, b == 0)
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)


def test_clip_example():
    vals = GRAPHS["grad_clip"][2]
    assert compiled("grad_clip", "stock_fast")(*vals)[0] == 0.0  # the stock bug
    np.testing.assert_allclose(compiled("grad_clip", "c")(*vals), [EXPECTED], rtol=1e-10)
    np.testing.assert_allclose(compiled("grad_clip", "policy_rewritten")(*vals), [EXPECTED], rtol=1e-10)


@pytest.mark.parametrize("name", ["eq_sum", "le_sum", "eq_dot_sum"])
def test_ties_through_reductions_equal_strict(name):
    vals = GRAPHS[name][2]
    strict = compiled(name, "stock_strict")(*vals)
    assert np.asarray(strict).item() != 0  # the ties are ties under strict
    np.testing.assert_array_equal(compiled(name, "policy_rewritten")(*vals), strict)


def test_cross_node_comparison_makes_the_producer_strict():
    x, y, z, w, b = vecs()
    p = x * y * z * w
    # reshape + a non-elemwise op between the product and the comparison
    q = p.reshape((-1, 1))
    out = pt.switch(pt.le(q, b[:, None]), 1.0, 0.0).sum() + pt.dot(p, p)
    fn = compile_fn([x, y, z, w, b], out, "policy_rewritten", cache_key="crossnode")
    producers = [n for n in fn.maker.fgraph.toposort() if is_policy_op(n.op) and n.op.sensitive_outputs]
    assert producers, "no node was told its output is compared elsewhere"
    ref = compile_fn([x, y, z, w, b], out, "stock_strict", cache_key="crossnode")
    vals = [XV, YV, ZV, WV, BV]
    np.testing.assert_allclose(fn(*vals), ref(*vals), rtol=1e-12)


def test_a_value_compared_after_a_check_is_compared_before_it():
    """``Assert`` returns the value it checks (`whole_graph.PASS_FIRST_OPS`): the seed's
    product, compared after a check of something else, is produced strictly (before, the
    product's own kernel got every fast flag) and the gradient is the seed's at its tie."""
    from pytensor.raise_op import Assert

    x, y, z, w, b = vecs()
    p = Assert("b positive")(x * y * z * w, pt.all(b > 0))
    gx = pytensor.grad(pt.minimum(p, b).sum(), x)
    fn = compile_fn([x, y, z, w, b], gx, "policy_rewritten", cache_key="through_check")
    [product] = [n for n in fn.maker.fgraph.toposort() if is_policy_op(n.op) and n.op.sensitive_outputs]
    assert product.outputs[0] in [i for n in fn.maker.fgraph.toposort() if "Assert" in str(n.op) or "Check" in str(n.op) for i in n.inputs]
    ref = compile_fn([x, y, z, w, b], gx, "stock_strict", cache_key="through_check")
    seed = (SEED_XV, SEED_YV, SEED_ZV, SEED_WV, SEED_BV)
    np.testing.assert_allclose(fn(*seed), [EXPECTED], rtol=1e-9)
    np.testing.assert_array_equal(fn(*seed), ref(*seed))


def test_a_diagonal_compared_makes_its_producer_strict():
    """``le(diagonal(3 * exp(M)), b)`` where the matrix is also an output: the kernel keeps
    computing the whole matrix, and the decision reads its diagonal through ``ExtractDiag``
    (`whole_graph.TRANSPARENT_OPS`: it selects elements). Before, the requirement stopped
    there and the exp got libmvec and every fast flag: 132 of 900 decisions at ties differed
    from stock strict. Ties: ``b`` is stock strict's diagonal and one ulp either side."""
    from pytensor.tensor.basic import ExtractDiag

    M, b = pt.matrix("M"), pt.vector("b")
    K = 3.0 * pt.exp(M)
    outs = [pt.le(pt.diagonal(K), b), K]
    fn = compile_fn([M, b], outs, "policy_rewritten", cache_key="diag_compared")
    ref = compile_fn([M, b], outs, "stock_strict", cache_key="diag_compared")
    assert any(isinstance(n.op, ExtractDiag) for n in fn.maker.fgraph.toposort())  # not a gather
    Mv = np.random.default_rng(0).uniform(-5.0, 5.0, (300, 300))
    d = np.diagonal(ref(Mv, np.zeros(300))[1]).copy()
    for bv in (d, np.nextafter(d, np.inf), np.nextafter(d, -np.inf)):
        np.testing.assert_array_equal(fn(Mv, bv)[0], ref(Mv, bv)[0])


def test_reduction_result_compared_is_strict_and_sums_stay_fast():
    x, y, c = pt.vectors("x", "y", "c")
    fns = {
        name: compile_fn(ins, out, "policy_rewritten", inspect_ir=True, cache_key=("redir", name))
        for name, ins, out in [("sum", [x], x.sum()), ("compared", [x, y, c], pt.eq((x * y).sum(), c[0]))]
    }
    fns["sum"](XV)
    fns["compared"](XV, YV, np.array([1.0]))
    fast = [i for t in parse(final_ir(fns["sum"])) for i in t.values() if i.opcode == "fadd"]
    assert fast and all(i.flags == PYTENSOR_FLAGS for i in fast)
    assert any("<" in i.text for i in fast), "the fast sum should be vectorized"
    strict = [i for t in parse(final_ir(fns["compared"])) for i in t.values() if i.opcode in ("fadd", "fmul")]
    assert strict and all(not i.flags for i in strict)


def test_scan_and_opfromgraph_inner_kernels_are_generated():
    x, y = pt.vectors("x", "y")
    a, b = pt.vectors("a", "b")
    ofg = OpFromGraph([a, b], [pt.exp(a) * b + pt.minimum(a * b * a, b)])
    res, _ = pytensor.scan(lambda xi, acc: acc * xi + pt.exp(xi), sequences=[x], outputs_info=[pt.zeros(())])
    outs = [ofg(x, y), res[-1]]
    fn = compile_fn([x, y], outs, "policy_rewritten", cache_key="inner")
    inner_kernels = []
    for node in fn.maker.fgraph.toposort():
        inner = getattr(node.op, "fgraph", None)
        if inner is not None and not isinstance(node.op, KERNEL_TYPES):
            inner_kernels += [n for n in inner.toposort() if isinstance(n.op, KERNEL_TYPES)]
    assert inner_kernels and all(is_policy_op(n.op) for n in inner_kernels)
    vals = [np.linspace(0, 1, 5), np.linspace(1, 2, 5)]
    ref = compile_fn([x, y], outs, "stock_strict", cache_key="inner")(*vals)
    for a, b in zip(fn(*vals), ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def _indexed_graph(transcendental: bool):
    x, b = pt.vectors("x", "b")
    idx = pt.vector("idx", dtype="int64")
    # a hierarchical-model shape: gather, body, comparison, and its gradient (scatter-add)
    value = pt.exp(x[idx]) * b if transcendental else x[idx] * b * 3.0
    out = pt.switch(pt.le(x[idx] * b * x[idx], 1.0), value, 0.0).sum()
    return [x, idx, b], [out, pytensor.grad(out, x)]


def _indexed_values():
    rng = np.random.default_rng(3)
    xv = rng.uniform(0.5, 1.5, 7)
    iv = np.array([0, 3, 6, 3, -1, 2, 3, 3])
    bv = rng.uniform(0.5, 1.5, 8)
    bv[1] = 1.0 / (xv[3] * xv[3])  # a tie for the comparison
    return xv, iv, bv


def _indexed_fused(fn):
    return [
        n
        for n in fn.maker.fgraph.toposort()
        if isinstance(n.op, FusedElemwise) and any(e is not None for e in (*n.op.indexed_inputs, *n.op.indexed_outputs))
    ]


def _equal_decisions_and_values(fn, ins, outs, key):
    ref = compile_fn(ins, outs, "stock_strict", cache_key=key)(*_indexed_values())
    got = fn(*_indexed_values())
    for a, e in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a == 0, e == 0)
        np.testing.assert_allclose(a, e, rtol=1e-12)
    return got


def test_indexed_fused_elemwise_runs_our_core_in_the_stock_loop():
    """An indexed kernel of plain arithmetic: the stock indexed loop, our scalar core."""
    from ptnumba_codegen.backend.plans import plan_node

    ins, outs = _indexed_graph(transcendental=False)
    fn = compile_fn(ins, outs, "policy_rewritten", cache_key="indexed_arith")
    fused = _indexed_fused(fn)
    assert fused and all(is_policy_op(n.op) for n in fused)
    for node in fused:
        assert ptnumba_codegen.fallback_reason(node) is None
        plan = plan_node(node)
        assert plan.kind == "stock_loop"
        assert "comparison_sensitive" in plan.body.classes
    _equal_decisions_and_values(fn, ins, outs, "indexed_arith")


def test_indexed_kernels_with_vector_math_are_lowered_as_their_parts(monkeypatch):
    """A gather/scatter-add kernel whose body calls vector functions keeps its place in
    the graph (PyTensor's fusion tests look for it) and is lowered as its inner graph
    (`indexed_parts`): gather, vectorized policy kernel, policy reductions, scatter-add.
    Its decisions and values are stock strict's; the scatter-add (rows 3 four times, in
    order) and every element bit for bit those of the fused indexed loop."""
    from ptnumba_codegen.backend import indexed_parts
    from ptnumba_codegen.backend.plans import plan_node

    ins, outs = _indexed_graph(transcendental=True)
    fn = compile_fn(ins, outs, "policy_rewritten", cache_key="indexed")
    fused = _indexed_fused(fn)
    assert fused and all(is_policy_op(n.op) for n in fused)
    plans = [plan_node(n) for n in fused]
    assert {p.kind for p in plans} == {"parts"}
    inner = [n for p in plans for n in p.stock_op.apply_nodes if is_policy_op(n.op)]
    inner_bodies = [plan_node(n).body for n in inner if isinstance(n.op, Elemwise)]
    assert any(b.uses_vector_math for b in inner_bodies)
    assert any("comparison_sensitive" in b.classes for b in inner_bodies)
    assert all(ptnumba_codegen.fallback_reason(n) is None for n in (*fused, *inner))
    split = _equal_decisions_and_values(fn, ins, outs, "indexed")
    assert "lowered as its parts" in ptnumba_codegen.explain(fn)

    # the same kernels as one fused indexed loop (the rule switched off): the same bits
    monkeypatch.setattr(indexed_parts, "PARTS_WHEN", (*indexed_parts.PARTS_WHEN, (lambda op, body: False, "off")))
    loop = compile_fn(ins, outs, "policy_rewritten", cache_key="indexed_unsplit")
    assert {plan_node(n).kind for n in _indexed_fused(loop)} == {"stock_loop"}
    joined = loop(*_indexed_values())
    np.testing.assert_array_equal(split[1], joined[1])  # the gradient: gather, exp, scatter-add
    np.testing.assert_allclose(split[0], joined[0], rtol=1e-15)  # a sum: its order may differ

    # under strict nothing is vectorized: the fused indexed loop
    strict = compile_fn(ins, outs, "policy_strict", cache_key="indexed")
    assert {plan_node(n).kind for n in _indexed_fused(strict)} == {"stock_loop"}


def test_scatter_adds_by_one_index_per_axis_are_lowered_as_their_parts(monkeypatch):
    """A Student-t likelihood over ``mu[row, col]`` (a gather by two index vectors from a
    matrix) and its gradient, a scatter-add of a vector into the matrix: the value has the
    ndim of the region it writes, not its target's, and the inner graph runs as is, so the
    kernel is lowered as its parts (the log1p vectorized). Repeated (row, col) pairs add
    in order: the gradient equals the fused indexed loop's bit for bit, and stock strict's."""
    from ptnumba_codegen.backend import indexed_parts
    from ptnumba_codegen.backend.plans import plan_node

    mu, y = pt.matrix("mu"), pt.vector("y")
    row, col = pt.vector("row", dtype="uint8"), pt.vector("col", dtype="uint8")
    z = (y - mu[row, col]) ** 2
    logp = pt.switch(pt.gt(z, 1e-300), -3.5 * pt.log1p(z / 5.0), -np.inf).sum()
    ins, outs = [mu, y, row, col], [logp, pytensor.grad(logp, mu)]
    r = np.random.default_rng(11)
    rowv, colv = r.integers(0, 3, 200).astype("uint8"), r.integers(0, 5, 200).astype("uint8")
    rowv[:4], colv[:4] = 2, 4  # one cell written four times in a row
    muv = r.normal(size=(3, 5))
    yv = r.normal(size=200)
    yv[7] = muv[rowv[7], colv[7]]  # z == 0: the comparison's other branch
    vals = (muv, yv, rowv, colv)

    fn = compile_fn(ins, outs, "policy_rewritten", cache_key="two_index_scatter")
    [node] = _indexed_fused(fn)
    [scatter] = [n for n in node.op.fgraph.apply_nodes if isinstance(n.op, indexed_parts.SCATTERS)]
    assert scatter.inputs[1].type.ndim < scatter.inputs[0].type.ndim
    assert plan_node(node).kind == "parts"
    got = fn(*vals)
    ref = compile_fn(ins, outs, "stock_strict", cache_key="two_index_scatter")(*vals)
    assert got[0] == -np.inf and ref[0] == -np.inf
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-13)

    monkeypatch.setattr(indexed_parts, "PARTS_WHEN", (*indexed_parts.PARTS_WHEN, (lambda op, body: False, "off")))
    loop = compile_fn(ins, outs, "policy_rewritten", cache_key="two_index_scatter_unsplit")
    assert {plan_node(n).kind for n in _indexed_fused(loop)} == {"stock_loop"}
    np.testing.assert_array_equal(got[1], loop(*vals)[1])
    yv[7] += 0.5  # no tie: every element on the likelihood's branch
    ref_sum = compile_fn(ins, outs, "stock_strict", cache_key="two_index_scatter")(*vals)[0]
    assert np.isfinite(ref_sum)
    np.testing.assert_allclose(fn(*vals)[0], ref_sum, rtol=1e-13)


def test_prod_without_zeros_reduction():
    from pytensor.tensor.math import ProdWithoutZeros

    X = pt.matrix("X")
    outs = [ProdWithoutZeros(axis=(0,))(X), ProdWithoutZeros(axis=None)(X)]
    fn = compile_fn([X], outs, "policy_rewritten", cache_key="pwz")
    assert all(ptnumba_codegen.fallback_reason(n) is None for n in fn.maker.fgraph.toposort() if is_policy_op(n.op))
    v = np.array([[0.0, 2.0, 3.0], [4.0, 0.0, 0.5], [1.5, 0.0, 2.0]])
    ref = compile_fn([X], outs, "stock_strict", cache_key="pwz")(v)
    for a, e in zip(fn(v), ref, strict=True):
        np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("target_shape, val_shape", [((5, 3), (10,)), ((2, 5, 3), (5, 10)), ((5, 3), (5, 10))])
def test_indexed_writes_with_moved_axes_keep_the_fused_loop(target_shape, val_shape):
    """A scatter-add along a later axis whose value omits leading target axes: PyTensor
    moves those axes right in the inner graph and only the fused loop pads the value, so
    that inner graph does not run as is (numba's inc cannot broadcast it): such a kernel
    keeps the stock indexed loop (`indexed_parts.PARTS_WHEN`); one whose value covers
    them is split. Both equal stock strict."""
    from ptnumba_codegen.backend.plans import plan_node

    rng = np.random.default_rng(42)
    idx = rng.integers(target_shape[-1], size=10).astype(np.int64)
    target = pt.tensor("target", shape=target_shape)
    val = pt.tensor("val", shape=val_shape)
    out = target[(*(slice(None),) * (len(target_shape) - 1), idx)].inc(pt.exp(val))
    key = f"moved_axes_{target_shape}_{val_shape}"
    fn = compile_fn([val, target], out, "policy_rewritten", cache_key=key)
    [node] = _indexed_fused(fn)
    moved = len(val_shape) < len(target_shape)
    assert plan_node(node).kind == ("stock_loop" if moved else "parts")
    valv, tv = rng.normal(size=val_shape), rng.normal(size=target_shape)
    ref = compile_fn([val, target], out, "stock_strict", cache_key=key)(valv, tv)
    np.testing.assert_allclose(fn(valv, tv), ref, rtol=1e-14)
