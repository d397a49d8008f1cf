"""Derive the constants of the special-function vector formulas with mpmath.

    .venv/bin/python scripts/derive_coefficients.py          # print the module
    .venv/bin/python scripts/derive_coefficients.py --write  # rewrite it in place

writes ``ptnumba_codegen/lowering/vecmath/special_coefficients.py``. Every polynomial is a
Chebyshev fit (``mpmath.chebyfit``, near-minimax in absolute error) of a function the
formulas in ``lowering/special_functions.py`` evaluate; the script prints each fit's error
after its coefficients are rounded to float64, measured on a fine grid. The number of
coefficients is the smallest whose rounded error is negligible next to one ulp of the
final result (see the notes printed with each fit).
"""

from __future__ import annotations

import pathlib
import sys

import mpmath as mp

mp.mp.dps = 50
OUT = pathlib.Path(__file__).resolve().parents[1] / "ptnumba_codegen" / "lowering" / "vecmath" / "special_coefficients.py"


def split(v) -> tuple[float, float]:
    """``v`` as an unevaluated sum hi + lo of two float64 (hi = round(v))."""
    hi = float(v)
    return hi, float(v - mp.mpf(hi))


def fit(name, f, a, b, n, weight=lambda t: 1):
    """Coefficients (ascending) of a degree n-1 fit of f on [a, b], rounded to float64."""
    coeffs = [float(c) for c in mp.chebyfit(f, [a, b], n, asc=True)]
    worst = mp.mpf(0)
    for i in range(2001):
        t = a + (b - a) * mp.mpf(i) / 2000
        err = abs(mp.polyval([mp.mpf(c) for c in coeffs[::-1]], t) - f(t)) * weight(t)
        worst = max(worst, err)
    print(f"# {name}: {n} coefficients on [{mp.nstr(a, 6)}, {mp.nstr(b, 6)}], weighted error {mp.nstr(worst, 3)}",
          file=sys.stderr)
    return tuple(coeffs)


def removable(f, at0):
    """f with its removable singularity at 0 filled in by ``at0(t)`` (a short Taylor series)."""
    return lambda t: at0(t) if abs(t) < mp.mpf("1e-15") else f(t)


ULP = mp.mpf(2) ** -53  # relative size of half an ulp


def derive() -> dict[str, object]:
    c: dict[str, object] = {}

    # -- log: x = 2^k m, m in [sqrt(1/2), sqrt(2)); log m = 2s + s*z*T(z), s = (m-1)/(m+1), z = s^2
    ln2 = mp.log(2)
    ln2_hi = float(mp.floor(ln2 * 2**42) / 2**42)  # 42 bits: k * LN2_HI is exact for |k| < 2^11
    c["LN2_HI"], c["LN2_LO"] = ln2_hi, float(ln2 - ln2_hi)
    c["SQRT_HALF_BITS"] = 0x3FE6A09E667F3BCD  # float64 bits of sqrt(1/2) (rounded down)
    s_max = (mp.sqrt(2) - 1) / (mp.sqrt(2) + 1)
    tz = removable(lambda z: (2 * mp.atanh(mp.sqrt(z)) / mp.sqrt(z) - 2) / z, lambda z: mp.mpf(2) / 3 + 2 * z / 5)
    # weight: the term s*z*T(z) relative to log m ~ 2s, in half-ulps
    c["LOG_T"] = fit("log T(z)", tz, 0, s_max**2 * (1 + mp.mpf("1e-6")), 8, weight=lambda z: z / 2 / ULP)

    # -- lgamma --------------------------------------------------------------------------
    # base: lgamma(2 + y) = c1 y + c2 y^2 + y^3 R(y), |y| <= 1/2 (c1, c2 as double-doubles)
    c1 = 1 - mp.euler
    c2 = (mp.zeta(2) - 1) / 2
    c["LG_C1"], c["LG_C2"] = split(c1), split(c2)
    r_lg = removable(
        lambda y: (mp.loggamma(2 + y) - c1 * y - c2 * y * y) / y**3,
        lambda y: -(mp.zeta(3) - 1) / 3 + y * (mp.zeta(4) - 1) / 4,
    )
    # weight: y^3 dR relative to the smallest result using this y (|lgamma| >= 0.4|y| or 0.12)
    c["LG_R"] = fit("lgamma R(y)", r_lg, -0.5, 0.5, 18,
                    weight=lambda y: abs(y) ** 3 / max(mp.mpf("0.4") * abs(y), mp.mpf("0.12")) / ULP)
    # Stirling, x >= 3: lgamma(x) = (x - 1/2) log x - x + log(2 pi)/2 + S(w^2)/x, w = 1/x
    # (a minimax fit in w^2 converges down to x = 3, where the recurrence would need products)
    c["LG_STIRLING_MIN"] = 3.0
    c["HALF_LOG_2PI"] = split(mp.log(2 * mp.pi) / 2)
    s_lg = removable(
        lambda z: (mp.loggamma(1 / mp.sqrt(z)) - ((1 / mp.sqrt(z) - mp.mpf(0.5)) * mp.log(1 / mp.sqrt(z))
                                                  - 1 / mp.sqrt(z) + mp.log(2 * mp.pi) / 2)) / mp.sqrt(z),
        lambda z: mp.mpf(1) / 12 - z / 360,
    )
    c["LG_S"] = fit("lgamma Stirling S(z)", s_lg, 0, mp.mpf(1) / 9, 13,
                    weight=lambda z: z and mp.sqrt(z) / mp.loggamma(1 / mp.sqrt(z)) / ULP)

    # -- digamma -------------------------------------------------------------------------
    x0 = mp.findroot(mp.digamma, mp.mpf("1.4616321449683623"))
    c["PSI_X0"] = split(x0)
    c["PSI_X0_M1_HI"] = float(mp.mpf(split(x0)[0]) - 1)  # exact: hi(x0) - 1
    c["PSI_INV_X0"] = split(1 / x0)
    # base: G(y) = psi(x0 + 1 + y) - 1/x0 = g1 y + y^2 R(y), y in [1 - x0, 2 - x0]
    g1 = mp.psi(1, x0 + 1)
    c["PSI_G1"] = split(g1)
    r_psi = removable(
        lambda y: (mp.digamma(x0 + 1 + y) - 1 / x0 - g1 * y) / y**2,
        lambda y: mp.psi(2, x0 + 1) / 2 + y * mp.psi(3, x0 + 1) / 6,
    )
    # weight: y^2 dR relative to |psi(x0 + y)| ~ 0.97 |y|
    c["PSI_R"] = fit("digamma R(y)", r_psi, 1 - x0 - mp.mpf("1e-9"), 2 - x0 + mp.mpf("1e-9"), 17,
                     weight=lambda y: abs(y) / mp.mpf("0.96") / ULP)
    # asymptotic, x >= 3: psi(x) = log x - w/2 - z A(z), w = 1/x, z = w^2
    c["PSI_ASYMPTOTIC_MIN"] = 3.0
    a_psi = removable(
        lambda z: (mp.log(1 / mp.sqrt(z)) - mp.sqrt(z) / 2 - mp.digamma(1 / mp.sqrt(z))) / z,
        lambda z: mp.mpf(1) / 12 - z / 120,
    )
    c["PSI_A"] = fit("digamma asymptotic A(z)", a_psi, 0, mp.mpf(1) / 9, 14,
                     weight=lambda z: z and z / mp.digamma(1 / mp.sqrt(z)) / ULP)
    c["EULER"] = float(mp.euler)

    # -- trigamma ------------------------------------------------------------------------
    # base: psi1(2.5 + t) = b0 + t Q(t), |t| <= 1/2 (b0 as a double-double)
    b0 = mp.psi(1, mp.mpf(5) / 2)
    c["TRI_B0"] = split(b0)
    q_tri = removable(lambda t: (mp.psi(1, mp.mpf(5) / 2 + t) - b0) / t, lambda t: mp.psi(2, mp.mpf(5) / 2))
    c["TRI_Q"] = fit("trigamma Q(t)", q_tri, -0.5, 0.5, 19,
                     weight=lambda t: abs(t) / mp.psi(1, mp.mpf(5) / 2 + t) / ULP)
    # asymptotic, x >= 3: psi1(x) = w + w^2/2 + w^3 A(w^2), w = 1/x
    c["TRI_ASYMPTOTIC_MIN"] = 3.0
    a_tri = removable(lambda z: (mp.psi(1, 1 / mp.sqrt(z)) - mp.sqrt(z) - z / 2) / mp.sqrt(z) ** 3,
                      lambda z: mp.mpf(1) / 6 - z / 30)
    c["TRI_A"] = fit("trigamma asymptotic A(z)", a_tri, 0, mp.mpf(1) / 9, 14,
                     weight=lambda z: z and mp.sqrt(z) ** 3 / mp.psi(1, 1 / mp.sqrt(z)) / ULP)
    # reflection: pi cot(pi r) = C(r^2) / (r S(r^2)), |r| <= 1/2,
    # S(t) = sin(pi r) / (pi r), C(t) = cos(pi r) with t = r^2
    sin_s = removable(lambda t: mp.sin(mp.pi * mp.sqrt(t)) / (mp.pi * mp.sqrt(t)), lambda t: 1 - mp.pi**2 * t / 6)
    # (the reflection is accurate in absolute terms only: weights relative to |S| >= 2/pi, |C| <= 1)
    c["SINPI_S"] = fit("sin(pi r)/(pi r)", sin_s, 0, mp.mpf(1) / 4, 12, weight=lambda t: mp.pi / 2 / ULP)
    c["COSPI_C"] = fit("cos(pi r)", lambda t: mp.cos(mp.pi * mp.sqrt(t)), 0, mp.mpf(1) / 4, 12,
                       weight=lambda t: 1 / ULP)
    return c


def render(c: dict[str, object]) -> str:
    lines = [
        '"""Constants of the special-function vector formulas (``special_functions.py``).',
        "",
        "Generated by ``scripts/derive_coefficients.py`` (mpmath); do not edit by hand. Polynomial",
        "coefficients are in ascending order; pairs are double-doubles (hi, lo).",
        '"""',
        "",
        "# fmt: off",
    ]
    for k, v in c.items():
        if isinstance(v, tuple):
            body = ",\n".join(f"    {x!r}" for x in v)
            lines.append(f"{k} = (\n{body},\n)")
        elif isinstance(v, int):
            lines.append(f"{k} = {v:#x}")
        else:
            lines.append(f"{k} = {v!r}")
    lines.append("# fmt: on")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = render(derive())
    if "--write" in sys.argv:
        OUT.write_text(text)
        print(f"wrote {OUT}", file=sys.stderr)
    else:
        print(text)
