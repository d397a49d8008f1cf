"""The model generator (`ptnumba_codegen.tools.generated_models`) and its benchmark
(`ptnumba_codegen.tools.generated_bench`).

Drawing is numpy only and cheap, so determinism and coverage run over many draws. Building
and checking a model (PyMC, compiled with Python's ``perform``, no compiler) takes about a
second: every piece once, then the first models of two seeds. One model is compiled with
numba once, in process, through the catalogue bench's worker. The bench's table, flags and summary run
on injected records; one end-to-end run of the CLI (subprocess workers) is marked slow."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from ptnumba_codegen.tools import catalogue_bench as cb
from ptnumba_codegen.tools import generated_bench as gb
from ptnumba_codegen.tools import generated_families as gf
from ptnumba_codegen.tools import generated_models as gm
from ptnumba_codegen.tools import generated_pieces as gp
from ptnumba_codegen.tools import models as pymc_models

needs_pymc = pytest.mark.skipif(not pymc_models.pymc_available(), reason="pymc is not installed")

COVERAGE_SEEDS = range(4)
COVERAGE_MODELS = 40


def _draws():
    return [gm.draw(seed, i) for seed in COVERAGE_SEEDS for i in range(COVERAGE_MODELS)]


def _tiny_seed(count=2, cheap=("glm", "gather2", "assembly", "mixture")) -> int:
    """The first seed whose first ``count`` draws are small single-piece models of the
    ``cheap`` pieces (no Scan, no GP: the cheapest to compile)."""
    for seed in range(10_000):
        draws = [gm.draw(seed, i) for i in range(count)]
        if all(g.scale == "small" and len(g.pieces) == 1 and g.piece_names[0] in cheap for g in draws):
            return seed
    raise AssertionError("no seed with tiny models")


# --- drawing ----------------------------------------------------------------------------


def test_draw_is_deterministic_and_seeds_differ():
    a = [gm.draw(3, i) for i in range(10)]
    assert a == [gm.draw(3, i) for i in range(10)]
    assert [g.describe() for g in a] != [gm.draw(4, i).describe() for i in range(10)]
    assert gm.draw(3, 0, 0) != gm.draw(3, 0, 1)  # a redraw is another model
    assert gm.from_source(a[5].source()) == a[5]
    assert [g.name for g in a[:3]] == ["g00", "g01", "g02"]
    json.dumps([g.pieces for g in a])  # what --list and --json print


def test_draw_is_the_same_in_another_process():
    """Nothing depends on Python's hash seed or on what the process did before."""
    code = ("from ptnumba_codegen.tools import generated_models as gm; "
            "print('|'.join(gm.draw(9, i).describe() for i in range(6)))")
    env = {**os.environ, "PYTHONHASHSEED": "123"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "|".join(gm.draw(9, i).describe() for i in range(6))


def test_draws_cover_every_piece_family_link_and_variant():
    draws = _draws()
    pieces = Counter(p for g in draws for p in g.piece_names)
    assert set(pieces) == set(gp.PIECES)
    params = [(p, q) for g in draws for p, q in g.pieces]
    assert {q["family"] for _, q in params if "family" in q} == set(gf.FAMILIES)
    assert {q["link"] for _, q in params if "link" in q} == set(gf.LINKS)
    seen = {(p, key, q[key]) for p, q in params for key in ("variant", "style", "state", "emission", "kernel",
                                                             "likelihood", "observation", "innovation") if key in q}
    expected = {
        ("gather2", "style", s) for s in ("tile", "broadcast", "stacked")} | {
        ("assembly", "variant", v) for v in ("reference_category", "cholesky", "impute", "scatter_add")} | {
        ("mixture", "variant", v) for v in ("normal_mixture", "mixture", "logsumexp", "zero_inflated")} | {
        ("stick_breaking", "likelihood", v) for v in ("mixture", "logsumexp")} | {
        ("ilr_softmax", "variant", v) for v in ("lda", "multinomial")} | {
        ("gp", "variant", v) for v in ("latent", "marginal")} | {
        ("gp", "kernel", k) for k in ("ExpQuad", "Matern52", "Matern32", "Exponential")} | {
        ("hmm", "emission", e) for e in ("normal", "poisson")} | {
        ("ar", "variant", v) for v in ("latent", "conditional")} | {
        ("garch", "innovation", v) for v in ("normal", "studentt")} | {
        ("kalman", "state", s) for s in ("local_level", "local_linear_trend", "ar2")}
    assert expected <= seen, sorted(expected - seen)
    assert {g.scale for g in draws} == set(gp.SCALES)
    assert {len(g.pieces) for g in draws} == {1, 2, 3}
    assert all(len(set(g.piece_names)) == len(g.pieces) for g in draws)  # distinct pieces


def test_sizes_follow_the_scale():
    rows = {s: [q["n"] for g in _draws() if g.scale == s for p, q in g.pieces if p == "glm"] for s in gp.SCALES}
    for s in gp.SCALES:
        lo, hi = gp.SIZE_RANGES["rows"][s]
        assert rows[s] and all(lo <= n <= hi for n in rows[s]), s
    assert max(rows["small"]) < min(rows["large"])


def test_links_match_their_family_domain():
    for family in gf.FAMILIES:
        links = gf.links_of(family)
        assert links and all(gf.LINKS[link].domain == gf.FAMILIES[family].domain for link in links)
    eta = np.linspace(-3.0, 3.0, 7)
    assert np.all(gf.LINKS["log"].numpy(eta) > 0) and np.all(gf.LINKS["softplus"].numpy(eta) > 0)
    assert np.all((gf.LINKS["probit"].numpy(eta) > 0) & (gf.LINKS["probit"].numpy(eta) < 1))


def test_helmert_rows_are_orthonormal_and_sum_to_zero():
    for k in (2, 3, 7):
        h = gp.helmert(k)
        assert h.shape == (k - 1, k)
        np.testing.assert_allclose(h @ h.T, np.eye(k - 1), atol=1e-14)
        np.testing.assert_allclose(h.sum(axis=1), 0.0, atol=1e-14)


# --- building: finite logp and gradient at the initial point ----------------------------


def _one_piece_models():
    """Per piece, a small model of that piece alone, from a draw that has it."""
    found = {}
    for g in _draws():
        for piece, params in g.pieces:
            if piece not in found and g.scale == "small":
                found[piece] = gm.GeneratedModel(g.seed, g.index, g.attempt, "small", ((piece, params),))
    assert set(found) == set(gp.PIECES)
    return found


@needs_pymc
@pytest.mark.parametrize("piece", list(gp.PIECES))
def test_every_piece_builds_with_finite_logp_and_gradient(piece):
    g = _one_piece_models()[piece]
    assert gm.check(g) is None, g.describe()
    model, ip = g.build()
    assert model.free_RVs and set(ip) == {v.name for v in model.value_vars}
    assert all(name.startswith(f"{piece}0_") for name in model.named_vars)  # names carry the piece


@needs_pymc
@pytest.mark.parametrize("seed", [0, 1])
def test_generated_models_are_finite_at_their_first_draw(seed):
    """Redraws are for bad luck: the first draws of these seeds all build and are finite."""
    for i in range(5):
        g = gm.draw(seed, i)
        logp, dlogp, x = gm.initial_logp(g)
        assert np.isfinite(logp) and dlogp.shape == x.shape and np.all(np.isfinite(dlogp)), g.describe()
        assert np.any(dlogp != 0), g.describe()


@needs_pymc
def test_the_same_model_gets_the_same_data():
    g = gm.draw(5, 2)
    (m1, ip1), (m2, ip2) = g.build(), g.build()
    data1 = [np.asarray(m1.rvs_to_values[v].data) for v in m1.observed_RVs]
    data2 = [np.asarray(m2.rvs_to_values[v].data) for v in m2.observed_RVs]
    assert len(data1) == len(data2) and all(np.array_equal(a, b) for a, b in zip(data1, data2, strict=True))
    assert all(np.array_equal(ip1[k], ip2[k]) for k in ip1)


def _model_outside_its_support(self):
    import pymc as pm

    with pm.Model() as model:
        pm.Poisson("y", pm.HalfNormal("rate", 1.0), observed=np.array([2, -1]))
    return model, model.initial_point()


def _model_that_does_not_build(self):
    raise ValueError("no\nmore")


@needs_pymc
def test_check_rejects_what_does_not_build_or_is_not_finite(monkeypatch):
    g = gm.draw(0, 0)
    monkeypatch.setattr(gm.GeneratedModel, "build", _model_outside_its_support)
    assert gm.check(g) == "logp -inf at the initial point"
    monkeypatch.setattr(gm.GeneratedModel, "build", _model_that_does_not_build)
    assert gm.check(g) == "ValueError: no"
    with pytest.raises(RuntimeError, match=f"no draw accepted in {gm.MAX_ATTEMPTS} attempts"):
        gm.accept(0, 0)


@needs_pymc
def test_accept_redraws_deterministically(monkeypatch):
    """Attempts rejected by `check` are skipped; the accepted one is what workers rebuild."""
    monkeypatch.setattr(gm, "check", lambda g: None if g.attempt == 2 else "rejected")
    g, rejected = gm.accept(7, 3)
    assert g.attempt == 2 and len(rejected) == 2 and g == gm.from_source(g.source())


# --- one model compiled with numba, through the catalogue bench's worker -----------------


@needs_pymc
def test_worker_compiles_a_generated_model(tmp_path):
    seed = _tiny_seed(1, cheap=("glm",))
    g, _ = gm.accept(seed, 0)
    spec = {"source": "generated", "generated": g.source(), "model": g.name, "form": "original",
            "backend": "policy_default", "phase": "cold", "round": 1, "cache_dir": str(tmp_path / "cache"),
            "seconds": 0.05, "samples": 2, "out": str(tmp_path / "out.npz")}
    rec = cb.worker(spec)
    assert rec["ok"], rec.get("error")
    assert rec["maxrss_mb"] > 50 and rec["discrete"] is False and len(rec["times_s"]) == 2
    ref_logp, ref_dlogp, x = gm.initial_logp(g)
    out = cb.load_outputs(rec["out"])
    _, norm = cb.agreement(out, {"logp": np.atleast_1d(ref_logp), "dlogp": np.asarray(ref_dlogp)})
    assert rec["ndim"] == x.size and norm < 1e-9


# --- the bench: rows, flags, summary, CLI -----------------------------------------------

TIMES_US = {  # stock, policy, jax per model; None: the backend fails
    "g00": {"stock_fast": 10.0, "policy_default": 12.0, "jax": 30.0},  # the policy loses (1.20)
    "g01": {"stock_fast": 400.0, "policy_default": 300.0, "jax": 200.0},
    "g02": {"stock_fast": 100.0, "policy_default": None, "jax": 100.0},
}
COLD_S = {"stock_fast": 8.0, "policy_default": 4.0, "jax": 2.0}
PEAK_MB = {"stock_fast": 500.0, "policy_default": 400.0, "jax": 600.0}


def _opts(tmp_path, **kw):
    base = dict(catalogue=None, forms=["original"], models=list(TIMES_US), backends=list(gb.BACKENDS), rounds=1,
                time_budget=0.1, samples=3, nutpie=False, cores=2, status_only=False, reference=True, seed=1,
                nice=0, timeout=10.0, workdir=str(tmp_path / "work"), count=3, only=[], nutpie_models=[])
    args = argparse.Namespace(**{**base, **kw})
    args.timed_backends = set(args.backends)
    args.source_fields = lambda name: {"source": "generated", "generated": {"seed": 1, "index": int(name[1:]), "attempt": 0}}
    return args


def _fake_runner(calls):
    def run_one(spec):
        calls.append(spec)
        m, b = spec["model"], spec["backend"]
        rec = {k: spec[k] for k in ("model", "form", "backend", "phase", "round")}
        if b != "c" and TIMES_US[m][b] is None:
            return {**rec, "ok": False, "status": "error: NotImplementedError: no rule", "maxrss_mb": 300.0}
        dlogp = np.array([1.0, -2.0]) * (1 + (1e-6 if (m, b) == ("g01", "jax") else 0.0))
        np.savez(spec["out"], logp=np.array([-5.0]), dlogp=dlogp) if spec["out"] else None
        rec.update(ok=True, status="ok", out=spec["out"], compile_s=COLD_S.get(b, 1.0),
                   maxrss_mb=PEAK_MB.get(b, 300.0))
        if spec["seconds"]:
            t = TIMES_US[m][b] * 1e-6
            rec.update(times_s=[t, t], median_s=t, min_s=t)
        return rec

    return run_one


def _models():
    return {f"g{i:02d}": gm.draw(1, i) for i in range(3)}


def test_specs_name_the_generated_source(tmp_path):
    calls = []
    cb.run(_opts(tmp_path), run_one=_fake_runner(calls))
    assert {s["source"] for s in calls} == {"generated"}
    assert {s["generated"]["index"] for s in calls if s["model"] == "g02"} == {2}
    assert "catalogue" not in calls[0]


def test_rows_worst_first_with_flags(tmp_path):
    res = cb.run(_opts(tmp_path), run_one=_fake_runner([]))
    rows = gb.model_rows(res, "original")
    assert [r["model"] for r in rows] == ["g02", "g00", "g01"]  # the failure, then by pd/stock
    g00 = rows[1]
    assert g00["per_call"] == pytest.approx(1.2) and g00["flags"] == ["SLOWER 1.20x"]
    assert g00["cold"] == pytest.approx(0.5) and g00["cold_jax"] == pytest.approx(2.0)
    assert g00["peak"] == pytest.approx(0.8) and g00["peak_mb"]["jax"] == 600.0
    assert rows[2]["per_call_best"] == pytest.approx(1.5) and rows[2]["flags"] == ["jax DISAGREES (normwise 1.0e-06)"]
    assert rows[0]["flags"] == ["pd error: NotImplementedError: no rule"]
    table = gb.model_table(res, "original", _models())
    lines = table.splitlines()
    assert lines[1].split()[:4] == ["model", "scale", "pieces", "us"]
    body = [line for line in lines if line.startswith("g0")]
    assert [line.split()[0] for line in body] == ["g02", "g00", "g01"]
    assert "10.0/12.0/30.0" in body[1] and "SLOWER 1.20x" in body[1] and "500/400/600" in body[1]
    assert f"# g00 = {gm.draw(1, 0).describe()}" in lines


def test_summary_names_the_losers(tmp_path):
    res = cb.run(_opts(tmp_path), run_one=_fake_runner([]))
    lines = gb.generated_summary(res, "original")
    assert "# per call pd/stock > 1.10: 1 of 3 models (g00 1.20)" in lines
    assert "# cold compile per model, pd/stock: geometric mean 0.50, median 0.50" in lines
    assert "# cold compile per model, pd/jax: geometric mean 2.00, median 2.00" in lines
    assert any(line.startswith("# worst per call pd/min(stock,jax): g01 1.50, g00 1.20") for line in lines)
    assert any(line.startswith("# peak memory of the compiling process, MB (median): stock 500, pd 400, jax 600")
               for line in lines)
    catalogue_lines = cb.summary(res, "original")
    assert "# policy fails where stock runs: 1 (must be 0)" in catalogue_lines


def test_json_round_trip_and_report(tmp_path, capsys):
    args = _opts(tmp_path)
    res = cb.run(args, run_one=_fake_runner([]))
    models = {f"g{i:02d}": gm.draw(1, i) for i in range(3)}
    data = json.loads(json.dumps(gb.to_json(res, args, models), default=str))
    assert data["meta"]["seed"] == 1 and data["meta"]["reproduce"].endswith("--seed 1 --models 3")
    assert [d["model"] for d in data["generated"]] == ["g00", "g01", "g02"]
    assert data["rows"]["original"][1]["flags"] == ["SLOWER 1.20x"]
    [cell] = [c for c in data["cells"] if c["model"] == "g00" and c["backend"] == "jax"]
    assert cell["cold_peak_mb"] == 600.0
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    assert gb.main(["report", str(path)]) == 0
    assert "SLOWER 1.20x" in capsys.readouterr().out


def test_report_merges_the_parts_of_one_run(tmp_path, capsys):
    """A run in ``--only`` parts reports as one: every model's rows and one summary over all
    of them; parts of different runs, or repeating a model, are refused by name."""
    args = _opts(tmp_path)
    res = cb.run(args, run_one=_fake_runner([]))
    data = json.loads(json.dumps(gb.to_json(res, args, _models()), default=str))

    def part(names, name, **meta):
        keep = set(names)
        d = {**data, "meta": {**data["meta"], "models": list(names), **meta},
             "cells": [c for c in data["cells"] if c["model"] in keep],
             "reference": [r for r in data["reference"] if r["model"] in keep],
             "generated": [g for g in data["generated"] if g["model"] in keep]}
        path = tmp_path / name
        path.write_text(json.dumps(d))
        return str(path)

    a, b = part(["g00", "g01"], "a.json"), part(["g02"], "b.json")
    assert gb.main(["report", a, b]) == 0
    merged = capsys.readouterr().out
    assert gb.main(["report", str(part(["g00", "g01", "g02"], "all.json"))]) == 0
    whole = capsys.readouterr().out
    summary = [line for line in merged.splitlines() if line.startswith("# ") and "seed" not in line]
    assert summary == [line for line in whole.splitlines() if line.startswith("# ") and "seed" not in line]
    assert "# per call pd/stock > 1.10: 1 of 3 models (g00 1.20)" in summary

    for bad, why in ((part(["g02"], "seed.json", seed=2), "meta['seed'] is 2"),
                     (part(["g01"], "again.json"), "models ['g01'] are also in an earlier file")):
        with pytest.raises(SystemExit):
            gb.main(["report", a, bad])
        err = capsys.readouterr().err
        assert why in err and bad in err


def test_nutpie_sample_spreads_over_the_models(tmp_path):
    names = [f"g{i:02d}" for i in range(10)]
    assert gb.nutpie_sample(names, 0) == []
    assert gb.nutpie_sample(names, 1) == ["g00"]
    assert gb.nutpie_sample(names, 3) == ["g00", "g04", "g09"]
    assert gb.nutpie_sample(names, 20) == names
    calls = []
    cb.run(_opts(tmp_path, nutpie=True, nutpie_models=["g01"]), run_one=lambda s: calls.append(s) or _fake_runner([])(s))
    assert {s["model"] for s in calls if s["phase"] in cb.NUTPIE_PHASES} == {"g01"}


def test_cli_seed_defaults_and_errors(capsys):
    a, b = gb.parse_args([]), gb.parse_args(["--seed", "17", "--models", "4", "--only", "g01,g03"])
    assert a.seed >= 0 and a.count == gb.DEFAULT_COUNT and a.indices == list(range(gb.DEFAULT_COUNT))
    assert (b.seed, b.indices) == (17, [1, 3])
    assert gb.reproduce_command(b) == "python -m ptnumba_codegen bench --group generated --seed 17 --models 4 --only g01,g03"
    for argv, message in ((["--models", "2", "--only", "g05"], "--only: unknown model(s) ['g05']"),
                          (["--backends", "stock_fast,bogus"], "--backends: unknown backend(s) ['bogus']"),
                          (["--models", "0"], "--models must be >= 1")):
        with pytest.raises(SystemExit):
            gb.parse_args(argv)
        assert message in capsys.readouterr().err


@needs_pymc
def test_cli_list_prints_the_models_and_the_seed(capsys):
    seed = _tiny_seed(2)
    assert gb.main(["--group", "generated", "--seed", str(seed), "--models", "2", "--list", "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"# seed {seed}: python -m ptnumba_codegen bench --group generated --seed {seed} --models 2"
    assert [line.split()[0] for line in out[1:]] == ["g00", "g01"]
    assert out[1].endswith(gm.accept(seed, 0)[0].describe())


# --- end to end -------------------------------------------------------------------------


@needs_pymc
@pytest.mark.slow
def test_bench_end_to_end_on_two_tiny_models(tmp_path):
    """The CLI with subprocess workers: C reference, cold and warm processes, one short
    timing round, on two small single-piece models."""
    seed = _tiny_seed(2)
    out = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "ptnumba_codegen", "bench", "--group", "generated", "--seed", str(seed),
           "--models", "2", "--rounds", "1", "--time-budget", "0.05", "--samples", "2",
           "--backends", "stock_fast,policy_default", "--json", str(out), "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[0].startswith(f"# seed {seed}:")
    assert "# policy fails where stock runs: 0 (must be 0)" in proc.stdout
    assert "# normwise disagreement with C > 1e-09: 0" in proc.stdout
    data = json.loads(out.read_text())
    cells = {(c["model"], c["backend"]): c for c in data["cells"]}
    assert set(cells) == {(m, b) for m in ("g00", "g01") for b in ("stock_fast", "policy_default")}
    for c in cells.values():
        assert c["status"] == "ok" and c["median_us"] > 0 and c["cold_peak_mb"] > 50
        assert c["normwise_rel_err"] is not None and c["normwise_rel_err"] <= 1e-9
        assert math.isfinite(c["cold_compile_s"]) and c["warm_compile_s"] is not None
