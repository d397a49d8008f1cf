"""Whole-graph sensitivity: which variables of a FunctionGraph feed a decision.

Pure Python over the function graph (no numba). A variable is *sensitive* when its exact
value -- or the outcome of a predicate on it (see `robust`) -- decides something
downstream: it is a decision input of a kernel (a comparison, min/max, switch condition,
rounding, ... in the kernel's scalar program, or a Max/Min reduction), or it reaches such
an input through ops that pass values on unchanged (TRANSPARENT_OPS, and PASS_FIRST_OPS
for their first input: the requirement passes through as it is), or that combine them (IncSubtensor, another kernel's cone, a
Sum/Prod/All/Any reduction whose result is sensitive: the inputs must then be exact).
The generator then compiles the cone that computes a sensitive variable strictly, in
whichever node it is computed, except where a robust rule lets the producer go.

Limits: propagation stops at any other op (Dot, Blockwise, Scan, OpFromGraph, random
variables, linear algebra, ...): a value compared after such an op is not tracked
through it. Values compared outside the compiled function are not known either.
"""

from __future__ import annotations

from pytensor.compile.ops import DeepCopyOp, ViewOp
from pytensor.graph.fg import FunctionGraph
from pytensor.raise_op import CheckAndRaise
import pytensor.tensor.basic as ptb
from pytensor.tensor.shape import Reshape, SpecifyShape
import pytensor.tensor.subtensor as ptsub
from pytensor.tensor.elemwise import CAReduce, DimShuffle
from pytensor.tensor.rewriting.scalarize import (
    ScalarCAReduce,
    ScalarizedJoin,
    ScalarSubtensor,
)
from pytensor.scalar.basic import Maximum, Minimum

from ptnumba_codegen.analysis.class_rules import CLASS_ONLY, decided_by_class
from ptnumba_codegen.analysis.classify import EXACT, analyze, by_class_under, relaxable_under, sensitive_inputs
from ptnumba_codegen.analysis.graph_ranges import GraphFacts, graph_facts
from ptnumba_codegen.analysis.kernel_programs import inner_careduce, kernel_program
from ptnumba_codegen.analysis.ranges import reduction_needs

# Ops whose float inputs reach their outputs unchanged (views, copies, gathers, joins):
# a predicate on an output is the same predicate on the inputs.
TRANSPARENT_OPS: tuple[type, ...] = (
    DimShuffle,
    Reshape,
    SpecifyShape,
    ptsub.Subtensor,
    ptsub.AdvancedSubtensor,
    ptb.Alloc,
    ptb.Join,
    ptb.Split,
    ptb.MakeVector,
    ptb.TensorFromScalar,
    ptb.ScalarFromTensor,
    ScalarSubtensor,
    ScalarizedJoin,
    DeepCopyOp,
    ViewOp,
    ptb.ExtractDiag,  # pt.diagonal: selects elements, as Subtensor (tests/test_whole_graph.py)
)
# Ops whose output is their first input, unchanged, once their other (boolean) inputs
# pass a check: a predicate on the output is the same predicate on that input.
PASS_FIRST_OPS: dict[type, str] = {
    CheckAndRaise: "Assert and PyMC's parameter checks return the checked value as it is "
    "(or raise): a value compared after a check is the value before it",
}
# Ops that read their float inputs' exact values whatever becomes of their outputs (op
# class -> why). Rows come from the modules that define such ops (`register_exact_reader`):
# the as-written pass's opaque copies compute decisions from their inputs as written.
EXACT_READERS: dict[type, str] = {}


def register_exact_reader(op_class: type, reason: str) -> None:
    """Add a row to `EXACT_READERS`: every float input of ``op_class`` must be exact."""
    EXACT_READERS[op_class] = reason


# Ops whose float inputs reach their outputs combined (inc_subtensor adds): inputs exact.
COMBINING_OPS: tuple[type, ...] = (ptsub.IncSubtensor, ptsub.AdvancedIncSubtensor)

DECIDING_REDUCERS = (Maximum, Minimum)


def program_sensitive_outputs(node, sensitive_vars, facts: GraphFacts | None = None) -> frozenset:
    """What each output of a kernel node must preserve, as ``(position, requirement)``
    pairs on the program's output values (see `analysis.output_needs`). A requirement on
    a reduced output becomes what it asks of the elements (`ranges.reduction_needs`:
    exact, unless the elements' intervals decide it)."""
    out = {i: set(sensitive_vars.get(o, ())) for i, o in enumerate(node.outputs)}
    node_facts = facts.nodes.get(node) if facts is not None else None
    for i, spec in enumerate(getattr(node.op, "reduced_outputs", ()) or ()):
        if spec is None:
            continue
        if isinstance(spec[0], DECIDING_REDUCERS):
            out[i].add(EXACT)  # a max/min reduction decides on every element it sees
        elif out[i]:
            reduced = node_facts.reduced.get(i) if node_facts is not None else None
            out[i] = reduction_needs(out[i], reduced) if reduced is not None else {EXACT}
    return frozenset((i, r) for i, reqs in out.items() for r in reqs)


def _careduce_input_sensitive(op, output_sensitive) -> bool:
    return isinstance(op.scalar_op, DECIDING_REDUCERS) or output_sensitive


def _is_float(var) -> bool:
    return getattr(var.type, "dtype", "")[:5] == "float"


def sensitive_variables(fgraph: FunctionGraph, policy=None, facts: GraphFacts | None = None) -> dict:
    """``{variable: requirements}`` for every variable of ``fgraph`` whose exact value (or
    a predicate on it) feeds a decision. ``policy`` decides which producers may be decided
    robustly (`analysis.relaxable_under`); ``facts`` are the graph's intervals
    (`graph_ranges.graph_facts`, computed when not given)."""
    if facts is None:
        facts = graph_facts(fgraph)
    needs: dict = {}

    def add(var, reqs):
        needs.setdefault(var, set()).update(reqs)

    for node in reversed(fgraph.toposort()):
        op = node.op
        wanted = set().union(*(needs.get(o, ()) for o in node.outputs))
        prog = kernel_program(node)
        if prog is not None:
            program, n_read = prog
            found = sensitive_inputs(
                program,
                program_sensitive_outputs(node, needs, facts),
                relaxable_under(program, policy),
                facts.input_facts(node),
            )
            for p, reqs in found.items():
                if p < n_read:
                    add(node.inputs[p], reqs)
        elif isinstance(op, CAReduce):
            if _careduce_input_sensitive(op, bool(wanted)):
                add(node.inputs[0], {EXACT})
        elif isinstance(op, ScalarCAReduce):
            if _careduce_input_sensitive(inner_careduce(op).op, bool(wanted)):
                add(node.inputs[0], {EXACT})
        elif isinstance(op, tuple(EXACT_READERS)):
            for i in node.inputs:
                if _is_float(i):
                    add(i, {EXACT})
        elif isinstance(op, TRANSPARENT_OPS) and wanted:
            for i in node.inputs:
                if _is_float(i):
                    add(i, wanted)
        elif isinstance(op, tuple(PASS_FIRST_OPS)) and wanted:
            add(node.inputs[0], wanted)
        elif isinstance(op, COMBINING_OPS) and wanted:
            for i in node.inputs:
                if _is_float(i):
                    add(i, {EXACT})
    return {v: frozenset(r) for v, r in needs.items() if r}


def class_only_variables(fgraph: FunctionGraph, sensitive: dict, policy, facts: GraphFacts) -> frozenset:
    """The variables of ``fgraph`` of which nothing but their class reaches anything: not
    an output of the function, and every client a kernel whose program reads it only by
    class (`classify.Analysis.class_only_inputs`: comparisons with 0 or +-inf, isnan, isinf,
    sign, the class rows and readers of `class_rules`, transitively, through outputs that
    are themselves class only) or a transparent op (`TRANSPARENT_OPS`) whose outputs are.
    ``sensitive``: `sensitive_variables`. A kernel's output marked class only
    (`with_class_only`) may be computed as any value of its class."""
    if policy is None:
        return frozenset()
    outputs = set(fgraph.outputs)
    # only a variable whose decisions all read its class can use the mark: the others'
    # readers are not analyzed again (their inputs count as read by value)
    candidates = {v for v, reqs in sensitive.items() if reqs and all(decided_by_class(r) for r in reqs)}
    leaks: set = set()  # variables some client may read more of than the class
    done: set = set()
    for node in reversed(fgraph.toposort()):
        class_only = {o for o in node.outputs if o not in leaks and o not in outputs and fgraph.clients.get(o)}
        done.update(class_only)
        read_by_class: set[int] = set()
        prog = kernel_program(node) if any(i in candidates for i in node.inputs) else None
        if prog is not None:
            program, n_read = prog
            needs = with_class_only(node, program_sensitive_outputs(node, sensitive, facts), frozenset(done))
            found = analyze(
                program, needs, relaxable_under(program, policy), facts.input_facts(node), by_class_under(program, policy)
            )
            read_by_class = {p for p in found.class_only_inputs if p < n_read}
        elif isinstance(node.op, TRANSPARENT_OPS) and node.outputs and all(o in class_only for o in node.outputs):
            read_by_class = set(range(len(node.inputs)))
        for p, i in enumerate(node.inputs):
            if p not in read_by_class:
                leaks.add(i)
    return frozenset(done)


def with_class_only(node, needs: frozenset, class_only: frozenset) -> frozenset:
    """``needs`` (`program_sensitive_outputs`) with the `CLASS_ONLY` mark on each output
    of ``node`` in ``class_only`` that a decision reads (not a reduced one)."""
    reduced = getattr(node.op, "reduced_outputs", ()) or ()
    read = {p for p, _ in needs}
    marks = {
        (p, CLASS_ONLY)
        for p, o in enumerate(node.outputs)
        if o in class_only and p in read and (p >= len(reduced) or reduced[p] is None)
    }
    return frozenset(needs) | marks
