"""PyMC logistic regression under stock numba and under a ptnumba_codegen policy.

    pip install -e ".[pymc]"
    python examples/pymc_logistic_regression.py                  # 1e5 rows, 300 tune + 300 draws
    python examples/pymc_logistic_regression.py --rows 20000 --draws 500 --tune 500

The model: ``y ~ Bernoulli(logit_p = alpha + X @ beta)`` with ``Normal(0, 2)`` priors on the
intercept and on the coefficients, on synthetic data from a fixed numpy seed.

The script

1. compiles logp, dlogp and the fused logp+dlogp function NUTS uses
   (``model.compile_logp``, ``model.compile_dlogp``, ``model.logp_dlogp_function``) under
   stock numba (``Mode(linker="numba", optimizer="fast_run")``) and under
   ``ptnumba_codegen.policy_mode("default")``;
2. checks that both agree at a few random points (``np.allclose``, rtol 1e-9) and prints the
   largest relative difference, and lists any node the policy left to the stock kernel;
3. times both in the same process (interleaved rounds, median ms per call, stock/policy);
4. samples with PyMC's own NUTS (``nuts_sampler="pymc"``, ``compile_kwargs={"mode": mode}``)
   under the policy mode, confirms from ptnumba_codegen's log that the sampler's graph went
   through the policy rewrite, and prints posterior means against the true coefficients.

At the defaults (1e5 rows, 8 features, 2 chains x (300 + 300) sequentially on one core)
most of the run is sampling (each NUTS step costs several logp+dlogp evaluations over the
1e5 rows); ``--no-sample`` leaves it out.
Use ``--rows``/``--draws``/``--tune`` to scale it. BLAS is limited to one thread by default
(``--blas-threads``): see the comment in ``main()``.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings

import numpy as np
import pymc as pm
from pytensor.compile.mode import Mode
from threadpoolctl import threadpool_limits

import ptnumba_codegen

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


def build_model(X, y) -> pm.Model:
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 2.0)
        beta = pm.Normal("beta", 0.0, 2.0, shape=X.shape[1])
        pm.Bernoulli("y", logit_p=alpha + pm.math.dot(X, beta), observed=y)
    return model


def compile_all(model: pm.Model, mode: Mode) -> dict:
    """The three functions a PyMC user meets: logp, dlogp, and NUTS's fused logp+dlogp."""
    return {
        "logp": model.compile_logp(mode=mode),
        "dlogp": model.compile_dlogp(mode=mode),
        "logp+dlogp": model.logp_dlogp_function(ravel_inputs=True, mode=mode),
    }


def random_points(model: pm.Model, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    ip = model.initial_point()
    return [
        {k: rng.normal(0.0, 1.0, size=np.shape(v)).astype(np.asarray(v).dtype)
         for k, v in ip.items()}
        for _ in range(n)
    ]


def call(name: str, fn, point: dict, order: list[str]):
    """Evaluate one of the compiled functions at a point; a tuple of arrays."""
    if name == "logp+dlogp":
        flat = np.concatenate([np.ravel(point[k]) for k in order])
        logp, grad = fn(flat)
        return np.asarray(logp), np.asarray(grad)
    return (np.asarray(fn(point)),)


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    scale = np.maximum(np.maximum(np.abs(a), np.abs(b)), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(a - b) / scale))


def check_agreement(model, stock: dict, policy: dict, n_points: int = 5) -> None:
    order = [v.name for v in model.continuous_value_vars]
    print(f"\n== agreement at {n_points} random points (np.allclose, rtol=1e-9) ==")
    for name in stock:
        worst = 0.0
        for point in random_points(model, n_points, seed=1):
            a = call(name, stock[name], point, order)
            b = call(name, policy[name], point, order)
            for x, y in zip(a, b, strict=True):
                assert np.allclose(x, y, rtol=1e-9, atol=0.0), (name, point, x, y)
                worst = max(worst, rel_diff(x, y))
        print(f"  {name:<11} max relative difference {worst:.3e}")


def pytensor_fn(fn):
    return getattr(fn, "_pytensor_function", None) or fn.f


def report_fallbacks(policy: dict) -> None:
    print("\n== policy coverage (ptnumba_codegen.explain) ==")
    for name, fn in policy.items():
        text = ptnumba_codegen.explain(pytensor_fn(fn))
        lines = text.splitlines()
        kernels = [ln for ln in lines if ln and not ln.startswith(" ") and "[policy" in ln]
        # explain_node prints a fallback right under the node's header line
        pairs = zip(["", *lines], lines)
        fallbacks = [(head, ln.strip()) for head, ln in pairs if "FALLBACK" in ln]
        print(f"  {name:<11} {len(kernels)} policy kernel node(s), {len(fallbacks)} fallback(s)")
        for head, why in fallbacks:
            print(f"      {head.strip()}\n        -> {why}")


def time_both(model, stock: dict, policy: dict, rounds: int, budget_s: float = 0.25) -> None:
    """Interleaved rounds: in each round every (function, mode) pair is timed back to back."""
    order = [v.name for v in model.continuous_value_vars]
    point = random_points(model, 1, seed=2)[0]
    flat = np.concatenate([np.ravel(point[k]) for k in order])
    calls = {}
    for label, fns in (("stock", stock), ("policy", policy)):
        for name, fn in fns.items():
            if name == "logp+dlogp":
                calls[name, label] = (lambda fn=fn: fn(flat))
            else:
                calls[name, label] = (lambda fn=fn: fn(point))
    # calls per round: about budget_s per (function, mode) pair over all rounds
    per_call = {}
    for key, f in calls.items():
        f()
        t0 = time.perf_counter()
        f()
        per_call[key] = time.perf_counter() - t0
    samples: dict = {key: [] for key in calls}
    for r in range(rounds):
        keys = list(calls)
        if r % 2:
            keys.reverse()
        for key in keys:
            n = max(1, int(budget_s / rounds / max(per_call[key], 1e-6)))
            f = calls[key]
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            samples[key].append((time.perf_counter() - t0) / n)
    print(f"\n== timing: median ms per call over {rounds} interleaved rounds ==")
    print(f"  {'function':<11} {'stock':>10} {'policy':>10} {'stock/policy':>13}")
    for name in stock:
        s = np.median(samples[name, "stock"]) * 1e3
        p = np.median(samples[name, "policy"]) * 1e3
        print(f"  {name:<11} {s:>10.3f} {p:>10.3f} {s / p:>13.2f}")


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def sample(model, mode, true_alpha, true_beta, draws: int, tune: int, seed: int) -> None:
    print(f"\n== pm.sample under the policy mode: 2 chains x ({tune} tune + {draws} draws) ==")
    cg_log = logging.getLogger("ptnumba_codegen")
    capture = _Capture()
    old_level = cg_log.level
    cg_log.addHandler(capture)
    cg_log.setLevel(logging.INFO)
    t0 = time.perf_counter()
    try:
        with model, warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            idata = pm.sample(
                draws=draws,
                tune=tune,
                chains=2,
                cores=1,
                nuts_sampler="pymc",  # PyMC's NUTS: the one that calls our compiled function
                compile_kwargs={"mode": mode},
                random_seed=seed,
                blas_cores=None,  # keep the caller's BLAS thread limit
                progressbar=False,
                compute_convergence_checks=False,
            )
    finally:
        cg_log.removeHandler(capture)
        cg_log.setLevel(old_level)
    elapsed = time.perf_counter() - t0
    # The policy rewrite logs one summary line per graph it rewrote: the sampler's graph
    # (logp+dlogp, raveled) must be among them, or the mode did not reach the sampler.
    if not capture.messages:
        raise RuntimeError("pm.sample did not compile anything through the policy rewrite")
    for msg in capture.messages:
        print(f"  compiled for the sampler: {msg}")
    post = idata.posterior
    divergences = int(idata.sample_stats["diverging"].sum())
    print(f"  sampling wall time {elapsed:.1f} s, divergences: {divergences}")
    means = [float(post["alpha"].mean())] + [float(v) for v in post["beta"].mean(("chain", "draw"))]
    sds = [float(post["alpha"].std())] + [float(v) for v in post["beta"].std(("chain", "draw"))]
    truth = [true_alpha, *true_beta]
    names = ["alpha"] + [f"beta[{i}]" for i in range(len(true_beta))]
    print(f"  {'parameter':<10} {'true':>8} {'post mean':>10} {'post sd':>8} {'z':>6}")
    for n, t, m, s in zip(names, truth, means, sds, strict=True):
        print(f"  {n:<10} {t:>8.3f} {m:>10.3f} {s:>8.3f} {(m - t) / s:>6.2f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--tune", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    parser.add_argument("--policy", default="default", help="preset name or policy TOML path")
    parser.add_argument("--seed", type=int, default=8927)
    parser.add_argument("--no-sample", action="store_true", help="skip pm.sample")
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="OpenBLAS threads for the two matrix-vector products (0: leave as is)",
    )
    args = parser.parse_args(argv)
    # The generated kernels are single-threaded. Multi-threaded OpenBLAS on a loaded machine
    # turns each 1e5 x 8 gemv into mostly thread contention, which would drown
    # the elementwise work the policy changes; one BLAS thread keeps the comparison readable.
    if args.blas_threads > 0:
        with threadpool_limits(limits=args.blas_threads, user_api="blas"):
            run(args)
    else:
        run(args)


def run(args) -> None:

    t_start = time.perf_counter()
    X, y, true_alpha, true_beta = make_data(args.rows)
    model = build_model(X, y)
    print(f"logistic regression: {args.rows} rows, {X.shape[1]} features, pymc {pm.__version__}")

    stock_mode = Mode(linker="numba", optimizer="fast_run")
    policy_mode = ptnumba_codegen.policy_mode(args.policy)
    t0 = time.perf_counter()
    stock = compile_all(model, stock_mode)
    t1 = time.perf_counter()
    policy = compile_all(model, policy_mode)
    t2 = time.perf_counter()
    print(f"compile: stock {t1 - t0:.1f} s, policy {args.policy!r} {t2 - t1:.1f} s")

    check_agreement(model, stock, policy)
    report_fallbacks(policy)
    time_both(model, stock, policy, rounds=args.rounds)
    if not args.no_sample:
        sample(model, policy_mode, true_alpha, true_beta, args.draws, args.tune, args.seed)
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s")


if __name__ == "__main__":
    main()
