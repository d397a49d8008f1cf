"""What a policy node compiles when the generator leaves it: the stock kernel, with the
numba fast-math setting the policy allows it (`stock_fallback`), and why (`compile_failure`:
a node the generator planned but failed to compile, known once numba compiled it); the
node's own ``perform`` for a kernel run without JIT (`perform_impl`).

The dispatch of policy nodes (`dispatch`) and the scalar loop of a Scan (`scalar_scan`)
both fall back through here.
"""

from __future__ import annotations

import logging
import weakref

from pytensor import config
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

from ptnumba_codegen.flags import PYTENSOR_FLAGS
from ptnumba_codegen.lowering.node_keys import cache_key

log = logging.getLogger("ptnumba_codegen")

# node -> why its kernel fell back when numba compiled it (kernel.guarded)
_COMPILE_FAILURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compile_failure(node) -> str | None:
    """Why ``node``'s kernel fell back when numba compiled it (None: it did not, or not yet)."""
    return _COMPILE_FAILURES.get(node)


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


def fallback_fastmath(op) -> bool:
    """Stock kernels know all-or-nothing: fast only if every class of the policy is."""
    return all(set(rule.flags) >= PYTENSOR_FLAGS for rule in op.policy.classes.values())


def stock_fallback(op, node, reason: str, **kwargs):
    fast = fallback_fastmath(op)
    log.info("%s falls back to the stock kernel (fastmath=%s): %s", op, fast, reason)
    with config.change_flags(numba__fastmath=fast):
        fn, key = numba_funcify_and_cache_key.dispatch(op.stock_class)(op, node, **kwargs)
    if key is not None:
        key = cache_key("stock-fallback", fast, key)
    return fn, key


__all__ = ["compile_failure", "compile_fallback", "fallback_fastmath", "perform_impl", "stock_fallback"]
