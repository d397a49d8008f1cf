"""Classify every scalar instruction of a Program (pure Python, no numba).

The rules, in order (the first that matches wins, so strict wins):

1. *comparison_sensitive*: a decision op (see DECISION_INPUTS) and every instruction in
   the backward cone of its decision inputs, all the way to the program inputs; also
   the backward cone of every output listed in ``sensitive_outputs`` (values that a
   decision in another node consumes).
2. *reduction*: an associative Add/Mul with three or more operands, or an Add/Mul whose
   operand is produced by, or whose result feeds, the same associative op (a chain).
3. *transcendental*: the ops in TRANSCENDENTAL_OPS and every scipy.special-backed op.
4. *arithmetic*: everything else.
"""

from __future__ import annotations

from collections.abc import Iterable

from pytensor.scalar import basic as ps
from pytensor.scalar import math as psm
from pytensor.scalar.loop import ScalarLoop

from ptnumba_codegen.flags import ARITHMETIC, COMPARISON_SENSITIVE, REDUCTION, TRANSCENDENTAL
from ptnumba_codegen.program import Instr, Program

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

ASSOCIATIVE_OPS: tuple[type, ...] = (ps.Add, ps.Mul)

TRANSCENDENTAL_OPS: frozenset[type] = frozenset(
    {
        ps.Exp, ps.Exp2, ps.Expm1, ps.Log, ps.Log2, ps.Log10, ps.Log1p, ps.Pow, ps.Sqrt,
        ps.Sin, ps.Cos, ps.Tan, ps.ArcSin, ps.ArcCos, ps.ArcTan, ps.ArcTan2,
        ps.Sinh, ps.Cosh, ps.Tanh, ps.ArcSinh, ps.ArcCosh, ps.ArcTanh,
        psm.Sigmoid, psm.Softplus, psm.Log1mexp, psm.Erf, psm.Erfc, psm.Erfcx,
        psm.Erfinv, psm.Erfcinv, psm.GammaLn, psm.Gamma, psm.Psi, psm.TriGamma,
    }
)  # fmt: skip


def _lookup(table, op):
    for cls in type(op).__mro__:
        if cls in table:
            return table[cls]
    return False


def decision_inputs(instr: Instr, dtypes) -> tuple[int, ...]:
    """Value ids whose exact value decides this instruction's result (may be empty)."""
    rule = _lookup(DECISION_INPUTS, instr.op)
    if rule is False:
        return ()
    if callable(rule):
        rule = rule(instr, dtypes)
    if rule is ALL:
        return instr.inputs
    return tuple(instr.inputs[i] for i in rule)


def is_decision(instr: Instr, dtypes) -> bool:
    rule = _lookup(DECISION_INPUTS, instr.op)
    if callable(rule):
        return rule(instr, dtypes) != ()
    return rule is not False


def is_transcendental(op) -> bool:
    if _lookup({c: True for c in TRANSCENDENTAL_OPS}, op):
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


def sensitive_instrs(program: Program, sensitive_outputs: Iterable[int] = ()) -> set[int]:
    """Decision ops, their decision cones and the cones of externally compared outputs."""
    roots: list[int] = [program.outputs[i] for i in sensitive_outputs]
    marked: set[int] = set()
    for k, instr in enumerate(program.instrs):
        if is_decision(instr, program.dtypes):
            marked.add(k)
            roots.extend(decision_inputs(instr, program.dtypes))
    return marked | backward_cone(program, roots)


def sensitive_inputs(program: Program, sensitive_outputs: Iterable[int] = ()) -> set[int]:
    """Input positions whose values reach a decision (inside, or via a sensitive output)."""
    producer = program.producers()
    roots: list[int] = [program.outputs[i] for i in sensitive_outputs]
    for instr in program.instrs:
        roots.extend(decision_inputs(instr, program.dtypes))
    position = {v: k for k, v in enumerate(program.inputs)}
    found, seen, todo = set(), set(), roots
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in position:
            found.add(position[v])
        k = producer.get(v)
        if k is not None:
            todo.extend(program.instrs[k].inputs)
    return found


def _reduction_chain(program: Program) -> set[int]:
    producer, consumers = program.producers(), program.consumers()
    out: set[int] = set()
    for k, instr in enumerate(program.instrs):
        if not isinstance(instr.op, ASSOCIATIVE_OPS):
            continue
        same = type(instr.op)
        fed_by_same = any(
            (p := producer.get(v)) is not None and type(program.instrs[p].op) is same
            for v in instr.inputs
        )
        feeds_same = any(
            type(program.instrs[c].op) is same for o in instr.outputs for c in consumers.get(o, ())
        )
        if len(instr.inputs) >= 3 or fed_by_same or feeds_same:
            out.add(k)
    return out


def classify(program: Program, sensitive_outputs: Iterable[int] = ()) -> tuple[str, ...]:
    """The class of every instruction of ``program`` (same order as ``program.instrs``).

    ``sensitive_outputs`` are output positions whose values feed a decision elsewhere.
    """
    sensitive = sensitive_instrs(program, sensitive_outputs)
    chains = _reduction_chain(program)
    classes = []
    for k, instr in enumerate(program.instrs):
        if k in sensitive:
            classes.append(COMPARISON_SENSITIVE)
        elif k in chains:
            classes.append(REDUCTION)
        elif is_transcendental(instr.op):
            classes.append(TRANSCENDENTAL)
        else:
            classes.append(ARITHMETIC)
    return tuple(classes)

