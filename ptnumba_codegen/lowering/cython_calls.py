"""A ``scipy.special`` op lowered to a direct call of scipy's cython function by symbol.

The stock backend's function for such an op (``numba_funcify_ScalarOp``) casts each
argument to the C function's parameter type, calls it through its address (looked up at run
time from an object-mode block) and casts the result. `cython_call` emits the same casts
and the same C function, called by the symbol `runtime.cython_symbols` binds: the same bits,
no object-mode function to compile. The C function is the one PyTensor selects
(``wrap_cython_function``: the same signature for the same dtypes), with scipy's
``__pyx_skip_dispatch`` flag set as PyTensor sets it.
"""

from __future__ import annotations

import importlib

import numba
import numpy as np
from llvmlite import ir

from ptnumba_codegen.lowering.base import Typed, Unsupported
from ptnumba_codegen.lowering.base import cast as _cast
from ptnumba_codegen.runtime.cython_symbols import bind

CYTHON_MODULE = "scipy.special.cython_special"


def cython_function(op):
    """scipy's cython function for ``op`` (its ``nfunc_spec`` names ``scipy.special.<f>``,
    as the stock backend reads it), or None."""
    spec = getattr(op, "nfunc_spec", None)
    if not spec or not spec[0].startswith("scipy.special."):
        return None
    try:
        module = importlib.import_module(CYTHON_MODULE)
    except ImportError:
        return None
    return getattr(module, spec[0].rsplit(".", 1)[1], None)


def plan_cython_call(t: Typed, func, out_dtype: str):
    """The emit function calling ``func`` for the instruction's input types and the op's
    output dtype ``out_dtype`` (PyTensor's choice of C function depends on both), and the C
    function's (module, name); raises `Unsupported` where PyTensor finds no cython signature
    for them (the stock function then)."""
    from pytensor.link.numba.dispatch.cython_support import wrap_cython_function

    in_dtypes = [np.dtype(ty.name) for ty in t.inputs]
    out_dtype = np.dtype(out_dtype)
    try:
        spec = wrap_cython_function(func, out_dtype, in_dtypes)
        skip_dispatch = spec.has_pyx_skip_dispatch()
        module_name, capi_name = spec.module_name, spec.capi_name
    except (NotImplementedError, AttributeError, ValueError) as err:
        raise Unsupported(f"no cython signature of {func.__name__} for {in_dtypes}: {err}") from None
    param_types = [numba.from_dtype(np.dtype(d)) for d in spec.input_dtypes]
    result_type = numba.from_dtype(np.dtype(spec.output_dtype))
    if skip_dispatch:
        param_types, flag_type = param_types[:-1], param_types[-1]
    if len(param_types) != len(t.inputs):
        raise Unsupported(f"{func.__name__}'s cython signature takes {len(param_types)} arguments, not {len(t.inputs)}")
    symbol = bind(module_name, capi_name)

    def emit(context, builder, args, flags):
        values = [context.cast(builder, a, ty, p) for a, ty, p in zip(args, t.inputs, param_types, strict=True)]
        arg_types = list(param_types)
        if skip_dispatch:  # PyTensor passes np.intc(1)
            values.append(context.get_constant(flag_type, 1))
            arg_types.append(flag_type)
        fnty = ir.FunctionType(context.get_value_type(result_type), [context.get_value_type(a) for a in arg_types])
        callee = builder.module.globals.get(symbol)
        if callee is None:
            callee = ir.Function(builder.module, fnty, symbol)
        result = builder.call(callee, values)
        return [_cast(context, builder, result, result_type, t.outputs[0])]

    return emit, (module_name, capi_name)


__all__ = ["CYTHON_MODULE", "cython_function", "plan_cython_call"]
