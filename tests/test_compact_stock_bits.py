"""With every compact op's digest deliberately wrong (as on a PyTensor whose stock source
differs from every recorded one), a model's logp and gradient compile through stock's
functions and give stock's bits: the backend is stock numba with fast math, the compact ops'
swap registered (`passes.swap_compact`), against stock numba with fast math.

The models are a handful of the standard set (`tools.models`: a design matrix, a mixture, a
multinomial logit) and three that reach the rows those do not (an LKJ prior and a
multivariate normal, a Gaussian process's covariance, data of unknown shape): together
Dot, Cholesky, SolveTriangular, Subtensor, IncSubtensor, AdvancedSubtensor and
AdvancedIncSubtensor, Join and Split, Reshape, DimShuffle, Alloc, CumOp, ExtractDiag,
SpecifyShape, Shape_i and the scalarized ops. With the records as they are, the same
backend swaps those rows in (the control) and gives the same bits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode

from conftest import assert_same_bits
from ptnumba_codegen.compact.ops import row_of
from ptnumba_codegen.compact.replica import SUPPORTED_PYTENSOR
from ptnumba_codegen.compact.table import COMPACT, rows_off
from ptnumba_codegen.passes.swap_compact import POSITION, SwapCompact
from ptnumba_codegen.tools import modelbench as mb
from ptnumba_codegen.tools import models as catalogue

pytestmark = pytest.mark.skipif(not catalogue.pymc_available(), reason="pymc is not installed")
N = 40
SEED = catalogue.DEFAULT_SEED
WRONG = "0" * 16  # no PyTensor's source has this digest


def lkj_mvnormal(n: int, seed: int):
    import pymc as pm

    rng = np.random.default_rng(seed)
    with pm.Model() as model:
        chol, _, _ = pm.LKJCholeskyCov("chol", n=3, eta=2.0, sd_dist=pm.Exponential.dist(1.0), compute_corr=True)
        mu = pm.Normal("mu", 0.0, 1.0, shape=3)
        pm.MvNormal("y", mu=mu, chol=chol, observed=rng.normal(size=(n, 3)))
    return model


def gp_mvnormal(n: int, seed: int):
    import pymc as pm

    rng = np.random.default_rng(seed)
    x = np.linspace(0.0, 1.0, n)[:, None]
    with pm.Model() as model:
        ls = pm.Gamma("ls", 2.0, 4.0)
        eta = pm.HalfNormal("eta", 1.0)
        cov = eta**2 * pm.gp.cov.ExpQuad(1, ls)(x) + 1e-3 * pt.eye(n)
        pm.MvNormal("y", mu=0.0, cov=cov, observed=rng.normal(size=n))
    return model


def data_regression(n: int, seed: int):
    import pymc as pm

    rng = np.random.default_rng(seed)
    with pm.Model() as model:
        x = pm.Data("x", rng.normal(size=(n, 3)))
        y = pm.Data("y", rng.normal(size=n))
        beta = pm.Normal("beta", 0.0, 1.0, shape=3)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("obs", x @ beta, sigma, observed=y, shape=x.shape[0])
    return model


MODELS = {
    "logistic_regression": catalogue.MODELS["logistic_regression"],
    "normal_mixture": catalogue.MODELS["normal_mixture"],
    "multinomial_logit": catalogue.MODELS["multinomial_logit"],
    "lkj_mvnormal": lkj_mvnormal,
    "gp_mvnormal": gp_mvnormal,
    "data_regression": data_regression,
}
# model -> rows whose compact op the swap puts in its graph (where the installed PyTensor has them on)
REACHED = {
    "logistic_regression": {"Dot", "DimShuffle", "Subtensor", "ScalarSubtensor", "ScalarizedJoin", "ScalarFromTensor",
                            "TensorFromScalar"},
    "normal_mixture": {"CumOp", "DimShuffle", "Subtensor", "IncSubtensor", "Join", "Split", "Alloc"},
    "multinomial_logit": {"Dot", "Reshape", "Alloc", "Join"},
    "lkj_mvnormal": {"SolveTriangular", "AdvancedSubtensor", "AdvancedIncSubtensor", "CumOp", "IncSubtensor"},
    "gp_mvnormal": {"Cholesky", "SolveTriangular", "ExtractDiag", "AdvancedIncSubtensor"},
    "data_regression": {"SpecifyShape", "Shape_i", "Dot"},
}

STOCK_FAST = Mode(linker="numba", optimizer="fast_run")
SWAPPING = Mode(linker="numba", optimizer="fast_run").register((SwapCompact(), POSITION))


def _compile(name: str, mode):
    model = MODELS[name](N, SEED)
    point = mb.evaluation_point(model, SEED)
    with pytensor.config.change_flags(numba__fastmath=True):
        fn = model.logp_dlogp_function(ravel_inputs=True, mode=mode)._pytensor_function
        logp, dlogp = fn(point)
    return fn, np.asarray(logp), np.asarray(dlogp)


_STOCK: dict = {}


def _stock(name: str):
    if name not in _STOCK:
        _STOCK[name] = _compile(name, STOCK_FAST)
    return _STOCK[name]


def _rows(fn) -> set:
    """The rows whose compact op the function's graph (inner graphs included) holds."""
    found = set()
    for node in fn.maker.fgraph.apply_nodes:
        for inner in [node, *getattr(getattr(node.op, "fgraph", None), "apply_nodes", ())]:
            row = row_of(type(inner.op))
            if row is not None:
                found.add(row.name)
    return found


@pytest.fixture
def every_digest_wrong(monkeypatch):
    for name, replica in list(COMPACT.items()):
        wrong = dataclasses.replace(replica.source, digests={WRONG: SUPPORTED_PYTENSOR}, elsewhere={})
        monkeypatch.setitem(COMPACT, name, dataclasses.replace(replica, source=wrong))
    assert set(rows_off()) == set(COMPACT)


@pytest.mark.parametrize("name", list(MODELS))
def test_every_digest_wrong_compiles_stocks_functions_with_stocks_bits(every_digest_wrong, name):
    fn, logp, dlogp = _compile(name, SWAPPING)
    assert _rows(fn) == set()
    _stock_fn, want_logp, want_dlogp = _stock(name)
    assert np.isfinite(want_logp) and np.all(np.isfinite(want_dlogp))
    assert_same_bits(logp, want_logp)
    assert_same_bits(dlogp, want_dlogp)


@pytest.mark.parametrize("name", list(MODELS))
def test_the_records_as_they_are_swap_the_rows_in_with_stocks_bits(name):
    """The control: the same backend, the records as they are."""
    fn, logp, dlogp = _compile(name, SWAPPING)
    assert REACHED[name] - set(rows_off()) <= _rows(fn), sorted(REACHED[name] - set(rows_off()) - _rows(fn))
    _stock_fn, want_logp, want_dlogp = _stock(name)
    assert_same_bits(logp, want_logp)
    assert_same_bits(dlogp, want_dlogp)
