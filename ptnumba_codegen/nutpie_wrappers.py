"""nutpie's C wrappers around a PyMC model's functions, built with element loops.

``nutpie.compile_pymc_model(model, backend="numba")`` compiles the model's logp+gradient and
its expansion as PyTensor functions, then a `numba.cfunc` around each, the C functions its
sampler calls. Its wrappers copy the results with ``out[...] = grad`` and test them with
``np.all(np.isfinite(out))``; typing those makes numba compile its array-assignment and ufunc
machinery (``fancy_setslice``, the broadcasting helpers, the ``isfinite`` loop) in every
process, and nutpie's cfuncs cannot be cached (they use dynamic globals), so every process
pays it again, cold or warm, small model or large (what it costs: CHANGELOG.md,
"nutpie's C wrappers").

While the switch is on (`switch.enable`), `install` has nutpie build them here instead
(`REPLACED`): the same C signatures, the shared data read from nutpie's record as nutpie's
``make_extraction_fn`` reads it (`nutpie_extraction`, which compiles in a fraction of the
time; nutpie's own where the record is laid out otherwise), the same return codes in the same order (-1 wrong size,
3 a gradient element not finite, 4 the logp not finite, 1 or -2 an exception), the values
copied element by element, so the sampler reads the bits the PyTensor function returned.
Only the two nutpie functions in `REPLACED` are swapped, and only when their parameters are
the ones listed there (another nutpie version keeps its own, and `state()` says why); when
the switch is off they call nutpie's own, so `disable()` makes nutpie's wrappers nutpie's again.
``PTNUMBA_CODEGEN_NUTPIE_WRAPPERS=nutpie`` keeps nutpie's wrappers throughout.

`install` patches ``nutpie.compile_pymc`` when it is imported, now or later (a post-import
hook on ``sys.meta_path`` that removes itself once it ran).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import logging
import math
import sys
import threading

from ptnumba_codegen.nutpie_extraction import make_extraction
from ptnumba_codegen.settings import NUTPIE_WRAPPERS

log = logging.getLogger("ptnumba_codegen")

MODULE = "nutpie.compile_pymc"

# nutpie's function -> (the parameters it must have to be replaced, the replacement's name here)
REPLACED = {
    "_make_c_logp_func": (("n_dim", "logp_fn", "user_data", "shared_keys", "shared_data"), "make_c_logp_func"),
    "_make_c_expand_func": (
        ("n_dim", "n_expanded", "expand_fn", "user_data", "shared_var_keys", "shared_data"),
        "make_c_expand_func",
    ),
}
# what the replacements call in nutpie's module (they fail to install without it)
NEEDED = ("make_extraction_fn",)

STATS = {"logp": 0, "expand": 0}  # wrappers built here (tests read it)
_LOCK = threading.Lock()
_state: dict = {"reason": "not installed", "chosen": {}}  # chosen: nutpie function name -> `_switched`
_is_on = [lambda: False]


def _signature(*kinds):
    """nutpie's C signature: int64 of ``kinds`` (``u64`` uint64, ``f64*`` a double pointer,
    ``void*`` a pointer)."""
    import numba

    types = {"u64": numba.types.uint64, "f64*": numba.types.CPointer(numba.types.double), "void*": numba.types.voidptr}
    return numba.types.int64(*(types[k] for k in kinds))


def _extraction(inner, shared_data, keys, record_dtype):
    """``extract(x, user_data_)``: `nutpie_extraction.make_extraction`, or nutpie's own
    ``make_extraction_fn`` for a record not laid out as `nutpie_extraction` reads it."""
    try:
        return make_extraction(inner, shared_data, keys, record_dtype)
    except (KeyError, TypeError, IndexError) as err:
        log.info("nutpie wrappers: nutpie's own extraction of the shared data (%s: %s)", type(err).__name__, err)
        return sys.modules[MODULE].make_extraction_fn(inner, shared_data, keys, record_dtype)


def make_c_logp_func(n_dim, logp_fn, user_data, shared_keys, shared_data):
    """nutpie's logp+gradient C wrapper (``_make_c_logp_func``), results copied by loops."""
    import numba

    extract = _extraction(logp_fn, shared_data, shared_keys, user_data.dtype)
    c_sig = _signature("u64", "f64*", "f64*", "f64*", "void*")  # dim, x, gradient out, logp out, user data

    def ptnumba_nutpie_logp(dim, x_, out_, logp_, user_data_):
        if dim != n_dim:
            return -1
        try:
            x = numba.carray(x_, (n_dim,))
            logp_val, grad = extract(x, user_data_)
            if grad.shape[0] != n_dim:
                raise ValueError("gradient of the wrong size")
            value = logp_val[()]
            logp_[0] = value
            finite = True
            for i in range(n_dim):
                g = grad[i]
                out_[i] = g
                if not math.isfinite(g):
                    finite = False
            if not finite:
                return 3
            if not math.isfinite(value):
                return 4
        except Exception:  # noqa: BLE001  (nutpie's: any error is return code 1)
            return 1
        return 0

    STATS["logp"] += 1
    return ptnumba_nutpie_logp, c_sig


def make_c_expand_func(n_dim, n_expanded, expand_fn, user_data, shared_var_keys, shared_data):
    """nutpie's expansion C wrapper (``_make_c_expand_func``), values copied by a loop."""
    import numba

    extract = _extraction(expand_fn, shared_data, shared_var_keys, user_data.dtype)
    c_sig = _signature("u64", "u64", "f64*", "f64*", "void*")  # dim, expanded, x, values out, user data

    def ptnumba_nutpie_expand(dim, expanded, x_, out_, user_data_):
        if dim != n_dim:
            return -1
        if expanded != n_expanded:
            return -1
        try:
            x = numba.carray(x_, (n_dim,))
            (values,) = extract(x, user_data_)
            if values.shape[0] != n_expanded:
                raise ValueError("expansion of the wrong size")
            for i in range(n_expanded):
                out_[i] = values[i]
        except Exception:  # noqa: BLE001  (nutpie's: any error is return code -2)
            return -2
        return 0

    STATS["expand"] += 1
    return ptnumba_nutpie_expand, c_sig


def _switched(name, original, replacement):
    """nutpie's ``name``: the replacement while the switch is on, else nutpie's own."""

    def chosen(*args, **kwargs):
        if _is_on[0]():
            return replacement(*args, **kwargs)
        return original(*args, **kwargs)

    chosen.__name__ = name
    chosen.__wrapped__ = original
    return chosen


def why_not(module) -> str | None:
    """Why ``module`` (nutpie's) cannot get the replacements, or None if it can."""
    for name in NEEDED:
        if not callable(getattr(module, name, None)):
            return f"{MODULE}.{name} is missing"
    for name, (params, _) in REPLACED.items():
        fn = getattr(module, name, None)
        if fn is None:
            return f"{MODULE}.{name} is missing"
        fn = getattr(fn, "__wrapped__", fn)
        found = tuple(inspect.signature(fn).parameters)
        if found != params:
            return f"{MODULE}.{name} takes ({', '.join(found)}), not ({', '.join(params)})"
    return None


def _patch(module) -> None:
    with _LOCK:
        if _state["chosen"]:
            return
        reason = why_not(module)
        if reason is not None:
            _state["reason"] = f"nutpie's own wrappers: {reason}"
            log.info("nutpie wrappers: %s", _state["reason"])
            return
        here = sys.modules[__name__]
        for name, (_, replacement) in REPLACED.items():
            _state["chosen"][name] = _switched(name, getattr(module, name), getattr(here, replacement))
            setattr(module, name, _state["chosen"][name])
        _state["reason"] = "element loops while the switch is on"


class _AfterImport(importlib.abc.MetaPathFinder):
    """Patches nutpie's module right after it is imported (then leaves ``sys.meta_path``)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != MODULE:
            return None
        sys.meta_path.remove(self)  # once; and importlib.util.find_spec below must not come back here
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Patching(spec.loader)
        return spec


class _Patching(importlib.abc.Loader):
    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _patch(module)


_hook: _AfterImport | None = None


def install(is_on) -> str:
    """Have nutpie build its C wrappers here while ``is_on()`` (the switch's state) holds;
    returns `state`. Once per process; nutpie is not imported for it."""
    global _hook
    _is_on[0] = is_on
    if NUTPIE_WRAPPERS.value() == "nutpie":
        _state["reason"] = f"nutpie's own wrappers ({NUTPIE_WRAPPERS.env}=nutpie)"
        return state()
    module = sys.modules.get(MODULE)
    if module is not None:
        _patch(module)
    elif _hook is None and not _state["chosen"]:
        _hook = _AfterImport()
        sys.meta_path.insert(0, _hook)
        _state["reason"] = "waiting for nutpie's import"
    return state()


def state() -> str:
    """What nutpie's wrappers are in this process, and why."""
    return _state["reason"]


def replaced() -> tuple[str, ...]:
    """The functions of nutpie's module that choose between nutpie's wrappers and these now."""
    module = sys.modules.get(MODULE)
    return tuple(name for name, chosen in _state["chosen"].items() if getattr(module, name, None) is chosen)


__all__ = ["REPLACED", "STATS", "install", "make_c_expand_func", "make_c_logp_func",
           "replaced", "state", "why_not"]
