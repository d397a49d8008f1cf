"""A node function's key in PyTensor's numba cache, for every node function the package
makes (the generator's kernels, the compact ops, the as-written copies). A module of its
own, with nothing but the package's version and the exact lanes' key behind it, so that
every layer that makes a node function can key it without an import circle."""

from __future__ import annotations

import hashlib

from ptnumba_codegen._version import GENERATOR_DIGEST, GENERATOR_VERSION
from ptnumba_codegen.lowering.vecmath.exact_lanes import cache_key as exact_lanes_key


def cache_key(*parts) -> str:
    """A node function's key in PyTensor's numba cache: the package's version and source,
    the exact lanes' key, and ``parts``."""
    return hashlib.sha256(
        repr(("ptnumba_codegen", GENERATOR_VERSION, GENERATOR_DIGEST, exact_lanes_key(), *parts)).encode()
    ).hexdigest()


__all__ = ["cache_key"]
