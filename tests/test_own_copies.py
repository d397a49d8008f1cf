"""A library's machine code calls its own copies of what it linked (`runtime.own_copies`):
the process that compiles a function and every later process that loads it from numba's
cache compute the same bits."""

from __future__ import annotations

import llvmlite.binding as llb
import numpy as np

from ptnumba_codegen.runtime import own_copies

from conftest import second_process_line

# A predator-prey Scan and its gradient, with a sum over the trajectory (a policy reduction
# with a chunk function, called from the final function) and the Scan's loop: compiled in
# the first process, the final function called the node functions' own machine code, in
# later ones its own copies, and the last gradient element differed (by 1.5e-11 of about
# 1e5) before `own_copies`.
PREDATOR_PREY = r"""
import sys
from pathlib import Path

import numpy as np
import pytensor
import pytensor.link.numba.cache as numba_cache
import pytensor.tensor as pt

import ptnumba_codegen

numba_cache.NUMBA_CACHE_PATH = Path(sys.argv[1])
theta = pt.vector("theta")
f64 = lambda v: pt.as_tensor(np.float64(v))


def step(x, y, a, b, c, d, dt):
    return x + dt * (a * x - b * x * y), y + dt * (c * x * y - d * y)


(xs, ys), _ = pytensor.scan(step, outputs_info=[f64(10.0), f64(5.0)],
                            non_sequences=[theta[0], theta[1], theta[2], theta[3], f64(0.01)],
                            n_steps=300, return_updates=True)
data = np.random.default_rng(0).uniform(1, 20, size=(300, 2))
logp = -((xs - data[:, 0]) ** 2).sum() - ((ys - data[:, 1]) ** 2).sum() - pt.exp(theta).sum() + pt.log(theta).sum()
with pytensor.config.change_flags(numba__cache=True):
    f = pytensor.function([theta], [logp, pytensor.grad(logp, theta)], mode=ptnumba_codegen.policy_mode("default"))
value, grad = f(np.array([0.55, 0.028, 0.024, 0.8]))
files = sum(1 for _ in Path(sys.argv[1]).glob("*.nbc"))
print("OUT", np.concatenate([[value], grad]).tobytes().hex(), files)
"""


def test_the_first_process_and_a_later_one_compute_the_same_bits(tmp_path):
    first, first_files = second_process_line(PREDATOR_PREY, [tmp_path], "OUT").split()[1:]
    later, later_files = second_process_line(PREDATOR_PREY, [tmp_path], "OUT").split()[1:]
    assert int(first_files) > 0 and later_files == first_files  # the later process compiled nothing
    a, b = (np.frombuffer(bytes.fromhex(h)) for h in (first, later))
    np.testing.assert_array_equal(a, b)
    assert np.all(np.isfinite(a))


def _module():
    return llb.parse_assembly("""
        define linkonce_odr i32 @copy(i32 %x) { ret i32 %x }
        define weak_odr i32 @weak_copy(i32 %x) { ret i32 %x }
        define i32 @own(i32 %x) { %y = call i32 @copy(i32 %x)  ret i32 %y }
        declare i32 @elsewhere(i32)
    """)


def test_copies_are_internal_while_machine_code_is_made_and_as_numba_left_them_after():
    module = _module()
    before = {fn.name: fn.linkage for fn in module.functions}
    with own_copies.local_copies(module):
        inside = {fn.name: fn.linkage for fn in module.functions}
    after = {fn.name: fn.linkage for fn in module.functions}
    assert inside == {"copy": llb.Linkage.internal, "weak_copy": llb.Linkage.internal,
                      "own": llb.Linkage.external, "elsewhere": llb.Linkage.external}
    assert after == before
    module = _module()
    try:
        with own_copies.local_copies(module):
            raise RuntimeError("code generation failed")
    except RuntimeError:
        pass
    assert {fn.name: fn.linkage for fn in module.functions} == before  # put back on failure too
