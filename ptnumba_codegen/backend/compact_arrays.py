"""New small arrays built without numpy's constructor overloads.

PyTensor's numba ``MakeVector`` returns ``np.array([x0[()], x1[()], ...], dtype=dtype)``,
``TensorFromScalar`` ``np.array(x)`` and ``ScalarizedJoin`` (a gradient's vector of
scalars and vectors) fills ``np.empty(length, dtype=dtype)``. numba compiles ``np.array``'s
overload (and for a list, a list and ``np.empty``'s overload behind it) and ``np.empty``'s
in every cold process, once per argument types: shape vectors of int64, a gradient's
scalars, a scalar's 0-d array.

`CompactMakeVector`, `CompactTensorFromScalar` and `CompactScalarizedJoin` are the same ops
(subclasses: shape inference, gradients and printing are the stock ones'). Their numba
functions allocate the array with ``np.empty``'s own intrinsic (`numpy_empty_nd`, the whole
of that overload's body: the same allocation, checks and numba type, 'C' layout) and store
the elements as stock's do; an element is stored as ``np.array`` stores it, converted to the
array's dtype, which for these nodes is the element's own (`why_not_compact`). The same
values and types as stock's (tests/test_compact_arrays.py).
"""

from __future__ import annotations

import copy

import numpy as np
from numba.core import types
from numba.np.arrayobj import numpy_empty_nd
from numba.np.numpy_support import from_dtype
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key
from pytensor.link.utils import compile_function_src
from pytensor.scalar.basic import ScalarType
from pytensor.tensor.basic import MakeVector, TensorFromScalar
from pytensor.tensor.rewriting.scalarize import ScalarizedJoin
from pytensor.tensor.type import TensorType

from ptnumba_codegen.backend.dispatch import cache_key


class CompactMakeVector(MakeVector):
    """``MakeVector`` whose numba function stores its scalars into ``np.empty``'s array."""


class CompactTensorFromScalar(TensorFromScalar):
    """``TensorFromScalar`` whose numba function stores the scalar into a 0-d array."""


class CompactScalarizedJoin(ScalarizedJoin):
    """``ScalarizedJoin`` whose numba function fills an array from ``np.empty``'s intrinsic."""


# Printed (dprint, str) as the ops they replace, like the other compact ops; pickled by
# their qualified names.
CompactMakeVector.__name__ = "MakeVector"
CompactTensorFromScalar.__name__ = "TensorFromScalar"
CompactScalarizedJoin.__name__ = "ScalarizedJoin"


def compact_scalarized_join(node):
    """The compact op for a ``ScalarizedJoin`` node: a copy of its op (an OpFromGraph: the
    same inner graph, built once by the rewrite) of the compact class."""
    op = copy.copy(node.op)
    op.__class__ = CompactScalarizedJoin
    return op


def why_not_compact(node) -> str | None:
    """Why ``node`` (a ``MakeVector``) keeps the stock op, or None: every input a 0-d
    tensor of the output's dtype (what ``make_node`` builds), at least one."""
    if not node.inputs:
        return "no inputs: stock types np.array of an empty list"
    dtype = node.outputs[0].type.dtype
    for inp in node.inputs:
        if not (isinstance(inp.type, TensorType) and inp.type.ndim == 0 and inp.type.dtype == dtype):
            return f"input {inp.type} is not a 0-d tensor of {dtype}"
    return None


def empty_env(dtype: str, ndim: int) -> dict:
    """The globals a generated function needs to call ``numpy_empty_nd(shape, dtype, retty)``
    for a new C array of ``dtype`` and rank ``ndim`` (``np.empty``'s body, not its overload)."""
    return {"numpy_empty_nd": numpy_empty_nd, "dtype": np.dtype(dtype),
            "retty": types.Array(from_dtype(np.dtype(dtype)), ndim, "C")}


@register_funcify_and_cache_key(CompactMakeVector)
def numba_funcify_CompactMakeVector(op, node, **kwargs):
    """The function and its cache key (`dispatch.cache_key`: the package's source, the
    length and the dtype)."""
    n, dtype = len(node.inputs), node.outputs[0].type.dtype
    names = [f"x{k}" for k in range(n)]
    lines = [
        f"def makevector({', '.join(names)}):",
        f"    out = numpy_empty_nd(({n},), dtype, retty)",
        *(f"    out[{k}] = {name}[()]" for k, name in enumerate(names)),
        "    return out",
    ]
    fn = compile_function_src("\n".join(lines) + "\n", "makevector", empty_env(dtype, 1))
    return numba_basic.numba_njit(fn), cache_key("CompactMakeVector", n, dtype)


@register_funcify_and_cache_key(CompactTensorFromScalar)
def numba_funcify_CompactTensorFromScalar(op, node, **kwargs):
    """The function and its cache key (the package's source and the dtype)."""
    dtype = node.outputs[0].type.dtype
    src = "def tensor_from_scalar(x):\n    out = numpy_empty_nd((), dtype, retty)\n    out[()] = x\n    return out\n"
    fn = compile_function_src(src, "tensor_from_scalar", empty_env(dtype, 0))
    return numba_basic.numba_njit(fn), cache_key("CompactTensorFromScalar", dtype)


@register_funcify_and_cache_key(CompactScalarizedJoin)
def numba_funcify_CompactScalarizedJoin(op, node, **kwargs):
    """Stock's ``scalar_join`` (a scalar input is one element, a vector its elements, in
    order), from ``np.empty``'s intrinsic; the cache key: the package's source, the dtype
    and which inputs are scalars."""
    dtype = node.outputs[0].type.dtype
    is_scalar = tuple(isinstance(inp.type, ScalarType) for inp in node.inputs)
    names = [f"i{k}" for k in range(len(node.inputs))]
    length = " + ".join("1" if scalar else f"{name}.shape[0]" for name, scalar in zip(names, is_scalar, strict=True))
    lines = [f"def scalar_join({', '.join(names)}):", f"    out = numpy_empty_nd({length}, dtype, retty)", "    offset = 0"]
    for name, scalar in zip(names, is_scalar, strict=True):
        if scalar:
            lines += [f"    out[offset] = {name}", "    offset += 1"]
        else:
            lines += [f"    for k in range({name}.shape[0]):", f"        out[offset] = {name}[k]", "        offset += 1"]
    lines.append("    return out")
    fn = compile_function_src("\n".join(lines) + "\n", "scalar_join", empty_env(dtype, 1))
    return numba_basic.numba_njit(fn), cache_key("CompactScalarizedJoin", dtype, is_scalar)


__all__ = ["CompactMakeVector", "CompactScalarizedJoin", "CompactTensorFromScalar", "compact_scalarized_join",
           "empty_env", "why_not_compact"]
