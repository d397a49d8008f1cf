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
    """`find_exp_data` of this process's libm (once per process)."""
    path = mapped_libm()
    if path is None:
        return "no libm mapped in this process"
    return find_exp_data(path)


__all__ = ["ExpData", "find_exp_data", "glibc_exp_data", "mapped_libm"]
