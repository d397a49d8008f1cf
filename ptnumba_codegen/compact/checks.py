"""Ops whose stock numba function checks its input with a formatted message, compiled so
that the check costs less to compile than it does.

PyTensor's numba ``SpecifyShape`` asserts each dimension with an f-string message
(``f'SpecifyShape: dim {i} of input has shape {x.shape[i]}, expected {s.item()}.'``), and
``Split`` raises ``f"Split sizes sum to {...}; expected {...}"``. Typing and compiling either
pulls numba's integer-to-string and unicode machinery into the process, once in every
process that compiles one (a cold compile; a warm one loads the function from PyTensor's
cache). Most of the catalogue's core models have a ``SpecifyShape``; ``Split`` comes with
the gradient of a ``Join`` (time series, state-space models).

`CompactSpecifyShape` is the same op (a subclass: every ``isinstance`` check, the view, the
shape inference and the gradient are SpecifyShape's) whose numba function compares the
same integers and, on a mismatch, keeps the three integers in a record (`MISMATCH_SYMBOL`)
and raises `SpecifyShapeError`, whose constructor reads them: the exception formats the
stock message in Python, so ``str(err)`` is the stock text and ``except AssertionError``
still catches it. Its node function is a node intrinsic lowered into the graph's function
(`checked_shape`, `compact.node_intrinsics`: no numba compile of its own; the generated
function is its per-node fallback). `CompactSplit` is ``Split`` the same way: the same checks in the same order
with the same messages (`SplitSizesError`, a ``ValueError``, for the sum), and the same views,
sliced in generated source rather than through ``np.cumsum`` and ``np.split`` (two more numba
overloads a cold process compiles). `SPECIFY_SHAPE` and `SPLIT` are their records
(`compact.table`), `passes.swap_compact` puts them in the graph (CHANGELOG.md, "Shape
checks compiled without string formatting", "Split, scipy.special and Dot compiled without
stock's heaviest machinery").
"""

from __future__ import annotations

import ctypes
import operator

from llvmlite import binding as llvm
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic, overload
from numba.np import arrayobj

from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.utils import compile_function_src
from pytensor.tensor.type_other import NoneTypeT

from ptnumba_codegen.compact import node_intrinsics as ni
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR, Replica, StockSource
from ptnumba_codegen.compact.subtensor import getitem_type, index_into, type_basic_index


# The last mismatch a compact check found: (dim, actual, expected); dim is `SPLIT_SUM` for a
# split whose sizes do not sum to its axis' length. The compiled check writes
# it right before it raises; `SpecifyShapeError` reads it when numba's wrapper creates the
# exception, in the same call under the GIL. (numba's runtime exception arguments would carry
# the integers themselves, but a function loaded from PyTensor's numba cache fails to box
# them: "Error creating Python tuple from runtime exception arguments".) Referred to by
# symbol name, so cached code finds it in every process that imports this module, which
# unpickling or building a `CompactSpecifyShape` does.
MISMATCH_SYMBOL = "ptnumba_codegen_shape_mismatch"
_MISMATCH = (ctypes.c_int64 * 3)()
llvm.add_symbol(MISMATCH_SYMBOL, ctypes.addressof(_MISMATCH))
SPLIT_SUM = -1  # the record's first field for `SplitSizesError` (a SpecifyShape's dim is >= 0)
SPLIT_LENGTH_MESSAGE = "Length of splits is not equal to n_splits"  # stock's
SPLIT_NEGATIVE_MESSAGE = "Split sizes cannot be negative"  # stock's


def record_mismatch(dim, actual, expected):
    """Keep a mismatch for `SpecifyShapeError` (Python; compiled, `_record_mismatch_ir`)."""
    _MISMATCH[0], _MISMATCH[1], _MISMATCH[2] = int(dim), int(actual), int(expected)


@overload(record_mismatch)
def _record_mismatch_overload(dim, actual, expected):
    return lambda dim, actual, expected: _record_mismatch_ir(dim, actual, expected)


# The generated checks call the intrinsic itself: through the overload, numba compiled the
# overload's lambda once per argument types in every cold process.
@intrinsic
def _record_mismatch_ir(typingctx, dim, actual, expected):
    def codegen(context, builder, signature, args):
        record_mismatch_ir(context, builder, list(zip(args, signature.args, strict=True)))
        return context.get_dummy_value()

    return types.none(dim, actual, expected), codegen


def record_mismatch_ir(context, builder, typed_values) -> None:
    """Store ``(dim, actual, expected)`` (LLVM values with their numba types) in the record."""
    i64 = ir.IntType(64)
    record_type = ir.ArrayType(i64, len(_MISMATCH))
    record = builder.module.globals.get(MISMATCH_SYMBOL) or ir.GlobalVariable(builder.module, record_type, MISMATCH_SYMBOL)
    for i, (value, ty) in enumerate(typed_values):
        value = context.cast(builder, value, ty, types.int64)
        builder.store(value, builder.gep(record, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), i)]))


class SpecifyShapeError(AssertionError):
    """A dimension differs from the one ``specify_shape`` names; ``args`` are
    ``(dim, actual, expected)``, ``str()`` the message of PyTensor's numba backend.

    Made from a message too: PyTensor's ``raise_with_op`` (``exception_verbosity`` medium
    or high, PyMC's tests) raises ``type(err)(str(err) + details)``; ``str()`` is then that
    message, as for stock's ``AssertionError``."""

    def __init__(self, dim, *rest):
        if not rest and isinstance(dim, int) and _MISMATCH[0] == dim:  # raised by a compiled check: its record
            rest = (_MISMATCH[1], _MISMATCH[2])
        super().__init__(dim, *rest)

    def __str__(self):
        if len(self.args) == 3:
            return "SpecifyShape: dim %d of input has shape %d, expected %d." % self.args
        if len(self.args) == 1 and isinstance(self.args[0], int):  # no record (not from a compiled check)
            return "SpecifyShape: dim %d of input does not have the specified shape." % self.args
        return super().__str__()


class SplitSizesError(ValueError):
    """A split's sizes do not sum to the length of its axis; ``args`` are ``(total,
    expected)``, ``str()`` the message of PyTensor's numba backend."""

    def __init__(self, *args):
        if not args and _MISMATCH[0] == SPLIT_SUM:  # raised by a compiled split: its record
            args = (_MISMATCH[1], _MISMATCH[2])
        super().__init__(*args)

    def __str__(self):
        if len(self.args) == 2:
            return "Split sizes sum to %d; expected %d" % self.args
        return super().__str__()


def checked_dims(op, node) -> tuple:
    """The record's params: which dims the node checks (``(checked,)``, one bool per dim)."""
    return (tuple(not isinstance(dim.type, NoneTypeT) for dim in node.inputs[1:]),)


def specify_shape_function(op, node, **kwargs):
    """``() ->`` the generated function (`checked_shape`'s fallback): the same checks, raising
    `SpecifyShapeError` after `record_mismatch`, compiled by numba."""
    names = [f"shape_{i}" for i in range(len(node.inputs) - 1)]
    checks = [
        f"    if x.shape[{i}] != {name}.item():\n"
        f"        record_mismatch({i}, x.shape[{i}], {name}.item())\n"
        f"        raise SpecifyShapeError({i})\n"
        for i, (dim, name) in enumerate(zip(node.inputs[1:], names, strict=True))
        if not isinstance(dim.type, NoneTypeT)
    ]
    src = f"def specify_shape(x, {', '.join(names)}):\n{''.join(checks)}    return x\n"

    def stock():
        env = {"SpecifyShapeError": SpecifyShapeError, "record_mismatch": _record_mismatch_ir}
        return numba_basic.numba_njit(compile_function_src(src, "specify_shape", env))

    return stock


def checked_shape(checked: tuple[bool, ...], stock):
    """``specify_shape(x, *shape)`` lowered into the graph's function (`node_intrinsics`): for
    each checked dim in order, ``x.shape[i] != shape_i.item()`` records the three integers
    and raises ``SpecifyShapeError(i)``, as the generated function does; then ``x``."""

    def typer(typingctx, arg_types):
        x, *shape = arg_types
        if not isinstance(x, types.Array) or x.ndim != len(checked):
            return None
        for ty, check in zip(shape, checked, strict=True):
            element = ty.dtype if isinstance(ty, types.Array) and ty.ndim == 0 else ty
            if check and not isinstance(element, types.Integer):
                return None

        def emit(context, builder, args):
            array = ni.array_struct(context, builder, x, args[0])
            sizes = cgutils.unpack_tuple(builder, array.shape)
            for i, (ty, value, check) in enumerate(zip(shape, args[1:], checked, strict=True)):
                if not check:
                    continue
                expected, expected_type = ni.element(context, builder, ty, value)
                wide = context.cast(builder, expected, expected_type, types.int64)
                with builder.if_then(builder.icmp_signed("!=", sizes[i], wide), likely=False):
                    dim = context.get_constant(types.int64, i)
                    record_mismatch_ir(context, builder, [(dim, types.int64), (sizes[i], types.intp), (expected, expected_type)])
                    context.call_conv.return_user_exc(builder, SpecifyShapeError, (i,))
            return impl_ret_borrowed(context, builder, x, args[0])

        return x(*arg_types), emit

    return ni.node_intrinsic("specify_shape", len(checked) + 1, typer, stock)


def split_params(op, node) -> tuple:
    """The record's params: the number of parts, the axis, the input's rank."""
    return op.len_splits, op.axis, node.inputs[0].type.ndim


def split_function(op, node, **kwargs):
    """``() ->`` the generated function (`split_views`' fallback): stock's ``split(x, sizes)``,
    the checks in its order, the views ``np.split`` returns (``x[full slices, start:stop on
    the axis]``, typed alike), compiled by numba."""
    n, axis, ndim = split_params(op, node)

    def view(start, stop):
        return "x[" + ", ".join(f"{start}:{stop}" if k == axis else ":" for k in range(ndim)) + "]"

    lines = [
        "def split(x, sizes):",
        f"    if len(sizes) != {n}:",
        f"        raise ValueError({SPLIT_LENGTH_MESSAGE!r})",
        f"    for k in range({n}):",
        "        if sizes[k] < 0:",
        f"            raise ValueError({SPLIT_NEGATIVE_MESSAGE!r})",
        "    s0 = 0",
        *(f"    s{k + 1} = s{k} + sizes[{k}]" for k in range(n)),
        f"    if s{n} != x.shape[{axis}]:",
        f"        record_mismatch({SPLIT_SUM}, s{n}, x.shape[{axis}])",
        "        raise SplitSizesError()",
        f"    return ({''.join(view(f's{k}', f's{k + 1}') + ', ' for k in range(n))})",
    ]

    def stock():
        env = {"SplitSizesError": SplitSizesError, "record_mismatch": _record_mismatch_ir}
        return numba_basic.numba_njit(compile_function_src("\n".join(lines) + "\n", "split", env))

    return stock


def split_views(n: int, axis: int, ndim: int, stock):
    """``split(x, sizes)`` lowered into the graph's function (`node_intrinsics`), as the
    generated function above does it: ``len(sizes) != n`` and a negative size raise its
    ``ValueError``s in its order; the running sums ``s0 = 0, s{k+1} = s{k} + sizes[k]`` at
    numba's type for them (int64: signed sizes only); a total other than the axis' length
    records the mismatch and raises `SplitSizesError`; then the tuple of views
    ``x[..., s{k}:s{k+1}, ...]``, typed and made by numba's own basic indexing
    (`compact.subtensor.index_into`)."""
    # the view of one part: full slices, and the slice of two running sums on the axis
    idx_list = tuple(slice(0, 1, None) if k == axis else slice(None, None, None) for k in range(ndim))

    def typer(typingctx, arg_types):
        x, sizes = arg_types
        if not isinstance(x, types.Array) or x.ndim != ndim or ndim == 0:
            return None
        if not (isinstance(sizes, types.Array) and sizes.ndim == 1 and isinstance(sizes.dtype, types.Integer)):
            return None
        total = typingctx.resolve_function_type(operator.add, (types.int64, sizes.dtype), {})
        if not sizes.dtype.signed or total is None or total.return_type != types.int64:
            return None
        index = type_basic_index(typingctx, idx_list, (types.int64, types.int64))
        view_type = None if index is None else getitem_type(typingctx, x, index)
        if not isinstance(view_type, types.Array):
            return None
        out_type = types.BaseTuple.from_types([view_type] * n)

        def emit(context, builder, args):
            sz = ni.array_struct(context, builder, sizes, args[1])
            (length,) = cgutils.unpack_tuple(builder, sz.shape, 1)
            with builder.if_then(builder.icmp_signed("!=", length, ni.intp(context, n)), likely=False):
                context.call_conv.return_user_exc(builder, ValueError, (SPLIT_LENGTH_MESSAGE,))
            parts = [ni.load(context, builder, sizes, sz, [ni.intp(context, k)]) for k in range(n)]
            zero = context.get_constant(sizes.dtype, 0)
            for part in parts:
                with builder.if_then(builder.icmp_signed("<", part, zero), likely=False):
                    context.call_conv.return_user_exc(builder, ValueError, (SPLIT_NEGATIVE_MESSAGE,))
            add = context.get_function(operator.add, total)
            sums = [context.get_constant(types.int64, 0)]
            for part in parts:
                sums.append(add(builder, [sums[-1], context.cast(builder, part, sizes.dtype, total.args[1])]))
            axis_length = cgutils.unpack_tuple(builder, ni.array_struct(context, builder, x, args[0]).shape, ndim)[axis]
            with builder.if_then(builder.icmp_signed("!=", sums[n], axis_length), likely=False):
                record_mismatch_ir(context, builder, [(context.get_constant(types.int64, SPLIT_SUM), types.int64),
                                                      (sums[n], types.int64), (axis_length, types.intp)])
                context.call_conv.return_user_exc(builder, SplitSizesError, ())
            views = []
            for k in range(n):
                ary, data, shape, strides = index_into(context, builder, x, args[0], index, [sums[k], sums[k + 1]])
                views.append(arrayobj.make_view(context, builder, x, ary, view_type, data, shape, strides)._getvalue())
            return impl_ret_borrowed(context, builder, out_type, context.make_tuple(builder, out_type, views))

        return out_type(*arg_types), emit

    return ni.node_intrinsic("split", 2, typer, stock)


SPECIFY_SHAPE = Replica(
    stock_op="pytensor.tensor.shape:SpecifyShape",
    reason="its assert formats an f-string: numba compiles int-to-str and unicode concatenation once a process",
    source=StockSource(
        functions=("pytensor.link.numba.dispatch.shape:numba_funcify_SpecifyShape",),
        digests={"25228f6374f3a3c5": SUPPORTED_PYTENSOR},
    ),
    params=checked_dims,
    intrinsic=checked_shape,
    fallback=specify_shape_function,
)

SPLIT = Replica(
    stock_op="pytensor.tensor.basic:Split",
    reason="its sum check formats an f-string (int-to-str, unicode concatenation), "
    "and it slices through np.cumsum and np.split (two more overloads to compile)",
    source=StockSource(
        functions=("pytensor.link.numba.dispatch.tensor_basic:numba_funcify_Split",),
        digests={"b0da97a5b6da75e7": SUPPORTED_PYTENSOR},
    ),
    params=split_params,
    intrinsic=split_views,
    fallback=split_function,
)


__all__ = [
    "MISMATCH_SYMBOL",
    "SPECIFY_SHAPE",
    "SPLIT",
    "SPLIT_LENGTH_MESSAGE",
    "SPLIT_NEGATIVE_MESSAGE",
    "SPLIT_SUM",
    "SpecifyShapeError",
    "SplitSizesError",
    "checked_dims",
    "checked_shape",
    "record_mismatch",
    "specify_shape_function",
    "split_function",
    "split_params",
    "split_views",
]
