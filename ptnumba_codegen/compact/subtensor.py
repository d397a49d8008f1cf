"""``Subtensor``'s view made inside its caller, without a numba function of its own.

PyTensor's numba ``Subtensor`` is a function generated per index pattern, ``z = x[indices];
return np.asarray(z)``, compiled by numba with ``boundscheck=True``: one more run of
numba's pipeline and one more LLVM module per pattern and argument types, in every cold
process (3-14 such nodes in a core catalogue model).

The compact ``Subtensor`` (`SUBTENSOR`) is the same op (a subclass: shape inference,
gradient, printing are Subtensor's), and so is the compact ``ScalarSubtensor``
(`SCALAR_SUBTENSOR`: an element read as a native scalar, an OpFromGraph around one
``Subtensor``). Its node function is an intrinsic (`compact.node_intrinsics`) that types
stock's ``x[indices]`` with numba's own typing of that ``getitem`` and lowers it with
numba's own basic indexing, with the bounds check stock compiles its function with: the
same view (or 0-d array, for an element), numba type and ``IndexError``, written into the
caller (tests/test_compact_subtensor.py). A view moves no value: it is a data pointer,
shape and strides.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from numba.core import types
from numba.core.imputils import impl_ret_borrowed
from numba.np import arrayobj
from pytensor.scalar.basic import ScalarType
from pytensor.tensor.subtensor import Subtensor

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource

SUBTENSOR_DISPATCH = "pytensor.link.numba.dispatch.subtensor:"


def why_not_compact(node) -> str | None:
    """Why ``node`` (a ``Subtensor``) keeps the stock op, or None: every index input a
    scalar (what ``make_node`` builds; stock would read a 0-d tensor's ``.item()``)."""
    for v in node.inputs[1:]:
        if not isinstance(v.type, ScalarType):
            return f"index input {v.type} is not a scalar"
    return None


@dataclass(frozen=True)
class BasicIndex:
    """Stock's ``indices`` for one ``idx_list`` and index scalars' numba types, as numba
    types them: a scalar index input, or a ``slice`` of them (stock's source omits a missing
    step, so numba keeps contiguous view types) with the signature of numba's ``slice(...)``."""

    idx_list: tuple
    index_types: tuple
    slices: dict  # position in idx_list -> (index inputs or None, their types, slice(...)'s signature)

    def values(self, context, builder, scalars: list) -> list:
        """The indices' IR: numba's ``slice(...)`` as its call lowering makes it (each part
        cast to its signature's type first), or the index scalar itself."""
        indices = []
        for k, entry in enumerate(self.idx_list):
            if k not in self.slices:
                indices.append(scalars[entry])
                continue
            parts, part_types, signature = self.slices[k]
            part_values = [
                context.get_dummy_value() if p is None else context.cast(builder, scalars[p], ty, want)
                for p, ty, want in zip(parts, part_types, signature.args, strict=True)
            ]
            indices.append(context.get_function(slice, signature)(builder, part_values))
        return indices


def type_basic_index(typingctx, idx_list: tuple, scalar_types: tuple) -> BasicIndex | None:
    """`BasicIndex` of ``idx_list`` for index scalars of ``scalar_types`` (None unless every
    one is an integer)."""
    if not all(isinstance(t, types.Integer) for t in scalar_types):
        return None
    index_types, slices = [], {}
    for k, entry in enumerate(idx_list):
        if isinstance(entry, slice):
            parts = [entry.start, entry.stop, entry.step][: 3 if entry.step is not None else 2]
            part_types = tuple(types.none if p is None else scalar_types[p] for p in parts)
            slices[k] = (parts, part_types, typingctx.resolve_function_type(slice, part_types, {}))
            index_types.append(slices[k][2].return_type)
        else:
            index_types.append(scalar_types[entry])
    return BasicIndex(tuple(idx_list), tuple(index_types), slices)


def getitem_type(typingctx, aryty, index: BasicIndex):
    """The numba type of ``ary[indices]`` (an array view, or an element), or None."""
    got = typingctx.resolve_function_type(operator.getitem, (aryty, types.BaseTuple.from_types(index.index_types)), {})
    return None if got is None else got.return_type


def index_into(context, builder, aryty, value, index: BasicIndex, scalars: list):
    """``(array struct, data, shape, strides)`` of ``value[indices]``: numba's own basic
    indexing, with the bounds check stock compiles its functions with."""
    ary = ni.array_struct(context, builder, aryty, value)
    indices = index.values(context, builder, scalars)
    data, shape, strides = arrayobj.basic_indexing(context, builder, aryty, ary, index.index_types, indices, boundscheck=True)
    return ary, data, shape, strides


def inner_subtensor(node):
    """The one ``Subtensor`` node of a ``ScalarSubtensor``'s inner graph, or None."""
    inner = [n for n in node.op.fgraph.apply_nodes if isinstance(n.op, Subtensor)]
    return inner[0] if len(inner) == 1 else None


def why_not_compact_scalar(node) -> str | None:
    """Why ``node`` (a ``ScalarSubtensor``) keeps the stock op, or None: stock calls its inner
    ``Subtensor``'s function with the node's own inputs, which must then be that node's, in
    order, its index inputs scalars (`why_not_compact`)."""
    inner = inner_subtensor(node)
    if inner is None:
        return "no single Subtensor in its inner graph"
    if list(inner.inputs) != list(node.op.fgraph.inputs):
        return "its inner Subtensor does not take the graph's inputs in order"
    return why_not_compact(inner)


def subtensor_intrinsic(idx_list: tuple, n_indices: int, stock, scalar_out: bool = False):
    """``subtensor(x, idx_0, ...)``: stock's ``np.asarray(x[indices])`` (`BasicIndex`), or
    with ``scalar_out`` its ``x[indices]`` (an element as a scalar), typed by numba's own
    typing of that ``getitem`` and lowered by numba's own basic indexing, with the bounds
    check stock compiles its function with; ``stock()`` where the generator cannot lower it."""

    def typer(typingctx, arg_types):
        aryty, scalar = arg_types[0], arg_types[1:]
        if not isinstance(aryty, types.Array) or len(scalar) != n_indices:
            return None
        index = type_basic_index(typingctx, idx_list, scalar)
        item_type = None if index is None else getitem_type(typingctx, aryty, index)
        if item_type is None:
            return None
        element = not isinstance(item_type, types.Array)
        out_type = types.Array(item_type, 0, "C") if element and not scalar_out else item_type

        def emit(context, builder, args):
            ary, data, shape, strides = index_into(context, builder, aryty, args[0], index, args[1:])
            if isinstance(item_type, types.Array):
                view = arrayobj.make_view(context, builder, aryty, ary, item_type, data, shape, strides)
                return impl_ret_borrowed(context, builder, item_type, view._getvalue())
            item = arrayobj.load_item(context, builder, aryty, data)
            if scalar_out:
                return item
            out = ni.new_array(context, builder, out_type, [])
            ni.store(context, builder, out_type, out, [], item, item_type)
            return out._getvalue()

        return out_type(*arg_types), emit

    return ni.node_intrinsic("subtensor", 1 + n_indices, typer, stock)


def scalar_subtensor_intrinsic(idx_list: tuple, n_indices: int, stock):
    """`subtensor_intrinsic` with ``scalar_out``: the element as a native scalar."""
    return subtensor_intrinsic(idx_list, n_indices, stock, scalar_out=True)


SUBTENSOR = Replica(
    stock_op="pytensor.tensor.subtensor:Subtensor",
    reason="a numba function of its own per index pattern and types (x[indices], np.asarray), one more "
    "pipeline and LLVM module; the compact one is an intrinsic making the same view with numba's "
    "own typing and basic indexing inside its caller (compact.node_intrinsics)",
    source=StockSource(
        functions=(SUBTENSOR_DISPATCH + "numba_funcify_default_subtensor",),
        digests={"e9c83fc95ac166fb": SUPPORTED_PYTENSOR},
    ),
    # the index list and the number of index inputs (the indices' dtypes are the call's)
    params=lambda op, node: (tuple(op.idx_list), len(node.inputs) - 1),
    intrinsic=subtensor_intrinsic,
    takes=why_not_compact,
)

SCALAR_SUBTENSOR = Replica(
    stock_op="pytensor.tensor.rewriting.scalarize:ScalarSubtensor",
    reason="an element read as a native scalar: stock's Subtensor function (x[indices]) compiled per "
    "index pattern and types; the compact one is Subtensor's intrinsic returning the element",
    source=StockSource(
        functions=(SUBTENSOR_DISPATCH + "numba_funcify_ScalarSubtensor", SUBTENSOR_DISPATCH + "numba_funcify_default_subtensor"),
        digests={"c5444aac65a8fbad": SUPPORTED_PYTENSOR},
    ),
    params=lambda op, node: (tuple(inner_subtensor(node).op.idx_list), len(node.inputs) - 1),
    intrinsic=scalar_subtensor_intrinsic,
    takes=why_not_compact_scalar,
    rebuilt_by="copy",
)


__all__ = ["SCALAR_SUBTENSOR", "SUBTENSOR", "BasicIndex", "getitem_type", "index_into", "inner_subtensor",
           "scalar_subtensor_intrinsic", "subtensor_intrinsic", "type_basic_index", "why_not_compact",
           "why_not_compact_scalar"]
