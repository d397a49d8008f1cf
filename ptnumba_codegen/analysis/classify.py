"""Classify every scalar instruction of a Program (pure Python, no numba).

The rules, in order (the first that matches wins, so strict wins):

1. *comparison_sensitive*: a decision op (see DECISION_INPUTS) and every instruction in
   the backward cone of its decision inputs, all the way to the program inputs; also
   the backward cone of every output listed in ``sensitive_outputs`` (values that a
   decision in another node consumes). The cone stops where a decision cannot depend
   on the producer's rounding (`robust`): ``sigmoid(v) >= 0`` leaves sigmoid free and
   only asks for v's NaN pattern, so requirements (EXACT, or a predicate) are
   propagated backward instruction by instruction (`analyze`). A predicate fixed on
   its value's forward interval (`ranges`) needs only the NaN pattern, which strict
   arithmetic passes on (`robust.NAN_SOURCES`).
2. *transcendental*: the ops in TRANSCENDENTAL_OPS and every scipy.special-backed op.
3. *arithmetic*: everything else, n-ary and chained Add/Mul included: an element's sum or
   product of several terms is computed in the order the expression gives, like any other
   arithmetic of one element.

The fourth class, *reduction*, is not an instruction of a program: it is the accumulating
instruction of a reduction loop, which adds (or multiplies, ...) one element into an
accumulator (`backend.plans.accumulator_flags`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from pytensor.scalar import basic as ps
from pytensor.scalar import math as psm
from pytensor.scalar.loop import ScalarLoop

from ptnumba_codegen.flags import ARITHMETIC, COMPARISON_SENSITIVE, TRANSCENDENTAL
from ptnumba_codegen.analysis.program import Instr, Program
from ptnumba_codegen.tables import mro_lookup
from ptnumba_codegen.analysis.robust import (
    DECISION_COMPARISONS,
    EXACT,
    NAN,
    BREAKING_FLAGS,
    cmp,
    comparison_needs,
    input_needs,
    nan_sources,
)
from ptnumba_codegen.analysis.ranges import program_ranges, settle_all
from ptnumba_codegen.analysis.class_rules import (
    CLASS_ONLY,
    FOLDED_EXP,
    ClassRule,
    class_reader_needs,
    class_req,
    class_rule,
    decided_by_class,
    exact_bands,
    quotient_rule,
)

ALL = None  # marker: every input is a decision input


def _cast_decides(instr: Instr, dtypes) -> tuple[int, ...] | None:
    """A cast decides (truncates or tests for zero) when it goes to an int or bool."""
    return ALL if dtypes[instr.outputs[0]][0] in "iub" else ()


def _loop_decides(instr: Instr, dtypes) -> tuple[int, ...] | None:
    """A while-loop's inputs decide when it stops; a for-loop's count is an integer."""
    return ALL if instr.op.is_while else ()


# op class -> which inputs are decision inputs (ALL, a tuple of positions, or a callable).
DECISION_INPUTS: dict[type, object] = {
    ps.EQ: ALL,
    ps.NEQ: ALL,
    ps.LT: ALL,
    ps.LE: ALL,
    ps.GT: ALL,
    ps.GE: ALL,
    ps.Maximum: ALL,
    ps.Minimum: ALL,
    ps.ScalarMaximum: ALL,
    ps.ScalarMinimum: ALL,
    ps.Clip: ALL,
    ps.Switch: (0,),
    ps.Sign: ALL,
    ps.Floor: ALL,
    ps.Ceil: ALL,
    ps.Trunc: ALL,
    ps.RoundHalfToEven: ALL,
    ps.RoundHalfAwayFromZero: ALL,
    ps.IntDiv: ALL,
    ps.Mod: ALL,
    ps.IsNan: ALL,
    ps.IsInf: ALL,
    ps.Cast: _cast_decides,
    ScalarLoop: _loop_decides,
}

TRANSCENDENTAL_OPS: frozenset[type] = frozenset(
    {
        ps.Exp, ps.Exp2, ps.Expm1, ps.Log, ps.Log2, ps.Log10, ps.Log1p, ps.Pow, ps.Sqrt,
        ps.Sin, ps.Cos, ps.Tan, ps.ArcSin, ps.ArcCos, ps.ArcTan, ps.ArcTan2,
        ps.Sinh, ps.Cosh, ps.Tanh, ps.ArcSinh, ps.ArcCosh, ps.ArcTanh,
        psm.Sigmoid, psm.Softplus, psm.Log1mexp, psm.Erf, psm.Erfc, psm.Erfcx,
        psm.Erfinv, psm.Erfcinv, psm.GammaLn, psm.Gamma, psm.Psi, psm.TriGamma,
    }
)  # fmt: skip


def decision_inputs(instr: Instr, dtypes) -> tuple[int, ...]:
    """Value ids whose exact value decides this instruction's result (may be empty)."""
    rule = mro_lookup(DECISION_INPUTS, instr.op, False)
    if rule is False:
        return ()
    if callable(rule):
        rule = rule(instr, dtypes)
    if rule is ALL:
        return instr.inputs
    return tuple(instr.inputs[i] for i in rule)


def is_decision(instr: Instr, dtypes) -> bool:
    rule = mro_lookup(DECISION_INPUTS, instr.op, False)
    if callable(rule):
        return rule(instr, dtypes) != ()
    return rule is not False


def is_transcendental(op) -> bool:
    if mro_lookup({c: True for c in TRANSCENDENTAL_OPS}, op, False):
        return True
    spec = getattr(op, "nfunc_spec", None)
    return bool(spec) and str(spec[0]).startswith("scipy.special.")


def backward_cone(program: Program, roots: Iterable[int]) -> set[int]:
    """Indices of every instruction that (transitively) computes one of ``roots``."""
    producer = program.producers()
    cone: set[int] = set()
    todo = list(roots)
    while todo:
        k = producer.get(todo.pop())
        if k is not None and k not in cone:
            cone.add(k)
            todo.extend(program.instrs[k].inputs)
    return cone


# -- requirements: what each value must preserve for the decisions it feeds -------------


def output_needs(sensitive_outputs) -> dict[int, frozenset]:
    """``{output position: requirements}`` from positions (each EXACT), ``(position,
    requirement)`` pairs, or a mapping of positions to requirement sets."""
    if isinstance(sensitive_outputs, Mapping):
        return {int(p): frozenset(r) for p, r in sensitive_outputs.items() if r}
    out: dict[int, set] = {}
    for item in sensitive_outputs:
        pos, req = (item, EXACT) if isinstance(item, int) else item
        out.setdefault(int(pos), set()).add(req)
    return {p: frozenset(r) for p, r in out.items()}


def needs_items(needs: Mapping[int, Iterable]) -> frozenset:
    """The hashable form ops carry: a frozenset of ``(position, requirement)`` pairs."""
    return frozenset((p, r) for p, reqs in needs.items() for r in reqs)


def natural_class(program: Program, k: int) -> str:
    """The class of instruction ``k`` outside every comparison cone."""
    return TRANSCENDENTAL if is_transcendental(program.instrs[k].op) else ARITHMETIC


def _constant_operands(program: Program, instr: Instr) -> list[float | None]:
    const = dict(program.constants)
    out = []
    for v in instr.inputs:
        c = const.get(v)
        try:
            out.append(None if c is None else float(c))
        except (TypeError, ValueError):
            out.append(None)
    return out


def decision_seeds(program: Program, instr: Instr) -> list[tuple[int, object]]:
    """(value id, requirement) that a decision instruction puts on its decision inputs."""
    op_class = type(instr.op)
    if op_class in DECISION_COMPARISONS and len(instr.inputs) == 2:
        needs = comparison_needs(op_class, _constant_operands(program, instr))
        if needs is not None:
            return [(v, r) for v, r in zip(instr.inputs, needs, strict=True) if r is not None]
    if op_class is ps.IsNan:
        return [(instr.inputs[0], NAN)]
    if op_class is ps.IsInf:
        return [(instr.inputs[0], cmp("eq", math.inf)), (instr.inputs[0], cmp("eq", -math.inf))]
    return [(v, EXACT) for v in decision_inputs(instr, program.dtypes)]


def _produces_a_decision(instr: Instr) -> bool:
    """Comparisons and tests whose output is the decision itself (a bool): its exactness
    only needs the seeds on their inputs."""
    return type(instr.op) in DECISION_COMPARISONS or type(instr.op) in (ps.IsNan, ps.IsInf)


@dataclass(frozen=True)
class Analysis:
    """What the analysis found for one program."""

    classes: tuple[str, ...]  # per instruction
    needs: Mapping[int, frozenset]  # value id -> requirements it must preserve
    robust: Mapping[int, frozenset]  # instruction -> predicates decided robustly on its output
    # instruction -> (class rule, |x| bands where it calls libm): computed by class (`class_rules`)
    by_class: Mapping[int, tuple] = field(default_factory=dict)
    # input positions whose value reaches nothing but readers deciding by its class
    class_only_inputs: frozenset = frozenset()


def analyze(
    program: Program,
    sensitive_outputs=(),
    relaxable: Callable[[int], bool] | None = None,
    input_facts=(),
    by_class: Callable[[int], bool] | None = None,
) -> Analysis:
    """Classify every instruction, propagating requirements backward from the decisions.

    ``sensitive_outputs``: outputs a decision elsewhere consumes (see `output_needs`).
    ``relaxable(k)``: whether instruction ``k`` may be decided robustly (its non-strict
    flags keep IEEE NaN/inf semantics); by default every instruction may.
    ``input_facts``: intervals of inputs and relations between them (`ranges`): a
    predicate fixed on a value's interval needs only its NaN pattern (or nothing), and
    a strict op in `robust.NAN_SOURCES` passes a NaN pattern on as predicates on its
    operands instead of needing them exact.
    ``by_class(k, row)``: whether instruction ``k`` may be computed by class with
    `class_rules` row ``row`` where every predicate on it is decided by its class; by
    default none is. With it, a decision that is a function of its operands' classes
    (sign) asks only for their classes, and a strict op that passes a class on
    (`class_rules.CLASS_READERS`) asks its operands for theirs.
    """
    facts = program_ranges(program, input_facts)
    needs: dict[int, set] = {}
    out_needs = output_needs(sensitive_outputs)
    for pos, reqs in out_needs.items():
        needs.setdefault(program.outputs[pos], set()).update(r for r in reqs if r != CLASS_ONLY)
    # outputs whose value (not only its class) may reach something downstream
    leaky = frozenset(v for p, v in enumerate(program.outputs) if CLASS_ONLY not in out_needs.get(p, ()))
    decisions, class_decisions = set(), set()
    for k, instr in enumerate(program.instrs):
        if is_decision(instr, program.dtypes):
            decisions.add(k)
            seeds = _class_seeds(program, instr) if by_class is not None else None
            if seeds is not None:
                class_decisions.add(k)
            for v, req in seeds or decision_seeds(program, instr):
                needs.setdefault(v, set()).add(req)
    strict, robust, classed = set(decisions), {}, {}
    constants = dict(program.constants)
    # instructions whose outputs leak no value but a class (`_class_only`)
    class_readers = {k for k in decisions if _produces_a_decision(program.instrs[k])} | class_decisions
    for k in reversed(range(len(program.instrs))):
        instr = program.instrs[k]
        wanted = set().union(*(needs.get(o, ()) for o in instr.outputs))
        if len(instr.outputs) == 1:
            wanted = settle_all(wanted, facts.ranges.get(instr.outputs[0]))
        if k in classed:  # an exp folded into a quotient computed by class: x exact
            strict.add(k)
            needs.setdefault(instr.inputs[0], set()).add(EXACT)
            continue
        if not wanted or (k in decisions and _produces_a_decision(instr)) or k in class_decisions:
            continue
        per_input = None
        if k not in decisions and len(instr.outputs) == 1 and (relaxable is None or relaxable(k)):
            per_input = [set() for _ in instr.inputs]
            for req in wanted:
                translated = input_needs(instr.op, req, len(instr.inputs), tuple(constants.get(v) for v in instr.inputs))
                if translated is None:
                    per_input = None
                    break
                for acc, reqs in zip(per_input, translated, strict=True):
                    acc.update(reqs)
        passes_class = False
        if per_input is None and k not in decisions and by_class is not None:
            per_input = _class_needs(program, instr, k, wanted, constants, by_class, classed)
            if per_input is None:
                per_input = _quotient_needs(program, instr, k, wanted, by_class, classed, class_readers, leaky)
            if per_input is None:
                per_input = _class_reader_needs(program, instr, wanted)
                passes_class = per_input is not None
            reads_classes = passes_class or (k in classed and isinstance(classed[k][0], ClassRule))
            if reads_classes and _class_only(program, instr.outputs, class_readers, leaky):
                class_readers.add(k)  # a class row or reader: its operands read by class
        if k in classed or passes_class:
            strict.add(k)
        elif per_input is None:
            strict.add(k)
            keeps_nan = relaxable is None or relaxable(k, COMPARISON_SENSITIVE)
            per_input = _nan_pattern_needs(program, instr, wanted, facts) if k not in decisions and keeps_nan else None
            if per_input is None:
                per_input = [{EXACT}] * len(instr.inputs)
        else:
            robust[k] = frozenset(wanted)
        for v, reqs in zip(instr.inputs, per_input, strict=True):
            needs.setdefault(v, set()).update(reqs)
    for v in program.inputs:  # what reaches the inputs, simplified on their intervals
        if v in needs:
            needs[v] = settle_all(needs[v], facts.ranges.get(v))
    classes = tuple(
        COMPARISON_SENSITIVE if k in strict else natural_class(program, k) for k in range(len(program.instrs))
    )
    class_only_inputs = frozenset(
        p
        for p, v in enumerate(program.inputs)
        if by_class is not None
        and all(decided_by_class(r) for r in needs.get(v, ()))
        and _class_only(program, (v,), class_readers, leaky)
    )
    return Analysis(classes, {v: frozenset(r) for v, r in needs.items()}, robust, classed, class_only_inputs)


def _class_needs(program: Program, instr: Instr, k: int, wanted: set, constants, by_class, classed) -> list[set] | None:
    """What a pow computed by class asks of its operands (recording it in ``classed``), or
    None: some predicate on it needs more than its class, no `class_rules` row, or the
    policy keeps its value libm's (``by_class``)."""
    if len(instr.outputs) != 1 or not all(decided_by_class(r) for r in wanted):
        return None
    row = class_rule(instr.op, [constants.get(v) for v in instr.inputs], program.dtypes[instr.outputs[0]])
    if row is None or program.dtypes[instr.inputs[0]] != row.dtype or not by_class(k, row):
        return None
    bands = row.input_bands(exact_bands(wanted))
    classed[k] = (row, bands)
    return [{class_req(bands)}, set()]


def _class_only(program: Program, values, class_readers: set, leaky: frozenset) -> bool:
    """Whether nothing of ``values`` but their class reaches anything: none is an output
    whose value may be read downstream (``leaky``: outputs without the `CLASS_ONLY` mark),
    and every reader is in ``class_readers`` (a decision whose output is the decision,
    sign, a class row or reader whose own outputs are class only)."""
    consumers = program.consumers()
    return all(v not in leaky and all(c in class_readers for c in consumers.get(v, ())) for v in values)


def _quotient_needs(program: Program, instr: Instr, k: int, wanted: set, by_class, classed, class_readers, leaky):
    """``a / exp(x)`` computed by class (`class_rules.QuotientRule`), recording it and the
    exp folded into it in ``classed``: a and x exact, nothing of the exp; or None (some
    predicate needs more than the class, no row, the exp feeds something else, the
    quotient's value reaches a reader that does not decide by class, or the policy keeps
    the value as written)."""
    if instr.op_name != "TrueDiv" or len(instr.inputs) != 2 or len(instr.outputs) != 1:
        return None
    if not all(decided_by_class(r) for r in wanted) or not _class_only(program, instr.outputs, class_readers, leaky):
        return None
    a, d = instr.inputs
    j = program.producers().get(d)
    if j is None or d == a or d in program.outputs or program.consumers().get(d, ()) != [k]:
        return None
    inner = program.instrs[j]
    if len(inner.inputs) != 1 or len(inner.outputs) != 1:
        return None
    x = inner.inputs[0]
    row = quotient_rule(inner.op_name, tuple(program.dtypes[v] for v in (a, d, x, instr.outputs[0])))
    if row is None or not by_class(j, row):  # the exp's budget: its value is what goes
        return None
    safe = row.safe_intervals(exact_bands(wanted))
    if safe is None:
        return None
    classed[k] = (row, safe)
    classed[j] = (FOLDED_EXP, ())
    return [{EXACT}, set()]


def _floats(program: Program, instr: Instr) -> bool:
    return all(program.dtypes[v].startswith("float") for v in (*instr.inputs, *instr.outputs))


def _producer_names(program: Program, instr: Instr) -> tuple:
    producer = program.producers()
    return tuple(None if (p := producer.get(v)) is None else program.instrs[p].op_name for v in instr.inputs)


def _class_seeds(program: Program, instr: Instr) -> list | None:
    """A decision whose output is a function of its float operands' classes (`class_rules.
    CLASS_READERS`: sign): the class of each operand, whatever its readers want of it."""
    if not _floats(program, instr):
        return None
    per_input = class_reader_needs(instr.op_name, _producer_names(program, instr), ())
    return None if per_input is None else list(zip(instr.inputs, per_input, strict=True))


def _class_reader_needs(program: Program, instr: Instr, wanted: set) -> list[set] | None:
    """A strict op that passes a class requirement on (`class_rules.CLASS_READERS`): the
    class of its operands (their bits in the bands wanted on its output), or None."""
    if len(instr.outputs) != 1 or not all(decided_by_class(r) for r in wanted) or not _floats(program, instr):
        return None
    per_input = class_reader_needs(instr.op_name, _producer_names(program, instr), exact_bands(wanted))
    return None if per_input is None else [{r} for r in per_input]


def _nan_pattern_needs(program: Program, instr: Instr, wanted: set, facts) -> list[set] | None:
    """Per-operand predicates deciding a strict ``instr``'s NaN pattern, when that is all
    ``wanted`` asks for and ``instr`` is in `robust.NAN_SOURCES` (float operands)."""
    if wanted != {NAN} or len(instr.outputs) != 1:
        return None
    preds = nan_sources(instr.op, len(instr.inputs))
    if preds is None or not all(program.dtypes[v].startswith("float") for v in (*instr.inputs, *instr.outputs)):
        return None
    return [settle_all(preds, facts.ranges.get(v)) for v in instr.inputs]


def relaxable_under(program: Program, policy) -> Callable[[int], bool] | None:
    """``relaxable`` for `analyze` under ``policy``: an instruction may be decided robustly
    when the flags it gets outside cones keep IEEE NaN/inf semantics (no nnan, no ninf);
    ``relaxable(k, klass)`` asks the same of the flags of class ``klass``."""
    if policy is None:
        return None
    def relaxable(k: int, klass: str | None = None) -> bool:
        klass = klass or natural_class(program, k)
        return not (BREAKING_FLAGS & set(policy.flags_for(klass, program.instrs[k].op_name)))

    return relaxable


def by_class_under(program: Program, policy) -> Callable[[int], bool] | None:
    """``by_class`` for `analyze` under ``policy``: a pow may be computed by class where its
    natural class's budget allows the row's representative (``max_ulp >= row.max_ulp``):
    its value reaches the readers that do not decide (`class_rules`)."""
    if policy is None:
        return None
    def by_class(k: int, row) -> bool:
        instr = program.instrs[k]
        return policy.rule_for(natural_class(program, k), instr.op_name).max_ulp >= row.max_ulp

    return by_class


def sensitive_instrs(program: Program, sensitive_outputs=(), relaxable=None) -> set[int]:
    """Instructions that must be strict: decisions, and the producers of values whose
    exact value (or a predicate on it no rule makes robust) decides something."""
    result = analyze(program, sensitive_outputs, relaxable)
    return {k for k, c in enumerate(result.classes) if c == COMPARISON_SENSITIVE}


def sensitive_inputs(program: Program, sensitive_outputs=(), relaxable=None, input_facts=()) -> dict[int, frozenset]:
    """``{input position: requirements}`` for the inputs whose values reach a decision
    (inside, or via a sensitive output)."""
    result = analyze(program, sensitive_outputs, relaxable, input_facts)
    return {p: result.needs[v] for p, v in enumerate(program.inputs) if result.needs.get(v)}


def classify(program: Program, sensitive_outputs=(), relaxable=None) -> tuple[str, ...]:
    """The class of every instruction of ``program`` (same order as ``program.instrs``).

    ``sensitive_outputs`` are outputs whose values feed a decision elsewhere.
    """
    return analyze(program, sensitive_outputs, relaxable).classes
