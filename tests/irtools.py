"""Read flags out of final optimized LLVM IR text (what LLVM really kept)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ptnumba_codegen.flags import FLAG_UNIVERSE

FP_OPS = ("fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "fcmp")
_DEF = re.compile(r"^\s*(%[-\w.$]+) = (?:tail |musttail |notail )?(\w+)\s+(.*)$")
_REF = re.compile(r"%[-\w.$]+")


@dataclass
class Instr:
    name: str
    opcode: str
    flags: frozenset
    predicate: str | None
    operands: list[str]
    text: str


def parse(ir_text: str) -> list[dict[str, Instr]]:
    """One {ssa name: Instr} table per function definition."""
    functions, current = [], None
    for line in ir_text.splitlines():
        if line.startswith("define "):
            current = {}
            functions.append(current)
            continue
        if current is None:
            continue
        m = _DEF.match(line)
        if not m:
            continue
        name, opcode, rest = m.groups()
        words = rest.split()
        flags = set()
        while words and (words[0] in FLAG_UNIVERSE or words[0] == "fast"):
            flags.add(words.pop(0))
        predicate = words.pop(0) if opcode == "fcmp" and words else None
        current[name] = Instr(name, opcode, frozenset(flags), predicate, _REF.findall(" ".join(words)), line.strip())
    return functions


def backward_cone(table: dict[str, Instr], roots) -> set[str]:
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in table:
            continue
        seen.add(name)
        todo.extend(table[name].operands)
    return seen


def fp_instrs(table):
    return [i for i in table.values() if i.opcode in FP_OPS]
