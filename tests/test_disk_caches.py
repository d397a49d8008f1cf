"""One table names everything kept across processes (`runtime.disk_cache.CACHES`): every
keeper reads and writes through its row, and no other module names a cache directory or
goes around the table."""

from __future__ import annotations

import ast

import pytest

from import_graph import MODULES, PACKAGE, TREES
from ptnumba_codegen.runtime import disk_cache
from ptnumba_codegen.runtime.disk_cache import CACHES, CODINGS

TABLE_MODULE = f"{PACKAGE}.runtime.disk_cache"
# what only the table's rows call: a module calling it directly goes around its row
AROUND_THE_TABLE = {"directory", "read_record", "read", "write"}


def test_every_row_is_distinct_and_complete():
    assert len({c.subdir for c in CACHES}) == len(CACHES)
    for cache in CACHES:
        assert cache.subdir.startswith("ptnumba_codegen_") and cache.coding in CODINGS and cache.format >= 1
        assert f"{PACKAGE}.{cache.kept_by}" in MODULES


@pytest.mark.parametrize("cache", CACHES, ids=lambda c: c.subdir)
def test_its_keeper_uses_its_row(cache):
    """The keeper names its row (``disk_cache.<ROW>``) and no other module does."""
    row = next(name for name, value in vars(disk_cache).items() if value is cache and name.isupper())
    users = sorted(
        name for name, tree in TREES.items() if name != TABLE_MODULE
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == row and isinstance(node.value, ast.Name)
        and node.value.id == "disk_cache"
    )
    assert users == [f"{PACKAGE}.{cache.kept_by}"]


def test_only_the_table_names_a_cache_directory():
    subdirs = {c.subdir for c in CACHES}
    named = [f"{name}:{node.lineno}" for name, tree in TREES.items() if name != TABLE_MODULE
             for node in ast.walk(tree) if isinstance(node, ast.Constant) and node.value in subdirs]
    assert named == []


def test_no_module_goes_around_the_table():
    around = [
        f"{name}:{node.lineno} disk_cache.{node.func.attr}"
        for name, tree in TREES.items() if name != TABLE_MODULE
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in AROUND_THE_TABLE
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "disk_cache"
    ]
    assert around == []


@pytest.mark.parametrize("cache", CACHES, ids=lambda c: c.subdir)
def test_a_record_reads_back_and_a_foreign_one_is_a_miss(cache, tmp_path):
    key = {"text": "a key"}
    assert cache.store(tmp_path, "name", key, answer=42)
    assert cache.path(tmp_path, "name").suffix == CODINGS[cache.coding].suffix
    assert cache.load(tmp_path, "name", key) == {"format": cache.format, "key": key, "answer": 42}
    assert cache.load(tmp_path, "name", {"text": "another key"}) is None
    assert cache.load(None, "name", key) is None and not cache.store(None, "name", key)
