"""The compact ops themselves: one op class per row of `COMPACT`, made by `compact_class`,
and the one numba dispatch of them all (`funcify_compact`).

A compact class is a subclass of the stock op class with its name (printed, dprinted as the
stock op; every ``isinstance`` check, shape inference and gradient are the stock op's) and no
state of its own; it is found by its qualified name ``Compact<name>`` in this module, which is
how a pickled graph finds it again. Its numba function is the row's intrinsic, keyed by the
row's params and the digest of the stock source it replicates, with the row's fallback (the
stock node function unless the row names another); a row that is off in this process
(`compact.replica.why_off`) gives stock's function and key instead.

`compact_op` is the compact op of a graph's node (None where its row is off or leaves the
node to the stock op: `why_stock`), which `passes.swap_compact` puts in place.
"""

from __future__ import annotations

import copy
import functools
import threading

from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key, register_funcify_and_cache_key

from ptnumba_codegen.compact.blas_calls import bind_routines
from ptnumba_codegen.compact.replica import Replica, installed_digest, stock_name, why_off
from ptnumba_codegen.compact.table import COMPACT
from ptnumba_codegen.lowering.node_keys import cache_key

PREFIX = "Compact"  # a compact class's qualified name: PREFIX + its row's name
_LOCK = threading.Lock()
_CLASSES: dict[str, type] = {}  # row name -> its compact class
_ROWS: dict[type, str] = {}  # compact class -> its row's name (`COMPACT` holds the record)


def compact_class(name: str) -> type:
    """The compact class of row ``name`` (made once a process, its numba dispatch registered)."""
    with _LOCK:
        cls = _CLASSES.get(name)
        if cls is None:
            stock = stock_name(COMPACT[name].stock_op)
            namespace = {
                "__module__": __name__,
                "__qualname__": PREFIX + name,
                "__doc__": f"``{stock.__name__}`` whose numba function is an intrinsic lowered into its caller "
                f"(`compact.table.COMPACT['{name}']`).",
            }
            cls = type(stock.__name__, (stock,), namespace)
            register_funcify_and_cache_key(cls)(funcify_compact)
            _CLASSES[name], _ROWS[cls] = cls, name
    return cls


def __getattr__(attr: str):
    """``Compact<name>``: the compact class of a row (what unpickling a compact op asks for)."""
    if attr.startswith(PREFIX) and attr[len(PREFIX):] in COMPACT:
        return compact_class(attr[len(PREFIX):])
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


def row_of(op_type: type) -> Replica | None:
    """The row of a compact class (None for any other class)."""
    name = _ROWS.get(op_type)
    return None if name is None else COMPACT[name]


def stock_class_of(op_type: type) -> type | None:
    """The stock class a compact class stands in for (None for any other class)."""
    row = row_of(op_type)
    return None if row is None else stock_name(row.stock_op)


@functools.cache
def _installed_class(path: str) -> type | None:
    try:
        return stock_name(path)
    except LookupError:
        return None


def stock_classes() -> dict[type, Replica]:
    """Each stock op class the installed PyTensor has -> its row."""
    classes = ((_installed_class(replica.stock_op), replica) for replica in COMPACT.values())
    return {cls: replica for cls, replica in classes if cls is not None}


def _verdict(node, classes: dict[type, Replica]) -> tuple[Replica | None, str | None]:
    replica = classes.get(type(node.op))
    if replica is None:
        return None, f"no compact op for {type(node.op).__name__}"
    off = why_off(replica)
    if off is not None:
        return replica, f"the compact {replica.name} is off: {off}"
    return replica, None if replica.takes is None else replica.takes(node)


def why_stock(node) -> str | None:
    """Why ``node`` keeps its stock op (no row for its class, its row off, or the row does
    not take the node), or None if it has a compact op."""
    return _verdict(node, stock_classes())[1]


def retyped(op, cls: type):
    """A copy of ``op`` of class ``cls`` (a compact class and its stock class share their state)."""
    new = copy.copy(op)
    new.__class__ = cls
    return new


def as_stock(op):
    """``op`` as an op of its stock class (a compact op retyped; any other op itself)."""
    stock = stock_class_of(type(op))
    return op if stock is None else retyped(op, stock)


def _with_props(cls, node):
    return cls(**{name: getattr(node.op, name) for name in node.op.__props__})


def _retyped_copy(cls, node):
    # an OpFromGraph: a copy keeps the inner graph PyTensor's rewrite built once
    return retyped(node.op, cls)


# Replica.rebuilt_by -> (compact class, node) -> the compact op, with the node's op's state
REBUILD = {"props": _with_props, "copy": _retyped_copy}


def compact_op(node, classes: dict[type, Replica] | None = None):
    """The compact op of ``node`` (its row's class, the node's op's state), or None
    (`why_stock`). ``classes``: `stock_classes`, for a caller that has it already."""
    replica, why = _verdict(node, stock_classes() if classes is None else classes)
    if why is not None:
        return None
    return REBUILD[replica.rebuilt_by](compact_class(replica.name), node)


def stock_node_function(op, node, **kwargs):
    """``() ->`` the stock numba function of a node (a compact op's: its stock class's),
    built when called by PyTensor's dispatch."""

    def build():
        fn, _key = numba_funcify_and_cache_key(as_stock(op), node=node)
        return fn

    return build


def funcify_compact(op, node, **kwargs):
    """The numba function of a compact op's node and its cache key: the row's intrinsic
    (`Replica.intrinsic`), or, where the row is off, stock's function and key."""
    replica = row_of(type(op))
    if why_off(replica) is not None:
        return numba_funcify_and_cache_key(as_stock(op), node=node, **kwargs)
    bind_routines(replica.routines)
    params = replica.params(op, node)
    fallback = (replica.fallback or stock_node_function)(op, node, **kwargs)
    key = cache_key(PREFIX + replica.name, installed_digest(replica), *params)
    return replica.intrinsic(*params, fallback), key


__all__ = ["PREFIX", "REBUILD", "as_stock", "compact_class", "compact_op", "funcify_compact", "row_of", "stock_class_of",
           "retyped", "stock_classes", "stock_node_function", "why_stock"]
