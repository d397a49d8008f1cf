"""The overflow-guard probes' "nothing to guard" verdicts, on disk, keyed by the cone's content.

`guards.stabilized` asks, for every decision input of an as-written copy, whether
PyTensor's canonicalize and stabilize rewrites would change its cone: it clones the cone
and runs both rewrite databases over it. In a warm process that is Python the stock
backend never pays (issue 20: 0.04-0.08 s of CPU per compile of the catalogue's GLM
negative binomial and BEST), and on every model of the catalogue core measured the answer
was "no change". That answer depends only on the cone (its ops with their properties, its
types and constants, how they connect) and on which rewrites the two databases hold
(PyTensor's version, what PyMC or the user registered). `cone_text` spells all of that out;
a verdict of "no change" is stored under it, and read back instead of probing again. A cone
it cannot spell completely (an op without ``__props__`` holding something other than plain
data or an inner graph, `analysis.graph_text`) has no key and is probed every time; a cone whose
probe finds a change is probed every time too (the guard needs the stabilized graph).

Each record holds its full key text, compared on read (a digest collision is a miss). The
files live beside PyTensor's numba cache while it is on (`runtime.disk_cache`). Pure
pytensor (no numba).
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable

from pytensor.graph.basic import Variable

from ptnumba_codegen.analysis.graph_text import NoKey, graph_text
from ptnumba_codegen.runtime import disk_cache

FORMAT = 2  # bump when the file layout or the key's spelling changes
SUBDIR = "ptnumba_codegen_guard_verdicts"
UNCHANGED = "stabilize changes nothing"


def cone_text(inputs, var: Variable) -> str | None:
    """The cone of ``var`` above ``inputs``, spelled completely (None if it cannot be)."""
    try:
        return graph_text(inputs, [var], cone=True)
    except NoKey:
        return None


@functools.cache
def rewrites_text(rewriters: tuple) -> str:
    """What the probe's rewrite databases hold: PyTensor's version and every rewrite's name."""
    import pytensor

    seen: list[str] = []

    def walk(r):
        seen.append(getattr(r, "name", None) or getattr(r, "__name__", None) or type(r).__qualname__)
        for attr in ("data", "final_rewriters", "cleanup_rewriters", "global_rewriters"):
            for sub in getattr(r, attr, None) or ():
                walk(sub)
        if hasattr(r, "get_node_rewriters"):
            for sub in r.get_node_rewriters():
                walk(sub)

    for r in rewriters:
        walk(r)
    return f"pytensor {pytensor.__version__}\n" + "\n".join(sorted(set(map(str, seen))))


def _key(rewriters: tuple, text: str) -> str:
    from ptnumba_codegen._version import GENERATOR_DIGEST, GENERATOR_VERSION

    return f"{GENERATOR_VERSION}:{GENERATOR_DIGEST}\n{rewrites_text(rewriters)}\n{text}"


def _path(directory, key: str):
    return directory / f"{disk_cache.digest(key)}.pkl"


def probe_once(rewriters: tuple, inputs, var, probe: Callable[[], object]):
    """``probe()``'s result (None: the rewrites change nothing), read from disk when an
    earlier process found that for the same cone and rewrites (and stored when found now)."""
    directory = disk_cache.directory(SUBDIR)
    text = None if directory is None else cone_text(inputs, var)
    if text is None:
        return probe()
    key = _key(rewriters, text)
    record = disk_cache.read_record(directory, lambda d: _path(d, key), pickle.loads, FORMAT, {"text": key})
    if record is not None and record.get("verdict") == UNCHANGED:
        return None
    result = probe()
    if result is None:
        data = {"format": FORMAT, "key": {"text": key}, "verdict": UNCHANGED}
        disk_cache.write(_path(directory, key), pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
    return result


__all__ = ["FORMAT", "SUBDIR", "UNCHANGED", "NoKey", "cone_text", "probe_once", "rewrites_text"]
