"""The process-wide switch: policy kernels in every numba-linker mode.

``enable(policy)`` adds the ``numba`` tag to the rewrites of tag ``policy_codegen``
(the as-written pass, its inlining, the gather copies, the compact checks, the kernels; see ``modes.py``) that
``import ptnumba_codegen`` registered in PyTensor's ``optdb``. ``NumbaLinker.required_rewrites``
includes ``numba``, so from then on every mode with the numba linker runs them when
a function is compiled: ``mode="NUMBA"``, ``Mode(linker="numba", ...)`` (even with
``optimizer=None``), PyTensor's default mode (its ``auto`` linker is numba), and whatever
nutpie, PyMC, bambi or pymc-marketing build. ``Mode`` objects query ``optdb`` at every
compilation (there is no query cache), so ``disable()``, which removes the tag again, makes
new compilations stock at once, module-level modes such as ``pytensor.compile.mode.NUMBA``
included. A function compiled earlier keeps the kernels it was compiled with.

Which policy a kernel gets (first match wins):

1. ``policy_mode(p)``: the function's own mode says ``p`` (it excludes the switch's rewrites);
2. ``enable(p)`` / ``enabled(p)``: the policy the switch was turned on with;
3. ``$PTNUMBA_CODEGEN_POLICY`` (a preset name or a TOML path);
4. the ``default`` preset (decisions as written: ``[comparison] as_written = true``; the
   preset ``rewritten`` decides on the rewritten graph instead).

``enable(None)`` resolves 3-4 once, when it is called. The policy is loaded and validated
inside ``enable``: a typo raises `PolicyError` there, before anything compiles. The
pytest plugin (``-p ptnumba_codegen.tools.pytest_plugin``) turns the switch on with the same
function.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from pytensor.compile import optdb

from ptnumba_codegen import nutpie_wrappers
from ptnumba_codegen.policy import Policy, load_policy
from ptnumba_codegen.modes import KERNELS, REGISTERED, TAG, set_registered_policy

NUMBA_TAG = "numba"
_LOCK = threading.RLock()


def is_enabled() -> bool:
    """Whether every numba-linker mode currently runs the policy rewrites."""
    return KERNELS in optdb.__db__.get(NUMBA_TAG, ())


def enabled_policy() -> Policy | None:
    """The policy the switch is on with, or None when it is off."""
    with _LOCK:
        return KERNELS.policy if is_enabled() else None


def _set(policy: Policy | None) -> None:
    tagged = optdb.__db__.get(NUMBA_TAG, ())
    if policy is None:
        for name, rewriter in REGISTERED.items():
            if rewriter in tagged:
                optdb.remove_tags(name, NUMBA_TAG)
        set_registered_policy(None)
        return
    set_registered_policy(policy)
    nutpie_wrappers.install(is_enabled)  # nutpie's C wrappers built with loops while on
    for name, rewriter in REGISTERED.items():
        if rewriter not in tagged:
            optdb.add_tags(name, NUMBA_TAG)
    _check_numba_modes_run_it()


def _check_numba_modes_run_it() -> None:
    """Fail loudly if PyTensor stopped putting ``numba``-tagged rewrites into numba modes."""
    from pytensor.compile.mode import NUMBA, Mode

    for mode in (NUMBA, Mode(linker="numba", optimizer=None)):
        rewriter = mode.optimizer
        rewriter = getattr(rewriter, "_rewriter", rewriter)  # _ActiveModeGraphRewriter
        found = getattr(rewriter, "data", ())
        if not all(any(r is ours for r in found) for ours in REGISTERED.values()):
            _set(None)
            raise RuntimeError(
                f"ptnumba_codegen.enable: tagging the '{TAG}' rewrites ({', '.join(REGISTERED)}) "
                f"with '{NUMBA_TAG}' did not put them into {mode}; this pytensor's numba linker "
                f"no longer requires '{NUMBA_TAG}'"
            )


def enable(policy: str | os.PathLike | Policy | None = None) -> Policy:
    """Compile every new numba-linker function under ``policy`` until `disable`.

    ``policy``: a preset name (``default``, ``rewritten``, ``strict``, ``fast``, ``as_written``),
    a TOML path, a loaded `Policy`, or None for ``$PTNUMBA_CODEGEN_POLICY`` (else ``default``:
    decisions as written), resolved now.
    Calling it again switches the policy. Returns the loaded policy.
    """
    resolved = load_policy(policy)
    with _LOCK:
        _set(resolved)
    return resolved


def disable() -> None:
    """New numba-linker functions compile stock again (already compiled ones are kept)."""
    with _LOCK:
        _set(None)


@contextlib.contextmanager
def enabled(policy: str | os.PathLike | Policy | None = None) -> Iterator[Policy]:
    """``with ptnumba_codegen.enabled("strict"): ...``: `enable` inside the block, then back
    to the state before it (off, or the previous policy when nested)."""
    resolved = load_policy(policy)
    with _LOCK:
        before = enabled_policy()
        _set(resolved)
    try:
        yield resolved
    finally:
        with _LOCK:
            _set(before)


__all__ = ["disable", "enable", "enabled", "enabled_policy", "is_enabled"]
