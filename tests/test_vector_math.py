"""The vector math tier (libmvec): accuracy against mpmath, special values against
scalar libm, position independence, and the policy's control over it."""

from __future__ import annotations

import math

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import ptnumba_codegen
from conftest import assert_same_bits, compile_fn, final_ir, policy_nodes
from ptnumba_codegen.tools import accuracy
from ptnumba_codegen.backend.plans import plan_node
from ptnumba_codegen.lowering.vecmath.libmvec import FORMULA_ULP
from ptnumba_codegen.lowering.vecmath.libmvec import ulp_bound, vector_call_available

pytestmark = pytest.mark.skipif(
    not vector_call_available("exp", "float64"), reason="no libmvec / AVX2 on this machine"
)
PT = {name: accuracy.pytensor_function(name) for name in accuracy.FUNCTIONS}


def build(dtype):
    xs = {name: pt.vector(name, dtype=dtype) for name in PT}
    outs = [PT[name](xs[name]) for name in PT]
    return list(xs.values()), outs


def vector_fn(dtype, backend="policy_rewritten"):
    ins, outs = build(dtype)
    return compile_fn(ins, outs, backend, cache_key=("vm", dtype))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_function_is_vectorized_under_default(dtype):
    fn = vector_fn(dtype)
    labels = [getattr(e, "label", None) for n in policy_nodes(fn) for e in plan_node(n).body.emitters]
    vectorized = [lab for lab in labels if lab]
    assert len(vectorized) == len(PT), labels


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_accuracy_against_mpmath_within_budget(dtype):
    errors = accuracy.measure(vector_fn(dtype), dtype, n=1500)
    for name, err in errors.items():
        bound = ulp_bound(accuracy.VECTOR_NAME.get(name, name), dtype) or FORMULA_ULP[name]
        assert err <= bound <= 4.0, f"{name} {dtype}: {err:.2f} ulp > {bound}"


SPECIAL = np.array(
    [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308,
     1.0, -1.0, -2.0, 709.78, 709.79, 710.0, -708.4, -745.13, -745.2, -746.0, 1e300, -1e300, 37.0, -37.0]
)  # fmt: skip


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_special_values_match_scalar_libm(dtype):
    with np.errstate(all="ignore"):
        vals = SPECIAL.astype(dtype)
    xs = [vals.copy() for _ in PT]
    with np.errstate(all="ignore"):
        got = vector_fn(dtype)(*xs)
        ref = vector_fn(dtype, "stock_strict")(*xs)
    for name, g, r in zip(PT, got, ref, strict=True):
        g, r = np.asarray(g), np.asarray(r)
        bad_class = ~np.isfinite(r) | (r == 0)
        label = f"{name}({vals[bad_class]}) {dtype}"
        np.testing.assert_array_equal(np.isnan(g[bad_class]), np.isnan(r[bad_class]), err_msg=label)
        np.testing.assert_array_equal(g[bad_class & ~np.isnan(r)], r[bad_class & ~np.isnan(r)], err_msg=label)
        np.testing.assert_array_equal(np.signbit(g[bad_class]), np.signbit(r[bad_class]), err_msg=label)
        finite = np.isfinite(r) & (r != 0)
        np.testing.assert_array_equal(np.isfinite(g[finite]), True, err_msg=label)
        np.testing.assert_allclose(g[finite], r[finite], rtol=8 * np.finfo(dtype).eps, err_msg=label)


def test_results_do_not_depend_on_position_length_or_strides():
    x, y, z = pt.vectors("x", "y", "z")
    outs = [
        pt.exp(x) * y + z, pt.sigmoid(x), pt.softplus(x) + pt.tanh(y), pt.log1p(pt.abs(x)) + pt.expm1(z),
        pt.gammaln(x) + pt.psi(y) + pt.tri_gamma(z),  # x, y, z < 0: libm lanes, reflections
    ]  # fmt: skip
    fn = compile_fn([x, y, z], outs, "policy_rewritten", cache_key="repro")
    rng = np.random.default_rng(5)
    probe = rng.standard_normal((3, 5)) * 4  # five probe elements per input
    reference = None
    for n in (1, 7, 8, 9, 17, 1_000_003):
        for pos in {0, n - 1, n // 2}:
            for probe_k in range(5):
                arrays = [rng.standard_normal(n) for _ in range(3)]
                for a, p in zip(arrays, probe[:, probe_k], strict=True):
                    a[pos] = p
                res = [o[pos] for o in fn(*arrays)]
                if reference is None:
                    reference = {}
                key = probe_k
                if key in reference:
                    assert np.array_equal(np.array(res), reference[key]), (n, pos)
                else:
                    reference[key] = np.array(res)
    # strided and reversed views holding the same values
    base = [rng.standard_normal(41) for _ in range(3)]
    for a, p in zip(base, probe[:, 0], strict=True):
        a[6] = p
    for view in (slice(None, None, 2), slice(None, None, -2), slice(None, None, 3)):
        where = int(np.flatnonzero(np.arange(41)[view] == 6)[0])
        res = [o[where] for o in fn(*(a[view] for a in base))]
        assert np.array_equal(np.array(res), reference[0]), view


def test_matrices_with_short_rows_give_the_vector_bits_in_every_layout():
    """(n, 5) matrices run the flat 1-d loop when C-contiguous and the N-d nest otherwise
    (F order, strided, broadcast): every element has the bits of the same value in a vector."""
    X, Y = pt.matrices("X", "Y")
    row = pt.row("row")
    outs = [pt.exp(X) * Y + 1.0, pt.log(pt.abs(X)), pt.sigmoid(X - row)]
    fn = compile_fn([X, Y, row], outs, "policy_rewritten", cache_key="short_rows")
    x, y, r = pt.vectors("x", "y", "r")
    vec = compile_fn([x, y, r], [pt.exp(x) * y + 1.0, pt.log(pt.abs(x)), pt.sigmoid(x - r)], "policy_rewritten", cache_key="short_rows_vec")
    rng = np.random.default_rng(11)
    Xv, Yv = rng.standard_normal((3001, 5)) * 5, rng.standard_normal((3001, 5))
    rv = rng.standard_normal((1, 5))
    flat_ref = vec(Xv.ravel(), Yv.ravel(), np.tile(rv, (3001, 1)).ravel())
    for label, (a, b) in {
        "C": (Xv, Yv),
        "F": (np.asfortranarray(Xv), np.asfortranarray(Yv)),
        "strided": (np.repeat(Xv, 2, axis=1)[:, ::2], np.repeat(Yv, 2, axis=1)[:, ::2]),
    }.items():
        got = fn(a, b, rv)
        for g, want in zip(got, flat_ref, strict=True):
            assert np.array_equal(np.asarray(g).ravel(), want), label
            assert np.asarray(g).shape == (3001, 5)
    # an inplace kernel (on the Dot's output) takes the flat path too
    A, B = pt.matrices("A", "B")
    inplace = compile_fn([A, B], [pt.exp(A @ B) + 1.0], "policy_rewritten", cache_key="short_rows_inplace")
    assert any(n.op.destroy_map for n in policy_nodes(inplace))
    Av, Bv = rng.standard_normal((3001, 3)), rng.standard_normal((3, 5))
    d = compile_fn([A, B], [A @ B], "stock_strict", cache_key="short_rows_dot")(Av, Bv)[0]
    want = vec(d.ravel(), np.ones(d.size), np.zeros(d.size))[0]
    assert np.array_equal(inplace(Av, Bv)[0].ravel(), want)


def test_an_inplace_kernel_on_a_non_contiguous_intermediate_compiles():
    """PyTensor's test_nd_index_axis1 without indexed-read fusion: ``exp`` runs in place on
    an AdvancedSubtensor result, typed as an 'A'-layout array, which numba cannot reshape:
    the flat loop is only taken for inputs typed contiguous."""
    x = pt.matrix("x", shape=(3, 100))
    idx = pt.matrix("idx", dtype="int64", shape=(10, 5))
    mode = ptnumba_codegen.policy_mode("rewritten").excluding("fuse_indexed_into_elemwise")
    fn = pytensor.function([x, idx], pt.exp(x[:, idx]), mode=mode)
    assert any(n.op.destroy_map for n in policy_nodes(fn))
    rng = np.random.default_rng(42)
    xv, iv = rng.normal(size=(3, 100)), rng.integers(100, size=(10, 5)).astype(np.int64)
    ref = compile_fn([x, idx], [pt.exp(x[:, idx])], "stock_strict", cache_key="nd_index")(xv, iv)[0]
    np.testing.assert_allclose(fn(xv, iv), ref, rtol=1e-15)


def test_static_short_rows_vectorize_and_keep_the_vector_bits():
    """Types that fix the lengths (a mixture's (n, 3) components, a zero-inflated model's
    (n, 2)) compute addresses from the static lengths, so the long axis vectorizes even
    with broadcasting and reductions that keep the flat loop out. Every value has the
    bits of the same kernel with unknown lengths (C, F and strided inputs; sums as their
    reassociating flags allow), the vector calls are in the final IR, and an array of
    another length is refused."""
    n = 20011  # large enough for the chunk function (where LLVM missed the strides)
    X, M = pt.tensor("X", shape=(n, 3)), pt.tensor("M", shape=(n, 1))
    Xd, Md = pt.matrix("Xd"), pt.tensor("Md", shape=(None, 1))

    def graph(x, m):
        e = pt.exp(x - m)
        return [e.sum(axis=1), e.sum(axis=0), pt.max(pt.log1p(pt.abs(x)) * m, axis=1), pt.sigmoid(x) * m]

    static = compile_fn([X, M], graph(X, M), "policy_rewritten", cache_key="static_rows", inspect_ir=True)
    dynamic = compile_fn([Xd, Md], graph(Xd, Md), "policy_rewritten", cache_key="dynamic_rows")
    rng = np.random.default_rng(5)
    Xv = rng.standard_normal((n, 3)) * 4
    Xv[::7, 1] = -0.0
    Xv[5, 2] = np.inf
    Mv = rng.standard_normal((n, 1))
    want = dynamic(Xv, Mv)
    for label, x in {
        "C": Xv,
        "F": np.asfortranarray(Xv),
        "strided": np.repeat(Xv, 2, axis=0)[::2],
    }.items():
        got = static(x, Mv)
        for g, w in zip(got[2:], want[2:], strict=True):  # max, elementwise: the same bits
            assert np.array_equal(g, w, equal_nan=True), label
            assert np.array_equal(np.signbit(g), np.signbit(w)), label
        for g, w in zip(got[:2], want[:2], strict=True):  # sums: reassociated (policy reduction flags)
            np.testing.assert_allclose(g, w, rtol=4e-16 * n, err_msg=label)
    ir = final_ir(static)
    assert _vector_callers(ir, "exp")[0], "the static kernel's loops are not vectorized"  # (max decides: log1p is libm)
    ref = compile_fn([Xd, Md], graph(Xd, Md), "stock_strict", cache_key="dynamic_rows_ref")(Xv, Mv)
    for g, r in zip(want, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-13)
    with pytest.raises(Exception, match="shape|length"):
        static(Xv[:-1], Mv[:-1])


def test_strict_and_zero_budget_policies_keep_scalar_libm(tmp_path):
    path = tmp_path / "nobudget.toml"
    path.write_text('extends = "rewritten"\n[classes.transcendental]\nmax_ulp = 0\n')
    import ptnumba_codegen
    import pytensor

    x = pt.vector("x")
    for mode in (ptnumba_codegen.policy_mode(path), ptnumba_codegen.policy_mode("strict")):
        fn = pytensor.function([x], pt.exp(x) + pt.tanh(x), mode=mode)
        labels = [getattr(e, "label", None) for n in policy_nodes(fn) for e in plan_node(n).body.emitters]
        # scalar libm: the stock call, or lane calls for strict instructions (lane_calls)
        assert all(lab is None or lab.startswith("libm lanes") for lab in labels), labels
    # an op override can grant a budget to one function only
    path.write_text('extends = "strict"\n[ops.Tanh]\nflags = []\nmax_ulp = 3\n')
    fn = pytensor.function([x], pt.exp(x) + pt.tanh(x), mode=ptnumba_codegen.policy_mode(path))
    labels = [getattr(e, "label", None) for n in policy_nodes(fn) for e in plan_node(n).body.emitters]
    assert sorted(lab for lab in labels if lab) == ["libm lanes exp (float64)", "libmvec tanh (float64)"]


def test_comparison_cone_keeps_scalar_libm():
    x, b = pt.vectors("x", "b")
    fn = compile_fn([x, b], [pt.le(pt.exp(x), b), pt.exp(b)], "policy_rewritten", cache_key="conelibm")
    [node] = policy_nodes(fn)
    plan = plan_node(node)
    exps = [
        (klass, getattr(e, "label", None))
        for i, klass, e in zip(plan.body.program.instrs, plan.body.classes, plan.body.emitters, strict=True)
        if i.op_name == "Exp"
    ]
    # exp's lanes are libm's algorithm as vector code: outside the cone too, so exp(b) has
    # libm's bits wherever it is computed
    assert sorted(exps, key=str) == [
        ("comparison_sensitive", "libm lanes exp (float64)"),
        ("transcendental", "libm lanes exp (float64)"),
    ]
    xv = np.linspace(-3, 3, 4001)
    bv = np.array([math.exp(v) for v in xv])  # libm's: every comparison is a tie
    bv[::3] = np.nextafter(bv[::3], np.inf)
    got = fn(xv, bv)
    want = compile_fn([x, b], [pt.le(pt.exp(x), b), pt.exp(b)], "stock_strict", cache_key="conelibm")(xv, bv)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1].tobytes() == want[1].tobytes()


_TARGET_SCRIPT = """
import hashlib, re, sys, numpy as np, pytensor, pytensor.tensor as pt
import ptnumba_codegen
from ptnumba_codegen.lowering.vecmath import libmvec as vector_math
if sys.argv[1] == "nolibmvec":
    vector_math.libmvec_loaded.cache_clear()
    vector_math.libmvec_loaded = lambda: False
x = pt.vector("x")
out = pt.expm1(x) * 2.0 + pt.log1p(pt.abs(x))  # libmvec functions without exact lanes
with pytensor.config.change_flags(numba__cache=False):
    fn = pytensor.function([x], out, mode=ptnumba_codegen.policy_mode("rewritten"))
    with pytensor.config.change_flags(numba__fastmath=True):
        ref = pytensor.function([x], out, mode="NUMBA")
v = np.linspace(-5, 5, 1000)  # no zero: relative errors
fn(v)
ir = "\\n".join(fn.vm.jit_fn.inspect_llvm().values())
print(sorted(set(re.findall(r"@(_ZGV\\w+)\\(", ir))))
print(vector_math.target_isa(), float(np.max(np.abs(fn(v) - ref(v)) / np.abs(ref(v)))))
print(bool(np.array_equal(fn(v), ref(v))))
with pytensor.config.change_flags(numba__cache=False):
    special = pytensor.function([x], [pt.gammaln(x), pt.psi(x), pt.tri_gamma(x)], mode=ptnumba_codegen.policy_mode("rewritten"))
w = np.linspace(-7.3, 40, 2001)
print(hashlib.sha256(np.concatenate(special(w)).tobytes()).hexdigest())
"""


def _run_target(mode, env_extra):
    import os
    import subprocess
    import sys

    env = {**os.environ, **env_extra}
    out = subprocess.run(
        [sys.executable, "-c", _TARGET_SCRIPT, mode], capture_output=True, text=True, env=env, check=True
    ).stdout.splitlines()
    return out


SPECIAL_FUNCTIONS = ("gammaln", "psi", "tri_gamma")


def _special(values, dtype="float64", backend="policy_rewritten"):
    """gammaln, psi, tri_gamma of ``values`` from the shared all-functions function."""
    # scipy's polygamma (stock tri_gamma) never returns for some huge negative arguments
    safe = np.where(values < -1e15, -1e17, values).astype(values.dtype)
    xs = [safe if name == "tri_gamma" else values if name in SPECIAL_FUNCTIONS else np.ones_like(values) for name in PT]
    with np.errstate(all="ignore"):
        outs = dict(zip(PT, vector_fn(dtype, backend)(*xs), strict=True))
    return [np.asarray(outs[name]) for name in SPECIAL_FUNCTIONS]


def _special_digest():
    import hashlib

    return hashlib.sha256(np.concatenate(_special(np.linspace(-7.3, 40, 2001))).tobytes()).hexdigest()


def test_avx2_target_uses_the_avx2_variants():
    from numba.core.codegen import get_host_cpu_features

    features = [f for f in get_host_cpu_features().split(",") if not f.startswith("+avx512")]
    features = [f"-{f[1:]}" if f.startswith("+avx512") else f for f in features]
    calls, isa_err, _same, special = _run_target(
        "avx2", {"NUMBA_CPU_FEATURES": ",".join(features), "NUMBA_CPU_NAME": "haswell"}
    )
    assert calls == "['_ZGVdN4v_expm1', '_ZGVdN4v_log1p']"
    isa, err = isa_err.split()
    assert isa == "d" and float(err) < 1e-14  # libmvec's few ulps, through the sum
    assert special == _special_digest()  # lgamma/digamma: pure IEEE formulas, the same bits


def test_without_libmvec_results_are_scalar_libm():
    calls, isa_err, same, special = _run_target("nolibmvec", {})
    assert calls == "[]"
    assert same == "True"  # scalar libm with the default policy's flags: stock fastmath's bits
    assert special == _special_digest()  # lgamma/digamma need no libmvec


def test_switch_branches_give_vector_calls_safe_arguments():
    x = pt.vector("x")
    outs = [pt.switch(x > 0, pt.log(x), -1.0) + 1.0, pt.switch(pt.isnan(x), 0.0, pt.exp(x) * 2.0)]
    fn = compile_fn([x], outs, "policy_rewritten", cache_key="guards")
    guards = [g for n in policy_nodes(fn) for g in plan_node(n).body.guards.values()]
    assert sorted(g[1] for g in guards) == [False, True]  # log guarded by x>0, exp by not isnan
    v = np.array([2.0, 0.0, -0.0, -3.0, np.inf, -np.inf, np.nan, 1e-310, 700.0, 710.0])
    with np.errstate(all="ignore"):
        ref = compile_fn([x], outs, "stock_strict", cache_key="guards")(v)
        res = fn(v)
    for a, b in zip(res, ref, strict=True):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        finite = np.isfinite(b)
        np.testing.assert_array_equal(a[~finite & ~np.isnan(b)], b[~finite & ~np.isnan(b)])
        np.testing.assert_allclose(a[finite], b[finite], rtol=1e-15)


def _edges(dtype):
    """lgamma/digamma/trigamma arguments at every region boundary and special value of the formulas."""
    f = np.dtype(dtype).type
    pts = [0.5 * k for k in range(1, 18)] + [1.4616321449683622, 1e-300, 2.0**-1022, 2.0**-500, 1e305, 2.0**52, 2.0**53 + 2]
    with np.errstate(all="ignore"):
        pts = [f(p) for p in pts if np.isfinite(f(p)) and f(p) != 0]
    vals = [np.nextafter(p, -np.inf) for p in pts] + pts + [np.nextafter(p, np.inf) for p in pts]
    vals += [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -5e-324, 5.5e-309, 5.6e-309, 1e-45, -1e-45,
             -1e-300, -1.0, -2.0, -37.0, -0.5, -2.5, -4e15 - 0.5, -2.0**52, -1e17, -1e300, 2.55e305, 2.5564e305,
             2.6e305, 1e306, 1.7e308, 4e36, 1e36, 3e38]  # fmt: skip
    with np.errstate(all="ignore"):
        return np.array(vals, dtype=np.float64).astype(dtype)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_special_function_edges_match_stock_and_mpmath(dtype):
    v = _edges(dtype)
    got, ref = _special(v, dtype), _special(v, dtype, "stock_strict")
    v64 = v.astype(np.float64)  # the formulas' domain is checked in float64
    libm_lanes = ~((v64 >= 2.0**-1022) & (v64 < (1e305 if dtype == "float64" else 1e36)))
    for name, g, r in zip(SPECIAL_FUNCTIONS, got, ref, strict=True):
        label = f"{name} {dtype}"
        special = ~np.isfinite(r) | (r == 0)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r), err_msg=f"{label} NaN at {v}")
        np.testing.assert_array_equal(g[special], r[special], err_msg=f"{label} at {v[special]}")
        np.testing.assert_array_equal(np.signbit(g[special]), np.signbit(r[special]), err_msg=label)
        if name == "gammaln":  # outside the formula's domain: glibc's lgamma itself
            np.testing.assert_array_equal(g[libm_lanes], r[libm_lanes], err_msg=label)
        bound = ulp_bound(accuracy.VECTOR_NAME[name], dtype)
        check = ~special & (v > 0)
        err = accuracy.max_ulp(name, v[check], g[check])
        assert err <= bound, f"{label}: {err:.2f} ulp > {bound}"
        neg = ~special & (v < 0) & (v > -1e15)  # the reflections: vs scipy's own
        np.testing.assert_allclose(g[neg], r[neg], rtol=1e-13, err_msg=label)


def test_gammaln_psi_of_integers_are_vectorized():
    # gammaln(y + 1) of integer data (pm.Data): stock converts to float inside math.lgamma
    i64, i32, i8 = pt.vector("a", dtype="int64"), pt.vector("b", dtype="int32"), pt.vector("c", dtype="int8")
    ins, outs = [i64, i32, i8], [pt.gammaln(i64 + 1), pt.psi(i32), pt.gammaln(i8)]
    fn = compile_fn(ins, outs, "policy_rewritten", cache_key="int_special")
    labels = [getattr(e, "label", None) for n in policy_nodes(fn) for e in plan_node(n).body.emitters]
    assert sorted(lab for lab in labels if lab) == ["vector digamma (float64)", "vector lgamma (float32)",
                                                    "vector lgamma (float64)"]  # fmt: skip
    vals = [np.array([0, 1, 5, 2**40, -3, 2**62], dtype="int64"), np.array([0, 1, 7, -2, 2**31 - 1], dtype="int32"),
            np.array([-128, -1, 0, 1, 2, 127], dtype="int8")]  # fmt: skip
    with np.errstate(all="ignore"):
        got, ref = fn(*vals), compile_fn(ins, outs, "stock_strict", cache_key="int_special")(*vals)
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == r.dtype
        np.testing.assert_array_equal(np.isfinite(g), np.isfinite(r))
        np.testing.assert_array_equal(g[~np.isfinite(r)], r[~np.isfinite(r)])
        np.testing.assert_allclose(g[np.isfinite(r)], r[np.isfinite(r)], rtol=4 * np.finfo(g.dtype).eps)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_saturated_exp_lanes_get_libms_bits(dtype):
    """Lanes where exp is exactly +0 or +inf (-inf, log(0) inputs, deep underflow) get the
    result by a select, off libmvec's slow callout (`vector_math._SATURATED`); at and
    around the select's bounds every lane equals stock strict bit for bit."""
    from ptnumba_codegen.lowering.vecmath.libmvec import _SATURATED

    (below, _), (above, _) = _SATURATED[("exp", dtype)]
    ulps = np.arange(-200, 201)
    near = [np.array(b, dtype=dtype) + ulps.astype(dtype) * np.spacing(np.array(b, dtype=dtype)) for b in (below, above)]
    rng = np.random.default_rng(5)
    wide = rng.uniform(-1.2 * abs(below), 1.2 * above, 2000).astype(dtype)
    special = np.array([-np.inf, np.inf, np.nan, -1e30, 1e30, 0.0, -0.0], dtype=dtype)
    vals = np.concatenate([*near, wide, special, np.full(64, -np.inf, dtype=dtype)])
    x = pt.vector("x", dtype=dtype)
    fn = compile_fn([x], pt.exp(x) * 1.0, "policy_rewritten", cache_key=("saturated_exp", dtype))
    ref = compile_fn([x], pt.exp(x) * 1.0, "stock_strict", cache_key=("saturated_exp", dtype))
    with np.errstate(all="ignore"):
        got, want = fn(vals), ref(vals)
    saturated = (want == 0) | np.isinf(want)
    assert saturated.sum() > 400 and (~saturated).sum() > 400
    np.testing.assert_array_equal(got[saturated], want[saturated])
    np.testing.assert_array_equal(np.signbit(got[saturated]), np.signbit(want[saturated]))
    np.testing.assert_allclose(got[~saturated & ~np.isnan(want)], want[~saturated & ~np.isnan(want)], rtol=4 * np.finfo(dtype).eps)
    labels = [getattr(e, "label", None) for n in policy_nodes(fn) for e in plan_node(n).body.emitters]
    assert any(lab and "exp" in lab for lab in labels), labels


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_log_at_zero_and_inf_gets_libms_bits_off_the_callout(dtype):
    """log(+-0) = -inf and log(+inf) = +inf come from a select, the call gets 1.0 there
    (`libmvec._EXACT_POINTS`): on vectors mostly of zeros (a Cox model's hazards), around
    them (subnormals, the smallest normals, negatives, NaN) every lane equals stock strict
    bit for bit where the result is not finite, within libmvec's budget elsewhere, and
    ``log(x) == -inf`` holds exactly where ``x == 0`` (the robust rule's premise)."""
    from ptnumba_codegen.lowering.vecmath.libmvec import _EXACT_POINTS

    assert ("log", dtype) in _EXACT_POINTS
    info = np.finfo(dtype)
    rng = np.random.default_rng(11)
    around = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.smallest_subnormal, -info.smallest_subnormal,
                       info.smallest_normal, info.max, 1.0, -1.0, 2.0], dtype=dtype)
    mostly_zero = np.where(rng.random(4000) < 0.8, 0.0, rng.gamma(2.0, 1.0, 4000)).astype(dtype)
    mostly_zero[rng.random(4000) < 0.1] *= -1  # -0.0 and negatives among them
    vals = np.concatenate([around, np.repeat(around, 5), mostly_zero, rng.permutation(np.resize(around, 400))])
    x = pt.vector("x", dtype=dtype)
    outs = [pt.log(x) * 1.0, pt.eq(pt.log(x), -np.inf)]
    fn = compile_fn([x], outs, "policy_rewritten", cache_key=("log_points", dtype))
    ref = compile_fn([x], outs, "stock_strict", cache_key=("log_points", dtype))
    with np.errstate(all="ignore"):
        (got, got_eq), (want, want_eq) = fn(vals), ref(vals)
    special = ~np.isfinite(want)
    assert (vals == 0).sum() > 2000 and np.isinf(want).sum() > 2000
    np.testing.assert_array_equal(got[special], want[special])
    np.testing.assert_array_equal(np.signbit(got[special & ~np.isnan(want)]), np.signbit(want[special & ~np.isnan(want)]))
    np.testing.assert_allclose(got[~special], want[~special], rtol=4 * np.finfo(dtype).eps)
    np.testing.assert_array_equal(got_eq, want_eq)
    np.testing.assert_array_equal(got_eq, vals == 0)
    labels = [getattr(e, "label", None) for n in policy_nodes(fn) for e in plan_node(n).body.emitters]
    # float64 log has exact lanes (libm's bits everywhere); float32's is libmvec's
    expected = "libm lanes log" if dtype == "float64" else "libmvec log"
    assert any(lab and expected in lab for lab in labels), labels
    if dtype == "float64":
        assert got.tobytes() == want.tobytes()


def test_a_body_with_a_stock_call_keeps_scalar_transcendentals():
    """A stock call (erfcx: a function numba compiles on its own) keeps the loop scalar; a
    vector function there would do a whole vector's work per element. The body's other
    transcendentals get their scalar forms (libm), so the kernel is as fast as stock's."""
    x, y = pt.vectors("x", "y")
    out = pt.erfcx(x) + pt.exp(y) * pt.sigmoid(x) + pt.log1p(pt.exp(-y))
    fn = compile_fn([x, y], out, "policy_rewritten", cache_key="stock_call_body")
    ref = compile_fn([x, y], out, "stock_strict", cache_key="stock_call_body")
    [node] = policy_nodes(fn)
    body = plan_node(node).body
    assert body.stock_keys and not body.uses_vector_math
    rng = np.random.default_rng(4)
    xv, yv = rng.uniform(-5, 5, 3000), rng.uniform(-30, 30, 3000)
    np.testing.assert_allclose(fn(xv, yv), ref(xv, yv), rtol=8 * np.finfo("float64").eps)
    # without the stock call the same transcendentals are vector calls
    plain = compile_fn([x, y], pt.exp(y) * pt.sigmoid(x), "policy_rewritten", cache_key="no_stock_call_body")
    assert all(plan_node(n).body.uses_vector_math for n in policy_nodes(plain))


def test_a_body_run_once_gets_libms_bits():
    """A scalar node's body, and a loop of one element, have no loop to vectorize: a
    vector call would do a whole vector's work for one value and give libmvec's error
    (1 ulp off glibc's exp on a large share of arguments, which an ODE solver turned into a
    1.4e-9 disagreement). They get libm, bit for bit the stock strict backend."""
    a, b = pt.scalars("a", "b")
    scalars = pt.stack([pt.exp(a), pt.log(b), pt.tanh(a) * pt.exp(b)])
    one = pt.vector("one", shape=(1,))
    row = pt.exp(one) + pt.log1p(pt.exp(-one))
    fn_s = compile_fn([a, b], scalars, "policy_default", cache_key="once_scalars")
    ref_s = compile_fn([a, b], scalars, "stock_strict", cache_key="once_scalars")
    fn_1 = compile_fn([one], row, "policy_default", cache_key="once_row")
    ref_1 = compile_fn([one], row, "stock_strict", cache_key="once_row")
    for fn in (fn_s, fn_1):
        nodes = policy_nodes(fn)
        assert nodes and not any(plan_node(n).body.uses_vector_math for n in nodes)
    rng = np.random.default_rng(7)
    av, bv = rng.uniform(-20, 20, 1500), rng.uniform(1e-3, 30, 1500)
    # the premise: on these arguments the vector kernel's tanh (libmvec's) is not libm's
    x = pt.vector("x")
    vector_tanh = compile_fn([x], pt.tanh(x), "policy_default", cache_key="once_vector_tanh")
    assert (vector_tanh(av / 10) != np.array([math.tanh(v / 10) for v in av])).sum() > 50
    for va, vb in zip(av, bv):
        assert_same_bits(fn_s(va, vb), ref_s(va, vb))
        assert_same_bits(fn_1(np.array([va])), ref_1(np.array([va])))
    for special in (0.0, -0.0, np.inf, -np.inf, np.nan, 709.8, -745.2, 1e-300):
        assert_same_bits(fn_s(special, abs(special)), ref_s(special, abs(special)))
        assert_same_bits(fn_1(np.array([special])), ref_1(np.array([special])))


# -- in-place kernels on intermediates typed 'A' ---------------------------------------------

N_INPLACE = 4096
IN_PLACE_GRAPHS = {
    # PyMC's log-softmax: Log[inplace] on ExpandDims{axis=1} of a row sum (contiguous)
    "keepdims": lambda x: x - pt.log(pt.exp(x).sum(axis=1, keepdims=True)),
    # Log[inplace] on views that are not C-contiguous at run time
    "columns": lambda x: pt.log(pt.sort(x, axis=1)[:, ::2]),
    "rows": lambda x: pt.log(pt.sort(x, axis=1)[::2]),
    "transposed": lambda x: pt.log(pt.sort(x, axis=1).T),
}


def _in_place_fn(name, backend):
    x = pt.matrix("x", shape=(N_INPLACE, 5))
    return compile_fn([x], IN_PLACE_GRAPHS[name](x), backend, cache_key=("inplace_A", name), inspect_ir=True)


def _log_reference(name, v):
    """The policy's log of the same values from a plain contiguous input (the flat vector loop)."""
    if name == "keepdims":
        return None
    y = pt.matrix("y")
    log_fn = compile_fn([y], pt.log(y), "policy_rewritten", cache_key=("inplace_A", "plain_log"))
    view = {"columns": lambda s: s[:, ::2], "rows": lambda s: s[::2], "transposed": lambda s: s.T}[name]
    return log_fn(np.ascontiguousarray(view(np.sort(v, axis=1))))


@pytest.mark.parametrize("name", list(IN_PLACE_GRAPHS))
def test_in_place_log_on_intermediate_views(name):
    """An in-place kernel on an intermediate typed 'A' runs typed 'C' when the array is
    C-contiguous at run time: its libmvec calls are in a vector loop (before, the nest's
    run-time strides left every call to do one lane's work). Either path gives the bits of
    the flat vector loop; values near stock strict within the log budget."""
    fn = _in_place_fn(name, "policy_rewritten")
    logs = [n for n in fn.maker.fgraph.toposort() if "Log" in str(n.op)]
    assert logs and all(n.op.scalar_op.__class__.__name__ == "Log" for n in logs)
    assert any(getattr(n.op, "destroy_map", {}) for n in logs), "the graph no longer has an in-place Log"
    rng = np.random.default_rng(3)
    v = rng.uniform(0.5, 3.0, size=(N_INPLACE, 5))
    v[0, :3] = [np.inf, np.nan, 1.0]
    v[1, :] = 1.0
    res = fn(v)
    ref_logs = _log_reference(name, v)
    if name != "keepdims":  # (the row sums of keepdims come from the policy's own kernel)
        assert_same_bits(res, ref_logs)
    stock = _in_place_fn(name, "stock_strict")
    ref = stock(v)
    ok = np.isfinite(ref)
    np.testing.assert_array_equal(np.isnan(res), np.isnan(ref))
    np.testing.assert_allclose(res[ok], ref[ok], rtol=4 * np.finfo(np.float64).eps, atol=4e-16)


def test_in_place_log_on_contiguous_expand_dims_is_vectorized():
    """Checked in the final optimized IR: a function other than the scalar wrapper of the
    log calls its vector variant (the loop over the (n, 1) rows is vectorized)."""
    fn = _in_place_fn("keepdims", "policy_rewritten")
    fn(np.ones((N_INPLACE, 5)))  # numba compiles at the first call (another test may not have made it)
    vectorized, _wrapper = _vector_callers(final_ir(fn), "log")
    assert vectorized, "the in-place Log's loop calls the log vector function only through its scalar wrapper"


# a vector variant of a function: libmvec's, or its exact lanes (`exact_lanes`: libm's algorithm)
VECTOR_VARIANT = r"(?:_ZGV\w+_|ptnumba_exact\d+_)"
# the scalar wrapper a vector variant belongs to (one lane of a vector call)
SCALAR_WRAPPER = r"(?:ptnumba_mvec_{name}_[de]|ptnumba_libm_{name})"


def _vector_callers(ir: str, name: str) -> tuple[list[str], list[str]]:
    """Functions of the final IR other than the scalar wrappers and vector variants: those
    calling ``name``'s vector variant (or holding its exact lanes, which LLVM may inline: the
    variant's code on vectors of doubles), and those calling its scalar wrapper (one lane of
    a vector call)."""
    import re

    vector, wrapper = [], []
    wrapper_name = SCALAR_WRAPPER.format(name=name)
    variant_name = rf"{VECTOR_VARIANT}{name}"
    for definition in re.split(r"\ndefine ", ir)[1:]:
        fn_name = re.match(r"[^@]*@([\w.$]+)\(", definition).group(1)
        if re.fullmatch(wrapper_name, fn_name) or re.fullmatch(variant_name, fn_name):
            continue
        if re.search(rf"call [^\n]*<\d+ x double> @{variant_name}\(", definition):
            vector.append(fn_name)
        elif re.search(rf"define [^\n]*@ptnumba_exact\d+_{name}\(", ir) and re.search(r"<\d+ x double>", definition) \
                and re.search(rf"call [^\n]*double @{name}\(double %[\w.]+\.i\)", definition):
            vector.append(fn_name)  # the exact lanes inlined: their per-lane libm calls for special lanes
        if re.search(rf"call [^\n]*double @{wrapper_name}\(double", definition):
            wrapper.append(fn_name)
    return vector, wrapper


COX_ROWS = 3770


def _cox_graph():
    """A Cox model's (rows, 12) log-likelihood terms: log of 0/1 indicators times a
    per-row weight plus a per-interval term, masked by a boolean (rows, 12) array (at
    risk or not), summed whole, per row and per interval."""
    x, m = pt.tensor("x", shape=(COX_ROWS, 12)), pt.tensor("m", shape=(COX_ROWS, 12), dtype="bool")
    w, t = pt.tensor("w", shape=(None, 1)), pt.tensor("t", shape=(1, 12))
    f = pt.switch(m, 0.0, pt.log(x) * w + t)
    return [x, m, w, t], [f.sum(), f.sum(axis=1), f.sum(axis=0)]


def _cox_values():
    rng = np.random.default_rng(12)
    x = np.where(rng.random((COX_ROWS, 12)) < 0.2, 0.0, rng.gamma(2.0, 1.0, (COX_ROWS, 12)))
    w = rng.uniform(0.0, 2.0, (COX_ROWS, 1))
    w[::9] = 0.0  # 0 * -inf: NaN rows among the sums
    return x, rng.random((COX_ROWS, 12)) < 0.3, w, rng.standard_normal((1, 12))


def test_a_short_inner_axis_with_reductions_is_vectorized():
    """12 columns, three sums: LLVM's cost model calls vectorizing this loop "not
    beneficial" and leaves each element a whole vector call through the scalar wrapper
    (slower than stock on the Cox model's kernel); the loop's force hint
    (`loop.FORCE_VECTORIZE_WHEN`) vectorizes it. Values as the sums' flags allow."""
    inputs, outs = _cox_graph()
    fn = compile_fn(inputs, outs, "policy_rewritten", cache_key="cox_rows", inspect_ir=True)
    vals = _cox_values()
    with np.errstate(all="ignore"):
        got = fn(*vals)
        want = compile_fn(inputs, outs, "stock_strict", cache_key="cox_rows")(*vals)
    vector, wrapper = _vector_callers(final_ir(fn), "log")
    assert vector and not wrapper, f"the (rows, 12) loop calls log through its scalar wrapper: {wrapper}"
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(np.isnan(g), np.isnan(w)) and np.array_equal(np.isinf(g), np.isinf(w))
        finite = np.isfinite(w)
        np.testing.assert_allclose(np.asarray(g)[finite], np.asarray(w)[finite], rtol=1e-12, atol=1e-9)


def test_a_strict_row_sum_is_not_reordered_by_the_force_hint():
    """A loop with vector calls whose row sums are compared downstream: their accumulator
    is strict (in the visit order), and a forced vectorization would let LLVM reorder it
    (`loop.may_reorder`). The rows tie with their thresholds (the in-order sum, and its
    neighbour below): every decision equals stock numba with fastmath off."""
    x, m = pt.matrix("x"), pt.matrix("m", dtype="bool")
    w, b = pt.tensor("w", shape=(None, 1)), pt.vector("b")
    s = pt.switch(m, 0.0, pt.log(x) * w).sum(axis=1)
    outs = [pt.le(s, b), pt.switch(m, 0.0, pt.exp(x) * w).sum(axis=1)]  # exp: vector calls in the body
    fn = compile_fn([x, m, w, b], outs, "policy_rewritten", cache_key="strict_rows")
    ref = compile_fn([x, m, w, b], outs, "stock_strict", cache_key="strict_rows")
    rng = np.random.default_rng(13)
    xv, mv, wv = rng.uniform(0.1, 3.0, (500, 64)), rng.random((500, 64)) < 0.3, rng.uniform(0.5, 2.0, (500, 1))
    sums = compile_fn([x, m, w], [s], "stock_strict", cache_key="strict_row_sums")(xv, mv, wv)[0]
    bv = sums.copy()
    bv[1::3] = np.nextafter(sums[1::3], -np.inf)
    got, want = fn(xv, mv, wv, bv)[0], ref(xv, mv, wv, bv)[0]
    np.testing.assert_array_equal(got, want)
    assert want[0::3].all() and not want[1::3].any()  # the ties are ties of the in-order sum
