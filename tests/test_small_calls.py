"""What a small logp+gradient call costs beside its math (CHANGELOG.md, "Where a small call
goes"): the policy's compiled function
has no more nodes and no more numba runtime allocations per call than stock's, and boxes
its two results without unpickling (`runtime.boxing`)."""

from __future__ import annotations

import numpy as np
import pytest
from numba.core.runtime import _nrt_python as nrt
from numba.core.runtime import rtsys

from ptnumba_codegen.runtime import boxing
from ptnumba_codegen.tools import modelbench as mb
from ptnumba_codegen.tools import models as catalogue
from test_boxing import _unpickles

needs_pymc = pytest.mark.skipif(not catalogue.pymc_available(), reason="pymc is not installed")


def _allocations_per_call(fn, point) -> int:
    fn(point)
    nrt.memsys_enable_stats()
    try:
        before = rtsys.get_allocation_stats().mi_alloc
        for _ in range(3):
            fn(point)
        return (rtsys.get_allocation_stats().mi_alloc - before) // 3
    finally:
        nrt.memsys_disable_stats()


@needs_pymc
@pytest.mark.parametrize("name", ["hierarchical_normal", "logistic_regression"])
def test_a_small_policy_call_has_no_more_nodes_or_allocations_than_stock(name):
    model = catalogue.MODELS[name](8)
    before = boxing.state()
    boxing.restore()  # stock compiled with numba's own boxing, whatever ran before in this process
    try:
        stock = mb.compile_model(model, "stock_fast", seed=0)
        policy = mb.compile_model(model, "policy_rewritten", seed=0)
    finally:
        if before is not None:
            boxing.configure()
    stock_fn, policy_fn = stock.fn.vm.jit_fn, policy.fn.vm.jit_fn
    assert len(policy.fn.maker.fgraph.apply_nodes) <= len(stock.fn.maker.fgraph.apply_nodes)
    assert _allocations_per_call(policy.fn, policy.point) <= _allocations_per_call(stock.fn, stock.point)
    # logp and its gradient: two arrays boxed, neither unpickles np.ndarray under the policy
    assert _unpickles(stock_fn) - _unpickles(policy_fn) == 2
    for a, b in zip(policy.fn(policy.point), stock.fn(stock.point), strict=True):
        assert type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-10)
