"""The pieces a generated model (`generated_models`) is assembled from: one rule table,
`PIECES`, of the structures published PyMC models are built of.

A piece is two functions. ``draw(rng, scale) -> params`` picks its variant, its
likelihood and its sizes (a JSON-ready dict: what ``--list`` prints); ``scale`` (``small``,
``medium``, ``large``) steers the sizes so that a model's calls range from tens of
microseconds to milliseconds. ``build(params, rng, name)`` simulates the piece's data
from ``rng`` and adds its free variables, data and likelihood to the current PyMC model,
every name prefixed by ``name``. Pieces are independent: a model with several pieces has
the sum of their log densities.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ptnumba_codegen.tools import generated_families as gf

SCALES = ("small", "medium", "large")

#: Log-uniform ranges per kind of size and scale.
SIZE_RANGES = {
    "rows": {"small": (20, 150), "medium": (150, 3000), "large": (3000, 30000)},
    "steps": {"small": (8, 30), "medium": (30, 150), "large": (150, 600)},
    "points": {"small": (6, 15), "medium": (15, 35), "large": (35, 64)},
    "levels": {"small": (3, 12), "medium": (3, 40), "large": (3, 120)},
}

LOG_2PI = math.log(2.0 * math.pi)


def size(rng, kind: str, scale: str) -> int:
    lo, hi = SIZE_RANGES[kind][scale]
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def pick(rng, options):
    """One of ``options`` (a sequence), uniformly; a plain Python value."""
    value = options[int(rng.integers(len(options)))]
    return value.item() if hasattr(value, "item") else value


def _pm():
    import pymc as pm

    return pm


def _pt():
    import pytensor.tensor as pt

    return pt


def _data(name: str, value: np.ndarray, shared: bool):
    """``value`` as ``pm.Data`` (a shared variable) or as a constant."""
    return _pm().Data(name, value) if shared else _pt().as_tensor_variable(value)


def _draw_likelihood(rng, domain: str | None = None, *, mixable: bool = False) -> dict:
    family = pick(rng, gf.families_of(domain, mixable=mixable))
    return {"family": family, "link": pick(rng, gf.links_of(family))}


def _draw_groups(rng, scale, most: int) -> list:
    return [{"levels": size(rng, "levels", scale), "centered": bool(rng.integers(2))}
            for _ in range(int(rng.integers(0, most + 1)))]


def _hierarchical(name: str, levels: int, centered: bool, sd_scale: float = 1.0):
    """A group effect of ``levels`` levels, centered or non-centered."""
    pm = _pm()
    sd = pm.HalfNormal(f"{name}_sd", sd_scale)
    if centered:
        return pm.Normal(name, 0.0, sd, shape=levels)
    return pm.Normal(f"{name}_z", 0.0, 1.0, shape=levels) * sd


def helmert(k: int) -> np.ndarray:
    """The ``(k - 1, k)`` Helmert basis: orthonormal rows orthogonal to the ones vector
    (the isometric log-ratio coordinates of a k-part simplex)."""
    h = np.zeros((k - 1, k))
    for i in range(1, k):
        h[i - 1, :i] = 1.0 / math.sqrt(i * (i + 1))
        h[i - 1, i] = -i / math.sqrt(i * (i + 1))
    return h


# --- hierarchical GLM -------------------------------------------------------------------


def draw_glm(rng, scale):
    groups = _draw_groups(rng, scale, 2)
    p = int(rng.integers(0, 7))
    return {**_draw_likelihood(rng), "n": size(rng, "rows", scale), "p": p, "groups": groups,
            "varying_slope": bool(p and groups and rng.integers(2)), "shared_data": bool(rng.integers(2))}


def build_glm(params, rng, name):
    pm, pt = _pm(), _pt()
    n, p, link = params["n"], params["p"], params["link"]
    X = rng.normal(size=(n, p))
    eta = gf.TRUE_INTERCEPT[link] + X @ rng.normal(0.0, 0.3, p)
    idxs = []
    for g in params["groups"]:
        idx = rng.integers(0, g["levels"], n)
        eta = eta + rng.normal(0.0, 0.4, g["levels"])[idx]
        idxs.append(idx)
    y, const = gf.simulate(rng, params["family"], link, eta)
    shared = params["shared_data"]
    mu = pm.Normal(f"{name}_a", 0.0, 2.0)
    if p:
        mu = mu + pt.dot(_data(f"{name}_X", X, shared), pm.Normal(f"{name}_beta", 0.0, 1.0, shape=p))
    for j, (g, idx) in enumerate(zip(params["groups"], idxs, strict=True)):
        index = _data(f"{name}_idx{j}", idx, shared)
        mu = mu + _hierarchical(f"{name}_g{j}", g["levels"], g["centered"])[index]
        if j == 0 and params["varying_slope"]:
            slope = _hierarchical(f"{name}_slope", g["levels"], g["centered"], 0.5)
            mu = mu + slope[index] * X[:, 0]
    gf.observe(f"{name}_y", params["family"], gf.LINKS[link].tensor(mu), y, const)


# --- gathers by two index vectors from a tiled, broadcast or stacked matrix -------------


def draw_gather2(rng, scale):
    style = pick(rng, ("tile", "broadcast", "stacked"))
    rows = size(rng, "levels", "small" if style == "stacked" else scale)
    return {**_draw_likelihood(rng), "style": style, "rows": rows, "cols": size(rng, "levels", scale),
            "n": size(rng, "rows", scale), "row_effect": style != "tile" or bool(rng.integers(2))}


def build_gather2(params, rng, name):
    """``M = tile(alpha[None, :], (rows, 1)) [+ beta[:, None]]`` (or the broadcast sum, or
    a stack of per-row vectors), then ``y ~ family(link(M[row_idx, col_idx]))``."""
    pm, pt = _pm(), _pt()
    rows, cols, n, link = params["rows"], params["cols"], params["n"], params["link"]
    r_idx, c_idx = rng.integers(0, rows, n), rng.integers(0, cols, n)
    eta = gf.TRUE_INTERCEPT[link] + rng.normal(0.0, 0.4, cols)[c_idx]
    if params["row_effect"]:
        eta = eta + rng.normal(0.0, 0.3, rows)[r_idx]
    y, const = gf.simulate(rng, params["family"], link, eta)
    mu_a = pm.Normal(f"{name}_mu_alpha", 0.0, 2.0)
    alpha = mu_a + _hierarchical(f"{name}_alpha", cols, False)
    beta = pm.Normal(f"{name}_beta", 0.0, 1.0, shape=rows) if params["row_effect"] else None
    if params["style"] == "tile":
        M = pt.tile(alpha[None, :], (rows, 1))
        M = M + beta[:, None] if beta is not None else M
    elif params["style"] == "broadcast":
        M = alpha[None, :] + beta[:, None]
    else:
        M = pt.stack([alpha + beta[r] for r in range(rows)])
    gf.observe(f"{name}_y", params["family"], gf.LINKS[link].tensor(M[r_idx, c_idx]), y, const)


# --- set_subtensor / inc_subtensor assembly ---------------------------------------------


def _reference_category(params, rng, name):
    """A multinomial logit, category 0 the reference: its coefficients set to 0."""
    pm, pt = _pm(), _pt()
    n, k, p = params["n"], params["categories"], params["p"]
    X = rng.normal(size=(n, p))
    B = np.concatenate([np.zeros((p, 1)), rng.normal(0.0, 0.7, (p, k - 1))], axis=1)
    logits = X @ B
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    cum = np.cumsum(probs / probs.sum(axis=1, keepdims=True), axis=1)
    y = np.minimum((rng.uniform(size=(n, 1)) > cum).sum(axis=1), k - 1)
    a = pt.set_subtensor(pt.zeros(k)[1:], pm.Normal(f"{name}_a", 0.0, 2.0, shape=k - 1))
    B_free = pm.Normal(f"{name}_B", 0.0, 1.0, shape=(p, k - 1))
    Bt = pt.set_subtensor(pt.zeros((p, k))[:, 1:], B_free)
    pm.Categorical(f"{name}_y", logit_p=a + pt.dot(X, Bt), observed=y)


def _cholesky(params, rng, name):
    """A Cholesky factor assembled from its strict lower triangle and its log diagonal."""
    pm, pt = _pm(), _pt()
    n, d = params["n"], params["dim"]
    rows, cols = np.tril_indices(d, -1)
    L_true = np.tril(rng.normal(0.0, 0.4, (d, d)), -1) + np.diag(np.exp(rng.normal(0.0, 0.3, d)))
    y = rng.normal(size=(n, d)) @ L_true.T + rng.normal(0.0, 1.0, d)
    L = pt.set_subtensor(pt.zeros((d, d))[rows, cols], pm.Normal(f"{name}_offdiag", 0.0, 1.0, shape=len(rows)))
    L = pt.inc_subtensor(L[np.arange(d), np.arange(d)], pt.exp(pm.Normal(f"{name}_logdiag", 0.0, 1.0, shape=d)))
    pm.MvNormal(f"{name}_y", mu=pm.Normal(f"{name}_mu", 0.0, 2.0, shape=d), chol=L, observed=y)


def _impute(params, rng, name):
    """A covariate with missing entries: ``set_subtensor`` puts free variables in the gaps."""
    pm, pt = _pm(), _pt()
    n, p, link = params["n"], params["p"], params["link"]
    X = rng.normal(size=(n, p))
    y, const = gf.simulate(rng, params["family"], link, gf.TRUE_INTERCEPT[link] + X @ rng.normal(0.0, 0.3, p))
    missing = np.flatnonzero(rng.uniform(size=n) < params["missing"])
    missing = missing if missing.size else np.array([0])
    X_obs = X.copy()
    X_obs[missing, 0] = 0.0
    x_missing = pm.Normal(f"{name}_x_missing", 0.0, 1.0, shape=missing.size)
    X_full = pt.set_subtensor(pt.as_tensor_variable(X_obs)[missing, 0], x_missing)
    x_mu, x_sd = pm.Normal(f"{name}_x_mu", 0.0, 1.0), pm.HalfNormal(f"{name}_x_sd", 1.0)
    pm.Potential(f"{name}_x_model", pm.logp(pm.Normal.dist(x_mu, x_sd), X_full[:, 0]).sum())
    eta = pm.Normal(f"{name}_a", 0.0, 2.0) + pt.dot(X_full, pm.Normal(f"{name}_beta", 0.0, 1.0, shape=p))
    gf.observe(f"{name}_y", params["family"], gf.LINKS[link].tensor(eta), y, const)


def _scatter_add(params, rng, name):
    """Group totals scattered from rows by ``inc_subtensor`` (repeated indices)."""
    pm, pt = _pm(), _pt()
    n, g, link = params["n"], params["groups"], params["link"]
    idx = rng.integers(0, g, n)
    x = rng.normal(size=n)
    rate = gf.LINKS[link].numpy(rng.normal(0.0, 0.2) + 0.3 * x) / max(1.0, n / g)
    totals = np.zeros(g)
    np.add.at(totals, idx, rate)
    y, const = gf.FAMILIES[params["family"]].simulate(rng, totals + 1e-3)
    a, b = pm.Normal(f"{name}_a", 0.0, 1.0), pm.Normal(f"{name}_b", 0.0, 1.0)
    per_row = gf.LINKS[link].tensor(a + b * x) / max(1.0, n / g)
    total = pt.inc_subtensor(pt.zeros(g)[idx], per_row) + 1e-3
    gf.observe(f"{name}_y", params["family"], total, y, const)


ASSEMBLY_VARIANTS = {"reference_category": _reference_category, "cholesky": _cholesky, "impute": _impute,
                     "scatter_add": _scatter_add}


def draw_assembly(rng, scale):
    variant = pick(rng, tuple(ASSEMBLY_VARIANTS))
    out = {"variant": variant, "n": size(rng, "rows", scale)}
    if variant == "reference_category":
        out.update(categories=int(rng.integers(3, 9)), p=int(rng.integers(1, 6)))
    elif variant == "cholesky":
        out.update(dim=int(rng.integers(2, 7)))
    elif variant == "impute":
        out.update(_draw_likelihood(rng), p=int(rng.integers(1, 5)), missing=float(rng.uniform(0.05, 0.3)))
    else:
        out.update(_draw_likelihood(rng, "positive"), groups=size(rng, "levels", scale))
    return out


def build_assembly(params, rng, name):
    ASSEMBLY_VARIANTS[params["variant"]](params, rng, name)


# --- mixtures and logsumexp -------------------------------------------------------------


def _component_means(rng, family: str, k: int) -> np.ndarray:
    domain = gf.FAMILIES[family].domain
    if domain == "real":
        return np.linspace(-3.0, 3.0, k)
    if domain == "unit":
        return np.linspace(0.2, 0.8, k)
    return np.geomspace(1.0, 12.0, k)


def _component_prior(name: str, family: str, k: int):
    """Ordered component means in ``family``'s domain (ordered: the labels are identified)."""
    pm, pt = _pm(), _pt()
    domain = gf.FAMILIES[family].domain
    init = {"real": np.linspace(-1.0, 1.0, k), "unit": np.linspace(-1.0, 1.0, k),
            "positive": np.linspace(0.0, 1.5, k)}[domain]
    loc = pm.Normal(f"{name}_loc", 0.0, 3.0, shape=k, transform=pm.distributions.transforms.ordered, initval=init)
    return {"real": lambda v: v, "unit": pt.sigmoid, "positive": pt.exp}[domain](loc)


def _simulate_mixture(rng, family: str, n: int, k: int):
    weights = rng.dirichlet(np.full(k, 5.0))
    z = rng.choice(k, size=n, p=weights)
    return gf.FAMILIES[family].simulate(rng, _component_means(rng, family, k)[z])


def _mixture_likelihood(name: str, how: str, w, comps, y) -> None:
    """``y`` under the mixture of ``comps`` (a batch of components) with weights ``w``: by
    ``pm.Mixture``, or by hand, ``logsumexp(log(w) + logp(comps, y[:, None]), axis=1)``."""
    pm, pt = _pm(), _pt()
    if how == "mixture":
        pm.Mixture(f"{name}_y", w=w, comp_dists=comps, observed=y)
    else:
        logp = pm.logp(comps, pt.as_tensor_variable(y)[:, None])
        pm.Potential(f"{name}_y", pm.math.logsumexp(pt.log(w) + logp, axis=1).sum())


def _normal_mixture(params, rng, name):
    pm = _pm()
    k = params["components"]
    y, _ = _simulate_mixture(rng, "normal", params["n"], k)
    pm.NormalMixture(f"{name}_y", w=pm.Dirichlet(f"{name}_w", a=np.ones(k)), mu=_component_prior(name, "normal", k),
                     sigma=pm.HalfNormal(f"{name}_sigma", 2.0, shape=k), observed=y)


def _family_mixture(params, rng, name):
    pm, family, k = _pm(), params["family"], params["components"]
    y, const = _simulate_mixture(rng, family, params["n"], k)
    w = pm.Dirichlet(f"{name}_w", a=np.ones(k))
    comps = gf.family_dist(f"{name}_comp", family, _component_prior(name, family, k), const)
    _mixture_likelihood(name, params["variant"], w, comps, y)


def _zero_inflated(params, rng, name):
    pm, pt = _pm(), _pt()
    n, p = params["n"], params["p"]
    X = rng.normal(size=(n, p))
    y, _ = gf.FAMILIES[params["family"]].simulate(rng, np.exp(1.0 + X @ rng.normal(0.0, 0.3, p)))
    y = np.where(rng.uniform(size=n) < 0.3, 0, y)
    eta = pm.Normal(f"{name}_a", 0.0, 2.0) + (pt.dot(X, pm.Normal(f"{name}_beta", 0.0, 1.0, shape=p)) if p else 0.0)
    psi = pm.Beta(f"{name}_psi", 2.0, 2.0)
    if params["family"] == "poisson":
        pm.ZeroInflatedPoisson(f"{name}_y", psi=psi, mu=pt.exp(eta), observed=y)
    else:
        pm.ZeroInflatedNegativeBinomial(f"{name}_y", psi=psi, mu=pt.exp(eta),
                                        alpha=pm.Gamma(f"{name}_alpha", 2.0, 0.5), observed=y)


MIXTURE_VARIANTS = {"normal_mixture": _normal_mixture, "mixture": _family_mixture, "logsumexp": _family_mixture,
                    "zero_inflated": _zero_inflated}


def draw_mixture(rng, scale):
    variant = pick(rng, tuple(MIXTURE_VARIANTS))
    out = {"variant": variant, "n": size(rng, "rows", scale), "components": int(rng.integers(2, 6))}
    if variant in ("mixture", "logsumexp"):
        out["family"] = pick(rng, gf.families_of(mixable=True))
    elif variant == "zero_inflated":
        out.update(family=pick(rng, ("poisson", "negbinomial")), p=int(rng.integers(0, 4)), components=2)
    return out


def build_mixture(params, rng, name):
    MIXTURE_VARIANTS[params["variant"]](params, rng, name)


# --- simplexes: stick-breaking, ILR + softmax -------------------------------------------


def draw_stick_breaking(rng, scale):
    return {"truncation": int(rng.integers(4, 21)), "n": size(rng, "rows", scale),
            "family": pick(rng, ("normal", "poisson", "studentt")),
            "likelihood": pick(rng, ("mixture", "logsumexp"))}


def build_stick_breaking(params, rng, name):
    """A truncated Dirichlet process mixture: ``w = v * concatenate([[1], cumprod(1 - v)[:-1]])``,
    the last stick taking the rest (``v[-1] = 1``) so the weights sum to 1 (PyMC's
    mixtures check it)."""
    pm, pt = _pm(), _pt()
    k, family = params["truncation"], params["family"]
    y, const = _simulate_mixture(rng, family, params["n"], min(k, 4))
    v = pm.Beta(f"{name}_v", 1.0, pm.Gamma(f"{name}_concentration", 1.0, 1.0), shape=k - 1)
    w = pt.concatenate([v, pt.ones(1)]) * pt.concatenate([pt.ones(1), pt.cumprod(1.0 - v)])
    comps = gf.family_dist(f"{name}_comp", family, _component_prior(name, family, k), const)
    _mixture_likelihood(name, params["likelihood"], w, comps, y)


def draw_ilr_softmax(rng, scale):
    variant = pick(rng, ("lda", "multinomial"))
    if variant == "lda":
        return {"variant": variant, "topics": int(rng.integers(2, 7)), "docs": size(rng, "levels", scale),
                "vocabulary": size(rng, "levels", scale) + 5, "n": size(rng, "rows", scale)}
    return {"variant": variant, "categories": int(rng.integers(3, 9)), "groups": size(rng, "levels", scale)}


def build_ilr_softmax(params, rng, name):
    """Simplexes as ``softmax(z @ helmert)``: an LDA (``log(sum_k theta[doc, k] *
    phi[k, word])``, gathers by two integer vectors) or grouped multinomial counts."""
    pm, pt = _pm(), _pt()
    softmax = pt.special.softmax
    if params["variant"] == "lda":
        k, d, v, n = params["topics"], params["docs"], params["vocabulary"], params["n"]
        theta_true = rng.dirichlet(np.ones(k), d)
        phi_true = rng.dirichlet(np.full(v, 0.3), k)
        doc = rng.integers(0, d, n)
        topic = (rng.uniform(size=(n, 1)) > np.cumsum(theta_true[doc], axis=1)).sum(axis=1).clip(0, k - 1)
        word = (rng.uniform(size=(n, 1)) > np.cumsum(phi_true[topic], axis=1)).sum(axis=1).clip(0, v - 1)
        theta = softmax(pt.dot(pm.Normal(f"{name}_theta_ilr", 0.0, 1.0, shape=(d, k - 1)), helmert(k)), axis=-1)
        phi = softmax(pt.dot(pm.Normal(f"{name}_phi_ilr", 0.0, 1.0, shape=(k, v - 1)), helmert(v)), axis=-1)
        pm.Potential(f"{name}_words", pt.log(pt.sum(theta[doc] * phi[:, word].T, axis=1)).sum())
        return
    k, g = params["categories"], params["groups"]
    trials = rng.integers(5, 200, g)
    counts = np.stack([rng.multinomial(t, p) for t, p in zip(trials, rng.dirichlet(np.full(k, 2.0), g), strict=True)])
    mu = pm.Normal(f"{name}_mu", 0.0, 1.0, shape=k - 1)
    z = mu + pm.HalfNormal(f"{name}_sd", 1.0) * pm.Normal(f"{name}_z", 0.0, 1.0, shape=(g, k - 1))
    pm.Multinomial(f"{name}_y", n=trials, p=softmax(pt.dot(z, helmert(k)), axis=-1), observed=counts)


# --- small Gaussian processes -----------------------------------------------------------


def draw_gp(rng, scale):
    variant = pick(rng, ("latent", "marginal"))
    out = {"variant": variant, "points": size(rng, "points", scale), "input_dim": int(rng.integers(1, 3)),
           "kernel": pick(rng, ("ExpQuad", "Matern52", "Matern32", "Exponential"))}
    if variant == "latent":
        out.update(_draw_likelihood(rng), repeats=int(rng.integers(1, 4)))
    return out


def build_gp(params, rng, name):
    """A latent GP (``f = cholesky(K) @ v``) under a random likelihood, or a marginal GP
    (an MvNormal with covariance ``K + sigma^2 I``)."""
    pm = _pm()
    m, dim = params["points"], params["input_dim"]
    X = rng.uniform(0.0, 10.0, (m, dim))
    f_true = np.sin(X).sum(axis=1)
    ls = pm.Gamma(f"{name}_ls", 2.0, 1.0)
    cov = pm.HalfNormal(f"{name}_eta", 1.0) ** 2 * getattr(pm.gp.cov, params["kernel"])(dim, ls=ls)
    if params["variant"] == "marginal":
        y = f_true + rng.normal(0.0, 0.3, m)
        gp = pm.gp.Marginal(cov_func=cov)
        gp.marginal_likelihood(f"{name}_y", X=X, y=y, sigma=pm.HalfNormal(f"{name}_sigma", 1.0))
        return
    link = params["link"]
    idx = np.repeat(np.arange(m), params["repeats"])
    y, const = gf.simulate(rng, params["family"], link, gf.TRUE_INTERCEPT[link] + 0.5 * f_true[idx])
    f = pm.gp.Latent(cov_func=cov).prior(f"{name}_f", X=X)
    mu = pm.Normal(f"{name}_a", 0.0, 2.0) + f[idx]
    gf.observe(f"{name}_y", params["family"], gf.LINKS[link].tensor(mu), y, const)


# --- Scan recurrences -------------------------------------------------------------------


def _scan(fn, **kwargs):
    import pytensor

    return pytensor.scan(fn, return_updates=False, **kwargs)


def _normal_logp(x, mu, sigma):
    pt = _pt()
    return -0.5 * ((x - mu) / sigma) ** 2 - pt.log(sigma) - 0.5 * LOG_2PI


def draw_hmm(rng, scale):
    return {"states": int(rng.integers(2, 5)), "steps": size(rng, "steps", scale),
            "emission": pick(rng, ("normal", "poisson"))}


def build_hmm(params, rng, name):
    """The forward algorithm: each step builds ``zeros(K)`` and fills it with
    ``set_subtensor`` per state k from a ``logsumexp`` over an accumulator filled by
    ``set_subtensor`` per previous state j, plus the emission at ``u[t]``."""
    pm, pt = _pm(), _pt()
    k, steps, emission = params["states"], params["steps"], params["emission"]
    trans = rng.dirichlet(np.ones(k) + 8.0 * np.eye(k)[0], k)
    trans = np.stack([np.roll(row, i) for i, row in enumerate(trans)])
    state = [int(rng.integers(k))]
    for _ in range(steps - 1):
        state.append(int(rng.choice(k, p=trans[state[-1]])))
    state = np.array(state)
    P = pm.Dirichlet(f"{name}_P", a=np.ones((k, k)) + 4.0 * np.eye(k))
    if emission == "normal":
        u = np.linspace(-2.0, 2.0, k)[state] + rng.normal(0.0, 0.5, steps)
        loc = pm.Normal(f"{name}_mu", 0.0, 3.0, shape=k, transform=pm.distributions.transforms.ordered,
                        initval=np.linspace(-1.0, 1.0, k))
        sigma = pm.HalfNormal(f"{name}_sigma", 1.0)

        def emit(u_t, j, loc, sigma):
            return _normal_logp(u_t, loc[j], sigma)
    else:
        u = rng.poisson(np.geomspace(1.0, 10.0, k)[state])
        loc = pm.Normal(f"{name}_log_rate", 0.0, 2.0, shape=k, transform=pm.distributions.transforms.ordered,
                        initval=np.linspace(0.0, 1.5, k))
        sigma = pt.as_tensor_variable(1.0)

        def emit(u_t, j, loc, sigma):
            return u_t * loc[j] - pt.exp(loc[j]) - pt.gammaln(u_t + 1.0)

    def step(u_t, alpha_prev, logP, loc, sigma):
        alpha = pt.zeros(k)
        for j in range(k):
            acc = pt.zeros(k)
            for i in range(k):
                acc = pt.set_subtensor(acc[i], alpha_prev[i] + logP[i, j])
            alpha = pt.set_subtensor(alpha[j], pm.math.logsumexp(acc) + emit(u_t, j, loc, sigma))
        return alpha

    u = pt.as_tensor_variable(u.astype("float64"))
    alpha0 = -math.log(k) + pt.stack([emit(u[0], j, loc, sigma) for j in range(k)])
    alphas = _scan(step, sequences=[u[1:]], outputs_info=[alpha0], non_sequences=[pt.log(P), loc, sigma])
    pm.Potential(f"{name}_forward", pm.math.logsumexp(alphas[-1]))


def draw_ar(rng, scale):
    return {"order": int(rng.integers(1, 4)), "steps": size(rng, "steps", scale),
            "variant": pick(rng, ("latent", "conditional")), "observation": pick(rng, ("normal", "poisson"))}


def build_ar(params, rng, name):
    """AR(p): a latent process ``x_t = sum_i rho_i x_{t-i} + sigma eps_t`` (non-centered
    innovations, observed with noise or as counts), or the conditional likelihood of an
    observed series (a scan over ``y`` with taps ``-p..0``)."""
    pm, pt = _pm(), _pt()
    p, steps = params["order"], params["steps"]
    rho_true = rng.uniform(-0.4, 0.4, p) / p
    x = np.zeros(steps + p)
    for t in range(p, steps + p):
        x[t] = rho_true @ x[t - p:t][::-1] + rng.normal(0.0, 0.5)
    x = x[p:]
    rho = pm.Normal(f"{name}_rho", 0.0, 0.3, shape=p)
    sigma = pm.HalfNormal(f"{name}_sigma", 1.0)
    if params["variant"] == "conditional":
        def cond(*args):
            past, y_t, (rho, sigma) = args[:p], args[p], args[p + 1:]
            mean = sum(rho[i] * past[p - 1 - i] for i in range(p))
            return _normal_logp(y_t, mean, sigma)

        y = pt.as_tensor_variable(x)
        lps = _scan(cond, sequences=[{"input": y, "taps": list(range(-p, 1))}], non_sequences=[rho, sigma])
        pm.Potential(f"{name}_y", lps.sum())
        return

    def latent(*args):
        eps_t, past, (rho, sigma) = args[0], args[1:p + 1], args[p + 1:]
        return sum(rho[i] * past[p - 1 - i] for i in range(p)) + sigma * eps_t

    eps = pm.Normal(f"{name}_eps", 0.0, 1.0, shape=steps)
    state = _scan(latent, sequences=[eps], outputs_info=[{"initial": pt.zeros(p), "taps": list(range(-p, 0))}],
                  non_sequences=[rho, sigma])
    if params["observation"] == "normal":
        pm.Normal(f"{name}_y", state, pm.HalfNormal(f"{name}_noise", 1.0), observed=x + rng.normal(0.0, 0.3, steps))
    else:
        pm.Poisson(f"{name}_y", pt.exp(pm.Normal(f"{name}_c", 1.0, 1.0) + state), observed=rng.poisson(np.exp(1.0 + x)))


def draw_garch(rng, scale):
    return {"steps": size(rng, "steps", scale) + 2, "innovation": pick(rng, ("normal", "studentt"))}


def build_garch(params, rng, name):
    """GARCH(1,1): ``s2_t = omega + alpha r_{t-1}^2 + beta s2_{t-1}`` by scan."""
    pm, pt = _pm(), _pt()
    steps = params["steps"]
    r, s2 = np.zeros(steps), 0.5
    for t in range(steps):
        s2 = 0.05 + 0.1 * (r[t - 1] ** 2 if t else 0.0) + 0.85 * s2
        r[t] = math.sqrt(s2) * rng.normal()
    omega = pm.HalfNormal(f"{name}_omega", 1.0)
    alpha = pm.Uniform(f"{name}_alpha", 0.0, 1.0)
    beta = pm.Uniform(f"{name}_beta", 0.0, 1.0 - alpha)
    s2_0 = pt.as_tensor_variable(float(np.var(r)))
    s2 = _scan(lambda r_prev, s2_prev, omega, alpha, beta: omega + alpha * r_prev**2 + beta * s2_prev,
               sequences=[pt.as_tensor_variable(r[:-1])], outputs_info=[s2_0], non_sequences=[omega, alpha, beta])
    if params["innovation"] == "normal":
        pm.Normal(f"{name}_r", 0.0, pt.sqrt(s2), observed=r[1:])
    else:
        pm.StudentT(f"{name}_r", nu=pm.Gamma(f"{name}_nu", 2.0, 0.1), mu=0.0, sigma=pt.sqrt(s2), observed=r[1:])


def draw_kalman(rng, scale):
    return {"state": pick(rng, ("local_level", "local_linear_trend", "ar2")), "steps": size(rng, "steps", scale)}


def build_kalman(params, rng, name):
    """A Kalman filter's prediction-error likelihood by scan: state ``a``, covariance ``P``,
    innovation ``v = y_t - a[0]``, ``F = P[0, 0] + H``."""
    pm, pt = _pm(), _pt()
    steps, state = params["steps"], params["state"]
    m = 1 if state == "local_level" else 2
    if state == "local_level":
        level = np.cumsum(rng.normal(0.0, 0.3, steps))
    elif state == "local_linear_trend":
        level = np.cumsum(np.cumsum(rng.normal(0.0, 0.05, steps)) + rng.normal(0.0, 0.3, steps))
    else:
        level = np.zeros(steps)
        for t in range(2, steps):
            level[t] = 0.5 * level[t - 1] - 0.2 * level[t - 2] + rng.normal(0.0, 0.5)
    y = level + rng.normal(0.0, 0.5, steps)
    sigma_obs = pm.HalfNormal(f"{name}_sigma_obs", 1.0)
    sigma_state = pm.HalfNormal(f"{name}_sigma_state", 1.0, shape=m)
    if state == "local_level":
        T = pt.ones((1, 1))
    elif state == "local_linear_trend":
        T = pt.as_tensor_variable(np.array([[1.0, 1.0], [0.0, 1.0]]))
    else:
        rho = pm.Normal(f"{name}_rho", 0.0, 0.5, shape=2)
        T = pt.set_subtensor(pt.as_tensor_variable(np.array([[0.0, 0.0], [1.0, 0.0]]))[0], rho)
    Q = pt.diag(sigma_state**2)
    H = sigma_obs**2

    def step(y_t, a, P, T, Q, H):
        v = y_t - a[0]
        F = P[0, 0] + H
        gain = pt.dot(T, P[:, 0]) / F
        a_next = pt.dot(T, a) + gain * v
        P_next = pt.dot(pt.dot(T, P), T.T) - pt.outer(gain, gain) * F + Q
        return a_next, P_next, -0.5 * (LOG_2PI + pt.log(F) + v**2 / F)

    a0 = pt.as_tensor_variable(np.r_[y[0], np.zeros(m - 1)])
    P0 = pt.as_tensor_variable(np.eye(m) * 10.0)
    _, _, ll = _scan(step, sequences=[pt.as_tensor_variable(y)], outputs_info=[a0, P0, None],
                     non_sequences=[T, Q, H])
    pm.Potential(f"{name}_y", ll.sum())


# --- the table --------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    draw: Callable  # (rng, scale) -> params
    build: Callable  # (params, rng, name) -> None, inside a pm.Model
    what: str


PIECES: dict[str, Piece] = {
    "glm": Piece(draw_glm, build_glm, "hierarchical GLM: random likelihood and link, 0-2 grouping factors "
                 "(gathers by one index vector), centered or not, optional varying slope"),
    "gather2": Piece(draw_gather2, build_gather2, "a tiled, broadcast or stacked parameter matrix "
                     "gathered by two integer index vectors, random likelihood and link"),
    "assembly": Piece(draw_assembly, build_assembly, "set_subtensor/inc_subtensor assembly: reference-category "
                      "multinomial logit, Cholesky factor, imputed covariate, scatter-added group totals"),
    "mixture": Piece(draw_mixture, build_mixture, "finite mixtures: NormalMixture, Mixture of a random family, "
                     "logsumexp by hand, zero-inflated counts"),
    "stick_breaking": Piece(draw_stick_breaking, build_stick_breaking, "truncated Dirichlet process mixture "
                            "(stick-breaking weights, cumprod)"),
    "ilr_softmax": Piece(draw_ilr_softmax, build_ilr_softmax, "simplexes as softmax(z @ Helmert): LDA "
                         "with two index gathers, grouped multinomial counts"),
    "gp": Piece(draw_gp, build_gp, "small latent or marginal GP (Cholesky), random kernel"),
    "hmm": Piece(draw_hmm, build_hmm, "HMM forward algorithm by Scan (set_subtensor per state, logsumexp)"),
    "ar": Piece(draw_ar, build_ar, "AR(p) by Scan: latent process or conditional likelihood"),
    "garch": Piece(draw_garch, build_garch, "GARCH(1,1) variance recursion by Scan"),
    "kalman": Piece(draw_kalman, build_kalman, "Kalman filter likelihood by Scan (local level, trend, AR(2))"),
}
