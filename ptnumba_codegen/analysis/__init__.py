"""The compiler's analyses, pure Python (no numba): a node's scalar program, kernel programs,
instruction classes, whole-graph sensitivity, robust decisions and value ranges."""
