"""Tooling: benchmarks, workloads, the model catalogue, the demo, accuracy and the pytest plugin."""
