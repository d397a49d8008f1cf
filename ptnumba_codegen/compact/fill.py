"""``Alloc`` of one value, filled by a loop instead of numba's slice assignment.

PyTensor's numba ``Alloc`` fills an output from a value that broadcasts in every dimension
(a scalar, or a value of static shape ``(1, ..., 1)``: the zeros and ones of gradients) with
``res[...] = value``. numba lowers that assignment through its general slice assignment,
which compiles an error path formatting both shapes into its message
(``raise_with_shape_context``: numba's integer-to-string and unicode code, compiled once in
every cold process), although a scalar source can never mismatch.

The compact ``Alloc`` (`ALLOC`) is the same op (a subclass: shape inference, gradient, printing are Alloc's)
whose numba function allocates the same array (with ``np.empty``'s own intrinsic,
`numpy_empty_nd`, not its overload: one compile less per dtype and rank) and writes the same value to every element
with a loop nest, for exactly those nodes (`why_not_compact`): an output of at least one
dimension and a value whose every dimension is statically 1. That function is a node
intrinsic lowered into the graph's function (`filled_array`, `compact.node_intrinsics`: no
numba compile of its own; the compiled function is its per-node fallback). The value is converted to the
output's dtype as the assignment converts it (they are the same dtype: Alloc's output has
its value's). Stock's other fills (a value that varies along a dimension: a loop nest of
its own already, with constant error messages) and 0-d outputs keep the stock op.
"""

from __future__ import annotations

from numba.core import cgutils, types
from numba.np import arrayobj
from numba.extending import overload
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.utils import compile_function_src

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.arrays import c_array, empty_env
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource


def why_not_compact(node) -> str | None:
    """Why ``node`` (an Alloc) keeps the stock function, or None if the compact one applies."""
    val, *shape = node.inputs
    if not shape:
        return "a 0-d output (stock fills it directly)"
    if any(dim != 1 for dim in val.type.shape):
        return f"the value's static shape {val.type.shape} varies along a dimension (stock fills it by a loop already)"
    if val.type.dtype != node.outputs[0].type.dtype:
        return f"the value's dtype {val.type.dtype} differs from the output's {node.outputs[0].type.dtype}"
    return None


def fill_value(val):
    """The value as a scalar: the element of an array of one element, a scalar as it is."""
    return val


@overload(fill_value)
def _fill_value_overload(val):
    if isinstance(val, types.Array):
        index = (0,) * val.ndim
        return lambda val: val[index]
    return lambda val: val


def alloc_source(ndim: int) -> str:
    """The compact function's source: the sizes, ``np.empty``'s body, the fill."""
    sizes = [f"n{d}" for d in range(ndim)]
    lines = [
        f"def alloc(val, {', '.join(f'sh{d}' for d in range(ndim))}):",
        *(f"    n{d} = sh{d}.item()" for d in range(ndim)),
        f"    res = numpy_empty_nd(({''.join(f'{n}, ' for n in sizes)}), dtype, retty)",  # np.empty's body
        "    value = fill_value(val)",
        *(f"    {'    ' * d}for i{d} in range(n{d}):" for d in range(ndim)),
        f"    {'    ' * ndim}res[{', '.join(f'i{d}' for d in range(ndim))}] = value",
        "    return res",
    ]
    return "\n".join(lines) + "\n"


def filled_array(ndim: int, dtype: str, stock):
    """The node function as a node intrinsic lowered into the graph's function
    (`node_intrinsics`): the same allocation as the compact function's (`np.empty`'s), the
    value read as `fill_value` reads it and stored in every element, in C order. Stores only,
    no arithmetic. ``stock()`` (the compact function numba compiles) for other types."""
    out_type = c_array(dtype, ndim)

    def typer(typingctx, arg_types):
        val, *shape = arg_types
        if not all(ni.is_element(ty) and isinstance(getattr(ty, "dtype", ty), types.Integer) for ty in shape):
            return None
        if not isinstance(val, types.Number | types.Boolean | types.Array):
            return None

        def emit(context, builder, args):
            # the sizes as the compact function's ``sh.item()``, checked and cast by numba's own
            # parse of np.empty's shape (a negative size raises its ValueError)
            items = [ni.element(context, builder, ty, v) for ty, v in zip(shape, args[1:], strict=True)]
            shape_type = types.Tuple([ty for _v, ty in items])
            sizes = arrayobj._parse_shape(context, builder, shape_type, context.make_tuple(builder, shape_type, [v for v, _ty in items]))
            res = ni.new_array(context, builder, out_type, sizes)
            if isinstance(val, types.Array):
                zero = ni.intp(context, 0)
                value, value_type = ni.load(context, builder, val, ni.array_struct(context, builder, val, args[0]), [zero] * val.ndim), val.dtype
            else:
                value, value_type = args[0], val
            with cgutils.loop_nest(builder, sizes, sizes[0].type) as index:
                ni.store(context, builder, out_type, res, list(index), value, value_type)
            return res._getvalue()

        return out_type(*arg_types), emit

    return ni.node_intrinsic("alloc", ndim + 1, typer, stock)


def fill_params(op, node) -> tuple:
    """The record's params: the output's rank and dtype."""
    return len(node.inputs) - 1, node.outputs[0].type.dtype


def alloc_function(op, node, **kwargs):
    """``() ->`` `filled_array`'s fallback: `alloc_source` compiled by numba."""
    ndim, dtype = fill_params(op, node)

    def build():
        env = {"fill_value": fill_value, **empty_env(dtype, ndim)}
        return numba_basic.numba_njit(compile_function_src(alloc_source(ndim), "alloc", env))

    return build


ALLOC = Replica(
    stock_op="pytensor.tensor.basic:Alloc",
    reason="a fill by one value is numba's slice assignment, whose error path formats both shapes "
    "(int-to-str, unicode) though a scalar cannot mismatch; the compact one loops",
    source=StockSource(
        functions=("pytensor.link.numba.dispatch.tensor_basic:numba_funcify_Alloc",),
        digests={"ecca27b5853a60c9": SUPPORTED_PYTENSOR},
    ),
    params=fill_params,
    intrinsic=filled_array,
    takes=why_not_compact,
    fallback=alloc_function,
)


__all__ = ["ALLOC", "alloc_function", "alloc_source", "fill_params", "fill_value", "filled_array", "why_not_compact"]
