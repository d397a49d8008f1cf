"""Process-wide runtime: the thread-chunk runtime, the shared BLAS pool, pool rules, the
allocator, array boxing, machine code on demand and full garbage collections postponed
while numba compiles; the settings applied once per process (`ProcessSetting`), each read
from its switch in `ptnumba_codegen.settings`."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping

from ptnumba_codegen.settings import Setting

log = logging.getLogger("ptnumba_codegen")


class ProcessSetting:
    """A process-wide setting applied once, when the first function is compiled with
    ``policy_codegen`` (never at import): `configure` reads the switch ``setting``, calls
    ``apply(choice, environ)`` (which does the work and says what it did) the first time
    and returns that description every time; `restore` calls ``undo`` (tests) and forgets
    it; `state` is the description, or None before `configure` ran."""

    def __init__(self, setting: Setting, apply: Callable[[str, Mapping[str, str]], str],
                 undo: Callable[[], None] | None = None):
        self.setting, self._apply, self._undo = setting, apply, undo
        self._lock = threading.Lock()
        self._state: str | None = None

    def configure(self, environ: Mapping[str, str] | None = None) -> str:
        with self._lock:
            if self._state is None:
                choice = self.setting.value(environ)
                self._state = self._apply(choice, os.environ if environ is None else environ)
                log.info("ptnumba_codegen: %s", self._state)
            return self._state

    def restore(self) -> None:
        with self._lock:
            if self._undo is not None:
                self._undo()
            self._state = None

    def state(self) -> str | None:
        return self._state
