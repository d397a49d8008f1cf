"""The rule for ``ScalarLoop`` (e.g. the series in the gradients of gammainc/betainc).

The loop is emitted inline; its inner graph is a Program of its own, classified, planned
and emitted like any kernel body by the body planner the rule's context hands it
(`base.BodyLowering`). A carry that reaches the ``until`` condition (or a sensitive output
of the loop) is strict in every iteration, so its classification is a fixpoint over the
carries. Semantics follow the stock numba lowering: ``until`` starts
False; a for-loop with a negative count raises ValueError.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from pytensor.scalar.basic import Composite
from pytensor.scalar.loop import ScalarLoop

from ptnumba_codegen.analysis.classify import sensitive_inputs
from ptnumba_codegen.flags import COMPARISON_SENSITIVE
from ptnumba_codegen.lowering.base import Emitter, Typed, Unsupported, cast, numba_type
from ptnumba_codegen.analysis.program import from_scalar_op

def inner_program(op: ScalarLoop):
    comp = Composite(list(op.fgraph.inputs), list(op.fgraph.outputs))
    return from_scalar_op(comp, [i.type.dtype for i in op.fgraph.inputs])

def _never(k: int) -> bool:
    return False  # carries feed back: a robust rule on one iteration is not one on the loop


def loop_sensitive_outputs(op: ScalarLoop, program, outer_strict: bool) -> frozenset[int]:
    n_out = len(program.outputs)
    if outer_strict:
        return frozenset(range(n_out))
    n_carry = n_out - (1 if op.is_while else 0)
    sensitive = {n_out - 1} if op.is_while else set()
    while True:
        grown = sensitive | {p for p in sensitive_inputs(program, sensitive, relaxable=_never) if p < n_carry}
        if grown == sensitive:
            return frozenset(sensitive)
        sensitive = grown

def plan_scalar_loop(t: Typed):
    if t.bodies is None:
        raise Unsupported("a ScalarLoop is planned inside a body (its context has no body lowering)")
    op = t.op
    program = inner_program(op)
    planned = t.bodies.plan(program, t.policy, loop_sensitive_outputs(op, program, t.klass == COMPARISON_SENSITIVE))
    emit_body = t.bodies.emit
    n_carry = len(program.outputs) - (1 if op.is_while else 0)
    carry_in = t.inputs[1 : 1 + n_carry]
    const_in = t.inputs[1 + n_carry :]
    inner_types = [t.outputs[i] for i in range(n_carry)]

    const_types = [numba_type(d) for d in program.input_dtypes[n_carry:]]

    def emit(context, builder, args, flags):
        n_steps, *rest = args
        slots = []
        for val, src, dst in zip(rest[:n_carry], carry_in, inner_types, strict=True):
            slot = cgutils.alloca_once(builder, context.get_value_type(dst))
            builder.store(cast(context, builder, val, src, dst), slot)
            slots.append(slot)
        consts = [
            cast(context, builder, c, src, dst)
            for c, src, dst in zip(rest[n_carry:], const_in, const_types, strict=True)
        ]
        until = cgutils.alloca_once_value(builder, ir.Constant(ir.IntType(1), 0))
        n = cast(context, builder, n_steps, t.inputs[0], types.intp)
        if not op.is_while:
            with builder.if_then(builder.icmp_signed("<", n, ir.Constant(n.type, 0)), likely=False):
                context.call_conv.return_user_exc(
                    builder, ValueError, ("ScalarLoop does not have a termination condition.",)
                )
        with cgutils.for_range(builder, n) as loop:
            if op.is_while:
                with builder.if_then(builder.load(until), likely=False):
                    loop.do_break()
            values = emit_body(context, builder, planned, [builder.load(s) for s in slots] + consts)
            for slot, val in zip(slots, values[:n_carry], strict=True):
                builder.store(val, slot)
            if op.is_while:
                builder.store(values[-1], until)
        outs = [builder.load(s) for s in slots]
        if op.is_while:
            outs.append(builder.load(until))
        return outs

    return Emitter(emit, inner_stock_keys=planned.stock_keys)
