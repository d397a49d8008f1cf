"""Stock's scalar formulas written as IR (`lowering.formula_ir`): for float64, a function
of the kernel's own module holds the instructions numba lowers `formulas._sigmoid`,
`_softplus`, `_lgamma`, `_erf`, `_erfc` and `_pow` to, with the node's flags, and is called
as the formula compiled as a numba subroutine was. The function's final optimized IR is the
one the compiled subroutine gives (so are its bits), at every band edge of softplus and at
special values, under each policy, in loops, sums and a decision's cone; float32 keeps the
subroutine."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from conftest import assert_same_bits, compile_fn, final_ir, subroutine_calls
from ptnumba_codegen.lowering import formula_ir, rules
from test_own_library import _normalized_ir

# softplus's band edges (-37, 18, 33.3) and their neighbours, exp's overflow, special values
POINTS = np.array([-800.0, -745.2, -37.000001, -37.0, -36.99, -1.0, -0.0, 0.0, 5e-324, 1e-300, 0.5,
                   17.99, np.nextafter(18.0, 0.0), 18.0, 18.0001, 33.29, np.nextafter(33.3, 0.0), 33.3,
                   33.31, 700.0, 709.8, 710.0, 1e300, np.inf, -np.inf, np.nan])
FORMULAS = ("_sigmoid", "_softplus", "_lgamma", "_erf", "_erfc", "_pow")


def _cases():
    s, v, one = pt.dscalar("s"), pt.dvector("v"), pt.tensor("one", shape=(1,))
    return {
        "scalar softplus": ([s], [pt.softplus(s) * 2.0 + s]),
        "scalar sigmoid": ([s], [pt.sigmoid(s) - 0.5]),
        "scalar gradient": ([s], [pytensor.grad(pt.softplus(s) * s + pt.sigmoid(s * 3.0), s)]),
        "scalar cone": ([s], [pt.switch(pt.lt(pt.softplus(s * s), 18.0), s, pt.sigmoid(s) * 3.0)]),
        "one-element vector": ([one], [pt.softplus(one) * one + pt.sigmoid(one)]),
        "vector both": ([v], [pt.softplus(v) + pt.sigmoid(v)]),
        "vector gradient": ([v], [pytensor.grad((pt.softplus(v) * v).sum() + pt.sigmoid(v).sum(), v)]),
        "vector cone": ([v], [pt.switch(pt.lt(pt.softplus(v * v), 18.0), v, pt.sigmoid(v) * 3.0)]),
        "sum": ([v], [(pt.softplus(v) * v).sum()]),
        "scalar special": ([s], [pt.gammaln(s) + pt.erf(s) * pt.erfc(s) + pt.abs(s) ** (s * 0.5)]),
        "scalar special cone": ([s], [pt.switch(pt.lt(pt.gammaln(s) + pt.abs(s) ** (s * 0.5), 1.0), s, pt.erf(s))]),
        "vector special": ([v], [pt.gammaln(v) + pt.erf(v) * pt.erfc(v) + pt.abs(v) ** (v * 0.5)]),
        "special sum": ([v], [(pt.gammaln(v) * v + pt.erfc(v)).sum()]),
    }


# (policy, case) pairs whose compiled form calls a subroutine (elsewhere the policy takes
# lane calls or vector formulas, which have no subroutine to replace)
SUBROUTINE_CASES = [
    *[(p, c) for p in ("default", "strict", "fast")
      for c in ("scalar softplus", "scalar sigmoid", "scalar gradient", "scalar cone", "one-element vector",
                "scalar special", "scalar special cone")],
    *[("strict", c) for c in ("sum", "vector special", "special sum")],
    *[("fast", c) for c in ("vector both", "vector gradient", "vector cone", "sum", "vector special", "special sum")],
]


def _outputs(fn, shape) -> list:
    if shape == ():
        return [fn(np.asarray(p)) for p in POINTS]
    if shape == (1,):
        return [fn(POINTS[k:k + 1]) for k in range(len(POINTS))]
    return [fn(POINTS)]


@pytest.mark.parametrize(("policy", "case"), SUBROUTINE_CASES)
def test_formulas_in_ir_give_the_compiled_subroutines_final_ir(policy, case, monkeypatch):
    inputs, outs = _cases()[case]
    backend = f"policy_{policy}"
    with monkeypatch.context() as m:
        calls = subroutine_calls(m)
        in_ir = compile_fn(inputs, outs, backend, inspect_ir=True)
        got = _outputs(in_ir, inputs[0].type.shape)
    assert not [c for c in calls if c[0] in FORMULAS], calls
    monkeypatch.setattr(formula_ir, "in_ir", lambda t: False)
    calls = subroutine_calls(monkeypatch)
    compiled = compile_fn(inputs, outs, backend, inspect_ir=True)
    want = _outputs(compiled, inputs[0].type.shape)
    assert [c for c in calls if c[0] in FORMULAS], calls  # the control: the subroutine it replaces
    assert _normalized_ir(final_ir(in_ir)) == _normalized_ir(final_ir(compiled))
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=True):
            assert_same_bits(a, b)


def test_decisions_on_the_formulas_are_the_references():
    """`default` decides as the graph as written, strict (here the rewritten graph is the
    written one): element for element at softplus's band edges and sigmoid's ties."""
    s = pt.dscalar("s")
    outs = [pt.lt(pt.softplus(s), 18.0), pt.ge(pt.softplus(s - 1.0), 33.3 - 1.0),
            pt.switch(pt.le(pt.sigmoid(s), 0.5), 1.0, 0.0), pt.eq(pt.sigmoid(s), 1.0)]
    got = compile_fn([s], outs, "policy_default")
    want = compile_fn([s], outs, "unoptimized_strict")
    for p in POINTS:
        for a, b in zip(got(np.asarray(p)), want(np.asarray(p)), strict=True):
            np.testing.assert_array_equal(a, b)


def test_strict_formulas_are_stock_stricts_bits():
    s = pt.dscalar("s")
    outs = [pt.softplus(s), pt.sigmoid(s), pytensor.grad(pt.softplus(s) + pt.sigmoid(s), s)]
    got = compile_fn([s], outs, "policy_strict")
    want = compile_fn([s], outs, "stock_strict")
    for p in POINTS:
        for a, b in zip(got(np.asarray(p)), want(np.asarray(p)), strict=True):
            assert_same_bits(a, b)


@pytest.mark.parametrize(("op", "formula"), [("softplus", "_softplus"), ("sigmoid", "_sigmoid"), ("gammaln", "_lgamma"),
                                             ("erfc", "_erfc")])
def test_float32_keeps_the_compiled_subroutine(op, formula, monkeypatch):
    """numba types float32 against the formulas' literals in float64 (``1 + np.exp(-x)``):
    the subroutine keeps that, and the stock bits."""
    calls = subroutine_calls(monkeypatch)
    s = pt.fscalar("s")
    out = getattr(pt, op)(s) * np.float32(2.0)
    got = compile_fn([s], [out], "policy_strict", inspect_ir=True)  # (no disk cache: it compiles)
    want = compile_fn([s], [out], "stock_strict")
    with np.errstate(over="ignore"):
        points = POINTS.astype("float32")
    for p in points:
        assert_same_bits(got(np.asarray(p)), want(np.asarray(p)))
    assert [c for c in calls if c[0] == formula], calls  # (numba compiles at the first call)
