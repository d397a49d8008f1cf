"""What an as-written copy compiles once (`ptnumba_codegen.as_written.compile_once`): a copy
reading one variable at several inputs reads it once (equal ops on it then merge), and
copies inside a copy (an envelope guard's slow path) are lowered into one graph, one numba
function. Decisions still equal the reference, ``Mode(linker="numba", optimizer=None)``
under ``numba__fastmath=False``, at ties."""

import re

import numpy as np
import pytensor
import pytest
import pytensor.tensor as pt
from pytensor.compile.mode import Mode
from pytensor.graph.fg import FrozenFunctionGraph, FunctionGraph
from pytensor.link.numba.dispatch import basic as numba_basic
from pytensor.tensor.basic import Alloc, AllocEmpty, ExtractDiag, Join, MakeVector, ScalarFromTensor, TensorFromScalar
from pytensor.tensor.elemwise import DimShuffle
from pytensor.tensor.shape import Shape, Shape_i
import pytensor.scalar as ps
from pytensor.tensor.subtensor import AdvancedSubtensor, Subtensor

import ptnumba_codegen
from ptnumba_codegen.backend import node_wrappers
from ptnumba_codegen.as_written.compile_once import FLAG_FREE, flag_free, read_inputs_once
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


# --- flag-free nodes keep the enclosing function's fast-math setting (FLAG_FREE) ---------

FMF = re.compile(r"\b(fast|reassoc|nsz|arcp|contract|afn|nnan|ninf)\b")


def _flag_free_examples():
    v, w = pt.dvector("v"), pt.dvector("w")
    m = pt.dmatrix("m")
    s, t = pt.dscalar("s"), pt.dscalar("t")
    sv = ScalarFromTensor()(s)
    x = ps.float64("x")
    return {
        Subtensor: ([v], v[1:4]),
        AdvancedSubtensor: ([v], v[np.array([0, 2, 2])]),
        DimShuffle: ([m], m.T),

        Shape: ([m], m.shape),
        Shape_i: ([m], Shape_i(1)(m)),
        ScalarFromTensor: ([s], sv),
        TensorFromScalar: ([x], TensorFromScalar()(x)),
        Alloc: ([s], pt.alloc(s, 3, 4)),
        AllocEmpty: ([v], pt.empty((v.shape[0],))),
        MakeVector: ([s, t], MakeVector("float64")(s, t)),
        Join: ([v, w], pt.concatenate([v, w])),
        ExtractDiag: ([m], pt.diagonal(m)),
    }


def _fast_math_ir(inputs_, output):
    """The final IR of ``output`` compiled op by op (no rewrites) with numba's fast math on."""
    with pytensor.config.change_flags(numba__fastmath=True, numba__cache=False):
        fn = pytensor.function(inputs_, output, mode=Mode(linker="numba", optimizer=None))
    values = {"v": np.arange(6.0), "w": np.ones(2), "m": np.arange(6.0).reshape(2, 3), "s": 1.5, "t": -2.0, "x": 0.25}
    fn(*(values[x.name] for x in inputs_))
    return fn, "\n".join(fn.vm.jit_fn.inspect_llvm().values())


def test_every_flag_free_op_has_an_example():
    assert set(_flag_free_examples()) == set(FLAG_FREE)


@pytest.mark.parametrize("op_type", list(FLAG_FREE), ids=lambda t: t.__name__)
def test_flag_free_ops_compile_to_no_fast_math_flag(op_type):
    """Compiled under numba's fast math, the whole final module of a `FLAG_FREE` op (its
    node function and everything linked into it) has no instruction carrying a fast-math
    flag: numba's fastmathpass found nothing to mark, so the code is the one compiled with
    fast math off. Control: an addition compiled the same way carries them."""
    inputs_, output = _flag_free_examples()[op_type]
    fn, ir = _fast_math_ir(inputs_, output)
    assert any(type(n.op) is op_type for n in fn.maker.fgraph.apply_nodes), fn.maker.fgraph.apply_nodes
    assert flag_free(next(n.op for n in fn.maker.fgraph.apply_nodes if type(n.op) is op_type))
    marked = [line for line in ir.splitlines() if "=" in line and FMF.search(line.split(";")[0])]
    assert not marked, marked[:5]
    v = pt.dvector("v")
    _, control = _fast_math_ir([v], v + 1.5)
    assert any(FMF.search(line) for line in control.splitlines() if "fadd" in line)


def test_a_copy_compiles_its_flag_free_nodes_as_the_rest_does(monkeypatch):
    """A Subtensor inside a copy and the same Subtensor outside it get one PyTensor cache key
    and are funcified under the enclosing function's fast math; the copy's arithmetic
    still compiles with fast math off. Decisions equal the reference at the tie."""
    seen, classes = [], []
    node_wrappers.configure()  # the process-wide per-node funcify, set before it is wrapped here
    original = numba_basic.numba_funcify_ensure_cache

    def recording(op, node=None, **kwargs):
        fn, key = original(op, node=node, **kwargs)
        seen.append((type(op).__name__, key, pytensor.config.numba__fastmath))
        classes.append(type(op))
        return fn, key

    monkeypatch.setattr(numba_basic, "numba_funcify_ensure_cache", recording)
    a, c, b = pt.vectors("a", "c", "b")
    ia, ic, ib = a.type(), c.type(), b.type()
    decision = copy_of([ia, ic, ib], [pt.le(product(ia[1:], ic[1:]), ib[1:])], label="Le", kind="decision")
    outputs = [decision(a, c, b), (a[1:] * 2.0).sum()]
    with pytensor.config.change_flags(numba__fastmath=True):
        fn = pytensor.function([a, c, b], outputs, mode=Mode(linker="numba", optimizer=None))
    subtensors = [(cls, key, fm) for cls, (name, key, fm) in zip(classes, seen, strict=True) if name == "Subtensor"]
    assert subtensors and all(fm for _, _, fm in subtensors), seen
    # a[1:], c[1:], b[1:]: one key per op class, inside the copy and out (inside, the copy's
    # passes make it the compact Subtensor, an intrinsic; outside, no pass runs)
    keys = {cls: {key for c, key, _ in subtensors if c is cls} for cls, _, _ in subtensors}
    assert all(len(k) == 1 for k in keys.values()), subtensors
    assert any(name == "AsWritten" for name, _, _ in seen)
    inner_arith = [fm for name, _, fm in seen if name in ("Elemwise", "FusedElemwise", "ScalarizedElemwise")]
    assert inner_arith and not all(inner_arith), seen  # the copy's product: fast math off
    ref = reference([a, c, b], pt.le(product(a[1:], c[1:]), b[1:]))
    pad = np.zeros(1)
    av, cv, bv = (np.concatenate([pad, x]) for x in (AV, CV, MAINT_BV))
    assert fn(av, cv, bv)[0][0] and ref(av, cv, bv)[0]


# --- an unbatched Blockwise in a copy is its core op (INNER_REWRITES) ----------------------


def test_an_unbatched_blockwise_copy_compiles_its_core_op():
    """A GP's check reads the diagonal of a Cholesky factor: the copy's
    ``Blockwise(Cholesky)`` without batch dimensions is lowered as the ``Cholesky`` itself
    (no Blockwise loop compiled), and the decisions and the factor are the reference's,
    positive definite or not."""
    from pytensor.tensor.blockwise import Blockwise
    from pytensor.tensor.linalg import Cholesky

    from conftest import assert_same_bits, compile_fn

    a = pt.dmatrix("a", shape=(6, 6))
    s = pt.dscalar("s")
    L = pt.linalg.cholesky(a @ a.T + pt.exp(s) * pt.eye(6))
    d = pt.diagonal(L)
    ok = pt.all(pt.gt(d, 0))
    outputs = [ok, pt.switch(ok, pt.log(d).sum(), -np.inf), L]
    fn = compile_fn([a, s], outputs, "policy_as_written")
    copies = [n.op for n in fn.maker.fgraph.toposort() if isinstance(n.op, AsWritten)]
    batched = [c for c in copies if any(isinstance(m.op, Blockwise) for m in c.fgraph.toposort())]
    assert len(batched) >= 2, [str(c) for c in copies]  # the Cholesky's copy and the Matmul's
    lowered = [lowering_graph(op).toposort() for op in batched]
    assert not any(isinstance(m.op, Blockwise) for nodes in lowered for m in nodes)
    assert any(isinstance(m.op, Cholesky) for nodes in lowered for m in nodes)
    ref = reference([a, s], outputs)
    rng = np.random.default_rng(5)
    for scale, sv in [(1.0, 0.3), (1e-3, -40.0), (0.0, -800.0), (1.0, np.nan)]:
        av = rng.normal(size=(6, 6)) * scale
        if scale == 0.0:
            av[0, 0] = np.nan  # a failed factorization: NaN factor, decision False
        for r, e in zip(fn(av, sv), ref(av, sv), strict=True):
            assert_same_bits(r, e)


# --- a decision reads a diagonal at its source (value_moves.DIAGONAL_MOVES) ----------------


def _sem_check_graph():
    """The structural-equation model's check, in small: the likelihood's Cholesky diagonal,
    built as diagonal matrices from exp(psi) and read back, must be positive."""
    from pytensor.tensor.basic import alloc_diag

    psi = pt.dvector("psi", shape=(5,))
    y = pt.dmatrix("y", shape=(7, 5))
    D = alloc_diag(pt.exp(psi))  # (5, 5)
    L = alloc_diag(pt.sqrt(pt.diagonal(D[None], axis1=1, axis2=2)), axis1=1, axis2=2)  # (1, 5, 5)
    d = pt.diagonal(L, axis1=1, axis2=2)
    ok = pt.all(pt.gt(d, 0))
    quad = ((y @ D) * y).sum()  # the rest reads the matrix itself
    logp = pt.switch(ok, -0.5 * quad - pt.log(d).sum(), -np.inf)
    return [psi, y], [ok, logp, pt.grad(logp, psi)]


def test_a_decision_reads_a_diagonal_at_its_source():
    """No diagonal matrix is built in an opaque copy to read its diagonal back; the
    decision, at the boundary (exp underflowing to 0, so sqrt 0 > 0 is False), at NaN and
    elsewhere, is the reference's, and the values agree with it."""
    from pytensor.tensor.basic import AllocDiag

    from conftest import compile_fn

    inputs_, outputs = _sem_check_graph()
    fn = compile_fn(inputs_, outputs, "policy_default")
    copies = [n.op for n in fn.maker.fgraph.toposort() if isinstance(n.op, AsWritten)]
    assert not any(isinstance(m.op, AllocDiag) for c in copies for m in c.fgraph.toposort()), [str(c) for c in copies]
    ref = reference(inputs_, outputs)
    rng = np.random.default_rng(11)
    y = rng.normal(size=(7, 5))
    for psi in ([0.1, -0.3, 0.2, 1.0, -2.0], [0.1, -800.0, 0.2, 1.0, -2.0], [0.1, np.nan, 0.2, 1.0, -2.0],
                [-744.0, -745.0, -746.0, 700.0, 0.0]):
        res, exp_ = fn(np.array(psi), y), ref(np.array(psi), y)
        assert bool(res[0]) == bool(exp_[0])
        np.testing.assert_allclose(res[1], exp_[1], rtol=1e-12)
        np.testing.assert_allclose(res[2], exp_[2], rtol=1e-9, atol=1e-300)


def test_the_diagonal_moves_keep_every_element():
    """Each move gives the elements the graph as written gives, at other axes and
    offsets too (numpy's diagonal on the unrewritten graph as the reference)."""
    from pytensor.graph.fg import FunctionGraph
    from pytensor.tensor.basic import alloc_diag

    from ptnumba_codegen.as_written.value_moves import read_diagonals_at_their_source

    v = pt.dmatrix("v", shape=(2, 4))
    m = pt.tensor3("m", dtype="float64", shape=(3, 4, 4))
    cases = [
        pt.diagonal(alloc_diag(v, axis1=1, axis2=2), axis1=1, axis2=2),
        pt.diagonal(alloc_diag(v, offset=1, axis1=1, axis2=2), offset=1, axis1=1, axis2=2),
        pt.diagonal(alloc_diag(v, offset=1, axis1=1, axis2=2), offset=0, axis1=1, axis2=2),
        pt.diagonal(m[None, None], axis1=3, axis2=4),
        pt.diagonal(m[None], offset=-1, axis1=2, axis2=3),
    ]
    fg = FunctionGraph([v, m], cases, clone=True)
    read_diagonals_at_their_source(fg)
    assert not any(type(n.op).__name__ == "AllocDiag" for n in fg.toposort())
    with pytensor.config.change_flags(numba__fastmath=False):
        before = pytensor.function([v, m], cases, mode=Mode(linker="py", optimizer=None))
        after = pytensor.function(fg.inputs, fg.outputs, mode=Mode(linker="py", optimizer=None))
    rng = np.random.default_rng(2)
    vals = rng.normal(size=(2, 4)), rng.normal(size=(3, 4, 4))
    for b, a in zip(before(*vals), after(*vals), strict=True):
        assert b.shape == a.shape
        np.testing.assert_array_equal(b, a)
