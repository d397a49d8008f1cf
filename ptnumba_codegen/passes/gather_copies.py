"""A gather read by several elementwise kernels: one copy of it for each.

PyTensor's numba rewrites fuse an integer-indexed read (``AdvancedSubtensor``, ``x[idx]``)
into the elementwise kernel that reads it (``fuse_indexed_into_elemwise``, position 100) only
when that kernel is its single client. A model's gather usually has several: the logp reads
``U[user]`` and the gradient reads it again, so it is computed once into a fresh array of
``len(idx)`` rows, written and read back by every client (probabilistic matrix
factorization: two gathers of a row per observation at every call).

`GatherCopies` (position 99.99, after PyTensor's in-place rewrites and before the fusion)
gives every client but the first its own copy of the gather (same op, same
inputs), when `COPY_WHEN` holds, so the fusion can take each into its client: the kernel
reads ``x[idx[i]]`` where it used the gathered array. A copy the fusion does not take is
merged back by ``merge3`` (position 100, after the fusion in PyTensor's order), so a refused
fusion costs nothing. The values read are the same elements, so every value and decision
is as before; only a reduction in the fused kernel may sum in another order where its
flags allow it (CHANGELOG.md, "A gather read by several kernels").
"""

from __future__ import annotations

import numpy as np
from pytensor.graph.rewriting.basic import GraphRewriter
from pytensor.scalar import AND, OR, XOR, Add, Maximum, Minimum, Mul
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.rewriting.fused_elemwise import FuseElemwise
from pytensor.tensor.subtensor import AdvancedSubtensor

STATS = {"copies": 0}  # copies made in this process (benchmarks read it)
POSITION = 99.99  # after in-place rewrites (<= 95), before fuse_indexed_into_elemwise and merge3 (100)
NAME = "policy_gather_copies"

# The source's elements (static shape) up to which a copy reads it again: a table that
# stays in the core's caches (256 KiB of float64) costs less to read once more per client
# than the gathered array costs to write and read back; a larger one would be read at
# random rows from memory by every client.
MAX_SOURCE_ELEMENTS = 1 << 15

# reductions of a bare gather that PyTensor's ``wrap_reduced_gather_in_elemwise`` gives an
# elementwise anchor (so the fusion takes the gather into the reduction's loop)
WRAPPED_REDUCTIONS = (Add, Mul, Maximum, Minimum, AND, OR, XOR)


def _fusable_client(client) -> bool:
    """An elementwise kernel, or a reduction PyTensor wraps in one (`WRAPPED_REDUCTIONS`)."""
    if isinstance(client.op, Elemwise):
        return True
    return isinstance(client.op, CAReduce) and isinstance(client.op.scalar_op, WRAPPED_REDUCTIONS)


def _source_elements(node) -> int | None:
    shape = node.inputs[0].type.shape
    if any(s is None for s in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


# when a gather gets a copy per elementwise client: every row must hold, with its reason
COPY_WHEN = {
    "an integer-indexed read the fusion can take": lambda fgraph, node: (
        isinstance(node.op, AdvancedSubtensor) and FuseElemwise._extract_idx_axis_pairs(node) is not None
    ),
    "read by more than one kernel, each elementwise or a reduction (the fusion's anchors)": lambda fgraph, node: (
        len(clients := fgraph.clients[node.outputs[0]]) > 1 and all(_fusable_client(c) for c, _ in clients)
    ),
    "a source of static size at most MAX_SOURCE_ELEMENTS (read again from cache)": lambda fgraph, node: (
        (n := _source_elements(node)) is not None and n <= MAX_SOURCE_ELEMENTS
    ),
}


def copies_wanted(fgraph, node) -> bool:
    """Whether ``node`` gets a copy per elementwise client (every row of `COPY_WHEN`)."""
    return all(rule(fgraph, node) for rule in COPY_WHEN.values())


class GatherCopies(GraphRewriter):
    """Gives each elementwise client of a gather but the first a copy of it (`COPY_WHEN`)."""

    def apply(self, fgraph):
        copied = 0
        for node in [n for n in fgraph.toposort() if isinstance(n.op, AdvancedSubtensor)]:
            if node not in fgraph.apply_nodes or not copies_wanted(fgraph, node):
                continue
            for client, i in list(fgraph.clients[node.outputs[0]])[1:]:
                copy = node.op.make_node(*node.inputs).outputs[0]
                fgraph.change_node_input(client, i, copy, reason=NAME)
                copied += 1
        STATS["copies"] += copied
        return copied

    def __str__(self):
        return "GatherCopies"


__all__ = ["COPY_WHEN", "MAX_SOURCE_ELEMENTS", "NAME", "POSITION", "STATS", "WRAPPED_REDUCTIONS", "GatherCopies", "copies_wanted"]
