"""``Dot`` compiled as the BLAS calls stock makes, without compiling stock's general product.

PyTensor's numba ``Dot`` calls ``_gemm(x, y, out)``, whose overload handles every layout:
reversed axes, operands BLAS cannot read in place (copied), matrix-vector products through
gemv with signed increments, outputs without a unit stride. Typing and compiling it, once
per pair of input layouts in a cold process, is the largest single stock node of the
catalogue's models with a design matrix (CHANGELOG.md, "Split, scipy.special
and Dot compiled without stock's heaviest machinery").

The compact ``Dot`` is the same op (a subclass: shape inference, gradient, printing are Dot's)
whose numba function makes, for the operands a model passes, the very BLAS call stock's
``_gemm`` makes (same routine, same transpose flags, sizes, leading dimensions and
increments, called by a symbol bound to the same scipy BLAS function), in a function that
compiles in a fraction of the time. `FAST_CASES` lists what it covers and why stock makes
the same call there. Every other call (a reversed axis, an operand BLAS cannot read in
place, a dimension of 1 on the contracted or both outer axes) runs stock's own function,
compiled for the node's numba types when a call first needs it (through
`runtime.python_callbacks`): the same bits everywhere, and the same errors.

The node function is that product written into its caller as an intrinsic
(`compact.dot_ir`: the same branches and calls, no numba compile of its own); the product
compiled by numba (`_product_source`) is the intrinsic's fallback for other types.

`DOT` is its record: it is applied only where stock's implementation is the one replicated
(the digest of the stock functions' source); another PyTensor keeps the stock Dot.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba.core import types
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
from pytensor.link.utils import compile_function_src

from ptnumba_codegen.compact.blas_calls import (
    BLAS_MODULE,
    LAYOUTS,
    ROUTINES,
    SLOW_PATH_FAILED,
    bind_routines,
    emit_blas_call,
)
from ptnumba_codegen.compact.dot_ir import dot_intrinsic
from ptnumba_codegen.compact.replica import Replica, StockSource, stock_name
from ptnumba_codegen.runtime import python_callbacks

STOCK_DOT = "pytensor.tensor.math:Dot"
PRODUCTS = "pytensor.link.numba.dispatch.linalg.products:"
# PyTensor's setting the compact product reads: whether gemv's output is zeroed first
MUST_INITIALIZE_Y_GEMV = "pytensor.tensor.blas._core:must_initialize_y_gemv"
SCIPY_ROUTINES = ((BLAS_MODULE, "gemm"), (BLAS_MODULE, "gemv"))  # the calls of the product, by symbol

# The calls the compact intrinsic (`compact.dot_ir`) makes itself, and why stock's `_gemm`
# makes the same call there: each operand's (transpose, leading dimension) is stock's
# `_blas_operand`: the typed one where every array is typed C or F, else
# `_blas_operand_generic` (stock's stride normalization types every operand 'A'); `out` is a fresh C-contiguous array, which both of stock's paths write as a
# row-major C (operands swapped). No axis is reversed (a negative stride on a dimension > 1
# goes to the slow path), so stock's stride normalization changes nothing. Sizes are
# M = x rows, K = contracted, N = y columns. The compiled product (`_product_source`, for
# other types) makes the gemm and gemv calls of M, N, K >= 2 and sends the rest to the
# slow path.
FAST_CASES = {
    "empty": "M == 0 or N == 0: stock returns the fresh output as it is",
    "zero contraction": "K == 0: stock writes zeros (C[:] = 0) and returns",
    "gemm": "M, N >= 2, each operand readable in place (a unit stride and a leading "
    "dimension): gemm(not y_trans, not x_trans, N, M, K, 1, y, ldy, x, ldx, 0, out, N)",
    "gemv, column": "N == 1 (and M >= 2 where every array is typed C or F: stock swaps the "
    "operands for its row-major output first), x readable in place, y's stride along K a "
    "positive multiple of the item size or K == 1: gemv(x_trans, rows, cols, 1, x, ldx, y, incy, 0, out, 1)",
    "gemv, row": "M == 1 otherwise, y readable in place, x's stride along K a positive "
    "multiple of the item size or K == 1: gemv(not y_trans, rows, cols, 1, y, ldy, x, incx, 0, out, 1)",
}



def why_not_compact(node) -> str | None:
    """Why ``node`` (a Dot) keeps the stock function, or None if the compact one applies."""
    dtypes = {v.type.dtype for v in (*node.inputs, *node.outputs)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in ROUTINES:
        return f"dtypes {sorted(dtypes)}: the compact Dot takes one of {sorted(ROUTINES)} for inputs and output"
    return None


@intrinsic
def layout_code(typingctx, a):
    """The index in `LAYOUTS` of ``a``'s numba layout, as an int64 value (a literal argument
    would compile the shared product once per code)."""
    if not isinstance(a, types.Array):
        return None
    code = LAYOUTS.index(a.layout)

    def codegen(context, builder, sig, args):
        return context.get_constant(types.int64, code)

    return types.int64(a), codegen


@intrinsic
def blas_call(typingctx, routine, arguments):
    """``blas_call("gemm" | "gemv", (...))``: scipy's BLAS routine of the output's dtype (the
    last array) by its symbol, with the caller's arguments and alpha 1, beta 0 where
    `BLAS_ARGUMENTS` puts them."""
    if not isinstance(routine, types.StringLiteral) or not isinstance(arguments, types.BaseTuple):
        return None
    args = tuple(arguments.types)
    dtype = [a for a in args if isinstance(a, types.Array)][-1].dtype

    def codegen(context, builder, sig, llargs):
        passed = [(builder.extract_value(llargs[1], i), ty) for i, ty in enumerate(args)]
        emit_blas_call(context, builder, routine.literal_value, dtype, passed)
        return context.get_dummy_value()

    return types.none(routine, arguments), codegen


def _stock_dot(dtype: str):
    """Stock's numba function for a Dot of ``dtype`` matrices (`numba_funcify_Dot`)."""
    import pytensor.tensor as pt

    dot = stock_name(STOCK_DOT)
    x, y = pt.matrix(dtype=dtype), pt.matrix(dtype=dtype)
    node = dot()(x, y).owner
    fn, _key = numba_funcify_and_cache_key.dispatch(dot)(node.op, node)
    return fn


class SlowPath:
    """Stock's Dot for the layouts the compiled caller has: each pair compiled at its first
    call, with the node's numba types (stock chooses its code by layout), inputs read-only
    (`python_callbacks` views the caller's buffers)."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.dispatcher = None  # stock's function behind a CPython entry, made at the first call
        self.compiled: dict[tuple[int, int], object] = {}

    def __call__(self, x, y, x_layout, y_layout):
        key = (int(x_layout), int(y_layout))
        fn = self.compiled.get(key)
        if fn is None:
            if self.dispatcher is None:
                src = "def stock_dot(x, y):\n    return stock(x, y)\n"
                env = {"stock": _stock_dot(self.dtype)}
                self.dispatcher = numba.njit(compile_function_src(src, "stock_dot", env))
            nb = numba.from_dtype(np.dtype(self.dtype))
            sig = tuple(types.Array(nb, 2, LAYOUTS[code], readonly=True) for code in key)
            self.dispatcher.compile(sig)
            # the compiled signature's own entry point: an array of shape (1, n) is C- and
            # F-contiguous, and numba's dispatcher would type it 'C' whatever the caller had
            fn = self.compiled[key] = self.dispatcher.overloads[sig].entry_point
        return fn(x, y)


def slow_path_symbol(dtype: str) -> str:
    """The symbol of stock's Dot for ``dtype`` (bound by `dot_node_function`)."""
    return python_callbacks.symbol_for(("CompactDot slow path", dtype))


def _bind_slow_path(dtype: str) -> str:
    symbol = slow_path_symbol(dtype)
    slot = python_callbacks.Slot(dtype, 2)
    code = python_callbacks.Slot("int64", None)
    python_callbacks.register(symbol, SlowPath(dtype), (slot, slot, code, code, slot), 1)
    return symbol


def _product_source(dtype: str, zero_y_first: bool, slow_symbol: str) -> str:
    """The product for x and y typed 'A' (every node of a dtype shares it: compiled once
    per process), and the numba layouts stock's function would have seen."""
    item = np.dtype(dtype).itemsize
    zero = "                fill_zero(out)\n" if zero_y_first else ""
    return f"""\
def product(x, y, x_layout, y_layout):
    M = x.shape[0]
    K = x.shape[1]
    N = y.shape[1]
    out = np.empty((M, N), dtype=dt)
    if y.shape[0] != K:
        raise ValueError("gemm: operands have mismatched contraction dimensions")
    if M == 0 or N == 0:
        return out
    if K == 0:
        fill_zero(out)
        return out
    # stock's `_is_reversed` on each axis of x and y (its stride normalization)
    if not ((M > 1 and x.strides[0] < 0) or (K > 1 and x.strides[1] < 0) or (K > 1 and y.strides[0] < 0) or (N > 1 and y.strides[1] < 0)):
        if M >= 2 and N >= 2 and K >= 2:
            x_trans, ldx = blas_operand(x)
            y_trans, ldy = blas_operand(y)
            if ldx != 0 and ldy != 0:
                blas_call("gemm", (not y_trans, not x_trans, N, M, K, y, ldy, x, ldx, out, N))
                return out
        elif K >= 2 and ((N == 1 and M >= 2) or (M == 1 and N >= 2)):
            # gemv: the matrix operand times the other one's vector, along K
            column = N == 1
            matrix = x if column else y
            vector = y if column else x
            step = y.strides[0] if column else x.strides[1]
            length = M if column else N
            trans, ld = blas_operand(matrix)
            if ld != 0 and step > 0 and step % {item} == 0:
{zero}                # stock: 'T' for a row-major x, or a column-major y; rows and cols follow
                across = trans == column
                rows, cols = (K, length) if across else (length, K)
                blas_call("gemv", (across, rows, cols, matrix, ld, vector, step // {item}, out, 1))
                return out
    if call_python({slow_symbol!r}, (x, y, x_layout, y_layout, out)) != 0:
        raise RuntimeError(slow_failed)
    return out
"""


@intrinsic
def as_any_layout(typingctx, a):
    """``a`` typed with layout 'A' (the same array: numba's array struct is the same for
    every layout), so every node's product is one specialization."""
    if not isinstance(a, types.Array):
        return None
    any_layout = a.copy(layout="A")

    def codegen(context, builder, sig, args):
        return impl_ret_borrowed(context, builder, any_layout, args[0])

    return any_layout(a), codegen


# Helpers are plain (not inlined) numba functions: numba's IR inlining copies the callee's IR
# and types it again at every call site, which cost more than the whole product to compile.


@numba_basic.numba_njit
def fill_zero(out):
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = 0


@numba_basic.numba_njit
def leading_dim(unit_stride, other_stride, unit_extent, other_extent, itemsize):
    """stock's `_leading_dim`: the leading dimension BLAS walks the matrix with, or 0."""
    if unit_extent != 1 and unit_stride != itemsize:
        return 0
    if other_extent == 1:
        return max(1, unit_extent)
    if other_stride <= 0 or other_stride % itemsize != 0:
        return 0
    ld = other_stride // itemsize
    return ld if ld >= unit_extent else 0


@numba_basic.numba_njit
def blas_operand(a):
    """stock's `_blas_operand_generic` without its copy: (transpose, leading dimension), the
    dimension 0 where stock would copy (its `_column_major_ld`, then `_row_major_ld`)."""
    ld = leading_dim(a.strides[0], a.strides[1], a.shape[0], a.shape[1], a.itemsize)
    if ld:
        return False, np.int32(ld)
    ld = leading_dim(a.strides[1], a.strides[0], a.shape[1], a.shape[0], a.itemsize)
    if ld:
        return True, np.int32(ld)
    return False, np.int32(0)


@functools.cache
def _slow_path(dtype: str) -> str:
    """The slow path's symbol of ``dtype``, bound once per process."""
    return _bind_slow_path(dtype)


@functools.cache
def _product(dtype: str, zero_y_first: bool):
    """The shared product function of ``dtype`` (its symbols bound; compiled on first use)."""
    bind_routines(SCIPY_ROUTINES)
    slow_symbol = _slow_path(dtype)
    env = {
        "np": np,
        "dt": np.dtype(dtype),
        "fill_zero": fill_zero,
        "blas_operand": blas_operand,
        "blas_call": blas_call,
        "call_python": python_callbacks.call_python,
        "slow_failed": SLOW_PATH_FAILED,
    }
    src = _product_source(dtype, zero_y_first, slow_symbol)
    return numba_basic.numba_njit(compile_function_src(src, "product", env))


def dot_params(op, node) -> tuple:
    """The record's params: the dtype, and whether gemv's output is zeroed first (PyTensor's
    ``must_initialize_y_gemv``, which stock's gemv reads)."""
    return node.outputs[0].type.dtype, bool(stock_name(MUST_INITIALIZE_Y_GEMV)())


def compiled_product(op, node, **kwargs):
    """``() ->`` the intrinsic's fallback: the product compiled by numba, the operands retyped
    'A' and their layouts passed on."""
    dtype, zero_y_first = dot_params(op, node)

    def build():
        env = {"product": _product(dtype, zero_y_first), "as_any_layout": as_any_layout, "layout_code": layout_code}
        src = "def dot(x, y):\n    return product(as_any_layout(x), as_any_layout(y), layout_code(x), layout_code(y))\n"
        return numba_basic.numba_njit(compile_function_src(src, "dot", env))

    return build


def dot_node_function(dtype: str, zero_y_first: bool, fallback):
    """The product as an intrinsic (`dot_ir.dot_intrinsic`), with the slow path bound to its
    symbol first (a function loaded from numba's cache is not typed again, and its machine
    code calls it by symbol; the record binds scipy's routines)."""
    return dot_intrinsic(dtype, zero_y_first, _slow_path(dtype), fallback)


DOT = Replica(
    stock_op=STOCK_DOT,
    reason="_gemm's overload covers every layout in one large function, compiled per pair of input layouts; "
    "the compact one makes the same BLAS call for the operands models pass, and compiles stock's "
    "for the others when a call first needs it (compact.dot.FAST_CASES)",
    source=StockSource(
        functions=(
            PRODUCTS + "_gemm_impl", PRODUCTS + "_blas_operand_generic", PRODUCTS + "_blas_operand_impl",
            PRODUCTS + "_normalize_gemm_strides", PRODUCTS + "_leading_dim", PRODUCTS + "_column_major_ld",
            PRODUCTS + "_row_major_ld", PRODUCTS + "_is_reversed",
            "pytensor.link.numba.dispatch.elemwise:numba_funcify_Dot", MUST_INITIALIZE_Y_GEMV,
        ),
        digests={"c0f2f5d9ab864b37": ("3.3.8",)},
        elsewhere={
            version: "its _gemm makes matrix-vector products through _gemv and reads operands through "
            "_blas_operand, calls the compact product does not replicate"
            for version in ("3.3.6", "3.3.7")
        },
    ),
    params=dot_params,
    intrinsic=dot_node_function,
    takes=why_not_compact,
    fallback=compiled_product,
    routines=SCIPY_ROUTINES,
)


__all__ = ["DOT", "FAST_CASES", "SlowPath", "compiled_product", "dot_node_function", "dot_params", "slow_path_symbol",
           "why_not_compact"]
