"""Every op lowered through a numba ufunc loop, on small integer and bool inputs next to
float32/float64 ones in the same kernel.

One kernel is one LLVM module: numba's log2 and exp2 loops declared their intrinsic under
its bare name, so log2 on float32 (what bool, int8, uint8 and int16 inputs upcast to) and
log2 on float64 in the same kernel crashed at the first call.
"""

import numpy as np
import pytensor.tensor as pt
import pytest
from llvmlite import binding as llvm
from llvmlite import ir
from numba.core import types
from numba.core.registry import cpu_target
from pytensor.scalar.basic import ScalarType

from conftest import assert_no_fallback, assert_same_bits, compile_fn
from ptnumba_codegen.lowering.base import numba_type
from ptnumba_codegen.lowering.rules import plan_instr, rule_kind
from test_all_scalar_ops import scalar_ops

DTYPES = ("bool", "int8", "uint8", "int16", "int32", "int64", "uint32", "float32", "float64")


def ufunc_ops():
    """The scalar ops whose rule is a numba ufunc loop (or the min/max select around one)."""
    return {n: op for n, op in scalar_ops().items() if rule_kind(op).split(":")[0] in ("ufunc", "select")}


def test_every_ufunc_rule_emits_every_dtype_into_one_module():
    """The table: every ufunc-lowered op on every dtype, all emitted into ONE module (as
    one kernel would be), then verified by LLVM. No numba compile, so it is cheap."""
    context = cpu_target.target_context
    library = context.codegen().create_library("one_kernel")  # for subroutines numba compiles
    module = ir.Module("one_kernel")
    emitted = []
    with context.push_code_library(library):
        _emit_all(context, module, emitted)
    llvm.parse_assembly(str(module)).verify()
    assert len(emitted) >= 300, len(emitted)
    assert {"Log2(bool)", "Log2(float64)", "Exp2(int16)", "Exp2(float64)"} <= set(emitted)


def _emit_all(context, module, emitted):
    for name, op in ufunc_ops().items():
        nin = op.nin if op.nin > 0 else 2
        for d in DTYPES:
            try:
                [out] = op.output_types([ScalarType(d)] * nin)
            except (TypeError, ValueError):
                continue  # not defined on this dtype (bit ops on floats, ...)
            if out.dtype.startswith("complex"):
                continue
            emit = plan_instr(op, [d] * nin, [out.dtype])
            in_types = [numba_type(d)] * nin
            fnty = ir.FunctionType(context.get_value_type(numba_type(out.dtype)), [context.get_value_type(t) for t in in_types])
            fn = ir.Function(module, fnty, name=f"{name}_{d}")
            builder = ir.IRBuilder(fn.append_basic_block())
            try:
                [res] = emit(context, builder, list(fn.args), ())
            except Exception as err:
                raise AssertionError(f"{name}({d}): {type(err).__name__}: {err}") from err
            builder.ret(res)
            emitted.append(f"{name}({d})")


GRAPHS = {
    "log2-plus-log2-of-bool": lambda x: pt.log2(x) + pt.log2(x > 0),
    "log2-of-comparison": lambda x: pt.log2(pt.lt(x, pt.log2(x))),
    "exp2-of-int8-uint8-int16": lambda x: pt.exp2(x) + sum(pt.exp2(pt.cast(x, d)) for d in ("int8", "uint8", "int16")),
    "minimum-of-mixed-dtypes": lambda x: pt.minimum(pt.cast(x, "int8"), x > 0) + pt.minimum(x, pt.cast(x, "float32")),
}


@pytest.mark.parametrize("backend", ["policy_strict", "policy_rewritten"])
def test_issue_graphs_with_small_dtypes_next_to_float64(backend):
    x = pt.vector("x")
    outs = [make(x) for make in GRAPHS.values()]
    v = np.array([0.5, 2.0, -1.0, 0.0, -0.0, np.inf, np.nan, 3.0, 100.0, -7.5])
    with np.errstate(all="ignore"):
        ref = compile_fn([x], outs, "stock_strict", cache_key="issue12_log2")(v)
        fn = compile_fn([x], outs, backend, cache_key="issue12_log2")
        res = fn(v)
    assert_no_fallback(fn)
    for name, a, b in zip(GRAPHS, res, ref, strict=True):
        if backend == "policy_strict":
            assert_same_bits(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12, equal_nan=True, err_msg=name)
