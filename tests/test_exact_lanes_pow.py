"""Exact lanes for float64 ``pow`` (lowering/vecmath/exact_lanes.py, libm_data.find_pow_data):
glibc's ``__pow_fma`` main path on vectors (log_inline on ``__pow_log_data``, exp_inline on
exp's table), libm lane by lane for any vector with a lane outside it.

Compared with libm's ``pow`` (ctypes) on millions of (x, y) pairs, the exponents PyMC graphs
use, and every edge of the main path; in kernels against stock numba with fastmath off; a
constant exponent keeps stock's code (LLVM rewrites ``pow(x, 2.0)`` and ``pow(x, -1.0)``);
the self-check must refuse data one unit off."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import numpy as np
import pytensor.tensor as pt
import pytest

from conftest import compile_fn, final_ir
from ptnumba_codegen.lowering.vecmath import exact_lanes, libm_data
from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa

ISA = target_isa()
DATA = libm_data.glibc_pow_data()
pytestmark = pytest.mark.skipif(
    ISA is None or isinstance(DATA, str), reason=f"no vector target or no glibc pow data: {DATA if isinstance(DATA, str) else ISA}"
)
LANES = lane_count(ISA, "float64") if ISA else 0


def _same_bits(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def _vector_pow(x, y):
    xy = np.stack([np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)])
    got = exact_lanes._run_compiled("pow", LANES, DATA, xy)
    return xy[:, : len(got)], got, exact_lanes.libm_reference("pow", xy[:, : len(got)])


def _assert_libm_bits(x, y):
    xy, got, want = _vector_pow(x, y)
    same = _same_bits(got, want)
    assert same.all(), xy[:, ~same][:, :5].T


SPECIAL_X = np.array([0.0, -0.0, 1.0, -1.0, -2.5, np.inf, -np.inf, np.nan, 5e-324, 1e-310, 2.2250738585072014e-308, 1.7976931348623157e308, np.nextafter(1.0, 2.0), np.nextafter(1.0, 0.0)])
SPECIAL_Y = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, np.inf, -np.inf, np.nan, 2.0**-66, 2.0**63, 1e300, 5e-324])


def test_glibc_pow_data_is_found_and_consistent():
    assert isinstance(DATA, libm_data.PowData)
    assert len(DATA.tab) == 4 * libm_data.LOG_N and len(DATA.poly) == 7 and DATA.poly[0] == -0.5
    assert DATA.exp == libm_data.glibc_exp_data()  # exp_inline uses exp's own table
    tab = np.array(DATA.tab, dtype=np.uint64).view(np.float64)
    invc, pad, logc, tail = tab[0::4], tab[1::4], tab[2::4], tab[3::4]
    assert np.all(pad == 0.0) and np.all(np.abs(logc + tail + np.log(invc)) < 1e-15)
    words = np.fromfile(DATA.path, dtype=np.uint64, count=libm_data.POW_HEADER_WORDS + 4 * libm_data.LOG_N, offset=DATA.offset)
    assert tuple(int(w) for w in words[libm_data.POW_HEADER_WORDS :]) == DATA.tab


def test_pow_exact_lanes_pass_their_self_check_here_and_explain_names_them():
    ok, why = exact_lanes.status("pow", LANES)
    assert ok, why
    assert "__pow_fma" in why and "bit-identical" in why
    assert exact_lanes.available("pow", "float64")
    assert any(line.startswith(f"pow x{LANES}: on (") for line in exact_lanes.report())


def test_probes_run_the_vector_code_on_most_vectors():
    """The self-check proves something only where its probes take the vector code: at least
    half of its vectors have every lane on libm's main path."""
    xy = exact_lanes.probe_inputs("pow")
    n = xy.shape[1] // LANES * LANES
    x, y = xy[:, :n]
    with np.errstate(all="ignore"):
        t = y * np.log(x)
    main = (x >= 2.2250738585072014e-308) & np.isfinite(x) & (np.abs(y) >= 2.0**-65) & (np.abs(y) < 2.0**63)
    main &= np.abs(t) < 512
    assert main.reshape(-1, LANES).all(axis=1).mean() > 0.5
    tiny = (np.abs(t) < 2.0**-54).reshape(-1, LANES)  # exp_inline's tiny case, on the vector code too
    assert tiny[main.reshape(-1, LANES).all(axis=1)].sum() > 10_000


def test_vector_pow_takes_exp_inlines_tiny_case_with_libms_bits():
    """``|y log x| < 2^-54`` (x == 1 among them: PyMC's initial points) is ``1 + y log x`` in
    glibc's exp_inline: the vector code computes it instead of calling libm for the vector;
    across the 2^-54 edge, in whole vectors and mixed with the fast path."""
    rng = np.random.default_rng(21)
    x = np.concatenate([np.ones(4000), 1.0 + rng.uniform(-1e-12, 1e-12, 200_000), np.nextafter(1.0, rng.choice([0.0, 2.0], 20_000))])
    y = np.concatenate([rng.uniform(-1e6, 1e6, 4000), rng.uniform(-1e-4, 1e-4, 200_000), rng.uniform(-1e3, 1e3, 20_000)])
    _assert_libm_bits(x, y)
    with np.errstate(all="ignore"):
        t = np.abs(y * np.log(x))
    assert (t < 2.0**-54).sum() > 50_000 and (t >= 2.0**-54).sum() > 20_000
    mixed = rng.permutation(np.concatenate([np.stack([x[:8000], y[:8000]]), np.stack([rng.gamma(2.0, 1.0, 8000), rng.uniform(-3, 3, 8000)])], axis=1).T).T
    _assert_libm_bits(*mixed)


@pytest.mark.parametrize("yv", [-1.0, 2.0, 0.5, -0.5, 3.0, -2.0, 1.5, 1 / 3, 0.1, -7.0, 100.0])
def test_vector_pow_equals_libm_for_common_exponents(yv):
    rng = np.random.default_rng(int(abs(yv) * 1000))
    x = np.concatenate([rng.gamma(2.0, 1.0, 200_000), np.exp2(rng.uniform(-1022, 1023, 200_000) / max(1.0, abs(yv)))])
    _assert_libm_bits(x, np.full(x.size, yv))


def test_vector_pow_equals_libm_on_millions_of_pairs():
    rng = np.random.default_rng(20261205)
    n = 1_000_000
    x = np.concatenate([rng.gamma(2.0, 1.0, n), np.exp2(rng.uniform(-1022, 1023, n)), rng.uniform(0, 2, n)])
    y = np.concatenate([rng.uniform(-5, 5, n), rng.standard_normal(n) * np.exp2(rng.uniform(-20, 3, n)), rng.integers(-40, 40, n).astype(float)])
    _assert_libm_bits(x, y)


def test_vector_pow_equals_libm_near_overflow_underflow_and_one():
    rng = np.random.default_rng(9)
    t = rng.uniform(480.0, 760.0, 400_000) * rng.choice([-1.0, 1.0], 400_000)  # y log x near and past 512
    x = np.exp2(rng.uniform(0.1, 60.0, 400_000))
    _assert_libm_bits(x, t / np.log(x))
    x1 = 1.0 + rng.uniform(-1e-8, 1e-8, 200_000)  # y log x near 2^-54
    _assert_libm_bits(x1, rng.uniform(-1e-6, 1e-6, 200_000) * np.exp2(rng.uniform(-20, 0, 200_000)))


def test_vector_pow_equals_libm_on_specials_in_mixed_vectors():
    rng = np.random.default_rng(4)
    gx, gy = np.meshgrid(SPECIAL_X, SPECIAL_Y)
    pool_x = np.concatenate([gx.ravel(), rng.gamma(2.0, 1.0, 400), -rng.gamma(2.0, 1.0, 50)])
    pool_y = np.concatenate([gy.ravel(), rng.uniform(-3, 3, 400), rng.integers(-4, 4, 50).astype(float)])
    order = [rng.permutation(pool_x.size) for _ in range(30)]
    _assert_libm_bits(np.concatenate([pool_x[o] for o in order]), np.concatenate([pool_y[o] for o in order]))


def test_self_check_refuses_data_one_unit_off():
    tab = list(DATA.tab)
    tab[4 * 40 + 2] += 1  # logc of subinterval 40, one unit up
    ok, why = exact_lanes.self_check("pow", LANES, dataclasses.replace(DATA, tab=tuple(tab)))
    assert not ok and "differ from libm" in why
    exp_tab = list(DATA.exp.tab)
    exp_tab[2 * 11 + 1] += 1  # exp's scale 2^(11/128): pow's exp_inline reads it too
    off = dataclasses.replace(DATA, exp=dataclasses.replace(DATA.exp, tab=tuple(exp_tab)))
    ok, why = exact_lanes.self_check("pow", LANES, off)
    assert not ok and "differ from libm" in why


def _run(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=300)


def test_a_corrupted_table_turns_pow_off_for_the_process_and_kernels_keep_libm():
    code = (
        "import dataclasses\n"
        "import numpy as np, pytensor, pytensor.tensor as pt, ptnumba_codegen\n"
        "from ptnumba_codegen.lowering.vecmath import exact_lanes as e, libm_data as d\n"
        "from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa\n"
        "good = d.glibc_pow_data()\n"
        "tab = list(good.tab); tab[4 * 70] ^= 1\n"
        "e.EXACT_LANES['pow'] = dataclasses.replace(e.EXACT_LANES['pow'], data=lambda: dataclasses.replace(good, tab=tuple(tab)))\n"
        "n = lane_count(target_isa(), 'float64')\n"
        "print(e.status('pow', n)); print(e.available('pow', 'float64'))\n"
        "x, y, b = pt.vectors('x', 'y', 'b')\n"
        "with pytensor.config.change_flags(numba__cache=False):\n"
        "    f = pytensor.function([x, y, b], pt.le(x ** y, b), mode=ptnumba_codegen.policy_mode('default'))\n"
        "v = np.linspace(0.5, 2.0, 1001); f(v, v, v)\n"
        "print('ptnumba_exact' in '\\n'.join(f.vm.jit_fn.inspect_llvm().values()))\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("(False, 'self-check:") and "differ from libm" in lines[0]
    assert lines[1:] == ["False", "False"]


def _pair_inputs():
    rng = np.random.default_rng(12)
    n = 200_000
    x = np.concatenate([rng.gamma(2.0, 1.0, n), np.resize(SPECIAL_X, 3000), np.exp2(rng.uniform(-1022, 1023, 20_000))])
    y = np.concatenate([rng.uniform(-3, 3, n), np.resize(SPECIAL_Y, 2999), [2.0], rng.uniform(-1, 1, 20_000)])
    p = rng.permutation(x.size)
    return x[p], y[p]


def test_pow_cone_decides_and_computes_as_stock_strict():
    """A strict x ** y in a comparison cone (ties: b is x ** y itself and one ulp below),
    next to a vector call: the bits of stock strict, and pow is the exact vector code."""
    x, y, b, c = pt.vectors("x", "y", "b", "c")
    p = x**y
    outs = [pt.le(p, b), pt.switch(pt.gt(p, b), p * 2.0, c), p, pt.exp(c + 1e-3 * p)]
    fn = compile_fn([x, y, b, c], outs, "policy_rewritten", cache_key="exact_pow_cone", inspect_ir=True)
    ref = compile_fn([x, y, b, c], outs, "stock_strict", cache_key="exact_pow_cone")
    xv, yv = _pair_inputs()
    with np.errstate(all="ignore"):
        pv = np.power(xv, yv)
    bv = np.where(np.arange(xv.size) % 2 == 0, pv, np.nextafter(pv, -np.inf))
    cv = np.linspace(-3, 3, xv.size)
    for k, (g, w) in enumerate(zip(fn(xv, yv, bv, cv), ref(xv, yv, bv, cv), strict=True)):
        if k == 3:  # outside the cone: libmvec's exp within its budget
            continue
        assert _same_bits(g, w).all(), k
    assert re.search(rf"<{LANES} x double> @ptnumba_exact{LANES}_pow\(", final_ir(fn)), "pow is not the exact vector code"


def test_policy_strict_pow_is_stock_strict_bit_for_bit_and_vectorized():
    x, y = pt.vectors("x", "y")
    out = x**y * 3.0 - 1.0
    fn = compile_fn([x, y], out, "policy_strict", cache_key="exact_pow_strict", inspect_ir=True)
    ref = compile_fn([x, y], out, "stock_strict", cache_key="exact_pow_strict")
    xv, yv = _pair_inputs()
    assert _same_bits(fn(xv, yv), ref(xv, yv)).all()
    assert f"@ptnumba_exact{LANES}_pow(" in final_ir(fn)


@pytest.mark.parametrize("e", [-1.0, 2.0, 0.5, -0.5, 3.0, 1.7, -2.5])
def test_constant_exponents_keep_stock_code(e):
    """``x ** 2.0`` is ``x * x`` and ``x ** -1.0`` is ``1 / x`` in stock's code (LLVM's
    rewrite of a strict pow): a constant operand keeps the scalar rule, so the bits stay
    stock's whatever LLVM does with it."""
    x, b = pt.vectors("x", "b")
    p = x**e
    outs = [pt.le(p, b), p]
    fn = compile_fn([x, b], outs, "policy_rewritten", cache_key=f"exact_pow_const_{e}", inspect_ir=True)
    ref = compile_fn([x, b], outs, "stock_strict", cache_key=f"exact_pow_const_{e}")
    xv, _ = _pair_inputs()
    with np.errstate(all="ignore"):
        pv = np.power(xv, e)
    bv = np.where(np.arange(xv.size) % 2 == 0, pv, np.nextafter(pv, np.inf))
    for g, w in zip(fn(xv, bv), ref(xv, bv), strict=True):
        assert _same_bits(g, w).all()
    assert "ptnumba_exact" not in final_ir(fn)


def test_explain_names_the_pow_entry():
    import ptnumba_codegen

    x, y, b = pt.vectors("x", "y", "b")
    fn = compile_fn([x, y, b], [pt.le(x**y, b)], "policy_rewritten", cache_key="exact_pow_explain")
    text = ptnumba_codegen.explain(fn)
    assert re.search(rf"exact lanes: pow x{LANES}: on \(glibc __pow_fma.*bit-identical\)", text), text
    assert "libm lanes pow (float64)" in text


@pytest.mark.parametrize("base", [pt.constant(2, dtype="int8"), pt.constant(2.0, dtype="float32"), pt.constant(2.0), pt.constant(10.0)])
def test_constant_bases_keep_stock_code(base):
    """A constant base, cast to float64 or not (LLVM may rewrite a strict ``pow(2.0, y)``):
    stock's code and bits."""
    y, b = pt.vectors("y", "b")
    p = base**y
    outs = [pt.le(p, b), p]
    key = f"exact_pow_base_{base.dtype}_{base.data}"
    fn = compile_fn([y, b], outs, "policy_rewritten", cache_key=key, inspect_ir=True)
    ref = compile_fn([y, b], outs, "stock_strict", cache_key=key)
    _, yv = _pair_inputs()
    yv = yv * 300.0
    with np.errstate(all="ignore"):
        pv = np.power(float(base.data), yv)
    bv = np.where(np.arange(yv.size) % 2 == 0, pv, np.nextafter(pv, np.inf))
    for g, w in zip(fn(yv, bv), ref(yv, bv), strict=True):
        assert _same_bits(g, w).all()
    assert "ptnumba_exact" not in final_ir(fn)
