"""Strict sums and products whose body calls vector functions run staged (`loop.staged_outputs`):
the body vectorized over a block of the innermost axis, then the block's values added in
index order. Each accumulator adds the same values in the same order as the unstaged loop:
an independent reference here sums, row by row in index order from the identity, the
elements another kernel computes (an element's bits do not depend on where it is computed).
"""

from __future__ import annotations

import re

import functools
import math
import operator

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from ptnumba_codegen.lowering import loop
from tests.conftest import compile_fn, final_ir
from tests.references import same_bits

# (shape, reduced axes): rows shorter than a block, longer than one with a remainder,
# exactly one block, a vector, a 3-d block, two reduced axes
CASES = [((284, 8), (1,)), ((5, 200), (1,)), ((3, 64), (1,)), ((7, 65), (1,)), ((1000,), (0,)),
         ((4, 5, 70), (2,)), ((6, 9, 11), (1, 2))]


def _strict_sums(shape, axes, op):
    """``exp(x)`` reduced over ``axes``, and a decision on the result: under ``rewritten``
    the accumulator is strict and the exp libm's, computed as vector lanes (the sums are
    compared exactly downstream)."""
    x = pt.tensor("x", shape=(None,) * len(shape))
    red = pt.exp(x).sum(axis=axes) if op == "sum" else pt.exp(x).prod(axis=axes)
    decided = pt.switch(pt.eq(red, 1.0), 1.0, 2.0).sum()
    return x, [red, decided]


def _index_order(terms, axes, op):
    """``terms`` reduced over ``axes`` from the identity, one element after another in
    C order of the reduced axes."""
    kept = [d for d in range(terms.ndim) if d not in axes]
    moved = np.moveaxis(terms, kept, list(range(len(kept))))
    flat = moved.reshape(*moved.shape[: len(kept)], -1)
    step, start = (operator.add, 0.0) if op == "sum" else (operator.mul, 1.0)
    out = np.empty(flat.shape[:-1])
    for index in np.ndindex(*out.shape):
        out[index] = functools.reduce(step, flat[index].tolist(), start)
    return out


LIBM_EXP = np.vectorize(math.exp, otypes=[np.float64])  # glibc's exp, which the lanes give bit for bit


@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("shape, axes", CASES, ids=[f"{s}-{a}" for s, a in CASES])
def test_staged_accumulators_add_in_index_order(shape, axes, op):
    x, outs = _strict_sums(shape, axes, op)
    fn = compile_fn([x], outs, "policy_rewritten", cache_key=("staged", shape, axes, op))
    rng = np.random.default_rng(len(shape) * 100 + sum(shape))
    scale = 0.05 if op == "prod" else 3.0
    for values in (rng.normal(0, scale, shape), np.where(rng.random(shape) < 0.1, -800.0, rng.normal(0, scale, shape))):
        red, _ = fn(values)
        expected = _index_order(LIBM_EXP(values), axes, op)
        assert same_bits(np.asarray(red), expected.reshape(np.shape(red)))


def test_staging_vectorizes_the_body_and_keeps_the_sum_strict():
    """A softmax's row sums checked downstream (exp robust there: libm's algorithm as
    vector code, exact lanes, or libmvec's; the sum strict): the staged kernel's body is
    vectorized (the exact lanes may be inlined into it) and it adds the row's values with
    unflagged fadds."""
    X, M = pt.matrix("X", shape=(None, 8)), pt.matrix("M", shape=(None, 1))
    sums = pt.exp(X - M).sum(axis=1)
    outs = [pt.switch(pt.eq(sums, 0.0), 0.0, 1.0).sum()]
    fn = compile_fn([X, M], outs, "policy_default", cache_key="staged_ir", inspect_ir=True)
    fn(np.zeros((284, 8)), np.zeros((284, 1)))
    ir = final_ir(fn)
    assert re.search(r"@(_ZGVeN8v_exp|_ZGVdN4v_exp|ptnumba_exact\d+_exp)\(", ir)
    kernels = [d for d in re.split(r"\ndefine ", ir)[1:] if not re.match(r"[^@]*@ptnumba_(exact|libm|mvec)", d)]
    assert any(re.search(r"<[48] x double>", d) for d in kernels), "the staged body is not vectorized"
    assert any(line.split("=", 1)[1].strip().startswith("fadd double") for line in ir.splitlines()
               if "= fadd" in line)


def test_what_is_staged():
    """Strict float sums over the innermost axis, with vector calls in the body; not
    reorderable ones, not without vector calls, not short rows, not beside zero keys, not
    where the vector hint could not hold for the first loop (another strict reduction)."""
    strict = loop.Reduce("Add", (1,), 0.0, "float64", (), False)
    fast = loop.Reduce("Add", (1,), 0.0, "float64", ("reassoc",), False)
    outer = loop.Reduce("Add", (0,), 0.0, "float64", ("reassoc",), False)

    def facts(reduces, static_shape=(None, None), vector_calls=True):
        spec = loop.LoopSpec(ndim=2, input_bc=((False, False),), output_bc=((False, True),) * len(reduces),
                             output_dtypes=("float64",) * len(reduces), reduces=reduces, static_shape=static_shape)
        return loop.HintFacts(spec, vector_calls=vector_calls)

    assert loop.staged_outputs(facts((strict, fast, outer)), {}) == (0,)
    assert loop.staged_outputs(facts((strict, fast, outer), vector_calls=False), {}) == ()
    assert loop.staged_outputs(facts((strict, fast, outer), static_shape=(None, 3)), {}) == ()
    assert loop.staged_outputs(facts((strict, fast, outer)), {3: 0}) == ()  # zero keys: a float max/min
    assert loop.staged_outputs(facts((fast, outer)), {}) == ()
    strict_outer = loop.Reduce("Add", (0,), 0.0, "float64", (), False)
    assert loop.staged_outputs(facts((strict, strict_outer)), {}) == ()


def test_large_staged_sums_split_across_threads_keep_their_bits():
    """Rows split across threads (the chunk axis is a kept one): every row's sum still
    adds its elements in index order."""
    x, outs = _strict_sums((30000, 70), (1,), "sum")
    fn = compile_fn([x], outs, "policy_rewritten", cache_key="staged_threads")
    values = np.random.default_rng(3).normal(0, 3, (30000, 70))
    red, _ = fn(values)
    assert same_bits(np.asarray(red), _index_order(LIBM_EXP(values), (1,), "sum"))
