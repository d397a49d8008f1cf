"""The scalar program of a kernel node (pure Python over the function graph, no numba):
what `whole_graph` propagates requirements through and `graph_ranges` evaluates
intervals over."""

from __future__ import annotations

from pytensor.scalar.basic import ScalarOp
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.rewriting.scalarize import ScalarizedElemwise

from ptnumba_codegen.analysis.program import Program, from_scalar_op
from ptnumba_codegen.tables import mro_lookup


def inner_elemwise(op):
    [node] = [n for n in op.fgraph.apply_nodes if isinstance(n.op, Elemwise)]
    return node


def inner_careduce(op):
    [node] = [n for n in op.fgraph.apply_nodes if isinstance(n.op, CAReduce)]
    return node


def _elemwise_core(node):
    return node, node.op.scalar_op


def _fused_core(node):
    inner = inner_elemwise(node.op)
    return inner, inner.op.scalar_op


def _scalar_core(node):
    return node, node.op


# kernel node op class -> (apply node of its scalar core, the core's scalar op)
CORES = {
    FusedElemwise: _fused_core,
    ScalarizedElemwise: _fused_core,
    Elemwise: _elemwise_core,
    ScalarOp: _scalar_core,
}


def kernel_core(node):
    """(apply node, scalar op) of a kernel node's scalar core, else None (a reduction, ...)."""
    core = mro_lookup(CORES, node.op)
    return None if core is None else core(node)


def node_program(node, scalar_op=None) -> Program:
    """The scalar program of a kernel node: its core's scalar op (or ``scalar_op``) on the
    core's input and output dtypes."""
    core_node, core_op = kernel_core(node)
    return from_scalar_op(
        core_op if scalar_op is None else scalar_op,
        [i.type.dtype for i in core_node.inputs],
        [o.type.dtype for o in core_node.outputs],
    )


def kernel_program(node) -> tuple[Program, int] | None:
    """(scalar program, number of outer inputs it reads) of a kernel node, else None."""
    core = kernel_core(node)
    if core is None:
        return None
    return node_program(node), len(core[0].inputs)
