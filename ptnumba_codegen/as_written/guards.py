"""Overflow guards: stabilized forms in as-written cones, only where the as-written value
is not finite.

PyTensor's ``stabilize`` rewrites turn naive forms into stable ones (``log(1 + exp(x))``
into ``softplus(x)``, ``log(sum(exp(x)))`` into the max trick, ``log(1 - exp(x))`` into
``log1mexp(x)``, ...). They change values, so an as-written cone does not get them; but a
naive form that overflows would make its decision read ``inf`` where the rewritten graph
reads a finite number. So where ``stabilize`` would change a decision input ``w``, the
decision reads ``switch(isfinite(w), w, s)``: the as-written ``w`` wherever it is finite,
the stabilized ``s`` only where ``w`` is inf or NaN. Decisions then equal the reference
wherever the reference's decision inputs are finite.

Whether ``stabilize`` changes a cone is decided on its canonical form: the cone is
canonicalized, then stabilized, and a guard is added when the computing ops differ.
Pure pytensor (no numba).
"""

from __future__ import annotations

from functools import cache

from pytensor.compile.mode import optdb
from pytensor.graph.fg import FunctionGraph, Output
from pytensor.graph.replace import clone_replace
from pytensor.graph.rewriting.db import RewriteDatabaseQuery

from ptnumba_codegen.as_written import guard_verdicts
from ptnumba_codegen.as_written.decisions import EXACT_OPS, decision_rule, is_float

REASON = "as_written_overflow_guard"


def _op_counts(graph) -> dict:
    """How often each computing op (class, scalar op class) occurs: what stabilize changes."""
    counts: dict = {}
    for node in graph.toposort():
        if isinstance(node.op, EXACT_OPS):
            continue
        key = (type(node.op).__name__, type(getattr(node.op, "scalar_op", None)).__name__)
        counts[key] = counts.get(key, 0) + 1
    return counts


@cache
def _rewriters():
    return (
        optdb.query(RewriteDatabaseQuery(include=["ShapeOpt", "canonicalize"])),
        optdb.query(RewriteDatabaseQuery(include=["stabilize"])),
    )


def stabilized(inputs, var):
    """``var`` as PyTensor's stabilize rewrites compute it, or None if they change nothing
    (a "nothing" found by an earlier process for the same cone is read from disk:
    `guard_verdicts`)."""
    return guard_verdicts.probe_once(_rewriters(), inputs, var, lambda: _stabilized(inputs, var))


def _stabilized(inputs, var):
    canonicalize, stabilize = _rewriters()
    fg = FunctionGraph(list(inputs), [var], clone=True)
    canonicalize.rewrite(fg)
    before = _op_counts(fg)
    stabilize.rewrite(fg)
    if _op_counts(fg) == before:
        return None
    [out] = clone_replace(fg.outputs, replace=dict(zip(fg.inputs, inputs, strict=True)))
    return out


def _targets(graph, kind: str) -> list:
    """(reader node, input position) of every value to guard: the float decision inputs of
    the decision (``kind="decision"``), or every float output (``kind="inputs"``)."""
    if kind == "decision":
        node = graph.outputs[0].owner
        rule = decision_rule(node)
        return [(node, p) for p in (rule[1] if rule else ()) if is_float(node.inputs[p])]
    return [
        (client, 0)
        for out in graph.outputs
        if is_float(out)
        for client, _ in graph.clients[out]
        if isinstance(client.op, Output)
    ]


def add_overflow_guards(graph, kind: str) -> int:
    """Guard every decision input of ``graph`` (an `AsWritten` inner graph, in place) whose
    cone stabilize would change: ``switch(isfinite(w), w, stabilized w)``. The number of
    guards added."""
    import pytensor.tensor as pt

    added = 0
    for node, position in _targets(graph, kind):
        var = node.inputs[position]
        if var.owner is None:
            continue
        stable = stabilized(graph.inputs, var)
        if stable is None:
            continue
        guarded = pt.switch(pt.isfinite(var), var, stable)
        graph.change_node_input(node, position, guarded, reason=REASON, import_missing=True)
        added += 1
    return added
