"""Where one cold compile of a catalogue model goes: exclusive seconds per section.

    PYTHONPATH=. .venv/bin/python scripts/cold_compile_breakdown.py CATALOGUE MODEL BACKEND [--json FILE]

Builds MODEL of the catalogue checkout CATALOGUE (`tools.catalogue_bench`), compiles its
logp+dlogp under BACKEND (`stock_fast`, `policy_default`, ...) with PyTensor's numba cache
in a fresh empty directory and calls it once (a *cold* compile), with timers around
PyTensor's rewrites (`FunctionMaker.prepare_fgraph`), the policy pass, the numba linker's
funcify, planning, numba's typing-context refresh, the generator's dry runs, every numba
compiler pass (numba's event API, ``numba:run_pass``) and numba's LLVM steps per code
library (parse + per-function passes, module passes, machine code, the rest of finalize).
The timers nest: each second is counted once, in the innermost section running. LLVM time
is split by library: the final function (``numba_funcified_fgraph``), libraries named
``policy*`` (the generator's kernels as PyTensor wraps them) and every other one (stock
kernels, numba's own overloads, the generator's kernel entries, named ``impl``).

Measurement only: it wraps numba and PyTensor internals in this process.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import tempfile
import time

TOTALS: collections.defaultdict = collections.defaultdict(float)
STACK: list = []


def _push(cat):
    now = time.perf_counter()
    if STACK:
        TOTALS[STACK[-1][0]] += now - STACK[-1][1]
    STACK.append([cat, now])


def _pop():
    now = time.perf_counter()
    cat, t = STACK.pop()
    TOTALS[cat] += now - t
    if STACK:
        STACK[-1][1] = now


def _library_kind(library) -> str:
    name = getattr(library, "name", "")
    if "numba_funcified_fgraph" in name:
        return "final"
    return "policy" if "policy" in name or "ptnumba" in name else "other"


def wrap(owner, attr, cat, by_library=False):
    f = getattr(owner, attr)

    @functools.wraps(f)
    def timed(*args, **kwargs):
        _push(f"LLVM {_library_kind(args[0])} libs" if by_library else cat)
        try:
            return f(*args, **kwargs)
        finally:
            _pop()

    setattr(owner, attr, staticmethod(timed) if isinstance(owner.__dict__.get(attr), staticmethod) else timed)


def install():
    import pytensor.compile.maker as maker
    from numba.core import codegen, event
    from pytensor.link.numba.linker import NumbaLinker

    import ptnumba_codegen.backend.dispatch as dispatch
    import ptnumba_codegen.backend.plans as plans
    import ptnumba_codegen.lowering.base as base
    import ptnumba_codegen.lowering.kernel as kernel
    import ptnumba_codegen.passes.policy_codegen as policy_codegen

    wrap(maker.FunctionMaker, "prepare_fgraph", "rewrites (excl. policy pass)")
    wrap(policy_codegen.PolicyCodegen, "apply", "policy pass")
    wrap(NumbaLinker, "fgraph_convert", "funcify (incl. planning)")
    wrap(plans, "plan_node", "funcify (incl. planning)")
    dispatch.plan_node = plans.plan_node
    wrap(base.cpu_target.typing_context, "refresh", "typing-context refresh")
    wrap(kernel, "dry_run", "dry runs")
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
    args = ap.parse_args(argv)
    from ptnumba_codegen.tools import catalogue_bench as cb

    entry = cb.discover(args.catalogue)[args.model]
    recipe = cb.load_recipe(args.catalogue)
    cb.build(args.catalogue, entry, "original")  # first-build costs (imports) are not the compile's
    install()
    _push("other (model, gradient, graph, linker)")
    c = cb.compile_catalogue_model(args.catalogue, entry, "original", args.backend,
                                   cache_dir=tempfile.mkdtemp(prefix="cold-cache-"), recipe=recipe)
    _pop()
    rec = {"model": args.model, "backend": args.backend, "cold": c.compile_s + c.first_call_s,
           "sections": {k: round(v, 4) for k, v in sorted(TOTALS.items(), key=lambda kv: -kv[1])}}
    print(f"{args.model} / {args.backend}: cold compile {rec['cold']:.2f} s")
    for k, v in rec["sections"].items():
        print(f"  {v:7.3f}  {k}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

