"""Vector functions: ISA helpers, libmvec calls, lane calls, exact lanes and the package's own
special functions."""
