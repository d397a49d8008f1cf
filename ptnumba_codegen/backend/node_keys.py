"""What every node function of the backend needs from the package: its cache key and, for a
compact op (`backend.compact`), the stock function it stands in for and the digest of the
stock source it replicates. A module of its own, with
no part of the dispatch behind it, so that the compact ops can be used wherever a graph is
planned (`backend.indexed_parts`) without an import circle."""

from __future__ import annotations

import copy
import hashlib

from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

from ptnumba_codegen._version import GENERATOR_DIGEST, GENERATOR_VERSION
from ptnumba_codegen.lowering.vecmath.exact_lanes import cache_key as exact_lanes_key


def cache_key(*parts) -> str:
    """A node function's key in PyTensor's numba cache: the package's version and source,
    the exact lanes' key, and ``parts``."""
    return hashlib.sha256(
        repr(("ptnumba_codegen", GENERATOR_VERSION, GENERATOR_DIGEST, exact_lanes_key(), *parts)).encode()
    ).hexdigest()


def stock_node_function(op, node):
    """``() -> `` the stock numba function of a compact op's node (`backend.compact`): the op
    as its stock class (a compact class is a subclass with no state of its own), funcified
    by PyTensor's dispatch; built when called."""

    def build():
        stock = copy.copy(op)
        stock.__class__ = type(op).__bases__[0]
        fn, _key = numba_funcify_and_cache_key(stock, node=node)
        return fn

    return build


def source_digest(parts) -> str:
    """The digest of the source of ``parts()`` (the stock functions a compact op replicates),
    or "unavailable (...)" where one is missing: another implementation, which keeps the
    stock op (the compact ``Dot``'s, solve's and Cholesky's ``REPLICATED``)."""
    import inspect

    try:
        source = "".join(inspect.getsource(getattr(f, "py_func", f)) for f in parts())
    except (ImportError, AttributeError, OSError, TypeError) as err:
        return f"unavailable ({type(err).__name__}: {err})"
    return hashlib.sha256(source.encode()).hexdigest()[:16]


__all__ = ["cache_key", "source_digest", "stock_node_function"]
