"""Which nodes of a function graph decide, on which inputs, and where a decision's cone ends.

Pure Python over the graph (no numba); the tables of the as-written pass
(`ptnumba_codegen.as_written.freeze`). A *decision* is an op whose result changes by a jump when
an input crosses a threshold: a comparison, min/max, rounding, a Max reduction, a sort. Its
*decision inputs* are the inputs whose exact value decides (all of them for ``minimum``,
only the condition for ``switch``).

Two tables say what the pass does with a node:

* `FREEZE_NODE`: the node and the cones of its decision inputs are replaced together by
  one `AsWritten` op, whose outputs replace the node's. Nothing downstream can then
  change how the decision is computed.
* `FREEZE_INPUTS`: only the cones of the decision inputs are replaced (by an `AsWritten`
  op computing those values); the node stays. For ops that are not a value computation
  (``CheckAndRaise`` raises, ``IfElse`` picks a branch) and for the containers in
  `INNER_GRAPH_OPS` (OpFromGraph, Scan), whose inner graphs the pass freezes too.

A cone runs backwards from the decision inputs and stops at *leaves* (`leaf_reason`): graph
inputs (shared variables included), constants, and the outputs of the ops in `LEAF_RULES`.
A decision input is *computed* (`is_computed`) when its cone holds an op that a rewrite
could compute differently: the ops in `EXACT_OPS` only move values, and a single decision
op (min/max, clip, switch, rounding, a Max reduction) of uncomputed inputs is exact too.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import cache

from pytensor.compile.builders import OpFromGraph
from pytensor.conditional.op import IfElse
from pytensor.graph.basic import Constant
from pytensor.raise_op import CheckAndRaise
from pytensor.scalar.basic import Composite, Maximum, Minimum, ScalarOp
from pytensor.scan.op import Scan
from pytensor.tensor.blockwise import Blockwise
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.extra_ops import SearchsortedOp, Unique
from pytensor.tensor.linalg import Cholesky
from pytensor.tensor.math import Argmax, Dot
from pytensor.tensor.random.op import RandomVariable
from pytensor.tensor.sort import ArgSortOp, SortOp

from ptnumba_codegen.analysis.classify import ALL, DECISION_INPUTS, sensitive_inputs
from ptnumba_codegen.as_written.libm_operands import from_constants
from ptnumba_codegen.as_written.op import AsWritten
from ptnumba_codegen.analysis.whole_graph import TRANSPARENT_OPS
from ptnumba_codegen.analysis.program import from_scalar_op
from ptnumba_codegen.tables import mro_lookup


def is_float(var) -> bool:
    """Only float (and complex) values can be computed differently by a rewrite."""
    return str(getattr(var.type, "dtype", "")).startswith(("float", "complex"))


# -- decision inputs ----------------------------------------------------------------------


# id of a Program -> (the Program, its decision inputs): the freeze pass asks for the same
# nodes' decision inputs many times (a few programs, asked over and over per compile); the
# Program is held so its id stays its own, as `program.from_scalar_op` holds it
_DECIDES: OrderedDict = OrderedDict()
_DECIDES_KEPT = 1024


def _scalar_program_decides(scalar_op, in_dtypes, out_dtypes) -> tuple[int, ...]:
    """Input positions whose value reaches a decision inside a scalar op (or Composite)."""
    try:
        program = from_scalar_op(scalar_op, in_dtypes, out_dtypes)
    except Exception:  # an op the program builder does not know: decide by its class
        rule = mro_lookup(DECISION_INPUTS, scalar_op)
        return tuple(range(len(in_dtypes))) if rule is not None else ()
    hit = _DECIDES.get(id(program))
    if hit is not None and hit[0] is program:
        return hit[1]
    positions = tuple(sorted(sensitive_inputs(program)))
    _DECIDES[id(program)] = (program, positions)
    if len(_DECIDES) > _DECIDES_KEPT:
        _DECIDES.popitem(last=False)
    return positions


def _elemwise(node) -> tuple[int, ...]:
    return _scalar_program_decides(
        node.op.scalar_op, [i.type.dtype for i in node.inputs], [o.type.dtype for o in node.outputs]
    )


def _scalar(node) -> tuple[int, ...]:
    return _scalar_program_decides(
        node.op, [i.type.dtype for i in node.inputs], [o.type.dtype for o in node.outputs]
    )


def _careduce(node) -> tuple[int, ...]:
    return (0,) if isinstance(node.op.scalar_op, Maximum | Minimum) else ()


def _first(node) -> tuple[int, ...]:
    return (0,)


def _first_two(node) -> tuple[int, ...]:
    return (0, 1)


def _conditions(node) -> tuple[int, ...]:
    return tuple(range(1, len(node.inputs)))


def _inner_graph(node) -> tuple[int, ...]:
    return inner_decision_inputs(node.op.fgraph)


def _scan(node) -> tuple[int, ...]:
    # The inner inputs map to the outer ones through taps; any inner decision makes every
    # sequence and non-sequence a decision input (conservative). Initial states are not:
    # scan's memory rewrites must see how their buffers are built.
    if not inner_decision_inputs(node.op.fgraph):
        return ()
    n = len(node.inputs)
    seqs = range(1, 1 + node.op.info.n_seqs)
    return (*seqs, *range(n - node.op.info.n_non_seqs, n))


# op class -> the node's decision inputs; the node is frozen with their cones.
FREEZE_NODE = {
    Elemwise: _elemwise,  # comparisons, min/max, clip, switch condition, rounding, casts to int/bool, ...
    ScalarOp: _scalar,  # the same ops on pytensor scalars
    CAReduce: _careduce,  # Max, Min
    Argmax: _first,
    SortOp: _first,
    ArgSortOp: _first,
    SearchsortedOp: _first_two,
    Unique: _first,
}

# op class -> the inputs whose cones are frozen; the node itself stays.
FREEZE_INPUTS = {
    CheckAndRaise: _conditions,  # Assert and PyMC's parameter checks raise: not a value
    IfElse: _first,  # the condition
    OpFromGraph: _inner_graph,  # Softmax, LogSumExp, ...: the inputs reaching inner decisions
    Scan: _scan,
}

# containers whose inner graph the pass freezes as well (before scan's rewrites move nodes
# in or out of it, and before symbolic ops such as LogSumExp are inlined)
INNER_GRAPH_OPS = (OpFromGraph, Scan)


def decision_rule(node) -> tuple[str, tuple[int, ...]] | None:
    """``("node" | "inputs", decision input positions)`` for a deciding node, else None.

    A Blockwise decides like its core op, on the same input positions.
    """
    op = node.op
    probe = node
    if isinstance(op, Blockwise):
        probe = op._create_dummy_core_node(node.inputs)
        op = op.core_op
    for kind, table in (("node", FREEZE_NODE), ("inputs", FREEZE_INPUTS)):
        rule = mro_lookup(table, op)
        if rule is not None:
            positions = rule(probe)
            return (kind, tuple(positions)) if positions else None
    return None


@cache
def inner_decision_inputs(inner) -> tuple[int, ...]:
    """Positions of the inputs of an (immutable) inner graph whose values reach a decision."""
    position = {v: k for k, v in enumerate(inner.inputs)}
    roots = []
    for node in inner.toposort():
        rule = decision_rule(node)
        if rule is not None:
            roots.extend(node.inputs[p] for p in rule[1])
    found, seen = set(), set()
    while roots:
        v = roots.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in position:
            found.add(position[v])
        elif v.owner is not None:
            roots.extend(v.owner.inputs)
    return tuple(sorted(found))


# -- leaves -------------------------------------------------------------------------------


def _draws(node) -> str | None:
    return "draws random numbers: a copy would draw other numbers and advance the generator"


def _frozen(node) -> str | None:
    return "already as written: a nested decision reads its result instead of recomputing it"


def _inner_draws(node) -> str | None:
    inner = getattr(node.op, "fgraph", None)
    if inner is not None and _has_random(inner):
        return "draws random numbers in its inner graph"
    return None


@cache
def _has_random(inner) -> bool:
    for node in inner.toposort():
        if isinstance(node.op, RandomVariable):
            return True
        sub = getattr(node.op, "fgraph", None)
        if sub is not None and _has_random(sub):
            return True
    return False


# op class -> why its outputs end a cone (None: they do not)
LEAF_RULES = {
    RandomVariable: _draws,
    AsWritten: _frozen,
    OpFromGraph: _inner_draws,
    Scan: _inner_draws,
}


# ops that only move, broadcast or select values: a cone made of these alone is not computed
# (graph_analysis's table: the same ops pass a decision's requirement through unchanged)
EXACT_OPS = TRANSPARENT_OPS


def _exact(node) -> bool:
    """Moves values, or is one decision op: exact when its float inputs are."""
    op = node.op
    if isinstance(op, EXACT_OPS):
        return True
    if isinstance(op, Elemwise) and isinstance(op.scalar_op, Composite):
        return False
    rule = mro_lookup(FREEZE_NODE, op)
    return rule is not None and bool(rule(node))


def is_computed(var) -> bool:
    """Whether an op a rewrite could compute differently is in ``var``'s cone."""
    stack, seen = [var], set()
    while stack:
        v = stack.pop()
        if v in seen or isinstance(v, Constant) or leaf_reason(v) is not None:
            continue
        seen.add(v)
        if not _exact(v.owner):
            return True
        stack.extend(i for i in v.owner.inputs if is_float(i))
    return False


def leaf_reason(var) -> str | None:
    """Why ``var`` ends a cone (it is read, not recomputed), or None if it is recomputed."""
    node = var.owner
    if node is None:
        return "a graph input" if not isinstance(var, Constant) else "a constant"
    if not is_float(var) and not from_constants(var):
        return (
            "an integer or boolean: exact arithmetic, and every step from a float to one "
            "is a decision of its own"
        )
    if node.op.destroy_map:
        return "updates an input in place"
    if not all(hasattr(o.type, "dtype") for o in node.outputs):
        return "has an output that is not a tensor or scalar (a generator, list, ...)"
    rule = mro_lookup(LEAF_RULES, node.op)
    return rule(node) if rule is not None else None


# -- computed once, as written, for every reader ---------------------------------------------

# op class -> why, when its float inputs are as written (leaves, or values moved from
# leaves: `is_computed` is False), the pass computes it once, as written, for every reader:
# the cones of the decisions and the rest of the graph. The cones then end at it (a leaf)
# and, holding elementwise ops only, are inlined into the kernels; the rest of the graph
# loses the rewrites of the op itself (not those of its readers).
SHARED_OPS = {
    Dot: "a BLAS product (Blockwise Matmul too): the rewritten form (Dot of an ExpandDims, "
    "Gemv, Dot22) calls the same BLAS routines and fuses with nothing, so one product as "
    "written costs the rest of the graph nothing and saves each cone its own pass over X",
}


def shared_reason(node) -> str | None:
    """Why ``node`` is computed once, as written, for every reader (`SHARED_OPS`), or None.
    A Blockwise is looked up by its core op."""
    op = node.op.core_op if isinstance(node.op, Blockwise) else node.op
    reason = mro_lookup(SHARED_OPS, op)
    if reason is None or node.op.destroy_map:
        return None
    floats = [v for v in node.inputs if is_float(v)]
    if not floats or all(from_constants(v) for v in node.inputs):
        return None  # nothing computed, or constant folding's to take
    if any(is_computed(v) for v in floats):
        return None  # its inputs are computed: it belongs to a cone copy
    return reason


# op class -> why, when a node of it in some decision's cone gets its own copy (with its
# cone, `freeze.own_copy_nodes`), the rest of the graph reads that copy too instead of
# computing the op again from its rewritten cone. The rest then gets the value as written
# (the reference's), computed strictly, and loses the rewrites and fast flags of the cone
# it reads through the op (not of what else reads that cone).
READ_BY_THE_REST = {
    Cholesky: "a factorization: O(n^3) LAPACK work (potrf, the same routine whatever the "
    "flags) on an O(n^2) cone; computing the cone once strictly costs less than factorizing "
    "twice, and the rest's checks and solves then read the factor the decisions read",
}


def read_by_the_rest(node) -> str | None:
    """Why the rest of the graph reads ``node``'s own copy (`READ_BY_THE_REST`), or None.
    A Blockwise is looked up by its core op."""
    op = node.op.core_op if isinstance(node.op, Blockwise) else node.op
    if node.op.destroy_map:
        return None
    return mro_lookup(READ_BY_THE_REST, op)
