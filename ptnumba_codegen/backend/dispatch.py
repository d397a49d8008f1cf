"""numba dispatch for the policy-carrying ops: build the kernel, or fall back per node."""

from __future__ import annotations

import logging
import weakref

from pytensor import config
from pytensor.link.numba.dispatch.basic import (
    numba_funcify_and_cache_key,
    register_funcify_and_cache_key,
)

from ptnumba_codegen.flags import PYTENSOR_FLAGS
from ptnumba_codegen.backend.plans import KernelPlan, plan_node
from ptnumba_codegen.lowering.kernel import build_kernel, build_scalar_kernel, compiled_or_stock
from ptnumba_codegen.lowering.base import Unsupported
from ptnumba_codegen.backend.node_keys import cache_key
from ptnumba_codegen.backend.ops import on_policy_class
from ptnumba_codegen.backend.scalar_scan import funcify_scalar_scan
from ptnumba_codegen.backend.stock_loop_ir import implementation_in_ir
from pytensor.scan.op import Scan

log = logging.getLogger("ptnumba_codegen")


# node -> why its kernel fell back when numba compiled it (kernel.guarded)
_COMPILE_FAILURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# node -> how numba compiled its kernel's entry, per signature (kernel.EntryChoice)
_ENTRY_CHOICES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def fallback_reason(node) -> str | None:
    """Why the generator leaves ``node`` to the stock implementation (None if it does not).

    A node the generator plans but fails to compile falls back when numba compiles the
    function (its first call); its reason is known from then on."""
    if isinstance(node.op, Scan):
        from ptnumba_codegen.backend.scalar_scan import scan_problem

        return scan_problem(node)
    try:
        plan_node(node)
    except Unsupported as err:
        return str(err)
    return _COMPILE_FAILURES.get(node)


def entry_choices(node) -> tuple:
    """How numba compiled ``node``'s kernel entry, one `kernel.EntryChoice` per signature
    (empty before the function was compiled, or when numba's cache had it)."""
    return tuple(_ENTRY_CHOICES.get(node, ()))


def record_entries(node):
    """``on_entry(choice)`` for `build_kernel`: kept for `entry_choices`."""

    def on_entry(choice) -> None:
        _ENTRY_CHOICES.setdefault(node, []).append(choice)

    return on_entry


def compile_fallback(op, node, **kwargs):
    """``fallback(reason)`` for `build_kernel`: record, log, return the stock kernel."""

    def fallback(reason: str):
        _COMPILE_FAILURES[node] = reason
        fn, _key = stock_fallback(op, node, reason, **kwargs)
        return fn

    return fallback


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
    fn = compiled_or_stock(fn, compile_fallback(op, node, **kwargs), "policy_stock_loop", len(node.inputs),
                           impl_in_ir=implementation_in_ir(fn, plan.stock_op, node, fast))
    return fn, None if key is None else cache_key("stock-loop", fast, op.policy.digest, key)


def parts_kernel(op, node, plan: KernelPlan, **kwargs):
    """The inner graph of an indexed kernel (`indexed_parts`), compiled as one function:
    its policy nodes by the generator, gather and scatter-add by the stock funcify with
    the numba fastmath the stock loop would give them."""
    fast = set(op.policy.classes["reduction"].flags) >= PYTENSOR_FLAGS
    kwargs = {k: v for k, v in kwargs.items() if k != "storage_map"}  # the outer graph's
    with config.change_flags(numba__fastmath=fast):
        fn, key = numba_funcify_and_cache_key(plan.stock_op, squeeze_output=True, fgraph_name="policy_parts", **kwargs)
    fn = compiled_or_stock(fn, compile_fallback(op, node, **kwargs), "policy_parts", len(node.inputs))
    return fn, None if key is None else cache_key("parts", fast, op.policy.digest, key)


def _scalar_kernel(node, plan: KernelPlan, name: str, fallback):
    return build_scalar_kernel(plan.body, perform_impl(node), name=name, fallback=fallback)


def _loop_kernel(node, plan: KernelPlan, name: str, fallback):
    return build_kernel(
        plan.spec,
        plan.body,
        perform_impl(node),
        plan.finish,
        name=name,
        parallel=node.op.policy.parallel,
        fallback=fallback,
        yields_to=node.op.yields_to,
        on_entry=record_entries(node),
    )


# the generator's own kernels: KernelPlan.kind -> its builder
BUILDERS = {"scalar": _scalar_kernel, "loop": _loop_kernel}


def build(node, plan: KernelPlan, **kwargs):
    name = f"policy_{type(node.op).stock_class.__name__.lower()}"
    fallback = compile_fallback(node.op, node, **kwargs)
    return BUILDERS[plan.kind](node, plan, name, fallback)


def kernel_key(op, node, plan: KernelPlan) -> str | None:
    """The cache key of the kernel the generator builds for ``plan`` ("loop", "scalar")."""
    stock_keys = plan.body.stock_keys
    if any(k is None for k, _fast in stock_keys):
        return None  # a stock function inside is uncacheable, so is the kernel (as in stock)
    return cache_key(
        plan.kind,
        stock_keys,
        op.policy.digest,
        plan.spec,
        plan.body.program.fingerprint(),
        plan.body.flags,
        plan.body.classes,
        plan.body.lazy_key,
        plan.body.once,
        plan.body.isa,
        plan.finish,
        tuple(str(o.type) for o in node.outputs),
        op.yields_to,
    )


def own_kernel(op, node, plan: KernelPlan, **kwargs):
    """A kernel the generator builds ("loop", "scalar"), with its cache key."""
    return build(node, plan, **kwargs), kernel_key(op, node, plan)


# KernelPlan.kind -> (op, node, plan, **kwargs) -> (function, cache key)
FUNCIFY = {
    "loop": own_kernel,
    "scalar": own_kernel,
    "stock_loop": stock_loop,
    "parts": parts_kernel,
}


def funcify_policy_node(op, node, **kwargs):
    if isinstance(op, Scan):  # only Scans `scalar_scan.scan_problem` accepts carry a policy
        return funcify_scalar_scan(op, node, **kwargs)
    try:
        plan = plan_node(node)
    except Unsupported as err:
        return stock_fallback(op, node, str(err), **kwargs)
    return FUNCIFY[plan.kind](op, node, plan, **kwargs)


def register_policy_class(cls):
    register_funcify_and_cache_key(cls)(funcify_policy_node)


on_policy_class(register_policy_class)
