"""Plan and emit the scalar body of a kernel: one rule per instruction, each stamped
with the flags its class gets under the policy."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from llvmlite import ir

from ptnumba_codegen.analysis.classify import analyze, by_class_under, relaxable_under
from ptnumba_codegen.lowering.base import BodyLowering, Emitter, Unsupported, numba_type
from ptnumba_codegen.lowering.guards import branch_guards, emission_order
from ptnumba_codegen.lowering.lazy_branches import condition_values, emit_lazily, lazy_guards
from ptnumba_codegen.lowering.rules import plan_by_class, plan_instr
from ptnumba_codegen.lowering.stamp import stamp
from ptnumba_codegen.lowering.vecmath.isa import kernel_isa, row_isa
from ptnumba_codegen.policy import Policy
from ptnumba_codegen.analysis.program import Program


@dataclass(frozen=True)
class PlannedBody:
    program: Program
    classes: tuple[str, ...]
    flags: tuple[tuple[str, ...], ...]
    emitters: tuple[Emitter, ...]
    guards: dict = field(default_factory=dict)  # see lowering.guards
    order: tuple[int, ...] = ()
    robust: dict = field(default_factory=dict)  # instruction -> predicates it decides robustly
    lazy: dict = field(default_factory=dict)  # instruction -> formula it is computed under (lazy_branches)
    by_class: dict = field(default_factory=dict)  # instruction -> (class rule, bands): computed by class
    once: bool = False  # it runs for one element: every call in its scalar form (`_vectors_where_they_pay`)
    isa: str | None = None  # its vector calls' ISA where narrower than the host's (`isa.row_isa`)

    @property
    def uses_vector_math(self) -> bool:
        return any(e.label for e in self.emitters)

    @property
    def calls_opaque(self) -> bool:
        """A call inside keeps its loop scalar: a function LLVM's loop vectorizer cannot
        widen (`Emitter.opaque_call`) or a stock function."""
        return any(e.opaque_call or e.calls_stock for e in self.emitters)

    @property
    def stock_keys(self) -> tuple:
        """Cache keys of the stock functions this body calls (``None`` inside: uncacheable)."""
        keys = []
        for e in self.emitters:
            if e.stock_key is not None:
                keys.append(e.stock_key)
            keys.extend(e.inner_stock_keys)
        return tuple(keys)

    @property
    def lazy_key(self) -> tuple:
        """`lazy` in a canonical, hashable form (part of the kernel's cache key)."""
        return tuple((k, tuple(sorted(tuple(sorted(t)) for t in f))) for k, f in sorted(self.lazy.items()))

    def rows(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """(instruction, class, flags) per instruction, for explain and tests."""
        return list(zip(self.program.describe(), self.classes, self.flags, strict=True))


def _lanes_where_they_pay(emitters: list) -> list:
    """Lane calls (`lane_calls`) only in bodies that also call vector functions: they let
    such a loop vectorize; in a body of scalar libm calls alone the stock call is as fast
    or faster (CHANGELOG.md, "Lane calls"). Same bits either way.
    A lane call that runs as exact vector code (`exact_lanes`, ``pays_alone``) pays alone,
    unless a stock call keeps the loop scalar anyway (`_vectors_where_they_pay`)."""
    if any(e.label and e.without_lanes is None for e in emitters):
        return emitters
    if any(e.pays_alone for e in emitters) and not _has_stock_call(emitters):
        return emitters
    return [e.lanes_dropped() for e in emitters]


def _has_stock_call(emitters: list) -> bool:
    return any(e.calls_stock for e in emitters)


def _vectors_where_they_pay(emitters: list, once: bool = False) -> list:
    """Vector calls only in bodies whose loop can vectorize: a stock call inside (a
    function numba compiled on its own, opaque to the loop vectorizer: erfcx) keeps the
    loop scalar, and a vector function then does a whole vector's work for each element
    (slower than stock's scalar calls). Such a body gets every transcendental's scalar
    form (libm, within every budget).

    A body run ``once`` (a scalar node's, a loop of one element) has no loop to
    vectorize: a vector call would do a whole vector's work for its one value and give
    libmvec's error where libm's is at hand (libmvec's exp is 1 ulp off glibc's on many
    arguments, and a model's ODE solver amplified that past the agreement bar against C).
    It gets the scalar form of every call, and no lane calls (the same bits as the
    scalar call)."""
    if once:
        return [e.scalar().lanes_dropped() for e in emitters]
    if not _has_stock_call(emitters):
        return emitters
    return [e.scalar() for e in emitters]


def _float_dtype(program: Program) -> str:
    floats = {d for d in program.dtypes if d in ("float32", "float64")}
    return "float32" if floats == {"float32"} else "float64"


def plan_body(
    program: Program, policy: Policy, sensitive_outputs=(), input_facts=(), once: bool = False, row_length=None
) -> PlannedBody:
    """Classify and plan every instruction; raises Unsupported if one cannot be lowered.
    ``input_facts``: the inputs' intervals and relations (`graph_ranges`); ``once``: the
    body runs for one element (`_vectors_where_they_pay`); ``row_length``: the static
    length of its loop's innermost axis, if any (the vector calls' ISA, `isa.row_isa`)."""
    for d in (*program.input_dtypes, *program.output_dtypes):
        numba_type(d)
    isa = None if once else row_isa(row_length, _float_dtype(program))
    with kernel_isa(isa):
        planned = _plan_body(program, policy, sensitive_outputs, input_facts, once, isa)
    if isa is not None and not planned.uses_vector_math:
        planned = replace(planned, isa=None)  # nothing to narrow: one cache key for its kernels
    return planned


def _plan_body(program, policy, sensitive_outputs, input_facts, once, isa) -> PlannedBody:
    analysis = analyze(
        program, sensitive_outputs, relaxable_under(program, policy), input_facts, by_class_under(program, policy)
    )
    classes = analysis.classes
    flags, emitters = [], []
    for k, (instr, klass) in enumerate(zip(program.instrs, classes, strict=True)):
        instr_flags = policy.flags_for(klass, instr.op_name)
        flags.append(instr_flags)
        if k in analysis.by_class:
            row, bands = analysis.by_class[k]
            dtypes = [program.dtypes[v] for v in instr.inputs], [program.dtypes[v] for v in instr.outputs]
            emitters.append(plan_by_class(row, bands, *dtypes))
            continue
        emitters.append(
            plan_instr(
                instr.op,
                [program.dtypes[v] for v in instr.inputs],
                [program.dtypes[v] for v in instr.outputs],
                flags=instr_flags,
                klass=klass,
                policy=policy,
                bodies=BODIES,
            )
        )
    emitters = _lanes_where_they_pay(_vectors_where_they_pay(emitters, once))
    guards = branch_guards(program, emitters)
    lazy = lazy_guards(program, emitters)
    conditions = {k: condition_values(f) for k, f in lazy.items()}
    return PlannedBody(
        program,
        classes,
        tuple(flags),
        tuple(emitters),
        guards,
        emission_order(program, guards, conditions),
        dict(analysis.robust),
        lazy,
        dict(analysis.by_class),
        once,
        isa,
    )


def emit_body(context, builder, planned: PlannedBody, args: list, record: list | None = None) -> list:
    """Emit the scalar body on ``args`` (one ir.Value per program input)."""
    with kernel_isa(planned.isa):
        return _emit_body(context, builder, planned, args, record)


def _emit_body(context, builder, planned: PlannedBody, args: list, record: list | None) -> list:
    program = planned.program
    env = dict(zip(program.inputs, args, strict=True))
    for vid, value in program.constants:
        ty = numba_type(program.dtypes[vid])
        env[vid] = context.get_constant(ty, np.asarray(value).item())
    for k in planned.order or range(len(program.instrs)):
        instr, emitter, flags = program.instrs[k], planned.emitters[k], planned.flags[k]
        args = [env[v] for v in instr.inputs]
        if k in planned.guards:
            args = _guarded(context, builder, planned, k, args, env)
        if k in planned.lazy:
            outs = emit_lazily(
                context, builder, planned.lazy[k], env, program.dtypes,
                lambda: _stamped(emitter, context, builder, args, flags, record),
            )
        else:
            outs = _stamped(emitter, context, builder, args, flags, record)
        env.update(zip(instr.outputs, outs, strict=True))
    return [env[v] for v in program.outputs]


def _stamped(emitter, context, builder, args, flags, record):
    with stamp(builder, flags, record):
        return emitter(context, builder, args, flags)


def _guarded(context, builder, planned, k, args, env):
    """Replace float arguments by 1.0 on lanes where the guarding Switch drops this value."""
    cond_id, when_true = planned.guards[k]
    cond = context.is_true(builder, numba_type(planned.program.dtypes[cond_id]), env[cond_id])
    if not when_true:
        cond = builder.not_(cond)
    out = []
    for a in args:
        if isinstance(a.type, ir.FloatType | ir.DoubleType):
            a = builder.select(cond, a, ir.Constant(a.type, 1.0))
        out.append(a)
    return out


# How a rule lowers an inner program (a ScalarLoop's): as a body of its own, here.
BODIES = BodyLowering(plan_body, emit_body)

__all__ = ["BODIES", "PlannedBody", "Unsupported", "emit_body", "plan_body"]
