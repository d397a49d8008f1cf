"""scripts/node_times.py replays a compiled function node by node: what it times is what
the function computes (the graph's outputs bit for bit, an input a node destroys given
fresh to every call), for stock and the policy."""

import importlib.util
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from conftest import compile_fn

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "node_times.py"


def _script():
    spec = importlib.util.spec_from_file_location("node_times", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("backend", ["stock_fast", "policy_default"])
def test_the_replay_is_the_function(backend):
    x = pt.vector("x")
    idx = pt.vector("idx", dtype="int64")
    w = pytensor.shared(np.linspace(0.5, 1.5, 7), name="w")
    logp = (pt.log1p(pt.exp(x * w)) - x).sum()
    written = pt.inc_subtensor(pt.zeros(7)[idx], pt.exp(x[idx]))
    fn = compile_fn([x, idx], [logp, pytensor.grad(logp, x), written], backend, cache_key=f"node_times_{backend}")
    xv, iv = np.linspace(-2.0, 3.0, 7), np.array([0, 3, 3, 6])
    expected = fn(xv, iv)
    nt = _script()
    rows, whole, replayed = nt.node_times(fn, [xv, iv], rounds=1, budget=1e-3)
    nodes = fn.maker.fgraph.toposort()
    assert [r["index"] for r in rows] == list(range(len(nodes)))
    assert [r["op"] for r in rows] == [type(n.op).__name__ for n in nodes]
    assert all(r["seconds"] >= 0 for r in rows) and whole > 0
    assert any(getattr(n.op, "destroy_map", None) for n in nodes)  # a node that writes into an input
    for a, b in zip(expected, replayed, strict=True):
        np.testing.assert_array_equal(a, b)
    # the function's own storage holds the inputs again: a call after the replay is unchanged
    for a, b in zip(expected, fn(xv, iv), strict=True):
        np.testing.assert_array_equal(a, b)
