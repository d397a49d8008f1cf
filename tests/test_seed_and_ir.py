"""The seed example (../shared/seeds/000): values per policy and flags in the final IR."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from irtools import backward_cone, fp_instrs, parse
from conftest import assert_no_fallback, compile_fn, final_ir
from ptnumba_codegen.flags import PYTENSOR_FLAGS
# the flags of an element's arithmetic under default and rewritten
ELEMENT_FLAGS = frozenset({"nsz", "afn"})

XV = np.array([0.9887127230177662])
YV = np.array([1.000617328480952])
ZV = np.array([0.9995082121912299])
WV = np.array([404.146799095179])
BV = np.array([((XV[0] * YV[0]) * ZV[0]) * WV[0]])  # the exact left-associated product
EXPECTED = 404.19741326


def seed_graph():
    x, y, z, w, b = pt.vectors("x", "y", "z", "w", "b")
    gx = pytensor.grad(pt.minimum(x * y * z * w, b).sum(), x)
    return [x, y, z, w, b], gx


def seed_fn(backend, inspect_ir=False):
    inputs, out = seed_graph()
    return compile_fn(inputs, out, backend, cache_key="seed", inspect_ir=inspect_ir)


def test_reference_backends_reproduce_the_issue():
    assert seed_fn("stock_strict")(XV, YV, ZV, WV, BV) == pytest.approx([EXPECTED])
    assert seed_fn("stock_fast")(XV, YV, ZV, WV, BV)[0] == 0.0
    assert seed_fn("c")(XV, YV, ZV, WV, BV) == pytest.approx([EXPECTED])


@pytest.mark.parametrize(
    "policy, expected",
    [("default", EXPECTED), ("rewritten", EXPECTED), ("as_written", EXPECTED), ("strict", EXPECTED), ("fast", 0.0)],
)
def test_seed_value_per_policy(policy, expected):
    fn = seed_fn(f"policy_{policy}")
    assert_no_fallback(fn)
    np.testing.assert_allclose(fn(XV, YV, ZV, WV, BV), [expected], rtol=1e-10)


@pytest.mark.parametrize("policy, reference", [("rewritten", "stock_strict"), ("default", "unoptimized_strict")])
def test_seed_at_scale_equals_its_reference_bitwise(policy, reference):
    """Ties at every element of a long array (vector body and remainder): `rewritten`
    equals stock numba strict, `default` (as written) the unoptimized graph strict; `strict`
    equals stock strict."""
    rng = np.random.default_rng(0)
    n = 1003
    x, y, z, w = (rng.uniform(0.5, 2.0, n) for _ in range(4))
    b = ((x * y) * z) * w
    b[::3] = np.nextafter(b[::3], np.inf)
    ref = seed_fn(reference)(x, y, z, w, b)
    np.testing.assert_array_equal(seed_fn(f"policy_{policy}")(x, y, z, w, b), ref)
    stock = seed_fn("stock_strict")(x, y, z, w, b)
    np.testing.assert_array_equal(seed_fn("policy_strict")(x, y, z, w, b), stock)
    assert (ref != 0).sum() > n // 3  # the ties really are ties under strict


def _seed_ir(policy):
    fn = seed_fn(f"policy_{policy}", inspect_ir=True)
    fn(XV, YV, ZV, WV, BV)
    tables = [t for t in parse(final_ir(fn)) if any(i.opcode == "fcmp" for i in t.values())]
    assert tables, "no comparison in the compiled function"
    return tables


@pytest.mark.parametrize("policy", ["rewritten", "default"])
def test_final_ir_default_policy_cone_strict_rest_fast(policy):
    for table in _seed_ir(policy):
        cmps = [i for i in table.values() if i.opcode == "fcmp" and i.predicate == "ole"]
        assert cmps
        cone = backward_cone(table, [c.name for c in cmps])
        in_cone = [i for i in fp_instrs(table) if i.name in cone]
        outside = [i for i in fp_instrs(table) if i.name not in cone]
        # the product chain x*y*z*w (3 fmuls, scalar and vector) and the fcmp: no flags
        assert sum(i.opcode == "fmul" for i in in_cone) >= 3
        assert all(not i.flags for i in in_cone), [i.text for i in in_cone if i.flags]
        # the gradient product: exactly the arithmetic class's flags (no reassoc, contract, arcp)
        assert any(i.opcode == "fmul" for i in outside)
        assert all(i.flags == ELEMENT_FLAGS for i in outside), [i.text for i in outside]


def test_final_ir_strict_and_fast_policies():
    for table in _seed_ir("strict"):
        assert all(not i.flags for i in fp_instrs(table))
    for table in _seed_ir("fast"):
        assert all(i.flags == PYTENSOR_FLAGS for i in fp_instrs(table))


def test_policy_ignores_numba_fastmath_config():
    inputs, out = seed_graph()
    import ptnumba_codegen

    with pytensor.config.change_flags(numba__fastmath=False):
        fast = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode("fast"))
    with pytensor.config.change_flags(numba__fastmath=True):
        strict = pytensor.function(inputs, out, mode=ptnumba_codegen.policy_mode("strict"))
    assert fast(XV, YV, ZV, WV, BV)[0] == 0.0
    assert strict(XV, YV, ZV, WV, BV) == pytest.approx([EXPECTED])


def test_each_class_keeps_its_own_flag_set_in_the_final_ir(tmp_path):
    """A policy with a different flag set per class: the final IR holds exactly those sets,
    each on the instructions of its class."""
    import pytensor.tensor as pt

    from conftest import final_ir

    path = tmp_path / "distinct.toml"
    path.write_text(
        """
        [classes.comparison_sensitive]
        flags = []
        [classes.reduction]
        flags = ["reassoc", "nsz"]
        [classes.transcendental]
        flags = ["afn", "arcp"]
        max_ulp = 0
        [classes.arithmetic]
        flags = ["arcp"]
        """
    )
    import ptnumba_codegen

    inputs, out = seed_graph()
    x, y = inputs[0], inputs[1]
    outs = [out, ((x - y) ** 2).sum(), pt.exp(x) / y]
    with pytensor.config.change_flags(numba__cache=False):
        fn = pytensor.function(inputs, outs, mode=ptnumba_codegen.policy_mode(path))
    fn(XV, YV, ZV, WV, BV)
    tables = parse(final_ir(fn))
    allowed = {frozenset(), frozenset({"reassoc", "nsz"}), frozenset({"afn", "arcp"}), frozenset({"arcp"})}
    seen = {i.flags for t in tables for i in fp_instrs(t)}
    assert seen <= allowed, seen - allowed
    calls = [i for t in tables for i in t.values() if i.opcode == "call" and ("@llvm.exp" in i.text or "@exp(" in i.text)]
    assert calls and all(i.flags == {"afn", "arcp"} for i in calls), [c.text for c in calls]
    fdiv = [i for t in tables for i in fp_instrs(t) if i.opcode == "fdiv"]
    assert fdiv and all(i.flags == {"arcp"} for i in fdiv)
    fsub = [i for t in tables for i in fp_instrs(t) if i.opcode == "fsub"]
    assert fsub and all(i.flags == {"arcp"} for i in fsub)
    fadd = [i for t in tables for i in fp_instrs(t) if i.opcode == "fadd"]
    assert fadd and all(i.flags == {"reassoc", "nsz"} for i in fadd)
    assert frozenset() in seen  # the seed's comparison cone
