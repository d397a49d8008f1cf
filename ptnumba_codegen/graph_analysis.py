"""Whole-graph sensitivity: which variables of a FunctionGraph feed a decision.

Pure Python over the function graph (no numba). A variable is *sensitive* when its exact
value -- or the outcome of a predicate on it (see `robust`) -- decides something
downstream: it is a decision input of a kernel (a comparison, min/max, switch condition,
rounding, ... in the kernel's scalar program, or a Max/Min reduction), or it reaches such
an input through ops that pass values on unchanged (TRANSPARENT_OPS: the requirement
passes through as it is), or that combine them (IncSubtensor, another kernel's cone, a
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
from pytensor.scalar.basic import ScalarOp
import pytensor.tensor.basic as ptb
from pytensor.tensor.shape import Reshape, SpecifyShape
import pytensor.tensor.subtensor as ptsub
from pytensor.tensor.elemwise import CAReduce, DimShuffle, Elemwise
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.rewriting.scalarize import (
    ScalarCAReduce,
    ScalarizedElemwise,
    ScalarizedJoin,
    ScalarSubtensor,
)
from pytensor.scalar.basic import Maximum, Minimum

from ptnumba_codegen.analysis import EXACT, relaxable_under, sensitive_inputs
from ptnumba_codegen.program import Program, from_scalar_op

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
)
# Ops whose float inputs reach their outputs combined (inc_subtensor adds): inputs exact.
COMBINING_OPS: tuple[type, ...] = (ptsub.IncSubtensor, ptsub.AdvancedIncSubtensor)

DECIDING_REDUCERS = (Maximum, Minimum)


def inner_elemwise(op):
    [node] = [n for n in op.fgraph.apply_nodes if isinstance(n.op, Elemwise)]
    return node


def inner_careduce(op):
    [node] = [n for n in op.fgraph.apply_nodes if isinstance(n.op, CAReduce)]
    return node


def kernel_program(node) -> tuple[Program, int] | None:
    """(scalar program, number of outer inputs it reads) of a kernel node, else None."""
    op = node.op
    if isinstance(op, Elemwise):
        return (
            from_scalar_op(op.scalar_op, [i.type.dtype for i in node.inputs], [o.type.dtype for o in node.outputs]),
            len(node.inputs),
        )
    if isinstance(op, FusedElemwise | ScalarizedElemwise):
        inner = inner_elemwise(op)
        return (
            from_scalar_op(
                inner.op.scalar_op,
                [i.type.dtype for i in inner.inputs],
                [o.type.dtype for o in inner.outputs],
            ),
            len(inner.inputs),
        )
    if isinstance(op, ScalarOp):
        return (
            from_scalar_op(op, [i.type.dtype for i in node.inputs], [o.type.dtype for o in node.outputs]),
            len(node.inputs),
        )
    return None


def program_sensitive_outputs(node, sensitive_vars) -> frozenset:
    """What each output of a kernel node must preserve, as ``(position, requirement)``
    pairs (see `analysis.output_needs`)."""
    out = {i: set(sensitive_vars.get(o, ())) for i, o in enumerate(node.outputs)}
    for i, spec in enumerate(getattr(node.op, "reduced_outputs", ()) or ()):
        if spec is not None and isinstance(spec[0], DECIDING_REDUCERS):
            out[i].add(EXACT)  # a max/min reduction decides on every element it sees
    return frozenset((i, r) for i, reqs in out.items() for r in reqs)


def _careduce_input_sensitive(op, output_sensitive) -> bool:
    return isinstance(op.scalar_op, DECIDING_REDUCERS) or output_sensitive


def _is_float(var) -> bool:
    return getattr(var.type, "dtype", "")[:5] == "float"


def sensitive_variables(fgraph: FunctionGraph, policy=None) -> dict:
    """``{variable: requirements}`` for every variable of ``fgraph`` whose exact value (or
    a predicate on it) feeds a decision. ``policy`` decides which producers may be decided
    robustly (`analysis.relaxable_under`)."""
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
                program, program_sensitive_outputs(node, needs), relaxable_under(program, policy)
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
        elif isinstance(op, TRANSPARENT_OPS) and wanted:
            for i in node.inputs:
                if _is_float(i):
                    add(i, wanted)
        elif isinstance(op, COMBINING_OPS) and wanted:
            for i in node.inputs:
                if _is_float(i):
                    add(i, {EXACT})
    return {v: frozenset(r) for v, r in needs.items() if r}
