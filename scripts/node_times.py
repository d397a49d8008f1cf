"""Where one call of a compiled model goes: every node of its final graph timed alone.

    PYTHONPATH=. .venv/bin/python scripts/node_times.py generated:SEED gNN BACKEND [--top N] [--json FILE]
    PYTHONPATH=. .venv/bin/python scripts/node_times.py CATALOGUE MODEL BACKEND [--top N]

Builds the model (a generated model of a seed, or a model of a catalogue checkout) and
compiles its logp+dlogp under BACKEND (`stock_fast`, `policy_default`, ...) as the benches
do, then takes the function's final graph and compiles each node's numba function as the
linker does (`numba_funcify_and_cache_key` on the node: under a policy, the policy's
kernel). It runs the nodes in topological order from the function's own inputs and times
each alone on the values the graph gives it: thread time per call, best of --rounds,
minus the time of a numba function that takes the same arguments and does nothing (the
dispatcher's unboxing); the boxing of outputs stays in. A node that destroys an input gets
a fresh copy for every call, and the copies alone are timed and taken off. The whole
function is timed the same way; what it costs beyond the nodes' sum is the graph
function's own work (calls, allocations the nodes do not make, glue).

Measurement only: it compiles the nodes again in this process (nothing is cached) and
says nothing about the values (the benches and the tests compare those).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import numpy as np


def _best_per_call(call, n: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.thread_time()
        for _ in range(n):
            call()
        best = min(best, (time.thread_time() - t) / n)
    return best


def _calls_for(call, budget: float) -> int:
    t = time.thread_time()
    call()
    one = max(time.thread_time() - t, 1e-7)
    return int(min(max(budget / one, 20), 200_000))


def _node_function(node):
    """The node's numba function as the linker compiles it, wrapped so Python can call it."""
    import numba
    from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key

    fn, _key = numba_funcify_and_cache_key(node.op, node=node)

    @numba.njit(cache=False)
    def call(*args):
        return fn(*args)

    return call


@functools.cache
def _noop():
    import numba

    @numba.njit(cache=False)
    def noop(*args):
        return 0

    return noop


def node_times(fn, inputs: list, rounds: int, budget: float) -> tuple[list[dict], float, list]:
    """``([{node, op, seconds}, ...] in topological order, seconds of the graph's function,
    the graph's outputs as the nodes computed them one by one)`` of the PyTensor function
    ``fn`` called on ``inputs`` (its explicit inputs; its shared variables' values are read
    from its storage)."""
    from pytensor.graph.basic import Constant

    fgraph = fn.maker.fgraph
    for i, value in enumerate(inputs):  # a call leaves the explicit inputs' storage empty
        fn.input_storage[i].storage[0] = value
    values = {v: s.storage[0] for v, s in zip(fgraph.inputs, fn.input_storage, strict=True)}
    rows = []
    for i, node in enumerate(fgraph.toposort()):
        args = [inp.data if isinstance(inp, Constant) else values[inp] for inp in node.inputs]
        destroyed = sorted({j for js in getattr(node.op, "destroy_map", {}).values() for j in js})
        f = _node_function(node)

        def fresh(args=args, destroyed=destroyed):
            return [np.copy(a) if j in destroyed else a for j, a in enumerate(args)]

        out = f(*fresh())
        outs = out if len(node.outputs) > 1 else (out,)
        for var, val in zip(node.outputs, outs, strict=True):
            values[var] = val
        noop = _noop()
        noop(*args)

        def run(f=f):
            f(*fresh())

        def base(noop=noop):
            noop(*fresh())

        n = _calls_for(run, budget)
        seconds = _best_per_call(run, n, rounds) - _best_per_call(base, n, rounds)
        rows.append({"index": i, "node": str(node.op)[:120], "op": type(node.op).__name__,
                     "seconds": max(seconds, 0.0)})
    replayed = [o.data if isinstance(o, Constant) else values[o] for o in fgraph.outputs]
    for i, value in enumerate(inputs):
        fn.input_storage[i].storage[0] = value
    whole = _best_per_call(fn.vm, _calls_for(fn.vm, budget), rounds)  # the graph's function on its inputs
    return rows, whole, replayed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("where", help="a catalogue checkout, or generated:SEED")
    ap.add_argument("model")
    ap.add_argument("backend")
    ap.add_argument("--top", type=int, default=15, help="how many nodes to list, dearest first (default 15)")
    ap.add_argument("--rounds", type=int, default=5, help="timing rounds per node, best kept (default 5)")
    ap.add_argument("--budget", type=float, default=0.05, help="seconds of calls per round (default 0.05)")
    ap.add_argument("--json", help="write every node's row here")
    args = ap.parse_args(argv)

    from ptnumba_codegen.tools import catalogue_bench as cb
    from ptnumba_codegen.tools.generated_bench import named_source

    c = cb.compile_source_model(named_source(args.where, args.model), "original", args.backend)
    expected = [np.asarray(v) for v in c.fn(c.x)]
    rows, whole, replayed = node_times(c.fn, [c.x], args.rounds, args.budget)
    if not all(np.array_equal(a, np.asarray(b), equal_nan=True) for a, b in zip(expected, replayed, strict=True)):
        print("warning: the nodes run one by one do not give the function's outputs bit for bit", file=sys.stderr)
    total = sum(r["seconds"] for r in rows)
    print(f"{args.model} / {args.backend}: {len(rows)} nodes, their sum {total * 1e6:.2f} us"
          + f", the graph's function alone {whole * 1e6:.2f} us")
    by_op: dict[str, float] = {}
    for r in rows:
        by_op[r["op"]] = by_op.get(r["op"], 0.0) + r["seconds"]
    print("  by op type: " + ", ".join(f"{k} {v * 1e6:.2f}" for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])))
    for r in sorted(rows, key=lambda r: -r["seconds"])[: args.top]:
        print(f"  {r['seconds'] * 1e6:8.2f} us  #{r['index']:<4d} {r['node']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"model": args.model, "backend": args.backend, "whole_s": whole, "nodes": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
