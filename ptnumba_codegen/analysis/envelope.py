"""Envelopes: what a graph as written computes when every float input lies in a box.

Pure pytensor (no numba). `evaluate` runs forward over a graph, before any rewrite, and
gives each variable a `Fact`: an interval [lo, hi] holding every non-NaN value it can take,
and whether it can be NaN at all, when each float graph input is finite with
``|x| <= bound`` (integer and boolean inputs: any value). The facts hold for IEEE
arithmetic in any order and grouping (a dot product or a sum summed any way, with or
without FMA) and for libm and any implementation within a few ulps (bounds are widened by
`ranges.SLACK`): the reference, ``Mode(linker="numba", optimizer=None)``, is one of them.

A boolean whose fact is [c, c] and never NaN is the constant c inside the box. The
as-written pass uses that (`ptnumba_codegen.as_written.envelope_guards`): a decision whose
outcome is constant in the box is computed, at run time, as that constant whenever the
inputs are in the box, and by its as-written copy otherwise.

`RULES` maps an op (an Elemwise's scalar op, or a tensor op) to its forward rule; an op
without a row gives `UNKNOWN_FACT` (any value, maybe NaN). Every row says why it holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytensor.tensor.basic as ptb
import pytensor.tensor.subtensor as ptsub
from pytensor.compile.ops import DeepCopyOp, ViewOp
from pytensor.graph.basic import Constant
from pytensor.raise_op import CheckAndRaise
from pytensor.scalar import basic as ps
from pytensor.scalar import math as psm
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
from pytensor.tensor.math import Dot
from pytensor.tensor.shape import Reshape, SpecifyShape

from ptnumba_codegen.analysis.ranges import _down, _up

INF = math.inf
# |sum of K products, any order, any grouping, FMA or not| <= (1 + K * ULP) * sum |a_i b_i|
ULP = 2.0**-52
TINY = 2.0**-1020  # below it (4x the smallest normal; subnormals carry absolute errors): bounds move to 0


@dataclass(frozen=True)
class Fact:
    lo: float = -INF
    hi: float = INF
    nan: bool = True  # may be NaN

    @property
    def finite(self) -> bool:
        return not self.nan and math.isfinite(self.lo) and math.isfinite(self.hi)

    @property
    def magnitude(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    def constant(self):
        """The one value every element takes, or None."""
        return self.lo if (not self.nan and self.lo == self.hi) else None


UNKNOWN_FACT = Fact()
UNKNOWN_BOOL = Fact(0.0, 1.0, False)


def _kind(var) -> str:
    return str(getattr(var.type, "dtype", "x"))[0]  # f, i, u, b, c, x


def _no_nan_unknown(var) -> Fact:
    """Integers and booleans are never NaN."""
    return UNKNOWN_BOOL if _kind(var) == "b" else Fact(-INF, INF, False)


def _widen(lo, hi, nan) -> Fact:
    """Widened outward by a few ulps (relative); ends within `TINY` of 0 move to 0
    (subnormal results carry absolute, not relative, errors)."""
    lo, hi = _down(lo), _up(hi)
    if math.isnan(lo) or math.isnan(hi):
        return Fact(-INF, INF, True)
    lo = 0.0 if 0 < lo < TINY else lo
    hi = 0.0 if -TINY < hi < 0 else hi
    return Fact(lo, hi, nan)


def _safe(fn, *args, default=INF):
    try:
        return fn(*args)
    except (OverflowError, ValueError, ZeroDivisionError):
        return default


# -- scalar ops (applied elementwise) ---------------------------------------------------------


def _add(ins):
    # every partial sum, in any order, is bounded by the sum of magnitudes: if that is
    # finite nothing overflows, so no inf - inf; the rounded sum is within
    # (n + 2) ulp * sum of magnitudes of the exact one (cancellation included)
    mag = sum(i.magnitude for i in ins)
    nan = any(i.nan for i in ins) or not math.isfinite(_up(mag))
    if not math.isfinite(mag):
        return Fact(-INF, INF, nan)
    err = (len(ins) + 2) * ULP * mag
    # terms of one sign: no cancellation, the error is relative to the sum itself
    shrink = 1.0 - (len(ins) + 2) * ULP
    lo, hi = math.fsum(i.lo for i in ins), math.fsum(i.hi for i in ins)
    lo = lo * shrink if all(i.lo >= 0 for i in ins) else lo - err
    hi = hi * shrink if all(i.hi <= 0 for i in ins) else hi + err
    return _widen(lo, hi, nan)


def _sub(ins):
    a, b = ins
    return _add([a, Fact(-b.hi, -b.lo, b.nan)])


def _mul(ins):
    mag = math.prod(i.magnitude for i in ins)
    nan = any(i.nan for i in ins) or not math.isfinite(_up(mag))  # no inf, so no 0 * inf
    lo, hi = 1.0, 1.0
    for i in ins:
        corners = [x * y for x in (lo, hi) for y in (i.lo, i.hi)]
        corners = [0.0 if math.isnan(c) else c for c in corners]
        lo, hi = min(corners), max(corners)
    return _widen(lo, hi, nan)


def _neg(ins):
    (a,) = ins
    return Fact(-a.hi, -a.lo, a.nan)


def _sqr(ins):
    (a,) = ins
    top = _safe(lambda: a.magnitude**2)
    lo = 0.0 if a.lo <= 0 <= a.hi else _safe(lambda: min(a.lo**2, a.hi**2))
    return _widen(lo, top, a.nan)


def _abs(ins):
    (a,) = ins
    lo = 0.0 if a.lo < 0 < a.hi else min(abs(a.lo), abs(a.hi))
    return Fact(lo, a.magnitude, a.nan)


def _bounded(lo, hi):
    def rule(ins):
        (a,) = ins
        return Fact(lo, hi, a.nan or not (math.isfinite(a.lo) and math.isfinite(a.hi)))

    return rule


def _monotone(fn, floor=-INF, ceiling=INF):
    """An increasing function defined everywhere (NaN only for NaN), every implementation
    of which stays in [floor, ceiling] (`robust.RANGES`)."""

    def rule(ins):
        (a,) = ins
        f = _widen(_safe(fn, a.lo, default=-INF if a.lo < 0 else INF), _safe(fn, a.hi), a.nan)
        return Fact(max(f.lo, floor), min(f.hi, ceiling), f.nan)

    return rule


def _softplus(x):
    return x if x > 40 else math.log1p(math.exp(x))


def _exp_rule(ins):
    (a,) = ins
    lo = 0.0 if a.lo == -INF else _safe(math.exp, a.lo)
    f = _widen(lo, _safe(math.exp, a.hi), a.nan)
    return Fact(max(f.lo, 0.0), f.hi, f.nan)


def _sqrt(ins):
    (a,) = ins
    if a.lo < 0:
        return UNKNOWN_FACT
    return _widen(math.sqrt(a.lo), math.sqrt(a.hi) if math.isfinite(a.hi) else INF, a.nan)


def _log(ins):
    (a,) = ins
    if a.lo < 0:
        return UNKNOWN_FACT
    # log(0) is -inf (math.log raises): an input that is at most 0 is 0 or NaN here
    lo = -INF if a.lo == 0 else math.log(a.lo)
    hi = -INF if a.hi == 0 else math.log(a.hi) if math.isfinite(a.hi) else INF
    return _widen(lo, hi, a.nan)


def _pow(ins):
    base, expo = ins
    y = expo.constant()
    if y is None or base.nan or base.lo <= 0 or not (math.isfinite(base.hi) and math.isfinite(y)):
        return UNKNOWN_FACT  # a base that can be <= 0, inf or NaN, or an exponent that varies
    ends = [_safe(math.pow, base.lo, y), _safe(math.pow, base.hi, y)]
    return _widen(min(ends), max(ends), False)


def _true_div(ins):
    a, b = ins
    if b.nan or a.nan or not (a.finite and b.finite) or b.lo <= 0 <= b.hi:
        return UNKNOWN_FACT
    return _mul([a, _widen(*sorted((1.0 / b.lo, 1.0 / b.hi)), False)])


def _comparison(test):
    """A comparison of NaN-free operands is decided when it holds for every pair of the
    two intervals, or for none of them."""

    def rule(ins):
        a, b = ins
        if a.nan or b.nan:
            return UNKNOWN_BOOL
        corners = {test(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)}
        if len(corners) == 1 and _monotone_test(test, a, b):
            c = float(corners.pop())
            return Fact(c, c, False)
        return UNKNOWN_BOOL

    return rule


def _monotone_test(test, a, b) -> bool:
    """For orderings the corners decide; for == / != only disjoint intervals (or two equal
    constants) do."""
    if test in (_eq, _ne):
        disjoint = a.hi < b.lo or b.hi < a.lo
        same = a.lo == a.hi == b.lo == b.hi
        return disjoint or same
    return True


def _eq(x, y):
    return x == y


def _ne(x, y):
    return x != y


def _and(ins):
    if any(i.constant() == 0.0 for i in ins):
        return Fact(0.0, 0.0, False)
    if all(i.constant() == 1.0 for i in ins):
        return Fact(1.0, 1.0, False)
    return UNKNOWN_BOOL


def _or(ins):
    if any(i.constant() == 1.0 for i in ins):
        return Fact(1.0, 1.0, False)
    if all(i.constant() == 0.0 for i in ins):
        return Fact(0.0, 0.0, False)
    return UNKNOWN_BOOL


def _invert(ins):
    (a,) = ins
    c = a.constant()
    return Fact(1.0 - c, 1.0 - c, False) if c in (0.0, 1.0) else UNKNOWN_BOOL


def _switch(ins):
    c, a, b = ins
    if c.constant() == 1.0:
        return a
    if c.constant() == 0.0:
        return b
    return Fact(min(a.lo, b.lo), max(a.hi, b.hi), a.nan or b.nan)


def _second(ins):
    return ins[1]


def _identity(ins):
    return ins[0]


# scalar op class -> (rule(input facts) -> output fact, why it holds)
SCALAR_RULES: dict[type, tuple] = {
    ps.Add: (_add, "partial sums in any order are bounded by the sum of magnitudes"),
    ps.Sub: (_sub, "a - b = a + (-b)"),
    ps.Mul: (_mul, "interval product; no inf when the product of magnitudes is finite"),
    ps.Neg: (_neg, "exact"),
    ps.Abs: (_abs, "exact"),
    ps.Sqr: (_sqr, "x * x"),
    ps.TrueDiv: (_true_div, "a divisor interval away from 0: a * (1 / b)"),
    ps.Sin: (_bounded(-1.0, 1.0), "libm and vector sin of a finite x are in [-1, 1]; NaN for inf"),
    ps.Cos: (_bounded(-1.0, 1.0), "libm and vector cos of a finite x are in [-1, 1]; NaN for inf"),
    ps.Exp: (_exp_rule, "increasing, >= 0, NaN only for NaN"),
    ps.Log: (_log, "increasing on [0, inf], NaN below 0"),
    ps.Sqrt: (_sqrt, "increasing on [0, inf], NaN below 0"),
    ps.Pow: (_pow, "a positive finite base and a constant exponent: monotone, never NaN"),
    psm.Sigmoid: (_monotone(lambda x: 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0, 0.0, 1.0), "increasing, in [0, 1]"),
    psm.Softplus: (_monotone(_softplus, 0.0), "increasing, >= 0"),
    ps.Tanh: (_monotone(math.tanh, -1.0, 1.0), "increasing, in [-1, 1]"),
    ps.LT: (_comparison(lambda x, y: x < y), "decided when it holds at every corner or none"),
    ps.LE: (_comparison(lambda x, y: x <= y), "decided when it holds at every corner or none"),
    ps.GT: (_comparison(lambda x, y: x > y), "decided when it holds at every corner or none"),
    ps.GE: (_comparison(lambda x, y: x >= y), "decided when it holds at every corner or none"),
    ps.EQ: (_comparison(_eq), "decided for disjoint intervals (or two equal constants)"),
    ps.NEQ: (_comparison(_ne), "decided for disjoint intervals (or two equal constants)"),
    ps.AND: (_and, "booleans: one false operand decides"),
    ps.OR: (_or, "booleans: one true operand decides"),
    ps.Invert: (_invert, "booleans: not"),
    ps.Switch: (_switch, "a decided condition picks one branch; else either"),
    ps.Second: (_second, "the second operand's values, broadcast"),
    ps.Identity: (_identity, "the value"),
}
# boolean logic only: on integers these ops are bitwise
BOOL_ONLY = (ps.AND, ps.OR, ps.Invert)


def _elemwise(node, ins):
    scalar_op = node.op.scalar_op
    row = SCALAR_RULES.get(type(scalar_op))
    if row is None:
        if isinstance(scalar_op, ps.Cast) and _kind(node.outputs[0]) == "f" and _kind(node.inputs[0]) in "fiub":
            return ins[0] if node.outputs[0].type.dtype == "float64" else UNKNOWN_FACT
        return _no_nan_unknown(node.outputs[0]) if _kind(node.outputs[0]) in "iub" else UNKNOWN_FACT
    if isinstance(scalar_op, BOOL_ONLY) and not all(_kind(v) == "b" for v in node.inputs):
        return _no_nan_unknown(node.outputs[0])
    fact = row[0](ins)
    if _kind(node.outputs[0]) == "b" and not fact.nan and not (0.0 <= fact.lo and fact.hi <= 1.0):
        return UNKNOWN_BOOL
    return fact


# -- tensor ops -------------------------------------------------------------------------------


def _length(var, axes) -> int | None:
    """The static number of elements along ``axes`` (None: all) of ``var``, or None."""
    shape = getattr(var.type, "shape", None)
    if shape is None:
        return None
    axes = range(len(shape)) if axes is None else axes
    if any(shape[a] is None for a in axes):
        return None
    return math.prod(shape[a] for a in axes)


def _careduce(node, ins):
    (x,) = ins
    n = _length(node.inputs[0], node.op.axis)
    scalar_op = node.op.scalar_op
    if n is None or n == 0:
        return _no_nan_unknown(node.outputs[0]) if _kind(node.outputs[0]) in "iub" else UNKNOWN_FACT
    if isinstance(scalar_op, ps.Maximum | ps.Minimum):
        return x
    if isinstance(scalar_op, ps.AND | ps.OR) and _kind(node.inputs[0]) == "b":
        return _and([x]) if isinstance(scalar_op, ps.AND) else _or([x])
    if isinstance(scalar_op, ps.Add):
        return _k_terms(x, n)
    if isinstance(scalar_op, ps.Mul) and n <= 64:
        return _mul([x] * n)
    return _no_nan_unknown(node.outputs[0]) if _kind(node.outputs[0]) in "iub" else UNKNOWN_FACT


def _k_terms(term: Fact, k: int) -> Fact:
    """A sum of k terms each in ``term``, in any order: within gamma * sum |x_i| of the
    exact sum, gamma = (k + 2) ulp (Higham's gamma_{k-1}, with room); >= 0 if every term is."""
    mag = k * term.magnitude
    err = (k + 2) * ULP * mag
    top = _up(k * term.hi + err)
    nan = term.nan or not math.isfinite(_up(mag + err))
    lo = 0.0 if term.lo >= 0 else _down(k * term.lo - err)
    return Fact(lo, top, nan) if not math.isnan(lo + top) else UNKNOWN_FACT


def _dot(node, ins):
    a, b = ins
    if node.inputs[0].type.ndim == 0 or node.inputs[1].type.ndim == 0:
        return _mul([a, b])
    k = node.inputs[0].type.shape[-1]
    if k is None:
        k = node.inputs[1].type.shape[0 if node.inputs[1].type.ndim == 1 else -2]
    if k is None:
        return UNKNOWN_FACT
    return _k_terms(_mul([a, b]), k) if k else Fact(0.0, 0.0, False)


def _blockwise(node, ins):
    if isinstance(node.op.core_op, Dot):
        return _dot(node, ins)
    return _no_nan_unknown(node.outputs[0]) if _kind(node.outputs[0]) in "iub" else UNKNOWN_FACT


def _first(node, ins):
    return ins[0]


def _join(node, ins):
    facts = ins[1:]
    return Fact(min(f.lo for f in facts), max(f.hi for f in facts), any(f.nan for f in facts))


# tensor op class -> (rule(node, input facts) -> fact of output 0, why it holds)
TENSOR_RULES: dict[type, tuple] = {
    Elemwise: (_elemwise, "the scalar op's rule, element by element"),
    CAReduce: (_careduce, "K terms of a static length: K times the magnitude, any order"),
    Dot: (_dot, "K products of a static inner length: K * max|a| * max|b|, any order, FMA or not"),
    Blockwise: (_blockwise, "a batched Dot (matmul): each product as Dot's"),
    DimShuffle: (_first, "moves values"),
    Reshape: (_first, "moves values"),
    SpecifyShape: (_first, "moves values"),
    ptsub.Subtensor: (_first, "selects values"),
    ptsub.AdvancedSubtensor: (_first, "selects values"),
    ptb.Alloc: (_first, "broadcasts its first input"),
    ptb.Join: (_join, "the values of its inputs after the axis"),
    DeepCopyOp: (_first, "copies"),
    ViewOp: (_first, "views"),
    CheckAndRaise: (_first, "returns its first input (or raises)"),
    ptb.TensorFromScalar: (_first, "moves values"),
    ptb.ScalarFromTensor: (_first, "moves values"),
}


# rules that only move values: exact in every dtype
MOVES = (_first, _join)


def _constant(var) -> Fact:
    data = np.asarray(var.data)
    if data.size == 0:
        return Fact(-INF, INF, False)
    if data.dtype.kind not in "fiub":
        return UNKNOWN_FACT
    data = data.astype("float64")
    nan = bool(np.isnan(data).any())
    finite = data[~np.isnan(data)]
    if finite.size == 0:
        return Fact(-INF, INF, True)
    return Fact(float(finite.min()), float(finite.max()), nan)


def _representable(var, fact: Fact) -> Fact:
    """Facts are reasoned in float64: a float32 result (other overflow, other ulps) is
    unknown, and so is an integer beyond 2**53 (wraparound, inexact conversion)."""
    dtype = str(getattr(var.type, "dtype", ""))
    if dtype.startswith(("float", "complex")) and dtype != "float64":
        return UNKNOWN_FACT
    if dtype[:1] in "iu" and fact.magnitude > 2.0**53:
        return _no_nan_unknown(var)
    return fact


def _input(var, bound: float | None) -> Fact:
    if bound is None:
        return UNKNOWN_FACT if _kind(var) in "fc" else _no_nan_unknown(var)
    if str(var.type.dtype) == "float64":
        return Fact(-bound, bound, False)  # the guard checks |x| <= bound: finite, not NaN
    return _no_nan_unknown(var) if _kind(var) in "iub" else UNKNOWN_FACT


def evaluate(outputs, bounds: dict, memo=None, inner_graph=None) -> list[Fact]:
    """The `Fact` of each of ``outputs`` when every float graph input ``x`` under them is
    finite with ``|x| <= bounds[x]`` (an input missing from ``bounds``: any value).
    ``inner_graph(op)``: the graph an op computes its outputs by (evaluated through), or None."""
    memo = {} if memo is None else memo

    def fact(var) -> Fact:
        stack = [var]
        while stack:
            v = stack[-1]
            if v in memo:
                stack.pop()
                continue
            if isinstance(v, Constant):
                memo[v] = _constant(v)
                stack.pop()
                continue
            if v.owner is None:
                memo[v] = _input(v, bounds.get(v))
                stack.pop()
                continue
            missing = [i for i in v.owner.inputs if i not in memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            node = v.owner
            ins = [memo[i] for i in node.inputs]
            inner = inner_graph(node.op) if inner_graph is not None else None
            if inner is not None:
                sub = dict(zip(inner.inputs, ins[: len(inner.inputs)], strict=True))  # then extra inputs
                outs = evaluate(inner.outputs, {}, memo=sub, inner_graph=inner_graph)
                memo.update(zip(node.outputs, outs, strict=True))
                continue
            row = next((r for cls, r in TENSOR_RULES.items() if isinstance(node.op, cls)), None)
            for out in node.outputs:
                if row is None or out is not node.outputs[0]:
                    memo[out] = _no_nan_unknown(out) if _kind(out) in "iub" else UNKNOWN_FACT
                else:
                    fact = row[0](node, ins)
                    memo[out] = fact if row[0] in MOVES else _representable(out, fact)
        return memo[var]

    return [fact(o) for o in outputs]
