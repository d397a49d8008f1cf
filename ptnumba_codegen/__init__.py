"""ptnumba_codegen: PyTensor numba kernels with per-instruction fast-math flag policies.

Importing the package registers the ``policy_codegen`` rewrites and the numba dispatch::

    import ptnumba_codegen
    mode = ptnumba_codegen.policy_mode("strict")   # a preset / TOML path, per function
    ptnumba_codegen.enable("default")              # or: every numba mode (nutpie, PyMC, ...)
                                                   # (default: decisions as written)
    ptnumba_codegen.disable()                      # new functions compile stock again
    with ptnumba_codegen.enabled("strict"): ...    # the switch for one block
    mode = ptnumba_codegen.policy_mode("rewritten")   # decisions from the rewritten graph
"""

from ptnumba_codegen._version import GENERATOR_VERSION, __version__
from ptnumba_codegen.policy import ENV_VAR, Policy, PolicyError, load_policy
from ptnumba_codegen.modes import policy_mode
from ptnumba_codegen.passes.policy_codegen import TAG, PolicyCodegen

import ptnumba_codegen.backend.dispatch  # noqa: E402, F401  (registers the numba lowering)
import ptnumba_codegen.as_written.lowering  # noqa: E402, F401  (registers AsWritten's lowering)
from ptnumba_codegen.as_written.op import AsWritten
from ptnumba_codegen.backend.dispatch import fallback_reason
from ptnumba_codegen.explain import explain
from ptnumba_codegen.runtime.threads import parallel_enabled, set_parallel_enabled
from ptnumba_codegen.switch import disable, enable, enabled, enabled_policy, is_enabled

# A bad $PTNUMBA_CODEGEN_POLICY is an error now, not a stock function later.
load_policy(None)

__all__ = [
    "AsWritten",
    "ENV_VAR",
    "GENERATOR_VERSION",
    "TAG",
    "Policy",
    "PolicyCodegen",
    "PolicyError",
    "__version__",
    "disable",
    "enable",
    "enabled",
    "enabled_policy",
    "explain",
    "fallback_reason",
    "is_enabled",
    "load_policy",
    "parallel_enabled",
    "policy_mode",
    "set_parallel_enabled",
]
