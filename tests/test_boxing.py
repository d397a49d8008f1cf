"""Array results boxed with their Python type from the function's environment
(`ptnumba_codegen.runtime.boxing`): the same objects as numba's boxing, without a
``numba_unpickle`` call per returned array."""

import re

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from numba import njit

import ptnumba_codegen
from ptnumba_codegen.runtime import boxing
from ptnumba_codegen.settings import BOXING


@pytest.fixture
def numba_boxing():
    """numba's own boxing for the test; the process's state afterwards as before."""
    before = boxing.state()
    boxing.restore()
    yield
    boxing.restore()
    if before is not None:
        boxing.configure()


def _wrapper_ir(dispatcher) -> str:
    """The LLVM IR of the CPython wrapper numba compiled for ``dispatcher``'s one signature."""
    [sig] = dispatcher.signatures
    ir = dispatcher.inspect_llvm(sig)
    [start] = [m.start() for m in re.finditer(r"^define .*@\"?_ZN7cpython", ir, re.M)]
    return ir[start : ir.index("\n}\n", start)]


def _unpickles(dispatcher) -> int:
    return len(re.findall(r"call .*@numba_unpickle\(", _wrapper_ir(dispatcher)))


def _three_arrays(x):
    return x + 1.0, np.zeros(()), (x > 0.5)[::2]


def _described(outs):
    return [
        (type(o), o.dtype, o.shape, o.strides, o.flags.writeable, o.flags.owndata, type(o.base), o.tobytes())
        for o in outs
    ]


def test_environment_boxing_returns_numbas_objects_without_unpickling(numba_boxing):
    x = np.linspace(0.0, 1.0, 7)
    stock = njit(_three_arrays)
    stock_out = stock(x)
    boxing.configure()
    ours = njit(_three_arrays)
    ours_out = ours(x)
    assert _described(ours_out) == _described(stock_out)
    # numba unpickles np.ndarray once per returned array; the environment boxing never does
    assert _unpickles(stock) - _unpickles(ours) == 3


def test_a_policy_function_boxes_its_results_from_the_environment(numba_boxing):
    x = pt.vector("x")
    outputs = [pt.exp(x).sum(), pt.log1p(pt.exp(x))]
    with pytensor.config.change_flags(numba__cache=False):
        stock = pytensor.function([x], outputs, mode="NUMBA")
        value = np.linspace(-1.0, 1.0, 5)
        stock_out = stock(value)
        policy = pytensor.function([x], outputs, mode=ptnumba_codegen.policy_mode("rewritten"))
        policy_out = policy(value)
    assert boxing.state() is not None  # compiling the policy function configured it
    assert [o.shape for o in policy_out] == [o.shape for o in stock_out]
    assert [type(o) for o in policy_out] == [np.ndarray, np.ndarray]
    assert _unpickles(stock.vm.jit_fn) - _unpickles(policy.vm.jit_fn) == 2


def test_the_opt_out_keeps_numbas_boxing(numba_boxing):
    assert boxing.configure({BOXING.env: "numba"}).startswith("numba's array boxing")
    f = njit(_three_arrays)
    f(np.ones(3))
    assert _unpickles(f) >= 3


def test_a_bad_setting_names_the_variable_and_the_allowed_values(numba_boxing):
    with pytest.raises(ValueError, match=r"PTNUMBA_CODEGEN_BOXING='pickle': allowed values are environment, numba"):
        boxing.configure({BOXING.env: "pickle"})
    assert boxing.state() is None
