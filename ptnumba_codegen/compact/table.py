"""`COMPACT`: every compact op, by the name of the stock op class it stands in for.

Each row is a `Replica` (`compact.replica`), defined in the module that lowers it; this table
only lists them. `rows_off` says which are off in this process, and why: a PyTensor whose
source differs from the one a row replicates, or lacks a name it needs, keeps that row's
stock op (`compact.replica.why_off`).
"""

from __future__ import annotations

from ptnumba_codegen.compact import advanced, arrays, checks, cholesky, cumop, diag, dot, fill, increments, join
from ptnumba_codegen.compact import reshape, solve, subtensor, views
from ptnumba_codegen.compact.replica import Replica, why_off

COMPACT: dict[str, Replica] = {
    replica.name: replica
    for replica in (
        checks.SPECIFY_SHAPE,
        checks.SPLIT,
        dot.DOT,
        fill.ALLOC,
        views.DIMSHUFFLE,
        arrays.MAKE_VECTOR,
        arrays.TENSOR_FROM_SCALAR,
        arrays.SHAPE_I,
        arrays.SCALAR_FROM_TENSOR,
        arrays.SCALARIZED_JOIN,
        subtensor.SUBTENSOR,
        join.JOIN,
        subtensor.SCALAR_SUBTENSOR,
        increments.INC_SUBTENSOR,
        advanced.ADVANCED_SUBTENSOR,
        advanced.ADVANCED_INC_SUBTENSOR,
        diag.EXTRACT_DIAG,
        reshape.RESHAPE,
        solve.SOLVE_TRIANGULAR,
        cholesky.CHOLESKY,
        cumop.CUMOP,
    )
}


def rows_off() -> dict[str, str]:
    """Each row that is off in this process -> why (every row's stock source looked up)."""
    return {name: why for name, replica in COMPACT.items() if (why := why_off(replica)) is not None}


def describe_rows_off() -> str:
    """'compact ops off (stock's kept): Dot (why); Cholesky (why)', or '' when every row is on."""
    off = rows_off()
    if not off:
        return ""
    return "compact ops off (stock's kept): " + "; ".join(f"{name} ({why})" for name, why in off.items())


__all__ = ["COMPACT", "describe_rows_off", "rows_off"]
