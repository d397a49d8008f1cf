"""What the passes do when their own work raises: a conservative graph, a warning, a note.

PyTensor's rewrite sequence prints an exception raised inside a rewrite and goes on
without it; for the ``policy_kernels`` pass that would leave every kernel to stock numba
with its fast-math flags, the very decisions this package exists to keep. So each pass
catches an error at the smallest step it can, records it here (`PassError`), warns once
(`PassErrorWarning`, with the error and its consequence), and carries on with the
conservative choice its stage has in `CONSEQUENCES`. `explain` prints the records.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from dataclasses import dataclass

log = logging.getLogger("ptnumba_codegen")


class PassErrorWarning(UserWarning):
    """A pass of ptnumba_codegen raised and compiled the conservative choice instead."""


# stage -> what the function gets instead (each choice keeps the decisions of `default`,
# or, for the as-written stages, says which guarantee is left)
CONSEQUENCES = {
    "graph analysis": (
        "every kernel's outputs are treated as compared downstream: the kernels are generated "
        "strict (the instructions of stock numba with fastmath off), never left to stock fast-math"
    ),
    "kernel analysis": (
        "this kernel's outputs are treated as compared downstream: it is generated strict"
    ),
    "constant-write folding": "the writes are computed at each call instead of once (same bits)",
    "thread pools": "kernels that split do not yield to the other pools (same bits; may oversubscribe)",
    "shape inference": (
        "kernels whose types leave a length unknown are sized by their types alone: the "
        "thread runtime may start for loops that never split (same bits)"
    ),
    "as-written freezing": (
        "decisions not frozen before the error are decided on the rewritten graph, as under "
        "`default` (equal to stock numba with fastmath off), not as written"
    ),
    "as-written envelope guards": (
        "the decisions read their strict copies at every call: the same decisions, slower"
    ),
    "as-written inlining": (
        "the copies not put back stay opaque: strict and as written, the same decisions, slower"
    ),
}


@dataclass(frozen=True)
class PassError:
    stage: str  # a key of CONSEQUENCES
    error: str  # "TypeName: message"
    where: str = ""  # the node, if the error is one node's

    @property
    def consequence(self) -> str:
        return CONSEQUENCES[self.stage]

    def describe(self) -> str:
        at = f" at {self.where}" if self.where else ""
        return f"{self.stage} failed{at} ({self.error}): {self.consequence}"


_GRAPH_ERRORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # fgraph -> [PassError]
_NODE_ERRORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # node -> PassError


def record(fgraph, stage: str, err: BaseException, node=None) -> PassError:
    """Keep ``err`` of ``stage`` (for ``node`` if given), log it and warn."""
    if stage not in CONSEQUENCES:
        raise KeyError(f"unknown pass stage {stage!r}; known: {sorted(CONSEQUENCES)}")
    found = PassError(stage, f"{type(err).__name__}: {err}", str(node.op) if node is not None else "")
    _GRAPH_ERRORS.setdefault(fgraph, []).append(found)
    if node is not None:
        _NODE_ERRORS[node] = found
    log.warning("ptnumba_codegen: %s", found.describe(), exc_info=err)
    warnings.warn(f"ptnumba_codegen: {found.describe()}", PassErrorWarning, stacklevel=2)
    return found


def graph_errors(fgraph) -> list[PassError]:
    return list(_GRAPH_ERRORS.get(fgraph, ()))


def node_error(node) -> PassError | None:
    return _NODE_ERRORS.get(node)


def mark_node(node, found: PassError) -> None:
    """``found`` also belongs to ``node`` (the node that replaced the one it was raised for)."""
    _NODE_ERRORS[node] = found
