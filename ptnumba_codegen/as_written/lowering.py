"""Compiling an `AsWritten` node for numba: its inner graph, bit for bit as written.

The reference is ``Mode(linker="numba", optimizer=None)`` under ``numba__fastmath=False``:
each op on its own, libm, no fast-math flags. The inner graph gets exactly the rewrites
that reference runs (the numba linker's required ``minimum_compile`` and ``numba``
rewrites: indexed-read and reduction fusion into loops, scalarization, inner-graph
baking), plus the value-preserving ones in `INNER_REWRITES`; then its kernels
(`GENERATED_KINDS`: elementwise loops and reductions, fused or not) go to the generator
under the ``strict`` policy (per op bit-identical to the stock strict kernels, see
tests/test_codegen.py; reductions in stock's order, tests/test_reduction_order.py) and
every other node to the stock numba implementation under ``numba__fastmath=False``.

Plus the overflow guards of `ptnumba_codegen.as_written.guards` (the stabilized form of a
decision input only where its as-written value is not finite).

What an inner graph does *not* get: canonicalization, specialization, unguarded
stabilization, constant folding (numpy, not libm), ``local_add_mul_fusion`` (which turns
``x*(y*z)`` into ``mul(x, y, z)``) and every other ``fast_run`` rewrite.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from functools import cache

from pytensor import config
from pytensor.compile.aliasing import add_supervisor_to_fgraph, insert_deepcopy
from pytensor.compile.io import In, Out
from pytensor.compile.mode import Mode
from pytensor.graph.rewriting.basic import MergeOptimizer, dfs_rewriter
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import (
    numba_njit,
    numba_funcify_and_cache_key,
    register_funcify_and_cache_key,
)
from pytensor.scalar.basic import ScalarOp
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.rewriting.blockwise import local_useless_unbatched_blockwise
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.rewriting.elemwise import FusionOptimizer
from pytensor.tensor.rewriting.scalarize import ScalarizedElemwise

from ptnumba_codegen import settings
from ptnumba_codegen.as_written.compile_once import FLAG_FREE, flag_free, flatten_copies
from ptnumba_codegen.compact.ops import stock_class_of
from ptnumba_codegen.as_written.decision_moves import decide_on_operands
from ptnumba_codegen.as_written.freeze import fold_exact_constants, inline_symbolic_ops
from ptnumba_codegen.as_written.guards import add_overflow_guards
from ptnumba_codegen.as_written.libm_operands import mark_pows
from ptnumba_codegen.as_written.op import AsWritten, EnvelopeGuarded
from ptnumba_codegen.lowering.node_keys import cache_key
from ptnumba_codegen.policy import Policy, load_policy
from ptnumba_codegen.runtime import python_callbacks
from ptnumba_codegen.passes.swap_compact import POSITION as SWAP_COMPACT_POSITION
from ptnumba_codegen.passes.swap_compact import SwapCompact
from ptnumba_codegen.passes.policy_codegen import POSITION, TAG, PolicyCodegen
from ptnumba_codegen.passes.scalar_writes import POSITION as SCALAR_WRITES_POSITION
from ptnumba_codegen.passes.scalar_writes import ScalarWrites

# The node types of an inner graph the generator compiles: elementwise kernels, and
# reductions (under ``strict`` they accumulate in the stock kernel's order, with its
# bits: tests/test_reduction_order.py), so their libm calls get exact lanes too.
GENERATED_KINDS = (Elemwise, ScalarizedElemwise, ScalarOp, FusedElemwise, CAReduce)

# rewrite -> why it keeps every value bit for bit (besides the reference's own rewrites)
INNER_REWRITES = {
    "merge": "computes identical subexpressions once: the same ops on the same inputs",
    "fold_exact_constants": "folds ops that only move values (ExpandDims, Reshape, ...) "
    "of constants; no arithmetic is evaluated",
    "composite_elemwise_fusion": "fuses chains of Elemwise nodes into one Composite loop; "
    "each scalar op keeps its inputs, dtype and place, only intermediate arrays disappear",
    "mark_pows": "a pow with a constant operand becomes PowAsWritten, the same pow whose "
    "constant operands reach libm as values (as the reference reads them from arrays), not "
    "folded into a call LLVM rewrites (as_written.libm_operands)",
    "decide_on_operands": "a comparison of a producer's output with a constant that has the "
    "outcome of a comparison of its operand, for every value (-1 * log(w) == -inf is w == +inf: "
    "as_written.decision_moves), reads the operand: the decision is the same bool, and only "
    "values no output reads are skipped",
    "local_useless_unbatched_blockwise": "a Blockwise with no batch dimensions is its core op "
    "on the same values (length-1 batch axes dropped and put back: moves only); the Blockwise "
    "loop would call the same core function once (a GP's Cholesky copy compiled numba's "
    "Blockwise loop besides the Cholesky the rest of the function has)",
    "swap_compact": "a stock op with a compact op (SpecifyShape, Split, Dot, DimShuffle, ...) becomes "
    "the same op in a function that compiles in a fraction of the time (passes.swap_compact): the same "
    "checks and texts, the same views, the same BLAS calls (the same bits)",
    "scalar_writes": "an increment whose update is TensorFromScalar(s) reads s itself "
    "(passes.scalar_writes): the same store of the same value, no 0-d array in between",
    "inline_symbolic_ops": "Softmax, LogSoftmax, LogSumExp, ... (the ops PyTensor's own "
    "inline_symbolic_for_fusion inlines; not every SymbolicOp: AllocDiag's expansion never "
    "settled, growing a structural-equation model's copy without bound): the reference runs "
    "such an op's inner graph op by op as a function of its own (after the reference's own rewrites, "
    "which the copy gets too); inlined, the same ops compute the same values, and the "
    "elementwise ones reach the generator (strict, exact lanes) instead of scalar libm loops",
}
MERGE_POSITION = 0

# How an envelope guard's slow path (the inner graph, run when a call leaves the box) is
# part of the compiled function: "on_demand" compiles it at the first call that needs it and
# calls it through `python_callbacks` (a model's cold compile then leaves it out, and most
# calls never leave the box; CHANGELOG.md, "An envelope guard's slow path compiled on
# demand"); "linked" compiles it with the function, linked into it. `settings.SLOW_PATH`
# selects, read at each guard's funcify.

# guard node (op if funcified without one) -> the symbol its compiled function calls its slow path through (on_demand)
SLOW_PATH_SYMBOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
SLOW_PATH_FAILED = (
    "ptnumba_codegen: an envelope guard's slow path (its decisions as written, outside the guard's box) "
    "raised; the exception and its traceback are in the 'ptnumba_codegen' log"
)
FUSION_POSITION = 49  # where fast_run fuses: after the reference's early rewrites


def inner_policy(policy: Policy) -> Policy:
    """``strict`` everywhere, with the outer policy's threads setting."""
    strict = load_policy("strict")
    return dataclasses.replace(strict, name=f"strict (as written, {policy.name})", parallel=policy.parallel)


@cache
def inner_mode(policy: Policy, outer_pools: tuple[str, ...] = ()) -> Mode:
    """The reference's rewrites, the value-preserving fusion, the generator under strict
    (its kernels yield to the pools of the inner graph and to ``outer_pools``, those of the
    function the copy is part of)."""
    return (
        Mode(linker="numba", optimizer=None)
        .excluding(TAG)  # never the policy's own rewrites (no as-written pass inside)
        .register(
            (MergeOptimizer(), MERGE_POSITION),
            (dfs_rewriter(fold_exact_constants), MERGE_POSITION + 0.01),
            (dfs_rewriter(inline_symbolic_ops), MERGE_POSITION + 0.02),
            (dfs_rewriter(decide_on_operands), MERGE_POSITION + 0.025),
            (dfs_rewriter(mark_pows), MERGE_POSITION + 0.03),
            (dfs_rewriter(local_useless_unbatched_blockwise), MERGE_POSITION + 0.04),
            (FusionOptimizer(), FUSION_POSITION),
            (SwapCompact(), SWAP_COMPACT_POSITION),
            (PolicyCodegen(inner_policy(policy), kinds=GENERATED_KINDS, outer_pools=outer_pools), POSITION),
            (ScalarWrites(), SCALAR_WRITES_POSITION),
        )
    )


def lowering_graph(op: AsWritten):
    """The inner graph as compiled (memoized on the op; not part of its identity)."""
    graph = getattr(op, "_lowering", None)
    if graph is None:
        graph = op.fgraph.unfreeze()
        op._guards = add_overflow_guards(graph, op.kind)
        op._flattened = flatten_copies(graph, op)  # copies inside it: one function (compile_once)
        specs = [In(x, borrow=True, mutable=False) for x in graph.inputs]
        add_supervisor_to_fgraph(fgraph=graph, input_specs=specs, accept_inplace=True)
        inner_mode(op.policy, op.outer_pools).optimizer.rewrite(graph)
        # the op declares no view_map: its outputs must not alias its inputs
        insert_deepcopy(graph, wrapped_inputs=specs, wrapped_outputs=[Out(o, borrow=False) for o in graph.outputs])
        op._lowering = graph
    return graph


def keeps_enclosing_fastmath(op) -> bool:
    """`compile_once.flag_free`, and a compact op (`compact.table.COMPACT`) of a flag-free
    stock class: the same view or fill, with no floating-point arithmetic either
    (tests/test_compact_views.py compiles them under fast math)."""
    return flag_free(op) or stock_class_of(type(op)) in FLAG_FREE


@contextlib.contextmanager
def flag_free_nodes_keep(fastmath):
    """While a copy's graph is funcified with fast math off, its `flag_free` nodes are
    funcified under ``fastmath`` (the enclosing function's setting): the same PyTensor
    cache key as outside the copy, so one numba function for both (compile_once.FLAG_FREE).
    PyTensor's FunctionGraph funcify looks the per-node function up in its module at each
    node; it is restored on the way out."""
    original = numba_basic.numba_funcify_ensure_cache

    def per_node(op, node=None, **kwargs):
        if keeps_enclosing_fastmath(op):
            with config.change_flags(numba__fastmath=fastmath):
                return original(op, node=node, **kwargs)
        return original(op, node=node, **kwargs)

    numba_basic.numba_funcify_ensure_cache = per_node
    try:
        yield
    finally:
        numba_basic.numba_funcify_ensure_cache = original


@register_funcify_and_cache_key(AsWritten)
def funcify_as_written(op, node=None, **kwargs):
    kwargs.pop("storage_map", None)
    graph = lowering_graph(op)
    with flag_free_nodes_keep(config.numba__fastmath), config.change_flags(numba__fastmath=False):
        fn, key = numba_funcify_and_cache_key(graph, squeeze_output=True, fgraph_name="as_written", **kwargs)
    return fn, None if key is None else cache_key("as_written", "fastmath=False", key)


def _inside_src(x, bound):
    """Every element finite with |x| <= bound (NaN fails the comparison)."""
    for v in x.flat:
        if not (abs(v) <= bound):
            return False
    return True


_inside = numba_njit(_inside_src)


def _slow_path_slots(op):
    """The values an envelope guard passes to its slow path (inner inputs, then outputs),
    or None if one has no `python_callbacks.PASSED_TYPES` row (it is linked then)."""
    from pytensor.link.numba.dispatch.basic import get_numba_type

    try:
        values = [*op.fgraph.inputs, *op.fgraph.outputs]
        slots = tuple(python_callbacks.slot_of(get_numba_type(v.type)) for v in values)
    except NotImplementedError:
        return None
    return None if None in slots else slots


def _slow_path(inner_fn, key):
    """The inner graph's function, callable from Python: a numba dispatcher, so compiled at
    its first call (with fast math off, as the inner graph's functions), on PyTensor's
    numba cache (its directory as it is now: the dispatcher's cache is set up here) under
    its own key when the cache is on now."""
    src = "def as_written_slow_path(*args):\n    return jitable_func(*args)\n"
    cache_key = None if key is None or not config.numba__cache else f"{key}_slow_path"
    with config.change_flags(numba__fastmath=False):
        # __name__: numba's cache rebuilds the function's environment from its module's name
        env = {"__name__": __name__, "jitable_func": inner_fn}
        fn = compile_numba_function_src(src, "as_written_slow_path", env, cache_key=cache_key)
        return numba_njit(fn, final_function=True, cache=cache_key is not None)


@register_funcify_and_cache_key(EnvelopeGuarded)
def funcify_envelope_guarded(op, node=None, **kwargs):
    """The constants inside the box, else the inner graph (`EnvelopeGuarded`).

    The inner graph is not part of the function (`settings.SLOW_PATH`): the function calls it
    through `python_callbacks` by name, and it is compiled when a call first leaves the
    box. Outside the box every call pays a Python call on top of it."""
    import numpy as np

    inner_fn, key = funcify_as_written(op, node, **kwargs)
    slow_path = settings.SLOW_PATH.value()
    slots = _slow_path_slots(op) if slow_path == "on_demand" else None
    n, k = op.n_inner, op.n_checks
    leaves = [f"i{j}" for j in range(n)]
    checks = [f"c{j}" for j in range(k)]
    shape = [f"s{j}" for j in range(sum(op.ndims))]
    test = " and ".join(f"_inside({c}, {b!r})" for c, b in zip(checks, op.bounds, strict=True)) or "True"
    fills, empties, pos = [], [], 0
    for j, (nd, value) in enumerate(zip(op.ndims, op.outcomes, strict=True)):
        if nd:
            dims = "".join(f"{s}[()], " for s in shape[pos : pos + nd])
            fills.append(f"np.full(({dims}), {value})")
            empties.append(f"np.empty(({dims}), dt{j})")
        else:
            fills.append(f"np.full((1,), {value}).reshape(())")
            empties.append(f"np.empty((1,), dt{j}).reshape(())")
        pos += nd

    def returned(values):
        return values[0] if len(values) == 1 else "(" + ", ".join(values) + ",)"

    env = {"np": np, "_inside": _inside, "inner_fn": inner_fn, "inf": float("inf")}
    head = f"def envelope_guarded({', '.join([*leaves, *checks, *shape])}):\n    if {test}:\n        return {returned(fills)}\n"
    if slots is None:
        src = head + f"    return inner_fn({', '.join(leaves)})\n"
    else:
        symbol = python_callbacks.symbol_for(None if key is None else (key, "slow_path"))
        python_callbacks.register(symbol, _slow_path(inner_fn, key), slots, len(op.ndims))
        SLOW_PATH_SYMBOLS[node if node is not None else op] = symbol
        outs = [f"o{j}" for j in range(len(op.ndims))]
        env |= {f"dt{j}": np.dtype(o.type.dtype).type for j, o in enumerate(op.fgraph.outputs)}
        env["call_python"] = python_callbacks.call_python
        src = (
            head
            + "".join(f"    {o} = {e}\n" for o, e in zip(outs, empties, strict=True))
            + f"    if call_python({symbol!r}, ({', '.join([*leaves, *outs])},)) != 0:\n"
            + f"        raise RuntimeError({SLOW_PATH_FAILED!r})\n"
            + f"    return {returned(outs)}\n"
        )
    fn = compile_numba_function_src(src, "envelope_guarded", env)
    guarded = numba_njit(fn)
    if key is None:
        return guarded, None
    return guarded, cache_key("envelope_guarded", repr((op.bounds, op.outcomes, n, k)), slow_path, key)
