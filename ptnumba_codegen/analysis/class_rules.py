"""Decisions that need only a value's class: which pows a cone may compute by class
(pure Python, no numba).

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
row gives its representative, the band where libm's pow is called, how a band on the
output maps back to one on x (`ClassRule.preimage`), and why. A row applies only where
the policy lets pow's value be off by one ulp outside decisions (the representative's
value reaches every reader of the pow: ``max_ulp >= 1`` for its natural class; `default`
and `as_written` allow 4, `strict` none) -- its class, and so every decision and every
zero/inf/NaN pattern derived from it, is libm's. Tests: `tests/test_class_rules.py`
(every special value, 10^5 doubles around every band edge and threshold, each against
glibc's pow, and the decisions of whole graphs against the reference).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

CLASS = "class"
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
    representative: str  # how the class is computed outside the band ("reciprocal": 1/x)
    band: Bands  # |x| where libm's pow is called
    preimage: Callable[[Bands], Bands]  # output bands -> |x| bands
    why: str

    def input_bands(self, out_bands: Bands) -> Bands:
        """|x| where the lowering calls libm: its own band and the output bands' preimage."""
        return merge_bands((*self.band, *self.preimage(out_bands)))


CLASS_RULES: dict[tuple[float, str], ClassRule] = {
    (-1.0, "float64"): ClassRule(
        exponent=-1.0,
        dtype="float64",
        representative="reciprocal",
        band=((DENORM_MIN64, TINY64),),
        preimage=_reciprocal_preimage,
        why=(
            "pow(x, -1) and 1/x have the same class for every x outside 0 < |x| <= 2^-1022: "
            "pow(+-0, -1) = +-inf, pow(+-inf, -1) = +-0, pow(NaN, -1) = NaN (C99 F.9.4.4, "
            "as 1/x); for 2^-1022 <= |x| <= DBL_MAX, 1/|x| lies in [2^-1024, 2^1022], "
            "2^50 subnormal steps above 0 and a factor 2 below overflow, and glibc's pow is "
            "within one ulp of it with x's sign (an odd exponent): nonzero finite, as 1/x. "
            "Subnormal x: 1/x overflows near 2^-1024 and glibc's rounding decides: libm's pow"
        ),
    ),
}


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
    "CLASS_RULES",
    "ClassRule",
    "class_req",
    "class_rule",
    "decided_by_class",
    "describe_bands",
    "exact_bands",
    "is_class_req",
    "merge_bands",
]
