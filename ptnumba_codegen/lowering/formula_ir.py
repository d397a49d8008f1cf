"""Stock scalar formulas written as IR (`formulas._sigmoid`, `formulas._softplus`).

The instructions numba lowers each formula to (its ``-x``, ``<``, ``+``, ``/`` and
``np.exp``/``np.log1p`` of a float64, under numpy's error model, as `rules.call_python`
compiles them), with the node's flags, in a function of the kernel's own module, called as
numba calls the compiled subroutine: no numba compile of each formula per process (a
visible part of a small model's cold compile; CHANGELOG.md, "Cold compile: stock node
functions compiled as intrinsics").

A function called, not instructions inline: numba's per-function passes then meet the loop
around an opaque call, as they meet it around the linked subroutine's, and LLVM inlines it
when it optimizes the whole module, as it inlines the subroutine. Written inline, the loop's
blocks and its counter's flags came out otherwise, and ``exp(-x)`` was shared with a
neighbour's: another final IR, where a reorderable sum could have vectorized otherwise.

Only float64 in and out (`in_ir`): numba's typing mixes float32 with the formulas' int and
float64 literals (``1 + np.exp(-x)`` is float64), which the compiled subroutine keeps. The
final optimized IR is the subroutine's, in loops, sums, cones and bodies run once
(tests/test_formulas_in_ir.py).
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba.core import cgutils, types
from numba.cpython.mathimpl import negate_real
from numba.np.math import mathimpl

from ptnumba_codegen.lowering.base import Typed
from ptnumba_codegen.lowering.stamp import set_flags

def in_ir(t: Typed) -> bool:
    """Whether the formula of ``t`` is written as IR: float64 in and out."""
    return all(ty == types.float64 for ty in (*t.inputs, *t.outputs))


_F64_UNARY = numba.core.typing.signature(types.float64, types.float64)


def _exp_f64(context, builder, x):
    return mathimpl.exp_impl(context, builder, _F64_UNARY, [x])


def _libm_f64(impl):
    """numba's lowering of a libm function it calls by name (``math.lgamma``, ``math.erf``,
    ``math.erfc``: its mathimpl's ``unary_math_extern``) on a float64."""
    return lambda context, builder, x: impl(context, builder, _F64_UNARY, [x])


def _pow_ir(context, builder, x, y):
    """``x ** y`` of two float64 (numba's ``real_power_impl``: ``llvm.pow``)."""
    return builder.call(builder.module.declare_intrinsic("llvm.pow", [y.type]), (x, y))


def _sigmoid_ir(context, builder, x):
    """``1 / (1 + np.exp(-x))``."""
    one = ir.Constant(x.type, 1.0)
    return builder.fdiv(one, builder.fadd(one, _exp_f64(context, builder, negate_real(builder, x))))


# formulas._softplus's ``if`` chain: (upper bound, branch taken below it), else ``x``; and
# the layout of numba's compiled subroutine once optimized (numba's ``np.exp`` is a ufunc
# loop of one element, whose blocks LLVM moves last), which the inliner keeps: its blocks
# after the tests, and the incoming values of its result, in that order
SOFTPLUS_BANDS = ((-37.0, "exp"), (18.0, "log1p_exp"), (33.3, "x_plus_exp_neg"))
SOFTPLUS_BLOCKS = ("x_plus_exp_neg", "done", "exp", "log1p_exp")
SOFTPLUS_INCOMING = ("x_plus_exp_neg", "log1p_exp", "exp", "x")


def _softplus_ir(context, builder, x):
    """``x < -37: exp(x); x < 18: log1p(exp(x)); x < 33.3: x + exp(-x); else x``, as numba
    lowers the ``if`` chain."""
    values = {
        "exp": lambda: _exp_f64(context, builder, x),
        "log1p_exp": lambda: mathimpl.log1p_impl(context, builder, _F64_UNARY, [_exp_f64(context, builder, x)]),
        "x_plus_exp_neg": lambda: builder.fadd(x, _exp_f64(context, builder, negate_real(builder, x))),
    }
    tests = [builder.append_basic_block("softplus.test") for _ in SOFTPLUS_BANDS[1:]]
    blocks = {name: builder.append_basic_block(f"softplus.{name}") for name in SOFTPLUS_BLOCKS}
    incoming = {}
    for k, (bound, name) in enumerate(SOFTPLUS_BANDS):
        below = builder.fcmp_ordered("<", x, ir.Constant(x.type, bound))
        otherwise = tests[k] if k < len(tests) else blocks["done"]
        if otherwise is blocks["done"]:
            incoming["x"] = (x, builder.block)
        builder.cbranch(below, blocks[name], otherwise)
        with builder.goto_block(blocks[name]):
            incoming[name] = (values[name](), builder.block)
            builder.branch(blocks["done"])
        if k < len(tests):
            builder.position_at_end(tests[k])
    builder.position_at_end(blocks["done"])
    result = builder.phi(x.type)
    for name in SOFTPLUS_INCOMING:
        result.add_incoming(*incoming[name])
    return result


def _formula_function(context, module, name: str, arity: int, body, flags) -> ir.Function:
    """``name``'s function of ``arity`` float64 in ``module``, with numba's calling
    convention, its instructions carrying exactly ``flags`` (one function per flag set),
    defined once."""
    symbol = f"ptnumba_codegen.formula.{name}.float64.{'.'.join(sorted(flags)) or 'strict'}"
    fn = module.globals.get(symbol)
    if fn is not None:
        return fn
    call_conv = context.call_conv
    arg_types = [types.float64] * arity
    fn = ir.Function(module, call_conv.get_function_type(types.float64, arg_types), symbol)
    fn.linkage = "linkonce_odr"  # as numba links a library's functions into its callers
    call_conv.decorate_function(fn, [f"x{k}" for k in range(arity)], arg_types)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    call_conv.return_value(builder, body(context, builder, *call_conv.get_arguments(fn)))
    for block in fn.blocks:
        for instr in block.instructions:
            set_flags(instr, flags)
    return fn


# formula (`formulas`' function) -> (arity, its IR on float64 values: ``body(context,
# builder, *xs) -> value``)
FORMULAS_IN_IR = {
    "_sigmoid": (1, _sigmoid_ir),
    "_softplus": (1, _softplus_ir),
    "_lgamma": (1, _libm_f64(mathimpl.lgamma_impl)),
    "_erf": (1, _libm_f64(mathimpl.erf_impl)),
    "_erfc": (1, _libm_f64(mathimpl.erfc_impl)),
    "_pow": (2, _pow_ir),
}


def formula_call(name: str):
    """An emit function (``emit(context, builder, args, flags) -> [value]``) calling
    ``name``'s function (`_formula_function`) as `rules.call_python` calls the compiled
    subroutine (numba's ``call_internal``)."""
    arity, body = FORMULAS_IN_IR[name]

    def emit(context, builder, args, flags):
        fn = _formula_function(context, builder.module, name, arity, body, tuple(flags))
        status, res = context.call_conv.call_function(builder, fn, types.float64, [types.float64] * arity, args)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return [res]

    return emit


__all__ = ["FORMULAS_IN_IR", "SOFTPLUS_BANDS", "formula_call", "in_ir"]
