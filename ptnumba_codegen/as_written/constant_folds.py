"""Nodes of an as-written copy computed from constants only: folded where the fold is exact.

The as-written pass hides a decision's cone from PyTensor's rewrites until every rewrite
that changes values has run (`freeze.InlineAsWritten`), constant folding included. A cone
whose leaves are all constants (PyMC's Gamma checks ``reciprocal(scale) > 0`` of a fixed
scale; a power transform ``pow(10, -2.0) * sign(10) > 0``) would come back as elementwise
nodes of constants only, which no later PyTensor rewrite expects: fusion makes of them a
`Composite` with no variable input, and ``local_inline_composite_constants`` fails on it
(``max() iterable argument is empty``; an exception under ``on_opt_error="raise"``, PyMC's
test configuration; a printed traceback otherwise). Stock folds the same nodes in
``canonicalize``, with numpy.

`NUMPY_FOLDS` and `LIBM_FOLDS` list the scalar ops whose fold gives the reference's bits
(numba with fastmath off, computing the graph as written at run time); `fold_exact` folds
such a node when its inputs are constants. A copy that keeps an elementwise node of constants only
(`constant_nodes`: an op or a value the table leaves out) is not put back into the graph:
it stays opaque and is compiled on its own, as the reference computes it.

Pure pytensor (no numba).
"""

from __future__ import annotations

import math

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.type import TensorType
from pytensor.tensor.rewriting.basic import unconditional_constant_folding

from ptnumba_codegen.tables import mro_lookup

_IEEE = (
    "one IEEE 754 operation, correctly rounded, or two's-complement integer arithmetic "
    "(wrapping): numpy computes it in the node's dtypes as numba's strict instruction does"
)
_PICK = "picks, compares or moves values: no rounding"


def _no_nan(values) -> bool:
    return not any(v.dtype.kind == "f" and np.isnan(v).any() for v in values)


def _no_zero_divisor(values, out_dtype) -> bool:
    # a zero divisor raises or gives an infinity by numba's error model
    return not (np.asarray(values[-1]) == 0).any()


def _sign_safe(values, out_dtype) -> bool:
    # numba's sign(-0.0) is -0.0 where numpy's is 0.0; a NaN's sign is left to each
    return _no_nan(values) and not any((v == 0).any() for v in values if v.dtype.kind == "f")


def _minmax_safe(values, out_dtype) -> bool:
    # the sign of min(+0.0, -0.0) and which NaN comes back are left to each implementation
    floats = [v for v in values if v.dtype.kind == "f"]
    return _no_nan(floats) and not (floats and all((v == 0).any() for v in values))


def _cast_safe(values, out_dtype) -> bool:
    # a float out of the integer's range is poison to LLVM's fptosi and INT_MIN to numpy
    (value,) = values
    kind = np.dtype(out_dtype).kind
    if kind not in "iu" or value.dtype.kind != "f":
        return True
    info = np.iinfo(out_dtype)
    return bool(np.isfinite(value).all() and (value >= info.min).all() and (value <= info.max).all())


# scalar op class -> (when the numpy fold is the reference's bits: a test of the constant
# input values and the output dtype, or None for always; why)
NUMPY_FOLDS = {
    **{op: (None, _IEEE) for op in (ps.Add, ps.Sub, ps.Mul, ps.Neg, ps.Abs, ps.Sqrt)},
    ps.TrueDiv: (_no_zero_divisor, _IEEE + " (not by zero)"),
    ps.Reciprocal: (_no_zero_divisor, _IEEE + " (not of zero)"),
    **{op: (None, _PICK) for op in (ps.LT, ps.GT, ps.LE, ps.GE, ps.EQ, ps.NEQ, ps.Switch, ps.Identity, ps.Second,
                                      ps.AND, ps.OR, ps.XOR, ps.Invert, ps.IsNan, ps.IsInf)},
    **{op: (None, "rounds to an integral value: exact") for op in (ps.Floor, ps.Ceil, ps.Trunc)},
    ps.Maximum: (_minmax_safe, _PICK + " (not between float zeros, not with a NaN)"),
    ps.Minimum: (_minmax_safe, _PICK + " (not between float zeros, not with a NaN)"),
    ps.Sign: (_sign_safe, "+1, -1 or an integer 0 (a float zero's sign and a NaN left out)"),
    ps.Cast: (_cast_safe, "IEEE conversion, round to nearest (a float only within the integer's range)"),
}

# scalar op class -> the Python function calling the same libm function the reference
# calls for a float64 result (numba lowers these to calls of glibc's ``exp``, ``log``, ...;
# CPython's ``math`` calls the same functions and raises where they would signal, and a
# raise leaves the node unfolded)
LIBM_FOLDS = {
    ps.Exp: math.exp,
    ps.Log: math.log,
    ps.Log1p: math.log1p,
    ps.Expm1: math.expm1,
    ps.Pow: math.pow,  # PowAsWritten too: libm's pow of the operands' values
    ps.Sin: math.sin,
    ps.Cos: math.cos,
    ps.Tanh: math.tanh,
}


def _values(node) -> list[np.ndarray]:
    return [np.asarray(v.data) for v in node.inputs]


def _libm_fold(node, function):
    out = node.outputs[0]
    if out.type.dtype != "float64" or not all(v.type.dtype == "float64" or v.type.dtype[0] in "iub"
                                               for v in node.inputs):
        return None
    values = np.broadcast_arrays(*(v.astype("float64") for v in _values(node)))
    try:
        flat = [function(*(float(v.flat[i]) for v in values)) for i in range(values[0].size)]
    except (ValueError, OverflowError):
        return None
    data = np.asarray(flat, dtype="float64").reshape(values[0].shape)
    return [TensorType("float64", shape=data.shape).make_constant(data)]


@node_rewriter([Elemwise])
def fold_exact(fgraph, node):
    """An elementwise node of constants whose fold `NUMPY_FOLDS` or `LIBM_FOLDS` admits: its constant."""
    if len(node.outputs) != 1 or not node.inputs or not all(isinstance(v, Constant) for v in node.inputs):
        return None
    scalar_op = node.op.scalar_op
    libm = mro_lookup(LIBM_FOLDS, scalar_op)
    if libm is not None:
        return _libm_fold(node, libm)
    row = mro_lookup(NUMPY_FOLDS, scalar_op)
    if row is None:
        return None
    when, _why = row
    if when is not None and not when(_values(node), node.outputs[0].type.dtype):
        return None
    return unconditional_constant_folding.fn(fgraph, node)


def constant_nodes(graph) -> list:
    """The elementwise nodes of ``graph`` whose inputs are all constants."""
    return [
        node
        for node in graph.toposort()
        if isinstance(node.op, Elemwise) and node.inputs and all(isinstance(v, Constant) for v in node.inputs)
    ]
