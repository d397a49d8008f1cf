"""Pows computed by class (`ptnumba_codegen.analysis.class_rules`): a pow of a constant
exponent whose readers decide only on its class is ``1 / x``, libm's pow in the bands.

Each row is checked against glibc's pow itself (`exact_lanes.libm_reference`: libm's
symbol, called through a pointer): every special value, 10^5 consecutive doubles around
each band edge and threshold (both signs), 4M random bit patterns. Then whole graphs: every
decision equal to the reference (``Mode(linker="numba", optimizer=None)``, fastmath off)
at the same points, the pows lowered by class; and where a reader needs the bits, or the
policy has no budget, they are not."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest

from conftest import compile_fn
from ptnumba_codegen.analysis.class_rules import (
    CLASS_RULES,
    DENORM_MIN64,
    REPRESENTATIVES,
    TINY64,
    class_req,
    merge_bands,
)

MAX64 = float(np.finfo(np.float64).max)
ROW = CLASS_RULES[(-1.0, "float64")]
SPECIAL = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, DENORM_MIN64, -DENORM_MIN64, 2.0**-1024, -(2.0**-1024), TINY64, -TINY64,
     MAX64, -MAX64, 1.0, -1.0, 0.5, 2.0, 2.0**1021, 2.0**1023]
)  # fmt: skip
EDGES = (
    0.0, DENORM_MIN64, 2.0**-1024, 2.0**-1023, TINY64, 2.0**-1021, 1.0, 2.0**1021, 2.0**1022, 2.0**1023, MAX64, np.inf,
    # pow(x, -2): x*x subnormal below 2^-511, pow's overflow at 2^-512, x*x's at 2^512, pow's
    # underflow to 0 at 2^537.5, the band edges 2^+-510; pow(x, -0.5): its result at the
    # -2 row's band edges (x near 2^-+1020) and the preimage edges 2^+-1017
    2.0**-538, 2.0**-537.5, 2.0**-537, 2.0**-513, 2.0**-512, 2.0**-511, 2.0**-510, 2.0**-509,
    2.0**509, 2.0**510, 2.0**511, 2.0**512, 2.0**513, 2.0**537, 2.0**537.5, 2.0**538,
    2.0**-1020, 2.0**-1017, 2.0**-1016, 2.0**1016, 2.0**1017, 2.0**1020,
)  # fmt: skip


def klass(v):
    """IEEE class per element: NaN, -inf, negative, -0, +0, positive, +inf."""
    v = np.asarray(v, dtype=np.float64)
    out = np.zeros(v.shape, np.int8)  # NaN
    for code, mask in enumerate(
        [v == -np.inf, (v < 0) & np.isfinite(v), (v == 0) & np.signbit(v), (v == 0) & ~np.signbit(v),
         (v > 0) & np.isfinite(v), v == np.inf], start=1
    ):  # fmt: skip
        out[mask] = code
    return out


def around(x, k):
    """The 2k + 1 doubles around |x| (within [+0, +inf]), and their negatives."""
    b = int(np.float64(x).view(np.int64))
    bits = np.arange(max(b - k, 0), min(b + k, 0x7FF0000000000000) + 1, dtype=np.int64)
    v = bits.view(np.float64)
    return np.concatenate([v, -v])


def edge_points(k=50_000, n_random=0):
    parts = [SPECIAL, *(around(e, k) for e in EDGES)]
    if n_random:
        parts.append(np.random.default_rng(0).integers(0, 2**64, n_random, dtype=np.uint64).view(np.float64))
    return np.concatenate(parts)


def libm_pow(x, y):
    from ptnumba_codegen.lowering.vecmath.exact_lanes import libm_reference

    x = np.ascontiguousarray(x, dtype=np.float64)
    return libm_reference("pow", np.stack([x, np.full_like(x, y)]))


def in_bands(x, bands):
    ax, hit = np.abs(x), np.zeros(np.shape(x), bool)
    for lo, hi in bands:
        hit |= (ax >= lo) & (ax <= hi)
    return hit


def by_class(x, row, bands, representative):
    """The lowering's value: libm's pow in ``bands``, the representative elsewhere."""
    with np.errstate(all="ignore"):
        return np.where(in_bands(x, bands), libm_pow(x, row.exponent), representative(x))


def reciprocal(x):
    with np.errstate(all="ignore"):
        return 1.0 / x


def row_violations(row, representative, xs) -> dict:
    """Where the row's promises fail on ``xs``: the class outside the band, the output
    bands' preimage, a chain of two pows (the inner one's bits in the outer one's band)."""
    with np.errstate(all="ignore"):
        libm = libm_pow(xs, row.exponent)
    outside = ~in_bands(xs, row.band)
    chain_bands = row.input_bands(row.band)
    inner = by_class(xs, row, chain_bands, representative)
    outer = by_class(inner, row, row.band, representative)
    return {
        "class outside the band": int((klass(representative(xs)) != klass(libm))[outside].sum()),
        "preimage": int((in_bands(libm, row.band) & ~in_bands(xs, row.preimage(row.band))).sum()),
        "chain": int((klass(outer) != klass(libm_pow(libm, row.exponent))).sum()),
    }


def test_the_reciprocal_has_libms_class_outside_the_band_at_every_edge():
    xs = edge_points(50_000, n_random=4_000_000)
    assert row_violations(ROW, reciprocal, xs) == {"class outside the band": 0, "preimage": 0, "chain": 0}


@pytest.mark.parametrize(
    "wrong",
    [
        lambda x: reciprocal(np.abs(x)),  # the sign of a negative x (and of -0) lost
        lambda x: x,  # 0 and inf swapped
        lambda x: reciprocal(x.astype(np.float32)).astype(np.float64),  # overflows below 2^-128
    ],
    ids=["abs", "identity", "float32"],
)
def test_the_check_catches_a_wrong_representative(wrong):
    """The same check fails for representatives that are wrong somewhere: the sign lost,
    0 and inf swapped, a float32 division (overflows for |x| < 2^-128, outside the band)."""
    with np.errstate(all="ignore"):
        assert sum(row_violations(ROW, wrong, edge_points(2_000)).values()) > 0


def test_a_row_without_the_preimage_band_fails_the_chain():
    """With a representative whose bits are not the value's (the sign: the class alone),
    the inner pow must call libm where the outer one does: the preimage band."""
    import dataclasses

    sign = lambda x: np.where(np.isfinite(x) & (x != 0), np.sign(x), reciprocal(x))  # noqa: E731
    xs = edge_points(2_000)
    assert row_violations(ROW, sign, xs)["chain"] == 0
    broken = dataclasses.replace(ROW, preimage=lambda bands: ())
    assert row_violations(broken, sign, xs)["chain"] > 0


def test_bands_and_requirements():
    assert merge_bands([(4.0, 5.0), (1.0, 2.0), (1.5, 3.0)]) == ((1.0, 3.0), (4.0, 5.0))
    assert class_req([(2.0, 3.0), (1.0, 2.5)]) == ("class", ((1.0, 3.0),))
    assert ROW.input_bands(ROW.band) == ((DENORM_MIN64, TINY64), (2.0**1021, np.inf))
    assert ROW.input_bands(()) == ROW.band


# -- whole graphs ------------------------------------------------------------------------


def _graph():
    x, a = pt.vectors("x", "a")
    v = x / pt.exp(a)
    w = v ** pt.constant(-1.0, dtype="float32")
    u = w ** pt.constant(-1.0, dtype="float32")
    outs = [
        pt.gt(u, 0),
        pt.eq(-1 * pt.log(w), -np.inf),
        pt.isinf(u),
        pt.isnan(u),
        pt.lt(w, 0),
        pt.eq(u, 0),
        pt.all(pt.gt(u, 0)),
    ]
    return [x, a], outs


def _labels(fn):
    from ptnumba_codegen.explain import explain

    return str(explain(fn))


def test_a_graph_deciding_on_the_class_of_pows_equals_the_reference_at_every_edge():
    inputs, outs = _graph()
    fn = compile_fn(inputs, outs, "policy_as_written", cache_key="class_pow")
    ref = compile_fn(inputs, outs, "unoptimized_strict", cache_key="class_pow")
    assert _labels(fn).count("class pow (1/x") == 2  # w (the copies merge: one kernel) and u
    xs = edge_points(50_000)
    for av in (np.zeros_like(xs), np.full_like(xs, -1.0), np.full_like(xs, 700.0)):
        for k, (got, want) in enumerate(zip(fn(xs, av), ref(xs, av), strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"output {k}")


def test_a_reader_that_needs_the_bits_keeps_libms_pow():
    """``pow(x, -1) <= b`` needs pow's bits: no class pow (exact lanes, or libm)."""
    x, b = pt.vectors("x", "b")
    w = x ** pt.constant(-1.0, dtype="float32")
    outs = [pt.le(w, b), pt.gt(w, 0)]
    fn = compile_fn([x, b], outs, "policy_as_written", cache_key="class_pow_bits")
    assert "class pow" not in _labels(fn)


def test_a_policy_without_budget_keeps_libms_pow():
    """Opaque copies compile under `strict` (no budget: the representative's value would
    reach readers that do not decide): libm's pow."""
    inputs, outs = _graph()
    fn = compile_fn(inputs, outs, "policy_as_written_opaque", cache_key="class_pow")
    assert "class pow" not in _labels(fn)
    ref = compile_fn(inputs, outs, "unoptimized_strict", cache_key="class_pow")
    xs = edge_points(2_000)
    for got, want in zip(fn(xs, np.zeros_like(xs)), ref(xs, np.zeros_like(xs)), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_analysis_gives_the_chain_its_bands():
    """pow(pow(v, -1), -1) > 0: the outer pow calls libm in its own band, the inner one in
    its own and where its result falls in the outer one's (|v| >= 2^1021)."""
    from ptnumba_codegen.analysis.classify import analyze, by_class_under
    from ptnumba_codegen.analysis.program import from_scalar_op
    from ptnumba_codegen.as_written.libm_operands import pow_as_written
    from ptnumba_codegen.policy import load_policy
    from pytensor.scalar import basic as ps

    v = ps.float64("v")
    c = ps.constant(np.float32(-1.0))
    out = ps.gt(pow_as_written(pow_as_written(v, c), c), ps.constant(np.int8(0)))
    program = from_scalar_op(ps.Composite([v], [out]), ("float64",))
    pows = [k for k, i in enumerate(program.instrs) if i.op_name == "Pow"]
    found = analyze(program, by_class=by_class_under(program, load_policy("as_written")))
    assert found.by_class[pows[0]][1] == ((DENORM_MIN64, TINY64), (2.0**1021, np.inf))
    assert found.by_class[pows[1]][1] == ((DENORM_MIN64, TINY64),)
    assert analyze(program, by_class=by_class_under(program, load_policy("strict"))).by_class == {}
    assert analyze(program).by_class == {}


# glibc's pow(X0, -1) is one ulp above 1 / X0 (found by search; checked below)
X0 = 1.6466247187677132
POW_X0 = 0.6073029200899956


def test_a_comparison_with_another_constant_keeps_libms_pow():
    """``pow(x, -1) >= c`` for a c other than 0 or +-inf needs pow's bits: at X0, libm's
    pow is c and 1 / X0 is one ulp below it."""
    assert libm_pow(np.array([X0]), -1.0)[0] == POW_X0 and 1.0 / X0 < POW_X0
    x = pt.vector("x")
    outs = [pt.ge(x ** pt.constant(-1.0, dtype="float32"), POW_X0)]
    fn = compile_fn([x], outs, "policy_as_written", cache_key="class_pow_c")
    ref = compile_fn([x], outs, "unoptimized_strict", cache_key="class_pow_c")
    assert "class pow" not in _labels(fn)
    xs = np.array([X0, np.nextafter(X0, 0), np.nextafter(X0, 2)])
    np.testing.assert_array_equal(fn(xs)[0], ref(xs)[0])
    assert ref(xs)[0][0]


def test_default_has_no_class_pow_and_decides_as_stock_strict():
    """Under `rewritten` (decisions from the rewritten graph) no pow is a `PowAsWritten` (LLVM folds ``pow(x, -1.0)`` to ``1 / x`` in
    stock strict too): nothing is computed by class, and the decisions are stock strict's."""
    inputs, outs = _graph()
    fn = compile_fn(inputs, outs, "policy_rewritten", cache_key="class_pow")
    ref = compile_fn(inputs, outs, "stock_strict", cache_key="class_pow")
    assert "class pow" not in _labels(fn)
    xs = edge_points(2_000)
    for av in (np.zeros_like(xs), np.full_like(xs, 700.0)):
        for got, want in zip(fn(xs, av), ref(xs, av), strict=True):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("negate", ["neg", "minus_one_times"])
def test_a_negation_read_by_class_stays_strict(negate):
    """``pow(-x, -1) > 0`` tells ``x = +0`` (``-x = -0``: -inf, false) from ``x = -0`` (+inf,
    true): the class of ``-x`` includes the sign of a zero, which a negation with ``nsz``
    (its flags outside cones, if a robust rule let it go) need not keep. It stays strict,
    and x must be exact."""
    from ptnumba_codegen.analysis.classify import EXACT, analyze, by_class_under
    from ptnumba_codegen.analysis.program import from_scalar_op
    from ptnumba_codegen.as_written.libm_operands import pow_as_written
    from ptnumba_codegen.flags import COMPARISON_SENSITIVE
    from ptnumba_codegen.policy import load_policy
    from pytensor.scalar import basic as ps

    v = ps.float64("v")
    minus = ps.neg(v) if negate == "neg" else ps.mul(ps.constant(np.float64(-1.0)), v)
    out = ps.gt(pow_as_written(minus, ps.constant(np.float32(-1.0))), ps.constant(np.int8(0)))
    program = from_scalar_op(ps.Composite([v], [out]), ("float64",))
    found = analyze(program, by_class=by_class_under(program, load_policy("as_written")))
    k = next(k for k, i in enumerate(program.instrs) if i.op_name in ("Neg", "Mul"))
    assert found.classes[k] == COMPARISON_SENSITIVE and k not in found.robust
    assert found.needs[program.inputs[0]] == {EXACT}
    assert len(found.by_class) == 1


# -- the rows for pow(x, -0.5) and pow(x, -2), and every pair of rows in a chain ---------

MINUS_HALF = CLASS_RULES[(-0.5, "float64")]
MINUS_TWO = CLASS_RULES[(-2.0, "float64")]


def rsqrt(x):
    """The ``rsqrt`` representative as `class_calls` emits it: 1/sqrt(x), +inf at -0, +0 at -inf."""
    with np.errstate(all="ignore"):
        r = 1.0 / np.sqrt(x)
    return np.where(x == -np.inf, 0.0, np.where(x == 0, np.inf, r))


def inverse_square(x):
    with np.errstate(all="ignore"):
        return 1.0 / (x * x)


REPRESENTATIVES_NP = {"reciprocal": reciprocal, "rsqrt": rsqrt, "inverse_square": inverse_square}


def ulps_apart(a, b):
    """Distance in ulps of two finite doubles of one sign (bits are monotone in value)."""
    return np.abs(a.view(np.int64) - b.view(np.int64))


def value_violations(row, representative, xs) -> dict:
    """Outside the band: the class, and the value within ``row.max_ulp`` of libm's where
    both are finite and nonzero (the representative's value reaches readers that do not
    decide: the policy's budget must cover it)."""
    with np.errstate(all="ignore"):
        libm, rep = libm_pow(xs, row.exponent), representative(xs)
    outside = ~in_bands(xs, row.band)
    both = outside & np.isfinite(libm) & np.isfinite(rep) & (libm != 0) & (rep != 0)
    return {
        "class outside the band": int((klass(rep) != klass(libm))[outside].sum()),
        "value": int((ulps_apart(rep[both], libm[both]) > row.max_ulp).sum()),
    }


def chain_violations(inner, outer, xs, inner_rep=None, outer_rep=None) -> int:
    """pow(pow(x, inner), outer) by class: the inner pow calls libm in its band and in the
    preimage of the outer one's; the result's class is libm's chain's."""
    inner_rep = inner_rep or REPRESENTATIVES_NP[inner.representative]
    outer_rep = outer_rep or REPRESENTATIVES_NP[outer.representative]
    with np.errstate(all="ignore"):
        mid = by_class(xs, inner, inner.input_bands(outer.band), inner_rep)
        got = by_class(mid, outer, outer.band, outer_rep)
        want = libm_pow(libm_pow(xs, inner.exponent), outer.exponent)
    return int((klass(got) != klass(want)).sum())


def preimage_violations(row, xs) -> int:
    """libm's pow(x) in a band (every row's band) only for x in the band's preimage."""
    with np.errstate(all="ignore"):
        libm = libm_pow(xs, row.exponent)
    return sum(
        int((in_bands(libm, other.band) & ~in_bands(xs, row.preimage(other.band))).sum()) for other in CLASS_RULES.values()
    )


ROWS = sorted(CLASS_RULES.values(), key=lambda r: r.exponent)


@pytest.fixture(scope="module")
def many_points():
    return edge_points(50_000, n_random=4_000_000)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"pow{r.exponent:g}")
def test_every_row_has_libms_class_and_a_value_within_its_ulps_outside_its_band(row, many_points):
    rep = REPRESENTATIVES_NP[row.representative]
    assert value_violations(row, rep, many_points) == {"class outside the band": 0, "value": 0}
    assert preimage_violations(row, many_points) == 0
    assert row.representative in REPRESENTATIVES and row.why


@pytest.mark.parametrize(
    "inner,outer", [(a, b) for a in ROWS for b in ROWS], ids=lambda r: f"pow{r.exponent:g}"
)
def test_every_chain_of_two_rows_has_libms_class(inner, outer, many_points):
    assert chain_violations(inner, outer, many_points) == 0


def _rsqrt_without(fix):
    def wrong(x):
        with np.errstate(all="ignore"):
            r = 1.0 / np.sqrt(x)
        if fix != "-0":
            r = np.where(x == 0, np.inf, r)
        if fix != "-inf":
            r = np.where(x == -np.inf, 0.0, r)
        return r

    return wrong


@pytest.mark.parametrize(
    "row,wrong,broken",
    [
        (MINUS_HALF, _rsqrt_without("-0"), "class outside the band"),  # 1/sqrt(-0) = -inf, pow: +inf
        (MINUS_HALF, _rsqrt_without("-inf"), "class outside the band"),  # sqrt(-inf) = NaN, pow: +0
        (MINUS_HALF, lambda x: rsqrt(np.abs(x)), "class outside the band"),  # pow(-4, -0.5) is NaN
        (MINUS_HALF, lambda x: rsqrt(x.astype(np.float32)).astype(np.float64), "class outside the band"),
        (MINUS_TWO, lambda x: reciprocal(x), "class outside the band"),  # the sign of an odd power
        (MINUS_TWO, lambda x: inverse_square(x.astype(np.float32)).astype(np.float64), "class outside the band"),
    ],
    ids=["rsqrt-no-0-fix", "rsqrt-no-inf-fix", "rsqrt-abs", "rsqrt-float32", "pow-1-for-pow-2", "square-float32"],
)
def test_the_check_catches_a_wrong_representative_of_the_new_rows(row, wrong, broken):
    assert value_violations(row, wrong, edge_points(2_000))[broken] > 0


@pytest.mark.parametrize(
    "band,broken",
    [
        (((DENORM_MIN64, 2.0**-510),), "class outside the band"),  # no high band: x*x overflows, pow subnormal
        (((DENORM_MIN64, 2.0**-510), (2.0**512, 2.0**537)), "class outside the band"),  # pow's subnormals to 2^537.5
        (((2.0**510, np.inf),), "value"),  # no low band: x*x subnormal near 2^-512, 1/(x*x) 4 ulps off
        (((DENORM_MIN64, 2.0**-513), (2.0**510, np.inf)), "value"),
    ],
    ids=["no-high-band", "high-band-short", "no-low-band", "low-band-short"],
)
def test_the_check_catches_a_missing_band_of_the_inverse_square(band, broken):
    import dataclasses

    broken_row = dataclasses.replace(MINUS_TWO, band=band)
    assert value_violations(broken_row, inverse_square, edge_points(2_000))[broken] > 0


@pytest.mark.parametrize("row", [MINUS_HALF, MINUS_TWO], ids=["pow-0.5", "pow-2"])
def test_a_chain_without_the_preimage_band_fails(row):
    """With the class alone (a sign for every finite nonzero value) from the inner pow, the
    outer pow (pow(x, -2): a band) needs the inner one's bits where its result falls in it."""
    import dataclasses

    def sign_of(rep):
        return lambda x: np.where(np.isfinite(rep(x)) & (rep(x) != 0), np.sign(rep(x)), rep(x))

    xs = edge_points(2_000)
    wrong = sign_of(REPRESENTATIVES_NP[row.representative])
    assert chain_violations(row, MINUS_TWO, xs, inner_rep=wrong) == 0
    assert chain_violations(dataclasses.replace(row, preimage=lambda bands: ()), MINUS_TWO, xs, inner_rep=wrong) > 0


def test_new_rows_bands():
    assert MINUS_HALF.band == () and MINUS_HALF.max_ulp == 2 and MINUS_TWO.max_ulp == 2
    assert MINUS_TWO.band == ((DENORM_MIN64, 2.0**-510), (2.0**510, np.inf))
    # pow(x, -0.5) in the -2 row's band: |x| near 0 or near inf
    assert MINUS_HALF.input_bands(MINUS_TWO.band) == ((0.0, 2.0**-1017), (2.0**1017, np.inf))


# -- strict readers that pass a class on: sign(x), a * sign(z) ----------------------------


def _class_mates(v):
    """A value of each class that is not ``v`` itself but of its class (+-1, +-0, +-inf, NaN)."""
    return np.where(np.isfinite(v) & (v != 0), np.copysign(1.0, v), v)


def test_sign_is_a_function_of_its_operands_class():
    xs = edge_points(2_000)
    got, mate = np.sign(xs), np.sign(_class_mates(xs))
    assert np.array_equal(got.view(np.int64)[~np.isnan(xs)], mate.view(np.int64)[~np.isnan(xs)])
    assert np.isnan(got[np.isnan(xs)]).all()


@pytest.mark.parametrize(
    "s,passes",
    [(1.0, True), (-1.0, True), (0.0, True), (-0.0, True), (np.nan, True), (2.0**600, False), (0.5, False)],
)
def test_a_product_with_a_sign_has_its_factors_class(s, passes):
    """a * s for s a sign's value: the class of each a's class mates (and |a * s| = |a| for
    s = +-1: a's bits where the product's are wanted). Any other factor (2^600: overflow;
    0.5: underflow) breaks it: the check catches a reader that takes any product."""
    xs = edge_points(2_000)
    with np.errstate(all="ignore"):
        same_class = np.array_equal(klass(xs * s), klass(_class_mates(xs) * s))
        same_magnitude = abs(s) != 1.0 or np.array_equal(np.abs(xs * s), np.abs(xs), equal_nan=True)
    assert (same_class and same_magnitude) is passes


def _sv_program(sign_factor=True):
    """The cone of stochastic_volatility's decision: pow(pow(e, -0.5) * sign(e), -2) *
    sign(...) > 0, e = exp(-2 v)."""
    from ptnumba_codegen.analysis.program import from_scalar_op
    from ptnumba_codegen.as_written.libm_operands import pow_as_written
    from pytensor.scalar import basic as ps

    v = ps.float64("v")
    e = ps.exp(ps.mul(ps.constant(np.float64(-2.0)), v))
    half = pow_as_written(e, ps.constant(np.float32(-0.5)))
    a = ps.mul(half, ps.sign(e) if sign_factor else e)
    out = ps.gt(ps.mul(pow_as_written(a, ps.constant(np.float32(-2.0))), ps.sign(a)), ps.constant(np.int8(0)))
    return from_scalar_op(ps.Composite([v], [out]), ("float64",))


def test_the_analysis_passes_classes_through_sign_and_a_product_with_a_sign():
    from ptnumba_codegen.analysis.classify import EXACT, analyze, by_class_under
    from ptnumba_codegen.policy import load_policy

    program = _sv_program()
    found = analyze(program, by_class=by_class_under(program, load_policy("as_written")))
    pows = [k for k, i in enumerate(program.instrs) if i.op_name == "Pow"]
    assert {found.by_class[k][0].exponent: found.by_class[k][1] for k in pows} == {
        -0.5: ((0.0, 2.0**-1017), (2.0**1017, np.inf)),
        -2.0: MINUS_TWO.band,
    }
    muls = [k for k, i in enumerate(program.instrs) if i.op_name == "Mul" and k > pows[0]]
    assert all(k not in found.robust for k in muls)  # strict: IEEE keeps a zero's sign
    assert found.needs[program.inputs[0]] == {EXACT}  # exp stays libm's
    # a product with another value: the inner pow's class is not the product's (0.5 *
    # 2^-1074 underflows): the inner pow is libm's, the outer one still by class
    other = _sv_program(sign_factor=False)
    found = analyze(other, by_class=by_class_under(other, load_policy("as_written")))
    assert [row.exponent for row, _ in found.by_class.values()] == [-2.0]
    # no budget, or no by_class: libm's pows
    assert analyze(program, by_class=by_class_under(program, load_policy("strict"))).by_class == {}
    assert analyze(program).by_class == {}


def _sv_graph():
    x, a = pt.vectors("x", "a")
    v = x / pt.exp(a)
    half = v ** pt.constant(-0.5, dtype="float32")
    h = half * pt.sign(v)
    u = h ** pt.constant(-2.0, dtype="float32")
    outs = [
        pt.gt(u * pt.sign(h), 0),
        pt.all(pt.gt(u * pt.sign(h), 0)),
        pt.isinf(u),
        pt.eq(half, 0),
        pt.gt(half, 0),
        pt.isnan(half * pt.sign(v)),
        pt.lt(h, 0),
    ]
    return [x, a], outs


def _one_pow_graph(exponent):
    """A pow read by class alone: no band from a reader (pow(x, -0.5): no band at all, the
    representative at -0 and -inf)."""
    x, a = pt.vectors("x", "a")
    v = x / pt.exp(a)
    w = v ** pt.constant(exponent, dtype="float32")
    outs = [pt.gt(w, 0), pt.eq(w, 0), pt.isinf(w), pt.isnan(w), pt.lt(w * pt.sign(v), 0), pt.eq(-1 * pt.log(w), -np.inf)]
    return [x, a], outs


GRAPHS = {
    "sv": (_sv_graph, ("class pow (1/sqrt(x)", "class pow (1/(x*x)")),
    "half": (lambda: _one_pow_graph(-0.5), ("class pow (1/sqrt(x); +inf at -0, +0 at -inf; libm pow where |x| in nowhere)",)),
    "square": (lambda: _one_pow_graph(-2.0), ("class pow (1/(x*x); libm pow where |x| in [2^-1074, 2^-510] or [2^510, inf])",)),
}


@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_a_graph_with_the_new_rows_equals_the_reference_at_every_edge(graph):
    """stochastic_volatility's cone (pow(pow(v, -0.5) * sign(v), -2) * sign(...) > 0) and
    each new pow read by class alone: every decision the reference's at every edge."""
    make, labels = GRAPHS[graph]
    inputs, outs = make()
    fn = compile_fn(inputs, outs, "policy_as_written", cache_key=f"class_pow_{graph}")
    ref = compile_fn(inputs, outs, "unoptimized_strict", cache_key=f"class_pow_{graph}")
    found = _labels(fn)
    assert all(label in found for label in labels), found
    xs = edge_points(50_000)
    for av in (np.zeros_like(xs), np.full_like(xs, -1.0), np.full_like(xs, 700.0), np.full_like(xs, -700.0)):
        for k, (got, want) in enumerate(zip(fn(xs, av), ref(xs, av), strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"output {k}")


# -- the lowering's values: the model above, bit for bit ----------------------------------


def _lanes(row):
    from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa

    return lane_count(target_isa(), row.dtype)


def drive_binary(module, one, prefix, dtype, a, b, vector):
    """Run the binary IR function ``one`` of ``module`` on columns (a, b): element by
    element, or, with ``vector``, the vector variant whose name starts with ``prefix`` a
    whole vector at a time (the tail that does not fill one left out). Returns the results
    and how many elements ran."""
    from llvmlite import ir

    from ptnumba_codegen.lowering.vecmath.exact_lanes import _drive
    from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa

    f64, i64 = ir.DoubleType(), ir.IntType(64)
    lanes = lane_count(target_isa(), dtype) if vector else 1
    fn = next(g for g in module.globals.values() if g.name.startswith(f"{prefix}{lanes}_")) if vector else one
    ty = fn.function_type.return_type
    drive = ir.Function(module, ir.FunctionType(ir.VoidType(), [f64.as_pointer()] * 3 + [i64]), "drive")
    entry, loop, done = (drive.append_basic_block(n) for n in ("entry", "loop", "done"))
    b_ = ir.IRBuilder(entry)
    b_.branch(loop)
    b_.position_at_end(loop)
    i = b_.phi(i64)
    i.add_incoming(i64(0), entry)

    def at(p):
        return b_.bitcast(b_.gep(p, [b_.mul(i, i64(lanes))]), ty.as_pointer())

    b_.store(b_.call(fn, [b_.load(at(drive.args[0]), align=8), b_.load(at(drive.args[1]), align=8)]), at(drive.args[2]), align=8)
    nxt = b_.add(i, i64(1))
    i.add_incoming(nxt, loop)
    b_.cbranch(b_.icmp_unsigned("<", nxt, drive.args[3]), loop, done)
    b_.position_at_end(done)
    b_.ret_void()
    n = len(a) // lanes * lanes
    cols = np.ascontiguousarray(np.stack([a[:n], b[:n]]))
    return _drive(module, cols, n // lanes, opt=2), n


def lowered(row, bands, xs, vector):
    """`class_calls.class_call` on ``xs``: its scalar wrapper element by element, or its vector
    variant a whole vector at a time (the tail that does not fill one left out)."""
    from llvmlite import ir

    from ptnumba_codegen.lowering.vecmath.class_calls import class_call

    f64 = ir.DoubleType()
    module = ir.Module(name="class_pow_check")
    one = ir.Function(module, ir.FunctionType(f64, [f64, f64]), "one")
    b = ir.IRBuilder(one.append_basic_block("entry"))
    b.ret(class_call(b, row, bands, *one.args))
    out, n = drive_binary(module, one, "ptnumba_class", row.dtype, xs, np.full(len(xs), row.exponent), vector)
    return out, xs[:n]


@pytest.mark.parametrize("vector", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"pow{r.exponent:g}")
def test_the_lowering_computes_the_model_bit_for_bit(row, vector):
    """What the rows' checks model (`by_class`: libm's pow in the bands, the representative
    elsewhere) is what `class_calls` emits, for the row's own band and a chain's (the
    vector variant: libm on every lane of a vector with a lane in a band)."""
    from ptnumba_codegen.lowering.vecmath.isa import target_isa

    if vector and target_isa() is None:
        pytest.skip("no vector ISA")
    rng = np.random.default_rng(3)
    xs = edge_points(5_000, n_random=200_000)
    xs = xs[rng.permutation(len(xs))]  # vectors mixing lanes in and out of a band
    for bands in (row.band, row.input_bands(MINUS_TWO.band)):
        got, xs_n = lowered(row, bands, xs, vector)
        call = in_bands(xs_n, bands)
        if vector:  # a vector with a lane in a band calls libm on every lane
            call = np.repeat(call.reshape(-1, _lanes(row)).any(axis=1), _lanes(row))
        with np.errstate(all="ignore"):
            want = np.where(call, libm_pow(xs_n, row.exponent), REPRESENTATIVES_NP[row.representative](xs_n))
        same = (got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), xs_n[~same][:5]


def test_a_row_applies_only_within_the_policys_ulp_budget():
    """A budget of one ulp admits 1/x (correctly rounded) and neither 1/sqrt(x) nor 1/(x*x)
    (two ulps from libm's pow)."""
    import dataclasses

    from ptnumba_codegen.analysis.classify import analyze, by_class_under
    from ptnumba_codegen.policy import load_policy

    policy = load_policy("as_written")

    class OneUlp:
        def rule_for(self, klass, op_name):
            return dataclasses.replace(policy.rule_for(klass, op_name), max_ulp=1)

    program = _sv_program()
    assert len(analyze(program, by_class=by_class_under(program, policy)).by_class) == 2
    assert analyze(program, by_class=by_class_under(program, OneUlp())).by_class == {}
    from ptnumba_codegen.analysis.program import from_scalar_op
    from ptnumba_codegen.as_written.libm_operands import pow_as_written
    from pytensor.scalar import basic as ps

    v = ps.float64("v")
    out = ps.gt(pow_as_written(v, ps.constant(np.float32(-1.0))), ps.constant(np.int8(0)))
    inverse = from_scalar_op(ps.Composite([v], [out]), ("float64",))
    assert len(analyze(inverse, by_class=by_class_under(inverse, OneUlp())).by_class) == 1
