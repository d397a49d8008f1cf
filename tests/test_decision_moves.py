"""Decisions moved to a producer's operand (`ptnumba_codegen.analysis.robust.MOVED_DECISIONS`,
`ptnumba_codegen.as_written.decision_moves`): ``log(w) == -inf`` decided as ``w == 0``.

Each row is an equivalence for every value, NaN included: checked against glibc's ``log``
itself (`exact_lanes.libm_reference`: libm's symbol through a pointer) on every special
value, 10^5 consecutive doubles around 0, the smallest subnormal, the smallest normal, 1 and
the largest finite (both signs) and 10^6 random bit patterns; the negation rows against
IEEE negation at the same points for several constants. Then whole graphs: every decision
equal to the reference (``Mode(linker="numba", optimizer=None)``, fastmath off), float64
and float32, inlined and opaque copies, with the log no longer computed. And the checks
fail for wrong rows (``w < 0``, ``-0`` dropped, ``!=`` as ``>``, the comparison not swapped),
in the table and in compiled graphs.
"""

from __future__ import annotations

import operator

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import dfs_rewriter
from pytensor.scalar import basic as ps

from conftest import compile_fn
from ptnumba_codegen.analysis import robust
from ptnumba_codegen.analysis.robust import MOVED_DECISIONS, MovedDecision, moved_decision
from test_class_rules import around  # the 2k + 1 doubles around |x|, and their negatives

OPS = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq, "ne": operator.ne}
MAX64 = float(np.finfo(np.float64).max)
DENORM_MIN64, TINY64 = 2.0**-1074, 2.0**-1022
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, DENORM_MIN64, -DENORM_MIN64, TINY64, -TINY64, MAX64, -MAX64, 1.0, -1.0])
EDGES = (0.0, DENORM_MIN64, 2.0**-1060, TINY64, 1.0, MAX64, np.inf)


def points(k=50_000, n_random=1_000_000):
    parts = [SPECIAL, *(around(e, k) for e in EDGES)]
    parts.append(np.random.default_rng(0).integers(0, 2**64, n_random, dtype=np.uint64).view(np.float64))
    return np.concatenate(parts)


def glibc_log(x):
    from ptnumba_codegen.lowering.vecmath.exact_lanes import libm_reference

    return libm_reference("log", np.ascontiguousarray(x, dtype=np.float64))


def violations(pred, moved, xs, producer=glibc_log) -> int:
    """Where ``producer(x) op c`` and ``moved(x)`` differ: ``pred`` is (op, c), ``moved`` a
    predicate on x (a callable) or (op, c)."""
    op, c = pred
    with np.errstate(all="ignore"):
        want = OPS[op](producer(xs), c)
        got = moved(xs) if callable(moved) else OPS[moved[0]](xs, moved[1])
    return int((want != got).sum())


# -- the rows, against glibc ---------------------------------------------------------------


@pytest.mark.parametrize("key", list(MOVED_DECISIONS), ids=lambda k: f"{k[0].__name__}-{k[1]}-{k[2]}")
def test_every_log_row_is_glibcs_outcome_at_every_point(key):
    row = MOVED_DECISIONS[key]
    assert row.why
    assert violations((row.op, row.c), (row.moved_op, row.moved_c), points()) == 0


@pytest.mark.parametrize(
    "pred, wrong",
    [
        (("eq", -np.inf), ("lt", 0.0)),  # w < 0: NaN logs, not -inf
        (("eq", -np.inf), lambda x: (x == 0) & ~np.signbit(x)),  # -0 dropped: log(-0) = -inf
        (("eq", -np.inf), ("le", DENORM_MIN64)),  # the smallest subnormal's log is finite
        (("ne", -np.inf), ("gt", 0.0)),  # negative and NaN w: log is NaN, != -inf holds
        (("gt", -np.inf), ("ge", 0.0)),  # +-0: log is -inf, not above it
        (("eq", np.inf), ("ge", MAX64)),  # log(DBL_MAX) is finite
    ],
    ids=["lt0", "minus_zero_dropped", "le_denorm", "ne_as_gt", "gt_as_ge", "eq_inf_as_ge_max"],
)
def test_the_check_catches_a_wrong_row(pred, wrong):
    assert violations(pred, wrong, points(2_000, 10_000)) > 0


CONSTANTS = (0.0, -0.0, 1.5, -1.5, np.inf, -np.inf, np.nan, DENORM_MIN64)


@pytest.mark.parametrize("op", list(OPS))
def test_negation_moves_are_exact_for_every_constant(op):
    xs = points(2_000, 100_000)
    for producer in (ps.neg, ps.mul):
        operands = [None] if producer is ps.neg else [-1.0, None]
        for c in CONSTANTS:
            k, op2, c2, why = moved_decision(producer, op, c, operands)
            assert k == len(operands) - 1 and why
            assert violations((op, c), (op2, c2), xs, producer=operator.neg) == 0
            if op not in ("eq", "ne") and not np.isnan(c):  # the check sees an unswapped comparison
                assert violations((op, c), (op, c2), xs, producer=operator.neg) > 0


def test_what_is_not_moved():
    assert moved_decision(ps.mul, "eq", 0.0, [-2.0, None]) is None  # -2 * w rounds
    assert moved_decision(ps.mul, "eq", 0.0, [None, None]) is None
    assert moved_decision(ps.log, "lt", np.inf, [None]) is None  # 0 <= w < inf: two comparisons
    assert moved_decision(ps.log, "eq", 0.0, [None]) is None  # no row (w == 1 would be one)
    assert moved_decision(ps.exp, "eq", 0.0, [None]) is None


# -- the rewrite ---------------------------------------------------------------------------


def _rewritten(outputs, inputs):
    from ptnumba_codegen.as_written.decision_moves import decide_on_operands
    from ptnumba_codegen.as_written.freeze import fold_exact_constants

    fg = FunctionGraph(inputs, outputs, clone=False)
    dfs_rewriter(fold_exact_constants).rewrite(fg)  # as in freeze.inline: broadcast constants folded
    dfs_rewriter(decide_on_operands).rewrite(fg)
    return fg


def test_the_rewrite_follows_the_chain_and_keeps_other_readers():
    x = pt.vector("x")
    w = x ** pt.constant(-1.0, dtype="float32")
    lw = pt.log(w)
    fg = _rewritten([pt.eq(-1 * lw, -np.inf), pt.lt(-np.inf, lw), lw], [x])
    eq, lt, kept = fg.outputs
    assert isinstance(eq.owner.op.scalar_op, ps.EQ) and eq.owner.inputs[0] is w
    assert float(eq.owner.inputs[1].data[0]) == np.inf
    assert isinstance(lt.owner.op.scalar_op, ps.GT) and lt.owner.inputs[0] is w  # -inf < log(w): w > 0
    assert float(lt.owner.inputs[1].data[0]) == 0.0
    assert kept.owner.op.scalar_op == ps.log  # the log's own reader still has it


@pytest.mark.parametrize("dtype", ["int8", "int64", "complex128"])
def test_the_rewrite_leaves_other_dtypes_alone(dtype):
    """-(-128) wraps in int8; a complex log is not the table's."""
    x = pt.vector("x", dtype=dtype)
    outs = [pt.eq(-x, 0), pt.eq(pt.log(x), -np.inf)]
    fg = _rewritten(outs, [x])
    assert [str(o.owner.inputs[0].owner.op) for o in fg.outputs] == [str(o.owner.inputs[0].owner.op) for o in outs]


# -- whole graphs against the reference ----------------------------------------------------


def _graph(dtype, keep_log=True):
    """PyMC's Gamma checks and logpow, and the rows' comparisons, on computed values (the
    decisions on ``log(v)`` share one cone copy computing it: each decision is frozen alone
    reading it); ``keep_log``: and one comparison no row moves."""
    x, a = pt.vector("x", dtype=dtype), pt.vector("a", dtype=dtype)
    v = x / pt.exp(a)
    w = v ** pt.constant(-1.0, dtype="float32")
    lv = pt.log(v)
    outs = [
        pt.eq(-1 * pt.log(w), -np.inf),  # the gamma GLM's logpow
        pt.eq(lv, -np.inf),
        pt.neq(lv, -np.inf),
        pt.gt(lv, -np.inf),
        pt.le(lv, -np.inf),
        pt.ge(lv, -np.inf),
        pt.lt(-np.inf, lv),  # the constant on the left
        pt.eq(lv, np.inf),
        pt.neq(lv, np.inf),
        pt.le(lv, np.inf),
        pt.ge(-lv, -np.inf),  # -log(v) >= -inf: log(v) <= inf
        pt.gt(pt.pow(w, -1.0), 0),
    ]
    if keep_log:
        outs.append(pt.lt(lv, np.inf))  # no row: the log stays for this one
    return [x, a], outs


def _edge_inputs(dtype):
    info = np.finfo(dtype)
    with np.errstate(all="ignore"):
        special = SPECIAL.astype(dtype)
    edges = [0.0, float(info.smallest_subnormal), float(info.smallest_normal), 1.0, float(info.max), np.inf]
    xs = [special]
    for e in edges:
        b = int(np.array(e, dtype).view(f"int{info.bits}"))
        top = int(np.array(np.inf, dtype).view(f"int{info.bits}"))
        bits = np.arange(max(b - 2_000, 0), min(b + 2_000, top) + 1).astype(f"int{info.bits}")
        v = bits.view(dtype)
        xs += [v, -v]
    return np.concatenate(xs)


def _log_lines(fn):
    from ptnumba_codegen.explain import explain

    return [line for line in str(explain(fn)).splitlines() if "= Log(" in line]


@pytest.mark.parametrize("backend", ["policy_as_written", "policy_as_written_opaque"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_moved_decisions_equal_the_reference(dtype, backend):
    inputs, outs = _graph(dtype)
    fn = compile_fn(inputs, outs, backend, cache_key=f"moves_{dtype}")
    ref = compile_fn(inputs, outs, "unoptimized_strict", cache_key=f"moves_{dtype}")
    xs = _edge_inputs(dtype)
    for av in (0.0, -1.0, 80.0, 700.0, -700.0):
        a = np.full_like(xs, av)
        for k, (got, want) in enumerate(zip(fn(xs, a), ref(xs, a), strict=True)):
            np.testing.assert_array_equal(got, want, err_msg=f"output {k}, a = {av}")


def test_the_copies_compute_the_log_only_for_a_comparison_no_row_moves():
    """Every log the copies compute is moved away, unless a comparison no row moves
    (``log(v) < inf``) reads it: then once."""
    inputs, outs = _graph("float64")
    fn = compile_fn(inputs, outs, "policy_as_written", cache_key="moves_float64")
    assert len(_log_lines(fn)) == 1
    inputs, outs = _graph("float64", keep_log=False)
    fn = compile_fn(inputs, outs, "policy_as_written")
    assert _log_lines(fn) == []
    ref = compile_fn(inputs, outs, "unoptimized_strict")
    xs = _edge_inputs("float64")
    for got, want in zip(fn(xs, np.zeros_like(xs)), ref(xs, np.zeros_like(xs)), strict=True):
        np.testing.assert_array_equal(got, want)


def test_an_opaque_copy_moves_its_own_decision():
    """An opaque copy (compiled on its own) moves the decisions in its own graph: the gamma
    GLM's ``-1 * log(pow(v, -1)) == -inf`` computes no log."""
    x, a = pt.vectors("x", "a")
    w = (x / pt.exp(a)) ** pt.constant(-1.0, dtype="float32")
    outs = [pt.eq(-1 * pt.log(w), -np.inf)]
    fn = compile_fn([x, a], outs, "policy_as_written_opaque")
    assert _log_lines(fn) == []
    ref = compile_fn([x, a], outs, "unoptimized_strict")
    xs = _edge_inputs("float64")
    for av in (0.0, 700.0, -700.0):
        np.testing.assert_array_equal(fn(xs, np.full_like(xs, av))[0], ref(xs, np.full_like(xs, av))[0])


def test_a_wrong_row_fails_the_reference(monkeypatch):
    """The whole-graph check catches a wrong row: ``log(w) == -inf`` as ``w < 0`` (or as
    ``+0`` only)."""
    x, a = pt.vectors("x", "a")
    out = pt.eq(pt.log(x / pt.exp(a)), -np.inf)
    ref = compile_fn([x, a], [out], "unoptimized_strict")
    xs = _edge_inputs("float64")
    zeros = np.zeros_like(xs)
    key = (ps.Log, "eq", -np.inf)
    for wrong in (("lt", 0.0), ("eq", np.inf)):
        monkeypatch.setitem(robust.MOVED_DECISIONS, key, MovedDecision(ps.Log, "eq", -np.inf, *wrong, "wrong"))
        fn = compile_fn([x, a], [out], "policy_as_written")
        assert not np.array_equal(fn(xs, zeros)[0], ref(xs, zeros)[0]), wrong
    monkeypatch.undo()
    fn = compile_fn([x, a], [out], "policy_as_written")
    np.testing.assert_array_equal(fn(xs, zeros)[0], ref(xs, zeros)[0])


def test_default_is_untouched():
    """Under `rewritten` (decisions from the rewritten graph) there are no copies: the decision reads the log it shares with the rest."""
    inputs, outs = _graph("float64")
    fn = compile_fn(inputs, outs, "policy_rewritten", cache_key="moves_float64")
    ref = compile_fn(inputs, outs, "stock_strict", cache_key="moves_float64")
    xs = _edge_inputs("float64")
    for got, want in zip(fn(xs, np.zeros_like(xs)), ref(xs, np.zeros_like(xs)), strict=True):
        np.testing.assert_array_equal(got, want)


# -- the gamma GLM -------------------------------------------------------------------------


def _gamma_glm(backend):
    from pytensor.compile.mode import Mode

    from ptnumba_codegen.tools import modelbench as mb
    from ptnumba_codegen.tools import models as catalogue

    model = catalogue.MODELS["gamma_glm"](50, catalogue.DEFAULT_SEED)
    if backend != "unoptimized_strict":
        return mb.compile_model(model, backend, 0, cache=True)
    with pytensor.config.change_flags(numba__fastmath=False):
        fn = model.logp_dlogp_function(ravel_inputs=True, mode=Mode(linker="numba", optimizer=None))._pytensor_function
    return mb.Compiled(fn, None, mb.evaluation_point(model, 0), 0.0, 0.0, 0)


def test_the_gamma_glms_checks_compute_one_division_and_no_log():
    """``beta > 0`` and ``logpow``'s ``log(beta) == -inf`` as written: one ``shape / mu``
    (the copies merged into one kernel), its two pows by class, no log; and the decisions
    (logp = -inf, zero and NaN gradients) are the reference's, at points where ``mu`` or
    ``shape`` overflows or underflows (where a check fails the reference raises, and the
    function, whose checks PyMC turns into a switch, gives -inf)."""
    from ptnumba_codegen.explain import explain

    pytest.importorskip("pymc")
    from pymc.logprob.utils import ParameterValueError

    aw, ref = _gamma_glm("policy_as_written"), _gamma_glm("unoptimized_strict")
    strict = [line for line in str(explain(aw.fn)).splitlines() if "comparison_sensitive" in line]
    assert sum("= TrueDiv(" in line for line in strict) == 1
    assert sum("class pow" in line for line in strict) == 2
    logs = _log_lines(aw.fn)  # the rest's log(beta) only, fast (no log decides)
    assert len(logs) == 1 and "comparison_sensitive" not in logs[0] and "robustly" not in logs[0], logs
    base = aw.point
    for k, value in [(None, None), (0, 800.0), (0, -800.0), (-1, 800.0), (-1, -800.0), (-1, np.inf), (-1, -np.inf)]:
        point = base.copy()
        if k is not None:
            point[k] = value
        lp, g = aw.fn(point)
        try:
            lp_ref, g_ref = ref.fn(point)
        except ParameterValueError:  # the reference raises where a check fails: -inf
            assert lp == -np.inf, (k, value, lp)
            continue
        for got, want in ((lp, lp_ref), (g, g_ref)):
            for pattern in (np.isnan, np.isneginf, np.isposinf, lambda v: v == 0):
                assert np.array_equal(pattern(got), pattern(want)), (k, value, got, want)
