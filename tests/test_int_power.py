"""Integer powers written as IR (`lowering.rules._int_power`): numba's ``int_power``, the
function stock's ``x ** n`` compiles strictly, as the same loop of multiplications, bit
for bit what the compiled ``_pow`` subroutine gives, special
values, both ends of each exponent type and decisions at a tie included; exponents it does
not take keep the compiled subroutine."""

import numpy as np
import pytensor.tensor as pt
import pytest

from conftest import assert_same_bits, compile_fn, subroutine_calls
from ptnumba_codegen.lowering import rules

BASES = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 1e-300, -1e-300, 5e-324, 1e300, -1e300,
                  np.inf, -np.inf, np.nan, 1.0000001, 0.9999999, -3.7, 7.123456789, 1e-5, 3.0])
EXPONENTS = {
    "int8": [0, 1, 2, 3, 7, -1, -2, -3, 127, -128],
    "int16": [13, -13, 1000, -1000, 32767, -32768],
    "uint8": [0, 2, 5, 255],
    "uint16": [3, 4096, 65535],
}


def _graph(exponent):
    x = pt.dvector("x")
    p = x ** exponent
    # the value, a decision reading it (1.0 ** n ties with 1.0), and a sum that reads it
    return [x], [p, pt.switch(pt.le(p, 1.0), 1.0, 0.0), (p * x).sum()]


def _outcomes(fn, *arrays):
    """Per element of the first input: the outputs, or the exception's type and message."""
    out = []
    for k in range(len(arrays[0])):
        try:
            out.append(fn(*(a[k:k + 1] for a in arrays)))
        except ZeroDivisionError as err:
            out.append((type(err), err.args))
    return out


def _assert_same_outcomes(got, want):
    for g, w in zip(got, want, strict=True):
        if isinstance(w, tuple):
            assert g == w
        else:
            for a, b in zip(g, w, strict=True):
                assert_same_bits(a, b)


def _compiled_subroutine(monkeypatch):
    monkeypatch.setattr(rules, "_int_power_in_ir", lambda t: False)


@pytest.mark.parametrize("dtype", sorted(EXPONENTS))
def test_constant_exponents_give_the_compiled_int_powers_bits(dtype, monkeypatch):
    for n in EXPONENTS[dtype]:
        inputs, outs = _graph(pt.constant(np.array(n, dtype=dtype)))
        got = _outcomes(compile_fn(inputs, outs, "policy_default", inspect_ir=True), BASES)  # (PyTensor turns some into products)
        with monkeypatch.context() as m:
            _compiled_subroutine(m)
            want = _outcomes(compile_fn(inputs, outs, "policy_default", inspect_ir=True), BASES)
        _assert_same_outcomes(got, want)


def test_a_variable_exponent_gives_the_compiled_int_powers_bits(monkeypatch):
    x, n = pt.dvector("x"), pt.bvector("n")
    outs = [x ** n, pt.switch(pt.lt(x ** n, 1.0), 1.0, 0.0), (x ** n).sum()]
    rng = np.random.default_rng(49)
    values = (np.resize(BASES, 64), rng.integers(-128, 128, size=64).astype("int8"))
    with monkeypatch.context() as m:
        calls = subroutine_calls(m)
        got = _outcomes(compile_fn([x, n], outs, "policy_default", inspect_ir=True), *values)
    assert not [c for c in calls if c[0] == "_pow"], calls  # the IR loop, no compiled subroutine
    _compiled_subroutine(monkeypatch)
    calls = subroutine_calls(monkeypatch)
    want = _outcomes(compile_fn([x, n], outs, "policy_default", inspect_ir=True), *values)
    assert ("_pow", ("float64", "int8")) in calls, calls
    assert sum(isinstance(w, tuple) for w in want) >= 3  # 0 ** -n and underflows raise
    _assert_same_outcomes(got, want)


def test_zero_to_a_negative_power_raises_as_stocks_does():
    x, n = pt.dvector("x"), pt.bvector("n")
    values = (np.array([0.0, -0.0, 1e-300, 2.0]), np.array([-1, -3, -2, -1], dtype="int8"))
    got = _outcomes(compile_fn([x, n], [x ** n], "policy_default", inspect_ir=True), *values)
    want = _outcomes(compile_fn([x, n], [x ** n], "stock_strict", inspect_ir=True), *values)
    assert [isinstance(g, tuple) for g in got] == [True, True, True, False]
    _assert_same_outcomes(got, want)


def test_decisions_on_integer_powers_are_stock_stricts():
    x, n = pt.dvector("x"), pt.bvector("n")
    outs = [pt.switch(pt.le(x ** n, 1.0), 1.0, 0.0), pt.lt(x ** n, x)]
    bases = np.array([1.0, -1.0, 0.5, 2.0, -2.0, 1.0000001, 0.9999999, 3.0, -0.5, 7.5])
    exps = np.array([3, 5, 2, 7, 3, 100, 100, 0, 9, 4], dtype="int8")  # non-negative: stock strict raises at 0 ** -n
    got = compile_fn([x, n], outs, "policy_default", inspect_ir=True)(bases, exps)
    want = compile_fn([x, n], outs, "stock_strict")(bases, exps)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_wider_exponents_keep_the_compiled_subroutine(dtype, monkeypatch):
    """Beyond 16 bits ``|n|`` may pass numba's cutoff (it calls ``pow`` then) or overflow
    when negated: the compiled ``_pow`` it stays."""
    calls = subroutine_calls(monkeypatch)
    inputs, outs = _graph(pt.constant(np.array(7, dtype=dtype)))
    compile_fn(inputs, outs, "policy_default", inspect_ir=True)(BASES)
    assert ("_pow", ("float64", dtype)) in calls, calls
