"""The generated-model benchmark: seeded random PyMC models (`generated_models`) under each
backend, through the catalogue benchmark's machinery (`catalogue_bench`): every (model,
backend) cell in fresh processes (cold compile on an empty numba cache, warm compile and
per-call timing, agreement with the C backend, time to posterior through nutpie), the
generated models being one more model source of its workers.

    python -m ptnumba_codegen bench --group generated --models 20            # a fresh seed
    python -m ptnumba_codegen bench --group generated --seed 41 --models 20 --only g07,g12
    python -m ptnumba_codegen bench --group generated --seed 41 --models 20 --list
    python -m ptnumba_codegen.tools.generated_bench report run.json     # a --json file again

A performance fuzzer: the models are not the ones the policy was tuned on. The seed is
printed first (and is time-based unless given), so any run can be repeated; the parent
checks every model before anything is timed (it builds and has a finite logp and gradient
at its initial point, else the next attempt of that index is drawn) and the workers build
the accepted attempt again from ``(seed, index, attempt)``.

The table has one row per model, the worst first: the policy's per-call ratio to stock
(flagged above `SLOWER_THAN`), to the faster of stock and JAX, cold compile ratios, the peak
memory of each backend's cold (compiling) process, the worst normwise error to C; then the
catalogue bench's summary lines and the worst models.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from ptnumba_codegen._version import GENERATOR_VERSION
from ptnumba_codegen.tools import catalogue_bench as cb
from ptnumba_codegen.tools import generated_models as gm

log = logging.getLogger("ptnumba_codegen.tools.generated_bench")

#: Timed backends by default, in column order (``jax`` dropped when JAX is not importable).
BACKENDS = ("stock_fast", "policy_default", "jax")
#: A model is flagged when the policy's median call is above this many times stock's.
SLOWER_THAN = 1.10
DEFAULT_COUNT = 10
#: How many of the worst models the summary names.
WORST = 5


def source_model(spec: dict, recipe=None) -> cb.SourceModel:
    """The generated model ``spec["generated"]`` (`GeneratedModel.source`), for a worker."""
    g = gm.from_source(spec["generated"])

    def build(form):
        model, ip = g.build()
        return cb.in_form(model, form), ip

    return cb.SourceModel(g.name, False, build, recipe or gm.logp_dlogp_fn)


def named_source(where: str, model: str) -> cb.SourceModel:
    """A model by name for the measurement scripts: ``gNN`` of a seed when ``where`` is
    ``generated:SEED``, else the catalogue model ``model`` of the checkout ``where``."""
    if where.startswith("generated:"):
        seed = where.split(":", 1)[1]
        if not seed.isdigit() or not model.startswith("g") or not model[1:].isdigit():
            raise ValueError(f"generated models are named gNN of an integer seed: got {where!r} {model!r}")
        g, _rejected = gm.accept(int(seed), int(model[1:]))
        return source_model({"generated": g.source()})
    return cb.catalogue_model(where, cb.discover(where)[model], cb.load_recipe(where))


def fresh_seed() -> int:
    """A seed from the clock (short enough to type back)."""
    return time.time_ns() // 1000 % 1_000_000


def nutpie_sample(names: list[str], k: int) -> list[str]:
    """``k`` of ``names``, evenly spread over the list (all when ``k >= len(names)``)."""
    if k <= 0:
        return []
    if k >= len(names):
        return list(names)
    return [names[round(i * (len(names) - 1) / (k - 1))] for i in range(k)] if k > 1 else [names[0]]


def policy_backend(backends) -> str | None:
    """The policy backend the ratios are of: ``policy_default`` when run, else the first
    ``policy_*``."""
    policies = [b for b in backends if b.startswith("policy_")]
    return "policy_default" if "policy_default" in policies else next(iter(policies), None)


# --- reading the results ----------------------------------------------------------------


def _ratio(a, b):
    return a / b if a is not None and b else None


def model_rows(res: cb.Results, form: str) -> list[dict]:
    """Per model: the numbers of the table (None where not measured), worst first: a policy
    failure or disagreement, then by the policy's per-call ratio to stock."""
    pol = policy_backend(res.backends)
    rows = []
    for m in res.models:
        cells = {b: res.cell(form, m, b) for b in res.backends}
        row = {"model": m, "median_us": {b: c.median_us for b, c in cells.items()},
               "cold_s": {b: c.cold_s for b, c in cells.items()},
               "peak_mb": {b: c.peak_mb for b, c in cells.items()},
               "status": {b: res.status(form, m, b) for b in res.backends},
               "nutpie_s": {b: _nutpie_seconds(c) for b, c in cells.items()}}
        norms = [res.agreement(form, m, b)[1] for b in res.backends]
        row["norm_err"] = max((n for n in norms if n is not None), default=None)
        if pol:
            row["per_call"] = res.ratio(form, m, pol)
            row["per_call_best"] = res.ratio(form, m, pol, ("stock_fast", "jax"))
            row["cold"] = _ratio(cells[pol].cold_s, cells["stock_fast"].cold_s if "stock_fast" in cells else None)
            row["cold_jax"] = _ratio(cells[pol].cold_s, cells["jax"].cold_s if "jax" in cells else None)
            row["peak"] = _ratio(cells[pol].peak_mb, cells["stock_fast"].peak_mb if "stock_fast" in cells else None)
        row["flags"] = _flags(row, pol)
        rows.append(row)
    return sorted(rows, key=lambda r: (not _broken(r, pol), -(r.get("per_call") or 0.0)))


def _nutpie_seconds(cell) -> float | None:
    n = cell.nutpie or {}
    return n["nutpie_compile_s"] + n["nutpie_sample_s"] if n.get("nutpie_status") == "ok" else None


def _broken(row, pol) -> bool:
    status = row["status"].get(pol, "ok") if pol else "ok"
    return not status.startswith("ok") and status != "not run"


def _flags(row, pol) -> list[str]:
    out = []
    if pol and (row.get("per_call") or 0.0) > SLOWER_THAN:
        out.append(f"SLOWER {row['per_call']:.2f}x")
    for b, status in row["status"].items():
        if status.startswith("error"):
            out.append(f"{cb._short(b)} {status}")
        elif status.startswith("DISAGREES"):
            out.append(f"{cb._short(b)} {status}")
    return out


def model_table(res: cb.Results, form: str, models: dict, *, nutpie: bool = False) -> str:
    """One row per model, worst first (the values of every backend in one column, in
    backend order); the models' pieces below the table."""
    pol = policy_backend(res.backends)
    order = "/".join(cb._short(b) for b in res.backends)
    p = cb._short(pol) if pol else "-"
    f = cb._fmt

    def per_backend(values: dict, spec: str) -> str:
        return "/".join(f(values[b], spec) for b in res.backends)

    head = ["model", "scale", "pieces", f"us {order}"]
    head += [f"{p}/stock", f"{p}/min(stock,jax)"] if pol else []
    head += [f"cold s {order}"] + ([f"cold {p}/stock", f"cold {p}/jax"] if pol else [])
    head += [f"peak MB {order}", "norm err"] + ([f"nutpie s {order}"] if nutpie else []) + ["flags"]
    lines = []
    rows = model_rows(res, form)
    for r in rows:
        g = models[r["model"]]
        vals = [r["model"], g.scale, "+".join(g.piece_names), per_backend(r["median_us"], ".1f")]
        vals += [f(r["per_call"], ".2f"), f(r["per_call_best"], ".2f")] if pol else []
        vals += [per_backend(r["cold_s"], ".1f")] + ([f(r["cold"], ".2f"), f(r["cold_jax"], ".2f")] if pol else [])
        vals += [per_backend(r["peak_mb"], ".0f"), f(r["norm_err"], ".1e")]
        vals += [per_backend(r["nutpie_s"], ".1f")] if nutpie else []
        vals.append("; ".join(r["flags"]) or "ok")
        lines.append(vals)
    widths = [max(len(h), *(len(v[i]) for v in lines)) if lines else len(h) for i, h in enumerate(head)]
    left = {0, 1, 2, len(head) - 1}

    def line(vals):
        return "  ".join(v.ljust(w) if i in left else v.rjust(w)
                         for i, (v, w) in enumerate(zip(vals, widths, strict=True))).rstrip()

    out = [f"# generated models, {form} form, worst first: us per call (median), ratios of medians, "
           f"compile seconds on an empty cache, peak memory of the compiling process, largest normwise "
           f"error to C; flagged: {p}/stock per call > {SLOWER_THAN:.2f}; generator {GENERATOR_VERSION}",
           line(head), "  ".join("-" * w for w in widths), *(line(v) for v in lines)]
    out += [f"# {r['model']} = {models[r['model']].describe()}" for r in rows]
    return "\n".join(out)


def generated_summary(res: cb.Results, form: str) -> list[str]:
    """The lines the catalogue's summary has not: compile and memory ratios per model, and
    the models the policy loses on."""
    pol = policy_backend(res.backends)
    if pol is None:
        return []
    p = cb._short(pol)
    rows = model_rows(res, form)
    out = []
    for key, label in (("cold", f"{p}/stock"), ("cold_jax", f"{p}/jax")):
        xs = [r[key] for r in rows]
        out.append(f"# cold compile per model, {label}: geometric mean {cb._fmt(cb.geomean(xs), '.2f')}, "
                   f"median {cb._fmt(cb._median(xs), '.2f')}")
    peaks = ", ".join(f"{cb._short(b)} {cb._fmt(cb._median(r['peak_mb'][b] for r in rows), '.0f')}"
                      for b in res.backends)
    out.append(f"# peak memory of the compiling process, MB (median): {peaks}; {p}/stock geometric mean "
               f"{cb._fmt(cb.geomean(r['peak'] for r in rows), '.2f')}")
    slower = [r for r in rows if (r.get("per_call") or 0.0) > SLOWER_THAN]
    out.append(f"# per call {p}/stock > {SLOWER_THAN:.2f}: {len(slower)} of {len(rows)} models"
               + (" (" + ", ".join(f"{r['model']} {r['per_call']:.2f}" for r in slower) + ")" if slower else ""))
    for key, label in (("per_call_best", f"per call {p}/min(stock,jax)"), ("cold", f"cold compile {p}/stock"),
                       ("peak", f"peak memory {p}/stock")):
        worst = sorted((r for r in rows if r.get(key) is not None), key=lambda r: -r[key])[:WORST]
        out.append(f"# worst {label}: " + (", ".join(f"{r['model']} {r[key]:.2f}" for r in worst) or "-"))
    return out


def reproduce_command(args) -> str:
    cmd = f"python -m ptnumba_codegen bench --group generated --seed {args.seed} --models {args.count}"
    return cmd + (f" --only {','.join(args.only)}" if args.only else "")


def to_json(res: cb.Results, args, models: dict) -> dict:
    data = cb.to_json(res, args)
    data["meta"].update(source="generated", seed=args.seed, count=args.count, reproduce=reproduce_command(args),
                        nutpie_models=args.nutpie_models, slower_than=SLOWER_THAN)
    data["generated"] = [{"model": g.name, **g.source(), "scale": g.scale, "pieces": g.pieces,
                          "description": g.describe()} for g in models.values()]
    data["rows"] = {form: model_rows(res, form) for form in res.forms}
    data["summary_generated"] = {form: generated_summary(res, form) for form in res.forms}
    return data


# --- CLI --------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m ptnumba_codegen bench --group generated",
        description="Seeded random PyMC models (hierarchical GLMs, gathers, subtensor assembly, mixtures, "
        "simplexes, GPs, Scan recurrences) under each backend, each cell in fresh processes: cold and warm "
        "compile, per-call time, agreement with the C backend, peak memory, optional time to posterior "
        "through nutpie. A performance fuzzer: the table points at the models the policy loses on.",
    )
    p.add_argument("--group", choices=["generated"], default="generated", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=None, help="the generator's seed, also nutpie's (default: from the clock; always printed)")
    p.add_argument("--models", type=int, default=DEFAULT_COUNT, dest="count", help=f"how many models (default {DEFAULT_COUNT})")
    p.add_argument("--only", default=None, help="comma-separated model names of this seed to run (e.g. g03,g07)")
    p.add_argument("--list", action="store_true", help="print the models (pieces, sizes, redraws) and exit")
    p.add_argument("--nutpie-sample", type=int, default=0, metavar="K",
                   help="time to posterior through nutpie for K models, evenly spread (default 0)")
    p.add_argument("--details", action="store_true", help="also print the catalogue bench's table (one row per model and backend)")
    cb.add_runner_options(p, BACKENDS)
    args = p.parse_args(argv)
    cb.check_runner_options(p, args, BACKENDS)
    if args.count < 1:
        p.error("--models must be >= 1")
    args.seed = fresh_seed() if args.seed is None else args.seed
    if args.seed < 0:
        p.error("--seed must be >= 0")
    names = [gm.model_name(i) for i in range(args.count)]
    args.only = cb._csv(args.only)
    bad = [n for n in args.only if n not in names]
    if bad:
        p.error(f"--only: unknown model(s) {bad}; allowed: {names[0]}..{names[-1]}")
    args.indices = [names.index(n) for n in args.only] if args.only else list(range(args.count))
    args.catalogue = None
    return args


def accepted_models(args) -> dict:
    """``{name: GeneratedModel}`` of the selected indices, each the first accepted attempt."""
    models = {}
    for i in args.indices:
        t0 = time.perf_counter()
        g, rejected = gm.accept(args.seed, i)
        for why in rejected:
            log.info("%s: redrawn: %s", g.name, why)
        log.info("%s (attempt %d, checked in %.1f s): %s", g.name, g.attempt, time.perf_counter() - t0, g.describe())
        models[g.name] = g
    return models


def report_main(argv) -> int:
    data, res, nutpie = cb.read_report(argv, "python -m ptnumba_codegen.tools.generated_bench report")
    models = {d["model"]: gm.from_source(d) for d in data["generated"]}
    for form in res.forms:
        print(model_table(res, form, models, nutpie=nutpie))
        print("\n".join([*cb.summary(res, form, nutpie=nutpie), *generated_summary(res, form)]))
    print(f"# seed {data['meta']['seed']}: {data['meta']['reproduce']}")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    print(f"# seed {args.seed}: {reproduce_command(args)}", flush=True)
    import warnings

    warnings.simplefilter("ignore")  # PyMC's warnings while the models are checked
    models = accepted_models(args)
    if args.list:
        for g in models.values():
            print(f"{g.name}  attempt {g.attempt}  {g.describe()}", flush=True)
        return 0
    args.models = list(models)
    args.source_fields = lambda name: {"source": "generated", "generated": models[name].source()}
    args.nutpie_models = nutpie_sample(args.models, args.nutpie_sample)
    args.nutpie = bool(args.nutpie_models)

    def write_json(res):  # after every model, so an interrupted run keeps what it measured
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(to_json(res, args, models), fh, indent=1, default=str)

    res = cb.run(args, progress=write_json)
    for form in args.forms:
        if args.details:
            print(cb.table(res, form, nutpie=args.nutpie, title="generated models"), flush=True)
        print(model_table(res, form, models, nutpie=args.nutpie), flush=True)
        print("\n".join([*cb.summary(res, form, nutpie=args.nutpie), *generated_summary(res, form)]), flush=True)
    print(f"# seed {args.seed}: {reproduce_command(args)}\n", flush=True)
    if args.json:
        log.info("wrote %s", args.json)
    return 1 if any(res.policy_fails_stock_runs(f) for f in args.forms) else 0


if __name__ == "__main__":
    sys.exit(main())
