"""Which rewrites an inlined as-written copy may get: those that only move values.

An elementwise copy put back into the graph (`ptnumba_codegen.as_written.freeze.InlineAsWritten`)
is written the way the user wrote it: ``x[0:1].reshape(()).dimshuffle("x")`` where the
rest of the graph, canonicalized, reads ``x[:1]``. The same cone then exists twice, once
in each spelling, and is computed twice. The rewrites of `VALUE_MOVE_REWRITES` evaluate no
arithmetic: each replaces a way of selecting, reshaping or broadcasting elements by
another that selects the same elements in the same places, or moves a dimshuffle through an
elementwise op (which computes each element from the same operands either way). Run on
the copies, they spell the copies' value moves as canonicalize spelled the rest's; merge
then finds the nodes the copy and the rest compute by the same op on the same inputs and
keeps one. The value is the same (the same op on the same values, as written, no rewrite
changed it), and the one node stays in the decision's cone: the policy compiles it
strictly, as it compiles any decision's cone under ``default``.
"""

from __future__ import annotations

from pytensor.graph.basic import Constant
from pytensor.graph.rewriting.basic import MergeOptimizer, in2out, node_rewriter
from pytensor.tensor.basic import ExtractDiag, MakeVector, ScalarFromTensor
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.rewriting import basic, elemwise, shape, subtensor, subtensor_lift, uncanonicalize
from pytensor.tensor.rewriting.subtensor_lift import local_extract_diag_of_alloc_diag
from pytensor.tensor.shape import shape_padleft
from pytensor.tensor.rewriting.basic import unconditional_constant_folding

from ptnumba_codegen.as_written.constant_folds import fold_exact

# rewrite -> why it moves values only (no arithmetic is evaluated or re-associated)
VALUE_MOVE_REWRITES = {
    shape.local_reshape_to_dimshuffle: "a reshape that only adds or drops length-1 axes "
    "is that dimshuffle: the same elements in the same order",
    shape.local_useless_reshape: "a reshape to the shape its input already has",
    elemwise.local_dimshuffle_lift: "two dimshuffles compose into one; a dimshuffle of an "
    "elementwise op's output is the op on dimshuffled inputs (each element from the same "
    "operands); an identity dimshuffle is its input",
    subtensor.local_useless_slice: "slice bounds that select everything spelled None: "
    "the same elements",
    subtensor.local_subtensor_merge_slice: "a slice of a slice is one slice of the same elements",
    subtensor.local_useless_subtensor: "a subtensor that takes its whole input",
    uncanonicalize.local_dimshuffle_subtensor: "dropping a length-1 axis of a slice is "
    "indexing that axis with the slice's one position",
    subtensor.local_uint_constant_indices: "constant indices in the smallest unsigned "
    "dtype that holds them: the same positions",
    basic.local_dimshuffle_alloc: "a dimshuffle of an allocated broadcast is the broadcast "
    "of the dimshuffled value: the same elements in the same places",
    subtensor_lift.local_subtensor_of_alloc: "an index into a broadcast (``tile(a)[i, j]``) "
    "reads the broadcast value's elements: indexing the value itself reads the same ones",
    subtensor_lift.local_subtensor_shape_constant: "a length the type fixes, read from a "
    "shape: an integer constant, no value computed",
}


# Merging two slices (`local_subtensor_merge_slice`) writes the merged bounds as index
# arithmetic on the slices' constants (``switch(lt(17, 0), 17 + 22, 17)``); canonicalize's
# constant folding folds that arithmetic in the rest of the graph, but a copy is put back
# after it has run, so the copy's bounds would stay computed: they would not merge with the
# rest's constant bounds. `fold_index_arithmetic` folds them where the fold is exact
# (`constant_folds`: integer arithmetic wraps alike in numpy and numba).


def _integral(var) -> bool:
    return var.type.dtype == "bool" or var.type.dtype.startswith(("int", "uint"))


@node_rewriter([Elemwise, ScalarFromTensor, MakeVector])
def fold_index_arithmetic(fgraph, node):
    """Fold an exactly foldable op (`constant_folds.fold_exact`) on integer or boolean
    constants (its outputs too), and the `ScalarFromTensor` or `MakeVector` reading the
    results as a subtensor's index or a shape (moves)."""
    if not all(isinstance(v, Constant) for v in node.inputs):
        return None
    if not all(_integral(v) for v in (*node.inputs, *node.outputs)):
        return None
    if isinstance(node.op, Elemwise):
        return fold_exact.transform(fgraph, node)
    return unconditional_constant_folding.fn(fgraph, node)


@node_rewriter([DimShuffle])
def compose_dimshuffles(fgraph, node):
    """`local_dimshuffle_lift` but for its lift through an elementwise op: two dimshuffles
    composed, an identity dropped."""
    inode = node.inputs[0].owner
    if inode is not None and isinstance(inode.op, Elemwise):
        if len(inode.outputs) == 1 and len(fgraph.clients[node.inputs[0]]) == 1:
            return None  # the lift
    return elemwise.local_dimshuffle_lift.transform(fgraph, node)


def spell_like_the_rest(fgraph, outputs) -> None:
    """Apply `VALUE_MOVE_REWRITES` to what ``outputs`` are computed from, then merge the
    nodes that compute the same op on the same inputs."""
    if not outputs:
        return
    # first without lifting dimshuffles through elementwise ops: a lift happens only where the
    # op has one reader, so a copy that lifts ``ExpandDims(exp(s))`` to ``exp(ExpandDims(s))``
    # no longer merges with the ``ExpandDims`` of a shared cone's ``exp(s)`` (the gamma GLM's
    # checks computed ``shape / exp(eta)`` and its pow twice, in two kernels); merged first,
    # the op has several readers and stays
    first = [compose_dimshuffles if r is elemwise.local_dimshuffle_lift else r for r in VALUE_MOVE_REWRITES]
    in2out(*first, fold_index_arithmetic, ignore_newtrees=False).apply(fgraph, start_from=outputs)
    MergeOptimizer().rewrite(fgraph)
    outputs = [v for v in outputs if v in fgraph.clients]
    in2out(*VALUE_MOVE_REWRITES, fold_index_arithmetic, ignore_newtrees=False).apply(fgraph, start_from=outputs)
    MergeOptimizer().rewrite(fgraph)


def fresh_merge(fgraph) -> None:
    """Merge with a new `MergeFeature`, which looks at every node as it is now. The one
    attached since ``merge1`` only examines the nodes it scheduled when they were imported
    or changed, and keeps a blacklist of merges that failed then: after the copies are put
    back (`freeze.InlineAsWritten`), identical chains were left unmerged (the same slice of
    the same input, its exp and its pow, twice in the stochastic-volatility model's checks:
    one kernel computed them twice)."""
    old = getattr(fgraph, "merge_feature", None)
    if old is not None:
        fgraph.remove_feature(old)
        del fgraph.merge_feature  # MergeFeature.on_detach leaves it: a new one would refuse to attach
    MergeOptimizer().rewrite(fgraph)


@node_rewriter([ExtractDiag])
def extract_diag_through_expand_dims(fgraph, node):
    """The diagonal over axes (a1 + k, a2 + k) of ``x`` with k length-1 axes put in front
    is the diagonal of ``x`` over (a1, a2) with the same k axes put in front."""
    x = node.inputs[0]
    ds = x.owner.op if x.owner is not None else None
    if not isinstance(ds, DimShuffle) or not ds.is_left_expand_dims:
        return None
    k, op = len(ds.augment), node.op
    if min(op.axis1, op.axis2) < k:
        return None
    inner = ExtractDiag(offset=op.offset, axis1=op.axis1 - k, axis2=op.axis2 - k, view=op.view)(x.owner.inputs[0])
    return [shape_padleft(inner, k)]


# rewrite -> why it moves values only. Run on the whole graph before the as-written pass
# freezes decisions' cones (`freeze.AsWrittenPass`): a decision that reads a diagonal of a
# matrix built from a vector reads the vector, so its cone holds no opaque copy of the
# matrix (a structural-equation model's check that the likelihood's Cholesky diagonal is
# positive built two diagonal matrices, 12 x 12 and 1 x 12 x 12, in opaque copies, to read
# their diagonals back). PyTensor runs the first in canonicalize on the rest of the graph.
DIAGONAL_MOVES = {
    local_extract_diag_of_alloc_diag: "the diagonal of a matrix with v on that diagonal is v "
    "(and at another offset zeros): elements read back from where they were put",
    extract_diag_through_expand_dims: "length-1 axes in front of a matrix leave its diagonal's "
    "elements where they were: the diagonal first, the axes after",
}


def read_diagonals_at_their_source(fgraph) -> None:
    """Apply `DIAGONAL_MOVES` to the whole graph (before the as-written pass freezes it)."""
    if any(isinstance(n.op, ExtractDiag) for n in fgraph.apply_nodes):
        in2out(*DIAGONAL_MOVES, ignore_newtrees=False).apply(fgraph)
