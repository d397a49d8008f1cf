"""Small new arrays without numpy's constructor overloads (`compact.arrays`, and a
full reduction's 0-d output, `lowering.kernel.array0d`).

The compact ``MakeVector`` and ``TensorFromScalar`` return what stock's return: the same
values bit for bit, the same dtype and the same numba type, for every dtype a model gives
them (float64, float32, int64, int8, uint8, bool) and one to four elements; stock keeps a
``MakeVector`` whose inputs are not 0-d tensors of its dtype. The compact ``Shape_i`` returns
stock's 0-d array for every axis of C, F, strided and empty arrays, compiles nothing of its
own, and a graph reading a data matrix's unknown dimensions gives stock's values. A fresh process compiling a
policy function with both ops and 0-d reductions compiles neither ``np.array``'s overload
nor ``np.empty``'s, where stock's function compiles both.
"""

from __future__ import annotations

import json

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from numba import njit
from pytensor.link.numba.dispatch.basic import numba_funcify
from pytensor.tensor.basic import MakeVector, TensorFromScalar
from pytensor.tensor.shape import Shape_i

from conftest import assert_same_bits, compile_fn, lowered_into_caller, second_process_line
from ptnumba_codegen.compact import arrays as compact_arrays
from ptnumba_codegen.compact.ops import (
    CompactMakeVector,
    CompactScalarFromTensor,
    CompactScalarizedJoin,
    CompactShape_i,
    CompactTensorFromScalar,
    compact_op,
)

DTYPES = ["float64", "float32", "int64", "int8", "uint8", "bool"]


def _values(dtype, n):
    raw = [1.5, -2.25, 7.0, 1e30, 0.0][:n] if dtype.startswith("float") else [1, 0, 3, 1][:n]
    return [np.array(v, dtype=dtype) for v in raw]


def _call(node, args):
    fn = numba_funcify(node.op, node=node)
    names = ", ".join(f"a{k}" for k in range(len(args)))
    env = {"fn": fn}
    exec(f"def call({names}):\n    return fn({names})\n", env)  # noqa: S102
    call = njit(env["call"])
    out = call(*args)
    return out, call.nopython_signatures[0].return_type


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 4])
def test_make_vector_is_stocks(dtype, n):
    xs = [pt.scalar(f"x{k}", dtype=dtype) for k in range(n)]
    stock = MakeVector(dtype)(*xs).owner
    compact = compact_op(stock)
    assert type(compact) is CompactMakeVector
    node = compact.make_node(*xs)
    args = _values(dtype, n)
    want, want_type = _call(stock, args)
    got, got_type = _call(node, args)
    assert got_type == want_type
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_make_vector_keeps_stock_without_inputs():
    node = MakeVector("int64")().owner
    assert compact_arrays.why_not_compact(node) is not None
    assert compact_op(node) is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_from_scalar_is_stocks(dtype):
    s = ps.get_scalar_type(dtype)("s")
    stock = TensorFromScalar()(s).owner
    compact = compact_op(stock)
    assert type(compact) is CompactTensorFromScalar
    node = compact.make_node(s)
    value = _values(dtype, 1)[0][()]
    want, want_type = _call(stock, [value])
    got, got_type = _call(node, [value])
    assert got_type == want_type
    assert got.dtype == want.dtype and got.shape == want.shape == ()
    assert got.tobytes() == want.tobytes()


def _shape_i_nodes(i, ndim, dtype="float64"):
    x = pt.tensor("x", shape=(None,) * ndim, dtype=dtype)
    stock = Shape_i(i)(x).owner
    compact = compact_op(stock)
    assert type(compact) is CompactShape_i
    return stock, compact.make_node(x)


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_shape_i_is_stocks(ndim):
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(2, 5, 3)[:ndim]), np.zeros((0, 4, 2)[:ndim]), np.ones((7, 1, 6)[:ndim], order="F")]
    if ndim > 1:
        arrays.append(rng.normal(size=(6, 9, 4)[:ndim])[::2, 1::3])
    for i in range(ndim):
        stock, compact = _shape_i_nodes(i, ndim)
        for v in arrays:
            want, want_type = _call(stock, [v])
            got, got_type = _call(compact, [v])
            assert got_type == want_type
            assert got.dtype == want.dtype and got.shape == want.shape == () and got[()] == v.shape[i]
    stock, compact = _shape_i_nodes(1, 2, "int8")
    assert _call(compact, [np.zeros((3, 4), dtype="int8")])[0][()] == 4


def test_shape_i_is_lowered_into_its_caller():
    stock, compact = _shape_i_nodes(1, 2)
    got, want = lowered_into_caller(stock, compact, "shape_i", np.zeros((3, 8)))
    assert got[()] == want[()] == 8


def test_a_data_matrix_unknown_dimensions_are_stocks():
    """A data matrix's shape read in the graph (pm.Data's: not known when compiled), under
    `strict` (sums in stock's order) against stock strict."""
    x = pytensor.shared(np.random.default_rng(1).normal(size=(5, 3)), shape=(None, None), name="x")
    w = pt.dvector("w")
    outs = [(x @ w).sum() / x.shape[0], x.shape[1] * w.sum()]
    got_fn = compile_fn([w], outs, "policy_strict")
    assert CompactShape_i in {type(n.op) for n in got_fn.maker.fgraph.apply_nodes}
    v = np.array([0.5, -1.0, 2.0])
    for a, b in zip(got_fn(v), compile_fn([w], outs, "stock_strict")(v), strict=True):
        assert_same_bits(a, b)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scalar_from_tensor_is_stocks(dtype):
    """The item of a 0-d array (a bool is a byte in memory, a boolean value in numba),
    NaN payload and signed zero kept."""
    from pytensor.tensor.basic import ScalarFromTensor

    t = pt.tensor("t", dtype=dtype, shape=())
    stock = ScalarFromTensor()(t).owner
    compact = compact_op(stock)
    assert type(compact) is CompactScalarFromTensor and str(compact) == str(stock.op)
    node = compact.make_node(t)
    values = [np.array(v, dtype=dtype) for v in ((-0.0, np.nan, -2.5) if dtype.startswith("float") else (0, 1))]
    for value in values:
        want, want_type = _call(stock, [value])
        got, got_type = _call(node, [value])
        assert got_type == want_type
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes() and type(got) is type(want)


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "uint8"])
def test_scalarized_join_is_stocks(dtype):
    """The gradient's vector of scalars and vectors: stock's ScalarizedJoin nodes (the
    rewrite builds them), each against its compact op, on the same arguments."""
    from pytensor.tensor.rewriting.scalarize import ScalarizedJoin

    x, v = pt.vector("x", dtype=dtype), pt.vector("v", dtype=dtype)
    outs = [pt.stack([x.sum(), x.max()]), pt.concatenate([x.sum()[None], v * 2, x.max()[None]])]
    fn = pytensor.function([x, v], outs, mode="NUMBA")
    nodes = [n for n in fn.maker.fgraph.apply_nodes if type(n.op) is ScalarizedJoin]
    assert len(nodes) == 2
    for stock in nodes:
        compact = compact_op(stock)
        assert type(compact) is CompactScalarizedJoin and str(compact) == str(stock.op)
        node = compact.make_node(*stock.inputs)
        args = [np.array([5, 1, 7], dtype=dtype) if i.type.ndim else np.dtype(dtype).type(3) for i in stock.inputs]
        want, want_type = _call(stock, args)
        got, got_type = _call(node, args)
        assert got_type == want_type
        assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["float64", "int8", "bool"])
def test_scalarized_join_of_strided_and_empty_vectors_is_stocks(dtype):
    """The intrinsic's copy loop: a strided vector (numba layout 'A'), an empty one, and
    scalars between them, against stock's function on the same arguments."""
    from pytensor.tensor.rewriting.scalarize import ScalarizedJoin

    x, v, w = pt.vector("x", dtype=dtype), pt.vector("v", dtype=dtype), pt.vector("w", dtype=dtype)
    out = pt.concatenate([x.max()[None], v, w, x.min()[None], v])
    fn = pytensor.function([x, v, w], out, mode="NUMBA")
    (stock,) = [n for n in fn.maker.fgraph.apply_nodes if type(n.op) is ScalarizedJoin]
    node = compact_op(stock).make_node(*stock.inputs)
    base = np.array([1, 0, 1, 1, 0, 1, 1, 0], dtype=dtype) if dtype == "bool" else np.arange(8, dtype=dtype) - 3
    strided, empty = base[::3], base[:0]
    assert not strided.flags.c_contiguous
    args = [a if i.type.ndim else np.dtype(dtype).type(a) for i, a in zip(stock.inputs, [base[1], strided, empty, base[2], strided])]
    want, want_type = _call(stock, args)
    got, got_type = _call(node, args)
    assert got_type == want_type and got.shape == want.shape == (2 + 2 * strided.size,)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "bool"])
def test_full_reductions_to_0d_arrays_are_stocks(dtype):
    """A full reduction's 0-d output (`kernel.array0d`) against stock: value and dtype,
    including a sum accumulated in another dtype than its output's."""
    import ptnumba_codegen
    from ptnumba_codegen.backend.dispatch import fallback_reason
    from ptnumba_codegen.backend.ops import is_policy_op

    x = pt.vector("x", dtype=dtype)
    outs = [pt.max(x), pt.any(x), pt.all(x)]
    if dtype != "bool":
        outs += [x.sum(), x.sum(dtype="float32"), (x > 0).sum()]
    policy = pytensor.function([x], outs, mode=ptnumba_codegen.policy_mode("default"))
    stock = pytensor.function([x], outs, mode="NUMBA")
    v = np.array([3, 0, 7, 1], dtype=dtype) if dtype != "float64" else np.array([0.1, 0.7, -3.0, 1e300])
    for got, want in zip(policy(v), stock(v), strict=True):
        assert np.asarray(got).dtype == np.asarray(want).dtype and np.ndim(got) == 0
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes()
    nodes = [n for n in policy.maker.fgraph.apply_nodes if is_policy_op(n.op)]
    assert nodes and all(fallback_reason(n) is None for n in nodes)


SECOND = """
import json, sys, tempfile
import numpy as np, pytensor, pytensor.tensor as pt
from numba.core import event
compiled = []
class L(event.Listener):
    def on_start(self, ev): pass
    def on_end(self, ev):
        compiled.append(getattr(getattr(ev.data.get("dispatcher"), "py_func", None), "__qualname__", ""))
event.register("numba:compile", L())
import ptnumba_codegen
from ptnumba_codegen.tools.catalogue_bench import numba_cache
x = pt.vector("x"); n = pt.lscalar("n")
shape = pt.stack([n, n + 1])
outs = [pt.zeros(shape).sum() + x.sum(), shape * 2, x.max()]
mode = ptnumba_codegen.policy_mode("default") if sys.argv[1] == "policy" else "NUMBA"
with numba_cache(tempfile.mkdtemp()):
    f = pytensor.function([x, n], outs, mode=mode)
    vals = f(np.array([0.5, 2.0]), 3)
print("RESULT " + json.dumps({"compiled": compiled, "vals": [np.asarray(v).tolist() for v in vals]}))
"""


def test_a_policy_function_compiles_no_numpy_constructor_overload_nor_the_nodes():
    runs = {m: json.loads(second_process_line(SECOND, (m,), "RESULT ").removeprefix("RESULT ")) for m in ("stock", "policy")}
    assert runs["policy"]["vals"] == runs["stock"]["vals"]
    overloads = ("impl_np_array", "ol_np_empty")
    assert any(c.startswith(overloads) for c in runs["stock"]["compiled"]), runs["stock"]["compiled"]
    assert not any(c.startswith(overloads) for c in runs["policy"]["compiled"]), runs["policy"]["compiled"]
    # the compact nodes are intrinsics lowered into the graph's function: no compile of their own
    node_functions = ("scalar_join", "makevector", "tensor_from_scalar")
    assert "scalar_join" in runs["stock"]["compiled"], runs["stock"]["compiled"]
    assert not any(c.endswith(node_functions) for c in runs["policy"]["compiled"]), runs["policy"]["compiled"]
