"""asv suites over the Scan workloads of `ptnumba_codegen.tools.scan_workloads` (a small
model's logp + gradient with its recursion in a Scan: HMM forward algorithm, GARCH(1,1),
Lotka-Volterra by forward Euler).

``ScanTimeSuite``     call time, params workload x backend
``ScanCompileSuite``  first-compile time (numba cache off, fresh graph, + first call)

    .venv/bin/asv run --python=same -b ScanTimeSuite
    .venv/bin/asv run --python=same -b "ScanTimeSuite.time_logp_dlogp\\('garch', 'policy_default'\\)"

The plain runner (``python -m ptnumba_codegen.tools.scan_bench``) times the same functions
with every backend in its own process, in alternating rounds.
"""

from __future__ import annotations

from ptnumba_codegen.tools import workloads as wl
from ptnumba_codegen.tools.scan_workloads import WORKLOADS

BACKENDS = ["stock_fast", "stock_strict", "policy_default"] + (["jax"] if wl.jax_available() else [])

_READY: dict[tuple[str, str], tuple] = {}


def _prepare(key: str, backend: str, cache: bool = True):
    ready = _READY.get((key, backend)) if cache else None
    if ready is None:
        w = WORKLOADS[key]
        inputs, outputs = w.build()
        fn = wl.caller(wl.compile_graph(inputs, outputs, backend, cache=cache), backend)
        values = w.make_inputs()
        fn(*values)  # numba compiles at the first call
        ready = (fn, values)
        if cache:
            _READY[(key, backend)] = ready
    return ready


class ScanTimeSuite:
    params = [list(WORKLOADS), BACKENDS]
    param_names = ["workload", "backend"]
    timeout = 600  # a cold numba cache compiles the HMM gradient from scratch (about a minute)

    def setup(self, workload, backend):
        self.fn, self.values = _prepare(workload, backend)

    def time_logp_dlogp(self, workload, backend):
        self.fn(*self.values)


class ScanCompileSuite:
    params = [list(WORKLOADS), BACKENDS]
    param_names = ["workload", "backend"]
    number = 1
    repeat = 1
    rounds = 1
    warmup_time = 0.0
    timeout = 900

    def setup(self, workload, backend):
        _prepare(workload, backend)  # numba's start-up and memoized helpers paid untimed

    def time_compile(self, workload, backend):
        import pytensor

        with pytensor.config.change_flags(numba__cache=False):
            _prepare(workload, backend, cache=False)
