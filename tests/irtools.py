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


_LABEL = re.compile(r"^([-\w.$]+):")
_SUCC = re.compile(r"label %([-\w.$]+)")


@dataclass
class Block:
    label: str
    text: str  # the block's instructions, one a line
    successors: list[str]


def blocks(function_text: str) -> dict[str, Block]:
    """The basic blocks of one function definition (``define ... { ... }``), by label, in
    order (the first is the entry block; an unlabelled entry is called ``entry``)."""
    out, label, lines = {}, None, []

    def close():
        if label is not None:
            text = "\n".join(lines)
            out[label] = Block(label, text, _SUCC.findall(text))

    for line in function_text.splitlines()[1:]:
        m = _LABEL.match(line)
        if m:
            close()
            label, lines = m.group(1), []
        elif line.strip() and line.strip() != "}":
            if label is None:
                label = "entry"
            lines.append(line.strip())
    close()
    return out


def reachable(cfg: dict[str, Block], start: str, avoid=lambda block: False, skip_edge=None) -> set[str]:
    """The labels reachable from ``start`` without entering a block ``avoid`` accepts or
    following the edge ``skip_edge`` (a (from, to) pair)."""
    seen, todo = set(), [start]
    while todo:
        label = todo.pop()
        if label in seen or label not in cfg or avoid(cfg[label]):
            continue
        seen.add(label)
        todo.extend(s for s in cfg[label].successors if (label, s) != skip_edge)
    return seen


def functions(ir_text: str) -> list[str]:
    """The text of every function definition in ``ir_text``."""
    parts = re.split(r"\n(?=define )", "\n" + ir_text)
    return [part.split("\n}", 1)[0] + "\n}" for part in parts if part.startswith("define ")]
