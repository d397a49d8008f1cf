"""Lowering: the rule table, the flag stamp, the scalar body, the loop and the kernel."""
