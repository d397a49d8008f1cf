"""numba dispatch for the policy-carrying ops: build the kernel, or fall back per node."""

from __future__ import annotations

import hashlib
import logging

from pytensor import config
from pytensor.link.numba.dispatch.basic import (
    numba_funcify_and_cache_key,
    register_funcify_and_cache_key,
)

from ptnumba_codegen._version import GENERATOR_DIGEST, GENERATOR_VERSION
from ptnumba_codegen.flags import PYTENSOR_FLAGS
from ptnumba_codegen.kernels import KernelPlan, plan_node
from ptnumba_codegen.lowering.kernel import build_kernel, build_scalar_kernel
from ptnumba_codegen.lowering.base import Unsupported
from ptnumba_codegen.ops import on_policy_class

log = logging.getLogger("ptnumba_codegen")


def fallback_reason(node) -> str | None:
    """Why the generator leaves ``node`` to the stock implementation (None if it does not)."""
    try:
        plan_node(node)
    except Unsupported as err:
        return str(err)
    return None


def cache_key(*parts) -> str:
    return hashlib.sha256(
        repr(("ptnumba_codegen", GENERATOR_VERSION, GENERATOR_DIGEST, *parts)).encode()
    ).hexdigest()


def perform_impl(node):
    """The node's own ``perform``: what the kernel does when run without JIT."""
    n_out = len(node.outputs)

    def run(*inputs):
        storage = [[None] for _ in range(n_out)]
        node.op.perform(node, list(inputs), storage)
        return storage[0][0] if n_out == 1 else tuple(s[0] for s in storage)

    return run


def _fallback_fastmath(op) -> bool:
    """Stock kernels know all-or-nothing: fast only if every class of the policy is."""
    return all(set(rule.flags) >= PYTENSOR_FLAGS for rule in op.policy.classes.values())


def stock_fallback(op, node, reason: str, **kwargs):
    fast = _fallback_fastmath(op)
    log.info("%s falls back to the stock kernel (fastmath=%s): %s", op, fast, reason)
    with config.change_flags(numba__fastmath=fast):
        fn, key = numba_funcify_and_cache_key.dispatch(op.stock_class)(op, node, **kwargs)
    if key is not None:
        key = cache_key("stock-fallback", fast, key)
    return fn, key


def stock_loop(op, node, plan: KernelPlan, **kwargs):
    """The stock loop of ``plan.stock_op`` (its scalar core already carries the policy)."""
    fast = set(op.policy.classes["reduction"].flags) >= PYTENSOR_FLAGS
    with config.change_flags(numba__fastmath=fast):
        fn, key = numba_funcify_and_cache_key.dispatch(op.stock_class)(plan.stock_op, node, **kwargs)
    return fn, None if key is None else cache_key("stock-loop", fast, op.policy.digest, key)


def build(node, plan: KernelPlan):
    name = f"policy_{type(node.op).stock_class.__name__.lower()}"
    if plan.kind == "scalar":
        return build_scalar_kernel(plan.body, perform_impl(node), name=name)
    return build_kernel(
        plan.spec,
        plan.body,
        perform_impl(node),
        plan.finish,
        name=name,
        parallel=node.op.policy.parallel,
        yields_to=node.op.yields_to,
    )


def funcify_policy_node(op, node, **kwargs):
    try:
        plan = plan_node(node)
    except Unsupported as err:
        return stock_fallback(op, node, str(err), **kwargs)
    if plan.kind == "stock_loop":
        return stock_loop(op, node, plan, **kwargs)
    stock_keys = plan.body.stock_keys
    if any(k is None for k, _fast in stock_keys):
        key = None  # a stock function inside is uncacheable, so is the kernel (as in stock)
        return build(node, plan), key
    key = cache_key(
        plan.kind,
        stock_keys,
        op.policy.digest,
        plan.spec,
        plan.body.program.fingerprint(),
        plan.body.flags,
        plan.finish,
        tuple(str(o.type) for o in node.outputs),
        op.yields_to,
    )
    return build(node, plan), key


def register_policy_class(cls):
    register_funcify_and_cache_key(cls)(funcify_policy_node)


on_policy_class(register_policy_class)
