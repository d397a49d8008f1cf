"""Where stock numba departs from the graph's dtypes, the policy follows the graph (the
py linker, and the C backend where it has no promotion of its own): every known stock
divergence (docs/divergences.md), under every policy. Each case also asserts stock's
own result, so a stock fix shows up here."""

import numpy as np
import pytensor.tensor as pt
import pytest

from conftest import assert_no_fallback, assert_same_bits, compile_fn

b1, b2 = pt.vector("b1", dtype="bool"), pt.vector("b2", dtype="bool")
i8, i32, i64 = pt.vector("i8", dtype="int8"), pt.vector("i32", dtype="int32"), pt.vector("i64", dtype="int64")
u64 = pt.vector("u64", dtype="uint64")
f32, f64 = pt.vector("f32", dtype="float32"), pt.vector("f64", dtype="float64")
num, den = pt.vector("num"), pt.vector("den")
INPUTS = [b1, b2, i8, i32, i64, u64, f32, f64, num, den]
VALUES = [
    np.array([True, True, False, True]),
    np.array([True, False, False, True]),
    np.array([127, -128, 3, 5], dtype="int8"),
    np.array([-3, -(2**31), 2**31 - 1, 16777217], dtype="int32"),
    np.array([-3, -(2**63), 7, 1], dtype="int64"),
    np.array([2**64 - 1, 3, 0, 2**63], dtype="uint64"),
    np.array([1.5, 2.0, 2147483648.0, 16777216.0], dtype="float32"),
    np.array([0.1, -np.inf, np.inf, -2.0]),
    np.array([55.0, 55.0, -55.0, 4.0]),
    np.array([2.0, -np.inf, np.inf, -2.0]),
]

# name -> (graph, the graph's result, stock numba's result): every case asserts both
CASES = {
    # a bool add is a bool (True + True is True) before it is scaled
    "bool_add_then_scale": (lambda: (b1 + b2) * 1.5, [1.5, 1.5, 0.0, 1.5], [3.0, 1.5, 0.0, 3.0]),
    # reciprocal of an int32 is float64; stock rounds 1/x to float32
    "reciprocal_int32": (
        lambda: pt.reciprocal(i32),
        [1 / -3, 1 / -(2**31), 1 / (2**31 - 1), 1 / 16777217],
        np.float32(1.0) / VALUES[3].astype("float32"),
    ),
    # sigmoid of an integer: the float formula (stock negates -2**31 in int32: 1.0)
    "sigmoid_int_min": (lambda: pt.sigmoid(i32), [1 / (1 + np.exp(3.0)), 0.0, 1.0, 1.0], [1 / (1 + np.exp(3.0)), 1.0, 1.0, 1.0]),
    # int8 / int8 is float64 (stock divides in float32)
    "true_div_int8": (lambda: i8 / (i8 - 2), [127 / 125, -128 / 126, 3.0, 5 / 3], [np.float32(127 / 125), np.float32(-128 / 126), 3.0, np.float32(5 / 3)]),
    # uint64 * int64 is float64 (stock multiplies in int64: 2**64 - 1 is -1)
    "uint64_times_int64": (lambda: u64 * i64, [-3 * (2.0**64 - 1), -(2.0**63) * 3, 0.0, 2.0**63], [3.0, -(2.0**63), 0.0, -(2.0**63)]),
    # a float floor division by an infinity of the other sign is -1 (Python, numpy, C)
    "floor_divide_by_inf": (lambda: pt.int_div(num, den), [27.0, -1.0, -1.0, -2.0], [27.0, -0.0, -0.0, -2.0]),
    # maximum of int32 and float32 is float64: no rounding of the int32 to float32
    "maximum_int32_float32": (
        lambda: pt.maximum(i32, f32),
        [1.5, 2.0, 2147483648.0, 16777217.0],
        [1.5, 2.0, 2147483648.0, 16777216.0],
    ),
}


@pytest.mark.parametrize("backend", ["policy_strict", "policy_rewritten", "policy_fast"])
def test_known_stock_divergences_follow_the_graph(backend):
    outs = [make() for make, _, _ in CASES.values()]
    with np.errstate(all="ignore"):
        stock = compile_fn(INPUTS, outs, "stock_strict", cache_key="divergences", on_unused_input="ignore")(*VALUES)
        py = compile_fn(INPUTS, outs, "py", cache_key="divergences", on_unused_input="ignore")(*VALUES)
        fn = compile_fn(INPUTS, outs, backend, cache_key="divergences", on_unused_input="ignore")
        res = fn(*VALUES)
    assert_no_fallback(fn)
    for (name, (_, graph, stock_says)), r, s, p, out in zip(CASES.items(), res, stock, py, outs, strict=True):
        expected = np.asarray(graph, dtype=out.dtype)
        assert_same_bits(p, expected)  # the py linker computes what the graph says
        assert_same_bits(s, np.asarray(stock_says, dtype=out.dtype))  # stock does not
        if backend == "policy_rewritten" and name == "sigmoid_int_min":
            np.testing.assert_allclose(r, expected, rtol=1e-15, err_msg=name)
        else:
            assert_same_bits(r, expected)


def test_reciprocal_of_int32_minus_three_is_the_float64_third():
    res = compile_fn([i32], pt.reciprocal(i32), "policy_strict")(np.array([-3], dtype="int32"))
    assert res.dtype == np.float64 and float(res[0]).hex() == "-0x1.5555555555555p-2"


def test_bool_sum_scaled_agrees_with_the_c_backend():
    out = (b1 + b2) * 1.5
    v = VALUES[:2]
    c = compile_fn([b1, b2], out, "c", cache_key="bool_c")(*v)
    for backend in ("policy_strict", "policy_rewritten"):
        assert_same_bits(compile_fn([b1, b2], out, backend, cache_key="bool_c")(*v), c)


FLOATS = np.array([5.0, -5.0, 0.0, -0.0, 1.0, 0.1, -0.1, 7.5, np.inf, -np.inf, np.nan, 1e-310, 3.0, -3.0])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_float_floor_divide_is_stocks_but_by_an_opposite_infinity(dtype):
    """Stock's floor(a / b) everywhere, but -1 for a finite non-zero a over an infinity of
    the other sign: numpy's (and C's) answer there. Remainders are stock's throughout."""
    a, b = pt.vector("a", dtype=dtype), pt.vector("b", dtype=dtype)
    outs = [pt.int_div(a, b), pt.mod(a, b)]
    av, bv = (g.ravel().astype(dtype) for g in np.meshgrid(FLOATS, FLOATS))
    with np.errstate(all="ignore"):
        stock = compile_fn([a, b], outs, "stock_strict", cache_key=("floordiv", dtype))(av, bv)
        opposite_inf = np.isinf(bv) & np.isfinite(av) & (av != 0) & (np.signbit(av) != np.signbit(bv))
        assert np.all(np.floor_divide(av, bv)[opposite_inf] == -1)
        expected = np.where(opposite_inf, np.asarray(-1, dtype=dtype), stock[0])
        for backend in ("policy_strict", "policy_rewritten"):
            res = compile_fn([a, b], outs, backend, cache_key=("floordiv", dtype))(av, bv)
            assert_same_bits(res[0], expected)
            assert_same_bits(res[1], stock[1])
