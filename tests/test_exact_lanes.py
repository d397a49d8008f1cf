"""Exact lanes (lowering/exact_lanes.py, libm_data.py): libm's exp algorithm on vectors.

The vector code must give libm's ``exp`` bits on every input: a strict comparison cone
that calls it decides exactly as stock strict. These tests compare it with libm itself
(the symbol numba's code calls) on millions of inputs and at every edge of libm's fast
path, in kernels against stock numba with fastmath off, and check that the self-check
refuses data that is off by one unit and that the switch and bad settings behave."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytensor.tensor as pt
import pytest

from conftest import compile_fn, final_ir
from ptnumba_codegen.lowering.vecmath import libm_data
from ptnumba_codegen.lowering.vecmath import exact_lanes
from ptnumba_codegen.lowering.vecmath.isa import lane_count as _lanes, target_isa

ISA = target_isa()
DATA = libm_data.glibc_exp_data()
pytestmark = pytest.mark.skipif(
    ISA is None or isinstance(DATA, str), reason=f"no vector target or no glibc exp data: {DATA if isinstance(DATA, str) else ISA}"
)
LANES = _lanes(ISA, "float64") if ISA else 0


def _same_bits(a, b):
    return (a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))


def test_glibc_exp_data_is_found_and_consistent():
    assert isinstance(DATA, libm_data.ExpData)
    assert len(DATA.tab) == 2 * libm_data.N
    assert DATA.shift == 1.5 * 2.0**52
    # the table's scales are 2^(k/128) to the last bit's neighbourhood
    k = np.arange(libm_data.N, dtype=np.uint64)
    scale = (np.array(DATA.tab[1::2], dtype=np.uint64) + (k << np.uint64(45))).view(np.float64)
    assert np.all(np.abs(scale / 2.0 ** (np.arange(128) / 128) - 1) < 3e-16)


def test_exact_lanes_pass_their_self_check_here():
    ok, why = exact_lanes.status("exp", LANES)
    assert ok, why
    assert "bit-identical" in why


def test_vector_exp_equals_libm_on_millions_of_inputs():
    rng = np.random.default_rng(20261201)
    xs = np.concatenate([
        rng.uniform(-760.0, 720.0, 1_000_000),
        rng.standard_normal(300_000) * 1e-3,
        np.exp2(rng.uniform(-70, 10, 300_000)) * rng.choice([-1.0, 1.0], 300_000),
        # subnormal results and the overflow edge, densely
        rng.uniform(-745.2, -708.0, 100_000),
        rng.uniform(700.0, 709.8, 100_000),
    ])
    got = exact_lanes._run_compiled("exp", LANES, DATA, xs)
    want = exact_lanes.libm_reference("exp", xs[: len(got)])
    assert _same_bits(got, want).all(), xs[: len(got)][~_same_bits(got, want)][:5]


def test_vector_exp_equals_libm_at_the_fast_path_edges_in_mixed_vectors():
    """A vector with one special lane takes libm lane by lane; one without takes the
    vector code: each lane's bits must not depend on its neighbours."""
    edges = np.array([2.0**-54, 512.0, 709.782712893384, -708.3964185322641, -745.1332191019411, 1024.0])
    edges = np.concatenate([edges, -edges])
    edges = np.concatenate([edges, np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf)])
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324])
    rng = np.random.default_rng(1)
    pool = np.concatenate([edges, specials, rng.uniform(-20, 20, 64)])
    xs = np.concatenate([rng.permutation(pool) for _ in range(40)])
    got = exact_lanes._run_compiled("exp", LANES, DATA, xs)
    want = exact_lanes.libm_reference("exp", xs[: len(got)])
    assert _same_bits(got, want).all()


def test_vector_exp_computes_libms_tiny_case_in_whole_and_mixed_vectors():
    """Below the fast path (``|x| < 2^-54``: zeros, subnormals, PyMC's initial points) glibc
    returns ``1 + x``; the vector code computes it instead of calling libm for the vector:
    whole vectors of them, and mixed with fast-path lanes, across the 2^-54 edge."""
    rng = np.random.default_rng(3)
    tiny = np.concatenate([np.zeros(64), -np.zeros(64), [5e-324, -5e-324, 2.0**-54, -(2.0**-54)]])
    tiny = np.concatenate([tiny, np.nextafter(tiny[-2:], 0.0), np.exp2(rng.uniform(-1074, -53, 40_000)) * rng.choice([-1.0, 1.0], 40_000)])
    xs = np.concatenate([tiny, rng.permutation(np.concatenate([tiny, rng.uniform(-30, 30, tiny.size)]))])
    got = exact_lanes._run_compiled("exp", LANES, DATA, xs)
    want = exact_lanes.libm_reference("exp", xs[: len(got)])
    assert _same_bits(got, want).all(), xs[: len(got)][~_same_bits(got, want)][:5]


def test_self_check_refuses_a_table_word_one_unit_off():
    """Data that looks right (it passes the table's shape check) but is not libm's must be
    refused: the self-check compares bits, not closeness. (A polynomial coefficient one
    unit off would not do: its term is below half an ulp of the result.)"""
    import dataclasses

    tab = list(DATA.tab)
    tab[2 * 37 + 1] += 1  # the scale 2^(37/128), one unit up
    off = dataclasses.replace(DATA, tab=tuple(tab))
    words = np.array([0] * libm_data.HEADER_WORDS + tab, dtype=np.uint64)
    assert libm_data._table_at(words, libm_data.HEADER_WORDS)
    ok, why = exact_lanes.self_check("exp", LANES, off)
    assert not ok and "differ from libm" in why


def test_find_exp_data_rejects_a_library_with_a_damaged_table(tmp_path):
    src = DATA.path
    bad = tmp_path / "libm.so.6"
    shutil.copyfile(src, bad)
    raw = bytearray(bad.read_bytes())
    at = DATA.offset + 8 * libm_data.HEADER_WORDS + 8 * (2 * 5 + 1)  # scale word of k = 5
    raw[at : at + 8] = (int.from_bytes(raw[at : at + 8], "little") ^ (1 << 40)).to_bytes(8, "little")
    bad.write_bytes(bytes(raw))
    why = libm_data.find_exp_data(str(bad))
    assert isinstance(why, str) and "exp table" in why
    found = libm_data.find_exp_data(src)
    assert isinstance(found, libm_data.ExpData) and found.tab == DATA.tab


def _sigmoid_cone(a, b, c):
    # an ordered-logistic cone: differences of sigmoids checked against 0 and 1, and a
    # strict exp compared with a user's threshold
    p = pt.sigmoid(a) - pt.sigmoid(b)
    return [pt.ge(p, 0.0), pt.le(p, 1.0), pt.le(pt.exp(a), c), pt.switch(pt.ge(p, 0.0), pt.log(pt.abs(p) + 1.0), -1.0)]


def _tie_inputs():
    rng = np.random.default_rng(5)
    a = np.concatenate([rng.uniform(-40, 40, 20_000), rng.standard_normal(4000) * 1e-10, [0.0, -0.0, np.inf, -np.inf, np.nan, 709.79, -745.2, 36.8, 37.0]])
    # b at ties of a: equal, one ulp either side, and equal sigmoid values by saturation
    b = np.where(np.arange(a.size) % 3 == 0, a, np.where(np.arange(a.size) % 3 == 1, np.nextafter(a, np.inf), np.nextafter(a, -np.inf)))
    with np.errstate(over="ignore"):
        c = np.where(np.arange(a.size) % 2 == 0, np.exp(a), np.nextafter(np.exp(a), -np.inf))
    return a, b, c


def test_strict_cone_on_exact_lanes_decides_and_computes_as_stock_strict():
    a, b, c = pt.vectors("a", "b", "c")
    fn = compile_fn([a, b, c], _sigmoid_cone(a, b, c), "policy_rewritten", cache_key="exact_cone", inspect_ir=True)
    ref = compile_fn([a, b, c], _sigmoid_cone(a, b, c), "stock_strict", cache_key="exact_cone")
    av, bv, cv = _tie_inputs()
    got, want = fn(av, bv, cv), ref(av, bv, cv)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert _same_bits(np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)).all(), k
    assert re.search(rf"<{LANES} x double> @ptnumba_exact{LANES}_exp\(", final_ir(fn)), "exp is not the exact vector code"


def test_policy_strict_exp_is_stock_strict_bit_for_bit_and_vectorized():
    x = pt.vector("x")
    out = pt.exp(x) * 3.0 - 1.0
    fn = compile_fn([x], out, "policy_strict", cache_key="exact_strict", inspect_ir=True)
    ref = compile_fn([x], out, "stock_strict", cache_key="exact_strict")
    rng = np.random.default_rng(11)
    xv = np.concatenate([rng.uniform(-750, 750, 200_000), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    assert _same_bits(fn(xv), ref(xv)).all()
    assert f"@ptnumba_exact{LANES}_exp(" in final_ir(fn)


def _run(code, **env):
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)


def test_switch_off_keeps_libm_per_lane_and_bad_values_are_named():
    code = (
        "from ptnumba_codegen.lowering.vecmath import exact_lanes as e\n"
        "from ptnumba_codegen.lowering.vecmath.isa import lane_count as _lanes, target_isa\n"
        "print(e.status('exp', _lanes(target_isa(), 'float64')))\n"
    )
    off = _run(code, PTNUMBA_CODEGEN_EXACT_LANES="off")
    assert off.returncode == 0 and "(False, 'PTNUMBA_CODEGEN_EXACT_LANES=off')" in off.stdout, off.stderr
    bad = _run(code, PTNUMBA_CODEGEN_EXACT_LANES="maybe")
    assert bad.returncode != 0
    assert "PTNUMBA_CODEGEN_EXACT_LANES='maybe'" in bad.stderr and "on, off" in bad.stderr
