"""Side-by-side timing of the Scan workloads (`tools.scan_workloads`) under several backends.

    python -m ptnumba_codegen.tools.scan_bench                       # each backend in its own process
    python -m ptnumba_codegen.tools.scan_bench --interleaved          # all backends in one process
    python -m ptnumba_codegen.tools.scan_bench --rounds 5 --workloads garch,lv --backends stock_fast,jax

Separate processes (the default): every round starts one worker per backend, in an order
rotated from round to round; a worker compiles every workload (numba disk cache on: the
first round pays the cold compile), warms it up and takes ``--samples`` samples of
``--budget`` seconds each (µs per call = sample time / calls). Interleaved: one process
compiles every (workload, backend) pair and takes the samples round-robin, so a change in
the machine's load hits every backend alike. Reported per workload and backend: the median
of all samples, the fastest sample, and the ratios of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from ptnumba_codegen.tools.scan_workloads import WORKLOADS
from ptnumba_codegen.tools.workloads import caller, compile_graph

DEFAULT_BACKENDS = ("stock_fast", "policy_default", "jax")


def _compile(key: str, backend: str):
    w = WORKLOADS[key]
    inputs, outputs = w.build()
    t0 = time.perf_counter()
    fn = caller(compile_graph(inputs, outputs, backend), backend)
    values = w.make_inputs()
    fn(*values)
    return fn, values, time.perf_counter() - t0


def _sample(fn, values, budget: float) -> float:
    """µs per call over one sample of about ``budget`` seconds."""
    n, t0 = 0, time.perf_counter()
    while True:
        fn(*values)
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= budget:
            return elapsed / n * 1e6


def worker(backend: str, keys: list[str], samples: int, budget: float) -> dict:
    out = {}
    for key in keys:
        fn, values, compile_s = _compile(key, backend)
        for _ in range(3):
            fn(*values)
        out[key] = {"compile_s": compile_s, "us": [_sample(fn, values, budget) for _ in range(samples)]}
    return out


def interleaved(backends, keys, samples, budget) -> dict:
    fns = {(k, b): _compile(k, b) for k in keys for b in backends}
    res = {(k, b): [] for k in keys for b in backends}
    for _ in range(samples):
        for (k, b), (fn, values, _c) in fns.items():
            res[k, b].append(_sample(fn, values, budget))
    return {b: {k: {"compile_s": fns[k, b][2], "us": res[k, b]} for k in keys} for b in backends}


def separate(backends, keys, rounds, samples, budget, nice: int) -> dict:
    merged = {b: {k: {"compile_s": [], "us": [], "round_medians": []} for k in keys} for b in backends}
    for r in range(rounds):
        order = list(backends[r % len(backends):]) + list(backends[: r % len(backends)])
        for b in order:
            cmd = [sys.executable, "-m", "ptnumba_codegen.tools.scan_bench", "--worker", b,
                   "--workloads", ",".join(keys), "--samples", str(samples), "--budget", str(budget)]
            proc = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=(lambda: os.nice(nice)) if nice else None)
            if proc.returncode != 0:
                raise RuntimeError(f"worker {b} failed:\n{proc.stderr[-3000:]}")
            data = json.loads(proc.stdout.strip().splitlines()[-1])
            for k in keys:
                cell = merged[b][k]
                cell["compile_s"].append(data[k]["compile_s"])
                cell["us"].extend(data[k]["us"])
                cell["round_medians"].append(statistics.median(data[k]["us"]))
            print(f"round {r + 1}/{rounds} {b}: " + ", ".join(f"{k} {statistics.median(data[k]['us']):.1f} us" for k in keys), file=sys.stderr)
    return merged


def table(results: dict, backends, keys) -> str:
    base = backends[0]
    lines = [
        "| workload | " + " | ".join(f"{b} median / fastest (µs)" for b in backends) + " | "
        + " | ".join(f"{b} / {base}" for b in backends[1:]) + " |",
        "|---" * (1 + 2 * len(backends) - 1) + "|",
    ]
    for k in keys:
        med = {b: statistics.median(results[b][k]["us"]) for b in backends}
        fast = {b: min(results[b][k]["us"]) for b in backends}
        cells = [f"{med[b]:.1f} / {fast[b]:.1f}" for b in backends]
        ratios = [f"{med[b] / med[base]:.3f}" for b in backends[1:]]
        lines.append(f"| {k} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="hmm,garch,lv")
    p.add_argument("--backends", default=",".join(DEFAULT_BACKENDS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--budget", type=float, default=0.2, help="seconds per sample")
    p.add_argument("--interleaved", action="store_true")
    p.add_argument("--nice", type=int, default=0, help="workers' niceness increment")
    p.add_argument("--json", help="write the samples here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    keys = args.workloads.split(",")
    for k in keys:
        if k not in WORKLOADS:
            p.error(f"unknown workload {k!r}; known: {', '.join(WORKLOADS)}")
    if args.worker:
        print(json.dumps(worker(args.worker, keys, args.samples, args.budget)))
        return 0
    backends = args.backends.split(",")
    if args.interleaved:
        results = interleaved(backends, keys, args.samples * args.rounds, args.budget)
    else:
        results = separate(backends, keys, args.rounds, args.samples, args.budget, args.nice)
    print(table(results, backends, keys))
    for b in backends:
        for k in keys:
            c = results[b][k]["compile_s"]
            c = c if isinstance(c, list) else [c]
            print(f"# {k} / {b}: {len(results[b][k]['us'])} samples; compile s per process: {', '.join(f'{x:.1f}' for x in c)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
