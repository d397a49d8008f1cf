"""glibc malloc settings that keep a model's freed intermediates for its next call.

A logp+dlogp call on 1e5 rows allocates and frees megabytes of intermediates (an ordered
logistic model: (n, 4) Join/Split/IncSubtensor arrays at every call). Numba's runtime
and numpy both allocate with malloc. glibc's dynamic thresholds serve such arrays from the
heap after the first call, but trim the heap top once more than twice the largest freed
chunk is free there -- so every call returned those arrays to the kernel and faulted them
back in, and the page faults took a large part of the call; with the settings of `SETTINGS`
they are gone (CHANGELOG.md, "Figures behind design choices").

`configure()` applies them once per process, when the first function is compiled with
``policy_codegen`` (never at import). It changes nothing when the process is not on glibc,
when the user already chose malloc settings (``GLIBC_TUNABLES`` with ``glibc.malloc.``,
or the ``MALLOC_*_`` variables: theirs win), or when ``PTNUMBA_CODEGEN_MALLOC=system``.
The cost: the process keeps up to ``M_TRIM_THRESHOLD`` of freed memory mapped instead of
returning it to the kernel (its resident size stays at its peak), which a sampler calling
the same function thousands of times wants anyway.
"""

from __future__ import annotations

import ctypes
import ctypes.util

from ptnumba_codegen.runtime import ProcessSetting
from ptnumba_codegen.settings import MALLOC


MIB = 1 << 20

# mallopt parameter -> (its number in <malloc.h>, value, why)
SETTINGS = {
    "M_MMAP_THRESHOLD": (
        -3,
        32 * MIB,
        "arrays up to 32 MiB come from the heap: where glibc's dynamic threshold ends up after "
        "the first free of a large array, fixed from the first call on (setting any threshold "
        "turns the dynamic ones off)",
    ),
    "M_TRIM_THRESHOLD": (
        -1,
        512 * MIB,
        "up to 512 MiB of freed memory stays mapped at the heap top for the next call instead of "
        "being returned to the kernel and faulted back in (glibc's dynamic value is twice the "
        "largest freed array)",
    ),
}

# environment variables by which a user has already chosen malloc settings
USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")



def _user_chose(environ) -> str | None:
    if "glibc.malloc." in environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES sets glibc.malloc.*"
    for name in USER_SETTINGS:
        if name in environ:
            return f"{name} is set"
    return None


def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        version = libc.gnu_get_libc_version
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return version().decode(), mallopt


def _apply(choice: str, environ) -> str:
    """`SETTING`'s work: `SETTINGS` applied (see the module doc)."""
    user = _user_chose(environ)
    glibc = _glibc()
    if choice == "system":
        return f"glibc's own malloc thresholds ({MALLOC.env}=system)"
    if user is not None:
        return f"malloc settings left to the user ({user})"
    if glibc is None:
        return "not glibc: malloc untouched"
    version, mallopt = glibc
    done = []
    for name, (param, value, _why) in SETTINGS.items():
        if mallopt(param, value) != 1:
            raise RuntimeError(f"mallopt({name}, {value}) failed on glibc {version}")
        done.append(f"{name}={value // MIB} MiB")
    return f"glibc {version} malloc: {', '.join(done)} (freed intermediates kept for the next call)"


SETTING = ProcessSetting(MALLOC, _apply)
configure, state = SETTING.configure, SETTING.state
