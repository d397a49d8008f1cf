"""The package's layers, read from its imports (``ast``, tests/import_graph.py).

A module imports only modules of its own layer or of lower ones (`LAYERS`, lowest first): a
higher layer registers into a lower one (the as-written pow's rule into the lowering table,
the as-written pass into the kept rewritten graphs), never the other way round. No import
circles among the package's modules, wherever the import is. And every import of a package
module inside a function is listed (`IN_FUNCTIONS`) with the optional dependency it waits
for: everything else is imported at the top of its module.
"""

from __future__ import annotations

import ast

import pytest

from import_graph import MODULES, PACKAGE, TREES, arrows, cycles, graph

# The layers, lowest first; each names modules and subpackages (everything under them) by
# their path in the package ("" is the package's __init__, the public API).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vocabulary", ("_version", "flags", "tables", "settings")),  # names and records everything reads
    ("analysis", ("analysis",)),  # pure Python over graphs and programs
    ("policy", ("policy",)),  # TOML -> a validated Policy (data)
    ("runtime", ("runtime",)),  # process-wide runtime and what is kept on disk
    ("lowering", ("lowering",)),  # programs -> LLVM IR, rule tables
    ("backend", ("backend", "compact")),  # policy ops, kernel plans, numba registration
    ("passes", ("passes",)),  # the rewrites that put the policy's ops into a graph
    ("as_written", ("as_written",)),  # decisions as written: registers into the layers below
    ("public API", ("", "modes", "switch", "explain", "nutpie_wrappers", "nutpie_extraction")),
    ("front ends", ("tools", "__main__", "pytest_plugin")),  # never imported by the generator
)

# Layers below the lowering compile nothing: they import neither numba nor llvmlite.
WITHOUT_NUMBA = ("vocabulary", "analysis", "policy")

# Imports of package modules inside a function: (importer, imported) -> the optional
# dependency it waits for. Every other import of a package module is at the top.
IN_FUNCTIONS: dict[tuple[str, str], str] = {}

def _relative(module: str) -> str:
    return module.removeprefix(PACKAGE).removeprefix(".")


def layer_of(module: str) -> int:
    """The index in `LAYERS` of the layer ``module`` belongs to."""
    rel = _relative(module)
    found = [k for k, (_, names) in enumerate(LAYERS)
             for n in names if rel == n or (n and rel.startswith(n + "."))]
    assert len(found) == 1, f"{module}: in layers {found}"
    return found[0]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_is_in_one_layer(module):
    layer_of(module)


def test_no_import_circles():
    assert cycles(graph(top_level_only=False)) == []


def test_no_arrow_back_up():
    up = [
        f"{a.importer}:{a.line} ({LAYERS[layer_of(a.importer)][0]}) imports {a.imported} "
        f"({LAYERS[layer_of(a.imported)][0]})"
        for a in arrows()
        if layer_of(a.imported) > layer_of(a.importer)
    ]
    assert up == []


def test_imports_inside_functions_are_the_listed_ones():
    found = {(a.importer, a.imported) for a in arrows() if a.in_function}
    listed = {(f"{PACKAGE}.{i}".rstrip("."), f"{PACKAGE}.{m}".rstrip(".")) for i, m in IN_FUNCTIONS}
    assert found == listed


def _third_party_roots(tree: ast.Module) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_layers_below_the_lowering_compile_nothing():
    low = {k for k, (name, _) in enumerate(LAYERS) if name in WITHOUT_NUMBA}
    found = [(m, sorted(_third_party_roots(TREES[m]) & {"numba", "llvmlite"})) for m in sorted(MODULES)
             if layer_of(m) in low and _third_party_roots(TREES[m]) & {"numba", "llvmlite"}]
    assert found == []


def test_the_layer_table_names_what_exists():
    """A row naming nothing left (a module moved or renamed) is a stale row."""
    for _, names in LAYERS:
        for n in names:
            assert any(_relative(m) == n or _relative(m).startswith(n + ".") for m in MODULES), n
