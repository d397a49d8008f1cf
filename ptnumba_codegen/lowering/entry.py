"""Whether a kernel's entry (`kernel.KernelImpl`: written as IR in a library of its own, or
the generated Python entry numba compiles) is inlined into the function calling it.

A kernel called where LLVM does not inline its entry costs a call with its array arguments
and results reference-counted around it (NRT_incref/NRT_decref, atomic): once per call of
the PyTensor function for a kernel of the outer graph, once per step for a kernel of a
Scan's inner graph (the HMM forward step calls about a dozen). Stock's Elemwise entry is
small and LLVM inlines it; the generator's is not (the call to the thread helper, the timing
and the error paths are part of it), so an entry whose loops all run in chunk functions asks
for ``alwaysinline``: inlined, the reference counts around the call pair up and numba's
reference-count pruning drops them.

Inlining the entry never changes a bit: the loop nest of a chunked loop is the chunk
function's (``noinline``, not specialized on its call sites, `chunks.emit_chunked`), the same
machine code whoever calls it, and every instruction keeps the flags it was given (the entry
is compiled with fastmath off in its own library before it is linked; numba's fastmath
pass rewrites the caller's own module only, before linking). An entry holding its loop nest itself is left
to LLVM's own choice: inlined, the nest would be optimized again in each caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from numba.core import types
from numba.extending import intrinsic

# where a kernel's loop nest is emitted (`kernel.make_loop`) -> whether the entry around it
# may be inlined into its caller
INLINE_ENTRY_WHEN: dict[str, bool] = {
    "chunk_function": True,  # the nest is its chunk function's machine code, wherever the entry goes
    "entry": False,  # the nest is in the entry: inlined, LLVM would compile it again in every caller
}


@dataclass(frozen=True)
class EntryInlining:
    """The decision for one kernel entry, from where each of its loops' nests is emitted."""

    nests_in: tuple[str, ...]  # keys of INLINE_ENTRY_WHEN, one per loop the entry may run
    inline: bool

    @classmethod
    def of(cls, nests_in: tuple[str, ...]) -> EntryInlining:
        return cls(nests_in, bool(nests_in) and all(INLINE_ENTRY_WHEN[where] for where in nests_in))

    @property
    def why(self) -> str:
        if self.inline:
            return "inlined into its caller (every loop runs in its chunk function)"
        return "left to LLVM (a loop nest is emitted in the entry itself)"


@intrinsic
def inline_into_caller(typingctx):
    """Marks the function calling it ``alwaysinline`` (the kernel entry; `EntryInlining`)."""

    def codegen(context, builder, sig, args):
        builder.function.attributes.add("alwaysinline")
        return context.get_dummy_value()

    return types.none(), codegen


__all__ = ["INLINE_ENTRY_WHEN", "EntryInlining", "inline_into_caller"]
