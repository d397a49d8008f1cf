"""Gathers and scatters by integer vectors as intrinsics (`compact.advanced`).

For ``x[idx]`` (vectors, rows of matrices and 3-d arrays), ``x[rows, cols]`` (elements and
rows), ``x[:, idx]`` (full slices before the vectors: stock's transposed buffer), with index vectors of several dtypes, negative indices, an index of length 1
broadcast against another, and scatters (``inc_subtensor``/``set_subtensor``, in place or
not) with updates of the indexed shape, 0-d, of length 1 along a dimension (statically and
only at run time) and of lower rank: the intrinsic returns stock's array bit for bit and of
stock's numba type (repeated indices add up in stock's order), raises stock's errors with
stock's messages, and compiles nothing of its own. An index out of bounds raises
``IndexError`` (stock has no bounds check there). Slices, boolean masks, matrix indices and
``ignore_duplicates`` keep the stock op, and so do slices other than full ones before the vectors. A hierarchical model's gradient under ``strict``
is stock strict's, bit for bit, with its gathers and scatters compact.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor

from conftest import assert_same_bits, compile_fn, node_caller, numba_compiles, warm_allocator
from ptnumba_codegen.compact.advanced import SHAPES_MESSAGE
from ptnumba_codegen.compact.increments import BROADCAST_MESSAGE
from ptnumba_codegen.compact.ops import CompactAdvancedIncSubtensor, CompactAdvancedSubtensor, compact_op

RNG = np.random.default_rng(51)

ALL = slice(None)  # a full slice before the index vectors

# gathers: (x shape, index arrays or full slices)
GATHERS = {
    "vector": ((6,), [np.array([0, 5, -1, 2, 2, -6])]),
    "vector, uint8": ((6,), [np.array([5, 0, 3, 3], dtype="uint8")]),
    "vector, int8": ((6,), [np.array([-1, -2, 0], dtype="int8")]),
    "rows": ((4, 3), [np.array([3, 0, 0, -1])]),
    "rows of a 3-d array": ((4, 3, 2), [np.array([1, 3, 1], dtype="int32")]),
    "elements": ((4, 3), [np.array([0, 1, 3, -1]), np.array([2, 0, 1, 1])]),
    "elements, one index of length 1": ((4, 3), [np.array([2]), np.array([2, 0, 1, 1])]),
    "rows of a 3-d array by two": ((4, 3, 2), [np.array([0, 3], dtype="uint8"), np.array([2, -3])]),
    "empty": ((4, 3), [np.array([], dtype="int64")]),
    # after full slices (an LDA's phi[:, w]): stock gathers into a buffer with the index
    # group first and returns it transposed
    "columns": ((4, 3), [ALL, np.array([2, 0, -1, 2])]),
    "columns of a 3-d array": ((4, 3, 2), [ALL, np.array([1, 2, 1])]),
    "last axis of a 3-d array": ((4, 3, 2), [ALL, ALL, np.array([1, 0, -2, 1, 1])]),
    "elements after a slice": ((4, 3, 2), [ALL, np.array([0, 2, 1]), np.array([1, 1, 0])]),
}

# scatters: (x shape, index arrays, y static shape, y shape, a y shape that does not broadcast)
SCATTERS = {
    "vector": ((6,), [np.array([0, 5, -1, 2, 2])], (None,), (5,), (4,)),
    "vector, 0-d update": ((6,), [np.array([1, 1, 4], dtype="uint8")], (), (), None),
    "vector, update of length 1 at run time": ((6,), [np.array([3, 3, 0])], (None,), (1,), (2,)),
    "rows": ((4, 3), [np.array([3, 0, 0, -1])], (None, None), (4, 3), (4, 2)),
    "rows, update statically 1 wide": ((4, 3), [np.array([3, 0, 1])], (None, 1), (3, 1), (2, 1)),
    "rows, lower-rank update": ((4, 3), [np.array([1, 2])], (None,), (3,), (2,)),
    "elements": ((4, 3), [np.array([0, 1, 3, 1]), np.array([2, 0, 1, 0])], (None,), (4,), (3,)),
    "elements, 0-d update": ((4, 3), [np.array([0, 1, 2]), np.array([0, 1, 2])], (), (), None),
    "rows of a 3-d array by two": ((4, 3, 2), [np.array([0, 3, 0]), np.array([2, 1, 2])], (None, None), (3, 2), (3, 3)),
    "columns": ((4, 3), [ALL, np.array([2, 0, 2, -1])], (None, None), (4, 4), (3, 4)),
    "columns, update 1 high": ((4, 3), [ALL, np.array([2, 0, 2])], (1, None), (1, 3), (1, 2)),
    "columns of a 3-d array": ((4, 3, 2), [ALL, np.array([1, 2, 1])], (None, None, None), (4, 3, 2), (4, 2, 2)),
    "last axis of a 3-d array, lower-rank update": ((4, 3, 2), [ALL, ALL, np.array([1, 0, 1])], (None,), (3,), (2,)),
    "elements after a slice": ((4, 3, 2), [ALL, np.array([0, 2, 0]), np.array([1, 1, 1])], (None, None), (4, 3), (4, 2)),
}


def _tensor(name, value, static=None):
    return pt.tensor(name, shape=static if static is not None else (None,) * np.ndim(value), dtype=value.dtype)


def _indices(idxs):
    """The index variables (full slices kept) and the index values the node reads."""
    variables = [v if v is ALL else _tensor(f"i{k}", v) for k, v in enumerate(idxs)]
    return tuple(variables), [v for v in idxs if v is not ALL]


def _gather(case):
    shape, idxs = GATHERS[case]
    x = pt.tensor("x", shape=(None,) * len(shape), dtype="float64")
    indices, values = _indices(idxs)
    stock = x[indices].owner
    assert type(stock.op) is AdvancedSubtensor
    compact = compact_op(stock)
    assert type(compact) is CompactAdvancedSubtensor
    return stock, compact.make_node(*stock.inputs), [RNG.normal(size=shape), *values]


def _scatter(case, set_instead_of_inc, inplace, y_shape=None):
    shape, idxs, y_static, y_value_shape, _ = SCATTERS[case]
    x = pt.tensor("x", shape=(None,) * len(shape), dtype="float64")
    y = pt.tensor("y", shape=y_static, dtype="float64")
    indices, values = _indices(idxs)
    fn = pt.set_subtensor if set_instead_of_inc else pt.inc_subtensor
    stock = fn(x[indices], y).owner
    if inplace:
        op = stock.op
        stock = AdvancedIncSubtensor(op.idx_list, inplace=True, set_instead_of_inc=op.set_instead_of_inc).make_node(*stock.inputs)
    assert type(stock.op) is AdvancedIncSubtensor
    compact = compact_op(stock)
    assert type(compact) is CompactAdvancedIncSubtensor and compact.inplace == inplace
    ys = RNG.normal(size=y_value_shape if y_shape is None else y_shape)
    return stock, compact.make_node(*stock.inputs), [RNG.normal(size=shape), ys, *values]


def _run(node, args):
    call = node_caller(node)
    try:
        out = call(*[np.copy(a) for a in args])
    except ValueError as err:
        return ("raised", str(err)), None
    return out, call.nopython_signatures[0].return_type


def _assert_same(got, want):
    (g, g_type), (w, w_type) = got, want
    assert g_type == w_type
    assert g.shape == w.shape and g.strides == w.strides and g.tobytes() == w.tobytes()


@pytest.mark.parametrize("case", sorted(GATHERS))
def test_a_gather_is_stocks(case):
    stock, compact, args = _gather(case)
    _assert_same(_run(compact, args), _run(stock, args))


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("set_instead_of_inc", [False, True])
@pytest.mark.parametrize("case", sorted(SCATTERS))
def test_a_scatter_is_stocks(case, set_instead_of_inc, inplace):
    stock, compact, args = _scatter(case, set_instead_of_inc, inplace)
    _assert_same(_run(compact, args), _run(stock, args))
    bad = SCATTERS[case][4]
    if bad is not None:
        stock, compact, args = _scatter(case, set_instead_of_inc, inplace, y_shape=bad)
        assert _run(stock, args)[0] == _run(compact, args)[0] == ("raised", BROADCAST_MESSAGE)


def test_repeated_indices_add_up_in_stocks_order():
    """``x[i] += y[k]`` for every ``k`` in order: where the order matters (1e16 + 1 - 1e16)
    the bits are stock's."""
    x, y, i = pt.dvector("x"), pt.dvector("y"), pt.lvector("i")
    stock = pt.inc_subtensor(x[i], y).owner
    compact = compact_op(stock).make_node(*stock.inputs)
    args = [np.zeros(3), np.array([1e16, 1.0, -1e16, 1.0, 0.1, 0.2, 0.3]), np.array([0, 0, 0, 0, 2, 2, 2])]
    got, want = _run(compact, args), _run(stock, args)
    _assert_same(got, want)
    assert got[0][0] == 1.0  # ((1e16 + 1) - 1e16) + 1 in order


def test_index_vectors_that_do_not_broadcast_raise_stocks_error():
    _, compact, args = _gather("elements")
    stock, _, _ = _gather("elements")
    bad = [args[0], np.array([0, 1, 2]), np.array([0, 1])]
    assert _run(stock, bad)[0] == _run(compact, bad)[0] == ("raised", SHAPES_MESSAGE)
    stock, compact, args = _scatter("elements", False, False)
    bad = [args[0], np.ones(3), np.array([0, 1, 2]), np.array([0, 1])]
    assert _run(stock, bad)[0] == _run(compact, bad)[0] == ("raised", SHAPES_MESSAGE)


@pytest.mark.parametrize("kind", ["gather", "scatter"])
@pytest.mark.parametrize("bad_index", [6, -7])
def test_an_index_out_of_bounds_raises_index_error(kind, bad_index):
    """Stock reads or writes outside the array there (no bounds check); the intrinsic raises."""
    if kind == "gather":
        _, compact, args = _gather("vector")
        args[1] = np.array([0, bad_index])
    else:
        _, compact, args = _scatter("vector", False, False)
        args[1], args[2] = np.ones(2), np.array([0, bad_index])
    with pytest.raises(IndexError, match="out of bounds"):
        node_caller(compact)(*args)


@pytest.mark.parametrize(("xdtype", "ydtype"), [("float32", "float64"), ("float64", "int64"), ("int64", "int8"),
                                                 ("int8", "int8"), ("bool", "bool")])
@pytest.mark.parametrize("set_instead_of_inc", [False, True])
def test_mixed_dtypes_add_and_store_as_stock(xdtype, ydtype, set_instead_of_inc):
    x = pt.tensor("x", shape=(None,), dtype=xdtype)
    y = pt.tensor("y", shape=(None,), dtype=ydtype)
    i = pt.lvector("i")
    fn = pt.set_subtensor if set_instead_of_inc else pt.inc_subtensor
    stock = fn(x[i], y).owner
    compact = compact_op(stock).make_node(*stock.inputs)
    xs = (RNG.normal(size=5) * 100).astype(xdtype)
    ys = (RNG.normal(size=4) * 100 + 0.37).astype(ydtype)
    if xdtype == "int8":
        xs[:] = [120, -120, 127, 5, 0]
    args = [xs, ys, np.array([0, 2, 2, 1])]
    _assert_same(_run(compact, args), _run(stock, args))


@pytest.mark.parametrize("kind", ["gather", "scatter", "set"])
def test_it_is_lowered_into_its_caller(kind):
    """No numba function of its own (stock's compiles one, with np.broadcast_shapes',
    np.broadcast_to's and np.empty's overloads behind it); the same bits as stock's."""
    if kind == "gather":
        stock, compact, args = _gather("elements")
    else:
        stock, compact, args = _scatter("elements", kind == "set", False)
    warm_allocator()
    with numba_compiles() as compiled:
        got = _run(compact, args)
    assert compiled == ["call"], compiled
    with numba_compiles() as compiled:
        want = _run(stock, args)
    assert any("advanced_integer_vector_indexing" in name for name in compiled), compiled  # the control
    _assert_same(got, want)


def test_other_indexing_keeps_the_stock_op():
    x, m, i = pt.dvector("x"), pt.dmatrix("m"), pt.lvector("i")
    for node in (x[i > 0].owner, m[i, 1:].owner, m[1:, i].owner, x[pt.lmatrix("j")].owner,
                 pt.inc_subtensor(x[i], 1.0, ignore_duplicates=True).owner):
        assert isinstance(node.op, AdvancedSubtensor | AdvancedIncSubtensor), node
        assert compact_op(node) is None, node


def test_a_hierarchical_gradient_is_stock_stricts():
    """A group-indexed model's logp and gradient under `strict`: stock strict's bits, with
    its gathers and scatters compact (outside the indexed kernels PyTensor fuses)."""
    mu, sigma, group = pt.dvector("mu"), pt.dvector("sigma"), pt.lvector("group")
    obs = pt.dvector("obs")
    centered = obs - mu[group]
    logp = (-0.5 * (centered / sigma[group]) ** 2 - pt.log(sigma[group])).sum() - (mu ** 2).sum()
    outs = [logp, *pytensor.grad(logp, [mu, sigma]), mu[group], pt.inc_subtensor(sigma[group], obs)]
    rng = np.random.default_rng(3)
    values = [rng.normal(size=5), rng.uniform(0.5, 2, size=5), rng.integers(0, 5, size=40), rng.normal(size=40)]
    got_fn = compile_fn([mu, sigma, group, obs], outs, "policy_strict")
    kinds = {type(n.op) for n in got_fn.maker.fgraph.apply_nodes}
    assert kinds & {CompactAdvancedSubtensor, CompactAdvancedIncSubtensor}, kinds
    assert not kinds & {AdvancedSubtensor, AdvancedIncSubtensor}, kinds
    got = got_fn(*values)
    want = compile_fn([mu, sigma, group, obs], outs, "stock_strict")(*values)
    for a, b in zip(got, want, strict=True):
        assert_same_bits(a, b)


def test_an_indexed_kernels_parts_use_the_intrinsics(monkeypatch):
    """An indexed kernel lowered as its parts (`backend.indexed_parts`: a body calling vector
    functions) gathers and scatters with the intrinsics: numba compiles no stock gather, and
    the bits are those of the parts with the stock gather and scatter."""
    from ptnumba_codegen.backend import indexed_parts

    w, b, group = pt.dvector("w"), pt.dvector("b"), pt.lvector("group")
    x = pt.dvector("x")
    logp = (pt.log(pt.sigmoid(w[group] * x + b[group]))).sum()
    outs = [logp, *pytensor.grad(logp, [w, b])]
    rng = np.random.default_rng(8)
    values = [rng.normal(size=4), rng.normal(size=4), rng.integers(0, 4, size=300), rng.normal(size=300)]
    warm_allocator()
    with numba_compiles() as compiled:
        fn = compile_fn([w, b, group, x], outs, "policy_default", inspect_ir=True)
        got = fn(*values)
    assert "policy_parts" in compiled, compiled  # lowered as its parts
    assert not [c for c in compiled if "advanced_integer_vector_indexing" in c], compiled
    monkeypatch.setattr(indexed_parts, "compact_op", lambda node: None)
    with numba_compiles() as compiled:
        want = compile_fn([w, b, group, x], outs, "policy_default", inspect_ir=True)(*values)
    assert [c for c in compiled if "advanced_integer_vector_indexing" in c], compiled  # the control
    for a, c in zip(got, want, strict=True):
        assert_same_bits(a, c)
