"""A second PyMC model set for the model benchmark, written as a held-out check of the
catalogue's tuning (binomial, ordered logistic, lognormal, Weibull survival, censored
normal, hierarchical logistic with 20 groups, 2-Poisson mixture, heteroskedastic normal):

    python -m ptnumba_codegen bench --group pymc --models-from examples/heldout_models.py

Same format as ptnumba_codegen/tools/models.py: MODELS = {name: builder(n, seed) -> pm.Model}.
The generator's handling of indexed loops, page faults and erfcx under Switches was tuned
on these models, so they are not an unseen set.
"""
from __future__ import annotations

import numpy as np

N_PREDICTORS = 10
N_GROUPS = 20
DEFAULT_SEED = 20240611


def _design(rng, n, scale):
    X = rng.normal(size=(n, N_PREDICTORS))
    beta = rng.normal(0.0, scale / np.sqrt(N_PREDICTORS), size=N_PREDICTORS)
    alpha = 0.5 * scale
    return X, alpha, beta, alpha + X @ beta


def _coefs(pm, sigma):
    alpha = pm.Normal("alpha", 0.0, sigma)
    beta = pm.Normal("beta", 0.0, sigma, shape=N_PREDICTORS)
    return alpha, beta


def binomial_regression(n, seed=DEFAULT_SEED):
    import pymc as pm
    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 1.2)
    trials = rng.integers(5, 30, size=n)
    y = rng.binomial(trials, 1.0 / (1.0 + np.exp(-eta)))
    with pm.Model() as model:
        alpha, beta = _coefs(pm, 2.0)
        pm.Binomial("y", n=trials, logit_p=alpha + pm.math.dot(X, beta), observed=y)
    return model


def ordered_logistic(n, seed=DEFAULT_SEED):
    import pymc as pm
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, N_PREDICTORS))
    beta_true = rng.normal(0.0, 1.0 / np.sqrt(N_PREDICTORS), size=N_PREDICTORS)
    cut_true = np.array([-1.0, 0.0, 1.2])
    eta = X @ beta_true + rng.logistic(size=n)
    y = (eta[:, None] > cut_true).sum(axis=1)
    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, 2.0, shape=N_PREDICTORS)
        cut = pm.Normal("cutpoints", 0.0, 3.0, shape=3,
                        transform=pm.distributions.transforms.ordered,
                        initval=np.array([-1.0, 0.0, 1.0]))
        pm.OrderedLogistic("y", eta=pm.math.dot(X, beta), cutpoints=cut, observed=y)
    return model


def lognormal_regression(n, seed=DEFAULT_SEED):
    import pymc as pm
    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 0.8)
    y = np.exp(eta + 0.5 * rng.normal(size=n))
    with pm.Model() as model:
        alpha, beta = _coefs(pm, 2.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        pm.LogNormal("y", mu=alpha + pm.math.dot(X, beta), sigma=sigma, observed=y)
    return model


def weibull_survival(n, seed=DEFAULT_SEED):
    import pymc as pm
    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 0.6)
    k_true = 1.5
    y = np.exp(eta) * rng.weibull(k_true, size=n)
    with pm.Model() as model:
        alpha, beta = _coefs(pm, 1.0)
        k = pm.Gamma("k", alpha=2.0, beta=1.0)
        pm.Weibull("y", alpha=k, beta=pm.math.exp(alpha + pm.math.dot(X, beta)), observed=y)
    return model


def censored_normal_regression(n, seed=DEFAULT_SEED):
    import pymc as pm
    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 1.0)
    y_latent = eta + 0.7 * rng.normal(size=n)
    lower, upper = -1.0, 2.0
    y = np.clip(y_latent, lower, upper)
    with pm.Model() as model:
        alpha, beta = _coefs(pm, 2.0)
        sigma = pm.HalfNormal("sigma", 2.0)
        latent = pm.Normal.dist(mu=alpha + pm.math.dot(X, beta), sigma=sigma)
        pm.Censored("y", latent, lower=lower, upper=upper, observed=y)
    return model


def hierarchical_logistic(n, seed=DEFAULT_SEED):
    import pymc as pm
    rng = np.random.default_rng(seed)
    g = rng.integers(0, N_GROUPS, size=n)
    X = rng.normal(size=(n, N_PREDICTORS))
    beta_true = rng.normal(0.0, 1.0 / np.sqrt(N_PREDICTORS), size=N_PREDICTORS)
    a_true = rng.normal(0.3, 0.8, size=N_GROUPS)
    eta = a_true[g] + X @ beta_true
    y = rng.binomial(1, 1.0 / (1.0 + np.exp(-eta)))
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        tau = pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=N_GROUPS)  # non-centred
        a = pm.Deterministic("a", mu + tau * z)
        beta = pm.Normal("beta", 0.0, 1.0, shape=N_PREDICTORS)
        pm.Bernoulli("y", logit_p=a[g] + pm.math.dot(X, beta), observed=y)
    return model


def poisson_mixture(n, seed=DEFAULT_SEED):
    import pymc as pm
    rng = np.random.default_rng(seed)
    z = rng.random(n) < 0.35
    y = np.where(z, rng.poisson(2.0, size=n), rng.poisson(9.0, size=n))
    with pm.Model() as model:
        w = pm.Dirichlet("w", a=np.ones(2))
        lam = pm.Gamma("lam", alpha=2.0, beta=0.3, shape=2, initval=np.array([3.0, 8.0]))
        pm.Mixture("y", w=w, comp_dists=pm.Poisson.dist(mu=lam), observed=y)
    return model


def heteroskedastic_regression(n, seed=DEFAULT_SEED):
    import pymc as pm
    rng = np.random.default_rng(seed)
    X, _, _, eta = _design(rng, n, 1.0)
    Z = X[:, :3]
    gamma_true = np.array([0.3, -0.2, 0.1])
    y = eta + np.exp(-0.3 + Z @ gamma_true) * rng.normal(size=n)
    with pm.Model() as model:
        alpha, beta = _coefs(pm, 2.0)
        g0 = pm.Normal("g0", 0.0, 1.0)
        gamma = pm.Normal("gamma", 0.0, 1.0, shape=3)
        sigma = pm.math.exp(g0 + pm.math.dot(Z, gamma))
        pm.Normal("y", mu=alpha + pm.math.dot(X, beta), sigma=sigma, observed=y)
    return model


MODELS = {
    "binomial_regression": binomial_regression,
    "ordered_logistic": ordered_logistic,
    "lognormal_regression": lognormal_regression,
    "weibull_survival": weibull_survival,
    "censored_normal_regression": censored_normal_regression,
    "hierarchical_logistic": hierarchical_logistic,
    "poisson_mixture": poisson_mixture,
    "heteroskedastic_regression": heteroskedastic_regression,
}
