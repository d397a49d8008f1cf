"""Vector functions for lgamma, digamma and trigamma, written for this package.

glibc's libmvec has none of them, so they are defined here, as IR, and called
exactly like a libmvec variant (see ``libmvec.vector_call``): one function per
(function, dtype, ISA) taking and returning a vector of the loop's width; the scalar
remainder of a loop calls the same function on a splat, so an element's result never
depends on its position.

Both are computed in float64 (float32 inputs are widened, the result rounded once), with
branch-free formulas: every lane evaluates every region's formula and selects its own.
The pieces (constants in ``special_coefficients``, derived by
``scripts/derive_coefficients.py``):

* ``log_dd`` -- log x as a double-double, relative error ~2^-58: x = 2^k m with
  m in [sqrt(1/2), sqrt(2)), log m = 2s + s^3 T(s^2), s = (m - 1)/(m + 1) kept to ~2^-100.
  libmvec's log (up to 2 ulp) is not used: Stirling's ``x log x`` and the recurrences
  amplify its error by 2-4x.
* lgamma, x > 0: ``x >= 3`` Stirling with a minimax fit of its correction in 1/x^2 (which
  converges down to 3), ``x log x - x`` done with exact products; below 3, the recurrence
  to the base interval ``2 + y``, ``|y| <= 1/2`` (m = rint(x), y = x - m, exact):
  ``lgamma(x) = P(y) -/+ log Q`` with Q = x(x+1), x, 1 or x - 1 (an exact double-double),
  and ``P(y) = lgamma(2 + y) = c1 y + c2 y^2 + y^3 R(y)`` with the first two terms in
  double-double, so the cancellation next to the zeros at 1 and 2 (and against log x
  around the minimum at 1.46) costs no accuracy.
* digamma, x > 0: ``x >= 3`` the asymptotic series (again a minimax fit in 1/x^2) on
  ``log_dd``; below, the base interval [1, 2) around the positive root x0 = 1.4616...,
  through ``G(y) = psi(x0 + 1 + y) - 1/x0`` (y = z - x0 in double-double):
  ``psi(z) = G(y) + y / (x0 z)`` for z in [1, 2) -- both terms are O(y), so the root costs
  nothing -- ``psi(x) = G + 1/x0`` on [2, 3) and ``G + 1/x0 - (2x + 1)/(x (x + 1))`` below 1,
  the fraction one exact double-double quotient.

* trigamma, x > 0: ``x >= 3`` the asymptotic series ``w + w^2/2 + w^3 A(w^2)`` (w = 1/x
  as a double-double); below, ``psi1(z)`` on [2, 3) by a polynomial around 2.5 (its
  linear term exact) plus the recurrence's ``1/x^2`` or ``1/x^2 + 1/(x+1)^2`` -- all terms
  positive, one double-double quotient.

Out-of-domain lanes (lgamma: x <= 0, subnormal, NaN, inf, results near overflow; digamma:
x <= 0, subnormal, non-finite; trigamma: x < 2^-500, non-finite) take a branch that is
never executed when every lane of a vector is an ordinary positive number:

* lgamma calls glibc's scalar ``lgamma_r``/``lgammaf_r`` -- the stock backend's own function
  (numba lowers ``math.lgamma`` to libm) -- on those lanes, so the results there, including
  every non-finite one, are stock's bit for bit;
* digamma (stock: scipy's ``psi``, not callable from here) computes the stock special values
  (``psi(+0) = -inf``, ``psi(-0) = +inf``, NaN at negative integers and ``-inf``) and
  the reflection ``psi(x) = psi(1 - x) - pi cot(pi x)`` with an exact reduction of ``pi x``;
  for x < 0 the error is small in absolute terms but not relative to the result next to
  the negative roots (as for scipy's own reflection);
* trigamma (stock: scipy's ``polygamma(1, x)`` in object mode) likewise: stock's special
  values and the reflection ``pi^2 / sin^2(pi x) - psi1(1 - x)`` (no cancellation: the
  first term is at least pi^2).
"""

from __future__ import annotations

from llvmlite import ir

from ptnumba_codegen.lowering.vecmath import special_coefficients as K
from ptnumba_codegen.lowering.vecmath.simd import F, Simd

TINY = 2.0**-1022  # smallest normal float64: the formulas' lower bound
LGAMMA_MAX = {"float64": 1e305, "float32": 1e36}  # above: the scalar function (overflow edge)


def log_dd(s: Simd, x: F) -> tuple[F, F]:
    """log(x) as hi + lo, for positive normal finite x."""
    b = s.b
    bits = s.to_bits(x)
    t = b.sub(bits, s.iconst(K.SQRT_HALF_BITS))
    k = b.ashr(t, s.iconst(52))
    m = s.from_bits(b.sub(bits, b.shl(k, s.iconst(52))))  # in [sqrt(1/2), sqrt(2))
    e = s.int_to_float(k)
    f = m - 1.0  # exact
    u, u_lo = s.fast_two_sum(2.0, f)
    ru = 1.0 / u
    sh = f * ru
    sl = (s.fma(-sh, u, f) - sh * u_lo) * ru  # s = sh + sl = f / (2 + f)
    z = sh * sh
    tz = z * s.horner(z, K.LOG_T)
    tail = s.fma(sl, tz, sh * tz)  # s * z * T(z)
    hi, err = s.two_sum(e * K.LN2_HI, sh * 2.0)
    lo = err + (e * K.LN2_LO + (sl * 2.0 + tail))
    return s.fast_two_sum(hi, lo)


def lgamma_positive(s: Simd, x: F) -> F:
    """lgamma on lanes with TINY <= x < 1e305 (others: any finite value, result unused)."""
    big = x >= K.LG_STIRLING_MIN
    m = s.rint(x)  # below 3: 0, 1, 2 or 3
    y = x - m  # exact, |y| <= 1/2
    # lgamma(x) = P(y) -/+ log q, q a double-double: m = 0: x (x + 1); 1: x; 2: 1; 3: x - 1
    a, a_lo = s.fast_two_sum(1.0, x)
    q0, q0_e = s.two_prod(x, a)
    q0_lo = s.fma(x, a_lo, q0_e)
    q = s.select(m.eq(0.0), q0, s.select(m.eq(1.0), x, s.select(m.eq(2.0), 1.0, x - 1.0)))
    q_lo = s.select(m.eq(0.0), q0_lo, 0.0)
    sign = s.select(m < 1.5, -1.0, 1.0)

    arg = s.select(big, x, q)
    log_hi, log_lo = log_dd(s, arg)
    r = 1.0 / arg

    # P(y) = lgamma(2 + y) = c1 y + c2 y^2 + y^3 R(y)
    c1_hi, c1_lo = K.LG_C1
    c2_hi, c2_lo = K.LG_C2
    y2, y2_e = s.two_prod(y, y)
    t2, t2_e = s.two_prod(y2, c2_hi)
    t2_lo = t2_e + (y2_e * c2_hi + y2 * c2_lo)
    t1, t1_e = s.two_prod(y, c1_hi)
    t1_lo = t1_e + y * c1_lo
    t3 = y2 * (y * s.horner(y, K.LG_R))
    p_hi, p_e = s.two_sum(t1, t2)
    p_lo = p_e + ((t1_lo + t2_lo) + t3)
    lq_lo = log_lo + q_lo * r  # log(q + q_lo) = log q + q_lo / q
    sh, se = s.two_sum(p_hi, sign * log_hi)
    small = sh + (se + (p_lo + sign * lq_lo))

    # Stirling: x (log x - 1) - log(x)/2 + log(2 pi)/2 + S(1/x^2)/x
    # (near x = 3, x (log x - 1) and log(2 pi)/2 - log(x)/2 are as large as the result:
    # their sum is kept exact)
    c_hi, c_lo = K.HALF_LOG_2PI
    ah, ae = s.two_prod(x, log_hi - 1.0)  # log_hi - 1 is exact for log_hi >= 1/2
    bh, be = s.two_sum(ah, c_hi - 0.5 * log_hi)  # the difference is exact for x < 39
    tail = r * s.horner(r * r, K.LG_S)
    rest = ((be + ae) + (x * log_lo + (c_lo - 0.5 * log_lo))) + tail
    return s.select(big, bh + rest, small)


def digamma_positive(s: Simd, x: F) -> F:
    """digamma on lanes with TINY <= x < inf (others: any finite value, result unused)."""
    big = x >= K.PSI_ASYMPTOTIC_MIN
    below1 = x < 1.0
    in12 = (x >= 1.0) & (x < 2.0)
    above2 = (x >= 2.0) & ~big  # [2, 3)
    x0_hi, x0_lo = K.PSI_X0

    # y = z - x0 with z the point of [1, 2) the recurrence reaches (x + 1, x or x - 1)
    shift = s.select(above2, 1.0, 0.0)
    y = (x - shift) - s.select(below1, K.PSI_X0_M1_HI, x0_hi)
    y_lo = -x0_lo
    # G(y) = psi(x0 + 1 + y) - 1/x0 = g1 y + y^2 R(y), at y + y_lo: the linear term in
    # double-double, the rest to first order in y_lo (y_lo y (2 R + y R') is ~0.2 ulp)
    g1_hi, g1_lo = K.PSI_G1
    g, g_e = s.two_prod(y, g1_hi)
    r = s.horner(y, K.PSI_R)
    dr = s.horner(y, [k * c for k, c in enumerate(K.PSI_R[:4])][1:])  # R'(y), enough for the y_lo term
    g_lo = (g_e + (g1_hi * y_lo + y * g1_lo)) + ((y * y) * r + (y * y_lo) * (2.0 * r + y * dr))

    # the fraction n / d of each region, as double-doubles
    n0, n0_lo = s.two_sum(x * 2.0, 1.0)  # below 1: (2x + 1) / (x (x + 1))
    a, a_lo = s.fast_two_sum(1.0, x)
    d0, d0_e = s.two_prod(x, a)
    d0_lo = s.fma(x, a_lo, d0_e)
    d1, d1_e = s.two_prod(x, x0_hi)  # [1, 2): y / (x0 x)
    d1_lo = s.fma(x, x0_lo, d1_e)

    def pick(v0, v1, v2, v3):
        return s.select(below1, v0, s.select(in12, v1, s.select(above2, v2, v3)))

    n_hi = pick(n0, y, 0.0, 1.0)  # [2, 3): no fraction; x >= 3: 1 / x
    n_lo = pick(n0_lo, y_lo, 0.0, 0.0)
    d_hi = pick(d0, d1, 1.0, x)
    d_lo = pick(d0_lo, d1_lo, 0.0, 0.0)
    rd = 1.0 / d_hi
    q = n_hi * rd
    q_lo = (s.fma(-q, d_hi, n_hi) + (n_lo - q * d_lo)) * rd

    sign = s.select(below1, -1.0, 1.0)
    inv_x0_hi, inv_x0_lo = K.PSI_INV_X0
    k_hi = s.select(in12, 0.0, inv_x0_hi)
    k_lo = s.select(in12, 0.0, inv_x0_lo)
    s1, s1_e = s.two_sum(g, k_hi)
    s2, s2_e = s.two_sum(s1, sign * q)
    small = s2 + ((s2_e + s1_e) + ((g_lo + k_lo) + sign * q_lo))

    # x >= 3: log x - w/2 - w^2 A(w^2), w = 1/x = q + q_lo
    log_hi, log_lo = log_dd(s, s.select(big, x, 3.0))
    w2 = q * q
    lh, le = s.two_sum(log_hi, -0.5 * q)
    large = lh + ((le + (log_lo - 0.5 * q_lo)) - w2 * s.horner(w2, K.PSI_A))
    return s.select(big, large, small)


def trigamma_positive(s: Simd, x: F) -> F:
    """trigamma on lanes with 2^-500 <= x < inf (others: any finite value, result unused)."""
    big = x >= K.TRI_ASYMPTOTIC_MIN
    below1 = x < 1.0
    in12 = (x >= 1.0) & (x < 2.0)
    above2 = (x >= 2.0) & ~big  # [2, 3)
    # base: psi1(2.5 + t), t = z - 2.5 for z = x + 2, x + 1 or x in [2, 3) (exact but below
    # 1/4, where the recurrence's 1/x^2 dominates), plus the recurrence's 1/x^2 (+ 1/(x+1)^2)
    t = x - s.select(below1, 0.5, s.select(in12, 1.5, 2.5))
    b0_hi, b0_lo = K.TRI_B0
    t1, t1_e = s.two_prod(t, K.TRI_Q[0])
    base, base_e = s.two_sum(b0_hi, t1)
    base_lo = (base_e + (b0_lo + t1_e)) + (t * t) * s.horner(t, K.TRI_Q[1:])

    # the fraction n / d, double-doubles: below 1 (x^2 + (x+1)^2) / (x (x+1))^2, [1, 2) 1/x^2,
    # x >= 3: 1/x (w)
    a, a_lo = s.fast_two_sum(1.0, x)
    xx, xx_e = s.two_prod(x, x)
    aa, aa_e = s.two_prod(a, a)
    n0, n0_e = s.two_sum(xx, aa)
    n0_lo = n0_e + ((xx_e + aa_e) + 2.0 * a * a_lo)
    p, p_e = s.two_prod(x, a)
    p_lo = s.fma(x, a_lo, p_e)
    d0, d0_e = s.two_prod(p, p)
    d0_lo = d0_e + 2.0 * p * p_lo

    def pick(v0, v1, v2, v3):
        return s.select(below1, v0, s.select(in12, v1, s.select(above2, v2, v3)))

    n_hi = pick(n0, 1.0, 0.0, 1.0)
    n_lo = pick(n0_lo, 0.0, 0.0, 0.0)
    d_hi = pick(d0, xx, 1.0, x)
    d_lo = pick(d0_lo, xx_e, 0.0, 0.0)
    rd = 1.0 / d_hi
    q = n_hi * rd
    q_lo = (s.fma(-q, d_hi, n_hi) + (n_lo - q * d_lo)) * rd

    sh, se = s.two_sum(base, q)
    small = sh + (se + (base_lo + q_lo))
    # x >= 3: w + w^2/2 + w^3 A(w^2)
    w2, w2_e = s.two_prod(q, q)
    large = q + ((q_lo + 0.5 * w2) + ((0.5 * w2_e + q * q_lo) + (q * w2) * s.horner(w2, K.TRI_A)))
    return s.select(big, large, small)


def _pi_cot_pi(s: Simd, x: F) -> tuple[F, F]:
    """(pi cot(pi x), x - rint(x)): the reduction is exact, so the result is accurate."""
    r = x - s.rint(x)
    t = r * r
    return s.horner(t, K.COSPI_C) / (r * s.horner(t, K.SINPI_S)), r


# -- the vector functions ------------------------------------------------------------------


def _widen(s: Simd, x: ir.Value) -> tuple[Simd, F]:
    """The float64 view of a float32 vector (and the Simd of float64 vectors)."""
    if isinstance(s.fty, ir.DoubleType):
        return s, F(s, x)
    d = Simd(s.b, ir.DoubleType(), s.lanes)
    return d, F(d, s.b.fpext(x, d.ty))


def _narrow(s: Simd, v: F) -> ir.Value:
    return v.v if isinstance(s.fty, ir.DoubleType) else s.b.fptrunc(v.v, s.ty)


def _scalar_libm(module: ir.Module, name: str, fty) -> ir.Function:
    """glibc's ``lgamma_r``-style function: (x, int *sign) -> result."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(fty, [fty, ir.IntType(32).as_pointer()]), name)
    return fn


def build_lgamma(fn: ir.Function, dtype: str):
    """Body of the vector lgamma ``fn`` (<N x dtype> -> <N x dtype>)."""
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    vty = fn.function_type.return_type
    s = Simd(b, vty.element, vty.count)
    sign_slot = b.alloca(ir.IntType(32))
    d, x = _widen(s, fn.args[0])
    ok = (x >= TINY) & (x < LGAMMA_MAX[dtype])
    res = _narrow(s, lgamma_positive(d, d.select(ok, x, 2.0)))
    bad = b.not_(ok.v)
    fast_block = b.block
    with b.if_then(d.any(~ok), likely=False):
        # out-of-domain lanes: the scalar libm function, lane by lane
        libm = _scalar_libm(b.module, "lgammaf_r" if dtype == "float32" else "lgamma_r", s.fty)
        acc = res
        for lane in range(s.lanes):
            idx = ir.IntType(32)(lane)
            before = b.block
            with b.if_then(b.extract_element(bad, idx)):
                val = b.call(libm, [b.extract_element(fn.args[0], idx), sign_slot])
                patched = b.insert_element(acc, val, idx)
                patched_block = b.block
            merged = b.phi(vty)
            merged.add_incoming(acc, before)
            merged.add_incoming(patched, patched_block)
            acc = merged
        slow_block = b.block
    out = b.phi(vty)
    out.add_incoming(res, fast_block)
    out.add_incoming(acc, slow_block)
    b.ret(out)


def build_digamma(fn: ir.Function, dtype: str):
    """Body of the vector digamma ``fn`` (<N x dtype> -> <N x dtype>)."""
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    vty = fn.function_type.return_type
    s = Simd(b, vty.element, vty.count)
    d, x = _widen(s, fn.args[0])
    neg = x < 0.0
    u = d.select(neg, 1.0 - x, x)  # reflection: psi(x) = psi(1 - x) - pi cot(pi x)
    ok = (u >= TINY) & (u < float("inf"))
    res = digamma_positive(d, d.select(ok, u, 2.0))
    res_v = _narrow(s, res)
    fast_block = b.block
    plain = (x >= TINY) & (x < float("inf"))
    with b.if_then(d.any(~plain), likely=False):
        pi_cot, r = _pi_cot_pi(d, d.select(neg, x, -0.5))
        fixed = d.select(neg, res - pi_cot, res)
        fixed = d.select(neg & r.eq(0.0), float("nan"), fixed)  # poles: negative integers
        tiny = d.fabs(x) < TINY  # +-0 and subnormals: -1/x - gamma (psi(+0) = -inf, psi(-0) = inf)
        fixed = d.select(tiny, (-1.0 / x) - K.EULER, fixed)
        fixed = d.select(x.eq(float("inf")), float("inf"), fixed)
        fixed = d.select(x.eq(float("-inf")), float("nan"), fixed)
        fixed = d.select(x.isnan(), x, fixed)  # the input NaN itself, as scipy
        fixed_v = _narrow(s, fixed)
        slow_block = b.block
    out = b.phi(vty)
    out.add_incoming(res_v, fast_block)
    out.add_incoming(fixed_v, slow_block)
    b.ret(out)


TRI_TINY = 2.0**-500  # below: 1/x^2 from the special-value branch (x^2 would underflow)


def build_trigamma(fn: ir.Function, dtype: str):
    """Body of the vector trigamma ``fn`` (<N x dtype> -> <N x dtype>)."""
    entry = fn.append_basic_block("entry")
    b = ir.IRBuilder(entry)
    vty = fn.function_type.return_type
    s = Simd(b, vty.element, vty.count)
    d, x = _widen(s, fn.args[0])
    neg = x < 0.0
    u = d.select(neg, 1.0 - x, x)  # reflection: psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x)
    ok = (u >= TRI_TINY) & (u < float("inf"))
    res = trigamma_positive(d, d.select(ok, u, 2.0))
    res_v = _narrow(s, res)
    fast_block = b.block
    plain = (x >= TRI_TINY) & (x < float("inf"))
    with b.if_then(d.any(~plain), likely=False):
        # reflection: pi^2 / sin^2(pi r) = 1 / (r S(r^2))^2, r = x - rint(x) exact, S in
        # double-double around its leading 1, so the term is good to a fraction of an ulp
        r = x - d.rint(x)
        sv, sv_lo = d.fast_two_sum(1.0, (r * r) * d.horner(r * r, K.SINPI_S[1:]))
        v, v_e = d.two_prod(r, sv)
        v_lo = d.fma(r, sv_lo, v_e)
        vv, vv_e = d.two_prod(v, v)
        vv_lo = vv_e + 2.0 * v * v_lo
        inv_vv = 1.0 / vv
        refl = inv_vv - (res + (d.fma(-inv_vv, vv, 1.0) - inv_vv * vv_lo) * (-inv_vv))
        fixed = d.select(neg, d.select(vv.eq(0.0), float("inf"), refl), res)  # poles: +inf, as stock
        inv = 1.0 / x
        inv_lo = d.fma(-inv, x, 1.0) * inv
        sq, sq_e = d.two_prod(inv, inv)
        tiny = d.fabs(x) < TRI_TINY  # +-0, subnormals and tiny: 1/x^2 (+inf at +-0)
        fixed = d.select(tiny, d.select(sq < float("inf"), sq + (sq_e + 2.0 * inv * inv_lo), float("inf")), fixed)
        fixed = d.select(x.eq(float("inf")), 0.0, fixed)
        fixed = d.select(x.eq(float("-inf")), float("inf"), fixed)
        fixed = d.select(x.isnan(), x, fixed)
        fixed_v = _narrow(s, fixed)
        slow_block = b.block
    out = b.phi(vty)
    out.add_incoming(res_v, fast_block)
    out.add_incoming(fixed_v, slow_block)
    b.ret(out)


# name -> body builder; vector_math declares the function and calls this to fill it in
VECTOR_FUNCTIONS = {"lgamma": build_lgamma, "digamma": build_digamma, "trigamma": build_trigamma}
