"""A flat SSA view of the scalar math of one kernel node.

A `Program` is what the analysis classifies, the lowering emits and the cache key
hashes: nested ``Composite`` graphs are inlined, constants become values, and every
value carries its dtype. Pure Python over pytensor's scalar graph; no numba.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.scalar.basic import Composite, ScalarOp


@dataclass(frozen=True)
class Instr:
    op: ScalarOp
    inputs: tuple[int, ...]  # value ids
    outputs: tuple[int, ...]

    @property
    def op_name(self) -> str:
        """The name policies give the op (``[ops.<name>]``): its class's, unless the class
        says it is another op's (`as_written.libm_operands.PowAsWritten` is ``Pow``)."""
        return getattr(type(self.op), "policy_op_name", type(self.op).__name__)


@dataclass(frozen=True)
class Program:
    dtypes: tuple[str, ...]  # dtype of every value id
    inputs: tuple[int, ...]
    constants: tuple[tuple[int, object], ...]  # (value id, python/numpy scalar)
    instrs: tuple[Instr, ...]
    outputs: tuple[int, ...]

    @property
    def input_dtypes(self) -> tuple[str, ...]:
        return tuple(self.dtypes[i] for i in self.inputs)

    @property
    def output_dtypes(self) -> tuple[str, ...]:
        return tuple(self.dtypes[i] for i in self.outputs)

    def producers(self) -> dict[int, int]:
        """value id -> index of the instruction computing it."""
        return {out: k for k, ins in enumerate(self.instrs) for out in ins.outputs}

    def consumers(self) -> dict[int, list[int]]:
        uses: dict[int, list[int]] = {}
        for k, ins in enumerate(self.instrs):
            for v in ins.inputs:
                uses.setdefault(v, []).append(k)
        return uses

    def fingerprint(self) -> str:
        """A stable hash of the program's structure, ops, dtypes and constant values."""
        parts = [repr(self.dtypes), repr(self.inputs), repr(self.outputs)]
        parts += [f"c{vid}={_constant_key(val)}" for vid, val in self.constants]
        parts += [f"{op_key(i.op)}{i.inputs}->{i.outputs}" for i in self.instrs]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()

    def describe(self) -> list[str]:
        """One readable line per instruction, e.g. ``v5 = Mul(v4, v2, v1, v0)``."""
        const = dict(self.constants)

        def name(v):
            return repr(const[v]) if v in const else f"v{v}"

        return [
            f"{', '.join(name(o) for o in i.outputs)} = {i.op_name}({', '.join(name(v) for v in i.inputs)})"
            for i in self.instrs
        ]


def _constant_key(value) -> str:
    arr = np.asarray(value)
    return f"{arr.dtype.str}:{arr.tobytes().hex()}"


def op_key(op: ScalarOp) -> str:
    """What identifies a scalar op's generated code: its class and its parameters."""
    cls = type(op)
    key = f"{cls.__module__}.{cls.__qualname__}[{op}]"
    if isinstance(op, Composite):  # str() elides large graphs
        key += from_scalar_op(op, tuple(i.type.dtype for i in op.inputs)).fingerprint()
    elif hasattr(op, "fgraph"):  # ScalarLoop and other inner-graph ops
        key += hashlib.sha256(str([(str(n.op), n.inputs) for n in op.fgraph.toposort()]).encode()).hexdigest()
    o_type = getattr(op, "o_type", None)
    if o_type is not None:
        key += f"<{o_type.dtype}>"
    return key


class _Builder:
    def __init__(self):
        self.dtypes: list[str] = []
        self.constants: list[tuple[int, object]] = []
        self.instrs: list[Instr] = []

    def new_value(self, dtype: str) -> int:
        self.dtypes.append(dtype)
        return len(self.dtypes) - 1

    def inline(self, fgraph, input_ids: list[int]) -> list[int]:
        env = dict(zip(fgraph.inputs, input_ids, strict=True))

        def value_of(var):
            if var not in env:
                if not isinstance(var, Constant):
                    raise ValueError(f"free variable {var} in scalar graph")
                vid = self.new_value(var.type.dtype)
                self.constants.append((vid, var.data))
                env[var] = vid
            return env[var]

        for node in fgraph.toposort():
            ins = [value_of(v) for v in node.inputs]
            if isinstance(node.op, Composite):
                outs = self.inline(node.op.fgraph, ins)
            else:
                outs = [self.new_value(o.type.dtype) for o in node.outputs]
                self.instrs.append(Instr(node.op, tuple(ins), tuple(outs)))
            env.update(zip(node.outputs, outs, strict=True))
        return [value_of(v) for v in fgraph.outputs]


# (id of the scalar op, input dtypes, output dtypes) -> (the op, its Program): the pass's
# analysis, the range and requirement propagation and planning each flatten a kernel's
# scalar op (the same few ops, flattened several times each per compile). The op is held
# so its id stays its own.
_PROGRAMS: OrderedDict = OrderedDict()
_PROGRAMS_KEPT = 1024


def from_scalar_op(scalar_op: ScalarOp, input_dtypes, output_dtypes=None) -> Program:
    """Flatten ``scalar_op`` applied to inputs of ``input_dtypes`` into a Program (once per
    op object and dtypes: a Program is immutable)."""
    key = (id(scalar_op), tuple(str(d) for d in input_dtypes), None if output_dtypes is None else tuple(str(d) for d in output_dtypes))
    hit = _PROGRAMS.get(key)
    if hit is not None and hit[0] is scalar_op:
        _PROGRAMS.move_to_end(key)
        return hit[1]
    program = _flatten(scalar_op, input_dtypes, output_dtypes)
    _PROGRAMS[key] = (scalar_op, program)
    if len(_PROGRAMS) > _PROGRAMS_KEPT:
        _PROGRAMS.popitem(last=False)
    return program


def _flatten(scalar_op: ScalarOp, input_dtypes, output_dtypes=None) -> Program:
    from pytensor.scalar.basic import ScalarType

    b = _Builder()
    input_ids = [b.new_value(str(d)) for d in input_dtypes]
    if isinstance(scalar_op, Composite):
        out_ids = b.inline(scalar_op.fgraph, input_ids)
    else:
        node = scalar_op.make_node(*[ScalarType(str(d))() for d in input_dtypes])
        dts = output_dtypes or [o.type.dtype for o in node.outputs]
        out_ids = [b.new_value(str(d)) for d in dts]
        b.instrs.append(Instr(scalar_op, tuple(input_ids), tuple(out_ids)))
    return Program(tuple(b.dtypes), tuple(input_ids), tuple(b.constants), tuple(b.instrs), tuple(out_ids))
