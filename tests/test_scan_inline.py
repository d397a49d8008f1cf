"""Kernel entries inlined into their caller (`lowering.entry`): a kernel whose loops all run
in chunk functions asks LLVM to inline its entry, so a vector-state Scan step calls no
kernel entry (no call with its arrays reference-counted around it) while the chunk functions
stay the separate, shared machine code they were. Nothing changes a bit: inlined and not
inlined agree bit for bit, and the strict policy agrees with stock numba strict on special
values and ties.
"""

from __future__ import annotations

import re

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from conftest import assert_same_bits, compile_fn, final_ir
from irtools import parse
from ptnumba_codegen.lowering import entry
from ptnumba_codegen.tools.scan_workloads import WORKLOADS

# a loop kernel's entry: numba's name for `KernelImpl.define`'s ``impl(*inputs)`` (generated
# source, so the module is ``<dynamic>``; star arguments, unlike the scalar kernels' entries)
ENTRY = re.compile(r"@\"?ptnumba_entry\.")  # `own_library.build_own_function` names a kernel entry so
# dso_local: set by LLVM while the copy is internal for code generation (`runtime.own_copies`)
CHUNK_DEF = re.compile(r"^define linkonce_odr (?:dso_local )?i32 @(ptnumba_chunk_[0-9a-f]+)\(.*\) #(\d+) \{", re.M)


def _one_kernel_scan():
    """A vector state and one small elementwise kernel a step (the Scan keeps its stock
    loop: the state is not 0-d)."""
    s0 = pt.vector("s0")
    out = pytensor.scan(lambda s: s * 0.5 + 1.0, outputs_info=[s0], n_steps=50, return_updates=False)
    return [s0], [out[-1]]


_COMPILED: dict = {}


def _compile(graph, backend, inline: bool):
    """``graph()`` compiled without the numba cache (its IR readable), once per module;
    ``inline=False``: entries are left to LLVM, as before `lowering.entry`."""
    key = (graph, backend, inline)
    if key not in _COMPILED:
        saved = entry.INLINE_ENTRY_WHEN["chunk_function"]
        entry.INLINE_ENTRY_WHEN["chunk_function"] = inline
        try:
            _COMPILED[key] = compile_fn(*graph(), backend, inspect_ir=True)
        finally:
            entry.INLINE_ENTRY_WHEN["chunk_function"] = saved
    return _COMPILED[key]


def _ir(fn, values):
    with pytensor.config.change_flags(numba__cache=False):
        fn(*values)
    return final_ir(fn)


def test_entry_decision_table():
    assert entry.EntryInlining.of(("chunk_function",)).inline
    assert entry.EntryInlining.of(("chunk_function", "chunk_function")).inline
    assert not entry.EntryInlining.of(("chunk_function", "entry")).inline  # a flat twin with its nest inline
    assert not entry.EntryInlining.of(("entry",)).inline
    assert not entry.EntryInlining.of(()).inline


@pytest.mark.parametrize("inline", [True, False])
def test_scan_step_calls_no_kernel_entry(inline):
    """Inlined: no loop kernel entry is left as a function (so none is called with its
    arrays reference-counted around the call); its chunk function still is one, ``noinline``,
    called directly. Not inlined (the decision patched off): the entry is a function of its
    own, called from the step, as before."""
    ir = _ir(_compile(_one_kernel_scan, "policy_rewritten", inline), [np.zeros(3)])
    entry_defs = [line for line in ir.splitlines() if line.startswith("define") and ENTRY.search(line)]
    entry_calls = [line for line in ir.splitlines() if " call " in line and ENTRY.search(line)]
    if inline:
        assert entry_defs == [] and entry_calls == []
    else:
        assert entry_defs and entry_calls
    chunks = CHUNK_DEF.findall(ir)
    assert chunks, "the kernel's loop runs in a chunk function"
    for name, group in chunks:
        assert re.search(rf"^attributes #{group} = \{{[^}}]*\bnoinline\b", ir, re.M), name
        assert re.search(rf"call i32 @{name}\(", ir), name  # called directly below the threshold


def test_inlined_step_keeps_every_flag():
    """The HMM's final IR has the same set of (opcode, flags) of float instructions inlined
    or not: inlining moves instructions, it never stamps or drops a flag."""
    values = WORKLOADS["hmm"].make_inputs()

    def flag_counts(inline):
        ir = _ir(_compile(WORKLOADS["hmm"].build, "policy_rewritten", inline), values)
        counts: dict = {}
        for table in parse(ir):
            for ins in table.values():
                if ins.opcode in ("fadd", "fsub", "fmul", "fdiv", "fcmp"):
                    key = (ins.opcode, ins.flags)
                    counts[key] = counts.get(key, 0) + 1
        return counts

    on, off = flag_counts(True), flag_counts(False)
    # LLVM may fold or duplicate instructions differently once inlined, never a flag set:
    assert set(on) == set(off), set(on) ^ set(off)


@pytest.mark.parametrize("key", ["hmm", "step_exp"])
def test_inlined_entries_keep_every_bit(key):
    """The vector-state workloads: logp and gradient identical, inlined or not."""
    values = WORKLOADS[key].make_inputs()
    on = _compile(WORKLOADS[key].build, "policy_rewritten", True)(*values)
    off = _compile(WORKLOADS[key].build, "policy_rewritten", False)(*values)
    for a, b in zip(on, off, strict=True):
        assert_same_bits(a, b)


# --- a vector-state Scan with ties and special values ------------------------------------

SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1.5, 2.5])


def _tie_scan():
    """A carried product p_t = p_{t-1} * r_t (a vector: the stock loop) and, each step,
    minimum(p_t*y_t*z_t*w_t, b_t) with b_t the left-associated product: a tie at every
    finite element, and special values in y."""
    r, y, z, w, b = xs = pt.matrices("r", "y", "z", "w", "b")
    p0 = pt.vector("p0")

    def step(r, y, z, w, b, p):
        p_new = p * r
        return p_new, pt.minimum(p_new * y * z * w, b)

    _, m = pytensor.scan(step, sequences=xs, outputs_info=[p0, None], return_updates=False)
    total = pt.switch(pt.isnan(m), 0.0, m).sum()
    return [*xs, p0], [m, total, *pytensor.grad(total, [y, b])]


def _tie_values(steps=12, seed=3):
    rng = np.random.default_rng(seed)
    k = SPECIAL.size
    r = rng.uniform(0.9, 1.1, (steps, k))
    y = rng.uniform(0.5, 1.5, (steps, k))
    y[:, :] = np.where(np.arange(k) < 6, SPECIAL, y)  # special values in the first six columns
    z = rng.uniform(0.5, 1.5, (steps, k))
    w = rng.uniform(100, 500, (steps, k))
    p = np.cumprod(r, axis=0)  # from p0 = 1, one rounding a step, as the Scan
    with np.errstate(invalid="ignore"):
        b = ((p * y) * z) * w
    return [r, y, z, w, b, np.ones(k)]


@pytest.mark.parametrize("inline", [True, False])
def test_vector_scan_ties_and_special_values_as_stock_strict(inline):
    """The strict policy gives stock numba strict's bits; default decides every tie as it
    (the gradient's zero pattern) and keeps stock strict's special values."""
    values = _tie_values()
    ref = compile_fn(*_tie_scan(), "stock_strict", cache_key="scan-inline-tie")(*values)
    assert np.isnan(ref[0]).any() and np.isinf(ref[0]).any()  # the special values reach the decision
    strict = _compile(_tie_scan, "policy_strict", inline)(*values)
    for a, b in zip(strict, ref, strict=True):
        assert_same_bits(a, b)
    default = _compile(_tie_scan, "policy_rewritten", inline)(*values)
    assert_same_bits(default[0], ref[0])  # the decisions' values: the minimum, bit for bit
    np.testing.assert_array_equal(default[2] == 0, ref[2] == 0)
    np.testing.assert_array_equal(default[3] == 0, ref[3] == 0)
