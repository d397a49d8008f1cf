"""A gather read by several elementwise kernels gets a copy for each (`passes.gather_copies`).

Under the policy every copy is fused into its client (no gathered array left), the values
and every decision equal the stock strict reference's, and the rules of `COPY_WHEN` keep
a gather whole where a copy would cost: a large source, a client the fusion cannot take.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import MergeOptimizer
from pytensor.tensor.subtensor import AdvancedSubtensor

from conftest import compile_fn
from ptnumba_codegen.passes.gather_copies import MAX_SOURCE_ELEMENTS, GatherCopies, copies_wanted

RNG = np.random.default_rng(7)


def _gathers(fn) -> int:
    return sum(isinstance(n.op, AdvancedSubtensor) for n in fn.maker.fgraph.apply_nodes)


def _model(rows, cols):
    """Three elementwise clients of ``W[idx]`` (a sum, exp, a decision) and the gradient,
    whose scatter reads the gather again."""
    W = pt.matrix("W", shape=(rows, cols))
    idx = pt.lvector("idx")
    g = W[idx]
    s = (g * 2.0).sum(1)
    e = pt.exp(g) + 1.0
    m = pt.maximum(g, 0.5)
    cost = s.sum() + (e * m).sum()
    return [W, idx], [s, e, m, pytensor.grad(cost, W)]


def _values(rows, cols, n):
    W = RNG.normal(size=(rows, cols))
    W[0, 0] = 0.5  # a tie of the decision
    idx = RNG.integers(0, rows, size=n)
    idx[:3] = 0
    return W, idx


def test_each_client_reads_its_own_copy_and_the_results_are_the_references():
    inputs, outputs = _model(50, 4)
    policy = compile_fn(inputs, outputs, "policy_default", cache_key="gather_copies_small")
    stock = compile_fn(inputs, outputs, "stock_fast", cache_key="gather_copies_small")
    strict = compile_fn(inputs, outputs, "stock_strict", cache_key="gather_copies_small")
    assert _gathers(stock) >= 1  # stock keeps the gathered array
    assert _gathers(policy) == 0  # every copy fused into its client

    W, idx = _values(50, 4, 1000)
    got, want = policy(W, idx), strict(W, idx)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-14)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-14)
    np.testing.assert_array_equal(got[2], want[2])  # the decision's values: the same elements read
    np.testing.assert_array_equal(got[2] == 0.5, want[2] == 0.5)
    np.testing.assert_allclose(got[3], want[3], rtol=1e-12)
    np.testing.assert_array_equal(got[3] == 0, want[3] == 0)  # the gradient's zero pattern


def test_a_large_source_keeps_one_gathered_array():
    rows = MAX_SOURCE_ELEMENTS // 4 + 1
    inputs, outputs = _model(rows, 4)
    fgraph = FunctionGraph(inputs, outputs, clone=True)
    node = next(n for n in fgraph.apply_nodes if isinstance(n.op, AdvancedSubtensor))
    assert not copies_wanted(fgraph, node)
    small = FunctionGraph(*_model(rows - 1, 4), clone=True)
    node = next(n for n in small.apply_nodes if isinstance(n.op, AdvancedSubtensor))
    assert copies_wanted(small, node)
    policy = compile_fn(inputs, outputs, "policy_default")
    assert _gathers(policy) >= 1
    W, idx = _values(rows, 4, 200)
    strict = compile_fn(inputs, outputs, "stock_strict")
    np.testing.assert_allclose(policy(W, idx)[3], strict(W, idx)[3], rtol=1e-12)


def test_a_client_the_fusion_cannot_take_keeps_the_gather_whole():
    W = pt.matrix("W", shape=(20, 3))
    idx = pt.lvector("idx")
    v = pt.vector("v", shape=(3,))
    g = W[idx]
    fgraph = FunctionGraph([W, idx, v], [pt.exp(g), g.dot(v)], clone=True)
    assert GatherCopies().apply(fgraph) == 0
    assert sum(isinstance(n.op, AdvancedSubtensor) for n in fgraph.apply_nodes) == 1


def test_copies_the_fusion_leaves_are_merged_back():
    inputs, outputs = _model(30, 2)
    fgraph = FunctionGraph(inputs, outputs[:3], clone=True)
    assert GatherCopies().apply(fgraph) == 2
    assert sum(isinstance(n.op, AdvancedSubtensor) for n in fgraph.apply_nodes) == 3
    MergeOptimizer().rewrite(fgraph)  # what merge3 does to copies left unfused
    assert sum(isinstance(n.op, AdvancedSubtensor) for n in fgraph.apply_nodes) == 1
