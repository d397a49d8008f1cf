"""A library's machine code calls its own copies of the functions it linked.

numba links every callee's IR into its caller's module, where the callee's functions are
``linkonce_odr`` definitions (`CPUCodeLibrary._get_module_for_linking`), and turns each
code library into machine code of its own inside one MCJIT engine. A ``linkonce_odr``
definition becomes a weak symbol, and MCJIT binds a weak symbol to the first definition of
that name loaded into the engine. So the final function of a PyTensor function, compiled in
a process that compiled its node functions first, calls the node functions' own machine
code (optimized in their own modules), while a later process, which loads the final
function from numba's cache and no node function, calls the final function's copies
(optimized again after linking). Where LLVM may reorder (a reduction under ``reassoc``),
the two differ in the last bits: the catalogue's Lotka-Volterra Scan gave a gradient that
differed in 2 of 7 elements by 1 ulp between the first process and every later one, with
the very same machine code for the final function in both (CHANGELOG.md, "The first
process and the later ones").

`local_copies(module)`: while MCJIT generates a library's machine code, the definitions it
holds as copies (`COPY_LINKAGES`) are internal, so the machine code calls its own copies
whatever else the engine holds; their linkage is put back afterwards, so a caller that
links this library's IR finds it as numba left it (LLVM marks a definition ``dso_local``
when it becomes internal and keeps the mark: true of a copy, and nothing but code
generation reads it). A library's own functions (``external``:
its entry points, whose addresses numba asks for by name) are untouched. The IR and its
optimization are unchanged: only which copy a call binds to, always the one compiled with
the caller (what a process loading the caller from numba's cache runs anyway).
"""

from __future__ import annotations

from contextlib import contextmanager

import llvmlite.binding as llb

# linkages of definitions a module holds as copies of other libraries' functions, with why
COPY_LINKAGES = {
    llb.Linkage.linkonce_odr: "numba's linked callees (`_get_module_for_linking`) and the generator's chunk functions",
    llb.Linkage.weak_odr: "the same, as other front ends spell it",
}


@contextmanager
def local_copies(module):
    """``module``'s copies (`COPY_LINKAGES`) internal inside the block, as they were after."""
    changed = []
    for fn in module.functions:
        if not fn.is_declaration and fn.linkage in COPY_LINKAGES:
            changed.append((fn.name, fn.linkage))
            fn.linkage = llb.Linkage.internal
    try:
        yield
    finally:
        for name, linkage in changed:
            try:
                module.get_function(name).linkage = linkage
            except NameError:  # code generation removed an unused copy: nothing to link
                pass


__all__ = ["COPY_LINKAGES", "local_copies"]
