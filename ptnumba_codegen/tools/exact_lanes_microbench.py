"""Exact lanes, old against new: the vector code of `exact_lanes` at a git revision (default
HEAD) and in this tree, each compiled (O3, host CPU) into a loop over arrays, timed in
interleaved rounds in one process; and their bits compared with each other and with libm.

    python -m ptnumba_codegen.tools.exact_lanes_microbench [--rev HEAD] [--rounds 9] [--n 4096] [--reps 200]

Prints ns per element (median and fastest round) per workload and the ratio old/new.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import subprocess
import sys
import time
import types
from pathlib import Path

import llvmlite.binding as llb
import numpy as np
from llvmlite import ir

from ptnumba_codegen.lowering.vecmath import exact_lanes as new_el
from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_features, target_isa

ROOT = Path(__file__).resolve().parents[2]
REL = "ptnumba_codegen/lowering/vecmath/exact_lanes.py"


def load_rev(rev: str) -> types.ModuleType:
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{REL}"], check=True, capture_output=True, text=True).stdout
    mod = types.ModuleType("exact_lanes_at_" + rev.replace("/", "_"))
    mod.__file__ = f"<{rev}:{REL}>"
    sys.modules[mod.__name__] = mod
    exec(compile(src, mod.__file__, "exec"), mod.__dict__)
    return mod


class Kernel:
    """``drive(x0, [x1,] y, nvec, reps)``: the variant on every vector, ``reps`` times."""

    def __init__(self, el, symbol: str, lanes: int, inline: bool = False):
        f64 = ir.DoubleType()
        i64 = ir.IntType(64)
        arity = el.EXACT_LANES[symbol].arity
        module = ir.Module(name=f"bench_{symbol}")
        variant, _ = el.define_variant(module, symbol, lanes, el.EXACT_LANES[symbol].data())
        if not inline:  # as in a kernel: the vectorizer's call comes after inlining
            variant.attributes.add("noinline")
        vty = variant.function_type.return_type
        ptr = ir.PointerType(f64)
        drive = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * (arity + 1) + [i64, i64]), "drive")
        entry, outer, loop, latch, done = (drive.append_basic_block(n) for n in ("entry", "outer", "loop", "latch", "done"))
        b = ir.IRBuilder(entry)
        b.branch(outer)
        b.position_at_end(outer)
        r = b.phi(i64)
        r.add_incoming(i64(0), entry)
        b.branch(loop)
        b.position_at_end(loop)
        i = b.phi(i64)
        i.add_incoming(i64(0), outer)

        def at(p):
            return b.bitcast(b.gep(p, [b.mul(i, i64(lanes))]), ir.PointerType(vty))

        args = [b.load(at(drive.args[k]), align=8) for k in range(arity)]
        b.store(b.call(variant, args), at(drive.args[arity]), align=8)
        nxt = b.add(i, i64(1))
        i.add_incoming(nxt, loop)
        b.cbranch(b.icmp_unsigned("<", nxt, drive.args[arity + 1]), loop, latch)
        b.position_at_end(latch)
        rn = b.add(r, i64(1))
        r.add_incoming(rn, latch)
        b.cbranch(b.icmp_unsigned("<", rn, drive.args[arity + 2]), outer, done)
        b.position_at_end(done)
        b.ret_void()
        llb.initialize_native_target()
        llb.initialize_native_asmprinter()
        mod = llb.parse_assembly(str(module))
        mod.verify()
        features = ",".join(sorted(target_features()))
        tm = llb.Target.from_default_triple().create_target_machine(cpu=llb.get_host_cpu_name(), features=features, opt=3)
        pb = llb.create_pass_builder(tm, llb.create_pipeline_tuning_options(speed_level=3))
        pb.getModulePassManager().run(mod, pb)
        self.asm = tm.emit_assembly(mod)
        self.engine = llb.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        self.arity, self.lanes = arity, lanes
        proto = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (arity + 1), ctypes.c_int64, ctypes.c_int64)
        self.fn = proto(self.engine.get_function_address("drive"))

    def __call__(self, cols: np.ndarray, reps: int = 1) -> np.ndarray:
        n = cols.shape[1] // self.lanes * self.lanes
        cols = np.ascontiguousarray(cols[:, :n])
        out = np.empty(n)
        self.fn(*[cols[k].ctypes.data for k in range(self.arity)], out.ctypes.data, n // self.lanes, reps)
        return out


def workloads(n: int, rng) -> dict[str, tuple[str, np.ndarray]]:
    x = rng.uniform(0.0, 10.0, n)
    near1 = 1.0 + rng.uniform(-1e-3, 1e-3, n)
    w = {}
    for yv in (-1.0, -0.5, 2.0, 2.5):
        w[f"pow x~U(0,10) y={yv}"] = ("pow", np.stack([x, np.full(n, yv)]))
    w["pow x~U(0,10) y~U(-4,4)"] = ("pow", np.stack([x, rng.uniform(-4, 4, n)]))
    w["pow x~1+-1e-3 y~U(-4,4)"] = ("pow", np.stack([near1, rng.uniform(-4, 4, n)]))
    w["exp x~U(-10,10)"] = ("exp", rng.uniform(-10, 10, n)[None])
    w["log x~U(0,10)"] = ("log", x[None])
    w["log x~1+-1e-3"] = ("log", near1[None])
    return w


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--only", default="")
    ap.add_argument("--inline", action="store_true", help="inline the vector function into the loop (kernels call it)")
    a = ap.parse_args(argv)
    lanes = lane_count(target_isa(), "float64")
    old_el = load_rev(a.rev)
    rng = np.random.default_rng(7)
    print(f"cpu {llb.get_host_cpu_name()}, {lanes} lanes, old = {a.rev}, new = working tree; "
          f"n={a.n} x {a.reps} reps per round, {a.rounds} rounds interleaved; "
          f"vector function {'inlined' if a.inline else 'called'}; ns/element")
    kernels = {}
    for name, (sym, cols) in workloads(a.n, rng).items():
        if a.only and a.only not in name:
            continue
        if sym not in kernels:
            kernels[sym] = (Kernel(old_el, sym, lanes, a.inline), Kernel(new_el, sym, lanes, a.inline))
        old, new = kernels[sym]
        want = new_el.libm_reference(sym, cols)
        for k, tag in ((old, "old"), (new, "new")):
            got = k(cols)
            same = (got.view(np.uint64) == want.view(np.uint64)) | (np.isnan(got) & np.isnan(want))
            assert same.all(), f"{tag} {name}: {(~same).sum()} differ from libm"
        t = {"old": [], "new": []}
        for _ in range(a.rounds):
            for k, tag in ((old, "old"), (new, "new")):
                t0 = time.perf_counter_ns()
                k(cols, a.reps)
                t[tag].append((time.perf_counter_ns() - t0) / (a.n * a.reps))
        mo, mn = np.median(t["old"]), np.median(t["new"])
        print(f"{name:28s} old {mo:6.3f} (min {min(t['old']):6.3f})  new {mn:6.3f} (min {min(t['new']):6.3f})  "
              f"old/new {mo / mn:5.2f}x (min {min(t['old']) / min(t['new']):5.2f}x)")


if __name__ == "__main__":
    main()
