"""Envelope guards: a decision that is constant while its inputs stay in a box is not
recomputed as written while they do.

An opaque as-written copy (a ``Dot``, a ``Sum`` with its cone: `freeze.own_copy_nodes`)
runs the reference's kernels, strictly, with scalar libm, on every call, beside the fast
copy of the same value. Often the decision it feeds cannot come out differently for any
input a sampler would give it: PyMC's ``0 <= sigmoid(eta) <= 1`` is true for every finite
eta, and eta = ``phi @ beta`` is finite whenever beta is finite and not too large (phi is
``0.73 * sin(...) * sin(...)``: |phi| <= 0.73 for finite data). Then, at run time, a
check that the inputs are in that box (finite, ``|x| <= bound``) decides it, and the
as-written copy runs only when the check fails.

`GUARDS` lists the two kinds of target, with why each is sound. For each, the analysis
(`ptnumba_codegen.analysis.envelope`) runs over the graph *as written* (the pass runs
before any rewrite), through the copies' inner graphs, and proves the target constant
for every float graph input x with ``|x| <= bound[x]``, for IEEE arithmetic in any order
and any libm within a few ulps (the reference is one of them). The target is replaced by
an `EnvelopeGuarded` node: the constant where every float input is in its box, else the
target computed as written from the same copies (its inner graph holds them).
Nothing is read from the fast graph, so no rewrite can make the guarded value differ.

Pure pytensor (no numba).
"""

from __future__ import annotations

from pytensor.compile.builders import infer_shape
from pytensor.graph.basic import Constant
from pytensor.graph.traversal import ancestors
from pytensor.graph.fg import FrozenFunctionGraph
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise

from ptnumba_codegen.analysis.envelope import evaluate
from ptnumba_codegen.as_written.decisions import LEAF_RULES
from ptnumba_codegen.tables import mro_lookup
from ptnumba_codegen.as_written.op import AsWritten, EnvelopeGuarded

REASON = "as_written_envelope_guard"

# target kind -> why replacing it by its constant inside the box keeps every decision
GUARDS = {
    "constant decision": "a decision copy whose outcome, computed as written, is the same "
    "constant for every input in the box: inside it the constant is the reference's outcome",
    "masked decision": "a decision copy read only by boolean ANDs (Mul of booleans) whose "
    "other operand is constant False in the box: inside it every such AND is False "
    "whatever the decision gives (PyMC's Prod gradient reads neq(g, 0) only where exactly "
    "one factor is 0)",
}

# Bounds tried for every float input, largest first (the box should hold every value a
# sampler proposes; the largest that proves the target constant is kept, per input).
LADDER = (1e300, 1e150, 1e75, 1e38, 1e19, 1e9, 1e4, 700.0, 100.0, 30.0, 10.0)


def _runs_once(node) -> bool:
    """A node that must run exactly once per call: it draws random numbers or updates an
    input in place (`decisions.LEAF_RULES`; copies are fine to run or not)."""
    if node.op.destroy_map:
        return True
    rule = mro_lookup(LEAF_RULES, node.op)
    return rule is not None and not isinstance(node.op, AsWritten) and rule(node) is not None


def _inner_graph(op):
    return op.fgraph if isinstance(op, AsWritten) else None


def _facts(outputs, bounds):
    return evaluate(outputs, bounds, inner_graph=_inner_graph)


def _float_inputs(var) -> list:
    return [
        v
        for v in ancestors([var])
        if v.owner is None and not isinstance(v, Constant) and str(getattr(v.type, "dtype", "")).startswith("float")
    ]


def _is_false_mask(var, bounds) -> bool:
    return _facts([var], bounds)[0].constant() == 0.0


def _masked_readers(fgraph, var, bounds) -> list | None:
    """The boolean ANDs reading ``var`` if every reader is one whose other operand is
    False in the box, else None."""
    readers = []
    for client, position in fgraph.clients[var]:
        if client == "output" or not isinstance(client.op, Elemwise):
            return None
        if not isinstance(client.op.scalar_op, ps.Mul | ps.AND):
            return None
        if client.outputs[0].type.dtype != "bool" or len(client.inputs) != 2:
            return None
        other = client.inputs[1 - position]
        if not _is_false_mask(other, bounds):
            return None
        readers.append(client.outputs[0])
    return readers or None


def _prove(fgraph, var, inputs) -> tuple[str, list, dict] | None:
    """(kind, targets, bounds): ``var`` or its readers constant in the largest box found."""

    def attempt(bounds):
        fact = _facts([var], bounds)[0]
        if fact.constant() is not None:
            return "constant decision", [var]
        readers = _masked_readers(fgraph, var, bounds)
        if readers:
            return "masked decision", readers
        return None

    for bound in LADDER:
        bounds = dict.fromkeys(inputs, bound)
        found = attempt(bounds)
        if found is None:
            continue
        for x in inputs:  # then widen each input's box as far as the ladder allows
            for wider in LADDER[: LADDER.index(bound)]:
                trial = {**bounds, x: wider}
                if attempt(trial) is not None:
                    bounds = trial
                    break
        kind, targets = attempt(bounds)
        return kind, targets, bounds
    return None


def _tainted(fgraph, expensive) -> set:
    """Every variable computed (transitively) from an expensive copy's outputs."""
    tainted = set()
    for node in fgraph.toposort():
        if node in expensive or any(v in tainted for v in node.inputs):
            tainted.update(node.outputs)
    return tainted


def _inner_leaves(target, tainted) -> list:
    """The variables the guarded copy reads: the untainted inputs of the nodes between the
    expensive copies and ``target``, in a deterministic order."""
    leaves, seen, stack = [], set(), [target]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in tainted and v.owner is not None:
            stack.extend(reversed(v.owner.inputs))
        elif not isinstance(v, Constant):
            leaves.append(v)
    return leaves


def add_envelope_guards(fgraph, expensive: set, policy, outer_pools=()) -> list:
    """Replace the decision targets (`GUARDS`) that read an ``expensive`` copy and are
    constant in a box of their float inputs by the outputs of one `EnvelopeGuarded` node
    (one box, the intersection of theirs; its slow path computes the copies once for all
    of them); the new node, in a list (empty if there is none)."""
    if not expensive:
        return []
    tainted = _tainted(fgraph, expensive)
    decisions = [
        n for n in fgraph.toposort() if isinstance(n.op, AsWritten) and n.op.kind == "decision" and n.outputs[0] in tainted
    ]
    found = {}  # target -> (kind, label)
    box: dict = {}
    for node in decisions:
        var = node.outputs[0]
        if len(node.outputs) != 1 or var.type.dtype != "bool":
            continue
        proof = _prove(fgraph, var, _float_inputs(var))
        if proof is None:
            continue
        kind, targets, bounds = proof
        for target in targets:
            found.setdefault(target, (kind, node.op.label))
        for x, b in bounds.items():
            box[x] = min(box.get(x, b), b)
    # each proof holds in a smaller box too; checked again in the common one
    facts = _facts(list(found), box)
    targets = [t for t, f in zip(found, facts, strict=True) if f.constant() is not None]
    if not targets:
        return []
    new = _guard(fgraph, targets, found, box, policy, outer_pools, tainted)
    return [] if new is None else [new]


def _guard(fgraph, targets, found, box, policy, outer_pools, tainted):
    outcomes = [bool(f.constant()) for f in _facts(targets, box)]
    leaves = _inner_leaves_all(targets, tainted)
    inner = FrozenFunctionGraph.from_io(leaves, targets)
    if any(_runs_once(n) for n in inner.toposort()):
        return None  # a draw or an in-place update in the slow path: it would run only sometimes
    checks = [v for v in dict.fromkeys(v for t in targets for v in _float_inputs(t)) if v in box]
    shapes = infer_shape(targets, leaves, [tuple(v.shape) for v in leaves])
    flat = [s for shape in shapes for s in shape]
    if any(v in tainted for v in ancestors(flat)):
        return None  # a shape needs the copies themselves
    label = "; ".join(f"{found[t][1]} ({found[t][0]}): {o}" for t, o in zip(targets, outcomes, strict=True))
    op = EnvelopeGuarded(
        inner,
        policy,
        bounds=tuple(float(box[v]) for v in checks),
        outcomes=tuple(outcomes),
        n_checks=len(checks),
        label=f"envelope guard of {label}",
        outer_pools=outer_pools,
    )
    new = op.make_node(*leaves, *checks, *flat)
    for old, out in zip(targets, new.outputs, strict=True):
        out.name = old.name
    fgraph.replace_all_validate(list(zip(targets, new.outputs, strict=True)), reason=REASON)
    return new


def _inner_leaves_all(targets, tainted) -> list:
    return list(dict.fromkeys(v for t in targets for v in _inner_leaves(t, tainted)))
