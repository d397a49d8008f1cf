"""Seeded random PyMC models assembled from the pieces published models use
(`generated_pieces.PIECES`): a performance fuzzer's inputs.

``draw(seed, index, attempt)`` picks a model's scale (``small``/``medium``/``large``: its
sizes), one to three distinct pieces and each piece's variant, likelihood and sizes,
without PyMC; ``GeneratedModel.build()`` simulates the data and builds the model. Every
random choice comes from numpy generators seeded by ``(seed, index, attempt)``, so a
model is the same in every process. `generate` keeps, per index, the first attempt whose
model builds and has a finite logp and gradient at its initial point (`check`), so the
redraws are deterministic too.

    from ptnumba_codegen.tools import generated_models as gm
    for m in gm.generate(seed=7, count=5):
        print(m.name, m.describe())
        model, ip = m.build()
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ptnumba_codegen.tools import generated_pieces as gp

#: How likely each scale is, and how many pieces a model has.
SCALE_WEIGHTS = {"small": 0.4, "medium": 0.35, "large": 0.25}
PIECE_COUNT_WEIGHTS = {1: 0.5, 2: 0.35, 3: 0.15}
#: Draws tried per index before `generate` gives up (a generator bug, not bad luck).
MAX_ATTEMPTS = 12


def _choice(rng, weights: dict):
    keys = list(weights)
    p = np.array([weights[k] for k in keys], dtype=float)
    return keys[int(rng.choice(len(keys), p=p / p.sum()))]


@dataclass(frozen=True)
class GeneratedModel:
    seed: int
    index: int
    attempt: int
    scale: str
    pieces: tuple  # ((piece name, params), ...)

    @property
    def name(self) -> str:
        return model_name(self.index)

    @property
    def piece_names(self) -> list[str]:
        return [piece for piece, _ in self.pieces]

    def describe(self) -> str:
        """``scale: piece(key=value, ...) + ...``: what the model is made of."""
        parts = []
        for piece, params in self.pieces:
            inner = ", ".join(f"{k}={_short(v)}" for k, v in params.items())
            parts.append(f"{piece}({inner})")
        return f"{self.scale}: " + " + ".join(parts)

    def source(self) -> dict:
        """What a worker process needs to build this model again."""
        return {"seed": self.seed, "index": self.index, "attempt": self.attempt}

    def data_rng(self, piece_number: int):
        return np.random.default_rng([self.seed, self.index, self.attempt, 1, piece_number])

    def build(self):
        """``(model, initial point)``; the data is simulated here, per piece."""
        import pymc as pm

        with pm.Model() as model:
            for j, (piece, params) in enumerate(self.pieces):
                gp.PIECES[piece].build(params, self.data_rng(j), f"{piece}{j}")
        return model, model.initial_point()


def model_name(index: int) -> str:
    return f"g{index:02d}"


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.2g}"
    if isinstance(value, list):
        return "[" + ",".join(_short(v) for v in value) + "]"
    if isinstance(value, dict) and set(value) == {"levels", "centered"}:  # a grouping factor
        return f"{value['levels']}{'c' if value['centered'] else 'nc'}"
    if isinstance(value, dict):
        return "/".join(_short(v) for v in value.values())
    return str(value)


def draw(seed: int, index: int, attempt: int = 0) -> GeneratedModel:
    """The model drawn for ``(seed, index, attempt)`` (no PyMC: nothing is built)."""
    rng = np.random.default_rng([seed, index, attempt, 0])
    scale = _choice(rng, SCALE_WEIGHTS)
    count = _choice(rng, PIECE_COUNT_WEIGHTS)
    names = list(gp.PIECES)
    chosen = [names[i] for i in sorted(rng.choice(len(names), size=count, replace=False))]
    pieces = tuple((piece, gp.PIECES[piece].draw(rng, scale)) for piece in chosen)
    json.dumps(pieces)  # params stay JSON-ready: they are listed and written to --json
    return GeneratedModel(seed, index, attempt, scale, pieces)


def logp_dlogp_fn(model, ip, *, mode="NUMBA", with_grad: bool = True):
    """The catalogue's recipe (pymc-model-catalogue ``build_logp_fn``): ``rewrite_pregrad``
    of the model's logp and (``with_grad``) its gradient joined into one vector, as
    functions of one raveled float64 point (``join_nonshared_inputs``), compiled by
    ``pymc.compile`` with ``trust_input=True``. Returns ``(function, raveled initial
    point)``."""
    import pytensor.tensor as pt
    from pymc.blocking import DictToArrayBijection
    from pymc.pytensorf import compile as pymc_compile
    from pymc.pytensorf import join_nonshared_inputs, rewrite_pregrad

    value_vars = model.value_vars
    logp = rewrite_pregrad(model.logp())
    outputs = [logp]
    if with_grad:
        outputs.append(pt.join(0, *(g.ravel() for g in pt.grad(logp, value_vars))))
    outputs, joined = join_nonshared_inputs(point=ip, outputs=outputs, inputs=value_vars)
    fn = pymc_compile([joined], outputs, mode=mode)
    fn.trust_input = True
    return fn, DictToArrayBijection.map({v.name: ip[v.name] for v in value_vars}).data


def check_mode():
    """The mode `check` compiles with: Python's ``perform`` of every op, the cheapest to
    compile (`initial_logp` also turns the C compiler off, for Scan's inner functions)."""
    from pytensor.compile.mode import Mode

    return Mode(linker="py", optimizer="fast_compile")


def initial_logp(gm: GeneratedModel) -> tuple[float, np.ndarray, np.ndarray]:
    """``(logp, dlogp, raveled initial point)`` of ``gm`` at its initial point, by the
    recipe compiled in `check_mode` without a C compiler (no compiler, no numba)."""
    import warnings

    import pytensor

    with warnings.catch_warnings(), pytensor.config.change_flags(cxx=""):
        warnings.simplefilter("ignore")
        model, ip = gm.build()
        if not model.free_RVs:
            raise ValueError("no free variables")
        fn, x = logp_dlogp_fn(model, ip, mode=check_mode())
        logp, dlogp = fn(x)
    return float(logp), np.asarray(dlogp), np.asarray(x)


def check(gm: GeneratedModel) -> str | None:
    """Why ``gm`` is rejected (it fails to build or compile, or its logp or gradient is
    not finite at its initial point); None when it is accepted."""
    try:
        logp, dlogp, _ = initial_logp(gm)
    except Exception as err:  # a draw that does not build is redrawn, whatever the reason
        return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    if not np.isfinite(logp):
        return f"logp {logp} at the initial point"
    if not np.all(np.isfinite(dlogp)):
        return "non-finite gradient at the initial point"
    return None


def accept(seed: int, index: int, *, checked: bool = True) -> tuple[GeneratedModel, list[str]]:
    """The first attempt for ``(seed, index)`` that `check` accepts (the first draw when
    not ``checked``), and the reasons the earlier attempts were rejected."""
    rejected = []
    for attempt in range(MAX_ATTEMPTS):
        gm = draw(seed, index, attempt)
        why = check(gm) if checked else None
        if why is None:
            return gm, rejected
        rejected.append(f"attempt {attempt}: {why} ({gm.describe()})")
    raise RuntimeError(f"seed {seed}, model {index}: no draw accepted in {MAX_ATTEMPTS} attempts:\n"
                       + "\n".join(rejected))


def generate(seed: int, count: int, *, checked: bool = True) -> list[GeneratedModel]:
    """Models ``0..count-1`` of ``seed``, each the first accepted attempt."""
    return [accept(seed, i, checked=checked)[0] for i in range(count)]


def from_source(source: dict) -> GeneratedModel:
    """The model a `GeneratedModel.source` dict names (a worker's side)."""
    return draw(int(source["seed"]), int(source["index"]), int(source["attempt"]))
