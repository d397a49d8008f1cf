"""Indexed kernels whose body would use vector math are compiled as their parts.

PyTensor fuses gathers (``a[g]``) and scatter-adds (the gradient of ``a[g]``) into one
FusedElemwise with indexed inputs/outputs. Its loop is the stock one (indexed addresses:
`plans.plan_indexed_fused`) and never vectorizes, so a body calling vector formulas
(sigmoid, softplus, lgamma...) runs them one lane at a time, no faster than stock
(CHANGELOG.md, "Figures behind design choices").

Such a node keeps its place in the graph (PyTensor's own tests and rewrites see the
FusedElemwise they made); only its *lowering* is its inner graph -- the gather
(AdvancedSubtensor), the elementwise body (a policy kernel, vectorized), its reductions
(policy reductions), the scatter-add (AdvancedIncSubtensor) -- compiled as one numba
function, the gather and scatter-add as intrinsics inside it where `compact.table.COMPACT`
has them. The same values come out with the same bits: the elementwise body is the same
scalar program with the same per-instruction flags (same requirements, same input facts),
each reduction keeps the accumulator class the fused loop gives it, and the scatter-add
visits the rows in the same order. The cost is one temporary array per indexed value and
per reduced output, which the vector body pays back many times over.

`PARTS_WHEN` is the rule: which indexed kernels are lowered as their parts. Pure Python over
the graph.
"""

from __future__ import annotations

from pytensor.graph.basic import Apply
from pytensor.graph.fg import FunctionGraph
from pytensor.tensor.basic import ScalarFromTensor
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor

from ptnumba_codegen.analysis.classify import EXACT, output_needs
from ptnumba_codegen.compact.ops import compact_op
from ptnumba_codegen.lowering.base import Unsupported
from ptnumba_codegen.backend.ops import with_policy

TAG = "policy_codegen_parts"


def indexed(op) -> bool:
    entries = (*(getattr(op, "indexed_inputs", None) or ()), *(getattr(op, "indexed_outputs", None) or ()))
    return any(e is not None for e in entries)


SCATTERS = (AdvancedIncSubtensor,)  # the scatter-add of an indexed kernel's inner graph


def _scatters(op):
    return [n for n in op.fgraph.apply_nodes if isinstance(n.op, SCATTERS)]


def _written_ndim(scatter) -> int:
    """The ndim of the region ``scatter`` writes: ``target[indices]``'s."""
    target, _value, *indices = scatter.inputs
    return AdvancedSubtensor(idx_list=scatter.op.idx_list)(target, *indices).type.ndim


def values_have_their_written_ndim(op) -> bool:
    return all(n.inputs[1].type.ndim == _written_ndim(n) for n in _scatters(op))


# why an indexed kernel is lowered as its parts: (predicate(op, planned body), reason); all must hold
PARTS_WHEN = (
    (lambda op, body: indexed(op), "it reads or writes through an index (the stock loop, which never vectorizes)"),
    (
        lambda op, body: body.uses_vector_math,
        "its body calls vector functions, which the indexed loop would run one lane at a time",
    ),
    (
        lambda op, body: values_have_their_written_ndim(op),
        "every scatter-add's value has the ndim of the region it writes (one index per axis, or "
        "one index and full trailing slices): a write with non-indexed leading axes has them "
        "moved right in the inner graph and the value padded by the fused loop only (PyTensor's "
        "transpose_non_indexed_write_axes), so that inner graph does not run as is",
    ),
)


def lowered_as_parts(op, body) -> bool:
    return all(when(op, body) for when, _reason in PARTS_WHEN)


def _composite_position(var, composite) -> int | None:
    """Which output of the inner Elemwise ``var`` is, through reductions and
    ScalarFromTensor/scatter-adds (None if it is not one)."""
    while var.owner is not None and var.owner is not composite:
        owner = var.owner
        if isinstance(owner.op, CAReduce | ScalarFromTensor):
            var = owner.inputs[0]
        elif isinstance(owner.op, SCATTERS):
            var = owner.inputs[1]
        else:
            return None
    return None if var.owner is None else composite.outputs.index(var)


def parts_graph(op) -> FunctionGraph:
    """The inner graph of the indexed FusedElemwise ``op`` with its Elemwise and its
    reductions carrying ``op``'s policy, requirements, input facts and pools, and its gathers
    and scatters their compact ops where they have one (memoized on the op, not part of its
    identity). Raises `Unsupported` when the inner graph is not
    the gather/body/reduce/scatter shape whose outputs map onto the body's outputs."""
    graph = getattr(op, "_parts_graph", None)
    if graph is not None:
        return graph
    graph = op.fgraph.unfreeze()
    elemwise = [n for n in graph.apply_nodes if isinstance(n.op, Elemwise)]
    if len(elemwise) != 1:
        raise Unsupported("indexed kernel without exactly one inner Elemwise")
    [composite] = elemwise
    positions = [_composite_position(out, composite) for out in graph.outputs]
    if positions != list(range(len(composite.outputs))):
        raise Unsupported("indexed kernel whose outputs are not its body's outputs in order")
    needs = output_needs(op.sensitive_outputs)
    replacements = []
    for node in graph.toposort():
        if node is composite:
            new_op = with_policy(node.op, op.policy, op.sensitive_outputs, op.yields_to, op.input_facts)
        elif isinstance(node.op, CAReduce):
            # the accumulator class the fused loop would give this reduction's output
            pos = _composite_position(node.outputs[0], composite)
            new_op = with_policy(node.op, op.policy, {0: {EXACT}} if pos in needs else {}, op.yields_to)
        elif (compact := compact_op(node)) is not None:
            new_op = compact  # a gather or scatter as an intrinsic (compact.ops), as in the outer graph
        else:
            continue
        replacements.append((node, new_op))
    for node, new_op in replacements:
        # not make_node: CAReduce.make_node may rebuild the op (losing the policy)
        new_node = Apply(new_op, list(node.inputs), [o.type() for o in node.outputs])
        graph.replace_all(list(zip(node.outputs, new_node.outputs, strict=True)), reason=TAG)
    op._parts_graph = graph
    return graph
