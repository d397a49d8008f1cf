"""Row loops (`loop.row_loop_length`): an innermost axis of static length 8 to 63 runs as a
loop of whole vectors, its trip count a run-time value and not interleaved.

Given the constant, LLVM unrolled a small body's row of 12 whole and vectorized the loop
around it, reading every input at the row's stride with gathers (slower than stock on a
structural-equation model's (263, 12) kernel); interleaved, a row of 12 at 4 lanes left 4
elements to the scalar remainder.
"""

from __future__ import annotations

import re

import numpy as np
import pytensor.tensor as pt
import pytest
from conftest import assert_same_bits, compile_fn, final_ir

from ptnumba_codegen.lowering.loop import ROW_LOOP_LIMIT, SHORT_ROW, row_loop_length


@pytest.mark.parametrize(
    "shape, length",
    [
        ((None, 12), 12),
        ((263, 12), 12),
        ((3, 8), 8),
        ((3, 63), 63),
        ((3, 64), None),  # long rows keep the constant trip count and interleaving
        ((3, 7), None),  # short rows: LLVM unrolls them and vectorizes the loop around
        ((12, None), None),
        ((), None),
        ((20,), 20),
    ],
)
def test_which_rows_are_row_loops(shape, length):
    assert row_loop_length(shape) == length
    assert SHORT_ROW == 8 and ROW_LOOP_LIMIT == 64  # the band the cases above describe


def _check_graph(rows, cols):
    """The structural-equation model's and the Cox model's small-bodied checks: a product
    of a column, a row and a constant matrix, and whether all of it is non-negative."""
    x, y = pt.tensor("x", shape=(rows, 1)), pt.tensor("y", shape=(1, cols))
    c = pt.constant(np.random.default_rng(3).normal(size=(rows, cols)))
    p = x * y * c
    return [x, y], [p, pt.all(p >= 0), (p / x).sum(axis=1)]


def _kernels(ir: str) -> list[str]:
    return [d for d in re.split(r"\ndefine ", ir)[1:] if not re.match(r"[^@]*@ptnumba_mvec_", d)]


@pytest.mark.parametrize("cols", [12, 20])
def test_a_row_loop_reads_rows_as_vectors_not_gathers(cols):
    """Final optimized IR: no gather anywhere (fails with the constant trip count on an
    AVX-512 target); the values are stock numba's, bit for bit."""
    inputs, outs = _check_graph(263, cols)
    fn = compile_fn(inputs, outs, "policy_default", cache_key=f"row_loop_{cols}", inspect_ir=True)
    rng = np.random.default_rng(4)
    vals = [rng.uniform(0.5, 2.0, (263, 1)), rng.standard_normal((1, cols))]
    got = fn(*vals)
    ir = final_ir(fn)
    assert "masked.gather" not in ir and "masked.scatter" not in ir
    assert any("llvm.loop.interleave.count" in d or "!llvm.loop" in d for d in _kernels(ir))
    want = compile_fn(inputs, outs, "stock_strict", cache_key=f"row_loop_{cols}")(*vals)
    assert_same_bits(got[0], want[0])
    assert bool(got[1]) == bool(want[1])
    np.testing.assert_allclose(got[2], want[2], rtol=1e-13)


@pytest.mark.parametrize("cols", [8, 9, 12, 13, 20, 63])
def test_every_row_length_of_the_band_gives_stocks_bits(cols):
    """Whole vectors plus any remainder, elementwise, under the strict policy (no flags, so
    no contraction into fused multiply-adds): the same bits as stock with fastmath off, NaN
    and signed zeros included."""
    x, y = pt.tensor("x", shape=(None, cols)), pt.tensor("y", shape=(1, cols))
    out = [x * y - x, pt.maximum(x, y) * 2.0]
    fn = compile_fn([x, y], out, "policy_strict", cache_key=f"row_band_{cols}")
    ref = compile_fn([x, y], out, "stock_strict", cache_key=f"row_band_{cols}")
    rng = np.random.default_rng(cols)
    xv = rng.standard_normal((37, cols))
    xv[0, :3] = [np.nan, -0.0, np.inf]
    yv = rng.standard_normal((1, cols))
    for g, w in zip(fn(xv, yv), ref(xv, yv), strict=True):
        assert_same_bits(g, w)


def test_a_row_loops_static_length_is_still_checked():
    """The trip count is a run-time value, but addresses use the static length: an array
    of another length (inputs trusted, PyTensor's own check skipped) raises."""
    x, y = pt.tensor("x", shape=(None, 12)), pt.tensor("y", shape=(1, 12))  # broadcast: not flattened
    fn = compile_fn([x, y], [pt.exp(x) * y + x], "policy_default", cache_key="row_check")
    assert fn(np.zeros((2, 12)), np.ones((1, 12)))[0].shape == (2, 12)
    fn.trust_input = True
    try:
        with pytest.raises(ValueError, match="static length 12"):
            fn(np.zeros((2, 11)), np.ones((1, 11)))
    finally:
        fn.trust_input = False
