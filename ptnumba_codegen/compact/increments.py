"""``IncSubtensor`` as an intrinsic lowered into its caller.

PyTensor's numba ``IncSubtensor`` is a function generated per index pattern (`_scalar_loop_nest`
in PyTensor's dispatch): ``z = np.copy(x)`` (or ``z = x`` in place), ``target = z[indices]``,
for an array update ``y`` a check that it broadcasts onto the target,
``np.broadcast_to(y, target.shape)``, whose result it discards, then a loop nest of
``target[j] += y[...]`` (or ``=``), compiled with ``boundscheck=True``. Each is one more run
of numba's pipeline and one more LLVM module per pattern and argument types in every cold
process, and numba compiles ``np.copy``'s and ``np.broadcast_to``'s implementations for it
(``_default_broadcast_to_impl``, the ``_can_broadcast`` check, ``np.asarray``): a large part
of a cold compile of the catalogue's models with increments (a time series' gradient:
``x[1:] += g``; CHANGELOG.md, "Cold compile: stock node functions compiled as intrinsics").

The compact ``IncSubtensor`` (`INC_SUBTENSOR`) is the same op (a subclass: shape inference,
gradient, printing are IncSubtensor's). Its node function is an intrinsic (`increment_intrinsic`) that writes stock's
function into its caller with numba's own pieces: the copy, the view and its bounds check,
the tests ``_can_broadcast`` makes, in its order (`CHECK`: ``y`` has no more dimensions than
the target, and each of its dimensions, aligned to the target's trailing ones, is the
target's or 1, else numba's ``ValueError`` with numba's message; a target's lengths are
never negative: numba's third check), and the loop, each ``+=`` an exact operation on two
loaded elements, stored with numba's cast. Its fallback, where the intrinsic does not apply,
is stock's own source with that one line replaced by `CHECK` (`compact_function`; stock's
unchanged where PyTensor's source does not hold the line exactly once, as for a 0-d update).

``AdvancedIncSubtensor``'s scatter by integer vectors is `compact.advanced`'s intrinsic,
with the same check (`broadcast_checks`).
"""

from __future__ import annotations

import operator
import re

from numba.core import cgutils, types
from numba.core.imputils import impl_ret_borrowed
from numba.np import arrayobj

from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.utils import compile_function_src

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource, stock_name
from ptnumba_codegen.compact.subtensor import SUBTENSOR_DISPATCH, getitem_type, index_into, type_basic_index

STOCK_FUNCIFY = SUBTENSOR_DISPATCH + "numba_funcify_default_subtensor"  # stock's Subtensor and IncSubtensor

# the line of PyTensor's generated source that checks the update (the shape: a Python expression)
BROADCAST_LINE = re.compile(r"^(\s*)np\.broadcast_to\(y, (.+)\)\s*$")
BROADCAST_MESSAGE = "operands could not be broadcast together with remapped shapes"  # numba's _can_broadcast
RANK_MESSAGE = "input operand has more dimensions than allowed by the axis remapping"  # its first check
# _can_broadcast(y, shape)'s tests, for the shape expression {shape}
CHECK = (
    "_shape = {shape}",
    "if y.ndim > len(_shape):",
    f"    raise ValueError({RANK_MESSAGE!r})",
    "for _d in range(y.ndim):",
    "    if y.shape[_d] != _shape[len(_shape) - y.ndim + _d] and y.shape[_d] != 1:",
    f"        raise ValueError({BROADCAST_MESSAGE!r})",
)


def compact_source(src: str) -> str | None:
    """PyTensor's source with its broadcast line replaced by `CHECK`, or None where the line
    is not there exactly once."""
    lines = src.splitlines()
    found = [(k, m) for k, line in enumerate(lines) if (m := BROADCAST_LINE.match(line))]
    if len(found) != 1:
        return None
    k, match = found[0]
    indent, shape = match.groups()
    check = [indent + line.format(shape=shape) for line in CHECK]
    return "\n".join([*lines[:k], *check, *lines[k + 1 :]]) + "\n"


def increment_intrinsic(idx_list: tuple, inplace: bool, set_instead: bool, n_indices: int, y_static: tuple, stock):
    """``inc_subtensor(x, y, idx_0, ...)``: stock's function (PyTensor's source, `CHECK` for
    its ``np.broadcast_to`` line) as an intrinsic lowered into its caller
    (`compact.node_intrinsics`), built from numba's own pieces in stock's order:

    - ``z = np.copy(x)`` (numba's ``_array_copy``, of its type), or ``z = x`` in place;
    - ``target = z[indices]``: numba's basic indexing with stock's bounds check
      (`compact.subtensor.index_into`);
    - an array ``y``: `CHECK`'s tests on its shape, with numba's messages; a 0-d ``y``:
      its item, read once (stock's ``y.item()``); a native scalar ``y`` (the update of
      `compact.scalar_writes`): that value, as the item of the 0-d array it stands for;
    - stock's loop nest over the target, C order (none for an element, stock's
      ``z[indices] += y.item()``), each element loaded, ``+=`` as numba lowers it for the
      two dtypes (``operator.iadd``'s implementation, then the store's cast) or ``=`` (the
      store's cast); an array ``y`` read as stock's source reads it (`_update_value`:
      index 0 along a dimension statically 1, the loop index or 0 by its run-time length
      where unknown), with the bounds check stock's ``y[...]`` has.

    The target's loads and stores are within its shape by the loop, as stock's bounds check
    finds them. ``stock()`` where these types are not the node's or the generator cannot
    lower them (an array update of an element, or of more dimensions than the target)."""

    def typer(typingctx, arg_types):
        xty, yty, scalar = arg_types[0], arg_types[1], arg_types[2:]
        if not (isinstance(xty, types.Array) and isinstance(yty, types.Array | types.Number)) or len(scalar) != n_indices:
            return None
        if isinstance(yty, types.Number):  # a native scalar update (`compact.scalar_writes`): a 0-d one's item
            if y_static:
                return None
            yty = types.Array(yty, 0, "C", readonly=True)
            native = True
        else:
            native = False
        if yty.ndim != len(y_static) or (inplace and not xty.mutable):
            return None
        zty = xty if inplace else xty.copy(layout="F" if xty.layout == "F" else "C", readonly=False)
        index = type_basic_index(typingctx, idx_list, scalar)
        got = None if index is None else getitem_type(typingctx, zty, index)
        if got is None:
            return None
        tty = got if isinstance(got, types.Array) else zty.copy(ndim=0)  # an element: z's data there
        if tty.ndim < yty.ndim or (tty.ndim == 0 and yty.ndim > 0):
            return None
        add = None
        if not set_instead:
            add = typingctx.resolve_function_type(operator.iadd, (tty.dtype, yty.dtype), {})
            if add is None:
                return None

        def store(context, builder, t_ptr, value):
            value_type = yty.dtype
            if add is not None:
                old = arrayobj.load_item(context, builder, tty, t_ptr)
                operands = [
                    context.cast(builder, old, tty.dtype, add.args[0]),
                    context.cast(builder, value, yty.dtype, add.args[1]),
                ]
                value, value_type = context.get_function(operator.iadd, add)(builder, operands), add.return_type
            arrayobj.store_item(context, builder, tty, context.cast(builder, value, value_type, tty.dtype), t_ptr)

        def emit(context, builder, args):
            x, y = args[0], args[1]
            z = x if inplace else arrayobj._array_copy(context, builder, zty(xty), [x])
            _, data, shape, strides = index_into(context, builder, zty, z, index, args[2:])
            ys = None if native else ni.array_struct(context, builder, yty, y)
            if tty.ndim == 0:
                store(context, builder, data, y if native else ni.load(context, builder, yty, ys, []))
            elif yty.ndim == 0:
                item = y if native else ni.load(context, builder, yty, ys, [])
                with cgutils.loop_nest(builder, shape, context.get_value_type(types.intp)) as loop:
                    store(context, builder, cgutils.get_item_pointer2(context, builder, data, shape, strides, tty.layout, loop), item)
            else:
                broadcast_checks(context, builder, shape, yty, ys)
                y_shape = cgutils.unpack_tuple(builder, ys.shape, yty.ndim)
                y_strides = cgutils.unpack_tuple(builder, ys.strides, yty.ndim)
                one, zero = ni.intp(context, 1), ni.intp(context, 0)
                with cgutils.loop_nest(builder, shape, context.get_value_type(types.intp)) as loop:
                    t_ptr = cgutils.get_item_pointer2(context, builder, data, shape, strides, tty.layout, loop)
                    y_index = update_index(builder, list(loop), y_static, y_shape, zero, one)
                    y_ptr = cgutils.get_item_pointer2(
                        context, builder, ys.data, y_shape, y_strides, yty.layout, y_index, boundscheck=True
                    )
                    store(context, builder, t_ptr, arrayobj.load_item(context, builder, yty, y_ptr))
            if inplace:
                return impl_ret_borrowed(context, builder, zty, z)
            return z  # the copy's new reference

        return zty(*arg_types), emit

    return ni.node_intrinsic("inc_subtensor", 2 + n_indices, typer, stock)


def update_index(builder, loop: list, y_static: tuple, y_shape: list, zero, one) -> list:
    """Stock's read of the update at loop position ``loop`` (PyTensor's ``_update_value``): its
    dimensions aligned to the loop's last ones, index 0 along one statically 1, the loop
    index or 0 by its run-time length where unknown."""
    offset = len(loop) - len(y_static)
    index = []
    for d, length in enumerate(y_static):
        j = loop[offset + d]
        if length == 1:
            index.append(zero)
        elif length is None:
            index.append(builder.select(builder.icmp_signed("==", y_shape[d], one), zero, j))
        else:
            index.append(j)
    return index


def broadcast_checks(context, builder, target_shape: list, yty, ys) -> None:
    """`CHECK`'s tests of an array ``y`` against the target's shape, with numba's message
    (its rank test is the typer's: ``y`` has no more dimensions than the target)."""
    y_shape = cgutils.unpack_tuple(builder, ys.shape, yty.ndim)
    offset = len(target_shape) - yty.ndim
    one = ni.intp(context, 1)
    for d in range(yty.ndim):
        wrong = builder.and_(
            builder.icmp_signed("!=", y_shape[d], target_shape[offset + d]),
            builder.icmp_signed("!=", y_shape[d], one),
        )
        with builder.if_then(wrong, likely=False):
            context.call_conv.return_user_exc(builder, ValueError, (BROADCAST_MESSAGE,))


def compact_function(op, node, **kwargs):
    """Stock's function with the check spelled out (`compact_source`), compiled as stock's
    is, bounds checks included where stock's has them; stock's own where PyTensor's source
    does not hold the line exactly once. The intrinsic's fallback."""
    stock_fn, _key = stock_name(STOCK_FUNCIFY)(op, node, **kwargs)
    py_func = stock_fn.py_func
    src = compact_source(getattr(py_func, "__source__", ""))
    if src is None:  # a 0-d update has no such line
        return stock_fn
    fn = compile_function_src(src, py_func.__name__, dict(py_func.__globals__))
    options = {"boundscheck": True} if stock_fn.targetoptions.get("boundscheck") else {}
    return numba_basic.numba_njit(fn, **options)


def increment_params(op, node) -> tuple:
    """The record's params: the op's props and the update's static shape (which stock's
    source spells out), and the number of index inputs."""
    return tuple(op.idx_list), op.inplace, op.set_instead_of_inc, len(node.inputs) - 2, tuple(node.inputs[1].type.shape)


INC_SUBTENSOR = Replica(
    stock_op="pytensor.tensor.subtensor:IncSubtensor",
    reason="a numba function of its own per index pattern and types, which compiles np.copy's and "
    "np.broadcast_to's implementations (_can_broadcast, np.asarray) besides; the compact one is "
    "an intrinsic inside its caller making stock's copy, view, _can_broadcast's test and loop with "
    "numba's own pieces (its fallback: stock's source with that test spelled out)",
    source=StockSource(
        functions=(STOCK_FUNCIFY, SUBTENSOR_DISPATCH + "_scalar_loop_nest", SUBTENSOR_DISPATCH + "_update_value"),
        digests={"9008d9d809d8240a": SUPPORTED_PYTENSOR},
    ),
    params=increment_params,
    intrinsic=increment_intrinsic,
    fallback=lambda op, node, **kwargs: lambda: compact_function(op, node, **kwargs),
)


__all__ = ["BROADCAST_LINE", "BROADCAST_MESSAGE", "CHECK", "INC_SUBTENSOR", "broadcast_checks", "compact_function",
           "compact_source", "increment_intrinsic", "increment_params", "update_index"]
