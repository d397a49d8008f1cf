"""Small Scan workloads modelled on published models: a logp and its gradient, as a sampler
calls them (one function, float64 parameters in, logp and gradient out).

``hmm``     hidden-Markov forward algorithm: K states, T Gaussian observations, the
            recursion ``alpha_t = logsumexp(alpha_{t-1}[:, None] + logA, 0) + logB_t``
``garch``   GARCH(1,1) volatility recursion ``s2_t = omega + a r_{t-1}^2 + b s2_{t-1}``
            and a Gaussian likelihood of the returns
``step_arith``, ``step_exp``  one small elementwise kernel per step (3 elements, 1000
            steps): what a kernel call costs inside a Scan
``lv``      Lotka-Volterra by forward Euler (2 states, many small steps), squared error to
            observations every ``stride`` steps (the catalogue's
            ``ode_lotka_volterra_pytensor_scan`` has the same loop)

Every workload builds a fresh graph (``build() -> (inputs, outputs)``) and makes its input
parameter values from a fixed seed (``make_inputs()``; the data are constants of the
graph, as in a PyMC model). Used by ``benchmarks/bench_scan.py``,
``python -m ptnumba_codegen.tools.scan_bench`` and the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

SEED = 20261202


@dataclass(frozen=True)
class ScanWorkload:
    key: str
    label: str
    build: Callable[[], tuple[list, list]] = field(repr=False)
    make_inputs: Callable[[], list] = field(repr=False)


def _hmm_data(K, T):
    rng = np.random.default_rng(SEED)
    states = rng.integers(0, K, size=T)
    y = np.linspace(-2.0, 2.0, K)[states] + 0.5 * rng.standard_normal(T)
    return y, 0.3 * rng.standard_normal((K, K)) + 2.0 * np.eye(K)


def _hmm(K: int = 3, T: int = 200):
    def build():
        import pytensor
        import pytensor.tensor as pt

        logits = pt.matrix("trans_logits")  # K x K
        mu = pt.vector("mu")  # K
        log_sigma = pt.scalar("log_sigma")
        y = pt.constant(_hmm_data(K, T)[0], name="y")  # T observations (data)
        logA = pt.special.log_softmax(logits, axis=1)
        sigma = pt.exp(log_sigma)
        z = (y[:, None] - mu[None, :]) / sigma
        logB = -0.5 * z**2 - log_sigma - 0.9189385332046727  # T x K

        def step(lb, alpha, logA):
            return pt.logsumexp(alpha[:, None] + logA, axis=0) + lb

        alpha0 = logB[0] - np.log(K)
        alphas = pytensor.scan(
            step, sequences=[logB[1:]], outputs_info=[alpha0], non_sequences=[logA], return_updates=False
        )
        logp = pt.logsumexp(alphas[-1]) - 0.5 * (mu**2).sum() - 0.5 * (logits**2).sum()
        grads = pytensor.grad(logp, [logits, mu, log_sigma])
        return [logits, mu, log_sigma], [logp, *grads]

    def make_inputs():
        logits = _hmm_data(K, T)[1]
        return [logits, np.linspace(-1.5, 1.5, K), np.array(np.log(0.7))]

    return build, make_inputs


def _garch_data(T):
    rng = np.random.default_rng(SEED)
    omega, a, b = 0.05, 0.1, 0.85
    s2, r = omega / (1 - a - b), np.empty(T)
    for t in range(T):
        r[t] = np.sqrt(s2) * rng.standard_normal()
        s2 = omega + a * r[t] ** 2 + b * s2
    return r


def _garch(T: int = 500):
    def build():
        import pytensor
        import pytensor.tensor as pt

        log_omega, logit_a, logit_b = pt.scalars("log_omega", "logit_a", "logit_b")
        r = pt.constant(_garch_data(T), name="r")  # T returns (data)
        omega = pt.exp(log_omega)
        a = pt.sigmoid(logit_a)
        b = (1 - a) * pt.sigmoid(logit_b)  # a + b < 1

        def step(r_prev, s2_prev, omega, a, b):
            return omega + a * r_prev**2 + b * s2_prev

        s2_0 = omega / (1 - a - b)
        s2 = pytensor.scan(
            step, sequences=[r[:-1]], outputs_info=[s2_0], non_sequences=[omega, a, b], return_updates=False
        )
        rest = r[1:]
        logp = (-0.5 * (pt.log(s2) + rest**2 / s2)).sum() - 0.5 * (log_omega**2 + logit_a**2 + logit_b**2)
        grads = pytensor.grad(logp, [log_omega, logit_a, logit_b])
        return [log_omega, logit_a, logit_b], [logp, *grads]

    def make_inputs():
        return [np.array(np.log(0.05)), np.array(-2.0), np.array(2.5)]

    return build, make_inputs


def _lv_data(n_years, steps_per_year):
    rng, dt = np.random.default_rng(SEED), 1.0 / steps_per_year
    x, y = 34.0, 5.9
    obs = np.empty((n_years, 2))
    for t in range(n_years * steps_per_year):
        if t % steps_per_year == 0:
            obs[t // steps_per_year] = x, y
        x, y = x + (0.52 * x - 0.026 * x * y) * dt, y + (-0.84 * y + 0.026 * x * y) * dt
    return obs + rng.standard_normal(obs.shape)


def _lv(n_years: int = 21, steps_per_year: int = 100):
    dt = 1.0 / steps_per_year

    def build():
        import pytensor
        import pytensor.tensor as pt

        log_theta = pt.vector("log_theta")  # alpha, beta, gamma, delta, x0, y0
        obs = pt.constant(_lv_data(n_years, steps_per_year), name="obs")  # n_years x 2
        theta = pt.exp(log_theta)
        alpha, beta, gamma, delta, x0, y0 = (theta[i] for i in range(6))

        def step(x, y, alpha, beta, gamma, delta):
            x_new = x + (alpha * x - beta * x * y) * dt
            y_new = y + (-gamma * y + delta * x * y) * dt
            return x_new, y_new

        xs, ys = pytensor.scan(
            step,
            outputs_info=[x0, y0],
            non_sequences=[alpha, beta, gamma, delta],
            n_steps=n_years * steps_per_year,
            return_updates=False,
        )
        path = pt.stack([xs, ys], axis=1)[::steps_per_year]
        logp = -0.5 * ((path - obs) ** 2).sum() / 25.0
        grads = pytensor.grad(logp, [log_theta])
        return [log_theta], [logp, *grads]

    def make_inputs():
        return [np.log([0.5, 0.025, 0.85, 0.027, 33.0, 6.0])]

    return build, make_inputs


def _one_kernel(kind: str, K: int = 3, steps: int = 1000):
    """A Scan whose step is one small elementwise kernel: the per-step cost of a kernel call."""

    def build():
        import pytensor
        import pytensor.tensor as pt

        s0 = pt.vector("s0")

        def step(s):
            return s * 0.5 + 1.0 if kind == "arith" else pt.exp(s * 0.5) - 1.0

        out = pytensor.scan(step, outputs_info=[s0], n_steps=steps, return_updates=False)
        return [s0], [out[-1]]

    def make_inputs():
        return [np.zeros(K)]

    return build, make_inputs


def _make(key, label, factory, **kw):
    build, make_inputs = factory(**kw)
    return ScanWorkload(key, label, build, make_inputs)


WORKLOADS: dict[str, ScanWorkload] = {
    w.key: w
    for w in (
        _make("hmm", "HMM forward algorithm, K=3 states, T=200: logp + gradient", _hmm),
        _make("hmm_k8", "HMM forward algorithm, K=8 states, T=500: logp + gradient", _hmm, K=8, T=500),
        _make("garch", "GARCH(1,1), T=500: logp + gradient", _garch),
        _make("lv", "Lotka-Volterra, forward Euler, 2100 steps: logp + gradient", _lv),
        _make("step_arith", "one kernel per step, s * 0.5 + 1 on 3 elements, 1000 steps", _one_kernel, kind="arith"),
        _make("step_exp", "one kernel per step, exp(s * 0.5) - 1 on 3 elements, 1000 steps", _one_kernel, kind="exp"),
    )
}
