"""``Cholesky`` as stock's copy, ``potrf`` call and zeroing, written into its caller
(`compact.cholesky`, swapped in by `passes.swap_compact`).

Every result, every error and every overwritten input equals stock numba's, bit for bit:
lower and upper, C, Fortran and strided inputs, overwritten or copied, readonly, a matrix
that is not positive definite (NaNs), an empty one, a non-square one, float32."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest
from numba.core import types
from pytensor.tensor.linalg import Cholesky, cholesky

from conftest import assert_same_bits, compile_fn, node_caller, numba_compiles
from ptnumba_codegen.compact.cholesky import CHOLESKY, result_type, why_not_compact
from ptnumba_codegen.compact.ops import CompactCholesky
from ptnumba_codegen.compact.replica import why_off


# another PyTensor's implementation keeps the stock op: nothing here to test
pytestmark = pytest.mark.skipif(why_off(CHOLESKY) is not None,
                                reason=f"the installed PyTensor's numba implementation is not the replicated one: {why_off(CHOLESKY)}")


def _fresh(x, layout):
    if layout == "C":
        return np.array(x, order="C")
    if layout == "F":
        return np.array(x, order="F")
    wide = np.zeros((2 * x.shape[0], 2 * x.shape[1]), dtype=x.dtype)
    wide[::2, ::2] = x
    return wide[::2, ::2]


def _run(fn, x):
    try:
        return fn(x)
    except Exception as err:  # noqa: BLE001  (stock's errors are compared too)
        return f"{type(err).__name__}: {err}"


def _matrices(dtype, rng):
    m = rng.normal(size=(5, 5))
    spd = m @ m.T + 5 * np.eye(5)
    return {
        "positive definite": spd.astype(dtype),
        "not positive definite": (spd - 20 * np.eye(5)).astype(dtype),
        "1x1": np.array([[4.0]], dtype=dtype),
        "empty": np.zeros((0, 0), dtype=dtype),
        "empty rows": np.zeros((0, 3), dtype=dtype),
        "not square": rng.normal(size=(3, 4)).astype(dtype),
        "with a NaN": np.where(np.eye(5) > 0, np.nan, spd).astype(dtype),
    }


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("lower", [True, False])
def test_the_node_function_is_stocks(lower, overwrite, dtype):
    """Called directly with every layout: stock's result (or error), and the input's buffer
    afterwards as stock leaves it (factored in place where stock factors it there)."""
    a = pt.matrix("a", dtype=dtype)
    ours = node_caller(CompactCholesky(lower=lower, overwrite_a=overwrite)(a).owner)
    theirs = node_caller(Cholesky(lower=lower, overwrite_a=overwrite)(a).owner)
    for label, x in _matrices(dtype, np.random.default_rng(4)).items():
        for layout in ("C", "F", "strided"):
            x_ours, x_theirs = _fresh(x, layout), _fresh(x, layout)
            got, want = _run(ours, x_ours), _run(theirs, x_theirs)
            if isinstance(want, str) or isinstance(got, str):
                assert got == want, (label, layout)
                continue
            assert_same_bits(got, want)
            assert_same_bits(x_ours, x_theirs)


def test_readonly_inputs_are_copied_as_stock_copies():
    a = pt.dmatrix("a")
    ours = node_caller(CompactCholesky(lower=True, overwrite_a=True)(a).owner)
    theirs = node_caller(Cholesky(lower=True, overwrite_a=True)(a).owner)
    x = _matrices("float64", np.random.default_rng(1))["positive definite"]
    for layout in ("C", "F"):
        x_ours, x_theirs = _fresh(x, layout), _fresh(x, layout)
        x_ours.flags.writeable = x_theirs.flags.writeable = False
        assert_same_bits(ours(x_ours), theirs(x_theirs))
        assert_same_bits(x_ours, x)


def test_in_a_graph_it_compiles_nothing_of_stocks_and_gives_stocks_bits():
    a = pt.dmatrix("a")
    out = cholesky(a @ a.T + 3 * pt.eye(a.shape[0]), lower=True).sum(axis=0)
    policy = compile_fn([a], out, "policy_default", inspect_ir=True)
    stock = compile_fn([a], out, "stock_strict")
    assert any(type(n.op) is CompactCholesky for n in policy.maker.fgraph.apply_nodes)
    x = np.random.default_rng(8).normal(size=(6, 6))
    with numba_compiles() as names:
        got = policy(x)
    assert names and not [m for m in names if "cholesky" in m or "potrf" in m], names
    assert_same_bits(got, stock(x))


def test_result_type_and_why_not():
    assert result_type(types.Array(types.float64, 2, "C")).layout == "C"
    assert result_type(types.Array(types.float64, 2, "A")).layout == "F"
    assert why_not_compact(Cholesky()(pt.dmatrix("a")).owner) is None
    assert "cast" in why_not_compact(Cholesky()(pt.lmatrix("i")).owner)
