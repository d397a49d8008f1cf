"""A loop below its kernel's chunk threshold runs on the calling thread without asking the
chunk helper (``ptnumba_codegen_try_split``), which would decline without a side effect
(the small kernels of a Scan step, the HMM's, would call the helper every step).

The final optimized IR must test the threshold before the call and branch to the chunk
function called directly; at run time a loop below the threshold (or with a chunk axis
shorter than 2) must not enter the helper (``chunk_requests``), one at the threshold must
still ask and split, and every result must be stock strict's bit for bit.
"""

from __future__ import annotations

import re

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

import ptnumba_codegen
from conftest import assert_same_bits, compile_fn, final_ir
from irtools import backward_cone, blocks, functions, parse, reachable
from ptnumba_codegen.runtime.threads import chunk_launches, chunk_requests

MIN_ELEMENTS = 1000
HELPER = "@ptnumba_codegen_try_split("
# (threshold of the kernel's body: chunking_for, one transcendental divides it by 5)
GRAPHS = {
    "affine": (lambda x, y, z: x * 1.2468 + y * z - 7.531, MIN_ELEMENTS),
    "exp": (lambda x, y, z: pt.exp(x) * y + z * 0.8642, MIN_ELEMENTS // 5),
    "matrix": (lambda x, y, z: x * 2.4681 - y * z, MIN_ELEMENTS),
}
_FNS: dict = {}


@pytest.fixture(scope="module")
def policy_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("small_loops") / "strict_threshold.toml"
    path.write_text(f'extends = "strict"\n[parallel]\nthreads = "auto"\nmin_elements = {MIN_ELEMENTS}\n')
    return str(path)


def _graph(name):
    kind = pt.matrices if name == "matrix" else pt.vectors
    x, y, z = kind("x", "y", "z")
    return [x, y, z], GRAPHS[name][0](x, y, z)


def policy_fn(name, policy_path):
    """One function per graph and process: its kernels' split statistics start fresh."""
    if name not in _FNS:
        inputs, out = _graph(name)
        with pytensor.config.change_flags(numba__cache=False):
            _FNS[name] = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode(policy_path))
    return _FNS[name]


def stock_strict(name):
    inputs, out = _graph(name)
    return compile_fn(inputs, out, "stock_strict", cache_key=f"small_loops_{name}")


def _inputs(shape, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.normal(scale=2.0, size=shape) for _ in range(3)]


def _guards(function_text, threshold):
    """The conditional branches of ``function_text`` whose condition compares with the
    threshold (``n < T``, or LLVM's ``n > T - 1``): (block label, true target, false target)."""
    table = parse(function_text)[0]
    compare = re.compile(rf"icmp \w+ i64 %[-\w.$]+, ({threshold}|{threshold - 1})$")
    found = []
    for label, block in blocks(function_text).items():
        m = re.search(r"br i1 (%[-\w.$]+), label %([-\w.$]+), label %([-\w.$]+)(, !.*)?$", block.text)
        if m and any(compare.search(table[v].text) for v in backward_cone(table, [m.group(1)]) if table[v].opcode == "icmp"):
            found.append((label, m.group(2), m.group(3)))
    return found


def _guarded(function_text, threshold, chunk, large) -> bool:
    """Whether a branch on the threshold goes one way to the chunk function called directly
    (no helper on the way) and the other to the path asking the helper (``large``, a function
    of its own), and every path to it passes the branch."""
    cfg = blocks(function_text)
    entry = next(iter(cfg))

    def asks(block):
        return f"{large}(" in block.text

    def runs_serial(label):
        return any(f"call i32 {chunk}(" in cfg[b].text for b in reachable(cfg, label, avoid=asks))

    for guard, a, b in _guards(function_text, threshold):
        for serial, chunked in ((a, b), (b, a)):
            around = reachable(cfg, entry, skip_edge=(guard, chunked))
            if runs_serial(serial) and any(asks(cfg[x]) for x in reachable(cfg, chunked)) and not any(asks(cfg[x]) for x in around):
                return True
    return False


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_final_ir_tests_the_threshold_before_asking_the_helper(policy_path, name):
    fn = policy_fn(name, policy_path)
    threshold = GRAPHS[name][1]
    assert f"from {threshold} elements" in ptnumba_codegen.explain(fn)
    fn(*_inputs((2, 3) if name == "matrix" else 5))
    fns = functions(final_ir(fn))
    # the helper is asked from one function: the kernel's path above the threshold, kept out of line
    [helper] = [f for f in fns if HELPER in f]
    large = re.match(r"define [^@]*(@ptnumba_large_[0-9a-f]+)\(", helper).group(1)
    chunk = re.search(r"@ptnumba_codegen_try_split\([^)]*?(@ptnumba_chunk_[0-9a-f]+)", helper).group(1)
    asking = [f for f in fns if re.search(rf"call [^\n]*{large}\(", f)]
    assert len(asking) == 1
    assert _guarded(asking[0], threshold, chunk, large)
    assert not _guarded(asking[0], threshold + 7, chunk, large)  # the check finds the threshold, not any compare


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_a_loop_below_its_threshold_never_enters_the_helper(policy_path, name):
    fn = policy_fn(name, policy_path)
    threshold = GRAPHS[name][1]
    shapes = [(1, threshold * 3), (0, 5), (3, threshold // 4)] if name == "matrix" else [0, 1, 2, 63, threshold - 1]
    for shape in shapes:  # few elements, or a chunk axis (the rows) shorter than 2
        args = _inputs(shape)
        before = (chunk_requests(), chunk_launches())
        res = fn(*args)
        assert (chunk_requests(), chunk_launches()) == before, shape
        assert_same_bits(res, stock_strict(name)(*args))


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two threads")
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_a_loop_at_its_threshold_still_asks_and_chunks(policy_path, name):
    fn = policy_fn(name, policy_path)
    threshold = GRAPHS[name][1]
    args = _inputs((4, threshold // 4) if name == "matrix" else threshold, seed=11)
    ref = stock_strict(name)(*args)
    requests, launches = chunk_requests(), chunk_launches()
    first = fn(*args)  # the kernel's first eligible call: one thread, measured
    second = fn(*args)  # its second: on threads, measured
    assert chunk_requests() == requests + 2
    assert chunk_launches() == launches + 1
    assert_same_bits(first, ref)
    assert_same_bits(second, ref)
