"""The record of one compact op (`Replica`) and of the stock source it replicates
(`StockSource`), and whether the installed PyTensor is one it replicates (`why_off`).

A compact op stands in for a stock PyTensor op whose numba node function costs more to
compile than what it does: the same op (a subclass, `compact.ops`), whose node function is a
numba intrinsic lowered into its caller, making stock's checks, messages, loops and calls
with numba's own pieces. That is only right while PyTensor's function is the one it was
written from. So each record names the PyTensor functions it replicates or calls, by module
and name, and the digest of their source in every supported PyTensor; on a PyTensor whose
source has another digest, or that lacks one of those names, the record is off and the
node keeps the stock op. Names are looked up when a record is first asked about, never at
import: a PyTensor that renamed one private function turns one record off, and the package
still imports.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import linecache
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# The PyTensor versions pyproject.toml's range is tested at (scripts/pytensor_floor.sh runs
# the lowest): every record states, for each, whether it replicates the source found there.
SUPPORTED_PYTENSOR = ("3.3.6", "3.3.7", "3.3.8")


def stock_name(path: str):
    """The object ``"package.module:qualified.name"`` names in the installed PyTensor;
    `LookupError` where there is none."""
    module_name, _, qualname = path.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as err:
        raise LookupError(f"no module {module_name} ({err})") from None
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LookupError(f"no {module_name}.{qualname}") from None
    return obj


CLOSING = frozenset(")]},")  # a line of these only ends a statement that holds no code there


def function_source(fn) -> str:
    """The source lines of ``fn`` (a numba dispatcher's Python function, a decorated
    function's own): from its first decorator to the last line any of its code, nested
    functions included, reaches, and the closing brackets after it. Read from the module's
    file through `linecache`."""
    fn = inspect.unwrap(getattr(fn, "py_func", fn))
    code = getattr(fn, "__code__", None)
    if code is None:
        raise LookupError(f"{fn!r} is not a Python function")
    last, pending = code.co_firstlineno, [code]
    while pending:
        inner = pending.pop()
        last = max([last, *(line for _start, _end, line in inner.co_lines() if line is not None)])
        pending.extend(const for const in inner.co_consts if isinstance(const, types.CodeType))
    lines = linecache.getlines(code.co_filename)
    if len(lines) < last:
        raise LookupError(f"no source for {fn.__qualname__} ({code.co_filename})")
    while last < len(lines) and lines[last].strip() and set(lines[last].strip()) <= CLOSING:
        last += 1
    return "".join(lines[code.co_firstlineno - 1 : last])


@dataclass(frozen=True)
class StockSource:
    """The PyTensor functions a compact op replicates or calls (``"module:name"``, in
    order), and the digest of their source (`digest`) in each supported PyTensor whose
    source it replicates. ``elsewhere``: each other supported PyTensor, and why the op does
    not replicate its source."""

    functions: tuple[str, ...]
    digests: Mapping[str, tuple[str, ...]]  # digest -> the PyTensor versions whose source has it
    elsewhere: Mapping[str, str] = field(default_factory=dict)  # PyTensor version -> why not

    def digest(self) -> str:
        """The digest of the installed PyTensor's `functions`; `LookupError` where one is missing."""
        source = "".join(function_source(stock_name(path)) for path in self.functions)
        return hashlib.sha256(source.encode()).hexdigest()[:16]

    def problem(self) -> str | None:
        """Why the installed PyTensor's source is not one this op replicates (None if it is)."""
        try:
            digest = self.digest()
        except LookupError as err:
            found = str(err)
        else:
            if digest in self.digests:
                return None
            found = f"its source has digest {digest}"
        import pytensor

        version = pytensor.__version__
        recorded = sorted({v for versions in self.digests.values() for v in versions})
        why = self.elsewhere.get(version, f"not the source recorded for PyTensor {', '.join(recorded) or '(none)'}")
        return f"PyTensor {version}: {found}; {why}"


@dataclass(frozen=True, eq=False)
class Replica:
    """One compact op: a row of `compact.table.COMPACT`.

    - ``stock_op``: the stock op class (``"module:Class"``), taken by exact type;
    - ``reason``: why the stock numba function costs more to compile than the compact one;
    - ``source``: the stock functions the compact one replicates, and their digests;
    - ``params(op, node)``: what the node function is generated from (a tuple; with the
      digest of the installed stock source, its cache key);
    - ``intrinsic(*params, fallback)``: the node function (an intrinsic: its typer and
      emitter), calling ``fallback()`` (a numba function, built when first needed) for
      argument types it does not lower;
    - ``takes(node)``: why a node keeps the stock op (None: it takes it; no function: every
      node of the class);
    - ``fallback(op, node, **kwargs)``: ``() -> numba function`` for `intrinsic` (no
      function: the stock node function);
    - ``rebuilt_by``: how the compact op is made from the node's (`compact.ops.REBUILD`);
    - ``routines``: the ``(cython module, routine)`` of scipy's the node function calls by
      symbol, bound before it is made (`compact.blas_calls.bind_routines`).
    """

    stock_op: str
    reason: str
    source: StockSource
    params: Callable
    intrinsic: Callable
    takes: Callable | None = None
    fallback: Callable | None = None
    rebuilt_by: str = "props"
    routines: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        """The stock op class's name (the record's key, and the compact class's suffix)."""
        return self.stock_op.rpartition(":")[2].rpartition(".")[2]


@functools.cache
def why_off(replica: Replica) -> str | None:
    """Why ``replica`` is off in this process (every node keeps the stock op), or None.
    Decided once per record and process."""
    try:
        stock_name(replica.stock_op)
    except LookupError as err:
        return f"PyTensor has {err}"
    return replica.source.problem()


@functools.cache
def installed_digest(replica: Replica) -> str:
    """The digest of the installed PyTensor's source for ``replica`` (part of its cache keys)."""
    return replica.source.digest()


__all__ = ["CLOSING", "SUPPORTED_PYTENSOR", "Replica", "StockSource", "function_source", "installed_digest", "stock_name", "why_off"]
