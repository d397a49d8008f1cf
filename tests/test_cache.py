"""Cache keys: policy digest and generator version are part of them, and a node is
cacheable whenever the stock backend would cache it."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
from pytensor.tensor.elemwise import Elemwise

import ptnumba_codegen
import ptnumba_codegen.backend.dispatch as dispatch
from conftest import policy_nodes
from test_seed_and_ir import BV, EXPECTED, WV, XV, YV, ZV, seed_graph


def keys_of(fn):
    return [numba_funcify_and_cache_key(n.op, node=n)[1] for n in policy_nodes(fn)]


def test_disk_cache_never_serves_a_kernel_compiled_under_another_policy(tmp_path, monkeypatch):
    # A fresh numba cache directory: the first compile writes, later ones would read.
    import pytensor.link.numba.cache as numba_cache

    monkeypatch.setattr(numba_cache, "NUMBA_CACHE_PATH", tmp_path)
    inputs, out = seed_graph()
    with pytensor.config.change_flags(numba__cache=True):
        results = {}
        for policy in ("default", "fast", "default", "strict", "fast"):
            fn = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode(policy))
            results.setdefault(policy, []).append(fn(XV, YV, ZV, WV, BV)[0])
    assert results["fast"] == [0.0, 0.0]
    assert results["default"] == pytest.approx([EXPECTED] * 2)
    assert results["strict"] == pytest.approx([EXPECTED])
    assert any(tmp_path.iterdir())  # the kernels really went through the disk cache


def test_keys_depend_on_policy_and_generator_version(monkeypatch):
    inputs, out = seed_graph()
    fns = {p: pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode(p)) for p in ("default", "fast")}
    again = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode("default"))
    assert keys_of(fns["default"]) == keys_of(again)  # deterministic: the disk cache hits
    assert keys_of(fns["default"]) != keys_of(fns["fast"])
    before = keys_of(again)
    monkeypatch.setattr(dispatch, "GENERATOR_VERSION", dispatch.GENERATOR_VERSION + 1)
    assert keys_of(again) != before


def test_key_is_never_none_where_stock_caches():
    x, y = pt.vectors("x", "y")
    i = pt.vector("i", dtype="int32")
    outs = [
        pt.exp(x) * y + 1.0,
        pt.i0(x) + y,  # a stock call inside: still cached
        pt.switch(x > y, pt.cast(i, "float64"), x),
        pt.erfcx(x),
    ]
    fn = pytensor.function([x, y, i], outs, mode=ptnumba_codegen.policy_mode("default"))
    for node in policy_nodes(fn):
        stock_op = Elemwise(node.op.scalar_op, node.op.inplace_pattern)
        stock_node = stock_op.make_node(*node.inputs)
        _, stock_key = numba_funcify_and_cache_key(stock_op, node=stock_node)
        _, key = numba_funcify_and_cache_key(node.op, node=node)
        assert (key is None) == (stock_key is None), node
    vals = [np.linspace(0.5, 2, 7), np.linspace(1, 2, 7), np.arange(7, dtype="int32")]
    assert all(np.all(np.isfinite(o)) for o in fn(*vals))
