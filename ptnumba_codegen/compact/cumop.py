"""A vector's running sum or product (``CumOp`` of a 1-d float tensor) as an intrinsic lowered
into its caller.

PyTensor's numba ``CumOp`` of a vector is ``np.cumsum(x)`` (``np.cumprod(x)``): a numba
function of its own per mode and type, with the overload compiled behind it (what that costs
a cold compile: CHANGELOG.md, "A vector's running sum or product as an intrinsic").
numba's ``np.cumsum`` of a vector allocates a new C vector of ``x``'s size (``np.empty``),
starts an accumulator at zero and, element by element in ``x``'s order, adds the element
with ``operator.iadd``'s implementation and stores the accumulator (``np.cumprod``: one, and
``*=``); for a float ``x`` the result has ``x``'s dtype.

The compact ``CumOp`` (`CUMOP`: a subclass, shape inference, gradient, printing are CumOp's)
takes the nodes
of a 1-d float input (`why_not_compact`; more dimensions are stock's loop over an axis,
integers and bools stock's widening to ``intp``). Its node function is an intrinsic writing
the same allocation and loop into its caller with numba's own pieces
(`compact.node_intrinsics`): each step is one ``+`` (``*``) of the accumulator and the next
element, in stock's order, carrying the caller's fast-math flags as stock's function carries
the same setting. No step can be regrouped: every partial result is stored (a running
value, not a reduction LLVM may vectorize).
"""

from __future__ import annotations

import operator

from numba.core import cgutils, types

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource

# CumOp's mode -> (numba's in-place operator stock's loop applies, the accumulator's start)
STEPS = {"add": (operator.iadd, 0.0), "mul": (operator.imul, 1.0)}
FLOAT_DTYPES = ("float64", "float32")


def why_not_compact(node) -> str | None:
    """Why ``node`` keeps the stock op, or None (a float vector: stock's ``np.cumsum`` or
    ``np.cumprod``)."""
    x = node.inputs[0]
    if x.type.ndim != 1:
        return f"a {x.type.ndim}-d input (stock's loop along axis {node.op.axis})"
    if x.type.dtype not in FLOAT_DTYPES:
        return f"a {x.type.dtype} input (stock accumulates it as intp)"
    return None  # CumOp's modes are STEPS' keys (it refuses any other)


def cumop_intrinsic(mode: str, stock):
    """``cumop(x)``: numba's ``np.cumsum(x)`` (``np.cumprod``) of a float vector, as an
    intrinsic; ``stock()`` where the argument is not one."""
    step, start = STEPS[mode]

    def typer(typingctx, arg_types):
        (xty,) = arg_types
        if not isinstance(xty, types.Array) or xty.ndim != 1 or str(xty.dtype) not in FLOAT_DTYPES:
            return None
        out_type = types.Array(xty.dtype, 1, "C")
        step_sig = typingctx.resolve_function_type(step, (xty.dtype, xty.dtype), {})
        if step_sig is None or step_sig.return_type != xty.dtype:
            return None

        def emit(context, builder, args):
            xs = ni.array_struct(context, builder, xty, args[0])
            (n,) = cgutils.unpack_tuple(builder, xs.shape, 1)
            out = ni.new_array(context, builder, out_type, [n])
            apply = context.get_function(step, step_sig)
            # the running value in a stack slot, as stock's loop keeps it (LLVM makes it a phi)
            acc = cgutils.alloca_once_value(builder, context.get_constant(xty.dtype, start))
            with cgutils.for_range(builder, n) as loop:
                value = apply(builder, (builder.load(acc), ni.load(context, builder, xty, xs, [loop.index])))
                builder.store(value, acc)
                ni.store(context, builder, out_type, out, [loop.index], builder.load(acc), xty.dtype)
            return out._getvalue()

        return out_type(*arg_types), emit

    return ni.node_intrinsic(f"cum{mode}", 1, typer, stock)


CUMOP = Replica(
    stock_op="pytensor.tensor.extra_ops:CumOp",
    reason="np.cumsum(x) (np.cumprod): a numba function of its own per mode and type, with the overload's "
    "intrinsic compiled behind it; the compact one is an intrinsic inside its caller making the same "
    "allocation and running sum or product in stock's order with numba's own pieces",
    source=StockSource(
        functions=("pytensor.link.numba.dispatch.extra_ops:numba_funcify_CumOp",),
        digests={"5a1109d8a2953689": SUPPORTED_PYTENSOR},
    ),
    params=lambda op, node: (op.mode,),
    intrinsic=cumop_intrinsic,
    takes=why_not_compact,
)


__all__ = ["CUMOP", "FLOAT_DTYPES", "STEPS", "cumop_intrinsic", "why_not_compact"]
