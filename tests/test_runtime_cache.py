"""The split-loop runtime's object code on disk (runtime/runtime_cache.py: without it every
warm process compiles it again).

A second process loads the library instead of building it, and its split loops and shared
BLAS pool still run and give the unsplit bits; a file for another key, or a damaged one, is
a miss; with PyTensor's numba cache off nothing is written."""

from __future__ import annotations

import dataclasses
import pickle
import sys

import numba
import pytensor
import pytest

from conftest import second_process_line
from ptnumba_codegen.runtime import runtime_cache


def _key(**changes):
    return dataclasses.replace(runtime_cache.runtime_key("generator", False), **changes)


class NoCodegen:
    def unserialize_library(self, state):
        raise AssertionError("a miss must not reach the codegen")


@pytest.mark.parametrize("content", [b"", b"not a pickle", pickle.dumps({"format": runtime_cache.CACHE.format}),
                                     "foreign", "old format", "not object code"])
def test_a_damaged_or_foreign_file_is_a_miss(tmp_path, content):
    key = _key()
    record = {"format": runtime_cache.CACHE.format, "key": dataclasses.asdict(key), "library": ("lib", "object", (b"o", b"b"))}
    if content == "foreign":
        record["key"] = dataclasses.asdict(_key(cpu="another-cpu"))
    elif content == "old format":
        record["format"] = runtime_cache.CACHE.format - 1
    elif content == "not object code":
        record["library"] = ("lib", "bitcode", b"b")
    if isinstance(content, str):
        content = pickle.dumps(record)
    path = runtime_cache.path_for(tmp_path, key)
    path.write_bytes(content)
    assert runtime_cache.load(tmp_path, key, NoCodegen()) is None


@pytest.mark.parametrize("change", [dict(generator="other"), dict(with_blas=True), dict(cpu="other-cpu"),
                                    dict(features="+sse2"), dict(toolchain="numba 0")])
def test_every_part_of_the_key_names_another_file(tmp_path, change):
    assert runtime_cache.path_for(tmp_path, _key(**change)) != runtime_cache.path_for(tmp_path, _key())


def test_nothing_is_kept_while_the_numba_cache_is_off():
    with pytensor.config.change_flags(numba__cache=False):
        assert runtime_cache.CACHE.directory() is None
        assert runtime_cache.load(None, _key(), NoCodegen()) is None
        assert not runtime_cache.store(None, _key(), object())


def test_an_unwritable_directory_is_only_a_miss(tmp_path):
    (tmp_path / "blocked").write_text("a file where the directory should be")

    class Library:
        def serialize_using_object_code(self):
            return ("lib", "object", (b"o", b"b"))

    assert not runtime_cache.store(tmp_path / "blocked" / "sub", _key(), Library())


SPLIT = r"""
import sys
from pathlib import Path
import numpy as np
import pytensor, pytensor.tensor as pt
import pytensor.link.numba.cache as numba_cache
numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
import ptnumba_codegen
from ptnumba_codegen.runtime import threads
if sys.argv[2] == "second":
    def refuse(with_blas):
        raise SystemExit("the second process built the runtime")
    threads._build_runtime = refuse
x = pt.matrix("x")
A = pt.matrix("A")
policies = Path(sys.argv[1]).parent
(policies / "split.toml").write_text('extends = "rewritten"\n[parallel]\nthreads = "auto"\nmin_elements = 1\n')
(policies / "one.toml").write_text('extends = "rewritten"\n[parallel]\nthreads = 1\n')
out = [pt.exp(x).sum(axis=1) * 2.0 + pt.log1p(x * x).mean(axis=1), A @ A]
fs = pytensor.function([x, A], out, mode=ptnumba_codegen.policy_mode(str(policies / "split.toml")))
f1 = pytensor.function([x, A], out, mode=ptnumba_codegen.policy_mode(str(policies / "one.toml")))
rng = np.random.default_rng(3)
xv, av = rng.normal(size=(20_000, 40)), rng.normal(size=(300, 300))
got = [fs(xv, av) for _ in range(6)]
ref = f1(xv, av)
assert threads.ensure_threading()
assert threads.chunk_launches() > 0, "no loop ran split"
for g in got:
    assert g[0].tobytes() == ref[0].tobytes()
    np.testing.assert_allclose(g[1], av @ av, rtol=1e-12)
print("RUNTIME", sorted(p.name for p in (Path(sys.argv[1]) / "ptnumba_codegen_runtime").iterdir()))
"""


def _process(cache, which):
    return second_process_line(SPLIT, (cache, which), "RUNTIME ")


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two threads")
def test_a_second_process_loads_the_runtime_and_its_loops_still_split(tmp_path):
    first = _process(tmp_path / "cache", "first")
    assert "runtime-" in first
    assert _process(tmp_path / "cache", "second") == first  # loaded, not built, and nothing rewritten
