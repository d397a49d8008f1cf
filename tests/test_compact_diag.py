"""A matrix's diagonal as an intrinsic (`compact.diag`): for offsets on both sides,
beyond the matrix and none, square, wide, tall, empty and F-ordered or strided matrices,
and integer and bool dtypes, with ``view`` or not, the intrinsic returns stock's vector bit
for bit and of stock's numba type, and compiles nothing of its own (stock's compiles its
function and ``np.diag``'s overload). A 3-d input keeps the stock op; a model's diagonal
under `strict` is stock strict's."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest
from pytensor.tensor.basic import ExtractDiag

from conftest import assert_same_bits, compile_fn, lowered_into_caller, node_caller
from ptnumba_codegen.compact.ops import CompactExtractDiag, compact_op

SHAPES = [(4, 4), (3, 5), (5, 2), (0, 3), (1, 1)]


def _nodes(offset, view, dtype="float64"):
    x = pt.matrix("x", dtype=dtype)
    stock = ExtractDiag(offset=offset, view=view)(x).owner
    compact = compact_op(stock)
    assert type(compact) is CompactExtractDiag
    return stock, compact.make_node(*stock.inputs)


def _values(shape, dtype, order):
    v = np.random.default_rng(5).normal(size=shape) * 10
    v = v.astype(dtype) if dtype != "bool" else v > 0
    return np.asfortranarray(v) if order == "F" else v


@pytest.mark.parametrize("view", [True, False])
@pytest.mark.parametrize("offset", [0, 1, -1, 3, -4, 6])
def test_the_diagonal_is_stocks(offset, view):
    stock, compact = _nodes(offset, view)
    for shape in SHAPES:
        for order in "CF":
            v = _values(shape, "float64", order)
            want_fn, got_fn = node_caller(stock), node_caller(compact)
            want, got = want_fn(v), got_fn(v)
            assert got_fn.nopython_signatures[0].return_type == want_fn.nopython_signatures[0].return_type
            assert got.shape == want.shape and got.tobytes() == want.tobytes(), (shape, order)
    strided = _values((6, 8), "float64", "C")[::2, 1::3]
    assert node_caller(compact)(strided).tobytes() == node_caller(stock)(strided).tobytes()


@pytest.mark.parametrize("dtype", ["int8", "int64", "bool", "float32"])
def test_other_dtypes_are_stocks(dtype):
    stock, compact = _nodes(1, False, dtype)
    v = _values((4, 5), dtype, "C")
    assert node_caller(compact)(v).tobytes() == node_caller(stock)(v).tobytes()


def test_it_is_lowered_into_its_caller():
    stock, compact = _nodes(-1, False)
    got, want = lowered_into_caller(stock, compact, "extract_diag", _values((5, 5), "float64", "C"))
    assert got.tobytes() == want.tobytes()


def test_a_3d_input_keeps_the_stock_op():
    node = ExtractDiag(axis1=1, axis2=2)(pt.tensor3("x")).owner
    assert compact_op(node) is None


def test_a_models_diagonal_is_stock_stricts():
    """A Cholesky factor's log-determinant and its gradient (the diagonal and its
    gradient's scatter) under `strict`."""
    x = pt.dmatrix("x")
    chol = pt.linalg.cholesky(x @ x.T + pt.eye(4))
    logdet = pt.log(pt.diagonal(chol)).sum()
    outs = [logdet, pt.grad(logdet, x), pt.diagonal(x, offset=1) * 2.0]
    v = np.random.default_rng(2).normal(size=(4, 4))
    got_fn = compile_fn([x], outs, "policy_strict")
    assert CompactExtractDiag in {type(n.op) for n in got_fn.maker.fgraph.apply_nodes}
    for a, b in zip(got_fn(v), compile_fn([x], outs, "stock_strict")(v), strict=True):
        assert_same_bits(a, b)
