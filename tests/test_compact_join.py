"""`CompactJoin` (compact/join.py): an intrinsic lowered into its caller, against
stock's Join function on the same arguments: the same values, dtype, numba type and
shape, stock's error where the other dimensions differ, and no numba compile of its own."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.basic import Join

from conftest import compile_fn, node_caller, numba_compiles, warm_allocator
from ptnumba_codegen.compact.join import MISMATCH_MESSAGE
from ptnumba_codegen.compact.ops import CompactJoin, compact_op


def _pair(out):
    stock = out.owner
    assert type(stock.op) is Join
    compact = compact_op(stock)
    assert type(compact) is CompactJoin and str(compact) == str(stock.op)
    return stock, compact.make_node(*stock.inputs)


RNG = np.random.default_rng(8)
# (name, the inputs' static shapes and dtypes, the axis, the inputs' values' shapes, a mismatching set)
CASES = [
    ("vectors", [((None,), "float64")] * 3, 0, [(3,), (0,), (2,)], None),
    ("matrix rows", [((None, None), "float64")] * 2, 0, [(2, 3), (4, 3)], [(2, 3), (4, 2)]),
    ("matrix columns", [((None, None), "float64")] * 2, 1, [(3, 2), (3, 1)], [(3, 2), (2, 1)]),
    ("negative axis", [((None, None), "float64")] * 2, -1, [(3, 2), (3, 4)], None),
    ("a statically unit axis", [((1, None), "float64"), ((1, None), "float64")], 1, [(1, 2), (1, 3)], None),
    ("3-d middle axis", [((None, None, None), "float64")] * 3, 1, [(2, 1, 3), (2, 2, 3), (2, 0, 3)], [(2, 1, 3), (2, 2, 2), (2, 1, 3)]),
    ("mixed dtypes", [((None,), "int64"), ((None,), "float32"), ((None,), "int8")], 0, [(2,), (3,), (2,)], None),
    ("booleans", [((None,), "bool"), ((None,), "bool")], 0, [(2,), (3,)], None),
]


def _values(specs, shapes, layout):
    out = []
    for (_, dtype), shape in zip(specs, shapes, strict=True):
        v = (RNG.normal(size=tuple(2 * s for s in shape)) * 50)
        v = v[tuple(slice(None, None, 2) for _ in shape)] if layout == "strided" else v[tuple(slice(0, s) for s in shape)].copy()
        out.append(v.astype(dtype) if dtype != "bool" else v > 0)
    return out


@pytest.mark.parametrize("layout", ["C", "strided"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compact_join_is_stocks(case, layout):
    _, specs, axis, shapes, bad = case
    xs = [pt.tensor(f"x{k}", shape=shape, dtype=dtype) for k, (shape, dtype) in enumerate(specs)]
    stock, node = _pair(pt.join(axis, *xs))
    args = _values(specs, shapes, layout)
    warm_allocator()
    got_call = node_caller(node)
    with numba_compiles() as compiled:
        got = got_call(*args)
    assert compiled == ["call"], compiled
    want_call = node_caller(stock)
    with numba_compiles() as compiled:
        want = want_call(*args)
    assert "join" in compiled, compiled  # the control: stock's compiles its own
    assert got_call.nopython_signatures[0].return_type == want_call.nopython_signatures[0].return_type
    assert got.shape == want.shape and got.dtype == want.dtype and got.tobytes() == want.tobytes()
    if bad is not None:
        args = _values(specs, bad, layout)
        with pytest.raises(ValueError) as want_err:
            want_call(*args)
        with pytest.raises(ValueError) as got_err:
            got_call(*args)
        assert str(got_err.value) == str(want_err.value) == MISMATCH_MESSAGE


@pytest.fixture(scope="module")
def model_fns():
    x, y = pt.dvector("x"), pt.dvector("y")
    m = pt.dmatrix("m")
    z = pt.concatenate([x, y * 2.0, pt.exp(x[:2])])
    zz = pt.concatenate([m, m[:1] * y[0]], axis=0)
    logp = (z**2).sum() + pt.log1p(zz**2).sum()
    inputs = [x, y, m]
    outputs = [logp, *pytensor.grad(logp, inputs)]
    return {b: compile_fn(inputs, outputs, b, cache_key="compact_join") for b in ("stock_strict", "policy_default")}


def test_a_model_agrees_with_stock_with_every_join_compact(model_fns):
    nodes = [n for n in model_fns["policy_default"].maker.fgraph.apply_nodes if isinstance(n.op, Join)]
    assert nodes and all(type(n.op) is CompactJoin for n in nodes), [type(n.op) for n in nodes]
    args = (RNG.normal(size=3), RNG.normal(size=4), RNG.normal(size=(2, 4)))
    ref, got = model_fns["stock_strict"](*args), model_fns["policy_default"](*args)
    for r, g in zip(ref, got, strict=True):
        assert np.asarray(g).shape == np.asarray(r).shape
        np.testing.assert_allclose(g, r, rtol=1e-13, atol=0)
