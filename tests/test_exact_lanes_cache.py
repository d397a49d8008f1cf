"""The exact-lanes self-check's verdicts on disk (lowering/vecmath/check_cache.py: without
them every warm process pays the check again).

A second process reads the verdict and does not run the check; a verdict stored under any
other key (generator, libm data or file, C library, CPU, features, toolchain) is not used;
a missing, corrupt or foreign file runs the check again and is rewritten; with PyTensor's
numba cache off nothing is read or written."""

from __future__ import annotations

import json
import sys

import llvmlite.binding as llb
import pytensor
import pytensor.link.numba.cache as numba_cache
import pytest

from conftest import second_process_line
from ptnumba_codegen.lowering.vecmath import check_cache, exact_lanes, libm_data
from ptnumba_codegen.runtime import disk_cache
from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa

ISA = target_isa()
DATA = libm_data.glibc_exp_data()
pytestmark = pytest.mark.skipif(
    ISA is None or isinstance(DATA, str), reason=f"no vector target or no glibc exp data: {DATA if isinstance(DATA, str) else ISA}"
)
LANES = lane_count(ISA, "float64") if ISA else 0


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A process with no verdicts yet, PyTensor's numba cache on in ``tmp_path``, and a
    self-check that only counts its runs (the real one takes a quarter second)."""
    monkeypatch.setattr(numba_cache, "NUMBA_CACHE_PATH", tmp_path)
    monkeypatch.setattr(exact_lanes, "_STATUS", {})
    runs = []

    def counting(symbol, lanes, data):
        runs.append(symbol)
        return True, f"counted check {len(runs)}"

    monkeypatch.setattr(exact_lanes, "self_check", counting)
    with pytensor.config.change_flags(numba__cache=True):
        yield runs


def _forget(monkeypatch):
    monkeypatch.setattr(exact_lanes, "_STATUS", {})  # as in a new process


def _files(directory):
    return sorted(p.name for p in directory.glob("*.json")) if directory.exists() else []


def test_a_verdict_is_stored_and_read_back_instead_of_checking_again(fresh, monkeypatch, tmp_path):
    assert exact_lanes.status("exp", LANES) == (True, "counted check 1")
    assert fresh == ["exp"]
    [name] = _files(tmp_path / check_cache.CACHE.subdir)
    assert name.startswith(f"exp-{LANES}-")
    _forget(monkeypatch)
    assert exact_lanes.status("exp", LANES) == (True, "counted check 1")  # the stored verdict
    assert fresh == ["exp"]


# one piece of the key at a time: (what to patch, attribute, new value)
KEY_CHANGES = {
    "generator source": (exact_lanes, "GENERATOR_DIGEST", "0" * 16),
    "generator version": (exact_lanes, "GENERATOR_VERSION", -1),
    "libm file": (disk_cache, "file_digest", lambda path: "another libm build"),
    "C library": (exact_lanes, "_libc_version", lambda: "glibc 0.0"),
    "CPU": (llb, "get_host_cpu_name", lambda: "another-cpu"),
    "features": (exact_lanes, "target_features", lambda: {"+sse2"}),
}


@pytest.mark.parametrize("change", sorted(KEY_CHANGES))
def test_a_changed_key_runs_the_check_again(fresh, monkeypatch, tmp_path, change):
    exact_lanes.status("exp", LANES)
    target, attr, value = KEY_CHANGES[change]
    monkeypatch.setattr(target, attr, value)
    _forget(monkeypatch)
    assert exact_lanes.status("exp", LANES) == (True, "counted check 2")
    assert fresh == ["exp", "exp"]
    assert len(_files(tmp_path / check_cache.CACHE.subdir)) == 2  # both verdicts kept, each under its key


def test_other_libm_data_runs_the_check_again(fresh, monkeypatch):
    import dataclasses

    exact_lanes.status("exp", LANES)
    tab = list(DATA.tab)
    tab[3] += 1
    assert exact_lanes.check_key("exp", LANES, dataclasses.replace(DATA, tab=tuple(tab))) != exact_lanes.check_key("exp", LANES, DATA)
    monkeypatch.setitem(exact_lanes.EXACT_LANES, "exp",
                        dataclasses.replace(exact_lanes.EXACT_LANES["exp"], data=lambda: dataclasses.replace(DATA, tab=tuple(tab))))
    _forget(monkeypatch)
    assert exact_lanes.status("exp", LANES) == (True, "counted check 2")


@pytest.mark.parametrize("content", [
    b"",
    b"{not json",
    b"\xff\xfe\x00garbage",
    json.dumps({"format": check_cache.CACHE.format, "ok": True}).encode(),  # no key
    None,  # a well-formed file written for another key
    "wrong types",
])
def test_a_corrupt_or_foreign_file_runs_the_check_again_and_is_rewritten(fresh, monkeypatch, tmp_path, content):
    exact_lanes.status("exp", LANES)
    key = exact_lanes.check_key("exp", LANES, DATA)
    path = check_cache.path_for(tmp_path / check_cache.CACHE.subdir, key)
    record = json.loads(path.read_text())
    if content is None:
        record["key"]["cpu"] = "another-cpu"
        content = json.dumps(record).encode()
    elif content == "wrong types":
        record["ok"] = "yes"
        content = json.dumps(record).encode()
    path.write_bytes(content)
    _forget(monkeypatch)
    assert exact_lanes.status("exp", LANES) == (True, "counted check 2")
    assert check_cache.load(tmp_path / check_cache.CACHE.subdir, key) == check_cache.Verdict(True, "counted check 2")


def test_an_unreadable_or_unwritable_directory_only_costs_the_check(fresh, monkeypatch, tmp_path):
    (tmp_path / check_cache.CACHE.subdir).write_text("a file where the directory should be")
    assert exact_lanes.status("exp", LANES) == (True, "counted check 1")
    _forget(monkeypatch)
    assert exact_lanes.status("exp", LANES) == (True, "counted check 2")


def test_with_the_numba_cache_off_nothing_is_read_or_written(fresh, monkeypatch, tmp_path):
    with pytensor.config.change_flags(numba__cache=False):
        exact_lanes.status("exp", LANES)
        _forget(monkeypatch)
        exact_lanes.status("exp", LANES)
    assert fresh == ["exp", "exp"]
    assert _files(tmp_path / check_cache.CACHE.subdir) == []


def test_a_check_that_did_not_compile_is_not_stored(fresh, monkeypatch, tmp_path):
    monkeypatch.setattr(exact_lanes, "self_check", lambda *a: (False, f"{exact_lanes.NOT_COMPILED}: out of memory"))
    assert not exact_lanes.status("exp", LANES)[0]
    assert _files(tmp_path / check_cache.CACHE.subdir) == []


def test_a_failed_check_is_stored_like_a_passed_one(fresh, monkeypatch, tmp_path):
    monkeypatch.setattr(exact_lanes, "self_check", lambda *a: (False, "self-check: 3 of 9 probes differ from libm"))
    exact_lanes.status("exp", LANES)
    monkeypatch.setattr(exact_lanes, "self_check", lambda *a: pytest.fail("checked again"))
    _forget(monkeypatch)
    assert exact_lanes.status("exp", LANES) == (False, "self-check: 3 of 9 probes differ from libm")


SECOND = r"""
import sys
from pathlib import Path
import pytensor.link.numba.cache as numba_cache
numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
from ptnumba_codegen.lowering.vecmath import exact_lanes as e
from ptnumba_codegen.lowering.vecmath.isa import lane_count, target_isa
lanes = lane_count(target_isa(), "float64")
if sys.argv[2] == "second":
    def refuse(*args):
        raise SystemExit("the second process ran the self-check")
    e.self_check = refuse
print("STATUS", [e.status(s, lanes) for s in ("exp", "log", "pow")])
"""


def _process(cache, which):
    return second_process_line(SECOND, (cache, which), "STATUS ")


def test_a_second_process_reads_the_verdicts_and_runs_no_check(tmp_path):
    first = _process(tmp_path, "first")  # the real checks, stored
    assert "bit-identical" in first
    assert _process(tmp_path, "second") == first
