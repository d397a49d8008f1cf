"""Benchmark workloads and backends: the one definition shared by ``ptnumba_codegen.tools.bench``
(the plain side-by-side runner) and the asv suites in ``benchmarks/``.

A `Workload` builds a fresh PyTensor graph (``build() -> (inputs, output)``) and makes
float64 input values for a size ``n`` from a fixed-seed numpy generator. Vector
workloads take 1-D vectors of length ``n``; matrix workloads take an
``rows x cols`` matrix with ``cols = min(1000, n)`` and ``rows = max(1, n // cols)``,
so ``n = 1e6`` is 1000 x 1000 and ``n`` stays the element count.

A backend is a name in `BACKENDS` (plus ``jax`` when JAX is importable); `compile_workload`
compiles a workload under it::

    from ptnumba_codegen.tools.workloads import WORKLOADS, compile_workload
    w = WORKLOADS["normal_logp"]
    fn = compile_workload(w, "policy_default")
    fn(*w.make_inputs(1_000_000))

Backends:

``stock_fast``      stock numba linker, ``numba__fastmath=True`` (PyTensor's default flag set)
``stock_strict``    stock numba linker, ``numba__fastmath=False``
``policy_default``  `ptnumba_codegen.policy_mode("default")`: decisions as written
                    (``[comparison] as_written = true``), fast math elsewhere
``policy_strict``   `ptnumba_codegen.policy_mode("strict")`
``policy_default_1t`` `policy_default` with ``[parallel] threads = 1``: every loop on the
                    calling thread, to show what the thread split adds
``policy_rewritten`` `ptnumba_codegen.policy_mode("rewritten")`:
                    decisions computed from the rewritten graph (the reference to compare
                    ``policy_default`` with)
``policy_as_written`` `ptnumba_codegen.policy_mode("as_written")`: an alias of ``default``
                    (the same policy; not in the default selection)
``policy_fast``     `ptnumba_codegen.policy_mode("fast")` (not in the default selection)
``jax``             ``Mode(linker="jax", optimizer="fast_run")``, only when ``import jax`` works

The policy backends compile under the ambient ``numba__fastmath`` (True unless the user
changed it): the generator only replaces ``Elemwise`` nodes, so any other op in the graph
(``Sum``/``CAReduce``, ``Softmax``, ...) is compiled by stock PyTensor with that setting.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

import ptnumba_codegen
from ptnumba_codegen.policy import Parallel

GROUPS = ("core", "reduction", "transcendental")

#: log(sqrt(2*pi)): the constant of the normal log-density.
LOG_SQRT_2PI = 0.9189385332046727

#: Backends every runner knows, in table order. ``jax`` is appended when available.
BACKENDS = ("stock_fast", "stock_strict", "policy_default", "policy_default_1t", "policy_strict", "policy_rewritten")
EXTRA_BACKENDS = ("policy_as_written", "policy_fast", "jax")
ALL_BACKENDS = BACKENDS + EXTRA_BACKENDS


def known_backend(backend: str) -> bool:
    """One of `ALL_BACKENDS`, or ``policy_PATH.toml``: a policy file of one's own."""
    return backend in ALL_BACKENDS or (backend.startswith("policy_") and backend.endswith(".toml"))

DEFAULT_SEED = 20240611


@dataclass(frozen=True)
class Workload:
    key: str  # identifier: asv method names, --workloads, JSON keys
    label: str  # the math, for tables
    group: str  # one of GROUPS
    build: Callable[[], tuple[list, object]] = field(repr=False)
    n_inputs: int = 3
    kind: str = "vector"  # "vector" or "matrix"

    def shape(self, n: int) -> tuple[int, ...]:
        n = int(n)
        if self.kind == "matrix":
            cols = max(1, min(1000, n))
            return (max(1, n // cols), cols)
        return (n,)

    def make_inputs(self, n: int, seed: int = DEFAULT_SEED) -> list[np.ndarray]:
        """Float64 input values of size ``n`` (same values for the same ``n`` and seed)."""
        rng = np.random.default_rng(seed)
        shape = self.shape(n)
        return [rng.standard_normal(shape) for _ in range(self.n_inputs)]


# --- graph builders ---------------------------------------------------------------------
# pytensor is imported inside the builders so `import ptnumba_codegen.tools.workloads` stays
# cheap (the asv discovery imports it) and so every call returns a brand-new graph.


def _vectors(k: int):
    import pytensor.tensor as pt

    return [pt.dvector(name) for name in "xyz"[:k]]


def _fma():
    x, y, z = _vectors(3)
    return [x, y, z], x * y + z


def _exp_fma():
    import pytensor.tensor as pt

    x, y, z = _vectors(3)
    return [x, y, z], pt.exp(x) * y + z


def _normal_logp_expr(x, y, z):
    import pytensor.tensor as pt

    return -0.5 * ((x - y) / pt.exp(z)) ** 2 - z - LOG_SQRT_2PI


def _normal_logp():
    x, y, z = _vectors(3)
    return [x, y, z], _normal_logp_expr(x, y, z)


def _sigmoid_mul():
    import pytensor.tensor as pt

    x, y = _vectors(2)
    return [x, y], pt.sigmoid(x) * y


def _grad_minimum():
    import pytensor
    import pytensor.tensor as pt

    x, y, z = _vectors(3)
    cost = pt.minimum(x * y * z, 1.0).sum()
    return [x, y, z], pytensor.grad(cost, x)


def _grad_clip():
    import pytensor
    import pytensor.tensor as pt

    x, y = _vectors(2)
    cost = pt.clip(x * y, -1.0, 1.0).sum()
    return [x, y], pytensor.grad(cost, x)


def _sum():
    (x,) = _vectors(1)
    return [x], x.sum()


def _sq_diff_sum():
    x, y = _vectors(2)
    return [x, y], ((x - y) ** 2).sum()


def _normal_logp_sum():
    x, y, z = _vectors(3)
    return [x, y, z], _normal_logp_expr(x, y, z).sum()


def _softplus():
    import pytensor.tensor as pt

    (x,) = _vectors(1)
    return [x], pt.softplus(x)


def _tanh_erf():
    import pytensor.tensor as pt

    x, y = _vectors(2)
    return [x, y], pt.tanh(x) + pt.erf(y)


def _log1p_abs_expm1():
    import pytensor.tensor as pt

    x, y = _vectors(2)
    return [x, y], pt.log1p(pt.abs(x)) + pt.expm1(y)


def _gammaln_psi():
    import pytensor.tensor as pt

    x, y = _vectors(2)
    return [x, y], pt.gammaln(pt.abs(x) + 0.5) + pt.psi(pt.abs(y) + 0.5)


def _maximum_mul():
    import pytensor.tensor as pt

    x, y, z = _vectors(3)
    return [x, y, z], pt.maximum(x, y) * z


def _logsumexp():
    # pytensor 3.3.8 has pytensor.tensor.special.logsumexp (re-exported as pt.logsumexp);
    # there is no pytensor.tensor.math.logsumexp.
    import pytensor.tensor as pt
    from pytensor.tensor.special import logsumexp

    X = pt.dmatrix("X")
    return [X], logsumexp(X, axis=1)


def _softmax():
    import pytensor.tensor as pt
    from pytensor.tensor.special import softmax

    X = pt.dmatrix("X")
    return [X], softmax(X, axis=-1)


_ALL = (
    Workload("fma", "x*y+z", "core", _fma, 3),
    Workload("exp_fma", "exp(x)*y+z", "core", _exp_fma, 3),
    Workload("normal_logp", "normal logp", "core", _normal_logp, 3),
    Workload("sigmoid_mul", "sigmoid(x)*y", "core", _sigmoid_mul, 2),
    Workload("grad_minimum", "grad(min(x*y*z,1).sum,x)", "core", _grad_minimum, 3),
    Workload("grad_clip", "grad(clip(x*y,-1,1).sum,x)", "core", _grad_clip, 2),
    Workload("sum", "x.sum()", "reduction", _sum, 1),
    Workload("sq_diff_sum", "((x-y)**2).sum()", "reduction", _sq_diff_sum, 2),
    Workload("normal_logp_sum", "normal logp .sum()", "reduction", _normal_logp_sum, 3),
    Workload("softplus", "softplus(x)", "transcendental", _softplus, 1),
    Workload("tanh_erf", "tanh(x)+erf(y)", "transcendental", _tanh_erf, 2),
    Workload("log1p_abs_expm1", "log1p(abs(x))+expm1(y)", "transcendental", _log1p_abs_expm1, 2),
    Workload("gammaln_psi", "gammaln(|x|+.5)+psi(|y|+.5)", "transcendental", _gammaln_psi, 2),
    Workload("maximum_mul", "maximum(x,y)*z", "transcendental", _maximum_mul, 3),
    Workload("logsumexp", "logsumexp(X,axis=1)", "transcendental", _logsumexp, 1, "matrix"),
    Workload("softmax", "softmax(X,axis=-1)", "transcendental", _softmax, 1, "matrix"),
)

#: All workloads by key, in table order.
WORKLOADS: dict[str, Workload] = {w.key: w for w in _ALL}


def select(group: str = "all", names: str | Sequence[str] | None = None) -> list[Workload]:
    """Workloads of ``group`` (or ``"all"``), narrowed to ``names`` (keys or labels) if given."""
    if group != "all" and group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; expected one of {GROUPS + ('all',)}")
    chosen = [w for w in _ALL if group == "all" or w.group == group]
    if names:
        if isinstance(names, str):
            names = [s.strip() for s in names.split(",") if s.strip()]
        by_label = {w.label: w for w in _ALL}
        wanted = []
        for name in names:
            w = WORKLOADS.get(name) or by_label.get(name)
            if w is None:
                raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
            wanted.append(w)
        chosen = [w for w in chosen if w in wanted] if group != "all" else wanted
    return chosen


# --- backends ---------------------------------------------------------------------------


def jax_available() -> bool:
    return importlib.util.find_spec("jax") is not None


def available_backends(include_jax: bool = True) -> tuple[str, ...]:
    """`BACKENDS`, plus ``jax`` when it can be imported and ``include_jax``."""
    return BACKENDS + (("jax",) if include_jax and jax_available() else ())


def backend_mode(backend: str):
    """``(mode, config context)`` for compiling under ``backend``.

    The context matters for the stock backends: ``numba__fastmath`` is read when the
    function is compiled, so ``pytensor.function`` must run inside it.
    """
    import pytensor
    from pytensor.compile.mode import Mode

    if backend in ("stock_fast", "stock_strict"):
        ctx = pytensor.config.change_flags(numba__fastmath=(backend == "stock_fast"))
        return Mode(linker="numba", optimizer="fast_run"), ctx
    if backend.startswith("policy_"):
        return ptnumba_codegen.policy_mode(backend_policy(backend)), contextlib.nullcontext()
    if backend == "jax":
        return Mode(linker="jax", optimizer="fast_run"), contextlib.nullcontext()
    raise ValueError(f"unknown backend {backend!r}; expected one of {ALL_BACKENDS}")


def backend_policy(backend: str):
    """The loaded `Policy` of a ``policy_*`` backend (``policy_default_1t``: default on one
    thread); None for the other backends."""
    if not backend.startswith("policy_"):
        return None
    if backend == "policy_default_1t":
        return dataclasses.replace(ptnumba_codegen.load_policy("default"), parallel=Parallel(threads=1))
    return ptnumba_codegen.load_policy(backend.removeprefix("policy_"))


def compile_graph(inputs, output, backend: str, *, cache: bool = True):
    """Compile ``inputs -> output`` under ``backend``; ``cache=False`` disables the numba
    disk cache so the compilation is real. Returns the PyTensor function
    (``trust_input=True``, so callers pass float64 arrays of the right rank)."""
    import pytensor

    mode, ctx = backend_mode(backend)
    with ctx, pytensor.config.change_flags(numba__cache=cache):
        return pytensor.function(inputs, output, mode=mode, trust_input=True)


def compile_workload(workload: Workload | str, backend: str, *, cache: bool = True):
    """Compile a fresh graph of ``workload`` under ``backend`` (see `compile_graph`)."""
    if isinstance(workload, str):
        workload = WORKLOADS[workload]
    inputs, output = workload.build()
    return compile_graph(inputs, output, backend, cache=cache)


def caller(fn, backend: str) -> Callable:
    """A callable running ``fn`` to completion: JAX dispatches asynchronously, so its
    results are waited for; every other backend returns ``fn`` unchanged."""
    if backend != "jax":
        return fn
    import jax

    def call(*args):
        return jax.block_until_ready(fn(*args))

    return call


def first_compile(workload: Workload, backend: str, n: int = 8):
    """Compile a fresh graph with the numba cache disabled and run it once on tiny inputs
    (numba compiles lazily, at the first call). Returns ``(seconds, fn)``."""
    import time

    import pytensor

    inputs = workload.make_inputs(n)
    t0 = time.perf_counter()
    fn = compile_workload(workload, backend, cache=False)
    with pytensor.config.change_flags(numba__cache=False):
        caller(fn, backend)(*inputs)
    return time.perf_counter() - t0, fn
