"""Lowering: the rule table, the flag stamp, the scalar body, the loop and the kernel."""

from ptnumba_codegen.lowering import scalar_loop as _scalar_loop  # noqa: F401  (registers its RULES row)
