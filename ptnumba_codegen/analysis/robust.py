"""Decisions that cannot depend on a few ulps: which (predicate, producer) pairs decide
identically under the budgeted lowering (pure Python, no numba).

A decision rarely needs the exact *value* of its input; it needs the exact outcome of a
*predicate* on it. ``x >= 0`` needs to know whether x >= 0, ``isnan(x)`` whether x is
NaN. When the producer of x is a function whose every allowed implementation (libm, the
libmvec variant within the policy's budget, the vector formula) gives that predicate the
same outcome for every input, the producer need not be strict: only what the predicate
then asks of *its* inputs must be. ``sigmoid(v) >= 0`` is true for every v but NaN,
under any implementation that stays in [0, 1] and is NaN exactly for NaN, so sigmoid may
be vectorized and only v's NaN pattern must be exact.

Requirements on a value (what the analysis propagates backward):

* ``EXACT``: the value itself, bit for bit as strict computes it;
* ``("cmp", op, c)``: the outcome of ``value op c`` for a constant c, op in lt le gt ge eq ne;
* ``("nan",)``: whether the value is NaN.

`RULES` maps a producer op class to the rule that translates a predicate on its output
into requirements on its inputs, or says it cannot (``None``: the producer stays strict).
Every row is backed by tests at its boundaries (``tests/test_robust.py``): special values,
the overflow/underflow thresholds of libm and of the vector variants, and random inputs.

A rule assumes the producer keeps IEEE NaN and infinity semantics: it is only used when
the producer's flags under the policy include neither ``nnan`` nor ``ninf``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

from pytensor.scalar import basic as ps
from pytensor.scalar import math as psm

from ptnumba_codegen.analysis.class_rules import CLASS_ONLY, describe_bands, is_class_req

EXACT = "exact"
NAN = ("nan",)
COMPARISONS: dict[str, Callable] = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt,
    "ge": operator.ge, "eq": operator.eq, "ne": operator.ne,
}  # fmt: skip
# the comparison with its operands swapped: c < v  <=>  v > c
SWAPPED = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
# decision op class -> the comparison it makes
DECISION_COMPARISONS: dict[type, str] = {
    ps.LT: "lt", ps.LE: "le", ps.GT: "gt", ps.GE: "ge", ps.EQ: "eq", ps.NEQ: "ne",
}  # fmt: skip

# Flags under which IEEE NaN/infinity semantics no longer hold: rules do not apply.
BREAKING_FLAGS = frozenset({"nnan", "ninf"})


def cmp(op: str, c: float):
    """The canonical predicate ``value op c`` (comparisons with +-inf rewritten as eq/ne)."""
    c = float(c)
    if c == math.inf:
        op = {"ge": "eq", "lt": "ne", "gt": None, "le": None}.get(op, op)
    elif c == -math.inf:
        op = {"le": "eq", "gt": "ne", "lt": None, "ge": None}.get(op, op)
    if op is None:  # v > inf, v <= inf, ...: decided by the NaN pattern alone
        return NAN
    return ("cmp", op, c)


def comparison_needs(op_class: type, operands: list[float | None]) -> list[object] | None:
    """Requirements a comparison puts on its two operands (a float for a constant operand,
    None for a computed one), or None when both are computed (each must be EXACT)."""
    name = DECISION_COMPARISONS[op_class]
    left, right = operands
    if left is None and right is not None:
        return [cmp(name, right), None]
    if right is None and left is not None:
        return [None, cmp(SWAPPED[name], left)]
    return None


# -- the table --------------------------------------------------------------------------

# Functions whose every implementation stays in [lo, hi] (inclusive: rounding reaches the
# ends) and is NaN exactly where the input is NaN.
RANGES: dict[type, tuple[float, float, str]] = {
    psm.Sigmoid: (0.0, 1.0, "1/(1+exp(-x)): exp >= 0 gives a denominator >= 1"),
    ps.Exp: (0.0, math.inf, "exp underflows to +0 and overflows to +inf, never below 0"),
    psm.Softplus: (0.0, math.inf, "log1p(exp(x)), and the vector form max(x,0)+log1p(exp(-|x|)), are >= 0"),
    ps.Tanh: (-1.0, 1.0, "libm and libmvec tanh saturate at +-1"),
    psm.Erf: (-1.0, 1.0, "erf saturates at +-1"),
    psm.Erfc: (0.0, 2.0, "erfc saturates at 0 and 2"),
}


def _constant_on(pred, lo: float, hi: float) -> bool:
    """Whether ``value op c`` has one outcome for every value in [lo, hi]."""
    _, op, c = pred
    if op in ("eq", "ne"):
        return not (lo <= c <= hi)
    test = COMPARISONS[op]
    return test(lo, c) == test(hi, c)


def _range_rule(op_class):
    lo, hi, _why = RANGES[op_class]

    def rule(pred, n_inputs):
        if pred == NAN or (pred[0] == "cmp" and _constant_on(pred, lo, hi)):
            return [{NAN}] * n_inputs
        return SPECIAL.get(op_class, _none)(pred, n_inputs)

    return rule


def _none(pred, n_inputs):
    return None


def _neg(pred, n_inputs):
    """-x op c  <=>  x swap(op) -c: exact in every implementation. Not a class requirement
    (`class_rules`): it tells -0 from +0, which a negation with ``nsz`` need not keep."""
    if is_class_req(pred):
        return None
    if pred == NAN:
        return [{NAN}]
    _, op, c = pred
    return [{cmp(SWAPPED[op], -c)}]


def _softplus_special(pred, n_inputs):
    # softplus(x) == inf exactly for x == inf (x >= 33.3 returns x itself; the vector
    # form adds a finite log1p term to max(x, 0))
    if pred[1] in ("eq", "ne") and pred[2] == math.inf:
        return [{cmp("eq", math.inf)}]
    return None


def _log(pred, n_inputs):
    # log(x) is -inf exactly at x == +-0 (subnormals give finite logs), NaN exactly for
    # x < 0 or NaN, in libm and in the libmvec variants
    if pred == NAN:
        return [{cmp("lt", 0.0), NAN}]
    if pred[1] in ("eq", "ne") and pred[2] == -math.inf:
        return [{cmp("eq", 0.0), NAN}]
    if pred[1] in ("eq", "ne") and pred[2] == math.inf:  # log of the largest finite is finite
        return [{cmp("eq", math.inf)}]
    return None


def _exp_special(pred, n_inputs):
    # exp(x) == 0 (underflow) and exp(x) == inf (overflow) switch at the same x in libm and
    # in the libmvec variants (tested at the thresholds): only x itself must be exact
    if pred[1] in ("eq", "ne", "gt", "le") and pred[2] == 0.0:
        return [{EXACT}]
    if pred[1] in ("eq", "ne") and pred[2] == math.inf:
        return [{EXACT}]
    return None


SPECIAL: dict[type, Callable] = {
    psm.Softplus: _softplus_special,
    ps.Exp: _exp_special,
}

# producer op class -> rule(predicate, number of inputs) -> [requirements per input] | None
RULES: dict[type, Callable] = {
    **{op_class: _range_rule(op_class) for op_class in RANGES},
    ps.Neg: _neg,
    ps.Log: _log,
}


def _minus_one_times(pred, operands):
    """-1 * x op c  <=>  x swap(op) -c: multiplying by the constant -1 negates exactly (IEEE
    rounding is symmetric; with ``nsz`` a zero's sign may change, which no comparison with a
    constant sees). PyMC writes ``-1 * log(x)``; any other constant factor rounds."""
    if len(operands) != 2 or sum(c is None for c in operands) != 1:
        return None
    k = 0 if operands[0] is not None else 1  # the constant's position
    try:
        if float(operands[k]) != -1.0:
            return None
    except (TypeError, ValueError):  # a complex or non-numeric constant
        return None
    negated = _neg(pred, 1)
    if negated is None:
        return None
    needs = [set(), set()]
    needs[1 - k] = negated[0]
    return needs


# producer op class -> rule(predicate, operands) -> [requirements per input] | None, where
# ``operands`` holds each input's constant value (None: computed): rules that need to see
# a constant factor
CONSTANT_OPERAND_RULES: dict[type, Callable] = {
    ps.Mul: _minus_one_times,
}


# -- decisions moved to an operand ------------------------------------------------------

# Where a comparison of a producer's output with a constant has, for every operand value,
# NaN included, the outcome of another comparison of the producer's operand with another
# constant (IEEE arithmetic and glibc's libm: the reference's), the decision can read the
# operand and skip the producer (`as_written.decision_moves`; a producer other readers
# need stays for them). Equivalences, where the rules above only say "decided by": the
# log of ``log(w) == -inf`` need not be computed at all when the decision is all that
# reads it (PyMC's ``logpow``). Comparisons are IEEE's: with a NaN, false, and ``!=``
# true, on both sides. Tests: tests/test_decision_moves.py (each row against glibc's log
# on every special value and 10^5 doubles around 0, the subnormals and the largest finite,
# both signs; whole graphs against the reference; wrong rows caught).


@dataclass(frozen=True)
class MovedDecision:
    """``producer(w) op c`` has the outcome of ``w moved_op moved_c`` for every ``w``."""

    producer: type  # scalar op class, one operand (``w``)
    op: str  # lt le gt ge eq ne
    c: float
    moved_op: str
    moved_c: float
    why: str


_LOG_SPECIALS = (
    "glibc's log (C99 F.9.3.7): log(+-0) = -inf, log(+inf) = +inf, NaN for w < 0 and for NaN; "
    "finite for every other w (log(2^-1074) = -744.4, log(DBL_MAX) = 709.8; logf likewise)"
)
MOVED_DECISIONS: dict[tuple[type, str, float], MovedDecision] = {
    (row.producer, row.op, row.c): row
    for row in (
        MovedDecision(ps.Log, "eq", -math.inf, "eq", 0.0, f"-inf exactly at +-0 (== 0 holds for -0): {_LOG_SPECIALS}"),
        MovedDecision(ps.Log, "le", -math.inf, "eq", 0.0, f"<= -inf is == -inf: {_LOG_SPECIALS}"),
        MovedDecision(ps.Log, "ne", -math.inf, "ne", 0.0, f"the negation of == -inf, NaN included: {_LOG_SPECIALS}"),
        MovedDecision(
            ps.Log, "gt", -math.inf, "gt", 0.0,
            f"above -inf exactly where finite or +inf: w > 0 (subnormals and +inf included; false at +-0, "
            f"negative, NaN): {_LOG_SPECIALS}",
        ),
        MovedDecision(ps.Log, "ge", -math.inf, "ge", 0.0, f"not NaN exactly for w >= 0 (-0 included): {_LOG_SPECIALS}"),
        MovedDecision(ps.Log, "eq", math.inf, "eq", math.inf, f"+inf exactly at +inf: {_LOG_SPECIALS}"),
        MovedDecision(ps.Log, "ge", math.inf, "eq", math.inf, f">= +inf is == +inf: {_LOG_SPECIALS}"),
        MovedDecision(ps.Log, "ne", math.inf, "ne", math.inf, f"the negation of == +inf, NaN included: {_LOG_SPECIALS}"),
        MovedDecision(ps.Log, "le", math.inf, "ge", 0.0, f"not NaN exactly for w >= 0: {_LOG_SPECIALS}"),
    )
}  # fmt: skip
NEGATION_WHY = (
    "-w op c <=> w swap(op) -c for every c: IEEE negation (and a product by the constant -1, "
    "which rounds nothing) is exact, keeps NaN, and maps -0 to +0, which compare equal"
)


def moved_decision(producer, op: str, c: float, operands) -> tuple[int, str, float, str] | None:
    """``producer(...) op c`` as a comparison of one of the producer's operands: (its
    position, the comparison, the constant, why), or None. ``operands``: each operand's
    constant value, None where computed (a product by the constant -1 is a negation)."""
    if isinstance(producer, ps.Neg) and len(operands) == 1:
        return 0, SWAPPED[op], -c, NEGATION_WHY
    if isinstance(producer, ps.Mul) and len(operands) == 2 and sum(v is None for v in operands) == 1:
        k = 0 if operands[0] is not None else 1  # the constant's position
        try:
            minus_one = float(operands[k]) == -1.0
        except (TypeError, ValueError):
            return None
        return (1 - k, SWAPPED[op], -c, NEGATION_WHY) if minus_one else None
    row = MOVED_DECISIONS.get((type(producer), op, c)) if len(operands) == 1 else None
    return None if row is None else (0, row.moved_op, row.moved_c, row.why)


# Ops whose output, computed strictly (IEEE 754), is NaN exactly when one of these
# predicates holds on an operand (two operands, or one): the output's NaN pattern needs
# only them, so such an op passes a NaN-pattern requirement on instead of needing exact
# inputs (the op itself stays strict). Inputs whose intervals (`ranges`) fix a predicate
# drop it: e / s with e, s finite needs only their NaN and zero patterns.
_INFINITIES = (cmp("eq", math.inf), cmp("eq", -math.inf))
NAN_SOURCES: dict[type, tuple] = {
    ps.Add: (NAN, *_INFINITIES),  # inf + -inf
    ps.Sub: (NAN, *_INFINITIES),  # inf - inf
    ps.Mul: (NAN, cmp("eq", 0.0), *_INFINITIES),  # 0 * inf
    ps.TrueDiv: (NAN, cmp("eq", 0.0), *_INFINITIES),  # 0 / 0, inf / inf
    ps.Abs: (NAN,),
}
NAN_SOURCE_ARITY = {ps.Abs: 1}


def nan_sources(op, n_inputs: int) -> tuple | None:
    """The predicates on each operand that decide ``op``'s NaN pattern, or None."""
    preds = NAN_SOURCES.get(type(op))
    if preds is None or n_inputs != NAN_SOURCE_ARITY.get(type(op), 2):
        return None
    return preds


_SYMBOLS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def describe(req) -> str:
    """``exact``, ``NaN pattern``, ``>= 0``: a requirement for explain."""
    if req == EXACT:
        return "exact"
    if req == NAN:
        return "NaN pattern"
    if is_class_req(req):
        return "class" + (f" (bits where |x| in {describe_bands(req[1])})" if req[1] else "")
    if req == CLASS_ONLY:
        return "read by class only"
    return f"{_SYMBOLS[req[1]]} {req[2]:g}"


def input_needs(op, pred, n_inputs: int, operands: tuple | None = None) -> list[set] | None:
    """What a predicate on ``op``'s output asks of its inputs, or None (op must be strict).
    ``operands``: each input's constant value, None where it is computed (for
    `CONSTANT_OPERAND_RULES`; without it those rules do not apply)."""
    if pred == EXACT:
        return None
    rule = RULES.get(type(op))
    if rule is not None:
        return rule(pred, n_inputs)
    rule = CONSTANT_OPERAND_RULES.get(type(op))
    return None if rule is None or operands is None else rule(pred, operands)
