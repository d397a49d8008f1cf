"""Policy-carrying versions of the kernel ops.

For every op class the generator takes over (Elemwise, FusedElemwise, CAReduce and its
Sum/Max/... subclasses, scalar ops applied to native scalars, ...) `policy_class` makes a
subclass that also carries the policy and which outputs feed decisions in other nodes.
Subclasses keep every ``isinstance`` check, ``str`` and ``destroy_map`` of the original.
"""

from __future__ import annotations

import copy
from functools import cache

from ptnumba_codegen.analysis.classify import needs_items, output_needs
from ptnumba_codegen.policy import Policy


class PolicyMixin:
    """Marks an op as carrying ``policy``, ``sensitive_outputs``, ``input_facts``,
    ``yields_to`` (the other thread pools of its function, see `pools`: its loops stay
    on one thread), ``loop_core`` (a scalar op inside a stock loop) and ``size_bound``
    (the elements of its iteration space by the graph's shape inference, where its types
    leave a length unknown: `analysis.inferred_shapes`)."""

    __slots__ = ()


@cache
def policy_class(base: type) -> type:
    """The policy-carrying subclass of ``base`` (created once, dispatch registered once).

    The base comes first in the MRO so instances keep its layout (ops are re-classed in
    place by `with_policy`); equality and hashing add the policy explicitly.
    """

    def __eq__(self, other):
        return (
            base.__eq__(self, other) is True
            and isinstance(other, PolicyMixin)
            and self.policy == other.policy
            and self.sensitive_outputs == other.sensitive_outputs
            and self.yields_to == other.yields_to
            and self.input_facts == other.input_facts
            and self.loop_core == other.loop_core
            and self.size_bound == other.size_bound
        )

    def __hash__(self):
        return hash(
            (base.__hash__(self), self.policy.digest, self.sensitive_outputs, self.yields_to, self.input_facts, self.loop_core,
             self.size_bound)
        )

    def __reduce__(self):
        # the class is made at runtime, so pickle the stock op and re-apply the policy
        return (
            with_policy,
            (stock_op(self), self.policy, self.sensitive_outputs, self.yields_to, self.input_facts, self.loop_core,
             self.size_bound),
        )

    namespace = {
        "stock_class": base,
        "__module__": __name__,
        "__eq__": __eq__,
        "__hash__": __hash__,
        "__reduce__": __reduce__,
        "__reduce_ex__": lambda self, protocol: __reduce__(self),
    }
    # Same __name__ as the base: many ops print their class name (e.g. Max{axis=1}), so
    # dprint output stays the stock one. The module tells them apart.
    cls = type(base.__name__, (base, PolicyMixin), namespace)
    cls.__qualname__ = f"policy_class({base.__qualname__})"
    _CLASSES.append(cls)
    for hook in CLASS_HOOKS:
        hook(cls)
    return cls


# Called with every policy class made (`dispatch` registers its numba lowering here, so this
# module does not import the dispatch, which imports the planners, which import this).
CLASS_HOOKS: list = []
_CLASSES: list[type] = []


def on_policy_class(hook) -> None:
    """Call ``hook(cls)`` for every policy class, made so far and from now on."""
    CLASS_HOOKS.append(hook)
    for cls in _CLASSES:
        hook(cls)


_POLICY_ATTRS = ("policy", "sensitive_outputs", "yields_to", "input_facts", "loop_core", "size_bound")


def with_policy(op, policy: Policy, sensitive_outputs=frozenset(), yields_to=(), input_facts=(), loop_core=False,
                size_bound: int | None = None):
    """A copy of ``op`` of class ``policy_class(type(op))`` carrying ``policy`` (and what
    the analysis found: requirements on its outputs, intervals and relations of its
    inputs, see `graph_ranges`). ``loop_core``: a scalar op that is the core of a stock
    loop (runs per element), not a node of its own (runs once per call). ``size_bound``:
    the elements its loop iterates over by the graph's shape inference (None: unknown)."""
    new = copy.copy(stock_op(op))
    new.__class__ = policy_class(type(op))
    new.policy = policy
    new.sensitive_outputs = needs_items(output_needs(sensitive_outputs))
    new.yields_to = tuple(yields_to)
    new.input_facts = tuple(input_facts)
    new.loop_core = bool(loop_core)
    new.size_bound = None if size_bound is None else int(size_bound)
    return new


def stock_op(op):
    """The op without its policy: an instance of the stock class with the same state."""
    if not isinstance(op, PolicyMixin):
        return op
    plain = object.__new__(type(op).stock_class)
    plain.__dict__.update({k: v for k, v in op.__dict__.items() if k not in _POLICY_ATTRS})
    return plain


def is_policy_op(op) -> bool:
    return isinstance(op, PolicyMixin)

