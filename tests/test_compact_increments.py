"""``IncSubtensor`` with its broadcast check spelled out (`compact.increments`).

For increments and sets of vectors, matrices and 3-d arrays through slices (with and
without a step) and integer indices, with updates of the target's shape, of length 1 along
a dimension (statically and only at run time) and of lower rank: the compact function
returns stock's array bit for bit and of stock's numba type, raises stock's error with
stock's message where the update does not broadcast, and compiles no ``np.broadcast_to``.
A 0-d update is lowered too (stock's ``y.item()``), and a PyTensor source without the line keeps stock's
function.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Constant
from pytensor.link.numba.dispatch.basic import numba_funcify
from pytensor.tensor.subtensor import IncSubtensor

from conftest import node_caller, numba_compiles, warm_allocator
from ptnumba_codegen.compact import increments as compact_increments
from ptnumba_codegen.compact.increments import BROADCAST_MESSAGE
from ptnumba_codegen.compact.ops import CompactIncSubtensor, compact_op

RNG = np.random.default_rng(11)

# (x static shape, index builder, y static shape, y value shape, a y shape that does not broadcast)
CASES = [
    ((None,), lambda x, i: x[1:], (None,), (4,), (3,)),
    ((None,), lambda x, i: x[:-1], (1,), (1,), None),
    ((None,), lambda x, i: x[::2], (None,), (3,), (2,)),
    ((None, None), lambda x, i: x[i], (None,), (3,), (2,)),
    ((None, None), lambda x, i: x[1:, :], (None, None), (3, 3), (3, 2)),
    ((None, None), lambda x, i: x[1:, :], (None, None), (1, 3), (2, 2)),  # broadcast at run time
    ((None, None), lambda x, i: x[:, i], (None,), (4,), (5,)),
    ((None, None), lambda x, i: x[1:3], (1, None), (1, 3), (1, 4)),
    ((None, None, None), lambda x, i: x[i, 1:], (None,), (2,), (3,)),  # lower rank
    ((None, None, None), lambda x, i: x[:, i, :], (None, None), (4, 2), (4, 3)),
    ((None, None, None), lambda x, i: x[i], (None,), (2,), (3,)),  # aligned to the trailing dimension
]
X_SHAPES = {1: (5,), 2: (4, 3), 3: (4, 3, 2)}


def _nodes(case, set_instead_of_inc, inplace):
    xshape, index, yshape, _, _ = case
    x = pt.tensor("x", shape=xshape, dtype="float64")
    y = pt.tensor("y", shape=yshape, dtype="float64")
    i = pt.lscalar("i")
    fn = pt.set_subtensor if set_instead_of_inc else pt.inc_subtensor
    stock = fn(index(x, i), y).owner
    if inplace:
        op = stock.op
        stock = IncSubtensor(op.idx_list, inplace=True, set_instead_of_inc=op.set_instead_of_inc).make_node(*stock.inputs)
    assert type(stock.op) is IncSubtensor
    compact = compact_op(stock)
    assert type(compact) is CompactIncSubtensor and compact.inplace == inplace
    return stock, compact.make_node(*stock.inputs)


def _run(node, args):
    call = node_caller(node)
    try:
        out = call(*[a.copy() for a in args])
    except ValueError as err:
        return ("raised", str(err)), None
    return out, call.nopython_signatures[0].return_type


def _args(case, node, yshape):
    x = RNG.normal(size=X_SHAPES[len(case[0])])
    args = [x, RNG.normal(size=yshape)]
    args += [np.int64(v.data) if isinstance(v, Constant) else np.int64(1) for v in node.inputs[2:]]
    return args


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("set_instead_of_inc", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_compact_function_is_stocks(case, set_instead_of_inc, inplace):
    stock, compact = _nodes(CASES[case], set_instead_of_inc, inplace)
    args = _args(CASES[case], stock, CASES[case][3])
    want, want_type = _run(stock, args)
    got, got_type = _run(compact, args)
    assert got_type == want_type
    assert got.shape == want.shape and got.tobytes() == want.tobytes()
    bad = CASES[case][4]
    if bad is not None:
        args = _args(CASES[case], stock, bad)
        assert _run(stock, args)[0] == _run(compact, args)[0] == ("raised", BROADCAST_MESSAGE)


def test_no_broadcast_to_in_the_compact_source():
    stock, compact = _nodes(CASES[4], False, False)
    fn = compact_increments.compact_function(compact.op, compact)
    src = fn.py_func.__source__ if hasattr(fn.py_func, "__source__") else ""
    stock_src = numba_funcify(stock.op, node=stock).py_func.__source__
    assert "np.broadcast_to(y, target.shape)" in stock_src
    assert "broadcast_to" not in src and "raise ValueError" in src


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("case", [0, 5, 7, 9])
def test_an_increment_is_lowered_into_its_caller(case, inplace):
    """No numba function of its own (stock's compiles ``inc_subtensor`` and ``np.copy``'s
    and ``np.broadcast_to``'s implementations); the same bits as stock's."""
    stock, compact = _nodes(CASES[case], False, inplace)
    args = _args(CASES[case], stock, CASES[case][3])
    warm_allocator()
    with numba_compiles() as compiled:
        got, got_type = _run(compact, args)
    assert compiled == ["call"], compiled
    with numba_compiles() as compiled:
        want, want_type = _run(stock, args)
    assert "inc_subtensor" in compiled, compiled  # the control
    assert got_type == want_type and got.tobytes() == want.tobytes()


@pytest.mark.parametrize(("xdtype", "ydtype"), [("float32", "float64"), ("float64", "int64"), ("int64", "int8"),
                                                 ("int8", "int8"), ("bool", "bool"), ("float32", "float32")])
@pytest.mark.parametrize("set_instead_of_inc", [False, True])
def test_mixed_dtypes_add_and_store_as_stock(xdtype, ydtype, set_instead_of_inc):
    """``+=`` at numba's type for the two dtypes, then the store's conversion to the
    target's dtype: rounding of a float32 target, wrapping of an int8 one."""
    x = pt.tensor("x", shape=(None, None), dtype=xdtype)
    y = pt.tensor("y", shape=(None,), dtype=ydtype)
    fn = pt.set_subtensor if set_instead_of_inc else pt.inc_subtensor
    stock = fn(x[1:, 2], y).owner
    compact = compact_op(stock).make_node(*stock.inputs)
    rng = np.random.default_rng(4)
    xs = (rng.normal(size=(4, 3)) * 100).astype(xdtype)
    ys = (rng.normal(size=3) * 100 + 0.37).astype(ydtype)
    if xdtype == "int8":
        xs[1:, 2] = [120, -120, 127]
    args = [xs, ys, *[np.int64(v.data) for v in stock.inputs[2:]]]
    warm_allocator()
    with numba_compiles() as compiled:
        got, got_type = _run(compact, args)
    assert compiled == ["call"], compiled  # the intrinsic, not its fallback
    want, want_type = _run(stock, args)
    assert got_type == want_type and got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("set_instead_of_inc", [False, True])
@pytest.mark.parametrize("where", ["slice", "column", "element", "element from the end"])
def test_a_0d_update_is_stocks(where, set_instead_of_inc, inplace):
    """A 0-d update (stock's ``y.item()``) of a view or of one element (stock's
    ``z[indices] += y.item()``, bounds-checked): lowered into the caller, stock's bits, and
    stock's ``IndexError`` for an element out of bounds."""
    x, s, i = pt.dmatrix("x"), pt.dscalar("s"), pt.lscalar("i")
    target = {"slice": x[1:, ::2], "column": x[:, i], "element": x[i, 1], "element from the end": x[-1, i]}[where]
    fn = pt.set_subtensor if set_instead_of_inc else pt.inc_subtensor
    stock = fn(target, s).owner
    if inplace:
        op = stock.op
        stock = IncSubtensor(op.idx_list, inplace=True, set_instead_of_inc=op.set_instead_of_inc).make_node(*stock.inputs)
    compact = compact_op(stock)
    assert type(compact) is CompactIncSubtensor
    compact = compact.make_node(*stock.inputs)
    index_args = [np.int64(v.data) if isinstance(v, Constant) else np.int64(2) for v in stock.inputs[2:]]
    args = [RNG.normal(size=(4, 3)), np.array(0.1 + 1e-17), *index_args]
    warm_allocator()
    with numba_compiles() as compiled:
        got, got_type = _run(compact, args)
    assert compiled == ["call"], compiled
    want, want_type = _run(stock, args)
    assert got_type == want_type and got.tobytes() == want.tobytes()
    if where.startswith("element") or where == "column":
        bad = [*args[:2], *[np.int64(5) if not isinstance(v, Constant) else np.int64(v.data) for v in stock.inputs[2:]]]
        with pytest.raises(IndexError) as want_err:
            node_caller(stock)(*[a.copy() for a in bad])
        with pytest.raises(IndexError) as got_err:
            node_caller(compact)(*[a.copy() for a in bad])
        assert str(got_err.value) == str(want_err.value)


def test_a_source_without_the_line_keeps_stocks_function():
    src = "def inc_subtensor(x, y):\n    z = np.copy(x)\n    return z\n"
    assert compact_increments.compact_source(src) is None
    twice = "def f(x, y):\n    np.broadcast_to(y, target.shape)\n    np.broadcast_to(y, target.shape)\n"
    assert compact_increments.compact_source(twice) is None
    other = "def f(x, idx):\n    np.broadcast_to(idx, shape)\n    return x\n"
    assert compact_increments.compact_source(other) is None
    once = "def f(x, y):\n    target = x\n    np.broadcast_to(y, (s[1], s[0]))\n    return x\n"
    check = "".join(f"    {line.format(shape='(s[1], s[0])')}\n" for line in compact_increments.CHECK)
    assert compact_increments.compact_source(once) == "def f(x, y):\n    target = x\n" + check + "    return x\n"
