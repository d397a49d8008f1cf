"""Cones of constants (`as_written.constant_folds`): folded with the reference's bits, or
kept opaque; no node of constants only reaches PyTensor's later rewrites.

PyTensor's ``local_inline_composite_constants`` fails on a fused `Composite` with no
variable input (``max() iterable argument is empty``). Under ``on_opt_error="raise"``
(PyMC's test configuration) that is an exception; otherwise a printed traceback.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Constant
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.rewriting.basic import dfs_rewriter
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise

from ptnumba_codegen.as_written.constant_folds import LIBM_FOLDS, NUMPY_FOLDS, constant_nodes, fold_exact
from ptnumba_codegen.as_written.libm_operands import pow_as_written
from tests.conftest import compile_fn
from tests.references import same_bits

RNG = np.random.default_rng(20261207)
SPECIAL = np.array([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-300, 0.5, 1.0, -1.0, 2.0,
                    709.78, -745.1, 1e300, np.inf, -np.inf, np.nan])


def _folded(node_out):
    """The constant ``fold_exact`` makes of ``node_out`` (an output of a node of
    constants), or None if it leaves the node."""
    fg = FunctionGraph([], [node_out], clone=True)
    dfs_rewriter(fold_exact).rewrite(fg)
    out = fg.outputs[0]
    return out.data if isinstance(out, Constant) else None


def _reference(scalar_op, values):
    """``scalar_op`` elementwise over ``values`` (arrays), as the reference computes it:
    numba with fastmath off, on the graph as written, reading the operands from arrays."""
    xs = [pt.tensor(dtype=v.dtype, shape=(None,) * v.ndim) for v in values]
    out = Elemwise(scalar_op)(*xs)
    fn = compile_fn(xs, out, "unoptimized_strict")
    return fn(*values)


def _libm_cases(op_class):
    if op_class is ps.Pow:  # pairs math.pow computes without raising (no overflow, no 0 ** -y)
        base = np.concatenate([RNG.uniform(0, 20, 300), SPECIAL[np.isfinite(SPECIAL) & (SPECIAL > 0)]])
        expo = np.concatenate([RNG.uniform(-30, 30, 300), [-2.0, 0.5, 2.0, -0.5, 1.0, 3.0, 0.0]])
        base, expo = (a.ravel() for a in np.meshgrid(base, expo))
        with np.errstate(all="ignore"):
            keep = np.isfinite(base**expo)
        return [base[keep], expo[keep]]
    if op_class in (ps.Log, ps.Log1p):
        return [np.concatenate([RNG.uniform(1e-3, 1e3, 500), np.exp(RNG.uniform(-700, 700, 500)), [1.0, 0.5, 5e-324]])]
    if op_class in (ps.Exp, ps.Expm1):
        return [np.concatenate([RNG.uniform(-700, 700, 1000), [0.0, -0.0, 1e-300, -745.1, 5e-324]])]
    return [np.concatenate([RNG.uniform(-50, 50, 1000), [0.0, -0.0, 1e-300, 5e-324]])]


@pytest.mark.parametrize("op_class", sorted(LIBM_FOLDS, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_libm_folds_give_the_references_bits(op_class):
    """A libm fold (CPython's ``math``, glibc's functions) is bit for bit the reference's
    run-time call, over a random and a special-value sample."""
    values = _libm_cases(op_class)
    scalar_op = pow_as_written if op_class is ps.Pow else op_class(ps.upgrade_to_float)
    consts = [pt.constant(v) for v in values]
    folded = _folded(Elemwise(scalar_op)(*consts))
    assert folded is not None
    assert same_bits(folded, _reference(scalar_op, values))


@pytest.mark.parametrize(
    "expression",
    [
        lambda: pt.exp(pt.constant(1000.0)),  # OverflowError in math: the reference gives inf
        lambda: pt.log(pt.constant(-1.0)),  # ValueError in math: the reference gives NaN
        lambda: Elemwise(pow_as_written)(pt.constant(0.0), pt.constant(-1.0)),
        lambda: pt.exp(pt.constant(np.float32(1.5))),  # float32: expf, which math has not
    ],
    ids=["exp-overflow", "log-negative", "pow-zero-negative", "exp-float32"],
)
def test_libm_folds_leave_what_math_would_compute_otherwise(expression):
    assert _folded(expression()) is None


def _numpy_cases(op_class):
    a = np.concatenate([RNG.normal(0, 10, 200), SPECIAL])
    b = np.concatenate([RNG.normal(0, 10, 200), SPECIAL[::-1]])
    if op_class in (ps.Neg, ps.Abs, ps.Sqrt, ps.Reciprocal, ps.IsNan, ps.IsInf, ps.Floor, ps.Ceil, ps.Trunc,
                    ps.Sign, ps.Identity, ps.Cast):
        return [a]
    if op_class is ps.Switch:
        return [a > 0, a, b]
    if op_class in (ps.AND, ps.OR, ps.XOR):
        return [RNG.integers(-100, 100, 50), RNG.integers(-100, 100, 50)]
    if op_class is ps.Invert:
        return [RNG.integers(-100, 100, 50)]
    return [a, b]


def _scalar_op(op_class):
    if op_class is ps.Cast:
        return ps.Cast(ps.float32)
    if op_class in (ps.AND, ps.OR, ps.XOR, ps.Invert, ps.Switch, ps.Identity, ps.Second):
        return op_class(ps.upcast_out)
    if op_class in (ps.LT, ps.GT, ps.LE, ps.GE, ps.EQ, ps.NEQ, ps.IsNan, ps.IsInf):
        return op_class()
    if op_class in (ps.Sqrt, ps.Reciprocal, ps.TrueDiv):
        return op_class(ps.upgrade_to_float)
    return op_class(ps.upcast_out)


@pytest.mark.parametrize("op_class", sorted(NUMPY_FOLDS, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_numpy_folds_give_the_references_bits_where_they_fold(op_class):
    """Each numpy fold, element for element: where its row's test admits the values, the
    reference's bits; where it does not, the node stays."""
    values = _numpy_cases(op_class)
    scalar_op = _scalar_op(op_class)
    when, _why = NUMPY_FOLDS[op_class]
    reference = _reference(scalar_op, values)
    admitted = 0
    for k in range(values[0].shape[0]):
        element = [np.asarray(v[k]) for v in values]
        folded = _folded(Elemwise(scalar_op)(*(pt.constant(e) for e in element)))
        dtype = reference.dtype
        if when is not None and not when([np.asarray(e) for e in element], dtype):
            assert folded is None, element
            continue
        admitted += 1
        assert folded is not None and same_bits(np.asarray(folded, dtype=dtype), reference[k]), (element, folded, reference[k])
    assert admitted > 0


def test_nodes_of_constants_only_are_found():
    x = pt.vector("x")
    fg = FunctionGraph([x], [pt.exp(pt.constant(1000.0)) + x, pt.gt(pt.constant(1.0), pt.constant(0.0))], clone=True)
    assert sorted(type(n.op.scalar_op).__name__ for n in constant_nodes(fg)) == ["Exp", "GT"]


def _decisions_on_constants(x):
    """Decisions whose cones are computed from constants only, the shapes PyMC's checks
    take (a Gamma's ``1 / scale > 0``, a power transform's ``pow(10, -2.0) * sign(10) > 0``,
    bounds of shape (1,)), one whose fold would overflow in ``math`` (kept opaque), beside
    decisions on the input."""
    c = pt.constant
    checks = [
        pt.gt(pt.reciprocal(c(np.float32(1 / 3))), 0),
        pt.gt(Elemwise(pow_as_written)(c(10), c(-2.0)) * pt.sign(c(10)), 0),
        pt.gt(pt.exp(c(1000.0)) * c(0.5), c(1.0)),
        pt.and_(pt.lt(c([-np.inf]) * c([1.0]), c([0.0]) + c([1.0])), pt.gt(c([np.inf]), c([1.0]) - c([0.5]))),
    ]
    cond = checks[0]
    for check in checks[1:]:
        cond = pt.and_(cond, check)
    out = pt.switch(cond, pt.minimum(x * 3.0 * x, 2.0), -1.0).sum()
    out = out + pt.switch(pt.gt(pt.exp(c(2.0)) * 2.0, 14.0), x, 0.0).sum()
    return [out, pytensor.grad(out, x)]


@pytest.mark.parametrize("backend", ["policy_default", "policy_rewritten"])
def test_decisions_on_constants_raise_no_rewrite_failure(backend):
    """Compiled under ``on_opt_error="raise"``: no PyTensor rewrite fails, and the values
    and the gradient's zeros are the graph as written's."""
    x = pt.vector("x")
    with pytensor.config.change_flags(on_opt_error="raise"):
        fn = compile_fn([x], _decisions_on_constants(x), backend)
    ref = compile_fn([x], _decisions_on_constants(x), "unoptimized_strict")
    xv = np.array([0.1, 0.5, np.sqrt(2 / 3), 1.0, -2.0])
    for got, want in zip(fn(xv), ref(xv), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-14)
        assert np.array_equal(np.asarray(got) == 0, np.asarray(want) == 0)
    nodes = fn.maker.fgraph.apply_nodes
    assert not any(
        isinstance(n.op, Elemwise) and n.inputs and all(isinstance(v, Constant) for v in n.inputs) for n in nodes
    )


PYMC_MODELS = {
    "gamma": lambda pm: pm.Gamma("v", 2.0, 3.0),
    "inverse_gamma": lambda pm: pm.InverseGamma("v", 2.0, 3.0),
    "pareto": lambda pm: pm.Pareto("v", 2.0, 3.0),
    "logit_normal": lambda pm: pm.LogitNormal("v", 0.0, 2.0),
    "skew_normal": lambda pm: pm.SkewNormal("v", mu=0.0, sigma=2.0, alpha=1.0),
    "ex_gaussian": lambda pm: pm.ExGaussian("v", mu=0.0, sigma=2.0, nu=1.0),
    "truncated": lambda pm: pm.Truncated("v", pm.Normal.dist(0, 1), lower=-1, upper=2),
    "censored": lambda pm: pm.Censored("v", pm.Normal.dist(0, 1), lower=-1, upper=2, observed=[0.5, 2.0, -1.0]),
    "power": lambda pm: pm.Gamma("v", 2.0, 3.0, transform=pm.distributions.transforms.log),
}


@pytest.mark.parametrize("name", sorted(PYMC_MODELS))
def test_pymc_distributions_compile_under_on_opt_error_raise(name):
    """PyMC's own distributions whose checks read constant parameters: logp and its
    gradient compile under ``on_opt_error="raise"``, with stock's values (numba, fastmath
    off, the same rewrites)."""
    pm = pytest.importorskip("pymc")
    from pytensor.compile.mode import Mode

    import ptnumba_codegen

    with pm.Model() as model:
        PYMC_MODELS[name](pm)
    point = model.initial_point()

    def compiled(mode):
        return model.compile_logp(mode=mode), model.compile_dlogp(mode=mode)

    with pytensor.config.change_flags(on_opt_error="raise"):
        logp, dlogp = compiled(ptnumba_codegen.policy_mode("default"))
    with pytensor.config.change_flags(numba__fastmath=False):
        stock_logp, stock_dlogp = compiled(Mode(linker="numba", optimizer="fast_run"))
    np.testing.assert_allclose(logp(point), stock_logp(point), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dlogp(point), stock_dlogp(point), rtol=1e-10, atol=1e-12)
