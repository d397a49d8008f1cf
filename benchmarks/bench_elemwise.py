"""asv suites over the shared workloads of `ptnumba_codegen.tools.workloads`.

One method per workload, named ``<prefix>_<group>_<key>`` (group: core, reduction,
transcendental), so a group is selected with e.g. ``asv run -b TimeSuite.time_core_``.

``TimeSuite``      call time, params backend x n
``CompileSuite``   first-compile time (numba cache off, fresh graph, + first call), param backend
``PeakMemSuite``   peak RSS of a process that made the inputs and ran one call, params backend x n

asv runs every parameter combination in its own (forked) process, so the compiled functions
are cached at module level only for the repeated setups inside one process; across
processes the numba disk cache (``numba__cache``, on by default) keeps TimeSuite and
PeakMemSuite setups short. Matrix workloads use ``n/1000`` rows of 1000 (rows x cols = n).
"""

from __future__ import annotations

from ptnumba_codegen.tools import workloads as wl

BACKENDS = list(wl.BACKENDS)
SIZES = [1_000, 100_000, 1_000_000, 10_000_000]
PEAKMEM_SIZES = [1_000_000, 10_000_000]

#: (workload key, backend, n) combinations to skip (setup raises NotImplementedError).
#: Empty today: every combination of the sizes above stays well inside the time budget.
SLOW: set[tuple[str, str, int]] = set()

# Module-level caches. A compiled function does not depend on n (the graph takes a vector
# or matrix of any length), so it is keyed by (workload, backend); the ready-to-call pair
# of function and inputs is keyed by (workload, backend, n).
_FUNCS: dict[tuple[str, str], object] = {}
_INPUTS: dict[tuple[str, int], list] = {}
_READY: dict[tuple[str, str, int], tuple] = {}
_WARMED: set[tuple[str, str]] = set()


def _prepare(key: str, backend: str, n: int):
    n = int(n)
    ready = _READY.get((key, backend, n))
    if ready is not None:
        return ready
    if (key, backend, n) in SLOW:
        raise NotImplementedError(f"{key} / {backend} / n={n} is marked slow")
    fn = _FUNCS.get((key, backend))
    if fn is None:
        fn = wl.caller(wl.compile_workload(key, backend), backend)
        _FUNCS[(key, backend)] = fn
    inputs = _INPUTS.get((key, n))
    if inputs is None:
        inputs = _INPUTS[(key, n)] = wl.WORKLOADS[key].make_inputs(n)
    fn(*inputs)  # compile (numba is lazy) and warm up outside the timed region
    ready = _READY[(key, backend, n)] = (fn, inputs)
    return ready


def _method_setup(key: str, state: list):
    # A per-method setup, attached as the benchmark function's ``setup`` attribute: asv
    # runs it (after the class setup) with the parameters only, so the prepared pair is
    # handed to the method through ``state`` (a closure cell, cheap to read in the timed
    # call).
    def setup(backend, n):
        state[0] = _prepare(key, backend, n)

    return setup


def _add_methods(cls, prefix: str, make):
    for w in wl.WORKLOADS.values():
        method = make(w)
        method.__name__ = f"{prefix}_{w.group}_{w.key}"
        method.__qualname__ = f"{cls.__name__}.{method.__name__}"
        method.pretty_name = f"{cls.__name__}: {w.label} [{w.group}]"
        setattr(cls, method.__name__, method)
    return cls


class TimeSuite:
    """Median call time of each workload under each backend."""

    params = [BACKENDS, SIZES]
    param_names = ["backend", "n"]
    timeout = 300  # setup may compile from scratch when the numba disk cache is cold


def _make_time(w):
    state = [None]

    def time_workload(self, backend, n):
        fn, inputs = state[0]
        fn(*inputs)

    time_workload.setup = _method_setup(w.key, state)
    return time_workload


_add_methods(TimeSuite, "time", _make_time)


class CompileSuite:
    """First-compile time: ``pytensor.function`` on a fresh graph with the numba cache off,
    plus the first call on tiny inputs (numba compiles at the first call).

    The setup compiles the same workload once, untimed, so numba's per-process start-up
    and the helpers it memoizes in memory are paid before the timed compile (as in
    ``python -m ptnumba_codegen.tools.bench``): the number is the marginal compile cost.
    """

    params = [BACKENDS]
    param_names = ["backend"]
    number = 1
    repeat = 1
    rounds = 1
    warmup_time = 0.0
    timeout = 600


def _make_compile(w):
    def setup(backend):
        if (w.key, backend) not in _WARMED:
            wl.first_compile(w, backend)
            _WARMED.add((w.key, backend))

    def time_compile(self, backend):
        wl.first_compile(w, backend)

    time_compile.setup = setup
    return time_compile


_add_methods(CompileSuite, "time", _make_compile)


class PeakMemSuite:
    """Peak resident memory of the process after making the inputs and running one call
    (asv's peakmem includes the interpreter, pytensor and numba: compare across backends
    at the same n, where only the call's temporaries differ)."""

    params = [BACKENDS, PEAKMEM_SIZES]
    param_names = ["backend", "n"]
    timeout = 300


def _make_peakmem(w):
    state = [None]

    def peakmem_workload(self, backend, n):
        fn, inputs = state[0]
        fn(*inputs)

    peakmem_workload.setup = _method_setup(w.key, state)
    return peakmem_workload


_add_methods(PeakMemSuite, "peakmem", _make_peakmem)
