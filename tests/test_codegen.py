"""The generated elemwise kernels against stock numba with fastmath off.

Policy ``strict`` must be bit-for-bit the stock strict backend; policy ``rewritten`` (decisions
from the rewritten graph) must agree to 1e-12 relative (and exactly on integers, booleans and decisions).
"""

import numpy as np
import pytensor.tensor as pt
import pytest

import ptnumba_codegen
from conftest import assert_no_fallback, assert_same_bits, compile_fn, policy_nodes
from references import reference, verdict

UNARY = [
    "exp", "log", "log1p", "expm1", "sqrt", "tanh", "sin", "cos", "erf", "erfc", "gammaln", "psi",
    "sigmoid", "softplus", "log1mexp", "abs", "sign", "floor", "ceil", "round", "neg",
    "reciprocal", "sqr", "isnan", "isinf", "exp2", "log2", "log10", "arctan", "cosh",
]  # fmt: skip
BINARY = [
    "add", "sub", "mul", "true_div", "int_div", "mod", "pow", "maximum", "minimum",
    "eq", "neq", "lt", "le", "gt", "ge", "arctan2",
]  # fmt: skip
BITWISE = ["and_", "or_", "xor"]

DTYPE_PAIRS = [
    ("float64", "float64"), ("float32", "float32"), ("float32", "float64"), ("int64", "float64"),
    ("int8", "float32"), ("int32", "float32"), ("int64", "int64"), ("int8", "int8"),
    ("uint8", "uint8"), ("uint64", "int64"), ("bool", "bool"), ("int16", "uint32"),
]  # fmt: skip


def sample(dtype, n, rng):
    if dtype == "bool":
        return rng.random(n) > 0.5
    if dtype.startswith("float"):
        v = rng.standard_normal(n) * 3
        v[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310]
        return v.astype(dtype)
    info = np.iinfo(dtype)
    v = rng.integers(max(info.min, -60), min(info.max, 60), n, endpoint=True).astype(dtype)
    v[:2] = [info.min, info.max]
    return v


def build(dx, dy):
    x, y = pt.vector("x", dtype=dx), pt.vector("y", dtype=dy)
    outs, names = [], []
    for name in UNARY:
        try:
            outs.append(getattr(pt, name)(x))
            names.append(f"{name}(x)")
        except Exception:
            pass  # not defined for this dtype in pytensor
    ops = BINARY + (BITWISE if dx == dy and dx[0] in "biu" else [])
    for name in ops:
        try:
            outs.append(getattr(pt, name)(x, y))
            names.append(f"{name}(x, y)")
        except Exception:
            pass
    return [x, y], outs, names


def matrix_values(dx, dy, seed):
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        vals = [sample(dx, 37, rng), sample(dy, 37, rng)]
        if dy[0] in "iu":  # integer exponents must be >= 0 (numba raises), divisors != 0
            vals[1] = np.clip(vals[1], 1, 5).astype(dy)
    return vals


def run_matrix(dx, dy, backend, seed):
    """(names, results under ``backend``, stock strict results) of the op matrix."""
    inputs, outs, names = build(dx, dy)
    vals = matrix_values(dx, dy, seed)
    ref_fn = compile_fn(inputs, outs, "stock_strict", cache_key=("matrix", dx, dy))
    fn = compile_fn(inputs, outs, backend, cache_key=("matrix", dx, dy))
    assert_no_fallback(fn)
    with np.errstate(all="ignore"):
        return names, fn(*vals), ref_fn(*vals)


@pytest.mark.parametrize("dx, dy", DTYPE_PAIRS, ids=[f"{a}-{b}" for a, b in DTYPE_PAIRS])
def test_dtype_matrix_strict_policy_is_bitwise_stock(dx, dy):
    """Bit for bit stock strict, except where stock departs from the graph's dtypes
    (tests/references.py; docs/divergences.md)."""
    names, res, ref = run_matrix(dx, dy, "policy_strict", seed=1)
    for name, a, b, p, c in zip(names, res, ref, *graph_references(dx, dy, 1), strict=True):
        if (name, dx) in PY_FLOAT16:
            p = b
        problem = verdict(a, b, p, c)
        assert problem is None, f"{name} with {dx}, {dy}: {problem}: {a} vs stock {b}, py {p}"


# PyTensor's Python softplus of a bool computes np.exp(True) in float16 (the C backend
# uses that Python code too): stock's float32 result is the one the graph's dtype means
PY_FLOAT16 = {("softplus(x)", "bool")}


def graph_references(dx, dy, seed):
    """The py linker's results, and (lazily, one output at a time) the C backend's."""
    inputs, outs, _ = build(dx, dy)
    vals = matrix_values(dx, dy, seed)
    with np.errstate(all="ignore"):
        py = compile_fn(inputs, outs, "py", cache_key=("matrix", dx, dy))(*vals)

    def c_result(k):
        with np.errstate(all="ignore"):
            return compile_fn(inputs, outs[k], "c", on_unused_input="ignore")(*vals)

    return py, [lambda k=k: c_result(k) for k in range(len(outs))]


@pytest.mark.parametrize("dx, dy", DTYPE_PAIRS[:6], ids=[f"{a}-{b}" for a, b in DTYPE_PAIRS[:6]])
def test_dtype_matrix_default_policy_close_to_stock(dx, dy):
    names, res, ref = run_matrix(dx, dy, "policy_rewritten", seed=2)
    rtol = 1e-12 if "float32" not in (dx, dy) and "int8" not in (dx, dy) else 1e-6
    for name, a, b, p, c in zip(names, res, ref, *graph_references(dx, dy, 2), strict=True):
        if (name, dx) not in PY_FLOAT16:
            b = reference(b, p, c)  # where stock departs from the graph's dtypes
        assert a.dtype == b.dtype, name
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=rtol, atol=0, equal_nan=True, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def _layout_fn(backend):
    x, y = pt.matrix("x"), pt.matrix("y")
    row = pt.row("row")
    out = [pt.exp(x) * y + row, pt.minimum(x * y * x, y) - row]
    return compile_fn([x, y, row], out, backend, cache_key="layouts")


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a,
        lambda a: a[::2, ::3],
        lambda a: a[::-1, ::-2],
        lambda a: a.T.copy().T,  # F-contiguous
        lambda a: a[:0],  # empty
        lambda a: a[:, :1],
    ],
    ids=["c", "strided", "negative-strides", "fortran", "empty", "one-column"],
)
def test_layouts_and_broadcasting(make):
    rng = np.random.default_rng(3)
    base = rng.uniform(0.5, 2.0, (12, 18))
    x = make(base)
    y = make(rng.uniform(0.5, 2.0, (12, 18)))
    row = rng.uniform(size=(1, x.shape[1]))
    ref = _layout_fn("stock_strict")(x, y, row)
    for backend in ("policy_strict", "policy_rewritten"):
        res = _layout_fn(backend)(x, y, row)
        for a, b in zip(res, ref, strict=True):
            if backend == "policy_strict":
                assert_same_bits(a, b)
            else:
                np.testing.assert_allclose(a, b, rtol=1e-12)


def test_zero_dim_and_3d():
    a, b = pt.scalar("a"), pt.tensor3("b")
    out = [pt.exp(a) + 1.0, pt.log1p(b * b) * a]
    rng = np.random.default_rng(4)
    vals = [np.array(0.7), rng.standard_normal((3, 4, 5))]
    ref = compile_fn([a, b], out, "stock_strict", cache_key="0d3d")(*vals)
    fn = compile_fn([a, b], out, "policy_strict", cache_key="0d3d")
    assert_no_fallback(fn)
    for r, e in zip(fn(*vals), ref, strict=True):
        assert_same_bits(r, e)


def test_runtime_broadcast_errors_match_stock():
    x, y = pt.vector("x"), pt.vector("y")
    out = pt.exp(x) + y
    fn = compile_fn([x, y], out, "policy_rewritten", cache_key="bcast")
    stock = compile_fn([x, y], out, "stock_strict", cache_key="bcast")
    for bad in [(np.ones(3), np.ones(4)), (np.ones(3), np.ones(1))]:
        with pytest.raises(ValueError) as mine:
            fn(*bad)
        with pytest.raises(ValueError) as ref:
            stock(*bad)
        assert str(mine.value) == str(ref.value)


def test_multiple_outputs_one_kernel():
    x, y = pt.vectors("x", "y")
    s = x * y
    outs = [pt.exp(s), s > 1.0, pt.sqrt(pt.abs(s)) + x]
    fn = compile_fn([x, y], outs, "policy_rewritten", cache_key="multi")
    nodes = policy_nodes(fn)
    assert any(len(n.outputs) > 1 for n in nodes)
    assert_no_fallback(fn)
    vals = [np.linspace(-2, 2, 25), np.linspace(1, 3, 25)]
    ref = compile_fn([x, y], outs, "stock_strict", cache_key="multi")(*vals)
    for a, b in zip(fn(*vals), ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_op_without_a_rule_calls_the_stock_function_inside_our_kernel():
    from ptnumba_codegen.lowering.rules import rule_kind

    x, y = pt.vectors("x", "y")
    outs = [pt.polygamma(1, x) * y, pt.exp(y) + x]  # polygamma: no table row, no cython function in scipy
    assert rule_kind(pt.polygamma(1, x).owner.op.scalar_op) == "stock"
    fn = compile_fn([x, y], outs, "policy_rewritten", cache_key="stockcall")
    assert_no_fallback(fn)
    vals = [np.linspace(0.5, 3, 9), np.linspace(1, 2, 9)]
    ref = compile_fn([x, y], outs, "stock_strict", cache_key="stockcall")(*vals)
    for a, b in zip(fn(*vals), ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_complex_dtype_falls_back():
    x = pt.vector("x", dtype="complex128")
    fn = compile_fn([x], pt.exp(x) * 2, "policy_rewritten", cache_key="complex")
    reasons = [ptnumba_codegen.fallback_reason(n) for n in policy_nodes(fn)]
    assert reasons and all("complex128" in r for r in reasons), reasons
    v = np.array([1 + 2j, -0.5j])
    np.testing.assert_allclose(fn(v), np.exp(v) * 2)


def test_python_mode_body_matches():
    # The kernel's pure-Python body (used by PyTensor when JIT is disabled) is op.perform
    from ptnumba_codegen.backend.dispatch import funcify_policy_node

    x, y = pt.vectors("x", "y")
    fn = compile_fn([x, y], pt.exp(x) * y, "policy_rewritten", cache_key="pymode")
    [node] = policy_nodes(fn)
    kernel, _ = funcify_policy_node(node.op, node)
    v = np.linspace(0, 1, 5)
    np.testing.assert_allclose(kernel(v, v), np.exp(v) * v)
