"""What an as-written copy compiles once (`ptnumba_codegen.as_written.compile_once`): a copy
reading one variable at several inputs reads it once (equal ops on it then merge), and
copies inside a copy (an envelope guard's slow path) are lowered into one graph, one numba
function. Decisions still equal the reference, ``Mode(linker="numba", optimizer=None)``
under ``numba__fastmath=False``, at ties."""

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.fg import FrozenFunctionGraph, FunctionGraph

import ptnumba_codegen
from ptnumba_codegen.as_written.compile_once import read_inputs_once
from ptnumba_codegen.as_written.lowering import lowering_graph
from ptnumba_codegen.as_written.op import AsWritten
from test_as_written import AV, CV, MAINT_BV
from test_envelope_guards import guard_nodes, hsgp_fn, inputs, is_dot, same_decisions

POLICY = ptnumba_codegen.load_policy("as_written")


def reference(inputs_, outputs):
    with pytensor.config.change_flags(numba__fastmath=False):
        return pytensor.function(inputs_, outputs, mode=Mode(linker="numba", optimizer=None))


def copy_of(inputs_, outputs, label="test", kind="cone"):
    return AsWritten(FrozenFunctionGraph.from_io(inputs_, outputs), POLICY, label=label, kind=kind)


def product(a, c):
    return pt.exp(a) * pt.exp(c)  # fast_run: exp(a + c), which breaks the tie


def test_copies_inside_a_copy_compile_as_one_graph_and_keep_the_tie():
    """A decision copy reading a cone copy (as in a guard's slow path): lowered, no copy is
    left inside it, and at the tie ``b = exp(a) * exp(c)`` it decides as written."""
    a, c, b = pt.vectors("a", "c", "b")
    ia, ic = a.type(), c.type()
    cone = copy_of([ia, ic], [product(ia, ic)])
    ja, jc, jb = a.type(), c.type(), b.type()
    decision = copy_of([ja, jc, jb], [pt.le(cone(ja, jc), jb)], label="Le", kind="decision")
    graph = lowering_graph(decision)
    assert not any(isinstance(n.op, AsWritten) for n in graph.toposort())
    assert decision._flattened == 1
    ref = reference([a, c, b], pt.le(product(a, c), b))
    with pytensor.config.change_flags(numba__fastmath=False):
        fn = pytensor.function([a, c, b], decision(a, c, b), mode=Mode(linker="numba", optimizer=None))
    assert fn(AV, CV, MAINT_BV)[0] and ref(AV, CV, MAINT_BV)[0]  # the tie, as written
    rng = np.random.default_rng(7)
    av, cv = rng.normal(size=50), rng.normal(size=50)
    bv = np.exp(av) * np.exp(cv)
    bv[::3] = np.nextafter(bv[::3], -np.inf)
    bv[1::3] = np.exp(av[1::3] + cv[1::3])
    np.testing.assert_array_equal(fn(av, cv, bv), ref(av, cv, bv))


def test_a_copy_reading_one_value_twice_reads_it_once():
    """Equal cones on two inputs that are one variable: one input, one exp after merge, and
    the same bits as the copy before."""
    x = pt.vector("x")
    i1, i2 = x.type(), x.type()
    op = copy_of([i1, i2], [pt.exp(i1) * 3.0, pt.exp(i2) * 3.0])
    fg = FunctionGraph([x], op(x, x), clone=False)
    assert read_inputs_once(fg) == 1
    [node] = [n for n in fg.toposort() if isinstance(n.op, AsWritten)]
    assert len(node.inputs) == 1
    exps = [n for n in lowering_graph(node.op).toposort() if "exp" in str(n.op).lower()]
    assert len(exps) == 1, exps
    assert read_inputs_once(fg) == 0
    xv = np.random.default_rng(3).normal(scale=300, size=40)
    with pytensor.config.change_flags(numba__fastmath=False):
        before = pytensor.function([x], op(x, x), mode=Mode(linker="numba", optimizer=None))(xv)
        after = pytensor.function([x], fg.outputs, mode=Mode(linker="numba", optimizer=None))(xv)
    for u, v in zip(before, after, strict=True):
        np.testing.assert_array_equal(u, v)


def test_the_envelope_guards_slow_path_is_one_function():
    """The HSGP check's guard: its slow path holds copies (the strict phi @ beta and the
    decisions); lowered, they are one graph with one Dot, and outside the box the
    decisions still equal the reference."""
    fn = hsgp_fn("policy_as_written")
    [guard] = guard_nodes(fn)
    assert any(isinstance(n.op, AsWritten) for n in guard.op.fgraph.toposort())
    graph = lowering_graph(guard.op)
    assert not any(isinstance(n.op, AsWritten) for n in graph.toposort())
    assert sum(is_dot(n.op) for n in graph.toposort()) == 1
    X, beta, b0 = inputs()
    beta[3] = np.inf
    same_decisions((X, beta, b0))
    beta[3] = 1e306
    same_decisions((X, beta, b0))
