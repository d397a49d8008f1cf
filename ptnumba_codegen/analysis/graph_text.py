"""A graph spelled out completely and independently of the process: the key of what the
generator keeps on disk about a graph (`as_written.guard_verdicts`: a cone's probe verdict;
`passes.rewritten_graphs`: a function's rewritten graph), with the rewrites that run on it
(`rewrites_text`).

A spelling names every op by its class and its ``__props__`` (PyTensor's own identity for an
op: what its ``__eq__`` and the merge rewrites compare), every type, every constant by its
dtype, shape and a digest of its bytes, and how the nodes connect. Anything it cannot spell
completely (an op without ``__props__`` holding state out of sight, a lambda) raises `NoKey`:
no key, nothing kept. An inner graph (a Scan's, an OpFromGraph's, a Composite's) is
spelled as a graph. Pure pytensor (no numba).
"""

from __future__ import annotations

import functools
import hashlib
import types
from collections.abc import Mapping

import numpy as np
import pytensor
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FrozenFunctionGraph, FunctionGraph
from pytensor.graph.traversal import io_toposort
from pytensor.graph.type import Type

_DEPTH = 12  # nesting of op properties spelled out before giving up (no key)


class NoKey(Exception):
    """Something in the cone cannot be spelled out completely."""


def plain(obj, depth: int = 0) -> str:
    """A complete, process-independent spelling of an op property (raises `NoKey`)."""
    if depth > _DEPTH:
        raise NoKey("nested too deep")
    if obj is None or isinstance(obj, bool | int | float | complex | str | bytes | np.generic):
        return f"{type(obj).__name__}:{obj!r}"
    if isinstance(obj, np.ndarray):
        data = np.ascontiguousarray(obj)
        return f"array:{data.dtype.str}:{data.shape}:{hashlib.sha256(data.tobytes()).hexdigest()}"
    if isinstance(obj, np.dtype):
        return f"dtype:{obj.str}"
    if isinstance(obj, slice):  # Subtensor's idx_list
        return f"slice({plain(obj.start, depth + 1)},{plain(obj.stop, depth + 1)},{plain(obj.step, depth + 1)})"
    if isinstance(obj, tuple | list):
        return f"{type(obj).__name__}(" + ",".join(plain(x, depth + 1) for x in obj) + ")"
    if isinstance(obj, frozenset | set):
        return f"{type(obj).__name__}(" + ",".join(sorted(plain(x, depth + 1) for x in obj)) + ")"
    if isinstance(obj, Mapping):  # dict, PyTensor's frozendict (whose cached hash is not content)
        items = sorted(f"{plain(k, depth + 1)}={plain(v, depth + 1)}" for k, v in obj.items())
        return "dict(" + ",".join(items) + ")"
    if isinstance(obj, FunctionGraph | FrozenFunctionGraph):  # an inner graph (Scan, OpFromGraph, Composite)
        return "fgraph(" + graph_text(obj.inputs, obj.outputs, depth + 1).replace("\n", ";") + ")"
    if isinstance(obj, Type) and getattr(type(obj), "__props__", None) is None:
        return f"type:{obj!r}"
    if isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType):
        name = f"{obj.__module__}.{obj.__qualname__}"
        if "<" in name:  # a lambda or a closure: its code and cells are not in its name
            raise NoKey(name)
        return f"def:{name}"
    cls = f"{type(obj).__module__}.{type(obj).__qualname__}"
    props = getattr(type(obj), "__props__", None)
    if props is not None:  # an op's identity is its props (PyTensor's __eq__ and __hash__)
        return f"{cls}{{" + ",".join(f"{p}={plain(getattr(obj, p), depth + 1)}" for p in props) + "}"
    attrs = dict(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:  # state kept in slots as well as in the __dict__
        slots = klass.__dict__.get("__slots__", ())
        for slot in (slots,) if isinstance(slots, str) else slots:
            if slot not in ("__dict__", "__weakref__"):
                attrs[slot] = getattr(obj, slot, "<unset>")
    if not attrs and not hasattr(obj, "__dict__"):  # a C object: its state is not in sight
        raise NoKey(cls)
    return f"{cls}{{" + ",".join(f"{k}={plain(v, depth + 1)}" for k, v in sorted(attrs.items())) + "}"


def graph_text(inputs, outputs, depth: int = 0, *, cone: bool = False) -> str:
    """The graph from ``inputs`` (named by position) to ``outputs`` (by position), spelled
    completely (raises `NoKey`). Nodes in `io_toposort` order, which follows the graph's
    structure only. ``cone=True``: the graph above ``inputs`` (`as_written.guard_verdicts`),
    any variable it reads that is neither a constant nor computed in it is an input, named
    where first read."""
    names: dict = {} if cone else {v: f"i{k}" for k, v in enumerate(inputs)}
    lines = [] if cone else [f"input {k} {plain(v.type, depth)}" for k, v in enumerate(inputs)]

    def name(v) -> str:
        if v not in names:
            if isinstance(v, Constant):
                lines.append(f"const {plain(v.type, depth)} {plain(np.asarray(v.data), depth)}")
            elif cone:
                lines.append(f"input {plain(v.type, depth)}")
            else:
                raise NoKey(f"{v} is neither an input nor a constant nor computed")
            names[v] = f"v{len(lines) - 1}"
        return names[v]

    for node in io_toposort(list(inputs), list(outputs)):
        args = ",".join(name(i) for i in node.inputs)
        op = plain(node.op, depth)
        for k, out in enumerate(node.outputs):
            lines.append(f"{op}[{k}] {plain(out.type, depth)} ({args})")
            names[out] = f"v{len(lines) - 1}"
    lines.extend(f"output {k} {name(v)}" for k, v in enumerate(outputs))
    return "\n".join(lines)


@functools.cache
def rewrites_text(rewriters: tuple) -> str:
    """What rewrite databases hold: PyTensor's version and every rewrite's name."""
    seen: list[str] = []

    def walk(r):
        seen.append(getattr(r, "name", None) or getattr(r, "__name__", None) or type(r).__qualname__)
        for attr in ("data", "final_rewriters", "cleanup_rewriters", "global_rewriters"):
            for sub in getattr(r, attr, None) or ():
                walk(sub)
        if hasattr(r, "get_node_rewriters"):
            for sub in r.get_node_rewriters():
                walk(sub)

    for r in rewriters:
        walk(r)
    return f"pytensor {pytensor.__version__}\n" + "\n".join(sorted(set(map(str, seen))))


__all__ = ["NoKey", "graph_text", "plain", "rewrites_text"]
