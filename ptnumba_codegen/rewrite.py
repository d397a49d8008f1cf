"""The graph rewrite that hands every elemwise node to the generator, and the modes."""

from __future__ import annotations

from pytensor.compile import optdb
from pytensor.compile.mode import Mode
from pytensor.graph.basic import Apply
from pytensor.graph.rewriting.basic import GraphRewriter
from pytensor.tensor.elemwise import Elemwise

from ptnumba_codegen.ops import PolicyElemwise
from ptnumba_codegen.policy import Policy, load_policy

TAG = "policy_codegen"
# After fusion (49), inplace (50.5) and the numba-specific fusions at 100: the last rewrite.
POSITION = 100.5


class PolicyCodegen(GraphRewriter):
    """Replace every ``Elemwise`` by a `PolicyElemwise` carrying the policy.

    ``policy=None`` resolves the process default (``PTNUMBA_CODEGEN_POLICY`` or
    ``default``) each time it runs.
    """

    def __init__(self, policy: str | Policy | None = None):
        super().__init__()
        self.policy = policy

    def add_requirements(self, fgraph):
        pass

    def apply(self, fgraph):
        policy = load_policy(self.policy)
        for node in fgraph.toposort():
            if type(node.op) is not Elemwise:
                continue
            new_op = PolicyElemwise.from_elemwise(node.op, policy)
            new_node = Apply(new_op, list(node.inputs), [o.type() for o in node.outputs])
            for old, new in zip(node.outputs, new_node.outputs, strict=True):
                new.name = old.name
            fgraph.replace_all_validate(
                list(zip(node.outputs, new_node.outputs, strict=True)), reason=TAG
            )

    def __str__(self):
        return f"PolicyCodegen({self.policy!r})"


# Registered under its name only: the name is its sole tag (not fast_run, not numba).
optdb.register(TAG, PolicyCodegen(), position=POSITION)


def policy_mode(policy: str | Policy | None = None, optimizer: str = "fast_run") -> Mode:
    """A numba Mode whose elemwise kernels are generated under ``policy``.

    ``policy`` is a preset name (``default``, ``strict``, ``fast``), a path to a TOML file,
    a loaded `Policy`, or ``None`` for the process default. The policy is loaded (and
    validated) now, before anything is compiled.
    """
    resolved = load_policy(policy)
    return Mode(linker="numba", optimizer=optimizer).register((PolicyCodegen(resolved), POSITION))
