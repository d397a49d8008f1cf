"""A function's rewritten graph kept on disk (`passes.rewritten_graphs`): a later compile
of the same graph, in this process or the next, skips the rewrites and gets the same graph,
the same kernels and the same decisions; anything that could change the rewrites' result
is a miss."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
import pytensor.tensor as pt
import pytest
from pytensor.compile.io import In
from pytensor.graph.basic import equal_computations

import ptnumba_codegen
from ptnumba_codegen.passes import pass_errors, policy_codegen, rewritten_graphs
from ptnumba_codegen.settings import REWRITTEN_GRAPHS

from conftest import compile_fn, second_process_line


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """PyTensor's numba cache (and so the rewritten graphs, on in these tests although they
    patch) in a fresh directory."""
    monkeypatch.setattr(numba_cache, "NUMBA_CACHE_PATH", tmp_path)
    monkeypatch.setenv(REWRITTEN_GRAPHS.env, "on")
    with pytensor.config.change_flags(numba__cache=True):
        yield tmp_path


def seed_graph(dtype="float64", bound=None):
    """The seed thread's graph: the gradient of a clipped product, 0 or not at a tie."""
    x, y, z, w = (pt.vector(n, dtype=dtype) for n in "xyzw")
    b = pt.vector("b", dtype=dtype) if bound is None else pt.constant(np.asarray(bound, dtype=dtype))
    cost = pt.minimum(x * y * z * w, b).sum()
    inputs = [x, y, z, w] + ([b] if bound is None else [])
    return inputs, [cost, pytensor.grad(cost, x)]


def tie_inputs(n=64, seed=0):
    """Products equal to ``b`` as written (x*y*z*w in that order) and around it."""
    rng = np.random.default_rng(seed)
    x, y, z, w = (rng.uniform(0.5, 2.0, n) for _ in range(4))
    b = ((x * y) * z) * w
    b[::3] = np.nextafter(b[::3], 0)
    b[1::3] = np.nextafter(b[1::3], 10)
    return [x, y, z, w, b]


def compile_policy(inputs, outputs, policy="default", **kwargs):
    return pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode(policy), **kwargs)


def counts():
    return dict(rewritten_graphs.STATS)


def same_graph(f, g) -> bool:
    a, b = f.maker.fgraph, g.maker.fgraph
    return equal_computations(a.outputs, b.outputs, a.inputs, b.inputs)


def test_a_second_compile_reads_the_graph_and_decides_the_same(cache_dir):
    before = counts()
    cold = compile_policy(*seed_graph())
    assert counts()["stored"] == before["stored"] + 1
    warm = compile_policy(*seed_graph())
    assert counts()["hits"] == before["hits"] + 1
    assert same_graph(cold, warm)
    args = tie_inputs()
    ref = compile_fn(*seed_graph(), "unoptimized_strict", cache_key="rewritten_graphs_seed")(*args)
    for fn in (cold, warm):
        out = fn(*args)
        np.testing.assert_allclose(out[0], ref[0], rtol=1e-13)
        np.testing.assert_array_equal(out[1] == 0, ref[1] == 0)  # the decisions: the gradient's zero pattern
        np.testing.assert_allclose(out[1], ref[1], rtol=1e-13)
    assert all(np.array_equal(a, b) for a, b in zip(cold(*args), warm(*args), strict=True))


@pytest.mark.parametrize("variant", ["constant", "dtype", "policy", "mutable input", "rewrites"])
def test_what_could_change_the_rewrites_result_misses(cache_dir, variant):
    compile_policy(*seed_graph(bound=[1.0, 2.0]))
    before = counts()
    if variant == "constant":
        fn = compile_policy(*seed_graph(bound=[1.0, 3.0]))
    elif variant == "dtype":
        fn = compile_policy(*seed_graph(dtype="float32", bound=[1.0, 2.0]))
    elif variant == "policy":
        fn = compile_policy(*seed_graph(bound=[1.0, 2.0]), policy="strict")
    elif variant == "mutable input":
        inputs, outputs = seed_graph(bound=[1.0, 2.0])
        fn = compile_policy([In(inputs[0], mutable=True), *inputs[1:]], outputs)
    else:
        mode = ptnumba_codegen.policy_mode("default").excluding("fusion")
        fn = pytensor.function(*seed_graph(bound=[1.0, 2.0]), mode=mode)
    assert counts()["hits"] == before["hits"]
    assert counts()["stored"] == before["stored"] + 1
    dtype = "float32" if variant == "dtype" else "float64"
    x = np.linspace(0.5, 1.5, 2).astype(dtype)
    bound = [1.0, 3.0] if variant == "constant" else [1.0, 2.0]
    assert np.allclose(fn(x, x, x, x)[0], np.minimum(x**4, bound).sum())


def test_shared_variables_are_the_callers_own(cache_dir):
    """A hit puts the stored graph on this function's inputs: each function reads its own
    shared variable, and what is set after compiling."""
    x = pt.vector("x")
    first = pytensor.shared(np.array([1.0, 2.0]), name="s")
    second = pytensor.shared(np.array([10.0, 20.0]), name="s")
    f = compile_policy([x], pt.minimum(x * first, 5.0).sum())
    before = counts()
    g = compile_policy([x], pt.minimum(x * second, 5.0).sum())
    assert counts()["hits"] == before["hits"] + 1
    ones = np.ones(2)
    assert f(ones) == 3.0 and g(ones) == 10.0
    second.set_value(np.array([0.5, 0.25]))
    assert g(ones) == 0.75 and f(ones) == 3.0


def test_stock_modes_and_the_cache_off_keep_nothing(cache_dir):
    before = counts()
    pytensor.function(*seed_graph(), mode=pytensor.compile.mode.Mode(linker="numba", optimizer="fast_run"))
    with pytensor.config.change_flags(numba__cache=False):
        compile_policy(*seed_graph())
        compile_policy(*seed_graph())
    assert counts() == before
    assert not (cache_dir / rewritten_graphs.CACHE.subdir).exists()


def test_a_damaged_record_is_a_miss(cache_dir):
    compile_policy(*seed_graph())
    [record] = (cache_dir / rewritten_graphs.CACHE.subdir).iterdir()
    record.write_bytes(b"not a pickle")
    before = counts()
    fn = compile_policy(*seed_graph())
    assert counts() == {"hits": before["hits"], "stored": before["stored"] + 1}
    args = tie_inputs()
    ref = compile_fn(*seed_graph(), "unoptimized_strict", cache_key="rewritten_graphs_seed")(*args)
    np.testing.assert_array_equal(fn(*args)[1] == 0, ref[1] == 0)


def test_a_graph_a_pass_failed_on_is_not_kept(cache_dir, monkeypatch):
    """Its warning, and explain's account of it, come again from rewriting again."""

    def fails(fgraph):
        raise RuntimeError("analysis broke")

    before = counts()
    with monkeypatch.context() as patch:
        patch.setattr(policy_codegen, "graph_facts", fails)
        with pytest.warns(pass_errors.PassErrorWarning, match="graph analysis"):
            compile_policy(*seed_graph())
    assert counts() == before
    compile_policy(*seed_graph())
    assert counts()["stored"] == before["stored"] + 1


SECOND_PROCESS = r"""
import sys
from pathlib import Path
import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
sys.path.insert(0, sys.argv[2])
numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
from test_envelope_guards import hsgp_graph, out_of_box_inputs, inputs
import ptnumba_codegen
from ptnumba_codegen.passes import rewritten_graphs
from ptnumba_codegen.explain import explain
with pytensor.config.change_flags(numba__cache=True):
    fn = pytensor.function(*hsgp_graph(), mode=ptnumba_codegen.policy_mode("as_written"))
outs = [o for args in (inputs(), out_of_box_inputs()) for o in fn(*args)]
import hashlib
digest = hashlib.sha256(b"".join(np.asarray(o).tobytes() for o in outs)).hexdigest()
# how numba compiled each kernel's entry is known only where this process compiled it
text = "\n".join(line for line in explain(fn).splitlines() if not line.startswith("    entry "))
assert text.strip()
print("PROBE", rewritten_graphs.STATS["hits"], rewritten_graphs.STATS["stored"], digest,
      hashlib.sha256(text.encode()).hexdigest())
"""


def test_a_second_process_skips_the_rewrites_and_computes_the_same(tmp_path):
    """The envelope-guarded HSGP graph (as-written copies, a guard, its slow path): the
    second process reads the graph, compiles nothing (every kernel and the whole function
    have the first process's cache keys), and its outputs (in and outside the guard's box)
    and explain's account are the first's."""
    tests = Path(__file__).parent
    cold = second_process_line(SECOND_PROCESS, [tmp_path, tests], "PROBE").split()
    compiled = sorted(p.name for p in tmp_path.iterdir())
    warm = second_process_line(SECOND_PROCESS, [tmp_path, tests], "PROBE").split()
    # the graph read back names the whole function as the first process did: nothing new
    assert sorted(p.name for p in tmp_path.iterdir()) == compiled
    assert cold[1] == "0" and int(cold[2]) >= 1  # the function's graph, and its copies' inner graphs
    assert warm[1:3] == [cold[2], "0"]
    assert cold[3:] == warm[3:]


# the switch is read when a policy function is compiled
COMPILE_ONE = """
import pytensor, pytensor.tensor as pt, ptnumba_codegen
x = pt.vector("x")
pytensor.function([x], x * 2.0, mode=ptnumba_codegen.policy_mode("default"))
"""


def test_a_wrong_switch_value_names_the_allowed_ones():
    env = {**os.environ, "PTNUMBA_CODEGEN_REWRITTEN_GRAPHS": "maybe"}
    out = subprocess.run([sys.executable, "-c", COMPILE_ONE], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode != 0
    assert "PTNUMBA_CODEGEN_REWRITTEN_GRAPHS='maybe': allowed values are on, off" in out.stderr


def test_a_hit_logs_the_passes_summaries_and_one_without_them_rewrites(cache_dir, caplog):
    import logging

    def summaries():
        return [r.getMessage() for r in caplog.records if r.name == "ptnumba_codegen" and "policy default:" in r.getMessage()]

    inputs, outputs = seed_graph(bound=2.0)
    before = counts()
    compile_policy(inputs, outputs)  # stored by a process not logging at INFO
    assert counts()["stored"] == before["stored"] + 1
    with caplog.at_level(logging.INFO, logger="ptnumba_codegen"):
        compile_policy(*seed_graph(bound=2.0))  # its summaries are not known: rewritten again
        assert counts()["hits"] == before["hits"] and counts()["stored"] == before["stored"] + 2
        cold = summaries()
        assert any("kernel(s) generated" in m for m in cold) and any("kept as written" in m for m in cold)
        caplog.clear()
        compile_policy(*seed_graph(bound=2.0))
        assert counts()["hits"] == before["hits"] + 1
        assert summaries() == cold
    compile_policy(*seed_graph(bound=2.0))  # and one not logging reads it too
    assert counts()["hits"] == before["hits"] + 2


def test_a_graph_with_an_opfromgraph_whose_gradient_was_taken_is_kept(cache_dir):
    """OpFromGraph keeps its gradient's pullback, a closure, once a gradient is taken
    (`rewritten_graphs.BUILT_ON_DEMAND`): stored empty, rebuilt on demand. (The catalogue's
    marginal GP has such an op in its rewritten graph.)"""
    import pickle

    from pytensor.compile.builders import OpFromGraph
    from pytensor.graph.fg import FunctionGraph

    x, s = pt.vector("x"), pt.scalar("s")
    scaled = OpFromGraph([x, s], [pt.exp(x) * s])
    cost = pt.minimum(scaled(x, s), 3.0).sum()
    outputs = [cost, pytensor.grad(cost, x)]
    with pytest.raises(Exception, match="local object"):
        pickle.dumps(scaled)  # what did not pickle before
    fgraph = FunctionGraph([x, s], outputs, clone=False)
    assert any(n.op is scaled for n in fgraph.apply_nodes) and scaled._lop_op_cache
    sequence = rewritten_graphs.CachedRewriteSequence()
    assert rewritten_graphs.store("key", fgraph, sequence, None) is not None
    record = rewritten_graphs.load("key")
    (placeholders, stored), = [record["graph"]]
    stored_ops = [n.op for n in pytensor.graph.traversal.io_toposort(placeholders, stored) if isinstance(n.op, OpFromGraph)]
    assert stored_ops and not any(op._lop_op_cache for op in stored_ops)
    assert scaled._lop_op_cache  # the caller's op keeps its own
    fn = pytensor.function(placeholders, stored, mode="FAST_COMPILE")
    ref = pytensor.function([x, s], outputs, mode="FAST_COMPILE")
    args = (np.log(np.array([1.0, 1.5, 3.0, 0.5])), 2.0)  # exp(x) * 2 at the bound: x[1]
    for a, b in zip(fn(*args), ref(*args), strict=True):
        np.testing.assert_array_equal(a, b)
