"""The lowering table: scalar op class -> rule that emits it.

A rule is planned once in Python (``rule(instr_types) -> Emitter``; typing problems raise
`Unsupported`, which makes the node fall back) and emitted inside the kernel's codegen
(``emitter(context, builder, args) -> values``). Semantics follow the stock numba backend
exactly (same numba typing, same numba emitters), so the ``strict`` policy is bit-for-bit
the stock backend with ``numba__fastmath=False``; only the flags differ.

Rule kinds:

* `ufunc` – the numpy ufunc loop numba itself selects (inline IR; flags set by the stamp),
  or its libmvec variant when the policy allows (see ``vecmath.libmvec``);
* `nary` – a left-associated chain of a Python operator (Add, Mul);
* `python` – a small Python function (stock's own formula, ``formulas``), compiled as a
  numba subroutine with exactly the node's flags, which LLVM then inlines;
* `vector_form` – a branch-free formula on libmvec calls, when the policy allows;
* `cython` – scipy's cython function of a ``scipy.special`` op (the one the stock backend
  calls, with its casts), called by a symbol bound in the process (``cython_calls``);
* `stock_call` – the stock backend's own numba function for that op, called from our loop.

Adding an op is one row in `RULES` (or nothing at all if its ``nfunc_spec`` names a numpy
ufunc).
"""

from __future__ import annotations

import functools
import operator
import dataclasses
from collections.abc import Callable

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, compiler, types
from numba.core.cpu_options import FastMathOptions
from numba.np import npyfuncs, ufunc_db
from numba.np.math import mathimpl
from numba.np.numpy_support import ufunc_find_matching_loop
from pytensor.scalar import basic as ps
from pytensor.scalar import math as psm
from pytensor.scalar.loop import ScalarLoop

from ptnumba_codegen.flags import LIBM_BITS_KEPT_UNDER, PYTENSOR_FLAGS
from ptnumba_codegen.lowering.base import BodyLowering, Emitter, Rule, Typed, Unsupported, numba_type, typing_context
from ptnumba_codegen.lowering.base import cast as _cast
from ptnumba_codegen.lowering.cython_calls import cython_function, plan_cython_call
from ptnumba_codegen.lowering import formula_ir
from ptnumba_codegen.lowering.formula_ir import formula_call
from ptnumba_codegen.lowering.scalar_loop import plan_scalar_loop
from ptnumba_codegen.lowering.stamp import stamp
from ptnumba_codegen.tables import mro_lookup
from ptnumba_codegen.lowering.formulas import (
    _floor_divide_float,
    _around,
    _clip,
    _erf,
    _erfc,
    _lgamma,
    _log1mexp,
    _pow,
    _round_half_away_from_zero,
    _sigmoid,
    _sigmoid_uint,
    _softplus,
    _softplus_uint,
    _uint_sign,
)
from ptnumba_codegen.analysis.class_rules import FOLDED_EXP, QuotientRule, describe_bands
from ptnumba_codegen.lowering.vecmath.class_calls import class_call, quotient_call
from ptnumba_codegen.lowering.vecmath.exact_lanes import available as exact_available
from ptnumba_codegen.lowering.vecmath.isa import mark_pure
from ptnumba_codegen.lowering.vecmath.lane_calls import LIBM, lane_call, lane_dtype, stock_formula
from ptnumba_codegen.lowering.vecmath.libmvec import (
    FORMULA_ULP,
    erf_formula,
    digamma_formula,
    erfc_formula,
    lgamma_formula,
    log1mexp_formula,
    pow_formula,
    sigmoid_formula,
    softplus_formula,
    trigamma_formula,
    emit_vector,
    is_constant,
    vector_dtype,
    vector_form,
)


# -- rule kinds -------------------------------------------------------------------------

# numba loops that declare an LLVM intrinsic under its bare name (``llvm.log2``, no type
# suffix). numba compiles each function in its own module, but one kernel of ours is one
# module: log2 on float32 and on float64 in the same kernel then share the first
# declaration and the second call fails (``Type of #1 arg mismatch: double != float``).
# The same intrinsic declared through ``declare_intrinsic`` gets its mangled name
# (``llvm.log2.f32``, ``llvm.log2.f64``): same instruction, one declaration per type.
BARE_INTRINSIC_LOOPS: dict = {
    npyfuncs.np_real_log2_impl: "llvm.log2",
    npyfuncs.np_real_exp2_impl: "llvm.exp2",
}


def _mangled(kernel):
    name = BARE_INTRINSIC_LOOPS.get(kernel)
    if name is None:
        return kernel
    return lambda context, builder, sig, args: mathimpl.call_fp_intrinsic(builder, name, args)



def graph_loop_types(np_ufunc, t: Typed) -> tuple | None:
    """The input types of the loop the graph's dtypes ask for: a float or integer result
    is computed in its own dtype (PyTensor's rule: ``Elemwise.prepare_node`` passes numpy
    ``sig=`` so), a boolean one in the dtype numpy resolves for the inputs (a comparison
    of int32 and float32 compares in float64). None: the inputs already are those types."""
    out = t.outputs[0]
    if isinstance(out, types.Boolean):
        try:
            dtypes = np_ufunc.resolve_dtypes((*(np.dtype(str(i)) for i in t.inputs), None))
        except (TypeError, ValueError):  # no numpy loop: keep numba's choice
            return None
        wanted = tuple(numba.from_dtype(d) for d in dtypes[: len(t.inputs)])
    else:
        wanted = (out,) * len(t.inputs)
    return None if wanted == tuple(t.inputs) else wanted


def _find_loop(np_ufunc, t: Typed):
    """numba's loop for the graph's dtypes (graph_loop_types), else numba's own choice
    (which for int32 and float32 picks float32: stock numba's results then do not follow
    the graph's dtypes; docs/divergences.md)."""
    wanted = graph_loop_types(np_ufunc, t)
    if wanted is not None:
        try:
            loop = ufunc_find_matching_loop(np_ufunc, wanted)
        except Exception:
            loop = None
        if loop is not None and tuple(loop.inputs) == wanted:
            return loop
    try:
        return ufunc_find_matching_loop(np_ufunc, t.inputs)
    except Exception as err:  # numba raises TypingError subclasses and others
        raise Unsupported(f"no numba loop for {np_ufunc.__name__}{t.inputs}: {err}") from None


def ufunc(np_ufunc, vector: str | None = None) -> Rule:
    """Lower through numba's loop of this ufunc for the graph's dtypes (``_find_loop``).

    ``vector`` names the libmvec function this ufunc may be lowered to (see vector_dtype).
    """
    table = ufunc_db.get_ufunc_info(np_ufunc)

    def plan(t: Typed) -> Emitter:
        loop = _find_loop(np_ufunc, t)
        if loop is None or loop.ufunc_sig not in table or len(loop.outputs) != 1:
            raise Unsupported(f"no numba loop for {np_ufunc.__name__}{t.inputs}")
        kernel = _mangled(table[loop.ufunc_sig])
        sig = numba.core.typing.signature(loop.outputs[0], *loop.inputs)
        vdtype = vector and vector_dtype(t, vector, (*loop.inputs, *loop.outputs))
        ldtype = vector and lane_dtype(vector, (*loop.inputs, *loop.outputs))
        if ldtype and exact_available(LIBM[vector][ldtype == "float64"], ldtype) and set(t.flags) <= LIBM_BITS_KEPT_UNDER:
            vdtype = None  # libm's bits as vector code: the element's value in every kernel, cone or not
        elif vdtype or t.flags:
            ldtype = None

        def emit_with(lanes, vectors=True):
            def emit(context, builder, args, flags):
                cast = [_cast(context, builder, a, f, l) for a, f, l in zip(args, t.inputs, loop.inputs)]
                if vdtype and vectors:
                    res = emit_vector(context, builder, vector, vdtype, cast)
                elif lanes:
                    res = lane_call(builder, vector, cast[0], ldtype)
                else:
                    res = kernel(context, builder, sig, cast)
                return [_cast(context, builder, res, loop.outputs[0], t.outputs[0])]

            return emit

        return Emitter(
            emit_with(bool(ldtype)),
            label=f"libmvec {vector} ({vdtype})" if vdtype else f"libm lanes {vector} ({ldtype})" if ldtype else None,
            without_lanes=Emitter(emit_with(False)) if ldtype else None,
            pays_alone=bool(ldtype) and exact_available(LIBM[vector][ldtype == "float64"], ldtype),
            scalar_form=Emitter(emit_with(False, vectors=False)) if vdtype else None,  # numba's loop: scalar libm
        )

    return Rule(plan, f"ufunc:{np_ufunc.__name__}")


@functools.lru_cache(maxsize=4096)
def _resolve_operator(py_operator, left: types.Type, right: types.Type):
    """numba's signature of ``py_operator(left, right)`` (or None); resolved once per process
    and types (resolving is slow, and a model plans the same few additions many times)."""
    return typing_context().resolve_function_type(py_operator, (left, right), {})


def nary(py_operator) -> Rule:
    """``x0 op x1 op x2 ...`` associated left to right, typed like numba types Python."""

    def plan(t: Typed) -> Emitter:
        steps, acc = [], t.inputs[0]
        for nxt in t.inputs[1:]:
            try:
                sig = _resolve_operator(py_operator, acc, nxt)
            except Exception as err:
                raise Unsupported(f"cannot type {py_operator.__name__}{(acc, nxt)}: {err}") from None
            if sig is None:
                raise Unsupported(f"cannot type {py_operator.__name__}{(acc, nxt)}")
            steps.append((acc, nxt, sig))
            acc = sig.return_type

        def emit(context, builder, args, flags):
            val = args[0]
            for (left, right, sig), arg in zip(steps, args[1:]):
                impl = context.get_function(py_operator, sig)
                val = impl(
                    builder,
                    [_cast(context, builder, val, left, sig.args[0]), _cast(context, builder, arg, right, sig.args[1])],
                )
            return [_cast(context, builder, val, acc, t.outputs[0])]

        return Emitter(emit)

    return Rule(plan, f"nary:{py_operator.__name__}")


_SUBROUTINES: dict = {}


def call_python(context, builder, impl, arg_types, args, flags, error_model="numpy"):
    """Compile ``impl`` as a numba subroutine with exactly ``flags`` and call it.

    numba's fastmath pass gives every float instruction of the subroutine these flags (and
    none when ``flags`` is empty); the kernel itself is compiled with fastmath=False, and
    LLVM inlines the subroutine into the loop.
    """
    key = (impl, tuple(arg_types), tuple(flags), error_model, id(context.codegen()))
    cres = _SUBROUTINES.get(key)
    if cres is None:
        cflags = compiler.Flags()
        cflags.fastmath = FastMathOptions(set(flags)) if flags else FastMathOptions(False)
        cflags.error_model = error_model
        cflags.nrt = True
        sig = numba.core.typing.Signature(None, tuple(arg_types), None)
        cres = context._compile_subroutine_no_cache(builder, impl, sig, flags=cflags)
        _SUBROUTINES[key] = cres
    context.active_code_library.add_linking_library(cres.library)
    return context.call_internal(builder, cres.fndesc, cres.signature, args), cres.signature.return_type


def python(impl, force_strict: Callable[[Typed], bool] | None = None, for_input=None) -> Rule:
    """Lower by compiling ``impl`` (a small numba-compilable function) with the node's flags.

    ``for_input`` (optional) builds the function from the first input's numba type instead.
    """

    def plan(t: Typed) -> Emitter:
        strict = force_strict is not None and force_strict(t)
        fn = impl if for_input is None else for_input(str(t.inputs[0]))

        def emit(context, builder, args, flags):
            res, res_ty = call_python(context, builder, fn, t.inputs, args, () if strict else flags)
            return [_cast(context, builder, res, res_ty, t.outputs[0])]

        return Emitter(emit)

    return Rule(plan, f"python:{impl.__name__ if impl is not None else 'fn'}")


def _simple(name: str, fn: Callable) -> Rule:
    """A rule emitting IR directly with ``fn(context, builder, t, args) -> value``."""

    def plan(t: Typed) -> Emitter:
        def emit(context, builder, args, flags):
            return [fn(context, builder, t, args)]

        return Emitter(emit)

    return Rule(plan, name)


def _is_uint(t: Typed) -> bool:
    return isinstance(t.inputs[0], types.Integer) and not t.inputs[0].signed


def _int_exponent(t: Typed) -> bool:
    # stock compiles integer powers with fastmath=False (numba#9554)
    return isinstance(t.inputs[1], types.Integer | types.Boolean)


# Integer powers written as IR: numba's ``int_power`` (``numba.cpython.numbers``), the
# function stock's ``x ** n`` compiles (strict: numba#9554), as a loop of the same
# multiplications, without a numba compile of it per process.
# Only where its value is fixed by those multiplications alone: a float64 base (numba
# computes in the result's type) and an exponent of at most 16 bits, so that ``|n|`` never
# passes numba's 65536 cutoff (beyond it numba calls ``pow``) and its negation never
# overflows; other exponents keep the compiled ``_pow``. Strict: IEEE multiplications
# in numba's order give numba's bits in any form LLVM optimizes them to.
INT_POWER_EXPONENT_BITS = 16


def _int_power_in_ir(t: Typed) -> bool:
    exponent = t.inputs[1]
    return (
        t.inputs[0] == types.float64
        and t.outputs[0] == types.float64
        and isinstance(exponent, types.Integer)
        and exponent.bitwidth <= INT_POWER_EXPONENT_BITS
    )


def _int_power(context, builder, t, args):
    """``int_power(a, b)``: ``r = 1; e = |b|; while e: if e & 1: r *= a; e >>= 1; a *= a``,
    then ``1 / r`` for a negative ``b``, raising numba's ``ZeroDivisionError`` where ``r`` is
    zero (as stock's does: ``0.0 ** -1`` and underflows); every float operation without flags."""
    base, exponent = args
    i64 = ir.IntType(64)
    f64 = base.type
    with stamp(builder, ()):  # strict, whatever the class's flags (claims them from the rule's stamp)
        signed = t.inputs[1].signed
        wide = builder.sext(exponent, i64) if signed else builder.zext(exponent, i64)
        negative = builder.icmp_signed("<", wide, ir.Constant(i64, 0)) if signed else ir.Constant(ir.IntType(1), 0)
        start = builder.select(negative, builder.sub(ir.Constant(i64, 0), wide), wide)
        entry = builder.block
        header = builder.append_basic_block("int_power.loop")
        body = builder.append_basic_block("int_power.body")
        done = builder.append_basic_block("int_power.done")
        builder.branch(header)
        builder.position_at_end(header)
        r = builder.phi(f64)
        a = builder.phi(f64)
        e = builder.phi(i64)
        builder.cbranch(builder.icmp_unsigned("!=", e, ir.Constant(i64, 0)), body, done)
        builder.position_at_end(body)
        odd = builder.icmp_unsigned("!=", builder.and_(e, ir.Constant(i64, 1)), ir.Constant(i64, 0))
        r_next = builder.select(odd, builder.fmul(r, a), r)
        a_next = builder.fmul(a, a)
        e_next = builder.lshr(e, ir.Constant(i64, 1))
        builder.branch(header)
        r.add_incoming(ir.Constant(f64, 1.0), entry)
        r.add_incoming(r_next, body)
        a.add_incoming(base, entry)
        a.add_incoming(a_next, body)
        e.add_incoming(start, entry)
        e.add_incoming(e_next, body)
        builder.position_at_end(done)
        # ``1.0 / r`` as numba's int_power divides (Python's error model): 0 ** -n raises
        with builder.if_then(negative, likely=False), cgutils.if_zero(builder, r):
            context.call_conv.return_user_exc(builder, ZeroDivisionError, ("division by zero",))
        return builder.select(negative, builder.fdiv(ir.Constant(f64, 1.0), r), r)


def _compiled_or_in_ir(impl) -> Rule:
    """``impl`` compiled as a subroutine (`python`), or, for float64, its IR
    (`formula_ir.FORMULAS_IN_IR`) in a function called as the subroutine would be."""
    emit = formula_call(impl.__name__)

    def plan(t: Typed) -> Emitter:
        return Emitter(emit) if formula_ir.in_ir(t) else python(impl)(t)

    return Rule(plan, f"ir/python:{impl.__name__}")


def _narrower_float(ty, out) -> bool:
    """A float type other than the float output's (float32 against float64)."""
    return isinstance(ty, types.Float) and isinstance(out, types.Float) and ty != out


def _switch(context, builder, t, args):
    cond = context.is_true(builder, t.inputs[0], args[0])
    x = _cast(context, builder, args[1], t.inputs[1], t.outputs[0])
    y = _cast(context, builder, args[2], t.inputs[2], t.outputs[0])
    return builder.select(cond, x, y)


def _float_minmax(cmp: str, np_ufunc) -> Rule:
    """maximum/minimum with numpy's semantics (the first NaN wins, ties keep the first
    argument) in one select: ``(a cmp b) or isnan(a) ? a : b`` -- the same result as
    numba's three-select emitter for every input, bit for bit, in fewer instructions."""
    fallback = ufunc(np_ufunc)

    def plan(t: Typed) -> Emitter:
        in_ty = {str(ty) for ty in (*t.inputs, *t.outputs)}
        if len(in_ty) != 1 or in_ty.pop() not in ("float32", "float64"):
            return fallback(t)

        def emit(context, builder, args, flags):
            a, b = args
            take_a = builder.or_(builder.fcmp_ordered(cmp, a, b), builder.fcmp_unordered("uno", a, a))
            return [builder.select(take_a, a, b)]

        return Emitter(emit)

    return Rule(plan, f"select:{np_ufunc.__name__}")


def _reciprocal(context, builder, t, args):
    """``1 / x`` in the output's dtype, as the graph types it (the C backend and the py
    linker do the same). Stock numba divides ``np.float32(1.0) / x``, which numba types
    as float32 for int32/int64 inputs: ``reciprocal(int32 -3)`` came out float32-rounded
    in a float64 output. For float inputs the two are the same instruction."""
    out = t.outputs[0]
    x = _cast(context, builder, args[0], t.inputs[0], out)
    return builder.fdiv(ir.Constant(x.type, 1.0), x)


def _cast_rule(context, builder, t, args):
    return _cast(context, builder, args[0], t.inputs[0], t.outputs[0])


def _second(context, builder, t, args):
    return _cast(context, builder, args[1], t.inputs[1], t.outputs[0])


def in_output_dtype(rule: Rule, applies: Callable[[Typed], bool] | None = None) -> Rule:
    """Compute a float result in its own dtype: other inputs are cast to it first.

    PyTensor's rule (``Elemwise.prepare_node`` gives numpy ``sig=`` so; the py linker
    follows it). Stock numba types the formula on the input types instead:
    ``sigmoid(int32 -2**31)`` negates in int32 (1.0, not 0.0), ``uint64 * int64`` multiplies
    in int64, ``uint64 ** int64`` raises -1 to a power (docs/divergences.md).
    ``applies(t)`` (default: some input is not of the output's float type) narrows it."""

    def default(t: Typed) -> bool:
        return any(i != t.outputs[0] for i in t.inputs)

    applies = applies or default

    def plan(t: Typed) -> Emitter:
        out = t.outputs[0]
        if not isinstance(out, types.Float) or len(t.outputs) != 1 or not applies(t):
            return rule(t)
        inner = rule(dataclasses.replace(t, inputs=(out,) * len(t.inputs)))

        def cast_first(emit_inner):
            def emit(context, builder, args, flags):
                cast = [_cast(context, builder, a, f, out) for a, f in zip(args, t.inputs, strict=True)]
                return emit_inner(context, builder, cast, flags)

            return emit

        return inner.wrapped(cast_first)  # every fact kept (scalar_form, without_lanes, ...)

    return dataclasses.replace(rule, plan=plan)


def _float_result(t: Typed) -> str:
    return "float" if isinstance(t.outputs[0], types.Float) else "other"


def _stock_plan(t: Typed) -> Emitter:
    """The stock backend's function for the instruction's op (see `stock_call`)."""
    return stock_call(t.op)(t)


_stock = Rule(_stock_plan, "stock")


def _cython_plan(t: Typed) -> Emitter:
    """scipy's cython function for the instruction's op (see `cython_call`)."""
    return cython_call(t.op)(t)


_cython = Rule(_cython_plan, "cython")


def _lanes(name: str) -> Callable[[Typed], Emitter | None]:
    """Stock's formula ``name`` on lane calls (`lane_calls.STOCK_FORMULAS`), where it applies."""
    return lambda t: stock_formula(name, t)


def _pick(plans: dict[str, Rule], choose: Callable[[Typed], str]) -> Rule:
    def plan(t: Typed) -> Emitter:
        return plans[choose(t)](t)

    return Rule(plan, "/".join(p.kind for p in plans.values()))


# -- the table ----------------------------------------------------------------------------

# ufuncs that have a libmvec variant (the policy decides per instruction whether to use it)
VECTOR_UFUNCS: dict[type, tuple[np.ufunc, str]] = {
    ps.Exp: (np.exp, "exp"),
    ps.Log: (np.log, "log"),
    ps.Log1p: (np.log1p, "log1p"),
    ps.Expm1: (np.expm1, "expm1"),
    ps.Tanh: (np.tanh, "tanh"),
    ps.Sin: (np.sin, "sin"),
    ps.Cos: (np.cos, "cos"),
}

RULES: dict[type, Rule] = {
    **{op: ufunc(uf, vector=name) for op, (uf, name) in VECTOR_UFUNCS.items()},
    ps.Add: in_output_dtype(nary(operator.add)),
    ps.Mul: in_output_dtype(nary(operator.mul)),
    ps.Switch: _simple("select", _switch),
    ps.Maximum: _float_minmax(">=", np.maximum),
    ps.Minimum: _float_minmax("<=", np.minimum),
    ps.Cast: _simple("cast", _cast_rule),
    ps.Identity: _simple("cast", _cast_rule),
    ps.Second: _simple("cast", _second),
    ps.Clip: in_output_dtype(python(_clip)),
    ps.Pow: in_output_dtype(
        _pick(
            {
                "int": python(_pow, force_strict=_int_exponent),
                "int_in_ir": _simple("int_power", _int_power),
                "float": vector_form(_compiled_or_in_ir(_pow), ("pow",), None, pow_formula, exact=_lanes("pow")),
            },
            lambda t: ("int_in_ir" if _int_power_in_ir(t) else "int") if _int_exponent(t) else "float",
        ),
        # a float base of the output's dtype keeps stock's integer power for an integer
        # exponent (x**3 is x*x*x); an integer or narrower base is cast, and so is a
        # narrower float exponent (numba converts it to the base's dtype before llvm.pow
        # too: x ** float32(-0.5) is pow(x, -0.5)), so that pow's lanes take it
        applies=lambda t: t.inputs[0] != t.outputs[0] or _narrower_float(t.inputs[1], t.outputs[0]),
    ),
    ps.IntDiv: in_output_dtype(
        _pick({"float": python(None, for_input=_floor_divide_float), "other": ufunc(np.floor_divide)}, _float_result)
    ),
    ps.Mod: in_output_dtype(ufunc(np.remainder)),
    ps.Reciprocal: _simple("fdiv", _reciprocal),
    ps.RoundHalfToEven: python(_around),
    ps.RoundHalfAwayFromZero: python(_round_half_away_from_zero),
    ps.Sign: _pick(
        {"uint": python(_uint_sign), "other": ufunc(np.sign)},
        lambda t: "uint" if _is_uint(t) else "other",
    ),
    psm.Sigmoid: in_output_dtype(
        _pick(
            {
                "uint": python(None, for_input=_sigmoid_uint),
                "other": vector_form(
                    _compiled_or_in_ir(_sigmoid), ("exp",), FORMULA_ULP["sigmoid"], sigmoid_formula, exact=_lanes("sigmoid")
                ),
            },
            lambda t: "uint" if _is_uint(t) else "other",
        )
    ),
    psm.Softplus: in_output_dtype(
        _pick(
            {
                "uint": python(None, for_input=_softplus_uint),
                "other": vector_form(
                    _compiled_or_in_ir(_softplus), ("exp", "log1p"), FORMULA_ULP["softplus"], softplus_formula, exact=_lanes("softplus")
                ),
            },
            lambda t: "uint" if _is_uint(t) else "other",
        )
    ),
    psm.Log1mexp: in_output_dtype(
        vector_form(python(_log1mexp), ("exp", "expm1", "log", "log1p"), FORMULA_ULP["log1mexp"], log1mexp_formula)
    ),
    psm.GammaLn: vector_form(_compiled_or_in_ir(_lgamma), ("lgamma",), None, lgamma_formula, int_inputs=True),
    psm.Psi: vector_form(_cython, ("digamma",), None, digamma_formula, int_inputs=True),
    psm.TriGamma: vector_form(_cython, ("trigamma",), None, trigamma_formula, int_inputs=True),
    psm.Erf: vector_form(_compiled_or_in_ir(_erf), ("erf",), None, erf_formula, exact=_lanes("erf")),
    psm.Erfc: vector_form(_compiled_or_in_ir(_erfc), ("erfc",), None, erfc_formula, exact=_lanes("erfc")),
    # emitted inline, its inner graph planned like a kernel body by the planner in the
    # rule's context (`Typed.bodies`)
    ScalarLoop: Rule(plan_scalar_loop, "scalar_loop", multi_output=True),
}

def _opaque(builder: ir.IRBuilder, value):
    """``value`` moved through an empty inline ``asm``: the same bits, which LLVM can no
    longer fold (no side effects and no memory: LLVM hoists it out of the loop)."""
    if isinstance(value.type, ir.DoubleType | ir.FloatType):
        ity = ir.IntType(64 if isinstance(value.type, ir.DoubleType) else 32)
        moved = builder.asm(ir.FunctionType(ity, [ity]), "", "=r,0", [builder.bitcast(value, ity)], False, "libm_operand")
        mark_pure(moved)
        return builder.bitcast(moved, value.type)
    moved = builder.asm(ir.FunctionType(value.type, [value.type]), "", "=r,0", [value], False, "libm_operand")
    mark_pure(moved)
    return moved


def libm_operands(rule: Rule) -> Rule:
    """``rule`` with every constant operand of a strict instruction moved through `_opaque`
    first: libm gets it as a value, as the reference passes it from an array, and LLVM
    cannot rewrite the call (``pow(x, 2.0)`` to ``x * x``; `as_written.libm_operands`).
    An instruction with flags keeps them and its constants (LLVM may rewrite it: whatever
    let it have flags covers every implementation); an integer exponent keeps numba's
    integer power, the same multiplications folded or not."""

    def plan(t: Typed) -> Emitter:
        emitter = rule(t)
        if t.flags or _int_exponent(t):
            return emitter

        def hide(emit):
            def emit_hidden(context, builder, args, flags):
                return emit(context, builder, [_opaque(builder, a) if is_constant(a) else a for a in args], flags)

            return emit_hidden

        return emitter.wrapped(hide)

    return dataclasses.replace(rule, plan=plan, kind=f"{rule.kind} (libm operands)")


def register(op_class: type, rule: Rule) -> None:
    """``op_class``'s row of `RULES`, from the layer that defines the op (the as-written
    pow: `as_written.libm_operands`): the lowering never imports the layers above it."""
    RULES[op_class] = rule


def stock_call(op):
    """Call the stock backend's own numba function for this scalar op from the kernel.

    For ops without a row in RULES (scipy.special functions, ...): the loop and every
    other instruction stay ours; this one call is compiled by the stock funcify with
    fastmath on only if the instruction's flags include PyTensor's whole set.
    """

    def plan(t: Typed) -> Emitter:
        from pytensor import config
        from pytensor.link.numba.dispatch.basic import numba_funcify_and_cache_key
        from pytensor.scalar.basic import ScalarType

        node = op.make_node(*[ScalarType(str(ty))() for ty in t.inputs])
        fast = set(t.flags) >= PYTENSOR_FLAGS
        try:
            with config.change_flags(numba__fastmath=fast):
                fn, key = numba_funcify_and_cache_key(op, node=node)
        except Exception as err:
            raise Unsupported(f"stock lowering of {type(op).__name__} failed: {err}") from None
        if getattr(fn, "__wrapped__", None) is None and not hasattr(fn, "py_func"):
            raise Unsupported(f"stock lowering of {type(op).__name__} is not a numba function")

        def emit(context, builder, args, flags):
            typingctx = context.typing_context
            fnty = typingctx.resolve_value_type(fn)
            arg_types = tuple(numba_type(i.type.dtype) for i in node.inputs)
            sig = fnty.get_call_type(typingctx, arg_types, {})
            vals = [_cast(context, builder, a, f, w) for a, f, w in zip(args, t.inputs, arg_types)]
            for i, arg_type in enumerate(sig.args):  # a ``*args`` function takes one tuple
                if isinstance(arg_type, types.StarArgTuple | types.StarArgUniTuple):
                    vals[i:] = [context.make_tuple(builder, arg_type, vals[i:])]
                    break
            res = context.get_function(fnty, sig)(builder, vals)
            return [_cast(context, builder, res, sig.return_type, t.outputs[0])]

        return Emitter(emit, stock_key=(key, fast))

    return Rule(plan, "stock")


def cython_call(op):
    """Call scipy's cython function for this ``scipy.special`` op by symbol, with the stock
    backend's casts (`cython_calls`): the stock function's bits without its object-mode
    address lookup. The stock call (`stock_call`) where scipy has no cython function for
    the op or for the instruction's dtypes."""
    func = cython_function(op)

    def plan(t: Typed) -> Emitter:
        if func is None:
            return stock_call(op)(t)
        from pytensor.scalar.basic import ScalarType

        # the C function PyTensor picks for the node stock compiles (its output dtype is the
        # op's, which the instruction's may differ from: the result is cast, as stock's is)
        node = op.make_node(*[ScalarType(str(ty))() for ty in t.inputs])
        try:
            emit, (module_name, capi_name) = plan_cython_call(t, func, node.outputs[0].type.dtype)
        except Unsupported:
            return stock_call(op)(t)
        # A stock key like the stock call's: every decision that reads it (the loop kept
        # scalar, never split across threads, lanes dropped, the kernel's cache key) is the
        # one the stock call made; only the call is direct.
        return Emitter(emit, stock_key=(f"cython:{module_name}.{capi_name}", False))

    return Rule(plan, "cython")


def find_rule(op) -> Rule:
    """The rule for ``op``: a RULES row (by class MRO), its numpy ``nfunc_spec`` ufunc,
    scipy's cython function of a ``scipy.special`` op, or a call of the stock backend's
    function for it."""
    rule = mro_lookup(RULES, op)
    if rule is not None:
        return rule
    spec = getattr(op, "nfunc_spec", None)
    if spec and "." not in spec[0]:
        np_func = getattr(np, spec[0], None)
        if isinstance(np_func, np.ufunc) and np_func in ufunc_db.get_ufuncs():
            return ufunc(np_func)
    if cython_function(op) is not None:
        return cython_call(op)
    return stock_call(op)


def plan_instr(op, in_dtypes, out_dtypes, *, flags=(), klass="", policy=None, bodies: BodyLowering | None = None) -> Emitter:
    """Plan one instruction; raises Unsupported with a readable reason. ``bodies``: how an
    inner program is lowered (the body planner planning this instruction)."""
    t = Typed(
        tuple(map(numba_type, in_dtypes)),
        tuple(map(numba_type, out_dtypes)),
        tuple(flags),
        klass,
        policy,
        op,
        bodies,
    )
    rule = find_rule(op)
    if len(out_dtypes) != 1 and not (isinstance(rule, Rule) and rule.multi_output):
        raise Unsupported(f"{type(op).__name__} has {len(out_dtypes)} outputs")
    emitter = rule(t)
    # a row given as a plain function returning a plain emit function (a rule injected by a
    # test) is an emitter without facts
    return emitter if isinstance(emitter, Emitter) else Emitter(emitter)


def rule_kind(op) -> str:
    return find_rule(op).kind


def plan_by_class(row, bands, in_dtypes, out_dtypes) -> Emitter:
    """The emitter of a pow computed by class (`analysis.class_rules`, `vecmath.class_calls`):
    a float base of the row's dtype, the constant exponent cast to it (exact: every row's
    exponent, -1, -0.5, -2, is exact in every float type) and moved to libm through `_opaque` as `libm_operands`
    moves it."""
    if row == FOLDED_EXP:
        return _plan_folded_exp(in_dtypes, out_dtypes)
    if isinstance(row, QuotientRule):
        return _plan_quotient_by_class(row, bands, in_dtypes, out_dtypes)
    t = Typed(tuple(map(numba_type, in_dtypes)), tuple(map(numba_type, out_dtypes)))
    fty = numba_type(row.dtype)
    if t.inputs[0] != fty or t.outputs[0] != fty or not isinstance(t.inputs[1], types.Float):
        raise Unsupported(f"class pow of {in_dtypes} -> {out_dtypes}")

    def emit(context, builder, args, flags):
        y = _cast(context, builder, args[1], t.inputs[1], fty)
        return [class_call(builder, row, bands, args[0], _opaque(builder, y))]

    label = f"class pow ({row.formula}; libm pow where |x| in {describe_bands(bands)})"
    return Emitter(emit, label=label, pays_alone=True)


def _plan_folded_exp(in_dtypes, out_dtypes) -> Emitter:
    """An exp folded into the quotient computed by class that reads it
    (`analysis.class_rules.QuotientRule`): it passes x on, the quotient calls exp itself."""
    if list(in_dtypes) != list(out_dtypes):
        raise Unsupported(f"folded exp of {in_dtypes} -> {out_dtypes}")
    return Emitter(lambda context, builder, args, flags: [args[0]])


def _plan_quotient_by_class(row, safe, in_dtypes, out_dtypes) -> Emitter:
    """``a / exp(x)`` computed by class (`analysis.class_rules.QuotientRule`,
    `vecmath.class_calls.quotient_call`); its divisor operand is the folded exp's x."""
    if {*in_dtypes, *out_dtypes} != {row.dtype}:
        raise Unsupported(f"class quotient of {in_dtypes} -> {out_dtypes}")

    def emit(context, builder, args, flags):
        return [quotient_call(builder, row, safe, args[0], args[1])]

    where = " or ".join(f"({lo:g}, {hi:g})" for lo, hi in safe) or "nowhere"
    label = f"class quotient (a / exp(x): copysign(1, a) where E(a) - x log2(e) in {where}; as written elsewhere)"
    return Emitter(emit, label=label, pays_alone=True)
