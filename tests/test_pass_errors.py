"""An exception inside one of the passes is never left to PyTensor's rewrite sequence (which
prints it and compiles the node with stock numba's fast-math flags, flipping the seed's
decision): the pass records it, warns, and compiles the conservative choice of
`pass_errors.CONSEQUENCES`; `explain` shows it."""

import numpy as np
import pytensor
import pytest

import ptnumba_codegen
from conftest import compile_fn, policy_nodes
from ptnumba_codegen.as_written import freeze
from ptnumba_codegen.passes import pass_errors, policy_codegen
from test_seed_and_ir import BV, EXPECTED, WV, XV, YV, ZV, seed_graph


def _boom(*args, **kwargs):
    raise RuntimeError("injected pass failure")


def _compile(policy):
    inputs, out = seed_graph()
    with pytensor.config.change_flags(numba__cache=False):  # nothing of this into the disk cache
        return pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode(policy))


def _tied_inputs():
    rng = np.random.default_rng(1)
    x, y, z, w = (rng.uniform(0.5, 2.0, 257) for _ in range(4))
    b = ((x * y) * z) * w
    b[::3] = np.nextafter(b[::3], np.inf)
    return x, y, z, w, b


@pytest.mark.parametrize("target", ["graph_facts", "program_sensitive_outputs"])
def test_an_analysis_error_compiles_the_kernels_strict_not_stock_fast(monkeypatch, target):
    monkeypatch.setattr(policy_codegen, target, _boom)
    with pytest.warns(pass_errors.PassErrorWarning, match="injected pass failure"):
        fn = _compile("rewritten")
    assert policy_nodes(fn), "the kernels are still the generator's"
    # the seed's tie: stock fast-math gives 0 here, strict 404.197
    np.testing.assert_allclose(fn(XV, YV, ZV, WV, BV), [EXPECTED], rtol=1e-10)
    args = _tied_inputs()
    ref = compile_fn(*seed_graph(), "stock_strict", cache_key="seed")(*args)
    np.testing.assert_array_equal(fn(*args), ref)
    report = ptnumba_codegen.explain(fn)
    stage = "graph analysis" if target == "graph_facts" else "kernel analysis"
    assert f"PASS ERROR: {stage} failed" in report and "injected pass failure" in report, report
    assert "1 kernel(s), 0 fallback(s), 1 pass error(s)" in report, report


def test_an_as_written_freezing_error_warns_and_keeps_default_decisions(monkeypatch):
    monkeypatch.setattr(freeze, "freeze_graph", _boom)
    with pytest.warns(pass_errors.PassErrorWarning, match="as-written freezing failed"):
        fn = _compile("as_written")
    args = _tied_inputs()
    ref = compile_fn(*seed_graph(), "stock_strict", cache_key="seed")(*args)
    np.testing.assert_array_equal(fn(*args), ref)
    report = ptnumba_codegen.explain(fn)
    assert "as-written freezing failed" in report and "not as written" in report, report


def test_an_inlining_error_leaves_the_copies_opaque(monkeypatch):
    monkeypatch.setattr(freeze, "inline", _boom)
    with pytest.warns(pass_errors.PassErrorWarning, match="as-written inlining failed"):
        fn = _compile("as_written")
    args = _tied_inputs()
    ref = compile_fn(*seed_graph(), "unoptimized_strict", cache_key="seed")(*args)
    np.testing.assert_array_equal(fn(*args), ref)
    assert "copies not put back stay opaque" in ptnumba_codegen.explain(fn)


def test_an_unknown_stage_is_an_error_naming_the_known_ones():
    with pytest.raises(KeyError, match="unknown pass stage 'typing'.*graph analysis"):
        pass_errors.record(object(), "typing", RuntimeError("x"))
