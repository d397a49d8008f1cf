"""``SolveTriangular`` as stock's checks, copies and ``trsm`` call, written into its caller
(`compact.solve`, swapped in by `passes.swap_compact`).

Every result and error equals stock numba's (fastmath off), bit for bit: lower and upper,
unit diagonal, vector and matrix right-hand sides, operands C, Fortran (a transpose in the
graph or the caller's array), strided (copied first, as stock copies), overwritten or
copied (and then the right-hand side's own buffer, as stock leaves it), readonly constants, a zero pivot (NaNs), an empty right-hand side, a 1x1 system,
non-finite values and both shape errors."""

from __future__ import annotations

import numba
import numpy as np
import pytensor.tensor as pt
import pytest
from numba.core import types
from pytensor.tensor.linalg import SolveTriangular, solve_triangular

from conftest import assert_same_bits, compile_fn, numba_compiles
from ptnumba_codegen.compact.ops import CompactSolveTriangular, stock_node_function
from ptnumba_codegen.compact.replica import why_off
from ptnumba_codegen.compact.solve import SOLVE_TRIANGULAR, result_type, why_not_compact

B_CONST = np.linspace(0.5, 2.0, 12).reshape(4, 3)


# another PyTensor's implementation keeps the stock op: nothing here to test
pytestmark = pytest.mark.skipif(why_off(SOLVE_TRIANGULAR) is not None,
                                reason=f"the installed PyTensor's numba implementation is not the replicated one: {why_off(SOLVE_TRIANGULAR)}")


def _graph(name, a, b, lower, unit):
    solve = lambda x, y: solve_triangular(x, y, lower=lower, unit_diagonal=unit)  # noqa: E731
    if name == "solve(a, b)":
        return solve(a, b)
    if name == "solve(a.T, b)":
        return solve(a.T, b)
    if name == "solve(a, b.T)":
        return solve(a, b.T)
    if name == "solve(a, 2 * b)":  # a temporary right-hand side: the solve may overwrite it
        return solve(a, 2.0 * b)
    if name == "solve(a, const)":  # a readonly right-hand side
        return solve(a, pt.constant(B_CONST)) + b.sum()
    raise ValueError(name)


CASES = [
    (name, lower, unit, bdim)
    for name in ("solve(a, b)", "solve(a.T, b)", "solve(a, b.T)", "solve(a, 2 * b)", "solve(a, const)")
    for lower in (True, False)
    for unit in (False, True)
    for bdim in (1, 2)
    if not (name in ("solve(a, b.T)", "solve(a, const)") and bdim == 1) and (not unit or name == "solve(a, b)")
]


@pytest.fixture(scope="module")
def fns():
    out = {}
    for name, lower, unit, bdim in CASES:
        a, b = pt.dmatrix("a"), (pt.dvector("b") if bdim == 1 else pt.dmatrix("b"))
        graph = _graph(name, a, b, lower, unit)
        key = f"compact_solve {name} {lower} {unit} {bdim}"
        out[name, lower, unit, bdim] = {
            backend: compile_fn([a, b], graph, backend, cache_key=key) for backend in ("stock_strict", "policy_default")
        }
    return out


def _run(fn, *args):
    try:
        return fn(*args)
    except Exception as err:  # noqa: BLE001  (stock's errors are compared too)
        return f"{type(err).__name__}: {err}"


def _triangular(n, lower, rng, zero_at=None):
    a = rng.normal(size=(n, n)) + np.eye(n) * 3
    a = np.tril(a) if lower else np.triu(a)
    if zero_at is not None:
        a[zero_at, zero_at] = 0.0
    return a


def _b(name, n, bdim, rng, k=3):
    if bdim == 1:
        return rng.normal(size=n)
    return rng.normal(size=(k, n)) if name == "solve(a, b.T)" else rng.normal(size=(n, k))


def _layouts(x):
    out = {"C": np.ascontiguousarray(x), "F": np.asfortranarray(x)}
    if x.ndim == 2 and x.size:
        wide = np.zeros((x.shape[0] * 2, x.shape[1] * 2))
        wide[::2, ::2] = x
        out["strided"] = wide[::2, ::2]
    return out


def _same(ref, got) -> bool:
    if isinstance(ref, str) or isinstance(got, str):
        return ref == got
    try:
        assert_same_bits(got, ref)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize("case", CASES, ids=[" ".join(map(str, c)) for c in CASES])
def test_every_layout_and_special_case_is_stocks(fns, case):
    name, lower, unit, bdim = case
    stock, policy = fns[case]["stock_strict"], fns[case]["policy_default"]
    nodes = [n for n in policy.maker.fgraph.apply_nodes if isinstance(n.op, SolveTriangular)]
    assert nodes and all(type(n.op) is CompactSolveTriangular for n in nodes), [type(n.op) for n in nodes]
    rng = np.random.default_rng(11)
    n = 4
    systems = {
        "regular": (_triangular(n, lower, rng), _b(name, n, bdim, rng)),
        "zero pivot": (_triangular(n, lower, rng, zero_at=2), _b(name, n, bdim, rng)),
        "1x1": (np.array([[2.5]]), _b(name, 1, bdim, rng)),
        "non-finite": (_triangular(n, lower, rng), _b(name, n, bdim, rng) * np.inf),
        "empty": (_triangular(n, lower, rng), _b(name, n, bdim, rng, k=0)),
        "b too short": (_triangular(n, lower, rng), _b(name, n - 1, bdim, rng)),
        "a not square": (rng.normal(size=(n, n + 1)), _b(name, n, bdim, rng)),
    }
    if name == "solve(a.T, b)":  # the graph transposes a: give it a's transpose
        systems = {k: (a.T.copy(), b) for k, (a, b) in systems.items()}
    if name == "solve(a, const)":  # b only feeds the sum: the system is a's with the constant
        systems = {k: (a, b) for k, (a, b) in systems.items() if a.shape[0] == 4 or k == "a not square"}
    for label, (a, b) in systems.items():
        for la, av in _layouts(a).items():
            for lb, bv in _layouts(b).items():
                want, got = _run(stock, av, bv.copy()), _run(policy, av, bv.copy())
                assert _same(want, got), (label, la, lb, want, got)


def test_the_common_layouts_compile_nothing_of_stocks():
    """C and Fortran operands take the intrinsic: numba compiles no part of stock's solve."""
    a, b = pt.dmatrix("a"), pt.dmatrix("b")
    fn = compile_fn([a, b], solve_triangular(a, b, lower=True) * 2.0, "policy_default", inspect_ir=True)
    rng = np.random.default_rng(3)
    with numba_compiles() as names:
        fn(_triangular(3, True, rng), rng.normal(size=(3, 2)))
        fn(np.asfortranarray(_triangular(3, True, rng)), np.asfortranarray(rng.normal(size=(3, 2))))
    assert names and not [m for m in names if "solve" in m or "trsm" in m], names


@pytest.mark.parametrize("layouts", [("C", "C", True), ("F", "F", True), ("C", "C", False), ("F", "C", False)])
def test_the_result_type_is_the_overloads_in_the_layout_it_is_made_in(layouts):
    """`result_type` is the type numba gives stock's node function for the same operands:
    the layout every path makes the array in."""
    la, lb, mutable = layouts
    a, b = pt.dmatrix("a"), pt.dmatrix("b")
    node = SolveTriangular(lower=True, b_ndim=2)(a, b).owner
    stock = stock_node_function(node.op, node)()  # the stock function, built on demand
    aty = types.Array(types.float64, 2, la)
    bty = types.Array(types.float64, 2, lb, readonly=not mutable)
    call = numba.njit(lambda x, y: stock(x, y))
    call.compile((aty, bty))
    [sig] = call.nopython_signatures
    assert sig.return_type == result_type(bty)
    assert result_type(bty).layout == ("C" if lb == "C" else "F")


def test_why_not_compact():
    a, b = pt.dmatrix("a"), pt.dmatrix("b")
    assert why_not_compact(SolveTriangular(b_ndim=2)(a, b).owner) is None
    assert "cast" in why_not_compact(SolveTriangular(b_ndim=2)(a, pt.fmatrix("c")).owner)
    assert why_not_compact(SolveTriangular(b_ndim=2)(pt.fmatrix("i"), pt.fmatrix("j")).owner) is None  # strsm


CACHED_PROBE = r"""
import sys
from pathlib import Path
import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
import pytensor.tensor as pt
from pytensor.tensor.linalg import solve_triangular
sys.path.insert(0, sys.argv[2])
numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
from conftest import compile_fn
a, b = pt.dmatrix("a"), pt.dmatrix("b")
with pytensor.config.change_flags(numba__cache=True):
    fn = compile_fn([a, b], solve_triangular(a, b, lower=True) * 2.0, "policy_default")
rng = np.random.default_rng(5)
out = fn(np.tril(rng.normal(size=(4, 4))) + 3 * np.eye(4), rng.normal(size=(4, 2)))
print("PROBE", " ".join(out.ravel().view(np.int64).astype(str)))
"""


def test_a_process_loading_the_cached_function_binds_trsm(tmp_path):
    """The first process compiles onto an empty cache, the second loads the function (not
    typed again): trsm's symbol is bound when the node is funcified, and both compute
    stock's bits."""
    from pathlib import Path

    from conftest import second_process_line

    tests = Path(__file__).parent
    cold = second_process_line(CACHED_PROBE, [tmp_path, tests], "PROBE")
    warm = second_process_line(CACHED_PROBE, [tmp_path, tests], "PROBE")
    assert cold == warm
    a, b = pt.dmatrix("a"), pt.dmatrix("b")
    stock = compile_fn([a, b], solve_triangular(a, b, lower=True) * 2.0, "stock_strict")
    rng = np.random.default_rng(5)
    out = stock(np.tril(rng.normal(size=(4, 4))) + 3 * np.eye(4), rng.normal(size=(4, 2)))
    assert cold == "PROBE " + " ".join(out.ravel().view(np.int64).astype(str))


def _fresh(x, layout):
    """A new array holding ``x`` in ``layout``: "C", "F" or "strided" (every other element
    of a larger buffer)."""
    if layout == "C":
        return np.array(x, order="C")
    if layout == "F":
        return np.array(x, order="F")
    every_other = tuple(slice(None, None, 2) for _ in x.shape)
    wide = np.zeros(tuple(2 * n for n in x.shape))
    wide[every_other] = x
    return wide[every_other]


@pytest.mark.parametrize("overwrite", [True, False])
@pytest.mark.parametrize("bdim", [1, 2])
def test_the_node_function_overwrites_b_where_stocks_does(overwrite, bdim):
    """Called directly with every layout of ``A`` and ``B`` (C, F, strided): the same result
    as stock's node function, and ``B`` afterwards the same too (solved in its own buffer
    where stock solves it there, untouched where stock copies it)."""
    from conftest import node_caller

    a, b = pt.dmatrix("a"), (pt.dvector("b") if bdim == 1 else pt.dmatrix("b"))
    compact = CompactSolveTriangular(lower=False, b_ndim=bdim, overwrite_b=overwrite)(a, b).owner
    stock = SolveTriangular(lower=False, b_ndim=bdim, overwrite_b=overwrite)(a, b).owner
    ours, theirs = node_caller(compact), node_caller(stock)
    rng = np.random.default_rng(2)
    av, bv = _triangular(4, False, rng), rng.normal(size=4 if bdim == 1 else (4, 3))
    for la in ("C", "F", "strided"):
        for lb in ("C", "F", "strided") if bdim == 2 else ("C", "strided"):
            b_ours, b_theirs = _fresh(bv, lb), _fresh(bv, lb)
            got, want = ours(_fresh(av, la), b_ours), theirs(_fresh(av, la), b_theirs)
            assert_same_bits(got, want)
            assert_same_bits(b_ours, b_theirs)
            assert overwrite or (b_ours == bv).all()
