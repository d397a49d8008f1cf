"""The op the rewrite substitutes for ``Elemwise``: same math, same inplace pattern,
plus the policy (and, for whole-graph sensitivity, which outputs feed decisions
elsewhere). A subclass, so every ``isinstance(op, Elemwise)`` check keeps working."""

from __future__ import annotations

from pytensor.tensor.elemwise import Elemwise

from ptnumba_codegen.policy import Policy


class PolicyElemwise(Elemwise):
    __props__ = ("scalar_op", "inplace_pattern", "policy", "sensitive_outputs")

    def __init__(
        self,
        scalar_op,
        inplace_pattern=None,
        *,
        policy: Policy,
        sensitive_outputs=frozenset(),
        name=None,
        nfunc_spec=None,
    ):
        self.policy = policy
        self.sensitive_outputs = frozenset(sensitive_outputs)
        super().__init__(scalar_op, inplace_pattern, name=name, nfunc_spec=nfunc_spec)

    @classmethod
    def from_elemwise(cls, op: Elemwise, policy: Policy, sensitive_outputs=frozenset()):
        return cls(
            op.scalar_op,
            op.inplace_pattern,
            policy=policy,
            sensitive_outputs=sensitive_outputs,
            name=op.name,
            nfunc_spec=op.nfunc_spec,
        )

    def __eq__(self, other):
        return (
            super().__eq__(other)
            and self.policy == other.policy
            and self.sensitive_outputs == other.sensitive_outputs
        )

    def __hash__(self):
        return hash((super().__hash__(), self.policy.digest, self.sensitive_outputs))

    def __str__(self):
        # dprint output stays the stock one; explain() shows what the policy did.
        return Elemwise.__str__(self)
