"""A catalogue of standard PyMC models on synthetic data, for the model benchmark
(``python -m ptnumba_codegen bench --group pymc``, ``benchmarks/bench_pymc.py``) and tests.

Every entry of `MODELS` is a builder ``(n, seed) -> pm.Model``: it draws ``n`` rows of
synthetic data (predictors, groups, true parameters) from ``numpy.random.default_rng(seed)``
and writes the model the way a PyMC user would, with standard priors and ``observed=``
numpy data. Same ``(n, seed)``, same data and the same model.

Adding a model is one builder and one row of `MODELS`. A held-out set lives in its own
file with its own ``MODELS`` dict (see `load_models`)::

    # heldout.py
    import pymc as pm
    def my_model(n, seed): ...
    MODELS = {"my_model": my_model}

    python -m ptnumba_codegen bench --group pymc --models-from heldout.py

PyMC is imported inside the builders, so importing this module needs neither PyMC nor
PyTensor.
"""

from __future__ import annotations

import importlib.util
import runpy
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: Predictors of the regression models (plus an intercept).
N_PREDICTORS = 10
#: Groups of the hierarchical model.
N_GROUPS = 20
#: Classes of the multinomial logit.
N_CLASSES = 5
#: Components of the normal mixture.
N_COMPONENTS = 3

DEFAULT_SEED = 20240611


def pymc_available() -> bool:
    return importlib.util.find_spec("pymc") is not None


def _design(rng, n: int, scale: float):
    """``(X, alpha, beta, eta)``: standard normal predictors and a linear predictor whose
    standard deviation is about ``scale``."""
    X = rng.normal(size=(n, N_PREDICTORS))
    beta = rng.normal(0.0, scale / np.sqrt(N_PREDICTORS), size=N_PREDICTORS)
    alpha = 0.5 * scale
    return X, alpha, beta, alpha + X @ beta


def _regression_coefs(pm, sigma: float):
    alpha = pm.Normal("alpha", 0.0, sigma)
    beta = pm.Normal("beta", 0.0, sigma, shape=N_PREDICTORS)
    return alpha, beta


# --- the models -------------------------------------------------------------------------


def logistic_regression(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 1.5)
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-eta)))
    with pm.Model() as model:
        alpha, beta = _regression_coefs(pm, 2.0)
        pm.Bernoulli("y", logit_p=alpha + pm.math.dot(X, beta), observed=y)
    return model


def hierarchical_normal(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    g = rng.integers(0, N_GROUPS, size=n)
    a_true = rng.normal(1.0, 0.7, size=N_GROUPS)
    y = rng.normal(a_true[g], 1.3)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 5.0)
        tau = pm.HalfNormal("tau", 2.0)
        a = pm.Normal("a", mu, tau, shape=N_GROUPS)
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.Normal("y", a[g], sigma, observed=y)
    return model


def poisson_regression(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 0.6)
    y = rng.poisson(np.exp(eta))
    with pm.Model() as model:
        alpha, beta = _regression_coefs(pm, 1.0)
        pm.Poisson("y", mu=pm.math.exp(alpha + pm.math.dot(X, beta)), observed=y)
    return model


def student_t_regression(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 1.0)
    y = eta + 0.8 * rng.standard_t(4.0, size=n)
    with pm.Model() as model:
        alpha, beta = _regression_coefs(pm, 2.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        nu = pm.Gamma("nu", alpha=2.0, beta=0.1)
        pm.StudentT("y", nu=nu, mu=alpha + pm.math.dot(X, beta), sigma=sigma, observed=y)
    return model


def negative_binomial_regression(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 0.6)
    mu_true, phi_true = np.exp(eta + 1.0), 3.0
    y = rng.negative_binomial(phi_true, phi_true / (phi_true + mu_true))
    with pm.Model() as model:
        alpha, beta = _regression_coefs(pm, 1.0)
        phi = pm.Exponential("phi", 0.5)
        pm.NegativeBinomial("y", mu=pm.math.exp(alpha + pm.math.dot(X, beta)), alpha=phi, observed=y)
    return model


def beta_regression(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 1.0)
    mu_true, kappa_true = 1.0 / (1.0 + np.exp(-eta)), 20.0
    y = rng.beta(mu_true * kappa_true, (1.0 - mu_true) * kappa_true)
    y = np.clip(y, 1e-6, 1.0 - 1e-6)
    with pm.Model() as model:
        alpha, beta = _regression_coefs(pm, 1.5)
        kappa = pm.Gamma("kappa", alpha=2.0, beta=0.1)
        mu = pm.math.invlogit(alpha + pm.math.dot(X, beta))
        pm.Beta("y", alpha=mu * kappa, beta=(1.0 - mu) * kappa, observed=y)
    return model


def gamma_glm(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 0.8)
    shape_true = 4.0
    y = rng.gamma(shape_true, np.exp(eta) / shape_true)
    with pm.Model() as model:
        alpha, beta = _regression_coefs(pm, 1.0)
        shape = pm.Gamma("shape", alpha=2.0, beta=0.5)
        mu = pm.math.exp(alpha + pm.math.dot(X, beta))
        pm.Gamma("y", alpha=shape, beta=shape / mu, observed=y)
    return model


def normal_mixture(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    w_true = np.array([0.3, 0.5, 0.2])
    mu_true, sd_true = np.array([-3.0, 0.0, 4.0]), np.array([1.0, 0.7, 1.5])
    z = rng.choice(N_COMPONENTS, size=n, p=w_true)
    y = rng.normal(mu_true[z], sd_true[z])
    with pm.Model() as model:
        w = pm.Dirichlet("w", a=np.ones(N_COMPONENTS))
        mu = pm.Normal(
            "mu",
            0.0,
            5.0,
            shape=N_COMPONENTS,
            transform=pm.distributions.transforms.ordered,
            initval=np.linspace(-2.0, 2.0, N_COMPONENTS),
        )
        sigma = pm.HalfNormal("sigma", 2.0, shape=N_COMPONENTS)
        pm.NormalMixture("y", w=w, mu=mu, sigma=sigma, observed=y)
    return model


def zero_inflated_poisson(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 0.6)
    y = np.where(rng.random(n) < 0.3, 0, rng.poisson(np.exp(eta + 0.5)))
    with pm.Model() as model:
        alpha, beta = _regression_coefs(pm, 1.0)
        psi = pm.Beta("psi", 1.0, 1.0)
        pm.ZeroInflatedPoisson("y", psi=psi, mu=pm.math.exp(alpha + pm.math.dot(X, beta)), observed=y)
    return model


def multinomial_logit(n: int, seed: int = DEFAULT_SEED):
    import pymc as pm

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, N_PREDICTORS))
    B = rng.normal(0.0, 0.4, size=(N_PREDICTORS, N_CLASSES))
    logits = X @ B
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = (rng.random((n, 1)) > np.cumsum(p, axis=1)).sum(axis=1)
    with pm.Model() as model:
        alpha = pm.Normal("alpha", 0.0, 2.0, shape=N_CLASSES)
        beta = pm.Normal("beta", 0.0, 1.0, shape=(N_PREDICTORS, N_CLASSES))
        p_rows = pm.math.softmax(alpha + pm.math.dot(X, beta), axis=-1)
        pm.Categorical("y", p=p_rows, observed=y)
    return model


#: The catalogue: name -> builder ``(n, seed) -> pm.Model``, in table order.
MODELS: dict[str, Callable] = {
    "logistic_regression": logistic_regression,
    "hierarchical_normal": hierarchical_normal,
    "poisson_regression": poisson_regression,
    "student_t_regression": student_t_regression,
    "negative_binomial_regression": negative_binomial_regression,
    "beta_regression": beta_regression,
    "gamma_glm": gamma_glm,
    "normal_mixture": normal_mixture,
    "zero_inflated_poisson": zero_inflated_poisson,
    "multinomial_logit": multinomial_logit,
}


def load_models(path: str | Path | None = None) -> dict[str, Callable]:
    """`MODELS`, plus (and overridden by) the ``MODELS`` dict of the Python file ``path``."""
    models = dict(MODELS)
    if path is None:
        return models
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--models-from: no such file {str(path)!r}")
    namespace = runpy.run_path(str(path), run_name="__ptnumba_models__")
    extra = namespace.get("MODELS")
    if not isinstance(extra, dict) or not extra:
        raise ValueError(
            f"{path}: expected a non-empty dict MODELS = {{name: builder(n, seed) -> pm.Model}}"
        )
    for name, builder in extra.items():
        if not isinstance(name, str) or not callable(builder):
            raise ValueError(f"{path}: MODELS[{name!r}] must map a str to a callable builder(n, seed)")
    models.update(extra)
    return models


def select(models: dict[str, Callable], names: str | None) -> list[str]:
    """The keys of ``models`` named in the comma-separated ``names`` (all when None)."""
    if not names:
        return list(models)
    wanted = [s.strip() for s in names.split(",") if s.strip()]
    unknown = [w for w in wanted if w not in models]
    if unknown:
        raise ValueError(f"unknown model(s) {unknown}; known: {', '.join(models)}")
    return wanted
