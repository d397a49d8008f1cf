"""Exact lanes on and off, one kernel at a time, in one process.

    python -m ptnumba_codegen.tools.exact_lanes_bench --n 1000 100000 --symbols log

For each case (a strict transcendental in a comparison cone) and size: compile the graph
under policy default twice, with the named exact-lane entries off ("before": their lane
calls run libm lane by lane, as with PTNUMBA_CODEGEN_EXACT_LANES=off) and as this process
decided them ("after"), numba's disk cache off; check that both give the same bits; then
time them interleaved (before, after, before, ...; each sample a batch of calls) and print
the median and the fastest sample per call. Only the ratios mean anything on a shared
machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import numpy as np
import pytensor
import pytensor.tensor as pt

import ptnumba_codegen
from ptnumba_codegen.lowering.vecmath import exact_lanes
from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa
from ptnumba_codegen.policy import Parallel


def _cases(rng, n):
    x, y = pt.vectors("x", "y")
    b = pt.dscalar("b")
    xv = rng.gamma(2.0, 1.0, n)
    yv = rng.standard_normal(n)
    cost = pt.minimum(pt.log(x) * y, b).sum()
    bv = float(np.median(np.log(xv) * yv))
    yield "grad(minimum(log(x)*y, b).sum(), x)", [x, y, b], [cost, pytensor.grad(cost, x)], (xv, yv, bv), ("log",)
    yield "switch(log(x) > b, x*y, -y)", [x, y, b], [pt.switch(pt.gt(pt.log(x), b), x * y, -y)], (xv, yv, 0.7), ("log",)
    yield "switch(x**-1.0 > b, x*y, -y)", [x, y, b], [pt.switch(pt.gt(x**-1.0, b), x * y, -y)], (xv, yv, 0.7), ("log",)
    z = pt.vector("z")
    zv = rng.uniform(0.5, 2.5, n)
    yield "switch(x**z > b, x*y, -y)", [x, y, z, b], [pt.switch(pt.gt(x**z, b), x * y, -y)], (xv, yv, zv, 1.5), ("pow",)


def _policy(threads: int | None):
    policy = ptnumba_codegen.load_policy("default")
    return policy if threads is None else dataclasses.replace(policy, parallel=Parallel(threads=threads))


def _compile(inputs, outputs, off: tuple[str, ...], threads: int | None = None):
    """The graph under policy default (``threads``: its [parallel] threads) with the
    exact-lane entries ``off`` turned off."""
    lanes = lane_count(target_isa(), "float64")
    with exact_lanes.turned_off(off, lanes, "exact_lanes_bench: before"), pytensor.config.change_flags(numba__cache=False):
        return pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode(_policy(threads)))


def _same(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return bool(np.all((a.view(np.uint64) == b.view(np.uint64)) | (np.isnan(a) & np.isnan(b))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 100_000])
    ap.add_argument("--symbols", nargs="+", default=["log", "pow"], help="run the cases of these entries")
    ap.add_argument("--samples", type=int, default=41)
    ap.add_argument("--budget", type=float, default=0.02, help="seconds per sample (sets the batch)")
    ap.add_argument("--threads", type=int, default=None, help="the policy's [parallel] threads (default: the policy's)")
    ap.add_argument("--direct", action="store_true", help="time the numba function (fn.vm.jit_fn), not the PyTensor call")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    lanes = lane_count(target_isa(), "float64")
    for s in args.symbols:
        print(f"# {s}: {exact_lanes.status(s, lanes)}" if s in exact_lanes.EXACT_LANES else f"# {s}: no entry")
    print(f"# threads: {args.threads or 'policy'}, timing {'fn.vm.jit_fn' if args.direct else 'the PyTensor function'}")
    print(f"# {'case':<40} {'n':>7}  {'before med/min us':>18}  {'after med/min us':>17}  {'speedup med/min':>15}")
    for n in args.n:
        for name, inputs, outputs, vals, syms in _cases(rng, n):
            if not set(syms) & set(args.symbols):
                continue
            before, after = _compile(inputs, outputs, syms, args.threads), _compile(inputs, outputs, (), args.threads)
            assert all(_same(g, w) for g, w in zip(after(*vals), before(*vals), strict=True)), name
            if args.direct:
                vals = tuple(np.asarray(v) for v in vals)
                before, after = before.vm.jit_fn, after.vm.jit_fn
            t0 = time.perf_counter()
            before(*vals)
            reps = max(1, int(args.budget / max(time.perf_counter() - t0, 1e-7)))
            times = {"before": [], "after": []}
            for _ in range(args.samples):
                for key, fn in (("before", before), ("after", after)):
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        fn(*vals)
                    times[key].append((time.perf_counter() - t0) / reps * 1e6)
            (bm, bf), (am, af) = ((statistics.median(t), min(t)) for t in (times["before"], times["after"]))
            print(f"  {name:<40} {n:>7}  {bm:>9.2f} {bf:>8.2f}  {am:>8.2f} {af:>8.2f}  {bm / am:>7.2f} {bf / af:>7.2f}")


if __name__ == "__main__":
    main()
