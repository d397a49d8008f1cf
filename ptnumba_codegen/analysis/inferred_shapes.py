"""Lengths PyTensor's shape inference knows where a variable's type leaves them unknown.

A PyMC model's arrays often have types of unknown length (``(None, None)``) while the
graph fixes them: a covariance built from twelve constants is 12 x 12 whatever its type
says. The kernels' types alone then say "could be large", and the pass starts the thread
runtime for a loop that never reaches the threshold, which hands OpenBLAS's parallel jobs
to the policy's pool (a structural-equation model's small triangular solves then split in
two and pay for waking the threads at every call). The `ShapeFeature` PyTensor's rewrites
keep on the function graph knows such lengths as constants; `iteration_bound` reads them.

Pure pytensor (no numba); nothing is attached or computed that the rewrites did not
already: without a `ShapeFeature` on the graph every length is unknown.
"""

from __future__ import annotations

import math

from pytensor.tensor.basic import get_scalar_constant_value
from pytensor.tensor.exceptions import NotScalarConstantError


def _constant_length(length) -> int | None:
    """The length's value when it is a constant expression (``sqrt(144)`` cast to int)."""
    if isinstance(length, int):
        return length
    try:
        return int(get_scalar_constant_value(length))
    except (NotScalarConstantError, TypeError, ValueError):
        return None


def _inferred(feature, var):
    """The feature's shape expressions of ``var`` (PyTensor >= 3.3.8 infers lazily through
    ``shape_tuple``; earlier ones keep an eager ``shape_of`` dict), None if it raises."""
    try:
        if hasattr(feature, "shape_tuple"):
            return feature.shape_tuple(var)
        return feature.shape_of.get(var)
    except Exception:  # noqa: BLE001  an op whose infer_shape raises: unknown
        return None


def inferred_shape(fgraph, var) -> tuple[int | None, ...] | None:
    """``var``'s lengths: its type's where it fixes them, else the shape inference's
    constants (None where neither knows; None for a variable that is not an array)."""
    static = getattr(var.type, "shape", None)
    if static is None:
        return None
    feature = getattr(fgraph, "shape_feature", None)
    inferred = None if feature is None else _inferred(feature, var)
    if inferred is None or len(inferred) != len(static):
        return tuple(static)
    return tuple(s if s is not None else _constant_length(i) for s, i in zip(static, inferred, strict=True))


def iteration_bound(fgraph, node) -> int | None:
    """The elements of the broadcast of the arrays ``node`` reads (the iteration space of
    an elementwise loop or a reduction; outputs only where it reads no array: a reduced
    output's axes do not line up with its input's), or None if some axis's length is
    unknown. An axis is as long as any array's known length other than 1 there (an array of
    unknown length on it broadcasts from 1 or has that length: anything else raises)."""
    shapes = [s for s in (inferred_shape(fgraph, v) for v in node.inputs) if s is not None]
    if not shapes:
        shapes = [s for s in (inferred_shape(fgraph, v) for v in node.outputs) if s is not None]
    dims = broadcast_lengths(shapes)
    return None if dims is None else math.prod(dims)


def unknown_length_bounds(fgraph, nodes) -> dict:
    """node -> `iteration_bound` for each of ``nodes`` whose types leave some length of its
    iteration space unknown (where they fix every length, the types already say it all)."""
    return {
        node: iteration_bound(fgraph, node)
        for node in nodes
        if broadcast_lengths([v.type.shape for v in (*node.inputs, *node.outputs) if hasattr(v.type, "shape")]) is None
    }


def broadcast_lengths(shapes) -> list[int] | None:
    """Each axis's length in the broadcast of ``shapes`` (aligned on their last axes): the
    longest known length other than 1 there; None if some axis has none (an array of
    unknown length broadcasts from 1 or has the known length: anything else raises)."""
    ndim = max((len(s) for s in shapes), default=0)
    dims = [1] * ndim
    unknown = [False] * ndim
    for shape in shapes:
        for k, length in enumerate(shape, start=ndim - len(shape)):
            if length is None:
                unknown[k] = True
            elif length != 1:
                dims[k] = max(dims[k], length)
    if any(u and d == 1 for u, d in zip(unknown, dims, strict=True)):
        return None
    return dims


__all__ = ["broadcast_lengths", "inferred_shape", "iteration_bound", "unknown_length_bounds"]
