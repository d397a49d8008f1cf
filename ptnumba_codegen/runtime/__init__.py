"""Process-wide runtime: the thread-chunk runtime, the shared BLAS pool, pool rules, the
allocator and array boxing."""

from __future__ import annotations

from collections.abc import Mapping


def env_choice(environ: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str:
    """The value of the process-wide switch ``name`` in ``environ`` (case and surrounding
    spaces ignored; unset or empty: ``allowed[0]``, the default); a clear error naming the
    variable and the allowed values otherwise."""
    choice = environ.get(name, allowed[0]).strip().lower() or allowed[0]
    if choice not in allowed:
        raise ValueError(f"{name}={environ.get(name)!r}: allowed values are {', '.join(allowed)}")
    return choice
