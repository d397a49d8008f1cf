"""A small IR vocabulary for writing vector functions as formulas.

`Simd` emits instructions on vectors of one float type through an ``IRBuilder``; `F` and
`M` wrap its float and mask values so a formula reads like arithmetic (``a * b + 1.0``,
``x < 8.0``, ``select(m, a, b)``). No instruction carries fast-math flags: every operation
is IEEE-exact as written, so a lane's result depends on its input alone and the compiled
function gives the same bits however wide the vector it runs in. ``fma`` is the fused
``llvm.fma`` (one rounding), and `two_sum` / `two_prod` give the exact rounding errors of
a sum and a product, the building blocks of the double-double parts of a formula.
"""

from __future__ import annotations

from llvmlite import ir


class Simd:
    def __init__(self, builder: ir.IRBuilder, fty, lanes: int):
        self.b = builder
        self.fty = fty
        self.lanes = lanes
        self.ty = ir.VectorType(fty, lanes)
        self.ibits = 32 if isinstance(fty, ir.FloatType) else 64
        self.ity = ir.VectorType(ir.IntType(self.ibits), lanes)

    # values
    def const(self, v: float) -> ir.Constant:
        return ir.Constant(self.ty, [ir.Constant(self.fty, float(v))] * self.lanes)

    def iconst(self, v: int) -> ir.Constant:
        return ir.Constant(self.ity, [ir.Constant(ir.IntType(self.ibits), int(v))] * self.lanes)

    def wrap(self, v) -> F:
        return v if isinstance(v, F) else F(self, v if isinstance(v, ir.Value) else self.const(v))

    def _intrinsic(self, name, *args) -> F:
        # llvmlite's declare_intrinsic knows no vector types: declare name.v<N>f<bits>
        full = f"{name}.v{self.lanes}f{self.ibits}"
        module = self.b.module
        fn = module.globals.get(full) or ir.Function(module, ir.FunctionType(self.ty, [self.ty] * len(args)), full)
        return F(self, self.b.call(fn, [self.wrap(a).v for a in args]))

    # operations that are not operators
    def fma(self, a, b, c) -> F:
        """a * b + c with one rounding."""
        return self._intrinsic("llvm.fma", a, b, c)

    def rint(self, x) -> F:
        """Round to the nearest integer, ties to even."""
        return self._intrinsic("llvm.rint", x)

    def fabs(self, x) -> F:
        return self._intrinsic("llvm.fabs", x)

    def select(self, m: M, a, b) -> F:
        return F(self, self.b.select(m.v, self.wrap(a).v, self.wrap(b).v))

    def any(self, m: M) -> ir.Value:
        """An i1: is any lane of the mask set?"""
        mty = m.v.type
        name = f"llvm.vector.reduce.or.v{self.lanes}i1"
        fn = self.b.module.globals.get(name) or ir.Function(
            self.b.module, ir.FunctionType(ir.IntType(1), [mty]), name
        )
        return self.b.call(fn, [m.v])

    def horner(self, x, coeffs) -> F:
        """sum(coeffs[i] * x**i), coefficients in ascending order."""
        x = self.wrap(x)
        acc = self.wrap(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, c)
        return acc

    # bit-level access (log's exponent extraction)
    def to_bits(self, x) -> ir.Value:
        return self.b.bitcast(self.wrap(x).v, self.ity)

    def from_bits(self, i: ir.Value) -> F:
        return F(self, self.b.bitcast(i, self.ty))

    def int_to_float(self, i: ir.Value) -> F:
        return F(self, self.b.sitofp(i, self.ty))

    # exact error terms
    def two_sum(self, a, b) -> tuple[F, F]:
        """s + e == a + b exactly, s = fl(a + b)."""
        a, b = self.wrap(a), self.wrap(b)
        s = a + b
        bb = s - a
        return s, (a - (s - bb)) + (b - bb)

    def fast_two_sum(self, a, b) -> tuple[F, F]:
        """As two_sum, when |a| >= |b| (or a == 0)."""
        a, b = self.wrap(a), self.wrap(b)
        s = a + b
        return s, b - (s - a)

    def two_prod(self, a, b) -> tuple[F, F]:
        """p + e == a * b exactly, p = fl(a * b) (barring underflow)."""
        a, b = self.wrap(a), self.wrap(b)
        p = a * b
        return p, self.fma(a, b, -p)


class F:
    """A float vector value; arithmetic operators emit IR."""

    __slots__ = ("s", "v")

    def __init__(self, s: Simd, v: ir.Value):
        self.s = s
        self.v = v

    def _o(self, o) -> ir.Value:
        return self.s.wrap(o).v

    def _bin(self, op, a, b) -> F:
        return F(self.s, getattr(self.s.b, op)(a, b))

    def __add__(self, o):
        return self._bin("fadd", self.v, self._o(o))

    def __radd__(self, o):
        return self._bin("fadd", self._o(o), self.v)

    def __sub__(self, o):
        return self._bin("fsub", self.v, self._o(o))

    def __rsub__(self, o):
        return self._bin("fsub", self._o(o), self.v)

    def __mul__(self, o):
        return self._bin("fmul", self.v, self._o(o))

    def __rmul__(self, o):
        return self._bin("fmul", self._o(o), self.v)

    def __truediv__(self, o):
        return self._bin("fdiv", self.v, self._o(o))

    def __rtruediv__(self, o):
        return self._bin("fdiv", self._o(o), self.v)

    def __neg__(self):
        return F(self.s, self.s.b.fneg(self.v))

    def _cmp(self, op, o, ordered=True) -> M:
        fn = self.s.b.fcmp_ordered if ordered else self.s.b.fcmp_unordered
        return M(self.s, fn(op, self.v, self._o(o)))

    # ordered comparisons: false when either side is NaN
    def __lt__(self, o):
        return self._cmp("<", o)

    def __le__(self, o):
        return self._cmp("<=", o)

    def __gt__(self, o):
        return self._cmp(">", o)

    def __ge__(self, o):
        return self._cmp(">=", o)

    def eq(self, o) -> M:
        return self._cmp("==", o)

    def isnan(self) -> M:
        return M(self.s, self.s.b.fcmp_unordered("uno", self.v, self.v))

    __hash__ = None


class M:
    """A lane mask (vector of i1)."""

    __slots__ = ("s", "v")

    def __init__(self, s: Simd, v: ir.Value):
        self.s = s
        self.v = v

    def __and__(self, o: M) -> M:
        return M(self.s, self.s.b.and_(self.v, o.v))

    def __or__(self, o: M) -> M:
        return M(self.s, self.s.b.or_(self.v, o.v))

    def __invert__(self) -> M:
        return M(self.s, self.s.b.not_(self.v))
