"""nutpie on a PyMC logistic regression, stock numba vs ``ptnumba_codegen.enable()``.

    pip install -e ".[nutpie]"
    python examples/nutpie_logistic_regression.py                       # stock, then the policy
    python examples/nutpie_logistic_regression.py --backend policy      # one side only
    python examples/nutpie_logistic_regression.py --rows 20000 --draws 500 --tune 500

``nutpie.compile_pymc_model`` compiles the model with ``mode="NUMBA"``: there is no mode
argument to hand it a policy. The process-wide switch puts the policy under it::

    import ptnumba_codegen
    ptnumba_codegen.enable("default")        # every numba-linker mode, nutpie's included
    compiled = nutpie.compile_pymc_model(model)
    idata = nutpie.sample(compiled, chains=2, tune=300, draws=300)
    ptnumba_codegen.disable()                # new compilations are stock again

The same switch works for ``pm.sample(nuts_sampler="nutpie")`` and for libraries built on
PyMC (bambi, pymc-marketing), which compile with PyTensor's default (numba) mode.

The script samples each backend in its own child process (``--backend both``, the default):
compile time and the first-call warm-up then count for neither side in the other's numbers,
and neither side's numba threads or caches are shared. Per backend it prints compile and
sampling wall time, the ptnumba_codegen INFO summary of the sampler's graph (policy side),
and the posterior means and standard deviations; then the difference of the means in units
of their Monte Carlo standard error. The model and data are ``pymc_logistic_regression.py``'s:
``y ~ Bernoulli(logit_p = alpha + X @ beta)``, ``Normal(0, 2)`` priors, synthetic data from a
fixed numpy seed.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

N_FEATURES = 8
DATA_SEED = 20240611


def make_data(rows: int, n_features: int = N_FEATURES, seed: int = DATA_SEED):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, n_features))
    beta = rng.normal(0.0, 1.0, size=n_features)
    alpha = -0.5
    p = 1.0 / (1.0 + np.exp(-(alpha + X @ beta)))
    y = rng.binomial(1, p)
    return X, y, alpha, beta


def build_model(X, y):
    import pymc as pm

    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 2.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=alpha + pm.math.dot(X, beta), observed=y)
    return model


class Capture(logging.Handler):
    """Collects ptnumba_codegen's INFO lines (one summary per graph the policy rewrote)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())

    def __enter__(self):
        log = logging.getLogger("ptnumba_codegen")
        self._level = log.level
        log.addHandler(self)
        log.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc):
        log = logging.getLogger("ptnumba_codegen")
        log.removeHandler(self)
        log.setLevel(self._level)


def summarize(idata) -> dict:
    """Posterior mean, sd and Monte Carlo standard error of every coefficient."""
    import arviz as az

    post = idata.posterior
    ess = az.ess(idata, var_names=["alpha", "beta"])
    out = {}
    for name in ("alpha", "beta"):
        mean = np.atleast_1d(post[name].mean(("chain", "draw")).values)
        sd = np.atleast_1d(post[name].std(("chain", "draw")).values)
        n_eff = np.atleast_1d(np.asarray(ess[name]))
        for k in range(mean.size):
            label = name if mean.size == 1 else f"{name}[{k}]"
            out[label] = {"mean": float(mean[k]), "sd": float(sd[k]), "mcse": float(sd[k] / np.sqrt(n_eff[k]))}
    return out


def run_one(backend: str, policy: str, rows: int, draws: int, tune: int, seed: int, blas_threads: int = 1) -> dict:
    """Compile and sample in this process with ``backend`` "stock" or "policy"."""
    if blas_threads > 0:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=blas_threads, user_api="blas"):
            return run_one(backend, policy, rows, draws, tune, seed, blas_threads=0)
    import nutpie

    import ptnumba_codegen
    from ptnumba_codegen.backend.ops import is_policy_op

    X, y, _, _ = make_data(rows)
    model = build_model(X, y)
    with Capture() as capture, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if backend == "policy":
            ptnumba_codegen.enable(policy)
        try:
            t0 = time.perf_counter()
            compiled = nutpie.compile_pymc_model(model)
            t1 = time.perf_counter()
        finally:
            ptnumba_codegen.disable()  # sampling needs no switch: the kernels are compiled
    policy_nodes = sum(is_policy_op(n.op) for n in compiled.logp_func.maker.fgraph.apply_nodes)
    if backend == "policy" and not policy_nodes:
        raise RuntimeError("nutpie's logp graph has no policy kernel: enable() did not reach it")
    t2 = time.perf_counter()
    idata = nutpie.sample(compiled, chains=2, tune=tune, draws=draws, seed=seed, progress_bar=False)
    t3 = time.perf_counter()
    return {
        "backend": backend,
        "compile_s": t1 - t0,
        "sample_s": t3 - t2,
        "policy_nodes": policy_nodes,
        "log": capture.messages,
        "posterior": summarize(idata),
    }


def compare(stock: dict, policy: dict) -> dict:
    """Difference of posterior means in Monte Carlo standard errors, per coefficient."""
    return {
        k: (policy[k]["mean"] - stock[k]["mean"]) / np.hypot(policy[k]["mcse"], stock[k]["mcse"])
        for k in stock
    }


def report(res: dict) -> None:
    print(f"\n== {res['backend']}: compile {res['compile_s']:.1f} s, sample {res['sample_s']:.1f} s ==")
    print(f"  policy kernel nodes in nutpie's logp graph: {res['policy_nodes']}")
    for msg in res["log"]:
        print(f"  ptnumba_codegen: {msg}")
    for k, v in res["posterior"].items():
        print(f"  {k:<8} mean {v['mean']:>9.5f}  sd {v['sd']:.5f}  mcse {v['mcse']:.5f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("both", "stock", "policy"), default="both")
    parser.add_argument("--policy", default="default", help="preset name or policy TOML path")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--seed", type=int, default=8927)
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="OpenBLAS threads per process (0: leave as is). nutpie already runs one chain per "
        "core; more BLAS threads on top of that only contend for the cores",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line per backend")
    args = parser.parse_args(argv)
    if args.backend != "both":
        res = run_one(args.backend, args.policy, args.rows, args.draws, args.tune, args.seed, args.blas_threads)
        if args.json:
            print(json.dumps(res))
        else:
            report(res)
        return 0
    results = {}
    for backend in ("stock", "policy"):  # each in its own process
        cmd = [sys.executable, str(Path(__file__).resolve()), "--backend", backend, "--json",
               "--policy", args.policy, "--rows", str(args.rows), "--draws", str(args.draws),
               "--tune", str(args.tune), "--seed", str(args.seed),
               "--blas-threads", str(args.blas_threads)]  # fmt: skip
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results[backend] = json.loads(out.strip().splitlines()[-1])
        report(results[backend])
    z = compare(results["stock"]["posterior"], results["policy"]["posterior"])
    print(f"\n== posterior means, policy - stock, in Monte Carlo standard errors (rows={args.rows}) ==")
    print("  " + "  ".join(f"{k}: {v:+.2f}" for k, v in z.items()))
    s, p = results["stock"]["sample_s"], results["policy"]["sample_s"]
    print(f"  sampling: stock {s:.1f} s, policy {p:.1f} s, stock/policy {s / p:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
