"""Vector calls at fewer lanes where a row does not fill the host's vectors (`isa.row_isa`).

A loop whose innermost axis has a static length runs a row as whole vectors plus a
remainder the loop vectorizer leaves scalar; each remaining element calls the scalar
wrapper, a whole vector's work for one value. On AVX-512 a row of 12 doubles then costs
5 calls' work at 8 lanes and 3 at AVX2's 4 (as in frailty_coxph's kernel).
"""

from __future__ import annotations

import re

import numpy as np
import pytensor.tensor as pt
import pytest
from conftest import compile_fn, final_ir

from ptnumba_codegen.lowering.vecmath import isa
from ptnumba_codegen.lowering.vecmath.libmvec import ulp_bound


@pytest.mark.parametrize(
    "length, dtype, narrowed",
    [
        (12, "float64", "d"),  # 1 + 4 calls at 8 lanes, 3 at 4
        (13, "float64", "d"),  # 1 + 5 against 3 + 1
        (20, "float64", "d"),  # 2 + 4 against 5
        (9, "float64", None),  # 1 + 1 against 2 + 1
        (10, "float64", None),  # 1 + 2 against 2 + 2
        (28, "float64", None),  # 3 + 4 against 7: a tie keeps the host's
        (16, "float64", None),  # whole vectors
        (8, "float64", None),
        (6, "float64", None),  # shorter than a vector (and no row loop: `loop.row_loop_length`)
        (None, "float64", None),  # not static
        (24, "float32", "d"),  # 16 lanes: 1 + 8 against 3
        (12, "float32", None),  # shorter than 16 float32 lanes
    ],
)
def test_the_narrower_isa_where_it_costs_fewer_calls(monkeypatch, length, dtype, narrowed):
    monkeypatch.setattr(isa, "host_isa", lambda: "e")
    assert isa.row_isa(length, dtype) == narrowed


@pytest.mark.parametrize("length", [12, 13, 20, None])
def test_an_avx2_host_is_never_narrowed(monkeypatch, length):
    monkeypatch.setattr(isa, "host_isa", lambda: "d")
    assert isa.row_isa(length) is None
    with isa.kernel_isa("d"):
        assert isa.target_isa() == "d"


def test_kernel_isa_only_narrows(monkeypatch):
    monkeypatch.setattr(isa, "host_isa", lambda: "d")
    with isa.kernel_isa("e"):  # never wider than the host
        assert isa.target_isa() == "d"
    monkeypatch.setattr(isa, "host_isa", lambda: "e")
    with isa.kernel_isa("d"):
        assert isa.target_isa() == "d"
    assert isa.target_isa() == "e"


def _rows(length, function=pt.log):
    x = pt.tensor("x", shape=(None, length))
    y = function(x) * 2.0
    return [x], [y, y.sum(axis=1)]


def _callers(ir: str, pattern: str) -> list[str]:
    """Kernel functions of the final IR (not the scalar wrappers) whose body matches."""
    found = []
    for definition in re.split(r"\ndefine ", ir)[1:]:
        name = re.match(r"[^@]*@([\w.$]+)\(", definition).group(1)
        if not name.startswith("ptnumba_mvec_") and re.search(pattern, definition):
            found.append(name)
    return found


def _compiled_ir(length, function=pt.log) -> str:
    fn = compile_fn(*_rows(length, function), "policy_default", cache_key=f"row_isa_{length}_{function}", inspect_ir=True)
    fn(np.ones((3, length)))  # numba compiles at the first call
    return final_ir(fn)


needs_avx512 = pytest.mark.skipif(isa.host_isa() != "e", reason="an AVX-512 host (libmvec's 'e' variants)")


@needs_avx512
def test_a_row_of_12_calls_avx2s_variant_only():
    """The final optimized IR: the (n, 12) kernel calls libmvec's 4-lane variant (and its
    wrapper), never the 8-lane one; a (n, 16) kernel keeps the 8-lane one (log1p: float64
    log has exact lanes, narrowed the same way).
    (tests/test_vector_math.py::test_a_short_inner_axis_with_reductions_is_vectorized: the
    Cox kernel's loop calls no scalar wrapper at all.)"""
    ir = _compiled_ir(12, pt.log1p)
    assert _callers(ir, r"call [^\n]*<4 x double> @_ZGVdN4v_log1p\("), "no 4-lane log1p call"
    assert not _callers(ir, r"@_ZGVeN8v_log1p\(|@ptnumba_mvec_log1p_e\(")
    wide = _compiled_ir(16, pt.log1p)
    assert _callers(wide, r"call [^\n]*<8 x double> @_ZGVeN8v_log1p\(")
    assert "ptnumba_exact4_log" in _compiled_ir(12) and "ptnumba_exact8_log" not in _compiled_ir(12)


def _ulps(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    ia, ib = a.view(np.int64), b.view(np.int64)
    ia = np.where(ia < 0, np.int64(-(2**63)) - ia, ia)
    ib = np.where(ib < 0, np.int64(-(2**63)) - ib, ib)
    return np.abs(ia - ib)


def test_a_narrowed_rows_bits_do_not_depend_on_position():
    """Each row holds one value in all 12 columns: the 8 a vector computes and the 4 of
    the remainder give the same bits, within libmvec's budget of libm's log; special values
    (0, -0, inf, NaN, negatives, subnormals, 1, near 1) exactly libm's."""
    fn = compile_fn(*_rows(12), "policy_default", cache_key="row_isa_12", inspect_ir=True)
    rng = np.random.default_rng(20)
    values = np.concatenate(
        [
            np.exp(rng.uniform(-700, 700, 3000)),
            1 + rng.uniform(-1e-3, 1e-3, 500),
            [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 5e-324, 2.2e-308, 1.0, np.nextafter(1, 2), np.nextafter(1, 0)],
        ]
    )
    x = np.repeat(values[:, None], 12, axis=1)
    with np.errstate(all="ignore"):
        y, s = fn(x)
        want = np.log(values) * 2.0
    for col in range(1, 12):
        assert np.array_equal(y[:, col], y[:, 0], equal_nan=True), f"column {col} differs from column 0"
    special = ~np.isfinite(want) | (values == 1.0)
    assert np.array_equal(y[special, 0], want[special], equal_nan=True)
    finite = ~special
    assert _ulps(y[finite, 0], want[finite]).max() <= ulp_bound("log", "float64") + 1  # the * 2.0 is exact
    assert np.array_equal(np.isnan(s), np.isnan(want))


@needs_avx512
def test_explain_says_why_a_kernel_uses_fewer_lanes():
    import ptnumba_codegen

    _compiled_ir(12)
    fn = compile_fn(*_rows(12), "policy_default", cache_key="row_isa_12", inspect_ir=True)
    text = ptnumba_codegen.explain(fn)
    assert "vector calls: 4 lanes (d), not the host's 8 (e): a row of 12 costs 3 whole-vector calls" in text
    assert "vector calls:" not in ptnumba_codegen.explain(
        compile_fn(*_rows(16), "policy_default", cache_key="row_isa_16", inspect_ir=True)
    )
