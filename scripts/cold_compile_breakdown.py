"""Where one cold (or warm) compile of a catalogue model goes: exclusive seconds per section.

    PYTHONPATH=. .venv/bin/python scripts/cold_compile_breakdown.py CATALOGUE MODEL BACKEND [--warm] [--json FILE]
    PYTHONPATH=. .venv/bin/python scripts/cold_compile_breakdown.py generated:SEED gNN BACKEND ...

Builds MODEL of the catalogue checkout CATALOGUE (`tools.catalogue_bench`), or the generated
model gNN of a seed (`tools.generated_models`, CATALOGUE given as ``generated:SEED``), compiles its
logp+dlogp under BACKEND (`stock_fast`, `policy_default`, ...) with PyTensor's numba cache
in a fresh empty directory and calls it once (a *cold* compile), with timers around
PyTensor's rewrites (`FunctionMaker.prepare_fgraph`), the rewritten graph kept on disk
(`passes.rewritten_graphs`: its key, load, install, store), the policy pass, the numba linker's
funcify, planning, numba's typing-context refresh, the generator's dry runs, every numba
compiler pass (numba's event API, ``numba:run_pass``) and numba's LLVM steps per code
library (parse + per-function passes, module passes, machine code, the rest of finalize).
The timers nest: each second is counted once, in the innermost section running. LLVM time
is split by library: the final function (``numba_funcified_fgraph``), libraries named
``policy*`` (the generator's kernels as PyTensor wraps them) and every other one (stock
kernels, numba's own overloads, the generator's kernel entries, named ``impl``).

With ``--warm`` a first process (this script, cold, on a fresh cache directory) fills
PyTensor's numba cache and this process compiles again on it (a *warm* compile, what a
user's second process pays); with ``--cache-dir`` too, the directory is used as it is when
it is not empty (several warm processes on one cold one). Sections only warm processes show: numba's cache loads
(``numba cache load``: unpickling and loading a stored function's object code), Python's
garbage collector (``gc``, every collection counted where it ran), imports done during
the compile (``imports``), the exact-lanes status and the thread runtime's start.
Counts: code libraries finalized (LLVM machine code emitted in this process) and
functions loaded from numba's cache.

Measurement only: it wraps numba and PyTensor internals in this process.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOTALS: collections.defaultdict = collections.defaultdict(float)
COUNTS: collections.Counter = collections.Counter()
STACK: list = []
CLOCK = [time.perf_counter]  # --cpu: time.process_time (a loaded machine moves wall seconds, not CPU seconds)


def _push(cat):
    now = CLOCK[0]()
    if STACK:
        TOTALS[STACK[-1][0]] += now - STACK[-1][1]
    STACK.append([cat, now])


def _pop():
    now = CLOCK[0]()
    cat, t = STACK.pop()
    TOTALS[cat] += now - t
    if STACK:
        STACK[-1][1] = now


def _library_kind(library) -> str:
    name = getattr(library, "name", "")
    if "numba_funcified_fgraph" in name:
        return "final"
    if "as_written" in name or "envelope_guarded" in name:
        return "as_written"
    return "policy" if "policy" in name or "ptnumba" in name else "other"


KEYS: collections.Counter = collections.Counter()  # (op type, cache key) -> node functions made


def count_keys(basic):
    """Count every node function PyTensor's fgraph funcify makes, by op type and cache key:
    a key made twice is the same function compiled (or loaded) twice."""
    f = basic.numba_funcify_ensure_cache

    @functools.wraps(f)
    def counted(op, node=None, **kwargs):
        fn, key = f(op, node=node, **kwargs)
        kind = type(op).__name__
        COUNTS[f"node functions ({kind})"] += 1
        if key is not None:
            if KEYS[(kind, key)]:
                COUNTS[f"node functions with a key made before ({kind})"] += 1
            KEYS[(kind, key)] += 1
        return fn, key

    basic.numba_funcify_ensure_cache = counted


def wrap(owner, attr, cat, by_library=False):
    f = getattr(owner, attr)

    @functools.wraps(f)
    def timed(*args, **kwargs):
        if attr == "_finalize_specific":
            COUNTS[f"libraries finalized ({_library_kind(args[0])})"] += 1
        _push(f"LLVM {_library_kind(args[0])} libs" if by_library else cat)
        try:
            result = f(*args, **kwargs)
            if attr == "load_overload" and result is not None:
                COUNTS["functions loaded from numba's cache"] += 1
            return result
        finally:
            _pop()

    setattr(owner, attr, staticmethod(timed) if isinstance(owner.__dict__.get(attr), staticmethod) else timed)


def install():
    import pytensor.compile.maker as maker
    from numba.core import codegen, event
    from pytensor.link.numba.linker import NumbaLinker

    import importlib._bootstrap as bootstrap

    from numba.core import caching

    import ptnumba_codegen.backend.dispatch as dispatch
    import ptnumba_codegen.backend.plans as plans
    import ptnumba_codegen.lowering.base as base
    import ptnumba_codegen.lowering.kernel as kernel
    import ptnumba_codegen.lowering.vecmath.exact_lanes as exact_lanes
    import ptnumba_codegen.passes.policy_codegen as policy_codegen
    import ptnumba_codegen.runtime.threads as threads

    wrap(maker.FunctionMaker, "prepare_fgraph", "rewrites (excl. policy pass)")
    wrap(policy_codegen.PolicyCodegen, "apply", "policy pass")
    import ptnumba_codegen.passes.rewritten_graphs as rewritten_graphs

    for attr in ("graph_key", "load", "install", "store"):
        wrap(rewritten_graphs, attr, f"rewritten graph: {attr}")
    wrap(NumbaLinker, "fgraph_convert", "funcify")
    wrap(plans, "plan_node", "policy planning")
    wrap(dispatch, "funcify_policy_node", "policy funcify (keys, kernel objects)")
    from ptnumba_codegen.as_written import freeze

    from ptnumba_codegen.as_written import envelope_guards, guards, lowering
    from pytensor.link.numba.dispatch import basic as numba_basic

    wrap(freeze.AsWrittenPass, "apply", "as_written passes")
    wrap(freeze.InlineAsWritten, "apply", "as_written passes")
    wrap(envelope_guards, "add_envelope_guards", "as_written envelope guards (analysis)")
    freeze.add_envelope_guards = envelope_guards.add_envelope_guards
    wrap(guards, "stabilized", "as_written overflow-guard probes")
    wrap(lowering, "lowering_graph", "as_written copies' inner rewrites")
    lowering_graph = lowering.lowering_graph

    def counted_lowering(op):
        if getattr(op, "_lowering", None) is None:
            COUNTS["as_written copies lowered"] += 1
        return lowering_graph(op)

    lowering.lowering_graph = counted_lowering
    count_keys(numba_basic)
    dispatch.plan_node = plans.plan_node
    wrap(base.cpu_target.typing_context, "refresh", "typing-context refresh")
    wrap(kernel, "dry_run", "dry runs")
    wrap(caching.Cache, "load_overload", "numba cache load")
    wrap(exact_lanes, "status", "exact-lanes status")
    wrap(threads, "ensure_threading", "thread runtime start")
    policy_codegen.ensure_threading = threads.ensure_threading
    wrap(bootstrap, "_find_and_load", "imports")

    import pytensor.gradient as gradient
    from pytensor.graph.rewriting import db

    import pytensor
    from ptnumba_codegen.tools import modelbench

    wrap(db.SequenceDB, "query", "rewrite database queries")
    wrap(db.EquilibriumDB, "query", "rewrite database queries")
    wrap(modelbench, "compile_mode", "mode setup (incl. policy load)")
    wrap(gradient, "grad", "gradient")
    pytensor.grad = gradient.grad

    def collecting(phase, info):
        if phase == "start":
            _push("gc" if info["generation"] < 2 else "gc full")
        elif STACK and STACK[-1][0] in ("gc", "gc full"):
            COUNTS[f"gc generation {info['generation']}"] += 1
            if info["generation"] == 2:
                COUNTS[f"gc full under {STACK[-2][0] if len(STACK) > 1 else '-'}"] += 1
            _pop()

    gc.callbacks.append(collecting)
    for attr in ("add_ir_module", "finalize", "_optimize_final_module"):
        wrap(codegen.CPUCodeLibrary, attr, "", by_library=True)
    wrap(codegen.JITCodeLibrary, "_finalize_specific", "", by_library=True)

    class Passes(event.Listener):
        def on_start(self, ev):
            name = ev.data["name"].split(" [")[0]  # "nopython_type_inference [function name]"
            _push({"nopython_type_inference": "numba typing", "native_lowering": "numba lowering"}.get(name, "numba other passes"))

        def on_end(self, ev):
            _pop()

    event.register("numba:run_pass", Passes())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("catalogue")
    ap.add_argument("model")
    ap.add_argument("backend")
    ap.add_argument("--json", help="append the record to this file (one JSON object a line)")
    ap.add_argument("--warm", action="store_true", help="a cold process first fills the cache; this one is timed")
    ap.add_argument("--cache-dir", help="PyTensor's numba cache directory (default: a fresh one)")
    ap.add_argument("--cpu", action="store_true", help="sections in CPU seconds of this process (default: wall)")
    args = ap.parse_args(argv)
    if args.cpu:
        CLOCK[0] = time.process_time
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="compile-cache-")
    if args.warm and not any(Path(cache_dir).glob("*")):
        subprocess.run([sys.executable, __file__, args.catalogue, args.model, args.backend, "--cache-dir", cache_dir],
                       check=True, stdout=subprocess.DEVNULL)
    from ptnumba_codegen.tools import catalogue_bench as cb
    from ptnumba_codegen.tools.generated_bench import named_source

    source = named_source(args.catalogue, args.model)
    if not args.warm:  # first-build costs (imports) are not a cold compile's; a warm one is the bench worker's
        source.build("original")
    install()
    cpu0 = time.process_time()
    _push("other (model, gradient, graph, linker)")
    c = cb.compile_source_model(source, "original", args.backend, cache_dir=cache_dir)
    _pop()
    cpu = time.process_time() - cpu0
    fgraph = getattr(getattr(c.fn, "maker", None), "fgraph", None)
    for node in fgraph.apply_nodes if fgraph is not None else ():
        kind = getattr(node.op, "kind", None)
        COUNTS["graph nodes"] += 1
        if kind is not None and type(node.op).__name__ in ("AsWritten", "EnvelopeGuarded"):
            COUNTS[f"opaque copies ({kind})"] += 1
    kind = "warm" if args.warm else "cold"
    rec = {"model": args.model, "backend": args.backend, "kind": kind, "seconds": c.compile_s + c.first_call_s,
           "cpu_s": round(cpu, 4),
           "clock": "cpu" if args.cpu else "wall", "sections": {k: round(v, 4) for k, v in sorted(TOTALS.items(), key=lambda kv: -kv[1])},
           "counts": dict(COUNTS)}
    print(f"{args.model} / {args.backend}: {kind} compile {rec['seconds']:.2f} s")
    for k, v in rec["sections"].items():
        print(f"  {v:7.3f}  {k}")
    for k, v in sorted(COUNTS.items()):
        print(f"  {v:7d}  {k}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

