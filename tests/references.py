"""What a policy result must match (docs/divergences.md).

* **stock strict** (numba, fastmath off), bit for bit: the reference, wherever it agrees
  with the graph's meaning;
* **the graph's dtypes** decide where stock does not (``pt.reciprocal(int32)`` is float64,
  ``True + True`` is a bool): the ``py`` linker computes every node in numpy with
  PyTensor's dtypes, nothing compiles, so it is computed for every output;
* **the C backend** breaks ties where numpy or scipy is the odd one out (``gammaln(-inf)``,
  subnormal ``erfc``): a result that agrees with stock *and* C is right, whatever py says.
  It is compiled only for the outputs that need it.

``agree`` is the tolerance used to call two backends' results the same: equal dtypes,
bool/int values, NaN and +-inf positions; floats within ``RTOL`` relative (1e-10 for
float64, about 450,000 ulp: libm and numpy differences of a few ulp, amplified by
cancellation, stay below it, while a float64 result rounded to float32 on the way, 6e-8,
does not; 1e-4 for float32, about 840 ulp). ``rtol`` overrides it: a float64 output fed
by a float32 value (``atan2(float32, uint8) - int32``) carries float32 ulps, where libm's
``atan2f`` and numpy's float32 arctan2 may differ by one (`test_fuzz.budget_eps`). It
applies to the policy's result only: whether stock departs from the graph's dtypes is
always decided to the output dtype's tolerance.
"""

from __future__ import annotations

import numpy as np

RTOL = {np.dtype("float32"): 1e-4, np.dtype("float64"): 1e-10}


def agree(a, b, rtol=None) -> bool:
    if a is None or b is None:  # a backend that raised agrees with nothing
        return False
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    for pattern in (np.isnan, np.isposinf, np.isneginf):
        if not np.array_equal(pattern(a), pattern(b)):
            return False
    finite = np.isfinite(b)
    return bool(np.allclose(a[finite], b[finite], rtol=RTOL[a.dtype] if rtol is None else rtol, atol=0))


def same_bits(a, b) -> bool:
    """Identical dtypes, values, NaN positions and signs of zero (conftest.assert_same_bits)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind != "f":
        return bool(np.array_equal(a, b))
    if not np.array_equal(a, b, equal_nan=True):
        return False
    finite = ~np.isnan(b)
    return bool(np.array_equal(np.signbit(a[finite]), np.signbit(b[finite])))


def verdict(res, stock, py, c=None, rtol=None) -> str | None:
    """None if ``res`` (a policy ``strict`` result) is right, else why not.

    ``c`` is the C backend's result, or a callable computing it (called only if needed).
    Stock strict's own bits are always right: they are the decision reference of every
    policy (numba's ``sign(-0.0)`` is ``-0.0`` where numpy and C give ``0.0``, so
    ``x // sign(-0.0)`` is ``-inf`` on stock alone, and a policy must decide as stock does).
    """
    if same_bits(res, stock):
        return None
    if np.asarray(res).dtype.kind == "f" and same_bits(res, py):
        # the graph's dtypes computed by numpy and by C, bit for bit: right, even where
        # stock agrees with them to the output's tolerance only (a float32 gradient whose
        # float64 division stock computes in float32: one float32 ulp, inside 1e-4).
        # Floats only: a bool or integer decision is stock's, whatever numpy and C say
        c = c() if callable(c) else c
        if c is not None and same_bits(res, c):
            return None
    if agree(stock, py):  # (float64's tolerance: stock rounding a sum to float32 departs)
        return None if same_bits(res, stock) else "differs from stock strict (which follows the graph's dtypes)"
    if agree(res, py, rtol):
        return None  # stock departs from the graph's dtypes; the policy follows them
    c = c() if callable(c) else c
    if c is not None and agree(res, c, rtol):
        # numpy/scipy is the odd one out (stock agrees with C), or stock and numpy both
        # depart from C, at different elements (`1.0 // -inf`: stock -0.0, numpy and C -1;
        # `1.0 // 1e-8`: numpy 99999999, stock and C 1e8): the C backend breaks the tie
        return None
    return "differs from the graph's dtypes (py linker) and from the C backend"


def reference(stock, py, c=None):
    """The result a backend should be close to: stock strict's, unless it departs from the
    graph's dtypes (py) without the C backend's support."""
    if agree(stock, py):
        return stock
    c = c() if callable(c) else c
    return stock if c is not None and agree(stock, c) else py
