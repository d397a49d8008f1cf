"""The libm data on disk (lowering/vecmath/libm_data_cache.py: without it every process under
the policy searches libm for the exp, log and pow tables, warm compiles included).

A second process reads what the first found and does not search; a record stored under any
other key (table, libm file, generator, numpy) is not used; a missing, corrupt or foreign
file, or one holding another type, searches again and is rewritten; with PyTensor's numba
cache off nothing is read or written; what is read back equals what the search finds."""

from __future__ import annotations

import pickle

import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
import pytest

from ptnumba_codegen import _version
from ptnumba_codegen.lowering.vecmath import libm_data, libm_data_cache
from ptnumba_codegen.runtime import disk_cache

PATH = libm_data.mapped_libm()
pytestmark = pytest.mark.skipif(PATH is None, reason="no libm mapped in this process")

TABLES = {  # table -> (the search libm_data runs, the @cache'd lookup, its record type)
    "exp": ("find_exp_data", libm_data.glibc_exp_data, libm_data.ExpData),
    "log": ("find_log_data", libm_data.glibc_log_data, libm_data.LogData),
    "pow": ("find_pow_data", libm_data.glibc_pow_data, libm_data.PowData),
}


def _new_process():
    for _search, lookup, _kind in TABLES.values():
        lookup.cache_clear()


@pytest.fixture
def searches(tmp_path, monkeypatch):
    """PyTensor's numba cache on in ``tmp_path``, a fresh process's lookups, and every
    search counted (each still runs)."""
    monkeypatch.setattr(numba_cache, "NUMBA_CACHE_PATH", tmp_path)
    runs = []
    for table, (search, _lookup, _kind) in TABLES.items():
        real = getattr(libm_data, search)

        def counting(*args, _real=real, _table=table):
            runs.append(_table)
            return _real(*args)

        monkeypatch.setattr(libm_data, search, counting)
    _new_process()
    with pytensor.config.change_flags(numba__cache=True):
        yield runs
    _new_process()


def _files(tmp_path):
    directory = tmp_path / libm_data_cache.CACHE.subdir
    return sorted(p.name for p in directory.glob("*.pkl")) if directory.exists() else []


def _searched_now():
    return {table: lookup() for table, (_s, lookup, _k) in TABLES.items()}


def test_a_second_process_reads_what_the_first_found(searches, tmp_path):
    first = _searched_now()
    assert sorted(set(searches)) == ["exp", "log", "pow"]
    assert [name.split("-")[0] for name in _files(tmp_path)] == ["exp", "log", "pow"]
    searches.clear()
    _new_process()
    assert _searched_now() == first  # equal records (or the same reasons)
    assert searches == []  # and no search ran


def test_the_data_read_back_is_what_a_search_finds(searches):
    _searched_now()
    _new_process()
    read = _searched_now()
    for table, (search, _lookup, kind) in TABLES.items():
        direct = libm_data.find_pow_data(PATH, read["exp"]) if table == "pow" else getattr(libm_data, search)(PATH)
        assert read[table] == direct
        assert isinstance(read[table], kind | str)


KEY_CHANGES = {  # one piece of the key at a time: (what to patch, attribute, new value)
    "libm file": (disk_cache, "file_digest", lambda path: "another libm build"),
    "generator source": (_version, "GENERATOR_DIGEST", "0" * 16),
    "generator version": (_version, "GENERATOR_VERSION", -1),
    "numpy": (np, "__version__", "0.0.0"),
}


@pytest.mark.parametrize("change", sorted(KEY_CHANGES))
def test_a_changed_key_searches_again(searches, monkeypatch, change):
    _searched_now()
    owner, attr, value = KEY_CHANGES[change]
    monkeypatch.setattr(owner, attr, value)
    searches.clear()
    _new_process()
    _searched_now()
    assert sorted(set(searches)) == ["exp", "log", "pow"]


BAD_FILES = {
    "empty": b"",
    "not a pickle": b"{not a pickle",
    "not a record": pickle.dumps([1, 2, 3]),
    "another format": None,  # the stored record with format + 1
    "another key": None,  # the stored record with another libm in its key
    "another type": None,  # the stored record holding an int
}


@pytest.mark.parametrize("bad", sorted(BAD_FILES))
def test_a_damaged_or_foreign_file_searches_again_and_is_rewritten(searches, tmp_path, bad):
    first = _searched_now()
    [path] = [p for p in (tmp_path / libm_data_cache.CACHE.subdir).glob("exp-*.pkl")]
    record = pickle.loads(path.read_bytes())
    if bad == "another format":
        record["format"] += 1
    elif bad == "another key":
        record["key"]["libm"] = "/lib/another/libm.so.6:0"
    elif bad == "another type":
        record["data"] = 12345
    path.write_bytes(pickle.dumps(record) if BAD_FILES[bad] is None else BAD_FILES[bad])
    searches.clear()
    _new_process()
    assert _searched_now() == first
    assert searches.count("exp") == 1
    assert pickle.loads(path.read_bytes())["data"] == first["exp"]  # rewritten


def test_with_the_numba_cache_off_nothing_is_read_or_written(searches, tmp_path):
    with pytensor.config.change_flags(numba__cache=False):
        _searched_now()
        assert _files(tmp_path) == []
        searches.clear()
        _new_process()
        _searched_now()
    assert sorted(set(searches)) == ["exp", "log", "pow"]


def test_an_unwritable_directory_only_searches_every_time(searches, tmp_path, monkeypatch):
    monkeypatch.setattr(disk_cache, "write", lambda path, data: False)
    first = _searched_now()
    searches.clear()
    _new_process()
    assert _searched_now() == first
    assert sorted(set(searches)) == ["exp", "log", "pow"]
