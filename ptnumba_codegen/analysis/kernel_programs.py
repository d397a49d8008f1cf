"""The scalar program of a kernel node (pure Python over the function graph, no numba):
what `graph_analysis` propagates requirements through and `graph_ranges` evaluates
intervals over."""

from __future__ import annotations

from pytensor.scalar.basic import ScalarOp
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.rewriting.scalarize import ScalarizedElemwise

from ptnumba_codegen.analysis.program import Program, from_scalar_op


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


