"""Stock scalar formulas (those of ``pytensor.link.numba.dispatch.scalar``), compiled by the
``python`` rule kind as numba subroutines carrying exactly the node's flags. Same formulas,
same numba typing: the ``strict`` policy is bit-for-bit the stock backend."""

from __future__ import annotations

import functools
import math

import numpy as np



def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x):
    if x < -37.0:
        return np.exp(x)
    elif x < 18.0:
        return np.log1p(np.exp(x))
    elif x < 33.3:
        return x + np.exp(-x)
    else:
        return x


# stock upcasts unsigned inputs before negating them (numpy would use float16 for uint8)
_UINT_UPCAST = {"uint8": np.float32, "uint16": np.float32, "uint32": np.float64, "uint64": np.float64}


@functools.cache
def _sigmoid_uint(dtype: str):
    up = _UINT_UPCAST[dtype]

    def sigmoid_uint(x):
        return 1 / (1 + np.exp(-up(x)))

    return sigmoid_uint


@functools.cache
def _softplus_uint(dtype: str):
    up = _UINT_UPCAST[dtype]

    def softplus_uint(x):
        if x < -37.0:
            return np.exp(x)
        elif x < 18.0:
            return np.log1p(np.exp(x))
        elif x < 33.3:
            y = up(x)
            return y + np.exp(-y)
        else:
            return x

    return softplus_uint


def _log1mexp(x):
    if x < np.log(0.5):
        return np.log1p(-np.exp(x))
    else:
        return np.log(-np.expm1(x))


def _clip(x, min_val, max_val):
    if x < min_val:
        return min_val
    elif x > max_val:
        return max_val
    else:
        return x


def _pow(x, y):
    return x**y


def _lgamma(x):
    return math.lgamma(x)


def _erf(x):
    return math.erf(x)


def _erfc(x):
    return math.erfc(x)


def _around(x):
    return np.around(x)


def _uint_sign(x):
    return x != 0


def _round_half_away_from_zero(a):
    # pytensor's impl, which the stock backend runs in object mode on Python floats: the
    # arithmetic is float64 even for float32 inputs (0.49999997f rounds to 0)
    if a > 0:
        return np.floor(a + 0.5)
    else:
        return np.ceil(a - 0.5)


@functools.cache
def _floor_divide_float(dtype: str):
    """Stock's float ``//`` (``floor(a / b)``), except that a finite non-zero ``a`` over an
    infinite ``b`` of the other sign is ``-1``, as in Python, numpy and the C backend
    (stock: ``floor(-0.0) = -0.0``). Where Python floors the exact quotient and stock the
    rounded one (``55. // 0.1``: 549 vs 550) stock and the C backend agree: kept."""
    ft = getattr(np, dtype)
    zero, minus_one = ft(0.0), ft(-1.0)

    def floor_divide(a, b):
        q = np.floor(a / b)
        if np.isinf(b) and np.isfinite(a) and a != zero and (a < zero) != (b < zero):
            return minus_one
        return q

    return floor_divide
