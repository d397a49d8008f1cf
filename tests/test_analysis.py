"""The classification rules, on scalar programs (pure Python: nothing is compiled)."""

import pytensor.scalar as ps
import pytest

from ptnumba_codegen.analysis.classify import classify
from ptnumba_codegen.analysis.program import from_scalar_op

F = "float64"


def classes_of(inputs, outputs, sensitive_outputs=()):
    comp = ps.Composite(inputs, outputs)
    prog = from_scalar_op(comp, [i.type.dtype for i in inputs])
    return {line: klass for line, klass in zip(prog.describe(), classify(prog, sensitive_outputs))}, prog


def by_op(table):
    out = {}
    for line, klass in table.items():
        op = line.split(" = ")[1].split("(")[0]
        out.setdefault(op, set()).add(klass)
    return out


def test_seed_graph_cone_is_strict_and_gradient_product_is_arithmetic():
    x, y, z, w, b = (ps.float64(n) for n in "xyzwb")
    prod = ps.mul(x, y, z, w)
    table, _ = classes_of([w, z, y, b, x], [ps.mul(ps.le(prod, b), w, z, y)])
    ops = by_op(table)
    assert ops["LE"] == {"comparison_sensitive"}
    assert ops["Mul"] == {"comparison_sensitive", "arithmetic"}
    strict_mul = [line for line, k in table.items() if k == "comparison_sensitive" and "Mul" in line]
    assert len(strict_mul) == 1  # the 4-factor product feeding LE


def test_cone_reaches_through_transcendentals_to_the_inputs():
    x, y, b = ps.float64("x"), ps.float64("y"), ps.float64("b")
    table, _ = classes_of([x, y, b], [ps.minimum(ps.exp(x) * y + 1.0, b), ps.exp(y)])
    ops = by_op(table)
    assert ops["Exp"] == {"comparison_sensitive", "transcendental"}  # exp(x) in cone, exp(y) not
    assert ops["Mul"] == {"comparison_sensitive"} and ops["Add"] == {"comparison_sensitive"}


def test_switch_only_its_condition_is_sensitive():
    x, y, t = ps.float64("x"), ps.float64("y"), ps.float64("t")
    table, _ = classes_of([x, y, t], [ps.switch(ps.gt(x - y, t), x * y, x / y)])
    ops = by_op(table)
    assert ops["Sub"] == {"comparison_sensitive"}
    assert ops["GT"] == {"comparison_sensitive"}
    assert ops["Mul"] == {"arithmetic"} and ops["TrueDiv"] == {"arithmetic"}


@pytest.mark.parametrize(
    "make, decider",
    [
        (lambda a: ps.clip(a, 0.0, 1.0), "Clip"),
        (lambda a: ps.floor(a), "Floor"),
        (lambda a: ps.round_half_to_even(a), "RoundHalfToEven"),
        (lambda a: ps.cast(a, "int32"), "Cast"),
        (lambda a: ps.cast(a, "bool"), "Cast"),
        (lambda a: ps.isnan(a), "IsNan"),
        (lambda a: ps.sign(a), "Sign"),
        (lambda a: ps.int_div(a, 3.0), "IntDiv"),
        (lambda a: ps.mod(a, 3.0), "Mod"),
        (lambda a: ps.maximum(a, 2.0), "Maximum"),
    ],
)
def test_decision_ops_make_their_input_cone_strict(make, decider):
    x, y = ps.float64("x"), ps.float64("y")
    table, _ = classes_of([x, y], [make(x * y - x)])
    ops = by_op(table)
    assert ops[decider] == {"comparison_sensitive"}
    assert ops["Mul"] == {"comparison_sensitive"} and ops["Sub"] == {"comparison_sensitive"}


def test_cast_to_float_is_not_a_decision():
    x, y = ps.float64("x"), ps.float64("y")
    table, _ = classes_of([x, y], [ps.cast(x * y, "float32")])
    assert by_op(table)["Mul"] == {"arithmetic"}


def test_sensitive_outputs_from_other_nodes():
    x, y, z = ps.float64("x"), ps.float64("y"), ps.float64("z")
    table, _ = classes_of([x, y, z], [x * y * z, ps.exp(x)], sensitive_outputs=[0])
    ops = by_op(table)
    assert ops["Mul"] == {"comparison_sensitive"}
    assert ops["Exp"] == {"transcendental"}


def test_chains_are_arithmetic_like_binary_ops():
    """An element's n-ary or chained sum is arithmetic, computed in the expression's order
    (the reduction class is a reduction loop's accumulator only)."""
    x, y, z = ps.float64("x"), ps.float64("y"), ps.float64("z")
    table, _ = classes_of([x, y, z], [ps.add(x, y), ps.add(ps.add(x, y, z), x) * 2.0])
    ops = by_op(table)
    assert ops["Add"] == {"arithmetic"} and ops["Mul"] == {"arithmetic"}


def test_nested_composites_are_inlined_and_classified():
    x, y = ps.float64("x"), ps.float64("y")
    inner = ps.Composite([x, y], [ps.mul(x, y, x)])
    a, c, t = ps.float64("a"), ps.float64("c"), ps.float64("t")
    outer = ps.Composite([a, c, t], [ps.lt(inner(a, c), t), ps.exp(a)])
    prog = from_scalar_op(outer, [F, F, F])
    got = dict(zip((i.op_name for i in prog.instrs), classify(prog), strict=True))
    assert got == {"Mul": "comparison_sensitive", "LT": "comparison_sensitive", "Exp": "transcendental"}


def test_fingerprint_tracks_ops_dtypes_and_constants():
    x = ps.float64("x")
    p1 = from_scalar_op(ps.Composite([x], [x * 2.0]), [F])
    p2 = from_scalar_op(ps.Composite([x], [x * 3.0]), [F])
    p3 = from_scalar_op(ps.Composite([x], [x + 2.0]), [F])
    p1b = from_scalar_op(ps.Composite([x], [x * 2.0]), [F])
    assert p1.fingerprint() == p1b.fingerprint()
    assert len({p1.fingerprint(), p2.fingerprint(), p3.fingerprint()}) == 3


def test_a_scalar_op_is_flattened_once_per_object_and_dtypes(monkeypatch):
    """The pass's analysis, range propagation and planning all flatten a kernel's scalar
    op; the Program (immutable) is built once per op object and dtypes (a warm compile
    pays each flattening again), and another op or other dtypes get their own."""
    import pytensor.scalar as ps

    from ptnumba_codegen.analysis import program as prog

    flattened = []
    real = prog._flatten
    monkeypatch.setattr(prog, "_flatten", lambda *a: flattened.append(a[0]) or real(*a))
    x, y = ps.float64("x"), ps.float64("y")
    comp = ps.Composite([x, y], [x * y + 1.0])
    first = prog.from_scalar_op(comp, ["float64", "float64"])
    assert prog.from_scalar_op(comp, ["float64", "float64"]) is first
    assert len(flattened) == 1
    as32 = prog.from_scalar_op(comp, ["float32", "float32"])
    assert as32.input_dtypes == ("float32", "float32") and len(flattened) == 2
    other = ps.Composite([x, y], [x * y - 1.0])
    assert prog.from_scalar_op(other, ["float64", "float64"]).fingerprint() != first.fingerprint()
    assert len(flattened) == 3
