"""``Reshape`` as an intrinsic lowered into its caller.

PyTensor's numba ``Reshape`` (to ``ndim >= 1`` dimensions) is
``np.reshape(np.ascontiguousarray(np.asarray(x)), to_fixed_tuple(shape, ndim))``: a numba
function of its own per ``ndim`` and types, with ``np.reshape``'s and
``np.ascontiguousarray``'s overloads compiled behind it (the catalogue's models that
reshape; CHANGELOG.md, "Cold compile: stock node functions compiled as intrinsics").

The compact ``Reshape`` (`RESHAPE`: a subclass, shape inference, gradient, printing are
Reshape's) takes every
node to one or more dimensions (`why_not_compact`; to 0-d stock reads ``x.item()``). Its node
function is an intrinsic that writes those calls into its caller with numba's own lowering,
in stock's order: ``np.ascontiguousarray`` (numba's ``_as_layout_array``: the same array
where its type is C, or 1-d contiguous; for another layout a run-time contiguity test and
a copy where it fails; numba types the result a writable C array either way), ``to_fixed_tuple`` (the shape vector's first ``ndim`` elements,
unchecked, as numba's intrinsic reads them), and ``array.reshape`` (numba's
``array_reshape``: ``-1`` resolved and the size checked by numba's own
``normalize_reshape_value``, with its ``ValueError`` messages, then the view), the
contiguous array's reference given back as numba gives back a temporary's.
"""

from __future__ import annotations

from numba.core import types
from numba.np import arrayobj

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource


def why_not_compact(node) -> str | None:
    """Why ``node`` keeps the stock op, or None (a reshape to one or more dimensions)."""
    return "a reshape to 0-d (stock reads x.item())" if node.op.ndim == 0 else None


def reshape_intrinsic(ndim: int, stock):
    """``reshape(x, shape)``: stock's ``np.reshape(np.ascontiguousarray(x), to_fixed_tuple(shape,
    ndim))`` as an intrinsic; ``stock()`` where ``x`` is not an array or the shape vector's
    dtype is not numba's ``intp`` (numba's ``array_reshape`` stores it as one)."""

    def typer(typingctx, arg_types):
        xty, shapety = arg_types
        if not isinstance(xty, types.Array) or xty.ndim == 0:
            return None
        if not isinstance(shapety, types.Array) or shapety.ndim != 1 or shapety.dtype != types.intp:
            return None
        # numba's types: np.ascontiguousarray's result is a writable C array of x's rank (the
        # same array where it already is one), and array.reshape keeps its layout
        cty = xty.copy(layout="C", readonly=False)
        tuple_type = types.UniTuple(types.intp, ndim)
        out_type = cty.copy(ndim=ndim)

        def emit(context, builder, args):
            x, shape = args
            contiguous = arrayobj._as_layout_array(context, builder, cty(xty), [x], output_layout="C")
            shape_struct = ni.array_struct(context, builder, shapety, shape)
            values = [ni.load(context, builder, shapety, shape_struct, [ni.intp(context, k)]) for k in range(ndim)]
            new_shape = context.make_tuple(builder, tuple_type, values)
            view = arrayobj.array_reshape(context, builder, out_type(cty, tuple_type), [contiguous, new_shape])
            context.nrt.decref(builder, cty, contiguous)  # the temporary, given back as numba gives it back
            return view

        return out_type(*arg_types), emit

    return ni.node_intrinsic("reshape", 2, typer, stock)


RESHAPE = Replica(
    stock_op="pytensor.tensor.shape:Reshape",
    reason="np.reshape(np.ascontiguousarray(x), to_fixed_tuple(shape, ndim)): a numba function of its own per "
    "ndim and types, with np.reshape's and np.ascontiguousarray's overloads compiled behind it; the "
    "compact one is an intrinsic inside its caller making the same calls with numba's own lowering",
    source=StockSource(
        functions=("pytensor.link.numba.dispatch.shape:numba_funcify_Reshape",),
        digests={"0bf05265d7b33cc1": SUPPORTED_PYTENSOR},
    ),
    params=lambda op, node: (op.ndim,),
    intrinsic=reshape_intrinsic,
    takes=why_not_compact,
)


__all__ = ["RESHAPE", "reshape_intrinsic", "why_not_compact"]
