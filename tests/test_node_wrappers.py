"""Policy graphs call their node functions without PyTensor's per-node cache wrappers
(`ptnumba_codegen.backend.node_wrappers`): the same values bit for bit and the same
flags as with the wrappers, fewer numba compiles, the graph still cached whole; stock
graphs keep their wrappers."""

import json

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.link.numba.cache import CACHED_SRC_FUNCTIONS
from pytensor.link.numba.dispatch import basic as numba_basic

import ptnumba_codegen
from conftest import second_process_line
from ptnumba_codegen.backend import node_wrappers
from ptnumba_codegen.settings import NODE_WRAPPERS
from ptnumba_codegen.tools.catalogue_bench import numba_cache

# a model with every kind of node a PyMC logp has: policy kernels, views, indexing, a
# product, a join and a check, and a Scan whose inner graph is funcified inside the outer
SECOND = r"""
import collections, json, re, sys, tempfile
import numpy as np, pytensor, pytensor.tensor as pt
from numba.core import event
import ptnumba_codegen
from ptnumba_codegen.backend import node_wrappers
from ptnumba_codegen.tools.catalogue_bench import numba_cache

compiled = []
class Count(event.Listener):
    def on_start(self, ev):
        pass
    def on_end(self, ev):
        compiled.append(1)
event.register("numba:compile", Count())

x = pt.vector("x")
A = pt.as_tensor_variable(np.linspace(-1.0, 1.0, 12).reshape(4, 3))
mu = pt.dot(A, x[1:4]) + pt.exp(x[0])
steps = pytensor.scan(lambda m, acc: acc * 0.5 + m, sequences=[mu], outputs_info=[pt.zeros(())],
                      return_updates=False)
z = pt.concatenate([mu, steps])
logp = pt.switch(pt.gt(z, 0.3), -0.5 * z * z, pt.log1p(pt.abs(z))).sum() + pt.logsumexp(x)
checked = pytensor.raise_op.Assert("x must be finite")(logp, pt.all(pt.isfinite(x)))
with numba_cache(sys.argv[1]):
    fn = pytensor.function([x], [checked, pytensor.grad(logp, x)], mode=ptnumba_codegen.policy_mode("default"))
    v = np.array([0.25, -1.5, 0.3, 2.0, -0.7])
    bits = [np.asarray(o, dtype=np.float64).ravel().view(np.uint64).tolist() for o in fn(v)]
    try:
        fn(np.array([0.0, np.inf, 1.0, 1.0, 1.0]))
        raised = None
    except AssertionError as err:
        raised = str(err)
ir = "\n".join(fn.vm.jit_fn.inspect_llvm().values())
# every floating-point instruction with its flags (a call: one returning a float); how
# often a call is marked ``tail`` and how many other calls there are depends on where
# LLVM inlined what, not on the values
flags = re.compile(r"= (?:tail )?(fadd|fsub|fmul|fdiv|frem|fcmp|fneg|call)((?: (?:fast|nnan|ninf|nsz|arcp|contract|afn|reassoc))*) "
                   r"(double|float|<\d+ x (?:double|float)>|\w+)")
counts = collections.Counter(" ".join(m.groups()) for m in flags.finditer(ir)
                             if m.group(1) != "call" or m.group(3).startswith(("double", "float", "<")))
print("RESULT " + json.dumps({"state": node_wrappers.state(), "bits": bits, "raised": raised, "flags": counts,
      "compiles": len(compiled)}))
"""


def _second_process(monkeypatch, tmp_path, choice: str) -> dict:
    monkeypatch.setenv(NODE_WRAPPERS.env, choice)
    cache = tmp_path / choice
    line = second_process_line(SECOND, (cache,), "RESULT ")
    return json.loads(line.removeprefix("RESULT ")) | {"files": sorted(p.name for p in cache.iterdir())}


def test_same_bits_and_flags_without_the_wrappers_and_fewer_compiles(monkeypatch, tmp_path):
    """Two fresh processes, numba's cache on (each its own directory): with PyTensor's
    wrappers and without. The same output bits, the same check message, the same kinds of
    instruction with the same flags in the final function; without the wrappers fewer
    numba compiles, and the function graph is still stored on disk whole."""
    wrapped = _second_process(monkeypatch, tmp_path, "pytensor")
    direct = _second_process(monkeypatch, tmp_path, "direct")
    assert wrapped["state"].startswith("PyTensor's per-node cache wrappers")
    assert direct["state"].startswith("policy graphs call their node functions")
    assert direct["bits"] == wrapped["bits"]
    assert direct["raised"] == wrapped["raised"] and "x must be finite" in direct["raised"]
    # the same kinds of instruction with the same flags; where an instruction carries no
    # fast-math flag, as often. (Fast-flagged ones may be vectorized and unrolled otherwise:
    # an increment's elementwise adds, lowered into the graph's function directly and into
    # a wrapper of its own under PyTensor's, are optimized in a different module.)
    assert set(direct["flags"]) == set(wrapped["flags"]) and direct["flags"]
    fast = {"fast", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc"}
    strict = lambda counts: {k: n for k, n in counts.items() if not fast & set(k.split())}  # noqa: E731
    assert strict(direct["flags"]) == strict(wrapped["flags"]) and strict(direct["flags"])
    assert direct["compiles"] < wrapped["compiles"], (direct["compiles"], wrapped["compiles"])
    assert any(f.startswith("string.policy_") for f in wrapped["files"]), wrapped["files"]
    assert not any(f.startswith("string.policy_") for f in direct["files"]), direct["files"]
    assert any(f.startswith("string.numba_funcified_fgraph") for f in direct["files"]), direct["files"]


def _wrapper_sources(monkeypatch):
    """The sources of PyTensor's per-node cache wrappers made from now on."""
    made = []
    original = numba_basic.compile_numba_function_src

    def recording(src, *args, **kwargs):
        if "return jitable_func(*args)" in src:
            made.append(src)
        return original(src, *args, **kwargs)

    monkeypatch.setattr(numba_basic, "compile_numba_function_src", recording)
    return made


def _graph(scale):
    x = pt.vector("x")
    return [x], [(pt.exp(x[1:]) * scale).sum(), x[1:] * 2.0]


def test_a_policy_function_makes_no_wrapper_and_stock_keeps_its_wrappers(monkeypatch, tmp_path):
    """A policy graph's nodes and the graph itself are compiled without PyTensor's cache
    wrappers; the graph's own function is what numba caches, under PyTensor's key for the
    graph (`node_wrappers.graph_function`). Stock wraps every keyed node and the graph."""
    node_wrappers.configure()
    made = _wrapper_sources(monkeypatch)
    v = np.array([0.5, -1.0, 2.0])
    with numba_cache(tmp_path):
        inputs, outputs = _graph(3.0)
        policy = pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode("default"))
        policy_made = list(made)
        made.clear()
        stock = pytensor.function(inputs, outputs, mode=Mode(linker="numba", optimizer="fast_run"))
    assert policy_made == [], policy_made
    for got, want in zip(policy(v), stock(v), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-15)
    graph_fn = policy.vm.jit_fn.py_func
    assert graph_fn.__name__ == "numba_funcified_fgraph" and graph_fn.__code__.co_filename == "<string>"
    fastmath = int(bool(pytensor.config.numba__fastmath))
    assert CACHED_SRC_FUNCTIONS[graph_fn].endswith(f"_fastmath{fastmath}_{node_wrappers.GRAPH_KEY_SUFFIX}")
    assert [p.name for p in tmp_path.glob("*numba_funcified_fgraph*policy_graph*.nbi")], list(tmp_path.iterdir())
    assert len(made) > 1 and not any("numba_funcified_fgraph" in s for s in made[:-1]), made
    for got, want in zip(policy(v), stock(v), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-15)


def test_a_stock_node_function_is_shared_by_key_within_a_process(monkeypatch, tmp_path):
    """Two policy functions with the same Subtensor (one PyTensor key) get one node function:
    numba compiles it once. Policy kernels are not shared (each records its own fallback)."""
    node_wrappers.configure()
    returned = []
    original = numba_basic.numba_funcify_ensure_cache

    def recording(op, node=None, **kwargs):
        fn, key = original(op, node=node, **kwargs)
        returned.append((type(op).__name__, key, fn))  # a policy class keeps its stock class's name
        return fn, key

    monkeypatch.setattr(numba_basic, "numba_funcify_ensure_cache", recording)
    with numba_cache(tmp_path):
        for _ in range(2):  # two functions of one graph: every node has the same key in both
            inputs, outputs = _graph(3.0)
            pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode("default"))
    subtensors = [(key, fn) for name, key, fn in returned if name == "Subtensor"]
    assert len(subtensors) == 2 and subtensors[0][0] == subtensors[1][0]
    assert subtensors[0][1] is subtensors[1][1]
    kernels = [(key, fn) for name, key, fn in returned if name == "FusedElemwise"]  # the policy's class keeps the name
    assert len(kernels) == 2 and kernels[0][0] == kernels[1][0]
    assert kernels[0][1] is not kernels[1][1]


def test_the_switch_names_its_allowed_values():
    with pytest.raises(ValueError, match="PTNUMBA_CODEGEN_NODE_WRAPPERS='both': allowed values are direct, pytensor"):
        NODE_WRAPPERS.value({NODE_WRAPPERS.env: "both"})


def test_nodes_with_one_key_and_other_types_are_not_shared(tmp_path):
    """PyTensor's key of a MakeVector (or an AllocEmpty) leaves out how many inputs it has:
    the argument types say it. Two functions in one process, stacking two and three
    scalars, each get their own node function and their own values."""
    a, b, c = pt.dscalars("a", "b", "c")
    with numba_cache(tmp_path):
        two = pytensor.function([a, b], pt.stack([a, b]) * 2.0, mode=ptnumba_codegen.policy_mode("default"))
        three = pytensor.function([a, b, c], pt.stack([a, b, c]) * 2.0, mode=ptnumba_codegen.policy_mode("default"))
        np.testing.assert_array_equal(two(1.0, 2.0), [2.0, 4.0])
        np.testing.assert_array_equal(three(1.0, 2.0, 3.0), [2.0, 4.0, 6.0])
    assert any(type(n.op).__name__ == "MakeVector" for n in three.maker.fgraph.apply_nodes)
