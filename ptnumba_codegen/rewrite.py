"""The graph rewrite that hands every kernel node to the generator, and the modes."""

from __future__ import annotations

import logging

from pytensor.compile import optdb
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply
from pytensor.graph.rewriting.basic import GraphRewriter

from ptnumba_codegen.graph_analysis import program_sensitive_outputs, sensitive_variables
from ptnumba_codegen.kernels import planner_for
from ptnumba_codegen.ops import is_policy_op, with_policy
from ptnumba_codegen.policy import Policy, PolicyError, load_policy
from ptnumba_codegen.lowering.split_runtime import ensure_threading
from ptnumba_codegen.pools import pools_to_yield_to

log = logging.getLogger("ptnumba_codegen")

TAG = "policy_codegen"


class PolicyLoadError(PolicyError, AssertionError):
    """A policy that cannot be loaded when the rewrite runs. PyTensor's rewrite sequence
    prints and skips a rewrite that raises, and the function would silently compile
    stock; an AssertionError it re-raises, so the user gets this error instead."""

# After fusion (49), inplace (50.5) and the numba-specific fusions at 100: the last rewrite.
POSITION = 100.5


class PolicyCodegen(GraphRewriter):
    """Give every kernel node (Elemwise, FusedElemwise, ScalarizedElemwise, CAReduce,
    ScalarCAReduce, scalar ops on native scalars) a policy-carrying op.

    ``policy=None`` resolves the process default (``PTNUMBA_CODEGEN_POLICY`` or
    ``default``) each time it runs. The instance registered in ``optdb`` (tag
    ``policy_codegen``) is the process-wide switch's: `ptnumba_codegen.enable` sets its
    ``policy`` and `ptnumba_codegen.disable` resets it to None (see ``switch.py``).
    """

    def __init__(self, policy: str | Policy | None = None):
        super().__init__()
        self.policy = policy

    def add_requirements(self, fgraph):
        pass

    def apply(self, fgraph):
        try:
            policy = load_policy(self.policy)
        except PolicyError as err:
            raise PolicyLoadError(str(err)) from None
        sensitive = sensitive_variables(fgraph, policy)
        if policy.parallel.enabled:
            ensure_threading()  # starts the split runtime, which may share OpenBLAS's pool
        yields = pools_to_yield_to(fgraph) if policy.parallel.enabled else ()
        taken = []
        for node in fgraph.toposort():
            if is_policy_op(node.op) or planner_for(node.op) is None:
                continue
            new_op = with_policy(node.op, policy, program_sensitive_outputs(node, sensitive), yields)
            new_node = Apply(new_op, list(node.inputs), [o.type() for o in node.outputs])
            for old, new in zip(node.outputs, new_node.outputs, strict=True):
                new.name = old.name
            fgraph.replace_all_validate(
                list(zip(node.outputs, new_node.outputs, strict=True)), reason=TAG
            )
            taken.append(new_node)
        if taken and log.isEnabledFor(logging.INFO):
            log.info("%s", summarize(taken, policy))

    def __str__(self):
        return f"PolicyCodegen({self.policy!r})"



def summarize(nodes, policy) -> str:
    """'policy default: 7 kernels generated, 2 with libmvec calls, 1 fell back (...)'."""
    from ptnumba_codegen.kernels import plan_node
    from ptnumba_codegen.lowering.base import Unsupported

    vectorized, fallbacks = 0, []
    for node in nodes:
        try:
            vectorized += plan_node(node).body.uses_vector_math
        except Unsupported as err:
            fallbacks.append(f"{node.op}: {err}")
    text = (
        f"policy {policy.name}: {len(nodes) - len(fallbacks)} kernel(s) generated, "
        f"{vectorized} with libmvec calls, {len(fallbacks)} fell back to the stock kernel"
    )
    return text + (" (" + "; ".join(fallbacks) + ")" if fallbacks else "")


# Registered under its name only: the name is its sole tag (not fast_run, not numba) until
# ptnumba_codegen.enable() adds ``numba``. Its ``policy`` is the switch's (None when off).
REGISTERED = PolicyCodegen()
optdb.register(TAG, REGISTERED, position=POSITION)


def policy_mode(policy: str | Policy | None = None, optimizer: str = "fast_run") -> Mode:
    """A numba Mode whose kernels are generated under ``policy``.

    ``policy`` is a preset name (``default``, ``strict``, ``fast``), a path to a TOML file,
    a loaded `Policy`, or ``None`` for the process default (the policy of
    `ptnumba_codegen.enable` while it is on, else ``PTNUMBA_CODEGEN_POLICY``, else
    ``default``). The policy is loaded (and validated) now, before anything is compiled.

    The mode excludes the registered ``policy_codegen`` rewrite, so its own policy wins
    over the process-wide switch (`ptnumba_codegen.enable`).
    """
    resolved = load_policy(REGISTERED.policy if policy is None else policy)
    mode = Mode(linker="numba", optimizer=optimizer).excluding(TAG)
    return mode.register((PolicyCodegen(resolved), POSITION))
