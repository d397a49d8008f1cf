"""The catalogue benchmark: PyMC's model catalogue (github.com/ricardoV94/pymc-model-catalogue)
under each backend.

    python -m ptnumba_codegen bench --group catalogue --catalogue PATH            # the 25-model core
    python -m ptnumba_codegen bench --group catalogue --catalogue PATH --models all --forms original,frozen
    python -m ptnumba_codegen bench --group catalogue --catalogue PATH --models BEST,ar2 \\
        --backends stock_fast,policy_default --rounds 1 --nutpie --json out.json

``PATH`` is a checkout of the catalogue (nothing of it is copied here). Every model file
``PATH/models/NAME.py`` (``PATH/models_discrete/NAME.py``: discrete free variables) defines
``build_model() -> (model, initial point)``; the function timed is the catalogue's own
recipe, ``PATH/models/_benchmark.py:build_logp_fn(model, ip, mode=..., with_grad=...)``:
one raveled float64 point in, ``[logp, dlogp]`` out (``[logp]`` for discrete models,
``with_grad=False``), ``trust_input=True``, at the model's initial point. Two forms: the
model as written (``original``) and ``freeze_dims_and_data(model)`` (``frozen``).

**Every (form, model, backend) cell runs in fresh processes**
(``python -m ptnumba_codegen.tools.catalogue_bench worker ...``, the JSON line and the
subprocess runner of `ptnumba_codegen.tools.modelbench`):

- ``cold``: an empty PyTensor numba cache (a fresh directory): build, ``build_logp_fn``
  and the first call (numba compiles there) — the *cold compile*; it fills the cache;
- ``warm``: a second process on that cache: the same — the *warm compile* — then the
  per-call timing (``--time-budget`` seconds, median and fastest call);
- rounds 2.. (``--rounds``): ``warm`` processes only, the backend order rotated each round.

The C backend (``Mode(linker="cvm")``) evaluates every (form, model) once as the reference
(unless ``c`` is itself among ``--backends``); the workers save their outputs (``.npz``)
and the parent compares: *elementwise*, the largest ``|x - ref| / |ref|`` over logp and
every gradient component (`modelbench.max_rel_err`), and *normwise*,
``||x - ref|| / ||ref||`` per output, the larger of the two. The status of a cell is
``ok``, ``error: <type>: <message>`` (an exception building, compiling or calling — a
status, never a crash of the benchmark) or ``DISAGREES`` (normwise error > 1e-9).

``--nutpie`` adds time to posterior: in one more process per cell,
``nutpie.compile_pymc_model(model, backend="numba")`` (under
``ptnumba_codegen.enabled(policy)`` for the policy backends; ``backend="jax"`` for jax;
not available for ``c`` or discrete models), then ``nutpie.sample`` with 1000 tuning
steps and 1000 draws on 2 chains; compile and sampling timed apart. Its compile starts on
an empty PyTensor numba cache of its own (a user's first run), like the cold phase; a second
nutpie process on that cache (``nutpie_warm``) is a user's next run: what it compiles again
is what neither PyTensor's nor the generator's caches keep (nutpie's own C wrappers).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import ptnumba_codegen
from ptnumba_codegen._version import GENERATOR_DIGEST, GENERATOR_VERSION
from ptnumba_codegen.tools import modelbench as mb
from ptnumba_codegen.tools import workloads as wl

log = logging.getLogger("ptnumba_codegen.tools.catalogue_bench")

#: Timed backends by default, in column order (``jax`` dropped when JAX is not importable).
#: ``policy_default`` decides as written; ``policy_rewritten`` decides on the rewritten graph
#: (``policy_as_written``, an alias of ``policy_default``, is still accepted).
BACKENDS = ("stock_fast", "jax", "policy_default", "policy_default_1t", "policy_rewritten")
#: Also accepted by ``--backends``.
EXTRA_BACKENDS = ("c", "stock_strict", "policy_strict", "policy_fast", "policy_as_written")
ALL_BACKENDS = BACKENDS + EXTRA_BACKENDS
REFERENCE = mb.REFERENCE
FORMS = ("original", "frozen")
MODEL_SETS = ("core", "all")
#: A call is "small" when stock's median is below this many microseconds.
SMALL_US = 50.0
#: Normwise agreement bar (relative); elementwise is reported, not judged.
AGREEMENT_RTOL = mb.AGREEMENT_RTOL
#: nutpie's run: tuning steps, draws, chains.
NUTPIE_TUNE, NUTPIE_DRAWS, NUTPIE_CHAINS = 1000, 1000, 2
#: nutpie's processes per cell, in order: on an empty cache of their own, then on it again.
NUTPIE_PHASES = ("nutpie", "nutpie_warm")
CORE_FILE = "BENCHMARK_CORE.md"
#: ``--blas-threads N`` sets these in every worker's environment (OpenBLAS reads them at load).
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS",)
MODEL_DIRS = (("models", False), ("models_discrete", True))  # (directory, discrete?)


# --- the catalogue ----------------------------------------------------------------------


@dataclass(frozen=True)
class CatalogueModel:
    name: str
    path: Path
    discrete: bool


def check_catalogue(root) -> Path:
    """``root`` as a Path, after checking it looks like a catalogue checkout (ValueError)."""
    root = Path(root).expanduser().resolve()
    if not (root / "models" / "_benchmark.py").is_file():
        raise ValueError(f"--catalogue {root}: not a pymc-model-catalogue checkout "
                         "(expected models/_benchmark.py and models/NAME.py files)")
    return root


def discover(root) -> dict[str, CatalogueModel]:
    """Every model of the catalogue by name (the file's stem): ``models/*.py`` then
    ``models_discrete/*.py``; files starting with ``_`` are helpers, not models."""
    root = Path(root)
    found: dict[str, CatalogueModel] = {}
    for folder, discrete in MODEL_DIRS:
        for path in sorted((root / folder).glob("*.py")):
            if path.name.startswith("_"):
                continue
            name = path.stem if path.stem not in found else f"{folder}/{path.stem}"
            found[name] = CatalogueModel(name, path, discrete)
    return found


def core_names(root) -> list[str]:
    """The model names listed in ``BENCHMARK_CORE.md`` (``models/NAME.py`` entries), in order."""
    path = Path(root) / CORE_FILE
    if not path.is_file():
        raise ValueError(f"--models core: {path} does not exist")
    names = re.findall(r"`(?:models|models_discrete)/(\w+)\.py`", path.read_text())
    return list(dict.fromkeys(names))


def select_models(root, spec: str | None) -> list[str]:
    """``core`` (default), ``all``, or comma-separated names; ValueError naming what is
    allowed."""
    models = discover(root)
    spec = (spec or "core").strip()
    if spec == "all":
        return list(models)
    names = core_names(root) if spec == "core" else [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in models]
    if unknown or not names:
        listed = ", ".join(list(models)[:12]) + (", ..." if len(models) > 12 else "")
        raise ValueError(f"--models: unknown model(s) {unknown or [spec]}; allowed: "
                         f"{' or '.join(MODEL_SETS)} or comma-separated names of {root}/models*/ ({listed})")
    return names


def _load_file(module_name: str, path: Path):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _unique(prefix: str, path: Path) -> str:
    return f"_catalogue_{prefix}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"


def load_recipe(root):
    """The catalogue's ``build_logp_fn`` (``root/models/_benchmark.py``), loaded by path."""
    root = Path(root)
    if str(root) not in sys.path:  # model files may import `models._benchmark`
        sys.path.insert(0, str(root))
    path = root / "models" / "_benchmark.py"
    return _load_file(_unique("benchmark", path), path).build_logp_fn


def build(root, entry: CatalogueModel, form: str):
    """``(model, initial point)`` of one catalogue model in ``form``."""
    root = Path(root)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    module = _load_file(_unique(entry.path.stem, entry.path), entry.path)
    model, ip = module.build_model()
    return in_form(model, form), ip


def in_form(model, form: str):
    """``model`` as written (``original``) or ``freeze_dims_and_data(model)`` (``frozen``)."""
    if form == "frozen":
        from pymc.model.transform.optimization import freeze_dims_and_data

        return freeze_dims_and_data(model)
    return model


# --- model sources ----------------------------------------------------------------------


@dataclass(frozen=True)
class SourceModel:
    """One model as a worker sees it, whatever its source: ``build(form) -> (model,
    initial point)`` and the recipe compiling it, ``recipe(model, ip, *, mode, with_grad)
    -> (function, raveled point)``."""

    name: str
    discrete: bool
    build: Callable
    recipe: Callable


def catalogue_model(root, entry: CatalogueModel, recipe=None) -> SourceModel:
    """``entry`` of the checkout ``root``, compiled by ``recipe`` (default: the catalogue's)."""
    return SourceModel(entry.name, entry.discrete, lambda form: build(root, entry, form),
                       recipe or load_recipe(root))


def catalogue_source(spec: dict, recipe=None) -> SourceModel:
    """The catalogue model ``spec["model"]`` of the checkout ``spec["catalogue"]``."""
    root = Path(spec["catalogue"])
    return catalogue_model(root, discover(root)[spec["model"]], recipe)


#: Where a worker's model comes from: ``spec["source"]`` -> ``module:function(spec, recipe)
#: -> SourceModel`` (a spec without a source names a catalogue model).
SOURCES = {
    "catalogue": "ptnumba_codegen.tools.catalogue_bench:catalogue_source",
    "generated": "ptnumba_codegen.tools.generated_bench:source_model",
}


def source_model(spec: dict, recipe=None) -> SourceModel:
    module, _, function = SOURCES[spec.get("source", "catalogue")].partition(":")
    return getattr(importlib.import_module(module), function)(spec, recipe)


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (``ru_maxrss``), in MB."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes (bytes on macOS)
    return peak / (1024.0 * 1024.0 if sys.platform == "darwin" else 1024.0)


@contextlib.contextmanager
def numba_cache(cache_dir: str | None):
    """PyTensor's numba disk cache in ``cache_dir`` (created; off when None)."""
    import pytensor
    import pytensor.link.numba.cache as pt_cache

    before = pt_cache.NUMBA_CACHE_PATH
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        pt_cache.NUMBA_CACHE_PATH = Path(cache_dir)
    try:
        with pytensor.config.change_flags(numba__cache=cache_dir is not None):
            yield
    finally:
        pt_cache.NUMBA_CACHE_PATH = before


def error_status(err: BaseException) -> str:
    """``error: <type>: <first line of the message>``."""
    msg = str(err).strip().splitlines()
    return f"error: {type(err).__name__}: {msg[0] if msg else ''}".rstrip().rstrip(":")


# --- the worker -------------------------------------------------------------------------


@dataclass
class CompiledModel:
    fn: object
    call: object
    x: np.ndarray
    discrete: bool
    build_s: float
    compile_s: float  # build_logp_fn: rewrites, gradient, linking
    first_call_s: float  # numba compiles at the first call
    policy_nodes: int


def compile_catalogue_model(root, entry: CatalogueModel, form: str, backend: str,
                            cache_dir: str | None = None, recipe=None) -> CompiledModel:
    """Build ``entry`` in ``form`` and compile it with the catalogue's recipe under
    ``backend``, then call it once (numba compiles at the first call)."""
    return compile_source_model(catalogue_model(root, entry, recipe), form, backend, cache_dir)


def compile_source_model(source: SourceModel, form: str, backend: str, cache_dir: str | None = None) -> CompiledModel:
    """Build ``source`` in ``form`` and compile it with its recipe under ``backend``, then
    call it once (numba compiles at the first call)."""
    t0 = time.perf_counter()
    model, ip = source.build(form)
    t1 = time.perf_counter()
    mode, ctx = mb.compile_mode(backend)
    with ctx, numba_cache(cache_dir):
        fn, x = source.recipe(model, ip, mode=mode, with_grad=not source.discrete)
        call = wl.caller(fn, backend)
        t2 = time.perf_counter()
        call(x)
        t3 = time.perf_counter()
    return CompiledModel(fn, call, np.asarray(x), source.discrete, t1 - t0, t2 - t1, t3 - t2,
                         mb.policy_nodes(fn, backend))


def call_outputs(c: CompiledModel) -> tuple[np.ndarray, np.ndarray]:
    """``(logp, dlogp)`` as float64 arrays (``dlogp`` empty for a discrete model)."""
    out = c.call(c.x)
    logp = np.atleast_1d(np.asarray(out[0], dtype=np.float64))
    dlogp = np.asarray(out[1], dtype=np.float64).ravel() if len(out) > 1 else np.zeros(0)
    return logp, dlogp


def nutpie_run(source: SourceModel, form: str, backend: str, seed: int, cores: int) -> dict:
    """Time to posterior through nutpie: compile, then 1000 tune + 1000 draws on 2 chains."""
    if source.discrete:
        return {"nutpie_status": "n/a: discrete free variables"}
    if backend in ("c", "stock_strict"):
        return {"nutpie_status": f"n/a: nutpie has no {backend} backend"}
    import nutpie

    model, _ = source.build(form)
    policy = wl.backend_policy(backend)
    switch = ptnumba_codegen.enabled(policy) if policy is not None else contextlib.nullcontext()
    t0 = time.perf_counter()
    with switch:
        if backend == "jax":
            compiled = nutpie.compile_pymc_model(model, backend="jax", gradient_backend="jax")
        else:
            compiled = nutpie.compile_pymc_model(model, backend="numba")
    t1 = time.perf_counter()
    trace = nutpie.sample(compiled, tune=NUTPIE_TUNE, draws=NUTPIE_DRAWS, chains=NUTPIE_CHAINS,
                          cores=cores, seed=seed, progress_bar=False)
    t2 = time.perf_counter()
    rec = {"nutpie_status": "ok", "nutpie_compile_s": t1 - t0, "nutpie_sample_s": t2 - t1}
    with contextlib.suppress(Exception):
        rec["nutpie_divergences"] = int(trace.sample_stats["diverging"].sum())
    return rec


def worker(spec: dict, recipe=None) -> dict:
    """One cell in this process; ``spec``: the model's source (`SOURCES`: ``source`` and its
    fields, for the catalogue ``catalogue``), model, form, backend, phase
    (``cold``/``warm``/``ref``/``nutpie``/``nutpie_warm``), cache_dir, seconds, samples, out (``.npz``
    path for the outputs, or None), seed, cores. Returns the JSON-ready record, with the
    process's peak memory (``maxrss_mb``)."""
    rec = {k: spec.get(k) for k in ("model", "form", "backend", "phase", "round")}
    rec["pid"] = os.getpid()
    rec["generator"] = GENERATOR_DIGEST  # the source this process runs (warm_s compares)
    try:
        source = source_model(spec, recipe)
        rec["discrete"] = source.discrete
        if spec["phase"] in NUTPIE_PHASES:
            with numba_cache(spec.get("cache_dir")):
                rec.update(nutpie_run(source, spec["form"], spec["backend"], spec.get("seed", 0),
                                      spec.get("cores", NUTPIE_CHAINS)))
        else:
            c = compile_source_model(source, spec["form"], spec["backend"], spec.get("cache_dir"))
            logp, dlogp = call_outputs(c)
            rec.update(build_s=c.build_s, compile_s=c.compile_s + c.first_call_s,
                       rewrite_link_s=c.compile_s, first_call_s=c.first_call_s,
                       policy_nodes=c.policy_nodes, ndim=int(c.x.size), logp=float(logp[0]))
            if spec.get("out"):
                np.savez(spec["out"], logp=logp, dlogp=dlogp)
                rec["out"] = spec["out"]
            if spec.get("seconds", 0) > 0:
                number, times = mb.time_calls(c.call, c.x, spec["seconds"], spec.get("samples", 15))
                rec.update(number=number, times_s=times, median_s=statistics.median(times), min_s=min(times))
        rec.update(ok=True, status="ok")
    except Exception as err:
        rec.update(ok=False, status=error_status(err), error=traceback.format_exc())
    rec["maxrss_mb"] = peak_rss_mb()
    return rec


def worker_main(argv) -> int:
    p = argparse.ArgumentParser(prog="python -m ptnumba_codegen.tools.catalogue_bench worker",
                                description="Run one catalogue cell and print one JSON line.")
    p.add_argument("spec", help="the cell as a JSON object (see `worker`)")
    a = p.parse_args(argv)
    import warnings

    warnings.simplefilter("ignore")  # PyMC/PyTensor warnings would bury the JSON line
    logging.disable(logging.WARNING)
    rec = worker(json.loads(a.spec))
    print(mb.MARKER + json.dumps(rec), flush=True)
    return 0 if rec["ok"] else 1


def run_subprocess(spec: dict, timeout: float) -> dict:
    """`worker` in a fresh process (in a working directory of its own, `modelbench.worker_place`), at niceness ``spec["nice"]`` when that is above this
    process's own (``nice -n`` adds to the caller's niceness), with ``spec["blas_threads"]``
    (when set) in `BLAS_THREAD_VARS`."""
    cmd = [sys.executable, "-m", "ptnumba_codegen.tools.catalogue_bench", "worker", json.dumps(spec)]
    increment = (spec.get("nice") or 0) - os.nice(0)
    if increment > 0 and shutil.which("nice"):
        cmd = ["nice", "-n", str(increment), *cmd]
    env = dict(os.environ)
    if spec.get("blas_threads"):  # every backend's OpenBLAS alike (XLA's own pool is not OpenBLAS)
        env.update({v: str(spec["blas_threads"]) for v in BLAS_THREAD_VARS})
    cwd, env = mb.worker_place(env)  # an empty working directory of its own
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
        rec = mb.parse_worker_output(proc.stdout, proc.stderr, proc.returncode)
    except subprocess.TimeoutExpired:
        rec = {"ok": False, "error": f"worker timed out after {timeout:g} s"}
    finally:
        shutil.rmtree(cwd, ignore_errors=True)
    if not rec.get("ok") and "status" not in rec:
        last = (rec.get("error") or "").strip().splitlines()
        rec["status"] = "error: " + (last[0] if last else "worker failed")
    for k in ("model", "form", "backend", "phase", "round"):
        rec.setdefault(k, spec.get(k))
    return rec


# --- agreement --------------------------------------------------------------------------


def _norm(v: np.ndarray) -> float:
    """The 2-norm, scaled so tiny (1e-300) or huge entries neither underflow nor overflow."""
    scale = float(np.max(np.abs(v), initial=0.0))
    return scale * float(np.linalg.norm(v / scale)) if scale > 0 else 0.0


def norm_rel_err(a, b) -> float:
    """``||a - b|| / ||b||`` (2-norms, ``b`` the reference); entries equal in both (the
    same infinity, both NaN) count 0, any other non-finite difference makes it inf."""
    a = np.atleast_1d(np.asarray(a, dtype=np.float64))
    b = np.atleast_1d(np.asarray(b, dtype=np.float64))
    if a.shape != b.shape:
        return math.inf
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, a - b)
    if not np.all(np.isfinite(diff)):
        return math.inf
    num = _norm(diff)
    den = _norm(np.where(np.isfinite(b), b, 0.0))
    if num == 0.0:
        return 0.0
    return num / den if den > 0 else math.inf


def agreement(out: dict, ref: dict) -> tuple[float, float]:
    """``(elementwise, normwise)`` relative error of ``out`` (``logp``, ``dlogp`` arrays)
    to ``ref``: the larger over logp and the gradient."""
    elem = max(mb.max_rel_err(out["logp"], ref["logp"]), mb.max_rel_err(out["dlogp"], ref["dlogp"])
               if np.size(ref["dlogp"]) or np.size(out["dlogp"]) else 0.0)
    norm = max(norm_rel_err(out["logp"], ref["logp"]), norm_rel_err(out["dlogp"], ref["dlogp"])
               if np.size(ref["dlogp"]) or np.size(out["dlogp"]) else 0.0)
    return elem, norm


def load_outputs(path) -> dict | None:
    if not path or not os.path.exists(path):
        return None
    with np.load(path) as data:
        return {"logp": data["logp"], "dlogp": data["dlogp"]}


# --- results ----------------------------------------------------------------------------


@dataclass
class Cell:
    """One (form, model, backend): its records over the phases and rounds."""

    records: list

    def phase(self, phase: str) -> list[dict]:
        return [r for r in self.records if r.get("phase") == phase]

    def _first_ok(self, phase: str, key: str, records=None):
        for r in self.phase(phase) if records is None else records:
            if r.get("ok") and r.get(key) is not None:
                return r[key]
        return None

    def _generator(self):
        """The generator source digest the first cold process ran (None: no cold record)."""
        return next((r.get("generator") for r in self.phase("cold") if r.get("ok")), None)

    @property
    def stale_warm(self) -> list[dict]:
        """The warm records that ran another generator source than the cold process (the
        tree was edited in between): every key changed, so they compiled cold again."""
        cold = self._generator()
        return [r for r in self.phase("warm") if r.get("ok") and cold is not None and r.get("generator") != cold]

    @property
    def cold_s(self):
        return self._first_ok("cold", "compile_s")

    @property
    def peak_mb(self):
        """The peak memory of the cold process (build, compile on an empty cache, one call)."""
        return self._first_ok("cold", "maxrss_mb")

    @property
    def warm_s(self):
        """The first warm compile on the cold process's cache and source."""
        stale = self.stale_warm
        return self._first_ok("warm", "compile_s", [r for r in self.phase("warm") if r not in stale])

    @property
    def times(self) -> list[float]:
        return [t for r in self.records if r.get("ok") for t in r.get("times_s") or ()]

    @property
    def median_us(self):
        return statistics.median(self.times) * 1e6 if self.times else None

    @property
    def min_us(self):
        return min(self.times) * 1e6 if self.times else None

    @property
    def error(self) -> str | None:
        """The status of the first failed compile/timing record (None: none failed)."""
        for r in self.records:
            if r.get("phase") not in NUTPIE_PHASES and not r.get("ok"):
                return r.get("status") or "error"
        return None

    @property
    def outputs_path(self):
        for r in self.records:
            if r.get("ok") and r.get("out"):
                return r["out"]
        return None

    @property
    def nutpie(self) -> dict | None:
        return next(iter(self.phase("nutpie")), None)

    @property
    def nutpie_warm(self) -> dict | None:
        return next(iter(self.phase("nutpie_warm")), None)


class Results:
    def __init__(self, forms, models, backends, small_us: float = SMALL_US):
        self.forms, self.models, self.backends = list(forms), list(models), list(backends)
        self.small_us = small_us
        self.cells: dict[tuple, Cell] = {}
        self.reference: dict[tuple, dict] = {}  # (form, model) -> record
        self._agreement: dict[tuple, tuple] = {}

    def cell(self, form, model, backend) -> Cell:
        """The cell (an empty one, not stored, when nothing of it has run yet)."""
        return self.cells.get((form, model, backend)) or Cell([])

    def add(self, rec: dict) -> None:
        key = (rec["form"], rec["model"])
        if rec.get("phase") == "ref":
            self.reference[key] = rec
            return
        self.cells.setdefault((*key, rec["backend"]), Cell([])).records.append(rec)
        if rec["backend"] == REFERENCE and rec.get("ok") and rec.get("out") and key not in self.reference:
            self.reference[key] = rec

    # agreement
    def agreement(self, form, model, backend) -> tuple[float | None, float | None]:
        """``(elementwise, normwise)`` error to C; ``(None, None)`` without both outputs."""
        key = (form, model, backend)
        if key not in self._agreement:  # cached once both outputs exist (the run may be under way)
            ref = self.reference.get((form, model))
            ref_out = load_outputs(ref.get("out")) if ref and ref.get("ok") else None
            out = load_outputs(self.cell(*key).outputs_path)
            if out is None or ref_out is None:
                return None, None
            self._agreement[key] = agreement(out, ref_out)
        return self._agreement[key]

    def status(self, form, model, backend) -> str:
        c = self.cell(form, model, backend)
        if c.error:
            return c.error
        if not c.records:
            return "not run"
        ref = self.reference.get((form, model))
        if ref is None or not ref.get("ok"):
            return "ok (no reference" + (f": {ref.get('status')})" if ref else ")")
        _, norm = self.agreement(form, model, backend)
        if norm is None:
            return "ok (no outputs)"
        if norm > AGREEMENT_RTOL:
            return f"DISAGREES (normwise {norm:.1e})"
        return "ok"

    # timings
    def median_us(self, form, model, backend):
        return self.cell(form, model, backend).median_us if (form, model, backend) in self.cells else None

    def ratio(self, form, model, backend, over=("stock_fast",)):
        """``backend``'s median / the smallest median of ``over`` (those run)."""
        t = self.median_us(form, model, backend)
        others = [self.median_us(form, model, b) for b in over if b in self.backends]
        others = [o for o in others if o]
        return t / min(others) if t and others else None

    def is_small(self, form, model) -> bool | None:
        stock = self.median_us(form, model, "stock_fast")
        return None if stock is None else stock < self.small_us

    def policy_fails_stock_runs(self, form) -> list[tuple[str, str, str]]:
        """``(model, policy backend, status)`` where a policy backend failed and stock ran."""
        out = []
        for m in self.models:
            if "stock_fast" not in self.backends or self.cell(form, m, "stock_fast").error or not self.cell(form, m, "stock_fast").records:
                continue
            for b in self.backends:
                if b.startswith("policy_") and self.cell(form, m, b).error:
                    out.append((m, b, self.cell(form, m, b).error))
        return out


def geomean(xs):
    return mb.geomean(xs)


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


_fmt = mb._fmt


def _short(b: str) -> str:
    return mb.SHORT.get(b, b)


def table(res: Results, form: str, *, nutpie: bool = False, title: str = "catalogue") -> str:
    """One row per (model, backend)."""
    head = ["model", "backend", "cold s", "warm s", "median us", "min us", "/stock", "/min(stock,jax)",
            "elem err", "norm err", "peak MB"]
    if nutpie:
        head += ["nutpie compile s", "nutpie warm compile s", "nutpie sample s"]
    head.append("status")
    rows = []
    for m in res.models:
        for b in res.backends:
            c = res.cell(form, m, b)
            elem, norm = res.agreement(form, m, b)
            row = [m, _short(b), _fmt(c.cold_s, ".2f"), _fmt(c.warm_s, ".2f"), _fmt(c.median_us, ".1f"),
                   _fmt(c.min_us, ".1f"),
                   _fmt(res.ratio(form, m, b) if b != "stock_fast" else None, ".2f"),
                   _fmt(res.ratio(form, m, b, ("stock_fast", "jax")) if b.startswith("policy_") else None, ".2f"),
                   _fmt(elem, ".1e"), _fmt(norm, ".1e"), _fmt(c.peak_mb, ".0f")]
            if nutpie:
                n = c.nutpie or {}
                row += [_fmt(n.get("nutpie_compile_s"), ".1f"),
                        _fmt((c.nutpie_warm or {}).get("nutpie_compile_s"), ".1f"),
                        _fmt(n.get("nutpie_sample_s"), ".1f") if n.get("nutpie_status", "ok") == "ok"
                        else (n.get("nutpie_status") or "-")[:40]]
            row.append(res.status(form, m, b)[:100])
            rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]

    def line(vals):
        return "  ".join(v.ljust(w) if i in (0, 1, len(head) - 1) else v.rjust(w)
                         for i, (v, w) in enumerate(zip(vals, widths, strict=True))).rstrip()

    out = [f"# {title}, {form} form: compile seconds (cold: empty cache; warm: second process on "
           f"its cache), us per call (median, fastest), ratios of medians, error vs C, peak memory of the "
           f"cold process; generator {GENERATOR_VERSION}",
           line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
    return "\n".join(out)


def summary(res: Results, form: str, *, nutpie: bool = False) -> list[str]:
    """The summary lines of one form: small/large calls, failures, agreement, compile."""
    out = [f"# summary, {form} form ({len(res.models)} models)"]
    small = [m for m in res.models if res.is_small(form, m)]
    large = [m for m in res.models if res.is_small(form, m) is False]
    for label, group in ((f"small calls (stock < {res.small_us:g} us)", small),
                         (f"large calls (stock >= {res.small_us:g} us)", large)):
        parts = []
        for b in res.backends:
            if b == "stock_fast":
                continue
            g = geomean(res.ratio(form, m, b) for m in group)
            parts.append(f"{_short(b)}/stock {_fmt(g, '.2f')}")
            if b.startswith("policy_") and "jax" in res.backends:
                g2 = geomean(res.ratio(form, m, b, ("stock_fast", "jax")) for m in group)
                parts.append(f"{_short(b)}/min(stock,jax) {_fmt(g2, '.2f')}")
        out.append(f"# {label}: {len(group)} models; geometric means: " + (", ".join(parts) or "-"))
    fails = {b: [m for m in res.models if res.cell(form, m, b).error] for b in res.backends}
    out.append("# failures: " + ", ".join(f"{_short(b)} {len(v)}" for b, v in fails.items()))
    bad = res.policy_fails_stock_runs(form)
    out.append(f"# policy fails where stock runs: {len(bad)} (must be 0)")
    out += [f"#   {m} / {_short(b)}: {s}" for m, b, s in bad]
    dis = [(m, b) for m in res.models for b in res.backends if res.status(form, m, b).startswith("DISAGREES")]
    out.append(f"# normwise disagreement with C > {AGREEMENT_RTOL:g}: {len(dis)}"
               + (" (" + ", ".join(f"{m}/{_short(b)}" for m, b in dis) + ")" if dis else ""))
    for label, attr in (("cold compile s", "cold_s"), ("warm compile s", "warm_s")):
        parts = []
        for b in res.backends:
            xs = [getattr(res.cell(form, m, b), attr) for m in res.models]
            parts.append(f"{_short(b)} {_fmt(geomean(xs), '.2f')}/{_fmt(_median(xs), '.2f')}")
        out.append(f"# {label} (geometric mean/median): " + ", ".join(parts))
    stale = [(m, b) for m in res.models for b in res.backends if res.cell(form, m, b).stale_warm]
    if stale:
        out.append("# warm processes on an edited generator source (not counted as warm compiles): "
                   + ", ".join(f"{m}/{_short(b)}" for m, b in stale))
    if nutpie:
        for label, which in (("", "nutpie"), (", second process", "nutpie_warm")):
            parts = []
            for b in res.backends:
                xs = []
                for m in res.models:
                    n = getattr(res.cell(form, m, b), which) or {}
                    if n.get("nutpie_status") == "ok":
                        xs.append(n["nutpie_compile_s"] + n["nutpie_sample_s"])
                parts.append(f"{_short(b)} {_fmt(geomean(xs), '.1f')} ({len(xs)} models)")
            out.append(f"# time to posterior through nutpie{label}, s (geometric mean): " + ", ".join(parts))
    failing = [(m, b, res.cell(form, m, b).error) for m in res.models for b in res.backends if res.cell(form, m, b).error]
    out += [f"# {m} / {_short(b)}: {s}" for m, b, s in failing]
    return out


def to_json(res: Results, args) -> dict:
    cells = []
    for (form, m, b), c in res.cells.items():
        elem, norm = res.agreement(form, m, b)
        cells.append({"form": form, "model": m, "backend": b, "cold_compile_s": c.cold_s,
                      "warm_compile_s": c.warm_s, "cold_peak_mb": c.peak_mb, "stale_warm_processes": len(c.stale_warm), "median_us": c.median_us, "min_us": c.min_us,
                      "ratio_stock": res.ratio(form, m, b),
                      "ratio_min_stock_jax": res.ratio(form, m, b, ("stock_fast", "jax")),
                      "elementwise_rel_err": elem, "normwise_rel_err": norm,
                      "status": res.status(form, m, b), "nutpie": c.nutpie, "records": c.records})
    return {
        "meta": {"catalogue": str(getattr(args, "catalogue", None)), "forms": res.forms, "models": res.models,
                 "backends": res.backends, "rounds": args.rounds, "time_budget": args.time_budget,
                 "blas_threads": getattr(args, "blas_threads", None),
                 "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "cells": cells,
        "reference": [{"form": f, "model": m, **r} for (f, m), r in res.reference.items()],
        "summary": {form: summary(res, form, nutpie=args.nutpie) for form in res.forms},
    }


# --- the runner -------------------------------------------------------------------------


def _source_fields(args, model) -> dict:
    """The spec fields naming where ``model`` comes from: ``args.source_fields(model)``
    when the runner was given one, else the catalogue checkout ``args.catalogue``."""
    fields = getattr(args, "source_fields", None)
    return fields(model) if fields else {"source": "catalogue", "catalogue": os.path.abspath(args.catalogue)}


def _spec(args, workdir: Path, form, model, backend, phase, rnd) -> dict:
    tag = f"{form}-{model.replace('/', '_')}-{backend}"
    timed = phase == "warm" and backend in args.timed_backends
    return {
        **_source_fields(args, model), "model": model, "form": form, "backend": backend,
        "phase": phase, "round": rnd, "seed": args.seed, "cores": args.cores, "nice": args.nice,
        "blas_threads": getattr(args, "blas_threads", None),
        # nutpie: an empty cache of its own, what a user's first run pays (not the user's cache,
        # which holds whatever earlier runs left; not the cold phase's, which holds this model)
        "cache_dir": None if phase == "ref" else str(workdir / "cache" / (f"{tag}-nutpie" if phase in NUTPIE_PHASES else tag)),
        "seconds": args.time_budget if timed else 0.0, "samples": args.samples,
        "out": str(workdir / f"{tag}-{phase}.npz") if phase in ("ref", "cold") else None,
    }


def run(args, run_one=None, progress=None) -> Results:
    """For every form and model: the C reference (unless ``c`` is run), then ``rounds``
    rounds over the backends, order rotated each round (round 1: a cold and a warm
    process, later rounds: warm), then nutpie if asked (for the models in
    ``args.nutpie_models`` when set, else every model). ``run_one(spec) -> record``;
    ``progress(results)`` after every model (the CLI rewrites ``--json`` there)."""
    run_one = run_one or (lambda spec: run_subprocess(spec, args.timeout))
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="ptnumba_catalogue_")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    res = Results(args.forms, args.models, args.backends)
    for form in args.forms:
        for m in args.models:
            if args.reference and REFERENCE not in args.backends:
                res.add(run_one(_spec(args, workdir, form, m, REFERENCE, "ref", 0)))
            failed = set()
            for r in range(args.rounds):
                k = r % len(args.backends)
                for b in args.backends[k:] + args.backends[:k]:
                    if b in failed:
                        continue
                    phases = ("cold", "warm") if r == 0 else ("warm",)
                    if args.status_only:
                        phases = ("cold",) if r == 0 else ()
                    for phase in phases:
                        t0 = time.perf_counter()
                        rec = run_one(_spec(args, workdir, form, m, b, phase, r + 1))
                        res.add(rec)
                        log.info("%s %s / %s %s round %d: %s (compile %s s, %s us per call; worker %.1f s)",
                                 form, m, b, phase, r + 1, rec.get("status"), _fmt(rec.get("compile_s"), ".2f"),
                                 _fmt(rec.get("median_s") and rec["median_s"] * 1e6, ".1f"), time.perf_counter() - t0)
                        if not rec.get("ok"):
                            failed.add(b)
                            break
            if args.nutpie and m in (getattr(args, "nutpie_models", None) or args.models):
                for phase in NUTPIE_PHASES:  # the first process fills the cache the second reads
                    for b in args.backends:
                        res.add(run_one(_spec(args, workdir, form, m, b, phase, 0)))
            if progress is not None:
                progress(res)
    return res


# --- CLI --------------------------------------------------------------------------------


def _csv(text: str | None) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def add_runner_options(p: argparse.ArgumentParser, default_backends) -> None:
    """The options of `run` (forms, backends, rounds, timing, processes, output), shared by
    the benches that run on it; `check_runner_options` checks them."""
    p.add_argument("--forms", default="original", help="comma-separated of: " + ",".join(FORMS) + " (default original)")
    p.add_argument("--backends", default=None, help="comma-separated (default: " + ",".join(default_backends)
                   + "; jax only if importable); also: " + ",".join(b for b in ALL_BACKENDS if b not in default_backends))
    p.add_argument("--rounds", type=int, default=3, help="timing rounds, backend order rotated (default 3)")
    p.add_argument("--time-budget", type=float, default=1.0, help="seconds of per-call timing per warm worker (default 1.0)")
    p.add_argument("--samples", type=int, default=15, help="timing samples per worker (default 15)")
    p.add_argument("--cores", type=int, default=NUTPIE_CHAINS, help="nutpie's cores (default 2)")
    p.add_argument("--status-only", action="store_true", help="one cold process per cell: build, compile, one call (no timing)")
    p.add_argument("--no-reference", dest="reference", action="store_false", help="skip the C reference (no agreement)")
    p.add_argument("--nice", type=int, default=0, help="run workers at niceness N (default 0: this process's own)")
    p.add_argument("--blas-threads", type=int, default=None, metavar="N",
                   help="OPENBLAS_NUM_THREADS=N in every worker (default: unset, OpenBLAS's own count)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before a worker is killed (default 1800)")
    p.add_argument("--workdir", default=None, help="where workers keep caches and outputs (default: a new temp dir)")
    p.add_argument("--json", metavar="FILE", default=None, help="write every record, cell and summary as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings on stderr")


def check_runner_options(p: argparse.ArgumentParser, args, default_backends) -> None:
    """Check `add_runner_options`'s options (``p.error`` naming what is allowed) and turn
    ``forms`` and ``backends`` into lists (``jax`` left out when it is not importable)."""
    if args.blas_threads is not None and args.blas_threads < 1:
        p.error("--blas-threads must be >= 1")
    if args.rounds < 1 or args.samples < 1 or args.time_budget <= 0:
        p.error("--rounds and --samples must be >= 1 and --time-budget > 0")
    args.forms = _csv(args.forms)
    bad = [f for f in args.forms if f not in FORMS]
    if bad or not args.forms:
        p.error(f"--forms: unknown form(s) {bad or [args.forms]}; allowed: {', '.join(FORMS)}")
    args.backends = _csv(args.backends) or list(default_backends)
    bad = [b for b in args.backends if b not in ALL_BACKENDS]
    if bad:
        p.error(f"--backends: unknown backend(s) {bad}; allowed: {', '.join(ALL_BACKENDS)}")
    if "jax" in args.backends and not wl.jax_available():
        log.warning("jax is not importable: no jax column")
        args.backends.remove("jax")
    args.timed_backends = set(args.backends)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m ptnumba_codegen bench --group catalogue",
        description="Time the catalogue's logp(+dlogp) function (its own build_logp_fn) of PyMC's model "
        "catalogue under each backend, each cell in fresh processes; cold and warm compile, per-call "
        "time, agreement with the C backend, optional time to posterior through nutpie.",
    )
    p.add_argument("--group", choices=["catalogue"], default="catalogue", help=argparse.SUPPRESS)
    p.add_argument("--catalogue", required=True, metavar="PATH", help="a checkout of pymc-model-catalogue")
    p.add_argument("--models", default="core", help="core (BENCHMARK_CORE.md, default), all, or comma-separated names")
    p.add_argument("--nutpie", action="store_true", help="add time to posterior through nutpie (1000 tune + 1000 draws, 2 chains)")
    p.add_argument("--seed", type=int, default=20240611, help="nutpie's seed")
    add_runner_options(p, BACKENDS)
    args = p.parse_args(argv)
    check_runner_options(p, args, BACKENDS)
    try:
        args.catalogue = check_catalogue(args.catalogue)
        args.models = select_models(args.catalogue, args.models)
    except ValueError as err:
        p.error(str(err))
    return args


def results_from_json(data: dict) -> Results:
    """The `Results` of a ``--json`` file (a finished or an interrupted run)."""
    meta = data["meta"]
    res = Results(meta["forms"], meta["models"], meta["backends"])
    for cell in data["cells"]:
        for rec in cell["records"]:
            res.add(rec)
    for ref in data["reference"]:
        res.reference[(ref["form"], ref["model"])] = ref
    return res


def merge_reports(parts: list[tuple[str, dict]]) -> dict:
    """One ``--json`` file's data from several of one run's parts (``--only`` chunks of one
    seed or catalogue): their models in order, every cell, reference and generated model.
    Raises `ValueError` naming the file whose forms, backends, seed or catalogue differ
    from the first's, or which repeats a model."""
    (first_name, first), rest = parts[0], parts[1:]
    merged = {**first, "meta": dict(first["meta"]), "cells": list(first["cells"]),
              "reference": list(first["reference"]), "generated": list(first.get("generated", []))}
    meta = merged["meta"]
    meta["models"] = list(meta["models"])
    for name, data in rest:
        for key in ("forms", "backends", "seed", "catalogue", "source"):
            if data["meta"].get(key) != meta.get(key):
                raise ValueError(f"{name}: meta[{key!r}] is {data['meta'].get(key)!r}, "
                                 f"{first_name} has {meta.get(key)!r}: not parts of one run")
        if repeated := set(data["meta"]["models"]) & set(meta["models"]):
            raise ValueError(f"{name}: models {sorted(repeated)} are also in an earlier file")
        meta["models"] += data["meta"]["models"]
        merged["cells"] += data["cells"]
        merged["reference"] += data["reference"]
        merged["generated"] += data.get("generated", [])
        if data["meta"].get("reproduce") and data["meta"]["reproduce"] != meta.get("reproduce"):
            meta["reproduce"] = f"{meta.get('reproduce')}; {data['meta']['reproduce']}"
    return merged


def read_report(argv, prog: str) -> tuple[dict, Results, bool]:
    """The ``report`` command's files (``--json`` files of one run, or of its ``--only``
    parts): their data, their `Results` over the models that have run, and whether it has
    nutpie runs."""
    p = argparse.ArgumentParser(prog=prog, description="Print the tables and summaries of --json files again "
                                "(the models they have so far, for an interrupted run; several files of one "
                                "run's --only parts are reported as one).")
    p.add_argument("json_files", nargs="+", metavar="json_file")
    a = p.parse_args(argv)
    parts = []
    for name in a.json_files:
        with open(name) as fh:
            parts.append((name, json.load(fh)))
    try:
        data = merge_reports(parts)
    except ValueError as err:
        p.error(str(err))
    res = results_from_json(data)
    done = {m for (_, m, _) in res.cells} | {m for (_, m) in res.reference}
    res.models = [m for m in res.models if m in done]
    return data, res, any(c.nutpie for c in res.cells.values())


def report_main(argv) -> int:
    _, res, nutpie = read_report(argv, "python -m ptnumba_codegen.tools.catalogue_bench report")
    for form in res.forms:
        print(table(res, form, nutpie=nutpie))
        print("\n".join(summary(res, form, nutpie=nutpie)) + "\n")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["worker"]:
        return worker_main(argv[1:])
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)

    def write_json(res):  # after every model, so an interrupted run keeps what it measured
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(to_json(res, args), fh, indent=1, default=str)

    res = run(args, progress=write_json)
    for form in args.forms:
        print(table(res, form, nutpie=args.nutpie), flush=True)
        print("\n".join(summary(res, form, nutpie=args.nutpie)) + "\n", flush=True)
    if args.json:
        log.info("wrote %s", args.json)
    return 1 if any(res.policy_fails_stock_runs(f) for f in args.forms) else 0


if __name__ == "__main__":
    sys.exit(main())
