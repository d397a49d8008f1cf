"""explain(): what the policy did, per kernel, and the final IR with flags."""

import subprocess
import sys
from pathlib import Path

import numpy as np

import ptnumba_codegen
from test_seed_and_ir import BV, WV, XV, YV, ZV, seed_fn

ROOT = Path(__file__).resolve().parent.parent


def test_explain_seed_shows_strict_cone_and_the_gradient_products_flags():
    fn = seed_fn("policy_rewritten")
    report = ptnumba_codegen.explain(fn)
    lines = report.splitlines()
    cone_mul = [line for line in lines if "= Mul(v4, v2, v1, v0)" in line]
    le = [line for line in lines if "= LE(" in line]
    grad_mul = [line for line in lines if "= Mul(v6, v0, v1, v2)" in line]
    assert cone_mul and "comparison_sensitive" in cone_mul[0] and "{} (strict)" in cone_mul[0]
    assert le and "comparison_sensitive" in le[0] and "{} (strict)" in le[0]
    assert grad_mul and "arithmetic" in grad_mul[0]
    assert "{nsz, afn}" in grad_mul[0]
    assert "0 fallback(s)" in report


def test_explain_ir_marks_flags_in_the_final_ir():
    fn = seed_fn("policy_rewritten", inspect_ir=True)
    fn(XV, YV, ZV, WV, BV)
    ir = ptnumba_codegen.explain(fn, ir=True).split("; final optimized LLVM IR", 1)[1]
    fcmp = [line for line in ir.splitlines() if "fcmp" in line]
    assert fcmp and all("[" not in line for line in fcmp)  # strict comparison
    flagged = [line for line in ir.splitlines() if "fmul [nsz] [afn]" in line]
    plain = [line for line in ir.splitlines() if "= fmul double" in line or "= fmul <" in line]
    assert flagged and plain


def test_explain_reports_fallbacks_and_reductions():
    import pytensor.tensor as pt

    from conftest import compile_fn

    x = pt.vector("x", dtype="complex128")
    y = pt.vector("y")
    fn = compile_fn([x, y], [pt.exp(x) * 2, (y * y).sum()], "policy_rewritten", cache_key="explain2")
    report = ptnumba_codegen.explain(fn)
    assert "FALLBACK to the stock kernel: dtype complex128" in report
    assert "Add over axes (0,) in float64 (register), accumulator flags {reassoc" in report
    assert np.isfinite(fn(np.array([1j]), np.ones(2))[1])


def test_explain_cli(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "ptnumba_codegen", "explain", str(ROOT / "examples" / "seed.py") + ":fn", "--ir"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    assert "comparison_sensitive" in out and "[nsz]" in out and "fcmp ole" in out
    # examples/seed.py compiles under `default`, which decides as written
    assert "why: [comparison] as_written in policy default" in out and "2 as-written copies" in out
    bad = subprocess.run(
        [sys.executable, "-m", "ptnumba_codegen", "explain", "nothing_here"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "SCRIPT.py:NAME" in bad.stdout


def test_compilation_logs_a_summary_at_info(caplog):
    import logging

    import pytensor
    import pytensor.tensor as pt

    x = pt.vector("x")
    c = pt.vector("c", dtype="complex128")
    with caplog.at_level(logging.INFO, logger="ptnumba_codegen"):
        pytensor.function([x, c], [pt.exp(x).sum(), pt.exp(c) * 2], mode=ptnumba_codegen.policy_mode("rewritten"))
    summary = [r.getMessage() for r in caplog.records if "kernel(s) generated" in r.getMessage()]
    assert summary and "1 with libmvec calls" in summary[0] and "fell back" in summary[0]
    assert "complex128" in summary[0]


def test_explain_covers_scan_and_opfromgraph_inner_graphs():
    import pytensor
    import pytensor.tensor as pt
    from pytensor.compile.builders import OpFromGraph

    x, y = pt.vectors("x", "y")
    a, b = pt.vectors("a", "b")
    ofg = OpFromGraph([a, b], [pt.minimum(a * b * a, b)])
    res, _ = pytensor.scan(lambda xi, acc: acc * xi + pt.exp(xi), sequences=[x], outputs_info=[pt.zeros(())])
    fn = pytensor.function([x, y], [ofg(x, y), res[-1]], mode=ptnumba_codegen.policy_mode("rewritten"))
    report = ptnumba_codegen.explain(fn)
    assert "== Scan inner graph" in report and "== OpFromGraph inner graph" in report
    assert "Minimum(" in report and "comparison_sensitive" in report
    assert "Exp(" in report
