"""Cache keys: policy digest and generator version are part of them, and a node is
cacheable whenever the stock backend would cache it."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
from pytensor.tensor.elemwise import Elemwise

import ptnumba_codegen
import ptnumba_codegen.lowering.node_keys as node_keys
from ptnumba_codegen import _version
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
        for policy in ("rewritten", "fast", "rewritten", "strict", "fast"):
            fn = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode(policy))
            results.setdefault(policy, []).append(fn(XV, YV, ZV, WV, BV)[0])
    assert results["fast"] == [0.0, 0.0]
    assert results["rewritten"] == pytest.approx([EXPECTED] * 2)
    assert results["strict"] == pytest.approx([EXPECTED])
    assert any(tmp_path.iterdir())  # the kernels really went through the disk cache


def test_keys_depend_on_policy_and_generator_version(monkeypatch):
    inputs, out = seed_graph()
    fns = {p: pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode(p)) for p in ("rewritten", "fast")}
    again = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode("rewritten"))
    assert keys_of(fns["rewritten"]) == keys_of(again)  # deterministic: the disk cache hits
    assert keys_of(fns["rewritten"]) != keys_of(fns["fast"])
    before = keys_of(again)
    monkeypatch.setattr(node_keys, "GENERATOR_VERSION", node_keys.GENERATOR_VERSION + 1)
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
    fn = pytensor.function([x, y, i], outs, mode=ptnumba_codegen.policy_mode("rewritten"))
    for node in policy_nodes(fn):
        stock_op = Elemwise(node.op.scalar_op, node.op.inplace_pattern)
        stock_node = stock_op.make_node(*node.inputs)
        _, stock_key = numba_funcify_and_cache_key(stock_op, node=stock_node)
        _, key = numba_funcify_and_cache_key(node.op, node=node)
        assert (key is None) == (stock_key is None), node
    vals = [np.linspace(0.5, 2, 7), np.linspace(1, 2, 7), np.arange(7, dtype="int32")]
    assert all(np.all(np.isfinite(o)) for o in fn(*vals))


# --- warm processes (a warm compile must not recompile the whole model) -------------------

# The catalogue's reinforcement-learning model in small: a Scan carrying a vector (the Q
# table, set_subtensor) with policy kernels inside, a softmax after it, and the gradient.
WARM_PROBE = r"""
import sys
from pathlib import Path
import numpy as np
import pytensor, pytensor.tensor as pt
import pytensor.link.numba.cache as numba_cache
import ptnumba_codegen

numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
from numba.core import event
lowered = []

class CountLowering(event.Listener):  # every function numba lowers (types and emits) here
    def on_start(self, ev):
        if ev.data["name"].startswith("native_lowering"):
            lowered.append(ev.data["name"])

    def on_end(self, ev):
        pass

event.register("numba:run_pass", CountLowering())
actions = pt.as_tensor_variable(np.array([0, 1, 1, 0, 1, 1, 0, 1], dtype="int32"))
rewards = pt.as_tensor_variable(np.array([1, 0, 1, 1, 0, 1, 0, 1], dtype="int32"))
alpha, beta = pt.dscalars("alpha", "beta")

def update(a, r, q, alpha):
    return pt.set_subtensor(q[a], q[a] + alpha * (r - q[a]))

qs = pytensor.scan(update, sequences=[actions, rewards], outputs_info=[0.5 * pt.ones(2)],
                   non_sequences=[alpha], return_updates=False)
z = qs[:-1] * beta
logp = (z - pt.logsumexp(z, axis=1, keepdims=True))[:, 1].sum()
with pytensor.config.change_flags(numba__cache=True):
    fn = pytensor.function([alpha, beta], [logp, *pt.grad(logp, [alpha, beta])],
                           mode=ptnumba_codegen.policy_mode("rewritten"))
    print("PROBE", [float(v) for v in fn(0.5, 5.0)])
print("LOWERED", len(lowered))
"""


def _warm_probe(cache_dir, seed: str):
    # another hash seed: a set order that leaks into a key shows; this checkout first
    path = os.pathsep.join(filter(None, [str(_version.ROOT.parent), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", WARM_PROBE, str(cache_dir)], env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    [line] = [ln for ln in out.stdout.splitlines() if ln.startswith("PROBE ")]
    [lowered] = [int(ln.split()[1]) for ln in out.stdout.splitlines() if ln.startswith("LOWERED ")]
    return line, sorted(p.name for p in cache_dir.iterdir()), lowered


def test_a_second_process_compiles_nothing(tmp_path):
    """Every key of a Scan model is the same in a second process (another hash seed, other
    addresses), so the warm compile reads every kernel from the disk cache, writes none and
    lowers no function: numba types and emits nothing of the generator's (or anyone's)
    again. The function graph is stored whole; its policy kernels
    are not stored one by one (`backend.node_wrappers`: no per-node cache wrappers)."""
    cold, cold_files, cold_lowered = _warm_probe(tmp_path, "1")
    assert any(name.startswith("string.numba_funcified_fgraph") for name in cold_files), cold_files
    assert not any(name.startswith("string.policy_") for name in cold_files), cold_files
    assert cold_lowered > 0
    warm, warm_files, warm_lowered = _warm_probe(tmp_path, "2")
    assert warm == cold
    assert warm_files == cold_files  # a key that changed would have added an entry
    assert warm_lowered == 0, f"a warm process lowered {warm_lowered} functions"


def _edit(path: Path):
    path.write_text(path.read_text() + "\n# edited\n")


def test_source_digest_leaves_out_the_front_ends(tmp_path):
    """Editing a benchmark or the command line keeps every cached kernel; editing the
    generator does not."""
    root = tmp_path / "ptnumba_codegen"
    shutil.copytree(_version.ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    before = _version.source_digest(root)
    assert before == _version.GENERATOR_DIGEST
    for front in ("tools/catalogue_bench.py", "tools/modelbench.py", "__main__.py", "pytest_plugin.py"):
        _edit(root / front)
    (root / "tools" / "new_bench.py").write_text("x = 1\n")
    assert _version.source_digest(root) == before
    _edit(root / "lowering" / "kernel.py")
    assert _version.source_digest(root) != before


def _package_imports(path: Path):
    """Every module of the package an ``import`` anywhere in ``path`` names."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("ptnumba_codegen"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ptnumba_codegen"):
            yield from (f"{node.module}.{a.name}" for a in node.names)


def test_no_generator_module_imports_a_front_end():
    """The front ends are out of the digest only because nothing the generator runs imports
    them (at the top or inside a function)."""
    fronts = tuple(f"ptnumba_codegen.{name.removesuffix('.py')}" for name in _version.FRONT_ENDS)
    found = [
        (str(path.relative_to(_version.ROOT)), name)
        for path in _version.generator_sources()
        for name in _package_imports(path)
        if any(name == f or name.startswith(f + ".") for f in fronts)
    ]
    assert found == []
