"""Machine code for a numba code library only when something needs it.

numba finalizes every function it compiles into a *code library*: LLVM's passes, then the
module handed to MCJIT and turned into machine code. A PyTensor function is built from
many such libraries (each node's function, the cached wrapper PyTensor puts around it,
each numba overload, the generator's kernel entries, the function graph itself) and each
caller links its callees' IR into its own module and compiles it again: only the
outermost function's machine code ever runs. A library without a Python entry point
(compiled with ``no_cpython_wrapper``, as PyTensor compiles every node function and the
graph's inner function, the generator its kernel entries and numba its overloads) is
called by nobody but the callers that link it, yet numba still emits its machine code
(what that costs: CHANGELOG.md, "Machine code on demand").

`configure()` makes the CPU target's libraries `OnDemandLibrary`: such a library is
optimized as before but handed to MCJIT only when something asks for its machine code: a
pointer to a function it defines (`get_pointer_to_function`), its object code (numba's
disk cache, `serialize_using_object_code`). numba writes a function's environment into a
global of its module right after compiling it (`set_env`); for a library without machine
code that global is defined by the first caller that links it, and written then.
Libraries with a Python entry point, those loaded from numba's cache, and those with an
instruction LLVM may reorder are finalized as numba does.

Why the last: MCJIT's code generation rewrites a module's IR in place (CodeGenPrepare
sinks address computations, loop strength reduction), and callers link that rewritten IR
and optimize it again. A library without machine code is linked as it was before code
generation; LLVM then optimizes another form, and where it may reassociate (a sum under
``reassoc``) it can vectorize or regroup differently: the values change in their last
bits (BEST's gradient did, with every library deferred: CHANGELOG.md, "Machine code on
demand"). Without a reordering flag every operation computes the same value in any form, so
the values are numba's bit for bit and every instruction of the final function keeps its flags
(tests/test_machine_code.py compiles a model both ways in fresh processes).

It applies to libraries numba creates after it ran, once per process, when the first
function is compiled with ``policy_codegen`` (never at import), like `boxing.configure`.
``PTNUMBA_CODEGEN_MACHINE_CODE=always`` keeps numba's own finalization. In both modes a
library's machine code calls its own copies of what it linked (`runtime.own_copies`), and
nutpie's C wrappers call the PyTensor function's own machine code (`runtime.symbol_calls`).
"""

from __future__ import annotations

import functools
import re
import weakref

from numba.core import codegen as numba_codegen
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target

from ptnumba_codegen.runtime import ProcessSetting
from ptnumba_codegen.settings import MACHINE_CODE
from ptnumba_codegen.runtime.own_copies import local_copies
from ptnumba_codegen.runtime.symbol_calls import called_by_symbol, mark_process_specific


# a function named so is an entry point whose address numba takes as soon as the library is
# compiled (`get_executable`: the CPython wrapper a dispatcher calls). A C-callable wrapper
# (``cfunc.``, which numba's overloads get by default) is asked for only where a function is
# used as a value or a C callback, through `get_pointer_to_function`: emitted then.
ENTRY_POINT_PREFIXES = ("_ZN7cpython",)

NUMBA_LIBRARY_CLASS = numba_codegen.JITCodeLibrary
NUMBA_SET_ENV = numba_codegen.JITCPUCodegen.set_env


def has_entry_point(module) -> bool:
    """Whether ``module`` defines a CPython wrapper (`ENTRY_POINT_PREFIXES`)."""
    return any(not fn.is_declaration and fn.name.startswith(ENTRY_POINT_PREFIXES) for fn in module.functions)


# fast-math flags under which LLVM may reorder floating-point operations
REORDERING_FLAGS = ("reassoc", "fast")
_REORDERING = re.compile(r"= (?:fadd|fsub|fmul|fdiv|frem|fneg|call|phi|select)[^\n]* (?:%s) " % "|".join(REORDERING_FLAGS))


def may_reassociate(module) -> bool:
    """Whether some instruction of ``module`` may be reordered by LLVM (`REORDERING_FLAGS`).

    Such a library keeps numba's finalization: its callers link its IR after code
    generation, as always. Optimized again there in another form, a reduction LLVM may
    reassociate could be vectorized or reassociated otherwise, and its value change in the
    last bits (CHANGELOG.md, "Machine code on demand"); without reordering flags the
    same operations compute the same values in any form. Checked last, after the cheap
    tests: it prints the module."""
    return _REORDERING.search(str(module)) is not None


class OwnCopiesLibrary(numba_codegen.JITCodeLibrary):
    """numba's JIT code library whose machine code calls its own copies of the functions
    it linked (`runtime.own_copies`), in both modes of this module; one of
    `runtime.symbol_calls.CALLERS` calls compiled PyTensor functions by symbol instead."""

    def finalize(self):
        by_symbol = called_by_symbol(self, has_entry_point)
        if by_symbol:
            self._linking_libraries = [lib for lib in self._linking_libraries if lib not in by_symbol]
        super().finalize()
        if by_symbol:
            mark_process_specific(self, by_symbol)

    def _finalize_specific(self):
        with local_copies(self._final_module):
            super()._finalize_specific()


class OnDemandLibrary(OwnCopiesLibrary):
    """numba's JIT code library, with machine code emitted when first needed (see above)."""

    _machine_code_pending = False

    def _finalize_final_module(self):
        module = self._final_module
        if (
            getattr(self, "_compiled_object", None) is not None  # loaded from numba's cache: its object code is the library
            or has_entry_point(module)
            or not any(not fn.is_declaration for fn in module.functions)
            or may_reassociate(module)
        ):
            return super()._finalize_final_module()
        # numba's `_finalize_final_module`, without handing the module to MCJIT
        self._finalize_dynamic_globals()
        self._verify_declare_only_symbols()
        module._CPUCodeLibrary__library = weakref.proxy(self)  # numba's object-cache hooks read it
        self._machine_code_pending = True
        self._finalized = True

    def emit_machine_code(self) -> None:
        """Hand the module to MCJIT and emit its machine code now (once)."""
        with global_compiler_lock:  # numba's: MCJIT and the pending environments are shared
            if self._machine_code_pending:
                self._machine_code_pending = False
                cleanup = self._codegen._add_module(self._final_module)
                if cleanup:
                    weakref.finalize(self, cleanup)
                self._finalize_specific()

    @property
    def machine_code_pending(self) -> bool:
        return self._machine_code_pending

    def _finalize_specific(self):
        super()._finalize_specific()
        _set_pending_environments(self._codegen)

    def get_pointer_to_function(self, name):
        self._ensure_finalized()
        if self._machine_code_pending:
            try:
                fn = self._final_module.get_function(name)
            except NameError:
                return 0  # numba asks for the CPython wrapper this library was compiled without
            if fn.is_declaration:
                return 0
            self.emit_machine_code()
        return super().get_pointer_to_function(name)

    def _get_compiled_object(self):
        self.emit_machine_code()
        return super()._get_compiled_object()


# environment global name -> the numba Environment whose address it must hold, for libraries
# whose machine code is pending: numba sets the global right after compiling a function
# (`set_env`), but until a module defining it (the library or a caller that linked it) is
# emitted the global has no address
_pending_environments: dict = {}


def _set_env(codegen, env_name, env):
    if codegen._engine.is_symbol_defined(env_name):
        NUMBA_SET_ENV(codegen, env_name, env)
    else:
        _pending_environments[env_name] = env


def _set_pending_environments(codegen) -> None:
    for env_name in [n for n in _pending_environments if codegen._engine.is_symbol_defined(n)]:
        NUMBA_SET_ENV(codegen, env_name, _pending_environments.pop(env_name))


def _apply(choice: str, environ) -> str:
    """`SETTING`'s work: libraries numba creates from now on are `OnDemandLibrary`
    (``always``: `OwnCopiesLibrary`)."""
    codegen = cpu_target.target_context.codegen()
    if choice == "always":
        codegen._library_class = OwnCopiesLibrary
        return f"numba's finalization, machine code for every library ({MACHINE_CODE.env}=always)"
    codegen._library_class = OnDemandLibrary
    codegen.set_env = functools.partial(_set_env, codegen)
    return "machine code on demand for libraries without an entry point"


def _undo() -> None:
    codegen = cpu_target.target_context.codegen()
    codegen._library_class = NUMBA_LIBRARY_CLASS
    codegen.__dict__.pop("set_env", None)


SETTING = ProcessSetting(MACHINE_CODE, _apply, _undo)
configure, restore, state = SETTING.configure, SETTING.restore, SETTING.state
