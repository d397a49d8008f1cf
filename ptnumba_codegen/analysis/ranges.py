"""Forward facts: what every implementation the policy may choose guarantees about a value
(pure Python, no numba).

`robust` asks, backward, what a decision needs of a value; this module says, forward,
what a value can be: an interval [lo, hi] holding for every non-NaN value under every
allowed implementation (libm, the libmvec variant within budget, the vector formulas, any
fast-math flags but nnan/ninf), and two relations between kernel inputs that the
decisions of PyMC's softmax checks rest on:

* ``("max_of", a, b, axes)``: input b is the max of input a over ``axes``, broadcast back
  (``x - max(x)`` is then <= 0, whatever rounds how);
* ``("sum_of", a, b, axes)``: input b is the sum of input a over ``axes``, broadcast back
  (``e / sum(e)`` of e >= 0 is then in [0, 1], and its sum over the same axes is within
  a few ulps of 1 in any summation order, with or without arcp).

A predicate whose outcome is one constant on a value's interval is decided by the value's
NaN pattern alone (`settle`). The analysis uses that to stop a cone early: PyMC's
``0 <= p <= 1`` and ``|sum(p) - 1| <= 1e-5`` on softmax rows then only need the NaN
pattern of the rows, so the exps are free (tests/test_ranges.py).

`FORWARD` is the table of ops with a forward rule; any other op gives (-inf, inf).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from pytensor.scalar import basic as ps

from ptnumba_codegen.analysis.program import Program
from ptnumba_codegen.analysis.robust import COMPARISONS, EXACT, NAN, RANGES

INF = math.inf
UNKNOWN = (-INF, INF)
# Relative widening of every computed bound: covers the ulps of any allowed implementation
# (budgets are a few ulps; reassoc/contract/arcp regroup a few roundings) many times over.
SLACK = 2.0**-30
# |sum(e / sum(e)) - 1| <= NORMALIZED_ULPS_PER_TERM * K * 2**-53 for K terms: the exact
# identity, plus K - 1 roundings in each sum and 2.5 in each quotient (arcp: x * (1/y)).
NORMALIZED_ULPS_PER_TERM = 8


# Bounds are widened outward, except 0 and +-inf: rounding is monotone and keeps them
# (a sum or product of values >= 0 is >= 0 however it is grouped and rounded).
def _down(x: float) -> float:
    if x in (-INF, INF, 0.0):
        return x
    return math.nextafter(x - abs(x) * SLACK, -INF)


def _up(x: float) -> float:
    if x in (-INF, INF, 0.0):
        return x
    return math.nextafter(x + abs(x) * SLACK, INF)


def _interval(lo: float, hi: float) -> tuple[float, float]:
    lo, hi = _down(lo), _up(hi)
    return (-INF if math.isnan(lo) else lo, INF if math.isnan(hi) else hi)


def _mul_bounds(a, b):
    prods = []
    for x in a:
        for y in b:
            p = x * y
            prods.append(0.0 if math.isnan(p) else p)  # 0 * inf: NaN, not a value
    return min(prods), max(prods)


# -- the table: op class -> rule(input intervals, relation at this instruction) -> interval

def _add(ins, rel):
    return _interval(sum(i[0] for i in ins), sum(i[1] for i in ins))


def _sub(ins, rel):
    if rel == "max_of":  # x - max(x) over the same elements: exactly <= 0, or NaN
        return (-INF, 0.0)
    (alo, ahi), (blo, bhi) = ins
    return _interval(alo - bhi, ahi - blo)


def _mul(ins, rel):
    lo, hi = 1.0, 1.0
    acc = (lo, hi)
    for i in ins:
        acc = _mul_bounds(acc, i)
    return _interval(*acc)


def _neg(ins, rel):
    (lo, hi), = ins
    return (-hi, -lo)


def _abs(ins, rel):
    (lo, hi), = ins
    if lo >= 0:
        return (lo, hi)
    if hi <= 0:
        return (-hi, -lo)
    return (0.0, max(-lo, hi))


def _true_div(ins, rel):
    (alo, _), _ = ins
    if rel == "sum_of" and alo >= 0:  # e / sum(e), e >= 0: the sum is >= each term
        return (0.0, 1.0)
    return UNKNOWN


def _exp(ins, rel):
    (_, hi), = ins
    try:
        top = math.exp(hi)
    except OverflowError:
        top = INF
    return (0.0, _up(top))


def _range_of(op_class):
    lo, hi, _why = RANGES[op_class]
    return lambda ins, rel: (lo, hi)


FORWARD: dict[type, object] = {
    **{op_class: _range_of(op_class) for op_class in RANGES},
    ps.Exp: _exp,
    ps.Add: _add,
    ps.Sub: _sub,
    ps.Mul: _mul,
    ps.Neg: _neg,
    ps.Abs: _abs,
    ps.TrueDiv: _true_div,
}
# (op class, relation) pairs a rule above reads, and the inputs the relation is between
RELATION_OPS = {"max_of": ps.Sub, "sum_of": ps.TrueDiv}


@dataclass(frozen=True)
class ProgramRanges:
    ranges: Mapping[int, tuple[float, float]]  # value id -> interval of its non-NaN values
    # value id -> (axes it is e / sum(e) over, upper bound of e): the sum of K such values
    # is 1 within a few ulps when K * e's bound cannot overflow (else sum(e) may be inf,
    # e / inf = 0)
    normalized: Mapping[int, tuple[tuple[int, ...], float]]


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def program_ranges(program: Program, input_facts=()) -> ProgramRanges:
    """Forward intervals of every float value of ``program`` given ``input_facts`` (items
    ``("range", pos, lo, hi)`` and ``(relation, a, b, axes)``, see the module doc)."""
    ranges: dict[int, tuple[float, float]] = {}
    relations: dict[tuple[int, int], tuple[str, tuple[int, ...]]] = {}
    for item in input_facts:
        if item[0] == "range":
            _, pos, lo, hi = item
            ranges[program.inputs[pos]] = (lo, hi)
        else:
            kind, a, b, axes = item
            relations[(program.inputs[a], program.inputs[b])] = (kind, tuple(axes))
    for vid, value in program.constants:
        try:
            c = float(value)
        except (TypeError, ValueError):
            continue
        if not math.isnan(c):
            ranges[vid] = (c, c)
    normalized: dict[int, tuple[tuple[int, ...], float]] = {}
    for instr in program.instrs:
        if len(instr.outputs) != 1 or not _is_float(program.dtypes[instr.outputs[0]]):
            continue
        if not all(_is_float(program.dtypes[v]) or v in ranges for v in instr.inputs):
            continue
        rule = FORWARD.get(type(instr.op))
        if rule is None:
            continue
        ins = [ranges.get(v, UNKNOWN) for v in instr.inputs]
        rel, axes = None, None
        if len(instr.inputs) == 2:
            kind, axes = relations.get(tuple(instr.inputs), (None, None))
            if kind is not None and RELATION_OPS[kind] is type(instr.op):
                rel = kind
        out = rule(ins, rel)
        if out != UNKNOWN:
            ranges[instr.outputs[0]] = out
        if rel == "sum_of" and out == (0.0, 1.0):
            normalized[instr.outputs[0]] = (axes, ins[0][1])
    return ProgramRanges(ranges, normalized)


def reduced_range(kind: str, elements: tuple[float, float], n_terms: int | None, numerator_hi=None):
    """Interval of a reduction (``"add"``/``"max"``/``"min"``) of ``n_terms`` elements in
    ``elements`` (None: the count is not static). ``numerator_hi``: the elements are
    e / sum(e) over the reduced axes, with e <= numerator_hi (None: they are not)."""
    lo, hi = elements
    if kind in ("max", "min"):
        return elements
    if kind != "add":
        return UNKNOWN
    if numerator_hi is not None and n_terms and n_terms * numerator_hi < 1e300:
        delta = NORMALIZED_ULPS_PER_TERM * n_terms * 2.0**-53
        return (1.0 - delta, 1.0 + delta)
    if n_terms is None:
        return (0.0, INF) if lo >= 0 else ((-INF, 0.0) if hi <= 0 else UNKNOWN)
    return _interval(n_terms * lo if lo > -INF else -INF, n_terms * hi if hi < INF else INF)


# -- predicates against intervals ------------------------------------------------------

def _nan_outcome(op: str) -> bool:
    return op == "ne"


def settle(req, interval) -> object | None:
    """``req`` simplified on a value known to lie in ``interval`` when not NaN: None when
    its outcome is fixed (NaN included), NAN when only the NaN pattern decides it."""
    if interval is None or req[0] != "cmp":
        return req
    lo, hi = interval
    _, op, c = req
    if op in ("eq", "ne"):
        if lo <= c <= hi:
            return req
        outcome = op == "ne"
    else:
        test = COMPARISONS[op]
        outcome = test(lo, c)
        if test(hi, c) != outcome:
            return req
    return None if outcome == _nan_outcome(op) else NAN


def settle_all(reqs, interval) -> set:
    out = set()
    for req in reqs:
        s = settle(req, interval)
        if s is not None:
            out.add(s)
    return out


# -- requirements on a reduction, as requirements on its elements ----------------------

@dataclass(frozen=True)
class Reduced:
    """What the analysis knows about one reduced output of a kernel."""

    kind: str  # "add", "max", "min", or the reducer's name
    elements: tuple[float, float]  # interval of the reduced elements
    n_terms: int | None  # elements per result (None: not static)
    interval: tuple[float, float]  # interval of the result (`reduced_range`)


def _bounded_sum(r: Reduced) -> bool:
    lo, hi = r.elements
    if r.n_terms is None or lo == -INF or hi == INF:
        return False
    return r.n_terms * max(abs(lo), abs(hi)) < 1e300


def reduction_needs(reqs, r: Reduced) -> set:
    """What requirements ``reqs`` on a reduction ask of its elements: exact, except

    * a predicate fixed on the result's interval: nothing, or the NaN pattern below;
    * the NaN pattern of a sum whose elements have one sign, or cannot overflow when
      added: NaN exactly where an element is (no inf - inf can arise);
    * ``sum == 0`` of elements of one sign: every element == 0 (rounding never turns a
      sum of one sign into 0 when a term is not).
    """
    reqs = settle_all(reqs, r.interval)
    if not reqs:
        return set()
    lo, hi = r.elements
    one_signed = lo >= 0 or hi <= 0
    out: set = set()
    for req in reqs:
        if r.kind != "add":
            return {EXACT}
        if req == NAN and (one_signed or _bounded_sum(r)):
            out.add(NAN)
        elif req[0] == "cmp" and req[1] in ("eq", "ne") and req[2] == 0.0 and one_signed:
            out.add(("cmp", "eq", 0.0))
        else:
            return {EXACT}
    return out
