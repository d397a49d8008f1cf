"""Decisions that read a producer's operand instead of the producer: the same outcome.

PyMC's ``logpow(x, m)`` decides ``eq(log(x), -inf)``, and its Gamma writes ``x`` as
``pow(scale, -1)``; the copy as written reaches ``eq(-1 * log(pow(v, -1)), -inf)``. The
log is there for the decision only: the rest of the graph computes its own log of the
rewritten ``x``. ``-1 * y == -inf`` is ``y == +inf`` and ``log(w) == +inf`` is ``w ==
+inf``, for every value, NaN included (`analysis.robust.MOVED_DECISIONS`, each row with
its reason): the decision can compare ``pow(v, -1)`` with ``+inf`` and the copy computes
no log (nor product). The outcome is the reference's bit for bit; only values no output
reads are no longer computed (a producer with other readers stays for them).

Applied once every copy is put back (`freeze.InlineAsWritten`, from the copies' outputs:
across copies too, a decision frozen alone reading a shared cone's log) and in an opaque
copy's own compilation (`lowering.INNER_REWRITES`).
"""

from __future__ import annotations

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.scalar import basic as ps
import pytensor.tensor as pt
from pytensor.tensor.elemwise import Elemwise

from ptnumba_codegen.analysis.robust import DECISION_COMPARISONS, SWAPPED, moved_decision

# comparison -> the scalar op computing it
COMPARISON_OPS = {"lt": ps.lt, "le": ps.le, "gt": ps.gt, "ge": ps.ge, "eq": ps.eq, "ne": ps.neq}
# dtypes the rows hold for (IEEE binary32/binary64 and glibc's log/logf)
FLOAT_DTYPES = ("float32", "float64")


def _uniform_constant(var):
    """The one value every element of a constant holds, or None."""
    if not isinstance(var, Constant):
        return None
    data = np.asarray(var.data)
    if data.size == 0 or data.dtype.kind not in "fiu":
        return None
    first = data.flat[0]
    if not (np.all(data == first) or (data.dtype.kind == "f" and np.all(np.isnan(data)))):
        return None
    return float(first)


def _float(var) -> bool:
    return str(getattr(var.type, "dtype", "")) in FLOAT_DTYPES


def _step(compared, op: str, c: float):
    """One move: (operand, comparison, constant, why) or None."""
    node = compared.owner
    if node is None or not isinstance(node.op, Elemwise) or len(node.outputs) != 1:
        return None
    if not (_float(compared) and all(_float(v) or _uniform_constant(v) is not None for v in node.inputs)):
        return None
    operands = [_uniform_constant(v) for v in node.inputs]
    found = moved_decision(node.op.scalar_op, op, c, operands)
    if found is None:
        return None
    k, op2, c2, why = found
    operand = node.inputs[k]
    if not _float(operand):
        return None
    return operand, op2, c2, why


@node_rewriter([Elemwise])
def decide_on_operands(fgraph, node):
    """A comparison of a producer's output with a constant, moved down the chain of
    producers `analysis.robust.moved_decision` knows: the comparison of the last operand
    (see the module docstring)."""
    name = DECISION_COMPARISONS.get(type(node.op.scalar_op))
    if name is None or len(node.inputs) != 2:
        return None
    left, right = node.inputs
    if _uniform_constant(right) is not None and _uniform_constant(left) is None:
        compared, const, op = left, right, name
    elif _uniform_constant(left) is not None and _uniform_constant(right) is None:
        compared, const, op = right, left, SWAPPED[name]
    else:
        return None
    c = _uniform_constant(const)
    moved = False
    while (step := _step(compared, op, c)) is not None:
        compared, op, c, _why = step
        moved = True
    if not moved:
        return None
    # the constant's own dtype holds -c, 0 and +-inf if it is a float; an integer one is
    # compared in a float dtype anyway (float64 holds every value it compared)
    dtype = const.type.dtype if const.type.dtype in FLOAT_DTYPES else "float64"
    out = Elemwise(COMPARISON_OPS[op])(compared, pt.constant(np.full(np.shape(const.data), c, dtype=dtype)))
    if out.type != node.outputs[0].type:
        return None
    return [out]
