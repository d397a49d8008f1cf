"""Kernel entries written as IR in a library of their own (`lowering.own_library`): no run of
numba's pipeline per kernel, the same bits as stock's strict kernels, numba's fast-math pass
of a caller never reaching them, errors raised to the caller, a per-node fallback when the
emission fails."""

import re

import numpy as np
import pytensor
import pytensor.scalar as ps
import pytensor.tensor as pt
from pytensor.tensor.elemwise import Elemwise
import pytest
from llvmlite import ir
from numba import njit, types
from numba.core import event

import ptnumba_codegen
from conftest import assert_same_bits, compile_fn, final_ir, policy_nodes
from ptnumba_codegen.backend.dispatch import entry_choices
from ptnumba_codegen.lowering import kernel
from ptnumba_codegen.lowering.own_library import ChosenCall, build_own_function, call_own_function, typed_call


class _Compiles(event.Listener):
    """The names and source files of the functions numba's pipeline compiles."""

    def __init__(self):
        self.seen = []

    def on_start(self, ev):
        pass

    def on_end(self, ev):
        py_func = getattr(ev.data.get("dispatcher"), "py_func", None)
        if py_func is not None:
            self.seen.append((py_func.__qualname__, py_func.__code__.co_filename))


def _generated_entries(seen):
    """Compiles of `KernelImpl.define`'s generated Python entries (source file ``<kernel name>``)."""
    return [name for name, filename in seen if name == "impl" and filename.startswith("<policy")]


def _outputs(x, y, m):
    return [
        pt.exp(x) * y + 1.0,  # an elementwise loop with a vector call: the output as the loop leaves it
        pt.maximum(x, y).max(),  # a full reduction to a 0-d tensor (max: never reordered)
        pt.cast(x > 0, "int64").sum(),  # an integer sum: exact in any order
        pt.all(x < y),
        (m * 2.0 + 1.0).T,  # a 2-d loop
        pt.cast(x > y, "int8") * 3,
        pt.switch(x > 0.5, pt.log(y), x * y),
    ]


def _values():
    return [np.linspace(-2, 2, 11), np.linspace(1, 3, 11), np.arange(12.0).reshape(3, 4) / 7]


def test_entries_written_as_ir_give_the_generated_entries_bits(monkeypatch):
    x, y = pt.vectors("x", "y")
    m = pt.matrix("m")
    outs = _outputs(x, y, m)
    listener = _Compiles()
    with pytensor.config.change_flags(numba__cache=False), event.install_listener("numba:compile", listener):
        fn = pytensor.function([x, y, m], outs, mode=ptnumba_codegen.policy_mode("default"))
        res = fn(*_values())
    assert not _generated_entries(listener.seen), listener.seen
    assert any(name == "numba_funcified_fgraph" for name, _ in listener.seen), listener.seen  # the listener saw the compile
    nodes = policy_nodes(fn)
    assert nodes and all(ptnumba_codegen.fallback_reason(n) is None for n in nodes)

    # the same kernels through the generated Python entries numba compiles
    monkeypatch.setattr(kernel.KernelImpl, "generated_entry_because", lambda self, input_types: "copied_inputs")
    listener = _Compiles()
    with pytensor.config.change_flags(numba__cache=False), event.install_listener("numba:compile", listener):
        generated = pytensor.function([x, y, m], outs, mode=ptnumba_codegen.policy_mode("default"))
        want = generated(*_values())
    assert _generated_entries(listener.seen), listener.seen
    for a, b in zip(res, want, strict=True):
        assert_same_bits(a, b)
    ref = compile_fn([x, y, m], outs, "stock_strict", cache_key="own_library_ref")(*_values())
    for a, b in zip(res, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-15)
        assert np.asarray(a).dtype == np.asarray(b).dtype and np.shape(a) == np.shape(b)


@pytest.mark.parametrize("v", [[1.0, 2.0], [-1.0, 2.0], [0.5, 4.0], [np.nan, 1.0]])
def test_boolean_scalar_results_are_returned_in_numbas_return_form(v):
    """A kernel reducing to boolean scalars (``all``/``any`` feeding an ``ifelse`` condition
    and a boolean output) returns i1 values that numba's calling convention passes as i8."""
    from pytensor.ifelse import ifelse

    x = pt.vector("x")
    outs = [ifelse(pt.all(x > 0), x.sum(), -x.sum()), pt.all(x > 0) & pt.any(x < 3)]
    with pytensor.config.change_flags(numba__cache=False):
        fn = pytensor.function([x], outs, mode=ptnumba_codegen.policy_mode("default"))
    ref = compile_fn([x], outs, "stock_strict", cache_key="own_library_bool_ref")
    for a, b in zip(fn(np.array(v)), ref(np.array(v)), strict=True):
        assert_same_bits(a, b)
    assert all(ptnumba_codegen.fallback_reason(n) is None for n in policy_nodes(fn))


@pytest.mark.parametrize("static", [True, False])
def test_a_float_sum_in_the_entry_keeps_the_generated_entry(static):
    """`kernel.GENERATED_ENTRY_WHEN`: a reassociable float sum whose nest is in the entry (a
    static length below the chunking threshold) keeps the generated entry: its bits depend on
    the code LLVM optimizes it with. In a chunk function (a length known only at run time;
    ``noinline``, the same machine code whoever calls it) the entry is written as IR."""
    shape = (101,) if static else (None,)
    x, y = pt.tensor("x", shape=shape), pt.tensor("y", shape=shape)
    outs = [(x * y).sum(), pt.exp(x).sum()]
    listener = _Compiles()
    with pytensor.config.change_flags(numba__cache=False), event.install_listener("numba:compile", listener):
        fn = pytensor.function([x, y], outs, mode=ptnumba_codegen.policy_mode("default"))
        v = [np.linspace(-2, 2, 101), np.linspace(1, 3, 101)]
        res = fn(*v)
    assert bool(_generated_entries(listener.seen)) == static, listener.seen
    ref = compile_fn([x, y], outs, "stock_strict", cache_key=f"own_library_sum_ref_{static}")(*v)
    for a, b in zip(res, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-13)
    assert all(ptnumba_codegen.fallback_reason(n) is None for n in policy_nodes(fn))
    # explain names the entry each kernel got, and why a generated one was kept
    report = ptnumba_codegen.explain(fn)
    reason = "reordered_reduction_in_entry: " + kernel.GENERATED_ENTRY_WHEN["reordered_reduction_in_entry"]
    assert (reason in report) == static, report
    assert (kernel.IR_ENTRY in report) != static, report


def test_an_entry_that_needs_python_still_compiles_through_numba():
    # a partial reduction's output is a view without the reduced axes (`Finish` "squeeze"),
    # cast from its float64 accumulator to float32 (``.astype``): that entry stays generated
    # Python source
    m = pt.tensor3("m", dtype="float32")
    outs = [pt.exp(m).sum(axis=1)]
    listener = _Compiles()
    with pytensor.config.change_flags(numba__cache=False), event.install_listener("numba:compile", listener):
        fn = pytensor.function([m], outs, mode=ptnumba_codegen.policy_mode("default"))
        v = (np.arange(24.0).reshape(2, 3, 4) / 11).astype(np.float32)
        res = fn(v)
    ref = compile_fn([m], outs, "stock_strict", cache_key="own_library_squeeze_ref")(v)
    np.testing.assert_allclose(res[0], ref[0], rtol=1e-6)  # exp: libmvec's, within its budget
    assert res[0].dtype == ref[0].dtype == np.float32 and res[0].shape == ref[0].shape
    assert _generated_entries(listener.seen), listener.seen
    [node] = policy_nodes(fn)
    assert [c.generated_because for c in entry_choices(node)] == ["unwritten_finish"]


def test_an_error_raised_inside_an_entry_reaches_the_caller_as_stocks_does():
    x, y = pt.vectors("x", "y")
    outs = [pt.exp(x) * y]
    with pytensor.config.change_flags(numba__cache=False):
        fn = pytensor.function([x, y], outs, mode=ptnumba_codegen.policy_mode("default"))
    stock = compile_fn([x, y], outs, "stock_strict", cache_key="own_library_error_ref")
    for f in (fn, stock):
        with pytest.raises(ValueError):
            f(np.ones(3), np.ones(4))
    np.testing.assert_allclose(fn(np.ones(3), np.full(3, 2.0))[0], stock(np.ones(3), np.full(3, 2.0))[0], rtol=1e-15)


def test_an_entry_whose_emission_raises_is_the_stock_kernel(monkeypatch):
    def broken(self, input_types, mirrored=None):
        raise RuntimeError("injected entry failure")

    monkeypatch.setattr(kernel.KernelImpl, "own_entry", broken)
    x = pt.vector("x")
    outs = [pt.log1p(pt.exp(x)) * 2.0]
    with pytensor.config.change_flags(numba__cache=False):
        fn = pytensor.function([x], outs, mode=ptnumba_codegen.policy_mode("default"))
        v = np.linspace(-30, 30, 17)
        res = fn(v)  # compiles at the first call: no exception
    ref = compile_fn([x], outs, "stock_strict", cache_key="own_library_broken_ref")(v)
    np.testing.assert_allclose(res[0], ref[0], rtol=1e-15)
    reasons = [ptnumba_codegen.fallback_reason(n) for n in policy_nodes(fn)]
    assert any(r and "injected entry failure" in r for r in reasons), reasons


# --- own_library itself, on a toy node function ------------------------------------------

_MARK = 1.2345678901234567  # a constant that identifies the own function's fadd in the IR


def _add_mark(a, b):
    return a + b + _MARK


def _choose_add_mark(typingctx, arg_types):
    if arg_types != (types.float64, types.float64):
        return None
    from ptnumba_codegen.lowering.kernel import dry_run_context

    def emit(context, builder, args):
        total = builder.fadd(args[0], args[1])  # no fast-math flags
        return builder.fadd(total, ir.Constant(ir.DoubleType(), _MARK))

    own = build_own_function(dry_run_context(), "add_mark", types.float64(types.float64, types.float64), emit)
    return ChosenCall(types.float64, lambda context, builder, args: call_own_function(context, builder, own, args))


typed_call(_add_mark, 2, _choose_add_mark)


@njit(fastmath=True)
def _fast_caller(a, b, c):
    return _add_mark(a, b) * c + c


def test_a_typed_call_is_a_python_function_outside_numba():
    assert _add_mark(1.0, 2.0) == 1.0 + 2.0 + _MARK


def test_a_fast_caller_does_not_give_its_flags_to_an_own_function():
    assert _fast_caller(1.0, 2.0, 3.0) == (1.0 + 2.0 + _MARK) * 3.0 + 3.0
    final = _fast_caller.inspect_llvm(_fast_caller.signatures[0])
    adds = [line for line in final.splitlines() if " fadd " in line or " fmul " in line]
    mark = [line for line in adds if "0x3FF3C0CA428C59FB" in line]
    assert mark, adds  # the own function is linked and optimized into the caller
    assert all(" fast " not in line and "reassoc" not in line for line in mark), mark
    assert any(" fast " in line for line in adds if line not in mark), adds  # the caller's own are flagged


def _mirrored_case(case):
    """Graphs whose kernel holds a reorderable float sum with its nest in the entry (static
    lengths below the chunking threshold), with outputs of each `kernel.MIRRORED_ENTRIES` form."""
    if case == "one scalar":
        x, y = pt.tensor("x", shape=(3, 5, 2)), pt.tensor("y", shape=(3, 5, 2))
        return [x, y], [pt.log((pt.log1p(x * x) * y).sum())], "scalars"
    if case == "three scalars":
        x, y = pt.tensor("x", shape=(13,)), pt.tensor("y", shape=(13,))
        return [x, y], [(x * y).sum() * (x + y).sum() + pt.exp(x).sum()], "scalars"
    x, y = pt.tensor("x", shape=(6, 4)), pt.tensor("y", shape=(6, 4))
    e = pt.exp(x) * y + 1.0
    if case == "array between scalars":
        return [x, y], [pt.log((x * y).sum()) + (e * 2).sum() * 3, e], "scalars_and_one_array"
    e = -(x - 0.3) * x
    if case == "array first":
        return [x, y], [e * y, pt.sqrt((e**2).sum())], "scalars_and_one_array"
    if case == "two arrays between scalars":
        f = pt.log1p(x * x) - y
        e = pt.exp(x) * y + 1.0
        return [x, y], [pt.log((x * y).sum()) + (e * 2).sum() * 3, e, f * 2.0 + (f * x).sum()], "scalars_and_arrays"
    if case == "three arrays":
        x1, y1 = pt.tensor("x1", shape=(13,)), pt.tensor("y1", shape=(13,))
        a, b, c = pt.exp(x1) * y1, pt.log1p(x1 * x1) * 0.5, x1 - y1
        return [x1, y1], [a, b, c, (a * b).sum() + (c * c).sum()], "scalars_and_arrays"
    if case == "one partial sum":
        return [x, y], [(pt.log1p(x * x) * y).sum(axis=0)], "scalars_and_views"
    if case == "two partial sums":
        f = pt.log1p(x * x) * y
        return [x, y], [f.sum(axis=1), (f * x).sum(axis=1)], "scalars_and_views"
    if case == "a 3-d partial sum":
        x3 = pt.tensor("x3", shape=(3, 2, 4))
        return [x3], [(pt.log1p(x3 * x3) - 0.3).sum(axis=0)], "scalars_and_views"
    assert case == "array last"
    x3 = pt.tensor("x3", shape=(2, 2, 2))
    e3 = -(x3 - 0.3) * x3
    return [x3], [e3.sum() * 2.0 + 1.0, e3 * x3], "scalars_and_one_array"


def _normalized_ir(text: str) -> list[str]:
    """The functions the final IR defines, sorted, with every name, label, attribute group
    and metadata number spelled alike (the generated entry's module also holds numba's
    environment global and its name, which no code reads once the entry is compiled)."""
    functions = re.findall(r"^define [^\n]*\{.*?^\}", text, re.S | re.M)
    return sorted(_normalized_function(f) for f in functions)


def _normalized_function(text: str) -> str:
    text = re.sub(r"Environment: \S+", "Environment", text)
    text = re.sub(r"[%@]\"[^\"]*\"|[%@][\w.$-]+", "%v", text)
    text = re.sub(r"^[\w.$-]+:", "L:", text, flags=re.M)
    text = re.sub(r" *; preds = .*", "", text)
    text = re.sub(r"#\d+|![\w.]+", "#n", text)
    return "\n".join(line for line in text.splitlines() if line.strip())


@pytest.mark.parametrize("case", ["one scalar", "three scalars", "array between scalars", "array first", "array last",
                                  "two arrays between scalars", "three arrays", "one partial sum", "two partial sums",
                                  "a 3-d partial sum"])
def test_mirrored_ir_entries_are_the_generated_entries_final_ir(case, monkeypatch):
    """`kernel.MIRRORED_ENTRIES`: an entry whose nest holds a reorderable float sum is
    written as IR with the generated entry's references, and the whole function's final
    optimized IR is the one the generated entry gives (so are its bits): LLVM inlines it or
    not, and optimizes the nest, as before."""
    inputs, outs, form = _mirrored_case(case)
    rng = np.random.default_rng(7)
    values = [rng.normal(size=v.type.shape) + 1.5 for v in inputs]
    mirrored = compile_fn(inputs, outs, "policy_default", inspect_ir=True)
    res = mirrored(*values)
    choices = [c for n in policy_nodes(mirrored) for c in entry_choices(n)]
    assert [c.mirrored for c in choices if c.mirrored] == [form], choices
    assert all(c.generated_because is None for c in choices), choices
    monkeypatch.setattr(kernel.KernelImpl, "mirrored_form", lambda self, input_types: None)
    generated = compile_fn(inputs, outs, "policy_default", inspect_ir=True)
    want = generated(*values)
    assert "reordered_reduction_in_entry" in [c.generated_because for n in policy_nodes(generated) for c in entry_choices(n)]
    assert _normalized_ir(final_ir(mirrored)) == _normalized_ir(final_ir(generated))
    for a, b in zip(res, want, strict=True):
        assert_same_bits(a, b)


def _overload_scalar_kernel(planned, python_impl, name="policy_scalar", fallback=None):
    """The reference for `kernel.build_scalar_kernel`: numba's overload of the kernel,
    compiled by numba's pipeline, whose body intrinsic reads a tuple of the inputs."""
    from numba.extending import intrinsic, overload

    from ptnumba_codegen.lowering.base import define, numba_type
    from ptnumba_codegen.lowering.body import emit_body

    out_types = [numba_type(d) for d in planned.program.output_dtypes]
    in_types = [numba_type(d) for d in planned.program.input_dtypes]
    ret = out_types[0] if len(out_types) == 1 else types.Tuple(out_types)

    @intrinsic
    def scalar_body(typingctx, inputs):
        def codegen(context, builder, sig, args):
            values = [context.cast(builder, builder.extract_value(args[0], i), ty, want)
                      for i, (ty, want) in enumerate(zip(inputs.types, in_types, strict=True))]
            outs = emit_body(context, builder, planned, values)
            return outs[0] if len(outs) == 1 else context.make_tuple(builder, ret, outs)

        return ret(inputs), codegen

    params = ", ".join(f"x{k}" for k in range(len(in_types)))
    impl = define(f"def impl({params}):\n    return scalar_body(({params},))\n", scalar_body=scalar_body)
    kernel_fn = define(f"def {name}({params}):\n    return python_impl({params})\n", python_impl=python_impl)
    overload(kernel_fn, jit_options=kernel.KERNEL_JIT_OPTIONS)(define(f"def typing({params}):\n    return impl\n", impl=impl))
    return kernel_fn


def test_scalar_kernels_written_as_ir_give_the_overloads_final_ir(monkeypatch):
    """`kernel.build_scalar_kernel` writes the scalar core of a stock indexed loop as IR:
    the function's final optimized IR is the one numba's overload gave, and so are its bits
    (a core of the form of one in stochastic volatility's gradient: a sum under ``reassoc``
    with a boolean input and a switch). Reading the inputs through a tuple, as the
    overload's intrinsic did, is what kept that model's gradient byte-identical; this small
    graph gives the same IR either way (the model-level finding: CHANGELOG.md, "A compile-time
    change that moves a value is not taken")."""
    from ptnumba_codegen.backend import dispatch

    a, b, x, y = pt.dvector("a"), pt.dvector("b"), pt.dvector("x"), pt.dvector("y")
    idx, flag = pt.lvector("idx"), pt.bvector("flag")
    s0, s1, s2, s3, s5 = (ps.float64(f"s{k}") for k in (0, 1, 2, 3, 5))
    s4 = ps.bool("s4")
    core = ps.Composite([s0, s1, s2, s3, s4, s5],
                        [(-1452.5 / s0 + s1 + s2 + s3 + ps.switch(s4, 0.0, -0.1) + s5 * -0.5) * s0 + 1.0])
    outs = [Elemwise(core)(a[idx], x, y, b[idx], flag, x * y)]
    rng = np.random.default_rng(3)
    values = [rng.normal(size=4) + 3, rng.normal(size=4), rng.normal(size=9), rng.normal(size=9),
              rng.integers(0, 4, size=9), (rng.normal(size=9) > 0).astype("int8")]
    built = []
    build = dispatch.build_scalar_kernel
    monkeypatch.setattr(dispatch, "build_scalar_kernel", lambda *a, **k: built.append(1) or build(*a, **k))
    own = compile_fn([a, b, x, y, idx, flag], outs, "policy_default", inspect_ir=True)
    res = own(*values)
    assert built, "no scalar kernel in the graph"
    monkeypatch.setattr(dispatch, "build_scalar_kernel", _overload_scalar_kernel)
    reference = compile_fn([a, b, x, y, idx, flag], outs, "policy_default", inspect_ir=True)
    want = reference(*values)
    assert _normalized_ir(final_ir(own)) == _normalized_ir(final_ir(reference))
    for u, v in zip(res, want, strict=True):
        assert_same_bits(u, v)


_OVERLOAD_FORWARDER = "_overload_forwarder.<locals>._kernel_overload.<locals>.impl"


def _overload_forwarder(fn, fallback, name, n_inputs, impl_in_ir=None):
    """The reference for `kernel.compiled_or_stock`: numba's overload of a forwarding
    function, compiled by numba's pipeline (a failure to compile ``fn`` inside a probe gives
    the stock kernel); ``fn`` is always compiled by numba (``impl_in_ir``
    ignored)."""
    from numba.extending import overload

    from ptnumba_codegen.lowering.base import define

    def forward(*inputs):
        return fn(*inputs)

    @overload(forward, jit_options=kernel.KERNEL_JIT_OPTIONS)
    def _kernel_overload(*inputs):
        try:
            params = ", ".join(f"x{k}" for k in range(len(inputs)))
            probe = define(f"def probe({params}):\n    return fn({params})\n", fn=fn)
            njit(**kernel.KERNEL_JIT_OPTIONS)(probe).compile(tuple(inputs))
        except Exception as err:  # noqa: BLE001
            return kernel.call_stock(fallback, f"{name} failed to compile: {err}")

        def impl(*inputs):
            return fn(*inputs)

        return impl

    return forward


@pytest.mark.parametrize("kind", ["parts", "stock_loop"])
def test_forwarders_written_as_ir_give_the_overloads_final_ir(kind, monkeypatch):
    """`kernel.forwarder`: the call of an indexed kernel's compiled inner graph ("parts") or
    of the stock loop around its scalar core ("stock_loop") goes through a function written
    as IR with the references numba's forwarding overload takes (`FORWARDER_RESULT_PAIRS`),
    no numba pipeline: the whole function's final optimized IR is the overload's, and so
    are its bits (a gather, a sum under ``reassoc``, a comparison at a tie, a scatter-add)."""
    from ptnumba_codegen.backend import dispatch
    from ptnumba_codegen.backend.plans import plan_node

    x, b = pt.dvector("x"), pt.dvector("b")
    idx = pt.lvector("idx")
    value = pt.exp(x[idx]) * b if kind == "parts" else x[idx] * b * 3.0
    out = pt.switch(pt.le(x[idx] * b * x[idx], 1.0), value, 0.0).sum()
    inputs, outs = [x, idx, b], [out, pytensor.grad(out, x)]
    rng = np.random.default_rng(3)
    xv, bv = rng.uniform(0.5, 1.5, 7), rng.uniform(0.5, 1.5, 8)
    bv[1] = 1.0 / (xv[3] * xv[3])  # a tie for the comparison
    values = [xv, np.array([0, 3, 6, 3, -1, 2, 3, 3]), bv]

    listener = _Compiles()
    with event.install_listener("numba:compile", listener):
        own = compile_fn(inputs, outs, "policy_default", inspect_ir=True)
        res = own(*values)
    kinds = [plan_node(n).kind for n in policy_nodes(own)]
    assert kind in kinds, kinds
    assert all(ptnumba_codegen.fallback_reason(n) is None for n in policy_nodes(own))
    assert _OVERLOAD_FORWARDER not in [name for name, _ in listener.seen]

    monkeypatch.setattr(dispatch, "compiled_or_stock", _overload_forwarder)
    listener = _Compiles()
    with event.install_listener("numba:compile", listener):
        reference = compile_fn(inputs, outs, "policy_default", inspect_ir=True)
        want = reference(*values)
    assert _OVERLOAD_FORWARDER in [name for name, _ in listener.seen]
    assert _normalized_ir(final_ir(own)) == _normalized_ir(final_ir(reference))
    for u, v in zip(res, want, strict=True):
        assert_same_bits(u, v)


def test_a_forwarded_kernel_that_fails_to_compile_is_the_stock_kernel():
    """A compiled inner graph that numba cannot compile for the caller's argument types is
    the node's stock kernel, decided while the caller is typed, with the reason recorded."""
    reasons = []

    def fallback(reason):
        reasons.append(reason)
        return njit(lambda x: x + 1.0)

    fn = njit(lambda x: undefined_name_for_this_test + x)  # noqa: F821  (numba cannot type it)
    forwarded = kernel.compiled_or_stock(fn, fallback, "policy_parts", 1)

    @njit
    def caller(x):
        return forwarded(x)

    assert caller(2.0) == 3.0
    assert len(reasons) == 1 and reasons[0].startswith("policy_parts failed to compile: "), reasons
