"""Forward facts over a FunctionGraph (pure Python, no numba): the interval of every float
variable under every allowed implementation, and which variables are reductions of which.

`ranges` evaluates one kernel's program; this pass carries its results from node to node
so each kernel knows its inputs' intervals and relations: a kernel computing
``e / s`` where s is ``DimShuffle(Sum{axis=1}(e))`` of its own input e gets
``("sum_of", 0, 1, (1,))``. Relations are only drawn between inputs of one kernel that
are the very same variable and its reduction, broadcast back along the reduced axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytensor.tensor.basic as ptb
import pytensor.tensor.subtensor as ptsub
from pytensor.compile.ops import DeepCopyOp, ViewOp
from pytensor.graph.fg import FunctionGraph
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import CAReduce, DimShuffle
from pytensor.tensor.shape import Reshape, SpecifyShape

from ptnumba_codegen.analysis.kernel_programs import kernel_program
from ptnumba_codegen.analysis.ranges import UNKNOWN, Reduced, program_ranges, reduced_range
from ptnumba_codegen.tables import mro_lookup

# Ops whose output holds only values of their first input (views, copies, gathers): the
# interval passes on. (DimShuffle also carries a reduction's relation, below.)
VALUE_SUBSET_OPS: tuple[type, ...] = (
    Reshape, SpecifyShape, ptsub.Subtensor, ptsub.AdvancedSubtensor, DeepCopyOp, ViewOp, ptb.Alloc,
)  # fmt: skip
# reducer scalar op -> the kind `ranges.reduced_range` knows; relation made by each kind
REDUCER_KINDS: dict[type, str] = {
    ps.Add: "add", ps.Maximum: "max", ps.ScalarMaximum: "max", ps.Minimum: "min", ps.ScalarMinimum: "min",
}  # fmt: skip
RELATIONS: dict[str, str] = {"max": "max_of", "add": "sum_of"}


@dataclass(frozen=True)
class VarFact:
    interval: tuple[float, float] = UNKNOWN
    reduce_of: tuple | None = None  # (kind, source variable, axes): this is that reduction
    broadcast_of: tuple | None = None  # the same, broadcast back along the reduced axes


@dataclass
class GraphFacts:
    vars: dict = field(default_factory=dict)  # variable -> VarFact
    inputs: dict = field(default_factory=dict)  # kernel node -> input facts (see ranges)
    nodes: dict = field(default_factory=dict)  # kernel node -> NodeFacts

    def input_facts(self, node) -> tuple:
        return self.inputs.get(node, ())


@dataclass(frozen=True)
class NodeFacts:
    reduced: dict  # output position -> ranges.Reduced


def _kind(scalar_op) -> str:
    return mro_lookup(REDUCER_KINDS, scalar_op, type(scalar_op).__name__)


def _length(inputs, axis: int) -> int | None:
    """The static length of the loop along ``axis`` (None when not static)."""
    known, unknown = set(), False
    for var in inputs:
        shape = getattr(var.type, "shape", None)
        if shape is None or len(shape) <= axis:
            continue
        if shape[axis] is None:
            unknown = True
        elif shape[axis] != 1:
            known.add(shape[axis])
    if len(known) == 1:
        return known.pop()
    return None if (unknown or known) else 1


def _n_terms(inputs, axes) -> int | None:
    n = 1
    for a in axes:
        length = _length(inputs, a)
        if length is None:
            return None
        n *= length
    return n


def _expands_reduced_axes(op: DimShuffle, ndim: int, axes) -> bool:
    """Whether ``op`` puts back, as broadcastable axes, exactly the ``axes`` reduced away."""
    expected, j = [], 0
    for d in range(ndim):
        if d in axes:
            expected.append("x")
        else:
            expected.append(j)
            j += 1
    return tuple(op.new_order) == tuple(expected)


def _kernel(node, facts: GraphFacts) -> None:
    program, n_read = kernel_program(node)
    ins = list(node.inputs[:n_read])
    # an indexed read (a gather) puts other rows next to the ones a reduction summed
    gathers = any(e is not None for e in getattr(node.op, "indexed_inputs", None) or ())
    items = []
    for pos, var in enumerate(ins):
        f = facts.vars.get(var)
        if f is None:
            continue
        if f.interval != UNKNOWN:
            items.append(("range", pos, *f.interval))
        if f.broadcast_of is not None:
            kind, src, axes = f.broadcast_of
            if kind in RELATIONS and not gathers and src in ins and getattr(src.type, "ndim", -1) == var.type.ndim:
                items.append((RELATIONS[kind], ins.index(src), pos, tuple(axes)))
    items = tuple(items)
    facts.inputs[node] = items
    pr = program_ranges(program, items)
    specs = getattr(node.op, "reduced_outputs", None) or (None,) * len(node.outputs)
    reduced = {}
    scattered = {
        pos for e in getattr(node.op, "indexed_outputs", None) or () if e is not None for pos in e[0]
    }  # written into an update target through an index: the target's values, plus these
    for i, (out, spec) in enumerate(zip(node.outputs, specs, strict=True)):
        if i in scattered or i >= len(program.outputs):
            continue
        vid = program.outputs[i]
        elements = pr.ranges.get(vid, UNKNOWN)
        if spec is None:
            if elements != UNKNOWN:
                facts.vars[out] = VarFact(elements)
            continue
        scalar_op, axes = spec[0], tuple(spec[1])
        kind = _kind(scalar_op)
        n_terms = _n_terms(ins, axes)
        norm_axes, numerator_hi = pr.normalized.get(vid, (None, None))
        numerator_hi = numerator_hi if norm_axes == axes else None
        r = Reduced(kind, elements, n_terms, reduced_range(kind, elements, n_terms, numerator_hi))
        reduced[i] = r
        sibling = next((node.outputs[j] for j, s in enumerate(specs) if s is None and program.outputs[j] == vid), None)
        facts.vars[out] = VarFact(r.interval, (kind, sibling, axes) if sibling is not None else None)
    facts.nodes[node] = NodeFacts(reduced)


def _careduce(node, facts: GraphFacts) -> None:
    op, [x] = node.op, node.inputs
    axes = tuple(range(x.type.ndim)) if op.axis is None else tuple(op.axis)
    kind = _kind(op.scalar_op)
    elements = facts.vars.get(x, VarFact()).interval
    interval = reduced_range(kind, elements, _n_terms([x], axes))
    facts.vars[node.outputs[0]] = VarFact(interval, (kind, x, axes))


def _dimshuffle(node, facts: GraphFacts) -> None:
    f = facts.vars.get(node.inputs[0])
    if f is None:
        return
    broadcast = None
    if f.reduce_of is not None:
        kind, src, axes = f.reduce_of
        if _expands_reduced_axes(node.op, src.type.ndim, axes):
            broadcast = f.reduce_of
    facts.vars[node.outputs[0]] = VarFact(f.interval, None, broadcast)


def _union(intervals):
    return (min(i[0] for i in intervals), max(i[1] for i in intervals))


def graph_facts(fgraph: FunctionGraph) -> GraphFacts:
    """Intervals and reduction relations of ``fgraph``'s variables, in one forward pass."""
    facts = GraphFacts()
    for var in fgraph.variables:
        data = getattr(var, "data", None)
        if data is not None and getattr(var.type, "dtype", "").startswith("float"):
            try:
                facts.vars[var] = VarFact((float(data.min()), float(data.max())))
            except (TypeError, ValueError, AttributeError):
                pass
            else:
                if any(math.isnan(b) for b in facts.vars[var].interval):
                    del facts.vars[var]
    for node in fgraph.toposort():
        op = node.op
        if kernel_program(node) is not None:
            _kernel(node, facts)
        elif isinstance(op, CAReduce):
            _careduce(node, facts)
        elif isinstance(op, DimShuffle):
            _dimshuffle(node, facts)
        elif isinstance(op, VALUE_SUBSET_OPS):
            f = facts.vars.get(node.inputs[0])
            if f is not None and f.interval != UNKNOWN:
                facts.vars[node.outputs[0]] = VarFact(f.interval)
        elif isinstance(op, ptb.Join):
            ins = [facts.vars.get(v) for v in node.inputs[1:]]
            if ins and all(f is not None for f in ins):
                facts.vars[node.outputs[0]] = VarFact(_union([f.interval for f in ins]))
    return facts
