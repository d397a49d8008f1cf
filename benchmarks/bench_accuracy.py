"""asv accuracy suite: max error (ulp, vs mpmath) of every function the vector math tier
lowers, per backend and dtype -- tracked alongside the time suites, so a faster kernel
that got less accurate shows up on the dashboard."""

from __future__ import annotations

from ptnumba_codegen.tools import accuracy
from ptnumba_codegen.tools import workloads as wl

_RESULTS: dict = {}


def _errors(backend: str, dtype: str) -> dict[str, float]:
    key = (backend, dtype)
    if key not in _RESULTS:
        mode, ctx = wl.backend_mode(backend)
        with ctx:
            fn = accuracy.compile_all(dtype, mode)
        _RESULTS[key] = accuracy.measure(fn, dtype, n=800)
    return _RESULTS[key]


class AccuracySuite:
    params = (list(wl.BACKENDS), ["float64", "float32"])
    param_names = ["backend", "dtype"]
    unit = "ulp"
    timeout = 600


def _make(name):
    def track(self, backend, dtype):
        return _errors(backend, dtype)[name]

    track.__name__ = f"track_max_ulp_{name}"
    track.unit = "ulp"
    return track


for _name in accuracy.FUNCTIONS:
    setattr(AccuracySuite, f"track_max_ulp_{_name}", _make(_name))
