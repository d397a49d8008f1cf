"""The PyMC model benchmark: the logp + gradient call a sampler makes, per backend.

    python -m ptnumba_codegen bench --group pymc                    # n = 1e3 and 1e5, 3 rounds
    python -m ptnumba_codegen bench --group pymc --n 1e5 --models logistic_regression,gamma_glm
    python -m ptnumba_codegen bench --group pymc --models-from heldout.py --json pymc.json
    python -m ptnumba_codegen bench --group pymc --explain          # where each model is strict

What is timed is the function PyMC's samplers and nutpie's numba backend compile:
``model.logp_dlogp_function(ravel_inputs=True, mode=...)``, one raveled float64 point in,
``(logp, dlogp)`` out, called with ``trust_input=True`` (as PyMC's step methods do) at the
model's initial point plus a fixed jitter (`evaluation_point`).

**Every (model, n, backend) runs in a fresh process** (``python -m
ptnumba_codegen.tools.modelbench worker ...``): it builds the model, compiles (numba disk cache off
unless ``--use-cache``), warms up, times, and prints one JSON line. OpenBLAS, GNU OpenMP and
XLA keep their thread pools spinning after a call and take the cores from whichever
backend runs next in the same process, so one process per backend is the only fair
comparison. The workers run in rounds: for each size and model, every backend once, then
again with the order rotated. A cell is the median of all its per-call samples over the
rounds.

Agreement: a C-backend worker (``Mode(linker="cvm")``) evaluates each (model, n) at the same
point; the table prints the largest relative difference of logp and of every gradient
component over the timed backends (the agreement bar: 1e-9).

``--explain`` compiles each model under ``policy_default`` in this process (no timing) and
prints its instructions per class and how its transcendental instructions are lowered
(libmvec vector calls, scalar code, stock calls), listing the scalar and stock ones.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

import ptnumba_codegen
from ptnumba_codegen import GENERATOR_VERSION
from ptnumba_codegen.analysis.classify import is_transcendental
from ptnumba_codegen.backend.ops import is_policy_op
from ptnumba_codegen.backend.plans import plan_node
from ptnumba_codegen.explain import inner_graphs
from ptnumba_codegen.lowering.base import Unsupported
from ptnumba_codegen.tools import models as model_catalogue
from ptnumba_codegen.tools import workloads as wl

log = logging.getLogger("ptnumba_codegen.tools.modelbench")

#: Timed backends, in column order (``jax`` is dropped when JAX is not importable).
BACKENDS = ("stock_fast", "jax", "policy_default", "policy_default_1t")
#: Also accepted by ``--backends``: ``c`` (the reference) and the other policy presets.
EXTRA_BACKENDS = ("c", "stock_strict", "policy_strict", "policy_fast", "policy_as_written", "policy_rewritten")
REFERENCE = "c"
SHORT = {
    "stock_fast": "stock",
    "stock_strict": "strict",
    "jax": "jax",
    "policy_default": "pd",
    "policy_default_1t": "pd1t",
    "policy_strict": "ps",
    "policy_fast": "pf",
    "policy_as_written": "paw",
    "policy_rewritten": "prw",
    "c": "c",
}
SIZES = (1_000, 100_000)
ROUNDS = 3
#: Half-width of the uniform jitter added to the initial point (unconstrained space).
JITTER = 0.3
#: The agreement bar (relative, logp and every gradient component).
AGREEMENT_RTOL = 1e-9
#: Prefix of the worker's JSON line on stdout.
MARKER = "PTNUMBA_MODELBENCH_JSON "
#: Op classes of plain views/shape bookkeeping, left out of `explain_model`'s list of
#: nodes the generator does not own.
_VIEW_OPS = frozenset({
    "DimShuffle", "Reshape", "SpecifyShape", "Shape", "Shape_i", "DeepCopyOp", "Subtensor",
    "Split", "Join", "MakeVector", "Alloc", "AllocEmpty", "TensorFromScalar",
    "ScalarFromTensor", "ScalarSubtensor", "ScalarizedJoin",
})  # fmt: skip


# --- compiling and calling --------------------------------------------------------------


def compile_mode(backend: str):
    """``(mode, config context)`` for ``backend``: `workloads.backend_mode` for the numba
    backends; PyTensor's predefined ``"JAX"`` mode (what ``mode="JAX"`` gives a PyMC or
    nutpie user: no ``fusion``, XLA fuses itself); the C VM for ``c``."""
    from pytensor.compile.mode import Mode, get_mode

    if backend == "jax":
        return get_mode("JAX"), contextlib.nullcontext()
    if backend == "c":
        return Mode(linker="cvm", optimizer="fast_run"), contextlib.nullcontext()
    return wl.backend_mode(backend)


def evaluation_point(model, seed: int) -> np.ndarray:
    """The raveled initial point of ``model`` (the order of ``model.continuous_value_vars``,
    as ``logp_dlogp_function(ravel_inputs=True)`` expects) plus a fixed uniform jitter of
    half-width `JITTER`, so the point is not a special one (zeros, prior means)."""
    from pymc.blocking import DictToArrayBijection

    point = model.initial_point()
    flat = DictToArrayBijection.map({v.name: point[v.name] for v in model.continuous_value_vars}).data
    rng = np.random.default_rng([seed, 0x7E57])
    return np.asarray(flat, dtype=np.float64) + rng.uniform(-JITTER, JITTER, size=flat.shape)


@dataclass
class Compiled:
    fn: object  # the pytensor Function (trust_input=True)
    call: object  # fn, or a wrapper waiting for JAX's asynchronous result
    point: np.ndarray
    compile_s: float  # pytensor.function (graph rewrites, linking)
    first_call_s: float  # numba compiles at the first call
    policy_nodes: int


def compile_model(model, backend: str, seed: int, *, cache: bool = False) -> Compiled:
    """Compile ``model``'s logp+dlogp under ``backend`` and call it once at its point.

    ``cache=False`` turns the numba disk cache off, so the kernels are compiled from the
    code in the tree."""
    import pytensor

    mode, ctx = compile_mode(backend)
    point = evaluation_point(model, seed)
    with ctx, pytensor.config.change_flags(numba__cache=cache):
        t0 = time.perf_counter()
        fn = model.logp_dlogp_function(ravel_inputs=True, mode=mode)._pytensor_function
        fn.trust_input = True
        call = wl.caller(fn, backend)
        t1 = time.perf_counter()
        call(point)
        t2 = time.perf_counter()
    return Compiled(fn, call, point, t1 - t0, t2 - t1, policy_nodes(fn, backend))


def policy_nodes(fn, backend: str) -> int:
    """How many policy kernels the compiled ``fn`` has; a ``policy_*`` backend without any
    raises (the rewrite did not reach the graph)."""
    nodes = sum(is_policy_op(node.op) for node in fn.maker.fgraph.toposort())
    if backend.startswith("policy_") and not nodes:
        raise RuntimeError(f"{backend}: the policy rewrite did not reach the compiled graph")
    return nodes


def outputs(compiled: Compiled) -> tuple[float, np.ndarray]:
    logp, dlogp = compiled.call(compiled.point)
    return float(np.asarray(logp)), np.asarray(dlogp, dtype=np.float64).ravel()


def time_calls(call, arg, seconds: float, samples: int) -> tuple[int, list[float]]:
    """``(calls per sample, per-call seconds of each sample)``: about ``seconds`` in all,
    after a warm-up of at least 3 calls and 0.1 s; the garbage collector is off meanwhile."""
    t0 = time.perf_counter()
    warm = 0
    while warm < 3 or time.perf_counter() - t0 < 0.1:
        call(arg)
        warm += 1
    per_call = (time.perf_counter() - t0) / warm
    number = max(1, round(seconds / samples / max(per_call, 1e-7)))
    out = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(samples):
            t = time.perf_counter()
            for _ in range(number):
                call(arg)
            out.append((time.perf_counter() - t) / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    return number, out


# --- the worker (one process per model, n, backend) -------------------------------------


def worker(model_name: str, n: int, backend: str, *, seed: int, seconds: float, samples: int,
           models_from: str | None = None, cache: bool = False) -> dict:
    """Build, compile, warm up and time one cell; the JSON-ready record the parent reads."""
    import numba
    import pytensor

    rec = {"model": model_name, "n": n, "backend": backend, "seed": seed, "pid": os.getpid()}
    try:
        builder = model_catalogue.load_models(models_from)[model_name]
        t0 = time.perf_counter()
        model = builder(n, seed)
        rec["build_s"] = time.perf_counter() - t0
        c = compile_model(model, backend, seed, cache=cache)
        logp, dlogp = outputs(c)
        rec.update(
            compile_s=c.compile_s,
            first_call_s=c.first_call_s,
            policy_nodes=c.policy_nodes,
            ndim=int(c.point.size),
            logp=logp,
            dlogp=dlogp.tolist(),
        )
        if seconds > 0:
            number, times = time_calls(c.call, c.point, seconds, samples)
            rec.update(number=number, times_s=times, median_s=statistics.median(times))
        rec.update(
            ok=True,
            numba_threads=numba.get_num_threads(),
            versions={"pytensor": pytensor.__version__, "numba": numba.__version__,
                      "generator": ptnumba_codegen.GENERATOR_VERSION},
        )
    except Exception:
        rec.update(ok=False, error=traceback.format_exc())
    return rec


def worker_main(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m ptnumba_codegen.tools.modelbench worker",
                                description="Time one (model, n, backend) and print one JSON line.")
    p.add_argument("--model", required=True)
    p.add_argument("--n", type=float, required=True)
    p.add_argument("--backend", required=True, choices=BACKENDS + EXTRA_BACKENDS)
    p.add_argument("--seed", type=int, default=model_catalogue.DEFAULT_SEED)
    p.add_argument("--seconds", type=float, default=1.0, help="timing budget; 0: no timing")
    p.add_argument("--samples", type=int, default=15)
    p.add_argument("--models-from", default=None)
    p.add_argument("--use-cache", action="store_true")
    a = p.parse_args(argv)
    import warnings

    warnings.simplefilter("ignore")  # PyMC/PyTensor warnings would bury the JSON line
    rec = worker(a.model, int(a.n), a.backend, seed=a.seed, seconds=a.seconds, samples=a.samples,
                 models_from=a.models_from, cache=a.use_cache)
    print(MARKER + json.dumps(rec), flush=True)
    return 0 if rec["ok"] else 1


def worker_command(model_name, n, backend, opts) -> list[str]:
    cmd = [sys.executable, "-m", "ptnumba_codegen.tools.modelbench", "worker", "--model", model_name,
           "--n", str(int(n)), "--backend", backend, "--seed", str(opts.seed),
           "--seconds", str(opts.seconds), "--samples", str(opts.samples)]
    if opts.models_from:
        cmd += ["--models-from", os.path.abspath(opts.models_from)]
    if opts.use_cache:
        cmd.append("--use-cache")
    return cmd


def parse_worker_output(stdout: str, stderr: str = "", returncode: int = 0) -> dict:
    """The worker's record from its stdout; a failed record if there is none."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return json.loads(line[len(MARKER):])
    tail = "\n".join((stderr or stdout).strip().splitlines()[-15:])
    return {"ok": False, "error": f"worker exited with {returncode} and no result:\n{tail}"}


# the directory holding the ptnumba_codegen package: a worker imports it from there, whatever
# its working directory
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker_place(env: dict | None = None) -> tuple[str, dict]:
    """``(cwd, env)`` for a worker process: an empty working directory of its own, and
    ``PYTHONPATH`` led by the package's root.

    ``python -m`` puts the working directory first on ``sys.path``, and a crowded one costs
    whichever backend's process lists it: nutpie's first trace conversion reads a package
    version through ``importlib.metadata``, which lists every directory on the path, and a
    process whose own compile wrote files there lists it again (in a crowded ``/tmp`` a
    cost the policy's process paid and stock's did not)."""
    import site
    import tempfile

    env = dict(os.environ if env is None else env)
    # a checkout's root (an installed package is found without it; site-packages ahead of the
    # standard library could shadow it)
    if _PACKAGE_ROOT not in (*site.getsitepackages(), site.getusersitepackages()):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    return tempfile.mkdtemp(prefix="ptnumba_worker_"), env


def run_worker(model_name, n, backend, opts) -> dict:
    cmd = worker_command(model_name, n, backend, opts)
    cwd, env = worker_place()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"worker timed out after {opts.timeout} s: {' '.join(cmd)}"}
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    rec = parse_worker_output(proc.stdout, proc.stderr, proc.returncode)
    rec.setdefault("model", model_name)
    rec.setdefault("n", int(n))
    rec.setdefault("backend", backend)
    return rec


# --- aggregation ------------------------------------------------------------------------


def max_rel_err(a, b) -> float:
    """Largest elementwise ``|a - b| / |b|`` (``b`` the reference); equal values (the same
    infinity, both NaN) count 0, any other non-finite difference counts inf."""
    a = np.atleast_1d(np.asarray(a, dtype=np.float64))
    b = np.atleast_1d(np.asarray(b, dtype=np.float64))
    if a.shape != b.shape:
        return math.inf
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore", divide="ignore"):
        err = np.abs(a - b) / np.maximum(np.abs(b), np.finfo(np.float64).tiny)
    err = np.where(same, 0.0, np.where(np.isfinite(err), err, math.inf))
    return float(err.max(initial=0.0))


@dataclass
class Cell:
    """One (model, n, backend) over the rounds."""

    records: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> list[dict]:
        return [r for r in self.records if r.get("ok")]

    @property
    def times(self) -> list[float]:
        return [t for r in self.ok for t in r.get("times_s", ())]

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def round_medians(self) -> list[float]:
        return [r["median_s"] for r in self.ok if "median_s" in r]

    @property
    def error(self) -> str | None:
        bad = [r for r in self.records if not r.get("ok")]
        return bad[0].get("error", "failed") if bad else None

    def rel_err(self, ref: dict | None) -> float | None:
        """Largest relative difference to the reference record over every round's logp
        and dlogp (``None`` without a reference or a result)."""
        if ref is None or not ref.get("ok") or not self.ok:
            return None
        return max(
            max(max_rel_err(r["logp"], ref["logp"]), max_rel_err(r["dlogp"], ref["dlogp"]))
            for r in self.ok
        )


@dataclass
class Results:
    sizes: list[int]
    models: list[str]
    backends: list[str]
    cells: dict = field(default_factory=dict)  # (n, model, backend) -> Cell
    reference: dict = field(default_factory=dict)  # (n, model) -> C record

    def cell(self, n, model, backend) -> Cell:
        return self.cells.setdefault((n, model, backend), Cell())

    def add(self, rec: dict) -> None:
        self.cell(rec["n"], rec["model"], rec["backend"]).records.append(rec)
        if rec["backend"] == REFERENCE and (rec["n"], rec["model"]) not in self.reference:
            self.reference[(rec["n"], rec["model"])] = rec

    def median(self, n, model, backend) -> float | None:
        c = self.cells.get((n, model, backend))
        return c.median if c else None

    def ratio_best(self, n, model) -> float | None:
        """policy_default / min(stock_fast, jax) (whichever of the two were run)."""
        pd = self.median(n, model, "policy_default")
        others = [self.median(n, model, b) for b in ("stock_fast", "jax") if b in self.backends]
        others = [t for t in others if t]
        return pd / min(others) if pd and others else None

    def ratio_1t(self, n, model) -> float | None:
        pd, one = self.median(n, model, "policy_default"), self.median(n, model, "policy_default_1t")
        return pd / one if pd and one else None

    def agreement(self, n, model) -> tuple[float | None, str | None]:
        """(largest relative difference to C over the backends, the backend it came from)."""
        ref = self.reference.get((n, model))
        worst, who = None, None
        for b in self.backends:  # a timed C column is compared too (determinism across processes)
            e = self.cell(n, model, b).rel_err(ref)
            if e is not None and (worst is None or e > worst):
                worst, who = e, b
        return worst, who


def geomean(xs) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def _fmt(x, spec) -> str:
    return "-" if x is None else format(x, spec)


def table(res: Results, n: int, rounds: int) -> str:
    cols = ["model"] + [f"{SHORT[b]} ms" for b in res.backends]
    has_best = "policy_default" in res.backends and ({"stock_fast", "jax"} & set(res.backends))
    has_1t = {"policy_default", "policy_default_1t"} <= set(res.backends)
    best_name = "pd/min(" + ",".join(SHORT[b] for b in ("stock_fast", "jax") if b in res.backends) + ")"
    if has_best:
        cols.append(best_name)
    if has_1t:
        cols.append("pd/pd1t")
    cols += ["max rel err vs C", "check"]
    rows = []
    notes = []
    for m in res.models:
        row = [m]
        for b in res.backends:
            c = res.cell(n, m, b)
            row.append("ERROR" if c.error and c.median is None else _fmt(c.median and c.median * 1e3, ".3f"))
            if c.error:
                notes.append(f"{m} / {b}: {c.error.strip().splitlines()[-1]}")
        if has_best:
            row.append(_fmt(res.ratio_best(n, m), ".2f"))
        if has_1t:
            row.append(_fmt(res.ratio_1t(n, m), ".2f"))
        err, who = res.agreement(n, m)
        row.append("-" if err is None else f"{err:.1e} ({SHORT[who]})")
        status = []
        if err is None:
            status.append("no reference" if (n, m) not in res.reference else "no result")
        elif err > AGREEMENT_RTOL:
            status.append(f"DISAGREES > {AGREEMENT_RTOL:g}")
        if any(res.cell(n, m, b).error for b in res.backends):
            status.append("ERROR")
        row.append("; ".join(status) or "ok")
        rows.append(row)
    foot = ["geometric mean"] + [""] * len(res.backends)
    if has_best:
        foot.append(_fmt(geomean(res.ratio_best(n, m) for m in res.models), ".2f"))
    if has_1t:
        foot.append(_fmt(geomean(res.ratio_1t(n, m) for m in res.models), ".2f"))
    foot += ["", ""]
    widths = [max(len(h), *(len(r[i]) for r in [*rows, foot])) for i, h in enumerate(cols)]

    def line(vals):
        return "  ".join(v.ljust(w) if i == 0 or i == len(cols) - 1 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(vals, widths))).rstrip()

    out = [
        f"# n = {n:,} rows: median ms per logp+dlogp call, {rounds} round(s), each backend in its own "
        f"process; generator {GENERATOR_VERSION}",
        line(cols),
        "  ".join("-" * w for w in widths),
        *(line(r) for r in rows),
        line(foot),
    ]
    out += verdict(res, n)
    out += [f"# {note}" for note in notes]
    return "\n".join(out)


def verdict(res: Results, n: int) -> list[str]:
    """The benchmark's targets at this size (policy against stock and JAX, threads,
    agreement with C), one line each."""
    out = []
    best = {m: res.ratio_best(n, m) for m in res.models}
    if any(v is not None for v in best.values()):
        losing = [f"{m} {v:.2f}" for m, v in best.items() if v is not None and v > 1.0]
        g = geomean(best.values())
        out.append(f"# pd <= min(stock, jax): {sum(v is not None and v <= 1.0 for v in best.values())}/"
                   f"{len(best)} models" + (f" (slower: {', '.join(losing)})" if losing else ""))
        out.append(f"# geometric mean pd/min(stock, jax) = {_fmt(g, '.3f')} (target <= 0.8: "
                   f"{'met' if g is not None and g <= 0.8 else 'NOT met'})")
    one = {m: res.ratio_1t(n, m) for m in res.models}
    if any(v is not None for v in one.values()):
        losing = [f"{m} {v:.2f}" for m, v in one.items() if v is not None and v > 1.0]
        out.append(f"# pd <= pd1t: {sum(v is not None and v <= 1.0 for v in one.values())}/{len(one)} models"
                   + (f" (slower: {', '.join(losing)})" if losing else ""))
    errs = [res.agreement(n, m)[0] for m in res.models]
    out.append(f"# agreement with C <= {AGREEMENT_RTOL:g}: "
               f"{sum(e is not None and e <= AGREEMENT_RTOL for e in errs)}/{len(errs)} models")
    return out


def to_json(res: Results, args) -> dict:
    return {
        "meta": {
            "sizes": res.sizes, "models": res.models, "backends": res.backends,
            "rounds": args.rounds, "seconds": args.seconds, "samples": args.samples,
            "seed": args.seed, "use_cache": args.use_cache, "models_from": args.models_from,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "cells": [
            {"n": n, "model": m, "backend": b, "median_s": c.median,
             "round_medians_s": c.round_medians, "records": c.records}
            for (n, m, b), c in res.cells.items()
        ],
        "summary": {
            str(n): {
                m: {"ratio_best": res.ratio_best(n, m), "ratio_1t": res.ratio_1t(n, m),
                    "max_rel_err_vs_c": res.agreement(n, m)[0]}
                for m in res.models
            }
            for n in res.sizes
        },
    }


# --- the runner -------------------------------------------------------------------------


def run(opts, run_one=run_worker) -> Results:
    """Every (n, model): the C reference once (unless ``c`` is timed), then ``rounds``
    rounds of every backend, order rotated each round. ``run_one(model, n, backend,
    opts) -> record`` (a subprocess by default)."""
    res = Results(list(opts.sizes), list(opts.models), list(opts.backends))
    for n in opts.sizes:
        for m in opts.models:
            if REFERENCE not in opts.backends:
                ref_opts = argparse.Namespace(**{**vars(opts), "seconds": 0.0})
                res.add(run_one(m, n, REFERENCE, ref_opts))
            for r in range(opts.rounds):
                k = r % len(opts.backends)
                for b in opts.backends[k:] + opts.backends[:k]:
                    t0 = time.perf_counter()
                    rec = run_one(m, n, b, opts)
                    res.add(rec)
                    if rec.get("ok"):
                        log.info("n=%d %s / %s round %d: %s ms per call (worker %.1f s)", n, m, b, r + 1,
                                 _fmt(rec.get("median_s") and rec["median_s"] * 1e3, ".3f"),
                                 time.perf_counter() - t0)
                    else:
                        log.error("n=%d %s / %s round %d failed:\n%s", n, m, b, r + 1, rec.get("error"))
    return res


# --- explain: where each model's math is strict -----------------------------------------


def _static_size(node) -> int | None:
    """The largest static element count of a node's inputs and outputs (None: unknown)."""
    sizes = []
    for var in (*node.inputs, *node.outputs):
        shape = getattr(var.type, "shape", ())
        if any(d is None for d in shape):
            return None
        sizes.append(math.prod(shape))
    return max(sizes, default=1)


def lowering_rows(fn, rows_at_least: int = 1) -> tuple[list[tuple], list[str], Counter]:
    """``(rows, fallbacks, other nodes)`` of a compiled function.

    One row ``(op name, class, lowering, transcendental?, per_row?)`` per scalar
    instruction of every policy kernel. Lowering: ``libmvec`` (a vector call or vector
    formula), ``exact`` (libm's bits from libm's algorithm on vectors), ``scalar`` (scalar code, libm) or ``stock`` (the stock backend's function).
    ``per_row``: the kernel loops over at least ``rows_at_least`` elements (or over a
    shape not known statically), i.e. it runs over the data rather than the parameters.
    Also the nodes that fell back to the stock kernel, and a count of the nodes the
    generator does not own (views and shape bookkeeping left out)."""
    rows, fallbacks, others = [], [], Counter()
    for _, graph in inner_graphs(fn.maker.fgraph):
        for node in graph.toposort():
            if not is_policy_op(node.op):
                name = type(node.op).__name__
                if name not in _VIEW_OPS:
                    others[name] += 1
                continue
            try:
                plan = plan_node(node)
            except Unsupported as err:
                fallbacks.append(f"{node.op}: {err}")
                continue
            size = _static_size(node)
            per_row = size is None or size >= rows_at_least
            body = plan.body
            for instr, klass, emitter in zip(body.program.instrs, body.classes, body.emitters, strict=True):
                label = emitter.label or ""
                if label.startswith("libm lanes"):  # libm's bits: lane by lane, or exact vector code
                    how = "exact" if emitter.pays_alone else "scalar"
                elif label:
                    how = "libmvec"
                elif emitter.stock_key is not None:
                    how = "stock"
                else:
                    how = "scalar"
                rows.append((instr.op_name, klass, how, is_transcendental(instr.op), per_row))
    return rows, fallbacks, others


_CLASS_SHORT = {"comparison_sensitive": "cs", "reduction": "red", "transcendental": "tr", "arithmetic": "ar"}


def summarize_rows(rows) -> dict:
    """Counts over the per-row instructions (see `lowering_rows`): per class, the
    transcendental ones by lowering, and which of them are not vectorized
    (``"Log[cs]": 3``: three scalar Logs in a comparison cone); plus the number of
    instructions in parameter-sized kernels."""
    data = [r for r in rows if r[4]]
    classes = Counter(k for _, k, _, _, _ in data)
    trans = [(op, k, how) for op, k, how, t, _ in data if t]
    lowering = Counter(how for _, _, how in trans)
    scalar = Counter(f"{op}[{_CLASS_SHORT.get(k, k)}]" for op, k, how in trans if how == "scalar")
    stock = Counter(f"{op}[{_CLASS_SHORT.get(k, k)}]" for op, k, how, _, _ in data if how == "stock")
    return {
        "instructions": len(data),
        "classes": {c: classes.get(c, 0) for c in _CLASS_SHORT},
        "transcendental": len(trans),
        "transcendental_strict": sum(k == "comparison_sensitive" for _, k, _ in trans),
        "lowering": {h: lowering.get(h, 0) for h in ("libmvec", "exact", "scalar", "stock")},
        "scalar_ops": dict(scalar.most_common()),
        "stock_ops": dict(stock.most_common()),
        "parameter_instructions": len(rows) - len(data),
    }


def explain_table(summaries: dict[str, dict]) -> str:
    head = ["model", "instrs", "cs", "red", "tr", "ar", "transc", "in cs", "libmvec", "exact", "scalar", "stock", "param instrs"]
    rows = []
    for m, s in summaries.items():
        if "error" in s:
            rows.append([m, "ERROR"] + [""] * (len(head) - 2))
            continue
        c, lo = s["classes"], s["lowering"]
        rows.append([m, str(s["instructions"]), *(str(c[k]) for k in _CLASS_SHORT),
                     str(s["transcendental"]), str(s["transcendental_strict"]),
                     str(lo["libmvec"]), str(lo["exact"]), str(lo["scalar"]), str(lo["stock"]),
                     str(s["parameter_instructions"])])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    out = ["# policy default, kernels over the data (>= n elements): scalar instructions per class, "
           "and the transcendental ones by lowering",
           "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))) for r in rows]
    out.append("# cs/red/tr/ar: comparison_sensitive/reduction/transcendental/arithmetic; transc: "
               "transcendental ops (any class), 'in cs': of them in a comparison cone; libmvec: vector "
               "calls or vector formulas, exact: libm's own algorithm on vectors (libm's bits, "
               "lowering/exact_lanes.py), scalar: scalar code (libm), stock: the stock backend's "
               "function; param instrs: instructions in kernels over the parameters only")
    for m, s in summaries.items():
        if "error" in s:
            out.append(f"{m}: explain failed: {s['error'].strip().splitlines()[-1]}")
            continue
        parts = []
        if s["scalar_ops"]:
            parts.append("scalar " + ", ".join(f"{k} x{v}" for k, v in s["scalar_ops"].items()))
        if s["stock_ops"]:
            parts.append("stock " + ", ".join(f"{k} x{v}" for k, v in s["stock_ops"].items()))
        if s.get("fallbacks"):
            parts.append(f"{len(s['fallbacks'])} node(s) fell back: " + "; ".join(s["fallbacks"]))
        if s.get("other_nodes"):
            parts.append("not generated: " + ", ".join(f"{k} x{v}" for k, v in s["other_nodes"].items()))
        out.append(f"{m}: " + (" | ".join(parts) or "no scalar or stock transcendental over the data"))
    return "\n".join(out)


def explain_model(model, rows_at_least: int = 1) -> tuple[dict, object]:
    """``(summary, compiled function)`` of ``model`` under policy_default (not called);
    ``rows_at_least``: see `lowering_rows`."""
    import pytensor

    mode, ctx = compile_mode("policy_default")
    with ctx, pytensor.config.change_flags(numba__cache=False):
        fn = model.logp_dlogp_function(ravel_inputs=True, mode=mode)._pytensor_function
    rows, fallbacks, others = lowering_rows(fn, rows_at_least)
    summary = summarize_rows(rows)
    summary["fallbacks"] = fallbacks
    summary["other_nodes"] = dict(others.most_common())
    return summary, fn


def run_explain(opts) -> str:
    catalogue = model_catalogue.load_models(opts.models_from)
    n = min(opts.sizes)
    summaries, full = {}, []
    for m in opts.models:
        try:
            s, fn = explain_model(catalogue[m](n, opts.seed), n)
        except Exception:
            summaries[m] = {"error": traceback.format_exc()}
            continue
        summaries[m] = s
        if opts.explain_full:
            full += [f"=== {m} (n = {n:,}) ===", ptnumba_codegen.explain(fn), ""]
    return "\n".join([*full, f"# n = {n:,}", explain_table(summaries)])


# --- CLI --------------------------------------------------------------------------------


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(float(s)) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--n: expected comma-separated sizes like 1e3,1e5, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--n: sizes must be >= 1, got {text!r}")
    return sizes


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m ptnumba_codegen bench --group pymc",
        description="Time the logp+dlogp function of standard PyMC models under each backend, "
        "each (model, n, backend) in its own process, and check agreement with the C backend.",
    )
    p.add_argument("--group", choices=["pymc"], default="pymc", help=argparse.SUPPRESS)
    p.add_argument("--n", type=_sizes, default=list(SIZES), dest="sizes", help="comma-separated row counts (default 1e3,1e5)")
    p.add_argument("--models", default=None, help="comma-separated model names (default: all): " + ",".join(model_catalogue.MODELS))
    p.add_argument("--models-from", default=None, metavar="FILE.py", help="a Python file defining MODELS = {name: builder(n, seed) -> pm.Model}; its models are added to the catalogue")
    p.add_argument("--backends", default=None, help="comma-separated (default: " + ",".join(BACKENDS) + "; jax only if importable); also: " + ",".join(EXTRA_BACKENDS))
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"worker rounds per (model, n); backend order rotated each round (default {ROUNDS})")
    p.add_argument("--seconds", type=float, default=1.0, help="timing budget per worker after warm-up (default 1.0)")
    p.add_argument("--samples", type=int, default=15, help="timing samples per worker (default 15)")
    p.add_argument("--seed", type=int, default=model_catalogue.DEFAULT_SEED, help="data and jitter seed")
    p.add_argument("--use-cache", action="store_true", help="let workers load kernels from the numba disk cache (faster; trusts the cache keys)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before a worker is killed (default 900)")
    p.add_argument("--explain", action="store_true", help="no timing: per model, instructions per class and how the transcendental ones are lowered under policy default (at the smallest --n)")
    p.add_argument("--explain-full", action="store_true", help="with --explain: also print ptnumba_codegen.explain() of every model")
    p.add_argument("--json", metavar="FILE", default=None, help="write every worker record and the summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings on stderr")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.samples < 1 or args.seconds <= 0:
        p.error("--rounds and --samples must be >= 1 and --seconds > 0")
    try:
        catalogue = model_catalogue.load_models(args.models_from)
        args.models = model_catalogue.select(catalogue, args.models)
    except ValueError as err:
        p.error(str(err))
    if args.backends:
        args.backends = [s.strip() for s in args.backends.split(",") if s.strip()]
        unknown = [b for b in args.backends if b not in BACKENDS + EXTRA_BACKENDS]
        if unknown:
            p.error(f"unknown backend(s) {unknown}; known: {', '.join(BACKENDS + EXTRA_BACKENDS)}")
    else:
        args.backends = list(BACKENDS)
    if "jax" in args.backends and not wl.jax_available():
        log.warning("jax is not importable: no jax column")
        args.backends.remove("jax")
    args.explain = args.explain or args.explain_full
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["worker"]:
        return worker_main(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    if not model_catalogue.pymc_available():
        print("error: the PyMC benchmark needs pymc: pip install -e '.[pymc]'", file=sys.stderr)
        return 2
    if args.explain:
        import warnings

        warnings.simplefilter("ignore")
        print(run_explain(args), flush=True)
        return 0
    res = run(args)
    for n in args.sizes:
        print(table(res, n, args.rounds) + "\n", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(to_json(res, args), fh, indent=1)
        log.info("wrote %s", args.json)
    return 1 if any(c.error for c in res.cells.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
