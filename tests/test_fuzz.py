"""The differential fuzzer: random scalar graphs (tests/fuzzgraphs.py) under policy
``strict``, policy ``default``, stock numba with fastmath off and the py linker, each
batch of graphs compiled into one function per backend.

Properties, per output (tests/references.py, docs/divergences.md):

* policy ``strict`` is stock strict bit for bit (NaN positions and signs of zero included),
  except where stock departs from the graph's dtypes: there it follows them (the py
  linker), unless numpy/scipy is the odd one out (then stock and the C backend agree);
* policy ``default`` gives every bool and integer result of that reference exactly; float
  results within ``ULPS`` ulp of it, widened by the output's conditioning (how far stock
  strict moves when the float inputs move by 2 ulp); its NaN/inf pattern is the
  reference's, or that of stock's own fast-math build (outside decision cones the policy
  may reassociate like stock fastmath does) or of the perturbed inputs;
* where stock raises and the policy compiles, nothing is compared; the reverse fails.

Profiles (``PTNUMBA_FUZZ_PROFILE``): ``ci`` (default; derandomized, about 300 graphs),
``long`` (random, about 5,000 graphs; for local runs). ``PTNUMBA_FUZZ_LOG=path`` appends
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
    policy = {b: _compile(xs, outs, b) for b in ("policy_strict", "policy_default")}
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
        d_res = _run(policy["policy_default"], vals)
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
            # the default policy's reference: stock, or the graph's dtypes where the strict
            # policy follows them, or the C backend's where it broke the tie between the two
            # (verdict checked which; C is compiled only where the verdict needed it already)
            if agree(s, y) or not (agree(p, y, rtol) or agree(p, c(), rtol)):
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
            if problem:
                failures.append(f"{label} (call {call}), policy default: {problem}\n    policy {d!r}\n    reference {ref!r}")
    _log({"graphs": len(outs), "divergences": sorted(set(divergences)), "failures": len(failures)})
    if failures:
        text = "\n".join(f"  {label}: {pytensor.printing.pprint(out)}" for label, out in zip(labels, outs, strict=True))
        raise AssertionError(f"{batch}\ngraphs:\n{text}\n" + "\n".join(failures))


def _fuzz_test(part: str, **strategy):
    @settings(settings.get_profile(f"fuzz-{PROFILE}"))
    @given(batch=fg.batches(GRAPHS_PER_BATCH, **strategy))
    def test(batch):
        if not (os.environ.get("PTNUMBA_FUZZ_COLLECT") and os.environ.get("PTNUMBA_FUZZ_LOG")):
            check_batch(batch)
            return
        try:
            check_batch(batch)
        except Exception as err:  # noqa: BLE001  (collect mode: log it, go on)
            _log({"report": f"{type(err).__name__}: {err}"[:20000], "batch": repr(batch)})

    test.__name__ = f"test_fuzz_{part}"
    return test


# three tests (xdist runs them side by side), each its own part of the space
test_fuzz_scalars_and_vectors = _fuzz_test("scalars_and_vectors", max_ndim=1)
test_fuzz_matrices = _fuzz_test("matrices", min_ndim=2, max_ndim=2)
test_fuzz_tensor3 = _fuzz_test("tensor3", min_ndim=3, max_ndim=3)
