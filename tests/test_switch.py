"""The process-wide switch: ``enable`` / ``disable`` / ``enabled`` put the policy under every
numba-linker mode, and take it away again for new compilations."""

import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile import optdb
from pytensor.compile.mode import NUMBA, Mode

import ptnumba_codegen
from conftest import policy_nodes
from ptnumba_codegen.modes import AS_WRITTEN, KERNELS, REGISTERED
from test_as_written import AV, CV, MAINT_BV, MAINT_EXPECTED
from test_seed_and_ir import BV, EXPECTED, WV, XV, YV, ZV, seed_graph

ARGS = (XV, YV, ZV, WV, BV)


@pytest.fixture(autouse=True)
def switch_off_after():
    """Whatever a test does, the next one starts with the switch off."""
    assert not ptnumba_codegen.is_enabled()
    yield
    ptnumba_codegen.disable()


def compile_seed(mode):
    inputs, out = seed_graph()
    return pytensor.function(inputs, out, mode=mode)


def policies_of(fn):
    return {n.op.policy.name for n in policy_nodes(fn)}


@pytest.mark.parametrize("policy", ["default", "rewritten"])
def test_enable_puts_the_policy_under_numba_modes_and_disable_takes_it_away(policy):
    ptnumba_codegen.enable(policy)
    assert ptnumba_codegen.is_enabled()
    on = {label: compile_seed(mode) for label, mode in (
        ("NUMBA", "NUMBA"),
        ("Mode(numba, None)", Mode(linker="numba", optimizer=None)),
        ("default mode", None),  # pytensor's default: linker "auto" = numba
    )}  # fmt: skip
    for label, fn in on.items():
        assert policies_of(fn) == {policy}, label
        assert fn(*ARGS) == pytest.approx([EXPECTED]), label

    ptnumba_codegen.disable()
    assert not ptnumba_codegen.is_enabled()
    assert ptnumba_codegen.enabled_policy() is None
    # the module-level NUMBA Mode object too: Modes query optdb at every compilation
    for mode in ("NUMBA", NUMBA):
        off = compile_seed(mode)
        assert not policy_nodes(off)
        assert off(*ARGS)[0] == 0.0  # stock numba's answer at the tie
    for label, fn in on.items():  # compiled before: keeps its kernels
        assert fn(*ARGS) == pytest.approx([EXPECTED]), label


def test_disable_restores_the_registered_tags():
    ptnumba_codegen.enable("strict")
    ptnumba_codegen.enable("fast")  # switching policy keeps one tag
    ptnumba_codegen.disable()
    ptnumba_codegen.disable()  # idempotent
    for name, rewriter in REGISTERED.items():  # the as-written pass, its inlining, the kernels
        tags = {t for t, names in optdb.__db__.items() if rewriter in names}
        assert tags == {name, "policy_codegen", type(rewriter).__name__}, name
        assert rewriter is optdb[name]
    assert AS_WRITTEN.policy is None and KERNELS.policy is None


def maintainer_graph():
    a, c, b = pt.vectors("a", "c", "b")
    return [a, c, b], pytensor.grad(pt.minimum(pt.exp(a) * pt.exp(c), b).sum(), a)


@pytest.mark.parametrize("policy", ["default", "as_written"])
def test_enable_as_written_decides_the_maintainers_example_as_written(policy):
    """The switch turns on the as-written pass too: in a plain NUMBA mode the tie of the
    seed thread's counter-example is decided as written (fast_run alone gives [0.])."""
    with ptnumba_codegen.enabled(policy):
        assert AS_WRITTEN.policy.as_written
        fn = pytensor.function(*maintainer_graph(), mode="NUMBA")
    assert AS_WRITTEN.policy is None  # back off
    assert policies_of(fn) == {policy}
    assert fn(AV, CV, MAINT_BV)[0] == pytest.approx(MAINT_EXPECTED, rel=1e-6)


def test_enable_without_a_policy_decides_as_written(monkeypatch):
    """``enable()`` with no argument and no $PTNUMBA_CODEGEN_POLICY: the default preset,
    which decides as written; ``enable("rewritten")`` gives the rewritten graph's [0.]."""
    monkeypatch.delenv(ptnumba_codegen.ENV_VAR, raising=False)
    policy = ptnumba_codegen.enable()
    assert policy.name == "default" and policy.as_written
    assert ptnumba_codegen.enabled_policy() == policy and ptnumba_codegen.enabled_policy().as_written
    fn = pytensor.function(*maintainer_graph(), mode="NUMBA")
    assert policies_of(fn) == {"default"}
    assert fn(AV, CV, MAINT_BV)[0] == pytest.approx(MAINT_EXPECTED, rel=1e-6)
    assert not ptnumba_codegen.enable("rewritten").as_written
    assert pytensor.function(*maintainer_graph(), mode="NUMBA")(AV, CV, MAINT_BV)[0] == 0.0


def test_resolution_order(monkeypatch):
    """policy_mode(p) > enable(p) > $PTNUMBA_CODEGEN_POLICY > default."""
    monkeypatch.setenv(ptnumba_codegen.ENV_VAR, "fast")
    assert ptnumba_codegen.enable(None).name == "fast"  # env resolved at enable time
    monkeypatch.setenv(ptnumba_codegen.ENV_VAR, "strict")
    assert ptnumba_codegen.enabled_policy().name == "fast"
    ptnumba_codegen.enable("default")  # explicit beats the environment
    assert policies_of(compile_seed("NUMBA")) == {"default"}
    assert ptnumba_codegen.policy_mode().provided_optimizer.extra_rewrites[0][0].policy.name == "default"
    fn = compile_seed(ptnumba_codegen.policy_mode("fast"))  # the function's own mode wins
    assert policies_of(fn) == {"fast"}
    assert fn(*ARGS)[0] == 0.0
    ptnumba_codegen.disable()
    including = Mode(linker="numba", optimizer="fast_run").including("policy_codegen")
    assert policies_of(compile_seed(including)) == {"strict"}  # back to the environment


def test_enabled_nests_and_restores_on_exceptions():
    with ptnumba_codegen.enabled("strict") as outer:
        assert outer.name == "strict" and ptnumba_codegen.enabled_policy() == outer
        with pytest.raises(KeyError):
            with ptnumba_codegen.enabled("fast"):
                assert ptnumba_codegen.enabled_policy().name == "fast"
                raise KeyError("inside")
        assert ptnumba_codegen.enabled_policy().name == "strict"
    assert not ptnumba_codegen.is_enabled()
    ptnumba_codegen.enable("fast")
    with ptnumba_codegen.enabled("default"):
        pass
    assert ptnumba_codegen.enabled_policy().name == "fast"  # an outer enable() is kept


def test_a_typo_raises_in_enable_and_changes_nothing(tmp_path):
    with pytest.raises(ptnumba_codegen.PolicyError, match="unknown policy preset 'defualt'"):
        ptnumba_codegen.enable("defualt")
    assert not ptnumba_codegen.is_enabled()
    bad = tmp_path / "bad.toml"
    bad.write_text('extends = "default"\n[classes.reduction]\nflags = ["turbo"]\n')
    ptnumba_codegen.enable("strict")
    with pytest.raises(ptnumba_codegen.PolicyError, match="turbo"):
        with ptnumba_codegen.enabled(bad):
            pass  # pragma: no cover
    assert ptnumba_codegen.enabled_policy().name == "strict"


def test_policies_do_not_collide_in_the_disk_cache(tmp_path, monkeypatch):
    import pytensor.link.numba.cache as numba_cache

    monkeypatch.setattr(numba_cache, "NUMBA_CACHE_PATH", tmp_path)
    results = []
    with pytensor.config.change_flags(numba__cache=True):
        for policy in ("strict", "fast", "strict", "fast"):
            with ptnumba_codegen.enabled(policy):
                results.append(compile_seed("NUMBA")(*ARGS)[0])
    assert results[1::2] == [0.0, 0.0]
    assert results[0::2] == pytest.approx([EXPECTED] * 2)
    assert any(tmp_path.iterdir())  # the second round was served by the disk cache
