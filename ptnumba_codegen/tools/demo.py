"""The README demo: the seed example under stock numba and under each policy, then a
short side-by-side speed table."""

from __future__ import annotations

import sys
import warnings

import numpy as np

import ptnumba_codegen
from ptnumba_codegen.tools import bench


def seed_graph():
    """``([x, y, z, w, b], grad(minimum(x*y*z*w, b).sum(), x))`` (../shared/seeds/000)."""
    import pytensor
    import pytensor.tensor as pt

    x, y, z, w, b = pt.vectors("x", "y", "z", "w", "b")
    return [x, y, z, w, b], pytensor.grad(pt.minimum(x * y * z * w, b).sum(), x)


def seed_values() -> list[np.ndarray]:
    """Inputs at an exact tie: b is the left-associated product x*y*z*w, to the bit."""
    xv = np.array([0.9887127230177662])
    yv = np.array([1.000617328480952])
    zv = np.array([0.9995082121912299])
    wv = np.array([404.146799095179])
    return [xv, yv, zv, wv, np.array([((xv[0] * yv[0]) * zv[0]) * wv[0]])]


def seed_example() -> list[tuple[str, float]]:
    """The seed example's value under stock numba, the C backend and each policy."""
    import pytensor
    from pytensor.compile.mode import Mode

    (x, y, z, w, b), gx = seed_graph()
    xv, yv, zv, wv, bv = seed_values()
    rows = []
    for label, fastmath in (("stock numba (numba__fastmath=True)", True), ("stock numba (numba__fastmath=False)", False)):
        with pytensor.config.change_flags(numba__fastmath=fastmath):
            fn = pytensor.function([x, y, z, w, b], gx, mode=Mode(linker="numba", optimizer="fast_run"))
        rows.append((label, float(fn(xv, yv, zv, wv, bv)[0])))
    fn = pytensor.function([x, y, z, w, b], gx, mode=Mode(linker="cvm", optimizer="fast_run"))
    rows.append(("C backend (cvm)", float(fn(xv, yv, zv, wv, bv)[0])))
    for policy in ("default", "rewritten", "strict", "fast"):
        fn = pytensor.function([x, y, z, w, b], gx, mode=ptnumba_codegen.policy_mode(policy))
        rows.append((f"ptnumba_codegen policy '{policy}'", float(fn(xv, yv, zv, wv, bv)[0])))
    return rows


def main(argv=None) -> int:
    warnings.filterwarnings("ignore")
    print("Seed example: grad(minimum(x*y*z*w, b).sum(), x) with b == x*y*z*w exactly")
    for label, value in seed_example():
        print(f"  {label:40s} {value!r}")
    print("\nSpeed, 1e6 float64 (median ms; ratios vs stock numba fastmath; one process):", flush=True)
    return bench.main(
        [
            "--workloads", "fma,exp_fma,normal_logp,grad_minimum,sum",
            "--backends", "stock_fast,stock_strict,policy_default,policy_strict",
            "--repeat", "15", "--per-call-n", "0", "--no-compile-time", "--quiet",
            *(argv or []),
        ]
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
