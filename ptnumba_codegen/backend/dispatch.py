"""numba dispatch for the policy-carrying ops: build the kernel, or fall back per node."""

from __future__ import annotations

import weakref

from pytensor import config
from pytensor.link.numba.dispatch.basic import (
    numba_funcify_and_cache_key,
    register_funcify_and_cache_key,
)

from ptnumba_codegen.flags import PYTENSOR_FLAGS
from ptnumba_codegen.backend import fallbacks
from ptnumba_codegen.backend.fallbacks import compile_failure, compile_fallback, perform_impl
from ptnumba_codegen.backend.plans import KernelPlan, kernel_key, plan_node
from ptnumba_codegen.lowering.kernel import build_kernel, build_scalar_kernel, compiled_or_stock
from ptnumba_codegen.lowering.base import Unsupported
from ptnumba_codegen.lowering.node_keys import cache_key
from ptnumba_codegen.backend.ops import on_policy_class
from ptnumba_codegen.backend.scalar_scan import funcify_scalar_scan, scan_problem
from ptnumba_codegen.backend.stock_loop_ir import implementation_in_ir
from pytensor.scan.op import Scan


# node -> how numba compiled its kernel's entry, per signature (kernel.EntryChoice)
_ENTRY_CHOICES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def fallback_reason(node) -> str | None:
    """Why the generator leaves ``node`` to the stock implementation (None if it does not).

    A node the generator plans but fails to compile falls back when numba compiles the
    function (its first call); its reason is known from then on."""
    if isinstance(node.op, Scan):
        return scan_problem(node)
    try:
        plan_node(node)
    except Unsupported as err:
        return str(err)
    return compile_failure(node)


def entry_choices(node) -> tuple:
    """How numba compiled ``node``'s kernel entry, one `kernel.EntryChoice` per signature
    (empty before the function was compiled, or when numba's cache had it)."""
    return tuple(_ENTRY_CHOICES.get(node, ()))


def record_entries(node):
    """``on_entry(choice)`` for `build_kernel`: kept for `entry_choices`."""

    def on_entry(choice) -> None:
        _ENTRY_CHOICES.setdefault(node, []).append(choice)

    return on_entry










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
        return fallbacks.stock_fallback(op, node, str(err), **kwargs)
    return FUNCIFY[plan.kind](op, node, plan, **kwargs)


def register_policy_class(cls):
    register_funcify_and_cache_key(cls)(funcify_policy_node)


on_policy_class(register_policy_class)
