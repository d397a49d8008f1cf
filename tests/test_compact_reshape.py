"""``Reshape`` as an intrinsic (`compact.reshape`): from vectors, matrices (C, F and
strided) and 3-d arrays to one, two and three dimensions, with ``-1``: stock's array bit
for bit, of stock's numba type and strides, stock's errors with stock's messages (a size
that does not match, two ``-1``), no memory kept (the contiguous copy of a strided input
given back), and no function of its own (stock's compiles ``reshape``). A reshape to 0-d
keeps the stock op; a model's reshapes under `strict` give stock strict's bits."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest
from numba.core.runtime import _nrt_python as nrt_stats
from pytensor.tensor.shape import Reshape

from conftest import assert_same_bits, compile_fn, node_caller, numba_compiles, warm_allocator
from ptnumba_codegen.compact.ops import CompactReshape, compact_op

CASES = {
    "vector to matrix": (1, 2, [2, 3], lambda: np.arange(6.0)),
    "matrix to vector": (2, 1, [-1], lambda: np.arange(6.0).reshape(2, 3)),
    "F matrix": (2, 2, [3, -1], lambda: np.asfortranarray(np.arange(6.0).reshape(2, 3))),
    "strided matrix to 3-d": (2, 3, [1, 3, 2], lambda: np.arange(12.0).reshape(4, 3)[::2]),
    "3-d to matrix": (3, 2, [4, 6], lambda: np.arange(24.0).reshape(2, 3, 4)),
    "empty": (2, 2, [0, 5], lambda: np.zeros((0, 5))),
}


def _nodes(xnd, ndim):
    x, s = pt.tensor("x", shape=(None,) * xnd), pt.lvector("s")
    stock = Reshape(ndim)(x, s).owner
    compact = compact_op(stock)
    assert type(compact) is CompactReshape
    return stock, compact.make_node(*stock.inputs)


def _outcome(fn, *args):
    try:
        return fn(*args)
    except (ValueError, NotImplementedError) as err:
        return (type(err), str(err))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_reshape_is_stocks(case):
    xnd, ndim, shape, value = CASES[case]
    stock, compact = _nodes(xnd, ndim)
    want_fn, got_fn = node_caller(stock), node_caller(compact)
    want, got = want_fn(value(), np.array(shape)), got_fn(value(), np.array(shape))
    assert got_fn.nopython_signatures[0].return_type == want_fn.nopython_signatures[0].return_type
    assert got.shape == want.shape and got.strides == want.strides and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("bad", [[4, 2], [-1, -1], [5, -1]])
def test_a_shape_that_does_not_fit_raises_stocks_error(bad):
    stock, compact = _nodes(1, 2)
    want = _outcome(node_caller(stock), np.arange(6.0), np.array(bad))
    got = _outcome(node_caller(compact), np.arange(6.0), np.array(bad))
    assert isinstance(want, tuple) and got == want


def _allocations(fn, *args) -> tuple[int, int]:
    """NRT allocations and frees of 50 calls (the inputs' adapters included)."""
    fn(*args)
    was_on = nrt_stats.memsys_stats_enabled()
    nrt_stats.memsys_enable_stats()
    try:
        before = nrt_stats.memsys_get_stats_alloc(), nrt_stats.memsys_get_stats_free()
        for _ in range(50):
            out = fn(*args)
            del out
        after = nrt_stats.memsys_get_stats_alloc(), nrt_stats.memsys_get_stats_free()
    finally:
        if not was_on:
            nrt_stats.memsys_disable_stats()
    return after[0] - before[0], after[1] - before[1]


def test_the_contiguous_copy_is_given_back():
    """A strided input is copied, and every copy freed: as many allocations and frees as
    stock's function makes."""
    stock, compact = _nodes(2, 1)
    args = (np.asfortranarray(np.arange(12.0).reshape(3, 4)), np.array([-1]))
    got, want = _allocations(node_caller(compact), *args), _allocations(node_caller(stock), *args)
    assert got == want and got[0] == got[1] > 50


def test_it_is_lowered_into_its_caller():
    stock, compact = _nodes(2, 1)
    value = np.arange(6.0).reshape(2, 3)
    warm_allocator()
    with numba_compiles() as compiled:
        got = node_caller(compact)(value, np.array([6]))
    assert "reshape" not in compiled and "np_reshape_impl" not in compiled, compiled
    with numba_compiles() as compiled:
        want = node_caller(stock)(value, np.array([6]))
    assert "reshape" in compiled, compiled  # the control
    assert got.tobytes() == want.tobytes()


def test_a_reshape_to_0d_keeps_the_stock_op():
    node = Reshape(0)(pt.dvector("x"), pt.lvector("s")).owner
    assert compact_op(node) is None


def test_a_models_reshapes_are_stock_stricts():
    x, w = pt.dvector("x"), pt.dmatrix("w")
    m = x.reshape((3, -1))
    outs = [(m * w).sum(), pt.grad((pt.exp(m) * w).sum(), x), m.T.reshape((-1,)) * 2.0]
    rng = np.random.default_rng(6)
    values = [rng.normal(size=12), rng.normal(size=(3, 4))]
    got_fn = compile_fn([x, w], outs, "policy_strict")
    assert CompactReshape in {type(n.op) for n in got_fn.maker.fgraph.apply_nodes}
    for a, b in zip(got_fn(*values), compile_fn([x, w], outs, "stock_strict")(*values), strict=True):
        assert_same_bits(a, b)
