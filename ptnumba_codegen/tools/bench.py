"""Side-by-side benchmark of the workloads in `ptnumba_codegen.tools.workloads` under every backend.

    python -m ptnumba_codegen.tools.bench --n 1000000 --group core
    python -m ptnumba_codegen.tools.bench --group all --json bench.json --plot bench_speedup.png

For each workload: compile it under each backend (``--copies`` separately compiled copies,
numba disk cache off unless ``--use-cache``), run once, check that every backend agrees
with ``stock_strict`` (``allclose``), then time calls with the repetitions interleaved
across backends (rep 1: every backend once, rep 2: every backend once, ... with the order
rotated each rep and the copies taken in turn) so that machine noise hits all backends
alike, and report medians, plus the ratio of the fastest samples (on a shared machine
the samples are bimodal; see `Cell.fastest`). First-compile time is measured separately
with the numba cache disabled and a fresh graph each time (also interleaved, after a
warm-up round so numba's one-time costs are not charged to whichever backend goes first).

Progress goes to stderr (logging); the table goes to stdout. Only ratios measured in the
same process mean anything on a noisy machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

import ptnumba_codegen
from ptnumba_codegen import GENERATOR_VERSION
from ptnumba_codegen.tools import catalogue_bench, generated_bench, modelbench
from ptnumba_codegen.tools import workloads as wl

log = logging.getLogger("ptnumba_codegen.tools.bench")

REFERENCE = "stock_strict"
BASELINE = "stock_fast"
SHORT = {
    "stock_fast": "sf",
    "stock_strict": "ss",
    "policy_default": "pd",
    "policy_default_1t": "pd1",
    "policy_strict": "ps",
    "policy_fast": "pf",
    "policy_as_written": "paw",
    "policy_rewritten": "prw",
    "jax": "jax",
}


@dataclass
class Cell:
    """Everything measured for one (workload, backend)."""

    times: list[float] = field(default_factory=list)  # seconds per call, one per rep
    tiny_times: list[float] = field(default_factory=list)
    compile_times: list[float] = field(default_factory=list)
    max_rel_err: float | None = None
    mismatch: bool = False
    error: str | None = None  # traceback text when compiling or calling failed

    @property
    def median(self) -> float | None:
        return statistics.median(self.times) if self.times else None

    @property
    def fastest(self) -> float | None:
        """Fastest sample. On a shared 2-vCPU machine the samples are bimodal (a call runs
        much slower while another job occupies the sibling vCPU) and the median
        can land in either mode; slowdowns are one-sided, so the minimum is the steadier
        estimate of what the code itself costs."""
        return min(self.times) if self.times else None

    @property
    def tiny_median(self) -> float | None:
        return statistics.median(self.tiny_times) if self.tiny_times else None

    @property
    def compile_median(self) -> float | None:
        return statistics.median(self.compile_times) if self.compile_times else None


# --- measurement ------------------------------------------------------------------------


def _max_rel_err(out, ref) -> float:
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        return math.inf
    both_nan = np.isnan(out) & np.isnan(ref)
    diff = np.where(both_nan, 0.0, np.abs(out - ref))
    scale = np.maximum(np.abs(ref), np.finfo(np.float64).tiny)
    err = np.where(both_nan, 0.0, diff / scale)
    return float(np.nanmax(err, initial=0.0)) if err.size else 0.0


def _compile_all(workload, backends, cells, copies=1, cache=False) -> dict:
    """``{backend: [callable, ...]}``: ``copies`` separately compiled functions per backend.

    ``cache=False`` (the default) compiles every kernel from scratch, so the timings are
    always of the code in the tree, whatever the disk cache holds (a generator change
    that did not change the cache key once had stale kernels timed).

    Every copy is a fresh graph and a fresh ``pytensor.function``, so its machine code lands at a new address; timing the copies in turn keeps one
    compiled instance (its code placement, or a phase lock between its slot in the
    rotation and a periodic background job) from being read as a backend difference.
    The JSON keeps each copy's median."""
    fns = {}
    for b in backends:
        try:
            fns[b] = [
                wl.caller(wl.compile_workload(workload, b, cache=cache), b)
                for _ in range(max(1, copies))
            ]
        except Exception:
            cells[b].error = traceback.format_exc()
            log.error("%s / %s: compilation failed:\n%s", workload.key, b, cells[b].error)
    return fns


def _run_once(workload, fns, vals, cells, tag) -> dict:
    outs = {}
    for b, copies in list(fns.items()):
        try:
            outs[b] = np.asarray(copies[0](*vals))
            for fn in copies[1:]:
                fn(*vals)
        except Exception:
            cells[b].error = traceback.format_exc()
            log.error("%s / %s: call failed (%s):\n%s", workload.key, b, tag, cells[b].error)
            del fns[b]
    return outs


def _check(workload, outs, cells, rtol, atol):
    ref_name = REFERENCE if REFERENCE in outs else next(iter(outs), None)
    if ref_name is None:
        return
    ref = outs[ref_name]
    for b, out in outs.items():
        cell = cells[b]
        cell.max_rel_err = _max_rel_err(out, ref)
        ok = out.shape == ref.shape and np.allclose(out, ref, rtol=rtol, atol=atol, equal_nan=True)
        cell.mismatch = not ok
        if not ok:
            log.warning(
                "%s / %s disagrees with %s: max rel err %.3g", workload.key, b, ref_name, cell.max_rel_err
            )


def _calls_per_sample(fns, vals, target: float) -> int:
    """Calls per timing sample so the fastest backend's sample lasts about ``target`` s."""
    fastest = math.inf
    for copies in fns.values():
        fn = copies[0]
        t0 = time.perf_counter()
        fn(*vals)
        fastest = min(fastest, time.perf_counter() - t0)
    if fastest >= target:
        return 1
    return max(1, min(100_000, math.ceil(target / max(fastest, 1e-7))))


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def _interleaved(fns, vals, repeat, target, clock=time.perf_counter) -> dict[str, list[float]]:
    """Per-call seconds: ``repeat`` samples per backend, backends interleaved and rotated;
    rep ``r`` of a backend runs its copy ``r % len(copies)``."""
    number = _calls_per_sample(fns, vals, target)
    names = list(fns)
    samples = {b: [] for b in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for rep in range(repeat):
            k = rep % len(names)
            for b in names[k:] + names[:k]:
                copies = fns[b]
                fn = copies[rep % len(copies)]
                t0 = clock()
                for _ in range(number):
                    fn(*vals)
                samples[b].append((clock() - t0) / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples


def _compile_times(workload, backends, cells, repeat):
    """Uncached compile times. Round 0 is an untimed warm-up: it compiles, once per
    process, the shared numba helpers this workload needs (they are memoized in memory
    even with the disk cache off), so that one-time cost is not charged to whichever
    backend happens to go first. Rounds 1..repeat are timed, order rotated each round."""
    good = [b for b in backends if cells[b].error is None]
    for rep in range(repeat + 1):
        k = rep % len(good) if good else 0
        for b in good[k:] + good[:k]:
            if cells[b].error is not None:
                continue
            try:
                seconds, _ = wl.first_compile(workload, b)
            except Exception:
                cells[b].error = traceback.format_exc()
                log.error("%s / %s: uncached compile failed:\n%s", workload.key, b, cells[b].error)
                continue
            if rep:
                cells[b].compile_times.append(seconds)


def warm_up_compilers(backends):
    """One uncached compile per backend before anything is timed (numba start-up)."""
    warm = wl.Workload("warmup", "warmup", "core", wl.WORKLOADS["exp_fma"].build, 3)
    for b in backends:
        try:
            wl.first_compile(warm, b)
        except Exception:
            log.warning("warm-up compile failed for %s", b, exc_info=True)


def run(
    workloads,
    backends,
    *,
    n: int,
    repeat: int,
    per_call_n: int,
    compile_time: bool,
    compile_repeat: int,
    rtol: float,
    atol: float,
    target: float = 0.002,
    clock: str = "wall",
    copies: int = 2,
    use_cache: bool = False,
) -> dict[str, dict[str, Cell]]:
    timer = CLOCKS[clock]
    results: dict[str, dict[str, Cell]] = {}
    if compile_time:
        log.info("warming up the compilers")
        warm_up_compilers(backends)
    for w in workloads:
        cells = {b: Cell() for b in backends}
        results[w.key] = cells
        log.info("%s (%s): compiling under %s", w.key, w.label, ", ".join(backends))
        fns = _compile_all(w, backends, cells, copies, cache=use_cache)
        vals = w.make_inputs(n)
        outs = _run_once(w, fns, vals, cells, f"n={n}")
        _check(w, outs, cells, rtol, atol)
        del outs
        if fns:
            log.info("%s: timing n=%d, %d interleaved reps over %d copies", w.key, n, repeat, copies)
            for b, s in _interleaved(fns, vals, repeat, target, timer).items():
                cells[b].times = s
        if per_call_n and fns:
            tiny = w.make_inputs(per_call_n)
            _run_once(w, fns, tiny, cells, f"n={per_call_n}")
            if fns:
                log.info("%s: timing n=%d", w.key, per_call_n)
                # Tiny calls are cheap: more, shorter samples sample the noise more finely.
                for b, s in _interleaved(fns, tiny, 4 * repeat, target / 4, timer).items():
                    cells[b].tiny_times = s
        del vals, fns
        if compile_time:
            log.info("%s: first-compile time (cache off), %d reps", w.key, compile_repeat)
            _compile_times(w, backends, cells, compile_repeat)
    return results


# --- reporting --------------------------------------------------------------------------


def _ratio(cells, num, den, attr="median") -> float | None:
    if num not in cells or den not in cells:
        return None
    a, b = getattr(cells[num], attr), getattr(cells[den], attr)
    if a is None or b is None or b == 0:
        return None
    return a / b


def _fmt(x, spec) -> str:
    return "-" if x is None else format(x, spec)


def table(results, workloads, backends, *, n, per_call_n, compile_time, clock="wall") -> str:
    """The side-by-side table: one row per workload."""
    cols = [("workload", "<")]
    cols += [(f"{b} ms", ">") for b in backends]
    ratio_pairs = [("policy_default", BASELINE), ("stock_strict", BASELINE), ("policy_default", "policy_rewritten"), ("policy_as_written", "policy_default")]
    if "policy_fast" in backends:
        ratio_pairs.append(("policy_fast", BASELINE))
    if "jax" in backends:
        ratio_pairs.append(("jax", BASELINE))
    ratio_pairs = [(a, b) for a, b in ratio_pairs if a in backends and b in backends]
    cols += [(f"{SHORT[a]}/{SHORT[b]}", ">") for a, b in ratio_pairs]
    cols += [("pd/sf min", ">")]
    if per_call_n:
        cols += [(f"sf us@{per_call_n}", ">"), (f"pd/sf@{per_call_n}", ">")]
    if compile_time:
        cols += [("compile sf s", ">"), ("compile pd/sf", ">")]
    cols += [("check", "<")]

    rows = []
    notes = []
    for w in workloads:
        cells = results[w.key]
        row = [f"{w.label}"]
        for b in backends:
            c = cells[b]
            if c.error is not None:
                row.append("ERROR")
            else:
                row.append(_fmt(c.median and c.median * 1e3, ".3f") + ("!" if c.mismatch else ""))
        for a, b in ratio_pairs:
            row.append(_fmt(_ratio(cells, a, b), ".2f"))
        row.append(_fmt(_ratio(cells, "policy_default", BASELINE, "fastest"), ".2f"))
        if per_call_n:
            sf = cells.get(BASELINE)
            row.append(_fmt(sf and sf.tiny_median and sf.tiny_median * 1e6, ".1f"))
            row.append(_fmt(_ratio(cells, "policy_default", BASELINE, "tiny_median"), ".2f"))
        if compile_time:
            sf = cells.get(BASELINE)
            row.append(_fmt(sf and sf.compile_median, ".2f"))
            row.append(_fmt(_ratio(cells, "policy_default", BASELINE, "compile_median"), ".2f"))
        bad = [b for b in backends if cells[b].mismatch]
        err = [b for b in backends if cells[b].error is not None]
        status = []
        if bad:
            status.append("MISMATCH " + ",".join(SHORT[b] for b in bad))
            for b in bad:
                notes.append(
                    f"{w.key}: {b} vs {REFERENCE}: max rel err {cells[b].max_rel_err:.3g}"
                )
        if err:
            status.append("ERROR " + ",".join(SHORT[b] for b in err))
            for b in err:
                last = cells[b].error.strip().splitlines()[-1]
                notes.append(f"{w.key}: {b} failed: {last}")
        row.append("; ".join(status) or "ok")
        rows.append(row)

    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, (h, _) in enumerate(cols)]
    lines = []
    shape_note = f"n={n:g} (matrix workloads: {wl.WORKLOADS['softmax'].shape(n)[0]}x{wl.WORKLOADS['softmax'].shape(n)[1]})"
    lines.append(
        f"# median ms per call ({clock} clock), {shape_note}; ratios < 1 mean faster than "
        f"stock_fast; generator {GENERATOR_VERSION}"
    )
    lines.append("  ".join(f"{h:{a}{wd}}" for (h, a), wd in zip(cols, widths)))
    lines.append("  ".join("-" * wd for wd in widths))
    for r in rows:
        lines.append("  ".join(f"{v:{a}{wd}}" for v, (_, a), wd in zip(r, cols, widths)))
    legend = ", ".join(f"{v}={k}" for k, v in SHORT.items() if k in backends)
    lines.append(f"# {legend}; '!' = output disagrees with {REFERENCE} (rtol check)")
    lines.append(
        "# pd/sf min: same ratio from each backend's fastest sample (steadier when other "
        "jobs share the cores: their interference only ever slows a sample down)"
    )
    if per_call_n:
        lines.append(f"# sf us@{per_call_n}: stock_fast per-call time at n={per_call_n} (call overhead)")
    if compile_time:
        lines.append("# compile: pytensor.function + first call, numba cache off, fresh graph, after a warm-up round; median")
    lines.extend(f"# {note}" for note in notes)
    return "\n".join(lines)


def slower_than_baseline(results, threshold=0.10) -> list[tuple[str, float, float | None]]:
    """``(workload, median ratio, fastest-sample ratio)`` where policy_default's median is more
    than ``threshold`` above stock_fast's."""
    out = []
    for key, cells in results.items():
        r = _ratio(cells, "policy_default", BASELINE)
        if r is not None and r > 1 + threshold:
            out.append((key, r, _ratio(cells, "policy_default", BASELINE, "fastest")))
    return out


def to_json(results, args, backends) -> dict:
    import numba
    import pytensor

    return {
        "meta": {
            "n": args.n,
            "repeat": args.repeat,
            "per_call_n": args.per_call_n,
            "clock": args.clock,
            "copies": args.copies,
            "use_cache": args.use_cache,
            "compile_repeat": args.compile_repeat if not args.no_compile_time else 0,
            "backends": list(backends),
            "python": sys.version,
            "platform": platform.platform(),
            "pytensor": pytensor.__version__,
            "numba": numba.__version__,
            "ptnumba_codegen": ptnumba_codegen.__version__,
            "generator": ptnumba_codegen.GENERATOR_VERSION,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "results": {
            key: {
                "label": wl.WORKLOADS[key].label,
                "group": wl.WORKLOADS[key].group,
                "backends": {
                    b: {
                        "median_s": c.median,
                        "times_s": c.times,
                        # sample r ran copy r % copies
                        "min_s": c.fastest,
                        "copy_medians_s": [
                            statistics.median(c.times[i :: args.copies])
                            for i in range(min(args.copies, len(c.times)))
                        ],
                        "tiny_median_s": c.tiny_median,
                        "tiny_times_s": c.tiny_times,
                        "compile_median_s": c.compile_median,
                        "compile_times_s": c.compile_times,
                        "max_rel_err": c.max_rel_err,
                        "mismatch": c.mismatch,
                        "error": c.error,
                    }
                    for b, c in cells.items()
                },
            }
            for key, cells in results.items()
        },
    }


def plot(results, workloads, backends, path, n=None):
    """Bar chart of speedup vs stock_fast (stock_fast time / backend time) per workload."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise SystemExit(
            f"--plot needs matplotlib ({err}); install it with `pip install matplotlib` "
            "or `pip install -e .[plot]`"
        ) from None
    others = [b for b in backends if b != BASELINE]
    keys = [w.key for w in workloads]
    width = 0.8 / max(1, len(others))
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(keys) + 2), 4.5))
    xs = np.arange(len(keys))
    for i, b in enumerate(others):
        speed = []
        for k in keys:
            r = _ratio(results[k], b, BASELINE)
            speed.append(1 / r if r else np.nan)
        ax.bar(xs + (i - (len(others) - 1) / 2) * width, speed, width, label=b)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(xs, [w.label for w in workloads], rotation=35, ha="right", fontsize=8)
    ax.set_ylabel("speedup vs stock_fast (>1 = faster)")
    size = f", n={n:g}" if n else ""
    ax.set_title(f"ptnumba_codegen: median call time vs stock_fast{size} (higher = faster)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    log.info("wrote %s", path)


# --- CLI --------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m ptnumba_codegen.tools.bench",
        description="Time PyTensor elemwise workloads under stock numba (fast/strict), "
        "ptnumba_codegen policies and JAX (if installed), side by side in one process.",
    )
    p.add_argument("--n", type=float, default=1_000_000, help="elements per input (matrix workloads: n/1000 rows x 1000); default 1e6")
    p.add_argument("--group", default="all", choices=[*wl.GROUPS, "all", "pymc", "catalogue", "generated"], help="workload group (default all); pymc: the PyMC model benchmark, one process per backend, with its own options (see `bench --group pymc --help`); catalogue: PyMC's model catalogue (`bench --group catalogue --catalogue PATH --help`); generated: seeded random PyMC models (`bench --group generated --help`)")
    p.add_argument("--workloads", default=None, help="comma-separated workload keys or labels: " + ",".join(wl.WORKLOADS))
    p.add_argument("--backends", default=None, help="comma-separated backends (default: " + ",".join(wl.BACKENDS) + " + jax if importable); also: " + ",".join(b for b in wl.EXTRA_BACKENDS if b != "jax") + ", policy_FILE.toml (a policy file)")
    p.add_argument("--no-jax", action="store_true", help="leave jax out even if importable")
    p.add_argument("--repeat", type=int, default=48, help="interleaved timing samples per backend, spread over the copies (default 48; 4x that at --per-call-n)")
    p.add_argument("--copies", type=int, default=2, help="separately compiled copies per backend, timed in turn (default 2)")
    p.add_argument("--use-cache", action="store_true", help="let the timed functions load kernels from the numba disk cache (faster start; trusts the cache keys); default: compile everything fresh")
    p.add_argument("--per-call-n", type=int, default=100, help="also time calls at this tiny n to show call overhead; 0 disables (default 100)")
    p.add_argument("--no-compile-time", action="store_true", help="skip first-compile measurements")
    p.add_argument("--compile-repeat", type=int, default=3, help="uncached compiles per backend per workload (default 3)")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall", help="wall: perf_counter (default); cpu: process_time, steadier when other jobs share the cores (JAX's worker threads count too)")
    p.add_argument("--rtol", type=float, default=1e-6, help="relative tolerance of the agreement check (default 1e-6)")
    p.add_argument("--atol", type=float, default=1e-12, help="absolute tolerance of the agreement check (default 1e-12)")
    p.add_argument("--plot", metavar="FILE.png", default=None, help="bar chart of speedups vs stock_fast (needs matplotlib)")
    p.add_argument("--json", metavar="FILE", default=None, help="write the raw numbers as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="only warnings on stderr")
    args = p.parse_args(argv)
    args.n = int(args.n)
    if args.n < 1:
        p.error("--n must be >= 1")
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    if args.copies < 1:
        p.error("--copies must be >= 1")
    return args


def _group_of(argv) -> str | None:
    for i, arg in enumerate(argv):
        if arg == "--group" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--group="):
            return arg.partition("=")[2]
    return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if _group_of(argv) == "pymc":  # the PyMC model benchmark has its own runner and options
        return modelbench.main(argv)
    if _group_of(argv) == "catalogue":  # PyMC's model catalogue, also its own runner
        return catalogue_bench.main(argv)
    if _group_of(argv) == "generated":  # seeded random PyMC models, on the catalogue's runner
        return generated_bench.main(argv)
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    if args.plot:  # fail before the long run, not after it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "error: --plot needs matplotlib; install it with `pip install matplotlib` "
                "or `pip install -e .[plot]`",
                file=sys.stderr,
            )
            return 2
    try:
        workloads = wl.select(args.group, args.workloads)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.backends:
        backends = tuple(s.strip() for s in args.backends.split(",") if s.strip())
        unknown = [b for b in backends if not wl.known_backend(b)]
        if unknown:
            print(f"error: unknown backend(s) {unknown}; known: {wl.ALL_BACKENDS} or policy_FILE.toml", file=sys.stderr)
            return 2
        if "jax" in backends and not wl.jax_available():
            log.warning("jax is not importable: leaving the jax backend out")
            backends = tuple(b for b in backends if b != "jax")
    else:
        backends = wl.available_backends(include_jax=not args.no_jax)
        if not args.no_jax and "jax" not in backends:
            log.info("jax not importable: no jax column")
    if not workloads:
        print("error: no workload selected", file=sys.stderr)
        return 2

    results = run(
        workloads,
        backends,
        n=args.n,
        repeat=args.repeat,
        per_call_n=args.per_call_n,
        compile_time=not args.no_compile_time,
        compile_repeat=args.compile_repeat,
        rtol=args.rtol,
        atol=args.atol,
        clock=args.clock,
        copies=args.copies,
        use_cache=args.use_cache,
    )
    print(
        table(
            results,
            workloads,
            backends,
            n=args.n,
            per_call_n=args.per_call_n,
            compile_time=not args.no_compile_time,
            clock=args.clock,
        ),
        flush=True,
    )
    for key, r, best in slower_than_baseline(results):
        log.warning(
            "policy_default is %.0f%% slower than stock_fast on %s (fastest samples: %s)",
            (r - 1) * 100,
            key,
            "n/a" if best is None else f"{(best - 1) * 100:+.0f}%",
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(to_json(results, args, backends), fh, indent=1)
        log.info("wrote %s", args.json)
    if args.plot:
        plot(results, workloads, backends, args.plot, n=args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
