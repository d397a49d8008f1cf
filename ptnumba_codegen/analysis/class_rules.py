"""Decisions that need only a value's class: which pows (and quotients by an exp) a cone
may compute by class (pure Python, no numba).

A comparison with 0 or +-inf, ``isnan``, ``isinf`` (and a pow of such a value, below) do
not need a value's bits, only its *class*: NaN, -inf, negative finite, -0, +0, positive
finite, +inf. ``pow(x, -1) > 0`` is true exactly for x in [+0, +inf) whatever pow's last
bit is. An as-written copy computes ``pow(x, c)`` with libm's pow (`PowAsWritten`: LLVM
may not fold it into ``1 / x``, whose bits differ from glibc's at some x), and a vector of
glibc's pow costs a multiple of a division. Where every reader of the pow asks only for
its class, the class is that of a cheap *representative* for every x but a narrow band of
magnitudes near the overflow or underflow threshold, where libm's rounding decides (1/x
and glibc's pow(x, -1) overflow at slightly different subnormal x); there the lowering
calls libm's pow itself.

Requirement (what `classify.analyze` propagates, beside `robust`'s):

* ``("class", bands)``: the value's class, and its exact bits wherever its magnitude lies
  in one of ``bands`` (closed intervals ``(lo, hi)`` of |value|): a reader that calls
  libm in a band needs exact operands there.

`CLASS_RULES` maps (exponent, dtype) to the row for ``PowAsWritten(x, exponent)``; each
row gives its representative (``1/x``, ``1/sqrt(x)`` corrected at -0 and -inf,
``1/(x*x)``), the band where libm's pow is called, how a band on the output maps back to
one on x (`ClassRule.preimage`), the representative's distance from libm's pow outside the
band (`ClassRule.max_ulp`), and why. A row applies only where the policy lets pow's value
be that far off outside decisions (the representative's value reaches every reader of the
pow: ``max_ulp >= row.max_ulp`` for its natural class; `default` and `as_written` allow 4,
`strict` none) -- its class, and so every decision and every zero/inf/NaN pattern derived
from it, is libm's.

`QUOTIENT_RULES`: ``a / exp(x)`` whose every reader, transitively, decides by class (the
exp read by nothing else, the quotient's value going nowhere: `CLASS_ONLY` marks kernel
outputs read so downstream) is ``copysign(1, a)`` where a's exponent and x keep it far from
every threshold and band, computed as written elsewhere: no exp (`QuotientRule`; tests:
`tests/test_class_quotient.py`).

`CLASS_READERS`: strict ops that pass a class requirement on as class requirements on
their operands (``sign(x)``; ``a * sign(z)``), so that a pow read through them is still
read by class. Tests: `tests/test_class_rules.py`
(every special value, 10^5 doubles around every band edge and threshold, each against
glibc's pow, and the decisions of whole graphs against the reference).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

CLASS = "class"
# a mark among a kernel's output requirements (never a requirement itself): every reader
# of the output, in every kernel downstream, decides by its class alone
# (`whole_graph.class_only_variables`), so its value may be any of that class
CLASS_ONLY = ("class only",)
INF = math.inf
# float64: the smallest normal, the smallest subnormal
TINY64 = 2.0**-1022
DENORM_MIN64 = 2.0**-1074

Bands = tuple[tuple[float, float], ...]


def merge_bands(bands: Iterable[tuple[float, float]]) -> Bands:
    """Sorted, overlapping intervals merged."""
    out: list[list[float]] = []
    for lo, hi in sorted((float(a), float(b)) for a, b in bands):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((lo, hi) for lo, hi in out)


def class_req(bands: Iterable[tuple[float, float]] = ()) -> tuple:
    """The requirement: the class, and the bits where |value| lies in ``bands``."""
    return (CLASS, merge_bands(bands))


def is_class_req(req) -> bool:
    return isinstance(req, tuple) and len(req) == 2 and req[0] == CLASS


def decided_by_class(req) -> bool:
    """Whether a value's class decides ``req``: its NaN pattern, a comparison with 0 or
    +-inf (+0 and -0 compare equal), or a class requirement."""
    if req == ("nan",) or is_class_req(req):
        return True
    return isinstance(req, tuple) and len(req) == 3 and req[0] == "cmp" and req[2] in (0.0, INF, -INF)


def exact_bands(reqs) -> Bands:
    """The bands where ``reqs`` (all decided by class) ask for exact bits."""
    return merge_bands(b for r in reqs if is_class_req(r) for b in r[1])


def _power_bound(base: float, p: float) -> float:
    """``base ** p`` (base > 0), +inf where it overflows or base is 0."""
    if base == 0.0:
        return INF
    try:
        return math.pow(base, p)
    except OverflowError:
        return INF


def _power_preimage(exponent: float) -> Callable[[Bands], Bands]:
    """|x| where |pow(x, exponent)| (exponent < 0) may lie in [lo, hi]: libm's pow is within
    one ulp of |x|^exponent (of the subnormal grid below 2^-1022), so that lies in [lo/2,
    2 hi] and |x| in [(2 hi)^(1/exponent), (lo/2)^(1/exponent)], widened by another factor
    2 on each side (math.pow's own rounding; a wider band only calls libm more often)."""

    def preimage(bands: Bands) -> Bands:
        out = []
        for lo, hi in bands:
            a = 0.0 if hi == INF else _power_bound(2.0 * hi, 1.0 / exponent) / 2.0
            b = INF if lo == 0.0 else _power_bound(lo / 2.0, 1.0 / exponent) * 2.0
            out.append((a, b))
        return merge_bands(out)

    return preimage


def _reciprocal_preimage(bands: Bands) -> Bands:
    """|x| where |pow(x, -1)| may lie in [lo, hi]: [1/(2 hi), 2/lo]. libm's pow(x, -1) is
    within one ulp of 1/|x| (and of the subnormal grid below 2^-1022), so it lies in [lo,
    hi] only if 1/|x| lies in [lo/2, 2 hi] (1/0 = inf, 1/inf = 0)."""
    out = []
    for lo, hi in bands:
        a = 0.0 if hi == INF else 1.0 / (2.0 * hi)
        b = INF if lo == 0.0 else 2.0 / lo  # 2 / 2^-1074 overflows to inf: no upper bound
        out.append((a, b))
    return merge_bands(out)


@dataclass(frozen=True)
class ClassRule:
    """``pow(x, exponent)`` in ``dtype`` computed by class (see the module docstring)."""

    exponent: float
    dtype: str
    representative: str  # how the class is computed outside the band (`REPRESENTATIVES`)
    band: Bands  # |x| where libm's pow is called
    preimage: Callable[[Bands], Bands]  # output bands -> |x| bands
    max_ulp: int  # the representative's distance from libm's pow outside the band, in ulps
    why: str

    @property
    def formula(self) -> str:
        return REPRESENTATIVES[self.representative]

    def input_bands(self, out_bands: Bands) -> Bands:
        """|x| where the lowering calls libm: its own band and the output bands' preimage."""
        return merge_bands((*self.band, *self.preimage(out_bands)))


# representative -> what it computes (`lowering.vecmath.class_calls` emits it, IEEE, no flags)
REPRESENTATIVES: dict[str, str] = {
    "reciprocal": "1/x",
    "rsqrt": "1/sqrt(x); +inf at -0, +0 at -inf",
    "inverse_square": "1/(x*x)",
}

# the thresholds of the inverse square: x*x is normal and 1/(x*x) finite and normal for
# 2^-510 < |x| < 2^510 (x*x in (2^-1020, 2^1020))
SQUARE_LOW64 = 2.0**-510
SQUARE_HIGH64 = 2.0**510

CLASS_RULES: dict[tuple[float, str], ClassRule] = {
    (-1.0, "float64"): ClassRule(
        exponent=-1.0,
        dtype="float64",
        representative="reciprocal",
        band=((DENORM_MIN64, TINY64),),
        preimage=_reciprocal_preimage,
        max_ulp=1,
        why=(
            "pow(x, -1) and 1/x have the same class for every x outside 0 < |x| <= 2^-1022: "
            "pow(+-0, -1) = +-inf, pow(+-inf, -1) = +-0, pow(NaN, -1) = NaN (C99 F.9.4.4, "
            "as 1/x); for 2^-1022 <= |x| <= DBL_MAX, 1/|x| lies in [2^-1024, 2^1022], "
            "2^50 subnormal steps above 0 and a factor 2 below overflow, and glibc's pow is "
            "within one ulp of it with x's sign (an odd exponent): nonzero finite, as 1/x. "
            "Subnormal x: 1/x overflows near 2^-1024 and glibc's rounding decides: libm's pow. "
            "1/x is correctly rounded: within one ulp of glibc's pow (< 0.52 ulp from x^-1)"
        ),
    ),
    (-0.5, "float64"): ClassRule(
        exponent=-0.5,
        dtype="float64",
        representative="rsqrt",
        band=(),
        preimage=_power_preimage(-0.5),
        max_ulp=2,
        why=(
            "pow(x, -0.5) and 1/sqrt(x) corrected at -0 and -inf have the same class for every "
            "x: C99 F.9.4.4 gives pow(+-0, -0.5) = +inf (1/sqrt(-0) = 1/-0 = -inf: corrected), "
            "pow(-inf, -0.5) = +0 (sqrt(-inf) = NaN: corrected), pow(+inf, -0.5) = +0 = 1/inf, "
            "NaN for a negative finite x (a non-integer exponent) as sqrt, NaN for NaN; for "
            "positive finite x, subnormals included, x^-0.5 lies in [2^-512, 2^537]: normal "
            "and finite, no threshold anywhere (no band). Two correctly rounded steps put "
            "1/sqrt(x) within 2^-52 of x^-0.5 relative, and glibc's pow within 0.52 ulp: two "
            "ulps apart at most"
        ),
    ),
    (-2.0, "float64"): ClassRule(
        exponent=-2.0,
        dtype="float64",
        representative="inverse_square",
        band=((DENORM_MIN64, SQUARE_LOW64), (SQUARE_HIGH64, INF)),
        preimage=_power_preimage(-2.0),
        max_ulp=2,
        why=(
            "pow(x, -2) and 1/(x*x) have the same class outside 0 < |x| <= 2^-510 and |x| >= "
            "2^510: pow(+-0, -2) = +inf = 1/(+0), pow(+-inf, -2) = +0 = 1/inf (an even "
            "exponent: no sign, as x*x), NaN for NaN; for 2^-510 < |x| < 2^510, x*x lies in "
            "(2^-1020, 2^1020), normal, and 1/(x*x) in (2^-1020, 2^1020): positive finite, "
            "as pow, and within 2^-52 relative of x^-2 (two correctly rounded steps), two "
            "ulps from glibc's pow at most. Near |x| = 2^-512 pow overflows where 1/(x*x) "
            "may not (x*x subnormal, rounded); from |x| = 2^512 x*x overflows and 1/(x*x) is "
            "0 while pow stays a positive subnormal up to |x| = 2^537.5: libm's pow in both"
        ),
    ),
}


# -- strict readers that pass a class on ---------------------------------------------------


@dataclass(frozen=True)
class ClassReader:
    """A strict op whose output's class (and its bits in given bands) follows from its
    operands' classes (and their bits in bands): a class requirement on its output is one
    on its operands', not exact operands. The op itself stays strict (IEEE, no flags: an
    ``nsz`` multiplication may flip a zero's sign, which the class tells)."""

    op: str  # the op's policy name
    # (the op names of the operands' producers, None for an input or constant; the bands
    # wanted on the output) -> a requirement per operand, or None (does not apply)
    needs: Callable[[tuple, Bands], list | None]
    why: str


def _sign_needs(producers: tuple, bands: Bands) -> list | None:
    return [class_req()] if len(producers) == 1 else None


def _sign_factor_needs(producers: tuple, bands: Bands) -> list | None:
    if len(producers) != 2 or "Sign" not in producers:
        return None
    k = producers.index("Sign")
    out = [class_req(bands), class_req(bands)]
    out[k] = class_req()
    return out


CLASS_READERS: dict[str, ClassReader] = {
    "Sign": ClassReader(
        op="Sign",
        needs=_sign_needs,
        why=(
            "sign(x) of a float x is -1, +1, a zero or NaN by x's class alone (x < 0, x > 0, "
            "x == 0, NaN): any requirement on its output, its bits included, is one on x's "
            "class"
        ),
    ),
    "Mul": ClassReader(
        op="Mul",
        needs=_sign_factor_needs,
        why=(
            "a * s with s = sign(z) (-1, +1, a zero or NaN: its class is its value): for s = "
            "+-1 the product is +-a exactly (no rounding: no threshold), its class a's with the "
            "sign flipped by s's, and |a * s| = |a| (bits of a where |a * s| lies in a band); "
            "s a zero gives a zero signed by both or NaN for an infinite a, s NaN gives NaN: "
            "a's class decides. The product stays strict: IEEE keeps a zero's sign"
        ),
    ),
}


# -- a quotient by an exp, computed by class ---------------------------------------------

LOG2E = 1.4426950408889634  # log2(e), rounded to double


@dataclass(frozen=True)
class QuotientRule:
    """``a / exp(x)`` in ``dtype``, computed by class where the exp feeds nothing else and
    the quotient's value reaches only readers that decide by class (see `quotient_rule`).

    Where ``a`` is normal, ``|x| <= x_limit`` and the magnitude estimate ``g = E - x
    log2(e)`` (``E``: a's binary exponent, so ``log2|a / exp(x)|`` lies in ``[g, g + 1]``
    up to rounding) lies in a safe interval (`safe_intervals`), the quotient is nonzero,
    finite, of a's sign and outside every band its readers want bits in: the lowering gives
    the *canonical* value ``copysign(1, a)`` of that class, no exp at all. Elsewhere (a
    zero, subnormal, infinite or NaN; |x| large; g near a threshold or a band) it computes
    ``a / exp(x)`` as written: glibc's exp, an IEEE division -- the reference's bits."""

    divisor: str  # the op name of the divisor's producer
    dtype: str
    x_limit: float  # |x| <= x_limit: glibc's exp(x) is normal and finite
    margin: float  # log2 distance kept from every threshold and band
    max_ulp: int  # budget the policy must allow the exp (its class's max_ulp; see `why`)
    why: str

    def safe_intervals(self, bands: Bands) -> Bands | None:
        """Open intervals of ``g`` where the canonical value stands for the quotient, or
        None where the canonical value itself (|q| = 1) lies near a band (the rule then
        does not apply). A division of a normal a by a normal exp(x) is nonzero finite for
        log2|q| in (-1074, 1024); around that, and around each band ``[lo, hi]`` of |q|,
        ``margin`` is kept (its error is below 1e-12: x log2(e) rounded, exp within an
        ulp, the division rounded)."""
        m = self.margin
        doubt = [(-INF, -1074.0 + m), (1024.0 - m, INF)]
        for lo, hi in bands:
            a = -INF if lo == 0.0 else math.log2(lo) - m
            b = INF if hi == INF else math.log2(hi) + m
            if a <= 0.0 <= b:  # the canonical |q| = 1 would fall in a band
                return None
            doubt.append((a, b))
        # [g, g + 1] meets a doubt interval (a, b) iff g in (a - 1, b)
        blocked = merge_bands((a - 1.0, b) for a, b in doubt)
        safe, at = [], -INF
        for a, b in blocked:
            if a > at:
                safe.append((at, a))
            at = max(at, b)
        if at < INF:
            safe.append((at, INF))
        return tuple(safe)


QUOTIENT_RULES: dict[tuple[str, str], QuotientRule] = {
    ("Exp", "float64"): QuotientRule(
        divisor="Exp",
        dtype="float64",
        x_limit=700.0,
        margin=2.0,
        max_ulp=1,
        why=(
            "for |x| <= 700 glibc's exp(x) lies in [2^-1010.1, 2^1009.9]: normal and finite "
            "(its overflow to +inf starts above 709.78, its underflow to +0 below -745.13), "
            "within an ulp of e^x; for a normal a (|a| in [2^E, 2^(E+1))) the exact quotient "
            "has log2|a / e^x| in [E - x log2(e), E + 1 - x log2(e)), and the IEEE quotient "
            "of the two doubles is within 2^-52 relative of it where normal: a nonzero finite "
            "double of a's sign wherever that interval keeps 2 (in log2) from -1074 (rounding "
            "to 0 at 2^-1075) and 1024 (overflow): its class is a's, whatever its bits. Where "
            "the interval also keeps 2 from every band of |q| a reader wants bits in, no "
            "reader asks for the bits: copysign(1, a) stands for it (its class; |1| lies in "
            "no band, and the class rows and readers map it to +-1 again). Everywhere else "
            "(a zero, subnormal, infinite or NaN, |x| > 700 or NaN, the estimate near a "
            "threshold or a band) the quotient is computed as written: glibc's exp and an "
            "IEEE division, the reference's bits. The canonical value is no approximation of "
            "the quotient: the rule applies only where the exp feeds only this division and "
            "every reader of the quotient, transitively, decides by class (comparisons with "
            "0 or +-inf, isnan, isinf, sign, the class rows and readers), never where a value "
            "leaves the kernel; a policy that keeps exp within no ulp (strict) keeps it as "
            "written"
        ),
    ),
}

# the row of the exp folded into a `QuotientRule` division: its value is x, read only there
FOLDED_EXP = "folded exp"


def quotient_rule(divisor_op: str | None, dtypes: tuple) -> QuotientRule | None:
    """The row for ``a / d`` with ``d`` produced by ``divisor_op`` (None: an input or
    constant), ``dtypes``: (a, d, x, quotient) -- one float type throughout -- or None."""
    if divisor_op is None or len(set(dtypes)) != 1:
        return None
    return QUOTIENT_RULES.get((divisor_op, str(dtypes[0])))


def class_reader_needs(op_name: str, producers: tuple, bands: Bands) -> list | None:
    """Requirements per operand of a strict ``op_name`` whose output is wanted by class
    (exact bits where |output| lies in ``bands``), or None (`CLASS_READERS`)."""
    reader = CLASS_READERS.get(op_name)
    return None if reader is None else reader.needs(tuple(producers), bands)


def class_rule(op, operands, out_dtype: str) -> ClassRule | None:
    """The row for the instruction ``op(*operands)`` (``operands``: each input's constant
    value, None where computed), or None. Only a pow whose constants reach libm as values
    (`as_written.libm_operands.PowAsWritten`: ``constants_reach_libm``) of a computed base and a
    constant exponent: a plain pow of a constant exponent is what LLVM folds it to in the
    reference too (``pow(x, -1.0)`` is ``1 / x`` in a stock strict kernel)."""
    if not getattr(type(op), "constants_reach_libm", False) or len(operands) != 2:
        return None
    base, exponent = operands
    if base is not None or exponent is None:
        return None
    try:
        c = float(exponent)
    except (TypeError, ValueError):
        return None
    return CLASS_RULES.get((c, str(out_dtype)))


def describe_bands(bands: Bands) -> str:
    def fmt(v):
        if v in (0.0, INF):
            return "0" if v == 0.0 else "inf"
        m, e = math.frexp(v)
        return f"2^{e - 1}" if m == 0.5 else f"{v:.3g}"

    return " or ".join(f"[{fmt(lo)}, {fmt(hi)}]" for lo, hi in bands) or "nowhere"


__all__ = [
    "CLASS",
    "CLASS_ONLY",
    "CLASS_READERS",
    "CLASS_RULES",
    "FOLDED_EXP",
    "LOG2E",
    "QUOTIENT_RULES",
    "QuotientRule",
    "REPRESENTATIVES",
    "class_reader_needs",
    "ClassRule",
    "class_req",
    "class_rule",
    "decided_by_class",
    "describe_bands",
    "exact_bands",
    "is_class_req",
    "merge_bands",
    "quotient_rule",
]
