"""Exact lanes: libm's own algorithm written on vectors, so a lane call runs a vector.

A lane call (`lane_calls`) keeps libm's bits in a vectorized loop by calling libm once per
lane: the arithmetic around it vectorizes, the call does not (a strict ``sigmoid`` in an
ordered-logistic cone spends nearly all its time in libm's ``exp``). Where libm's
algorithm is a fixed sequence of IEEE operations on constants we can read, the same
sequence on vectors gives the same bits in every lane; `EXACT_LANES` lists those:

* ``exp`` (float64), glibc's ``__exp_fma`` (glibc 2.28+, the variant its resolver picks on
  a CPU with FMA and AVX2): ``kd = fma(x, N/ln2, shift)``, ``r = fma(kd', -ln2hi/N, x)``,
  ``r = fma(kd', -ln2lo/N, r)``, the table's scale and tail at ``kd mod 128``, the degree-5
  polynomial in the order and with the fused multiply-adds of that build, ``scale + scale
  * tmp`` as one fma; below the fast path (``|x| < 2^-54``, zero among them) libm's
  ``1 + x``. Lanes above it (``|x| >= 512``, inf, NaN) make the whole vector call libm lane
  by lane, as a lane call does.
* ``log`` (float64), glibc 2.36's ``__log_fma`` (e_log.c): the table path (``r = fma(z,
  1/c, -1)``, 128 (1/c, log c) pairs) and the near-1 polynomial, each computed only for a
  vector with lanes that take it; zero, negative, subnormal, inf, NaN lanes call libm.
* ``pow`` (float64, two arguments), glibc 2.36's ``__pow_fma`` (e_pow.c) on its main path:
  ``log_inline`` on pow's own log table, ``exp_inline`` (exp's fast path plus a tail) on
  exp's table, and exp_inline's tiny case (``1 + y log x`` below 2^-54: x == 1); a lane with
  x not positive normal, |y| outside [2^-65, 2^63), or |y log x| >= 512 makes the vector
  call libm.

Constants and tables come from this process's libm (`libm_data`). Before the first use (once
per process, entry and vector width) the vector code is compiled on its own and
compared bit for bit with libm's function on `probe_inputs` (every table slot or
subinterval, the fast path's edges, the subnormal range, random magnitudes; pow's common
exponents); any difference, or no data, and the entry is off for the process: lane calls
stay per-lane libm (`status` says why; ``explain`` prints it). ``PTNUMBA_CODEGEN_EXACT_LANES
=off`` turns them off by hand. A verdict is kept on disk beside PyTensor's numba cache
(`check_cache`, keyed by everything the check depends on: `check_key`), so a later process
with the cache on reads it instead of checking again.
"""

from __future__ import annotations

import ctypes
import hashlib
from contextlib import contextmanager
import os
from collections.abc import Callable
from dataclasses import dataclass

import llvmlite.binding as llb
import numpy as np
from llvmlite import ir

from ptnumba_codegen import settings
from ptnumba_codegen._version import GENERATOR_DIGEST, GENERATOR_VERSION
from ptnumba_codegen.lowering.vecmath import check_cache
from ptnumba_codegen.runtime import disk_cache
from ptnumba_codegen.lowering.vecmath.libm_data import (
    LOG_OFF,
    POW_LOG_OFF,
    ExpData,
    LogData,
    PowData,
    glibc_exp_data,
    glibc_log_data,
    glibc_pow_data,
)
from ptnumba_codegen.lowering.vecmath.isa import keep_alive, lane_count, mark_pure, target_features, target_isa

_F64 = ir.DoubleType()
_I64 = ir.IntType(64)
_I32 = ir.IntType(32)


def _fma(b: ir.IRBuilder, a, x, c):
    # llvmlite's declare_intrinsic knows no vector types: declare llvm.fma.v<N>f64
    name = f"llvm.fma.v{a.type.count}f64"
    fn = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(a.type, [a.type] * 3), name)
    return b.call(fn, [a, x, c])


def _splat(ty, v):
    return ir.Constant(ty, [ty.element(v)] * ty.count)


def _glibc_exp_fast(b: ir.IRBuilder, x, data: ExpData, table: ir.GlobalVariable, xtail=None):
    """glibc __exp_fma's fast path on the vector ``x`` (every lane assumed in range); with
    ``xtail``, e_pow.c's exp_inline(x, xtail, 0), which adds the tail to the reduced r."""
    vty = x.type
    ity = ir.VectorType(_I64, vty.count)
    kd = _fma(b, x, _splat(vty, data.invln2N), _splat(vty, data.shift))
    ki = b.bitcast(kd, ity)
    kd = b.fsub(kd, _splat(vty, data.shift))
    r = _fma(b, kd, _splat(vty, data.negln2hiN), x)
    r = _fma(b, kd, _splat(vty, data.negln2loN), r)
    if xtail is not None:
        r = b.fadd(r, xtail)
    slot = b.shl(b.and_(ki, _splat(ity, 127)), _splat(ity, 1))
    top = b.shl(ki, _splat(ity, 52 - 7))
    tail, scale = _gather_pairs(b, table, slot, vty)
    sbits = b.add(b.bitcast(scale, ity), top)
    p1 = _fma(b, r, _splat(vty, data.C3), _splat(vty, data.C2))
    t0 = b.fadd(r, tail)
    r2 = b.fmul(r, r)
    p2 = _fma(b, r, _splat(vty, data.C5), _splat(vty, data.C4))
    tmp = _fma(b, p1, r2, t0)
    r4 = b.fmul(r2, r2)
    tmp = _fma(b, r4, p2, tmp)
    scale = b.bitcast(sbits, vty)
    return _fma(b, scale, tmp, scale)


def _glibc_exp_tiny_big(b: ir.IRBuilder, x):
    """The lanes below __exp's (and exp_inline's) fast path, |x| < 2^-54 (top 12 bits of
    |x| below 0x3c9), where glibc returns 1 + x; and those above it, |x| >= 512, inf, NaN
    (from 0x3c9 + 0x3f on), its special case. As compares of |x| with the powers of two
    those exponent fields start at (one compare each, no integer unsigned compare)."""
    ax = _fabs(b, x)
    return b.fcmp_ordered("<", ax, _splat(x.type, 2.0**-54)), b.fcmp_unordered(">=", ax, _splat(x.type, 512.0))


def _fabs(b: ir.IRBuilder, x):
    ity = ir.VectorType(_I64, x.type.count)
    return b.bitcast(b.and_(b.bitcast(x, ity), _splat(ity, (1 << 63) - 1)), x.type)


def _table(module: ir.Module, name: str, words: tuple[int, ...]) -> ir.GlobalVariable:
    gv = module.globals.get(name)
    if gv is None:
        aty = ir.ArrayType(_I64, len(words))
        gv = ir.GlobalVariable(module, aty, name)
        gv.initializer = ir.Constant(aty, [_I64(w) for w in words])
        gv.global_constant = True
        gv.linkage = "linkonce_odr"
        gv.align = 32
    return gv


def _build_glibc_exp(module: ir.Module, fn: ir.Function, libm: ir.Function, data: ExpData):
    x = fn.args[0]
    entry = fn.append_basic_block("entry")
    fast_bb = fn.append_basic_block("fast")
    slow_bb = fn.append_basic_block("slow")
    b = ir.IRBuilder(entry)
    # |x| >= 512 (or inf, NaN) is __exp's special case (libm's lanes); |x| < 2^-54 returns
    # 1.0 + x (WANT_ROUNDING): x == 0, PyMC's initial points, stays on the vector code
    tiny, big = _glibc_exp_tiny_big(b, x)
    b.cbranch(_any(b, big), slow_bb, fast_bb)
    b.position_at_end(fast_bb)
    fast = _glibc_exp_fast(b, x, data, _table(module, "ptnumba_glibc_exp_tab", data.tab))
    b.ret(b.select(tiny, b.fadd(_splat(x.type, 1.0), x), fast))
    b.position_at_end(slow_bb)
    b.ret(lane_by_lane(b, libm, x))


# -- log: glibc 2.36 sysdeps/ieee754/dbl-64/e_log.c (__log), built with FMA (__log_fma) -----
# The fused multiply-adds are those GCC contracted in that build (read off libm's code):
# the table path is r = fma(z, invc, -1), w = fma(k, ln2hi, logc), lo = fma(k, ln2lo,
# (w - hi) + r), and the polynomial as fma(r3, fma(fma(r, A4, A3), r2, fma(r, A2, A1)),
# fma(r2, A0, lo)) + hi; the near-1 path contracts its splitting of r into rhi + rlo too.

_LOG_LO = 0x3FEE000000000000  # bits of 1 - 2^-4
_LOG_HI = 0x3FF1090000000000  # bits of 1 + 0x1.09p-4


def _gather_pairs(b: ir.IRBuilder, table: ir.GlobalVariable, slot, vty):
    """``table[slot]`` and ``table[slot + 1]`` per lane, as vectors of ``vty`` (``slot``
    even): one 16-byte load per lane (the pair), deinterleaved by shuffles. Not the
    gather instruction: on the CPU measured it was slower (CHANGELOG.md, "Exact lanes and
    vector math")."""
    n = vty.count
    pty = ir.VectorType(_I64, 2)
    parts = []
    for lane in range(n):
        s = b.extract_element(slot, _I32(lane))
        ptr = b.bitcast(b.gep(table, [_I64(0), s], inbounds=True), pty.as_pointer())
        parts.append(b.load(ptr, align=8))

    def concat(vs):
        while len(vs) > 1:
            w = vs[0].type.count
            idx = ir.Constant(ir.VectorType(_I32, 2 * w), [_I32(i) for i in range(2 * w)])
            vs = [b.shuffle_vector(vs[i], vs[i + 1], idx) for i in range(0, len(vs), 2)]
        return vs[0]

    # even lanes' pairs in one vector, odd lanes' in another: unpcklpd / unpckhpd of the two
    # (per 128-bit half) give the lanes in order, no cross-half shuffle
    ev, od = concat(parts[0::2]), concat(parts[1::2])
    # (lane i's pair starts at i in ev if i is even, at n + i - 1 in (ev, od) if it is odd)
    at = [i if i % 2 == 0 else n + i - 1 for i in range(n)]
    first = ir.Constant(ir.VectorType(_I32, n), [_I32(k) for k in at])
    second = ir.Constant(ir.VectorType(_I32, n), [_I32(k + 1) for k in at])
    return b.bitcast(b.shuffle_vector(ev, od, first), vty), b.bitcast(b.shuffle_vector(ev, od, second), vty)


def _glibc_log_table(b: ir.IRBuilder, x, data: LogData, table: ir.GlobalVariable):
    """__log's main path: x = 2^k z, log(x) = k ln2 + log(c) + log1p(z/c - 1) (x normal, > 0)."""
    vty = x.type
    ity = ir.VectorType(_I64, vty.count)
    ix = b.bitcast(x, ity)
    tmp = b.sub(ix, _splat(ity, LOG_OFF))
    slot = b.shl(b.and_(b.lshr(tmp, _splat(ity, 52 - 7)), _splat(ity, 127)), _splat(ity, 1))
    kd = b.sitofp(b.ashr(tmp, _splat(ity, 52)), vty)
    z = b.bitcast(b.sub(ix, b.and_(tmp, _splat(ity, 0xFFF << 52))), vty)
    invc, logc = _gather_pairs(b, table, slot, vty)
    A = [_splat(vty, a) for a in data.poly]
    r = _fma(b, z, invc, _splat(vty, -1.0))
    w = _fma(b, kd, _splat(vty, data.ln2hi), logc)
    hi = b.fadd(w, r)
    lo = _fma(b, kd, _splat(vty, data.ln2lo), b.fadd(b.fsub(w, hi), r))
    r2 = b.fmul(r, r)
    r3 = b.fmul(r, r2)
    p = _fma(b, _fma(b, r, A[4], A[3]), r2, _fma(b, r, A[2], A[1]))
    y = _fma(b, r3, p, _fma(b, r2, A[0], lo))
    return b.fadd(y, hi)


def _glibc_log_near1(b: ir.IRBuilder, x, data: LogData):
    """__log's path for 1 - 2^-4 < x < 1 + 0x1.09p-4: log1p(r) with r = x - 1 exact."""
    vty = x.type
    B = [_splat(vty, c) for c in data.poly1]
    r = b.fsub(x, _splat(vty, 1.0))
    r2 = b.fmul(r, r)
    r3 = b.fmul(r, r2)
    p1 = _fma(b, r2, B[3], _fma(b, r, B[2], B[1]))
    p2 = _fma(b, r2, B[6], _fma(b, r, B[5], B[4]))
    p3 = _fma(b, r3, B[10], _fma(b, r2, B[9], _fma(b, r, B[8], B[7])))
    poly = _fma(b, _fma(b, p3, r3, p2), r3, p1)
    rhi = _fma(b, _splat(vty, -(2.0**27)), r, _fma(b, r, _splat(vty, 2.0**27), r))  # r + w - w, w = r 2^27
    rlo = b.fsub(r, rhi)
    rhi2 = b.fmul(rhi, rhi)
    hi = _fma(b, rhi2, B[0], r)  # r + rhi^2 B0
    lo = _fma(b, rhi2, B[0], b.fsub(r, hi))  # r - hi + rhi^2 B0
    lo = _fma(b, b.fmul(B[0], rlo), b.fadd(r, rhi), lo)
    return b.fadd(hi, _fma(b, poly, r3, lo))


def _any(b: ir.IRBuilder, mask):
    mty = ir.IntType(mask.type.count)
    return b.icmp_unsigned("!=", b.bitcast(mask, mty), mty(0))


def _build_glibc_log(module: ir.Module, fn: ir.Function, libm: ir.Function, data: LogData):
    """Lanes that are not normal positive numbers (0, negative, subnormal, inf, NaN) make
    the vector call libm lane by lane; a vector takes the table path, the near-1 path, or
    (lanes of both) both and a blend."""
    x = fn.args[0]
    ity = ir.VectorType(_I64, x.type.count)
    mty = ir.IntType(x.type.count)
    names = ("entry", "paths", "table", "near1", "blend", "slow")
    entry, paths_bb, table_bb, near_bb, blend_bb, slow_bb = (fn.append_basic_block(s) for s in names)
    b = ir.IRBuilder(entry)
    ix = b.bitcast(x, ity)
    # not positive, normal and finite (top 16 bits outside 0x0010 to 0x7fef); NaN fails both
    normal = b.and_(b.fcmp_ordered(">=", x, _splat(x.type, 2.0**-1022)), b.fcmp_ordered("<=", x, _splat(x.type, np.finfo(np.float64).max)))
    special = b.not_(normal)
    b.cbranch(_any(b, special), slow_bb, paths_bb)
    b.position_at_end(paths_bb)
    near = b.icmp_unsigned("<", b.sub(ix, _splat(ity, _LOG_LO)), _splat(ity, _LOG_HI - _LOG_LO))
    bits = b.bitcast(near, mty)
    switch = b.switch(bits, blend_bb)
    switch.add_case(mty(0), table_bb)
    switch.add_case(mty((1 << x.type.count) - 1), near_bb)
    tab = _table(module, "ptnumba_glibc_log_tab", data.tab)
    b.position_at_end(table_bb)
    b.ret(_glibc_log_table(b, x, data, tab))
    b.position_at_end(near_bb)
    b.ret(_glibc_log_near1(b, x, data))
    b.position_at_end(blend_bb)
    b.ret(b.select(near, _glibc_log_near1(b, x, data), _glibc_log_table(b, x, data, tab)))
    b.position_at_end(slow_bb)
    b.ret(lane_by_lane(b, libm, x))


# -- pow: glibc 2.36 sysdeps/ieee754/dbl-64/e_pow.c (__pow), built with FMA (__pow_fma) -----
# Only its main path: x positive and normal, 2^-65 <= |y| < 2^63 (so sign_bias is 0), and
# exp_inline's fast path (2^-54 <= |y log x| < 512) or its tiny case (|y log x| < 2^-54,
# x == 1 among them: 1 + y log x); any other lane makes the vector call libm lane by lane. log_inline's fused multiply-adds are those of that build: t1 =
# fma(k, ln2hi, logc), lo1 = fma(k, ln2lo, logctail), lo3 = fma(ar, r, -ar2), the
# polynomial as fma(ar3, fma(ar2, fma(fma(r, A6, A5), ar2, fma(r, A4, A3)), fma(r, A2,
# A1)), ((lo1 + lo2) + lo3) + lo4); then ehi = y hi, elo = fma(y, lo, fma(y, hi, -ehi)).


def _glibc_pow_log(b: ir.IRBuilder, ix, data: PowData, table: ir.GlobalVariable):
    """e_pow.c's log_inline: (hi, tail) with hi + tail = log(x), x positive and normal."""
    ity = ix.type
    vty = ir.VectorType(_F64, ity.count)
    tmp = b.sub(ix, _splat(ity, POW_LOG_OFF))
    slot = b.shl(b.and_(b.lshr(tmp, _splat(ity, 52 - 7)), _splat(ity, 127)), _splat(ity, 2))
    kd = b.sitofp(b.ashr(tmp, _splat(ity, 52)), vty)
    z = b.bitcast(b.sub(ix, b.and_(tmp, _splat(ity, 0xFFF << 52))), vty)
    invc, _ = _gather_pairs(b, table, slot, vty)
    logc, logctail = _gather_pairs(b, table, b.add(slot, _splat(ity, 2)), vty)
    A = [_splat(vty, a) for a in data.poly]
    r = _fma(b, z, invc, _splat(vty, -1.0))
    t1 = _fma(b, kd, _splat(vty, data.ln2hi), logc)
    t2 = b.fadd(t1, r)
    lo1 = _fma(b, kd, _splat(vty, data.ln2lo), logctail)
    lo2 = b.fadd(b.fsub(t1, t2), r)
    ar = b.fmul(A[0], r)
    ar2 = b.fmul(r, ar)
    ar3 = b.fmul(r, ar2)
    hi = b.fadd(t2, ar2)
    lo3 = _fma(b, ar, r, b.fneg(ar2))
    lo4 = b.fadd(b.fsub(t2, hi), ar2)
    q = _fma(b, _fma(b, r, A[6], A[5]), ar2, _fma(b, r, A[4], A[3]))
    poly = _fma(b, ar2, q, _fma(b, r, A[2], A[1]))
    lo = _fma(b, ar3, poly, b.fadd(b.fadd(b.fadd(lo1, lo2), lo3), lo4))
    y = b.fadd(hi, lo)
    return y, b.fadd(b.fsub(hi, y), lo)


def _build_glibc_pow(module: ir.Module, fn: ir.Function, libm: ir.Function, data: PowData):
    x, y = fn.args
    ity = ir.VectorType(_I64, x.type.count)
    entry, log_bb, exp_bb, slow_bb = (fn.append_basic_block(s) for s in ("entry", "log", "exp", "slow"))
    b = ir.IRBuilder(entry)
    ix = b.bitcast(x, ity)
    # x positive, normal and finite (top 12 bits from 0x001 to 0x7fe), 2^-65 <= |y| < 2^63
    # (|y|'s exponent field from 0x3be to 0x43d); NaN fails the ordered compares
    ay = _fabs(b, y)
    ok = b.and_(
        b.and_(b.fcmp_ordered(">=", x, _splat(x.type, 2.0**-1022)), b.fcmp_ordered("<=", x, _splat(x.type, np.finfo(np.float64).max))),
        b.and_(b.fcmp_ordered(">=", ay, _splat(x.type, 2.0**-65)), b.fcmp_ordered("<", ay, _splat(x.type, 2.0**63))),
    )
    special = b.not_(ok)
    b.cbranch(_any(b, special), slow_bb, log_bb)
    b.position_at_end(log_bb)
    hi, lo = _glibc_pow_log(b, ix, data, _table(module, "ptnumba_glibc_pow_log_tab", data.tab))
    ehi = b.fmul(y, hi)
    elo = _fma(b, y, lo, _fma(b, y, hi, b.fneg(ehi)))
    # exp_inline: |ehi| >= 512 (or inf, NaN) is its special case (libm's lanes); |ehi| <
    # 2^-54 returns 1.0 + ehi (WANT_ROUNDING; sign_bias is 0 here): x == 1 gives 1.0
    tiny, big = _glibc_exp_tiny_big(b, ehi)
    b.cbranch(_any(b, big), slow_bb, exp_bb)
    b.position_at_end(exp_bb)
    fast = _glibc_exp_fast(b, ehi, data.exp, _table(module, "ptnumba_glibc_exp_tab", data.exp.tab), xtail=elo)
    b.ret(b.select(tiny, b.fadd(_splat(ehi.type, 1.0), ehi), fast))
    b.position_at_end(slow_bb)
    b.ret(lane_by_lane(b, libm, x, y))


def lane_by_lane(b: ir.IRBuilder, scalar: ir.Function, *vs):
    """``scalar`` called on each lane of the vectors ``vs`` (one per argument)."""
    out = ir.Constant(vs[0].type, ir.Undefined)
    for lane in range(vs[0].type.count):
        k = _I32(lane)
        out = b.insert_element(out, b.call(scalar, [b.extract_element(v, k) for v in vs]), k)
    return out


@dataclass(frozen=True)
class ExactLanes:
    """One libm function written on vectors: where its data comes from, how to build it."""

    data: Callable[[], object]  # () -> the data, or the reason there is none (a str)
    build: Callable[[ir.Module, ir.Function, ir.Function, object], None]  # (module, fn, libm's scalar, data)
    reason: str
    arity: int = 1  # arguments of the libm function (pow: 2)


# libm symbol -> its vector form with libm's bits
EXACT_LANES: dict[str, ExactLanes] = {
    "exp": ExactLanes(
        glibc_exp_data,
        _build_glibc_exp,
        "glibc __exp_fma: table exp, fixed fma sequence; constants and table read from the mapped libm",
    ),
    "log": ExactLanes(
        glibc_log_data,
        _build_glibc_log,
        "glibc __log_fma: table log and near-1 polynomial, fixed fma sequence; constants and table read from the mapped libm",
    ),
    "pow": ExactLanes(
        glibc_pow_data,
        _build_glibc_pow,
        "glibc __pow_fma's main path (x > 0 normal, |y log x| < 512, its tiny case 1 + y log x below 2^-54): "
        "log_inline and exp_inline, fixed fma "
        "sequence; tables read from the mapped libm; other lanes call libm",
        arity=2,
    ),
}


def define_variant(module: ir.Module, symbol: str, lanes: int, data) -> tuple[ir.Function, bool]:
    """``<lanes x double> ptnumba_exact<lanes>_<symbol>(v)`` of ``module``, and whether it was
    defined just now."""
    arity = EXACT_LANES[symbol].arity
    fn, new = vector_function(module, f"ptnumba_exact{lanes}_{symbol}", _F64, lanes, arity)
    if new:
        libm = module.globals.get(symbol) or ir.Function(module, ir.FunctionType(_F64, [_F64] * arity), symbol)
        EXACT_LANES[symbol].build(module, fn, libm, data)
    return fn, new


def vector_function(module: ir.Module, name: str, ety, lanes: int, arity: int = 1) -> tuple[ir.Function, bool]:
    """``<lanes x ety> name(<lanes x ety>, ...)`` (``arity`` arguments) of ``module`` (pure,
    linkonce_odr: not internal, the linker would rename duplicates) and whether it was just
    declared (no body yet)."""
    fn = module.globals.get(name)
    if fn is not None:
        return fn, False
    vty = ir.VectorType(ety, lanes)
    fn = ir.Function(module, ir.FunctionType(vty, [vty] * arity), name)
    fn.linkage = "linkonce_odr"
    mark_pure(fn)
    return fn, True


def probe_inputs(symbol: str) -> np.ndarray:
    """Inputs the self-check runs: every table slot and rounding boundary of its reduction,
    the fast path's edges, overflow/underflow/subnormal results, specials, random values."""
    if symbol == "log":
        return _log_probes()
    if symbol == "pow":
        return _pow_probes()
    rng = np.random.default_rng(20261201)
    k = np.arange(-128 * 9, 128 * 9 + 1)
    near_k = k * (np.log(2.0) / 128)
    half = (k + 0.5) * (np.log(2.0) / 128)
    edges = np.array([2.0**-54, 512.0, 709.782712893384, 709.79, -708.39641853226, -745.1332191019411, -745.14])
    edges = np.concatenate([edges, -edges])
    around = np.concatenate([np.nextafter(edges, np.inf), np.nextafter(edges, -np.inf), edges])
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 5e-324, 1.0, -1.0])
    mags = np.exp2(rng.uniform(-60, 10, 60_000)) * rng.choice([-1.0, 1.0], 60_000)
    wide = rng.uniform(-760.0, 720.0, 60_000)
    unit = rng.uniform(-1.0, 1.0, 20_000)
    # below the fast path (1 + x): zeros and tiny values in whole vectors, then mixed in
    tiny = np.concatenate([np.zeros(400), -np.zeros(400), np.exp2(rng.uniform(-1074, -54, 20_000)) * rng.choice([-1.0, 1.0], 20_000)])
    tiny = np.concatenate([tiny, rng.permutation(np.concatenate([tiny[:4000], unit[:4000]]))])
    vals = np.concatenate([near_k, half, np.nextafter(half, np.inf), np.nextafter(half, -np.inf), around, specials, mags, wide, unit, tiny])
    return np.ascontiguousarray(vals, dtype=np.float64)


def _log_probes() -> np.ndarray:
    """log's probes: both ends and the middle of every table subinterval at several
    exponents, the near-1 path's edges and its neighbourhood of 1, powers of two,
    subnormals, specials and negatives (libm's lanes), random magnitudes over the range."""
    rng = np.random.default_rng(20261202)
    i = np.arange(128, dtype=np.uint64)
    starts = (np.uint64(LOG_OFF) + (i << np.uint64(45))).view(np.float64)
    mids = (np.uint64(LOG_OFF) + (i << np.uint64(45)) + np.uint64(1 << 44)).view(np.float64)
    cells = np.concatenate([starts, np.nextafter(starts, 0.0), np.nextafter(starts, 2.0), mids])
    scaled = np.concatenate([cells * 2.0**e for e in (-1022, -600, -60, -1, 0, 1, 7, 60, 600, 1022)])
    edges = np.array([_LOG_LO, _LOG_HI], dtype=np.uint64).view(np.float64)
    edges = np.concatenate([edges, np.nextafter(edges, 0.0), np.nextafter(edges, 2.0)])
    one = np.nextafter(1.0, 2.0) - 1.0
    near1 = np.concatenate([1.0 + np.arange(-300, 301) * one / 2, 1.0 + rng.uniform(-1 / 16, 0.0646, 30_000)])
    powers = 2.0 ** np.arange(-1074, 1024, dtype=np.float64)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, -1.0, -5e-324, 5e-324, 2.2250738585072014e-308, np.nextafter(2.2250738585072014e-308, 0.0), 1.7976931348623157e308])
    subnormal = rng.uniform(0.0, 2.2250738585072014e-308, 2000)
    mags = np.exp2(rng.uniform(-1074, 1024, 60_000))
    unit = rng.uniform(0.0, 4.0, 30_000)
    neg = -np.exp2(rng.uniform(-40, 40, 500))
    vals = np.concatenate([scaled, edges, near1, powers, specials, subnormal, mags, unit, neg])
    # whole vectors of near-1 lanes, of table-path lanes, of libm's lanes, then all mixed
    # (each of the vector code's paths runs on its own and blended)
    bits = vals.view(np.uint64)
    near = (bits - np.uint64(_LOG_LO)) < np.uint64(_LOG_HI - _LOG_LO)
    special = ((bits >> np.uint64(48)) - np.uint64(0x10)) >= np.uint64(0x7FE0)
    groups = [vals[near], vals[~near & ~special], vals[special]]
    mixed = rng.permutation(np.concatenate([g[rng.choice(g.size, 6000)] for g in groups]))
    # near-1 and table lanes blended without libm's: with three kinds shuffled, a vector of
    # 8 lanes (AVX-512) holds no libm lane only (2/3)^8 = 4% of the time
    blended = rng.permutation(np.concatenate([g[rng.choice(g.size, 3000)] for g in groups[:2]]))
    return np.ascontiguousarray(np.concatenate([*(rng.permutation(g) for g in groups), mixed, blended]), dtype=np.float64)


def _pow_probes() -> np.ndarray:
    """pow's probes, a (2, n) array of (x, y): the exponents PyMC graphs use (-1, 2, 0.5,
    -0.5, small integers) and random ones on every log-table subinterval, x at powers of two
    and random magnitudes, results near overflow, underflow and the subnormal range, near
    1 (tiny y log x), and specials (libm's lanes: x <= 0, inf, NaN, subnormal x, huge y)."""
    rng = np.random.default_rng(20261204)
    i = np.arange(128, dtype=np.uint64)
    cells = (np.uint64(POW_LOG_OFF) + (i << np.uint64(45)) + np.uint64(1 << 44)).view(np.float64)
    starts = (np.uint64(POW_LOG_OFF) + (i << np.uint64(45))).view(np.float64)
    cells = np.concatenate([cells, starts, np.nextafter(starts, 0.0), np.nextafter(starts, 2.0)])
    xs_list, ys_list = [], []

    def add(x, y):
        x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
        xs_list.append(x.ravel())
        ys_list.append(y.ravel())

    common = np.array([-1.0, 2.0, 0.5, -0.5, 3.0, -2.0, 1.5, -1.5, 0.25, 1 / 3, 10.0, -10.0, 7.0])
    for yv in common:
        add(cells * 2.0 ** rng.integers(-60, 60, cells.size), yv)
        add(np.exp2(rng.uniform(-1022, 1023, 3000) / max(1.0, abs(yv))), yv)
    add(rng.gamma(2.0, 1.0, 20_000), rng.uniform(-4, 4, 20_000))
    add(np.exp2(rng.uniform(-1022, 1023, 20_000)), rng.uniform(-1, 1, 20_000) * np.exp2(rng.uniform(-70, 70, 20_000)))
    add(rng.uniform(0.0, 3.0, 20_000), rng.integers(-30, 30, 20_000).astype(np.float64))
    add(2.0 ** np.arange(-1022, 1024, dtype=np.float64), rng.uniform(-2, 2, 2046))
    # results near 2^1024 and 2^-1022 (exp_inline's edge at |y log x| = 512 and beyond)
    t = rng.uniform(500.0, 760.0, 20_000) * rng.choice([-1.0, 1.0], 20_000)
    xv = np.exp2(rng.uniform(0.5, 40.0, 20_000))
    add(xv, t / np.log(xv))
    # near 1: y log x tiny (exp_inline's 2^-54 edge, crossed both ways; x == 1 exactly)
    add(1.0 + rng.uniform(-1e-10, 1e-10, 5000), rng.uniform(-1e-5, 1e-5, 5000))
    add(1.0 + rng.uniform(-1e-12, 1e-12, 20_000), rng.uniform(-1e-4, 1e-4, 20_000))
    add(1.0, np.concatenate([common, rng.uniform(-1e6, 1e6, 2000)]))
    add(np.nextafter(1.0, rng.choice([0.0, 2.0], 2000)), rng.uniform(-1e6, 1e6, 2000))
    special_x = np.array([0.0, -0.0, 1.0, -1.0, -2.0, np.inf, -np.inf, np.nan, 5e-324, 1e-310, 2.2250738585072014e-308, 1.7976931348623157e308])
    special_y = np.array([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 3.0, np.inf, -np.inf, np.nan, 2.0**-66, 2.0**63, 1e300, 5e-324])
    gx, gy = np.meshgrid(special_x, special_y)
    add(gx, gy)
    add(np.resize(special_x, 20_000), rng.uniform(-3, 3, 20_000))
    vals = np.stack([np.concatenate(xs_list), np.concatenate(ys_list)])
    # the lanes libm's main path takes (roughly: numpy's log) fill whole vectors of their own,
    # so the vector code runs on them; then the others, then both mixed
    with np.errstate(all="ignore"):
        t = vals[1] * np.log(vals[0])
        main = (vals[0] >= 2.2250738585072014e-308) & (np.abs(vals[1]) >= 2.0**-65) & (np.abs(vals[1]) < 2.0**63)
        main &= np.isfinite(vals[0]) & (np.abs(t) < 512)
    groups = [vals[:, main], vals[:, ~main]]
    mixed = np.concatenate([g[:, rng.choice(g.shape[1], 4000)] for g in groups], axis=1)
    return np.ascontiguousarray(np.concatenate([g[:, rng.permutation(g.shape[1])] for g in (*groups, mixed)], axis=1))


def _columns(xs: np.ndarray) -> np.ndarray:
    """The inputs as (arity, n): a 1-d array is one argument's."""
    return np.ascontiguousarray(np.atleast_2d(np.asarray(xs, dtype=np.float64)))


def _run_compiled(symbol: str, lanes: int, data, xs: np.ndarray) -> np.ndarray:
    """The vector form with ``data`` on ``xs`` (1-d, or (arity, n)), a whole number of
    vectors of them (the tail that does not fill a vector is left out)."""
    cols = _columns(xs)
    arity = cols.shape[0]
    module = ir.Module(name=f"ptnumba_exact_check_{symbol}")
    variant, _ = define_variant(module, symbol, lanes, data)
    vty = variant.function_type.return_type
    ptr = ir.PointerType(_F64)
    drive = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * (arity + 1) + [_I64]), "drive")
    entry, loop, done = (drive.append_basic_block(n) for n in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(_I64)
    i.add_incoming(_I64(0), entry)

    def at(p):
        return b.bitcast(b.gep(p, [b.mul(i, _I64(lanes))]), ir.PointerType(vty))

    args = [b.load(at(drive.args[k]), align=8) for k in range(arity)]
    b.store(b.call(variant, args), at(drive.args[arity]), align=8)
    nxt = b.add(i, _I64(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_unsigned("<", nxt, drive.args[arity + 1]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    n = cols.shape[1] // lanes * lanes
    return _drive(module, np.ascontiguousarray(cols[:, :n]), n // lanes, opt=2)


def _drive(module: ir.Module, x: np.ndarray, count: int, opt: int) -> np.ndarray:
    """Compile ``module`` and run its ``drive(x0, ..., y, count)`` on the rows of ``x``
    (arity, n): ``y``, n doubles."""
    llb.initialize_native_target()
    llb.initialize_native_asmprinter()
    mod = llb.parse_assembly(str(module))
    mod.verify()
    features = ",".join(sorted(target_features()))
    tm = llb.Target.from_default_triple().create_target_machine(cpu=llb.get_host_cpu_name(), features=features, opt=opt)
    engine = llb.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    arity = x.shape[0]
    y = np.empty(x.shape[1])
    proto = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (arity + 1), ctypes.c_int64)
    fptr = proto(engine.get_function_address("drive"))
    fptr(*[x[k].ctypes.data for k in range(arity)], y.ctypes.data, count)
    del engine
    return y


def libm_reference(symbol: str, xs: np.ndarray) -> np.ndarray:
    """libm's own scalar ``symbol`` on each of ``xs`` (1-d, or (arity, n)): the symbol numba's
    code calls, called once per element at its address from a compiled loop (through a
    pointer LLVM cannot see into: no libcall folding, no vectorizing; the same call a ctypes
    call makes, without a Python loop over the probes)."""
    cols = _columns(xs)
    arity, n = cols.shape
    module = ir.Module(name=f"ptnumba_libm_reference_{symbol}")
    ptr = ir.PointerType(_F64)
    fty = ir.FunctionType(_F64, [_F64] * arity)
    drive = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * (arity + 1) + [_I64]), "drive")
    entry, loop, done = (drive.append_basic_block(k) for k in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_unsigned(">", drive.args[arity + 1], _I64(0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(_I64)
    i.add_incoming(_I64(0), entry)
    libm = b.inttoptr(_I64(llb.address_of_symbol(symbol)), fty.as_pointer())
    args = [b.load(b.gep(drive.args[k], [i])) for k in range(arity)]
    b.store(b.call(libm, args), b.gep(drive.args[arity], [i]))
    nxt = b.add(i, _I64(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_unsigned("<", nxt, drive.args[arity + 1]), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return _drive(module, cols, n, opt=0)


NOT_COMPILED = "self-check did not compile"  # a verdict that is never stored (it may not last)


def self_check(symbol: str, lanes: int, data) -> tuple[bool, str]:
    """Compile ``symbol``'s vector form with ``data`` and compare it bit for bit with libm
    on `probe_inputs` (NaN payloads aside): (identical, what was found)."""
    xs = _columns(probe_inputs(symbol))
    try:
        got = _run_compiled(symbol, lanes, data, xs)
    except Exception as err:  # a compile failure turns the entry off, never the kernel
        return False, f"{NOT_COMPILED}: {err}"
    want = libm_reference(symbol, xs[:, : len(got)])
    same = (got.view(np.uint64) == want.view(np.uint64)) | (np.isnan(got) & np.isnan(want))
    if not same.all():
        bad = int(np.argmin(same))
        at = ", ".join(repr(float(v)) for v in xs[:, bad])
        return False, f"self-check: {int((~same).sum())} of {len(got)} probes differ from libm (at {at})"
    return True, f"{EXACT_LANES[symbol].reason}; self-check {len(got):,} probes bit-identical"


_STATUS: dict[tuple[str, int], tuple[bool, str]] = {}


def status(symbol: str, lanes: int) -> tuple[bool, str]:
    """(usable, why) for ``symbol``'s exact lanes at ``lanes`` doubles per vector, decided
    once per process."""
    key = (symbol, lanes)
    if key not in _STATUS:
        if symbol not in EXACT_LANES:
            return False, f"no exact vector form of {symbol}"
        if settings.EXACT_LANES.value() == "off":
            return False, f"{settings.EXACT_LANES.env}=off"
        data = EXACT_LANES[symbol].data()
        _STATUS[key] = (False, data) if isinstance(data, str) else _checked(symbol, lanes, data)
    return _STATUS[key]


def check_key(symbol: str, lanes: int, data) -> check_cache.CheckKey:
    """What `self_check` of ``symbol`` at ``lanes`` with ``data`` depends on (its disk key)."""
    import llvmlite

    return check_cache.CheckKey(
        symbol=symbol,
        lanes=lanes,
        generator=f"{GENERATOR_VERSION}:{GENERATOR_DIGEST}",
        data=hashlib.sha256(repr(data).encode()).hexdigest(),
        libm=f"{data.path}:{disk_cache.file_digest(data.path)}",
        libc=_libc_version(),
        cpu=llb.get_host_cpu_name(),
        features=",".join(sorted(target_features())),
        toolchain=f"llvmlite {llvmlite.__version__}, LLVM {llb.llvm_version_info}, numpy {np.__version__}",
    )


def _libc_version() -> str:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        return ""


def _checked(symbol: str, lanes: int, data) -> tuple[bool, str]:
    """`self_check`, or its verdict from an earlier process (`check_cache`); a verdict found
    now is stored for the next one, unless the check did not compile (that may not last)."""
    key = check_key(symbol, lanes, data)
    directory = check_cache.default_directory()
    cached = check_cache.load(directory, key)
    if cached is not None:
        return cached.ok, cached.why
    ok, why = self_check(symbol, lanes, data)
    if not why.startswith(NOT_COMPILED):
        check_cache.store(directory, key, check_cache.Verdict(ok, why))
    return ok, why


@contextmanager
def turned_off(symbols, lanes: int, why: str):
    """Within the block, ``symbols``' exact lanes at ``lanes`` count as off (``why``): kernels
    compiled there call libm per lane (for before/after measurements)."""
    saved = {s: status(s, lanes) for s in symbols if s in EXACT_LANES}
    try:
        for s in saved:
            _STATUS[(s, lanes)] = (False, why)
        yield
    finally:
        for s, st in saved.items():
            _STATUS[(s, lanes)] = st


def report() -> list[str]:
    """One line per exact-lane entry this process has decided on (for ``explain``)."""
    return [f"{sym} x{lanes}: {'on' if ok else 'off'} ({why})" for (sym, lanes), (ok, why) in sorted(_STATUS.items())]


def exact_variant(module: ir.Module, symbol: str, fty, lanes: int) -> ir.Function | None:
    """The exact vector variant of ``symbol`` for ``module`` if it passed its self-check
    (kept alive until vectorization once, when it is defined)."""
    if fty != _F64 or symbol not in EXACT_LANES or not status(symbol, lanes)[0]:
        return None
    fn, new = define_variant(module, symbol, lanes, EXACT_LANES[symbol].data())
    if new:
        keep_alive(module, fn)
    return fn


def cache_key() -> tuple:
    """What exact lanes depend on, for kernel cache keys: the setting and the libm data
    (a kernel compiled with them off, or against another libm, is not reused)."""
    if settings.EXACT_LANES.value() == "off":
        return ("off",)
    key = []
    for symbol, entry in sorted(EXACT_LANES.items()):
        data = entry.data()
        key.append((symbol, data if isinstance(data, str) else (data.path, data.offset)))
    return ("on", *key)


def available(symbol: str, dtype: str) -> bool:
    """Whether a lane call of ``symbol`` in ``dtype`` runs as exact vector code."""
    isa = target_isa()
    if dtype != "float64" or isa is None or symbol not in EXACT_LANES:
        return False
    return status(symbol, lane_count(isa, dtype))[0]


__all__ = ["EXACT_LANES", "NOT_COMPILED", "available", "cache_key", "check_key", "exact_variant", "lane_by_lane", "probe_inputs", "report", "self_check", "status", "vector_function"]
