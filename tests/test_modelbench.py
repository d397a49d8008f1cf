"""The PyMC model benchmark: the catalogue's models agree with the C backend under policy
default, and the runner's pieces (worker JSON, rounds, table, verdict, explain summary)
do what they say. The PyMC tests skip when pymc is not installed; the rest need only
PyTensor."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import ptnumba_codegen
from ptnumba_codegen.tools import bench
from ptnumba_codegen.tools import modelbench as mb
from ptnumba_codegen.tools import models as catalogue
from ptnumba_codegen.lowering.vecmath.exact_lanes import available as exact_available

needs_pymc = pytest.mark.skipif(not catalogue.pymc_available(), reason="pymc is not installed")
N = 50
SEED = catalogue.DEFAULT_SEED

# --- pure pieces (no pymc) --------------------------------------------------------------


def test_max_rel_err():
    assert mb.max_rel_err([1.0, -2.0], [1.0, -2.0]) == 0.0
    assert mb.max_rel_err(1.0 + 1e-12, 1.0) == pytest.approx(1e-12, rel=1e-3)
    assert mb.max_rel_err([np.nan, -np.inf], [np.nan, -np.inf]) == 0.0
    assert mb.max_rel_err([np.nan], [1.0]) == math.inf  # a NaN never hides
    assert mb.max_rel_err([1.0], [np.inf]) == math.inf
    assert mb.max_rel_err([1.0, 2.0], [1.0]) == math.inf
    assert mb.max_rel_err([1e-300], [0.0]) > 1e6  # relative to a zero reference: huge


def _record(model, n, backend, median, logp=-10.0, dlogp=(1.0, 2.0), ok=True):
    if not ok:
        return {"model": model, "n": n, "backend": backend, "ok": False, "error": "Traceback\nValueError: boom"}
    return {"model": model, "n": n, "backend": backend, "ok": True, "logp": logp, "dlogp": list(dlogp),
            "times_s": [median * 0.9, median, median * 1.1], "median_s": median}


def _opts(**kw):
    base = dict(sizes=[1000], models=["a", "b"], backends=list(mb.BACKENDS), rounds=2, seconds=0.1,
                samples=3, seed=1, models_from=None, use_cache=False, timeout=10.0)
    return argparse.Namespace(**{**base, **kw})


def test_runner_rounds_reference_and_table():
    times = {"stock_fast": 2e-3, "jax": 1e-3, "policy_default": 0.5e-3, "policy_default_1t": 1e-3}
    calls = []

    def fake(model, n, backend, opts):
        calls.append((model, backend, opts.seconds))
        if backend == mb.REFERENCE:
            return _record(model, n, backend, 0.0)
        if model == "b" and backend == "jax":
            return _record(model, n, backend, 0, ok=False)
        t = times[backend] * (4 if model == "b" and backend == "policy_default" else 1)
        return _record(model, n, backend, t, logp=-10.0 * (1 + 1e-6 * (model == "b")))

    opts = _opts()
    res = mb.run(opts, run_one=fake)
    # the reference once per (n, model), untimed; then 2 rounds of every backend, rotated
    assert calls[0] == ("a", "c", 0.0)
    a_calls = [b for m, b, _ in calls[1:9]]
    assert a_calls == [*mb.BACKENDS, *mb.BACKENDS[1:], mb.BACKENDS[0]]
    assert len(calls) == 2 * (1 + 2 * len(mb.BACKENDS))
    assert res.ratio_best(1000, "a") == pytest.approx(0.5)  # 0.5 / min(2, 1)
    assert res.ratio_1t(1000, "a") == pytest.approx(0.5)
    assert res.ratio_best(1000, "b") == pytest.approx(1.0)  # jax failed: stock only
    assert res.agreement(1000, "a") == (0.0, "stock_fast")
    err_b, _ = res.agreement(1000, "b")
    assert err_b == pytest.approx(1e-6)
    text = mb.table(res, 1000, opts.rounds)
    lines = text.splitlines()
    row_a = next(x for x in lines if x.startswith("a "))
    row_b = next(x for x in lines if x.startswith("b "))
    assert row_a.split()[1:5] == ["2.000", "1.000", "0.500", "1.000"] and row_a.endswith("ok")
    assert "ERROR" in row_b and "DISAGREES" in row_b
    foot = next(x for x in lines if x.startswith("geometric mean"))
    assert foot.split()[2:4] == [f"{math.sqrt(0.5 * 1.0):.2f}", f"{math.sqrt(0.5 * 2.0):.2f}"]
    assert "# pd <= min(stock, jax): 1/2 models (slower: b" not in text  # 1.0 is not slower
    assert "# pd <= pd1t: 1/2 models (slower: b 2.00)" in text
    assert "# agreement with C <= 1e-09: 1/2 models" in text
    assert "# b / jax: ValueError: boom" in text
    json.dumps(mb.to_json(res, opts))  # serializable


def test_timed_reference_is_used_when_c_is_a_column():
    calls = []

    def fake(model, n, backend, opts):
        calls.append(backend)
        return _record(model, n, backend, 1e-3)

    res = mb.run(_opts(models=["a"], backends=["c", "policy_default"], rounds=1), run_one=fake)
    assert calls == ["c", "policy_default"]
    assert res.agreement(1000, "a") == (0.0, "c")


def test_parse_worker_output():
    rec = {"ok": True, "logp": -1.5, "dlogp": [float("inf")]}
    out = "noise\n" + mb.MARKER + json.dumps(rec) + "\nmore noise\n"
    assert mb.parse_worker_output(out) == rec
    bad = mb.parse_worker_output("", "line1\nImportError: no pymc\n", 1)
    assert not bad["ok"] and "ImportError: no pymc" in bad["error"] and "exited with 1" in bad["error"]


def test_load_models_and_select(tmp_path):
    assert list(catalogue.load_models()) == list(catalogue.MODELS)
    with pytest.raises(ValueError, match="no such file"):
        catalogue.load_models(tmp_path / "missing.py")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ValueError, match="expected a non-empty dict MODELS"):
        catalogue.load_models(empty)
    bad = tmp_path / "bad.py"
    bad.write_text("MODELS = {'m': 3}\n")
    with pytest.raises(ValueError, match=r"MODELS\['m'\] must map"):
        catalogue.load_models(bad)
    good = tmp_path / "good.py"
    good.write_text("def m(n, seed):\n    return None\nMODELS = {'extra_model': m}\n")
    models = catalogue.load_models(good)
    assert list(models)[-1] == "extra_model" and len(models) == len(catalogue.MODELS) + 1
    assert catalogue.select(models, "extra_model, gamma_glm") == ["extra_model", "gamma_glm"]
    with pytest.raises(ValueError, match="unknown model.*nope"):
        catalogue.select(models, "nope")


def test_cli_routes_group_pymc_and_validates(capsys):
    assert bench._group_of(["--n", "5", "--group", "pymc"]) == "pymc"
    assert bench._group_of(["--group=core"]) == "core"
    for argv in (["--models", "nope"], ["--backends", "numpy"], ["--n", "0"], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as exc:
            bench.main(["--group", "pymc", *argv])
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown model(s) ['nope']" in err and "unknown backend(s) ['numpy']" in err
    assert "--n: sizes must be >= 1" in err


def test_explain_summary_counts_strict_transcendentals():
    x = pt.dvector("x")
    # exp(x) is compared: strict and scalar; exp(2x) and log1p(x) are plain transcendentals
    out = pt.switch(pt.exp(x) > 2.0, pt.log1p(x), pt.exp(2.0 * x)).sum()
    fn = pytensor.function([x], out, mode=ptnumba_codegen.policy_mode("default"))
    rows, fallbacks, _ = mb.lowering_rows(fn)
    assert not fallbacks
    s = mb.summarize_rows(rows)
    assert s["instructions"] == len(rows) == sum(s["classes"].values())
    assert s["transcendental"] == 3 and s["transcendental_strict"] == 1
    if exact_available("exp", "float64"):  # libm's exp as vector code (exact_lanes), in the cone and out of it
        assert s["lowering"]["exact"] == 2 and "Exp[cs]" not in s["scalar_ops"]
    else:
        assert s["scalar_ops"].get("Exp[cs]") == 1
    assert sum(s["lowering"].values()) == 3
    # with a row threshold above any static size nothing changes (the shape is not static)
    assert mb.summarize_rows(mb.lowering_rows(fn, 10**9)[0]) == s
    s = {**s, "scalar_ops": {"Exp[cs]": 1}}
    text = mb.explain_table({"toy": {**s, "fallbacks": [], "other_nodes": {"Dot": 2}}, "bad": {"error": "x\nKeyError: k"}})
    assert "toy" in text and "scalar Exp[cs] x1" in text and "not generated: Dot x2" in text
    assert "bad: explain failed: KeyError: k" in text


# --- the catalogue under PyMC -----------------------------------------------------------

_COMPILED: dict = {}


def compiled(name: str, backend: str):
    """One compiled logp+dlogp per (model, backend) for the whole module (disk cache on)."""
    key = (name, backend)
    if key not in _COMPILED:
        model = catalogue.MODELS[name](N, SEED)
        _COMPILED[key] = mb.compile_model(model, backend, SEED, cache=True)
    return _COMPILED[key]


@needs_pymc
@pytest.mark.parametrize("name", list(catalogue.MODELS))
def test_model_agrees_with_c_under_policy_default(name):
    ref = compiled(name, "c")
    pol = compiled(name, "policy_default")
    assert pol.policy_nodes > 0
    np.testing.assert_array_equal(pol.point, ref.point)
    lp_ref, g_ref = mb.outputs(ref)
    lp, g = mb.outputs(pol)
    assert np.isfinite(lp_ref) and np.all(np.isfinite(g_ref)) and g_ref.size == ref.point.size
    assert mb.max_rel_err(lp, lp_ref) <= mb.AGREEMENT_RTOL, (lp, lp_ref)
    assert mb.max_rel_err(g, g_ref) <= mb.AGREEMENT_RTOL, (g, g_ref)
    # nothing the generator planned fell back to the stock kernel
    _, fallbacks, _ = mb.lowering_rows(pol.fn, N)
    assert not fallbacks


@needs_pymc
def test_builders_are_deterministic_and_sized():
    a = catalogue.MODELS["hierarchical_normal"](N, SEED)
    b = catalogue.MODELS["hierarchical_normal"](N, SEED)
    c = catalogue.MODELS["hierarchical_normal"](N, SEED + 1)
    ya, yb, yc = (m.rvs_to_values[m.observed_RVs[0]].data for m in (a, b, c))
    assert ya.shape == (N,)
    np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(ya, yc)


@needs_pymc
def test_worker_record_in_process(tmp_path):
    held_out = tmp_path / "heldout.py"
    held_out.write_text(
        "import pymc as pm\n"
        "def tiny(n, seed):\n"
        "    with pm.Model() as m:\n"
        "        mu = pm.Normal('mu', 0, 1)\n"
        "        pm.Normal('y', mu, 1, observed=[0.1] * n)\n"
        "    return m\n"
        "MODELS = {'tiny': tiny}\n"
    )
    rec = mb.worker("logistic_regression", N, "c", seed=SEED, seconds=0.02, samples=2)
    assert rec["ok"], rec.get("error")
    assert len(rec["times_s"]) == 2 and rec["median_s"] > 0 and rec["ndim"] == 11
    lp_ref, g_ref = mb.outputs(compiled("logistic_regression", "c"))
    assert rec["logp"] == lp_ref and rec["dlogp"] == g_ref.tolist()
    assert mb.parse_worker_output(mb.MARKER + json.dumps(rec)) == json.loads(json.dumps(rec))
    extra = mb.worker("tiny", 3, "c", seed=SEED, seconds=0, samples=1, models_from=str(held_out))
    assert extra["ok"], extra.get("error")
    assert "times_s" not in extra  # seconds=0: outputs only (the reference run)
    mu = extra["dlogp"][0] + 0.0
    assert math.isfinite(mu)
    missing = mb.worker("nope", 3, "c", seed=SEED, seconds=0, samples=1)
    assert not missing["ok"] and "KeyError" in missing["error"]


@needs_pymc
def test_bench_end_to_end_in_subprocesses(tmp_path):
    """The real path: `bench --group pymc` spawning one worker process (C as the only
    column, so it is also the reference), the table and the JSON."""
    out_json = tmp_path / "pymc.json"
    proc = subprocess.run(
        [sys.executable, "-m", "ptnumba_codegen", "bench", "--group", "pymc", "--n", str(N),
         "--models", "poisson_regression", "--backends", "c", "--rounds", "1", "--seconds", "0.02",
         "--samples", "2", "--json", str(out_json), "-q"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = next(x for x in proc.stdout.splitlines() if x.startswith("poisson_regression"))
    assert row.endswith("ok") and "0.0e+00 (c)" in row
    data = json.loads(out_json.read_text())
    (cell,) = data["cells"]
    assert cell["backend"] == "c" and cell["records"][0]["ok"] and cell["median_s"] > 0
    assert data["summary"][str(N)]["poisson_regression"]["max_rel_err_vs_c"] == 0.0
