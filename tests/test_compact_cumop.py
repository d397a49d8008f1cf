"""A vector's running sum or product as an intrinsic (`compact.cumop`): for both modes,
float64 and float32, empty, one-element, long and strided vectors, signed zeros, infinities,
NaN, overflow and underflow, the intrinsic returns stock's vector bit for bit and of stock's
numba type, with stock's function compiled fast or not, and compiles nothing of its own
(stock's compiles its function and the overload). Matrices and integers keep the stock op;
a model's running sums under `strict` are stock strict's."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.extra_ops import CumOp

from conftest import assert_same_bits, compile_fn, lowered_into_caller, node_caller
from ptnumba_codegen.compact.ops import CompactCumOp, compact_op


def _nodes(mode, dtype="float64"):
    x = pt.vector("x", dtype=dtype)
    stock = CumOp(axis=0, mode=mode)(x).owner
    compact = compact_op(stock)
    assert type(compact) is CompactCumOp
    return stock, compact.make_node(*stock.inputs)


def _vectors(dtype):
    rng = np.random.default_rng(11)
    big = np.finfo(dtype).max
    tiny = np.finfo(dtype).tiny
    cases = [
        np.zeros(0),
        np.array([-0.0]),
        np.array([-0.0, -0.0, 0.0, -0.0]),
        np.array([1.0, np.inf, -np.inf, 2.0]),
        np.array([3.0, np.nan, 1.0]),
        np.array([big, big, -big]),
        np.array([tiny, tiny / 2, -tiny, 0.5]),
        rng.normal(size=7) * 1e3,
        rng.normal(size=1000),
        rng.uniform(0.9, 1.1, size=500),
        np.array([0.1] * 37),
    ]
    return [np.asarray(v, dtype=dtype) for v in cases]


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mode", ["add", "mul"])
def test_the_running_value_is_stocks(mode, dtype, fast):
    with pytensor.config.change_flags(numba__fastmath=fast):
        stock, compact = _nodes(mode, dtype)
        want_fn, got_fn = node_caller(stock), node_caller(compact)
        for v in _vectors(dtype):
            for x in (v, v[::-1], np.repeat(v, 2)[::2]):  # contiguous, reversed, every other element
                want, got = want_fn(x), got_fn(x)
                assert_same_bits(got, want)
        assert got_fn.nopython_signatures[0].return_type == want_fn.nopython_signatures[0].return_type


def test_it_is_lowered_into_its_caller():
    stock, compact = _nodes("add")
    got, want = lowered_into_caller(stock, compact, "cumop", np.linspace(-1.0, 1.0, 9))
    assert_same_bits(got, want)


@pytest.mark.parametrize(
    "make",
    [
        lambda: CumOp(axis=1, mode="add")(pt.dmatrix("x")),
        lambda: CumOp(axis=0, mode="add")(pt.lvector("x")),
        lambda: CumOp(axis=0, mode="mul")(pt.bvector("x")),
    ],
)
def test_other_nodes_keep_the_stock_op(make):
    assert compact_op(make().owner) is None


def test_a_models_running_sums_are_stock_stricts():
    """LKJ's packed Cholesky factor reads its row starts from a running sum of a reversed
    vector; here with a running product and both gradients, under `strict`."""
    x = pt.dvector("x")
    rev = x[::-1]
    outs = [pt.cumsum(rev**2), pt.cumprod(pt.exp(x * 0.1))]
    cost = outs[0].sum() + (outs[1] * 0.5).sum()
    outs = [*outs, pt.grad(cost, x)]
    v = np.random.default_rng(4).normal(size=6)
    v[2] = -0.0
    got_fn = compile_fn([x], outs, "policy_strict")
    assert CompactCumOp in {type(n.op) for n in got_fn.maker.fgraph.apply_nodes}
    for a, b in zip(got_fn(v), compile_fn([x], outs, "stock_strict")(v), strict=True):
        assert_same_bits(a, b)
