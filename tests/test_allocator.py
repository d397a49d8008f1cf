"""glibc malloc settings applied when the first policy function is compiled
(`ptnumba_codegen.runtime.allocator`): freed intermediates stay mapped for the next call."""

import json
import os
import subprocess
import sys

import pytest

from ptnumba_codegen.runtime import allocator
from ptnumba_codegen.settings import MALLOC

# In a fresh process: compile one policy function, then free and reallocate 24 MB of
# arrays (an ordered logistic call's intermediates) and count the page faults of the
# repeats (the first round pays them in any case).
PROBE = r"""
import json, resource, sys
import numpy as np, pytensor, pytensor.tensor as pt
import ptnumba_codegen
from ptnumba_codegen.runtime import allocator
x = pt.vector("x")
fn = pytensor.function([x], pt.exp(x), mode=ptnumba_codegen.policy_mode("rewritten"))
assert fn(np.zeros(3)).tolist() == [1.0, 1.0, 1.0]
def call():
    parts = [np.ones(750_000) for _ in range(4)]
    return sum(float(p[-1]) for p in parts)
call()
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    call()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / 20
print("PROBE", json.dumps({"faults": faults, "state": allocator.state()}))
"""


def _probe(**env):
    full = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", MALLOC.env)}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    [line] = [ln for ln in out.stdout.splitlines() if ln.startswith("PROBE ")]
    return json.loads(line.removeprefix("PROBE "))


glibc = pytest.mark.skipif(allocator._glibc() is None, reason="glibc malloc only")


@glibc
def test_freed_intermediates_are_kept_for_the_next_call():
    kept = _probe()
    assert kept["state"].startswith("glibc ") and "M_TRIM_THRESHOLD=512 MiB" in kept["state"]
    system = _probe(**{MALLOC.env: "system"})
    assert system["state"].startswith("glibc's own")
    # glibc's dynamic trim returns the 24 MB each round (thousands of faults of 4 KiB pages)
    assert system["faults"] > 1000, system
    assert kept["faults"] < 50, kept


@glibc
def test_the_users_malloc_settings_win():
    user = _probe(GLIBC_TUNABLES="glibc.malloc.trim_threshold=0")
    assert user["state"] == "malloc settings left to the user (GLIBC_TUNABLES sets glibc.malloc.*)"
    assert user["faults"] > 1000, user  # trim_threshold=0: their setting, trimmed every round


def test_a_bad_setting_names_the_variable_and_the_allowed_values(monkeypatch):
    monkeypatch.setattr(allocator.SETTING, "_state", None)
    with pytest.raises(ValueError, match=r"PTNUMBA_CODEGEN_MALLOC='heap': allowed values are keep, system"):
        allocator.configure({MALLOC.env: "heap"})
    assert allocator.state() is None
