"""The package's imports, read from its source with ``ast`` (nothing is imported): which
module imports which, at the top of the module or inside a function, and the circles
among them. Shared by tests/test_layout.py and tests/test_layers.py."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "ptnumba_codegen"
PACKAGE = "ptnumba_codegen"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def resolve(target: str, attr: str | None = None) -> str | None:
    """The package module an import names (``from a.b import c`` -> ``a.b.c`` if a module)."""
    if attr is not None and f"{target}.{attr}" in MODULES:
        return f"{target}.{attr}"
    return target if target in MODULES else None


def imports(tree: ast.Module, top_level_only: bool):
    """(module imported, names taken from it, line) for every import of the package; the
    top level includes the bodies of ``if`` and ``try`` there."""
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if top_level_only and isinstance(node, (ast.If, ast.Try)):
            stack.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            stack.extend(h for handler in getattr(node, "handlers", []) for h in handler.body)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE) and resolve(alias.name):
                    yield alias.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            for alias in node.names:
                sub = resolve(node.module, alias.name)
                if sub and sub != node.module:
                    yield sub, (), node.lineno
                elif sub:
                    yield sub, (alias.name,), node.lineno


@dataclass(frozen=True)
class Arrow:
    """``importer`` imports ``imported`` (both modules of the package), in a function or not."""

    importer: str
    imported: str
    line: int
    in_function: bool


def _function_lines(tree: ast.Module) -> set[int]:
    """The lines of every import statement inside a function (or a lambda)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            lines |= {n.lineno for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def arrows() -> list[Arrow]:
    """Every import of a package module by another, wherever it is in the module."""
    out = []
    for name, tree in TREES.items():
        inside = _function_lines(tree)
        for target, _, line in imports(tree, top_level_only=False):
            if target != name:
                out.append(Arrow(name, target, line, line in inside))
    return out


def graph(top_level_only: bool = True) -> dict[str, set[str]]:
    """module -> the package modules it imports (at the top, or anywhere)."""
    return {
        name: {target for target, _, _ in imports(tree, top_level_only) if target != name}
        for name, tree in TREES.items()
    }


def cycles(graph):
    """Every strongly connected component of more than one module (Tarjan)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out
