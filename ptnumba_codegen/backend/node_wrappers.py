"""A policy-compiled graph calls its node functions directly, without PyTensor's per-node
cache wrappers.

With PyTensor's numba cache on, `numba_funcify_ensure_cache` puts every node function
that has a cache key inside a wrapper of its own, ``def <name>(*args): return
jitable_func(*args)``, compiled from generated source with ``cache=True``, so that numba
stores each node on disk under PyTensor's key. Each wrapper is one more numba compile per
node: numba's whole pipeline for one call, the node's IR linked in and optimized again,
and its machine code emitted for the disk cache, though the function graph calling it
links and compiles that IR once more (what that costs: CHANGELOG.md, "Node functions
without PyTensor's cache wrappers").

For a function graph the policy's passes rewrote (`mark_policy_graph`), `configure()`
makes the node functions the graph calls the ones PyTensor's dispatch returns, with the
same keys, and drops the graph's own wrapper too: PyTensor's linker compiles the graph's
function itself as the function Python calls, cached by numba under the graph's key
(`graph_function`); the wrapper costs one more compile of the whole graph (its IR linked in
and optimized again). What changes and what does not:

- the graph's key is unchanged, and numba caches the whole compiled function graph under
  it (with `GRAPH_KEY_SUFFIX`): a warm process compiling the same function loads it;
- nodes are not stored one by one, so a *different* graph sharing nodes with one
  compiled earlier compiles them again, in a later process (where PyTensor would load each
  node's wrapper from disk). In the same process, a stock node function PyTensor's
  dispatch returns for a key seen before is the same object (`SHARED`), compiled once
  (not a policy kernel's: its fallback is recorded for its own node, for ``explain``);
- values are unchanged: a wrapper only forwards its arguments, and every instruction
  keeps the flags it was lowered with (flags are set per instruction when a function is
  lowered, never by a caller); tests/test_node_wrappers.py compares results bit for bit.

Graphs of other modes (stock numba, the references) keep PyTensor's wrappers, and inner
graphs (a Scan's, an as-written copy's) follow the graph they are funcified in.
``PTNUMBA_CODEGEN_NODE_WRAPPERS=pytensor`` keeps PyTensor's wrappers everywhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import types
import weakref

from pytensor import config
from pytensor.graph.fg import AbstractFunctionGraph
from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
from pytensor.link.numba.dispatch import basic as numba_basic

from ptnumba_codegen.backend.ops import is_policy_op
from ptnumba_codegen.runtime import ProcessSetting, collector
from ptnumba_codegen.settings import NODE_WRAPPERS


# the suffix of the disk-cache key of a policy graph's own function (`graph_function`)
GRAPH_KEY_SUFFIX = "policy_graph"
# the source file a policy graph's own function is compiled as (`_in_stable_file`)
GRAPH_SOURCE_FILE = "<string>"

PYTENSOR_ENSURE_CACHE = numba_basic.numba_funcify_ensure_cache  # restored by `restore`

# function graphs the policy's passes rewrote (`mark_policy_graph`)
_POLICY_GRAPHS: weakref.WeakSet = weakref.WeakSet()
# set while a policy graph (and the inner graphs funcified inside it) is funcified
_DIRECT = contextvars.ContextVar("ptnumba_codegen_direct_node_functions", default=False)
# (PyTensor's cache key, numba fastmath setting, the node's input and output types) -> the
# node function first returned for them: one numba function per key and types in a
# process, whichever graph calls it. PyTensor's key identifies the function its dispatch
# builds *together with the numba signature it is called with* (its disk cache stores one
# entry per key and signature): a key leaves out what the argument types say, such as how
# many inputs a MakeVector or an AllocEmpty has, so the types are part of this key.
SHARED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def node_types(node) -> tuple:
    """The types of ``node``'s inputs and outputs, spelled out (dtype, rank, static shape)."""
    if node is None:
        return ()
    return tuple(str(v.type) for v in node.inputs), tuple(str(v.type) for v in node.outputs)


def mark_policy_graph(fgraph) -> None:
    """``fgraph`` was rewritten by the policy's passes: its nodes are called directly."""
    _POLICY_GRAPHS.add(fgraph)


def is_policy_graph(fgraph) -> bool:
    return fgraph in _POLICY_GRAPHS


def funcify_node(op, node=None, **kwargs):
    """`numba_funcify_ensure_cache` for ``op``: inside a policy graph, the node function
    without its wrapper (shared per key, `SHARED`); PyTensor's otherwise."""
    if isinstance(op, AbstractFunctionGraph):
        if not is_policy_graph(op) or _DIRECT.get():
            return PYTENSOR_ENSURE_CACHE(op, node=node, **kwargs)
        token = _DIRECT.set(True)
        try:
            with collector.postponed_while():
                collector.release_for(op)  # the scope its rewrites held (`passes.rewritten_graphs`)
                return graph_function(op, node=node, **kwargs)
        finally:
            _DIRECT.reset(token)
    if not _DIRECT.get() or not config.numba__cache:
        return PYTENSOR_ENSURE_CACHE(op, node=node, **kwargs)
    fn, key = numba_basic.numba_funcify_and_cache_key(op, node=node, **kwargs)
    if key is None or is_policy_op(op):  # a policy kernel records facts about its own node (explain)
        return fn, key
    shared_key = (key, bool(config.numba__fastmath), node_types(node))
    shared = SHARED.get(shared_key)
    if shared is not None:
        return shared, key
    with contextlib.suppress(TypeError):  # not weakly referenceable: not shared
        SHARED[shared_key] = fn
    return fn, key


def graph_function(fgraph, node=None, **kwargs):
    """A policy graph's own function, with PyTensor's key for the graph, cached by numba
    under that key without a wrapper: the linker compiles the function itself (its
    ``jit_compile``, with a CPython entry point) and numba's cache finds it through
    PyTensor's locator, which `GRAPH_KEY_SUFFIX` keeps apart from the wrapper's entries."""
    if not config.numba__cache:
        return PYTENSOR_ENSURE_CACHE(fgraph, node=node, **kwargs)
    fn, key = numba_basic.numba_funcify_and_cache_key(fgraph, node=node, **kwargs)
    if key is None:
        return fn, key
    py_func = _in_stable_file(fn.py_func)
    CACHED_SRC_FUNCTIONS[py_func] = f"{key}_fastmath{int(bool(config.numba__fastmath))}_{GRAPH_KEY_SUFFIX}"
    return numba_basic.numba_njit(py_func), key


def _in_stable_file(py_func):
    """``py_func`` as if compiled from ``<string>``, as PyTensor's wrappers are: numba names
    a function's cache files after its source file, and PyTensor writes a graph's source
    to a temporary file of a new name in every process."""
    code = py_func.__code__.replace(co_filename=GRAPH_SOURCE_FILE)
    new = types.FunctionType(code, py_func.__globals__, py_func.__name__, py_func.__defaults__, py_func.__closure__)
    new.__source__ = getattr(py_func, "__source__", None)
    return new


def _apply(choice: str, environ) -> str:
    """`SETTING`'s work: PyTensor's per-node funcify is `funcify_node` from now on."""
    if choice == "pytensor":
        return f"PyTensor's per-node cache wrappers ({NODE_WRAPPERS.env}=pytensor)"
    numba_basic.numba_funcify_ensure_cache = funcify_node
    return "policy graphs call their node functions without PyTensor's cache wrappers"


def _undo() -> None:
    numba_basic.numba_funcify_ensure_cache = PYTENSOR_ENSURE_CACHE


SETTING = ProcessSetting(NODE_WRAPPERS, _apply, _undo)
configure, restore, state = SETTING.configure, SETTING.restore, SETTING.state
