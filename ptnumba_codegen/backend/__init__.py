"""Policy-carrying ops, kernel plans (node type -> plan), indexed kernels lowered as their
parts, and numba dispatch."""
