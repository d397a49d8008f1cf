"""``DimShuffle``'s view built in one function (`compact.views`).

For every case of stock's function (to a 0-d array, from a 0-d array, the general shuffle
with new and dropped axes) and every input layout (C, F, strided, read-only), the compact
function returns the same view as stock's: the same numba type, data address, shape and
strides, raises stock's error where stock does, and compiles none of ``as_strided``'s or
``tuple_setitem``'s code. Under the policy every DimShuffle node is the compact one and a
model agrees with stock.
"""

from __future__ import annotations

import re

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from numba import njit
from pytensor.link.numba.dispatch.basic import numba_funcify
from pytensor.tensor.elemwise import DimShuffle

from conftest import compile_fn, numba_compiles
from ptnumba_codegen.compact.ops import CompactDimShuffle
from ptnumba_codegen.compact.views import SQUEEZE_MESSAGE

# (input static shape, new order): stock's three cases
CASES = [
    ((1,), ()),  # to 0-d
    ((1, 1, 1), ()),
    ((), ("x",)),  # from 0-d
    ((), ("x", "x", "x")),
    ((None, None), (1, 0)),  # a transpose
    ((None, None, None), (2, 0, 1)),
    ((None,), ("x", 0)),  # new axes
    ((None, None), (0, "x", 1, "x")),
    ((None, 1), (0,)),  # a dropped axis
    ((1, None, 1), ("x", 1)),
    ((None, 1, None), (2, "x", 0)),
]


def _nodes(shape, order):
    x = pt.tensor("x", shape=shape, dtype="float64")
    stock = x.dimshuffle(*order).owner
    assert type(stock.op) is DimShuffle
    compact = CompactDimShuffle(input_ndim=stock.op.input_ndim, new_order=stock.op.new_order)
    return stock, compact.make_node(x)


def _caller(node):
    """A numba function returning the node function's result (node functions have no
    CPython wrapper of their own)."""
    fn = numba_funcify(node.op, node=node)

    @njit
    def call(x):
        return fn(x)

    return call


def _caller2(node):
    fn = numba_funcify(node.op, node=node)

    @njit
    def call(a, b):
        return fn(a, b)

    return call


def _caller3(node):
    fn = numba_funcify(node.op, node=node)

    @njit
    def call(a, b, c):
        return fn(a, b, c)

    return call


def _inputs(shape):
    """The layouts a graph passes: C, F, strided, read-only (and 0-d)."""
    if shape == ():
        return {"0-d": np.array(2.5)}
    full = tuple(3 if s is None else s for s in shape)
    base = np.arange(float(np.prod(full) * 2)).reshape((2 * full[0], *full[1:]))
    c = np.ascontiguousarray(base[: full[0]])
    f = np.asfortranarray(c)
    readonly = c.copy()
    readonly.flags.writeable = False
    return {"C": c, "F": f, "strided": base[::2], "read-only": readonly}


def _view(a: np.ndarray):
    return a.__array_interface__["data"][0], a.shape, a.strides, a.dtype, a.flags.writeable


@pytest.mark.parametrize("shape,order", CASES, ids=[f"{s}->{o}" for s, o in CASES])
def test_same_view_and_numba_type_as_stock(shape, order):
    stock, compact = _nodes(shape, order)
    calls = {"stock": _caller(stock), "compact": _caller(compact)}
    for layout, x in _inputs(shape).items():
        got = {k: call(x) for k, call in calls.items()}
        assert _view(got["compact"]) == _view(got["stock"]), (layout, _view(got["compact"]), _view(got["stock"]))
        assert got["compact"].base is not None  # a view, not a copy
        np.testing.assert_array_equal(got["compact"], got["stock"])
    types_ = {k: [sig.return_type for sig in (call.overloads[s].signature for s in call.signatures)] for k, call in calls.items()}
    assert types_["compact"] == types_["stock"] and types_["stock"], types_


@pytest.mark.parametrize("shape,order,bad", [((1, 1), (), np.ones((1, 2))), ((None, 1), (0,), np.ones((3, 2))),
                                             ((1, None, 1), ("x", 1), np.ones((1, 2, 3)))])
def test_a_wrong_size_raises_stocks_error(shape, order, bad):
    for node in _nodes(shape, order):
        with pytest.raises(ValueError, match=f"^{SQUEEZE_MESSAGE}$"):
            _caller(node)(bad)


def test_compact_views_compile_no_as_strided_or_tuple_setitem():
    irs = {}
    for shape, order in [((1,), ()), ((), ("x",)), ((None, None), (1, "x", 0))]:
        stock, compact = _nodes(shape, order)
        x = next(iter(_inputs(shape).values()))
        for kind, node in (("stock", stock), ("compact", compact)):
            call = _caller(node)
            call(x)
            irs.setdefault(kind, []).append("\n".join(call.inspect_llvm().values()))
    assert any("as_strided" in ir or "tuple_setitem" in ir or "strided_view" in ir for ir in irs["stock"])
    assert not any("as_strided" in ir or "tuple_setitem" in ir or "strided_view" in ir for ir in irs["compact"])


@pytest.mark.parametrize("shape,order", [((1,), ()), ((1, 1), ()), ((None, 1), (0,)), ((1, None, 1), ("x", 1)), ((), ("x",)), ((), ("x", "x"))])
def test_a_shuffle_that_drops_axes_or_of_a_0d_array_is_lowered_into_its_caller(shape, order):
    """Its checks and view are a node intrinsic (`compact.views.checked_view`): numba runs no
    pipeline for the node function, and the caller gets the compact function's view."""


    stock, compact = _nodes(shape, order)
    x = next(iter(_inputs(shape).values()))
    with numba_compiles() as compiled:
        got = _caller(compact)(x)
    assert compiled == ["call"], compiled  # the caller only
    want = _caller(stock)(x)
    assert _view(got) == _view(want)


@pytest.fixture(scope="module")
def model_fns():
    x = pt.dmatrix("x")
    v = pt.dvector("v")
    s = pt.dscalar("s")
    col = pt.tensor("col", shape=(None, 1), dtype="float64")
    out = (x.T * v[None, :]).sum(axis=0)[:, None] * s + col.dimshuffle(1, 0).sum() + pt.exp(s)[None]
    logp = out.sum() + (col[:, 0] * v).sum()
    inputs = [x, v, s, col]
    outputs = [logp, *pytensor.grad(logp, [x, v, s, col])]
    return {b: compile_fn(inputs, outputs, b, cache_key="compact_views") for b in ("stock_strict", "policy_default")}


def test_a_model_agrees_with_stock_with_every_dimshuffle_compact(model_fns):
    nodes = [n for n in model_fns["policy_default"].maker.fgraph.apply_nodes if isinstance(n.op, DimShuffle)]
    assert nodes and all(type(n.op) is CompactDimShuffle for n in nodes), [type(n.op) for n in nodes]
    rng = np.random.default_rng(3)
    args = (rng.normal(size=(4, 3)), rng.normal(size=4), 0.7, rng.normal(size=(4, 1)))
    ref, got = model_fns["stock_strict"](*args), model_fns["policy_default"](*args)
    for r, g in zip(ref, got, strict=True):
        assert np.asarray(g).shape == np.asarray(r).shape
        np.testing.assert_allclose(g, r, rtol=1e-13, atol=0)


FMF = re.compile(r"= (?:tail )?(?:fadd|fsub|fmul|fdiv|frem|fcmp|fneg|call)(?: (?:fast|nnan|ninf|nsz|arcp|contract|afn|reassoc))+ ")


def test_compact_versions_of_flag_free_ops_compile_no_flag_under_fast_math():
    """A copy compiles a compact op of a flag-free stock class under the enclosing
    function's fast math (`as_written.lowering.keeps_enclosing_fastmath`): its whole
    module carries no fast-math flag. Control: a product compiled the same way does."""
    from ptnumba_codegen.as_written.lowering import keeps_enclosing_fastmath
    from ptnumba_codegen.compact.ops import CompactAlloc

    _, shuffle = _nodes((None, 1, None), (2, "x", 0))
    s, n = pt.dscalar("s"), pt.lscalar("n")
    fill = CompactAlloc().make_node(s, n, n)
    v = pt.dvector("v")
    add = (v * v).owner
    irs = []
    with pytensor.config.change_flags(numba__fastmath=True):
        for node, args in ((shuffle, (np.ones((3, 1, 2)),)), (fill, (np.array(2.5), np.array(3), np.array(2))),
                           (add, (np.ones(3), np.ones(3)))):
            call = {1: _caller, 2: _caller2, 3: _caller3}[len(args)](node)
            call(*args)
            irs.append("\n".join(call.inspect_llvm().values()))
    assert keeps_enclosing_fastmath(shuffle.op) and keeps_enclosing_fastmath(fill.op)
    assert not FMF.search(irs[0]) and not FMF.search(irs[1])
    assert FMF.search(irs[2])
