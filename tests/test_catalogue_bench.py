"""The catalogue benchmark (`ptnumba_codegen.tools.catalogue_bench`) on a fake catalogue built in
``tmp_path``: its own minimal ``build_logp_fn`` and two tiny model files, one of which
raises. No network and no real catalogue: discovery and the core list, the worker's
records (status on failure, saved outputs), agreement, the runner's rounds and phases,
the summary split with injected timings, and the CLI's argument errors. The tests that
compile skip when pymc is not installed."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ptnumba_codegen._version import GENERATOR_DIGEST
from ptnumba_codegen.tools import bench
from ptnumba_codegen.tools import catalogue_bench as cb
from ptnumba_codegen.tools import modelbench as mb
from ptnumba_codegen.tools import models as pymc_models

needs_pymc = pytest.mark.skipif(not pymc_models.pymc_available(), reason="pymc is not installed")

RECIPE = '''
"""A minimal stand-in for the catalogue's recipe (one value variable per model)."""
import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.graph.replace import clone_replace


def build_logp_fn(model, ip, *, mode="NUMBA", with_grad=True):
    (value,) = model.value_vars
    start = np.asarray(ip[value.name], dtype="float64")
    logp = model.logp()
    outputs = [logp, pt.grad(logp, value).ravel()] if with_grad else [logp]
    x = pt.vector("x", dtype="float64")
    outputs = clone_replace(outputs, {value: x.reshape(start.shape)})
    fn = pytensor.function([x], outputs, mode=mode)
    fn.trust_input = True
    return fn, start.ravel()
'''

GOOD = '''
import numpy as np
import pymc as pm


def build_model():
    y = np.array([0.3, -1.2, 2.5, 0.7, 1.1])
    with pm.Model(coords={"obs": range(5)}) as model:
        data = pm.Data("data", y, dims="obs")
        theta = pm.Normal("theta", 0.0, 2.0, shape=3)
        pm.Normal("y", theta.sum() + 0.5 * theta[0] ** 2, 1.5, observed=data, dims="obs")
    return model, model.initial_point()
'''

BROKEN = '''
def build_model():
    raise ValueError("no data for this model\\nsecond line")
'''

CORE = """# Core
1. `models/tiny_normal.py` — the good one
2. `models/broken.py` — raises
"""


@pytest.fixture(scope="module")
def fake(tmp_path_factory):
    root = tmp_path_factory.mktemp("catalogue")
    (root / "models").mkdir()
    (root / "models_discrete").mkdir()
    (root / "models" / "_benchmark.py").write_text(textwrap.dedent(RECIPE))
    (root / "models" / "tiny_normal.py").write_text(textwrap.dedent(GOOD))
    (root / "models" / "broken.py").write_text(textwrap.dedent(BROKEN))
    (root / "models" / "skipped.py.skip").write_text("raise SystemExit")
    (root / "models_discrete" / "_benchmark.py").write_text("")
    (root / "models_discrete" / "tiny_discrete.py").write_text("def build_model(): ...\n")
    (root / cb.CORE_FILE).write_text(CORE)
    return root


# --- the catalogue ----------------------------------------------------------------------


def test_discover_core_and_select(fake):
    found = cb.discover(fake)
    assert sorted(found) == ["broken", "tiny_discrete", "tiny_normal"]  # no helpers, no .skip
    assert found["tiny_discrete"].discrete and not found["tiny_normal"].discrete
    assert cb.core_names(fake) == ["tiny_normal", "broken"]
    assert cb.select_models(fake, "core") == ["tiny_normal", "broken"]
    assert cb.select_models(fake, None) == ["tiny_normal", "broken"]
    assert sorted(cb.select_models(fake, "all")) == sorted(found)
    assert cb.select_models(fake, " tiny_normal ,tiny_discrete") == ["tiny_normal", "tiny_discrete"]
    with pytest.raises(ValueError, match=r"unknown model\(s\) \['nope'\].*core or all"):
        cb.select_models(fake, "tiny_normal,nope")


def test_check_catalogue(fake, tmp_path):
    assert cb.check_catalogue(str(fake)) == fake.resolve()
    with pytest.raises(ValueError, match="not a pymc-model-catalogue checkout"):
        cb.check_catalogue(tmp_path)


def test_error_status_first_line():
    assert cb.error_status(ValueError("bad\nmore")) == "error: ValueError: bad"
    assert cb.error_status(KeyError("k")) == "error: KeyError: 'k'"
    assert cb.error_status(RuntimeError()) == "error: RuntimeError"


# --- agreement --------------------------------------------------------------------------


def test_norm_rel_err():
    assert cb.norm_rel_err([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert cb.norm_rel_err([3.0, 4.0 + 5e-6], [3.0, 4.0]) == pytest.approx(1e-6)
    assert cb.norm_rel_err([np.nan, -np.inf, 1.0], [np.nan, -np.inf, 1.0]) == 0.0
    assert cb.norm_rel_err([np.nan], [1.0]) == math.inf
    assert cb.norm_rel_err([1.0], [1.0, 2.0]) == math.inf
    assert cb.norm_rel_err([1e-300], [0.0]) == math.inf
    # one big component hides a small one's relative error normwise, not elementwise
    out = {"logp": np.array([-10.0]), "dlogp": np.array([1000.0, 1e-3 * (1 + 1e-3)])}
    ref = {"logp": np.array([-10.0]), "dlogp": np.array([1000.0, 1e-3])}
    elem, norm = cb.agreement(out, ref)
    assert elem == pytest.approx(1e-3)
    assert norm == pytest.approx(1e-9, rel=1e-3)  # 1e-6 / 1000
    # discrete models: no gradient
    assert cb.agreement({"logp": np.array([2.0]), "dlogp": np.zeros(0)},
                        {"logp": np.array([2.0 * (1 + 1e-8)]), "dlogp": np.zeros(0)})[1] == pytest.approx(1e-8, rel=1e-3)


# --- the worker, in process -------------------------------------------------------------


@pytest.fixture(scope="module")
def worked(fake, tmp_path_factory):
    """The worker's records for the good model (stock, policy, C reference, frozen form
    under C) and the broken one, compiled once for every test below."""
    if not pymc_models.pymc_available():
        pytest.skip("pymc is not installed")
    work = tmp_path_factory.mktemp("work")

    def spec(model, backend, form="original", phase="cold", seconds=0.0):
        return {"catalogue": str(fake), "model": model, "form": form, "backend": backend, "phase": phase,
                "round": 1, "cache_dir": str(work / f"cache-{backend}") if backend != "c" else None,
                "seconds": seconds, "samples": 3, "out": str(work / f"{form}-{model}-{backend}.npz")}

    return {
        "stock": cb.worker(spec("tiny_normal", "stock_fast", seconds=0.05)),
        "policy": cb.worker(spec("tiny_normal", "policy_default")),
        "c": cb.worker(spec("tiny_normal", "c", phase="ref")),
        "c_frozen": cb.worker(spec("tiny_normal", "c", form="frozen", phase="ref")),
        "broken": cb.worker(spec("broken", "policy_default")),
        "work": work,
    }


@needs_pymc
def test_worker_records_and_outputs(worked):
    stock, policy, c = worked["stock"], worked["policy"], worked["c"]
    for rec in (stock, policy, c, worked["c_frozen"]):
        assert rec["ok"], rec.get("error")
        assert rec["status"] == "ok"
        assert rec["ndim"] == 3
        assert rec["compile_s"] >= rec["first_call_s"] > 0
    assert policy["policy_nodes"] > 0 and stock["policy_nodes"] == 0
    assert len(stock["times_s"]) == 3 and stock["min_s"] <= stock["median_s"]
    assert "times_s" not in policy  # seconds=0: no timing
    outs = {k: cb.load_outputs(worked[k]["out"]) for k in ("stock", "policy", "c", "c_frozen")}
    assert outs["c"]["dlogp"].shape == (3,) and np.all(np.isfinite(outs["c"]["dlogp"]))
    assert np.all(outs["c"]["dlogp"] != 0)
    for k in ("stock", "policy", "c_frozen"):
        elem, norm = cb.agreement(outs[k], outs["c"])
        assert elem < 1e-12 and norm < 1e-12, k
    assert outs["c"]["logp"][0] == pytest.approx(c["logp"])


@needs_pymc
def test_worker_failure_is_a_status(worked):
    rec = worked["broken"]
    assert rec["ok"] is False
    assert rec["status"] == "error: ValueError: no data for this model"
    assert "Traceback" in rec["error"] and "build_model" in rec["error"]
    assert not (worked["work"] / "original-broken-policy_default.npz").exists()


@needs_pymc
def test_worker_subprocess_reports_a_failure(fake, tmp_path):
    spec = {"catalogue": str(fake), "model": "broken", "form": "original", "backend": "stock_fast",
            "phase": "cold", "round": 1, "cache_dir": str(tmp_path / "cache"), "seconds": 0.0, "out": None}
    rec = cb.run_subprocess(spec, timeout=300)
    assert rec["ok"] is False and rec["status"] == "error: ValueError: no data for this model"
    assert (rec["model"], rec["backend"], rec["phase"]) == ("broken", "stock_fast", "cold")


def test_run_subprocess_without_a_record(monkeypatch):
    class Proc:
        stdout, stderr, returncode = "noise\n", "Traceback ...\nSegmentation fault\n", -11

    monkeypatch.setattr(cb.subprocess, "run", lambda *a, **k: Proc())
    rec = cb.run_subprocess({"model": "m", "form": "original", "backend": "policy_default", "phase": "cold"}, 5)
    assert rec["ok"] is False and rec["status"].startswith("error: worker exited with -11")
    assert rec["backend"] == "policy_default"


# --- the runner and the summary, with injected records ----------------------------------

TIMES_US = {  # stock, policy: a small call (< 50 us under stock) and a large one
    "small": {"stock_fast": 10.0, "jax": 20.0, "policy_default": 5.0},
    "large": {"stock_fast": 400.0, "jax": 200.0, "policy_default": 300.0},
    "pfail": {"stock_fast": 100.0, "jax": 100.0, "policy_default": None},
}


def _opts(tmp_path, **kw):
    base = dict(catalogue=tmp_path, forms=["original"], models=list(TIMES_US), backends=["stock_fast", "jax", "policy_default"],
                rounds=2, time_budget=0.1, samples=3, nutpie=False, cores=2, status_only=False, reference=True,
                seed=1, nice=0, timeout=10.0, workdir=str(tmp_path / "work"))
    args = argparse.Namespace(**{**base, **kw})
    args.timed_backends = set(args.backends)
    return args


def test_nutpie_compiles_on_an_empty_cache_of_its_own(tmp_path):
    """Time to posterior is a user's first run: nutpie's compile gets a cache directory of its
    own under the work directory (not the user's cache, not the cold phase's)."""
    args, work = _opts(tmp_path, nutpie=True), tmp_path / "work"
    nutpie = cb._spec(args, work, "original", "small", "policy_default", "nutpie", 1)["cache_dir"]
    cold = cb._spec(args, work, "original", "small", "policy_default", "cold", 1)["cache_dir"]
    assert nutpie is not None and Path(nutpie).parent == work / "cache" and nutpie != cold
    # the second nutpie process (a user's next run) reads the cache the first one filled
    assert cb._spec(args, work, "original", "small", "policy_default", "nutpie_warm", 1)["cache_dir"] == nutpie
    assert cb._spec(args, work, "original", "small", "c", "ref", 1)["cache_dir"] is None


def _fake_runner(calls):
    def run_one(spec):
        calls.append((spec["model"], spec["backend"], spec["phase"], spec["round"], spec["seconds"]))
        m, b = spec["model"], spec["backend"]
        rec = {k: spec[k] for k in ("model", "form", "backend", "phase", "round")}
        if b != "c" and TIMES_US[m][b] is None:
            return {**rec, "ok": False, "status": "error: NotImplementedError: no rule"}
        logp, dlogp = np.array([-5.0]), np.array([1.0, -2.0])
        if m == "large" and b == "jax":
            dlogp = dlogp * (1 + 1e-6)  # disagrees normwise
        if spec["out"]:
            np.savez(spec["out"], logp=logp, dlogp=dlogp)
            rec["out"] = spec["out"]
        rec.update(ok=True, status="ok", compile_s={"cold": 4.0, "warm": 1.0, "ref": 2.0}[spec["phase"]])
        if spec["seconds"]:
            t = TIMES_US[m][b] * 1e-6
            rec.update(times_s=[t, t * 0.8, t * 1.2], median_s=t, min_s=t * 0.8)
        return rec

    return run_one


def test_run_phases_rounds_and_reference(tmp_path):
    calls = []
    res = cb.run(_opts(tmp_path), run_one=_fake_runner(calls))
    small = [c for c in calls if c[0] == "small"]
    assert small[0][:3] == ("small", "c", "ref") and small[0][4] == 0.0
    # round 1: cold (untimed) then warm (timed) per backend; round 2: warm, order rotated
    assert [(b, p, r) for _, b, p, r, _ in small[1:]] == [
        ("stock_fast", "cold", 1), ("stock_fast", "warm", 1), ("jax", "cold", 1), ("jax", "warm", 1),
        ("policy_default", "cold", 1), ("policy_default", "warm", 1),
        ("jax", "warm", 2), ("policy_default", "warm", 2), ("stock_fast", "warm", 2)]
    assert all((s > 0) == (p == "warm") for _, _, p, _, s in small)
    # a failed backend is not run again
    assert [(b, p) for m, b, p, _, _ in calls if m == "pfail" and b == "policy_default"] == [("policy_default", "cold")]
    cell = res.cell("original", "small", "policy_default")
    assert (cell.cold_s, cell.warm_s) == (4.0, 1.0)
    assert cell.median_us == pytest.approx(5.0)
    assert cell.min_us == pytest.approx(4.0)
    assert res.ratio("original", "large", "policy_default") == pytest.approx(0.75)
    assert res.ratio("original", "large", "policy_default", ("stock_fast", "jax")) == pytest.approx(1.5)
    assert res.status("original", "small", "policy_default") == "ok"
    assert res.status("original", "large", "jax").startswith("DISAGREES (normwise")
    assert res.agreement("original", "large", "jax")[0] == pytest.approx(1e-6)
    assert res.status("original", "pfail", "policy_default") == "error: NotImplementedError: no rule"


def test_warm_compile_on_an_edited_source_is_not_a_warm_compile(tmp_path):
    """A warm process that runs another generator source than its cold one (the tree was
    edited in between: every cache key changed) compiled everything again; its compile
    time is not the warm compile."""
    inner = _fake_runner([])

    def run_one(spec):
        rec = inner(spec)
        edited = spec["backend"] == "policy_default" and spec["phase"] == "warm" and spec["round"] == 1
        rec["generator"] = "after-edit" if edited else "digest"
        if edited:
            rec["compile_s"] = 39.0
        return rec

    res = cb.run(_opts(tmp_path, models=["small"]), run_one=run_one)
    cell = res.cell("original", "small", "policy_default")
    assert [r["compile_s"] for r in cell.stale_warm] == [39.0]
    assert cell.warm_s == 1.0  # round 2's warm process, on the cold one's source
    assert res.cell("original", "small", "stock_fast").stale_warm == []
    assert "# warm processes on an edited generator source (not counted as warm compiles): small/pd" in cb.summary(res, "original")
    [pd] = [c for c in cb.to_json(res, _opts(tmp_path))["cells"] if c["backend"] == "policy_default"]
    assert (pd["warm_compile_s"], pd["stale_warm_processes"]) == (1.0, 1)


@needs_pymc
def test_worker_records_its_generator_source(worked):
    records = [worked[k] for k in ("stock", "policy", "c", "broken")]
    assert [rec["generator"] for rec in records] == [GENERATOR_DIGEST] * 4


def test_status_only_runs_one_cold_process(tmp_path):
    calls = []
    cb.run(_opts(tmp_path, status_only=True, rounds=3, models=["small"]), run_one=_fake_runner(calls))
    assert [(b, p) for _, b, p, _, _ in calls] == [("c", "ref"), ("stock_fast", "cold"), ("jax", "cold"),
                                                   ("policy_default", "cold")]


def test_summary_split_and_failures(tmp_path):
    res = cb.run(_opts(tmp_path), run_one=_fake_runner([]))
    lines = cb.summary(res, "original")
    text = "\n".join(lines)
    # small: only "small" (stock 10 us); large: "large" and "pfail" (stock 400, 100 us)
    assert "# small calls (stock < 50 us): 1 models; geometric means: jax/stock 2.00, pd/stock 0.50, pd/min(stock,jax) 0.50" in text
    # pfail has no policy time: the large geometric mean is "large" alone (0.75); jax: sqrt(0.5 * 1)
    assert f"# large calls (stock >= 50 us): 2 models; geometric means: jax/stock {math.sqrt(0.5):.2f}, pd/stock 0.75, pd/min(stock,jax) 1.50" in text
    assert "# failures: stock 0, jax 0, pd 1" in text
    assert "# policy fails where stock runs: 1 (must be 0)" in text
    assert "#   pfail / pd: error: NotImplementedError: no rule" in text
    assert "# normwise disagreement with C > 1e-09: 1 (large/jax)" in text
    assert "# cold compile s (geometric mean/median): stock 4.00/4.00" in text
    table = cb.table(res, "original")
    row = next(line for line in table.splitlines() if line.startswith("small ") and " pd " in line)
    assert row.split()[2:8] == ["4.00", "1.00", "5.0", "4.0", "0.50", "0.50"]
    assert "error: NotImplementedError: no rule" in table
    data = cb.to_json(res, _opts(tmp_path))
    json.dumps(data, default=str)
    pd_small = next(c for c in data["cells"] if c["model"] == "small" and c["backend"] == "policy_default")
    assert pd_small["median_us"] == pytest.approx(5.0) and pd_small["status"] == "ok"


def test_summary_threshold_is_stock_median(tmp_path):
    res = cb.run(_opts(tmp_path, rounds=1), run_one=_fake_runner([]))
    res.small_us = 150.0  # now "pfail" (stock 100 us) is small too
    assert "small calls (stock < 150 us): 2 models" in "\n".join(cb.summary(res, "original"))
    assert res.is_small("original", "large") is False


# --- CLI --------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "message"), [
    (["--backends", "stock_fast,bogus"], "--backends: unknown backend(s) ['bogus']; allowed: stock_fast, jax, policy_default"),
    (["--forms", "original,thawed"], "--forms: unknown form(s) ['thawed']; allowed: original, frozen"),
    (["--models", "nope"], "--models: unknown model(s) ['nope']; allowed: core or all"),
    (["--rounds", "0"], "--rounds and --samples must be >= 1"),
    (["--blas-threads", "0"], "--blas-threads must be >= 1"),
])
def test_cli_errors_name_allowed_values(fake, capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--group", "catalogue", "--catalogue", str(fake), *extra])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_needs_a_catalogue(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cb.parse_args(["--catalogue", str(tmp_path)])
    assert "not a pymc-model-catalogue checkout" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cb.parse_args([])
    assert "--catalogue" in capsys.readouterr().err


def test_cli_defaults(fake):
    args = cb.parse_args(["--catalogue", str(fake), "--backends", "stock_fast,policy_default"])
    assert args.models == ["tiny_normal", "broken"] and args.forms == ["original"]
    assert args.backends == ["stock_fast", "policy_default"] and args.rounds == 3
    assert args.blas_threads is None
    args = cb.parse_args(["--catalogue", str(fake), "--forms", "original,frozen", "--models", "all"])
    assert args.forms == ["original", "frozen"] and len(args.models) == 3


def test_run_subprocess_nice_is_absolute(monkeypatch):
    seen = []

    class Proc:
        stdout, stderr, returncode = "", "", 1

    def fake_run(cmd, **kw):
        seen.append(cmd)
        return Proc()

    monkeypatch.setattr(cb.subprocess, "run", fake_run)
    monkeypatch.setattr(cb.os, "nice", lambda inc: 5)  # this process runs at niceness 5
    cb.run_subprocess({"nice": 10}, 5)
    cb.run_subprocess({"nice": 3}, 5)
    cb.run_subprocess({"nice": 0}, 5)
    assert seen[0][:3] == ["nice", "-n", "5"]
    assert [cmd[0] == "nice" for cmd in seen] == [True, False, False]
    assert seen[1][1:4] == ["-m", "ptnumba_codegen.tools.catalogue_bench", "worker"]


def test_progress_reports_do_not_freeze_later_models(tmp_path):
    """The CLI writes --json after every model: reading the results before a model has run
    must neither create its cells nor cache its agreement as missing."""
    seen = []
    args = _opts(tmp_path, rounds=1)

    def progress(res):
        data = cb.to_json(res, args)
        seen.append(sorted({c["model"] for c in data["cells"]}))

    res = cb.run(args, run_one=_fake_runner([]), progress=progress)
    assert seen == [["small"], ["large", "small"], ["large", "pfail", "small"]]
    assert res.status("original", "large", "policy_default") == "ok"
    assert res.agreement("original", "pfail", "stock_fast") == (0.0, 0.0)
    assert cb.results_from_json(json.loads(json.dumps(cb.to_json(res, args), default=str))).status(
        "original", "large", "jax").startswith("DISAGREES")


def test_run_subprocess_blas_threads_env(monkeypatch):
    """--blas-threads reaches every worker as OPENBLAS_NUM_THREADS; unset, the environment
    is inherited untouched."""
    seen = []

    class Proc:
        stdout, stderr, returncode = "", "", 1

    def fake_run(cmd, **kw):
        seen.append(kw.get("env"))
        return Proc()

    monkeypatch.setattr(cb.subprocess, "run", fake_run)
    monkeypatch.setattr(cb.os, "nice", lambda inc: 0)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "7")
    cb.run_subprocess({"blas_threads": 1}, 5)
    cb.run_subprocess({"blas_threads": None}, 5)
    assert seen[0]["OPENBLAS_NUM_THREADS"] == "1" and seen[1]["OPENBLAS_NUM_THREADS"] == "7"
    assert all(v in seen[0] for v in cb.BLAS_THREAD_VARS)


def test_run_subprocess_runs_in_an_empty_directory_of_its_own(monkeypatch, tmp_path):
    """The worker's working directory (first on its ``sys.path`` under ``python -m``) is a
    new empty one, removed afterwards, never the caller's."""
    seen = []

    class Proc:
        stdout, stderr, returncode = "", "", 1

    def fake_run(cmd, **kw):
        seen.append((kw["cwd"], os.listdir(kw["cwd"])))
        return Proc()

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cb.subprocess, "run", fake_run)
    cb.run_subprocess({}, 5)
    cb.run_subprocess({}, 5)
    (a, a_files), (b, b_files) = seen
    assert a != b and a_files == b_files == []
    assert str(tmp_path) not in (a, b) and not os.path.exists(a) and not os.path.exists(b)


def test_worker_place_imports_the_package_without_the_callers_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    cwd, env = mb.worker_place()
    try:
        out = subprocess.run([sys.executable, "-c", "import sys, os, ptnumba_codegen; print(os.pathsep.join(sys.path))"],
                             cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout
    finally:
        shutil.rmtree(cwd)
    path = out.strip().split(os.pathsep)
    assert str(tmp_path) not in path and "" not in path[1:]


def test_nutpie_runs_twice_per_cell_and_the_summary_has_both(tmp_path):
    """After the rounds: a nutpie process per backend on an empty cache, then a second one
    per backend on the same cache; the summary gives time to posterior for each."""
    calls, inner = [], _fake_runner([])

    def run_one(spec):
        calls.append((spec["model"], spec["backend"], spec["phase"]))
        if spec["phase"] not in cb.NUTPIE_PHASES:
            return inner(spec)
        compile_s = {"nutpie": {"stock_fast": 8.0, "policy_default": 4.0},
                     "nutpie_warm": {"stock_fast": 4.0, "policy_default": 1.0}}[spec["phase"]][spec["backend"]]
        return {k: spec[k] for k in ("model", "form", "backend", "phase", "round")} | {
            "nutpie_status": "ok", "nutpie_compile_s": compile_s, "nutpie_sample_s": 1.0}

    args = _opts(tmp_path, models=["small"], backends=["stock_fast", "policy_default"], nutpie=True)
    res = cb.run(args, run_one=run_one)
    assert [(b, p) for _, b, p in calls if p in cb.NUTPIE_PHASES] == [
        ("stock_fast", "nutpie"), ("policy_default", "nutpie"), ("stock_fast", "nutpie_warm"), ("policy_default", "nutpie_warm")]
    lines = cb.summary(res, "original", nutpie=True)
    assert "# time to posterior through nutpie, s (geometric mean): stock 9.0 (1 models), pd 5.0 (1 models)" in lines
    assert ("# time to posterior through nutpie, second process, s (geometric mean): stock 5.0 (1 models), "
            "pd 2.0 (1 models)") in lines
    assert res.cell("original", "small", "policy_default").error is None
    row = [r for r in cb.table(res, "original", nutpie=True).splitlines() if r.startswith("small") and " pd " in r][0]
    assert row.split()[-4:-1] == ["4.0", "1.0", "1.0"]
