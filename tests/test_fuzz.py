"""The differential fuzzer: random scalar graphs (tests/fuzzgraphs.py) under policy
``strict``, policy ``rewritten`` (decisions from the rewritten graph), stock numba with fastmath off and the py linker, each
batch of graphs compiled into one function per backend.

Properties, per output (tests/references.py, docs/divergences.md):

* policy ``strict`` is stock strict bit for bit (NaN positions and signs of zero included),
  except where stock departs from the graph's dtypes: there it follows them (the py
  linker), unless numpy/scipy is the odd one out (then stock and the C backend agree);
* policy ``rewritten`` gives every bool and integer result of that reference exactly; float
  results within ``ULPS`` ulp of it, widened by the output's conditioning (how far stock
  strict moves when the float inputs move by 2 ulp); its NaN/inf pattern is the
  reference's, or that of stock's own fast-math build (outside decision cones the policy
  may reassociate like stock fastmath does) or of the perturbed inputs;
* where stock raises and the policy compiles, nothing is compared; the reverse fails;
* policy ``as_written`` (an alias of ``default``; `test_fuzz_as_written`, batches about half tie graphs) gives every
  bool and integer result and every gradient zero pattern of the graph as written
  (``Mode(linker="numba", optimizer=None)``, fastmath off) exactly, floats within the
  default policy's budget (`check_batch_as_written`).

Profiles (``PTNUMBA_FUZZ_PROFILE``): ``ci`` (default; derandomized, about 300 graphs, and
about 30 for as_written), ``long`` (random, about 5,000 graphs, and 1,500 for as_written;
for local runs). ``PTNUMBA_FUZZ_LOG=path`` appends
one JSON line per checked batch (graph count, stock divergences found) for a run summary;
with ``PTNUMBA_FUZZ_COLLECT=1`` failures go to that log instead of failing the test, so a
long run reports all it finds.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytensor
import pytensor.printing
import pytest
from hypothesis import given, settings

import fuzzgraphs as fg
from conftest import compile_fn
from references import RTOL, agree, verdict

PROFILE = os.environ.get("PTNUMBA_FUZZ_PROFILE", "ci")
GRAPHS_PER_BATCH = 10
ULPS = 64
EPS = {np.dtype("float32"): np.finfo(np.float32).eps, np.dtype("float64"): np.finfo(np.float64).eps}


def _compile(xs, outs, backend):
    with np.errstate(all="ignore"):
        return compile_fn(xs, outs, backend, on_unused_input="ignore")


def _run(fn, vals):
    with np.errstate(all="ignore"):
        return [np.asarray(r) for r in fn(*vals)]


def _classes(a):
    return np.where(np.isnan(a), 0, np.where(np.isposinf(a), 1, np.where(np.isneginf(a), 2, 3)))


def budget_eps(out, dtype) -> float:
    """The epsilon the budgets of ``out`` count ulps in: float32's if a float32 value
    feeds it (a float32 exp upcast to a float64 output carries float32 ulps), else its own."""
    from pytensor.graph.traversal import ancestors

    if any(getattr(v.type, "dtype", None) == "float32" for v in ancestors([out])):
        return max(EPS[np.dtype(dtype)], EPS[np.dtype("float32")])
    return EPS[np.dtype(dtype)]


def reassociation_factor(batch, d) -> float:
    """How much wider than ``ULPS`` the budget of an output is where it sums (or
    multiplies) many elements: two orders of an n-term sum of one sign differ by up to
    2(n-1) eps relative (the default policy splits and reassociates sums; stock strict
    adds in sequence). n: the batch's elements per output element (1 for elementwise
    outputs; a sum of 1e-300 over 14,000 rows differed by 1,170 eps, found by the long
    profile)."""
    n = max(1, int(np.prod(batch.shape)) // max(1, np.asarray(d).size))
    return 1.0 + 2.0 * (n - 1) / ULPS


def default_problem(d, ref, probe, fast, eps=None) -> str | None:
    """None if the default policy's ``d`` is within budget of ``ref`` (see the module doc)."""
    d, ref = np.asarray(d), np.asarray(ref)
    if d.dtype != ref.dtype or d.shape != ref.shape:
        return f"dtype/shape {d.dtype}{d.shape} vs {ref.dtype}{ref.shape}"
    if d.dtype.kind != "f":
        return None if np.array_equal(d, ref) else "bool/int result differs"
    eps = EPS[d.dtype] if eps is None else eps
    with np.errstate(all="ignore"):
        tol = ULPS * eps * np.abs(ref) + 4 * np.abs(np.nan_to_num(probe - ref, nan=0.0, posinf=0.0, neginf=0.0))
        tol = np.maximum(tol, ULPS * np.finfo(d.dtype).smallest_subnormal)
        finite = np.isfinite(ref) & np.isfinite(d)
        ok = (_classes(d) == _classes(ref)) & (~finite | (np.abs(d - ref) <= tol))
        for alt in (probe, fast):
            if alt is None:
                continue
            alt_tol = ULPS * eps * np.abs(alt)
            alt_finite = np.isfinite(alt) & np.isfinite(d)
            ok |= (_classes(d) == _classes(alt)) & (~alt_finite | (np.abs(d - alt) <= np.maximum(alt_tol, tol)))
    if ok.all():
        return None
    k = int(np.flatnonzero(~ok.ravel())[0])
    return f"element {k}: {d.ravel()[k]!r} vs reference {ref.ravel()[k]!r} (tolerance {np.ravel(tol)[k]:.3g})"


def _same_bits(a, b) -> bool:
    """Equal values and dtypes, NaN equal to NaN (the strict policy is bit for bit one of
    its references; ``agree``'s rtol is too loose to tell which at 1e-11)."""
    if a is None or b is None:
        return False
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def _py_results(py, xs, outs, vals):
    """The py linker's results; one output at a time (None where it raises: numpy scalar
    code overflowing a Python int) if the whole batch raises."""
    try:
        return _run(py, vals)
    except Exception:  # noqa: BLE001
        out = []
        for o in outs:
            try:
                out.append(_run(_compile(xs, [o], "py"), vals)[0])
            except Exception:  # noqa: BLE001
                out.append(None)
        return out


def _log(record):
    path = os.environ.get("PTNUMBA_FUZZ_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


def check_batch(batch: fg.Batch):
    xs, outs, labels = fg.build(batch)
    if not outs:
        return
    try:
        stock = _compile(xs, outs, "stock_strict")
        stock_calls = [_run(stock, fg.values(batch, call)) for call in (0, 1)]
    except Exception as err:  # noqa: BLE001  (stock cannot run it: nothing to compare)
        _log({"graphs": len(outs), "skipped": f"stock raised {type(err).__name__}: {err}"[:300]})
        return
    # stock ran: the policy must too (an exception here fails the test)
    policy = {b: _compile(xs, outs, b) for b in ("policy_strict", "policy_rewritten")}
    py = _compile(xs, outs, "py")
    lazy = {}  # backend -> {output index: result per call}, compiled for the outputs that need it

    def other(backend, k, call):
        if backend not in lazy:
            lazy[backend] = {}
        if k not in lazy[backend]:
            fn = _compile(xs, [outs[k]], backend)
            lazy[backend][k] = [_run(fn, fg.values(batch, c))[0] for c in (0, 1)]
        return lazy[backend][k][call]

    failures, divergences = [], []
    rng = np.random.default_rng(batch.seed)
    for call in (0, 1):
        vals = fg.values(batch, call)
        s_res = stock_calls[call]
        p_res = _run(policy["policy_strict"], vals)
        d_res = _run(policy["policy_rewritten"], vals)
        y_res = _py_results(py, xs, outs, vals)
        pvals = fg.perturbed(vals, rng)
        probe = _run(stock, pvals)
        probe_y = None  # the py linker on the perturbed inputs, when a reference is its result
        for k, label in enumerate(labels):
            s, p, d, y = s_res[k], p_res[k], d_res[k], y_res[k]
            c = lambda k=k, call=call: other("c", k, call)  # noqa: E731
            # a float32 value feeding a float64 output: the policy's result agrees to float32's rtol
            rtol = RTOL[np.dtype("float32")] if np.asarray(p).dtype == np.float64 and budget_eps(outs[k], "float64") > EPS[np.dtype("float64")] else None
            if not agree(s, y):
                divergences.append(label)
            problem = verdict(p, s, y, c, rtol)
            if problem:
                failures.append(f"{label} (call {call}), policy strict: {problem}\n    policy {p!r}\n    stock  {s!r}\n    py     {y!r}")
            # the default policy's reference: the semantics the strict policy follows (verdict
            # checked it): stock's, else the py linker's (the graph's dtypes), else the C
            # backend's. Stock and py can agree with each other and not with the graph's dtypes:
            # ``np.float32(1.0) / i32`` is float32 in numba and in py's frompyfunc on numpy 2.5
            # (a Python int is weak), float64 in C; the policy computes the graph's float64
            # (docs/divergences.md), and default is held to that, not to the float32 rounding.
            # (C is compiled only where strict has neither stock's nor py's bits.)
            exact = next((r for r in (s, y) if _same_bits(p, r)), None)
            if exact is None and _same_bits(p, c()):
                exact = c()
            if exact is not None:
                ref = exact
            elif agree(s, y) or not (agree(p, y, rtol) or agree(p, c(), rtol)):
                ref = s
            else:
                ref = y if agree(p, y, rtol) else c()
            if ref is y and probe_y is None:
                probe_y = _py_results(py, xs, outs, pvals)
            # the conditioning probe of the reference's own semantics (a float32 expm1 upcast
            # to a float64 output moves by float32 ulps)
            ref_probe = probe[k] if ref is s else (probe_y[k] if ref is y and probe_y[k] is not None else ref)
            eps = budget_eps(outs[k], d.dtype) * reassociation_factor(batch, d) if d.dtype.kind == "f" else None
            problem = default_problem(d, ref, ref_probe, None, eps)
            if problem and d.dtype.kind == "f":  # outside the budget of strict: stock fastmath's?
                problem = default_problem(d, ref, ref_probe, other("stock_fast", k, call), eps)
            if problem and batch.graphs[_graph_of(label)] in OPEN_DEFAULT_FINDINGS:
                problem = None  # an open bug, its xfail regression in test_fuzz_findings.py
            if problem:
                failures.append(f"{label} (call {call}), policy default: {problem}\n    policy {d!r}\n    reference {ref!r}")
    _log({"graphs": len(outs), "divergences": sorted(set(divergences)), "failures": len(failures)})
    if failures:
        text = "\n".join(f"  {label}: {pytensor.printing.pprint(out)}" for label, out in zip(labels, outs, strict=True))
        raise AssertionError(f"{batch}\ngraphs:\n{text}\n" + "\n".join(failures))


# Graphs whose default-policy result is a known open bug (each has a strict xfail regression
# in test_fuzz_findings.py that passes once it is fixed; then remove it here). None open.
OPEN_DEFAULT_FINDINGS: set = set()


# -- policy as_written against the graph as written ---------------------------------------

AS_WRITTEN_REF = "unoptimized_strict"  # conftest: Mode(linker="numba", optimizer=None), numba__fastmath=False


def _graph_of(label: str) -> int:
    return int(label.split()[1].rstrip(":"))


def check_batch_as_written(batch: fg.Batch, backends=("policy_as_written",)) -> dict:
    """{backend: [(label, kind, message), ...]}: each backend's results against the graph
    as written (``AS_WRITTEN_REF``, compiled once for all of them), ``kind`` one of

    * ``"decision"``: a bool or integer output differs from the reference, element for
      element (a float decision, ``minimum(p, b)``, shows in its gradient's zero pattern);
    * ``"zero pattern"``: a gradient is zero where the reference's is not, or the reverse;
    * ``"value"``: a float outside the default policy's budget (`default_problem`) of the
      reference, widened by the reference's own conditioning probe (not for tie graphs:
      there the probe measures the tie itself). Outside decisions the policy
      keeps the rewritten graph's arithmetic (``log(1 + exp(x))`` is ``softplus``), so
      a random graph's float may instead be within budget of stock strict or stock
      fastmath (the rewritten graph); a tie graph's may not.

    Where the reference (numba) departs from the graph's dtypes (docs/divergences.md:
    ``reciprocal(int64)`` in float32, ...), the policy follows them: a random graph's
    output that the reference's does not agree with, but the graph as written in numpy
    does (``py_unoptimized``, `references.agree`), is right. Tie graphs are float64
    throughout: no such excuse.
    """
    xs, outs, labels = fg.build(batch)
    if not outs:
        return {b: [] for b in backends}
    try:
        ref_fn = _compile(xs, outs, AS_WRITTEN_REF)
        calls = [fg.values(batch, c) for c in (0, 1)]
        refs = [_run(ref_fn, v) for v in calls]
    except Exception as err:  # noqa: BLE001  (the reference cannot run it: nothing to compare)
        _log({"as_written": True, "graphs": len(outs), "skipped": f"reference raised {type(err).__name__}: {err}"[:300]})
        return {b: [] for b in backends}
    fns = {b: _compile(xs, outs, b) for b in backends}
    rng = np.random.default_rng(batch.seed)
    probes = [_run(ref_fn, fg.perturbed(v, rng)) for v in calls]
    others = {}  # stock strict, stock fastmath, py_unoptimized on the whole batch, when first needed

    def alt(backend, call):
        if backend not in others:
            if backend == "py_unoptimized":
                others[backend] = [_py_results(_compile(xs, outs, backend), xs, outs, v) for v in calls]
            else:
                fn = _compile(xs, outs, backend)
                others[backend] = [_run(fn, v) for v in calls]
        return others[backend][call]

    def follows_dtypes(r, e, k, call):
        """The reference departs from the graph's dtypes at output k, the result does not."""
        y = alt("py_unoptimized", call)[k]
        rtol = RTOL[np.dtype("float32")] if r.dtype == np.float64 and budget_eps(outs[k], "float64") > EPS[np.dtype("float64")] else None
        return not agree(e, y) and agree(r, y, rtol)

    found = {b: [] for b in backends}
    excused = {"dtypes": 0, "rewritten": 0}  # outputs accepted by the py linker / the rewritten graph
    for backend, fn in fns.items():
        for call in (0, 1):
            res = _run(fn, calls[call])
            for k, label in enumerate(labels):
                r, e = res[k], refs[call][k]
                tie = batch.graphs[_graph_of(label)][0] == "tie"
                where = f"{label} (call {call}{', tie graph' if tie else ''})"
                if r.dtype != e.dtype or r.shape != e.shape:
                    found[backend].append((where, "value", f"dtype/shape {r.dtype}{r.shape} vs {e.dtype}{e.shape}"))
                    continue
                if not tie and not np.array_equal(r, e, equal_nan=r.dtype.kind == "f") and follows_dtypes(r, e, k, call):
                    excused["dtypes"] += 1
                    continue
                if r.dtype.kind != "f":
                    if not np.array_equal(r, e):
                        n = int(np.sum(r != e))
                        found[backend].append((where, "decision", f"{n} of {r.size} elements differ\n    got {r!r}\n    ref {e!r}"))
                    continue
                if ": d/d" in label and not np.array_equal(r == 0, e == 0):
                    n = int(np.sum((r == 0) != (e == 0)))
                    found[backend].append((where, "zero pattern", f"{n} of {r.size} elements differ\n    got {r!r}\n    ref {e!r}"))
                    continue
                eps = budget_eps(outs[k], r.dtype) * reassociation_factor(batch, r)
                # a tie graph's values are well conditioned but at its tie, which the
                # conditioning probe would measure: no widening (a flipped floor(p / b) fails)
                problem = default_problem(r, e, e if tie else probes[call][k], None, eps)
                if problem and not tie:
                    for other_backend in ("stock_strict", "stock_fast"):
                        a = alt(other_backend, call)[k]
                        if default_problem(r, a, a, None, eps) is None:
                            problem = None
                            excused["rewritten"] += 1
                            break
                if problem:
                    found[backend].append((where, "value", f"{problem}\n    got {r!r}\n    ref {e!r}"))
    _log({"as_written": True, "graphs": len(outs), "ties": len(batch.ties), "excused": excused, "failures": {b: len(v) for b, v in found.items()}})
    return found


def _fail_as_written(batch, found):
    problems = [f"{where}, {backend}, {kind}: {msg}" for backend, items in found.items() for where, kind, msg in items]
    if problems:
        xs, outs, labels = fg.build(batch)
        text = "\n".join(f"  {label}: {pytensor.printing.pprint(out)}" for label, out in zip(labels, outs, strict=True))
        raise AssertionError(f"{batch}\ngraphs:\n{text}\n" + "\n".join(problems))


def _fuzz_test(part: str, **strategy):
    as_written = strategy.pop("as_written", False)
    check = (lambda b: _fail_as_written(b, check_batch_as_written(b))) if as_written else check_batch

    @settings(settings.get_profile(f"fuzz-{'as_written-' if as_written else ''}{PROFILE}"))
    @given(batch=fg.batches(GRAPHS_PER_BATCH, ties=as_written, **strategy))
    def test(batch):
        if not (os.environ.get("PTNUMBA_FUZZ_COLLECT") and os.environ.get("PTNUMBA_FUZZ_LOG")):
            check(batch)
            return
        try:
            check(batch)
        except Exception as err:  # noqa: BLE001  (collect mode: log it, go on)
            _log({"report": f"{type(err).__name__}: {err}"[:20000], "batch": repr(batch)})

    test.__name__ = f"test_fuzz_{part}"
    return test


# three tests (xdist runs them side by side), each its own part of the space
test_fuzz_scalars_and_vectors = _fuzz_test("scalars_and_vectors", max_ndim=1)
test_fuzz_matrices = _fuzz_test("matrices", min_ndim=2, max_ndim=2)
test_fuzz_tensor3 = _fuzz_test("tensor3", min_ndim=3, max_ndim=3)
# policy as_written against the graph as written: random graphs, half of them tie graphs;
# in ci scalars and vectors only (the first compile of each new kernel is the cost)
test_fuzz_as_written = _fuzz_test("as_written", max_ndim=1 if PROFILE == "ci" else 2, as_written=True)


# tie graphs the rewrites break: x*(y*z) (flattened to mul(x, y, z)), exp(a)*exp(c) (to
# exp(a + c)), x + (y + z), x / (y*z), sqrt(x)*(y*z); each decided against the written value
TIE_TREES = (
    ("mul", ("x",), ("mul", ("x",), ("x",))),
    ("mul", ("exp", ("x",)), ("exp", ("x",))),
    ("add", ("x",), ("add", ("x",), ("x",))),
    ("div", ("x",), ("mul", ("x",), ("x",))),
    ("mul", ("sqrt", ("x",)), ("mul", ("x",), ("x",))),
)


def tie_batch(decisions, trees=TIE_TREES, seed=7):
    """A batch of tie graphs only: every tree of ``trees`` under each decision."""
    from test_ties_as_written import n_leaves

    inputs, graphs, ties = [("float64", (False,)), ("int32", (False,))], [], []
    for decision in decisions:
        for tree in trees:
            ties.append((tree, decision, len(ties) % 2 == 1, len(inputs)))
            inputs.extend([("float64", (False,))] * (max(2, n_leaves(tree)) + 1))  # leaves, threshold
            graphs.append(("tie", len(ties) - 1))
    n = len(graphs)
    return fg.Batch((48,), tuple(inputs), tuple(graphs), (None,) * n, (True,) * n, seed, tuple(ties))


def test_the_as_written_checker_fails_the_rewritten_policy():
    """The checker can fail: on tie graphs (the generator's ``ties`` knob) policy
    ``rewritten``, which decides on the rewritten graph, flips
    decisions (bool outputs and gradient zero patterns) of the graph as written; ``default``
    (alias ``as_written``) flips none. One reference compile for both."""
    batch = tie_batch(("le", "minimum"), TIE_TREES[:3])
    found = check_batch_as_written(batch, ("policy_default", "policy_rewritten"))
    assert found["policy_default"] == [], found["policy_default"]
    flipped = {kind for _, kind, _ in found["policy_rewritten"]}
    assert {"decision", "zero pattern"} <= flipped, found["policy_rewritten"]
