"""Exact lanes for float64 ``log`` (lowering/vecmath/exact_lanes.py, libm_data.find_log_data):
glibc's ``__log_fma`` (table path and near-1 polynomial) on vectors.

The vector code must give libm's ``log`` bits in every lane: a strict comparison cone on
``log(x)`` then decides exactly as stock strict. Compared with libm itself (the symbol
numba's code calls, through ctypes) on millions of inputs and at every subinterval and
path edge, in kernels against stock numba with fastmath off, and the self-check must
refuse a table or coefficient that is one unit off."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from conftest import compile_fn, final_ir
from ptnumba_codegen.lowering.vecmath import exact_lanes, libm_data
from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa

ISA = target_isa()
DATA = libm_data.glibc_log_data()
pytestmark = pytest.mark.skipif(
    ISA is None or isinstance(DATA, str), reason=f"no vector target or no glibc log data: {DATA if isinstance(DATA, str) else ISA}"
)
LANES = lane_count(ISA, "float64") if ISA else 0
TINY = 2.2250738585072014e-308


def _same_bits(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def _vector_log(xs):
    got = exact_lanes._run_compiled("log", LANES, DATA, xs)
    return got, exact_lanes.libm_reference("log", xs[: len(got)])


def _specials():
    one = 1.0
    return np.array([
        0.0, -0.0, 5e-324, -5e-324, TINY, np.nextafter(TINY, 0.0), np.nextafter(TINY, 1.0), 1e-310,
        one, np.nextafter(one, 2.0), np.nextafter(one, 0.0), 2.0, 0.5, np.inf, -np.inf, np.nan, -1.0,
        1.7976931348623157e308, 1 - 2.0**-4, 1 + 0x109 * 2.0**-12, np.nextafter(1 - 2.0**-4, 0.0), np.nextafter(1 + 0x109 * 2.0**-12, 2.0),
    ])


def test_glibc_log_data_is_found_and_consistent():
    assert isinstance(DATA, libm_data.LogData)
    assert len(DATA.tab) == 2 * libm_data.LOG_N and len(DATA.poly) == 5 and len(DATA.poly1) == 11
    assert DATA.poly1[0] == -0.5
    assert abs(DATA.ln2hi + DATA.ln2lo - np.log(2.0)) < 2e-16
    tab = np.array(DATA.tab, dtype=np.uint64).view(np.float64)
    assert np.all(np.abs(tab[1::2] + np.log(tab[0::2])) < 1e-15)  # logc = log(c), invc = 1/c
    # the same data at the offset it names (the file is the mapped libm)
    words = np.fromfile(DATA.path, dtype=np.uint64, count=libm_data.LOG_HEADER_WORDS + 2 * libm_data.LOG_N, offset=DATA.offset)
    assert tuple(int(w) for w in words[libm_data.LOG_HEADER_WORDS :]) == DATA.tab


def test_log_exact_lanes_pass_their_self_check_here_and_explain_names_them():
    ok, why = exact_lanes.status("log", LANES)
    assert ok, why
    assert "__log_fma" in why and "bit-identical" in why
    assert exact_lanes.available("log", "float64")
    assert any(line.startswith(f"log x{LANES}: on (") for line in exact_lanes.report())


def test_vector_log_equals_libm_on_millions_of_inputs():
    rng = np.random.default_rng(20261203)
    xs = np.concatenate([
        np.exp2(rng.uniform(-1074, 1024, 1_000_000)),  # every binade, subnormals included
        rng.uniform(0.0, 10.0, 500_000),
        1.0 + rng.uniform(-0.07, 0.07, 500_000),  # the near-1 path and around its edges
        rng.gamma(2.0, 1.0, 300_000),  # what a PyMC model takes the log of
    ])
    got, want = _vector_log(xs)
    same = _same_bits(got, want)
    assert same.all(), xs[: len(got)][~same][:5]


def test_vector_log_equals_libm_at_every_edge_in_mixed_vectors():
    """A vector with a special lane takes libm lane by lane, one with a near-1 lane blends
    both paths: each lane's bits must not depend on its neighbours."""
    i = np.arange(128, dtype=np.uint64)
    starts = (np.uint64(libm_data.LOG_OFF) + (i << np.uint64(45))).view(np.float64)
    cells = np.concatenate([starts, np.nextafter(starts, 0.0), np.nextafter(starts, 2.0)])
    rng = np.random.default_rng(7)
    pool = np.concatenate([_specials(), cells, cells * 2.0**-1030, cells * 2.0**1000, rng.uniform(0.9, 1.1, 64)])
    xs = np.concatenate([rng.permutation(pool) for _ in range(20)])
    got, want = _vector_log(xs)
    assert _same_bits(got, want).all(), xs[: len(got)][~_same_bits(got, want)][:5]


def test_self_check_refuses_data_one_unit_off():
    """The self-check compares bits: a table entry (1/c) or a near-1 coefficient one unit
    off in the last place, data that still looks like glibc's, turns the entry off."""
    tab = list(DATA.tab)
    tab[2 * 77] += 1  # invc of subinterval 77, one unit up
    off = dataclasses.replace(DATA, tab=tuple(tab))
    f = np.array(tab, dtype=np.uint64).view(np.float64)
    assert libm_data._log_table_ok(f[0::2], f[1::2], libm_data.LOG_OFF, libm_data.LOG_N)
    ok, why = exact_lanes.self_check("log", LANES, off)
    assert not ok and "differ from libm" in why
    ln2hi = np.nextafter(DATA.ln2hi, 1.0)
    ok, why = exact_lanes.self_check("log", LANES, dataclasses.replace(DATA, ln2hi=float(ln2hi)))
    assert not ok and "differ from libm" in why


def test_corrupted_libm_gives_no_log_data(tmp_path):
    bad = tmp_path / "libm.so.6"
    shutil.copyfile(DATA.path, bad)
    raw = bytearray(bad.read_bytes())
    at = DATA.offset + 8 * (libm_data.LOG_HEADER_WORDS + 2 * 9 + 1)  # logc of subinterval 9
    raw[at : at + 8] = (int.from_bytes(raw[at : at + 8], "little") ^ (1 << 45)).to_bytes(8, "little")
    bad.write_bytes(bytes(raw))
    why = libm_data.find_log_data(str(bad))
    assert isinstance(why, str) and "log" in why
    found = libm_data.find_log_data(DATA.path)
    assert isinstance(found, libm_data.LogData) and found.tab == DATA.tab


def _run(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=300)


def test_a_corrupted_table_turns_the_entry_off_for_the_process():
    """The same data path a process takes (status -> data -> self-check), with a table
    word changed as it is read: the entry is off, with the reason, and kernels keep libm."""
    code = (
        "import dataclasses\n"
        "from ptnumba_codegen.lowering.vecmath import exact_lanes as e, libm_data as d\n"
        "from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa\n"
        "good = d.glibc_log_data()\n"
        "tab = list(good.tab); tab[2 * 100 + 1] ^= 1\n"
        "d.glibc_log_data = lambda: dataclasses.replace(good, tab=tuple(tab))\n"
        "e.EXACT_LANES['log'] = dataclasses.replace(e.EXACT_LANES['log'], data=d.glibc_log_data)\n"
        "n = lane_count(target_isa(), 'float64')\n"
        "print(e.status('log', n)); print(e.available('log', 'float64')); print(e.status('exp', n)[0])\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("(False, 'self-check:") and "differ from libm" in lines[0]
    assert lines[1] == "False" and lines[2] == "True"  # exp keeps its own


def test_switch_off_turns_log_off():
    code = (
        "from ptnumba_codegen.lowering.vecmath import exact_lanes as e\n"
        "from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa\n"
        "print(e.status('log', lane_count(target_isa(), 'float64')))\n"
    )
    off = _run(code, PTNUMBA_CODEGEN_EXACT_LANES="off")
    assert off.returncode == 0 and "(False, 'PTNUMBA_CODEGEN_EXACT_LANES=off')" in off.stdout, off.stderr


def _kernel_inputs():
    rng = np.random.default_rng(11)
    x = np.concatenate([
        rng.gamma(2.0, 1.0, 150_000), np.exp2(rng.uniform(-1074, 1024, 50_000)), 1.0 + rng.uniform(-0.07, 0.07, 50_000),
        np.resize(_specials(), 1000),
    ])
    return rng.permutation(x)


def test_log_cone_decides_and_computes_as_stock_strict():
    """A strict log in a comparison cone, next to a vector call: bits and decisions of stock
    strict at ties (b is log(x) itself and one ulp below), and the log is the vector code."""
    x, b, c = pt.vectors("x", "b", "c")
    lx = pt.log(x)
    outs = [pt.le(lx, b), pt.switch(pt.gt(lx, b), lx * 2.0, c), lx, pt.exp(c + 1e-3 * lx)]
    fn = compile_fn([x, b, c], outs, "policy_rewritten", cache_key="exact_log_cone", inspect_ir=True)
    ref = compile_fn([x, b, c], outs, "stock_strict", cache_key="exact_log_cone")
    xv = _kernel_inputs()
    with np.errstate(all="ignore"):
        lv = np.log(xv)
    bv = np.where(np.arange(xv.size) % 2 == 0, lv, np.nextafter(lv, -np.inf))
    cv = np.linspace(-3, 3, xv.size)
    for k, (g, w) in enumerate(zip(fn(xv, bv, cv), ref(xv, bv, cv), strict=True)):
        if k == 3:  # outside the cone: libmvec's exp, within its budget
            continue
        assert _same_bits(g, w).all(), k
    assert re.search(rf"<{LANES} x double> @ptnumba_exact{LANES}_log\(", final_ir(fn)), "log is not the exact vector code"


def test_policy_strict_log_is_stock_strict_bit_for_bit_and_vectorized():
    x = pt.vector("x")
    out = pt.log(x) * 3.0 - 1.0
    fn = compile_fn([x], out, "policy_strict", cache_key="exact_log_strict", inspect_ir=True)
    ref = compile_fn([x], out, "stock_strict", cache_key="exact_log_strict")
    xv = _kernel_inputs()
    assert _same_bits(fn(xv), ref(xv)).all()
    assert f"@ptnumba_exact{LANES}_log(" in final_ir(fn)


def test_log_gradient_cone_is_stock_strict():
    """The benchmark's cone: grad(minimum(log(x) * y, b).sum(), x) decides on log(x) * y."""
    x, y = pt.vectors("x", "y")
    b = pt.scalar("b")
    cost = pt.minimum(pt.log(x) * y, b).sum()
    outs = [cost, pytensor.grad(cost, x)]
    fn = compile_fn([x, y, b], outs, "policy_rewritten", cache_key="exact_log_grad")
    ref = compile_fn([x, y, b], outs, "stock_strict", cache_key="exact_log_grad")
    rng = np.random.default_rng(3)
    xv = rng.gamma(2.0, 1.0, 100_001)
    yv = rng.standard_normal(xv.size)
    bv = np.float64(np.median(np.log(xv) * yv))
    g, w = fn(xv, yv, bv), ref(xv, yv, bv)
    assert _same_bits(g[1], w[1]).all()  # the gradient: which side of b each element took
    np.testing.assert_allclose(g[0], w[0], rtol=1e-12)  # a sum: the order may differ


def test_explain_names_the_log_entry_and_labels_the_lane_call():
    import ptnumba_codegen

    x, b = pt.vectors("x", "b")
    fn = compile_fn([x, b], [pt.le(pt.log(x), b)], "policy_rewritten", cache_key="exact_log_explain")
    text = ptnumba_codegen.explain(fn)
    assert re.search(rf"exact lanes: log x{LANES}: on \(glibc __log_fma.*bit-identical\)", text), text
    assert "libm lanes log (float64)" in text


def test_probes_run_every_path_in_whole_vectors_and_mixed():
    """The self-check proves something only for the paths its probes take: whole vectors
    of near-1 lanes, of table lanes, of libm's lanes, and vectors mixing them."""
    xs = exact_lanes.probe_inputs("log")
    bits = xs[: xs.size // LANES * LANES].view(np.uint64).reshape(-1, LANES)
    near = (bits - np.uint64(exact_lanes._LOG_LO)) < np.uint64(exact_lanes._LOG_HI - exact_lanes._LOG_LO)
    special = ((bits >> np.uint64(48)) - np.uint64(0x10)) >= np.uint64(0x7FE0)
    table = ~near & ~special
    # lanes in whole vectors of each path (counted in lanes, not vectors: an AVX-512
    # vector holds 8, an AVX2 one 4, and the probes are the same elements on both)
    for kind, lanes in ((near.all(1), 20_000), (table.all(1), 60_000), (special.all(1), 4000)):
        assert kind.sum() * LANES >= lanes
    assert (near.any(1) & table.any(1) & ~special.any(1)).sum() >= 300  # mixed vectors
