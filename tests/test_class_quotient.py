"""A quotient by an exp computed by class (`ptnumba_codegen.analysis.class_rules.QuotientRule`):
``a / exp(x)`` whose every reader decides by class is ``copysign(1, a)`` where a's exponent
and x put the quotient far from every threshold and band, ``a / exp(x)`` as written (glibc's
exp, an IEEE division) elsewhere -- PyMC's Gamma check ``beta = shape / exp(eta) > 0``
without an exp.

The row is checked against glibc's exp itself (`exact_lanes.libm_reference`, and ctypes'
libm): every special value, 10^5 consecutive doubles around x's limit, glibc's overflow and
underflow thresholds and every x where the quotient crosses a threshold or band edge, random
bit patterns; then the lowering bit for bit against that model; then whole graphs, every
decision equal to the reference (``Mode(linker="numba", optimizer=None)``, fastmath off) at
the same points; and where a value leaks, the exp has another reader, or the policy keeps
exp as written, the row does not apply. Broken rows (a limit one ulp past glibc's overflow
threshold, no margin, no bands, a wrong canonical sign) fail the same checks."""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import math
import re

import numpy as np
import pytensor.tensor as pt
import pytest

from conftest import compile_fn, final_ir
from test_class_rules import drive_binary, klass
from ptnumba_codegen.analysis.class_rules import (
    CLASS_RULES,
    DENORM_MIN64,
    INF,
    LOG2E,
    QUOTIENT_RULES,
    TINY64,
)

ROW = QUOTIENT_RULES[("Exp", "float64")]
POW = CLASS_RULES[(-1.0, "float64")]
MAX64 = float(np.finfo(np.float64).max)
# glibc's exp: the largest double with a finite exp, the smallest with a nonzero one
EXP_OVERFLOW = 709.782712893384
EXP_UNDERFLOW = -745.1332191019411
# the bands the Gamma check's two pows ask of the quotient (`test_class_rules`)
GAMMA_BANDS = ((DENORM_MIN64, TINY64), (2.0**1021, INF))


def around(x, k):
    """The 2k + 1 doubles around x (same sign, within the finite doubles and inf)."""
    x = np.float64(x)
    b = int(np.abs(x).view(np.int64))
    bits = np.arange(max(b - k, 0), min(b + k, 0x7FF0000000000000) + 1, dtype=np.int64)
    return np.copysign(bits.view(np.float64), x)


def libm_exp(x):
    from ptnumba_codegen.lowering.vecmath.exact_lanes import libm_reference

    return libm_reference("exp", np.ascontiguousarray(x, dtype=np.float64))


def exact(a, x):
    with np.errstate(all="ignore"):
        return np.asarray(a, np.float64) / libm_exp(x)


def safe_lanes(row, safe, a, x):
    """The lowering's test, in numpy: a normal, |x| <= the limit, g in an open interval."""
    a, x = np.asarray(a, np.float64), np.asarray(x, np.float64)
    field = (a.view(np.int64) >> 52) & 0x7FF
    with np.errstate(all="ignore"):
        g = (field - 1023).astype(np.float64) - x * LOG2E
        inside = np.zeros(a.shape, bool)
        for lo, hi in safe:
            inside |= (g > lo) & (g < hi)
        return (field != 0) & (field != 0x7FF) & (np.abs(x) <= row.x_limit) & inside


def model(row, safe, a, x, canonical=None):
    """What the lowering computes: the canonical value where safe, a / exp(x) elsewhere."""
    canon = np.copysign(1.0, a) if canonical is None else canonical(a)
    return np.where(safe_lanes(row, safe, a, x), canon, exact(a, x))


def in_bands(v, bands):
    av, hit = np.abs(v), np.zeros(np.shape(v), bool)
    for lo, hi in bands:
        hit |= (av >= lo) & (av <= hi)
    return hit


def pow_by_class(v, bands):
    """`test_class_rules.by_class` of the reciprocal row: libm's pow in the bands, 1/x elsewhere."""
    from ptnumba_codegen.lowering.vecmath.exact_lanes import libm_reference

    v = np.ascontiguousarray(v, dtype=np.float64)
    with np.errstate(all="ignore"):
        return np.where(in_bands(v, bands), libm_reference("pow", np.stack([v, np.full_like(v, -1.0)])), 1.0 / v)


# -- the points --------------------------------------------------------------------------

A_SPECIAL = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, DENORM_MIN64, -DENORM_MIN64, TINY64 / 2, TINY64, -TINY64, 2.0 * TINY64,
     1.0, -1.0, 4.0, 0.5, 2.0**-1000, 2.0**-600, 2.0**300, 2.0**1000, 2.0**1023, MAX64, -MAX64]
)  # fmt: skip
X_SPECIAL = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 700.0, -700.0, 701.0, -701.0, EXP_OVERFLOW,
     np.nextafter(EXP_OVERFLOW, np.inf), EXP_UNDERFLOW, np.nextafter(EXP_UNDERFLOW, -np.inf), 709.0, -744.0, 746.0,
     -746.0, 1e300, -1e300, DENORM_MIN64, MAX64, -MAX64]
)  # fmt: skip
# log2|q| thresholds and band edges: rounding to 0, the subnormals, the pows' bands, overflow
L_EDGES = (-1075.0, -1074.0, -1022.0, -1020.0, -1019.0, 1018.0, 1019.0, 1021.0, 1024.0)
NUMERATORS = (1.0, 4.0, 1.5, 2.0**-300, 2.0**-1000, 2.0**300, 2.0**1000, 2.0**1023 * 1.75)


def grid(a_values, x_values):
    a, x = np.meshgrid(a_values, x_values)
    return a.ravel(), x.ravel()


def edge_pairs(k=50_000):
    """(a, x): 2k + 1 doubles around |x| = 700, glibc's exp thresholds, and around every x
    where a / exp(x) crosses a threshold or band edge (for each numerator, both signs)."""
    parts = [grid(A_SPECIAL, X_SPECIAL)]
    for x0 in (700.0, -700.0, EXP_OVERFLOW, EXP_UNDERFLOW):
        xs = around(x0, k)
        for a0 in (1.0, 2.0**-1000, 2.0**1000, -(2.0**300)):
            parts.append((np.full_like(xs, a0), xs))
    for a0 in NUMERATORS:
        for edge in L_EDGES:
            x0 = (math.log2(a0) - edge) / LOG2E  # log2|a0 / e^x0| = edge
            if abs(x0) > 760:
                continue
            xs = around(x0, k // 10)
            for s in (1.0, -1.0):
                parts.append((np.full_like(xs, s * a0), xs))
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def random_pairs(n=2_000_000, seed=0):
    rng = np.random.default_rng(seed)
    bits_a = rng.integers(0, 2**64, n, dtype=np.uint64).view(np.float64)
    bits_x = rng.integers(0, 2**64, n, dtype=np.uint64).view(np.float64)
    # magnitudes where it matters: a over every binade, x over (-800, 800)
    mag_a = np.ldexp(rng.uniform(1.0, 2.0, n), rng.integers(-1074, 1024, n)) * rng.choice([-1.0, 1.0], n)
    mag_x = rng.uniform(-800.0, 800.0, n)
    return np.concatenate([bits_a, mag_a, mag_a]), np.concatenate([bits_x, mag_x, bits_x])


@pytest.fixture(scope="module")
def points():
    a1, x1 = edge_pairs()
    a2, x2 = random_pairs()
    return np.concatenate([a1, a2]), np.concatenate([x1, x2])


def violations(row, bands, a, x, canonical=None) -> dict:
    """Where the row's promises fail: its class, its bits where |q| lies in a band, and a
    chain of the Gamma check's two class pows reading it (their decisions)."""
    safe = row.safe_intervals(bands)
    got, want = model(row, safe, a, x, canonical), exact(a, x)
    same = (got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))
    out = {
        "class": int((klass(got) != klass(want)).sum()),
        "bits in the bands": int((in_bands(want, bands) & ~same).sum()),
    }
    if bands == GAMMA_BANDS:
        inner = POW.input_bands(POW.band)
        chain = pow_by_class(pow_by_class(got, inner), POW.band)
        ref = pow_by_class(pow_by_class(want, inner), POW.band)  # the pows' own rows, on exact q
        out["chain"] = int((klass(chain) != klass(ref)).sum())
    return out


# -- glibc's exp ---------------------------------------------------------------------------


def test_glibcs_exp_thresholds_and_the_reference_symbol():
    """The thresholds the row's reason quotes are glibc's exp's (ctypes' libm and the symbol
    numba's code calls agree), and |x| <= 700 keeps exp normal and finite."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.exp.restype, libm.exp.argtypes = ctypes.c_double, [ctypes.c_double]
    xs = np.concatenate([around(EXP_OVERFLOW, 500), around(EXP_UNDERFLOW, 500), X_SPECIAL, around(700.0, 50)])
    via_ctypes = np.array([libm.exp(float(v)) for v in xs])
    np.testing.assert_array_equal(libm_exp(xs), via_ctypes)
    assert np.isfinite(libm.exp(EXP_OVERFLOW)) and libm.exp(float(np.nextafter(EXP_OVERFLOW, np.inf))) == np.inf
    assert libm.exp(EXP_UNDERFLOW) > 0 and libm.exp(float(np.nextafter(EXP_UNDERFLOW, -np.inf))) == 0.0
    assert TINY64 <= libm.exp(-ROW.x_limit) and libm.exp(ROW.x_limit) < MAX64


# -- the row --------------------------------------------------------------------------------


def test_safe_intervals():
    assert ROW.safe_intervals(()) == ((-1072.0, 1021.0),)
    assert ROW.safe_intervals(GAMMA_BANDS) == ((-1020.0, 1018.0),)
    assert ROW.safe_intervals(((2.0**-600, 2.0**-500),)) == ((-1072.0, -603.0), (-498.0, 1021.0))
    assert ROW.safe_intervals(((0.25, 0.5),)) is None  # |q| = 1 within the margin of a band
    assert ROW.safe_intervals(((0.0, 1e-300), (1e300, INF))) is not None


@pytest.mark.parametrize("bands", [(), GAMMA_BANDS, ((2.0**-600, 2.0**-500), (2.0**700, 2.0**701))], ids=["none", "gamma", "inner"])
def test_the_row_has_the_quotients_class_and_its_bits_in_the_bands(bands, points):
    a, x = points
    extra_a, extra_x = [], []
    for lo, hi in bands:  # doubles around the bands' edges too
        for edge in (lo, hi):
            if 0.0 < edge < INF:
                for a0 in NUMERATORS:
                    x0 = (math.log2(a0) - math.log2(edge)) / LOG2E
                    if abs(x0) < 760:
                        xs = around(x0, 5_000)
                        extra_a.append(np.full_like(xs, a0))
                        extra_x.append(xs)
    if extra_a:
        a, x = np.concatenate([a, *extra_a]), np.concatenate([x, *extra_x])
    found = violations(ROW, bands, a, x)
    assert not any(found.values()), found
    safe = safe_lanes(ROW, ROW.safe_intervals(bands), a, x)
    assert safe.mean() > 0.2, "the canonical value stands for hardly any quotient"


BROKEN = {
    "limit one ulp past glibc's overflow threshold": dict(x_limit=float(np.nextafter(EXP_OVERFLOW, np.inf))),
    "limit at |glibc's underflow threshold| (exp overflows from 709.78)": dict(x_limit=-EXP_UNDERFLOW),
    "a margin of -1": dict(margin=-1.0),
}


@pytest.mark.parametrize("change", BROKEN.values(), ids=BROKEN.keys())
def test_the_check_catches_a_broken_row(change, points):
    a, x = points
    found = violations(dataclasses.replace(ROW, **change), GAMMA_BANDS, a, x)
    assert any(found.values()), found


def test_the_limit_at_glibcs_overflow_threshold_is_sharp(points):
    """x's limit exactly at glibc's last finite exp still gives the quotient's class (the
    estimate covers exp's overflow side); one ulp further it does not (above)."""
    a, x = points
    assert not any(violations(dataclasses.replace(ROW, x_limit=EXP_OVERFLOW), (), a, x).values())


def test_the_check_catches_a_wrong_canonical_value_and_missing_bands(points):
    a, x = points
    assert violations(ROW, GAMMA_BANDS, a, x, canonical=lambda a: np.ones_like(a))["class"] > 0
    assert violations(ROW, GAMMA_BANDS, a, x, canonical=lambda a: np.copysign(2.0**-1050, a))["chain"] > 0
    safe = ROW.safe_intervals(())  # the bands left out
    got, want = model(ROW, safe, a, x), exact(a, x)
    assert (in_bands(want, GAMMA_BANDS) & (got != want) & ~np.isnan(want)).sum() > 0


# -- the lowering ---------------------------------------------------------------------------


def lowered(safe, a, x, vector):
    """`class_calls.quotient_call` on (a, x): its scalar wrapper element by element, or its
    vector variant a whole vector at a time (the tail that does not fill one left out)."""
    from llvmlite import ir

    from ptnumba_codegen.lowering.vecmath.class_calls import quotient_call
    from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa

    f64 = ir.DoubleType()
    module = ir.Module(name="class_quotient_check")
    one = ir.Function(module, ir.FunctionType(f64, [f64, f64]), "one")
    b = ir.IRBuilder(one.append_basic_block("entry"))
    b.ret(quotient_call(b, ROW, safe, *one.args))
    out, n = drive_binary(module, one, "ptnumba_quotient", "float64", a, x, vector)
    return out, a[:n], x[:n], lane_count(target_isa(), "float64") if vector else 1


@pytest.mark.parametrize("vector", [False, True], ids=["scalar", "vector"])
def test_the_lowering_computes_the_model_bit_for_bit(vector, points):
    """What the checks above model is what `class_calls.quotient_call` emits (the vector
    variant: a / exp(x) on every lane of a vector with a lane in doubt)."""
    from ptnumba_codegen.lowering.vecmath.isa import target_isa

    if vector and target_isa() is None:
        pytest.skip("no vector ISA")
    a, x = points
    rng = np.random.default_rng(5)
    pick = rng.permutation(len(a))[:1_500_000]  # vectors mixing safe and doubtful lanes
    a, x = a[pick], x[pick]
    for bands in ((), GAMMA_BANDS):
        safe = ROW.safe_intervals(bands)
        got, a_n, x_n, lanes = lowered(safe, a, x, vector)
        ok = safe_lanes(ROW, safe, a_n, x_n)
        if vector:
            ok = np.repeat(ok.reshape(-1, lanes).all(axis=1), lanes)
        want = np.where(ok, np.copysign(1.0, a_n), exact(a_n, x_n))
        same = (got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (a_n[~same][:5], x_n[~same][:5])


# -- whole graphs ---------------------------------------------------------------------------


def _gamma_check(s, eta, y):
    """PyMC's Gamma: beta = shape / mu, scale = 1 / beta, beta = 1 / scale, checks beta > 0;
    logpow reads scale (== inf), the log-likelihood reads exp(-eta) fast."""
    minus_one = pt.constant(-1.0, dtype="float32")  # PyMC's 1 / beta: a pow of -1
    mu = pt.exp(eta)
    beta = s / mu
    scale = beta**minus_one
    beta2 = scale**minus_one
    logp = pt.switch(pt.eq(scale, np.inf), 0.0, -pt.log(scale)) - y * beta2
    return [pt.all(pt.gt(beta2, 0)), pt.gt(beta2, 0), pt.eq(scale, np.inf), logp.sum()]


def _labels(fn):
    from ptnumba_codegen.explain import explain

    return str(explain(fn))


def _graph_points(k=20_000):
    """(s, eta): s at every special value and numerators, eta around every threshold."""
    a, x = edge_pairs(k)
    keep = np.isfinite(x) | np.isinf(x)
    return a[keep], x[keep]


def _compare(fn, ref, s_vals, eta):
    y = np.ones_like(eta)
    for s in s_vals:
        got, want = fn(np.float64(s), eta, y), ref(np.float64(s), eta, y)
        for k, (g, w) in enumerate(zip(got[:3], want[:3], strict=True)):
            np.testing.assert_array_equal(g, w, err_msg=f"s={s!r}, output {k}")


def test_the_gamma_check_decides_as_the_reference_without_an_exp():
    s, eta, y = pt.dscalar("s"), pt.dvector("eta"), pt.dvector("y")
    outs = _gamma_check(s, eta, y)
    fn = compile_fn([s, eta, y], outs, "policy_as_written", cache_key="class_quotient", inspect_ir=True)
    ref = compile_fn([s, eta, y], outs, "unoptimized_strict", cache_key="class_quotient")
    assert "class quotient" in _labels(fn)
    _, xs = _graph_points()
    xs = np.concatenate([xs, around(EXP_OVERFLOW, 2_000), around(EXP_UNDERFLOW, 2_000)])
    s_vals = [*A_SPECIAL.tolist(), *NUMERATORS]
    _compare(fn, ref, s_vals, xs)
    # at each x where s / exp(x) crosses a threshold, for that s
    for a0 in NUMERATORS:
        for edge in L_EDGES:
            x0 = (math.log2(a0) - edge) / LOG2E
            if abs(x0) < 760:
                _compare(fn, ref, [a0, -a0], around(x0, 20_000))


def test_the_final_ir_of_the_check_calls_exp_only_where_in_doubt():
    """The check calls glibc's exp only inside the quotient's doubtful path (scalar libm
    calls lane by lane, each divided at once), never as a pass of its own: no exact-lane
    exp, no strict libm exp. (The checks alone: a log-likelihood's exp outside the cone has
    exact lanes too, `lane_calls`.)"""
    s, eta, y = pt.dscalar("s"), pt.dvector("eta"), pt.dvector("y")
    outs = _gamma_check(s, eta, y)[:3]
    fn = compile_fn([s, eta, y], outs, "policy_as_written", cache_key="class_quotient_ir_checks", inspect_ir=True,
                    on_unused_input="ignore")
    fn(np.float64(4.0), np.zeros(64), np.ones(64))
    ir_text = final_ir(fn)
    assert re.search(r"@ptnumba_quotient\d+_exp_", ir_text), "no class quotient in the final IR"
    assert not re.search(r"@(ptnumba_exact\d+_exp|ptnumba_libm_exp|llvm\.exp\.)", ir_text)
    assert not re.search(r"@llvm\.fma\.v\d+f64", ir_text), "an exact-lane exp inlined"  # (17 without the row)
    # exp is called only where a lane is in doubt: every call of glibc's exp divides right
    # away (a / exp(x), as written)
    lines = ir_text.splitlines()
    calls = [k for k, line in enumerate(lines) if re.search(r"call double @exp\(", line)]
    assert calls
    for k in calls:
        name = re.match(r"\s*(%[-\w.$]+) =", lines[k]).group(1)
        assert re.search(rf"fdiv double %[-\w.$]+, {re.escape(name)}\b", "\n".join(lines[k + 1 : k + 3])), lines[k]


@pytest.mark.parametrize(
    "leak",
    ["quotient_out", "exp_read", "other_constant", "value_read"],
)
def test_the_row_does_not_apply_where_a_value_leaks(leak):
    """The quotient returned, the exp read elsewhere, a comparison with another constant, a
    value read by arithmetic: decisions the reference's."""
    s, eta = pt.dscalar("s"), pt.dvector("eta")
    q = s / pt.exp(eta)
    if leak == "quotient_out":
        outs = [pt.gt(q, 0), q]
    elif leak == "exp_read":
        outs = [pt.gt(q, 0), pt.exp(eta) * 2.0]
    elif leak == "other_constant":
        outs = [pt.gt(q, 1e-300)]
    else:
        outs = [pt.gt(q, 0), (q * 3.0).sum()]
    fn = compile_fn([s, eta], outs, "policy_as_written", cache_key=f"class_quotient_{leak}")
    ref = compile_fn([s, eta], outs, "unoptimized_strict", cache_key=f"class_quotient_{leak}")
    if leak == "other_constant":
        assert "class quotient" not in _labels(fn)
    # (elsewhere the decision's as-written copy reads its own quotient by class, and the
    # value comes from the rewritten graph: the analysis tests below see the leaks)
    xs = np.concatenate([around(700.0, 100), around(-700.0, 100), around(EXP_OVERFLOW, 100), np.linspace(-800, 800, 999)])
    for sv in (1.0, 2.0**-1000, 2.0**1000):
        for g, w in zip(fn(np.float64(sv), xs), ref(np.float64(sv), xs), strict=True):
            if g.dtype == bool:  # (values follow the rewritten graph: s * exp(-eta))
                np.testing.assert_array_equal(g, w)


def test_a_direct_decision_reads_the_quotient_by_class():
    """``s / exp(eta) > 0`` alone: a class quotient, the reference's decisions."""
    s, eta = pt.dscalar("s"), pt.dvector("eta")
    outs = [pt.gt(s / pt.exp(eta), 0), pt.isinf(s / pt.exp(eta)), pt.isnan(s / pt.exp(eta))]
    fn = compile_fn([s, eta], outs, "policy_as_written", cache_key="class_quotient_direct")
    ref = compile_fn([s, eta], outs, "unoptimized_strict", cache_key="class_quotient_direct")
    assert "class quotient" in _labels(fn)
    _, xs = _graph_points(5_000)
    for sv in [*A_SPECIAL.tolist(), *NUMERATORS]:
        for k, (g, w) in enumerate(zip(fn(np.float64(sv), xs), ref(np.float64(sv), xs), strict=True)):
            np.testing.assert_array_equal(g, w, err_msg=f"s={sv!r}, output {k}")


def test_strict_keeps_the_exp():
    """Opaque copies compile under `strict` (exp within no ulp): no class quotient."""
    s, eta, y = pt.dscalar("s"), pt.dvector("eta"), pt.dvector("y")
    fn = compile_fn([s, eta, y], _gamma_check(s, eta, y), "policy_as_written_opaque", cache_key="class_quotient")
    assert "class quotient" not in _labels(fn)


def test_the_analysis_folds_the_exp_and_needs_a_and_x_exact():
    from pytensor.scalar import basic as ps

    from ptnumba_codegen.analysis.class_rules import CLASS_ONLY, FOLDED_EXP
    from ptnumba_codegen.analysis.classify import analyze, by_class_under
    from ptnumba_codegen.analysis.program import from_scalar_op
    from ptnumba_codegen.as_written.libm_operands import pow_as_written
    from ptnumba_codegen.policy import load_policy

    s, x = ps.float64("s"), ps.float64("x")
    c = ps.constant(np.float32(-1.0))
    q = s / ps.exp(x)
    scale = pow_as_written(q, c)
    out = ps.gt(pow_as_written(scale, c), ps.constant(np.int8(0)))
    program = from_scalar_op(ps.Composite([s, x], [out, scale]), ("float64", "float64"))
    policy = load_policy("as_written")
    k_exp, k_div = (next(k for k, i in enumerate(program.instrs) if i.op_name == n) for n in ("Exp", "TrueDiv"))
    # scale leaves the kernel: its value may be read downstream, no class quotient
    found = analyze(program, {(1, ("cmp", "eq", INF))}, by_class=by_class_under(program, policy))
    assert k_div not in found.by_class
    # marked class only (every reader downstream decides by class): the exp is folded
    found = analyze(program, {(1, ("cmp", "eq", INF)), (1, CLASS_ONLY)}, by_class=by_class_under(program, policy))
    assert found.by_class[k_div] == (ROW, ((-1020.0, 1018.0),))
    assert found.by_class[k_exp] == (FOLDED_EXP, ())
    assert found.needs[program.inputs[0]] == {"exact"} and found.needs[program.inputs[1]] == {"exact"}
    assert analyze(program, {(1, CLASS_ONLY)}, by_class=by_class_under(program, load_policy("strict"))).by_class == {}


def _program(leak):
    from pytensor.scalar import basic as ps

    from ptnumba_codegen.analysis.program import from_scalar_op

    s, x = ps.float64("s"), ps.float64("x")
    e = ps.exp(x)
    q = s / e
    zero = ps.constant(np.int8(0))
    outs = {
        "none": [ps.gt(q, zero)],
        "quotient_out": [ps.gt(q, zero), q],
        "exp_read": [ps.gt(q, zero), e * ps.constant(2.0)],
        "other_constant": [ps.gt(q, ps.constant(1e-300))],
        "value_read": [ps.gt(q, zero), q * ps.constant(3.0)],
        "switch_branch": [ps.gt(q, zero), ps.switch(ps.gt(x, zero), q, x)],
        "exp_out": [ps.gt(q, zero), e],
    }[leak]
    return from_scalar_op(ps.Composite([s, x], outs), ("float64", "float64"))


@pytest.mark.parametrize(
    "leak", ["quotient_out", "exp_read", "other_constant", "value_read", "switch_branch", "exp_out"]
)
def test_the_analysis_keeps_the_quotient_as_written_where_a_value_leaks(leak):
    from ptnumba_codegen.analysis.classify import analyze, by_class_under
    from ptnumba_codegen.policy import load_policy

    policy = load_policy("as_written")
    program = _program("none")
    assert len(analyze(program, by_class=by_class_under(program, policy)).by_class) == 2
    program = _program(leak)
    assert analyze(program, by_class=by_class_under(program, policy)).by_class == {}


@pytest.mark.parametrize("value_read", [False, True], ids=["class_only", "value_read"])
def test_the_whole_graph_marks_an_output_class_only_only_where_every_reader_decides(value_read):
    """A kernel's ``scale`` read by another kernel's ``scale == inf`` alone is class only (its
    kernel may give any value of its class); read also by ``scale * 2`` (a value) or
    returned, it is not."""
    import pytensor.tensor as ptt
    from pytensor.graph.fg import FunctionGraph
    from pytensor.scalar import basic as ps
    from pytensor.tensor.elemwise import Elemwise

    from ptnumba_codegen.analysis.graph_ranges import graph_facts
    from ptnumba_codegen.analysis.whole_graph import class_only_variables, sensitive_variables
    from ptnumba_codegen.policy import load_policy

    a, v = ps.float64("a"), ps.float64("v")
    producer = Elemwise(ps.Composite([a, v], [(a / ps.exp(v)) ** ps.constant(np.float32(-1.0))]))
    decide = Elemwise(ps.Composite([a], [ps.eq(a, ps.constant(np.inf))]))
    double = Elemwise(ps.Composite([a], [a * ps.constant(2.0)]))
    s, x = ptt.dvector("s"), ptt.dvector("x")
    scale = producer(s, x)
    policy = load_policy("as_written")

    def marked(outs):
        fg = FunctionGraph([s, x], outs, clone=False)
        facts = graph_facts(fg)
        return scale in class_only_variables(fg, sensitive_variables(fg, policy, facts), policy, facts)

    assert marked([decide(scale), *([double(scale)] if value_read else [])]) is not value_read
    assert not marked([decide(scale), scale])
