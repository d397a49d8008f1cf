"""Stock runtime checks swapped for compact ones (`passes.swap_compact`, `compact.checks`).

Under the policy every ``SpecifyShape`` is a `CompactSpecifyShape`: the values are stock's,
a mismatch raises an ``AssertionError`` whose text is the stock numba backend's, dimension
by dimension, and its numba function compiles no string formatting (the cost it removes).
Every ``Split`` is a `CompactSplit`: the same views, the same three checks in stock's order
with stock's messages, no string formatting either.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from numba.core import types
from pytensor.graph.basic import Apply
from pytensor.tensor.basic import Split
from pytensor.tensor.shape import SpecifyShape

from conftest import compile_fn, node_function_irs, numba_compiles
from ptnumba_codegen.compact.checks import SpecifyShapeError, SplitSizesError
from ptnumba_codegen.compact.ops import CompactSpecifyShape, CompactSplit
from ptnumba_codegen.compact.table import COMPACT
from ptnumba_codegen.passes.swap_compact import SwapCompact


def _graph():
    """A 3-d input checked on dims 0 and 2 (dim 1 left free), read by a kernel."""
    x = pt.tensor3("x")
    n0, n2 = pt.lscalar("n0"), pt.bscalar("n2")
    y = pt.specify_shape(x, (n0, None, n2))
    return [x, n0, n2], [pt.exp(y) * 2.0 + y.sum()]


@pytest.fixture(scope="module")
def fns():
    inputs, outputs = _graph()
    return {b: compile_fn(inputs, outputs, b, cache_key="compact_checks") for b in ("stock_strict", "policy_default")}


def _checks(fn):
    return [n.op for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, SpecifyShape)]


def test_policy_graph_holds_only_compact_checks(fns):
    assert [type(op) for op in _checks(fns["policy_default"])] == [CompactSpecifyShape]
    assert [type(op) for op in _checks(fns["stock_strict"])] == [SpecifyShape]


def test_values_equal_stock(fns):
    x = np.random.default_rng(3).normal(size=(2, 5, 3))
    ref = fns["stock_strict"](x, 2, 3)
    np.testing.assert_allclose(fns["policy_default"](x, 2, 3), ref, rtol=1e-15)


@pytest.mark.parametrize(
    "shape, n0, n2",
    [((2, 5, 3), 4, 3), ((2, 5, 3), 2, 7), ((2, 5, 3), 9, 9), ((0, 1, 3), 1, 3), ((2, 5, 3), 2, -3)],
)
def test_mismatch_raises_the_stock_message(fns, shape, n0, n2):
    x = np.zeros(shape)
    with pytest.raises(AssertionError) as stock:
        fns["stock_strict"](x, n0, n2)
    with pytest.raises(AssertionError) as ours:
        fns["policy_default"](x, n0, n2)
    assert type(ours.value) is SpecifyShapeError
    assert str(ours.value) == str(stock.value)
    assert str(stock.value).startswith("SpecifyShape: dim ")


@pytest.mark.parametrize("verbosity", ["medium", "high"])
def test_a_mismatch_reported_with_its_apply_node_keeps_the_stock_message(fns, verbosity):
    """Above ``low`` verbosity (PyMC's tests run ``high``) PyTensor's ``raise_with_op``
    re-raises ``type(err)(str(err) + the node's details)``: a SpecifyShapeError made from
    that message reads as it, like stock's AssertionError."""
    x = np.zeros((2, 5, 3))
    with pytensor.config.change_flags(exception_verbosity=verbosity):
        with pytest.raises(AssertionError) as stock:
            fns["stock_strict"](x, 4, 3)
        with pytest.raises(AssertionError, match="^SpecifyShape: dim 0 of input has shape 2, expected 4.") as ours:
            fns["policy_default"](x, 4, 3)
    assert type(ours.value) is SpecifyShapeError
    assert str(ours.value).splitlines()[0] == str(stock.value).splitlines()[0]
    assert "Apply node that caused the error" in str(ours.value)


def test_compact_function_formats_no_string():
    x = pt.matrix("x")
    n, m = pt.lscalar("n"), pt.lscalar("m")
    stock_node = pt.specify_shape(x, (n, m)).owner
    compact_node = CompactSpecifyShape().make_node(*stock_node.inputs)
    # what the stock function compiles and the compact one must not: int-to-str, unicode
    sig = (types.Array(types.float64, 2, "C"), types.Array(types.int64, 0, "C"), types.Array(types.int64, 0, "C"))
    stock_ir, compact_ir = node_function_irs([stock_node, compact_node], sig)
    assert "unicode" in stock_ir
    assert "unicode" not in compact_ir


def test_op_prints_and_pickles_as_specify_shape():
    op = CompactSpecifyShape()
    assert str(op) == str(SpecifyShape()) == "SpecifyShape"
    back = pickle.loads(pickle.dumps(op))
    assert type(back) is CompactSpecifyShape and back == op and back != SpecifyShape()
    assert {"SpecifyShape", "Split"} <= set(COMPACT)


def test_pass_keeps_types_and_counts():
    x = pt.vector("x", shape=(3,))
    y = pt.specify_shape(pt.vector("z"), (3,)) + x
    fg = pytensor.graph.fg.FunctionGraph(outputs=[y], clone=True)
    before = fg.outputs[0].type
    assert SwapCompact().apply(fg) == 1
    assert fg.outputs[0].type == before
    assert [type(n.op) for n in fg.toposort() if isinstance(n.op, SpecifyShape)] == [CompactSpecifyShape]


CACHED_PROBE = r"""
import sys
from pathlib import Path
import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
sys.path.insert(0, sys.argv[2])
numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
from test_compact_checks import _graph
from conftest import compile_fn, node_function_irs
from ptnumba_codegen.compact.ops import CompactSpecifyShape
with pytensor.config.change_flags(numba__cache=True):
    fn = compile_fn(*_graph(), "policy_default")
assert any(type(n.op) is CompactSpecifyShape for n in fn.maker.fgraph.apply_nodes)
messages = []
for n0, n2 in ((4, 3), (2, 7)):
    try:
        fn(np.zeros((2, 5, 3)), n0, n2)
    except AssertionError as err:
        messages.append(f"{type(err).__name__}: {err}")
from test_compact_checks import _split_graph, SPLIT_SUM_MISMATCHES
with pytensor.config.change_flags(numba__cache=True):
    split_fn = compile_fn(*_split_graph(), "policy_default")
for sizes in SPLIT_SUM_MISMATCHES:
    try:
        split_fn(np.zeros((2, 7, 3)), np.array(sizes))
    except ValueError as err:
        messages.append(f"{type(err).__name__}: {err}")
print("PROBE", " | ".join(messages))
"""


def test_a_process_loading_the_cached_check_gets_the_message(tmp_path, fns):
    """The first process compiles the check onto an empty cache, the second loads it: both
    raise the stock text (the mismatch record is found by symbol name in each process)."""
    from pathlib import Path

    from conftest import second_process_line

    tests = Path(__file__).parent
    cold = second_process_line(CACHED_PROBE, [tmp_path, tests], "PROBE")
    warm = second_process_line(CACHED_PROBE, [tmp_path, tests], "PROBE")
    assert cold == warm
    expected = []
    for n0, n2 in ((4, 3), (2, 7)):
        with pytest.raises(AssertionError) as stock:
            fns["stock_strict"](np.zeros((2, 5, 3)), n0, n2)
        expected.append(f"SpecifyShapeError: {stock.value}")
    split_fn = _split_fns()["stock_strict"]
    for sizes in SPLIT_SUM_MISMATCHES:
        with pytest.raises(ValueError) as stock:
            split_fn(np.zeros((2, 7, 3)), np.array(sizes))
        expected.append(f"SplitSizesError: {stock.value}")
    assert cold == "PROBE " + " | ".join(expected)


def test_an_as_written_copys_inner_graph_gets_the_compact_check():
    """A copy's inner graph (`as_written.lowering.inner_mode`) swaps its checks too (the
    catalogue's LKJ and VAR models have a SpecifyShape inside a copy)."""
    import ptnumba_codegen
    from ptnumba_codegen.as_written.lowering import inner_mode

    x, n = pt.dvector("x"), pt.lscalar("n")
    fg = pytensor.graph.fg.FunctionGraph([x, n], [pt.exp(pt.specify_shape(x, (n,))) > 1.0], clone=True)
    inner_mode(ptnumba_codegen.load_policy("default")).optimizer.rewrite(fg)
    assert [type(nd.op) for nd in fg.apply_nodes if isinstance(nd.op, SpecifyShape)] == [CompactSpecifyShape]


def _split_graph():
    """A 3-d input split in three along axis 1, each part read by an exact op, a 1-d split
    in one (which PyTensor removes) and one in two by sizes computed in the graph."""
    x, sizes = pt.tensor3("x"), pt.lvector("sizes")
    a, b, c = pt.split(x, sizes, n_splits=3, axis=1)
    whole = pt.split(x[0, 0], sizes[:1] * 0 + 3, n_splits=1, axis=0)  # one output: the variable
    head = pt.stack([1, x.shape[2] - 1])
    last = pt.split(x[0, 0], head, n_splits=2, axis=0)[1]  # 1-d, computed sizes
    return [x, sizes], [a * 2.0, b - 1.0, c, whole + 0.5, last * 3.0]


SPLIT_SUM_MISMATCHES = ((2, 2, 2), (0, 0, 9))


@pytest.fixture(scope="module")
def split_fns():
    return _split_fns()


def _split_fns():
    # stock's function compiled in this process (not loaded from PyTensor's cache): loaded, its
    # sum check raises "Error creating Python tuple from runtime exception arguments" instead
    # of its message (numba's runtime exception arguments; see compact.checks)
    return {
        "stock_strict": compile_fn(*_split_graph(), "stock_strict", cache_key="compact_split", inspect_ir=True),
        "policy_default": compile_fn(*_split_graph(), "policy_default", cache_key="compact_split"),
    }


def test_policy_graph_holds_only_compact_splits(split_fns):
    splits = lambda fn: [type(n.op) for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Split)]  # noqa: E731
    stock = splits(split_fns["stock_strict"])
    assert stock and set(stock) == {Split}  # (PyTensor removes the one-way split)
    assert splits(split_fns["policy_default"]) == [CompactSplit] * len(stock)


@pytest.mark.parametrize("sizes", [(2, 3, 2), (0, 7, 0), (7, 0, 0), (0, 0, 7)])
def test_split_views_equal_stock(split_fns, sizes):
    x = np.random.default_rng(5).normal(size=(2, 7, 3))
    ref = split_fns["stock_strict"](x, np.array(sizes))
    got = split_fns["policy_default"](x, np.array(sizes))
    assert [r.shape for r in ref] == [g.shape for g in got]
    for r, g in zip(ref, got, strict=True):
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("sizes", [(2, 2, 2), (0, 0, 9), (2, -1, 6), (-1, -1, 9), (3, 4), (1, 2, 3, 1)])
def test_split_errors_raise_the_stock_message(split_fns, sizes):
    x = np.zeros((2, 7, 3))
    with pytest.raises(ValueError) as stock:
        split_fns["stock_strict"](x, np.array(sizes))
    with pytest.raises(ValueError) as ours:
        split_fns["policy_default"](x, np.array(sizes))
    assert str(ours.value) == str(stock.value)
    assert (type(ours.value) is SplitSizesError) == str(stock.value).startswith("Split sizes sum to")


def test_a_split_error_reported_with_its_apply_node_keeps_the_stock_message(split_fns):
    x = np.zeros((2, 7, 3))
    with pytensor.config.change_flags(exception_verbosity="high"):
        with pytest.raises(ValueError) as stock:
            split_fns["stock_strict"](x, np.array((2, 2, 2)))
        with pytest.raises(ValueError, match="^Split sizes sum to 6; expected 7") as ours:
            split_fns["policy_default"](x, np.array((2, 2, 2)))
    assert type(ours.value) is SplitSizesError
    assert str(ours.value).splitlines()[0] == str(stock.value).splitlines()[0]


def test_compact_split_formats_no_string():
    x, sizes = pt.matrix("x"), pt.lvector("sizes")
    stock_node = pt.split(x, sizes, n_splits=2, axis=1)[0].owner
    compact_node = CompactSplit(2, 1).make_node(*stock_node.inputs)
    sig = (types.Array(types.float64, 2, "C"), types.Array(types.int64, 1, "C"))
    stock_ir, compact_ir = node_function_irs([stock_node, compact_node], sig)
    assert "unicode" in stock_ir and "unicode" not in compact_ir


def test_pass_keeps_the_nodes_own_output_types():
    """A split whose outputs carry static shapes make_node does not infer (stochastic
    volatility's gradient has one) is swapped with its own output types."""
    x, sizes = pt.vector("x"), pt.lvector("sizes")
    op = Split(2, 0)
    node = Apply(op, [x, sizes], [pt.vector(shape=(1,)), pt.vector(shape=(None,))])
    assert [o.type for o in op.make_node(x, sizes).outputs] != [o.type for o in node.outputs]
    fg = pytensor.graph.fg.FunctionGraph([x, sizes], [node.outputs[0] * 2.0, node.outputs[1] + 1.0], clone=True)
    assert SwapCompact().apply(fg) == 3  # the Split, and the DimShuffles of the two constants
    [swapped] = [n for n in fg.apply_nodes if isinstance(n.op, Split)]
    assert type(swapped.op) is CompactSplit
    assert [o.type.shape for o in swapped.outputs] == [(1,), (None,)]
    assert str(swapped.op) == str(op)


def test_a_specify_shape_is_lowered_into_its_caller_and_raises_the_same_error():
    """`compact.checks.checked_shape`: no numba pipeline for the node function, the same view of ``x``,
    and a mismatch raises `SpecifyShapeError` with stock's message, in dim order."""
    from numba import njit
    from pytensor.link.numba.dispatch.basic import numba_funcify

    x = pt.tensor3("x")
    n, m = pt.lscalar("n"), pt.lscalar("m")
    stock_node = pt.specify_shape(x, (n, None, m)).owner
    node = CompactSpecifyShape().make_node(*stock_node.inputs)
    fn = numba_funcify(node.op, node=node)
    caller = njit(lambda a, b, c, d: fn(a, b, c, d))

    arr = np.zeros((2, 5, 3))
    with numba_compiles() as compiled:
        got = caller(arr, np.array(2), None, np.array(3))
    assert compiled == ["<lambda>"], compiled
    assert got.__array_interface__["data"][0] == arr.__array_interface__["data"][0] and got.shape == arr.shape
    for bad, dim, actual, expected in [((3, 5, 3), 0, 3, 2), ((2, 5, 4), 2, 4, 3), ((4, 1, 9), 0, 4, 2)]:
        with pytest.raises(SpecifyShapeError) as err:
            caller(np.zeros(bad), np.array(2), None, np.array(3))
        assert str(err.value) == f"SpecifyShape: dim {dim} of input has shape {actual}, expected {expected}."


@pytest.mark.parametrize(("shape", "axis", "dtype"), [((2, 7, 3), 1, "int64"), ((7, 3), 0, "int32"), ((3, 7), 1, "int8"),
                                                      ((7,), 0, "int64")])
def test_a_split_is_lowered_into_its_caller_with_the_generated_functions_views(shape, axis, dtype):
    """`compact.checks.split_views`: no numba pipeline for the node function; the views of the
    generated function (its fallback) on the same arguments: the same numba type, data
    pointers, shapes and strides; its errors with its messages."""
    from numba import njit
    from pytensor.link.numba.dispatch.basic import numba_funcify

    x = pt.tensor("x", shape=(None,) * len(shape))
    sizes = pt.vector("sizes", dtype=dtype)
    node = CompactSplit(3, axis).make_node(x, sizes)
    fn = numba_funcify(node.op, node=node)
    caller = njit(lambda a, b: fn(a, b))
    arr = np.arange(float(np.prod(shape))).reshape(shape)[(slice(None),) * len(shape)]
    good = np.array([2, 0, 5], dtype=dtype)
    with numba_compiles() as compiled:
        got = caller(arr, good)
    assert compiled == ["<lambda>"], compiled
    # the generated function itself, compiled by numba: what the intrinsic stands in for
    src_fn = njit(lambda a, b: gen(a, b))
    gen = _generated_split(node)
    want = src_fn(arr, good)
    assert caller.nopython_signatures[0].return_type == src_fn.nopython_signatures[0].return_type
    for g, w in zip(got, want, strict=True):
        assert g.__array_interface__ == w.__array_interface__
    for bad in ([2, 0, 4], [3, -1, 5], [2, 5]):
        with pytest.raises(ValueError) as want_err:
            src_fn(arr, np.array(bad, dtype=dtype))
        with pytest.raises(ValueError) as got_err:
            caller(arr, np.array(bad, dtype=dtype))
        assert type(got_err.value) is type(want_err.value) and str(got_err.value) == str(want_err.value)


def _generated_split(node):
    """The compact split's generated function (the intrinsic's fallback), as numba compiles it."""
    from numba.core.dispatcher import Dispatcher

    fn = COMPACT["Split"].fallback(node.op, node)()
    assert isinstance(fn, Dispatcher)
    return fn


def test_a_split_of_unsigned_sizes_is_the_generated_function():
    """Unsigned sizes (a comparison and a running sum of another kind): the intrinsic
    leaves them to the generated function, its fallback, which numba compiles."""
    from numba import njit
    from pytensor.link.numba.dispatch.basic import numba_funcify

    node = CompactSplit(2, 0).make_node(pt.vector("x"), pt.vector("sizes", dtype="uint8"))
    fn = numba_funcify(node.op, node=node)
    caller = njit(lambda a, b: fn(a, b))
    arr = np.arange(5.0)
    with numba_compiles() as compiled:
        got = caller(arr, np.array([2, 3], dtype="uint8"))
    assert "split" in compiled, compiled
    want = njit(lambda a, b: gen(a, b))
    gen = _generated_split(node)
    for g, w in zip(got, want(arr, np.array([2, 3], dtype="uint8")), strict=True):
        assert g.__array_interface__ == w.__array_interface__
