"""Whole-graph sensitivity: which variables of a FunctionGraph feed a decision.

Pure Python over the function graph (no numba). A variable is *sensitive* when its exact
value decides something downstream: it is a decision input of a kernel (a comparison,
min/max, switch condition, rounding, ... in the kernel's scalar program, or a Max/Min
reduction), or it reaches such an input through ops that pass values on unchanged or
combine them (TRANSPARENT_OPS, another kernel's cone, a Sum/Prod/All/Any reduction whose
result is sensitive). The generator then compiles the cone that computes a sensitive
variable strictly, in whichever node it is computed.

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

from ptnumba_codegen.analysis import sensitive_inputs
from ptnumba_codegen.program import Program, from_scalar_op

# Ops whose float inputs reach their outputs unchanged (views, copies, gathers, joins).
TRANSPARENT_OPS: tuple[type, ...] = (
    DimShuffle,
    Reshape,
    SpecifyShape,
    ptsub.Subtensor,
    ptsub.AdvancedSubtensor,
    ptsub.IncSubtensor,
    ptsub.AdvancedIncSubtensor,
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


def program_sensitive_outputs(node, sensitive_vars) -> frozenset[int]:
    """Output positions of a kernel node whose values must be computed strictly."""
    out = {i for i, o in enumerate(node.outputs) if o in sensitive_vars}
    for i, spec in enumerate(getattr(node.op, "reduced_outputs", ()) or ()):
        if spec is not None and isinstance(spec[0], DECIDING_REDUCERS):
            out.add(i)  # a max/min reduction decides on every element it sees
    return frozenset(out)


def _careduce_input_sensitive(op, output_sensitive) -> bool:
    return isinstance(op.scalar_op, DECIDING_REDUCERS) or output_sensitive


def sensitive_variables(fgraph: FunctionGraph) -> set:
    """Every variable of ``fgraph`` whose exact value feeds a decision."""
    sensitive: set = set()
    for node in reversed(fgraph.toposort()):
        op = node.op
        outs_sensitive = any(o in sensitive for o in node.outputs)
        prog = kernel_program(node)
        if prog is not None:
            program, n_read = prog
            positions = sensitive_inputs(program, program_sensitive_outputs(node, sensitive))
            sensitive.update(node.inputs[p] for p in positions if p < n_read)
        elif isinstance(op, CAReduce):
            if _careduce_input_sensitive(op, outs_sensitive):
                sensitive.add(node.inputs[0])
        elif isinstance(op, ScalarCAReduce):
            if _careduce_input_sensitive(inner_careduce(op).op, outs_sensitive):
                sensitive.add(node.inputs[0])
        elif isinstance(op, TRANSPARENT_OPS) and outs_sensitive:
            sensitive.update(i for i in node.inputs if getattr(i.type, "dtype", "")[:5] == "float")
    return sensitive
