"""asv suites over the PyMC model catalogue (`ptnumba_codegen.tools.models`): the logp+dlogp
call a sampler makes (``model.logp_dlogp_function(ravel_inputs=True)``, raveled point in,
``trust_input=True``), compiled and called as in ``python -m ptnumba_codegen bench --group
pymc`` (`ptnumba_codegen.tools.modelbench`).

``PyMCTimeSuite``       call time at the model's jittered initial point, params model x backend x n
``PyMCAgreementSuite``  largest relative difference of logp and dlogp to the C backend, n = 1e3

Skipped (setup raises NotImplementedError) when pymc is not installed. asv runs every
parameter combination in its own process, so each backend gets a process of its own (the
thread pools of OpenBLAS, OpenMP and XLA never overlap). Those processes are forked from
asv's forkserver, and ptnumba_codegen closes its thread-split gate in forked children
(``set_parallel_enabled``); the setup reopens it when numba's threading layer was not
started before the fork, so ``policy_default`` is measured as a user runs it.

    .venv/bin/asv run --python=same --quick -b PyMCTimeSuite
    .venv/bin/asv run --python=same -b "PyMCTimeSuite.time_logp_dlogp" --bench-params ...  # one model
"""

from __future__ import annotations

from ptnumba_codegen.tools import models
from ptnumba_codegen.tools import modelbench as mb
from ptnumba_codegen.tools import workloads as wl

BACKENDS = [b for b in mb.BACKENDS if b != "jax" or wl.jax_available()]
SIZES = list(mb.SIZES)
MODELS = list(models.MODELS)


def _prepare(model: str, backend: str, n: int):
    if not models.pymc_available():
        raise NotImplementedError("pymc is not installed (pip install -e '.[pymc]')")
    import numba.np.ufunc.parallel as numba_parallel

    import ptnumba_codegen

    if not numba_parallel._is_initialized:  # safe to run numba's threads in this child
        ptnumba_codegen.set_parallel_enabled(True)
    built = models.MODELS[model](int(n), models.DEFAULT_SEED)
    compiled = mb.compile_model(built, backend, models.DEFAULT_SEED, cache=True)
    compiled.call(compiled.point)  # warm up outside the timed region
    return compiled


class PyMCTimeSuite:
    """Seconds per logp+dlogp call."""

    params = [MODELS, BACKENDS, SIZES]
    param_names = ["model", "backend", "n"]
    timeout = 900  # setup compiles the model (numba disk cache on)

    def setup(self, model, backend, n):
        c = _prepare(model, backend, n)
        self.call, self.point = c.call, c.point

    def time_logp_dlogp(self, model, backend, n):
        self.call(self.point)


class PyMCAgreementSuite:
    """Largest relative difference of logp and every gradient component to the C backend
    (``Mode(linker="cvm")``) at the same point; the issue's bar is 1e-9."""

    params = [MODELS, BACKENDS]
    param_names = ["model", "backend"]
    unit = "relative error"
    timeout = 900

    def setup(self, model, backend):
        self.ours = _prepare(model, backend, 1_000)
        self.ref = _prepare(model, "c", 1_000)

    def track_max_rel_err_vs_c(self, model, backend):
        lp, g = mb.outputs(self.ours)
        lp_ref, g_ref = mb.outputs(self.ref)
        return max(mb.max_rel_err(lp, lp_ref), mb.max_rel_err(g, g_ref))
