"""What an as-written copy compiles once: each value one time, copies inside copies as one function.

The as-written pass (`ptnumba_codegen.as_written.freeze`) runs on the graph as the user
wrote it, before PyTensor's ``merge1``: a value written twice (the logp's and the
gradient's ``x[0:1].reshape(...)``) is two variables there, so a copy, or an envelope
guard holding copies in its slow path, may read one value through several of its inputs,
and equal copies inside it read different ones; merge inside the copy cannot see that
they are one value. And a copy's inner graph may hold copies of its own (an envelope
guard's slow path holds the copies it guards): each was compiled as a numba function of
its own, linked into the enclosing one and optimized and turned into machine code again at
every level.

Two steps, both value-preserving:

* `read_inputs_once` (in the outer graph, once its merges are done): a copy that reads
  one variable at several inputs (`REPEATED_INPUTS`) gets an op reading it at the first
  of them only; the inner graph's merge then computes equal ops on it once.
* `flatten_copies` (in a copy's inner graph, before its lowering rewrites): every copy
  inside it that `FLATTEN` lists is replaced by its own inner graph, with its overflow
  guards, so the whole slow path is one graph, merged, fused and compiled as one function.

And one table for the lowering (`lowering.funcify_as_written`): a copy is compiled with
numba's fast math off, and PyTensor keys each node function by its fast-math setting, so a
``Subtensor`` the copy shares with the rest of the function was a second numba function,
typed, lowered and optimized again, though fast-math flags only ever attach to floating-
point arithmetic and calls returning floats (numba's ``fastmathpass``) and it has neither.
The ops of `FLAG_FREE` keep the enclosing function's setting inside a copy: the same key
as outside, one compile (the second is a cache load), the same machine code either way
(tests/test_as_written_compile_once.py compiles each under fast math and finds no flag in
its final IR).

Pure pytensor (no numba).
"""

from __future__ import annotations

from pytensor.graph.fg import FrozenFunctionGraph
from pytensor.tensor.basic import Alloc, AllocEmpty, ExtractDiag, Join, MakeVector, ScalarFromTensor, TensorFromScalar
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.shape import Shape, Shape_i
from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor

from ptnumba_codegen.as_written.guards import add_overflow_guards
from ptnumba_codegen.as_written.op import AsWritten, EnvelopeGuarded

REASON = "as_written_compile_once"

# op type of a copy inside an inner graph being lowered -> why its ops may go into the
# enclosing graph (looked up by exact type: a subclass computes something else)
FLATTEN = {
    AsWritten: "its inner graph would get exactly the rewrites the enclosing graph gets "
    "(lowering.inner_mode: the reference's own and INNER_REWRITES, all value-preserving) "
    "and the same strict generator with numba fastmath off: put into the enclosing graph "
    "with its overflow guards, every op computes the same values, in one function",
}
# not in FLATTEN: EnvelopeGuarded (its outputs are constants inside its box, not its
# inner graph's values)

# op type -> (the inner graph's inputs, the op's other inputs after them) and how to
# rebuild it with a new inner graph, for `read_inputs_once`
REPEATED_INPUTS = {
    AsWritten: (
        lambda op: len(op.fgraph.inputs),
        lambda op, graph: AsWritten(graph, op.policy, label=op.label, kind=op.kind, outer_pools=op.outer_pools),
    ),
    EnvelopeGuarded: (
        lambda op: op.n_inner,
        lambda op, graph: EnvelopeGuarded(
            graph, op.policy, op.bounds, op.outcomes, op.n_checks, label=op.label, outer_pools=op.outer_pools
        ),
    ),
}


_MOVES = "moves, views or copies elements (index arithmetic in integers only): no floating-point operation"
# op type -> why its numba implementation has no instruction fast-math flags attach to
# (fadd, fsub, fmul, fdiv, frem, fcmp, calls returning a float), so a copy may compile it
# under the enclosing function's setting (looked up by exact type). Not here: anything
# that adds (IncSubtensor, AdvancedIncSubtensor, CumOp), ARange (float steps multiply),
# Reshape (its numba function compares doubles) and SpecifyShape (its error message calls
# log10 and floor): tests/test_as_written_compile_once.py finds the flags in their IR.
FLAG_FREE = {
    Subtensor: _MOVES,
    AdvancedSubtensor: _MOVES + "; gathers",
    DimShuffle: "a view with permuted, added or dropped axes",
    Shape: "reads the shape (integers)",
    Shape_i: "reads one dimension (an integer)",
    ScalarFromTensor: "reads the one element",
    TensorFromScalar: "stores the one element",
    Alloc: "broadcasts one value into a new array: stores only",
    AllocEmpty: "allocates, writes nothing",
    MakeVector: "stores its scalars (same dtype, or a conversion: fpext/fptrunc/sitofp carry no flags)",
    Join: _MOVES + "; concatenates",
    ExtractDiag: "a strided view of the diagonal",
}


def flag_free(op) -> bool:
    """Whether ``op``'s numba function has no instruction fast-math flags attach to (`FLAG_FREE`)."""
    return type(op) in FLAG_FREE


def rebuild(graph, inputs) -> list:
    """``graph``'s outputs computed from ``inputs`` by new nodes of the same ops. Unlike
    ``clone_replace``, which rebuilds what the replacements are computed from as well,
    an input computed by another copy (a shared cone) stays that copy's output."""
    memo = dict(zip(graph.inputs, inputs, strict=True))
    for node in graph.toposort():
        new = node.op.make_node(*(memo.get(v, v) for v in node.inputs))
        memo.update(zip(node.outputs, new.outputs, strict=True))
    return [memo.get(v, v) for v in graph.outputs]


def flatten_copies(graph, op) -> int:
    """Replace every copy in ``graph`` (the unfrozen inner graph of ``op``, in place) whose
    type `FLATTEN` lists and whose policy and thread pools are ``op``'s by its own inner
    graph with its overflow guards, copies inside it too. The number replaced."""
    done = 0
    for node in graph.toposort():
        inner_op = node.op
        if type(inner_op) not in FLATTEN or node not in graph.apply_nodes:
            continue
        if inner_op.policy != op.policy or inner_op.outer_pools != op.outer_pools:
            continue
        inner = inner_op.fgraph.unfreeze()
        add_overflow_guards(inner, inner_op.kind)
        done += 1 + flatten_copies(inner, inner_op)
        outs = rebuild(inner, node.inputs)
        for old, new in zip(node.outputs, outs, strict=True):
            new.name = old.name
        graph.replace_all(list(zip(node.outputs, outs, strict=True)), reason=REASON, import_missing=True)
    return done


def read_inputs_once(fgraph) -> int:
    """Give every copy in ``fgraph`` (`REPEATED_INPUTS`) that reads one variable at several
    of its inner graph's inputs an op that reads it once. The number of copies changed."""
    changed = 0
    for node in fgraph.toposort():
        rule = REPEATED_INPUTS.get(type(node.op))
        if rule is None:
            continue
        n_inner, remake = rule
        n = n_inner(node.op)
        first: dict = {}
        for k, var in enumerate(node.inputs[:n]):
            first.setdefault(var, k)
        if len(first) == n:
            continue
        graph = node.op.fgraph.unfreeze()
        for k, var in enumerate(node.inputs[:n]):
            if first[var] != k:
                graph.replace(graph.inputs[k], graph.inputs[first[var]], reason=REASON)
        kept = sorted(first.values())
        op = remake(node.op, FrozenFunctionGraph.from_io([graph.inputs[k] for k in kept], graph.outputs))
        new = op.make_node(*(node.inputs[k] for k in kept), *node.inputs[n:])
        for old, out in zip(node.outputs, new.outputs, strict=True):
            out.name = old.name
        fgraph.replace_all_validate(list(zip(node.outputs, new.outputs, strict=True)), reason=REASON)
        changed += 1
    return changed
