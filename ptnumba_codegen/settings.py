"""Every ``PTNUMBA_CODEGEN_*`` environment switch, in one table.

Each switch is a `Setting`: its variable, the values it allows (the first is the default),
what it does and who reads it. A switch is read when it is used, never at import, so a
value set after ``import ptnumba_codegen`` applies to what runs from then on (the five that
configure the process, `ProcessSetting` in `runtime`, apply once: at the first policy
compile). Case and surrounding spaces are ignored and an empty value is the default; any
other value raises ``ValueError`` naming the variable and the values it allows.

=====================================  ==========================  ==================================================
variable                               values (default first)      read by, when
=====================================  ==========================  ==================================================
``PTNUMBA_CODEGEN_POLICY``             a preset name or a TOML     `policy.load_policy(None)`: each policy pass given
                                       path (unset: ``default``)   no policy, `switch.enable(None)`; also checked
                                                                   once when the package is imported
``PTNUMBA_CODEGEN_REWRITTEN_GRAPHS``   ``on``, ``off``             `passes.rewritten_graphs.graph_key`: each compile
``PTNUMBA_CODEGEN_SLOW_PATH``          ``on_demand``, ``linked``   `as_written.lowering`: each envelope guard compiled
``PTNUMBA_CODEGEN_EXACT_LANES``        ``on``, ``off``             `lowering.vecmath.exact_lanes.status`: once per
                                                                   function and lane count
``PTNUMBA_CODEGEN_NODE_WRAPPERS``      ``direct``, ``pytensor``    `backend.node_wrappers`: first policy compile
``PTNUMBA_CODEGEN_NUTPIE_WRAPPERS``    ``loops``, ``nutpie``       `nutpie_wrappers.install`: `switch.enable`
``PTNUMBA_CODEGEN_MALLOC``             ``keep``, ``system``        `runtime.allocator`: first policy compile
``PTNUMBA_CODEGEN_BOXING``             ``environment``, ``numba``  `runtime.boxing`: first policy compile
``PTNUMBA_CODEGEN_GC``                 ``postpone``, ``python``    `runtime.collector`: first policy compile
``PTNUMBA_CODEGEN_MACHINE_CODE``       ``on_demand``, ``always``   `runtime.machine_code`: first policy compile
``PTNUMBA_CODEGEN_SHARE_BLAS``         ``1``, ``0``                `runtime.threads`: when the thread-chunk runtime
                                                                   starts
=====================================  ==========================  ==================================================

What a value other than the default does is each `Setting`'s ``what``; docs/settings.md has
the same table with why each switch exists. tests/test_settings.py checks that the package
names no ``PTNUMBA_CODEGEN_*`` variable outside `SETTINGS` and that docs/settings.md lists
every one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One environment switch: its variable, its values (the first the default; none: free
    text its reader validates), what a value other than the default does, who reads it."""

    env: str
    allowed: tuple[str, ...]
    what: str
    reader: str

    @property
    def default(self) -> str:
        return self.allowed[0] if self.allowed else ""

    def value(self, environ: Mapping[str, str] | None = None) -> str:
        """The switch's value in ``environ`` (default: the process's environment, now): case
        and surrounding spaces ignored, unset or empty the default; any other value raises,
        naming the variable and the allowed values. A free-text switch is read as written."""
        environ = os.environ if environ is None else environ
        if not self.allowed:
            return environ.get(self.env) or ""
        choice = environ.get(self.env, "").strip().lower() or self.default
        if choice not in self.allowed:
            raise ValueError(f"{self.env}={environ.get(self.env)!r}: allowed values are {', '.join(self.allowed)}")
        return choice


POLICY = Setting(
    "PTNUMBA_CODEGEN_POLICY", (),
    "the process-default policy: a preset name or a TOML path (unset: the preset default)",
    "policy.load_policy(None)",
)
REWRITTEN_GRAPHS = Setting(
    "PTNUMBA_CODEGEN_REWRITTEN_GRAPHS", ("on", "off"),
    "off: a function's rewritten graph is not kept on disk; every compile rewrites",
    "passes.rewritten_graphs.graph_key",
)
SLOW_PATH = Setting(
    "PTNUMBA_CODEGEN_SLOW_PATH", ("on_demand", "linked"),
    "linked: an envelope guard's slow path is compiled and linked with the function",
    "as_written.lowering",
)
EXACT_LANES = Setting(
    "PTNUMBA_CODEGEN_EXACT_LANES", ("on", "off"),
    "off: libm's exp, log and pow on vectors stay per-lane libm calls",
    "lowering.vecmath.exact_lanes.status",
)
NODE_WRAPPERS = Setting(
    "PTNUMBA_CODEGEN_NODE_WRAPPERS", ("direct", "pytensor"),
    "pytensor: policy graphs keep PyTensor's per-node cache wrappers",
    "backend.node_wrappers.configure",
)
NUTPIE_WRAPPERS = Setting(
    "PTNUMBA_CODEGEN_NUTPIE_WRAPPERS", ("loops", "nutpie"),
    "nutpie: nutpie builds its own C wrappers while the switch is on",
    "nutpie_wrappers.install",
)
MALLOC = Setting(
    "PTNUMBA_CODEGEN_MALLOC", ("keep", "system"),
    "system: glibc's own malloc thresholds (freed intermediates returned to the kernel)",
    "runtime.allocator.configure",
)
BOXING = Setting(
    "PTNUMBA_CODEGEN_BOXING", ("environment", "numba"),
    "numba: numba's own array boxing (the array type unpickled at every call)",
    "runtime.boxing.configure",
)
GC = Setting(
    "PTNUMBA_CODEGEN_GC", ("postpone", "python"),
    "python: Python's garbage-collection thresholds during numba's compiles",
    "runtime.collector.configure",
)
MACHINE_CODE = Setting(
    "PTNUMBA_CODEGEN_MACHINE_CODE", ("on_demand", "always"),
    "always: numba's own finalization, machine code for every library",
    "runtime.machine_code.configure",
)
SHARE_BLAS = Setting(
    "PTNUMBA_CODEGEN_SHARE_BLAS", ("1", "0"),
    "0: OpenBLAS keeps its own worker threads instead of running its jobs on numba's",
    "runtime.shared_blas.sharing_wanted: when the thread-chunk runtime starts",
)

SETTINGS: tuple[Setting, ...] = (
    POLICY, REWRITTEN_GRAPHS, SLOW_PATH, EXACT_LANES, NODE_WRAPPERS, NUTPIE_WRAPPERS,
    MALLOC, BOXING, GC, MACHINE_CODE, SHARE_BLAS,
)

__all__ = [
    "BOXING", "EXACT_LANES", "GC", "MACHINE_CODE", "MALLOC", "NODE_WRAPPERS", "NUTPIE_WRAPPERS", "POLICY",
    "REWRITTEN_GRAPHS", "SETTINGS", "SHARE_BLAS", "SLOW_PATH", "Setting",
]
