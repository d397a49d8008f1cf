"""The as-written pass: every decision computed from its inputs exactly as the user wrote them.

PyTensor's ``fast_run`` rewrites change the arithmetic that feeds comparisons before any
backend sees it (``x*(y*z)`` becomes ``mul(x, y, z)``, ``exp(a)*exp(c)`` becomes
``exp(a + c)``), so at a tie a comparison can flip even when every kernel is strict. Under
a policy with ``[comparison] as_written = true`` this pass runs first, on the graph handed
to ``pytensor.function`` (gradients included), right after ``inline_ofg_expansion`` and
before ``merge1`` and ``canonicalize``. For every deciding node (the tables of
`ptnumba_codegen.as_written.decisions`), in topological order:

0. (once, before the decisions) every product that some cone reads and whose inputs are
   as written (`decisions.SHARED_OPS`: ``X @ beta`` of a parameter vector) is put alone
   into a one-op `AsWritten` copy (``kind="shared"``) that every reader reads, cones and
   the rest of the graph: computed once, as written; the cones end at it (`share_ops`);
   And every op of some cone that kernels cannot hold (a Sum over several axes, a Cholesky:
   not elementwise, not an inlinable reduction) gets one copy of its own, with its cone, when the
   walk below reaches it (`own_copy_nodes`, `Copies.own_copy`): every later copy reads it
   instead of recomputing it, so the copies above it are elementwise and are inlined;
1. take its float decision inputs and walk back through their producers to the leaves
   (graph inputs, shared variables, constants, random draws, earlier `AsWritten`
   results, the values earlier copies compute: `Copies.ends`);
2. if some decision input is computed there (a non-empty cone), or the same variable is
   compared with itself (``eq(x, x)``, which a rewrite folds to ``True`` even for NaN),
   replace the node and that cone by one `AsWritten` node reading the leaves
   (``FREEZE_NODE``), or only the cone values the node reads (``FREEZE_INPUTS``).

The `AsWritten` node is opaque to every rewrite. Once the rewrites that change values are
done (canonicalize, stabilize, specialize, ``local_add_mul_fusion``: everything before
position 48.95), `InlineAsWritten` puts each decision whose cone is elementwise back into the
graph as written (with its overflow guards, `ptnumba_codegen.as_written.guards`): from
there on only value-preserving rewrites run (elementwise fusion, merge, inplace), the copy
fuses with its neighbours into the same kernels, and the policy compiles it strictly (it is
in a decision's cone) and with scalar libm; so are max/min reductions, exact in any order.
A producer that a robust rule (`ptnumba_codegen.analysis.robust`) lets go keeps its own class
there, as under ``default``: the rules cover the lowering's ulps, given the producer's
inputs, and the copy gives it the inputs as written; they say nothing about rewrites, so
a robust decision is frozen like any other. So are sums over one axis
(`ONE_AXIS_REDUCERS`: stock adds along it in index order, and so do the strict kernels) and
the symbolic ops fusion inlines (`INLINED_SYMBOLIC_OPS`: a Softmax is put back as its max,
exp, row sum and divide), so a Categorical's checks on ``p`` and ``sum(p)`` share the exp
and the row sum with its log-likelihood wherever merge finds the same ops on the same
inputs. Copies holding other ops (sums over several axes, products, ``Dot``, ``Scan``, ...),
or under a policy whose ``comparison_sensitive`` class has flags, stay opaque and are
compiled on their own (`ptnumba_codegen.as_written.lowering`).

The original cone stays in the graph for whatever else reads it and is rewritten and fused
as usual, so a value that feeds both a decision and other math is computed twice: once as
written for the decision, once fast for the rest -- unless, once the value-changing
rewrites are done, the rest still computes an opaque copy's value by the same ops on the
same inputs (no rewrite touched it): then it reads the copy (`rest_computes_the_same`). A decision whose decision inputs are
all leaves (or reach them only through value moves and other such decisions) is left
alone: nothing can change how its inputs are computed, and the policy compiles it
strictly.

Nested decisions read earlier results: ``eq(minimum(p, b), p)`` freezes ``minimum`` with
the cone of ``p`` first, then ``eq`` reads that `AsWritten` result and recomputes ``p``.
"""

from __future__ import annotations

import logging

from pytensor.graph.basic import Constant
from pytensor.graph.features import ReplaceValidate
from pytensor.graph.fg import FrozenFunctionGraph
from pytensor.graph.rewriting.basic import GraphRewriter, dfs_rewriter, in2out, node_rewriter
from pytensor.compile.rewriting import inline_ofg_node
from pytensor.scalar.basic import Add, Maximum, Minimum
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.subtensor import IncSubtensor
from pytensor.tensor.rewriting.ofg import inline_symbolic_for_fusion
from pytensor.tensor.rewriting.basic import unconditional_constant_folding

from ptnumba_codegen.passes import pass_errors
from ptnumba_codegen.passes.rewritten_graphs import register_policy_pass
from ptnumba_codegen.as_written.compile_once import read_inputs_once, rebuild
from ptnumba_codegen.as_written.constant_folds import constant_nodes, fold_exact
from ptnumba_codegen.as_written.decision_moves import decide_on_operands
from ptnumba_codegen.as_written.envelope_guards import add_envelope_guards
from ptnumba_codegen.as_written.guards import add_overflow_guards
from ptnumba_codegen.as_written.libm_operands import mark_pows
from ptnumba_codegen.as_written.op import REASON, AsWritten
from ptnumba_codegen.as_written.value_moves import fresh_merge, read_diagonals_at_their_source, spell_like_the_rest
from ptnumba_codegen.as_written.decisions import (
    EXACT_OPS,
    INNER_GRAPH_OPS,
    decision_rule,
    is_computed,
    is_float,
    leaf_reason,
    read_by_the_rest,
    shared_reason,
)
from ptnumba_codegen.analysis.whole_graph import PASS_FIRST_OPS
from ptnumba_codegen.flags import COMPARISON_SENSITIVE
from ptnumba_codegen.policy import Policy, PolicyError, PolicyLoadError, load_policy
from ptnumba_codegen.runtime.pools import pools_used

log = logging.getLogger("ptnumba_codegen")

# After inline_ofg_expansion (-0.01: inlined OpFromGraphs are part of the graph as written),
# before merge1 (0) and everything else.
POSITION = -0.005
# After add_mul_fusion (48) and introduce_lazy_ifelse (48.9), before elemwise fusion (49):
# every later rewrite keeps values (fusion, merge, inplace, the numba loop fusions).
INLINE_POSITION = 48.95
# node types an inlined copy may hold: kernels the policy classifies, and value moves and
# checks that the whole-graph sensitivity analysis sees through (whole_graph.TRANSPARENT_OPS,
# PASS_FIRST_OPS: put back, a check still raises and passes its value's requirement on)
INLINABLE_OPS = (Elemwise, *EXACT_OPS, *PASS_FIRST_OPS)
# ops that write values into a copy of an array an inlined copy may hold -> why the node
# computes the reference's values wherever it is compiled (the whole-graph analysis asks
# for its inputs exact: whole_graph.COMBINING_OPS)
INLINABLE_WRITES = {
    IncSubtensor: "writes its update into a copy of x at basic-indexed positions (a set), or "
    "adds each update element once to one element of x (an inc): one IEEE addition per "
    "element, whose result no fast-math flag of PyTensor's set changes, its operands read "
    "from memory; an HMM step filling zeros(K) with set_subtensor per state",
}
# reductions an inlined copy may hold over any axes -> why the kernels give the reference's bits
INLINABLE_REDUCERS = {
    Maximum: "exact in any accumulation order (the sign of a zero: the kernels visit "
    "elements in stock's order, tests/test_reduction_order.py)",
    Minimum: "exact in any accumulation order, as Maximum",
}
# reductions an inlined copy may hold over one axis only -> why the kernels give the
# reference's bits. Over several axes stock's order follows the runtime strides of the
# array it reduces (memory order when C- or F-contiguous); the kernels matched it in every
# layout tried, fused or not, but with no argument that covers every fusion such a cone
# stays opaque, compiled with stock's own loops.
ONE_AXIS_REDUCERS = {
    Add: "over one axis stock's CAReduce adds each row's elements to the identity in "
    "increasing index along that axis whatever the layout (its loop nests reorder the kept "
    "axes only), and so does the strict kernel the policy compiles it to in a decision's "
    "cone, fused with its producer and other reductions or not "
    "(tests/test_as_written_reductions.py)",
}
INLINED_ATTR = "_ptnumba_as_written_inlined"  # on the function graph: what explain lists


class AsWrittenPass(GraphRewriter):
    """Freeze every decision with its cone, if the policy has ``[comparison] as_written``.

    ``policy=None`` resolves the process default each time it runs; a policy without
    ``as_written`` makes it a no-op.
    """

    def __init__(self, policy: str | Policy | None = None):
        super().__init__()
        self.policy = policy

    def add_requirements(self, fgraph):
        fgraph.attach_feature(ReplaceValidate())

    def apply(self, fgraph):
        try:
            policy = load_policy(self.policy)
        except PolicyError as err:  # raised through PyTensor's rewrite sequence, not skipped
            raise PolicyLoadError(str(err)) from None
        if not policy.as_written:
            return
        # the thread pools the whole function runs ops on: an opaque copy's kernels yield
        # to them as the function's other kernels do (decided when they are compiled)
        pools = pools_used(fgraph)
        try:
            read_diagonals_at_their_source(fgraph)  # value moves only (value_moves.DIAGONAL_MOVES)
            frozen = freeze_graph(fgraph, policy, pools)
        except Exception as err:  # noqa: BLE001  (pass_errors: recorded, warned, not skipped silently)
            pass_errors.record(fgraph, "as-written freezing", err)
            return
        try:
            frozen.extend(guard_expensive_copies(fgraph, frozen, policy, pools))
        except Exception as err:  # noqa: BLE001
            pass_errors.record(fgraph, "as-written envelope guards", err)
        if frozen and log.isEnabledFor(logging.INFO):
            log.info("%s", summarize(frozen, policy))

    def __str__(self):
        return f"AsWrittenPass({self.policy!r})"


# A sequence running the pass keeps its rewritten graph on disk, with what it leaves on it.
register_policy_pass(AsWrittenPass, {INLINED_ATTR: "explain: the as-written copies put back into the graph"})


# Softmax, LogSoftmax, LogSumExp, ... and their gradients: the ops PyTensor's own
# inline_symbolic_for_fusion inlines (not every SymbolicOp: AllocDiag's expansion never
# settled). The reference runs such an op's inner graph op by op; expanded, the same ops
# compute the same values (as_written.lowering, `INNER_REWRITES`).
INLINED_SYMBOLIC_OPS = tuple(inline_symbolic_for_fusion.tracks())


@node_rewriter(list(INLINED_SYMBOLIC_OPS))
def inline_symbolic_ops(fgraph, node):
    """A symbolic op (`INLINED_SYMBOLIC_OPS`) replaced by its inner graph."""
    return inline_ofg_node(node)


@node_rewriter(list(EXACT_OPS))
def fold_exact_constants(fgraph, node):
    """Constant-fold an op that only moves values (``ExpandDims(2.0)``): no arithmetic."""
    return unconditional_constant_folding.fn(fgraph, node)


class InlineAsWritten(GraphRewriter):
    """Put every elementwise `AsWritten` copy back into the graph, as written (see above);
    first, a copy reading one variable at several inputs reads it once (`compile_once`)."""

    def add_requirements(self, fgraph):
        fgraph.attach_feature(ReplaceValidate())

    def apply(self, fgraph):
        try:
            self._inline_all(fgraph)
        except Exception as err:  # noqa: BLE001  (pass_errors: the copies left stay opaque)
            pass_errors.record(fgraph, "as-written inlining", err)

    def _inline_all(self, fgraph):
        read_inputs_once(fgraph)  # the merges are done: a value read twice by a copy is one variable
        inlined = getattr(fgraph, INLINED_ATTR, [])
        put_back = []
        # readers first: decisions, then copies of input values, then shared cones (which
        # they read; a cone may read an earlier one: `Copies.ends`, so cones in reverse
        # order too). A copy left opaque reads exact values anyway (`EXACT_READERS`).
        for kind in ("decision", "inputs", "cone"):
            for node in reversed(fgraph.toposort()):
                if isinstance(node.op, AsWritten) and node.op.kind == kind and strict_cones(node.op.policy):
                    done = inline(fgraph, node)
                    if done is not None:
                        inlined.append(done[0])
                        put_back.extend(done[1])
        put_back = [v for v in put_back if v in fgraph.clients]
        # decisions read operands (decision_moves): across copies too, a decision frozen
        # alone reading a shared cone's log
        if put_back:  # a decision moved onto a constant operand is folded
            in2out(decide_on_operands, fold_exact).apply(fgraph, start_from=put_back)
        spell_like_the_rest(fgraph, [v for v in put_back if v in fgraph.clients])
        read_copies_in_the_rest(fgraph)
        if put_back:
            fresh_merge(fgraph)  # what the rest now reads of the copies, and chains left equal
        if inlined:
            setattr(fgraph, INLINED_ATTR, inlined)
            log.info("policy %s: %d as-written cop(ies) inlined into the kernels", inlined[0][0], len(inlined))

    def __str__(self):
        return "InlineAsWritten"


def guard_expensive_copies(fgraph, frozen, policy: Policy, outer_pools=()) -> list:
    """Envelope guards (`envelope_guards`) on the decisions that read an opaque copy
    (not a product shared with the rest): the new nodes. Only under a policy whose
    decision cones are strict: the guard's proof is about IEEE arithmetic."""
    if not strict_cones(policy):
        return []
    expensive = {
        n for n in frozen if n in fgraph.apply_nodes and n.op.kind != "shared" and not inlinable(n.op.fgraph)
    }
    return add_envelope_guards(fgraph, expensive, policy, outer_pools)


def strict_cones(policy: Policy) -> bool:
    """Whether the policy compiles decision cones without flags (then inlining is exact)."""
    if policy.classes[COMPARISON_SENSITIVE].flags:
        return False
    return not any(rule.apply_in_comparison_cone and rule.flags for rule in policy.ops.values())


def inlinable(graph) -> bool:
    """Only ops that `cone_op_inlinable` admits."""
    return all(cone_op_inlinable(n) for n in graph.toposort())


def inline(fgraph, node):
    """Replace an elementwise `AsWritten` node by its guarded inner graph: a record for
    explain (policy name, label, cone size, guards, reads) and the new outputs, or None if
    it stays opaque.

    Decisions with their cones, shared cones (``kind="cone"``) and copies of input values
    (``kind="inputs"``): the policy then sees the decisions that read them (and opaque
    copies reading them are `EXACT_READERS`) and compiles their cones strictly. Not a copy
    of input values still read by the op it was made for (an OpFromGraph or a Scan whose
    inner graph decides on them, `decided_inside`): the whole-graph analysis does not see
    through it, so put back the values would be compiled fast; nor a one-op product
    (``kind="shared"``), which no kernel holds.
    """
    op = node.op
    if op.kind == "shared" or not inlinable(op.fgraph):
        return None
    if op.kind == "inputs" and decided_inside(fgraph, node):
        return None
    graph = op.fgraph.unfreeze()
    guards = add_overflow_guards(graph, op.kind)
    dfs_rewriter(inline_symbolic_ops).rewrite(graph)  # a Softmax as its max, exp, sum, divide
    if not inlinable(graph):
        return None  # a guard brought in a non-elementwise stable form
    dfs_rewriter(fold_exact_constants).rewrite(graph)  # constant folding has run already
    dfs_rewriter(mark_pows).rewrite(graph)  # libm reads constant operands as the reference does
    if not fold_constant_cones(graph, node.inputs):
        return None  # a node of constants whose fold could differ from the reference
    outs = rebuild(graph, node.inputs)
    for old, new in zip(node.outputs, outs, strict=True):
        new.name = old.name
    fgraph.replace_all_validate(list(zip(node.outputs, outs, strict=True)), reason="as_written_inline")
    reads = tuple(v.name or str(v) for v in node.inputs)
    return (op.policy.name, op.label, op.kind, op.cone_size, guards, reads), outs


def fold_constant_cones(graph, outer_inputs) -> bool:
    """Fold, in ``graph`` (a copy's unfrozen inner graph, in place), every elementwise node
    computed from constants only, the copy's constant inputs included (`constant_folds`):
    whether none is left unfolded, so that the copy may be put back."""
    for inner, outer in zip(list(graph.inputs), outer_inputs, strict=True):
        if isinstance(outer, Constant) and inner in graph.clients:
            graph.replace(inner, outer, reason="as_written_constant_input", import_missing=True)
    dfs_rewriter(fold_exact).rewrite(graph)
    return not constant_nodes(graph)


def read_copies_in_the_rest(fgraph) -> None:
    """Where the rest of the graph computes an opaque cone copy's value by the same ops
    (`rest_computes_the_same`), it reads the copy instead."""
    for node in fgraph.toposort():
        if not (isinstance(node.op, AsWritten) and node.op.kind == "cone"):
            continue
        same = rest_computes_the_same(fgraph, node)
        if same:
            fgraph.replace_all_validate(list(zip(same, node.outputs, strict=True)), reason="as_written_read_copy")
            log.info("as-written %s: the rest of the graph reads it (the same ops)", node.op.label)


def rest_computes_the_same(fgraph, node) -> list | None:
    """The variables by which the rest of the graph, after its rewrites, still computes the
    outputs of the opaque copy ``node``: the same ops on the same inputs, node for node
    (no rewrite changed them), else None. The rest can then read the copy instead: the
    values are the copy's, as written, at the cost of the copy's strict flags for those ops."""
    graph = node.op.fgraph
    memo = dict(zip(graph.inputs, node.inputs, strict=True))
    for inner in graph.toposort():
        inputs = [memo.get(v, v) for v in inner.inputs]
        match = _same_node(fgraph, inner.op, inputs)
        if match is None:
            return None
        memo.update(zip(inner.outputs, match.outputs, strict=True))
    outer = [memo[v] for v in graph.outputs]
    return None if any(v in node.inputs for v in outer) else outer


def _same_node(fgraph, op, inputs):
    """A node of ``fgraph`` applying ``op`` to ``inputs`` (constants compared by value)."""
    anchor = next((v for v in inputs if not isinstance(v, Constant)), None)
    if anchor is None or anchor not in fgraph.clients:
        return None
    for client, _ in fgraph.clients[anchor]:
        if client == "output" or len(client.inputs) != len(inputs):
            continue
        if client.op == op and all(_same_input(a, b) for a, b in zip(client.inputs, inputs, strict=True)):
            return client
    return None


def _same_input(a, b) -> bool:
    if isinstance(a, Constant) and isinstance(b, Constant):
        return a.type == b.type and a.equals(b)
    return a is b


# containers that fast_run inlines before the kernels are planned (policy_codegen at
# 100.5), so the whole-graph analysis sees their inner decisions -> why. PyTensor's own
# list: the ops its `inline_symbolic_for_fusion` tracks (Softmax, LogSoftmax, LogSumExp
# and, where the pytensor has them, their gradients), the first step of fusion (49).
INLINED_BEFORE_KERNELS = {
    op_class: "inlined by inline_symbolic_for_fusion, the first step of elementwise fusion (49)"
    for op_class in inline_symbolic_for_fusion.tracks()
}


def decided_inside(fgraph, node) -> bool:
    """Whether a node reading ``node``'s outputs decides on them inside an inner graph (a
    `FREEZE_INPUTS` container: OpFromGraph, Scan) that stays out of the whole-graph
    analysis' sight (not `INLINED_BEFORE_KERNELS`)."""
    for out in node.outputs:
        for client, position in fgraph.clients[out]:
            if client == "output" or not isinstance(client.op, INNER_GRAPH_OPS):
                continue
            if isinstance(client.op, tuple(INLINED_BEFORE_KERNELS)):
                continue
            rule = decision_rule(client)
            if rule is not None and position in rule[1]:
                return True
    return False


def summarize(nodes, policy) -> str:
    """'policy as_written: 3 decision(s) kept as written (7 ops in their cones), ...'."""
    decisions = [n for n in nodes if n.op.kind == "decision"]
    inputs = [n for n in nodes if n.op.kind == "inputs"]
    text = (
        f"policy {policy.name}: {len(decisions)} decision(s) kept as written "
        f"({sum(n.op.cone_size for n in decisions)} ops in their cones)"
    )
    cones = [n for n in nodes if n.op.kind == "cone"]
    if cones:
        text += f", {len(cones)} cone(s) shared by several decisions ({sum(n.op.cone_size for n in cones)} ops)"
    if inputs:
        text += f", {len(inputs)} node(s) read as-written inputs ({sum(n.op.cone_size for n in inputs)} ops)"
    guarded = [n for n in nodes if n.op.kind == "guarded"]
    if guarded:
        text += f", {len(guarded)} decision(s) decided by an envelope guard, as written only outside it"
    shared = [n for n in nodes if n.op.kind == "shared"]
    if shared:
        text += f", {len(shared)} product(s) computed once for the cones and the rest ({', '.join(n.op.label for n in shared)})"
    return text


def is_leaf(var) -> bool:
    return leaf_reason(var) is not None


def cone_leaves(roots, ends=()) -> tuple[list, set]:
    """(the leaves under ``roots`` in a deterministic order (depth first, inputs in order),
    every variable visited). ``ends``: variables read as leaves too (values an earlier copy
    computes, `Copies.ends`)."""
    leaves, seen = [], set()
    stack = list(reversed(roots))
    while stack:
        var = stack.pop()
        if var in seen:
            continue
        seen.add(var)
        if isinstance(var, Constant):
            continue
        if var in ends or is_leaf(var):
            leaves.append(var)
        else:
            stack.extend(reversed(var.owner.inputs))
    return leaves, seen


def freeze_graph(fgraph, policy: Policy, outer_pools: tuple[str, ...] = ()) -> list:
    """Freeze every decision of ``fgraph`` (in place); the new `AsWritten` nodes, inner
    graphs' included. ``outer_pools``: the thread pools the function runs ops on (`pools`),
    which the kernels of opaque copies yield to like every other kernel of it."""
    fgraph.attach_feature(ReplaceValidate())
    frozen = share_ops(fgraph, policy, outer_pools)
    own = own_copy_nodes(fgraph)
    copies = Copies(policy, outer_pools, shared_roots(fgraph))
    for node in fgraph.toposort():
        if node not in fgraph.apply_nodes:
            continue  # an earlier replacement pruned it
        written = node
        if isinstance(node.op, INNER_GRAPH_OPS):
            node = _freeze_inner_graph(fgraph, node, policy, frozen, outer_pools)
        before = len(copies.nodes)
        new = freeze(fgraph, node, copies)
        frozen.extend(copies.nodes[before:])
        if new is not None:
            frozen.append(new)
        if written in own and node in fgraph.apply_nodes:
            made = copies.own_copy(node)
            frozen.extend(made)
            if made and read_by_the_rest(node) is not None:
                _rest_reads_own_copy(fgraph, node, made[-1], copies)
    return frozen


def _rest_reads_own_copy(fgraph, node, copy, copies: Copies) -> None:
    """Every reader of ``node`` reads its own copy ``copy`` (`decisions.READ_BY_THE_REST`):
    the op is computed once, as written, for the decisions and the rest."""
    pairs = [(out, copies.ends[out]) for out in node.outputs if out in copies.ends and out in fgraph.clients]
    if len(pairs) != len(node.outputs):
        return  # an output computed elsewhere: leave the rest as it is
    fgraph.replace_all_validate(pairs, reason=REASON)
    log.info("as-written %s: the rest of the graph reads it (%s)", copy.op.label, read_by_the_rest(node))


def cone_op_inlinable(node) -> bool:
    """An elementwise op, a value move, a reduction of `INLINABLE_REDUCERS` (or of
    `ONE_AXIS_REDUCERS` over one axis), or a symbolic op whose inner graph holds only
    those (`INLINED_SYMBOLIC_OPS`, expanded when the copy is put back): `inlinable`, one node."""
    op = node.op
    if isinstance(op, INLINABLE_OPS) or type(op) in INLINABLE_WRITES:
        return True
    if isinstance(op, CAReduce):
        if isinstance(op.scalar_op, tuple(INLINABLE_REDUCERS)):
            return True
        axes = range(node.inputs[0].type.ndim) if op.axis is None else op.axis
        return isinstance(op.scalar_op, tuple(ONE_AXIS_REDUCERS)) and len(axes) == 1
    if isinstance(op, INLINED_SYMBOLIC_OPS):
        return inlinable(op.fgraph)
    return False


def own_copy_nodes(fgraph) -> set:
    """The nodes of some decision's cone that cannot be inlined (a Sum over several axes, a
    Cholesky, ...) and that do not decide themselves: each gets its own copy, computed once
    for every copy whose cone reaches it (`Copies.own_copy`), so the copies above it hold
    elementwise ops only and are inlined into the kernels."""
    return {
        node
        for node in cone_nodes(fgraph)
        if not cone_op_inlinable(node) and (decision_rule(node) or ("inputs",))[0] != "node"
    }


def cone_nodes(fgraph) -> set:
    """The nodes in the cone of some decision of ``fgraph`` (not inside inner graphs)."""
    nodes = set()
    for node in fgraph.toposort():
        rule = decision_rule(node)
        if rule is None:
            continue
        _, seen = cone_leaves([node.inputs[p] for p in rule[1] if is_float(node.inputs[p])])
        nodes.update(v.owner for v in seen if v.owner is not None and not is_leaf(v))
    return nodes


def share_ops(fgraph, policy: Policy, outer_pools: tuple[str, ...] = ()) -> list:
    """Put every node of a decision's cone that `SHARED_OPS` lists, and whose inputs are
    as written, into a one-op `AsWritten` copy (``kind="shared"``) that every reader of
    the node reads: the product is computed once, as written, and the cones end at it.
    The new nodes, in graph order (a product of products is shared whole, inner first)."""
    in_cones = cone_nodes(fgraph)
    shared = []
    for node in fgraph.toposort():
        if node not in in_cones or node not in fgraph.apply_nodes or shared_reason(node) is None:
            continue
        leaves = list(dict.fromkeys(v for v in node.inputs if not isinstance(v, Constant)))
        copy = AsWritten(
            FrozenFunctionGraph.from_io(leaves, node.outputs), policy, label=str(node.op), kind="shared", outer_pools=outer_pools
        )
        shared.append(_replace_by_copy(fgraph, node.outputs, copy, leaves))
    return shared


def _replace_by_copy(fgraph, outputs, copy: AsWritten, leaves) -> object:
    """Replace ``outputs`` by those of ``copy`` applied to ``leaves`` (names kept); the new node."""
    new = copy.make_node(*leaves)
    for old, out in zip(outputs, new.outputs, strict=True):
        out.name = old.name
    fgraph.replace_all_validate(list(zip(outputs, new.outputs, strict=True)), reason=REASON)
    return new


def computed_roots(node) -> tuple:
    """The computed float decision inputs of a node that decides with its cone, in order."""
    rule = decision_rule(node)
    if rule is None or rule[0] != "node":
        return ()
    return tuple(dict.fromkeys(v for p in rule[1] if is_float(v := node.inputs[p]) and is_computed(v)))


def shared_roots(fgraph) -> dict[tuple, list[str]]:
    """Computed decision inputs that several decisions read (``0 <= p`` and ``p <= 1``, the
    checks of one parameter): the labels of those decisions, by their roots."""
    readers: dict[tuple, list[str]] = {}
    for node in fgraph.toposort():
        roots = computed_roots(node)
        if roots:
            readers.setdefault(roots, []).append(str(node.op))
    return {roots: labels for roots, labels in readers.items() if len(labels) > 1}


class Copies:
    """What the copies of one graph share: the policy and pools they are made with, one copy
    per cone that several decisions read (`shared_roots`: each of them is frozen alone,
    reading the copy's values, instead of each holding a copy), and ``ends``: every value
    an earlier copy computes (a shared cone, an op's own copy), which later cones read
    instead of recomputing it."""

    def __init__(self, policy: Policy, outer_pools: tuple[str, ...], shared: dict[tuple, list[str]]):
        self.policy = policy
        self.outer_pools = outer_pools
        self.shared = shared
        self.outputs: dict[tuple, list] = {}  # roots -> the shared cone copy's outputs
        self.ends: dict = {}  # a variable of the graph -> the copy output computing it
        self.nodes: list = []  # the copies made here, in the order they were made

    def leaves(self, roots) -> tuple[list, set]:
        """`cone_leaves` of ``roots``, ending at the values earlier copies compute."""
        return cone_leaves(roots, self.ends)

    def read(self, leaves) -> list:
        """The variables a copy with these leaves reads: earlier copies' outputs where they
        compute a leaf."""
        return [self.ends.get(v, v) for v in leaves]

    def op(self, leaves, outputs, label: str, kind: str) -> AsWritten:
        """An `AsWritten` op computing ``outputs`` from ``leaves``."""
        return AsWritten(
            FrozenFunctionGraph.from_io(leaves, outputs), self.policy, label=label, kind=kind, outer_pools=self.outer_pools
        )

    def make(self, leaves, outputs, label: str, kind: str):
        """A new `AsWritten` node computing ``outputs`` from ``leaves`` (not yet in the graph)."""
        return self.op(leaves, outputs, label, kind).make_node(*self.read(leaves))

    def values(self, roots: tuple) -> list | None:
        """The shared cone copy's outputs for ``roots`` (made on first use), or None if not shared."""
        if roots not in self.shared:
            return None
        if all(v in self.ends for v in roots):  # an earlier copy computes them all
            return [self.ends[v] for v in roots]
        if roots not in self.outputs:
            leaves, _ = self.leaves(list(roots))
            new = self.make(leaves, list(roots), f"cone of {', '.join(self.shared[roots])}", "cone")
            for k, (old, out) in enumerate(zip(roots, new.outputs, strict=True)):
                out.name = old.name or f"cone{len(self.nodes)}.{k}"
            self.outputs[roots] = new.outputs
            self.ends.update(zip(roots, new.outputs, strict=True))
            self.nodes.append(new)
        return self.outputs[roots]

    def own_copy(self, node) -> list:
        """A copy of ``node`` with its cone (`own_copy_nodes`), read by later copies in its
        place (a list of the one new node). The node stays for the rest of the graph, which
        rewrites it as usual."""
        outputs = [v for v in node.outputs if v not in self.ends]
        if not outputs:
            return []
        made = []
        if read_by_the_rest(node) is not None:
            made = self.cone_of_inputs(node)
        leaves, _ = self.leaves(list(node.inputs))  # indices and shapes too: leaves as well
        new = self.make(leaves, outputs, f"{node.op} in decisions' cones", "cone")
        for k, (old, out) in enumerate(zip(outputs, new.outputs, strict=True)):
            out.name = old.name or f"own{len(self.nodes)}.{k}"
        self.ends.update(zip(outputs, new.outputs, strict=True))
        self.nodes.append(new)
        return [*made, new]

    def cone_of_inputs(self, node) -> list:
        """One copy (``kind="cone"``) of the computed float inputs of ``node`` when kernels
        can hold their whole cone (`cone_op_inlinable`): ``node``'s own copy then reads it and
        holds the op alone, and the cone is put back into the kernels, where merge shares
        what the rest computes by the same ops (a list of the new node, or empty)."""
        roots = [v for v in dict.fromkeys(node.inputs) if is_float(v) and v not in self.ends and is_computed(v)]
        if not roots:
            return []
        leaves, seen = self.leaves(roots)
        if not all(cone_op_inlinable(v.owner) for v in seen if v.owner is not None and v not in self.ends and not is_leaf(v)):
            return []
        new = self.make(leaves, roots, f"inputs of {node.op}", "cone")
        for k, (old, out) in enumerate(zip(roots, new.outputs, strict=True)):
            out.name = old.name or f"in{len(self.nodes)}.{k}"
        self.ends.update(zip(roots, new.outputs, strict=True))
        self.nodes.append(new)
        return [new]


def freeze(fgraph, node, copies: Copies):
    """Freeze ``node``'s decision (or its decision inputs) if it needs it; the new node or None."""
    rule = decision_rule(node)
    if rule is None:
        return None
    kind, positions = rule
    roots = [node.inputs[p] for p in positions if is_float(node.inputs[p])]
    computed = [v for v in roots if is_computed(v)]
    self_compared = kind == "node" and len(set(roots)) < len(roots)
    if not computed and not self_compared:
        return None
    if kind == "node":
        keys = computed_roots(node)
        shared = copies.values(keys)
        if shared is not None:
            return _freeze_on_shared_cone(fgraph, node, dict(zip(keys, shared)), copies)
        return _freeze_node(fgraph, node, roots, copies)
    return _freeze_inputs(fgraph, node, positions, computed, copies)


def _freeze_on_shared_cone(fgraph, node, values: dict, copies: Copies):
    """Freeze ``node`` alone, reading the shared copy's ``values`` for its computed inputs
    (frozen still: a rewrite could fold or reorder the decision itself)."""
    inputs = [values.get(v, v) for v in node.inputs]
    leaves = list(dict.fromkeys(v for v in inputs if not isinstance(v, Constant)))
    inner = node.op.make_node(*inputs)
    copy = copies.op(leaves, inner.outputs, str(node.op), "decision")
    return _replace_by_copy(fgraph, node.outputs, copy, copies.read(leaves))


def _freeze_inner_graph(fgraph, node, policy, frozen: list, outer_pools):
    """Freeze the decisions inside a container's inner graph; the (possibly new) node."""
    inner = node.op.fgraph.unfreeze()
    found = freeze_graph(inner, policy, outer_pools)
    if not found:
        return node
    frozen.extend(found)
    new = node.op.clone_with_inner_graph(inner).make_node(*node.inputs)
    for old, out in zip(node.outputs, new.outputs, strict=True):
        out.name = old.name
    fgraph.replace_all_validate(list(zip(node.outputs, new.outputs, strict=True)), reason=REASON)
    return new


def _freeze_node(fgraph, node, roots, copies: Copies):
    leaves, cone = copies.leaves(roots)
    for var in node.inputs:  # the node's other inputs are read as they are (unless in the cone)
        if var not in cone and not isinstance(var, Constant):
            cone.add(var)
            leaves.append(var)
    copy = copies.op(leaves, node.outputs, str(node.op), "decision")
    return _replace_by_copy(fgraph, node.outputs, copy, copies.read(leaves))


def _freeze_inputs(fgraph, node, positions, computed, copies: Copies):
    values = list(dict.fromkeys(computed))
    new = None
    if all(v in copies.ends for v in values):  # earlier copies compute them: read those
        outputs = [copies.ends[v] for v in values]
    else:
        leaves, _ = copies.leaves(values)
        label = f"inputs {[p for p in positions if node.inputs[p] in values]} of {node.op}"
        new = copies.make(leaves, values, label, "inputs")
        outputs = new.outputs
    for p in positions:
        if node.inputs[p] in values:
            fgraph.change_node_input(node, p, outputs[values.index(node.inputs[p])], reason=REASON)
    return new
