"""Stock ops swapped for their compact ops: the same op, a numba function that compiles in a
fraction of the time.

`SwapCompact` (position 100.4, after every PyTensor rewrite, so none of them meets the
subclass; before the policy pass) replaces each node whose op has a compact op
(`compact.table.COMPACT`, where its row is on and takes the node: `compact.ops.compact_op`)
by the same node with the compact op: same inputs, same output types, same checks, same
messages, same values. An as-written copy's inner graph gets the same rewrite
(`as_written.lowering.inner_mode`, `INNER_REWRITES`).
"""

from __future__ import annotations

from pytensor.graph.basic import Apply
from pytensor.graph.rewriting.basic import GraphRewriter

from ptnumba_codegen.compact.ops import compact_op, stock_classes

NAME = "policy_swap_compact"
POSITION = 100.4  # after fuse_indexed_into_elemwise and merge3 (100), before the policy pass (100.5)
STATS = {"swapped": 0}  # nodes swapped in this process (benchmarks read it)


class SwapCompact(GraphRewriter):
    """Puts the compact op (`compact.ops.compact_op`) in place of each stock op that has one."""

    def apply(self, fgraph):
        classes = stock_classes()
        swapped = 0
        for node in [n for n in fgraph.toposort() if type(n.op) in classes]:
            op = compact_op(node, classes)
            if op is None:
                continue
            # The node's own output types, not make_node's: rewrites may have given them static
            # shapes make_node does not infer, or make_node may infer one the node does not have.
            new = Apply(op, list(node.inputs), [o.type() for o in node.outputs])
            fgraph.replace_all(list(zip(node.outputs, new.outputs, strict=True)), reason=NAME, import_missing=True)
            swapped += 1
        STATS["swapped"] += swapped
        return swapped

    def __str__(self):
        return "SwapCompact"


__all__ = ["NAME", "POSITION", "STATS", "SwapCompact"]
