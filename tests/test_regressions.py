"""Regressions found by running PyTensor's own numba tests with the policy switched on
(scripts/conformance.sh)."""

import pickle

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
import scipy.special
from pytensor.graph.basic import Apply
from pytensor.scalar.basic import UnaryScalarOp
from pytensor.scalar.loop import ScalarLoop
from pytensor.tensor.elemwise import Elemwise

import ptnumba_codegen
from conftest import assert_no_fallback, compile_fn, policy_nodes


@pytest.mark.parametrize("dtype", ["uint8", "uint32", "int16"])
def test_bitwise_and_reduction_identity_wraps_like_c(dtype):
    x = pt.matrix("x", dtype=dtype)
    from pytensor.tensor.elemwise import CAReduce

    outs = [CAReduce(ps.and_, axis=(0,))(x), CAReduce(ps.and_, axis=None)(x)]
    fn = compile_fn([x], outs, "policy_rewritten", cache_key=("band", dtype))
    assert_no_fallback(fn)
    v = np.array([[7, 5, 255 % np.iinfo(dtype).max], [3, 1, 6]], dtype=dtype)
    ref = compile_fn([x], outs, "stock_strict", cache_key=("band", dtype))(v)
    for a, b in zip(fn(v), ref, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fn(v)[0], np.bitwise_and.reduce(v, axis=0))


class IntegerGamma(UnaryScalarOp):
    """A scalar op whose stock numba lowering is the object-mode fallback."""

    nfunc_spec = ("scipy.special.gamma", 1, 1)

    def make_node(self, x):
        x = ps.as_scalar(x)
        return Apply(self, [x], [x.type()])

    def impl(self, x):
        return scipy.special.gamma(x).astype("int64")


def test_stock_call_of_an_object_mode_fallback():
    x = pt.scalar("x", dtype="int64")
    g = Elemwise(IntegerGamma())(x) + 1
    with pytest.warns(UserWarning, match="object mode"):
        fn = pytensor.function([x], g, mode=ptnumba_codegen.policy_mode("rewritten"))
    assert_no_fallback(fn)
    assert fn(np.array(5, dtype="int64")) == 25


def test_bare_scalar_ops_and_loops_do_not_recurse():
    x = ps.float64("x")
    loop = ScalarLoop(init=[x], update=[ps.psi(x)])
    fn = pytensor.function([x], [loop(1, x), ps.psi(x) * 2.0], mode=ptnumba_codegen.policy_mode("rewritten"))
    nodes = policy_nodes(fn)
    assert nodes and all(ptnumba_codegen.fallback_reason(n) is None for n in nodes)
    res = fn(0.5)
    np.testing.assert_allclose(res[0], scipy.special.psi(0.5))
    np.testing.assert_allclose(res[1], 2 * scipy.special.psi(0.5))


def test_compiled_functions_with_policy_ops_pickle():
    x, y = pt.vectors("x", "y")
    fn = pytensor.function([x, y], [pt.exp(x) * y, (x - y).sum()], mode=ptnumba_codegen.policy_mode("strict"))
    clone = pickle.loads(pickle.dumps(fn))
    ops = [n.op for n in policy_nodes(clone)]
    assert ops and all(op.policy.name == "strict" for op in ops)
    assert [type(n.op) for n in policy_nodes(clone)] == [type(n.op) for n in policy_nodes(fn)]
    v = np.linspace(0, 1, 5)
    for a, b in zip(clone(v, v), fn(v, v), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_round_half_away_from_zero_is_native_and_matches_stock(dtype):
    x = pt.vector("x", dtype=dtype)
    out = pt.round(x, mode="half_away_from_zero") * 2
    fn = compile_fn([x], out, "policy_strict", cache_key=("rhafz", dtype))
    from ptnumba_codegen.lowering.rules import rule_kind

    assert rule_kind(ps.round_half_away_from_zero) == "python:_round_half_away_from_zero"  # not a stock call
    v = np.array([0.5, -0.5, 1.5, -2.5, 0.49999997, -0.49999997, 0.49999999999999994, np.nan, np.inf, -0.0], dtype=dtype)
    with pytest.warns(UserWarning, match="object mode"):
        ref = compile_fn([x], out, "stock_strict", cache_key=("rhafz", dtype))
    np.testing.assert_array_equal(fn(v), ref(v))
