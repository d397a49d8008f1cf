"""scipy's cython functions bound to LLVM symbols by name.

PyTensor's numba backend calls a ``scipy.special`` function (``psi``, ``polygamma``, ``i0``,
...) through its C address, which it looks up at the first call from a ``numba.objmode``
block (``get_ptr_func``) and keeps in a global: that keeps the function cacheable, and costs
an object-mode function to compile in every cold process (numba's object-mode pipeline;
CHANGELOG.md, "Split, scipy.special and Dot compiled without stock's heaviest machinery").
`bind` gives the same C function a symbol of its own instead (``llvm.add_symbol``, as the
thread gate and `python_callbacks`): compiled code declares it by name and calls it
directly, so it is cached on disk like any other call, and a process that loads such code
binds the name again when it plans the node that calls it (planning runs at funcify time,
before numba loads the cached function).
"""

from __future__ import annotations

import hashlib
import re
import threading

from llvmlite import binding as llvm

SYMBOL_PREFIX = "ptnumba_codegen_cython_"
_BOUND: dict[str, int] = {}  # symbol -> the address bound to it in this process
_LOCK = threading.Lock()


def symbol_name(module_name: str, capi_name: str) -> str:
    """The symbol of ``module_name``'s exported C function ``capi_name`` (the same in every
    process: the name readable, a digest of the full name against clashes)."""
    full = f"{module_name}.{capi_name}"
    return f"{SYMBOL_PREFIX}{re.sub(r'[^A-Za-z0-9_]', '_', capi_name)}_{hashlib.sha256(full.encode()).hexdigest()[:12]}"


def bind(module_name: str, capi_name: str) -> str:
    """Bind the C function ``capi_name`` of the cython module ``module_name`` (its
    ``__pyx_capi__`` entry) to its symbol in this process, and return the symbol."""
    from numba.core.extending import get_cython_function_address

    symbol = symbol_name(module_name, capi_name)
    with _LOCK:
        if symbol not in _BOUND:
            address = get_cython_function_address(module_name, capi_name)
            llvm.add_symbol(symbol, address)
            _BOUND[symbol] = address
    return symbol


def bound() -> dict[str, int]:
    """The symbols bound in this process and their addresses (tests, diagnostics)."""
    return dict(_BOUND)


__all__ = ["SYMBOL_PREFIX", "bind", "bound", "symbol_name"]
