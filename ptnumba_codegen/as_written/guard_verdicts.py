"""The overflow-guard probes' "nothing to guard" verdicts, on disk, keyed by the cone's content.

`guards.stabilized` asks, for every decision input of an as-written copy, whether
PyTensor's canonicalize and stabilize rewrites would change its cone: it clones the cone
and runs both rewrite databases over it. In a warm process that is Python the stock
backend never pays, and on every model of the catalogue core measured the answer was "no
change". That answer depends only on the cone (its ops with their properties, its
types and constants, how they connect) and on which rewrites the two databases hold
(PyTensor's version, what PyMC or the user registered). `cone_text` spells all of that out;
a verdict of "no change" is stored under it, and read back instead of probing again. A cone
it cannot spell completely (an op without ``__props__`` holding something other than plain
data or an inner graph, `analysis.graph_text`) has no key and is probed every time; a cone whose
probe finds a change is probed every time too (the guard needs the stabilized graph).

Each record holds its full key text, compared on read (a digest collision is a miss). Its
directory and format: `CACHE`, its row of `runtime.disk_cache.CACHES` (beside PyTensor's
numba cache, while it is on). Pure pytensor (no numba).
"""

from __future__ import annotations

from collections.abc import Callable

from pytensor.graph.basic import Variable

from ptnumba_codegen import _version
from ptnumba_codegen.analysis.graph_text import NoKey, graph_text, rewrites_text
from ptnumba_codegen.runtime import disk_cache

CACHE = disk_cache.GUARD_VERDICTS
UNCHANGED = "stabilize changes nothing"


def cone_text(inputs, var: Variable) -> str | None:
    """The cone of ``var`` above ``inputs``, spelled completely (None if it cannot be)."""
    try:
        return graph_text(inputs, [var], cone=True)
    except NoKey:
        return None


def _key(rewriters: tuple, text: str) -> str:
    return f"{_version.GENERATOR_VERSION}:{_version.GENERATOR_DIGEST}\n{rewrites_text(rewriters)}\n{text}"


def probe_once(rewriters: tuple, inputs, var, probe: Callable[[], object]):
    """``probe()``'s result (None: the rewrites change nothing), read from disk when an
    earlier process found that for the same cone and rewrites (and stored when found now)."""
    directory = CACHE.directory()
    text = None if directory is None else cone_text(inputs, var)
    if text is None:
        return probe()
    key = _key(rewriters, text)
    record = CACHE.load(directory, disk_cache.digest(key), {"text": key})
    if record is not None and record.get("verdict") == UNCHANGED:
        return None
    result = probe()
    if result is None:
        CACHE.store(directory, disk_cache.digest(key), {"text": key}, verdict=UNCHANGED)
    return result


__all__ = ["CACHE", "UNCHANGED", "NoKey", "cone_text", "probe_once", "rewrites_text"]
