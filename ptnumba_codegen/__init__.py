"""ptnumba_codegen: PyTensor numba kernels with per-instruction fast-math flag policies.

Importing the package registers the ``policy_codegen`` rewrite and the numba dispatch::

    import ptnumba_codegen
    mode = Mode(linker="numba", optimizer="fast_run").including("policy_codegen")
    mode = ptnumba_codegen.policy_mode("strict")   # or a preset / TOML path per function
    mode = ptnumba_codegen.policy_mode("as_written")  # decisions exactly as written
"""

from ptnumba_codegen._version import GENERATOR_VERSION, __version__
from ptnumba_codegen.policy import ENV_VAR, Policy, PolicyError, load_policy
from ptnumba_codegen.rewrite import TAG, PolicyCodegen, policy_mode

import ptnumba_codegen.dispatch  # noqa: E402, F401  (registers the numba lowering)
import ptnumba_codegen.as_written_lowering  # noqa: E402, F401  (registers AsWritten's lowering)
from ptnumba_codegen.as_written_op import AsWritten
from ptnumba_codegen.dispatch import fallback_reason
from ptnumba_codegen.explain import explain
from ptnumba_codegen.lowering.split_runtime import parallel_enabled, set_parallel_enabled

__all__ = [
    "AsWritten",
    "ENV_VAR",
    "GENERATOR_VERSION",
    "TAG",
    "Policy",
    "PolicyCodegen",
    "PolicyError",
    "__version__",
    "explain",
    "fallback_reason",
    "load_policy",
    "parallel_enabled",
    "policy_mode",
    "set_parallel_enabled",
]
