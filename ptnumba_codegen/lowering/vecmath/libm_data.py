"""The constants of this process's libm, read from the library itself (pure Python, no numba).

`lowering.exact_lanes` computes libm's own ``exp`` algorithm on vectors: it needs the very
constants and table that libm uses, not a re-derivation of them (a coefficient off by one
unit changes some results by one ulp, and a strict comparison cone must see libm's bits).
So they are read from the libm file this process has mapped, found by what they are:

* glibc (2.28 on) computes ``exp(x) = 2^(k/N) * exp(r)`` with ``N = 128`` from a 256-word
  table whose odd words are the bits of ``2^(k/N)`` minus ``k << 45`` (word 1 is the bits
  of 1.0, word 0 is 0), preceded by 14 doubles: ``N/ln2``, ``-ln2/N`` split in two,
  four polynomial coefficients, the rounding shift ``0x1.8p52`` (1.5 * 2^52), and exp2's own six;
* `glibc_exp_data` scans the file for a table with exactly that shape and checks every
  header value against the number it approximates (``N/ln2`` to 1e-15, the coefficients
  of ``e^r - 1 - r`` to the precision a minimax fit keeps).

Anything else (another libm, another layout, a table that does not check) gives None and
the reason; the caller then keeps libm's scalar calls. Finding the data is not proof of
identity: `exact_lanes` also compares its vector code with libm's ``exp`` on probes before
it uses it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from ptnumba_codegen.lowering.vecmath import libm_data_cache

EXP_TABLE_BITS = 7
N = 1 << EXP_TABLE_BITS
HEADER_WORDS = 14  # doubles before the table in glibc's struct exp_data
ONE_BITS = 0x3FF0000000000000
# header index -> (name, value it approximates, relative tolerance)
EXP_HEADER = {
    0: ("invln2N", N / math.log(2.0), 1e-15),
    1: ("negln2hiN", -math.log(2.0) / N, 1e-11),
    3: ("C2", 1 / 2, 1e-9),
    4: ("C3", 1 / 6, 1e-8),
    5: ("C4", 1 / 24, 1e-5),
    6: ("C5", 1 / 120, 1e-4),
    7: ("shift", 1.5 * 2.0**52, 0.0),
}


@dataclass(frozen=True)
class ExpData:
    """glibc's exp constants and table, as found in ``path`` at byte ``offset``."""

    path: str
    offset: int
    invln2N: float
    negln2hiN: float
    negln2loN: float
    C2: float
    C3: float
    C4: float
    C5: float
    shift: float
    tab: tuple[int, ...]  # 2 * N words: tail bits, then scale bits - (k << 45)


def mapped_libm() -> str | None:
    """The path of the libm this process has mapped (Linux), or None."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if line.split() else ""
                if "/libm.so" in path or "/libm-" in path:
                    return path
    except OSError:
        return None
    return None


def _check_header(header: np.ndarray) -> str | None:
    for i, (name, approx, tol) in EXP_HEADER.items():
        v = float(header[i])
        if not math.isfinite(v) or abs(v - approx) > tol * abs(approx):
            return f"{name} = {v!r} is not ~{approx!r}"
    lo = float(header[2])
    if not abs(float(header[1]) + lo + math.log(2.0) / N) < 1e-20:
        return "negln2hiN + negln2loN is not -ln2/N"
    return None


def _table_at(words: np.ndarray, p: int) -> bool:
    k = np.arange(N, dtype=np.uint64)
    scale = (words[p + 1 + 2 * k.astype(np.int64)] + (k << np.uint64(52 - EXP_TABLE_BITS))).view(np.float64)
    tail = words[p + 2 * k.astype(np.int64)].view(np.float64)
    exact = 2.0 ** (np.arange(N) / N)
    return bool(np.all(np.abs(scale / exact - 1) < 3e-16) and np.all(np.abs(tail) < 2.0**-52))


def find_exp_data(path: str) -> ExpData | str:
    """glibc's exp data in the file ``path``, or the reason it is not there."""
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as err:
        return f"cannot read {path}: {err}"
    words = raw[: len(raw) // 8 * 8].view(np.uint64)
    found, why = [], "no exp table (2^(k/128) in glibc's layout)"
    for p in np.nonzero((words[1:] == ONE_BITS) & (words[:-1] == 0))[0].tolist():
        if p < HEADER_WORDS or p + 2 * N > len(words) or not _table_at(words, p):
            continue
        header = words[p - HEADER_WORDS : p].view(np.float64)
        why = _check_header(header)
        if why is None:
            found.append((p, header))
    if len(found) != 1:
        return why if not found else f"{len(found)} candidate exp tables"
    p, h = found[0]
    return ExpData(
        path, 8 * (p - HEADER_WORDS), *(float(v) for v in h[:8]), tuple(int(w) for w in words[p : p + 2 * N])
    )


@cache
def glibc_exp_data() -> ExpData | str:
    """`find_exp_data` of this process's libm (once per process; from disk when an earlier
    process found it, see `libm_data_cache`)."""
    path = mapped_libm()
    if path is None:
        return "no libm mapped in this process"
    return libm_data_cache.found("exp", path, ExpData, find_exp_data)


# -- log (glibc 2.28 on: sysdeps/ieee754/dbl-64/e_log_data.c, struct log_data) ---------------

LOG_TABLE_BITS = 7
LOG_N = 1 << LOG_TABLE_BITS
LOG_OFF = 0x3FE6000000000000  # z = x / 2^k lies in [OFF, 2 * OFF) (bits), table index from its top bits
LOG_HEADER_WORDS = 18  # ln2hi, ln2lo, poly[5] (log1p(r) - r on |r| < 1/256), poly1[11] (near 1)
# header index -> (value it approximates, relative tolerance): a minimax fit stays near the
# Taylor coefficient, the farther the term the looser
LOG_POLY = {k: ((-1) ** (k + 1) / (k + 2), tol) for k, tol in enumerate((1e-14, 1e-8, 1e-8, 1e-4, 1e-3))}
LOG_POLY1 = {
    k: ((-1) ** (k + 1) / (k + 2), tol)
    for k, tol in enumerate((0.0, 1e-12, 1e-11, 1e-8, 1e-7, 1e-5, 1e-5, 1e-4, 1e-3, 3e-2, 3e-2))
}
LN2 = math.log(2.0)


@dataclass(frozen=True)
class LogData:
    """glibc's log constants and table, as found in ``path`` at byte ``offset``."""

    path: str
    offset: int
    ln2hi: float
    ln2lo: float
    poly: tuple[float, ...]  # A[0..4]
    poly1: tuple[float, ...]  # B[0..10]
    tab: tuple[int, ...]  # 2 * LOG_N words: invc, logc bits per subinterval


def _near(values, expected: dict) -> str | None:
    for k, (approx, tol) in expected.items():
        v = float(values[k])
        if not math.isfinite(v) or abs(v - approx) > tol * abs(approx):
            return f"coefficient {k} = {v!r} is not ~{approx!r}"
    return None


def _ln2_hi_lo(hi: float, lo: float) -> bool:
    return abs(hi - LN2) < 1e-12 and 0 < abs(lo) < 1e-12 and abs(hi + lo - LN2) < 2e-16


def _log_table_ok(invc: np.ndarray, logc: np.ndarray, off: int, n: int) -> bool:
    """``c = 1/invc`` serves subinterval ``i`` of ``[off, 2 off)`` (bits): ``|z/c - 1| <= 1/n``
    at both its ends, and ``logc`` is ``log(c)``."""
    if not (np.all(np.isfinite(invc)) and np.all(np.isfinite(logc)) and np.all(invc > 0)):
        return False
    i = np.arange(n, dtype=np.uint64)
    shift = np.uint64(52 - LOG_TABLE_BITS)
    lo = (np.uint64(off) + (i << shift)).view(np.float64)
    hi = (np.uint64(off) + ((i + np.uint64(1)) << shift)).view(np.float64)
    serves = (np.abs(lo * invc - 1) <= 1 / n) & (np.abs(hi * invc - 1) <= 1 / n)
    return bool(np.all(serves) and np.all(np.abs(logc + np.log(invc)) < 1e-15))


def _words(path: str) -> np.ndarray | str:
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as err:
        return f"cannot read {path}: {err}"
    return raw[: len(raw) // 8 * 8].view(np.uint64)


def find_log_data(path: str) -> LogData | str:
    """glibc's log data in the file ``path``, or the reason it is not there: ln2 split in
    two, the two polynomials near log1p's Taylor coefficients, 128 (1/c, log c) pairs whose
    c are in their subintervals of ``[0x1.6p-1, 0x1.6p0)``."""
    words = _words(path)
    if isinstance(words, str):
        return words
    f = words.view(np.float64)
    found, why = [], "no log data (ln2 split in two, then log1p's coefficients, in glibc's layout)"
    with np.errstate(invalid="ignore"):
        hits = np.nonzero(np.abs(f - LN2) < 1e-12)[0].tolist()
    for p in hits:
        end = p + LOG_HEADER_WORDS + 2 * LOG_N
        if end > len(f) or not _ln2_hi_lo(float(f[p]), float(f[p + 1])):
            continue
        why = _near(f[p + 2 : p + 7], LOG_POLY) or _near(f[p + 7 : p + 18], LOG_POLY1)
        if why is not None:
            why = f"log data: {why}"
            continue
        tab = f[p + LOG_HEADER_WORDS : end]
        if not _log_table_ok(tab[0::2], tab[1::2], LOG_OFF, LOG_N):
            why = "log data: the (1/c, log c) table does not check"
            continue
        found.append(p)
    if len(found) != 1:
        return why if not found else f"{len(found)} candidate log tables"
    p = found[0]
    return LogData(
        path,
        8 * p,
        float(f[p]),
        float(f[p + 1]),
        tuple(float(v) for v in f[p + 2 : p + 7]),
        tuple(float(v) for v in f[p + 7 : p + 18]),
        tuple(int(w) for w in words[p + LOG_HEADER_WORDS : p + LOG_HEADER_WORDS + 2 * LOG_N]),
    )


@cache
def glibc_log_data() -> LogData | str:
    """`find_log_data` of this process's libm (once per process; `libm_data_cache`)."""
    path = mapped_libm()
    if path is None:
        return "no libm mapped in this process"
    return libm_data_cache.found("log", path, LogData, find_log_data)


# -- pow (glibc 2.28 on: e_pow_log_data.c, struct pow_log_data; exp_inline uses exp's data) --

POW_LOG_OFF = 0x3FE6955500000000  # z = x / 2^k lies in [OFF, 2 * OFF) (bits)
POW_HEADER_WORDS = 9  # ln2hi, ln2lo, poly[7]
# log1p's coefficients, scaled as e_pow_log_data.c scales them (-1/2, 1/3 * -2, -1/4 * -2,
# 1/5 * 4, -1/6 * 4, 1/7 * -8, -1/8 * -8), relative tolerances as for log's
POW_POLY = {
    k: (c, tol)
    for k, (c, tol) in enumerate(
        zip((-1 / 2, -2 / 3, 1 / 2, 4 / 5, -2 / 3, -8 / 7, 1.0), (0.0, 1e-12, 1e-11, 1e-8, 1e-7, 1e-3, 1e-2), strict=True)
    )
}


@dataclass(frozen=True)
class PowData:
    """glibc's pow constants and tables: its log's (``path`` at byte ``offset``) and exp's."""

    path: str
    offset: int
    ln2hi: float
    ln2lo: float
    poly: tuple[float, ...]  # A[0..6]
    tab: tuple[int, ...]  # 4 * LOG_N words: invc, pad, logc, logctail bits per subinterval
    exp: ExpData


def find_pow_data(path: str, exp: ExpData | str) -> PowData | str:
    """glibc's pow data in the file ``path`` (its log table beside ``exp``'s data), or the
    reason it is not there: ln2 split in two, the scaled coefficients, 128 (1/c, 0, log c
    rounded to 2^-43, its tail) whose c are in their subintervals of [0x1.69555p-1, 0x1.69555p0)."""
    if isinstance(exp, str):
        return f"pow needs exp's data: {exp}"
    words = _words(path)
    if isinstance(words, str):
        return words
    f = words.view(np.float64)
    found, why = [], "no pow log data (ln2 split in two, then pow's scaled coefficients, in glibc's layout)"
    with np.errstate(invalid="ignore"):
        hits = np.nonzero(np.abs(f - LN2) < 1e-12)[0].tolist()
    for p in hits:
        end = p + POW_HEADER_WORDS + 4 * LOG_N
        if end > len(f) or not _ln2_hi_lo(float(f[p]), float(f[p + 1])):
            continue
        why = _near(f[p + 2 : p + POW_HEADER_WORDS], POW_POLY)
        if why is not None:
            why = f"pow log data: {why}"
            continue
        tab = f[p + POW_HEADER_WORDS : end]
        invc, pad, logc, tail = tab[0::4], tab[1::4], tab[2::4], tab[3::4]
        with np.errstate(all="ignore"):
            ok = (
                np.all(pad == 0.0)
                and np.all(np.isfinite(tail))
                and np.all(np.abs(tail) < 2.0**-40)
                and _log_table_ok(invc, logc + tail, POW_LOG_OFF, LOG_N)
                and np.all(logc * 2.0**43 == np.round(logc * 2.0**43))
            )
        if not ok:
            why = "pow log data: the (1/c, log c, tail) table does not check"
            continue
        found.append(p)
    if len(found) != 1:
        return why if not found else f"{len(found)} candidate pow log tables"
    p = found[0]
    return PowData(
        path,
        8 * p,
        float(f[p]),
        float(f[p + 1]),
        tuple(float(v) for v in f[p + 2 : p + POW_HEADER_WORDS]),
        tuple(int(w) for w in words[p + POW_HEADER_WORDS : p + POW_HEADER_WORDS + 4 * LOG_N]),
        exp,
    )


@cache
def glibc_pow_data() -> PowData | str:
    """`find_pow_data` of this process's libm (once per process; `libm_data_cache`)."""
    path = mapped_libm()
    if path is None:
        return "no libm mapped in this process"
    return libm_data_cache.found("pow", path, PowData, lambda p: find_pow_data(p, glibc_exp_data()))


__all__ = [
    "ExpData", "LogData", "PowData", "find_exp_data", "find_log_data", "find_pow_data", "glibc_exp_data", "glibc_log_data",
    "glibc_pow_data", "mapped_libm",
]
