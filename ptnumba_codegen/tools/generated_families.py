"""Likelihood families and link functions of the generated models (`generated_models`).

Two rule tables. `LINKS`: an inverse link maps a linear predictor to a mean in one
*domain* (``real``, ``positive``, ``unit``), in PyTensor (for the model) and in numpy (to
simulate the data). `FAMILIES`: a family takes a mean in one domain; it simulates data
from a true mean, and adds its observed variable (with its own nuisance parameters) to
the model around the model's mean. A GLM draws a family, then a link of the family's
domain. Every family can also be a mixture component (`family_dist`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

SQRT2 = float(np.sqrt(2.0))


@dataclass(frozen=True)
class Link:
    domain: str
    tensor: Callable  # eta -> mean (PyTensor)
    numpy: Callable  # eta -> mean (numpy)


def _pt():
    import pytensor.tensor as pt

    return pt


LINKS: dict[str, Link] = {
    "identity": Link("real", lambda eta: eta, lambda eta: eta),
    "log": Link("positive", lambda eta: _pt().exp(eta), np.exp),
    "softplus": Link("positive", lambda eta: _pt().softplus(eta), lambda eta: np.logaddexp(0.0, eta)),
    "logit": Link("unit", lambda eta: _pt().sigmoid(eta), special.expit),
    "probit": Link("unit", lambda eta: 0.5 * _pt().erfc(-eta / SQRT2), special.ndtr),
}

#: A linear predictor's true intercept per link, so the simulated means are moderate
#: (counts of a few units, probabilities away from 0 and 1).
TRUE_INTERCEPT = {"identity": 0.0, "log": 1.0, "softplus": 2.0, "logit": 0.0, "probit": 0.0}


@dataclass(frozen=True)
class Family:
    """``simulate(rng, mean) -> (observed data, constants)``; ``dist(name, mean,
    constants) -> (pm distribution class, keyword arguments)``: nuisance parameters are
    free variables named after ``name``."""

    domain: str
    simulate: Callable
    dist: Callable
    discrete: bool = False
    mixable: bool = True  # usable as a batch of mixture components (mean of shape (K,))


def _pm():
    import pymc as pm

    return pm


def _sim_normal(rng, mean):
    return mean + rng.normal(0.0, 0.7, mean.shape), {}


def _normal(name, mean, const):
    pm = _pm()
    return pm.Normal, {"mu": mean, "sigma": pm.HalfNormal(f"{name}_sigma", 1.0)}


def _sim_studentt(rng, mean):
    return mean + 0.7 * rng.standard_t(4.0, mean.shape), {}


def _studentt(name, mean, const):
    pm = _pm()
    return pm.StudentT, {"nu": pm.Gamma(f"{name}_nu", 2.0, 0.1), "mu": mean,
                         "sigma": pm.HalfNormal(f"{name}_sigma", 1.0)}


def _sim_laplace(rng, mean):
    return mean + rng.laplace(0.0, 0.5, mean.shape), {}


def _laplace(name, mean, const):
    pm = _pm()
    return pm.Laplace, {"mu": mean, "b": pm.HalfNormal(f"{name}_b", 1.0)}


def _sim_censored(rng, mean):
    y = mean + rng.normal(0.0, 0.7, mean.shape)
    lower, upper = (float(q) for q in np.quantile(y, [0.1, 0.9]))
    return np.clip(y, lower, upper), {"lower": lower, "upper": upper}


def _censored_normal(name, mean, const):
    pm = _pm()
    sigma = pm.HalfNormal(f"{name}_sigma", 1.0)
    return pm.Censored, {"dist": pm.Normal.dist(mean, sigma), "lower": const["lower"], "upper": const["upper"]}


def _sim_ordered(rng, mean):
    cuts = np.quantile(mean + rng.logistic(0.0, 1.0, mean.shape), [0.25, 0.5, 0.75])
    return np.searchsorted(cuts, mean + rng.logistic(0.0, 1.0, mean.shape)).astype("int64"), {"categories": 4}


def _ordered_logistic(name, mean, const):
    pm = _pm()
    k = const["categories"]
    cuts = pm.Normal(f"{name}_cutpoints", 0.0, 5.0, shape=k - 1, transform=pm.distributions.transforms.ordered,
                     initval=np.linspace(-1.0, 1.0, k - 1))
    return pm.OrderedLogistic, {"eta": mean, "cutpoints": cuts}


def _sim_poisson(rng, mean):
    return rng.poisson(mean), {}


def _poisson(name, mean, const):
    return _pm().Poisson, {"mu": mean}


def _sim_negbinomial(rng, mean):
    alpha = 3.0
    return rng.negative_binomial(alpha, alpha / (alpha + mean)), {}


def _negbinomial(name, mean, const):
    pm = _pm()
    return pm.NegativeBinomial, {"mu": mean, "alpha": pm.Gamma(f"{name}_alpha", 2.0, 0.5)}


def _sim_gamma(rng, mean):
    shape = 4.0
    return np.maximum(rng.gamma(shape, mean / shape), 1e-6), {}


def _gamma(name, mean, const):
    pm = _pm()
    shape = pm.Gamma(f"{name}_shape", 2.0, 0.5)
    return pm.Gamma, {"alpha": shape, "beta": shape / mean}


def _sim_weibull(rng, mean):
    return np.maximum(mean * rng.weibull(1.5, mean.shape), 1e-6), {}


def _weibull(name, mean, const):
    pm = _pm()
    return pm.Weibull, {"alpha": pm.Gamma(f"{name}_k", 2.0, 1.0), "beta": mean}


def _sim_exponential(rng, mean):
    return np.maximum(rng.exponential(mean), 1e-6), {}


def _exponential(name, mean, const):
    return _pm().Exponential, {"scale": mean}


def _sim_bernoulli(rng, mean):
    return (rng.uniform(size=mean.shape) < mean).astype("int64"), {}


def _bernoulli(name, mean, const):
    return _pm().Bernoulli, {"p": mean}


def _sim_binomial(rng, mean):
    trials = rng.integers(1, 30, mean.shape)
    return rng.binomial(trials, mean), {"n": trials}


def _binomial(name, mean, const):
    return _pm().Binomial, {"n": const["n"], "p": mean}


def _sim_beta(rng, mean):
    kappa = 10.0
    return np.clip(rng.beta(mean * kappa, (1.0 - mean) * kappa), 1e-4, 1.0 - 1e-4), {}


def _beta(name, mean, const):
    pm = _pm()
    kappa = pm.Gamma(f"{name}_kappa", 2.0, 0.1)
    return pm.Beta, {"alpha": mean * kappa, "beta": (1.0 - mean) * kappa}


FAMILIES: dict[str, Family] = {
    "normal": Family("real", _sim_normal, _normal),
    "studentt": Family("real", _sim_studentt, _studentt),
    "laplace": Family("real", _sim_laplace, _laplace),
    "censored_normal": Family("real", _sim_censored, _censored_normal, mixable=False),
    "ordered_logistic": Family("real", _sim_ordered, _ordered_logistic, discrete=True, mixable=False),
    "poisson": Family("positive", _sim_poisson, _poisson, discrete=True),
    "negbinomial": Family("positive", _sim_negbinomial, _negbinomial, discrete=True),
    "gamma": Family("positive", _sim_gamma, _gamma),
    "weibull": Family("positive", _sim_weibull, _weibull),
    "exponential": Family("positive", _sim_exponential, _exponential),
    "bernoulli": Family("unit", _sim_bernoulli, _bernoulli, discrete=True, mixable=False),
    "binomial": Family("unit", _sim_binomial, _binomial, discrete=True, mixable=False),
    "beta": Family("unit", _sim_beta, _beta),
}


def links_of(family: str) -> list[str]:
    """The links whose mean lies in ``family``'s domain, in `LINKS` order."""
    domain = FAMILIES[family].domain
    return [name for name, link in LINKS.items() if link.domain == domain]


def families_of(domain: str | None = None, *, mixable: bool = False) -> list[str]:
    """The families (of ``domain`` when given; only mixable ones when ``mixable``)."""
    return [name for name, f in FAMILIES.items()
            if (domain is None or f.domain == domain) and (f.mixable or not mixable)]


def observe(name: str, family: str, mean, data: np.ndarray, const: dict):
    """Add ``name ~ family(mean)`` observed at ``data`` to the current model."""
    cls, kwargs = FAMILIES[family].dist(name, mean, const)
    return cls(name, **kwargs, observed=data)


def family_dist(name: str, family: str, mean, const: dict):
    """An unnamed ``family(mean)`` distribution (``.dist``) with its nuisance parameters
    named after ``name``: a batch of mixture components when ``mean`` has a last axis."""
    cls, kwargs = FAMILIES[family].dist(name, mean, const)
    return cls.dist(**kwargs)


def simulate(rng, family: str, link: str, eta: np.ndarray) -> tuple[np.ndarray, dict]:
    """Data of ``family`` at the mean ``link(eta)`` (``eta`` itself for the ordinal family,
    whose linear predictor is the latent location)."""
    mean = np.asarray(LINKS[link].numpy(np.asarray(eta, dtype="float64")), dtype="float64")
    return FAMILIES[family].simulate(rng, mean)
