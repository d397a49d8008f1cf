"""The stock loop of an indexed kernel written as IR (`backend.stock_loop_ir`): numba compiles
no ``fused_elemwise_impl``, ``scalar_core`` or ``as_strided`` for it, and the whole function's
final optimized IR and bits are those of numba's compile of stock's overload."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from numba.core import event

import ptnumba_codegen
from conftest import assert_same_bits, compile_fn, final_ir, policy_nodes
from test_own_library import _Compiles, _normalized_ir, _overload_forwarder
from ptnumba_codegen.backend.plans import plan_node
from ptnumba_codegen.backend.stock_loop_ir import stock_loop_shape

# what numba compiles for stock's overload and the helpers it calls (parts of qualified names)
STOCK_IMPL_COMPILES = ("fused_elemwise", "scalar_core", "as_strided")


def _stock_impl_compiles(seen):
    return [name for name, _ in seen if any(part in name for part in STOCK_IMPL_COMPILES)]


def _graph(kind):
    x, b, s = pt.dvector("x"), pt.dvector("b"), pt.dscalar("s")
    idx = pt.lvector("idx")
    m = pt.dmatrix("m")
    xf, bf = pt.fvector("xf"), pt.fvector("bf")
    rng = np.random.default_rng(5)
    xv, bv = rng.uniform(0.5, 1.5, 7), rng.uniform(0.5, 1.5, 8)
    iv = np.array([0, 3, 6, 3, -1, 2, 3, 3])
    if kind == "scalar_output":  # a full sum read as a native scalar
        return [x, idx, b, s], [pt.exp((x[idx] * b).sum()) * s], [xv, iv, bv, 0.7]
    if kind == "scalar_input":  # a native scalar input: stock's scalar_core puts it first
        bv = bv.copy()
        bv[2] = (xv[6] - np.exp(0.3)) ** -2  # a tie for the comparison
        term = (x[idx] - pt.exp(s)) ** 2 * b
        out = pt.switch(pt.le(term, 1.0), term, 0.0).sum()
        return [x, idx, b, s], [out, *pytensor.grad(out, [x, s])], [xv, iv, bv, 0.3]
    if kind == "kept_axes":  # a partial sum: a squeezed view of the loop's keepdims output
        mv = rng.uniform(-1, 1, (7, 3))
        return [m, idx, b], [(m[idx] * b[:, None] + 1.0).sum(axis=0)], [mv, iv, bv]
    if kind == "two_outputs":  # two reductions of one loop, each a 0-d view
        return [x, idx, b], [(x[idx] * b).sum(), (x[idx] * b).max()], [xv, iv, bv]
    if kind == "float32_cast":  # float64 accumulator cast back to float32: not written, compiled
        return [xf, idx, bf], [(xf[idx] * bf).sum()], [xv.astype("float32"), iv, bv.astype("float32")]
    raise ValueError(kind)


KINDS = ["scalar_output", "scalar_input", "kept_axes", "two_outputs", "float32_cast"]
WRITTEN = {k: k != "float32_cast" for k in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_stock_loop_as_ir_gives_the_compiled_overloads_final_ir(kind, monkeypatch):
    from ptnumba_codegen.backend import dispatch

    inputs, outs, values = _graph(kind)
    listener = _Compiles()
    with event.install_listener("numba:compile", listener):
        own = compile_fn(inputs, outs, "policy_default", inspect_ir=True)
        res = own(*values)
    stock_loops = [n for n in policy_nodes(own) if plan_node(n).kind == "stock_loop"]
    assert stock_loops, [plan_node(n).kind for n in policy_nodes(own)]
    assert all(ptnumba_codegen.fallback_reason(n) is None for n in policy_nodes(own))
    if WRITTEN[kind]:
        assert not _stock_impl_compiles(listener.seen), listener.seen
    else:
        assert "fused_elemwise_impl" in _stock_impl_compiles(listener.seen), listener.seen

    monkeypatch.setattr(dispatch, "compiled_or_stock", _overload_forwarder)
    listener = _Compiles()
    with event.install_listener("numba:compile", listener):
        reference = compile_fn(inputs, outs, "policy_default", inspect_ir=True)
        want = reference(*values)
    assert _stock_impl_compiles(listener.seen), listener.seen  # the reference compiles stock's overload
    assert _normalized_ir(final_ir(own)) == _normalized_ir(final_ir(reference))
    for u, v in zip(res, want, strict=True):
        assert_same_bits(u, v)


def test_the_shape_read_from_the_node_is_stocks():
    """`stock_loop_shape` for the kinds above: native scalar positions and output finishes."""
    shapes = {}
    for kind in ("scalar_output", "scalar_input", "kept_axes", "two_outputs", "float32_cast"):
        inputs, outs, _ = _graph(kind)
        fn = compile_fn(inputs, outs, "policy_default")
        [node] = [n for n in policy_nodes(fn) if plan_node(n).kind == "stock_loop"][:1]
        shapes[kind] = stock_loop_shape(plan_node(node).stock_op, node)
    assert shapes["scalar_input"].scalar_positions and shapes["scalar_input"].generated
    assert [f.scalar for f in shapes["scalar_output"].finishes] == [True]
    assert [f.kept_axes for f in shapes["kept_axes"].finishes] == [(1,)]
    assert [(f.kept_axes, f.scalar) for f in shapes["two_outputs"].finishes] == [((), False), ((), False)]
    assert [(f.cast, f.out_dtype) for f in shapes["float32_cast"].finishes] == [(True, "float32")]


def test_a_shape_mismatch_raises_as_the_compiled_overload_does(monkeypatch):
    """The loop's own checks are PyTensor's codegen: an index of another length than the
    values it is combined with raises the same error."""
    from ptnumba_codegen.backend import dispatch

    inputs, outs, values = _graph("two_outputs")
    values = [values[0], values[1], values[2][:5]]
    own = compile_fn(inputs, outs, "policy_default", inspect_ir=True)
    with pytest.raises(ValueError) as got:
        own(*values)
    monkeypatch.setattr(dispatch, "compiled_or_stock", _overload_forwarder)
    reference = compile_fn(inputs, outs, "policy_default", inspect_ir=True)
    with pytest.raises(ValueError) as want:
        reference(*values)
    assert str(got.value) == str(want.value)


def test_a_squeezed_partial_sum_calls_as_strided_written_as_ir(monkeypatch):
    """`lowering.view_ir`: a kernel finishing a partial sum as a squeezed view calls
    ``as_strided`` written as IR (and so compiles none), where the generated entry (the
    control) calls numba's compiled overload; the same values. The final IR comparison of
    the two is test_own_library's mirrored entries. (Whether numba compiles the overload
    for the control depends on what the process compiled before, so it is not asserted.)"""
    from ptnumba_codegen.lowering import kernel, view_ir

    calls = []
    real = view_ir.as_strided_call
    monkeypatch.setattr(view_ir, "as_strided_call", lambda *a: calls.append(a[2]) or real(*a))
    x, y = pt.tensor("x", shape=(6, 4)), pt.tensor("y", shape=(6, 4))
    outs = [(pt.log1p(x * x) * y).sum(axis=0)]
    values = [np.linspace(-1, 1, 24).reshape(6, 4), np.linspace(0.5, 2, 24).reshape(6, 4)]
    seen = {}
    for form, patch in (("ir", False), ("generated", True)):
        if patch:
            monkeypatch.setattr(kernel.KernelImpl, "mirrored_form", lambda self, input_types: None)
        calls.clear()
        listener = _Compiles()
        with event.install_listener("numba:compile", listener):
            fn = compile_fn([x, y], outs, "policy_default", inspect_ir=True)
            seen[form] = (fn(*values), list(calls), [name for name, _ in listener.seen if "as_strided" in name])
    assert seen["ir"][1] and not seen["ir"][2], seen["ir"]
    assert not seen["generated"][1], seen["generated"]
    assert_same_bits(seen["ir"][0], seen["generated"][0])
