"""Process-wide runtime: the thread-chunk runtime, the shared BLAS pool, pool rules, the
allocator, array boxing, machine code on demand and full garbage collections postponed
while numba compiles; the settings applied once per process
(`ProcessSetting`) and their environment switches (`env_choice`)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping

log = logging.getLogger("ptnumba_codegen")


def env_choice(environ: Mapping[str, str], name: str, allowed: tuple[str, ...]) -> str:
    """The value of the process-wide switch ``name`` in ``environ`` (case and surrounding
    spaces ignored; unset or empty: ``allowed[0]``, the default); a clear error naming the
    variable and the allowed values otherwise."""
    choice = environ.get(name, allowed[0]).strip().lower() or allowed[0]
    if choice not in allowed:
        raise ValueError(f"{name}={environ.get(name)!r}: allowed values are {', '.join(allowed)}")
    return choice


class ProcessSetting:
    """A process-wide setting applied once, when the first function is compiled with
    ``policy_codegen`` (never at import): `configure` reads the switch ``env`` (values
    ``allowed``, the first the default), calls ``apply(choice, environ)`` (which does the
    work and says what it did) the first time and returns that description every time;
    `restore` calls ``undo`` (tests) and forgets it; `state` is the description, or None
    before `configure` ran."""

    def __init__(self, env: str, allowed: tuple[str, ...], apply: Callable[[str, Mapping[str, str]], str],
                 undo: Callable[[], None] | None = None):
        self.env, self.allowed, self._apply, self._undo = env, allowed, apply, undo
        self._lock = threading.Lock()
        self._state: str | None = None

    def configure(self, environ: Mapping[str, str] | None = None) -> str:
        with self._lock:
            if self._state is None:
                environ = os.environ if environ is None else environ
                self._state = self._apply(env_choice(environ, self.env, self.allowed), environ)
                log.info("ptnumba_codegen: %s", self._state)
            return self._state

    def restore(self) -> None:
        with self._lock:
            if self._undo is not None:
                self._undo()
            self._state = None

    def state(self) -> str | None:
        return self._state
