"""The innermost loop's force hint (`loop.FORCE_VECTORIZE_WHEN`) goes only where LLVM can
honour it: an unmet ``llvm.loop.vectorize.enable`` is printed on the process's stderr
("loop not vectorized: ..."), which a user must never see."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from numba.core import types
from pytensor.scalar import math as psm

from ptnumba_codegen.lowering.base import Typed
from ptnumba_codegen.lowering.loop import FORCE_VECTORIZE_WHEN, HintFacts, LoopSpec, Reduce, force_vectorize
from ptnumba_codegen.lowering.rules import RULES

IN_PLACE_2D = LoopSpec(ndim=2, input_bc=((False, False),), output_bc=((False, False),), output_dtypes=("float64",), inplace=((0, 0),))


def _unmet(facts: HintFacts) -> list[str]:
    return [why for why, rule in FORCE_VECTORIZE_WHEN if not rule(facts)]


@pytest.mark.parametrize("layout", ["C", "F"])
def test_a_loop_writing_in_place_with_a_known_stride_keeps_the_hint(layout):
    assert force_vectorize(HintFacts(IN_PLACE_2D, vector_calls=True, written_layouts=(layout,)))


def test_a_loop_writing_in_place_through_run_time_strides_gets_no_hint():
    """An array typed 'A' written in place (its stride in bytes read at run time): LLVM
    never vectorizes the loop, so it gets no hint, for this reason alone."""
    facts = HintFacts(IN_PLACE_2D, vector_calls=True, written_layouts=("A",))
    assert not force_vectorize(facts)
    assert _unmet(facts) == ["no array written in place is typed 'A'"]
    # one of two arrays written in place is enough; an 'A' array only read is not written
    two = LoopSpec(ndim=1, input_bc=((False,), (False,)), output_bc=((False,), (False,)), output_dtypes=("float64",) * 2,
                   inplace=((0, 0), (1, 1)))
    assert _unmet(HintFacts(two, True, ("C", "A"))) == ["no array written in place is typed 'A'"]
    assert force_vectorize(HintFacts(two, True, ("C", "C")))


def test_a_body_calling_what_the_vectorizer_cannot_widen_gets_no_hint():
    """lgamma, scalar (a strict cone: no vector formula, no lane form), is a libm call
    by name LLVM has no vector form of: the loop stays scalar, so no hint, for this reason
    alone; exp's scalar form (an LLVM intrinsic) keeps it, and so does a strict erf, a
    lane call (libm per lane) in a body with vector calls, opaque only without them."""
    f64 = types.float64
    assert RULES[psm.GammaLn](Typed((f64,), (f64,))).opaque_call
    erf = RULES[psm.Erf](Typed((f64,), (f64,)))
    assert not erf.opaque_call and erf.label == "libm lanes erf (float64)"
    assert erf.without_lanes.opaque_call
    assert not RULES[psm.Sigmoid](Typed((f64,), (f64,))).opaque_call
    spec = LoopSpec(ndim=1, input_bc=((False,),), output_bc=((False,),), output_dtypes=("float64",))
    facts = HintFacts(spec, vector_calls=True, opaque_calls=True)
    assert _unmet(facts) == ["the body calls nothing the vectorizer cannot widen"]
    assert force_vectorize(HintFacts(spec, vector_calls=True))


def test_the_rows_the_hint_exists_for_still_give_it():
    """The Cox model's (rows, 12) loop with three reassociable sums and vector calls
    (tests/test_vector_math.py::test_a_short_inner_axis_with_reductions_is_vectorized)."""
    flags = ("reassoc", "nsz", "arcp", "contract", "afn")
    sums = [Reduce("Add", axes, 0.0, "float64", flags, axes == (0, 1)) for axes in ((0, 1), (1,), (0,))]
    cox = LoopSpec(ndim=2, input_bc=((False, False), (False, False), (False, True), (True, False)),
                   output_bc=((True, True), (False, True), (True, False)), output_dtypes=("float64",) * 3,
                   reduces=tuple(sums), static_shape=(3770, 12))
    assert _unmet(HintFacts(cox, vector_calls=True)) == []
    assert _unmet(HintFacts(cox, vector_calls=False)) == ["the body calls vector functions"]


# Compiled in a fresh interpreter with numba's disk cache off (a cached kernel is not
# optimized again, so it would print nothing): each graph's function is compiled and
# called (numba compiles at the first call); then the number of loops in its final IR
# still carrying the hint (one LLVM did not honour) is printed.
_SCRIPT = r"""
import re, sys
import numpy as np, pytensor, pytensor.tensor as pt
import ptnumba_codegen

def cholesky():  # tests/test_as_written.py::cholesky_checks: a marginal-GP-like log-likelihood
    a, c, b, y = pt.vectors("a", "c", "b", "y")
    K = (pt.exp(a) * pt.exp(c))[:, None] * pt.constant(np.eye(40)) + 0.25
    L = pt.linalg.cholesky(K)
    diag = pt.diagonal(L)
    z = pt.linalg.solve_triangular(L, y, lower=True)
    logp = pt.switch(pt.all(pt.gt(diag, 0.0)), -pt.log(diag).sum() - 0.5 * (z**2).sum(), -np.inf)
    rng = np.random.default_rng(11)
    vals = [rng.uniform(-3.0, 3.0, 40), rng.uniform(-3.0, 3.0, 40), np.zeros(40), rng.normal(size=40)]
    return [a, c, b, y], [logp, pytensor.grad(logp, a), pt.le(diag, b), L], vals

def transposed_log():  # Log in place on a transposed intermediate (2-d, typed 'A')
    x = pt.matrix("x")
    return [x], [pt.log(pt.sort(x, axis=1).T)], [np.random.default_rng(3).uniform(0.5, 3.0, (300, 5))]

def cox():  # tests/test_vector_math.py::_cox_graph: the rows the hint exists for
    x, m = pt.tensor("x", shape=(3770, 12)), pt.tensor("m", shape=(3770, 12), dtype="bool")
    w, t = pt.tensor("w", shape=(None, 1)), pt.tensor("t", shape=(1, 12))
    f = pt.switch(m, 0.0, pt.log(x) * w + t)
    rng = np.random.default_rng(12)
    vals = [rng.gamma(2.0, 1.0, (3770, 12)), rng.random((3770, 12)) < 0.3, rng.uniform(0, 2, (3770, 1)), rng.standard_normal((1, 12))]
    return [x, m, w, t], [f.sum(), f.sum(axis=1), f.sum(axis=0)], vals

def solve_exp():  # in place on a solve's result (2-d, typed 'F')
    x = pt.matrix("x")
    return [x], [pt.exp(pt.linalg.solve(x, x[:, :3] + 1.0))], [np.eye(64) * 2.0 + 0.01]

def reductions():  # vector calls feeding float max/min, integer and reassociable sums
    x = pt.matrix("x")
    e = pt.exp(x)
    outs = [e.max(axis=1), e.min(), pt.cast(e > 2.0, "int64").sum(axis=1), (pt.log(x) * e).sum(axis=0)]
    return [x], outs, [np.random.default_rng(5).uniform(0.5, 3.0, (400, 37))]

def gammainc_grad():  # tests/test_whole_graph.py: lgamma (strict, by name) beside lane calls of log
    x, y = pt.vectors("x", "y")
    rng = np.random.default_rng(6)
    return [x, y], [pytensor.grad(pt.gammainc(x, y).sum(), x)], [rng.uniform(1.0, 6.0, 1000), rng.uniform(1.0, 6.0, 1000)]

GRAPHS = {f.__name__: f for f in (cholesky, transposed_log, cox, solve_exp, reductions, gammainc_grad)}
policy, names = sys.argv[1], sys.argv[2].split(",")
for name in names:
    inputs, outputs, values = GRAPHS[name]()
    with pytensor.config.change_flags(numba__cache=False):
        fn = pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode(policy))
        with np.errstate(all="ignore"):
            fn(*values)
    ir = "\n".join(fn.vm.jit_fn.inspect_llvm().values())
    print("unmet", name, len(re.findall(r'!"llvm.loop.vectorize.enable", i1 true', ir)), flush=True)
"""

GRAPHS = ("cholesky", "transposed_log", "gammainc_grad", "cox", "solve_exp", "reductions")


def _compile_fresh(policy: str, names) -> subprocess.CompletedProcess:
    from ptnumba_codegen import _version

    path = os.pathsep.join(filter(None, [str(_version.ROOT.parent), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", _SCRIPT, policy, ",".join(names)], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHONPATH": path})


@pytest.mark.parametrize("policy", ["rewritten", "default"])  # as_written: an alias of default
def test_compiling_prints_no_unmet_vectorize_hint(policy):
    """The graphs that printed "loop not vectorized" (a kernel written in place into an
    array typed 'A': the Cholesky graph's diagonal, a transposed intermediate; a body
    calling lgamma by name beside lane calls: a gammainc gradient), and
    representative ones keeping the hint (the Cox rows, an 'F' array written in place,
    reductions): nothing on stderr, and no loop of the final IR keeps an unmet hint."""
    out = _compile_fresh(policy, GRAPHS)
    assert out.returncode == 0, out.stderr[-3000:]
    unmet = dict(line.split()[1:] for line in out.stdout.splitlines() if line.startswith("unmet "))
    assert set(unmet) == set(GRAPHS), out.stdout
    printed = [line for line in out.stderr.splitlines() if "not vectorized" in line]
    assert not printed, printed
    assert all(n == "0" for n in unmet.values()), unmet
