"""nutpie's C wrappers built with element loops (`ptnumba_codegen.nutpie_wrappers`).

The replacements must be nutpie's wrappers in all but how they copy: around the same
PyTensor functions, nutpie's own cfunc and the replacement's return the same code and write
the same bits, at a regular point, where the gradient is not finite (3), where only the logp
is not finite (4), where the function raises (1 / -2), and at a wrong size (-1). The switch
decides which one nutpie builds; another nutpie signature keeps nutpie's own.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

nutpie = pytest.importorskip("nutpie")
pytest.importorskip("pymc")

import numba  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pytensor.raise_op import Assert  # noqa: E402

import nutpie.compile_pymc as ncp  # noqa: E402

import ptnumba_codegen  # noqa: E402
from ptnumba_codegen import nutpie_wrappers  # noqa: E402
from ptnumba_codegen.settings import NUTPIE_WRAPPERS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
N = 3
DOUBLE_P = ctypes.POINTER(ctypes.c_double)


def _nutpie_own(name):
    fn = getattr(ncp, name)
    return getattr(fn, "__wrapped__", fn)


@pytest.fixture(scope="module")
def functions():
    """logp = sum(log x) (not finite at x0 = 0), "gradient" = x (raises at x0 >= 100), and an
    expansion (x, exp(x)), compiled with the numba linker as nutpie compiles them."""
    x = pt.vector("x", shape=(N,))
    checked = Assert("x0 < 100")(x, x[0] < 100)
    logp_fn = pytensor.function([x], [pt.log(x).sum(), checked * 1.0], mode="NUMBA")
    expand_fn = pytensor.function([x], [pt.concatenate([checked, pt.exp(x)])], mode="NUMBA")
    return logp_fn.vm.jit_fn, expand_fn.vm.jit_fn


def _cfuncs(make, *args):
    raw, sig = make(*args)
    return numba.cfunc(sig)(raw)


@pytest.fixture(scope="module")
def logp_pair(functions):
    user_data = ncp.make_user_data({}, {})
    ours = _cfuncs(nutpie_wrappers.make_c_logp_func, N, functions[0], user_data, [], {})
    theirs = _cfuncs(_nutpie_own("_make_c_logp_func"), N, functions[0], user_data, [], {})
    return ours, theirs, user_data


def _call_logp(cf, user_data, x, dim=N):
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.full(N, -7.25)
    logp = np.full((), -7.25)
    rc = cf.ctypes(dim, x.ctypes.data_as(DOUBLE_P), out.ctypes.data_as(DOUBLE_P),
                   logp.ctypes.data_as(DOUBLE_P), ctypes.c_void_p(user_data.ctypes.data))
    return rc, logp.view(np.uint64).copy(), out.view(np.uint64).copy()


@pytest.mark.parametrize(
    ("point", "code"),
    [
        ([0.5, 1.25, 3.0], 0),
        ([1e-300, 7.0, 1e300], 0),
        ([0.0, 1.0, 2.0], 4),  # logp -inf, gradient finite
        ([-1.0, 1.0, 2.0], 4),  # logp nan
        ([1.0, np.inf, 2.0], 3),  # gradient not finite (checked before the logp)
        ([1.0, np.nan, 2.0], 3),
        ([100.0, 1.0, 2.0], 1),  # the function raises
    ],
)
def test_the_logp_wrapper_returns_nutpies_codes_and_bits(logp_pair, point, code):
    ours, theirs, user_data = logp_pair
    got, want = _call_logp(ours, user_data, point), _call_logp(theirs, user_data, point)
    assert got[0] == want[0] == code
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])


def test_the_logp_wrapper_refuses_a_wrong_size(logp_pair):
    ours, theirs, user_data = logp_pair
    assert _call_logp(ours, user_data, [1.0, 2.0, 3.0], dim=N + 1)[0] == -1
    assert _call_logp(theirs, user_data, [1.0, 2.0, 3.0], dim=N + 1)[0] == -1


def test_the_expand_wrapper_returns_nutpies_codes_and_bits(functions):
    user_data = ncp.make_user_data({}, {})
    args = (N, 2 * N, functions[1], user_data, [], {})
    ours = _cfuncs(nutpie_wrappers.make_c_expand_func, *args)
    theirs = _cfuncs(_nutpie_own("_make_c_expand_func"), *args)

    def call(cf, x, dim=N, expanded=2 * N):
        x = np.ascontiguousarray(x, dtype=np.float64)
        out = np.full(2 * N, -7.25)
        rc = cf.ctypes(dim, expanded, x.ctypes.data_as(DOUBLE_P), out.ctypes.data_as(DOUBLE_P),
                       ctypes.c_void_p(user_data.ctypes.data))
        return rc, out.view(np.uint64).copy()

    for point, code in (([0.5, -2.0, 700.0], 0), ([1.0, 800.0, np.nan], 0), ([100.0, 0.0, 0.0], -2)):
        got, want = call(ours, point), call(theirs, point)
        assert got[0] == want[0] == code, point
        np.testing.assert_array_equal(got[1], want[1])
    for dims in ((N + 1, 2 * N), (N, 2 * N + 1)):
        assert call(ours, [1.0, 2.0, 3.0], *dims)[0] == call(theirs, [1.0, 2.0, 3.0], *dims)[0] == -1


def test_the_switch_decides_which_wrappers_nutpie_builds():
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu")
        pm.Normal("y", mu, 1.0, observed=np.array([0.3, -0.1, 0.8]))
    before = dict(nutpie_wrappers.STATS)
    with ptnumba_codegen.enabled("default"):
        policy = nutpie.compile_pymc_model(model)
    assert nutpie_wrappers.state() == "element loops while the switch is on"
    assert nutpie_wrappers.replaced() == tuple(nutpie_wrappers.REPLACED)
    assert nutpie_wrappers.STATS["logp"] == before["logp"] + 1
    assert nutpie_wrappers.STATS["expand"] == before["expand"] + 1
    stock = nutpie.compile_pymc_model(model)  # switch off: nutpie's own
    assert nutpie_wrappers.STATS == {"logp": before["logp"] + 1, "expand": before["expand"] + 1}
    # both C functions compute the model's logp and gradient
    user_data = policy.user_data
    for compiled in (policy, stock):
        rc, logp, out = _call_logp_n(compiled, 1, [0.2])
        assert rc == 0
        np.testing.assert_allclose(logp, compiled.logp_func(np.array([0.2]))[0], rtol=1e-12)
        np.testing.assert_allclose(out, compiled.logp_func(np.array([0.2]))[1], rtol=1e-12)
    assert user_data is not None


def _call_logp_n(compiled, n, x):
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.zeros(n)
    logp = np.zeros(())
    rc = compiled.compiled_logp_func.ctypes(
        n, x.ctypes.data_as(DOUBLE_P), out.ctypes.data_as(DOUBLE_P), logp.ctypes.data_as(DOUBLE_P),
        ctypes.c_void_p(compiled.user_data.ctypes.data))
    return rc, float(logp), out


def test_another_nutpie_signature_keeps_nutpies_own():
    fake = types.SimpleNamespace(
        make_extraction_fn=lambda *a: None,
        _make_c_logp_func=lambda n_dim, logp_fn, user_data, shared_keys: None,
        _make_c_expand_func=_nutpie_own("_make_c_expand_func"),
    )
    reason = nutpie_wrappers.why_not(fake)
    assert reason == ("nutpie.compile_pymc._make_c_logp_func takes (n_dim, logp_fn, user_data, shared_keys), "
                      "not (n_dim, logp_fn, user_data, shared_keys, shared_data)")
    assert nutpie_wrappers.why_not(types.SimpleNamespace()) == "nutpie.compile_pymc.make_extraction_fn is missing"
    assert nutpie_wrappers.why_not(ncp) is None


def test_a_bad_setting_names_the_allowed_values(monkeypatch):
    monkeypatch.setenv(NUTPIE_WRAPPERS.env, "fast")
    with pytest.raises(ValueError, match=r"PTNUMBA_CODEGEN_NUTPIE_WRAPPERS='fast': allowed values are loops, nutpie"):
        nutpie_wrappers.install(lambda: True)


def test_nutpie_imported_after_enable_gets_them_and_the_setting_keeps_nutpies():
    code = (
        "import ptnumba_codegen, sys\n"
        "ptnumba_codegen.enable()\n"
        "assert 'nutpie' not in sys.modules\n"
        "import nutpie.compile_pymc\n"
        "from ptnumba_codegen import nutpie_wrappers as w\n"
        "print(w.replaced(), w.state())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(NUTPIE_WRAPPERS.env, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "('_make_c_logp_func', '_make_c_expand_func') element loops while the switch is on"
    env[NUTPIE_WRAPPERS.env] = "nutpie"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[0] == "() nutpie's own wrappers (PTNUMBA_CODEGEN_NUTPIE_WRAPPERS=nutpie)"


def test_under_the_switch_nutpies_logp_is_the_functions_own_machine_code():
    """`runtime.symbol_calls`: the wrapper calls the PyTensor function's machine code (a
    declaration in its module, not a copy of its IR optimized again), so the C logp and
    gradient are the bits ``logp_func(x)`` returns from Python, and numba refuses to cache
    the wrapper (its code holds this process's symbols)."""
    import pymc as pm

    from ptnumba_codegen.runtime import symbol_calls

    data = np.random.default_rng(3).normal(size=4001)
    with pm.Model() as model:
        mu = pm.Normal("mu")
        sigma = pm.HalfNormal("sigma")
        pm.Normal("y", mu, sigma, observed=data)
    with ptnumba_codegen.enabled("default"):
        compiled = nutpie.compile_pymc_model(model)
    library = compiled.compiled_logp_func._library
    assert symbol_calls.is_caller(library)
    assert library.has_dynamic_globals  # numba's check_cachable refuses it
    defined = {fn.name for fn in library._final_module.functions if not fn.is_declaration}
    assert not any("numba_funcified_fgraph" in name for name in defined)
    for point in ([0.3, -0.2], [-1.7, 2.5], [40.0, -30.0]):
        rc, logp, out = _call_logp_n(compiled, 2, point)
        want_logp, want_grad = compiled.logp_func(np.array(point))
        assert rc == 0
        assert np.float64(logp).tobytes() == np.float64(want_logp).tobytes()
        np.testing.assert_array_equal(out.view(np.uint64), np.asarray(want_grad).view(np.uint64))


def test_other_libraries_link_as_numba_does(functions):
    from ptnumba_codegen.runtime import symbol_calls

    user_data = ncp.make_user_data({}, {})
    theirs = _cfuncs(_nutpie_own("_make_c_logp_func"), N, functions[0], user_data, [], {})
    assert not symbol_calls.is_caller(theirs._library)
    defined = {fn.name for fn in theirs._library._final_module.functions if not fn.is_declaration}
    assert any("numba_funcified_fgraph" in name for name in defined)  # the function's IR copied in


def test_the_wrappers_names_are_symbol_callers():
    from ptnumba_codegen.runtime import symbol_calls

    raw, _ = nutpie_wrappers.make_c_logp_func(N, None, ncp.make_user_data({}, {}), [], {})
    raw_expand, _ = nutpie_wrappers.make_c_expand_func(N, N, None, ncp.make_user_data({}, {}), [], {})
    assert {raw.__name__, raw_expand.__name__} == set(symbol_calls.CALLERS)


class _Shared:
    """A stand-in for a shared variable in nutpie's ``make_user_data`` (it reads ``ndim``)."""

    def __init__(self, ndim):
        self.ndim = ndim


def _shared_record(arrays: dict):
    keys = {_Shared(np.ndim(v)): k for k, v in arrays.items()}
    return ncp.make_user_data(keys, arrays)


def _probe_inner():
    """``inner(x, a, b, c, d)``: every value, shape, stride and dtype-dependent read of its
    arrays folded into one float, so two extractions agree only if they hand over the same
    arrays."""

    @numba.njit(no_cpython_wrapper=True)
    def inner(x, a, b, c, d):
        acc = x[0]
        for i in range(a.shape[0]):
            for j in range(a.shape[1]):
                acc = acc * 1.0001 + a[i, j] * (i + 1) + (j + 3)
        for i in range(b.shape[0]):
            acc = acc * 1.0003 + b[i]
        acc += c[()] * 7.0
        for i in range(d.shape[0]):
            acc += 11.0 if d[i] else -5.0
        acc += a.strides[0] * 1e-3 + a.strides[1] * 1e-4 + b.strides[0] * 1e-5 + b.shape[0] + d.shape[0] * 13.0
        return acc

    return inner


def _extraction_cfunc(extract):
    sig = numba.types.float64(numba.types.CPointer(numba.types.double), numba.types.voidptr)

    def call(x_, user_data_):
        x = numba.carray(x_, (1,))
        try:
            return extract(x, user_data_)
        except Exception:  # noqa: BLE001  (as nutpie's wrappers: an exception is a return code)
            return -1.0

    return numba.cfunc(sig)(call)


def test_the_shared_data_extraction_hands_over_nutpies_arrays():
    """`nutpie_extraction.make_extraction` against nutpie's ``make_extraction_fn`` around
    the same function: the same result bits for a 2-d float, 1-d int32, 0-d float and 1-d
    bool variable; again after the record is pointed at new data of other shapes (nutpie's
    ``update_user_data``, as its ``with_data`` does); an exception where the record's size
    is not the product of its shape, which the wrapper's ``try`` sees (nutpie's ``reshape``
    raises inside the inlined extraction, out of the ``try``'s sight)."""
    from ptnumba_codegen.nutpie_extraction import make_extraction

    arrays = {"a": np.arange(6.0).reshape(2, 3) / 7, "b": np.array([3, -4, 5], dtype=np.int32),
              "c": np.array(2.5), "d": np.array([True, False, True, True])}
    user_data = _shared_record(arrays)
    inner = _probe_inner()
    keys = list(arrays)
    ours = _extraction_cfunc(make_extraction(inner, arrays, keys, user_data.dtype))
    theirs = _extraction_cfunc(ncp.make_extraction_fn(inner, arrays, keys, user_data.dtype))
    x = np.array([0.25])

    def call(cf):
        return np.float64(cf.ctypes(x.ctypes.data_as(DOUBLE_P), ctypes.c_void_p(user_data.ctypes.data)))

    def both():
        return call(ours), call(theirs)

    got, want = both()
    assert got.tobytes() == want.tobytes() and got != -1.0
    updated = {"a": np.linspace(-1, 1, 12).reshape(4, 3), "b": np.array([9, 8], dtype=np.int32),
               "c": np.array(-0.5), "d": np.array([False, True])}
    user_data[...] = ncp.update_user_data(user_data, updated)
    got2, want2 = both()
    assert got2.tobytes() == want2.tobytes() and got2 not in (got, -1.0)
    user_data["shared"]["size"]["a"] = 11  # not 4 * 3
    assert call(ours) == -1.0


def test_under_the_switch_a_model_with_data_is_called_by_symbol_with_its_bits():
    """A model with ``pm.Data``: the C logp and gradient are ``logp_func(x)``'s bits, the
    wrapper calls the function's machine code (no copy of its IR), and the sampler's draws
    follow the data when nutpie's ``with_data`` changes it."""
    import pymc as pm

    from ptnumba_codegen.runtime import symbol_calls

    rng = np.random.default_rng(5)
    with pm.Model() as model:
        xs = pm.Data("xs", rng.normal(size=(40, 2)))
        ys = pm.Data("ys", rng.integers(0, 2, size=40).astype(np.int64))
        beta = pm.Normal("beta", shape=2)
        pm.Bernoulli("y", logit_p=xs @ beta, observed=ys)
    with ptnumba_codegen.enabled("default"):
        compiled = nutpie.compile_pymc_model(model)
    library = compiled.compiled_logp_func._library
    assert symbol_calls.is_caller(library)
    defined = {fn.name for fn in library._final_module.functions if not fn.is_declaration}
    assert not any("numba_funcified_fgraph" in name for name in defined)
    for point in ([0.3, -0.2], [-1.7, 2.5]):
        rc, logp, out = _call_logp_n(compiled, 2, point)
        want_logp, want_grad = compiled.logp_func(np.array(point))
        assert rc == 0
        assert np.float64(logp).tobytes() == np.float64(want_logp).tobytes()
        np.testing.assert_array_equal(out.view(np.uint64), np.asarray(want_grad).view(np.uint64))
    half = compiled.with_data(xs=np.ones((40, 2)) * 0.5, ys=np.ones(40, dtype=np.int64))
    rc, logp, out = _call_logp_n(half, 2, [0.0, 0.0])
    assert rc == 0
    np.testing.assert_allclose(logp, 40 * np.log(0.5) - 2 * 0.5 * np.log(2 * np.pi), rtol=1e-12)
    np.testing.assert_allclose(out, [0.5 * 40 * 0.5, 0.5 * 40 * 0.5], rtol=1e-12)
