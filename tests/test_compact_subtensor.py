"""`CompactSubtensor` (compact/subtensor.py): an intrinsic lowered into its caller, against
stock's Subtensor function on the same arguments: the same values, numba type, view (shares
the input's memory, the same strides) or 0-d array, and the same exceptions."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Constant
from pytensor.tensor.subtensor import Subtensor
from pytensor.tensor.type import TensorType

from conftest import compile_fn, node_caller, numba_compiles
from ptnumba_codegen.compact.ops import CompactSubtensor, compact_op

X = pt.tensor("x", dtype="float64", shape=(None, None))
I, J = pt.lscalar("i"), pt.lscalar("j")
U = pt.scalar("u", dtype="uint8")

# (name, output variable, the index inputs' values)
CASES = [
    ("row", X[1], []),
    ("last row", X[-1], []),
    ("column", X[:, 2], []),
    ("strided block", X[1:, ::2], []),
    ("reversed", X[::-1], []),
    ("reversed columns from the end", X[:, -1:0:-2], []),
    ("element", X[1, 2], []),
    ("element from the end", X[-1, -2], []),
    ("symbolic row", X[I], [2]),
    ("symbolic negative row", X[I], [-3]),
    ("symbolic range", X[I:J], [1, 3]),
    ("symbolic empty range", X[J:I], [1, 3]),
    ("symbolic element", X[I, J], [0, 3]),
    ("uint8 row", X[U], [np.uint8(2)]),
    ("symbolic step", X[::I], [-2]),
]


def _call(node, args):
    call = node_caller(node)
    return call(*args), call.nopython_signatures[0].return_type


def _index_args(node, values):
    """The index inputs' values: a constant's own data, the others ``values`` in order."""
    values = iter(values)
    return [i.data if isinstance(i, Constant) else _value(i, next(values)) for i in node.inputs[1:]]


def _value(var, v):
    """A 0-d tensor input's value is a 0-d array, a scalar input's a numpy scalar (numba's
    types for them in a compiled graph)."""
    return np.asarray(v, dtype=var.type.dtype) if isinstance(var.type, TensorType) else np.dtype(var.type.dtype).type(v)


def _pair(out):
    stock = out.owner
    assert type(stock.op) is Subtensor
    compact = compact_op(stock)
    assert type(compact) is CompactSubtensor and str(compact) == str(stock.op)
    return stock, compact.make_node(*stock.inputs)


@pytest.mark.parametrize("layout", ["C", "strided"])
@pytest.mark.parametrize(("name", "out", "values"), CASES, ids=[c[0] for c in CASES])
def test_compact_subtensor_is_stocks(name, out, values, layout):
    stock, node = _pair(out)
    base = np.arange(40.0).reshape(4, 10) * 1.5 - 7
    x = base[:, ::2] if layout == "strided" else np.ascontiguousarray(base[:, :5])
    x[0, 0] = -0.0
    args = [x, *_index_args(stock, values)]
    want, want_type = _call(stock, args)
    got, got_type = _call(node, args)
    assert got_type == want_type
    assert got.shape == want.shape and got.strides == want.strides and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes()
    assert np.shares_memory(got, x) == np.shares_memory(want, x)


@pytest.mark.parametrize("index_dtype", ["int16", "uint8", "int32", "uint64"])
def test_compact_subtensor_narrow_index_dtypes(index_dtype):
    """Slices of narrow or unsigned index scalars: numba's slice(...) of its own call
    lowering (each part cast to the signature's type first), and an element."""
    i, j = pt.scalar("i", dtype=index_dtype), pt.scalar("j", dtype=index_dtype)
    for out, values in ((X[i:j], [1, 3]), (X[:, i:], [2]), (X[i, j], [3, 4]), (X[i::j], [0, 2])):
        stock, node = _pair(out)
        args = [np.arange(20.0).reshape(4, 5), *_index_args(stock, values)]
        (want, want_type), (got, got_type) = _call(stock, args), _call(node, args)
        assert got_type == want_type and got.tobytes() == want.tobytes() and got.strides == want.strides


@pytest.mark.parametrize("dtype", ["bool", "int8", "float32"])
def test_compact_subtensor_dtypes(dtype):
    x = pt.tensor("x", dtype=dtype, shape=(None,))
    for out, values in ((x[I], [1]), (x[1:], [])):
        stock, node = _pair(out)
        args = [np.array([1, 0, 1], dtype=dtype), *_index_args(stock, values)]
        (want, want_type), (got, got_type) = _call(stock, args), _call(node, args)
        assert got_type == want_type and got.tobytes() == want.tobytes() and got.dtype == want.dtype


@pytest.mark.parametrize(("out", "values"), [(X[I], [4]), (X[I], [-5]), (X[1, I], [5]), (X[::I], [0])],
                         ids=["past the end", "before the start", "second axis", "zero step"])
def test_compact_subtensor_raises_as_stock(out, values):
    stock, node = _pair(out)
    args = [np.zeros((4, 5)), *_index_args(stock, values)]
    with pytest.raises(Exception) as want:
        _call(stock, args)
    with pytest.raises(type(want.value)) as got:
        _call(node, args)
    assert str(got.value) == str(want.value)


def test_compact_subtensor_keeps_stock_for_a_0d_tensor_index():
    """``make_node`` turns a 0-d tensor index into a scalar; a node built otherwise (stock
    reads the tensor's ``.item()``) keeps the stock op."""
    from pytensor.graph.basic import Apply

    i = pt.lscalar("i")
    stock = Subtensor((0,)).make_node(X, pt.lscalar("k"))
    node = Apply(stock.op, [X, i], [o.type() for o in stock.outputs])
    assert compact_op(node) is None and compact_op(stock) is not None


def test_compact_subtensor_is_lowered_into_its_caller():
    """No numba function of its own: the caller is the only function numba compiles
    (stock's node compiles ``subtensor`` and ``np.asarray``'s implementation)."""
    stock, node = _pair(X[I:, ::2])
    args = [np.arange(20.0).reshape(4, 5), *_index_args(stock, [1])]
    with numba_compiles() as compiled:
        got, _ = _call(node, args)
    assert compiled == ["call"], compiled
    with numba_compiles() as compiled:
        want, _ = _call(stock, args)
    assert "subtensor" in compiled, compiled  # the control: stock's compiles its own
    assert got.tobytes() == want.tobytes()


@pytest.fixture(scope="module")
def model_fns():
    x = pt.dmatrix("x")
    v = pt.dvector("v")
    i = pt.lscalar("i")
    logp = (x[1:, ::2] * v[i]).sum() + (x[i] ** 2).sum() + x[-1, 0] * v[:-1].sum() + pt.log(v[i:]).sum()
    inputs = [x, v, i]
    outputs = [logp, *pytensor.grad(logp, [x, v])]
    return {b: compile_fn(inputs, outputs, b, cache_key="compact_subtensor") for b in ("stock_strict", "policy_default")}


def test_a_model_agrees_with_stock_with_every_subtensor_compact(model_fns):
    nodes = [n for n in model_fns["policy_default"].maker.fgraph.apply_nodes if isinstance(n.op, Subtensor)]
    assert nodes and all(type(n.op) is CompactSubtensor for n in nodes), [type(n.op) for n in nodes]
    rng = np.random.default_rng(5)
    for i in (0, 2, -1):
        args = (rng.normal(size=(4, 5)), rng.uniform(0.5, 2.0, size=5), np.int64(i))
        ref, got = model_fns["stock_strict"](*args), model_fns["policy_default"](*args)
        for r, g in zip(ref, got, strict=True):
            assert np.asarray(g).shape == np.asarray(r).shape
            np.testing.assert_allclose(g, r, rtol=1e-13, atol=0)
    with pytest.raises(IndexError):  # stock's bounds check, inside the graph's function
        model_fns["policy_default"](np.ones((4, 5)), np.ones(5), np.int64(7))


@pytest.fixture(scope="module")
def scalar_fns():
    """Elements read as native scalars: PyTensor's ``ScalarSubtensor`` (its scalarize rewrite)."""
    x = pt.dvector("x")
    i = pt.lscalar("i")
    s = pt.dscalar("s")
    out = pt.exp(x[1]) * s + x[-1] * x[i] - pt.log1p(x[i] ** 2)
    inputs = [x, i, s]
    return {b: compile_fn(inputs, [out, pytensor.grad(out, x)], b, cache_key="compact_scalar_subtensor")
            for b in ("stock_strict", "policy_default")}


def test_elements_read_as_scalars_are_compact_and_stocks(scalar_fns):
    from pytensor.tensor.rewriting.scalarize import ScalarSubtensor

    from ptnumba_codegen.compact.ops import CompactScalarSubtensor

    stock = [type(n.op) for n in scalar_fns["stock_strict"].maker.fgraph.apply_nodes if isinstance(n.op, ScalarSubtensor)]
    assert stock and set(stock) == {ScalarSubtensor}  # the control: PyTensor's rewrite makes them
    nodes = [n for n in scalar_fns["policy_default"].maker.fgraph.apply_nodes if isinstance(n.op, ScalarSubtensor)]
    assert nodes and all(type(n.op) is CompactScalarSubtensor for n in nodes), [type(n.op) for n in nodes]
    assert all(str(n.op).startswith("ScalarSubtensor") for n in nodes)
    rng = np.random.default_rng(9)
    x = rng.normal(size=5)
    for i in (0, 3, -2):
        ref = scalar_fns["stock_strict"](x, np.int64(i), 0.3)
        got = scalar_fns["policy_default"](x, np.int64(i), 0.3)
        for r, g in zip(ref, got, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-13, atol=0)
    for bad in (5, -6):  # stock's bounds check, inside the graph's function
        with pytest.raises(IndexError):
            scalar_fns["stock_strict"](x, np.int64(bad), 0.3)
        with pytest.raises(IndexError):
            scalar_fns["policy_default"](x, np.int64(bad), 0.3)


def test_a_scalar_subtensor_is_lowered_into_its_caller():
    """The intrinsic with ``scalar_out``: the element itself, no numba compile of its own."""
    from pytensor.tensor.rewriting.scalarize import ScalarSubtensor

    x, i = pt.dmatrix("x"), pt.lscalar("i")
    fns = compile_fn([x, i], [pt.exp(x[i, 1])], "stock_strict", cache_key="scalar_subtensor_node")
    [node] = [n for n in fns.maker.fgraph.apply_nodes if isinstance(n.op, ScalarSubtensor)]
    compact = compact_op(node).make_node(*node.inputs)
    args = [np.arange(12.0).reshape(3, 4), *_index_args(node, [2])]
    with numba_compiles() as compiled:
        got, got_type = _call(compact, args)
    assert compiled == ["call"], compiled
    want, want_type = _call(node, args)
    assert got_type == want_type and got == want == 9.0
