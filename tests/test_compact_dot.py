"""``Dot`` as the BLAS calls stock makes (`compact.dot`, swapped in by
`passes.swap_compact`).

Every result and every error equals stock numba's (fastmath off), bit for bit, for operands
of every layout the graph or the caller gives it: C, F, strided, reversed, column slices,
and every size of 0, 1 and 3 on each axis. The common products run the compact function's
own BLAS call; the rest go to stock's function, compiled on demand, which a process loading
the function from PyTensor's cache finds as well.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.math import Dot

from conftest import compile_fn, second_process_line
import dataclasses

from ptnumba_codegen.compact.dot import DOT, slow_path_symbol, why_not_compact
from ptnumba_codegen.compact.ops import CompactDot, why_stock
from ptnumba_codegen.compact.replica import why_off
from ptnumba_codegen.compact.table import COMPACT
from ptnumba_codegen.passes.swap_compact import SwapCompact
from ptnumba_codegen.runtime import python_callbacks

# Another PyTensor's Dot keeps the stock op (the bit tests still compare it with stock)
replicated = pytest.mark.skipif(
    why_off(DOT) is not None, reason=f"the installed PyTensor's numba Dot is not the replicated one: {why_off(DOT)}"
)

# graph name -> the product of the function's inputs x, y
GRAPHS = {
    "x @ y": lambda x, y: x @ y,
    "x.T @ y": lambda x, y: x.T @ y,
    "x @ y.T": lambda x, y: x @ y.T,
    "x[::-1] @ y[:, ::2]": lambda x, y: x[::-1] @ y[:, ::2],
}


def _inputs(name, m, k, n):
    """The shapes of x and y for an (m, k) @ (k, n) product in graph ``name``."""
    xs = {"x.T @ y": (k, m)}.get(name, (m, k))
    ys = {"x @ y.T": (n, k), "x[::-1] @ y[:, ::2]": (k, 2 * n)}.get(name, (k, n))
    return xs, ys


def _variants(shape, dtype, rng):
    base = rng.normal(size=shape).astype(dtype)
    wide = rng.normal(size=(shape[0] * 2, shape[1] * 3 + 2)).astype(dtype)
    return {
        "C": base,
        "F": np.asfortranarray(base),
        "strided": wide[::2, : shape[1] * 3 : 3],
        "reversed": base[::-1],
        "column slice": wide[: shape[0], 1 : shape[1] + 1],
    }


@pytest.fixture(scope="module")
def fns():
    out = {}
    for dtype in ("float64", "float32"):
        x, y = pt.matrix("x", dtype=dtype), pt.matrix("y", dtype=dtype)
        for name, graph in GRAPHS.items():
            out[dtype, name] = {
                b: compile_fn([x, y], graph(x, y), b, cache_key=f"compact_dot {dtype} {name}") for b in ("stock_strict", "policy_default")
            }
    return out


def _run(fn, x, y):
    try:
        return fn(x, y)
    except Exception as err:  # noqa: BLE001  (stock's errors are compared too)
        return f"{type(err).__name__}: {err}"


def _same(ref, got) -> bool:
    if isinstance(ref, str) or isinstance(got, str):
        return ref == got
    return ref.dtype == got.dtype and ref.shape == got.shape and ref.tobytes() == got.tobytes()


@replicated
def test_policy_graph_holds_the_compact_dot(fns):
    for (dtype, name), pair in fns.items():
        dots = lambda fn: [type(n.op) for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, Dot)]  # noqa: E731
        assert dots(pair["policy_default"]) == [CompactDot], (dtype, name)
        assert dots(pair["stock_strict"]) == [Dot], (dtype, name)
        assert str(CompactDot()) == str(Dot())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", list(GRAPHS))
def test_same_bits_and_errors_as_stock(fns, dtype, name):
    rng = np.random.default_rng(7)
    pair = fns[dtype, name]
    checked = 0
    sizes = (0, 1, 3) if dtype == "float64" else (1, 3)
    for m, k, n in itertools.product(sizes, repeat=3):
        xs, ys = _inputs(name, m, k, n)
        xv, yv = _variants(xs, dtype, rng), _variants(ys, dtype, rng)
        for (xn, x), (yn, y) in itertools.product(xv.items(), yv.items()):
            ref, got = _run(pair["stock_strict"], x, y), _run(pair["policy_default"], x, y)
            assert _same(ref, got), (name, (m, k, n), xn, yn, ref if isinstance(ref, str) else "", got if isinstance(got, str) else "")
            checked += 1
    # a wrong contraction length raises stock's error
    x, y = np.ones((3, 2), dtype), np.ones((4, 3), dtype)
    if name == "x @ y":
        assert _run(pair["policy_default"], x, y) == _run(pair["stock_strict"], x, y)
        assert "mismatched contraction" in _run(pair["policy_default"], x, y)
    assert checked == len(sizes) ** 3 * 25


@replicated
def test_common_products_run_the_compact_call_and_the_rest_stocks(fns):
    fn = fns["float64", "x @ y"]["policy_default"]
    symbol = slow_path_symbol("float64")
    rng = np.random.default_rng(3)
    before = python_callbacks.calls(symbol)
    for x, y in [
        (rng.normal(size=(4, 3)), rng.normal(size=(3, 5))),  # gemm
        (np.asfortranarray(rng.normal(size=(4, 3))), rng.normal(size=(3, 1))),  # gemv, column
        (rng.normal(size=(1, 3)), np.asfortranarray(rng.normal(size=(3, 5)))),  # gemv, row
        (rng.normal(size=(4, 0)), rng.normal(size=(0, 5))),  # zero contraction
        # products with a dimension of 1, as a Kalman filter's step makes them
        (rng.normal(size=(4, 1)), rng.normal(size=(1, 5))),  # outer product: gemm, K == 1
        (rng.normal(size=(1, 3)), rng.normal(size=(3, 1))),  # 1 x 1: gemv, y the matrix
        (rng.normal(size=(1, 6))[:, ::2], rng.normal(size=(3, 1))),  # 1 x 1, x typed 'A': x the matrix
        (rng.normal(size=(1, 1)), rng.normal(size=(1, 5))),  # gemv, K == 1
        (np.asfortranarray(rng.normal(size=(4, 1))), rng.normal(size=(1, 1))),  # gemv, K == 1, column
        (rng.normal(size=(1, 6))[:, ::2], np.asfortranarray(rng.normal(size=(3, 5)))),  # gemv, row, x strided
        (rng.normal(size=(1, 3)), rng.normal(size=(6, 1))[::2]),  # 1 x 1, y's stride 2 items: incx 2
    ]:
        fn(x, y)
    assert python_callbacks.calls(symbol) == before
    fn(rng.normal(size=(4, 6))[:, ::2], rng.normal(size=(3, 5)))  # no unit stride: stock copies it
    fn(rng.normal(size=(4, 3))[::-1], rng.normal(size=(3, 1)))  # a reversed axis: stock normalizes it
    assert python_callbacks.calls(symbol) == before + 2


@replicated
def test_other_dtypes_and_other_stock_sources_keep_the_stock_dot(monkeypatch):
    x, y = pt.lmatrix("x"), pt.lmatrix("y")
    xf, yf = pt.dmatrix("xf"), pt.dmatrix("yf")
    ints, floats = Dot()(x, y), Dot()(xf, yf)
    assert "dtypes" in why_not_compact(ints.owner)
    assert why_not_compact(floats.owner) is None
    fg = pytensor.graph.fg.FunctionGraph([x, y, xf, yf], [floats, ints], clone=True)
    monkeypatch.setitem(COMPACT, "Dot", dataclasses.replace(DOT, source=dataclasses.replace(DOT.source, digests={})))
    assert "digest" in why_stock(fg.outputs[0].owner)
    assert SwapCompact().apply(fg) == 0
    monkeypatch.undo()
    assert SwapCompact().apply(fg) == 1
    assert [type(o.owner.op) for o in fg.outputs] == [CompactDot, Dot]


CACHED_PROBE = r"""
import sys
from pathlib import Path
import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
import pytensor.tensor as pt
sys.path.insert(0, sys.argv[2])
numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
from conftest import compile_fn
x, y = pt.dmatrix("x"), pt.dmatrix("y")
with pytensor.config.change_flags(numba__cache=True):
    fn = compile_fn([x, y], (x @ y.T) * 2.0, "policy_default")
rng = np.random.default_rng(5)
outs = [fn(rng.normal(size=(4, 3)), rng.normal(size=(5, 3))), fn(rng.normal(size=(4, 6))[:, ::2], rng.normal(size=(5, 3)))]
print("PROBE", " ".join(np.concatenate([o.ravel() for o in outs]).view(np.int64).astype(str)))
"""


def test_a_process_loading_the_cached_function_binds_blas_and_the_slow_path(tmp_path):
    """The first process compiles onto an empty cache, the second loads the function: both
    compute stock's bits, by the fast path (gemm) and the slow one (an operand without a unit stride)."""
    from pathlib import Path

    tests = Path(__file__).parent
    cold = second_process_line(CACHED_PROBE, [tmp_path, tests], "PROBE")
    warm = second_process_line(CACHED_PROBE, [tmp_path, tests], "PROBE")
    assert cold == warm
    x, y = pt.dmatrix("x"), pt.dmatrix("y")
    stock = compile_fn([x, y], (x @ y.T) * 2.0, "stock_strict")
    rng = np.random.default_rng(5)
    outs = [stock(rng.normal(size=(4, 3)), rng.normal(size=(5, 3))), stock(rng.normal(size=(4, 6))[:, ::2], rng.normal(size=(5, 3)))]
    assert cold == "PROBE " + " ".join(np.concatenate([o.ravel() for o in outs]).view(np.int64).astype(str))


@replicated
def test_the_product_is_lowered_into_its_caller():
    """The compact product is an intrinsic (`compact_dot_ir`): a function calling it for gemm
    and gemv compiles nothing else; the slow path compiles stock's function when first
    needed, as before; stock's bits for all three."""
    from conftest import node_caller, numba_compiles, warm_allocator

    x, y = pt.dmatrix("x"), pt.dmatrix("y")
    node = CompactDot()(x, y).owner
    stock = Dot()(x, y).owner
    rng = np.random.default_rng(9)
    fast = [(rng.normal(size=(4, 3)), rng.normal(size=(3, 5))), (np.asfortranarray(rng.normal(size=(4, 3))), rng.normal(size=(3, 1)))]
    slow = (rng.normal(size=(4, 6))[:, ::2], rng.normal(size=(3, 5)))  # no unit stride: stock copies it
    warm_allocator()
    call = None
    with numba_compiles() as compiled:
        call = node_caller(node)
        got = [call(a, b) for a, b in fast]
    assert set(compiled) == {"call"}, compiled  # one specialization per pair of layouts
    symbol = slow_path_symbol("float64")
    before = python_callbacks.calls(symbol)
    got.append(call(*slow))
    assert python_callbacks.calls(symbol) == before + 1
    want = [node_caller(stock)(a, b) for a, b in [*fast, slow]]
    for g, w in zip(got, want, strict=True):
        assert g.tobytes() == w.tobytes()
