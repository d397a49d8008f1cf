"""A matrix's diagonal (``ExtractDiag`` of a 2-d tensor) as an intrinsic lowered into its caller.

PyTensor's numba ``ExtractDiag`` of a matrix is ``np.diag(x, k=offset)``, then ``.copy()``
unless the op may return a view: a numba function of its own per offset, view flag and
types, with ``np.diag``'s overload compiled behind it (the catalogue's models with a
covariance's or Cholesky factor's diagonal; CHANGELOG.md, "Cold compile: stock node
functions compiled as intrinsics"). numba's ``np.diag`` of a matrix allocates a new C
vector of length ``max(min(rows + min(k, 0), cols - max(k, 0)), 0)`` (``np.empty``) and
copies ``x[i, i + k]`` (``x[i - k, i]`` for a negative ``k``) into it; stock's ``.copy()`` of
that fresh vector is another fresh C vector of the same elements.

The compact ``ExtractDiag`` (`EXTRACT_DIAG`: a subclass, shape inference, gradient, printing
are ExtractDiag's) takes
the nodes of a 2-d input (`why_not_compact`; the general case is stock's own loop). Its node
function is an intrinsic that writes ``np.diag``'s allocation and copy into its caller with
numba's own pieces (`compact.node_intrinsics`): the same values in a new C vector of
stock's type, whether or not stock copies it again.
"""

from __future__ import annotations

from numba.core import cgutils, types

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.replica import Replica, StockSource


def why_not_compact(node) -> str | None:
    """Why ``node`` keeps the stock op, or None (a 2-d input: stock's ``np.diag``)."""
    ndim = node.inputs[0].type.ndim
    return None if ndim == 2 else f"a {ndim}-d input (stock's loop over the other axes)"


def diag_intrinsic(offset: int, stock):
    """``extract_diag(x)``: numba's ``np.diag(x, k=offset)`` of a matrix, as an intrinsic;
    ``stock()`` where the argument is not a matrix."""

    def typer(typingctx, arg_types):
        (xty,) = arg_types
        if not isinstance(xty, types.Array) or xty.ndim != 2:
            return None
        out_type = types.Array(xty.dtype, 1, "C")

        def emit(context, builder, args):
            xs = ni.array_struct(context, builder, xty, args[0])
            rows, cols = cgutils.unpack_tuple(builder, xs.shape, 2)
            if offset < 0:
                rows = builder.add(rows, ni.intp(context, offset))
            if offset > 0:
                cols = builder.sub(cols, ni.intp(context, offset))
            shorter = builder.select(builder.icmp_signed("<", rows, cols), rows, cols)
            zero = ni.intp(context, 0)
            n = builder.select(builder.icmp_signed(">", shorter, zero), shorter, zero)
            out = ni.new_array(context, builder, out_type, [n])
            with cgutils.for_range(builder, n) as loop:
                i = loop.index
                if offset >= 0:
                    at = [i, builder.add(i, ni.intp(context, offset))]
                else:
                    at = [builder.sub(i, ni.intp(context, offset)), i]
                ni.store(context, builder, out_type, out, [i], ni.load(context, builder, xty, xs, at), xty.dtype)
            return out._getvalue()

        return out_type(*arg_types), emit

    return ni.node_intrinsic("extract_diag", 1, typer, stock)


EXTRACT_DIAG = Replica(
    stock_op="pytensor.tensor.basic:ExtractDiag",
    reason="np.diag(x, k) (then .copy()): a numba function of its own per offset and types, with "
    "np.diag's overload compiled behind it; the compact one is an intrinsic inside its caller "
    "making np.diag's allocation and copy with numba's own pieces",
    source=StockSource(
        functions=("pytensor.link.numba.dispatch.tensor_basic:numba_funcify_ExtractDiag",),
        # 3.3.8 copies the diagonal of more than two dimensions with _copyto; the matrix's, the
        # one replicated, is the same np.diag in all three
        digests={"51cf89d4ccee99a5": ("3.3.6", "3.3.7"), "32ee10658ddb6f23": ("3.3.8",)},
    ),
    params=lambda op, node: (op.offset,),
    intrinsic=diag_intrinsic,
    takes=why_not_compact,
)


__all__ = ["EXTRACT_DIAG", "diag_intrinsic", "why_not_compact"]
