"""pytest plugin: run any test suite with ``policy_codegen`` inside every numba mode.

Load it explicitly (it is deliberately *not* an entry point, and must never be loaded
for this project's own tests, which check that stock numba modes stay untouched)::

    pytest -p ptnumba_codegen.tools.pytest_plugin [--ptnumba-policy strict] tests/link/numba/...

At ``pytest_configure`` it calls ``ptnumba_codegen.enable(policy)``, the process-wide
switch (``ptnumba_codegen/switch.py``): it adds the ``numba`` tag to the three
``policy_codegen`` rewrites that ``import ptnumba_codegen`` registered (the as-written pass
and its inlining, which do nothing unless the policy has ``[comparison] as_written``, and
the kernels). ``NumbaLinker.required_rewrites`` includes ``numba``, so every mode with the
numba linker then runs them:
``mode="NUMBA"``, ``Mode("numba", ...)`` (even ``optimizer=None``), ``Mode(NumbaLinker(),
...)`` and PyTensor's test helpers (``numba_mode``, ``compare_numba_and_py``). Non-numba
modes (``py``, ``cvm``, ``c``, JAX...) are unaffected.

Loading this module imports ``ptnumba_codegen`` and so pytensor, which reads
``PYTENSOR_FLAGS`` once, at import: earlier than in a stock run, where pytensor is first
imported during collection. PyTensor's own conftest.py adds
``on_opt_error=raise,on_shape_error=raise,...`` to ``PYTENSOR_FLAGS`` in its
``pytest_sessionstart``; so that both runs see the same configuration, this plugin's
``pytest_sessionstart`` (trylast: after every conftest's) applies to ``pytensor.config``
every flag that was added or changed in ``PYTENSOR_FLAGS`` since the import.

The policy is the process default: ``--ptnumba-policy`` (preset name or TOML path) if
given, else the ``PTNUMBA_CODEGEN_POLICY`` environment variable, else ``default`` (decisions
as written; ``--ptnumba-policy rewritten`` for decisions from the rewritten graph). It is
loaded and validated at configure time, so a typo stops the session before collection.

The header shows the policy (name, file, digest) and the pytensor (with its location) /
numba / llvmlite versions. At the end of the session (aggregated over xdist workers) a
summary reports how many elemwise nodes the rewrite replaced and how many of those the
dispatch handed back to the stock implementation, with the most frequent reasons.
"""

from __future__ import annotations

import collections
import functools
import os

import pytest

import ptnumba_codegen
from ptnumba_codegen.as_written import freeze as as_written
from ptnumba_codegen.as_written import op as as_written_op
from ptnumba_codegen.backend import fallbacks
from ptnumba_codegen.backend import ops
from ptnumba_codegen.passes import policy_codegen as rewrite
from ptnumba_codegen.policy import ENV_VAR, PolicyError
from ptnumba_codegen.settings import POLICY

# pytensor was imported (by ptnumba_codegen) just before this line: what it parsed.
_FLAGS_AT_IMPORT = os.environ.get("PYTENSOR_FLAGS", "")

_STATS_KEY = "ptnumba_codegen_stats"

# Per-process counters (each xdist worker has its own; the controller aggregates them).
_stats = {
    "rewrites": 0,  # PolicyCodegen.apply calls that left at least one policy node
    "policy_nodes": 0,  # policy-carrying nodes (PolicyElemwise, ...) after those calls
    "fallbacks": 0,  # policy nodes compiled by the stock implementation
    "as_written": 0,  # as-written copies (opaque AsWritten nodes and inlined copies)
    "reasons": collections.Counter(),  # fallback reason -> count
}


def pytest_addoption(parser):
    group = parser.getgroup("ptnumba_codegen", "ptnumba_codegen policy codegen")
    group.addoption(
        "--ptnumba-policy",
        action="store",
        default=None,
        metavar="POLICY",
        help="Policy for every numba mode: preset name (default, rewritten, strict, fast, as_written) or "
        "TOML path. Overrides $PTNUMBA_CODEGEN_POLICY (default: 'default').",
    )


def _install_counters() -> None:
    """Count replaced nodes and stock fallbacks (best effort: skipped if the API moved)."""
    is_policy_op = ops.is_policy_op
    cls = rewrite.PolicyCodegen
    if not getattr(cls.apply, "_ptnumba_counted", False):
        original_apply = cls.apply

        @functools.wraps(original_apply)
        def apply(self, fgraph, *args, **kwargs):
            result = original_apply(self, fgraph, *args, **kwargs)
            n = sum(is_policy_op(node.op) for node in fgraph.apply_nodes)
            if n:
                _stats["rewrites"] += 1
                _stats["policy_nodes"] += n
            _stats["as_written"] += sum(as_written_op.is_as_written(node.op) for node in fgraph.apply_nodes)
            _stats["as_written"] += len(getattr(fgraph, as_written.INLINED_ATTR, ()))
            return result

        apply._ptnumba_counted = True
        cls.apply = apply

    original_fallback = getattr(fallbacks, "stock_fallback", None)
    if original_fallback is not None and not getattr(original_fallback, "_ptnumba_counted", False):

        @functools.wraps(original_fallback)
        def stock_fallback(op, node, reason, *args, **kwargs):
            _stats["fallbacks"] += 1
            _stats["reasons"][str(reason).splitlines()[0][:160]] += 1
            return original_fallback(op, node, reason, *args, **kwargs)

        stock_fallback._ptnumba_counted = True
        fallbacks.stock_fallback = stock_fallback


def _policy_source(config) -> str:
    if config.getoption("ptnumba_policy", default=None):
        return "--ptnumba-policy"
    return f"${ENV_VAR}" if POLICY.value() else "built-in default"


def reapply_pytensor_flags(before: str) -> list[str]:
    """Apply to ``pytensor.config`` the ``PYTENSOR_FLAGS`` entries added/changed since ``before``.

    Returns ``key=value`` strings applied, or ``key=value (not applied: why)``.
    """
    from pytensor import config as pt_config
    from pytensor.configparser import parse_config_string

    now = os.environ.get("PYTENSOR_FLAGS", "")
    if now == before:
        return []
    old = parse_config_string(before, issue_warnings=False)
    done = []
    for key, value in parse_config_string(now, issue_warnings=False).items():
        if old.get(key) == value:
            continue
        try:
            if str(getattr(pt_config, key)) != value:
                setattr(pt_config, key, value)
            done.append(f"{key}={value}")
        except Exception as err:  # noqa: BLE001  (immutable after import, unknown key, bad value)
            done.append(f"{key}={value} (not applied: {err})")
    return done


def pytest_configure(config):
    option = config.getoption("ptnumba_policy", default=None)
    if option:
        os.environ[ENV_VAR] = option  # also inherited by xdist workers started later
    try:
        policy = ptnumba_codegen.enable(None)  # $PTNUMBA_CODEGEN_POLICY, else "default"
    except (PolicyError, RuntimeError) as err:
        raise pytest.UsageError(f"ptnumba_codegen.tools.pytest_plugin: {err}") from err
    _install_counters()
    config._ptnumba_policy = policy
    config._ptnumba_worker_stats = []
    config._ptnumba_reapplied = []


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session):
    """After every conftest's sessionstart: catch up with their PYTENSOR_FLAGS changes."""
    session.config._ptnumba_reapplied = reapply_pytensor_flags(_FLAGS_AT_IMPORT)


def pytest_report_header(config):
    import llvmlite
    import numba
    import pytensor

    policy = config._ptnumba_policy
    generator = (
        f"ptnumba_codegen {ptnumba_codegen.__version__} ({os.path.dirname(ptnumba_codegen.__file__)}, "
        f"generator {ptnumba_codegen.GENERATOR_VERSION}): policy_codegen tagged 'numba' -> on in "
        "every numba mode"
    )
    policy_line = (
        f"ptnumba_codegen policy: {policy.name} (from {_policy_source(config)}: "
        f"{getattr(policy, 'source', '?')}, digest {policy.digest})"
    )
    versions = (
        f"pytensor {pytensor.__version__} ({os.path.dirname(pytensor.__file__)}), "
        f"numba {numba.__version__}, llvmlite {llvmlite.__version__}"
    )
    return [generator, policy_line, versions]


def _snapshot():
    return {
        **{k: v for k, v in _stats.items() if k != "reasons"},
        "reasons": dict(_stats["reasons"]),
    }


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: ship the counters to the controller
        workeroutput[_STATS_KEY] = _snapshot()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    stats = getattr(node, "workeroutput", {}).get(_STATS_KEY)
    if stats is not None:
        node.config._ptnumba_worker_stats.append(stats)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if getattr(config, "workeroutput", None) is not None:
        return
    parts = config._ptnumba_worker_stats or [_snapshot()]
    total = {"rewrites": 0, "policy_nodes": 0, "fallbacks": 0, "as_written": 0}
    reasons = collections.Counter()
    for part in parts:
        for key in total:
            total[key] += part.get(key, 0)
        reasons.update(part.get("reasons", {}))
    tr = terminalreporter
    tr.section("ptnumba_codegen", sep="-")
    policy = config._ptnumba_policy
    tr.write_line(
        f"policy {policy.name} (digest {policy.digest}): {total['policy_nodes']} policy nodes "
        f"in {total['rewrites']} rewritten graphs; {total['fallbacks']} compiled by the "
        f"stock fallback; {total['as_written']} as-written copies"
    )
    for reason, count in reasons.most_common(10):
        tr.write_line(f"  fallback x{count}: {reason}")
    if config._ptnumba_reapplied:
        tr.write_line(
            "PYTENSOR_FLAGS set after pytensor's import, applied at session start: "
            + ", ".join(config._ptnumba_reapplied)
        )
