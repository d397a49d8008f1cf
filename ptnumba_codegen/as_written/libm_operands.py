"""Libm calls whose operands the reference reads from arrays: constants stay hidden.

The reference (``Mode(linker="numba", optimizer=None)``, ``numba__fastmath=False``) runs
``x ** 2.0`` as an Elemwise whose exponent is an operand like any other (``2.0`` broadcast
by a DimShuffle, never folded into the loop): numba's ``llvm.pow`` then calls libm's
``pow`` on a value LLVM cannot see. An inlined as-written copy fuses with its neighbours,
and fusion puts the constant into the kernel's scalar program: there, even without
fast-math flags, LLVM rewrites ``pow(x, 2.0)`` to ``x * x``, ``pow(x, -1.0)`` to ``1 / x``,
``pow(x, 0.5)`` to ``sqrt`` (with fixups), ``pow(2.0, y)`` to ``exp2(y)``: correctly
rounded, where glibc's ``pow`` is not, so ties flip (``le(x ** 2.0, x * x)`` at 61 of 100k
points).

`PowAsWritten` is ``pow`` with that promise: each of its constant float operands reaches
libm as the reference passes it (cast to the output's dtype as the reference casts it,
a float32 ``-0.5`` upcast exactly), through an opaque move LLVM cannot fold
(`ptnumba_codegen.lowering.rules`: a strict instruction's constant operands go through an
empty inline ``asm``, hoisted out of the loop). The copies get it where a float pow has
an operand computed from constants only (`mark_pows`): in `InlineAsWritten` before a
copy is put back, and in an opaque copy's own compilation (`lowering`) before fusion.
A pow that a robust rule lets go keeps its flags (and LLVM's rewrites: the rule covers
every implementation); a pow with no constant operand keeps its op (LLVM sees nothing
to fold) and merges with the rest's.
"""

from __future__ import annotations

from pytensor.graph.basic import Constant
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.scalar import basic as ps
from pytensor.tensor.elemwise import Elemwise

from ptnumba_codegen.lowering import rules


class PowAsWritten(ps.Pow):
    """``pow`` whose constant operands libm reads as values LLVM cannot fold (see above)."""

    # policies name it as pow: ``[ops.Pow]`` applies to it (`analysis.program.Instr.op_name`)
    policy_op_name = "Pow"
    # libm's pow of its operands' values, never LLVM's folding of a constant exponent
    # (`analysis.class_rules` computes some such pows by class)
    constants_reach_libm = True


pow_as_written = PowAsWritten(ps.upcast_out_min8, name="pow_as_written")

# its lowering: pow's rule, with a strict instruction's constant operands moved out of LLVM's sight
rules.register(PowAsWritten, rules.libm_operands(rules.RULES[ps.Pow]))


def from_constants(var) -> bool:
    """Computed from constants only (``DimShuffle(2.0)``): a constant once folded."""
    stack, seen = [var], set()
    while stack:
        v = stack.pop()
        if v in seen or isinstance(v, Constant):
            continue
        seen.add(v)
        if v.owner is None:
            return False
        stack.extend(v.owner.inputs)
    return True


def _float(var) -> bool:
    return str(getattr(var.type, "dtype", "")).startswith("float")


@node_rewriter([Elemwise])
def mark_pows(fgraph, node):
    """A float ``Elemwise(pow)`` with an operand computed from constants: `PowAsWritten`."""
    if type(node.op.scalar_op) is not ps.Pow or not _float(node.outputs[0]):
        return None
    if not any(from_constants(v) for v in node.inputs):
        return None
    op = Elemwise(pow_as_written, name=node.op.name, nfunc_spec=node.op.nfunc_spec)
    out = op.make_node(*node.inputs).outputs
    if [o.type for o in out] != [o.type for o in node.outputs]:
        return None
    return out
