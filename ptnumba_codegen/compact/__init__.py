"""Compact ops: stock PyTensor ops whose numba node function is an intrinsic lowered into its
caller, making stock's checks, messages, loops and calls with numba's own pieces in a fraction
of stock's compile time.

- `replica`: the record of one (`Replica`: the stock op class, which nodes it takes, its
  intrinsic, the stock source it replicates with its digest in every supported PyTensor),
  and whether the installed PyTensor is one it replicates (`why_off`);
- `table`: every record (`COMPACT`), and which are off in this process (`rows_off`);
- `ops`: the op class of each record and its numba dispatch (`compact_class`,
  `funcify_compact`), and the compact op of a node (`compact_op`), which
  `passes.swap_compact` puts in the graph;
- one module per op family, each ending with its records (`checks`: SpecifyShape and Split;
  `dot` and `dot_ir`; `fill`; `views`; `arrays`; `subtensor`; `increments`; `advanced`;
  `join`; `diag`; `reshape`; `solve`; `cholesky`; `cumop`), and what they share
  (`node_intrinsics`, `blas_calls`, `work_arrays`).

How to add one: docs/compact.md.
"""
