"""The registered ``policy_codegen`` rewrites (the process-wide switch's) and `policy_mode`.

| name | position | job |
|---|---|---|
| ``policy_as_written`` | -0.005 (first) | `AsWrittenPass`: freezes decisions as written when the policy asks for it (`ptnumba_codegen.as_written.freeze`) |
| ``policy_as_written_inline`` | 48.95 | `InlineAsWritten`: puts elementwise frozen copies back, once no rewrite changes values any more |
| ``policy_gather_copies`` | 99.99 | `GatherCopies`: a gather read by several elementwise kernels gets a copy for each, which PyTensor's fusion (100) takes into it (`ptnumba_codegen.passes.gather_copies`) |
| ``policy_swap_compact`` | 100.4 | `SwapCompact`: stock ops swapped for their compact ops, which compile in a fraction of the time (`ptnumba_codegen.passes.swap_compact`, `ptnumba_codegen.compact`) |
| ``policy_kernels`` | 100.5 | `PolicyCodegen`: hands every kernel node to the generator (`ptnumba_codegen.passes.policy_codegen`) |
| ``policy_scalar_writes`` | 100.6 (last) | `ScalarWrites`: an array update from a native scalar reads the scalar, not a 0-d array made for it (`ptnumba_codegen.passes.scalar_writes`) |
"""

from __future__ import annotations

from pytensor.compile import optdb
from pytensor.compile.mode import Mode

from ptnumba_codegen.as_written.freeze import INLINE_POSITION, AsWrittenPass, InlineAsWritten
from ptnumba_codegen.as_written.freeze import POSITION as AS_WRITTEN_POSITION
from ptnumba_codegen.passes.gather_copies import NAME as GATHER_COPIES_NAME
from ptnumba_codegen.passes.gather_copies import POSITION as GATHER_COPIES_POSITION
from ptnumba_codegen.passes.gather_copies import GatherCopies
from ptnumba_codegen.passes.swap_compact import NAME as SWAP_COMPACT_NAME
from ptnumba_codegen.passes.swap_compact import POSITION as SWAP_COMPACT_POSITION
from ptnumba_codegen.passes.swap_compact import SwapCompact
from ptnumba_codegen.passes.policy_codegen import POSITION, TAG, PolicyCodegen
from ptnumba_codegen.passes.scalar_writes import NAME as SCALAR_WRITES_NAME
from ptnumba_codegen.passes.scalar_writes import POSITION as SCALAR_WRITES_POSITION
from ptnumba_codegen.passes.scalar_writes import ScalarWrites
from ptnumba_codegen.passes.rewritten_graphs import CachedRewriteSequence
from ptnumba_codegen.policy import Policy, load_policy

KERNELS_NAME = "policy_kernels"
AS_WRITTEN_NAME = "policy_as_written"
INLINE_NAME = "policy_as_written_inline"

# Registered under the policy_codegen tag only (not fast_run, not numba) until
# ptnumba_codegen.enable() adds ``numba`` to each of them. The policy of `AS_WRITTEN` and
# `KERNELS` is the switch's (None when off: the process default when selected by the tag).
AS_WRITTEN = AsWrittenPass()
KERNELS = PolicyCodegen()
REGISTERED = {AS_WRITTEN_NAME: AS_WRITTEN, INLINE_NAME: InlineAsWritten(), GATHER_COPIES_NAME: GatherCopies(),
              SWAP_COMPACT_NAME: SwapCompact(), KERNELS_NAME: KERNELS, SCALAR_WRITES_NAME: ScalarWrites()}
_POSITIONS = {AS_WRITTEN_NAME: AS_WRITTEN_POSITION, INLINE_NAME: INLINE_POSITION,
              GATHER_COPIES_NAME: GATHER_COPIES_POSITION, SWAP_COMPACT_NAME: SWAP_COMPACT_POSITION,
              KERNELS_NAME: POSITION, SCALAR_WRITES_NAME: SCALAR_WRITES_POSITION}
for _name, _rewriter in REGISTERED.items():
    optdb.register(_name, _rewriter, TAG, position=_POSITIONS[_name])
# Every sequence optdb builds: PyTensor's own, unless it runs a policy pass, whose rewritten
# graph it keeps on disk for the next process (`passes.rewritten_graphs`).
optdb.seq_rewriter_type = CachedRewriteSequence


def set_registered_policy(policy: Policy | None) -> None:
    """The policy the registered rewrites run with (the switch's; None: the process default)."""
    AS_WRITTEN.policy = policy
    KERNELS.policy = policy


def policy_mode(policy: str | Policy | None = None, optimizer: str = "fast_run") -> Mode:
    """A numba Mode whose kernels are generated under ``policy``.

    ``policy`` is a preset name (``default``, ``rewritten``, ``strict``, ``fast``,
    ``as_written``), a path to a TOML file, a loaded `Policy`, or ``None`` for the process
    default (the policy of `ptnumba_codegen.enable` while it is on, else
    ``PTNUMBA_CODEGEN_POLICY``, else ``default``: decisions as written). The policy is loaded
    (and validated) now, before anything is compiled.

    The mode excludes the registered ``policy_codegen`` rewrites, so its own policy wins
    over the process-wide switch (`ptnumba_codegen.enable`).
    """
    resolved = load_policy(KERNELS.policy if policy is None else policy)
    mode = Mode(linker="numba", optimizer=optimizer).excluding(TAG)
    return mode.register(
        (AsWrittenPass(resolved), AS_WRITTEN_POSITION),
        (InlineAsWritten(), INLINE_POSITION),
        (GatherCopies(), GATHER_COPIES_POSITION),
        (SwapCompact(), SWAP_COMPACT_POSITION),
        (PolicyCodegen(resolved), POSITION),
        (ScalarWrites(), SCALAR_WRITES_POSITION),
    )
