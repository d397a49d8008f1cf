"""The settings table (`ptnumba_codegen.settings`): every ``PTNUMBA_CODEGEN_*`` switch is a
row, read through it when used (never at import), validated with a message naming the
variable and its values, and documented in docs/settings.md."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from import_graph import MODULES, PACKAGE, TREES
from ptnumba_codegen import settings
from ptnumba_codegen.settings import SETTINGS

DOCS = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
VARIABLE = re.compile(r"\bPTNUMBA_CODEGEN_[A-Z_]+\b")
CHOICES = [s for s in SETTINGS if s.allowed]


def test_every_variable_the_package_names_is_a_row():
    rows = {s.env for s in SETTINGS}
    named = {v.rstrip("_") for path in MODULES.values() for v in VARIABLE.findall(path.read_text())}
    assert named == rows


def test_only_the_table_spells_a_variable_in_code():
    """Other modules reach a switch through its row, never by its name in a string."""
    rows = {s.env for s in SETTINGS}
    spelled = [
        f"{name}:{node.lineno} {node.value}"
        for name, tree in TREES.items()
        if name != f"{PACKAGE}.settings"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in rows
    ]
    assert spelled == []


def _settings_names(tree: ast.Module) -> set[str]:
    """The names a module binds to `settings` or to its rows."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == f"{PACKAGE}.settings":
            names |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            names |= {a.asname or a.name for a in node.names if a.name == "settings"}
    return names


def _reads_at_import(tree: ast.Module, names: set[str]) -> list[int]:
    """Lines outside every function that call ``<row>.value()`` or ``settings.<row>.value()``."""
    in_functions = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                    for n in ast.walk(f)}
    lines = []
    for node in ast.walk(tree):
        if id(node) in in_functions or not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        root = owner.value if isinstance(owner, ast.Attribute) else owner
        if node.func.attr == "value" and isinstance(root, ast.Name) and root.id in names:
            lines.append(node.lineno)
    return lines


def test_no_switch_is_read_at_import():
    found = [f"{name}:{line}" for name, tree in TREES.items() for line in _reads_at_import(tree, _settings_names(tree))]
    assert found == []


@pytest.mark.parametrize("setting", CHOICES, ids=lambda s: s.env)
def test_unset_or_empty_is_the_default_and_case_is_ignored(setting):
    assert setting.value({}) == setting.default == setting.allowed[0]
    assert setting.value({setting.env: "  "}) == setting.default
    other = setting.allowed[-1]
    assert setting.value({setting.env: f" {other.upper()} "}) == other


@pytest.mark.parametrize("setting", CHOICES, ids=lambda s: s.env)
def test_a_typo_names_the_variable_and_the_allowed_values(setting):
    allowed = ", ".join(setting.allowed)
    with pytest.raises(ValueError, match=re.escape(f"{setting.env}='typo': allowed values are {allowed}")):
        setting.value({setting.env: "typo"})


def test_the_free_text_row_is_read_as_written():
    assert settings.POLICY.value({}) == ""
    assert settings.POLICY.value({settings.POLICY.env: "my_policy.toml"}) == "my_policy.toml"


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.env)
def test_docs_and_docstring_list_every_row_with_its_values(setting):
    """One row per switch in docs/settings.md's table and in the module's, with its values."""
    rows = [line for line in DOCS.read_text().splitlines() if line.startswith(f"| `{setting.env}`")]
    rows += [line for line in settings.__doc__.splitlines() if line.startswith(f"``{setting.env}``")]
    assert len(rows) == 2
    for row in rows:
        for value in setting.allowed:
            assert f"`{value}`" in row, (setting.env, value)
