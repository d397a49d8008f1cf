"""Plan the kernel of each node type the generator owns.

One planner per node type, in a table (`PLANNERS`): each turns an apply node into a
`KernelPlan` (loop spec, planned scalar body, how to finish each output). Planning is
Python only; it raises `Unsupported` (the node then falls back to the stock backend).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np
from pytensor.scalar.basic import ScalarOp, ScalarType
from pytensor.tensor.elemwise import CAReduce, Elemwise
from pytensor.tensor.rewriting.fused_elemwise import FusedElemwise
from pytensor.tensor.rewriting.scalarize import ScalarCAReduce, ScalarizedElemwise

from ptnumba_codegen.analysis.classify import output_needs
from ptnumba_codegen.flags import COMPARISON_SENSITIVE, REDUCTION
from ptnumba_codegen.analysis.whole_graph import DECIDING_REDUCERS
from ptnumba_codegen.backend.indexed_parts import indexed, lowered_as_parts, parts_graph
from ptnumba_codegen.analysis.kernel_programs import inner_careduce, inner_elemwise, node_program
from ptnumba_codegen.lowering.body import PlannedBody, plan_body
from ptnumba_codegen.lowering.kernel import Finish
from ptnumba_codegen.lowering.loop import SCALAR_REDUCERS, LoopSpec, Reduce, row_loop_length, stock_order_slots
from ptnumba_codegen.lowering.visit_order import MAX_STOCK_LOOPS
from ptnumba_codegen.lowering.base import Unsupported, numba_type
from ptnumba_codegen.lowering.node_keys import cache_key
from ptnumba_codegen.backend.ops import stock_op, with_policy
from ptnumba_codegen.policy import Policy
from ptnumba_codegen.analysis.program import Program
from ptnumba_codegen.tables import mro_lookup

@dataclass(frozen=True)
class KernelPlan:
    kind: str  # "loop", "scalar", "stock_loop" (the stock loop around our scalar core),
    # or "parts" (an indexed kernel compiled as its inner graph: `stock_op` is that graph)
    spec: LoopSpec | None
    body: PlannedBody
    finish: tuple[Finish, ...]
    stock_op: object = None  # "stock_loop": the op the stock funcify compiles; "parts": the graph


def _reducer(scalar_op) -> str:
    name = SCALAR_REDUCERS.get(type(scalar_op))
    if name is None:
        raise Unsupported(f"reduction with {type(scalar_op).__name__} is not supported by the generator")
    return name


def reduce_identity(identity, acc_dtype: str):
    """The identity as a Python scalar valid in ``acc_dtype``.

    +-inf becomes the integer bounds (True/False for bools); other values are cast the way
    C does, so AND's identity -1 becomes all ones in an unsigned accumulator.
    """
    acc = np.dtype(acc_dtype)
    if acc.kind in "uib" and not np.isfinite(identity):
        if acc.kind == "b":
            return bool(np.isposinf(identity))
        info = np.iinfo(acc)
        return int(info.max if np.isposinf(identity) else info.min)
    return np.asarray(identity).astype(acc)[()].item()


def accumulator_flags(policy: Policy, scalar_op, output_sensitive: bool) -> tuple[str, ...]:
    """Reduction class, or strict-cone class when the result (or the reducer) decides."""
    deciding = output_sensitive or isinstance(scalar_op, DECIDING_REDUCERS)
    klass = COMPARISON_SENSITIVE if deciding else REDUCTION
    return policy.flags_for(klass, type(scalar_op).__name__)


def _identity_program(dtype: str) -> Program:
    return Program(dtypes=(dtype,), inputs=(0,), constants=(), instrs=(), outputs=(0,))


def _finish_reduction(out_type, spec_bc, axes, acc_dtype, scalar_acc) -> Finish:
    out_dtype = out_type.dtype
    if scalar_acc:
        return Finish("scalar" if isinstance(out_type, ScalarType) else "array0d", out_dtype)
    kept = tuple(d for d in range(len(spec_bc)) if d not in axes)
    return Finish("squeeze", out_dtype, kept, cast=np.dtype(acc_dtype) != np.dtype(out_dtype))


def static_size(shape) -> int | None:
    """The number of elements of a static shape, or None if any length is unknown."""
    if any(length is None for length in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


def plan_elemwise(node) -> KernelPlan:
    op = node.op
    size = static_size(node.outputs[0].type.shape)
    body = plan_body(
        node_program(node), op.policy, op.sensitive_outputs, op.input_facts, once=size == 1,
        row_length=row_loop_length(node.outputs[0].type.shape),
    )
    spec = LoopSpec(
        ndim=node.outputs[0].type.ndim,
        input_bc=tuple(i.type.broadcastable for i in node.inputs),
        output_bc=tuple(o.type.broadcastable for o in node.outputs),
        output_dtypes=tuple(o.type.dtype for o in node.outputs),
        inplace=tuple(sorted(op.inplace_pattern.items())),
        static_size=size,
        static_shape=tuple(node.outputs[0].type.shape),
        size_bound=op.size_bound,
    )
    return KernelPlan("loop", spec, body, tuple(Finish("as_is") for _ in node.outputs))


def plan_indexed_fused(node) -> KernelPlan:
    """Indexed reads/writes (gathers, scatter-adds): the stock loop, our scalar core; or,
    when its body would call vector functions, its inner graph (`indexed_parts`).

    The FusedElemwise is rebuilt with its inner Elemwise's scalar op carrying the policy, so
    the stock funcify dispatches the scalar core to the generator (per-instruction flags,
    libmvec) while the stock loop does the indexing. The loop's own accumulations (inc
    writes, reductions) get numba's fastmath from the policy's reduction class.
    """
    op = node.op
    body = plan_body(node_program(node), op.policy, op.sensitive_outputs, op.input_facts)
    if lowered_as_parts(op, body):
        try:
            return KernelPlan("parts", None, body, (), stock_op=parts_graph(op))
        except Unsupported:
            pass  # not the gather/body/scatter shape: the stock loop below
    graph = op.fgraph.unfreeze()
    [el] = [n for n in graph.apply_nodes if isinstance(n.op, Elemwise)]
    scalar = with_policy(el.op.scalar_op, op.policy, op.sensitive_outputs, (), op.input_facts, loop_core=True)
    new_el = Elemwise(scalar, inplace_pattern=el.op.inplace_pattern).make_node(*el.inputs)
    graph.replace_all(list(zip(el.outputs, new_el.outputs, strict=True)), reason="policy_codegen")
    rebuilt = type(stock_op(op))(
        graph.inputs,
        graph.outputs,
        fgraph=graph.freeze(),
        destroy_map=op.destroy_map,
        indexed_inputs=op.indexed_inputs,
        indexed_outputs=op.indexed_outputs,
        reduced_outputs=op.reduced_outputs,
    )
    return KernelPlan("stock_loop", None, body, (), stock_op=rebuilt)


def plan_fused(node) -> KernelPlan:
    op = node.op
    inner = inner_elemwise(op)
    if indexed(op):
        return plan_indexed_fused(node)
    n_in = len(inner.inputs)
    if len(node.inputs) != n_in:
        raise Unsupported("FusedElemwise with extra inputs (indices or update targets)")
    size = static_size(inner.outputs[0].type.shape)
    body = plan_body(
        node_program(node), op.policy, op.sensitive_outputs, op.input_facts, once=size == 1,
        row_length=row_loop_length(inner.outputs[0].type.shape),
    )
    ndim = inner.outputs[0].type.ndim
    input_bc = tuple(
        None if isinstance(outer.type, ScalarType) else inner_in.type.broadcastable
        for outer, inner_in in zip(node.inputs, inner.inputs, strict=True)
    )
    reduced = getattr(op, "reduced_outputs", ()) or (None,) * len(inner.outputs)
    inplace = dict(inner.op.inplace_pattern)
    output_bc, output_dtypes, reduces, finish = [], [], [], []
    for i, (spec, inner_out, outer_out) in enumerate(zip(reduced, inner.outputs, node.outputs, strict=True)):
        if spec is None:
            output_bc.append(inner_out.type.broadcastable)
            output_dtypes.append(outer_out.type.dtype)
            reduces.append(None)
            finish.append(Finish("as_is"))
            continue
        if i in inplace:
            raise Unsupported("an inplace reduction output")
        scalar_op, axes, identity, acc_dtype = spec
        acc_dtype = str(np.dtype(acc_dtype))
        numba_type(acc_dtype)
        bc = tuple(True if d in axes else b for d, b in enumerate(inner_out.type.broadcastable))
        scalar_acc = len(axes) == ndim
        reduces.append(
            Reduce(
                op=_reducer(scalar_op),
                axes=tuple(axes),
                identity=reduce_identity(identity, acc_dtype),
                acc_dtype=acc_dtype,
                flags=accumulator_flags(op.policy, scalar_op, i in output_needs(op.sensitive_outputs)),
                scalar_acc=scalar_acc,
            )
        )
        output_bc.append(bc)
        output_dtypes.append(acc_dtype)
        finish.append(_finish_reduction(outer_out.type, bc, axes, acc_dtype, scalar_acc))
    spec = LoopSpec(
        ndim=ndim,
        input_bc=input_bc,
        output_bc=tuple(output_bc),
        output_dtypes=tuple(output_dtypes),
        inplace=tuple(sorted(inplace.items())),
        reduces=tuple(reduces),
        static_size=size,
        static_shape=tuple(inner.outputs[0].type.shape),
        size_bound=op.size_bound,
    )
    return KernelPlan("loop", spec, body, tuple(finish))


def plan_careduce(node, careduce_op=None, scalar_out=False) -> KernelPlan:
    op = node.op
    careduce = careduce_op or op
    [x] = node.inputs
    in_dtype = x.type.dtype
    out_type = node.outputs[0].type
    ndim = x.type.ndim
    axes = tuple(range(ndim)) if careduce.axis is None else tuple(careduce.axis)
    acc_dtype = str(np.dtype(getattr(careduce, "acc_dtype", None) or out_type.dtype))
    numba_type(acc_dtype)
    body = plan_body(_identity_program(in_dtype), op.policy)
    bc = tuple(True if d in axes else b for d, b in enumerate(x.type.broadcastable))
    scalar_acc = len(axes) == ndim
    reduce = Reduce(
        op=_reducer(careduce.scalar_op),
        axes=axes,
        identity=reduce_identity(careduce.scalar_op.identity, acc_dtype),
        acc_dtype=acc_dtype,
        flags=accumulator_flags(op.policy, careduce.scalar_op, 0 in output_needs(op.sensitive_outputs)),
        scalar_acc=scalar_acc,
    )
    spec = LoopSpec(
        ndim=ndim,
        input_bc=(x.type.broadcastable,),
        output_bc=(bc,),
        output_dtypes=(acc_dtype,),
        reduces=(reduce,),
        static_size=static_size(x.type.shape),
        visit="careduce" if ndim >= 2 else "c",  # stock's CAReduce order (visit_order)
        static_shape=tuple(x.type.shape),
        size_bound=op.size_bound,
    )
    if not scalar_acc and stock_order_slots(spec) and comb(ndim, len(axes)) * ndim > MAX_STOCK_LOOPS:
        # stock regroups such sums (an inner accumulator per run): not reproduced
        raise Unsupported(f"a strict float {reduce.op} over {len(axes)} of {ndim} axes (stock's regrouped loop)")
    finish = _finish_reduction(out_type, bc, axes, acc_dtype, scalar_acc)
    return KernelPlan("loop", spec, body, (finish,))


def plan_scalar_careduce(node) -> KernelPlan:
    return plan_careduce(node, careduce_op=inner_careduce(node.op).op)


def plan_scalar_op(node) -> KernelPlan:
    op = node.op
    # the program holds the plain scalar op: rules (and stock calls) must see the stock class
    # a node of its own runs once per call; the core of a stock loop, per element
    body = plan_body(
        node_program(node, stock_op(op)), op.policy, op.sensitive_outputs, op.input_facts, once=not op.loop_core
    )
    return KernelPlan("scalar", None, body, tuple(Finish("as_is") for _ in node.outputs))


# node op class -> planner (looked up along the op's MRO; order matters for subclasses)
PLANNERS: dict[type, object] = {
    FusedElemwise: plan_fused,
    ScalarizedElemwise: plan_fused,
    ScalarCAReduce: plan_scalar_careduce,
    CAReduce: plan_careduce,
    Elemwise: plan_elemwise,
    ScalarOp: plan_scalar_op,
}


def planner_for(op):
    return mro_lookup(PLANNERS, op)


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


def plan_node(node) -> KernelPlan:
    """Plan ``node`` (an op carrying a policy); raises Unsupported with the reason."""
    planner = planner_for(node.op)
    if planner is None:
        raise Unsupported(f"no kernel planner for {type(node.op).__name__}")
    return planner(node)
