"""asv suites over the 25-model core of PyMC's model catalogue (``BENCHMARK_CORE.md`` of a
pymc-model-catalogue checkout), compiled with the catalogue's own ``build_logp_fn`` as
``python -m ptnumba_codegen bench --group catalogue`` does (`ptnumba_codegen.tools.catalogue_bench`).

``CatalogueTimeSuite``     seconds per logp(+dlogp) call, params model x backend x form
``CatalogueCompileSuite``  seconds to compile (``build_logp_fn`` and the first call) with an
                           empty numba cache, params model x backend

The catalogue is not part of this repository: point ``PTNUMBA_CATALOGUE`` at a checkout.
Without it (or without pymc) every benchmark is skipped (setup raises
NotImplementedError). asv runs each parameter combination in its own process, forked from
its forkserver; the setup reopens ptnumba_codegen's thread-split gate there as
``bench_pymc.py`` does.

    PTNUMBA_CATALOGUE=/path/to/pymc-model-catalogue .venv/bin/asv run --python=same --quick -b Catalogue
"""

from __future__ import annotations

import os
import tempfile
import time

from ptnumba_codegen.tools import catalogue_bench as cb
from ptnumba_codegen.tools import models
from ptnumba_codegen.tools import workloads as wl

CATALOGUE = os.environ.get("PTNUMBA_CATALOGUE")
BACKENDS = [b for b in cb.BACKENDS if b != "jax" or wl.jax_available()]


def _core() -> list[str]:
    try:
        return cb.core_names(cb.check_catalogue(CATALOGUE)) if CATALOGUE else ["(PTNUMBA_CATALOGUE unset)"]
    except ValueError:
        return ["(PTNUMBA_CATALOGUE is not a catalogue)"]


CORE = _core()


def _entry(model: str):
    if not CATALOGUE:
        raise NotImplementedError("set PTNUMBA_CATALOGUE to a pymc-model-catalogue checkout")
    if not models.pymc_available():
        raise NotImplementedError("pymc is not installed (pip install -e '.[pymc]')")
    root = cb.check_catalogue(CATALOGUE)
    found = cb.discover(root)
    if model not in found:
        raise NotImplementedError(f"{model}: not in {root}")
    import numba.np.ufunc.parallel as numba_parallel

    import ptnumba_codegen

    if not numba_parallel._is_initialized:  # safe to run numba's threads in this child
        ptnumba_codegen.set_parallel_enabled(True)
    return root, found[model]


class CatalogueTimeSuite:
    """Seconds per call of the catalogue's logp(+dlogp) function at the initial point."""

    params = [CORE, BACKENDS, list(cb.FORMS)]
    param_names = ["model", "backend", "form"]
    timeout = 1800  # setup compiles the model (numba disk cache on)

    def setup(self, model, backend, form):
        root, entry = _entry(model)
        c = cb.compile_catalogue_model(root, entry, form, backend, cache_dir=os.path.join(
            tempfile.gettempdir(), "ptnumba_catalogue_asv_cache"))
        c.call(c.x)  # warm up outside the timed region
        self.call, self.x = c.call, c.x

    def time_call(self, model, backend, form):
        self.call(self.x)


class CatalogueCompileSuite:
    """Seconds from the built model to the first result (``build_logp_fn`` and the first
    call, where numba compiles), with an empty numba cache: the cold compile."""

    params = [CORE, BACKENDS]
    param_names = ["model", "backend"]
    unit = "seconds"
    timeout = 1800
    number = 1
    repeat = 1

    def setup(self, model, backend):
        self.root, self.entry = _entry(model)

    def track_cold_compile(self, model, backend):
        with tempfile.TemporaryDirectory(prefix="ptnumba_catalogue_cold_") as cache:
            t0 = time.perf_counter()
            c = cb.compile_catalogue_model(self.root, self.entry, "original", backend, cache_dir=cache)
            return time.perf_counter() - t0 - c.build_s
