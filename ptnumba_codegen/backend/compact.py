"""Stock ops swapped for compact versions: the same op, a numba function that compiles in a
fraction of the time (`passes.compact_checks` swaps them, after every PyTensor rewrite).

Each row names the stock op class (looked up by exact type), its compact subclass, why the
stock numba function costs more to compile, and, where the compact function does not cover
every node of the class, which nodes it takes (``why_not``: None for a node it takes, else
the reason the node keeps the stock op).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytensor.tensor.basic import Alloc, ExtractDiag, Join, MakeVector, ScalarFromTensor, Split, TensorFromScalar
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.extra_ops import CumOp
from pytensor.tensor.math import Dot
from pytensor.tensor.rewriting.scalarize import ScalarizedJoin, ScalarSubtensor
from pytensor.tensor.shape import Reshape, Shape_i, SpecifyShape
from pytensor.tensor.linalg import Cholesky, SolveTriangular
from pytensor.tensor.subtensor import AdvancedIncSubtensor, AdvancedSubtensor, IncSubtensor, Subtensor

from ptnumba_codegen.backend.checks import CompactSpecifyShape, CompactSplit
from ptnumba_codegen.backend import (
    compact_advanced,
    compact_arrays,
    compact_cholesky,
    compact_cumop,
    compact_diag,
    compact_dot,
    compact_fill,
    compact_join,
    compact_reshape,
    compact_solve,
    compact_subtensor,
)
from ptnumba_codegen.backend.compact_advanced import CompactAdvancedIncSubtensor, CompactAdvancedSubtensor
from ptnumba_codegen.backend.compact_increments import CompactIncSubtensor
from ptnumba_codegen.backend.compact_cholesky import CompactCholesky
from ptnumba_codegen.backend.compact_cumop import CompactCumOp
from ptnumba_codegen.backend.compact_arrays import (
    CompactMakeVector,
    CompactScalarFromTensor,
    CompactScalarizedJoin,
    CompactShape_i,
    CompactTensorFromScalar,
)
from ptnumba_codegen.backend.compact_diag import CompactExtractDiag
from ptnumba_codegen.backend.compact_dot import CompactDot
from ptnumba_codegen.backend.compact_fill import CompactAlloc
from ptnumba_codegen.backend.compact_join import CompactJoin
from ptnumba_codegen.backend.compact_reshape import CompactReshape
from ptnumba_codegen.backend.compact_solve import CompactSolveTriangular
from ptnumba_codegen.backend.compact_subtensor import CompactScalarSubtensor, CompactSubtensor
from ptnumba_codegen.backend.compact_views import CompactDimShuffle


@dataclass(frozen=True)
class Compact:
    """One row of `COMPACT`."""

    op_class: type
    reason: str
    why_not: Callable | None = None  # node -> None (compact) or why it keeps the stock op
    make: Callable | None = None  # node -> the compact op (default: the compact class with the node's props)


COMPACT = {
    SpecifyShape: Compact(
        CompactSpecifyShape,
        "its assert formats an f-string: numba compiles int-to-str and unicode concatenation once a process",
    ),
    Split: Compact(
        CompactSplit,
        "its sum check formats an f-string (int-to-str, unicode concatenation), "
        "and it slices through np.cumsum and np.split (two more overloads to compile)",
    ),
    Dot: Compact(
        CompactDot,
        "_gemm's overload covers every layout in one large function, compiled per pair of input layouts; "
        "the compact one makes the same BLAS call for the operands models pass, and compiles stock's "
        "for the others when a call first needs it (backend.compact_dot.FAST_CASES)",
        compact_dot.why_not_compact,
    ),
    Alloc: Compact(
        CompactAlloc,
        "a fill by one value is numba's slice assignment, whose error path formats both shapes "
        "(int-to-str, unicode) though a scalar cannot mismatch; the compact one loops",
        compact_fill.why_not_compact,
    ),
    DimShuffle: Compact(
        CompactDimShuffle,
        "its view goes through numba's as_strided (an overload compiling two helpers) or a loop "
        "of tuple_setitem behind an overload of its own; the compact one reads the axes the node "
        "fixes in one intrinsic, or calls as_strided's own reshape_unchecked",
    ),
    MakeVector: Compact(
        CompactMakeVector,
        "np.array of a list: numba compiles the list, np.array's overload and np.empty's behind it, "
        "per argument types; the compact one is an intrinsic storing the scalars into an array from "
        "np.empty's own allocation inside its caller",
        compact_arrays.why_not_compact,
    ),
    TensorFromScalar: Compact(
        CompactTensorFromScalar,
        "np.array of a scalar: np.array's overload, compiled per dtype; the compact one is an "
        "intrinsic storing the scalar into a 0-d array from np.empty's own allocation inside its caller",
    ),
    Shape_i: Compact(
        CompactShape_i,
        "np.asarray(np.shape(x)[i]): a numba function of its own per axis and input type, with "
        "np.asarray's overload compiled behind it; the compact one is an intrinsic storing the "
        "dimension into a 0-d array from np.empty's own allocation inside its caller",
    ),
    ScalarFromTensor: Compact(
        CompactScalarFromTensor,
        "a numba function of its own per dtype (x[()]), one more pipeline and LLVM module; the "
        "compact one is an intrinsic loading the item inside its caller (lowering.node_intrinsics)",
    ),
    ScalarizedJoin: Compact(
        CompactScalarizedJoin,
        "fills np.empty(length, dtype): np.empty's overload, compiled per dtype; the compact one "
        "is an intrinsic filling an array from np.empty's own allocation inside its caller",
        make=compact_arrays.compact_scalarized_join,
    ),
    Subtensor: Compact(
        CompactSubtensor,
        "a numba function of its own per index pattern and types (x[indices], np.asarray), one more "
        "pipeline and LLVM module; the compact one is an intrinsic making the same view with numba's "
        "own typing and basic indexing inside its caller (lowering.node_intrinsics)",
        compact_subtensor.why_not_compact,
    ),
    Join: Compact(
        CompactJoin,
        "a numba function of its own per axis and looped dimensions, which compiles np.empty's overload "
        "besides; the compact one is an intrinsic inside its caller making stock's checks, allocation "
        "and copies with numba's own pieces",
        compact_join.why_not_compact,
    ),
    ScalarSubtensor: Compact(
        CompactScalarSubtensor,
        "an element read as a native scalar: stock's Subtensor function (x[indices]) compiled per "
        "index pattern and types; the compact one is Subtensor's intrinsic returning the element",
        compact_subtensor.why_not_compact_scalar,
        make=compact_subtensor.compact_scalar_subtensor,
    ),
    IncSubtensor: Compact(
        CompactIncSubtensor,
        "a numba function of its own per index pattern and types, which compiles np.copy's and "
        "np.broadcast_to's implementations (_can_broadcast, np.asarray) besides; the compact one is "
        "an intrinsic inside its caller making stock's copy, view, _can_broadcast's test and loop with "
        "numba's own pieces (its fallback: stock's source with that test spelled out)",
    ),
    AdvancedSubtensor: Compact(
        CompactAdvancedSubtensor,
        "a numba function of its own per index pattern and types (x[idx], x[rows, cols]), which compiles "
        "np.broadcast_shapes', np.broadcast_to's and np.empty's overloads besides; the compact one is an "
        "intrinsic inside its caller making stock's index broadcast, allocation and copy loop with numba's "
        "own pieces",
        compact_advanced.why_not_compact,
    ),
    AdvancedIncSubtensor: Compact(
        CompactAdvancedIncSubtensor,
        "the same for a scatter (a gradient's inc_subtensor of x[idx], a packed matrix's set), which "
        "compiles x.copy()'s and np.broadcast_to's implementations besides; the compact one is an "
        "intrinsic making stock's copy, _can_broadcast's test and loop in index order (a repeated index "
        "adds up) with numba's own pieces",
        compact_advanced.why_not_compact,
    ),
    ExtractDiag: Compact(
        CompactExtractDiag,
        "np.diag(x, k) (then .copy()): a numba function of its own per offset and types, with "
        "np.diag's overload compiled behind it; the compact one is an intrinsic inside its caller "
        "making np.diag's allocation and copy with numba's own pieces",
        compact_diag.why_not_compact,
    ),
    Reshape: Compact(
        CompactReshape,
        "np.reshape(np.ascontiguousarray(x), to_fixed_tuple(shape, ndim)): a numba function of its own per "
        "ndim and types, with np.reshape's and np.ascontiguousarray's overloads compiled behind it; the "
        "compact one is an intrinsic inside its caller making the same calls with numba's own lowering",
        compact_reshape.why_not_compact,
    ),
    SolveTriangular: Compact(
        CompactSolveTriangular,
        "_solve_triangular's overload: a numba function per pair of operand types with a dozen overloads "
        "behind it (zeros_like, full_like, the work-array copies, the trsm wrapper and its object-mode "
        "pointer lookup); the compact one is an intrinsic inside its caller making the same checks, "
        "copies and trsm call (by symbol) with numba's own pieces",
        compact_solve.why_not_compact,
    ),
    Cholesky: Compact(
        CompactCholesky,
        "_cholesky's overload: a numba function per input type with the work-array helpers, np.full_like "
        "and the potrf wrapper and its object-mode pointer lookup behind it; the compact one is an intrinsic "
        "inside its caller making the same copy, potrf call (by symbol) and zeroing with numba's own pieces",
        compact_cholesky.why_not_compact,
    ),
    CumOp: Compact(
        CompactCumOp,
        "np.cumsum(x) (np.cumprod): a numba function of its own per mode and type, with the overload's "
        "intrinsic compiled behind it; the compact one is an intrinsic inside its caller making the same "
        "allocation and running sum or product in stock's order with numba's own pieces",
        compact_cumop.why_not_compact,
    ),
}


# compact class -> the stock class it stands in for
STOCK_CLASS = {row.op_class: stock for stock, row in COMPACT.items()}


def compact_op(node):
    """The compact version of ``node``'s op (`COMPACT`), with the same props, or None where
    there is none or its row leaves the node to the stock op."""
    row = COMPACT.get(type(node.op))
    if row is None or (row.why_not is not None and row.why_not(node) is not None):
        return None
    if row.make is not None:
        return row.make(node)
    return row.op_class(**{name: getattr(node.op, name) for name in node.op.__props__})


__all__ = ["COMPACT", "STOCK_CLASS", "Compact", "compact_op"]
