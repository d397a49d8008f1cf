"""nutpie under ``ptnumba_codegen.enable()``: ``nutpie.compile_pymc_model`` (which hardcodes
``mode="NUMBA"``) compiles policy kernels, samples, and the posterior agrees with stock.

The policy is ``rewritten`` (decisions from the rewritten graph) with ``[parallel] min_elements = 1``, the data 40,000 rows (two
reduction blocks at least), and OpenBLAS is limited to one thread (as ``examples/nutpie_logistic_regression.py`` does; kernels of a function
running ops on a multi-threaded BLAS pool never split): the small model's kernels split, so
nutpie's chain threads (which call the compiled logp without the GIL) run split kernels
concurrently. Skipped only when nutpie or PyMC is not installed
(``pip install -e ".[nutpie]"``; ``scripts/bootstrap.sh`` installs it).
"""

from __future__ import annotations

import importlib.util
import logging
import warnings
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

nutpie = pytest.importorskip("nutpie")
pytest.importorskip("pymc")

import ptnumba_codegen  # noqa: E402
from ptnumba_codegen.runtime.threads import chunk_launches  # noqa: E402
from ptnumba_codegen.backend.ops import is_policy_op  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# rows: full sums split in blocks of 16384 elements (lowering/chunks.py), so >= 2 blocks
ROWS, FEATURES, TUNE, DRAWS = 40_000, 3, 200, 200


def _example():
    spec = importlib.util.spec_from_file_location("nutpie_example", ROOT / "examples" / "nutpie_logistic_regression.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return _example()


@pytest.fixture(scope="module")
def model(example):
    X, y, _, _ = example.make_data(ROWS, FEATURES)
    return example.build_model(X, y)


def _sample(compiled):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nutpie.sample(compiled, chains=2, tune=TUNE, draws=DRAWS, seed=11, progress_bar=False)


@pytest.fixture
def one_blas_thread():
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def test_nutpie_samples_policy_kernels_with_the_stock_posterior(example, model, tmp_path, caplog, one_blas_thread):
    split = tmp_path / "split.toml"
    split.write_text('extends = "rewritten"\n[parallel]\nmin_elements = 1\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stock = nutpie.compile_pymc_model(model)
        with caplog.at_level(logging.INFO, logger="ptnumba_codegen"), ptnumba_codegen.enabled(split):
            policy = nutpie.compile_pymc_model(model)
    assert not ptnumba_codegen.is_enabled()

    stock_nodes = [n for n in stock.logp_func.maker.fgraph.apply_nodes if is_policy_op(n.op)]
    policy_nodes = [n for n in policy.logp_func.maker.fgraph.apply_nodes if is_policy_op(n.op)]
    assert not stock_nodes
    assert policy_nodes and {n.op.policy.name for n in policy_nodes} == {"split"}
    assert not any(ptnumba_codegen.fallback_reason(n) for n in policy_nodes)
    summaries = [r.getMessage() for r in caplog.records if r.name == "ptnumba_codegen"]
    assert any(m.startswith("policy split:") and "kernel(s) generated" in m for m in summaries), summaries
    assert "threads: split" in ptnumba_codegen.explain(policy.logp_func)

    # the compiled logp+grad agree at a point (the policy's flags only reorder roundoff)
    point = np.linspace(-0.5, 0.5, FEATURES + 1)
    for a, b in zip(stock.logp_func(point), policy.logp_func(point), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10)

    stock_post = example.summarize(_sample(stock))
    launches = chunk_launches()
    post = {"stock": stock_post, "policy": example.summarize(_sample(policy))}
    assert chunk_launches() > launches  # nutpie's threads ran split loops
    for name, s in post["stock"].items():
        p = post["policy"][name]
        assert np.isfinite(p["mean"]) and p["sd"] > 0, (name, p)
        # within Monte Carlo error: 5 combined standard errors
        assert abs(p["mean"] - s["mean"]) <= 5 * np.hypot(p["mcse"], s["mcse"]), (name, s, p)
