"""Array updates from native scalars (`compact.scalar_writes`, `passes.scalar_writes`).

The node function of a `ScalarizedIncSubtensor` is the compact increment's intrinsic given
the scalar: stock's array bit for bit (the increment of ``TensorFromScalar`` of the same
scalar), stock's ``IndexError`` out of bounds, no numba function of its own. In a compiled
Scan step that fills a state element by element, every such increment reads its scalar
(no ``TensorFromScalar`` left feeding one), in place where the increment was, with the
values of the same function compiled without the rewrite and, at ties, the decisions of the
as-written reference.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Constant
from pytensor.scan.op import Scan
from pytensor.tensor.basic import TensorFromScalar, tensor_from_scalar
from pytensor.tensor.subtensor import IncSubtensor

import ptnumba_codegen
from conftest import node_caller, numba_compiles, warm_allocator
from ptnumba_codegen.compact.ops import CompactIncSubtensor, compact_op
from ptnumba_codegen.compact.scalar_writes import ScalarizedIncSubtensor, scalarized, why_not_scalarized
from ptnumba_codegen.passes import scalar_writes

RNG = np.random.default_rng(5)


def _nodes(target_of, set_instead_of_inc, inplace, dtype="float64"):
    x = pt.matrix("x", dtype=dtype)
    s = ps.get_scalar_type(dtype)("s")
    i = pt.lscalar("i")
    fn = pt.set_subtensor if set_instead_of_inc else pt.inc_subtensor
    stock = fn(target_of(x, i), tensor_from_scalar(s)).owner
    if inplace:
        op = stock.op
        stock = IncSubtensor(op.idx_list, inplace=True, set_instead_of_inc=op.set_instead_of_inc).make_node(*stock.inputs)
    compact = compact_op(stock).make_node(*stock.inputs)
    assert type(compact.op) is CompactIncSubtensor and why_not_scalarized(compact) is None
    written = scalarized(compact).owner
    assert type(written.op) is ScalarizedIncSubtensor and written.op.destroy_map == stock.op.destroy_map
    assert written.inputs[1] is s
    return stock, written


TARGETS = {
    "element": lambda x, i: x[i, 1],
    "element from the end": lambda x, i: x[-1, i],
    "column": lambda x, i: x[:, i],
    "slice": lambda x, i: x[1:, ::2],
}


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("set_instead_of_inc", [False, True])
@pytest.mark.parametrize("where", list(TARGETS))
def test_a_scalar_update_is_stocks(where, set_instead_of_inc, inplace):
    stock, written = _nodes(TARGETS[where], set_instead_of_inc, inplace)
    value = 0.1 + 1e-17
    index_args = [np.int64(v.data) if isinstance(v, Constant) else np.int64(2) for v in stock.inputs[2:]]
    x = RNG.normal(size=(4, 3))
    warm_allocator()
    with numba_compiles() as compiled:
        got = node_caller(written)(x.copy(), value, *index_args)
    assert compiled == ["call"], compiled  # the intrinsic, not the inner graph's function
    want = node_caller(stock)(x.copy(), np.array(value), *index_args)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    if where != "slice":
        bad = [np.int64(v.data) if isinstance(v, Constant) else np.int64(5) for v in stock.inputs[2:]]
        with pytest.raises(IndexError) as want_err:
            node_caller(stock)(x.copy(), np.array(value), *bad)
        with pytest.raises(IndexError) as got_err:
            node_caller(written)(x.copy(), value, *bad)
        assert str(got_err.value) == str(want_err.value)


@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_other_dtypes_store_as_stock(dtype):
    stock, written = _nodes(TARGETS["element"], False, False, dtype=dtype)
    x = (RNG.normal(size=(4, 3)) * 100).astype(dtype)
    value = np.array(37.3).astype(dtype)
    index_args = [np.int64(v.data) if isinstance(v, Constant) else np.int64(2) for v in stock.inputs[2:]]
    got = node_caller(written)(x.copy(), value[()], *index_args)
    want = node_caller(stock)(x.copy(), value, *index_args)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_other_updates_keep_their_array():
    x, v, s = pt.matrix("x"), pt.vector("v"), pt.dscalar("s")
    for node, why in [
        (pt.set_subtensor(x[0], v).owner, "TensorFromScalar"),  # an array update
        (pt.set_subtensor(x[0, 1], s).owner, "TensorFromScalar"),  # a 0-d tensor, not from a scalar
    ]:
        compact = compact_op(node).make_node(*node.inputs)
        assert why in why_not_scalarized(compact)
    stock = pt.set_subtensor(x[0, 1], tensor_from_scalar(ps.float64("s"))).owner
    assert "not the compact IncSubtensor" in why_not_scalarized(stock)


def _hmm_like():
    """A Scan step that fills a 2-element state with set_subtensor per element, one of them
    a minimum of a product and a threshold (a decision), and its gradient."""
    xs = [pt.vector(n) for n in "xyzw"]
    b = pt.vector("b")

    def step(x, y, z, w, b, prev):
        state = pt.zeros(2)
        state = pt.set_subtensor(state[0], x * y * z * w)
        state = pt.set_subtensor(state[1], pt.minimum(state[0], b) + prev[1] * 0.5)
        return pt.inc_subtensor(state[0], prev[0] * 0.25)

    out = pytensor.scan(step, sequences=[*xs, b], outputs_info=[pt.ones(2)], return_updates=False)
    cost = out[:, 1].sum()
    return [*xs, b], [cost, *pytensor.grad(cost, xs)]


def _data(inputs, outputs):
    rng = np.random.default_rng(13)
    vals = [rng.uniform(0.5, 2.0, size=40) for _ in range(4)]
    product = pytensor.function(inputs[:4], inputs[0] * inputs[1] * inputs[2] * inputs[3],
                                mode=Mode(linker="numba", optimizer=None))
    with pytensor.config.change_flags(numba__fastmath=False):
        ties = product(*vals)  # the product as written: a tie at every step
    return [*vals, ties]


def _scalar_writes_in_steps(fn) -> list:
    scans = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Scan)]
    assert scans
    written, boxed = [], 0
    for scan in scans:
        inner = scan.op.fgraph
        written += [n for n in inner.apply_nodes if isinstance(n.op, ScalarizedIncSubtensor)]
        boxed += sum(isinstance(n.op, TensorFromScalar) and any(isinstance(c.op, IncSubtensor) for c, _ in inner.clients[n.outputs[0]])
                     for n in inner.apply_nodes)
    assert boxed == 0
    return written


def test_a_scan_step_writes_its_scalars_with_the_same_values(monkeypatch):
    monkeypatch.setenv("PTNUMBA_CODEGEN_REWRITTEN_GRAPHS", "off")
    inputs, outputs = _hmm_like()
    data = _data(inputs, outputs)
    fn = pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode("default"))
    written = _scalar_writes_in_steps(fn)
    assert written and any(n.op.destroy_map for n in written)  # the in-place writes stay in place
    got = fn(*data)
    monkeypatch.setattr(scalar_writes, "why_not_scalarized", lambda node: "off")
    without = pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode("default"))
    assert not any(isinstance(n.op, ScalarizedIncSubtensor) for s in without.maker.fgraph.apply_nodes
                   if isinstance(s.op, Scan) for n in s.op.fgraph.apply_nodes)
    for a, b in zip(got, without(*data), strict=True):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_decisions_through_a_scalar_write_are_as_written(monkeypatch):
    monkeypatch.setenv("PTNUMBA_CODEGEN_REWRITTEN_GRAPHS", "off")
    inputs, outputs = _hmm_like()
    data = _data(inputs, outputs)
    with pytensor.config.change_flags(numba__fastmath=False):
        want = pytensor.function(inputs, outputs, mode=Mode(linker="numba", optimizer=None))(*data)
    fn = pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode("default"))
    assert _scalar_writes_in_steps(fn)
    got = fn(*data)
    for a, b in zip(got[1:], want[1:], strict=True):
        assert np.array_equal(a == 0, b == 0)  # the branch each tie took
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
