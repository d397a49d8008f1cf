"""Machine code on demand (`ptnumba_codegen.runtime.machine_code`): libraries without an
entry point are not handed to MCJIT until something asks for their machine code; values
and every instruction's flags are numba's finalization's."""

import ctypes
import json

import pytest
from numba import njit

from conftest import second_process_line
from ptnumba_codegen.runtime import machine_code


@pytest.fixture
def numba_finalization():
    """numba's own finalization for the test; the process's state afterwards as before."""
    before = machine_code.state()
    machine_code.restore()
    yield
    machine_code.restore()
    if before is not None:
        machine_code.configure()


SECOND = r"""
import collections, json, re
import numpy as np, pytensor, pytensor.tensor as pt
from numba.core import codegen as numba_codegen
import ptnumba_codegen
from ptnumba_codegen.runtime import machine_code

made = []
finalize = numba_codegen.CPUCodeLibrary.finalize
def recorded(self):
    made.append(self)
    return finalize(self)
numba_codegen.CPUCodeLibrary.finalize = recorded

x = pt.vector("x")
mu = pt.exp(x) * 2.0 + pt.log1p(x * x)
logp = pt.switch(pt.gt(mu, 3.0), -0.5 * mu * mu, pt.log(mu)).sum()
checked = pytensor.raise_op.Assert("x must be finite")(logp, pt.all(pt.isfinite(x)))
with pytensor.config.change_flags(numba__cache=False):
    fn = pytensor.function([x], [checked, pytensor.grad(logp, x)], mode=ptnumba_codegen.policy_mode("default"))
v = np.array([-3.0, -0.5, 0.0, 0.4, 1.2, 2.5, np.log(1.5), 30.0])
bits = [np.asarray(o, dtype=np.float64).ravel().view(np.uint64).tolist() for o in fn(v)]
try:
    fn(np.array([0.0, np.inf]))
    raised = None
except AssertionError as err:
    raised = str(err)
ir = "\n".join(fn.vm.jit_fn.inspect_llvm().values())
# a call's tail marker is left out: code generation marks calls ``tail`` in the IR it
# rewrites in place, a hint with no value in it (an NRT_decref's atomic of a kernel entry)
flags = re.compile(r"= (?:(?:tail|musttail|notail) )?(fadd|fsub|fmul|fdiv|frem|fcmp|fneg|call)((?: (?:fast|nnan|ninf|nsz|arcp|contract|afn|reassoc))*) ")
counts = collections.Counter(" ".join(m.groups()) for m in flags.finditer(ir))
pending = [l for l in made if getattr(l, "machine_code_pending", False)]
print("RESULT " + json.dumps({"state": machine_code.state(), "bits": bits, "raised": raised, "flags": counts,
      "libraries": len(made), "pending": len(pending),
      "pending_with_entry": sum(machine_code.has_entry_point(l._final_module) for l in pending)}))
"""


def _second_process(monkeypatch, choice: str) -> dict:
    monkeypatch.setenv("PTNUMBA_CODEGEN_MACHINE_CODE", choice)
    return json.loads(second_process_line(SECOND, (), "RESULT ").removeprefix("RESULT "))


def test_link_only_libraries_get_no_machine_code_and_values_and_flags_are_numbas(monkeypatch):
    """Two fresh processes compile the same model (numba's cache off), one with numba's
    finalization: the same output bits, the same kinds of instruction with the same
    fast-math flags in the final function, and a check inside a node function still raises
    (numba sets its environment through the caller that linked it)."""
    numba_way = _second_process(monkeypatch, "always")
    on_demand = _second_process(monkeypatch, "on_demand")
    assert numba_way["state"].startswith("numba's finalization") and numba_way["pending"] == 0
    assert on_demand["state"].startswith("machine code on demand")
    assert on_demand["pending"] > 0 and on_demand["pending_with_entry"] == 0
    assert on_demand["libraries"] == numba_way["libraries"]
    assert on_demand["bits"] == numba_way["bits"]
    # the same instructions with the same flags: what is linked before code generation
    # has no flag under which LLVM may reorder (`may_reassociate`)
    assert on_demand["flags"] == numba_way["flags"] and on_demand["flags"]
    assert on_demand["raised"] == numba_way["raised"] and "x must be finite" in on_demand["raised"]


def test_a_pending_library_emits_its_machine_code_when_asked_for_a_pointer(numba_finalization):
    machine_code.configure()

    @njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
    def twice(a):
        return 2.0 * a

    @njit
    def caller(a):
        return twice(a) + 1.0

    assert caller(3.0) == 7.0
    [sig] = twice.signatures
    library = twice.overloads[sig].library
    assert isinstance(library, machine_code.OnDemandLibrary) and library.machine_code_pending
    assert library.get_pointer_to_function("no such function") == 0
    assert library.machine_code_pending  # numba asking for a CPython wrapper it has not: still none
    name = twice.overloads[sig].fndesc.mangled_name
    address = library.get_pointer_to_function(name)
    assert address and not library.machine_code_pending
    # numba's native calling convention: status = f(&result, env, a)
    result = ctypes.c_double()
    native = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_double), ctypes.c_void_p, ctypes.c_double)(address)
    assert native(ctypes.byref(result), None, 4.5) == 0 and result.value == 9.0


def test_a_library_llvm_may_reassociate_keeps_numbas_finalization(numba_finalization):
    """Linked before code generation and optimized again, a sum LLVM may reassociate could
    be vectorized otherwise and change in its last bits: such a library is emitted as numba
    does, so its callers link what they always linked."""
    machine_code.configure()

    @njit(no_cpython_wrapper=True, no_cfunc_wrapper=True, fastmath={"reassoc", "nsz"})
    def total(a):
        s = 0.0
        for v in a:
            s += v
        return s

    @njit(no_cpython_wrapper=True, no_cfunc_wrapper=True, fastmath={"contract", "arcp"})
    def scaled(a):
        return a * 3.0 + 1.0

    @njit
    def caller(a):
        return total(a) + scaled(a[0])

    import numpy as np

    assert caller(np.arange(4.0)) == 7.0
    [total_sig], [scaled_sig] = total.signatures, scaled.signatures
    total_library, scaled_library = total.overloads[total_sig].library, scaled.overloads[scaled_sig].library
    assert machine_code.may_reassociate(total_library._final_module) and not total_library.machine_code_pending
    assert not machine_code.may_reassociate(scaled_library._final_module) and scaled_library.machine_code_pending


def test_the_switch_is_checked_and_always_keeps_numbas_finalization(numba_finalization):
    with pytest.raises(ValueError, match="PTNUMBA_CODEGEN_MACHINE_CODE='later': allowed values are on_demand, always"):
        machine_code.configure({"PTNUMBA_CODEGEN_MACHINE_CODE": "later"})
    assert "always" in machine_code.configure({"PTNUMBA_CODEGEN_MACHINE_CODE": "always"})

    @njit(no_cpython_wrapper=True, no_cfunc_wrapper=True)
    def plus(a):
        return a + 1.0

    @njit
    def caller(a):
        return plus(a)

    assert caller(1.0) == 2.0
    [sig] = plus.signatures
    assert not isinstance(plus.overloads[sig].library, machine_code.OnDemandLibrary)
