"""Array updates from native scalars read the scalar, not a 0-d array made for it.

`ScalarWrites` (position 100.6, after the policy pass: the whole-graph analysis has seen the
increment and the kernel computing its update, and given that kernel its flags) replaces
each compact ``IncSubtensor`` whose update is ``TensorFromScalar(s)`` by a
`compact.scalar_writes.ScalarizedIncSubtensor` reading ``s``: the same write of the same
value, the same ``destroy_map``, one 0-d array fewer to allocate and free per call
(`compact.scalar_writes`). A Scan's inner graph gets it through PyTensor's
``scan_inner_graph`` (which runs the function's rewrites on it); an as-written copy's inner
graph too (`as_written.lowering.INNER_REWRITES`).
"""

from __future__ import annotations

from pytensor.graph.rewriting.basic import GraphRewriter
from pytensor.tensor.subtensor import IncSubtensor

from ptnumba_codegen.compact.scalar_writes import scalarized, why_not_scalarized

NAME = "policy_scalar_writes"
POSITION = 100.6  # after the policy pass (100.5)
STATS = {"scalarized": 0}  # increments rewritten in this process (benchmarks read it)


class ScalarWrites(GraphRewriter):
    """Puts a `ScalarizedIncSubtensor` in place of each increment `why_not_scalarized` allows."""

    def apply(self, fgraph):
        done = 0
        for node in [n for n in fgraph.toposort() if isinstance(n.op, IncSubtensor)]:
            if node not in fgraph.apply_nodes or why_not_scalarized(node) is not None:
                continue
            fgraph.replace_all_validate([(node.outputs[0], scalarized(node))], reason=NAME)
            done += 1
        STATS["scalarized"] += done
        return done

    def __str__(self):
        return "ScalarWrites"


__all__ = ["NAME", "POSITION", "STATS", "ScalarWrites"]
