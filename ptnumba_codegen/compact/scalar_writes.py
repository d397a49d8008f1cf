"""An array update from a native scalar: ``IncSubtensor(x, TensorFromScalar(s), i, ...)``
without the 0-d array.

PyTensor's numba rewrites pass scalars between ops as native values
(``pytensor.tensor.rewriting.scalarize``: ``ScalarSubtensor``, ``ScalarizedElemwise``,
``ScalarizedJoin``), but ``IncSubtensor`` is not one of their scalar consumers: an update
that is a native scalar is wrapped into a new 0-d array (``TensorFromScalar``: one
allocation and one free per call) that the increment reads the item of at once. A Scan
step that assembles its state element by element (an HMM forward step filling ``zeros(K)``
with ``set_subtensor`` per state, and its gradient: one write per state and per pair of
states) makes one such array per write per step.

`ScalarizedIncSubtensor` is the same increment reading the scalar itself, in the image of
PyTensor's scalarized ops: a `FinalizedOpFromGraph` whose inner graph is the increment of
``TensorFromScalar`` of its scalar input (what stock computes, and its fallback), with the
increment's ``destroy_map``. Its node function is the compact increment's intrinsic
(`compact.increments.increment_intrinsic`) given the scalar where it reads a 0-d array's
item: the same store, the same ``+=`` on the same two values, the same cast.
`scalarized` builds one from a compact increment's node; `passes.scalar_writes` puts it in
the graph.
"""

from __future__ import annotations

from pytensor.compile.builders import FinalizedOpFromGraph
from pytensor.graph.basic import Apply
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key
from pytensor.link.numba.dispatch.compile_ops import numba_funcify_OpFromGraph
from pytensor.tensor.basic import TensorFromScalar, tensor_from_scalar
from pytensor.tensor.subtensor import IncSubtensor

from ptnumba_codegen.compact.increments import INC_SUBTENSOR, increment_intrinsic
from ptnumba_codegen.compact.ops import row_of
from ptnumba_codegen.compact.replica import installed_digest, why_off
from ptnumba_codegen.lowering.node_keys import cache_key

KEY = "ScalarizedIncSubtensor"


class ScalarizedIncSubtensor(FinalizedOpFromGraph):
    """An ``IncSubtensor`` whose update is a native scalar (inputs: ``x, s, *indices``)."""

    def __str__(self):
        return f"Scalarized{inner_increment(self).op}"


def inner_increment(op: ScalarizedIncSubtensor):
    """The one ``IncSubtensor`` node of ``op``'s inner graph."""
    [node] = [n for n in op.fgraph.apply_nodes if isinstance(n.op, IncSubtensor)]
    return node


def why_not_scalarized(node) -> str | None:
    """Why the increment ``node`` keeps its 0-d update, or None: it must be a compact
    ``IncSubtensor`` (its row on: the intrinsic that reads the scalar is that row's), and its
    update a 0-d array made by ``TensorFromScalar`` of a scalar of the update's dtype."""
    if row_of(type(node.op)) is not INC_SUBTENSOR:
        return f"{type(node.op).__name__} is not the compact IncSubtensor"
    if (off := why_off(INC_SUBTENSOR)) is not None:
        return f"the compact IncSubtensor is off: {off}"
    y = node.inputs[1]
    if y.type.ndim != 0 or y.owner is None or not isinstance(y.owner.op, TensorFromScalar):
        return "the update is not a 0-d array made by TensorFromScalar"
    if y.owner.inputs[0].type.dtype != y.type.dtype:
        return f"the scalar's dtype {y.owner.inputs[0].type.dtype} is not the update's {y.type.dtype}"
    return None


def scalarized(node):
    """The output of a `ScalarizedIncSubtensor` reading the scalar behind ``node``'s update
    (`why_not_scalarized` must hold): the same op inside, the same output type."""
    x, y, *indices = node.inputs
    s = y.owner.inputs[0]
    inner_inputs = [x.type(), s.type(), *(i.type() for i in indices)]
    inner_update = tensor_from_scalar(inner_inputs[1])
    # the node's own output type: rewrites may have given it a static shape make_node does not infer
    inner = Apply(node.op, [inner_inputs[0], inner_update, *inner_inputs[2:]], [node.outputs[0].type()])
    op = ScalarizedIncSubtensor(inner_inputs, inner.outputs, destroy_map=dict(node.op.destroy_map))
    return op(x, s, *indices)


@register_funcify_and_cache_key(ScalarizedIncSubtensor)
def funcify_scalarized_inc_subtensor(op, node=None, **kwargs):
    """The compact increment's intrinsic with the scalar for the update (its fallback, and
    the function where that row is off: the inner graph's, as any OpFromGraph's)."""
    if why_off(INC_SUBTENSOR) is not None:
        return numba_funcify_OpFromGraph(op, node=node, **kwargs)
    inner = inner_increment(op)
    params = (tuple(inner.op.idx_list), inner.op.inplace, inner.op.set_instead_of_inc, len(node.inputs) - 2, ())

    def stock():
        fn, _key = numba_funcify_OpFromGraph(op, node=node, **kwargs)
        return fn

    return increment_intrinsic(*params, stock), cache_key(KEY, installed_digest(INC_SUBTENSOR), *params)


__all__ = ["KEY", "ScalarizedIncSubtensor", "funcify_scalarized_inc_subtensor", "inner_increment", "scalarized",
           "why_not_scalarized"]
