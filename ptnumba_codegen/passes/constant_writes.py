"""Indexed writes of constants, computed once when the function is compiled.

PyTensor does not constant-fold ``Alloc`` (a large constant costs memory, and an Alloc
feeding an in-place write should stay a fresh buffer), so a write into a zero matrix whose
value and indices are all constants is redone at every call. A Categorical's gradient has
one: ``AdvancedIncSubtensor(zeros(n, K), 1, arange(n), y)`` with ``y`` the observed data
(the one-hot matrix), followed by its row sums -- in a multinomial-logit logp+dlogp, at
every call, a memset of an (n, K) array, n scattered writes and a reduction of the array,
all of whose values are known at compile time.

`fold_constant_writes` computes such writes with the ops' own ``perform``, then the
consumers the folded value leaves with constant inputs only, when `FOLD_CONSUMER` has a
rule for them that gives the compiled kernel's bits. `FOLD_WHEN` says when a write is
folded. An op that PyTensor's in-place rewrites let write into the buffer in place gets a
fresh copy of the constant instead (one memcpy per call, no memset and no scattered writes). Every rule has its reason: a fold must never change a bit, because a folded value
may feed a decision.
"""

from __future__ import annotations

import numpy as np
from pytensor.graph.basic import Constant, Variable
from pytensor.scalar import Add, Maximum, Minimum
from pytensor.tensor.basic import Alloc, tensor_copy
from pytensor.tensor.elemwise import CAReduce, DimShuffle
from pytensor.tensor.subtensor import AdvancedIncSubtensor, IncSubtensor
from pytensor.tensor.type import TensorType

WRITES = (AdvancedIncSubtensor, IncSubtensor)
MIN_LIMIT_BYTES = 1 << 20
MAX_LIMIT_BYTES = 256 << 20
EXACT_INTEGER = 2.0**53  # every integer of smaller magnitude is a double


def _constant_input(var: Variable) -> bool:
    """A constant, or an Alloc of constants (the buffer a write fills)."""
    if isinstance(var, Constant):
        return True
    return var.owner is not None and isinstance(var.owner.op, Alloc) and all(isinstance(i, Constant) for i in var.owner.inputs)


def _size_limit(fgraph) -> int:
    """The bytes a folded constant may take: as much as the graph's largest constant (the
    data it already holds), at least 1 MiB, at most 256 MiB."""
    sizes = [getattr(c.data, "nbytes", 0) for c in fgraph.variables if isinstance(c, Constant)]
    return min(max([MIN_LIMIT_BYTES, *sizes]), MAX_LIMIT_BYTES)


def _static_nbytes(var: Variable) -> int | None:
    shape = getattr(var.type, "shape", None)
    if shape is None or any(s is None for s in shape):
        return None
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(var.type.dtype).itemsize


def _small_enough(var: Variable, limit: int) -> bool:
    return (_static_nbytes(var) or limit + 1) <= limit


def _integer_valued_without_negative_zero(data) -> bool:
    """Sums of these are exact in every order and from either start (0.0 or the first
    element): integers whose total stays below 2**53, and no -0.0 (0.0 + -0.0 is +0.0)."""
    data = np.asarray(data)
    if data.dtype.kind in "iub":
        return True
    if data.dtype.kind != "f" or not np.isfinite(data).all():
        return False
    if not np.array_equal(data, np.trunc(data)) or np.signbit(data[data == 0]).any():
        return False
    return float(np.abs(data, dtype=np.float64).sum()) < EXACT_INTEGER


# when a write is folded: (predicate(node, limit), reason); all must hold
FOLD_WHEN = (
    (
        lambda node, limit: isinstance(node.op, WRITES) and all(_constant_input(i) for i in node.inputs),
        "an indexed write whose target is an Alloc of constants and whose value and indices "
        "are constants: the same result at every call (perform writes in index order, as "
        "the compiled kernel does, so repeated indices accumulate in the same order)",
    ),
    (
        lambda node, limit: _small_enough(node.outputs[0], limit),
        "its result has a static shape and is no larger than the graph's largest constant "
        "(at least 1 MiB, at most 256 MiB): folding it costs no more memory than the data",
    ),
)

# consumer of a folded value -> (predicate(node, input values), reason): folded only when
# perform gives the compiled kernel's bits
FOLD_CONSUMER = {
    DimShuffle: (
        lambda node, values: True,
        "a view: no arithmetic",
    ),
    CAReduce: (
        lambda node, values: isinstance(node.op.scalar_op, (Maximum, Minimum))
        and np.asarray(values[0]).dtype.kind in "iub"
        or isinstance(node.op.scalar_op, Add)
        and _integer_valued_without_negative_zero(values[0]),
        "a sum of integer-valued floats (a one-hot's row sums) is exact in any order, and "
        "integer max/min have no order; numpy's pairwise float sums are not the kernel's "
        "sequential ones in general, so other reductions stay",
    ),
}


def _consumer_rule(op):
    for kind, rule in FOLD_CONSUMER.items():
        if isinstance(op, kind):
            return rule
    return None


def _value(var: Variable):
    if isinstance(var, Constant):
        data = var.data
        return np.array(data, copy=True) if isinstance(data, np.ndarray) else data
    node = var.owner
    storage = [[None] for _ in node.outputs]
    node.op.perform(node, [_value(i) for i in node.inputs], storage)
    return storage[node.outputs.index(var)][0]


def _constant_like(var: Variable, data) -> Constant:
    data = np.asarray(data, dtype=var.type.dtype)
    return TensorType(var.type.dtype, shape=data.shape).make_constant(data)


def _foldable_consumer(client, limit) -> bool:
    if client == "output" or len(client.outputs) != 1 or getattr(client.op, "destroy_map", None):
        return False
    rule = _consumer_rule(client.op)
    if rule is None or not all(isinstance(i, Constant) for i in client.inputs):
        return False
    return _small_enough(client.outputs[0], limit) and rule[0](client, [i.data for i in client.inputs])


def _destroyers(fgraph, var: Variable) -> list | None:
    """The clients writing into ``var`` in place, as (node, input index); None if one writes
    into a view of it (a constant cannot be destroyed: the pass runs after PyTensor's
    in-place rewrites, which chose that buffer -- PyTensor's conformance run caught a scan
    gradient whose write fed one)."""
    found = []
    for client, index in fgraph.clients.get(var, ()):
        if client == "output":
            continue
        if any(index in inputs for inputs in getattr(client.op, "destroy_map", {}).values()):
            found.append((client, index))
        for out, inputs in getattr(client.op, "view_map", {}).items():
            if index in inputs and _destroyers(fgraph, client.outputs[out]) != []:
                return None
    return found


def _give_copies(fgraph, destroyers, const: Constant, reason: str) -> None:
    """Each client that wrote into the folded buffer in place gets a fresh copy of the
    constant to write into (a copy per call, instead of the memset and the scattered writes)."""
    for client, index in destroyers:
        fgraph.change_node_input(client, index, tensor_copy(const), reason=reason)


def fold_constant_writes(fgraph, reason: str) -> int:
    """Fold every write `FOLD_WHEN` allows, then the consumers `FOLD_CONSUMER` allows that
    are left with constant inputs only; returns the number of nodes folded."""
    limit = _size_limit(fgraph)
    folded = 0
    pending = [n for n in fgraph.toposort() if all(rule(n, limit) for rule, _ in FOLD_WHEN)]
    while pending:
        node = pending.pop(0)
        if node not in fgraph.apply_nodes or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        destroyers = _destroyers(fgraph, out)
        if destroyers is None:
            continue
        const = _constant_like(out, _value(out))
        if not out.type.is_super(const.type):
            continue
        _give_copies(fgraph, destroyers, const, reason)
        fgraph.replace(out, const, reason=reason)
        folded += 1
        pending += [client for client, _ in fgraph.clients.get(const, ()) if _foldable_consumer(client, limit)]
    return folded


__all__ = ["FOLD_CONSUMER", "FOLD_WHEN", "WRITES", "fold_constant_writes"]
