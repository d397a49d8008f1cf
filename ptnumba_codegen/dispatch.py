"""numba dispatch for the generator's ops: build the kernel, or fall back per node."""

from __future__ import annotations

import hashlib

from pytensor import config
from pytensor.link.numba.dispatch.basic import (
    numba_funcify_and_cache_key,
    register_funcify_and_cache_key,
)
from pytensor.tensor.elemwise import Elemwise

from ptnumba_codegen._version import GENERATOR_VERSION
from ptnumba_codegen.analysis import classify
from ptnumba_codegen.flags import PYTENSOR_FLAGS
from ptnumba_codegen.lowering.body import PlannedBody, Unsupported, plan_body
from ptnumba_codegen.lowering.kernel import build_elemwise_kernel
from ptnumba_codegen.lowering.loop import LoopSpec
from ptnumba_codegen.ops import PolicyElemwise
from ptnumba_codegen.program import Program, from_scalar_op


def node_program(node) -> Program:
    return from_scalar_op(
        node.op.scalar_op,
        [i.type.dtype for i in node.inputs],
        [o.type.dtype for o in node.outputs],
    )


def plan_node(node) -> tuple[LoopSpec, PlannedBody]:
    """Plan an elemwise node; raises Unsupported with the fallback reason."""
    op = node.op
    spec = LoopSpec(
        input_bc=tuple(i.type.broadcastable for i in node.inputs),
        output_bc=tuple(o.type.broadcastable for o in node.outputs),
        output_dtypes=tuple(o.type.dtype for o in node.outputs),
        inplace=tuple(sorted(op.inplace_pattern.items())),
    )
    planned = plan_body(node_program(node), op.policy, op.sensitive_outputs)
    return spec, planned


def fallback_reason(node) -> str | None:
    """Why the generator leaves ``node`` to the stock implementation (None if it does not)."""
    try:
        plan_node(node)
    except Unsupported as err:
        return str(err)
    return None


def cache_key(*parts) -> str:
    return hashlib.sha256(repr(("ptnumba_codegen", GENERATOR_VERSION, *parts)).encode()).hexdigest()


def _fallback_fastmath(node) -> bool:
    """Stock kernels only know all-or-nothing: fast only if the policy is fast everywhere here."""
    program = node_program(node)
    policy = node.op.policy
    classes = classify(program, node.op.sensitive_outputs)
    return all(
        set(policy.flags_for(k, i.op_name)) >= PYTENSOR_FLAGS
        for k, i in zip(classes, program.instrs, strict=True)
    )


def stock_fallback(op, node, reason: str, **kwargs):
    fast = _fallback_fastmath(node)
    with config.change_flags(numba__fastmath=fast):
        fn, key = numba_funcify_and_cache_key.dispatch(Elemwise)(op, node, **kwargs)
    if key is not None:
        key = cache_key("stock-fallback", fast, key)
    return fn, key


@register_funcify_and_cache_key(PolicyElemwise)
def numba_funcify_PolicyElemwise(op, node, **kwargs):
    try:
        spec, planned = plan_node(node)
    except Unsupported as err:
        return stock_fallback(op, node, str(err), **kwargs)
    kernel = build_elemwise_kernel(node, spec, planned)
    key = cache_key(
        "elemwise",
        op.policy.digest,
        spec,
        planned.program.fingerprint(),
        planned.flags,
    )
    return kernel, key
