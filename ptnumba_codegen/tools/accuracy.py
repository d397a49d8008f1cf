"""Accuracy measurement: max error in ulps against mpmath, for the functions the vector
math tier lowers (used by the test suite and by the asv accuracy benchmark)."""

from __future__ import annotations

import numpy as np

FUNCTIONS = (
    "exp", "log", "log1p", "expm1", "tanh", "erf", "erfc", "sin", "cos",
    "sigmoid", "softplus", "log1mexp", "gammaln", "psi", "tri_gamma",
)  # fmt: skip

# FUNCTIONS entries whose vector function has another name in vector_math.VECTOR_FUNCS
VECTOR_NAME = {"gammaln": "lgamma", "psi": "digamma", "tri_gamma": "trigamma"}


def mp_reference(name: str):
    """The exact function, evaluated by mpmath (needs ``mpmath``; dps set by the caller)."""
    import mpmath

    return {
        "exp": mpmath.exp,
        "log": mpmath.log,
        "log1p": mpmath.log1p,
        "expm1": mpmath.expm1,
        "tanh": mpmath.tanh,
        "erf": mpmath.erf,
        "erfc": mpmath.erfc,
        "sin": mpmath.sin,
        "cos": mpmath.cos,
        "sigmoid": lambda x: 1 / (1 + mpmath.exp(-x)),
        "softplus": lambda x: mpmath.log1p(mpmath.exp(x)),
        "log1mexp": lambda x: mpmath.log1p(-mpmath.exp(x)),
        "gammaln": lambda x: mpmath.loggamma(x) if x > 0 else mpmath.log(abs(mpmath.gamma(x))),
        "psi": mpmath.digamma,
        "tri_gamma": lambda x: mpmath.psi(1, x),
    }[name]


def pytensor_function(name: str):
    import pytensor.tensor as pt

    return getattr(pt, name)


def domain(name: str, dtype: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Points across the function's domain (finite results), in ``dtype``.

    gammaln, psi and tri_gamma: x > 0 (their budgets hold there; see docs/policies.md for
    x < 0).
    """
    big = 700.0 if dtype == "float64" else 85.0
    tiny = 300 if dtype == "float64" else 35

    def logspace(lo, hi, k=n):
        return 10.0 ** rng.uniform(lo, hi, k)

    half = n // 2
    return {
        "exp": rng.uniform(-big, big, n),
        "log": logspace(-tiny, tiny),
        "log1p": np.concatenate([rng.uniform(-0.999, 1, half), logspace(-tiny, tiny, n - half)]),
        "expm1": np.concatenate([rng.uniform(-1, 1, half), rng.uniform(-50, big, n - half)]),
        "tanh": rng.uniform(-20, 20, n),
        "erf": rng.uniform(-6, 6, n),
        "erfc": rng.uniform(-6, 26 if dtype == "float64" else 9, n),
        "sin": rng.uniform(-1e3, 1e3, n),
        "cos": rng.uniform(-1e3, 1e3, n),
        "sigmoid": rng.uniform(-big, big, n),
        "softplus": np.concatenate([rng.uniform(-40, 40, half), rng.uniform(-big, big, n - half)]),
        "log1mexp": -logspace(-tiny / 10, np.log10(big)),
        "gammaln": _special_domain(rng, n, dtype),
        "psi": _special_domain(rng, n, dtype),
        "tri_gamma": _special_domain(rng, n, dtype, lo=-150 if dtype == "float64" else -19),
    }[name].astype(dtype)


def _special_domain(rng: np.random.Generator, n: int, dtype: str, lo: int | None = None) -> np.ndarray:
    """x > 0 for lgamma/digamma/trigamma: dense where the formulas change (0-10, around the
    zeros 1, 2 and the root 1.4616), tiny (down to 10**lo, where the result stays finite)
    and huge arguments up to lgamma's overflow."""
    hi = 305 if dtype == "float64" else 36
    if lo is None:
        lo = -307 if dtype == "float64" else -38  # float32: psi(x) ~ -1/x must not overflow
    k = n // 4
    near = np.array([1.0, 2.0, 1.4616321449683622])[rng.integers(0, 3, k)]
    return np.concatenate([
        rng.uniform(0, 10, n - 3 * k),
        near + rng.choice([-1, 1], k) * 10.0 ** rng.uniform(-15, -0.5, k),
        10.0 ** rng.uniform(lo, 0, k),
        10.0 ** rng.uniform(1, hi, k),
    ])


def max_ulp(name: str, x: np.ndarray, got: np.ndarray, dps: int = 60) -> float:
    """Largest |got - exact| in units of the last place of the exactly rounded result."""
    import mpmath

    fn = mp_reference(name)
    worst = 0.0
    with mpmath.workdps(dps):
        for xi, gi in zip(x.tolist(), np.asarray(got).tolist(), strict=True):
            exact = fn(mpmath.mpf(xi))
            rounded = np.asarray(float(exact), dtype=got.dtype)
            if not np.isfinite(rounded) or rounded == 0:
                continue
            worst = max(worst, float(abs(mpmath.mpf(gi) - exact)) / float(np.spacing(np.abs(rounded))))
    return worst


def compile_all(dtype: str, mode):
    """One PyTensor function computing every FUNCTIONS entry on its own input vector."""
    import pytensor
    import pytensor.tensor as pt

    xs = [pt.vector(name, dtype=dtype) for name in FUNCTIONS]
    outs = [pytensor_function(name)(x) for name, x in zip(FUNCTIONS, xs, strict=True)]
    return pytensor.function(xs, outs, mode=mode)


def measure(fn, dtype: str, n: int = 1000, seed: int = 11) -> dict[str, float]:
    """Max ulp error of each function of ``fn`` (from `compile_all`) on ``n`` points."""
    rng = np.random.default_rng(seed)
    xs = [domain(name, dtype, n, rng) for name in FUNCTIONS]
    outs = fn(*xs)
    return {name: max_ulp(name, x, np.asarray(o)) for name, x, o in zip(FUNCTIONS, xs, outs, strict=True)}
