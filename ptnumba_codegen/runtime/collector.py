"""Python's full garbage collections postponed while a policy function compiles.

Python's collector sweeps its oldest generation (a *full* collection) once enough objects
have survived into it; each full collection visits every tracked object of the process,
and with PyMC, PyTensor and numba loaded that is a few hundred thousand. A numba compile
allocates many objects that live until it ends (types, IR, lowered functions, LLVM
wrappers), so a cold compile triggers several full collections that find little to free
(what they cost: CHANGELOG.md, "Garbage collection during numba's compiles").

`configure()` listens to numba's ``numba:compile`` events (raised inside numba's global
compiler lock): while the outermost compile runs, and while a policy graph is rewritten
(`passes.rewritten_graphs`) or funcified (`backend.node_wrappers.graph_function`), which
`postponed_while` scopes, and from a policy graph's rewrites to its funcify (`hold_for`: PyTensor's
linking between them schedules the graph, where the collection the rewrites postponed used
to run), the threshold of the oldest generation is raised tenfold beyond
its count so far (`POSTPONED_FACTOR`), so that mostly the young generations are collected
(cycles that die young are freed as before); when it ends the threshold is put back as it
was, and a collection postponed runs at the collector's next opportunity. The thresholds are
left alone while the collector is disabled, and not put back if something else changed them
meanwhile. Compiled code and values are untouched.

It applies once per process, when the first function is compiled with ``policy_codegen``
(never at import), to every numba compile from then on, like `machine_code.configure`.
``PTNUMBA_CODEGEN_GC=python`` keeps Python's thresholds throughout.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import weakref

from numba.core import event

from ptnumba_codegen.runtime import ProcessSetting
from ptnumba_codegen.settings import GC


# while numba compiles, a full collection is considered only after this many times the
# young-generation collections Python's threshold asks for, counted from the compile's
# start: none inside a compile of a few seconds, and a long one (a minute) still sweeps
# now and then, which bounds the garbage it keeps (both measured: CHANGELOG.md, "Garbage
# collection during numba's compiles")
POSTPONED_FACTOR = 10


def postponed(threshold: int) -> int:
    """The oldest generation's threshold while numba compiles: `POSTPONED_FACTOR` times
    ``threshold`` beyond the count so far (which keeps growing while full collections are
    skipped for finding too few new objects, and may already exceed any fixed threshold)."""
    return gc.get_count()[2] + max(threshold, 1) * POSTPONED_FACTOR


class Postponement:
    """The oldest generation's threshold raised while any of its scopes runs (the outermost
    numba compile, a policy graph's rewrites or funcify): the outermost scope raises it and
    puts it back; scopes nest and may come from several threads."""

    def __init__(self):
        self.depth = 0
        self.saved: tuple[int, int, int] | None = None  # the thresholds in force before
        self.raised: tuple[int, int, int] | None = None  # the ones set for the scope
        self._lock = threading.RLock()  # re-entrant: a held scope's owner may be freed by a collection inside

    def enter(self) -> None:
        with self._lock:
            self.depth += 1
            if self.depth == 1 and gc.isenabled():
                self.saved = gc.get_threshold()
                self.raised = (self.saved[0], self.saved[1], postponed(self.saved[2]))
                gc.set_threshold(*self.raised)

    def exit(self) -> None:
        with self._lock:
            self.depth -= 1
            if self.depth == 0 and self.saved is not None:
                saved, raised, self.saved, self.raised = self.saved, self.raised, None, None
                if gc.get_threshold() == raised:  # else something else set them meanwhile: kept
                    gc.set_threshold(*saved)


class FullCollectionsPostponed(event.Listener):
    """The outermost numba compile as a scope of `POSTPONEMENT`."""

    def __init__(self):
        self.started = 0  # compiles seen starting and not ended yet (not those under way when registered)

    def on_start(self, ev):
        self.started += 1
        POSTPONEMENT.enter()

    def on_end(self, ev):
        if self.started:
            self.started -= 1
            if not self.started:
                release_all()  # a graph whose funcify never came (a Scan's inner graph) holds no longer
            POSTPONEMENT.exit()


POSTPONEMENT = Postponement()


@contextlib.contextmanager
def postponed_while():
    """Full collections postponed for the block, as inside numba's compiles, once the
    setting postpones them (`configure`); Python's thresholds otherwise."""
    if _listener is None:
        yield
        return
    POSTPONEMENT.enter()
    try:
        yield
    finally:
        POSTPONEMENT.exit()


_listener: FullCollectionsPostponed | None = None

# id(owner) -> the finalizer that ends the scope held for ``owner`` if it dies first
_held: dict[int, weakref.finalize] = {}


def hold_for(owner) -> None:
    """Full collections postponed from now until `release_for` ``owner``, the end of the
    next outermost numba compile, or ``owner`` being freed, whichever comes first: a scope
    spanning two calls, a policy graph's rewrites and its funcify, so that PyTensor's linking
    between them (its schedule of the graph) does not run the collection the rewrites
    postponed. Nothing once held, or before the setting postpones."""
    if _listener is None or id(owner) in _held:
        return
    POSTPONEMENT.enter()
    _held[id(owner)] = weakref.finalize(owner, _end_held, id(owner))


def release_for(owner) -> None:
    """End the scope `hold_for` ``owner`` holds (nothing if none)."""
    finalizer = _held.get(id(owner))
    if finalizer is not None and finalizer.detach() is not None:
        _end_held(id(owner))


def release_all() -> None:
    """End every held scope (at the end of an outermost numba compile: whatever a graph's
    rewrites held is over once a function is compiled)."""
    for key in list(_held):
        finalizer = _held.get(key)
        if finalizer is not None and finalizer.detach() is not None:
            _end_held(key)


def _end_held(key: int) -> None:
    if _held.pop(key, None) is not None:
        POSTPONEMENT.exit()


def _apply(choice: str, environ) -> str:
    """`SETTING`'s work: full collections postponed during numba's compiles from now on."""
    global _listener
    if choice == "python":
        return f"Python's garbage collection thresholds during numba's compiles ({GC.env}=python)"
    _listener = FullCollectionsPostponed()
    event.register("numba:compile", _listener)
    return "full garbage collections postponed while numba compiles"


def _undo() -> None:
    global _listener
    if _listener is not None:
        event.unregister("numba:compile", _listener)
        _listener = None


SETTING = ProcessSetting(GC, _apply, _undo)
configure, restore, state = SETTING.configure, SETTING.restore, SETTING.state
