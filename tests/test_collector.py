"""Full garbage collections postponed while numba compiles
(`ptnumba_codegen.runtime.collector`): none inside the outermost compile, Python's
thresholds exactly as they were after it, also when it fails; untouched while the collector
is disabled or the switch says ``python``."""

import gc

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError
from numba.extending import overload

from ptnumba_codegen.runtime import collector
from ptnumba_codegen.settings import GC

THRESHOLDS = (5000, 10, 5)  # a user's own, to be found as they were


@pytest.fixture
def own_collector():
    """The collector setting off for the test, the process's state afterwards as before."""
    before, thresholds, enabled = collector.state(), gc.get_threshold(), gc.isenabled()
    collector.restore()
    gc.set_threshold(*THRESHOLDS)
    yield
    collector.restore()
    gc.set_threshold(*thresholds)
    (gc.enable if enabled else gc.disable)()
    if before is not None:
        collector.configure()


SEEN: dict = {}


def _compile_one(value):
    """Compile (fresh, so typed again) a function calling one calling an overload whose
    typing records the thresholds, then keeps as many objects alive as it takes Python's
    collector to sweep its oldest generation, counting the sweeps; return its value."""

    def during_typing(a):
        pass

    @overload(during_typing)
    def _during_typing(a):
        SEEN["threshold"] = gc.get_threshold()
        full = []
        gc.callbacks.append(lambda phase, info: phase == "stop" and info["generation"] == 2 and full.append(1))
        try:
            # more than a quarter of the process's old objects (Python sweeps only then),
            # at least 14 middle-generation collections (5000 * 10 objects each; Python's
            # threshold considers a sweep after 5), well below the 50 of the postponed one
            keep = [[i] for i in range(max(700_000, len(gc.get_objects()) // 2 + 100_000))]
            SEEN["full collections"] = len(full)
            del keep
        finally:
            gc.callbacks.pop()
        return lambda a: None

    @njit
    def inner(a):
        during_typing(a)
        return a + 1.0

    @njit
    def outer(a):
        return inner(a) * 2.0

    SEEN.clear()
    return outer(value)


def test_no_full_collection_inside_a_compile_and_thresholds_put_back(own_collector, monkeypatch):
    monkeypatch.delenv(GC.env, raising=False)
    assert collector.configure() == "full garbage collections postponed while numba compiles"
    assert _compile_one(1.5) == 5.0
    # inside the nested compile (the overload's typing) the outermost compile's setting holds
    t0, t1, t2 = SEEN["threshold"]
    assert (t0, t1) == THRESHOLDS[:2] and t2 >= THRESHOLDS[2] * collector.POSTPONED_FACTOR
    assert SEEN["full collections"] == 0
    assert gc.get_threshold() == THRESHOLDS


def test_python_thresholds_sweep_inside_a_compile(own_collector, monkeypatch):
    """The reference for the test above: the same compile under Python's thresholds does
    sweep the oldest generation (so the test above could fail)."""
    monkeypatch.setenv(GC.env, "python")
    assert collector.configure().endswith(f"({GC.env}=python)")
    assert _compile_one(2.5) == 7.0
    assert SEEN["threshold"] == THRESHOLDS and SEEN["full collections"] > 0
    assert gc.get_threshold() == THRESHOLDS


def test_a_failing_compile_puts_the_thresholds_back(own_collector, monkeypatch):
    monkeypatch.delenv(GC.env, raising=False)
    collector.configure()

    @njit
    def broken(a):
        return a.no_such_attribute

    with pytest.raises(TypingError):
        broken(np.zeros(3))
    assert gc.get_threshold() == THRESHOLDS
    assert _compile_one(0.5) == 3.0 and SEEN["full collections"] == 0  # and the next compile still postpones


def test_a_disabled_collector_is_left_alone(own_collector, monkeypatch):
    monkeypatch.delenv(GC.env, raising=False)
    collector.configure()
    gc.disable()
    assert _compile_one(1.0) == 4.0
    assert SEEN["threshold"] == THRESHOLDS and gc.get_threshold() == THRESHOLDS and not gc.isenabled()


def test_the_switch_names_its_values(own_collector, monkeypatch):
    monkeypatch.setenv(GC.env, "never")
    with pytest.raises(ValueError, match=r"PTNUMBA_CODEGEN_GC='never': allowed values are postpone, python"):
        collector.configure()
    assert collector.state() is None


def test_a_policy_functions_rewrites_and_funcify_postpone_too(own_collector, monkeypatch):
    """The rewrite sequence that runs the policy's passes, PyTensor's linking after it and
    the funcify of a policy graph run with the oldest generation's threshold raised, as
    numba's compiles do; the thresholds are Python's again once the function is compiled,
    and the function computes as before."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor.graph.rewriting.basic import SequentialGraphRewriter

    import ptnumba_codegen
    from ptnumba_codegen.backend import node_wrappers
    from ptnumba_codegen.passes.rewritten_graphs import CachedRewriteSequence

    from pytensor.link.basic import Linker

    monkeypatch.delenv(GC.env, raising=False)
    seen = {"rewrites": [], "schedule": [], "funcify": []}
    sequence_apply = SequentialGraphRewriter.apply
    schedule = Linker.schedule

    def spy_schedule(self, fgraph):
        seen["schedule"].append(gc.get_threshold())
        return schedule(self, fgraph)

    def spy_sequence(self, fgraph, *args, **kwargs):
        if type(self) is CachedRewriteSequence:
            seen["rewrites"].append(gc.get_threshold())
        return sequence_apply(self, fgraph, *args, **kwargs)

    graph_function = node_wrappers.graph_function

    def spy_graph_function(fgraph, **kwargs):
        seen["funcify"].append(gc.get_threshold())
        return graph_function(fgraph, **kwargs)

    monkeypatch.setattr(SequentialGraphRewriter, "apply", spy_sequence)
    monkeypatch.setattr(Linker, "schedule", spy_schedule)
    monkeypatch.setattr(node_wrappers, "graph_function", spy_graph_function)
    x = pt.dvector("x")
    out = pt.exp(x * 1.25) + pt.log1p(x)  # a kernel of its own: nothing shared with other tests
    with pytensor.config.change_flags(numba__cache=True):
        fn = pytensor.function([x], out, mode=ptnumba_codegen.policy_mode("default"))
    value = np.array([0.5, 1.5])
    assert np.array_equal(fn(value), np.exp(value * 1.25) + np.log1p(value))
    # PyTensor's linking between the rewrites and the funcify (its schedule of the graph)
    # too: the scope the rewrites hold for the graph ends at its funcify
    for phase in ("rewrites", "schedule", "funcify"):
        assert seen[phase], phase
        for t0, t1, t2 in seen[phase]:
            assert (t0, t1) == THRESHOLDS[:2] and t2 >= THRESHOLDS[2] * collector.POSTPONED_FACTOR, phase
    assert gc.get_threshold() == THRESHOLDS


def test_scopes_nest_and_the_outermost_puts_the_thresholds_back(own_collector, monkeypatch):
    monkeypatch.delenv(GC.env, raising=False)
    collector.configure()
    with collector.postponed_while():
        raised = gc.get_threshold()
        assert raised[2] >= THRESHOLDS[2] * collector.POSTPONED_FACTOR
        with collector.postponed_while():
            assert gc.get_threshold() == raised
        assert gc.get_threshold() == raised  # the inner scope's end keeps the outer's
    assert gc.get_threshold() == THRESHOLDS
    with pytest.raises(KeyError), collector.postponed_while():
        raise KeyError("a failing rewrite")
    assert gc.get_threshold() == THRESHOLDS


class _Owner:
    pass


@pytest.mark.parametrize("how", ["python", "disabled"])
def test_scopes_leave_python_thresholds_alone(own_collector, monkeypatch, how):
    if how == "python":
        monkeypatch.setenv(GC.env, "python")
    else:
        monkeypatch.delenv(GC.env, raising=False)
    collector.configure()
    if how == "disabled":
        gc.disable()
    with collector.postponed_while():
        assert gc.get_threshold() == THRESHOLDS
    assert gc.get_threshold() == THRESHOLDS
    owner = _Owner()  # a held scope (`hold_for`) too
    collector.hold_for(owner)
    assert gc.get_threshold() == THRESHOLDS
    collector.release_for(owner)
    assert gc.get_threshold() == THRESHOLDS


def test_a_held_scope_lasts_until_released_or_its_owner_is_freed(own_collector, monkeypatch):
    """`collector.hold_for`: a scope spanning two calls, ended by `release_for` (once; a
    second release does nothing) or by its owner being freed; held scopes nest with the
    others and the last one to end puts Python's thresholds back."""
    monkeypatch.delenv(GC.env, raising=False)
    collector.configure()
    first, second = _Owner(), _Owner()
    collector.hold_for(first)
    raised = gc.get_threshold()
    assert raised[:2] == THRESHOLDS[:2] and raised[2] >= THRESHOLDS[2] * collector.POSTPONED_FACTOR
    collector.hold_for(first)  # held once per owner
    with collector.postponed_while():
        collector.hold_for(second)
    assert gc.get_threshold() == raised  # the block's end keeps the held scopes'
    collector.release_for(first)
    assert gc.get_threshold() == raised  # the second owner's holds
    collector.release_for(first)
    del second
    gc.collect(0)
    assert gc.get_threshold() == THRESHOLDS
    assert not collector._held


def test_a_held_scope_ends_with_the_next_outermost_compile(own_collector, monkeypatch):
    """A graph whose funcify never comes (a Scan's inner graph, rewritten and compiled
    inside its outer function's) holds no longer than the next outermost numba compile."""
    monkeypatch.delenv(GC.env, raising=False)
    collector.configure()
    owner = _Owner()
    collector.hold_for(owner)
    assert gc.get_threshold()[2] >= THRESHOLDS[2] * collector.POSTPONED_FACTOR
    assert _compile_one(3.0) == 8.0
    assert gc.get_threshold() == THRESHOLDS and not collector._held
    del owner


def test_a_scans_inner_graphs_hold_nothing_once_the_function_is_compiled(own_collector, monkeypatch):
    """A Scan's inner graphs are rewritten by the policy's sequence too but never funcified
    as policy graphs: what they hold ends with the function's compile (Python's thresholds
    back, nothing held), and the function computes as before."""
    import pytensor
    import pytensor.tensor as pt

    import ptnumba_codegen

    monkeypatch.delenv(GC.env, raising=False)
    x0 = pt.dscalar("x0")
    a = pt.dvector("a")
    steps = pytensor.scan(lambda ai, x: 0.9 * x + pt.exp(ai) * 0.01, sequences=[a], outputs_info=[x0],
                          return_updates=False)
    with pytensor.config.change_flags(numba__cache=False):
        fn = pytensor.function([x0, a], pytensor.grad(steps[-1], a), mode=ptnumba_codegen.policy_mode("default"))
        got = fn(0.5, np.linspace(-1.0, 1.0, 7))
    want = np.array([0.9 ** (6 - k) * 0.01 * np.exp(v) for k, v in enumerate(np.linspace(-1.0, 1.0, 7))])
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert gc.get_threshold() == THRESHOLDS
    assert not collector._held
