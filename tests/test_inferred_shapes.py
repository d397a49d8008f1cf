"""Lengths the graph's shape inference knows where the types do not (analysis/inferred_shapes.py):
a kernel whose type leaves a length unknown while PyTensor's shape inference knows it is
small never starts the thread runtime (which would take over the model's small BLAS
calls), and keeps the very loop it had (the chunk function, run on the
calling thread), so its bits do not move.

The kernels here read the output of `Twelve`, an op whose type says ``(None, None)`` and
whose ``infer_shape`` says 12 x 12 (as PyMC's covariances built from a dozen constants)."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.tensor.rewriting.shape import ShapeFeature

import ptnumba_codegen
from conftest import assert_same_bits, policy_nodes
from ptnumba_codegen.analysis.inferred_shapes import inferred_shape, iteration_bound
from ptnumba_codegen.lowering.chunks import chunk_decision, chunking_for, may_chunk
from ptnumba_codegen.passes import policy_codegen
from ptnumba_codegen.policy import load_policy


class Twelve(Op):
    """``x`` tiled into an n x n matrix: type ``(None, None)``, inferred ``(n, n)``."""

    __props__ = ("n",)

    def __init__(self, n=12):
        self.n = n

    def make_node(self, x):
        x = pt.as_tensor(x)
        return Apply(self, [x], [pt.matrix(dtype=x.dtype)])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.resize(inputs[0], (self.n, self.n)).astype(node.outputs[0].dtype)

    def infer_shape(self, fgraph, node, shapes):
        return [(pt.as_tensor(self.n), pt.as_tensor(self.n))]


def _graph(n):
    x = pt.vector("x", shape=(n,))
    m = Twelve(n)(x)
    return x, m


def _fgraph(outputs, inputs, feature=True):
    fg = FunctionGraph(inputs, outputs, clone=False)
    if feature:
        fg.attach_feature(ShapeFeature())
    return fg


def test_the_inference_fills_in_what_the_type_leaves_unknown():
    x, m = _graph(12)
    y = pt.exp(m) * x
    fg = _fgraph([y], [x])
    assert m.type.shape == (None, None)
    assert inferred_shape(fg, m) == (12, 12)
    assert iteration_bound(fg, y.owner) == 144


def test_a_reductions_outputs_do_not_line_up_with_its_input():
    x, m = _graph(263)  # 263 x 263 in, 263 out: the space is the input's
    s = pt.sqr(m[:, :4]).sum(axis=1)
    fg = _fgraph([s], [x])
    assert iteration_bound(fg, s.owner) == 263 * 4


def test_unknown_without_a_feature_or_a_known_length():
    x, m = _graph(12)
    y = pt.exp(m)
    assert iteration_bound(_fgraph([y], [x], feature=False), y.owner) is None
    v = pt.vector("v")  # a graph input: its length is the caller's
    z = pt.exp(v)
    assert iteration_bound(_fgraph([z], [v]), z.owner) is None
    w = pt.exp(m) * pt.matrix("w")  # unknown on both axes in one array, 12 in the other: 12
    assert iteration_bound(_fgraph([w], [x, w.owner.inputs[1]]), w.owner) == 144


def test_the_bound_decides_may_chunk_where_the_type_does_not():
    x, m = _graph(12)
    y = pt.exp(m)
    parallel = load_policy("default").parallel
    assert may_chunk(y.owner, parallel)  # the type alone: could be large
    assert not may_chunk(y.owner, parallel, size_bound=144)
    assert may_chunk(y.owner, parallel, size_bound=10**7)


@pytest.fixture(scope="module")
def compiled():
    """``exp(m) * 2`` and ``exp(m).sum()`` over a Twelve, compiled with the bound and with
    the types alone (the pass's inference replaced by None)."""

    def build():
        x, m = _graph(12)
        mode = ptnumba_codegen.policy_mode("default")
        with pytensor.config.change_flags(numba__cache=False):
            return pytensor.function([x], [pt.exp(m) * 2.0, pt.exp(m).sum()], mode=mode)

    with_bound = build()
    real = policy_codegen.unknown_length_bounds
    policy_codegen.unknown_length_bounds = lambda fgraph, nodes: {}
    try:
        without = build()
    finally:
        policy_codegen.unknown_length_bounds = real
    return with_bound, without


def test_a_small_inferred_kernel_keeps_its_loop_and_bits(compiled):
    with_bound, without = compiled
    bounds = [n.op.size_bound for n in policy_nodes(with_bound) if n.outputs[0].type.ndim or n.inputs[0].type.ndim]
    assert 144 in bounds
    assert all(n.op.size_bound is None for n in policy_nodes(without))
    x = np.linspace(-3, 3, 12)
    for a, b in zip(with_bound(x), without(x), strict=True):
        assert_same_bits(a, b)
    np.testing.assert_allclose(with_bound(x)[1], np.exp(np.resize(x, (12, 12))).sum(), rtol=1e-12)
    text = ptnumba_codegen.explain(with_bound)
    assert "never split: 144 elements by the graph's shape inference" in text


def test_the_chunk_decision_keeps_the_chunk_function_without_threads(compiled):
    with_bound, _ = compiled
    [node] = [n for n in policy_nodes(with_bound) if n.op.size_bound == 144 and n.outputs[0].type.ndim == 2]
    from ptnumba_codegen.backend.plans import plan_node

    plan = plan_node(node)
    chunked, chunking, why = chunk_decision(plan.spec, plan.body, node.op.policy.parallel)
    assert chunked and chunking is None and "shape inference" in why
    assert 144 < chunking_for(node.op.policy.parallel, plan.body).min_elements
