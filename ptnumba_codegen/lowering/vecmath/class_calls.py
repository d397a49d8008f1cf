"""Class calls: a libm call whose readers need only its result's class (`analysis.class_rules`).

``class_call(builder, row, bands, x, y)`` is ``pow(x, y)`` (y the row's constant exponent,
passed as a value LLVM cannot fold) where |x| lies in ``bands`` -- bit for bit libm's
pow there -- and the row's representative elsewhere (``1 / x``, ``1 / sqrt(x)`` corrected
at -0 and -inf, ``1 / (x * x)``: the same class as libm's pow outside the bands). Like a lane call (`lane_calls`) the call site
calls a ``noinline`` scalar wrapper that names a vector variant in
``"vector-function-abi-variant"``: the variant divides a whole vector and calls libm lane
by lane only for a vector with a lane in a band (a subnormal x for ``pow(x, -1)``:
rare), so the loop around it vectorizes; the remainder runs the scalar wrapper, which
branches the same way per element.

``quotient_call(builder, row, safe, a, x)`` is ``a / exp(x)`` read by class
(`class_rules.QuotientRule`): ``copysign(1, a)`` where a is normal, |x| is within the row's
limit and ``E(a) - x log2(e)`` lies in ``safe``, glibc's ``exp`` and an IEEE division
elsewhere (every lane of a vector with a lane in doubt), in the same wrapper/variant form.
"""

from __future__ import annotations

import hashlib
import math

from llvmlite import ir

from ptnumba_codegen.analysis.class_rules import LOG2E, Bands, ClassRule
from ptnumba_codegen.lowering.vecmath.exact_lanes import lane_by_lane, vector_function
from ptnumba_codegen.lowering.vecmath.isa import ISA_BITS, keep_alive, lane_count, mark_pure, target_isa

# dtype -> (libm symbol of pow, LLVM float type, integer type of its bits)
POW_SYMBOLS = {"float64": ("pow", ir.DoubleType(), ir.IntType(64)), "float32": ("powf", ir.FloatType(), ir.IntType(32))}


def _splat(ty, v):
    return ir.Constant(ty, [ty.element(v)] * ty.count) if isinstance(ty, ir.VectorType) else ir.Constant(ty, v)


def _abs(b: ir.IRBuilder, x, ity):
    """|x| by clearing the sign bit (``ity``: the integer type of one element's bits)."""
    mask = (1 << (ity.width - 1)) - 1
    if isinstance(x.type, ir.VectorType):
        ity = ir.VectorType(ity, x.type.count)
    return b.bitcast(b.and_(b.bitcast(x, ity), _splat(ity, mask)), x.type)


def _in_bands(b: ir.IRBuilder, x, bands: Bands, ity):
    """lo <= |x| <= hi for one of ``bands`` (NaN: in none)."""
    ax = _abs(b, x, ity)
    hit = None
    for lo, hi in bands:
        one = b.and_(b.fcmp_ordered(">=", ax, _splat(x.type, lo)), b.fcmp_ordered("<=", ax, _splat(x.type, hi)))
        hit = one if hit is None else b.or_(hit, one)
    if hit is None:
        return _splat(ir.VectorType(ir.IntType(1), x.type.count), 0) if isinstance(x.type, ir.VectorType) else ir.IntType(1)(0)
    return hit


def _reciprocal(b: ir.IRBuilder, x):
    return b.fdiv(_splat(x.type, 1.0), x)  # no flags: IEEE division


def _sqrt(module: ir.Module, ty) -> ir.Function:
    """``llvm.sqrt`` of a scalar or vector type (llvmlite's declare_intrinsic knows no vector
    types): IEEE square root, correctly rounded."""
    if isinstance(ty, ir.VectorType):
        name = f"llvm.sqrt.v{ty.count}f{64 if isinstance(ty.element, ir.DoubleType) else 32}"
    else:
        name = f"llvm.sqrt.f{64 if isinstance(ty, ir.DoubleType) else 32}"
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(ty, [ty]), name)


def _rsqrt(b: ir.IRBuilder, x):
    """1/sqrt(x), +inf at -0 (pow(-0, -0.5) = +inf) and +0 at -inf (pow(-inf, -0.5) = +0)."""
    r = b.fdiv(_splat(x.type, 1.0), b.call(_sqrt(b.module, x.type), [x]))
    r = b.select(b.fcmp_ordered("==", x, _splat(x.type, 0.0)), _splat(x.type, math.inf), r)
    return b.select(b.fcmp_ordered("==", x, _splat(x.type, -math.inf)), _splat(x.type, 0.0), r)


def _inverse_square(b: ir.IRBuilder, x):
    return b.fdiv(_splat(x.type, 1.0), b.fmul(x, x))


# `class_rules.REPRESENTATIVES` -> its IR (IEEE, no flags)
REPRESENTATIVE_IR = {"reciprocal": _reciprocal, "rsqrt": _rsqrt, "inverse_square": _inverse_square}


def _representative(b: ir.IRBuilder, row: ClassRule, x):
    emit = REPRESENTATIVE_IR.get(row.representative)
    if emit is None:
        raise ValueError(f"unknown representative {row.representative!r}")
    return emit(b, x)


def _libm(module: ir.Module, symbol: str, fty) -> ir.Function:
    fn = module.globals.get(symbol)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(fty, [fty, fty]), symbol)
    return fn


def _names(row: ClassRule, bands: Bands, symbol: str, lanes: int) -> tuple[str, str]:
    tag = hashlib.sha256(repr((row.representative, row.exponent, bands)).encode()).hexdigest()[:12]
    return f"ptnumba_class_{symbol}_{tag}", f"ptnumba_class{lanes}_{symbol}_{tag}"


def _define_scalar(module, name, row, bands, symbol, fty, ity) -> ir.Function:
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(fty, [fty, fty]), name)
    fn.linkage = "linkonce_odr"
    fn.attributes.add("noinline")  # inlined, the call would lose its variant
    mark_pure(fn)
    x, y = fn.args
    entry, call_bb, rep_bb = (fn.append_basic_block(s) for s in ("entry", "libm", "representative"))
    b = ir.IRBuilder(entry)
    b.cbranch(_in_bands(b, x, bands, ity), call_bb, rep_bb)
    b.position_at_end(call_bb)
    b.ret(b.call(_libm(module, symbol, fty), [x, y]))
    b.position_at_end(rep_bb)
    b.ret(_representative(b, row, x))
    return fn


def _define_vector(module, name, row, bands, symbol, fty, ity, lanes) -> ir.Function:
    fn, new = vector_function(module, name, fty, lanes, 2)
    if not new:
        return fn
    x, y = fn.args
    entry, call_bb, rep_bb = (fn.append_basic_block(s) for s in ("entry", "libm", "representative"))
    b = ir.IRBuilder(entry)
    hit = _in_bands(b, x, bands, ity)
    mty = ir.IntType(lanes)
    b.cbranch(b.icmp_unsigned("!=", b.bitcast(hit, mty), mty(0)), call_bb, rep_bb)
    b.position_at_end(call_bb)  # a lane in a band: libm on every lane (its bits: its class)
    b.ret(lane_by_lane(b, _libm(module, symbol, fty), x, y))
    b.position_at_end(rep_bb)
    b.ret(_representative(b, row, x))
    keep_alive(module, fn)
    return fn


def class_call(builder: ir.IRBuilder, row: ClassRule, bands: Bands, x, y) -> ir.Value:
    """``pow(x, y)``'s class (bits where |x| is in ``bands``), scalars of ``row.dtype``."""
    symbol, fty, ity = POW_SYMBOLS[row.dtype]
    module = builder.module
    isa = target_isa()
    lanes = lane_count(isa, row.dtype) if isa is not None else 0
    sname, vname = _names(row, bands, symbol, lanes)
    scalar = _define_scalar(module, sname, row, bands, symbol, fty, ity)
    call = builder.call(scalar, [x, y])
    if isa is None:
        return call
    variant = _define_vector(module, vname, row, bands, symbol, fty, ity, lanes)
    attrs = builder.function.attributes
    if not any(str(a).startswith('"prefer-vector-width"') for a in attrs):
        set.add(attrs, f'"prefer-vector-width"="{ISA_BITS[isa]}"')
    set.add(call.attributes, f'"vector-function-abi-variant"="_ZGV_LLVM_N{lanes}vv_{sname}({variant.name})"')
    return call





# -- a quotient by an exp computed by class (`class_rules.QuotientRule`) -------------------

# dtype -> (libm symbol of exp, LLVM float type, integer type of its bits, exponent bits,
# mantissa bits)
EXP_SYMBOLS = {"float64": ("exp", ir.DoubleType(), ir.IntType(64), 11, 52)}


def _libm1(module: ir.Module, symbol: str, fty) -> ir.Function:
    fn = module.globals.get(symbol)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(fty, [fty]), symbol)
    return fn


def _safe(b: ir.IRBuilder, row, safe: Bands, a, x, ity, ebits: int, mbits: int):
    """The lanes whose quotient the canonical value stands for: a normal, |x| <= the row's
    limit (NaN: no), ``g = E - x log2(e)`` in one of the open intervals ``safe``."""
    vec = isinstance(a.type, ir.VectorType)
    ivty = ir.VectorType(ity, a.type.count) if vec else ity
    field = b.and_(b.lshr(b.bitcast(a, ivty), _splat(ivty, mbits)), _splat(ivty, (1 << ebits) - 1))
    normal = b.and_(b.icmp_unsigned("!=", field, _splat(ivty, 0)), b.icmp_unsigned("!=", field, _splat(ivty, (1 << ebits) - 1)))
    small = b.fcmp_ordered("<=", _abs(b, x, ity), _splat(x.type, row.x_limit))
    e = b.sitofp(b.sub(field, _splat(ivty, (1 << (ebits - 1)) - 1)), a.type)
    g = b.fsub(e, b.fmul(x, _splat(x.type, LOG2E)))  # no flags: IEEE
    inside = None
    for lo, hi in safe:
        one = None
        if lo != -math.inf:
            one = b.fcmp_ordered(">", g, _splat(g.type, lo))
        if hi != math.inf:
            up = b.fcmp_ordered("<", g, _splat(g.type, hi))
            one = up if one is None else b.and_(one, up)
        if one is None:  # (-inf, inf): every g
            one = b.fcmp_ordered("==", g, g)
        inside = one if inside is None else b.or_(inside, one)
    if inside is None:
        return _splat(ir.VectorType(ir.IntType(1), a.type.count), 0) if vec else ir.IntType(1)(0)
    return b.and_(b.and_(normal, small), inside)


def _canonical(b: ir.IRBuilder, a, ity):
    """copysign(1, a), bit by bit."""
    vec = isinstance(a.type, ir.VectorType)
    ivty = ir.VectorType(ity, a.type.count) if vec else ity
    sign = b.and_(b.bitcast(a, ivty), _splat(ivty, 1 << (ity.width - 1)))
    one = b.bitcast(_splat(a.type, 1.0), ivty)
    return b.bitcast(b.or_(sign, one), a.type)


def _define_exact_quotient(module, symbol, fty) -> ir.Function:
    """``a / exp(x)`` as written: glibc's exp, an IEEE division."""
    name = f"ptnumba_quotient_{symbol}_exact"
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(fty, [fty, fty]), name)
    fn.linkage = "linkonce_odr"
    mark_pure(fn)
    a, x = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.ret(b.fdiv(a, b.call(_libm1(module, symbol, fty), [x])))  # no flags
    return fn


def _quotient_names(row, safe: Bands, symbol: str, lanes: int) -> tuple[str, str]:
    tag = hashlib.sha256(repr((row.divisor, row.x_limit, safe)).encode()).hexdigest()[:12]
    return f"ptnumba_quotient_{symbol}_{tag}", f"ptnumba_quotient{lanes}_{symbol}_{tag}"


def _define_quotient_scalar(module, name, row, safe, symbol, fty, ity, ebits, mbits) -> ir.Function:
    fn = module.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(module, ir.FunctionType(fty, [fty, fty]), name)
    fn.linkage = "linkonce_odr"
    fn.attributes.add("noinline")  # inlined, the call would lose its variant
    mark_pure(fn)
    a, x = fn.args
    entry, exact_bb, canon_bb = (fn.append_basic_block(s) for s in ("entry", "exact", "canonical"))
    b = ir.IRBuilder(entry)
    b.cbranch(_safe(b, row, safe, a, x, ity, ebits, mbits), canon_bb, exact_bb)
    b.position_at_end(exact_bb)
    b.ret(b.call(_define_exact_quotient(module, symbol, fty), [a, x]))
    b.position_at_end(canon_bb)
    b.ret(_canonical(b, a, ity))
    return fn


def _define_quotient_vector(module, name, row, safe, symbol, fty, ity, ebits, mbits, lanes) -> ir.Function:
    fn, new = vector_function(module, name, fty, lanes, 2)
    if not new:
        return fn
    a, x = fn.args
    entry, exact_bb, canon_bb = (fn.append_basic_block(s) for s in ("entry", "exact", "canonical"))
    b = ir.IRBuilder(entry)
    ok = _safe(b, row, safe, a, x, ity, ebits, mbits)
    mty = ir.IntType(lanes)
    b.cbranch(b.icmp_unsigned("==", b.bitcast(ok, mty), mty((1 << lanes) - 1)), canon_bb, exact_bb)
    b.position_at_end(exact_bb)  # a lane in doubt: every lane as written
    b.ret(lane_by_lane(b, _define_exact_quotient(module, symbol, fty), a, x))
    b.position_at_end(canon_bb)
    b.ret(_canonical(b, a, ity))
    keep_alive(module, fn)
    return fn


def quotient_call(builder: ir.IRBuilder, row, safe: Bands, a, x) -> ir.Value:
    """``a / exp(x)``'s class (`class_rules.QuotientRule`): copysign(1, a) where ``g`` lies
    in ``safe``, ``a / exp(x)`` as written elsewhere; scalars of ``row.dtype``."""
    symbol, fty, ity, ebits, mbits = EXP_SYMBOLS[row.dtype]
    module = builder.module
    isa = target_isa()
    lanes = lane_count(isa, row.dtype) if isa is not None else 0
    sname, vname = _quotient_names(row, safe, symbol, lanes)
    scalar = _define_quotient_scalar(module, sname, row, safe, symbol, fty, ity, ebits, mbits)
    call = builder.call(scalar, [a, x])
    if isa is None:
        return call
    variant = _define_quotient_vector(module, vname, row, safe, symbol, fty, ity, ebits, mbits, lanes)
    attrs = builder.function.attributes
    if not any(str(a).startswith('"prefer-vector-width"') for a in attrs):
        set.add(attrs, f'"prefer-vector-width"="{ISA_BITS[isa]}"')
    set.add(call.attributes, f'"vector-function-abi-variant"="_ZGV_LLVM_N{lanes}vv_{sname}({variant.name})"')
    return call


__all__ = ["EXP_SYMBOLS", "POW_SYMBOLS", "REPRESENTATIVE_IR", "class_call", "quotient_call"]
