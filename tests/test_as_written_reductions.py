"""Sums in decisions' cones put back into the graph under ``as_written``.

A copy whose cone holds a sum over one axis, or a Softmax (its max, exp, row sum and
divide), is inlined into the kernels (`freeze.ONE_AXIS_REDUCERS`, `freeze.INLINED_SYMBOLIC_OPS`):
it fuses with its neighbours and shares the exp and the row sum with the rest of the
graph (PyMC's Categorical: ``log(p[y])`` and the checks on ``p`` and ``sum(p)``). Every
decision must still equal the reference, ``Mode(linker="numba", optimizer=None)`` with
fastmath off (backend ``unoptimized_strict``), whose sums are stock's CAReduce loops.

The thresholds are the reference's own sums and the float just below them, so a sum that
differs from the reference's by one bit (another accumulation order, a fast exp shared
from the rest, another expansion of the Softmax) flips one of the two decisions. The data
make other orders round differently on most rows (checked first, so the test keeps its
teeth). Input layouts: C, F, and reversed and strided views, since a fused kernel picks
its loop order from its inputs' strides.
"""

from __future__ import annotations

import operator
from functools import reduce

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.tensor.special import log_softmax, softmax

from conftest import compile_fn

Z, b = pt.matrix("Z"), pt.vector("b")
T = pt.tensor3("T")
lo1, hi1, lo0, hi0, lo_t, hi_t = (pt.vector(n) for n in ("lo1", "hi1", "lo0", "hi0", "lo_t", "hi_t"))


def _layouts(a):
    """C, F, and a reversed, strided view holding the same values (numba types 'A')."""
    wide = np.empty((a.shape[0], 2 * a.shape[1]))
    wide[:, ::2] = a[:, ::-1]
    return [("C", a), ("F", np.asfortranarray(a)), ("A", wide[:, ::2][:, ::-1])]


def _mixed(rng, shape):
    """Values of mixed sign and magnitude: their sum rounds differently in other orders."""
    return rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)


def _thresholds(values):
    """(the float just below each value, the value): ``s <= lo`` and ``s <= hi`` pin ``s``."""
    return np.nextafter(values, -np.inf), values


def _reorderings_differ(rows):
    """Fraction of rows whose sum in reversed order differs from the sum in index order."""
    # one IEEE add after the other (Python's sum() compensates since 3.12)
    forward = np.array([reduce(operator.add, map(float, r)) for r in rows])
    backward = np.array([reduce(operator.add, map(float, r[::-1])) for r in rows])
    return np.mean(forward != backward)


def _opaque_copies(fn) -> list:
    from ptnumba_codegen.as_written.op import AsWritten

    return [str(n.op) for n in fn.maker.fgraph.toposort() if isinstance(n.op, AsWritten)]


def _decisions_equal(res, expected, labels):
    for label, a, r in zip(labels, res, expected, strict=True):
        a, r = np.asarray(a), np.asarray(r)
        assert a.dtype == r.dtype == np.bool_, label
        bad = np.flatnonzero(a != r)
        assert bad.size == 0, f"{label}: {bad.size} decision(s) differ from the reference, first at {bad[:5]}"


def test_one_axis_sums_decide_as_written_fused_and_in_every_layout():
    """Row and column sums of an elementwise cone, fused with one another and with a
    sum of a 3-d tensor over its middle axis: stock adds in increasing index along the
    axis, and so must the kernels they are fused into."""
    w = Z * 1.5 + b  # a computed cone (b broadcast along the rows)
    s1, s0 = w.sum(axis=1), w.sum(axis=0)
    st = (T * 1.5).sum(axis=1).ravel()
    sums = [s1, s0, st]
    decisions = [s1 <= lo1, s1 <= hi1, s0 <= lo0, s0 <= hi0, st <= lo_t, st <= hi_t]
    labels = ["s1 <= lo", "s1 <= hi", "s0 <= lo", "s0 <= hi", "st <= lo", "st <= hi"]
    inputs = [Z, b, T, lo1, hi1, lo0, hi0, lo_t, hi_t]
    values = compile_fn([Z, b, T], sums, "unoptimized_strict", cache_key="aw_sums_values")
    ref = compile_fn(inputs, decisions, "unoptimized_strict", cache_key="aw_sums")
    fn = compile_fn(inputs, decisions, "policy_as_written", cache_key="aw_sums")
    assert not _opaque_copies(fn)  # every cone put back into the kernels
    rng = np.random.default_rng(21)
    Zb, bv = _mixed(rng, (301, 9)), _mixed(rng, 9)
    Tb = _mixed(rng, (7, 11, 5))
    assert _reorderings_differ(Zb * 1.5 + bv) > 0.5 and _reorderings_differ((Zb * 1.5 + bv).T) > 0.5
    for name, Zv in _layouts(Zb):
        Tv = {"C": Tb, "F": np.asfortranarray(Tb), "A": np.moveaxis(Tb, 0, -1)[:, ::-1]}[name]
        s1v, s0v, stv = values(Zv, bv, Tv)
        args = [Zv, bv, Tv, *_thresholds(s1v), *_thresholds(s0v), *_thresholds(stv)]
        _decisions_equal(fn(*args), ref(*args), [f"{label} ({name})" for label in labels])


@pytest.mark.parametrize("shape", [(70_001, 3), (3, 70_001)])
def test_long_one_axis_sums_decide_as_written(shape):
    """Sums long enough for the kernels to block or split the work over threads (a vector's
    full sum too): a strict sum must still add one element after the other, in index order."""
    x = pt.vector("x")
    w, v = Z * 1.5 + 0.25, x * 1.5
    sums = [w.sum(axis=0), w.sum(axis=1), v.sum().ravel()]
    bounds = [lo0, hi0, lo1, hi1, lo_t, hi_t]
    decisions = [sums[k // 2] <= t for k, t in enumerate(bounds)]
    labels = ["s0 <= lo", "s0 <= hi", "s1 <= lo", "s1 <= hi", "sum(x) <= lo", "sum(x) <= hi"]
    key = f"aw_long_sums_{shape}"
    values = compile_fn([Z, x], sums, "unoptimized_strict", cache_key=key + "_values")
    ref = compile_fn([Z, x, *bounds], decisions, "unoptimized_strict", cache_key=key)
    fn = compile_fn([Z, x, *bounds], decisions, "policy_as_written", cache_key=key)
    assert not _opaque_copies(fn)
    rng = np.random.default_rng(3)
    Zb, xb = _mixed(rng, shape), _mixed(rng, 150_001)
    for name, Zv in _layouts(Zb):
        args = [Zv, xb, *(t for s in values(Zv, xb) for t in _thresholds(np.asarray(s)))]
        _decisions_equal(fn(*args), ref(*args), [f"{label} ({name})" for label in labels])


def _softmax_function(backend, outs_of, key):
    y = pt.lvector("y")
    zc = Z + b  # as PyMC writes alpha + X @ beta
    p = softmax(zc, axis=-1)
    e = pt.exp(zc - zc.max(axis=1, keepdims=True))
    s, big = p.sum(axis=1), e.sum(axis=1)
    # the rest reads the same exp and row sums: the log-likelihood and its gradient
    logp = log_softmax(zc, axis=-1)[pt.arange(y.shape[0]), y].sum() + pt.log(big).sum()
    outs = outs_of(p=p, s=s, big=big, logp=logp)
    grads = pytensor.grad(logp, [Z, b]) if backend != "values" else []
    mode = "unoptimized_strict" if backend == "values" else backend
    fn = compile_fn([Z, b, y, lo1, hi1, lo0, hi0], [*outs, *grads], mode, cache_key=key, on_unused_input="ignore")
    return fn, len(outs)


def test_softmax_row_sums_decide_as_written_while_the_rest_shares_them():
    """``sum(softmax(z))`` and ``sum(exp(z - max(z)))`` compared at the reference's own
    values, in a function whose log-likelihood and gradient read the same exp and sums:
    the shared nodes must be the as-written ones, strict (a fast exp or another order
    flips a decision), and PyMC's checks ``0 <= p <= 1`` too."""

    def decide(p, s, big, logp):
        return [s <= lo1, s <= hi1, big <= lo0, big <= hi0, pt.all(p >= 0, axis=1), pt.all(p <= 1, axis=1)]

    labels = ["sum(p) <= lo", "sum(p) <= hi", "sum(e) <= lo", "sum(e) <= hi", "p >= 0", "p <= 1"]
    values, _ = _softmax_function("values", lambda p, s, big, logp: [s, big], "aw_softmax_values")
    ref, k = _softmax_function("unoptimized_strict", decide, "aw_softmax")
    fn, _ = _softmax_function("policy_as_written", decide, "aw_softmax")
    assert not _opaque_copies(fn)  # the Softmax and its sums put back into the kernels
    rng = np.random.default_rng(7)
    n = 2000
    Zb, bv = rng.normal(0.0, 3.0, (n, 5)), rng.normal(0.0, 1.0, 5)
    y = rng.integers(0, 5, n)
    for name, Zv in _layouts(Zb):
        sv, bigv = values(Zv, bv, y, *[np.zeros(n)] * 4)
        args = [Zv, bv, y, *_thresholds(sv), *_thresholds(bigv)]
        res, expected = fn(*args), ref(*args)
        _decisions_equal(res[:k], expected[:k], [f"{lb} ({name})" for lb in labels])
        # values only: the two softmax terms cancel to exact zeros as written and to
        # 1e-18 after fast_run's rewrites (arithmetic, not a decision; so on main too)
        for g, h in zip(res[k:], expected[k:], strict=True):
            np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-12)


def test_softmax_row_sums_differ_in_other_orders_and_with_a_fast_exp():
    """The test above has teeth: on its data the row sums of the softmax round differently
    when added in reversed order, and numpy's exp (not glibc's) moves some of them."""
    rng = np.random.default_rng(7)
    Zb, bv = rng.normal(0.0, 3.0, (2000, 5)), rng.normal(0.0, 1.0, 5)
    zc = Zb + bv
    e = np.exp(zc - zc.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    assert _reorderings_differ(p) > 0.2
    assert _reorderings_differ(e) > 0.05


@pytest.mark.parametrize("axes", [None, (0, 2)])
def test_sums_over_several_axes_stay_opaque_and_decide_as_written(axes):
    """Over several axes stock adds in the input's stride order (memory order for an F
    array); such a cone is compiled on its own, with stock's loops."""
    from ptnumba_codegen.as_written.freeze import cone_op_inlinable

    total = (T * 1.5).sum(axis=axes)
    assert not cone_op_inlinable(total.owner)
    s = total.ravel()
    decisions = [s <= lo_t, s <= hi_t]
    key = f"aw_multi_axis_sums_{axes}"
    values = compile_fn([T], [s], "unoptimized_strict", cache_key=key + "_values")
    ref = compile_fn([T, lo_t, hi_t], decisions, "unoptimized_strict", cache_key=key)
    fn = compile_fn([T, lo_t, hi_t], decisions, "policy_as_written", cache_key=key)
    rng = np.random.default_rng(5)
    Tb = _mixed(rng, (13, 11, 9))
    for name, Tv in [("C", Tb), ("F", np.asfortranarray(Tb)), ("A", np.moveaxis(Tb, 0, -1)[:, ::-1])]:
        (sv,) = values(Tv)
        args = [Tv, *_thresholds(np.asarray(sv))]
        _decisions_equal(fn(*args), ref(*args), [f"s <= lo ({name})", f"s <= hi ({name})"])
