"""Mode integration: the opt-in tag, per-function policies, untouched stock modes."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile import optdb
from pytensor.compile.mode import Mode
from pytensor.tensor.elemwise import Elemwise

import ptnumba_codegen
from conftest import policy_nodes
from ptnumba_codegen.backend.ops import is_policy_op


def graph():
    x, y = pt.vectors("x", "y")
    # exp(x) + y is fused into one Composite; the inplace rewrite makes it destroy an input
    return [x, y], [pt.exp(x) * y + 1.0, pt.maximum(x, y)]


def elemwise_nodes(fn):
    return [n for n in fn.maker.fgraph.toposort() if isinstance(n.op, Elemwise)]


def test_tag_is_only_policy_codegen():
    from ptnumba_codegen.modes import (AS_WRITTEN_NAME, GATHER_COPIES_NAME, INLINE_NAME, KERNELS_NAME,
                                       SCALAR_WRITES_NAME, SWAP_COMPACT_NAME)

    ours = {KERNELS_NAME: "PolicyCodegen", AS_WRITTEN_NAME: "AsWrittenPass", INLINE_NAME: "InlineAsWritten",
            GATHER_COPIES_NAME: "GatherCopies", SWAP_COMPACT_NAME: "SwapCompact", SCALAR_WRITES_NAME: "ScalarWrites"}
    assert set(optdb.__db__["policy_codegen"]) == {optdb[name] for name in ours}
    for name, cls in ours.items():
        tags = {t for t, names in optdb.__db__.items() if optdb[name] in names}
        assert tags == {name, "policy_codegen", cls}
    numba_positions = [
        pos
        for name, pos in optdb.__position__.items()
        if name not in ours
        and any(optdb[name] in optdb.__db__.get(tag, ()) for tag in ("fast_run", "numba", "minimum_compile"))
    ]
    # the kernels after everything the numba linker runs (the numba fusions sit at 100), the
    # scalar writes after the kernels (the whole-graph analysis has seen the increments)
    assert optdb.__position__[KERNELS_NAME] > max(numba_positions)
    assert optdb.__position__[SCALAR_WRITES_NAME] > optdb.__position__[KERNELS_NAME]
    # the as-written pass after OpFromGraph inlining (-0.01), before everything else
    assert optdb.__position__["inline_ofg_expansion"] < optdb.__position__[AS_WRITTEN_NAME]
    assert optdb.__position__[AS_WRITTEN_NAME] < min(p for p in numba_positions if p > -0.01)
    # the inline pass after the last rewrite that changes values, before elemwise fusion
    assert optdb.__position__["add_mul_fusion"] < optdb.__position__[INLINE_NAME] < optdb.__position__["elemwise_fusion"]
    # the gather copies after every in-place rewrite, right before the indexed fusion and the
    # merge that follows it (same position: sorted by name, the fusion first)
    before = [p for name, p in optdb.__position__.items() if p < 100 and name not in ours]
    assert max(before) < optdb.__position__[GATHER_COPIES_NAME] < 100
    assert optdb.__position__["fuse_indexed_into_elemwise"] == optdb.__position__["merge3"] == 100
    # the compact ops after every PyTensor rewrite (none meets the subclass), before the kernels
    assert max(numba_positions) < optdb.__position__[SWAP_COMPACT_NAME] < optdb.__position__[KERNELS_NAME]


def test_including_tag_hands_every_elemwise_to_the_generator():
    inputs, outputs = graph()
    mode = Mode(linker="numba", optimizer="fast_run").including("policy_codegen")
    fn = pytensor.function(inputs, outputs, mode=mode)
    nodes = elemwise_nodes(fn)
    assert nodes and all(is_policy_op(n.op) for n in nodes)
    assert all(n.op.policy.name == "default" for n in nodes)
    assert all(n.op.policy.as_written for n in nodes)  # the process default decides as written


@pytest.mark.parametrize("mode", ["NUMBA", Mode(linker="numba", optimizer="fast_run")])
def test_plain_numba_mode_is_untouched(mode):
    inputs, outputs = graph()
    fn = pytensor.function(inputs, outputs, mode=mode)
    assert elemwise_nodes(fn) and not policy_nodes(fn)


@pytest.mark.parametrize("policy", ["default", "rewritten"])  # no decision: the same under both
def test_inplace_pattern_and_destroy_map_are_kept_exactly(policy):
    x, y = pt.vectors("x", "y")
    z = pt.exp(x) + y
    w = pt.dot(z, z)  # materializes z; sin(z) * w then reuses z's buffer (inplace)
    outs = [pt.sin(z) * w, pt.cos(z)]
    stock = pytensor.function([x, y], outs, mode=Mode(linker="numba", optimizer="fast_run"))
    mine = pytensor.function([x, y], outs, mode=ptnumba_codegen.policy_mode(policy))
    s_nodes, m_nodes = elemwise_nodes(stock), elemwise_nodes(mine)
    assert [str(n.op.scalar_op) for n in s_nodes] == [str(n.op.scalar_op) for n in m_nodes]
    assert [n.op.inplace_pattern for n in s_nodes] == [n.op.inplace_pattern for n in m_nodes]
    assert [n.op.destroy_map for n in s_nodes] == [n.op.destroy_map for n in m_nodes]
    assert any(n.op.inplace_pattern for n in m_nodes), "the graph should exercise an inplace node"
    xv, yv = np.linspace(-1, 1, 11), np.linspace(2, 3, 11)
    for a, b in zip(mine(xv, yv), stock(xv, yv), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_array_equal(xv, np.linspace(-1, 1, 11))  # inputs are not destroyed


def test_policy_per_function_and_env_default(monkeypatch):
    inputs, outputs = graph()
    f_strict = pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode("strict"))
    f_fast = pytensor.function(inputs, outputs, mode=ptnumba_codegen.policy_mode("fast"))
    assert {n.op.policy.name for n in policy_nodes(f_strict)} == {"strict"}
    assert {n.op.policy.name for n in policy_nodes(f_fast)} == {"fast"}
    monkeypatch.setenv(ptnumba_codegen.ENV_VAR, "strict")
    mode = Mode(linker="numba", optimizer="fast_run").including("policy_codegen")
    f_env = pytensor.function(inputs, outputs, mode=mode)
    assert {n.op.policy.name for n in policy_nodes(f_env)} == {"strict"}


def test_bad_policy_fails_before_compiling(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[classes.reduction]\nflags = ['turbo']\n")
    with pytest.raises(ptnumba_codegen.PolicyError, match="turbo"):
        ptnumba_codegen.policy_mode(bad)


def test_env_var_typo_is_an_error_before_anything_compiles(monkeypatch, capsys):
    """The rewrite resolves $PTNUMBA_CODEGEN_POLICY when it runs: a bad value must not be
    printed and skipped by PyTensor's rewrite sequence (which would compile stock)."""
    from ptnumba_codegen.policy import ENV_VAR, PolicyError

    monkeypatch.setenv(ENV_VAR, "nosuch")
    inputs, outputs = graph()
    mode = Mode(linker="numba", optimizer="fast_run").including("policy_codegen")
    with pytest.raises(PolicyError, match=f"{ENV_VAR}='nosuch': unknown policy preset 'nosuch'; allowed: as_written, default, fast, rewritten, strict"):
        pytensor.function(inputs, outputs, mode=mode)
    assert "Traceback" not in capsys.readouterr().err
