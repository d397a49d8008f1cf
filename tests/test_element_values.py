"""Under ``default`` (and ``rewritten``), an element's value depends only on its inputs and
its expression: not on a `Composite`'s input order, on what else the kernel computes, nor
on where the element sits (array length, offset, stride, vector body or remainder); and a
transcendental with exact lanes has libm's bits whether a decision reads it or not.

An element's arithmetic gets neither ``reassoc`` (LLVM orders a chain by argument rank,
and orders a vector body and its scalar remainder differently), nor ``contract`` (an FMA
is formed where the product has one reader in the kernel), nor ``arcp`` (a reciprocal is
shared where the kernel divides twice by one value). A reduction's accumulator keeps
PyTensor's set: its order is the loop's plan.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pytensor.compile.mode import Mode
from pytensor.scalar.basic import Composite
from pytensor.tensor.elemwise import Elemwise

import ptnumba_codegen
from ptnumba_codegen.backend.ops import is_policy_op
from tests.conftest import compile_fn
from tests.references import same_bits

POLICIES = ("default", "rewritten")


def _product_in_two_orders():
    """Upstream PyTensor's argument-order case: two Composites over the same ``x*y*z``,
    their inputs numbered in different orders."""
    x, y, z = ps.float64("x"), ps.float64("y"), ps.float64("z")
    first = Elemwise(Composite([x, y, z], [x * y * z]))
    second = Elemwise(Composite([z, x, y], [x * y * z]))
    X, Y, Z = pt.vectors("X", "Y", "Z")
    return [X, Y, Z], [first(X, Y, Z), second(Z, X, Y)]


def _assert_orders_agree(fn):
    assert all(is_policy_op(n.op) for n in fn.maker.fgraph.toposort())
    values = [np.random.default_rng(k).normal(size=10_000) for k in range(3)]
    one, other = fn(*values)
    assert int((one != other).sum()) == 0


@pytest.mark.parametrize("policy", POLICIES)
def test_composite_product_independent_of_argument_order(policy):
    inputs, outputs = _product_in_two_orders()
    _assert_orders_agree(pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode(policy, optimizer=None)))


def test_composite_product_independent_of_argument_order_under_enable():
    inputs, outputs = _product_in_two_orders()
    with ptnumba_codegen.enabled("default"):
        fn = pytensor.function(inputs, outputs, mode=Mode(linker="numba", optimizer=None))
    _assert_orders_agree(fn)


def test_stock_fast_math_orders_by_argument_position():
    """The case above fails under PyTensor's flag set: the test could fail."""
    inputs, outputs = _product_in_two_orders()
    with pytensor.config.change_flags(numba__fastmath=True):
        fn = pytensor.function(inputs, outputs, mode=Mode(linker="numba", optimizer=None))
    values = [np.random.default_rng(k).normal(size=10_000) for k in range(3)]
    one, other = fn(*values)
    assert (one != other).sum() > 0


def _positions(fn, n_inputs, length, rng):
    """For elements of random arrays: the bits the element gets in the full call, and in
    calls where it sits elsewhere (prefixes, offsets, strides, a long array)."""
    base = [rng.normal(0, 3, length) for _ in range(n_inputs)]
    full = fn(*base)
    full = full if isinstance(full, list) else [full]
    seen = []
    for cut in sorted({1, 2, 3, length // 2, length - 1, length} - {0}):  # prefixes: other remainders
        got = fn(*(a[:cut] for a in base))
        seen.append(((slice(0, cut)), got if isinstance(got, list) else [got]))
    for offset in (1, 3, 7):  # offsets: other alignment, other split into body and remainder
        got = fn(*(a[offset:] for a in base))
        seen.append((slice(offset, length), got if isinstance(got, list) else [got]))
    wide = [np.repeat(a, 3) for a in base]  # strided views of the same values
    got = fn(*(w[::3] for w in wide))
    seen.append((slice(0, length), got if isinstance(got, list) else [got]))
    long = [np.tile(a, 257) for a in base]  # a long array: the vector body everywhere
    got = fn(*long)
    seen.append((slice(0, length), [np.asarray(g)[:length] for g in (got if isinstance(got, list) else [got])]))
    for where, outs in seen:
        for whole, part in zip(full, outs, strict=True):
            assert same_bits(np.asarray(part), np.asarray(whole)[where]), where


@pytest.mark.parametrize("policy", POLICIES)
def test_a_fused_chain_of_transcendentals_does_not_depend_on_position(policy):
    """``exp(x)*0.5 + tanh(x) + log1p(abs(x)) + erf(x)``: one kernel, a four-term sum of
    vector calls; every element the same bits wherever it sits."""
    x = pt.vector("x")
    f = pt.exp(x) * 0.5 + pt.tanh(x) + pt.log1p(pt.abs(x)) + pt.erf(x)
    fn = compile_fn([x], f, f"policy_{policy}", cache_key="transcendental_chain")
    rng = np.random.default_rng(67)
    for length in (67, 5, 33):
        _positions(fn, 1, length, rng)


@pytest.mark.parametrize("policy", POLICIES)
def test_an_expression_has_its_bits_whatever_else_the_kernel_computes(policy):
    """``a*b + c`` alone and beside a second reader of ``a*b`` (an FMA or not), ``a/d + c``
    alone and beside ``b/d`` (a shared reciprocal or not): the same bits."""
    a, b, c, d = pt.vectors("a", "b", "c", "d")
    mode = ptnumba_codegen.policy_mode(policy)
    pairs = [
        (a * b + c, [a * b + c, pt.exp(a * b) * d]),
        (a / d + c, [a / d + c, b / d]),
        (a * b * c * d, [a * b * c * d, a * b * c]),
    ]
    values = [np.random.default_rng(k).normal(size=4099) for k in range(4)]
    for alone, beside in pairs:
        f_alone = pytensor.function([a, b, c, d], alone, mode=mode, on_unused_input="ignore")
        f_beside = pytensor.function([a, b, c, d], beside, mode=mode, on_unused_input="ignore")
        assert same_bits(f_alone(*values), f_beside(*values)[0]), alone


@pytest.mark.parametrize("policy", POLICIES)
def test_a_transcendental_has_libms_bits_in_a_cone_and_out_of_it(policy):
    """``log``, ``exp`` and ``pow`` (float64, exact lanes: libm's algorithm as vector code)
    in a decision's cone (strict: libm's bits) and in a kernel no decision reads give the
    same bits: which kernel fusion put a value in does not change it (PyMC's
    ``test_measurable_dimshuffle`` compares a logp computed beside its support checks with
    the same logp computed alone). Every value is stock strict's."""
    x, y = pt.vectors("x", "y")
    mode = ptnumba_codegen.policy_mode(policy)
    with pytensor.config.change_flags(numba__fastmath=False):
        strict = Mode(linker="numba", optimizer=None)
    rng = np.random.default_rng(3)
    xv, yv = rng.uniform(0.05, 3.0, 4099), rng.uniform(-3.0, 3.0, 4099)
    for value in (pt.log(x), pt.exp(y), x**y):
        in_cone = pytensor.function([x, y], [value * 1.5, pt.ge(value, 1.0)], mode=mode, on_unused_input="ignore")
        alone = pytensor.function([x, y], value * 1.5, mode=mode, on_unused_input="ignore")
        with pytensor.config.change_flags(numba__fastmath=False):
            want = pytensor.function([x, y], value * 1.5, mode=strict, on_unused_input="ignore")(xv, yv)
        labels = ptnumba_codegen.explain(alone)
        assert "libm lanes" in labels and "libmvec" not in labels, labels
        assert same_bits(in_cone(xv, yv)[0], alone(xv, yv)), value
        assert same_bits(alone(xv, yv), want), value


_OPS = {
    "add": (2, lambda u, v: u + v),
    "sub": (2, lambda u, v: u - v),
    "mul": (2, lambda u, v: u * v),
    "div": (2, lambda u, v: u / (pt.abs(v) + 0.5)),
    "exp": (1, lambda u: pt.exp(u * 0.25)),
    "tanh": (1, pt.tanh),
    "log1p": (1, lambda u: pt.log1p(pt.abs(u))),
    "sigmoid": (1, pt.sigmoid),
}


@st.composite
def chains(draw):
    """A random expression over three to five inputs: n-ary sums and products of terms,
    each term a short chain of the ops above."""
    n_inputs = draw(st.integers(3, 5))
    terms = []
    for _ in range(draw(st.integers(2, 5))):
        steps = draw(st.lists(st.sampled_from(sorted(_OPS)), min_size=1, max_size=4))
        picks = draw(st.lists(st.integers(0, n_inputs - 1), min_size=len(steps) + 1, max_size=len(steps) + 1))
        terms.append((steps, picks))
    outer = draw(st.sampled_from(["add", "mul"]))
    order = draw(st.permutations(range(n_inputs)))
    length = draw(st.integers(1, 80))
    return n_inputs, terms, outer, order, length


def _expression(xs, terms, outer):
    built = []
    for steps, picks in terms:
        value = xs[picks[0]]
        for step, pick in zip(steps, picks[1:], strict=True):
            arity, op = _OPS[step]
            value = op(value) if arity == 1 else op(value, xs[pick])
        built.append(value)
    return pt.add(*built) if outer == "add" else pt.mul(*built)


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=12, deadline=None, derandomize=True)
@given(case=chains())
def test_random_chains_depend_only_on_their_inputs(policy, case):
    """A random n-ary chain compiled twice, over inputs declared in two orders (another
    Composite input order), agrees bit for bit, at every length, offset and stride."""
    n_inputs, terms, outer, order, length = case
    xs = [pt.vector(f"x{k}") for k in range(n_inputs)]
    out = _expression(xs, terms, outer)
    mode = ptnumba_codegen.policy_mode(policy)
    fn = pytensor.function(xs, out, mode=mode, on_unused_input="ignore")
    permuted = pytensor.function([xs[k] for k in order], out, mode=mode, on_unused_input="ignore")
    rng = np.random.default_rng(length)
    values = [rng.normal(0, 2, length) for _ in range(n_inputs)]
    assert same_bits(fn(*values), permuted(*(values[k] for k in order)))
    _positions(fn, n_inputs, max(length, 2), rng)


def test_a_reduction_accumulator_keeps_its_flags():
    """The accumulator of a sum keeps ``reassoc`` under ``default`` (its order is the loop's
    plan); an element's arithmetic has none of ``reassoc``, ``contract``, ``arcp``."""
    policy = ptnumba_codegen.load_policy("default")
    assert "reassoc" in policy.classes["reduction"].flags
    for klass in ("arithmetic", "transcendental"):
        assert not {"reassoc", "contract", "arcp"} & set(policy.classes[klass].flags)
