"""scipy.special ops called by symbol (`lowering.cython_calls`, `runtime.cython_symbols`).

The stock backend calls scipy's cython function through an address it looks up from an
object-mode block; the generator calls the same C function, chosen the same way and with
the same casts, by a symbol it binds: the same bits (compared to stock with fastmath off at
special values, float64 and float32, in loops and on native scalars), no object-mode code in
the function, and a process that loads the function from PyTensor's cache binds the symbol
before it runs it.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest

from conftest import assert_no_fallback, assert_same_bits, compile_fn, final_ir, second_process_line
from ptnumba_codegen.lowering.rules import rule_kind
from ptnumba_codegen.runtime.cython_symbols import SYMBOL_PREFIX, bound, symbol_name

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, -2.0, 0.5, -0.5, 2.5, 1e-300, 5e-324, -1e-300, 1e300, 171.7, 172.0, np.inf, -np.inf, np.nan, 3.7, -7.25, 30.0])


def _graph(dtype):
    """scipy.special ops of one to three inputs in one loop, and on native scalars."""
    x, y, z = (pt.vector(n, dtype=dtype) for n in "xyz")
    a, b = pt.scalar("a", dtype=dtype), pt.scalar("b", dtype=dtype)
    loop = [
        pt.i0(x) * y,
        pt.gammainc(x, y),
        pt.gammaincc(x, y),
        pt.erfinv(z),
        pt.betainc(x, y, z),
        pt.psi(x),
        pt.gamma(y),
        pt.erfcx(x),
        pt.j0(y),
    ]
    scalars = [pt.psi(a) * b, pt.gamma(a) + pt.tri_gamma(b), pt.gammainc(a, b)]
    return [x, y, z, a, b], loop + scalars


@pytest.fixture(scope="module", params=["float64", "float32"])
def fns(request):
    inputs, outputs = _graph(request.param)
    key = f"cython_calls_{request.param}"
    return request.param, {
        "stock_strict": compile_fn(inputs, outputs, "stock_strict", cache_key=key),
        "policy_default": compile_fn(inputs, outputs, "policy_default", cache_key=key, inspect_ir=True),
    }


def _points(dtype):
    rng = np.random.default_rng(11)
    x = np.r_[SPECIAL, rng.normal(size=12) * 4].astype(dtype)
    y = np.r_[SPECIAL[::-1], rng.gamma(2.0, size=12)].astype(dtype)
    z = np.r_[np.linspace(-1.2, 1.2, len(SPECIAL)), rng.uniform(size=12)].astype(dtype)
    return x, y, z


@pytest.mark.parametrize("a, b", [(0.0, 1.0), (-3.0, 0.5), (2.5, -2.5), (np.nan, 1e-300), (1e300, np.inf), (-0.0, 7.0)])
def test_same_bits_as_stock(fns, a, b):
    dtype, fs = fns
    assert_no_fallback(fs["policy_default"])
    args = (*_points(dtype), np.asarray(a, dtype=dtype), np.asarray(b, dtype=dtype))
    ref = fs["stock_strict"](*args)
    got = fs["policy_default"](*args)
    for r, g in zip(ref, got, strict=True):
        assert_same_bits(g, r)


def test_the_function_calls_scipy_by_symbol_without_object_mode(fns):
    _dtype, fs = fns
    ir = final_ir(fs["policy_default"])
    assert SYMBOL_PREFIX in ir
    assert "_ptr_cache_" not in ir  # the stock call's address cache (object-mode lookup)
    for symbol in {s for s in bound() if s in ir}:
        assert f"@{symbol}(" in ir


def test_rule_kinds():
    x = pt.dvector("x")
    assert rule_kind(pt.i0(x).owner.op.scalar_op) == "cython"
    assert rule_kind(pt.psi(x).owner.op.scalar_op) == "cython | vector formula"
    # polygamma has no cython function in scipy: the stock backend's function is called
    assert rule_kind(pt.polygamma(1, x).owner.op.scalar_op) == "stock"


def test_symbol_names_are_stable_and_distinct():
    a = symbol_name("scipy.special.cython_special", "__pyx_fuse_1psi")
    assert a == symbol_name("scipy.special.cython_special", "__pyx_fuse_1psi")
    assert a != symbol_name("scipy.special.cython_special", "__pyx_fuse_0psi")
    assert a.startswith(SYMBOL_PREFIX) and a.replace("_", "").isalnum()


CACHED_PROBE = r"""
import sys
from pathlib import Path
import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
sys.path.insert(0, sys.argv[2])
numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
from test_cython_calls import _graph, _points
from conftest import compile_fn
with pytensor.config.change_flags(numba__cache=True):
    fn = compile_fn(*_graph("float64"), "policy_default")
outs = fn(*_points("float64"), np.float64(2.5), np.float64(0.75))
print("PROBE", " ".join(np.concatenate([np.ravel(o) for o in outs]).view(np.int64).astype(str)))
"""


def test_a_process_loading_the_cached_function_binds_the_symbols(tmp_path):
    """The first process compiles onto an empty cache, the second loads the function: both
    compute stock's bits (the second binds each symbol when it plans the nodes)."""
    from pathlib import Path

    tests = Path(__file__).parent
    cold = second_process_line(CACHED_PROBE, [tmp_path, tests], "PROBE")
    warm = second_process_line(CACHED_PROBE, [tmp_path, tests], "PROBE")
    assert cold == warm
    ref = compile_fn(*_graph("float64"), "stock_strict", cache_key="cython_calls_float64")(*_points("float64"), np.float64(2.5), np.float64(0.75))
    assert cold == "PROBE " + " ".join(np.concatenate([np.ravel(o) for o in ref]).view(np.int64).astype(str))
