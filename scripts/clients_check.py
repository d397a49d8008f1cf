"""Client checks: pymc-marketing and pymc-extras models under the policy, run with
.venv-clients (scripts/clients_env.sh; docs/clients.md).

    .venv-clients/bin/python scripts/clients_check.py                      # every model
    .venv-clients/bin/python scripts/clients_check.py --models statespace_structural --draws 200

A plain script, not a test file: the main test suite never sees it, nor pymc-marketing.
For each model of ``clients/models/`` (``build_model() -> (model, initial point)``), each
in a process of its own:

- ``c``: logp and gradient at the initial point through ``clients/models/_benchmark.py``'s
  ``build_logp_fn`` (PyMC's recipe for its samplers' function) under the C backend: the
  reference;
- ``stock``: the same with ``mode="NUMBA"``, stock numba (PyTensor's fast-math flags);
- ``policy``: the same after ``ptnumba_codegen.enable("default")``, still ``mode="NUMBA"``,
  as a client's own compile sees it; the compiled graph must hold policy kernels;
- ``sample``: under ``enable("default")``, ``nutpie.compile_pymc_model`` and
  ``nutpie.sample`` (2 chains, ``--tune`` + ``--draws``).

Every process runs with ``pytensor.config.on_opt_error = "raise"`` (a failed rewrite is
an error, not a logged "Rewrite failure"), and its stderr is searched for tracebacks and
"Rewrite failure" lines. stock and policy must agree with C and with each other within
``RTOL``, normwise on logp and on the gradient. The exit status is 1 when anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "clients" / "models"
MARKER = "CLIENTS_CHECK_JSON "
RTOL = 1e-9
COMPILES = ("c", "stock", "policy")
#: stderr lines that fail a process even when it returned a result
BAD_LINES = ("Traceback (most recent call last)", "Rewrite failure")


def model_names() -> list[str]:
    return sorted(p.stem for p in MODELS_DIR.glob("*.py") if not p.name.startswith("_"))


def load(name: str):
    """The module ``clients/models/NAME.py``."""
    import importlib

    if str(MODELS_DIR) not in sys.path:
        sys.path.insert(0, str(MODELS_DIR))
    return importlib.import_module(name)


# --- the worker: one (model, kind) in this process ---------------------------------------


def compile_and_call(name: str, kind: str, out: str) -> dict:
    import pytensor
    from pytensor.compile.mode import Mode

    import ptnumba_codegen
    from ptnumba_codegen.backend.ops import is_policy_op

    model, ip = load(name).build_model()
    if kind == "policy":
        ptnumba_codegen.enable("default")
    mode = Mode(linker="cvm", optimizer="fast_run") if kind == "c" else "NUMBA"
    t0 = time.perf_counter()
    fn, x = load("_benchmark").build_logp_fn(model, ip, mode=mode)
    logp, dlogp = fn(x)
    seconds = time.perf_counter() - t0
    nodes = [node.op for node in fn.maker.fgraph.toposort()]
    policy_nodes = sum(is_policy_op(op) for op in nodes)
    if kind == "policy" and not policy_nodes:
        raise RuntimeError("enable('default') left no policy kernel in the compiled graph")
    np.savez(out, logp=np.atleast_1d(logp), dlogp=np.asarray(dlogp, dtype=np.float64).ravel())
    return {"compile_and_call_s": seconds, "ndim": int(x.size), "logp": float(logp),
            "policy_nodes": policy_nodes, "scans": sum(type(op).__name__ == "Scan" for op in nodes),
            "pytensor": pytensor.__version__}


def sample(name: str, tune: int, draws: int, seed: int) -> dict:
    import nutpie

    import ptnumba_codegen

    model, _ = load(name).build_model()
    ptnumba_codegen.enable("default")
    t0 = time.perf_counter()
    compiled = nutpie.compile_pymc_model(model, backend="numba")
    t1 = time.perf_counter()
    trace = nutpie.sample(compiled, chains=2, cores=2, tune=tune, draws=draws, seed=seed, progress_bar=False)
    t2 = time.perf_counter()
    stats = trace.sample_stats
    return {"compile_s": t1 - t0, "sample_s": t2 - t1, "draws": int(stats.sizes["draw"]),
            "chains": int(stats.sizes["chain"]), "divergences": int(stats["diverging"].sum()),
            "mean_tree_depth": float(stats["depth"].mean()) if "depth" in stats else None}


def worker(spec: dict) -> dict:
    import warnings

    import pytensor

    warnings.simplefilter("ignore", FutureWarning)
    pytensor.config.on_opt_error = "raise"
    rec = {"model": spec["model"], "kind": spec["kind"]}
    try:
        if spec["kind"] == "sample":
            rec.update(sample(spec["model"], spec["tune"], spec["draws"], spec["seed"]))
        else:
            rec.update(compile_and_call(spec["model"], spec["kind"], spec["out"]))
        rec["ok"] = True
    except Exception as err:
        rec.update(ok=False, error=f"{type(err).__name__}: {err}".splitlines()[0][:300],
                   traceback=traceback.format_exc())
    return rec


def run_worker(spec: dict, timeout: float) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "worker", json.dumps(spec)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**spec, "ok": False, "error": f"timed out after {timeout:g} s"}
    rec = next((json.loads(line[len(MARKER):]) for line in reversed(proc.stdout.splitlines())
                if line.startswith(MARKER)), None)
    if rec is None:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        rec = {**spec, "ok": False, "error": f"worker exited with {proc.returncode} and no result",
               "traceback": tail}
    bad = [line for line in proc.stderr.splitlines() if any(b in line for b in BAD_LINES)]
    if bad and rec.get("ok"):
        rec.update(ok=False, error=f"stderr: {bad[0].strip()[:300]}", traceback=proc.stderr[-4000:])
    rec["process_s"] = time.perf_counter() - t0
    return rec


# --- the parent -------------------------------------------------------------------------


def norm_rel_err(a, b) -> float:
    from ptnumba_codegen.tools.catalogue_bench import norm_rel_err as nre

    return nre(a, b)


def agreement(path_a: str, path_b: str) -> tuple[float, float]:
    """Normwise relative error of ``a`` to ``b``: ``(logp, gradient)``."""
    with np.load(path_a) as a, np.load(path_b) as b:
        return norm_rel_err(a["logp"], b["logp"]), norm_rel_err(a["dlogp"], b["dlogp"])


def check_model(name: str, args, workdir: Path) -> list[str]:
    """Run ``name``'s processes, print what each gave; the failures, as lines."""
    failures = []
    outs = {}
    for kind in COMPILES:
        out = str(workdir / f"{name}-{kind}.npz")
        rec = run_worker({"model": name, "kind": kind, "out": out}, args.timeout)
        if rec["ok"]:
            outs[kind] = out
            print(f"{name:28s} {kind:7s} ok   logp {rec['logp']:.15g}  dim {rec['ndim']}  "
                  f"scans {rec['scans']}  policy kernels {rec['policy_nodes']}  "
                  f"compile+call {rec['compile_and_call_s']:.1f} s", flush=True)
        else:
            failures.append(f"{name} {kind}: {rec['error']}")
            print(f"{name:28s} {kind:7s} FAIL {rec['error']}\n{rec.get('traceback', '')}", flush=True)
    for a, b in (("stock", "c"), ("policy", "c"), ("policy", "stock")):
        if a in outs and b in outs:
            e_logp, e_grad = agreement(outs[a], outs[b])
            verdict = "ok" if max(e_logp, e_grad) <= RTOL else "DISAGREES"
            print(f"{name:28s} {a} vs {b}: normwise logp {e_logp:.1e}, gradient {e_grad:.1e}  {verdict}", flush=True)
            if verdict != "ok":
                failures.append(f"{name} {a} vs {b}: logp {e_logp:.1e}, gradient {e_grad:.1e} > {RTOL:g}")
    if args.draws > 0:
        rec = run_worker({"model": name, "kind": "sample", "tune": args.tune, "draws": args.draws,
                          "seed": args.seed}, args.timeout)
        if rec["ok"]:
            print(f"{name:28s} sample  ok   {rec['chains']} chains x {rec['draws']} draws, "
                  f"{rec['divergences']} divergences, nutpie compile {rec['compile_s']:.1f} s, "
                  f"sampling {rec['sample_s']:.1f} s", flush=True)
        else:
            failures.append(f"{name} sample: {rec['error']}")
            print(f"{name:28s} sample  FAIL {rec['error']}\n{rec.get('traceback', '')}", flush=True)
    return failures


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["worker"]:
        print(MARKER + json.dumps(worker(json.loads(argv[1]))), flush=True)
        return 0
    p = argparse.ArgumentParser(prog="scripts/clients_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(model_names()),
                   help="comma-separated, of: " + ", ".join(model_names()) + " (default: all)")
    p.add_argument("--tune", type=int, default=300, help="nutpie tuning steps per chain (default 300)")
    p.add_argument("--draws", type=int, default=300, help="nutpie draws per chain; 0: no sampling (default 300)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per process (default 1800)")
    args = p.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(names) - set(model_names()))
    if unknown:
        p.error(f"unknown model(s) {unknown}; allowed: {', '.join(model_names())}")
    failures = []
    with tempfile.TemporaryDirectory(prefix="clients_check_") as workdir:
        for name in names:
            failures += check_model(name, args, Path(workdir))
    print(f"\n{len(failures)} failure(s)" + "".join(f"\n  {f}" for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
