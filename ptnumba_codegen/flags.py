"""The vocabulary of the policy engine: LLVM fast-math flags and scalar-op classes.

Everything else in the project refers to these constants instead of spelling the
strings out again.
"""

# The LLVM fast-math flags a policy may grant (https://llvm.org/docs/LangRef.html#fast-math-flags).
FLAG_UNIVERSE: tuple[str, ...] = ("reassoc", "nsz", "arcp", "contract", "afn", "nnan", "ninf")

# PyTensor's numba backend default (`numba__fastmath=True`), see pytensor.link.numba.dispatch.basic.
PYTENSOR_FLAGS: frozenset[str] = frozenset({"arcp", "contract", "afn", "reassoc", "nsz"})

# Flags under which a libm call's result keeps libm's bits when it is an exact lane call
# (`lowering.vecmath.exact_lanes`: a call of the package's own function, not a libm name LLVM
# could approximate under ``afn``), and the arithmetic around it in stock's formulas keeps its
# bits but for the sign of a zero result (``nsz``). With any other flag LLVM may reorder or
# contract that arithmetic.
LIBM_BITS_KEPT_UNDER: frozenset[str] = frozenset({"nsz", "afn"})

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
