"""The vector math tier: scalar calls that LLVM's loop vectorizer turns into glibc libmvec
calls (``_ZGVeN8v_exp``, ``_ZGVdN4v_exp``, ...).

How a call is emitted (verified on numba 0.68 / LLVM 22 / glibc 2.36):

* the vector variant is declared ``nounwind readnone willreturn`` and kept alive in
  ``@llvm.compiler.used``;
* the scalar callee is a ``linkonce_odr noinline`` wrapper that splats its argument, calls
  the *same* vector variant and returns lane 0 -- so the scalar remainder of a vectorized
  loop (and a loop that does not vectorize at all) gives bit-identical results to the
  vector body: an element's result never depends on its position, the array's length or
  alignment;
* the call site carries ``"vector-function-abi-variant"`` naming exactly one variant, and
  the kernel function ``"prefer-vector-width"`` of that variant's width, so the main loop
  and the vectorized epilogue use one vector width.

The ISA (AVX-512 ``e``, AVX2 ``d``) follows numba's compile target (it honours
``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``). Without libmvec, without a symbol, or on a
target without AVX2, `vector_call_available` is False and callers keep scalar libm.

Functions libmvec lacks (lgamma, digamma) are vector functions this package defines
itself (``special_functions.py``), called through the same scalar wrapper: the variant is
a ``linkonce_odr alwaysinline`` definition instead of a declaration (numba's pipeline
inlines it once the loop is vectorized), and it needs no libmvec, only AVX2/AVX-512 + FMA.
Their formulas carry no fast-math flags, so the scalar wrapper runs a one-lane build of
the same function instead of a splat: the same bits, at one lane's cost when a loop (or
its remainder) does not vectorize.
"""

from __future__ import annotations

import dataclasses
import platform
from functools import cache

import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba.core import types

from ptnumba_codegen.flags import COMPARISON_SENSITIVE
from ptnumba_codegen.lowering.base import Emitter, Rule, Typed, cast, numba_type
from ptnumba_codegen.lowering.vecmath.isa import ISA_BITS, keep_alive, lane_count, mark_pure, target_features, target_isa  # noqa: F401
from ptnumba_codegen.lowering.vecmath.special_functions import VECTOR_FUNCTIONS

LIBMVEC = "libmvec.so.1"

# name -> (number of arguments, {dtype: max ulp error of the variant}). The bounds are the
# measured maxima vs mpmath over both ISAs (tests/test_vector_math.py re-measures them);
# glibc documents <= 4 ulp for every libmvec function.
VECTOR_FUNCS: dict[str, tuple[int, dict[str, float]]] = {
    "exp": (1, {"float64": 3.0, "float32": 3.0}),
    "log": (1, {"float64": 2.0, "float32": 4.0}),
    "log1p": (1, {"float64": 2.0, "float32": 2.0}),
    "expm1": (1, {"float64": 2.5, "float32": 2.5}),
    "tanh": (1, {"float64": 2.5, "float32": 2.5}),
    "erf": (1, {"float64": 1.5, "float32": 4.0}),
    "erfc": (1, {"float64": 2.0, "float32": 2.0}),
    "sin": (1, {"float64": 3.0, "float32": 2.0}),
    "cos": (1, {"float64": 3.0, "float32": 2.0}),
    "pow": (2, {"float64": 1.5, "float32": 1.0}),
    # defined by this package (special_functions.py), not by glibc; bounds for x > 0 (measured
    # max 0.72 / 0.66 ulp in float64; float32 is computed in float64 and rounded once)
    "lgamma": (1, {"float64": 1.0, "float32": 0.6}),
    "digamma": (1, {"float64": 1.0, "float32": 0.6}),
    "trigamma": (1, {"float64": 1.0, "float32": 0.6}),
}


def own_function(name: str):
    """The IR body builder of a vector function this package defines, or None (libmvec's)."""
    return VECTOR_FUNCTIONS.get(name)


@cache
def libmvec_loaded() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        llb.load_library_permanently(LIBMVEC)
    except (RuntimeError, OSError):
        return False
    return True


def variant_name(name: str, dtype: str, isa: str) -> str:
    nargs = VECTOR_FUNCS[name][0]
    if own_function(name) is not None:
        return f"ptnumba_v{lane_count(isa, dtype)}_{name}{'f' if dtype == 'float32' else ''}_{isa}"
    return f"_ZGV{isa}N{lane_count(isa, dtype)}{'v' * nargs}_{name}{'f' if dtype == 'float32' else ''}"


@cache
def _symbol_exists(symbol: str) -> bool:
    return bool(llb.address_of_symbol(symbol))


def ulp_bound(name: str, dtype: str) -> float | None:
    entry = VECTOR_FUNCS.get(name)
    return None if entry is None else entry[1].get(dtype)


def vector_call_available(name: str, dtype: str) -> bool:
    """Can ``name`` on ``dtype`` be lowered to a libmvec variant on this target?

    The package's own vector functions need no libmvec, only an AVX2 or AVX-512 target with
    FMA (their formulas use fused multiply-adds).
    """
    if ulp_bound(name, dtype) is None:
        return False
    isa = target_isa()
    if isa is None:
        return False
    if own_function(name) is not None:
        return "+fma" in target_features()
    return libmvec_loaded() and _symbol_exists(variant_name(name, dtype, isa))


def _variant(module: ir.Module, name: str, dtype: str, vname: str, lanes: int) -> ir.Function:
    """The vector variant ``vname`` of ``name`` (``lanes`` wide): libmvec's, declared, or
    the package's own, defined here (the linker keeps one copy per process)."""
    vfn = module.globals.get(vname)
    if vfn is None:
        fty = ir.FloatType() if dtype == "float32" else ir.DoubleType()
        vty = ir.VectorType(fty, lanes)
        vfn = ir.Function(module, ir.FunctionType(vty, [vty] * VECTOR_FUNCS[name][0]), vname)
        body = own_function(name)
        if body is not None:
            vfn.linkage = "linkonce_odr"
            vfn.attributes.add("alwaysinline")  # numba inlines again after vectorizing
            body(vfn, dtype)
        mark_pure(vfn)
        keep_alive(module, vfn)
    return vfn


def vector_call(builder: ir.IRBuilder, name: str, args, dtype: str) -> ir.Value:
    """Emit a scalar call the loop vectorizer maps onto ``name``'s libmvec variant."""
    isa = target_isa()
    module = builder.module
    fty = ir.FloatType() if dtype == "float32" else ir.DoubleType()
    lanes = lane_count(isa, dtype)
    vty = ir.VectorType(fty, lanes)
    nargs = VECTOR_FUNCS[name][0]

    vname = variant_name(name, dtype, isa)
    vfn = _variant(module, name, dtype, vname, lanes)
    own = own_function(name) is not None

    sname = f"ptnumba_mvec_{name}{'f' if dtype == 'float32' else ''}_{isa}"
    sfn = module.globals.get(sname)
    if sfn is None:
        sfn = ir.Function(module, ir.FunctionType(fty, [fty] * nargs), sname)
        sfn.linkage = "linkonce_odr"  # not internal: the linker would rename duplicates
        sfn.attributes.add("noinline")
        mark_pure(sfn)
        b = ir.IRBuilder(sfn.append_basic_block())
        # libmvec's variant on a splat; the package's own function in one lane: its formula
        # has no fast-math flags, so one lane gives the bits of any lane of any width
        width = 1 if own else lanes
        callee = _variant(module, name, dtype, f"ptnumba_v1_{sname}", 1) if own else vfn
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width)
        undef = ir.Constant(ir.VectorType(fty, width), ir.Undefined)
        splats = [
            b.shuffle_vector(b.insert_element(undef, a, ir.IntType(32)(0)), undef, zeros) for a in sfn.args
        ]
        b.ret(b.extract_element(b.call(callee, splats), ir.IntType(32)(0)))

    attrs = builder.function.attributes
    if not any(str(a).startswith('"prefer-vector-width"') for a in attrs):
        set.add(attrs, f'"prefer-vector-width"="{ISA_BITS[isa]}"')
    call = builder.call(sfn, list(args))
    set.add(
        call.attributes,
        f'"vector-function-abi-variant"="_ZGV_LLVM_N{lanes}{"v" * nargs}_{sname}({vname})"',
    )
    return call


# -- the policy's side: when to use a variant, and formulas built on them ---------------


def vector_dtype(t: Typed, names, loop_types, bound: float | None = None) -> str | None:
    """The float dtype to call the libmvec variants of ``names`` in, if the policy allows.

    Allowed when the instruction is outside every comparison cone, its (loop) types are
    one float dtype, every variant exists on this target, and the error bound (the
    variant's measured bound, or ``bound`` for a composite formula) fits the policy's
    ``max_ulp`` for this op (the class budget, or the op override's).
    """
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


# (function, dtype) -> ((below, result), (above, result)): arguments where libm and every
# libmvec variant give that exact result (exp underflows to +0 below the smallest
# subnormal's log, overflows to +inf above log(max)), -inf and +inf included. libmvec's
# fast path covers |x| < ~708 only; a lane outside sends the whole vector to its slow
# per-lane callout, so those lanes get the result by a select instead and the call a safe
# argument. (Zero-inflated and mixture logps take exp of log(0) = -inf on a large share
# of their lanes.)
_SATURATED = {
    ("exp", "float64"): ((-745.2, 0.0), (709.8, float("inf"))),
    ("exp", "float32"): ((-104.0, 0.0), (88.8, float("inf"))),
}


# (function, dtype) -> ((argument, result), ...): single arguments where libm and every
# libmvec variant give exactly that result (C99 F.10.3.7: log(+-0) = -inf, log(+inf) =
# +inf). Like a saturated lane, a vector holding one goes to libmvec's per-lane callout
# (four scalar calls and a divide-by-zero for a vector of zeros), so those lanes get the
# result by a select and the call a safe argument, 1.0. (A Cox model's log of hazards
# that are 0 on most rows: frailty_coxph, a third of the policy's time in that callout.)
_EXACT_POINTS = {
    ("log", "float64"): ((0.0, float("-inf")), (float("inf"), float("inf"))),
    ("log", "float32"): ((0.0, float("-inf")), (float("inf"), float("inf"))),
}


def _saturate(builder, name, dtype, args):
    """The call's arguments with saturated lanes (`_SATURATED`) and exact points
    (`_EXACT_POINTS`) replaced by a safe argument, and a function putting the exact
    results back."""
    bounds = _SATURATED.get((name, dtype))
    points = _EXACT_POINTS.get((name, dtype))
    if bounds is None and points is None:
        return args, lambda res: res
    x = args[0]
    fixes = []  # (lanes, exact result)
    if bounds is not None:
        (below, low), (above, high) = bounds
        fixes += [
            (builder.fcmp_ordered("<", x, ir.Constant(x.type, below)), low),
            (builder.fcmp_ordered(">", x, ir.Constant(x.type, above)), high),
        ]
    for at, result in points or ():
        fixes.append((builder.fcmp_ordered("==", x, ir.Constant(x.type, at)), result))
    hit = fixes[0][0]
    for lanes, _ in fixes[1:]:
        hit = builder.or_(hit, lanes)
    safe_value = 0.0 if bounds is not None else 1.0
    safe = builder.select(hit, ir.Constant(x.type, safe_value), x)

    def restore(res):
        for lanes, result in fixes:
            res = builder.select(lanes, ir.Constant(res.type, result), res)
        return res

    return [safe], restore


def emit_vector(context, builder, name, dtype, args):
    args, restore = _saturate(builder, name, dtype, args)
    res = restore(vector_call(builder, name, args, dtype))
    if (name, dtype) in _CANONICAL_NAN:
        arg_nan = builder.fcmp_unordered("uno", args[0], args[0])
        res_nan = builder.fcmp_unordered("uno", res, res)
        fix = builder.and_(res_nan, builder.not_(arg_nan))
        res = builder.select(fix, ir.Constant(res.type, float("nan")), res)
    return res


# The libm functions of `vector_form`'s ``needs`` that numba calls by name (its mathimpl's
# ``unary_math_extern``; exp, log and pow are LLVM intrinsics): LLVM's loop vectorizer has
# no vector form of them, so a scalar rule calling one keeps its loop scalar.
CALLED_BY_NAME = frozenset({"lgamma", "erf", "erfc", "log1p", "expm1"})


def vector_form(
    scalar_rule: Rule, needs: tuple[str, ...], bound: float | None, formula, int_inputs: bool = False, exact=None
):
    """Use ``formula(vm, x...)`` on libmvec calls when the policy allows, else ``scalar_rule``
    (or ``exact(t)``, an emitter with the scalar rule's bits, where it gives one: stock's
    formula on `lane_calls`, so the loop still vectorizes; ``without_lanes`` keeps the scalar rule).

    ``formula`` builds the result with ``vm`` (a `VectorMath` of the chosen dtype); the
    formulas are branch-free (selects, with safe arguments on the lanes a select drops),
    so a vectorized loop never takes libmvec's slow per-lane fallback for them.
    ``int_inputs``: integer inputs are converted to the float output's dtype first (right
    where the stock function converts them itself, as ``math.lgamma`` does).
    """

    by_name = any(n in CALLED_BY_NAME for n in needs)

    def scalar_rule_of(t: Typed) -> Emitter:
        scalar = scalar_rule(t)
        return dataclasses.replace(scalar, opaque_call=True) if by_name and scalar.stock_key is None else scalar

    def on_lanes(t: Typed, lanes: Emitter) -> Emitter:
        scalar = scalar_rule_of(t)
        return dataclasses.replace(lanes, emit=_scalar_on_constants(lanes.emit, scalar), without_lanes=scalar)

    def plan(t: Typed) -> Emitter:
        # float inputs only, unless int_inputs: integer inputs keep stock's integer
        # semantics (e.g. -x wraps)
        loop_types = [*t.inputs, *t.outputs]
        if int_inputs:
            loop_types = [ty for ty in loop_types if not isinstance(ty, types.Integer)]
        lanes = exact and exact(t)
        if lanes and lanes.pays_alone:  # libm's bits as vector code: the element's value in every kernel
            return on_lanes(t, lanes)
        dtype = vector_dtype(t, needs, loop_types, bound)
        if dtype is None or len(t.outputs) != 1:
            return on_lanes(t, lanes) if lanes else scalar_rule_of(t)
        fty = numba_type(dtype)

        def emit(context, builder, args, flags):
            xs = [cast(context, builder, a, ty, fty) for a, ty in zip(args, t.inputs)]
            res = formula(VectorMath(context, builder, dtype), *xs)
            return [cast(context, builder, res, fty, t.outputs[0])]

        own = all(own_function(n) is not None for n in needs)
        return Emitter(
            emit,
            label=f"{'vector' if own else 'libmvec formula using'} {', '.join(needs)} ({dtype})",
            scalar_form=scalar_rule_of(t),  # for loops that cannot vectorize (body._vectors_where_they_pay)
        )

    return Rule(plan, f"{scalar_rule.kind} | vector formula")


def is_constant(v) -> bool:
    """A constant, or a cast of one (a constant of another dtype, cast to the output's)."""
    return isinstance(v, ir.Constant) or (isinstance(v, ir.CastInstr) and all(is_constant(o) for o in v.operands))


def _scalar_on_constants(emit, scalar):
    """``emit``, but ``scalar``'s code where an operand is a constant: LLVM folds a libm
    call on constants, or rewrites it (a strict ``pow(x, 2.0)`` is ``x * x``, ``pow(x, -1.0)``
    is ``1 / x``), in stock's code as in the scalar rule's; an opaque lane call would keep it."""

    def emit_unless_constant(context, builder, args, flags):
        if any(is_constant(a) for a in args):
            return scalar(context, builder, args, flags)
        return emit(context, builder, args, flags)

    return emit_unless_constant


class VectorMath:
    """Tiny IR helpers for the vector formulas (flags are set by the stamp)."""

    def __init__(self, context, builder, dtype):
        self.b = builder
        self.dtype = dtype
        self.ty = ir.FloatType() if dtype == "float32" else ir.DoubleType()

    def const(self, v):
        return ir.Constant(self.ty, v)

    def call(self, name, *args):
        return emit_vector(None, self.b, name, self.dtype, list(args))

    def fabs(self, x):
        fn = self.b.module.declare_intrinsic("llvm.fabs", [self.ty])
        return self.b.call(fn, [x])

    def select(self, c, a, b):
        return self.b.select(c, a, b)


def sigmoid_formula(m: VectorMath, x):
    b = m.b
    return b.fdiv(m.const(1.0), b.fadd(m.const(1.0), m.call("exp", b.fneg(x))))


def softplus_formula(m: VectorMath, x):
    # max(x, 0) + log1p(exp(-|x|)): no overflow, no branch; NaN propagates via the log1p term
    b = m.b
    pos = m.select(b.fcmp_ordered(">", x, m.const(0.0)), x, m.const(0.0))
    res = b.fadd(pos, m.call("log1p", m.call("exp", b.fneg(m.fabs(x)))))
    return m.select(b.fcmp_unordered("uno", x, x), x, res)  # stock returns a NaN input as is


def log1mexp_formula(m: VectorMath, x):
    # stock: x < log(0.5) ? log1p(-exp(x)) : log(-expm1(x)); dropped lanes get -1.0
    b = m.b
    small = b.fcmp_ordered("<", x, m.const(np.log(0.5)))
    xa = m.select(small, x, m.const(-1.0))
    xb = m.select(small, m.const(-1.0), x)
    a = m.call("log1p", b.fneg(m.call("exp", xa)))
    c = m.call("log", b.fneg(m.call("expm1", xb)))
    return m.select(small, a, c)


def erf_formula(m: VectorMath, x):
    return m.call("erf", x)


def erfc_formula(m: VectorMath, x):
    return m.call("erfc", x)


def pow_formula(m: VectorMath, x, y):
    return m.call("pow", x, y)


def lgamma_formula(m: VectorMath, x):
    return m.call("lgamma", x)


def digamma_formula(m: VectorMath, x):
    return m.call("digamma", x)


def trigamma_formula(m: VectorMath, x):
    return m.call("trigamma", x)


# Measured error bounds (ulp) of the formulas on top of the variants' own errors
# (tests/test_vector_math.py checks them against mpmath).
FORMULA_ULP = {"sigmoid": 4.0, "softplus": 4.0, "log1mexp": 4.0}
