"""``Alloc`` of one value filled by a loop (`compact.fill`).

Under the policy an Alloc whose value broadcasts in every dimension is a `CompactAlloc`:
the same array (dtype, shape, every element), the same error for a negative size, and its
numba function compiles none of numba's slice-assignment error formatting (the cost it
removes). Other Allocs keep the stock op.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest
from numba import njit
from numba.core import types
from pytensor.link.numba.dispatch.basic import numba_funcify
from pytensor.tensor.basic import Alloc

from conftest import compile_fn, node_function_irs, numba_compiles
from ptnumba_codegen.compact.fill import why_not_compact
from ptnumba_codegen.compact.ops import CompactAlloc


def _graph():
    x = pt.dvector("x")
    n = pt.lscalar("n")
    s = pt.dscalar("s")
    b = pt.tensor("b", shape=(1, 1), dtype="int32")
    flag = pt.scalar("flag", dtype="bool")
    outs = [
        pt.alloc(s, n, 3),  # a 0-d value
        pt.alloc(b, 2, n),  # a (1, 1) value, int32
        pt.alloc(flag, n),  # bool
        pt.alloc(x, 2, x.shape[0]),  # varies along its dimension: stock's loop
        pt.alloc(np.float32(1.5), n, 2, 1),  # a constant, 3-d
    ]
    return [x, n, s, b, flag], outs


@pytest.fixture(scope="module")
def fns():
    inputs, outputs = _graph()
    return {b: compile_fn(inputs, outputs, b, cache_key="compact_fill") for b in ("stock_strict", "policy_default")}


def test_only_single_value_fills_are_compact(fns):
    allocs = [n for n in fns["policy_default"].maker.fgraph.apply_nodes if isinstance(n.op, Alloc)]
    kinds = sorted((type(n.op).__name__, isinstance(n.op, CompactAlloc), n.inputs[0].type.shape) for n in allocs)
    assert sum(compact for _, compact, _ in kinds) == 4, kinds
    assert [shape for _, compact, shape in kinds if not compact] == [(None,)]
    assert not any(isinstance(n.op, CompactAlloc) for n in fns["stock_strict"].maker.fgraph.apply_nodes)


@pytest.mark.parametrize("n", [3, 0, 1, 6])
def test_same_arrays_as_stock(fns, n):
    args = (np.arange(5.0), n, -2.5, np.array([[7]], dtype="int32"), True)
    ref, got = fns["stock_strict"](*args), fns["policy_default"](*args)
    for r, g in zip(ref, got, strict=True):
        assert (g.dtype, g.shape) == (r.dtype, r.shape)
        assert g.tobytes() == r.tobytes()


def test_negative_size_raises_stocks_error(fns):
    args = (np.arange(5.0), -1, 1.0, np.array([[7]], dtype="int32"), False)
    messages = []
    for fn in fns.values():
        with pytest.raises(ValueError) as err:
            fn(*args)
        messages.append(str(err.value).splitlines()[0])
    assert messages[0] == messages[1]


def test_compact_fill_formats_no_string():
    s, n = pt.dscalar("s"), pt.lscalar("n")
    stock_node = pt.alloc(s, n, n).owner
    assert why_not_compact(stock_node) is None
    compact_node = CompactAlloc().make_node(*stock_node.inputs)
    # a 0-d array value, as a graph passes it
    sig = (types.Array(types.float64, 0, "C"), types.Array(types.int64, 0, "C"), types.Array(types.int64, 0, "C"))
    [stock_ir] = node_function_irs([stock_node], sig)
    # the compact node function is an intrinsic (`compact.fill.filled_array`): read it in a caller
    fill = numba_funcify(compact_node.op, node=compact_node)
    caller = njit(lambda v, a, b: fill(v, a, b))

    with numba_compiles() as compiled:
        caller.compile(sig)
    assert compiled == ["<lambda>"], compiled  # the caller only: no pipeline for the fill
    compact_ir = caller.inspect_llvm(sig)
    assert "unicode" in stock_ir and "unicode" not in compact_ir
    ones = np.ones((), dtype="int64")
    got = caller(np.array(2.5), ones * 2, ones * 3)
    assert got.shape == (2, 3) and got.flags.c_contiguous and (got == 2.5).all()


def test_why_not():
    x, n = pt.dvector("x"), pt.lscalar("n")
    assert "varies" in why_not_compact(pt.alloc(x, 2, x.shape[0]).owner)
    assert "0-d" in why_not_compact(Alloc()(pt.dscalar("s")).owner)
    assert why_not_compact(pt.alloc(pt.dscalar("s"), n).owner) is None
