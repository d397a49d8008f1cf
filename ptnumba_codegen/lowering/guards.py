"""Safe arguments for vector calls on the lanes a Switch drops.

In ``switch(x > 0, log(x), c)`` a vectorized loop computes ``log`` on every lane and then
selects; lanes with ``x <= 0`` would send out-of-domain arguments to libmvec, which
handles them in a slow per-lane fallback (slower than scalar libm). When a vector call
only feeds one branch of a Switch (directly or through instructions that feed nothing
else), its arguments are replaced by ``1.0`` (valid for every function of the tier) on the
lanes where the other branch is taken; those lanes' results are discarded, so no
element's value changes.
"""

from __future__ import annotations

from pytensor.scalar.basic import Switch

from ptnumba_codegen.analysis.program import Program


def _exclusive_cone(program: Program, switch_k: int, value: int) -> set[int]:
    """Instructions whose results reach nothing but this one Switch operand."""
    producer, consumers = program.producers(), program.consumers()
    outputs = set(program.outputs)
    first = producer.get(value)
    if first is None or value in outputs or consumers.get(value) != [switch_k]:
        return set()
    if program.instrs[switch_k].inputs.count(value) != 1:
        return set()
    cone, todo = {first}, [first]
    while todo:
        for v in program.instrs[todo.pop()].inputs:
            p = producer.get(v)
            if p is None or p in cone:
                continue
            outs = program.instrs[p].outputs
            if any(o in outputs for o in outs):
                continue
            if all(c in cone for o in outs for c in consumers.get(o, ())):
                cone.add(p)
                todo.append(p)
    return cone


def branch_guards(program: Program, emitters) -> dict[int, tuple[int, bool]]:
    """instruction index -> (condition value id, branch taken when the condition is true)."""
    guards = {}
    for k, instr in enumerate(program.instrs):
        if not isinstance(instr.op, Switch):
            continue
        cond = instr.inputs[0]
        for position, when_true in ((1, True), (2, False)):
            for p in _exclusive_cone(program, k, instr.inputs[position]):
                if emitters[p].label and p not in guards:  # a vector call
                    guards[p] = (cond, when_true)
    return guards


def emission_order(
    program: Program, guards: dict[int, tuple[int, bool]], conditions: dict[int, set[int]] | None = None
) -> tuple[int, ...]:
    """A topological order emitting each guard's condition before the guarded call (and
    ``conditions[k]``, the values a lazily computed call is branched on, before it)."""
    conditions = conditions or {}
    producer = program.producers()
    done: set[int] = set()
    order: list[int] = []

    def visit(k):
        if k in done:
            return
        done.add(k)
        deps = list(program.instrs[k].inputs)
        if k in guards:
            deps.insert(0, guards[k][0])
        deps[:0] = sorted(conditions.get(k, ()))
        for v in deps:
            p = producer.get(v)
            if p is not None:
                visit(p)
        order.append(k)

    for k in range(len(program.instrs)):
        visit(k)
    return tuple(order)
