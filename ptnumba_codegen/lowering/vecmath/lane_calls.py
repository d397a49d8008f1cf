"""Lane calls: scalar libm, callable from a vectorized loop, with libm's bits in every lane.

A loop whose body calls a plain libm function (``log1p`` in a comparison cone, stock's
softplus, ``erfc`` in a probit link's comparison cone) does not vectorize at all: LLVM's loop vectorizer refuses a call it has no vector
form for. The rest of the body then runs one element at a time, and every libmvec or
package vector function in it (outside the cone) does a whole vector's work for one
element (slower than stock; CHANGELOG.md, "Lane calls").

A lane call gives such a call a vector form that computes nothing differently:

* the call site calls a ``noinline`` scalar wrapper ``ptnumba_libm_<fn>`` (which calls
  libm's ``<fn>``) and names, in ``"vector-function-abi-variant"``, a variant
  ``ptnumba_lanes<N>_<fn>`` that calls libm's scalar ``<fn>`` once per lane;
* so a vectorized loop runs libm lane by lane, and its remainder runs the wrapper: every
  element gets exactly the scalar libm result, wherever it sits, and the arithmetic
  around it vectorizes.

Where `exact_lanes` has libm's algorithm on vectors (glibc's ``exp``), the variant is that
code instead of a per-lane loop: the call itself vectorizes, with the same bits, and a
body of lane calls alone then pays (``pays_alone``). Such lanes are also taken outside the
comparison cones, in place of libmvec, wherever the instruction's flags keep libm's bits
(`flags.LIBM_BITS_KEPT_UNDER`, the ``default`` transcendental class): an element's ``log(x)``
then has the same bits in a cone's strict kernel and in any other kernel fusion puts it in,
as under stock, where every kernel calls libm.

``LIBM`` maps the function names of the rule table to libm's symbols, exactly those numba
lowers the stock ufunc loops to (``llvm.exp`` / ``llvm.log`` / ``llvm.sin`` / ``llvm.cos``
become libm's ``exp``, ``log``, ``sin``, ``cos`` calls; ``log1p``, ``expm1``, ``tanh``, and for
float64 ``erf`` and ``erfc`` (`formula_ir`), are external calls already), so ``strict`` stays stock strict bit for bit (tests/test_all_scalar_ops,
the fuzzer). ``STOCK_FORMULAS`` are stock's own formulas (``formulas.py``) written on lane
calls, same operations in the same order, with selects where stock branches.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import types

from ptnumba_codegen.flags import LIBM_BITS_KEPT_UNDER
from ptnumba_codegen.lowering.base import Emitter, Typed, cast, numba_type
from ptnumba_codegen.lowering.vecmath.exact_lanes import available as exact_available
from ptnumba_codegen.lowering.vecmath.exact_lanes import exact_variant, lane_by_lane, vector_function
from ptnumba_codegen.lowering.vecmath.isa import ISA_BITS, keep_alive, lane_count, mark_pure, target_isa

# rule-table name -> (float32 symbol, float64 symbol) of the libm function stock calls
LIBM: dict[str, tuple[str, str]] = {
    "exp": ("expf", "exp"),
    "log": ("logf", "log"),
    "log1p": ("log1pf", "log1p"),
    "expm1": ("expm1f", "expm1"),
    "tanh": ("tanhf", "tanh"),
    "sin": ("sinf", "sin"),
    "cos": ("cosf", "cos"),
    "pow": ("powf", "pow"),
    "erf": ("erff", "erf"),
    "erfc": ("erfcf", "erfc"),
}
# libm functions of two arguments (the others take one)
ARITY = {"pow": 2}
# functions lane-called only where their lane calls are exact vector code: LLVM already
# widens a strict ``llvm.pow`` call by calling libm once per lane
EXACT_ONLY = frozenset({"pow"})


def lane_dtype(name: str, loop_types) -> str | None:
    """The float dtype a lane call of ``name`` runs in, or None (keep the stock emitter):
    one float dtype, a vector target (AVX2 / AVX-512). Callers use lane calls for strict
    instructions (no fast-math flags), and for instructions whose flags keep libm's bits
    (`flags.LIBM_BITS_KEPT_UNDER`) where the lanes are exact vector code: any other flagged
    instruction keeps its flagged call, so the final IR shows the flags the policy set."""
    dtypes = {str(ty) for ty in loop_types}
    if name not in LIBM or len(dtypes) != 1 or target_isa() is None:
        return None
    dtype = dtypes.pop()
    return dtype if dtype in ("float32", "float64") else None


def _fty(dtype: str):
    return ir.FloatType() if dtype == "float32" else ir.DoubleType()


def _libm(module: ir.Module, symbol: str, fty, arity: int = 1) -> ir.Function:
    fn = module.globals.get(symbol)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(fty, [fty] * arity), symbol)
    return fn


def _lanes_variant(module: ir.Module, symbol: str, fty, lanes: int, arity: int = 1) -> ir.Function:
    """``<lanes x fty> ptnumba_lanes<lanes>_<symbol>(v, ...)``: libm's ``symbol`` on each
    lane, or libm's algorithm on the whole vector where `exact_lanes` has it (same bits)."""
    exact = exact_variant(module, symbol, fty, lanes)
    if exact is not None:
        return exact
    fn, new = vector_function(module, f"ptnumba_lanes{lanes}_{symbol}", fty, lanes, arity)
    if not new:
        return fn
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(lane_by_lane(b, _libm(module, symbol, fty, arity), *fn.args))
    keep_alive(module, fn)
    return fn


def lane_call(builder: ir.IRBuilder, name: str, x, dtype: str, *more) -> ir.Value:
    """libm's ``name`` of ``x`` (and ``more`` arguments: pow's exponent), scalars of
    ``dtype``, vectorizable lane by lane."""
    isa = target_isa()
    module = builder.module
    fty = _fty(dtype)
    symbol = LIBM[name][dtype == "float64"]
    arity = ARITY.get(name, 1)
    assert 1 + len(more) == arity, (name, arity)
    lanes = lane_count(isa, dtype)
    variant = _lanes_variant(module, symbol, fty, lanes, arity)
    wname = f"ptnumba_libm_{symbol}"
    wrapper = module.globals.get(wname)
    if wrapper is None:
        wrapper = ir.Function(module, ir.FunctionType(fty, [fty] * arity), wname)
        wrapper.linkage = "linkonce_odr"
        wrapper.attributes.add("noinline")  # inlined, the call would lose its variant
        mark_pure(wrapper)
        b = ir.IRBuilder(wrapper.append_basic_block())
        b.ret(b.call(_libm(module, symbol, fty, arity), list(wrapper.args)))
    attrs = builder.function.attributes
    if not any(str(a).startswith('"prefer-vector-width"') for a in attrs):
        set.add(attrs, f'"prefer-vector-width"="{ISA_BITS[isa]}"')
    call = builder.call(wrapper, [x, *more])
    set.add(call.attributes, f'"vector-function-abi-variant"="_ZGV_LLVM_N{lanes}{"v" * arity}_{wname}({variant.name})"')
    return call


class LaneMath:
    """The vocabulary of `STOCK_FORMULAS`: lane calls, constants, selects."""

    def __init__(self, builder, dtype):
        self.b = builder
        self.dtype = dtype
        self.ty = _fty(dtype)

    def const(self, v):
        return ir.Constant(self.ty, v)

    def call(self, name, x, *more):
        return lane_call(self.b, name, x, self.dtype, *more)


def _neg(m: LaneMath, x):
    return m.b.fsub(m.const(-0.0), x)  # numba's float negation (mathimpl.negate_real)


def _sigmoid(m: LaneMath, x):
    # formulas._sigmoid: 1 / (1 + np.exp(-x))
    b = m.b
    return b.fdiv(m.const(1.0), b.fadd(m.const(1.0), m.call("exp", _neg(m, x))))


def _softplus(m: LaneMath, x):
    # formulas._softplus: x < -37: exp(x); x < 18: log1p(exp(x)); x < 33.3: x + exp(-x);
    # else x (a NaN fails every test: x). One exp serves every branch: exp(x) where x < 18,
    # exp(-x) where not.
    b = m.b
    below18 = b.fcmp_ordered("<", x, m.const(18.0))
    e = m.call("exp", b.select(below18, x, _neg(m, x)))
    res = b.select(b.fcmp_ordered("<", x, m.const(33.3)), b.fadd(x, e), x)
    res = b.select(below18, m.call("log1p", e), res)
    return b.select(b.fcmp_ordered("<", x, m.const(-37.0)), e, res)


def _pow(m: LaneMath, x, y):
    # formulas._pow: x ** y, numba's llvm.pow (libm's pow) for float64 operands
    return m.call("pow", x, y)


def _erf(m: LaneMath, x):
    # formulas._erf: math.erf, libm's erf for float64 (formula_ir: mathimpl.erf_impl)
    return m.call("erf", x)


def _erfc(m: LaneMath, x):
    # formulas._erfc: math.erfc, libm's erfc for float64 (formula_ir: mathimpl.erfc_impl)
    return m.call("erfc", x)


# op name -> (libm functions it calls, its stock formula on lane calls)
STOCK_FORMULAS = {
    "sigmoid": (("exp",), _sigmoid),
    "softplus": (("exp", "log1p"), _softplus),
    "pow": (("pow",), _pow),
    "erf": (("erf",), _erf),
    "erfc": (("erfc",), _erfc),
}


def stock_formula(name: str, t: Typed) -> Emitter | None:
    """The emitter of stock's formula ``name`` on lane calls for ``t``, or None: float64
    inputs and output only (in float32 stock mixes in float64 literals and comparisons:
    its python formula stays)."""
    needs, formula = STOCK_FORMULAS[name]
    if set(t.flags) - LIBM_BITS_KEPT_UNDER or len(t.outputs) != 1 or any(ty != types.float64 for ty in (*t.inputs, *t.outputs)):
        return None
    dtype = lane_dtype(needs[0], (*t.inputs, *t.outputs))
    if dtype is None:
        return None
    if any(n in EXACT_ONLY and not exact_available(LIBM[n][1], dtype) for n in needs):
        return None
    fty = numba_type(dtype)

    def emit(context, builder, args, flags):
        xs = [cast(context, builder, a, ty, fty) for a, ty in zip(args, t.inputs, strict=True)]
        return [cast(context, builder, formula(LaneMath(builder, dtype), *xs), fty, t.outputs[0])]

    return Emitter(
        emit,
        label=f"libm lanes {', '.join(needs)} ({dtype})",
        pays_alone=all(exact_available(LIBM[n][1], dtype) for n in needs),
    )


__all__ = ["ARITY", "EXACT_ONLY", "LIBM", "STOCK_FORMULAS", "LaneMath", "lane_call", "lane_dtype", "stock_formula"]
