"""The ``policy_kernels`` pass (`PolicyCodegen`): every kernel node gets a policy-carrying op.

It is the last of the rewrites selected by the ``policy_codegen`` tag (registered, and put
into modes, by `ptnumba_codegen.modes`, whose docstring lists them with their positions).
"""

from __future__ import annotations

import logging

from pytensor.graph.basic import Apply
from pytensor.graph.rewriting.basic import GraphRewriter

from ptnumba_codegen.runtime import allocator, boxing, collector, machine_code
from ptnumba_codegen.backend import node_wrappers
from ptnumba_codegen.passes import pass_errors
from ptnumba_codegen.passes.constant_writes import fold_constant_writes
from ptnumba_codegen.analysis.whole_graph import (
    class_only_variables,
    program_sensitive_outputs,
    sensitive_variables,
    with_class_only,
)
from ptnumba_codegen.analysis.graph_ranges import graph_facts
from ptnumba_codegen.analysis.inferred_shapes import unknown_length_bounds
from ptnumba_codegen.backend.plans import plan_node, planner_for
from ptnumba_codegen.compact.table import describe_rows_off
from ptnumba_codegen.lowering.base import Unsupported
from ptnumba_codegen.backend.scalar_scan import scan_problem
from pytensor.scan.op import Scan
from ptnumba_codegen.backend.ops import is_policy_op, with_policy
from ptnumba_codegen.policy import Policy, PolicyError, PolicyLoadError, load_policy
from ptnumba_codegen.lowering.chunks import may_chunk
from ptnumba_codegen.runtime.threads import ensure_threading
from ptnumba_codegen.runtime.pools import pools_to_yield_to

log = logging.getLogger("ptnumba_codegen")

TAG = "policy_codegen"  # the tag selecting the rewrites of `ptnumba_codegen.modes`
# After fusion (49), inplace (50.5) and the numba-specific fusions at 100: the last rewrite.
POSITION = 100.5


class PolicyCodegen(GraphRewriter):
    """Give every kernel node (Elemwise, FusedElemwise, ScalarizedElemwise, CAReduce,
    ScalarCAReduce, scalar ops on native scalars) a policy-carrying op.

    ``policy=None`` resolves the process default (``PTNUMBA_CODEGEN_POLICY`` or
    ``default``, decisions as written) each time it runs. ``kinds`` (op classes) limits it to those nodes;
    ``outer_pools`` names thread pools (`pools.POOLS`) used besides the graph's own (an
    as-written copy's inner graph: those of the function it is part of). The
    instance registered in ``optdb`` (`modes.KERNELS`) is the process-wide switch's:
    `ptnumba_codegen.enable` sets its ``policy`` and `ptnumba_codegen.disable` resets it to
    None (see ``switch.py``).
    """

    def __init__(
        self,
        policy: str | Policy | None = None,
        kinds: tuple[type, ...] | None = None,
        outer_pools: tuple[str, ...] = (),
    ):
        super().__init__()
        self.policy = policy
        self.kinds = kinds
        self.outer_pools = tuple(outer_pools)

    def add_requirements(self, fgraph):
        pass

    def apply(self, fgraph):
        try:
            policy = load_policy(self.policy)
        except PolicyError as err:
            raise PolicyLoadError(str(err)) from None
        configure_process()
        node_wrappers.mark_policy_graph(fgraph)
        try:
            fold_constant_writes(fgraph, TAG)  # a one-hot of observed labels: computed once, same bits
        except Exception as err:  # noqa: BLE001  (see pass_errors: recorded, warned)
            pass_errors.record(fgraph, "constant-write folding", err)
        kernels = [
            node
            for node in fgraph.toposort()
            if not is_policy_op(node.op)
            and planner_for(node.op) is not None
            and (self.kinds is None or isinstance(node.op, self.kinds))
        ]
        try:
            facts = graph_facts(fgraph)
            sensitive = sensitive_variables(fgraph, policy, facts)
            class_only = class_only_variables(fgraph, sensitive, policy, facts)
        except Exception as err:  # noqa: BLE001  every kernel strict instead of stock fast-math
            graph_error = pass_errors.record(fgraph, "graph analysis", err)
            facts = sensitive = None
        try:  # lengths the types leave unknown and shape inference knows (for splitting only)
            bounds = unknown_length_bounds(fgraph, kernels) if policy.parallel.enabled else {}
        except Exception as err:  # noqa: BLE001  the types alone, as without it
            pass_errors.record(fgraph, "shape inference", err)
            bounds = {}
        if any(may_chunk(node, policy.parallel, bounds.get(node)) for node in kernels):
            ensure_threading()  # starts the thread runtime, which may share OpenBLAS's pool
        try:
            yields = pools_to_yield_to(fgraph, self.outer_pools) if policy.parallel.enabled else ()
        except Exception as err:  # noqa: BLE001
            pass_errors.record(fgraph, "thread pools", err)
            yields = ()
        taken = []
        for node in kernels:
            error = None
            if sensitive is None:
                needs, known, error = all_outputs_exact(node), (), graph_error
            else:
                try:
                    needs = with_class_only(node, program_sensitive_outputs(node, sensitive, facts), class_only)
                    known = facts.input_facts(node)
                except Exception as err:  # noqa: BLE001  this kernel strict
                    needs, known = all_outputs_exact(node), ()
                    error = pass_errors.record(fgraph, "kernel analysis", err, node)
            new_op = with_policy(node.op, policy, needs, yields, known, size_bound=bounds.get(node))
            new_node = Apply(new_op, list(node.inputs), [o.type() for o in node.outputs])
            for old, new in zip(node.outputs, new_node.outputs, strict=True):
                new.name = old.name
            fgraph.replace_all_validate(
                list(zip(node.outputs, new_node.outputs, strict=True)), reason=TAG
            )
            if error is not None:
                pass_errors.mark_node(new_node, error)
            taken.append(new_node)
        if self.kinds is None:
            taken.extend(scalar_scans(fgraph, policy))
        if taken and log.isEnabledFor(logging.INFO):
            log.info("%s", summarize(taken, policy))

    def __str__(self):
        return f"PolicyCodegen({self.policy!r})"


def configure_process() -> None:
    """What a process compiling policy kernels sets up once (each call after the first is free)."""
    allocator.configure()  # freed intermediates kept for the next call
    boxing.configure()  # results boxed without unpickling per call
    machine_code.configure()  # no machine code for link-only libraries
    collector.configure()  # no full garbage collections inside numba's compiles
    node_wrappers.configure()  # policy graphs call their node functions directly


def prepare_process(fgraph) -> None:
    """What the pass sets up in the process for ``fgraph``, which holds its result already
    (a graph stored by `passes.rewritten_graphs`): the same set-up, then the thread runtime
    if a kernel may run its loop on threads (the policy and size bound each op carries)."""
    configure_process()
    node_wrappers.mark_policy_graph(fgraph)
    if any(is_policy_op(node.op) and planner_for(node.op) is not None
           and may_chunk(node, node.op.policy.parallel, getattr(node.op, "size_bound", None))
           for node in fgraph.apply_nodes):
        ensure_threading()


def all_outputs_exact(node) -> frozenset:
    """Every output of ``node`` compared downstream: what a kernel gets when the analysis
    that would say otherwise raised (strict, never stock fast-math)."""
    return frozenset(range(len(node.outputs)))


def scalar_scans(fgraph, policy) -> list:
    """Give every Scan whose inner graph is 0-d policy kernels (`scalar_scan.scan_problem`;
    the inner graph was rewritten, with this pass, before the outer graph gets here) a
    policy-carrying op: it compiles as one loop over native scalars."""
    taken = []
    for node in fgraph.toposort():
        if not isinstance(node.op, Scan) or is_policy_op(node.op) or scan_problem(node) is not None:
            continue
        new_node = Apply(with_policy(node.op, policy), list(node.inputs), [o.type() for o in node.outputs])
        for old, new in zip(node.outputs, new_node.outputs, strict=True):
            new.name = old.name
        fgraph.replace_all_validate(list(zip(node.outputs, new_node.outputs, strict=True)), reason=TAG)
        taken.append(new_node)
    return taken



def summarize(nodes, policy) -> str:
    """'policy default: 7 kernels generated, 2 with libmvec calls, 1 fell back (...)', and the
    compact ops off in this process, with why (`compact.table.describe_rows_off`)."""
    vectorized, fallbacks = 0, []
    for node in nodes:
        if isinstance(node.op, Scan):
            continue  # its inner kernels were counted when its inner graph was rewritten
        try:
            vectorized += plan_node(node).body.uses_vector_math
        except Unsupported as err:
            fallbacks.append(f"{node.op}: {err}")
    scans = sum(isinstance(n.op, Scan) for n in nodes)
    text = (
        f"policy {policy.name}: {len(nodes) - scans - len(fallbacks)} kernel(s) generated, "
        f"{vectorized} with libmvec calls, {len(fallbacks)} fell back to the stock kernel"
    )
    text += f", {scans} Scan(s) compiled as scalar loops" if scans else ""
    text += " (" + "; ".join(fallbacks) + ")" if fallbacks else ""
    rows_off = describe_rows_off()
    return f"{text}; {rows_off}" if rows_off else text
