"""Calls computed only on the elements whose result a Switch keeps.

A Switch evaluates both branches for every element: PyMC's censored normal computes
``erfcx`` (a stock call, costly beside the arithmetic) for the lower-tail formula of every
row, though only the censored rows with ``z < -1`` keep it. In a loop that stays scalar
anyway (no vector call in its body: a stock call or libm keeps LLVM from vectorizing it),
a call whose result only matters under some Switch conditions is emitted inside
``if (conditions)``; elsewhere it yields a placeholder that every consumer's Switch drops. The
values that are kept are computed by the same emitter, with the same flags, on the same
arguments: no element changes.

`needed_when` is the analysis (pure Python over the program): for each instruction, the
conditions under which its result can reach an output, as a small formula in disjunctive
normal form over Switch conditions. `LAZY_WHEN` says which instructions are emitted lazily.
"""

from __future__ import annotations

from llvmlite import ir
from pytensor.scalar.basic import Switch

from ptnumba_codegen.analysis.classify import is_transcendental
from ptnumba_codegen.analysis.program import Program
from ptnumba_codegen.lowering.base import numba_type

# A formula: frozenset of terms (OR), each a frozenset of (condition value id, polarity)
# literals (AND). ALWAYS is the formula with one empty term.
ALWAYS = frozenset({frozenset()})
MAX_TERMS = 8  # larger formulas become ALWAYS: a branch on them would cost what it saves
MAX_LITERALS = 6


def _simplify(terms) -> frozenset:
    terms = {t for t in terms if not any((c, not p) in t for c, p in t)}  # drop c and not c
    kept = {t for t in terms if not any(o < t for o in terms)}  # absorption: a | (a & b) = a
    if len(kept) > MAX_TERMS or any(len(t) > MAX_LITERALS for t in kept):
        return ALWAYS
    return frozenset(kept)


def _or(a: frozenset, b: frozenset) -> frozenset:
    if a == ALWAYS or b == ALWAYS:
        return ALWAYS
    return _simplify(a | b)


def _and_literal(f: frozenset, literal) -> frozenset:
    return _simplify(t | {literal} for t in f)


def needed_when(program: Program) -> dict[int, frozenset]:
    """instruction index -> the formula under which its results can reach an output."""
    outputs = set(program.outputs)
    consumers = program.consumers()
    need: dict[int, frozenset] = {}
    for k in reversed(range(len(program.instrs))):
        f: frozenset = frozenset()
        for out in program.instrs[k].outputs:
            if out in outputs:
                f = ALWAYS
                break
            for c in consumers.get(out, ()):
                g = need.get(c, ALWAYS)
                ins = program.instrs[c].inputs
                if isinstance(program.instrs[c].op, Switch):
                    for pos, v in enumerate(ins):
                        if v == out:
                            f = _or(f, g if pos == 0 else _and_literal(g, (ins[0], pos == 1)))
                else:
                    f = _or(f, g)
        need[k] = f if f else ALWAYS  # a dead value: computed as before
    return need


def _depends_on(program: Program, producer: dict, value: int, k: int) -> bool:
    """Whether ``value`` is computed (transitively) from instruction ``k``'s results."""
    todo, seen = [value], set()
    while todo:
        p = producer.get(todo.pop())
        if p is None or p in seen:
            continue
        if p == k:
            return True
        seen.add(p)
        todo.extend(program.instrs[p].inputs)
    return False


def _expensive(program: Program, k: int, emitter) -> bool:
    return emitter.stock_key is not None or is_transcendental(program.instrs[k].op)


def _scalar_results(program: Program, k: int) -> bool:
    return all(program.dtypes[o].startswith(("float", "int", "uint", "bool")) for o in program.instrs[k].outputs)


# why an instruction is computed lazily: (predicate(program, k, emitter, emitters), reason); all hold
LAZY_WHEN = (
    (
        lambda program, k, e, emitters: not any(x.label for x in emitters),
        "the loop stays scalar: no vector call in the body (a branch would stop a vectorized one)",
    ),
    (lambda program, k, e, emitters: _expensive(program, k, e), "it is a call (stock or a transcendental)"),
    (lambda program, k, e, emitters: _scalar_results(program, k), "its results are plain scalars"),
)


def lazy_guards(program: Program, emitters) -> dict[int, frozenset]:
    """instruction index -> the formula guarding its emission (only where `LAZY_WHEN`
    holds and the formula is not ALWAYS, and no condition of it depends on the call)."""
    if not any(isinstance(i.op, Switch) for i in program.instrs):
        return {}
    need = needed_when(program)
    producer = program.producers()
    out = {}
    for k, e in enumerate(emitters):
        f = need[k]
        if f == ALWAYS or not all(when(program, k, e, emitters) for when, _ in LAZY_WHEN):
            continue
        if any(_depends_on(program, producer, c, k) for t in f for c, _p in t):
            continue
        out[k] = f
    return out


def condition_values(formula: frozenset) -> set[int]:
    return {c for t in formula for c, _p in t}


def emit_lazily(context, builder, formula, env, dtypes, compute):
    """``compute()`` inside ``if formula``; outside, placeholders (1: no division by zero
    downstream) that the Switch consuming the results drops. Returns the results (phis)."""
    def is_true(c, polarity):
        v = context.is_true(builder, numba_type(dtypes[c]), env[c])
        return v if polarity else builder.not_(v)

    cond = None
    for term in sorted(formula, key=sorted):
        t = None
        for c, p in sorted(term):
            lit = is_true(c, p)
            t = lit if t is None else builder.and_(t, lit)
        cond = t if cond is None else builder.or_(cond, t)
    with builder.if_else(cond, likely=False) as (then, otherwise):
        with then:
            computed = compute()
            then_block = builder.basic_block
        with otherwise:
            placeholders = [
                ir.Constant(v.type, 1.0 if isinstance(v.type, ir.FloatType | ir.DoubleType) else 1) for v in computed
            ]
            else_block = builder.basic_block
    results = []
    for value, placeholder in zip(computed, placeholders, strict=True):
        phi = builder.phi(value.type)
        phi.add_incoming(value, then_block)
        phi.add_incoming(placeholder, else_block)
        results.append(phi)
    return results
