"""The vocabulary of the policy engine: LLVM fast-math flags and scalar-op classes.

Everything else in the project refers to these constants instead of spelling the
strings out again.
"""

# The LLVM fast-math flags a policy may grant (https://llvm.org/docs/LangRef.html#fast-math-flags).
FLAG_UNIVERSE: tuple[str, ...] = ("reassoc", "nsz", "arcp", "contract", "afn", "nnan", "ninf")

# PyTensor's numba backend default (`numba__fastmath=True`), see pytensor.link.numba.dispatch.basic.
PYTENSOR_FLAGS: frozenset[str] = frozenset({"arcp", "contract", "afn", "reassoc", "nsz"})

# The classes the analysis assigns to each scalar operation, strictest first.
COMPARISON_SENSITIVE = "comparison_sensitive"
REDUCTION = "reduction"
TRANSCENDENTAL = "transcendental"
ARITHMETIC = "arithmetic"
CLASSES: tuple[str, ...] = (COMPARISON_SENSITIVE, REDUCTION, TRANSCENDENTAL, ARITHMETIC)


def canonical_flags(flags) -> tuple[str, ...]:
    """Flags in the fixed order of FLAG_UNIVERSE (the order LLVM prints them)."""
    flags = set(flags)
    return tuple(f for f in FLAG_UNIVERSE if f in flags)
