"""Indexed writes of constants folded at compile time (constant_writes.py).

A one-hot matrix of observed labels (a Categorical's gradient) is the same at every call:
the policy pass computes it once. Folded or not, the function returns the same bits as
the stock backend; writes that depend on an input, or that would make a constant larger
than the graph's data, stay in the graph."""

from __future__ import annotations

import numpy as np
import pytest
import pytensor
import pytensor.tensor as pt
from pytensor.tensor.subtensor import AdvancedIncSubtensor, IncSubtensor

import ptnumba_codegen
from conftest import compile_fn
from ptnumba_codegen.passes import constant_writes

N, K = 3000, 5


def _labels():
    return np.random.default_rng(2).integers(0, K, size=N)


def _writes(fn):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, (AdvancedIncSubtensor, IncSubtensor))]


def _softmax_loss(eta, data):
    y = pt.constant(_labels())
    onehot = pt.zeros((N, K))[pt.arange(N), y].inc(1.0)
    p = pt.special.softmax(eta, axis=1)
    # the one-hot's row sums and the one-hot itself feed the gradient-like expression
    return (onehot * pt.log(p)).sum() + (onehot.sum(axis=1) * data).sum() + (onehot - p).sum(axis=0)


def test_a_one_hot_of_constants_is_folded_and_values_are_stock_strict_bit_for_bit():
    eta, data = pt.matrix("eta"), pt.vector("data")
    out = _softmax_loss(eta, data)
    rng = np.random.default_rng(3)
    ev, dv = rng.normal(size=(N, K)), rng.normal(size=N)
    fn = compile_fn([eta, data], out, "policy_strict", cache_key="cw_onehot")
    ref = compile_fn([eta, data], out, "stock_strict", cache_key="cw_onehot")
    assert _writes(ref), "the stock graph builds the one-hot at every call"
    assert not _writes(fn), "the one-hot of constants is a constant"
    got, want = fn(ev, dv), ref(ev, dv)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint64), np.asarray(want).view(np.uint64))
    default = compile_fn([eta, data], out, "policy_rewritten", cache_key="cw_onehot")
    assert not _writes(default)
    np.testing.assert_allclose(default(ev, dv), want, rtol=1e-12)


def test_writes_of_inputs_stay():
    v = pt.vector("v")
    out = pt.zeros((N, K))[pt.arange(N), pt.constant(_labels())].inc(v).sum(axis=0)
    fn = compile_fn([v], out, "policy_strict", cache_key="cw_input")
    assert _writes(fn)
    vv = np.random.default_rng(4).normal(size=N)
    np.testing.assert_array_equal(fn(vv), compile_fn([v], out, "stock_strict", cache_key="cw_input")(vv))


def test_writes_larger_than_the_data_stay():
    """2000 x 1000 doubles (16 MB) from a few small constants: above the 1 MiB floor and
    above every constant of the graph, so not folded."""
    x = pt.scalar("x")
    idx = pt.constant(np.arange(0, 2000, 7))
    out = (pt.zeros((2000, 1000))[idx, 3].inc(1.0) * x).sum()
    fn = compile_fn([x], out, "policy_strict", cache_key="cw_big")
    assert _writes(fn)
    assert fn(2.0) == compile_fn([x], out, "stock_strict", cache_key="cw_big")(2.0)


def test_fold_rules_name_their_reasons():
    assert len(constant_writes.FOLD_WHEN) >= 2
    assert all(isinstance(reason, str) and len(reason) > 20 for _, reason in constant_writes.FOLD_WHEN)
    assert constant_writes.MIN_LIMIT_BYTES <= constant_writes.MAX_LIMIT_BYTES


def test_a_catalogue_multinomial_logit_loses_its_one_hot():
    from ptnumba_codegen.tools import models as catalogue
    from ptnumba_codegen.tools import modelbench as mb

    if not catalogue.pymc_available():
        pytest.skip("pymc is not installed")
    model = catalogue.MODELS["multinomial_logit"](200, catalogue.DEFAULT_SEED)
    x0 = mb.evaluation_point(model, catalogue.DEFAULT_SEED)
    pd = model.logp_dlogp_function(ravel_inputs=True, mode=ptnumba_codegen.policy_mode("strict"))
    with pytensor.config.change_flags(numba__fastmath=False):
        stock = model.logp_dlogp_function(ravel_inputs=True, mode="NUMBA")
    assert len(_writes(pd._pytensor_function)) < len(_writes(stock._pytensor_function))
    got, want = pd._pytensor_function(x0), stock._pytensor_function(x0)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g).view(np.uint64), np.asarray(w).view(np.uint64))


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize(
    "how, value",
    [
        ("inc", 0.1),  # sums of 0.1 depend on their order (numpy's pairwise vs the kernel's sequential)
        ("set", -0.0),  # 0.0 + -0.0 is +0.0: which start a sum has shows
    ],
)
def test_reductions_of_written_floats_stay_unless_exact(how, value):
    """The write folds; its float sum over a long axis is folded only when exact in every
    order (integer values, no -0.0). Either way the bits are stock strict's."""
    x = pt.scalar("x")
    idx = pt.constant(np.arange(0, 3000, 1) % 1000)
    written = getattr(pt.zeros((1000,))[idx], how)(value)
    out = [written.sum() * x, pt.exp(written).sum() + x]  # an Elemwise of a folded value stays too
    fn = compile_fn([x], out, "policy_strict", cache_key=("cw_float", how))
    ref = compile_fn([x], out, "stock_strict", cache_key=("cw_float", how))
    reduces = [n for n in fn.maker.fgraph.toposort() if "Sum" in str(n.op) or "reduce" in str(n.op)]
    assert reduces, "a reduction of inexact floats was folded"
    for got, want in zip(fn(1.5), ref(1.5), strict=True):
        np.testing.assert_array_equal(_bits(got), _bits(want))


def test_integer_valued_sums_are_exact_in_any_order():
    ok = constant_writes._integer_valued_without_negative_zero
    assert ok(np.array([[0.0, 1.0, 3.0]]))
    assert not ok(np.array([0.5, 1.0]))
    assert not ok(np.array([-0.0, 1.0]))
    assert not ok(np.array([np.inf, 1.0]))
    assert not ok(np.array([2.0**52, 2.0**52]))
    assert ok(np.array([3, -4], dtype=np.int8))


def test_a_write_an_in_place_op_destroys_gives_it_a_copy():
    """PyTensor's in-place rewrites ran before the pass: a write whose buffer a later op
    overwrites in place is folded, and that op writes into a fresh copy of the constant
    at each call (a constant cannot be destroyed; PyTensor's conformance run caught this
    in a scan gradient). Called twice: the constant is still intact."""
    x = pt.vector("x")
    written = pt.zeros((60,))[pt.constant(np.arange(0, 60, 2))].inc(1.0)
    out = written[pt.constant(np.arange(0, 60, 3))].inc(x)  # in place on the first write
    fn = compile_fn([x], out, "policy_strict", cache_key="cw_destroyed")
    ref = compile_fn([x], out, "stock_strict", cache_key="cw_destroyed")
    assert any(getattr(n.op, "destroy_map", None) for n in _writes(ref)), "the second write is no longer in place"
    [write] = _writes(fn)
    assert write.op.destroy_map and "Identity" in str(write.inputs[0].owner.op)
    assert isinstance(write.inputs[0].owner.inputs[0], pytensor.graph.basic.Constant)
    xv = np.linspace(-1, 1, 20)
    np.testing.assert_array_equal(_bits(fn(xv)), _bits(ref(xv)))
    np.testing.assert_array_equal(_bits(fn(-xv)), _bits(ref(-xv)))  # the constant was not overwritten
