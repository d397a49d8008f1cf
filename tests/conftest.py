"""Shared helpers: reference backends and a process-wide cache of compiled functions.

numba compiles are the slow part of this suite, so every compiled function is built
once per process (keyed by a name the test chooses) and reused.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytensor
import pytest
from hypothesis import HealthCheck, Phase, settings
from pytensor.compile.mode import Mode

import ptnumba_codegen
from ptnumba_codegen.backend.ops import is_policy_op

warnings.filterwarnings("ignore", category=UserWarning, module="pytensor")

# policy_default decides as written (policy_as_written: its alias); policy_rewritten
# decides from the rewritten graph (reference: stock_strict)
BACKENDS = ("stock_strict", "stock_fast", "policy_default", "policy_rewritten", "policy_strict", "policy_fast", "policy_as_written", "policy_as_written_opaque", "unoptimized_strict", "py_unoptimized")

# The differential fuzzer's profiles (tests/test_fuzz.py), picked by $PTNUMBA_FUZZ_PROFILE.
# Three fuzz tests of 10 graphs per example: ci checks about 300 graphs in a fixed order;
# long about 5,000, new ones every run, shrinking a failure to a small batch.
_FUZZ = dict(deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True)
settings.register_profile("fuzz-ci", max_examples=10, derandomize=True, phases=(Phase.explicit, Phase.generate), **_FUZZ)
settings.register_profile("fuzz-long", max_examples=170, **_FUZZ)
# policy as_written against the graph as written (one test, about half tie graphs): ci a few
# dozen graphs, long about 1,500
settings.register_profile("fuzz-as_written-ci", max_examples=3, derandomize=True, phases=(Phase.explicit, Phase.generate), **_FUZZ)
settings.register_profile("fuzz-as_written-long", max_examples=150, **_FUZZ)

_COMPILED: dict = {}


@pytest.fixture(autouse=True)
def _rewrite_afresh_under_patches(request):
    """A test that patches the generator (a rule table, a pass's function) rewrites every
    time: a rewritten graph kept on disk (`passes.rewritten_graphs`) is keyed by the
    generator's source, not by what a test patched into it at run time."""
    if "monkeypatch" not in request.fixturenames:
        yield
        return
    from ptnumba_codegen.settings import REWRITTEN_GRAPHS

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(REWRITTEN_GRAPHS.env, "off")
        yield


def compile_fn(inputs, outputs, backend: str, *, cache_key=None, inspect_ir=False, **kwargs):
    """Compile with one of BACKENDS. ``cache_key`` shares the result across tests.

    ``inspect_ir=True`` disables PyTensor's on-disk numba cache so the final optimized LLVM
    IR can be read back with `final_ir`.
    """
    key = None if cache_key is None else (cache_key, backend, inspect_ir)
    if key is not None and key in _COMPILED:
        return _COMPILED[key]
    flags = {"numba__cache": False} if inspect_ir else {}
    if backend.startswith("stock_"):
        flags["numba__fastmath"] = backend == "stock_fast"
        mode = Mode(linker="numba", optimizer="fast_run")
    elif backend == "unoptimized_strict":  # the graph as written: the as_written reference
        flags["numba__fastmath"] = False
        mode = Mode(linker="numba", optimizer=None)
    elif backend == "policy_as_written_opaque":  # as_written, every copy compiled on its own
        from ptnumba_codegen.as_written.freeze import POSITION, AsWrittenPass
        from ptnumba_codegen.passes.policy_codegen import POSITION as KERNELS, PolicyCodegen

        policy = ptnumba_codegen.load_policy("as_written")
        mode = Mode(linker="numba", optimizer="fast_run").register(
            (AsWrittenPass(policy), POSITION), (PolicyCodegen(policy), KERNELS)
        )
    elif backend.startswith("policy_"):
        mode = ptnumba_codegen.policy_mode(backend.removeprefix("policy_"))
    elif backend == "c":
        mode = Mode(linker="cvm", optimizer="fast_run")
    elif backend == "py_unoptimized":  # the graph's dtypes, as written (the fuzzer's as_written check)
        mode = Mode(linker="py", optimizer=None)
    elif backend == "py":  # the graph's dtypes, node by node in numpy: nothing compiles
        mode = Mode(linker="py", optimizer="fast_run").excluding("fusion")  # perform takes <= 32 operands
    else:
        raise ValueError(backend)
    with pytensor.config.change_flags(**flags):
        fn = pytensor.function(inputs, outputs, mode=mode, **kwargs)
    if key is not None:
        _COMPILED[key] = fn
    return fn


def final_ir(fn) -> str:
    """The final optimized LLVM IR of a function compiled with ``inspect_ir=True``."""
    return "\n".join(fn.vm.jit_fn.inspect_llvm().values())


@contextlib.contextmanager
def numba_compiles():
    """The names of the functions numba's pipeline compiles inside the block, in order."""
    from numba.core import event

    names: list[str] = []

    class Listener(event.Listener):
        def on_start(self, ev):
            pass

        def on_end(self, ev):
            names.append(getattr(getattr(ev.data.get("dispatcher"), "py_func", None), "__name__", ""))

    with event.install_listener("numba:compile", Listener()):
        yield names


def subroutine_calls(monkeypatch) -> list:
    """``(formula name, argument types)`` of each subroutine the lowering compiles
    (`rules.call_python`) from now on, spied through ``monkeypatch``."""
    from ptnumba_codegen.lowering import rules

    calls = []
    call_python = rules.call_python

    def spy(context, builder, impl, arg_types, *args, **kwargs):
        calls.append((getattr(impl, "__name__", None), tuple(str(t) for t in arg_types)))
        return call_python(context, builder, impl, arg_types, *args, **kwargs)

    monkeypatch.setattr(rules, "call_python", spy)
    return calls


def warm_allocator() -> None:
    """Compile numba's allocator (`_ol_array_allocate`, compiled once a process on the first
    allocation), so that a test counting the functions numba compiles counts only its own."""
    from numba import njit

    njit(lambda: np.empty(1))()


def lowered_into_caller(stock, compact, control: str, *args):
    """``(compact's result, stock's)`` for ``args``, each node called from a new numba function:
    compact's compiles nothing but its caller; stock's (the control) compiles ``control``."""
    warm_allocator()
    with numba_compiles() as compiled:
        got = node_caller(compact)(*args)
    assert compiled == ["call"], compiled
    with numba_compiles() as compiled:
        want = node_caller(stock)(*args)
    assert control in compiled, compiled  # the control
    return got, want


def node_caller(node):
    """A numba function calling ``node``'s numba function with as many arguments as the node
    has inputs (PyTensor's node functions have no CPython wrapper of their own)."""
    from numba import njit
    from pytensor.link.numba.dispatch.basic import numba_funcify

    fn = numba_funcify(node.op, node=node)
    names = ", ".join(f"a{k}" for k in range(len(node.inputs)))
    env = {"fn": fn}
    exec(f"def call({names}):\n    return fn({names})\n", env)  # noqa: S102
    return njit(env["call"])


def node_function_irs(nodes, sig) -> list[str]:
    """The LLVM IR of each node's numba function compiled for ``sig`` (PyTensor's node
    functions have no CPython wrapper: a direct call would crash)."""
    from pytensor.link.numba.dispatch.basic import numba_funcify

    from numba import njit
    from numba.core.dispatcher import Dispatcher

    irs = []
    for node in nodes:
        fn = numba_funcify(node.op, node=node)
        if not isinstance(fn, Dispatcher):  # a node intrinsic (`node_intrinsics`): read it in a caller
            params = ", ".join(f"a{k}" for k in range(len(sig)))
            env = {"fn": fn}
            exec(f"def call({params}):\n    return fn({params})\n", env)
            fn = njit(env["call"])
        fn.compile(sig)
        irs.append(fn.inspect_llvm(sig))
    return irs


def policy_nodes(fn):
    return [n for n in fn.maker.fgraph.toposort() if is_policy_op(n.op)]


def assert_no_fallback(fn):
    nodes = policy_nodes(fn)
    assert nodes, "no node was handed to the generator"
    reasons = {str(n.op): ptnumba_codegen.fallback_reason(n) for n in nodes}
    assert not any(reasons.values()), reasons


def assert_same_bits(res, ref):
    """Identical values, dtypes, NaN positions and signed zeros."""
    res, ref = np.asarray(res), np.asarray(ref)
    assert res.dtype == ref.dtype, (res.dtype, ref.dtype)
    assert res.shape == ref.shape, (res.shape, ref.shape)
    if res.dtype.kind == "f":
        finite = ~np.isnan(ref)
        assert np.array_equal(res, ref, equal_nan=True), (res, ref)
        assert np.array_equal(np.signbit(res[finite]), np.signbit(ref[finite])), (res, ref)
    else:
        assert np.array_equal(res, ref), (res, ref)


@pytest.fixture(scope="session")
def rng_seed():
    return 20261130


def second_process_line(code: str, args, marker: str) -> str:
    """Run ``code`` in a fresh interpreter (this checkout first on its path) with ``args``;
    the one line of its output that starts with ``marker``."""
    import os
    import subprocess
    import sys

    from ptnumba_codegen import _version

    path = os.pathsep.join(filter(None, [str(_version.ROOT.parent), os.environ.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": path})
    assert out.returncode == 0, out.stderr[-3000:]
    [line] = [ln for ln in out.stdout.splitlines() if ln.startswith(marker)]
    return line
