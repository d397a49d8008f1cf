"""asv benchmark suites for ptnumba_codegen (see asv.conf.json at the repository root).

The workloads and backends are defined once, in `ptnumba_codegen.tools.workloads`, and shared
with the plain side-by-side runner `python -m ptnumba_codegen.tools.bench`.
"""
