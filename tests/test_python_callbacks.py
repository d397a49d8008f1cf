"""`runtime.python_callbacks`: compiled code calls a Python function by symbol name, passing
arrays and scalars by pointer; outputs are written in place; a raise is a status, not a crash.
"""

import logging

import numba
import numpy as np
import pytest

from ptnumba_codegen.runtime import python_callbacks as pc
from ptnumba_codegen.runtime.python_callbacks import Slot, call_python

SEEN = {}


def record(a, b, flag, x, n):
    SEEN.update(a=a.copy(), b=b.copy(), flag=flag, x=x, n=n, a_writeable=a.flags.writeable)
    return a.sum(axis=1) * x + n, np.bool_(flag and b.size == 0)


pc.register(
    "ptnumba_codegen_python_test_record",
    record,
    (Slot("float64", 2), Slot("int64", 1), Slot("bool", None), Slot("float64", None), Slot("int64", None),
     Slot("float64", 1), Slot("bool", 0)),
    n_outputs=2,
)


@numba.njit
def call_record(a, b, flag, x, n):
    out = np.empty(a.shape[0])
    done = np.empty((1,), np.bool_).reshape(())
    status = call_python("ptnumba_codegen_python_test_record", (a, b, flag, x, n, out, done))
    return status, out, done


@pytest.mark.parametrize("flag", [True, False])
def test_values_reach_python_and_outputs_come_back(flag):
    base = np.arange(24.0).reshape(4, 6)
    a = base[::-1, ::2]  # negative and non-unit strides: the view must follow them
    b = np.array([], dtype=np.int64)
    status, out, done = call_record(a, b, flag, 0.5, 7)
    assert status == 0
    np.testing.assert_array_equal(SEEN["a"], a)
    assert SEEN["b"].shape == (0,) and SEEN["flag"] == flag
    assert SEEN["x"] == 0.5 and SEEN["n"] == 7
    assert not SEEN["a_writeable"]  # inputs are read-only views
    np.testing.assert_array_equal(out, a.sum(axis=1) * 0.5 + 7)
    assert done.shape == () and bool(done) == flag


def fails(v):
    raise ValueError("the slow path broke")


pc.register("ptnumba_codegen_python_test_fails", fails, (Slot("float64", 1), Slot("float64", 1)), n_outputs=1)


@numba.njit
def call_fails(v):
    out = np.empty_like(v)
    return call_python("ptnumba_codegen_python_test_fails", (v, out))


def test_a_raise_is_status_one_and_logged(caplog):
    before = pc.calls("ptnumba_codegen_python_test_fails")
    with caplog.at_level(logging.ERROR, logger="ptnumba_codegen"):
        assert call_fails(np.ones(3)) == 1
    assert pc.calls("ptnumba_codegen_python_test_fails") == before + 1
    [rec] = [r for r in caplog.records if "ptnumba_codegen_python_test_fails" in r.getMessage()]
    assert "the slow path broke" in str(rec.exc_info[1])


def test_a_symbol_keeps_its_first_function():
    pc.register("ptnumba_codegen_python_test_record", fails, (), n_outputs=0)
    status, out, _ = call_record(np.ones((2, 2)), np.zeros(0, np.int64), False, 1.0, 0)
    assert status == 0 and list(out) == [2.0, 2.0]


def test_fresh_symbols_differ_and_keys_are_stable():
    assert pc.symbol_for(None) != pc.symbol_for(None)
    assert pc.symbol_for(("k", 1)) == pc.symbol_for(("k", 1)) != pc.symbol_for(("k", 2))


def test_values_without_a_row_are_refused_at_typing():
    assert pc.slot_of(numba.types.unicode_type) is None
    assert pc.slot_of(numba.types.complex128) is None

    @numba.njit
    def passes_a_string(s):
        return call_python("ptnumba_codegen_python_test_fails", (s,))

    with pytest.raises(numba.core.errors.TypingError):
        passes_a_string("x")
