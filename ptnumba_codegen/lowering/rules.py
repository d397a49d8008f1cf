"""The lowering table: scalar op class -> rule that emits it.

A rule is planned once in Python (``rule(instr_types) -> Emitter``; typing problems raise
`Unsupported`, which makes the node fall back) and emitted inside the kernel's codegen
(``emitter(context, builder, args) -> values``). Semantics follow the stock numba backend
exactly (same numba typing, same numba emitters), so the ``strict`` policy is bit-for-bit
the stock backend with ``numba__fastmath=False``; only the flags differ.

Three kinds of rules:

* `ufunc` – the numpy ufunc loop numba itself selects (inline IR; flags set by the stamp);
* `nary` – a left-associated chain of a Python operator (Add, Mul);
* `python` – a small Python function (stock's own formula), compiled as a numba
  subroutine with exactly the node's flags, which LLVM then inlines.

Adding an op is one row in `RULES` (or nothing at all if its ``nfunc_spec`` names a numpy
ufunc).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import numba
import numpy as np
from llvmlite import ir
from numba.core import compiler, types
from numba.core.cpu_options import FastMathOptions
from numba.core.registry import cpu_target
from numba.np import ufunc_db
from numba.np.numpy_support import ufunc_find_matching_loop
from pytensor.scalar import basic as ps
from pytensor.scalar import math as psm


class Unsupported(Exception):
    """The generator cannot lower this; the node falls back to the stock implementation."""


Emitter = Callable[..., list]  # (context, builder, args, flags) -> output values


@dataclass(frozen=True)
class Typed:
    """The numba types one instruction is lowered with (and its policy context)."""

    inputs: tuple[types.Type, ...]
    outputs: tuple[types.Type, ...]
    flags: tuple[str, ...] = ()
    klass: str = ""
    policy: object = None  # the Policy; rules with inner programs plan them with it
    op: object = None  # the scalar op itself (rules that read its inner graph)


SUPPORTED_KINDS = "biuf"  # bool, signed, unsigned, float (no complex, no float16)


def numba_type(dtype: str) -> types.Type:
    dt = np.dtype(dtype)
    if dt.kind not in SUPPORTED_KINDS or dt == np.float16:
        raise Unsupported(f"dtype {dtype} is not supported by the generator")
    return numba.from_dtype(dt)


def _typing():
    ctx = cpu_target.typing_context
    ctx.refresh()  # install lazily registered templates (operators, ufuncs)
    return ctx


def _cast(context, builder, val, from_ty, to_ty):
    return context.cast(builder, val, from_ty, to_ty)


# -- rule kinds -------------------------------------------------------------------------


def vector_dtype(t: Typed, names, loop_types, bound: float | None = None) -> str | None:
    """The float dtype to call the libmvec variants of ``names`` in, if the policy allows.

    Allowed when the instruction is outside every comparison cone, its (loop) types are
    one float dtype, every variant exists on this target, and the error bound (the
    variant's measured bound, or ``bound`` for a composite formula) fits the policy's
    ``max_ulp`` for this op (the class budget, or the op override's).
    """
    from ptnumba_codegen.flags import COMPARISON_SENSITIVE
    from ptnumba_codegen.lowering.vector_math import ulp_bound, vector_call_available

    if t.policy is None or t.op is None or t.klass in ("", COMPARISON_SENSITIVE):
        return None
    dtypes = {str(ty) for ty in loop_types}
    if len(dtypes) != 1 or next(iter(dtypes)) not in ("float32", "float64"):
        return None
    dtype = dtypes.pop()
    names = (names,) if isinstance(names, str) else tuple(names)
    if bound is None:
        bounds = [ulp_bound(n, dtype) for n in names]
        if None in bounds:
            return None
        bound = max(bounds)
    budget = t.policy.rule_for(t.klass, type(t.op).__name__).max_ulp
    if budget < bound or not all(vector_call_available(n, dtype) for n in names):
        return None
    return dtype


# Results libm gives as +NaN where the vector variant gives -NaN (f64 log of negatives).
_CANONICAL_NAN = {("log", "float64")}


def _emit_vector(context, builder, name, dtype, args):
    from ptnumba_codegen.lowering.vector_math import vector_call

    res = vector_call(builder, name, args, dtype)
    if (name, dtype) in _CANONICAL_NAN:
        arg_nan = builder.fcmp_unordered("uno", args[0], args[0])
        res_nan = builder.fcmp_unordered("uno", res, res)
        fix = builder.and_(res_nan, builder.not_(arg_nan))
        res = builder.select(fix, ir.Constant(res.type, float("nan")), res)
    return res


def ufunc(np_ufunc, vector: str | None = None) -> Callable[[Typed], Emitter]:
    """Lower through the ufunc loop numba selects for these input types.

    ``vector`` names the libmvec function this ufunc may be lowered to (see vector_dtype).
    """
    table = ufunc_db.get_ufunc_info(np_ufunc)

    def plan(t: Typed) -> Emitter:
        try:
            loop = ufunc_find_matching_loop(np_ufunc, t.inputs)
        except Exception as err:  # numba raises TypingError subclasses and others
            raise Unsupported(f"no numba loop for {np_ufunc.__name__}{t.inputs}: {err}") from None
        if loop is None or loop.ufunc_sig not in table or len(loop.outputs) != 1:
            raise Unsupported(f"no numba loop for {np_ufunc.__name__}{t.inputs}")
        kernel = table[loop.ufunc_sig]
        sig = numba.core.typing.signature(loop.outputs[0], *loop.inputs)
        vdtype = vector and vector_dtype(t, vector, (*loop.inputs, *loop.outputs))

        def emit(context, builder, args, flags):
            cast = [_cast(context, builder, a, f, l) for a, f, l in zip(args, t.inputs, loop.inputs)]
            if vdtype:
                res = _emit_vector(context, builder, vector, vdtype, cast)
            else:
                res = kernel(context, builder, sig, cast)
            return [_cast(context, builder, res, loop.outputs[0], t.outputs[0])]

        emit.label = f"libmvec {vector} ({vdtype})" if vdtype else None
        return emit

    plan.kind = f"ufunc:{np_ufunc.__name__}"
    return plan


def nary(py_operator) -> Callable[[Typed], Emitter]:
    """``x0 op x1 op x2 ...`` associated left to right, typed like numba types Python."""

    def plan(t: Typed) -> Emitter:
        steps, acc = [], t.inputs[0]
        for nxt in t.inputs[1:]:
            try:
                sig = _typing().resolve_function_type(py_operator, (acc, nxt), {})
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

        return emit

    plan.kind = f"nary:{py_operator.__name__}"
    return plan


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


def python(impl, force_strict: Callable[[Typed], bool] | None = None, for_input=None) -> Callable[[Typed], Emitter]:
    """Lower by compiling ``impl`` (a small numba-compilable function) with the node's flags.

    ``for_input`` (optional) builds the function from the first input's numba type instead.
    """

    def plan(t: Typed) -> Emitter:
        strict = force_strict is not None and force_strict(t)
        fn = impl if for_input is None else for_input(str(t.inputs[0]))

        def emit(context, builder, args, flags):
            res, res_ty = call_python(context, builder, fn, t.inputs, args, () if strict else flags)
            return [_cast(context, builder, res, res_ty, t.outputs[0])]

        return emit

    plan.kind = f"python:{getattr(impl, '__name__', 'fn')}"
    return plan


def _simple(name: str, fn: Callable) -> Callable[[Typed], Emitter]:
    """A rule emitting IR directly with ``fn(context, builder, t, args) -> value``."""

    def plan(t: Typed) -> Emitter:
        def emit(context, builder, args, flags):
            return [fn(context, builder, t, args)]

        return emit

    plan.kind = name
    return plan


# -- stock formulas (pytensor.link.numba.dispatch.scalar), compiled with the node's flags --


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x):
    if x < -37.0:
        return np.exp(x)
    elif x < 18.0:
        return np.log1p(np.exp(x))
    elif x < 33.3:
        return x + np.exp(-x)
    else:
        return x


# stock upcasts unsigned inputs before negating them (numpy would use float16 for uint8)
_UINT_UPCAST = {"uint8": np.float32, "uint16": np.float32, "uint32": np.float64, "uint64": np.float64}


@functools.cache
def _sigmoid_uint(dtype: str):
    up = _UINT_UPCAST[dtype]

    def sigmoid_uint(x):
        return 1 / (1 + np.exp(-up(x)))

    return sigmoid_uint


@functools.cache
def _softplus_uint(dtype: str):
    up = _UINT_UPCAST[dtype]

    def softplus_uint(x):
        if x < -37.0:
            return np.exp(x)
        elif x < 18.0:
            return np.log1p(np.exp(x))
        elif x < 33.3:
            y = up(x)
            return y + np.exp(-y)
        else:
            return x

    return softplus_uint


def _log1mexp(x):
    if x < np.log(0.5):
        return np.log1p(-np.exp(x))
    else:
        return np.log(-np.expm1(x))


def _clip(x, min_val, max_val):
    if x < min_val:
        return min_val
    elif x > max_val:
        return max_val
    else:
        return x


def _pow(x, y):
    return x**y


def _reciprocal(x):
    return np.divide(np.float32(1.0), x)


def _lgamma(x):
    return math.lgamma(x)


def _erf(x):
    return math.erf(x)


def _erfc(x):
    return math.erfc(x)


def _around(x):
    return np.around(x)


def _uint_sign(x):
    return x != 0


def _is_uint(t: Typed) -> bool:
    return isinstance(t.inputs[0], types.Integer) and not t.inputs[0].signed


def _int_exponent(t: Typed) -> bool:
    # stock compiles integer powers with fastmath=False (numba issue 9554)
    return isinstance(t.inputs[1], types.Integer | types.Boolean)


def _switch(context, builder, t, args):
    cond = context.is_true(builder, t.inputs[0], args[0])
    x = _cast(context, builder, args[1], t.inputs[1], t.outputs[0])
    y = _cast(context, builder, args[2], t.inputs[2], t.outputs[0])
    return builder.select(cond, x, y)


def _float_minmax(cmp: str, np_ufunc):
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

        return emit

    plan.kind = f"select:{np_ufunc.__name__}"
    return plan


def _cast_rule(context, builder, t, args):
    return _cast(context, builder, args[0], t.inputs[0], t.outputs[0])


def _second(context, builder, t, args):
    return _cast(context, builder, args[1], t.inputs[1], t.outputs[0])


def _pick(plans: dict[str, Callable], choose: Callable[[Typed], str]):
    def plan(t: Typed) -> Emitter:
        return plans[choose(t)](t)

    plan.kind = "/".join(p.kind for p in plans.values())
    return plan


def vector_form(scalar_rule, needs: tuple[str, ...], bound: float | None, formula):
    """Use ``formula(vm, x...)`` on libmvec calls when the policy allows, else ``scalar_rule``.

    ``formula`` builds the result with ``vm`` (a `VectorMath` of the chosen dtype); the
    formulas are branch-free (selects, with safe arguments on the lanes a select drops),
    so a vectorized loop never takes libmvec's slow per-lane fallback for them.
    """

    def plan(t: Typed) -> Emitter:
        # float inputs only: integer inputs keep stock's integer semantics (e.g. -x wraps)
        dtype = vector_dtype(t, needs, [*t.inputs, *t.outputs], bound)
        if dtype is None or len(t.outputs) != 1:
            return scalar_rule(t)
        fty = numba_type(dtype)

        def emit(context, builder, args, flags):
            xs = [_cast(context, builder, a, ty, fty) for a, ty in zip(args, t.inputs)]
            res = formula(VectorMath(context, builder, dtype), *xs)
            return [_cast(context, builder, res, fty, t.outputs[0])]

        emit.label = f"libmvec formula using {', '.join(needs)} ({dtype})"
        return emit

    plan.kind = f"{scalar_rule.kind} | vector formula"
    return plan


class VectorMath:
    """Tiny IR helpers for the vector formulas (flags are set by the stamp)."""

    def __init__(self, context, builder, dtype):
        self.b = builder
        self.dtype = dtype
        self.ty = ir.FloatType() if dtype == "float32" else ir.DoubleType()

    def const(self, v):
        return ir.Constant(self.ty, v)

    def call(self, name, *args):
        return _emit_vector(None, self.b, name, self.dtype, list(args))

    def fabs(self, x):
        fn = self.b.module.declare_intrinsic("llvm.fabs", [self.ty])
        return self.b.call(fn, [x])

    def select(self, c, a, b):
        return self.b.select(c, a, b)


def _sigmoid_formula(m: VectorMath, x):
    b = m.b
    return b.fdiv(m.const(1.0), b.fadd(m.const(1.0), m.call("exp", b.fneg(x))))


def _softplus_formula(m: VectorMath, x):
    # max(x, 0) + log1p(exp(-|x|)): no overflow, no branch; NaN propagates via the log1p term
    b = m.b
    pos = m.select(b.fcmp_ordered(">", x, m.const(0.0)), x, m.const(0.0))
    res = b.fadd(pos, m.call("log1p", m.call("exp", b.fneg(m.fabs(x)))))
    return m.select(b.fcmp_unordered("uno", x, x), x, res)  # stock returns a NaN input as is


def _log1mexp_formula(m: VectorMath, x):
    # stock: x < log(0.5) ? log1p(-exp(x)) : log(-expm1(x)); dropped lanes get -1.0
    b = m.b
    small = b.fcmp_ordered("<", x, m.const(np.log(0.5)))
    xa = m.select(small, x, m.const(-1.0))
    xb = m.select(small, m.const(-1.0), x)
    a = m.call("log1p", b.fneg(m.call("exp", xa)))
    c = m.call("log", b.fneg(m.call("expm1", xb)))
    return m.select(small, a, c)


def _erf_formula(m: VectorMath, x):
    return m.call("erf", x)


def _erfc_formula(m: VectorMath, x):
    return m.call("erfc", x)


def _pow_formula(m: VectorMath, x, y):
    return m.call("pow", x, y)


# Measured error bounds (ulp) of the formulas on top of the variants' own errors
# (tests/test_vector_math.py checks them against mpmath).
FORMULA_ULP = {"sigmoid": 4.0, "softplus": 4.0, "log1mexp": 4.0}


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

RULES: dict[type, Callable[[Typed], Emitter]] = {
    **{op: ufunc(uf, vector=name) for op, (uf, name) in VECTOR_UFUNCS.items()},
    ps.Add: nary(operator.add),
    ps.Mul: nary(operator.mul),
    ps.Switch: _simple("select", _switch),
    ps.Maximum: _float_minmax(">=", np.maximum),
    ps.Minimum: _float_minmax("<=", np.minimum),
    ps.Cast: _simple("cast", _cast_rule),
    ps.Identity: _simple("cast", _cast_rule),
    ps.Second: _simple("cast", _second),
    ps.Clip: python(_clip),
    ps.Pow: _pick(
        {
            "int": python(_pow, force_strict=_int_exponent),
            "float": vector_form(python(_pow), ("pow",), None, _pow_formula),
        },
        lambda t: "int" if _int_exponent(t) else "float",
    ),
    ps.Reciprocal: python(_reciprocal),
    ps.RoundHalfToEven: python(_around),
    ps.Sign: _pick(
        {"uint": python(_uint_sign), "other": ufunc(np.sign)},
        lambda t: "uint" if _is_uint(t) else "other",
    ),
    psm.Sigmoid: _pick(
        {
            "uint": python(None, for_input=_sigmoid_uint),
            "other": vector_form(python(_sigmoid), ("exp",), FORMULA_ULP["sigmoid"], _sigmoid_formula),
        },
        lambda t: "uint" if _is_uint(t) else "other",
    ),
    psm.Softplus: _pick(
        {
            "uint": python(None, for_input=_softplus_uint),
            "other": vector_form(
                python(_softplus), ("exp", "log1p"), FORMULA_ULP["softplus"], _softplus_formula
            ),
        },
        lambda t: "uint" if _is_uint(t) else "other",
    ),
    psm.Log1mexp: vector_form(
        python(_log1mexp), ("exp", "expm1", "log", "log1p"), FORMULA_ULP["log1mexp"], _log1mexp_formula
    ),
    psm.GammaLn: python(_lgamma),
    psm.Erf: vector_form(python(_erf), ("erf",), None, _erf_formula),
    psm.Erfc: vector_form(python(_erfc), ("erfc",), None, _erfc_formula),
}

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

        from ptnumba_codegen.flags import PYTENSOR_FLAGS

        node = op.make_node(*[ScalarType(str(ty))() for ty in t.inputs])
        fast = set(t.flags) >= PYTENSOR_FLAGS
        try:
            with config.change_flags(numba__fastmath=fast):
                fn, key = numba_funcify_and_cache_key(op, node=node)
        except Exception as err:
            raise Unsupported(f"stock lowering of {type(op).__name__} failed: {err}") from None
        if getattr(fn, "__wrapped__", None) is None and not hasattr(fn, "py_func"):
            raise Unsupported(f"stock lowering of {type(op).__name__} is not a numba function")
        out_ty = numba_type(node.outputs[0].type.dtype)

        def emit(context, builder, args, flags):
            typingctx = context.typing_context
            fnty = typingctx.resolve_value_type(fn)
            arg_types = tuple(numba_type(i.type.dtype) for i in node.inputs)
            sig = fnty.get_call_type(typingctx, arg_types, {})
            cast = [_cast(context, builder, a, f, w) for a, f, w in zip(args, t.inputs, arg_types)]
            res = context.get_function(fnty, sig)(builder, cast)
            return [_cast(context, builder, res, sig.return_type, t.outputs[0])]

        emit.stock_key = (key, fast)
        return emit

    plan.kind = "stock"
    return plan


def find_rule(op) -> Callable[[Typed], Emitter]:
    """The rule for ``op``: a RULES row (by class MRO), its numpy ``nfunc_spec`` ufunc, or
    a call of the stock backend's function for it."""
    for cls in type(op).__mro__:
        if cls in RULES:
            return RULES[cls]
    spec = getattr(op, "nfunc_spec", None)
    if spec and "." not in spec[0]:
        np_func = getattr(np, spec[0], None)
        if isinstance(np_func, np.ufunc) and np_func in ufunc_db.get_ufuncs():
            return ufunc(np_func)
    return stock_call(op)


def plan_instr(op, in_dtypes, out_dtypes, *, flags=(), klass="", policy=None) -> Emitter:
    """Plan one instruction; raises Unsupported with a readable reason."""
    t = Typed(
        tuple(map(numba_type, in_dtypes)),
        tuple(map(numba_type, out_dtypes)),
        tuple(flags),
        klass,
        policy,
        op,
    )
    rule = find_rule(op)
    if len(out_dtypes) != 1 and not getattr(rule, "multi_output", False):
        raise Unsupported(f"{type(op).__name__} has {len(out_dtypes)} outputs")
    return rule(t)


def rule_kind(op) -> str:
    return find_rule(op).kind
