"""The graph rewrites of a policy, their registration, and the modes.

Three rewrites, all selected by the ``policy_codegen`` tag:

| name | position | job |
|---|---|---|
| ``policy_as_written`` | -0.005 (first) | `AsWrittenPass`: freezes decisions as written when the policy asks for it (`ptnumba_codegen.as_written`) |
| ``policy_as_written_inline`` | 48.95 | `InlineAsWritten`: puts elementwise frozen copies back, once no rewrite changes values any more |
| ``policy_kernels`` | 100.5 (last) | `PolicyCodegen`: hands every kernel node to the generator |
"""

from __future__ import annotations

import logging

from pytensor.compile import optdb
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply
from pytensor.graph.rewriting.basic import GraphRewriter

from ptnumba_codegen.as_written import INLINE_POSITION, AsWrittenPass, InlineAsWritten
from ptnumba_codegen.as_written import POSITION as AS_WRITTEN_POSITION
from ptnumba_codegen.graph_analysis import program_sensitive_outputs, sensitive_variables
from ptnumba_codegen.kernels import planner_for
from ptnumba_codegen.ops import is_policy_op, with_policy
from ptnumba_codegen.policy import Policy, load_policy

log = logging.getLogger("ptnumba_codegen")

TAG = "policy_codegen"  # the tag selecting both rewrites
KERNELS_NAME = "policy_kernels"
AS_WRITTEN_NAME = "policy_as_written"
INLINE_NAME = "policy_as_written_inline"
# After fusion (49), inplace (50.5) and the numba-specific fusions at 100: the last rewrite.
POSITION = 100.5


class PolicyCodegen(GraphRewriter):
    """Give every kernel node (Elemwise, FusedElemwise, ScalarizedElemwise, CAReduce,
    ScalarCAReduce, scalar ops on native scalars) a policy-carrying op.

    ``policy=None`` resolves the process default (``PTNUMBA_CODEGEN_POLICY`` or
    ``default``) each time it runs. ``kinds`` (op classes) limits it to those nodes.
    """

    def __init__(self, policy: str | Policy | None = None, kinds: tuple[type, ...] | None = None):
        super().__init__()
        self.policy = policy
        self.kinds = kinds

    def add_requirements(self, fgraph):
        pass

    def apply(self, fgraph):
        policy = load_policy(self.policy)
        sensitive = sensitive_variables(fgraph)
        taken = []
        for node in fgraph.toposort():
            if is_policy_op(node.op) or planner_for(node.op) is None:
                continue
            if self.kinds is not None and not isinstance(node.op, self.kinds):
                continue
            new_op = with_policy(node.op, policy, program_sensitive_outputs(node, sensitive))
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


# Registered under the policy_codegen tag only (not fast_run, not numba).
optdb.register(AS_WRITTEN_NAME, AsWrittenPass(), TAG, position=AS_WRITTEN_POSITION)
optdb.register(INLINE_NAME, InlineAsWritten(), TAG, position=INLINE_POSITION)
optdb.register(KERNELS_NAME, PolicyCodegen(), TAG, position=POSITION)
REGISTERED = (AS_WRITTEN_NAME, INLINE_NAME, KERNELS_NAME)


def policy_mode(policy: str | Policy | None = None, optimizer: str = "fast_run") -> Mode:
    """A numba Mode whose kernels are generated under ``policy``.

    ``policy`` is a preset name (``default``, ``strict``, ``fast``, ``as_written``), a path
    to a TOML file, a loaded `Policy`, or ``None`` for the process default. The policy is loaded (and
    validated) now, before anything is compiled.
    """
    resolved = load_policy(policy)
    return Mode(linker="numba", optimizer=optimizer).register(
        (AsWrittenPass(resolved), AS_WRITTEN_POSITION),
        (InlineAsWritten(), INLINE_POSITION),
        (PolicyCodegen(resolved), POSITION),
    )
