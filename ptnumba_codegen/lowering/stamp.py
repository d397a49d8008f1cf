"""Set fast-math flags on the instructions one scalar rule emitted.

The single-purpose IR pass of the project (compare numba's ``core/fastmathpass.py``):
around each rule, remember which instructions the function already had, then give every
floating-point instruction the rule added exactly the flags of its class. The kernels
are compiled with ``fastmath=False``, so nothing else adds flags afterwards.

Integer instructions lose their overflow flags (`WRAPPING_OPNAMES`): numba emits signed
``add``/``sub``/``mul`` with ``nsw``, which lets LLVM assume a signed overflow never
happens. Once several ops are fused into one body it uses that across them: in
``(x + 7) // d`` it decides the quotient's sign from ``x > -7``, so at ``x = 2**63 - 1``
the floor division is adjusted the wrong way. The graph as written (one kernel per op,
each result stored) and numpy wrap in two's complement; so do the generator's bodies.
"""

from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir

# The instructions numba's own fastmath pass flags, plus fneg.
FLAGGED_OPNAMES = frozenset({"fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "fcmp"})
# Integer instructions whose ``nsw``/``nuw`` flags are dropped: they wrap, as numpy does.
WRAPPING_OPNAMES = frozenset({"add", "sub", "mul", "shl"})
OVERFLOW_FLAGS = frozenset({"nsw", "nuw"})


def _is_float_type(ty) -> bool:
    if isinstance(ty, ir.VectorType):
        ty = ty.element
    return isinstance(ty, ir.types._BaseFloatType)


def _instructions(function: ir.Function):
    for block in function.blocks:
        yield from block.instructions


def set_flags(instr: ir.Instruction, flags: tuple[str, ...]) -> bool:
    """Give ``instr`` exactly ``flags`` if it is a float instruction; True if it was one."""
    if isinstance(instr, ir.CallInstr):
        if not _is_float_type(instr.type):
            return False
        instr.fastmath = ir.instructions.FastMathFlags(flags)
        return True
    if instr.opname in FLAGGED_OPNAMES:
        instr.flags[:] = list(flags)
        return True
    if instr.opname in WRAPPING_OPNAMES:
        instr.flags[:] = [f for f in instr.flags if f not in OVERFLOW_FLAGS]
    return False


# The "already there" sets of the stamps currently open, innermost last: an inner stamp
# (e.g. the body of a ScalarLoop) claims its instructions so the outer one leaves them.
_OPEN: list[set[int]] = []


@contextmanager
def stamp(builder: ir.IRBuilder, flags: tuple[str, ...], record: list | None = None):
    """Flag every float instruction emitted inside the ``with`` block.

    ``record`` (optional) receives ``(opname, flags)`` of each flagged instruction, which
    ``explain`` and the tests use to see what the generator emitted.
    """
    function = builder.function
    before = {id(i) for i in _instructions(function)}
    _OPEN.append(before)
    try:
        yield
    finally:
        _OPEN.pop()
    new = [i for i in _instructions(function) if id(i) not in before]
    for instr in new:
        if set_flags(instr, flags) and record is not None:
            record.append((instr.opname, tuple(flags)))
    for outer in _OPEN:
        outer.update(id(i) for i in new)
