"""Callers that call a compiled PyTensor function's machine code instead of copying its IR.

numba links the IR of every function a library calls into that library and optimizes and
compiles it again there. For a C wrapper around a whole PyTensor function (nutpie's, built
by `nutpie_wrappers`) that is the whole function a second time: its LLVM passes and its
machine code, in every process, since such a wrapper is never cached, and machine code that
may differ in its last bits from the function's own (a sum under ``reassoc`` optimized again
in another module). A library whose function is named in `CALLERS` instead links only the
declarations of the functions it calls in libraries that already have machine code in this
process (a library with a CPython entry point: PyTensor's compiled function, compiled or
loaded from its cache), so the call goes to that code: the wrapper computes what
``fn(x)`` computes from Python, bit for bit.

Such a library's machine code refers to symbols of this process, so it is marked as using
dynamic globals (numba's own mark for code holding a process's addresses): numba never
writes it to its cache, where a later process could load it without the function it calls.
Applied by `machine_code` (both of its library classes), from the first policy compile on.
"""

from __future__ import annotations

# function names (the last part of numba's qualified name) of the callers, with their reason
CALLERS = {
    "ptnumba_nutpie_logp": "nutpie's logp+gradient C wrapper (nutpie_wrappers): calls the whole PyTensor function",
    "ptnumba_nutpie_expand": "nutpie's expansion C wrapper (nutpie_wrappers): calls the whole PyTensor function",
}


def _module(library):
    """The IR of ``library``'s functions (a library loaded from numba's cache keeps it apart)."""
    shared = getattr(library, "_shared_module", None)
    return shared if shared is not None else library._final_module


def is_caller(library) -> bool:
    """Whether ``library`` is one of `CALLERS`."""
    return library.name.rpartition(".")[2] in CALLERS


def called_by_symbol(caller, has_entry_point) -> list:
    """The libraries ``caller`` links whose functions it should call by symbol: each has a
    CPython entry point (``has_entry_point(module)``, `machine_code`'s test), and every
    function of it that ``caller`` declares is defined in this process's engine. Empty
    unless ``caller`` is one of `CALLERS`."""
    if not is_caller(caller):
        return []
    engine = caller._codegen._engine
    declared = {fn.name for fn in caller._final_module.functions if fn.is_declaration}
    chosen = []
    for library in caller._linking_libraries:
        module = _module(library)
        if not has_entry_point(module):
            continue
        called = declared.intersection(fn.name for fn in module.functions if not fn.is_declaration)
        if called and all(engine.is_symbol_defined(name) for name in called):
            chosen.append(library)
    return chosen


def mark_process_specific(caller, libraries) -> None:
    """Mark ``caller``, which calls ``libraries`` by symbol, as never to be cached."""
    caller._dynamic_globals.extend(f"call by symbol into {library.name}" for library in libraries)


__all__ = ["CALLERS", "called_by_symbol", "is_caller", "mark_process_specific"]
